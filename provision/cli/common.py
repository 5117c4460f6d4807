"""What the command groups share: the catalogue (loaded once per command, from --compat-dir or
the built-in data) and the plan options of render, build and verify.

Importing it imports no click (`provision plan`'s fast path uses it); the functions that declare
options or echo import click themselves."""

import functools
import os

from provision.errors import InputError


def check_output(path: str | None, flag: str) -> None:
    """Every file a command writes: its directory must exist (checked before any work is done)."""
    if path is None:
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputError(
            f"{flag} {path}: the directory {parent} does not exist",
            hint=f"create it first (mkdir -p {parent}), or give another {flag}",
        )
    if os.path.isdir(path):
        raise InputError(f"{flag} {path} is a directory", hint=f"give {flag} a file name")


def write_output(path: str, text: str, flag: str) -> None:
    import click

    from provision.documents import write_text

    check_output(path, flag)
    try:
        write_text(path, text)  # a symbolic link planted at the path is replaced, never followed
    except OSError as exc:
        raise InputError(
            f"cannot write {flag} {path}: {exc.strerror or exc}", hint=f"choose a writable {flag}"
        ) from None
    click.echo(f"wrote {path}", err=True)


def load_matrix(ctx, compat_dir: str | None = None):
    """The catalogue: this command's --compat-dir, else the global one, else the built-in data."""
    return load_catalogue(compat_dir or (ctx.obj or {}).get("compat_dir"))


def load_catalogue(compat_dir: str | None):
    """The catalogue in compat_dir, else the built-in data (through the validated-data cache)."""
    from provision.matrix.cache import load_cached
    from provision.resources import compat_dir as find

    return load_cached(find(compat_dir))


def matrix_loader(ctx):
    """load_matrix() deferred, for commands that need the catalogue only for some inputs."""
    return lambda: load_matrix(ctx)


def plan_source(f):
    """--plan FILE, or the plan flags of `provision plan`; the command receives them as one
    `plan_args` keyword (load_plan(ctx, **plan_args))."""
    import click

    options = [
        click.option(
            "--plan", "plan_file", type=click.Path(dir_okay=False), help="Plan lock file (provision plan --lock)."
        ),
        click.option("--os", "os_id", metavar="OS", help="Or plan on the fly: host OS id."),
        click.option("--gpu", metavar="GPU", help="Or plan on the fly: GPU id."),
        click.option("--driver", metavar="BRANCH|RELEASE", help="Plan pin: driver."),
        click.option("--cuda", metavar="X.Y[.Z]", help="Plan pin: CUDA."),
        click.option("--cudnn", metavar="VERSION", help="Plan pin: cuDNN."),
        click.option("--framework", metavar="NAME[==VERSION]", help="Plan pin: framework."),
        click.option(
            "--with", "with_", metavar="NAME[==VERSION]", multiple=True, help="Plan pin: a stack package (repeatable)."
        ),
        click.option("--policy", type=click.Choice(["lts", "latest"]), default="lts", show_default=True),
    ]

    @functools.wraps(f)
    def with_plan_args(*args, **kwargs):
        plan_args = {key: kwargs.pop(key) for key in PLAN_KEYS}
        return f(*args, plan_args=plan_args, **kwargs)

    for option in reversed(options):
        with_plan_args = option(with_plan_args)
    return with_plan_args


# the keyword arguments plan_source's options give, handed on together as `plan_args`
PLAN_KEYS = ("plan_file", "os_id", "gpu", "driver", "cuda", "cudnn", "framework", "with_", "policy")


def load_plan(ctx, *, plan_file, os_id, gpu, driver, cuda, cudnn, framework, policy, with_=()):
    from provision.plan.model import PlanRequest, read_plan

    if plan_file:
        if os_id or gpu or with_:
            raise InputError(
                f"give either --plan or --os/--gpu{'/--with' if with_ else ''}, not both",
                hint="a lock file already fixes OS and GPU",
            )
        from provision.plan.lockcheck import check_against_catalogue

        plan = read_plan(plan_file)
        # a digest is no signature: every field a template or a role reads, against the catalogue
        check_against_catalogue(plan, load_matrix(ctx), repr(plan_file))
        return plan
    if not (os_id and gpu):
        raise InputError(
            "no plan: give --plan FILE or --os OS --gpu GPU",
            hint="provision plan --os rocky9 --gpu a100-pcie --lock plan.lock.json",
        )
    # held to the plan schema like a lock file, before any command hands it to a template or a host
    return resolve_or_refuse(
        load_matrix(ctx), PlanRequest(os_id, gpu, driver, cuda, cudnn, framework, policy, with_=tuple(with_))
    ).check()


def resolve_or_refuse(matrix, request, *, explain: bool = False):
    """resolve(); a refusal reports a few lines per rule, or with explain every candidate tried."""
    from provision.errors import NoCompatibleStack
    from provision.plan.resolve import resolve

    try:
        return resolve(matrix, request)
    except NoCompatibleStack as exc:
        if not explain:
            exc.details = list(exc.summary)
        raise


def host_pool_options(*, forks_help: str, timeout_help: str):
    """--forks and --host-timeout (provision/hostpool.py): how many hosts at once, and each one's deadline."""
    import click

    from provision.hostpool import DEFAULT_FORKS, DEFAULT_HOST_TIMEOUT, MIN_HOST_TIMEOUT

    def add(func):
        func = click.option(
            "--host-timeout",
            type=click.IntRange(min=MIN_HOST_TIMEOUT, max=86400),
            default=DEFAULT_HOST_TIMEOUT,
            show_default=True,
            metavar="SECONDS",
            help=timeout_help,
        )(func)
        return click.option(
            "--forks", type=click.IntRange(min=1, max=500), default=DEFAULT_FORKS, show_default=True, help=forks_help
        )(func)

    return add
