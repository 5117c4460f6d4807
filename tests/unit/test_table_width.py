"""Issue 23 item 2: every table honours the terminal width (COLUMNS, else the terminal, else 100).

The shared writer (provision/cli/output.py) is tested on its own first: lines fit, cells wrap at
spaces only, nothing is cut, blocks when no wrapping fits. Then each command at 100 and 80 columns:
no line is wider than the width, and every token of the values it shows (read unwrapped from the
command's own --format markdown) appears whole in its table output.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provision.cli.output import (
    DEFAULT_WIDTH,
    fit_table,
    table_lines,
    terminal_width,
    wrap_text,
)

WIDTHS = (100, 80)


# -- the writer -----------------------------------------------------------------------------------
def test_a_table_that_fits_is_the_aligned_text_it_always_was():
    text = fit_table(("id", "name"), [("a100-pcie", "NVIDIA A100"), ("t4", None)], width=100, title="GPUs")
    assert text == ("GPUs\n\nid         name\n---------  -----------\na100-pcie  NVIDIA A100\nt4         -\n")


def test_cells_wrap_at_spaces_and_no_token_is_split():
    ref = "nvidia/cuda:13.2.1-cudnn-runtime-ubuntu22.04"
    rows = [("cudnn", f"9.20.0.48 (in {ref}, not in the base image)"), ("digest", "sha256:" + "ab" * 32)]
    lines = table_lines(("component", "choice"), rows, width=84)
    assert max(map(len, lines)) <= 84
    assert lines[0].startswith("component")
    assert set(lines[1]) == {"-", " "}  # still a table
    words = " ".join(lines).split()
    assert f"{ref}," in words
    assert "sha256:" + "ab" * 32 in words
    assert len(lines) == 2 + 2 + 1  # the long cell took two lines, the digest one


def test_too_many_columns_become_blocks_of_header_value_lines():
    headers = [f"column {n}" for n in range(12)]
    rows = [[f"r{r}-value-{n}" for n in range(12)] for r in range(2)]
    lines = table_lines(headers, rows, width=60)
    assert max(map(len, lines)) <= 60
    assert "----" not in "\n".join(lines)
    assert lines[0] == "column 0: r0-value-0"
    assert lines[1].split() == ["column", "1:", "r0-value-1"]
    assert lines[1].startswith("  ")
    assert "" in lines  # a blank line between the blocks
    assert lines[lines.index("") + 1] == "column 0: r1-value-0"


def test_keyed_two_column_blocks_read_name_colon_value():
    rows = [("os", "Ubuntu 22.04 LTS"), ("digest", "sha256:" + "0" * 64)]
    lines = table_lines(("component", "choice"), rows, width=50, keyed=True)
    assert lines[0].split() == ["os:", "Ubuntu", "22.04", "LTS"]
    assert lines[1] == "digest:"  # the digest is wider than what is left beside its label
    assert lines[2] == "  sha256:" + "0" * 64  # whole, on a line of its own (the one line past the width)


def test_a_token_longer_than_the_width_goes_whole_on_its_own_line():
    token = "x" * 30
    assert wrap_text(f"see {token} now", 20) == ["see", f"  {token}", "  now"]


def test_backquoted_commands_and_whole_cells_never_break_at_their_spaces():
    text = "check them with `nvidia-smi mig -lgipp` on the host"
    for width in range(12, 60):
        lines = wrap_text(text, width)
        assert any("`nvidia-smi mig -lgipp`" in line for line in lines), (width, lines)
    command = "provision mig plan --gpu h100-sxm --layout 3g.40gb"
    lines = table_lines(
        ("#", "command", "note"), [("1", command, "a b c d e f g h i j k l m n o p")], width=80, whole={1}
    )
    assert any(command in line for line in lines)
    assert max(map(len, lines)) <= 80


def test_optional_columns_are_left_out_only_to_fit_and_named():
    headers = ("id", "name", "pci ids")
    rows = [("a100-pcie", "NVIDIA A100 PCIe", "0x20F1, 0x20B1, 0x20B5"), ("t4", "NVIDIA T4", "0x1EB8")]
    wide = table_lines(headers, rows, width=100, optional=[2])
    assert "pci ids" in wide[0]
    assert not any("left out" in line for line in wide)
    narrow = table_lines(headers, rows, width=30, optional=[2])
    assert "pci ids" not in narrow[0]
    assert "left out to fit 30 columns: pci ids" in " ".join(" ".join(narrow).split())
    assert max(map(len, narrow)) <= 30
    blocks = table_lines(headers, rows, width=12, optional=[2])  # nothing fits: blocks show every column
    assert "0x20F1," in " ".join(blocks).split()


_word = st.text(alphabet="abcdefghij0123456789.-/:_`()", min_size=1, max_size=18)
_cell = st.lists(_word, min_size=0, max_size=7).map(" ".join)


@settings(max_examples=400, deadline=None)
@given(ncols=st.integers(1, 10), data=st.data(), width=st.integers(8, 140), keyed=st.booleans())
def test_any_table_fits_and_keeps_every_token(ncols, data, width, keyed):
    headers = [data.draw(_cell.filter(bool)) for _ in range(ncols)]
    rows = data.draw(st.lists(st.lists(_cell, min_size=ncols, max_size=ncols), min_size=1, max_size=6))
    optional = data.draw(st.lists(st.integers(0, ncols - 1), unique=True, max_size=ncols))
    right = data.draw(st.sets(st.integers(0, ncols - 1)))
    lines = table_lines(headers, rows, width=width, keyed=keyed, optional=optional, right=right)
    for line in lines:  # only a lone token, or a `quoted` span, wider than the width passes it
        assert len(line) <= width or len(line.split()) == 1 or "`" in line, (width, line)
    shown = Counter(t.rstrip(":") for t in " ".join(lines).split())  # a keyed row's name heads its block as "name:"
    noted = "left out to fit" in " ".join(" ".join(lines).split())
    some = [i for i in range(ncols) if i not in optional or not noted]
    wanted = Counter(t.rstrip(":") for row in rows for i in some for t in row[i].split())
    assert not wanted - shown, "a token was split or dropped"


def test_terminal_width_is_columns_else_the_terminal_else_100(monkeypatch):
    monkeypatch.setenv("COLUMNS", "72")
    assert terminal_width() == 72
    for bad in ("", "0", "wide", "-5", "٣"):
        monkeypatch.setenv("COLUMNS", bad)
        assert terminal_width(open(os.devnull, "w")) == DEFAULT_WIDTH  # noqa: SIM115
    monkeypatch.delenv("COLUMNS")
    main, other = os.openpty()  # a terminal 57 columns wide
    fcntl.ioctl(other, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 57, 0, 0))
    with os.fdopen(other, "w") as tty:
        assert terminal_width(tty) == 57
    os.close(main)


# -- every command ------------------------------------------------------------------------------
def markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Each Markdown table in ``text``: its headers and rows, cells unescaped and unquoted."""
    tables, lines = [], text.splitlines()
    for n, line in enumerate(lines):
        if line.startswith("|---") and n:
            header = _cells(lines[n - 1])
            rows = []
            for row in lines[n + 1 :]:
                if not row.startswith("| "):
                    break
                rows.append(_cells(row))
            tables.append((header, rows))
    return tables


def _cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\) \| ", line.strip()[2:-2])
    # a cell as markdown_table escaped it: \| , &lt; and ]\( (host text never renders as markup)
    return [p.replace("\\|", "|").replace("&lt;", "<").replace("]\\(", "](").replace("`", "") for p in parts]


def left_out(text: str, width: int) -> set[str]:
    flat = " ".join(text.split())
    found = re.findall(rf"left out to fit {width} columns: (.*?) \(wider COLUMNS", flat)
    return {name for names in found for name in names.split(", ")}


def assert_fits_and_whole(table_text: str, markdown_text: str, width: int, *, prose: list[str] = ()) -> None:
    lines = table_text.splitlines()
    for line in lines:
        assert len(line) <= width, f"{len(line)} > {width}: {line!r}"
    shown = set(table_text.split())
    shown |= {t.removesuffix(":") for t in shown}  # a row's name heads its block as "name:"
    shown |= {t.strip("()") for t in shown}  # diff's lines put the Markdown's last column in brackets
    hidden = left_out(table_text, width)
    tables = markdown_tables(markdown_text)
    assert tables, markdown_text
    checked = 0
    for headers, rows in tables:
        for row in rows:
            for header, cell in zip(headers, row, strict=True):
                if header in hidden:
                    continue
                for token in cell.split():
                    assert token in shown, f"{token!r} ({header}) split or missing at {width} columns"
                    checked += 1
    for text in prose:
        for token in text.split():
            assert token in shown, f"{token!r} split or missing at {width} columns"
    assert checked


@pytest.fixture
def at(cli, monkeypatch):
    def run(width: int, *args: str, code: int = 0):
        monkeypatch.setenv("COLUMNS", str(width))
        result = cli(*args)
        assert result.code == code, result
        return result

    return run


PLANS = [
    ("ubuntu22.04", "a100-pcie"),
    ("ubuntu22.04", "t4", "--cuda", "11.8"),
    ("rocky9", "h100-sxm", "--framework", "pytorch"),
    ("ubuntu24.04", "l4", "--framework", "tensorflow"),
    ("ubuntu22.04", "h100-sxm", "--host-only"),
    ("ubuntu22.04", "a100-pcie-80gb", "--mig", "3g.40gb,2g.20gb,2x1g.10gb"),
]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("request_args", PLANS, ids=" ".join)
def test_plan(at, width, request_args):
    os_id, gpu, *more = request_args
    args = ("plan", "--os", os_id, "--gpu", gpu, *more)
    table, md = at(width, *args), at(width, *args, "--format", "markdown")
    reasons = [line[2:] for line in md.out.splitlines() if line.startswith("- [")]
    assert reasons
    assert_fits_and_whole(table.out, md.out, width, prose=reasons)
    assert "why:" in table.out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "topic", ["gpus", "platforms", "os", "drivers", "cuda", "cudnn", "frameworks", "images", "stacks"]
)
def test_matrix_listings(at, width, topic):
    table, md = at(width, "matrix", topic), at(width, "matrix", topic, "--format", "markdown")
    assert_fits_and_whole(table.out, md.out, width)


def test_matrix_listings_at_100_columns_stay_tables(at):
    """A listing leaves rarely needed columns out (and names them) rather than turning into blocks."""
    for topic in ("gpus", "platforms", "os", "drivers", "cuda", "cudnn", "frameworks", "images", "stacks"):
        out = at(100, "matrix", topic).out
        assert re.search(r"^-+  -+", out, re.M), topic
    hidden = left_out(at(100, "matrix", "images").out, 100)
    assert hidden <= {"flavours", "example tag"}
    wide = at(1000, "matrix", "images").out
    assert "example tag" in wide
    assert not left_out(wide, 1000)


@pytest.mark.parametrize("width", WIDTHS)
def test_matrix_check(at, width):
    table, md = at(width, "matrix", "check"), at(width, "matrix", "check", "--format", "markdown")
    assert_fits_and_whole(table.out, md.out, width)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("workload", ["training", "inference", "memory", "efficiency"])
def test_gpus(at, width, workload):
    table = at(width, "gpus", "--rank", workload, "--explain")
    md = at(width, "gpus", "--rank", workload, "--format", "markdown")
    assert_fits_and_whole(table.out, md.out, width)


def test_gpus_out_file_fits_too(at, tmp_path):
    out = tmp_path / "tiers.txt"
    at(100, "gpus", "--out", str(out))
    assert max(map(len, out.read_text().splitlines())) <= 100


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "args",
    [("--driver", "535.183.01", "--only", "all"), ("--driver", "580", "--gpu", "h100-sxm", "--os", "rocky9")],
    ids=["535-all", "580-h100-rocky9"],
)
def test_runs_on(at, width, args):
    table, md = at(width, "runs-on", *args), at(width, "runs-on", *args, "--format", "markdown")
    assert_fits_and_whole(table.out, md.out, width)


@pytest.fixture
def fleet(tmp_path, real_matrix, monkeypatch):
    from provision.plan.model import PlanRequest, write_plan
    from provision.plan.resolve import resolve

    images = tmp_path / "images"
    images.mkdir()
    torch = PlanRequest("ubuntu22.04", "h100-sxm", framework="pytorch")
    write_plan(resolve(real_matrix, torch), images / "pytorch-on-h100-sxm-ubuntu22.04.lock.json")
    write_plan(resolve(real_matrix, PlanRequest("ubuntu22.04", "t4", cuda="12.4")), images / "cuda124.lock.json")
    (tmp_path / "fleet.yaml").write_text(
        "groups:\n"
        '  old-rtx-workstations: {os: rocky9, gpu: rtx-4090, driver: "535", host_only: true,'
        " images: [images/pytorch-on-h100-sxm-ubuntu22.04.lock.json]}\n"
        "  new: {os: ubuntu22.04, gpu: h100-sxm, host_only: true}\n"
    )
    write_plan(resolve(real_matrix, PlanRequest("rocky9", "a100-pcie", driver="570")), tmp_path / "a.json")
    mig = PlanRequest("ubuntu24.04", "a100-pcie-80gb", framework="tensorflow", mig="3g.40gb")
    write_plan(resolve(real_matrix, mig), tmp_path / "b.json")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("width", WIDTHS)
def test_check(at, fleet, width):
    args = ("check", "--fleet", "fleet.yaml", "--images", "images")
    table, md = at(width, *args, code=1), at(width, *args, "--format", "markdown", code=1)
    assert_fits_and_whole(table.out, md.out, width)
    flat = " ".join(table.out.split())
    assert "cannot run: images/pytorch-on-h100-sxm-ubuntu22.04.lock.json on old-rtx-workstations:" in flat


@pytest.mark.parametrize("width", WIDTHS)
def test_diff(at, fleet, width):
    table, md = (
        at(width, "diff", "a.json", "b.json", code=1),
        at(width, "diff", "a.json", "b.json", "--format", "markdown", code=1),
    )
    assert_fits_and_whole(table.out, md.out, width)
    assert "reboot needed: yes" in table.out
    assert "reboot needed: yes" in md.out
    same = at(width, "diff", "a.json", "a.json", "--format", "markdown")
    assert "no change" in same.out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "args",
    [
        ("plan", "--gpu", "h100-sxm", "--layout", "3g.40gb,2g.20gb,2x1g.10gb"),
        ("plan", "--gpu", "a100-80gb", "--fill", "1g.10gb"),
        ("suggest", "--gpu", "h100-sxm", "--services", "3", "--top", "20"),
        ("suggest", "--gpu", "b200", "--services", "2", "--min-memory", "40GB"),
    ],
    ids=lambda a: " ".join(a[:3]),
)
def test_mig(at, width, args):
    table, md = at(width, "mig", *args), at(width, "mig", *args, "--format", "markdown")
    assert_fits_and_whole(table.out, md.out, width)
    for line in table.err.splitlines():  # the notes on stderr fit too
        assert len(line) <= width, line
    if args[0] == "suggest":  # its commands are whole, each on a line of its own
        assert any(line.strip().startswith("provision mig plan --gpu ") for line in table.out.splitlines())


# -- `provision plan`'s fast path: --format markdown and the width, as click's path does ---------------
CLICK_ONLY = (
    "import sys\n"
    "from provision.cli import main, plan_run\n"
    "plan_run.fast_plan_args = lambda args: None\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_plan_fast_path_prints_what_click_does(fmt):
    from provision.cli.plan_run import fast_plan_args

    argv = ["plan", "--os", "rocky9", "--gpu", "a100-pcie", "--format", fmt]
    assert fast_plan_args(argv) is not None
    env = {**os.environ, "COLUMNS": "72"}
    fast = subprocess.run(
        [sys.executable, "-m", "provision", *argv], capture_output=True, text=True, env=env, check=False
    )
    slow = subprocess.run(
        [sys.executable, "-c", CLICK_ONLY, *argv], capture_output=True, text=True, env=env, check=False
    )
    assert (fast.returncode, fast.stdout, fast.stderr) == (slow.returncode, slow.stdout, slow.stderr)
    assert fast.returncode == 0, fast.stderr
    if fmt == "table":  # but the digest, one token wider than the line
        assert all(len(line) <= 72 or len(line.split()) == 1 for line in fast.stdout.splitlines())


def test_markdown_cells_never_render_host_text_as_markup():
    """A cell may hold what a host printed (doctor, verify, scan --format markdown in a CI step
    summary): a tag, an autolink or a link is text, not markup."""
    from provision.cli.output import markdown_table

    hostile = "<img src=x onerror=alert(1)> [click](https://attacker.example/) <https://attacker.example/> a|b"
    text = markdown_table(["evidence"], [[hostile]])
    row = text.splitlines()[2]
    assert "<" not in row
    assert "](" not in row
    assert "&lt;img src=x onerror=alert(1)>" in row
    assert "[click]\\(https://attacker.example/)" in row
    assert "a\\|b" in row
    assert _cells(row) == [hostile]  # nothing lost: the escapes read back to the text
