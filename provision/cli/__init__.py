"""The command line. The only module that reads argv, writes user output and picks exit codes.

Subcommands live in provision/cli_*.py and are imported only when invoked, so `provision plan`
never pays for docker, ansible-runner or jinja2.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from provision import __version__
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
}


# name -> the first sentence of its help, for `provision --help` without importing every command
# (importing them all cost more than the interpreter). tests/unit/test_cli_startup.py holds each to
# the command's own help, so the two cannot drift apart.
SUMMARIES = {
    "apply": "Provision hosts to match their plan: driver, Fabric Manager, Docker, the Container Toolkit and the "
    "plan's MIG layout.",
    "build": "Render and build a plan's image through the Docker engine, tag it deterministically, lock it.",
    "ci": "Generate CI pipelines that build each distinct plan image once, pinned and attested.",
    "doctor": "Name GPU faults and their fixes from nvidia-smi, the kernel log and error output.",
    "gpus": "Rank the catalogued GPUs for a workload from their specs: a tier list.",
    "inventory": "Check inventories before anything runs.",
    "matrix": "List the compatibility catalogue, or check it end to end.",
    "mig": "Plan Multi-Instance GPU layouts (A100, H100, H200, B200).",
    "pin-base": "Resolve the plan's nvidia/cuda tags to their registry digests and record them.",
    "plan": "Resolve driver, kernel modules, CUDA, cuDNN, framework and image for an OS and a GPU.",
    "render": "Write the Dockerfile and requirements.lock (framework images) for a plan's image.",
    "verify": "Check that hosts match their plan.",
}


class LazyGroup(click.Group):
    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from SUMMARIES: listing must not import every command."""
        names = self.list_commands(ctx)
        if not names:
            return
        width = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            summary = SUMMARIES.get(name)
            if summary is None:
                summary = self.get_command(ctx, name).get_short_help_str(width)
            elif len(summary) > width:
                summary = summary[: max(width - 3, 1)].rsplit(" ", 1)[0] + "..."
            rows.append((name, summary))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, _, attr = self.lazy[cmd_name].partition(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(__version__, "--version", prog_name="provision")
@click.option("--debug", is_flag=True, help="Show Python tracebacks for unexpected errors.")
@click.option(
    "--compat-dir",
    type=click.Path(file_okay=False),
    envvar="PROVISION_COMPAT_DIR",
    help="Compatibility data to use instead of the built-in compat/ (env: PROVISION_COMPAT_DIR).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, compat_dir: str | None) -> None:
    """Plan, build, provision, verify and diagnose NVIDIA GPU hosts and images from one compatibility plan.

    Start with: provision plan --os rocky9 --gpu a100-pcie
    """
    ctx.obj = {"debug": debug, "compat_dir": compat_dir}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        rv = cli.main(args=args, prog_name="provision", standalone_mode=False)
    except ProvisionError as exc:
        _report(exc.message, exc.hint, exc.details)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.NoArgsIsHelpError as exc:  # pragma: no cover - click >= 8.2
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        return 0
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "provision"
        _report(exc.format_message(), f"see {command} --help", [])
        return 2
    except click.ClickException as exc:
        _report(exc.format_message(), None, [])
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except BrokenPipeError:  # `provision matrix frameworks | head`
        return 0
    except Exception as exc:
        if debug:
            raise
        _report(
            f"unexpected {type(exc).__name__}: {exc}",
            "this is a bug in provision; rerun with --debug and report the traceback",
            [],
        )
        return 1
    return rv if isinstance(rv, int) else 0


def _report(message: str, hint: str | None, details: list[str]) -> None:
    click.echo(f"error: {message}", err=True)
    for line in details:
        click.echo(f"  {line}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
