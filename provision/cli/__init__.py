"""The command line. The only module that reads argv, writes user output and picks exit codes.

Subcommands live in provision/cli/*.py and are imported only when invoked, so `provision plan`
never pays for docker, ansible-runner or jinja2; the click group (provision/cli/group.py) is
imported only when `provision plan`'s fast path (provision/cli/plan_run.py) does not apply.
"""

from __future__ import annotations

import sys

from provision.errors import ProvisionError

# name -> "module:attribute" of the click command, imported on first use.
COMMANDS = {
    "plan": "provision.cli.plan:plan_cmd",
    "matrix": "provision.cli.plan:matrix_group",
    "apply": "provision.cli.fleet:apply_cmd",
    "inventory": "provision.cli.fleet:inventory_group",
    "render": "provision.cli.images:render_cmd",
    "build": "provision.cli.images:build_cmd",
    "pin-base": "provision.cli.images:pin_base_cmd",
    "ci": "provision.cli.ci:ci_group",
    "verify": "provision.cli.verify:verify_cmd",
    "doctor": "provision.cli.doctor:doctor_cmd",
    "gpus": "provision.cli.gpus:gpus_cmd",
    "mig": "provision.cli.mig:mig_group",
    "runs-on": "provision.cli.runs:runs_on_cmd",
    "check": "provision.cli.runs:check_cmd",
    "diff": "provision.cli.runs:diff_cmd",
}


# name -> the first sentence of its help, for `provision --help` without importing every command
# (importing them all cost more than the interpreter). tests/unit/test_cli_startup.py holds each to
# the command's own help, so the two cannot drift apart.
SUMMARIES = {
    "apply": "Provision hosts to match their plan: driver, Fabric Manager, Docker, the Container Toolkit and the "
    "plan's MIG layout.",
    "build": "Render and build a plan's image through the Docker engine, tag it deterministically, lock it.",
    "ci": "Generate CI pipelines that build each distinct plan image once, pinned and attested.",
    "diff": "Name what changes from OLD to NEW: two plan locks, or a host's scan and its plan.",
    "doctor": "Name GPU faults and their fixes from nvidia-smi, the kernel log and error output.",
    "gpus": "Rank the catalogued GPUs for a workload from their specs: a tier list.",
    "inventory": "Check inventories before anything runs, and read what their hosts run now.",
    "matrix": "List the compatibility catalogue, or check it end to end.",
    "mig": "Plan and suggest Multi-Instance GPU layouts (A100, A30, H100, H200, GH200, B200, RTX PRO 6000).",
    "pin-base": "Resolve the plan's nvidia/cuda tags to their registry digests and record them.",
    "plan": "Resolve driver, kernel modules, CUDA, cuDNN, framework and image for an OS and a GPU.",
    "runs-on": "List the CUDA releases, nvidia/cuda image sets and framework builds a driver runs.",
    "check": "Check that every image assigned to a host group runs on that group's driver and GPU.",
    "render": "Write the Dockerfile and requirements.lock (framework images) for a plan's image.",
    "verify": "Check that hosts match their plan.",
}


def __getattr__(name: str):
    """provision.cli.cli and LazyGroup: the click group, imported on first use."""
    if name in ("cli", "LazyGroup"):
        from provision.cli import group

        return getattr(group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        from provision.cli.plan_run import fast_plan_args, run_plan

        plan_args = fast_plan_args(args)
        if plan_args is not None:
            rv = _run_fast(run_plan, plan_args)
        else:
            from provision.cli.group import cli

            rv = cli.main(args=args, prog_name="provision", standalone_mode=False)
    except ProvisionError as exc:
        _report(exc.message, exc.hint, exc.details)
        return exc.exit_code
    except KeyboardInterrupt:
        _echo("interrupted", err=True)
        return 130
    except BrokenPipeError:  # `provision matrix frameworks | head`
        return 0
    except Exception as exc:
        code = _click_exit(exc)
        if code is not None:
            return code
        if debug:
            raise
        _report(
            f"unexpected {type(exc).__name__}: {exc}",
            "this is a bug in provision; rerun with --debug and report the traceback",
            [],
        )
        return 1
    return rv if isinstance(rv, int) else 0


def _run_fast(run_plan, plan_args: dict) -> int:
    """run_plan(**plan_args) as click's Command.main runs a command for the click path: an interrupt
    or end of input prints a blank line and "aborted" (exit 130); a closed pipe exits 1, quietly.

    The cyclic garbage collector is paused meanwhile: one plan leaves no cycles worth collecting,
    but importing the plan modules and loading the catalogue set off some thirty collections, a
    tenth of `provision plan`'s time.
    """
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        return run_plan(**plan_args)
    except (EOFError, KeyboardInterrupt):
        _echo("", err=True)  # click's blank line, closing the terminal's ^C echo
        _echo("aborted", err=True)
        return 130
    except OSError as exc:
        import errno

        if exc.errno != errno.EPIPE:
            raise
        sys.stdout, sys.stderr = _QuietFlush(sys.stdout), _QuietFlush(sys.stderr)
        sys.exit(1)
    finally:
        if enabled:
            gc.enable()


class _QuietFlush:
    """A stream whose flush() ignores a closed pipe, for the interpreter's flush at exit (click's
    _PacifyFlushWrapper)."""

    def __init__(self, wrapped) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except OSError as exc:
            import errno

            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, attr: str):
        return getattr(self.wrapped, attr)


def _click_exit(exc: Exception) -> int | None:
    """The exit code of click's own exceptions, reported as click would; None for any other."""
    click = sys.modules.get("click")
    if click is None:  # the fast path ran: nothing of click's can have been raised
        return None
    if isinstance(exc, click.exceptions.Exit):
        return exc.exit_code
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):  # pragma: no cover - click >= 8.2
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        return 0
    if isinstance(exc, click.UsageError):
        command = exc.ctx.command_path if exc.ctx else "provision"
        _report(exc.format_message(), f"see {command} --help", [])
        return 2
    if isinstance(exc, click.ClickException):
        _report(exc.format_message(), None, [])
        return exc.exit_code
    if isinstance(exc, click.Abort):
        click.echo("aborted", err=True)
        return 130
    return None


def _echo(text: str, *, err: bool = False) -> None:
    from provision.cli.output import echo

    echo(text, err=err)


def _report(message: str, hint: str | None, details: list[str]) -> None:
    _echo(f"error: {message}", err=True)
    for line in details:
        _echo(f"  {line}", err=True)
    if hint:
        _echo(f"hint: {hint}", err=True)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
