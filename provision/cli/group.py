"""The click group: `provision`'s global options, and its commands imported on first use.

provision.cli.main reaches for it only when `provision plan`'s fast path does not apply, so that
`provision plan --os OS --gpu GPU` never pays for importing click.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from provision import __version__
from provision.cli import COMMANDS, SUMMARIES


class LazyGroup(click.Group):
    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from SUMMARIES (listing must not import every command), each summary
        whole: write_dl wraps it at spaces under its command instead of cutting it."""
        names = self.list_commands(ctx)
        if not names:
            return
        rows = []
        for name in names:
            summary = SUMMARIES.get(name)
            if summary is None:
                summary = self.get_command(ctx, name).get_short_help_str(10_000)
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
