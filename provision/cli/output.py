"""Turning results into text: tables (rich on a terminal, aligned plain text otherwise),
Markdown, JSON and YAML. Only the CLI calls this module."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO


def echo(text: str, *, err: bool = False) -> None:
    """click.echo(text, err=err), without importing click when it is not loaded yet.

    Where click is loaded (every command but `provision plan`'s fast path) this is click.echo.
    Otherwise it does what click.echo does with a str on a UTF-8 text stream (the only kind the
    fast path accepts, see provision/cli/plan_run.py): add a newline, drop ANSI styles when the
    stream is not a terminal, write, flush.
    """
    click = sys.modules.get("click")
    if click is not None:
        click.echo(text, err=err)
        return
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    out = text + "\n"
    if "\033" in out and not _isatty(stream):
        import re

        out = re.sub(r"\033\[[0-?]*[ -/]*[@-~]", "", out)  # click's _ansi_re
    stream.write(out)
    stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except Exception:
        return False


def dumps_json(doc: Any) -> str:
    return json.dumps(doc, indent=2) + "\n"


def dumps_yaml(doc: Any) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, width=120)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        return _text(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> str:
    cells = [[_text(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i].splitlines()[0]) if r[i] else 0 for r in cells]) for i, h in enumerate(headers)]
    out = [title, ""] if title else []
    out.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(out) + "\n"


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None, stream: TextIO | None = None
) -> None:
    """A rich table on a terminal; aligned plain text when piped (cheap to parse, no colour)."""
    stream = stream or sys.stdout
    if not stream.isatty():
        stream.write(plain_table(headers, rows, title))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False, header_style="bold")
    for h in headers:
        table.add_column(h, overflow="fold")
    for row in rows:
        table.add_row(*(_text(v) for v in row))
    Console(file=stream).print(table)


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value)
    return str(value)
