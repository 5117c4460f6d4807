"""Turning results into text: tables and prose that fit the terminal, Markdown, JSON and YAML.
Only the CLI calls this module.

Width (terminal_width): COLUMNS when it is a positive integer, else the terminal's width when
stdout is one, else 100 — so piped output, a file and a CI log all get the same text at 100
columns (set COLUMNS for wider). Every table goes through fit_table, the one table writer:

* a table whose natural width fits is printed as aligned columns, as it always was;
* else its columns are narrowed, the widest first, and cells wrap at spaces inside their column;
* else (too many columns for any wrapping) one block per row: ``header: value`` lines;
* a token (a run without spaces: a command's word, an id, a version, an image reference, a
  UUID, a PCI id, a path) is never split, and a cell of a ``whole`` column (a command with its
  arguments) or a `backquoted` span never breaks at its spaces: a column is never narrower than
  its longest token, and a token longer than the whole width goes whole on its own line;
* nothing is cut: every character of every cell is printed.

Prose beside a table (reasons, legends, notes) goes through wrap_text, with the same rules.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Collection, Sequence
from typing import Any, TextIO

DEFAULT_WIDTH = 100
"""The width when COLUMNS is unset and stdout is no terminal (piped, redirected, a CI log)."""

GAP = "  "
"""Between two table columns."""

_KEEP = "\ue000"  # stands for a space that must not break while wrapping (private use: no text has it)
_BREAKS = re.compile(r"[\t\n\x0b\x0c\r ]+")  # where wrap_text breaks a line, and nowhere else
_QUOTED = re.compile(r"`[^`\n]*`")
_SPACES = str.maketrans("\t\x0b\x0c\r", "    ")  # the other spaces a line may break at


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
        out = re.sub(r"\033\[[0-?]*[ -/]*[@-~]", "", out)  # click's _ansi_re
    stream.write(out)
    stream.flush()


def echo_wrapped(text: str, *, err: bool = False, indent: str = "", hanging: str | None = None) -> None:
    """echo() ``text`` wrapped at spaces to terminal_width() (see wrap_text)."""
    for line in wrap_text(text, terminal_width(), indent=indent, hanging=hanging):
        echo(line, err=err)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except Exception:
        return False


def terminal_width(stream: TextIO | None = None) -> int:
    """COLUMNS when it is a positive integer, else the terminal's width when ``stream`` (default:
    stdout) is a terminal, else DEFAULT_WIDTH (100)."""
    env = os.environ.get("COLUMNS", "")
    if env.isascii() and env.isdigit() and int(env) > 0:
        return int(env)
    stream = sys.stdout if stream is None else stream
    try:
        if stream is not None and stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or DEFAULT_WIDTH
    except (AttributeError, OSError, ValueError):
        pass
    return DEFAULT_WIDTH


def dumps_json(doc: Any) -> str:
    return json.dumps(doc, indent=2) + "\n"


def dumps_yaml(doc: Any) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, width=120)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table: no width limit (a renderer wraps it); ``|`` escaped, newlines as spaces.
    A cell may hold what a host printed, so nothing in it renders as markup beyond text: ``<`` (an
    HTML tag or autolink) and ``](`` (a link) are escaped too."""

    def cell(value: Any) -> str:
        text = _text(value).replace("|", "\\|").replace("\n", " ")
        return text.replace("<", "&lt;").replace("](", "]\\(")

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# -- wrapping -------------------------------------------------------------------------------------


def _protect(text: str, whole: bool = False) -> str:
    """``text`` with the spaces that must not break replaced by _KEEP: all of them when ``whole``,
    else those inside `backquotes` (a command quoted in prose)."""
    if whole:
        return text.replace(" ", _KEEP)
    if "`" not in text:
        return text
    return _QUOTED.sub(lambda m: m.group(0).replace(" ", _KEEP), text)


def longest_token(text: str, whole: bool = False) -> int:
    """The width ``text`` can be wrapped to without splitting anything (0 for empty text)."""
    return max((len(t) for t in _BREAKS.split(_protect(text, whole))), default=0)


def wrap_text(text: str, width: int, *, indent: str = "", hanging: str | None = None, whole: bool = False) -> list[str]:
    """``text`` wrapped to ``width`` at spaces only: a word, an id, a version, a path, an image
    reference or a `backquoted command` is never split (one longer than the line goes whole on a
    line of its own). The first line starts with ``indent``, the others with ``hanging`` (default:
    two spaces more than a blank ``indent``; as wide as a label ``indent`` such as "note: ").
    Newlines in ``text`` start new lines. Nothing is dropped but the spaces where a line breaks
    (and runs of spaces in a paragraph that must wrap)."""
    if hanging is None:
        hanging = " " * len(indent) if indent.strip() else indent + "  "
    longest = longest_token(text, whole)
    if longest <= width:  # a blank indent gives way to a token that fits the line without it
        if not hanging.strip() and len(hanging) + longest > width:
            hanging = hanging[: width - longest]
        if not indent.strip() and len(indent) + longest > width:
            indent = indent[: width - longest]
    out: list[str] = []
    for n, paragraph in enumerate(_protect(text, whole).translate(_SPACES).split("\n")):
        line = indent if n == 0 else hanging
        if len(line) + len(paragraph) <= width:  # as it is
            out.append((line + paragraph).rstrip(" ").replace(_KEEP, " "))
            continue
        bare = True  # nothing but the indent on the line yet
        for word in filter(None, paragraph.split(" ")):
            if bare or len(line) + 1 + len(word) <= width:
                line += ("" if bare else " ") + word
                bare = False
            else:
                out.append(line.replace(_KEEP, " "))
                line = hanging + word
        out.append(line.rstrip(" ").replace(_KEEP, " "))
    return out


# -- tables ---------------------------------------------------------------------------------------


def fit_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], **options: Any) -> str:
    """The table as text that fits the width; see table_lines for ``options``."""
    return "\n".join(table_lines(headers, rows, **options)) + "\n"


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, stream: TextIO | None = None, **options: Any
) -> None:
    """fit_table() written to ``stream`` (stdout), fit to its width: the same text on a terminal
    and in a pipe (see terminal_width)."""
    stream = sys.stdout if stream is None else stream
    if options.get("width") is None:
        options["width"] = terminal_width(stream)
    stream.write(fit_table(headers, rows, **options))
    stream.flush()


def table_lines(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    width: int | None = None,
    title: str | None = None,
    right: Collection[int] = (),
    whole: Collection[int] = (),
    keyed: bool = False,
    optional: Collection[int] = (),
) -> list[str]:
    """The table's lines, none wider than ``width`` (default terminal_width()) but a token longer
    than the width itself: aligned columns (wrapped at spaces where they must be), else blocks.

    ``title``: a line above it. ``right``: the indices of columns aligned right (numbers).
    ``whole``: columns whose cells never break at their spaces (a command with its arguments).
    ``keyed``: the first column names its row (a component, a GPU id), and heads its block.
    ``optional``: columns that may be left out, in that order, and are named under the table: as
    few as make it fit unwrapped, else as few as make it fit wrapped (else blocks of every column)."""
    width = terminal_width() if width is None else max(1, width)
    cells = [[_text(v) for v in row] for row in rows]
    for row in cells:
        if len(row) != len(headers):
            raise ValueError(f"a row of {len(row)} cells under {len(headers)} headers")
    out = [*wrap_text(title, width), ""] if title else []
    order = list(optional)
    for wrap in (False, True):  # optional columns go before a cell is wrapped
        for k in range(len(order) + 1):  # the optional columns left out, in their order
            keep = [i for i in range(len(headers)) if i not in order[:k]]
            if not keep:
                break
            at = {i: n for n, i in enumerate(keep)}
            some = [headers[i] for i in keep]
            part = [[row[i] for i in keep] for row in cells]
            narrow = {at[i] for i in whole if i in at}
            widths = None
            if keyed and wrap:  # the column that names the rows unwrapped, where it can be
                widths = _column_widths(some, part, width, narrow | {0}, wrap)
            if widths is None:
                widths = _column_widths(some, part, width, narrow, wrap)
            if widths is None:
                continue
            out += _columns(some, part, widths, {at[i] for i in right if i in at}, narrow)
            if k:
                left = ", ".join(headers[i] for i in sorted(order[:k]))
                out += wrap_text(f"left out to fit {width} columns: {left} ({MORE})", width)
            return out
    return out + _blocks(headers, cells, width, whole, keyed)


MORE = "wider COLUMNS, --format markdown or --format json show them"


def fits_as_columns(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, width: int | None = None, whole: Collection[int] = ()
) -> bool:
    """Whether table_lines prints the table (no optional columns) as columns, wrapped or not, at
    ``width`` (default terminal_width()); False when it would print one block per row."""
    width = terminal_width() if width is None else max(1, width)
    cells = [[_text(v) for v in row] for row in rows]
    return _column_widths(headers, cells, width, set(whole)) is not None


def _column_widths(
    headers: Sequence[str], cells: list[list[str]], width: int, whole: Collection[int], wrap: bool = True
) -> list[int] | None:
    """Each column's width: its natural width when the table fits. Else, with ``wrap``, every
    column starts at its longest token (never less: nothing is split), the room left goes first to
    the columns whose typical (mean) cell is wider than that, in proportion, then towards the
    natural widths. None when it does not fit."""
    n = len(headers)
    natural, least, typical = [], [], []
    for i, h in enumerate(headers):
        lengths = [max(len(line) for line in r[i].split("\n")) for r in cells]
        natural.append(max([len(h), *lengths]))
        least.append(max([longest_token(h)] + [longest_token(r[i], i in whole) for r in cells]))
        typical.append(min(natural[-1], max(least[-1], -(-sum(lengths) // max(1, len(lengths))))))
    room = width - len(GAP) * (n - 1)
    if sum(natural) <= room:
        return natural
    if not wrap or sum(least) > room:
        return None
    widths = _share(least, typical, room - sum(least))
    return _share(widths, natural, room - sum(widths))


def _share(widths: list[int], goals: list[int], spare: int) -> list[int]:
    """``widths`` grown by up to ``spare`` in all, each towards its goal in proportion to what it
    lacks (the largest remainders get the odd units)."""
    lack = [max(0, g - w) for w, g in zip(widths, goals, strict=True)]
    total = sum(lack)
    if total <= spare:
        return [w + d for w, d in zip(widths, lack, strict=True)]
    grant = [d * spare // total for d in lack]
    order = sorted(range(len(lack)), key=lambda i: (-(lack[i] * spare % total), i))
    for i in order[: spare - sum(grant)]:
        grant[i] += 1
    return [w + g for w, g in zip(widths, grant, strict=True)]


def _columns(
    headers: Sequence[str], cells: list[list[str]], widths: list[int], right: Collection[int], whole: Collection[int]
) -> list[str]:
    def lines(row: Sequence[str], bottom: bool, is_header: bool = False) -> list[str]:
        wrapped = [
            wrap_text(c, w, hanging="", whole=(i in whole and not is_header))
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        height = max(len(w) for w in wrapped)
        for n, w in enumerate(wrapped):  # a header's lines sit on the dashes, a row's at the top
            pad = [""] * (height - len(w))
            wrapped[n] = pad + w if bottom else w + pad
        return [
            GAP.join(
                (w[k].rjust(widths[i]) if i in right else w[k].ljust(widths[i])) for i, w in enumerate(wrapped)
            ).rstrip()
            for k in range(height)
        ]

    out = lines(headers, bottom=True, is_header=True)
    out.append(GAP.join("-" * w for w in widths))
    for row in cells:
        out += lines(row, bottom=False)
    return out


def _blocks(
    headers: Sequence[str], cells: list[list[str]], width: int, whole: Collection[int], keyed: bool
) -> list[str]:
    """One block per row of ``header: value`` lines: the first unindented, the others indented
    beneath it; ``keyed`` (the first column names the row): the row's name heads its block, and a
    two-column table becomes ``name: value`` lines. Labels are aligned where that leaves room; a
    value too wide beside its label goes below it."""
    if keyed and len(headers) == 2:
        return _fields([(r[0], r[1], 1 in whole) for r in cells], width, "")
    out: list[str] = []
    for row in cells:
        if out:
            out.append("")
        if keyed:
            out += wrap_text(row[0] + ":", width, whole=0 in whole)
        else:
            out += _fields([(headers[0], row[0], 0 in whole)], width, "")
        fields = [(h, v, i in whole) for i, (h, v) in enumerate(zip(headers, row, strict=True)) if i and v != ""]
        out += _fields(fields, width, "  ", label=max((len(h) for h in headers[1:]), default=0))
    return out


def _fields(fields: list[tuple[str, str, bool]], width: int, indent: str, label: int | None = None) -> list[str]:
    """``label: value`` lines; labels padded to one width where that leaves half the line to values."""
    label = max((len(lbl) for lbl, _, _ in fields), default=0) if label is None else label
    aligned = len(indent) + label + 2 <= width // 2
    out: list[str] = []
    for name, value, whole in fields:
        head = f"{indent}{name}: ".ljust(len(indent) + label + 2) if aligned else f"{indent}{name}: "
        if len(head.rstrip()) <= width and longest_token(value, whole) <= width - len(head):
            out += wrap_text(value, width, indent=head, hanging=" " * len(head), whole=whole)
            continue
        out += wrap_text(f"{name}:", width, indent=indent)  # the value passes the width beside it: under it
        if value:
            out += wrap_text(value, width, indent=indent + "  ", hanging=indent + "  ", whole=whole)
    return out


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value)
    return str(value)
