"""`provision plan` without click: its body, and the fast path that runs it for plain arguments.

Start-up is most of what `provision plan --os OS --gpu GPU` costs, and importing click was a
quarter of it. So provision.cli.main hands a plain `provision [--debug] [--compat-dir DIR] plan
--os OS --gpu GPU [--option VALUE]...` straight to run_plan(), and everything else (help, a bad or
repeated option, a value that looks like an option, a path click's checks refuse) to click, whose
plan command (provision/cli/plan.py) runs the same run_plan(). tests/unit/test_cli_startup.py
holds the two paths to identical output, errors and exit codes.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from provision.plan.model import Plan

# plan_cmd's options (provision/cli/plan.py) -> run_plan's keywords; an option missing here, or
# one added there, only sends its argument lists through click
_VALUES = {
    "--os": "os_id",
    "--gpu": "gpu",
    "--platform": "platform",
    "--driver": "driver",
    "--cuda": "cuda",
    "--cudnn": "cudnn",
    "--framework": "framework",
    "--policy": "policy",
    "--mig": "mig",
    "--image-os": "image_os",
    "--format": "fmt",
    "--lock": "lock",
    "--compat-dir": "compat_dir",
}
_FLAGS = {"--explain": "explain", "--host-only": "host_only"}
_REPEATED = {"--with": "with_"}  # repeatable: each value is added, in order
_CHOICES = {"policy": ("lts", "latest"), "fmt": ("table", "markdown", "json", "yaml", "ansible")}
_DEFAULTS = {
    "gpu": None,
    "platform": None,
    "driver": None,
    "cuda": None,
    "cudnn": None,
    "framework": None,
    "with_": (),
    "policy": "lts",
    "mig": None,
    "image_os": None,
    "host_only": False,
    "fmt": "table",
    "lock": None,
    "explain": False,
    "compat_dir": None,
}


def fast_plan_args(args: list[str]) -> dict[str, object] | None:
    """run_plan()'s keywords for a plain `provision plan` argument list; None: let click parse it."""
    if not (_plain_text(sys.stdout) and _plain_text(sys.stderr)):
        return None  # click.echo would re-wrap the stream; run_plan's output must be click's
    given: dict[str, str | None] = {}  # the group's options
    i = 0
    while i < len(args) and args[i] != "plan":
        if args[i] == "--debug" and "debug" not in given:
            given["debug"] = None
            i += 1
        elif args[i] == "--compat-dir" and "compat_dir" not in given and _is_value(args, i + 1):
            given["compat_dir"] = args[i + 1]
            i += 2
        else:
            return None
    kwargs: dict[str, object] = {}
    i += 1
    while i < len(args):
        flag = _FLAGS.get(args[i])
        key = _VALUES.get(args[i])
        repeated = _REPEATED.get(args[i])
        if repeated is not None and _is_value(args, i + 1):
            kwargs[repeated] = (*kwargs.get(repeated, ()), args[i + 1])
            i += 2
        elif flag is not None and flag not in kwargs:
            kwargs[flag] = True
            i += 1
        elif key is not None and key not in kwargs and _is_value(args, i + 1):
            if key in _CHOICES and args[i + 1] not in _CHOICES[key]:
                return None
            kwargs[key] = args[i + 1]
            i += 2
        else:
            return None
    if "os_id" not in kwargs or ("gpu" not in kwargs and "platform" not in kwargs):
        return None
    # the group's --compat-dir, else PROVISION_COMPAT_DIR (click ignores it when empty)
    group_dir = given["compat_dir"] if "compat_dir" in given else (os.environ.get("PROVISION_COMPAT_DIR") or None)
    if not (_path_ok(group_dir, directory=True) and _path_ok(kwargs.get("compat_dir"), directory=True)):
        return None
    if not _path_ok(kwargs.get("lock"), directory=False):
        return None
    kwargs = {**_DEFAULTS, **kwargs}
    kwargs["compat_dir"] = kwargs["compat_dir"] or group_dir
    return kwargs


def _is_value(args: list[str], i: int) -> bool:
    return i < len(args) and not args[i].startswith("-")


def _plain_text(stream) -> bool:
    """A text stream click.echo writes to as it is: UTF-8 with an error handler, not a notebook's."""
    encoding = getattr(stream, "encoding", None)
    return (
        isinstance(encoding, str)
        and encoding.lower().replace("-", "").replace("_", "") == "utf8"
        and getattr(stream, "errors", None) is not None
        and not type(stream).__module__.startswith("ipykernel.")
    )


def _path_ok(path: str | None, *, directory: bool) -> bool:
    """What click.Path lets through: --compat-dir (file_okay=False) and --lock (dir_okay=False,
    writable=True), both readable when they exist; a path that does not exist passes."""
    if path is None:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return True
    if stat.S_ISREG(mode) if directory else stat.S_ISDIR(mode):
        return False
    return os.access(path, os.R_OK) and (directory or os.access(path, os.W_OK))


def run_plan(
    *,
    os_id,
    gpu,
    platform=None,
    driver,
    cuda,
    cudnn,
    framework,
    with_=(),
    policy,
    mig,
    image_os,
    host_only,
    fmt,
    lock,
    explain,
    compat_dir,
) -> int:
    """`provision plan`: resolve, then print the plan (and write the lock file)."""
    from provision.cli.common import check_output, load_catalogue, resolve_or_refuse

    leave_to_the_os_at_exit()
    from provision.cli.output import dumps_json, dumps_yaml, echo
    from provision.plan.model import PlanRequest, write_plan

    if gpu is None and platform is None:
        from provision.errors import InputError

        raise InputError(
            "give --gpu, or --platform to imply it",
            hint="provision matrix gpus lists the GPUs, provision matrix platforms the servers and baseboards",
        )
    check_output(lock, "--lock")
    matrix = load_catalogue(compat_dir)
    request = PlanRequest(
        os=os_id,
        gpu=gpu,
        platform=platform,
        driver=driver,
        cuda=cuda,
        cudnn=cudnn,
        framework=framework,
        policy=policy,
        mig=mig,
        image_os=image_os,
        host_only=bool(host_only),
        with_=tuple(with_),
    )
    p = resolve_or_refuse(matrix, request, explain=explain)
    if lock is not None:
        _lock_changes(lock, p)
        write_plan(p, lock)
    if fmt == "json":
        sys.stdout.write(dumps_json(p.to_dict()))
    elif fmt == "yaml":
        sys.stdout.write(dumps_yaml(p.to_dict()))
    elif fmt == "ansible":
        from provision.fleet.extravars import dump_unsafe_yaml, to_extravars

        sys.stdout.write(dumps_yaml_unsafe_note() + dump_unsafe_yaml(to_extravars(p)))
    else:
        sys.stdout.write(plan_text(p, fmt))
    if lock:
        echo(f"wrote {lock}", err=True)
    _promote_without_a_scan()
    return 0


def _promote_without_a_scan() -> None:
    """Move every object the collector tracks to its oldest generation without scanning them
    (gc.freeze, then gc.unfreeze: they stay collectable). The fast path runs a plan with the
    collector off (provision/cli/__init__.py _run_fast), so all the catalogue's and the plan's
    objects are young when it turns it back on, and the next allocation would scan them all (a
    twentieth of `provision plan`'s time) though the plan is printed; a full collection, rarer
    and later, still frees whatever of them becomes garbage in a longer-lived process (tests)."""
    import gc

    gc.freeze()
    gc.unfreeze()


_LEFT_AT_EXIT: list[bool] = []


def leave_to_the_os_at_exit() -> None:
    """At the interpreter's exit, freeze every object out of the cyclic garbage collector (gc.freeze,
    registered once per process): shutdown collects twice (Py_FinalizeEx, then finalize_modules once
    the modules are cleared), freeing the catalogue's records, their classes and the plan modules
    cycle by cycle, memory the OS takes back anyway. That was a fifth of `provision plan`'s CPU time,
    and most of what a stack plan cost more than the same plan without --with (measured with perf: the
    stack packages' rows add to every collection). atexit functions still run and the standard
    streams are still flushed; a file is closed where it is written (provision.documents.write_text),
    never left to a collector. An in-process caller (tests) only has its own exit made quicker."""
    if _LEFT_AT_EXIT:
        return
    import atexit
    import gc

    atexit.register(gc.freeze)
    _LEFT_AT_EXIT.append(True)


def _lock_changes(lock: str, plan: Plan) -> None:
    """Before --lock overwrites a different plan: what changes, on stderr (provision diff's lines)."""
    from provision.cli.output import echo_wrapped
    from provision.errors import InputError
    from provision.plan.diff import changes, plan_state, summary
    from provision.plan.model import read_plan

    if not os.path.lexists(lock):
        return
    try:
        old = read_plan(lock, given_as="--lock")
    except InputError as exc:
        echo_wrapped(f"--lock {lock}: replacing a file that is not a readable plan ({exc.message})", err=True)
        return
    if old.digest() == plan.digest():
        return
    found = changes(plan_state(old, lock), plan_state(plan, "this plan"))
    echo_wrapped(f"--lock {lock} holds another plan; it changes:", err=True)
    for line in summary(plan_state(old, lock), plan_state(plan, "this plan"), found):
        echo_wrapped(line, err=True, indent="  ", hanging="    ")


def dumps_yaml_unsafe_note() -> str:
    return "# provision plan: variables for ansible-playbook -e @FILE; !unsafe: Ansible never templates them\n"


PLAN_HEADERS = ("component", "choice")


def plan_text(p: Plan, fmt: str, width: int | None = None) -> str:
    """The plan for a person: its table, the legend and the reasons ("why:"). ``fmt`` table: fit to
    ``width`` (default terminal_width(): COLUMNS, else the terminal, else 100), the reasons wrapped
    at spaces under a hanging indent; markdown: a Markdown table and a list of the reasons."""
    from provision.cli.output import markdown_table, table_lines, terminal_width, wrap_text

    title = f"Plan: {p.gpu.id} on {p.os.id}"
    if fmt == "markdown":
        parts = [f"### {title}", markdown_table(PLAN_HEADERS, plan_rows(p)).rstrip("\n"), *plan_legend(p)]
        parts.append("why:\n\n" + "\n".join(f"- [{r.component}] {r.text}" for r in p.reasons))
        return "\n\n".join(parts) + "\n"
    width = terminal_width() if width is None else width
    out = table_lines(PLAN_HEADERS, plan_rows(p), width=width, title=title, keyed=True)
    for line in plan_legend(p):
        out += wrap_text(line, width)
    out += ["", "why:"]
    for r in p.reasons:
        out += wrap_text(f"[{r.component}] {r.text}", width, indent="  ", hanging="    ")
    return "\n".join(out) + "\n"


def plan_rows(p: Plan) -> list[tuple[str, str]]:
    """(component, choice) rows of the human summary."""
    other_arch = p.os.arch != "x86_64"  # x86_64 plans read as they always did
    repo = f"{p.os.nvidia_repo}/{p.os.repo_arch}" if other_arch else p.os.nvidia_repo
    rows = [
        ("os", f"{p.os.name} ({p.os.id}, {p.os.pkg_manager}, repo {repo})"),
        *([("host", f"{p.os.arch} (images for {p.platform}, {p.os.arch} wheels)")] if other_arch else []),
        ("gpu", f"{p.gpu.name} ({p.gpu.id}, sm_{p.gpu.compute_capability.replace('.', '')}, {p.gpu.architecture})"),
        *([("server", _server_text(p.server))] if p.server is not None else []),
        (
            "driver",
            f"R{p.driver.branch} {p.driver.version} ({p.driver.branch_type}), {p.driver.kernel_module} kernel modules",
        ),
        (
            "packages",
            ", ".join(f"{pkg.name} {pkg.version}" for pkg in p.driver.packages)
            + (f" [stream {p.driver.module_stream}]" if p.driver.module_stream else ""),
        ),
        ("image os", _image_os_text(p)),
        (
            "cuda",
            "- (no image part)"
            if p.cuda is None
            else f"{p.cuda.version} ({p.cuda.label})"
            + (" via minor-version compatibility" if p.cuda.compatibility == "minor-version" else ""),
        ),
        ("cudnn", _cudnn_text(p)),
        (
            "framework",
            p.framework.requirement
            + ("" if p.framework.extra == p.framework.variant else f" [{p.framework.variant}]")
            + (f" from {p.framework.index_url}" if p.framework.index_url else "")
            if p.framework
            else _stack_text(next((s for s in p.stack if s.role == "framework"), None)),
        ),
        *[("with", _stack_text(s)) for s in p.stack if s.role == "with"],
        *[("requires", f"{_stack_text(s)}, for {s.required_by}") for s in p.stack if s.role == "requires"],
        (
            "fabric manager",
            f"{p.fabric_manager.package} {p.fabric_manager.version}" if p.fabric_manager else "not needed",
        ),
        *(
            [("subnet manager", f"{', '.join(p.subnet_manager.packages)} (run by {p.subnet_manager.service})")]
            if p.subnet_manager
            else []
        ),
        ("container toolkit", p.container_toolkit.version),
        ("base image", "-" if p.base_image is None else p.base_image + (f" ({p.platform})" if other_arch else "")),
        ("driver floor", p.driver_floor or "-"),
        ("digest", p.digest()),
    ]
    return rows


def _stack_text(s) -> str:
    """A stack package's row: what pip takes, its build line, CUDA and cuDNN (the catalogue's)."""
    if s is None:
        return "-"
    facts = [s.flavour] if s.flavour else []
    if s.cuda_major is not None:
        facts.append(f"CUDA {s.cuda or s.cuda_major}")
    if s.cudnn_major is not None:
        facts.append(f"cuDNN {s.cudnn_major}" + (f" >= {s.cudnn_min}" if s.cudnn_min else ""))
    if s.needs_nvcc:
        facts.append("nvcc at run time")
    if s.library_index:
        facts.append(f"libraries from {s.library_index}")
    return s.requirement + (f" ({', '.join(facts)})" if facts else "")


def _server_text(s) -> str:
    """The platform row: what the server carries and what verify holds a host to."""
    count = "" if s.gpu_count is None else (f"up to {s.gpu_count}" if s.gpu_count_is == "up-to" else str(s.gpu_count))
    link = {
        "nvswitch": f"NVSwitch{f' gen {s.nvswitch_generation}' if s.nvswitch_generation else ''}"
        + (f" x{s.nvswitch_count}" if s.nvswitch_count else ""),
        "nvlink": "NVLink, no NVSwitch",
        "nvlink-bridge": "NVLink bridges" + (" (optional)" if s.interconnect_optional else ""),
        "none": "PCIe only",
    }.get(s.interconnect or "", "interconnect not catalogued")
    pcie = f"PCIe Gen{s.pcie_generation or '?'} x{s.pcie_width or '?'}" if s.pcie_generation or s.pcie_width else ""
    parts = [f"{count} GPUs" if count else "", "/".join(s.form_factors), link, pcie]
    text = f"{s.name} ({s.id}): " + ", ".join(p for p in parts if p)
    if s.unconfirmed:
        text += f"; unconfirmed: {', '.join(s.unconfirmed)}"
    return text


def _image_os_text(p: Plan) -> str:
    if p.image_os is None:
        return "- (--host-only: no image part)"
    if p.image_os == p.os.cuda_image_os:
        return f"{p.image_os} (the host OS's own nvidia/cuda images)"
    return f"{p.image_os} (--image-os; the host runs {p.os.id})"


def _cudnn_text(p: Plan) -> str:
    if p.cudnn is None:
        return "-"
    if p.cudnn.origin == "framework":
        return f"{p.cudnn.version} (the framework build's pin)"
    flavour = next((f for f, ref in p.images.items() if ref == p.base_image), None)
    if flavour is not None and flavour.startswith("cudnn"):
        return f"{p.cudnn.version} (in the base image)"
    cudnn_image = p.images.get(f"cudnn-{flavour}") if flavour else None
    return f"{p.cudnn.version} (in {cudnn_image or 'the cudnn images'}, not in the base image)"


def plan_legend(p: Plan) -> list[str]:
    """What the plan table's abbreviations mean (only those it shows)."""
    from provision.plan.resolve import BRANCH_TYPES

    return [f"({p.driver.branch_type}) = {BRANCH_TYPES.get(p.driver.branch_type, p.driver.branch_type)}"]
