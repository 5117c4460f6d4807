"""The README and docs/ stay true: the supported matrix is the one compat/ gives today, the set-up
commands are the two checked ones, every command line in a code block names options its command
has, every relative link and anchor resolves, and docs/legend.md names every column and legend
term the tables print."""

from __future__ import annotations

import contextlib
import re
import shlex

import click
import pytest
from support import COMPAT, ROOT

from provision.errors import InputError
from provision.plan import supported

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]


def _between_markers(text: str) -> str:
    begin = text.index(supported.MARK_BEGIN) + len(supported.MARK_BEGIN) + 1
    return text[begin : text.index(supported.MARK_END)]


# -- the supported matrix ---------------------------------------------------------------------


def test_supported_matrix_is_generated_from_compat(real_matrix):
    current = supported.markdown(real_matrix)
    assert _between_markers(README.read_text()) == current, (
        "README.md's supported matrix differs from compat/: run python -m provision.plan.supported --write README.md"
    )


def test_supported_matrix_has_a_row_for_every_gpu_and_a_column_for_every_os(real_matrix):
    table = supported.markdown(real_matrix)
    header = table.splitlines()[0]
    for os_rel in real_matrix.os_releases:
        assert f"| {os_rel.id} |" in header
    for gpu in real_matrix.gpus:
        assert f"`{gpu.id}`" in table
    # a refused pair carries the resolver's reason as a numbered note
    assert "refused (1)" in table
    assert "\n(1) " in table


def test_supported_matrix_follows_the_catalogue(tmp_path):
    """Change the data and the table changes: an edited exclusion reason shows up as its note."""
    from support import make_compat

    from provision.matrix.loader import load_matrix

    compat = make_compat(tmp_path / "compat", COMPAT)
    path = compat / "unsupported.yaml"
    assert "Volta on EL10" in path.read_text()
    path.write_text(path.read_text().replace("Volta on EL10", "Volta on EL10 (edited)"))
    assert "Volta on EL10 (edited)" in supported.markdown(load_matrix(compat))
    assert "Volta on EL10 (edited)" not in README.read_text()


def test_splice_replaces_only_the_part_between_the_markers():
    text = f"head\n{supported.MARK_BEGIN}\nold table\n{supported.MARK_END}\ntail\n"
    assert supported.splice(text, "new\n") == f"head\n{supported.MARK_BEGIN}\nnew\n{supported.MARK_END}\ntail\n"
    for broken in ("no markers\n", f"{supported.MARK_END}\n{supported.MARK_BEGIN}\n", text + supported.MARK_BEGIN):
        with pytest.raises(InputError, match="supported-matrix markers"):
            supported.splice(broken, "new\n")


def test_the_script_checks_and_writes_a_file(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text(f"# page\n{supported.MARK_BEGIN}\nstale\n{supported.MARK_END}\n")
    assert supported.main(["--compat-dir", str(COMPAT), "--check", str(page)]) == 1
    assert "stale" in capsys.readouterr().out
    assert supported.main(["--compat-dir", str(COMPAT), "--write", str(page)]) == 0
    assert supported.main(["--compat-dir", str(COMPAT), "--check", str(page)]) == 0
    capsys.readouterr()
    assert _between_markers(page.read_text()) == _between_markers(README.read_text())
    page.write_text("# no markers\n")
    assert supported.main(["--compat-dir", str(COMPAT), "--write", str(page)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert page.read_text() == "# no markers\n"


# -- set up and quick start -------------------------------------------------------------------


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_set_up_is_exactly_the_two_checked_commands():
    setup = _section(README.read_text(), "Set up")
    blocks = re.findall(r"```\n(.*?)```", setup, flags=re.S)
    assert [b.strip() for b in blocks] == [
        "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/provision plan --os rocky9 --gpu a100-pcie",
        "tests/run",
    ]


def test_quick_start_walks_plan_render_apply_verify_doctor():
    quick = _section(README.read_text(), "Quick start")
    commands = [line.split()[1] for line in quick.splitlines() if line.startswith("provision ")]
    order = [c for c in commands if c in ("plan", "render", "apply", "verify", "doctor")]
    assert order == sorted(order, key=["plan", "render", "apply", "verify", "doctor"].index)
    assert set(order) == {"plan", "render", "apply", "verify", "doctor"}
    assert len(re.search(r"```\n(.*?)```", quick, flags=re.S).group(1).splitlines()) <= 25


def test_readme_is_a_five_minute_read():
    assert len(README.read_text().splitlines()) <= 170


# -- command lines agree with --help ----------------------------------------------------------


def _command_lines(path):
    """(line number, words) of each `provision ...` command in the page's code blocks, with its
    indented continuation lines, comments dropped."""
    out, fenced, current = [], False, None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            fenced, current = not fenced, None
            continue
        if not fenced:
            continue
        code = line.split("  #", 1)[0].split(" # ", 1)[0]
        if code.lstrip().startswith("provision "):
            current = [number, code.strip()]
            out.append(current)
        elif current is not None and code.startswith(" ") and code.strip().startswith(("[", "-")):
            current[1] += " " + code.strip()
        else:
            current = None
    return [(n, text) for n, text in out]


def _options(command: click.Command) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


def _resolve(words: list[str]):
    """The click command a `provision A B ...` line names, and the words after it."""
    from provision.cli.group import cli

    command, rest = cli, list(words[1:])
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        names = rest[0].split("|")  # `matrix gpus|os|…`: every alternative must exist
        found = [command.get_command(click.Context(command), n) for n in names]
        assert all(found), f"provision {' '.join(words[1:])}: no command {rest[0]!r}"
        command, rest = found[0], rest[1:]
    return command, rest


def test_every_documented_command_line_uses_options_its_command_has():
    from provision.cli.group import cli

    global_options = _options(cli)
    checked = 0
    for page in PAGES:
        for number, text in _command_lines(page):
            words = shlex.split(text.replace("|", " | ").replace(" | ", "|"), posix=False)
            command, rest = _resolve(words)
            known = _options(command) | global_options
            used = {w.split("=")[0] for w in re.findall(r"(?<![\w./-])(--?[A-Za-z][\w-]*)", " ".join(rest))}
            unknown = sorted(used - known)
            assert not unknown, f"{page.name}:{number}: {text[:70]!r}: no option {unknown}"
            checked += 1
    assert checked >= 30, checked


# -- links and anchors ------------------------------------------------------------------------


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_every_relative_link_and_anchor_resolves():
    checked = 0
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            assert dest.is_file(), f"{page.name}: link to {target}: no such file"
            if anchor:
                assert anchor in _anchors(dest), f"{page.name}: link to {target}: no such heading"
            checked += 1
    assert checked >= 20, checked


def test_the_docs_hold_the_moved_operator_sections():
    for name in (
        "plans",
        "hosts-and-images",
        "stacks",
        "fleets",
        "images",
        "verification",
        "diagnosis",
        "mig",
        "gpus",
        "trust-model",
        "legend",
        "contributing",
    ):
        assert (DOCS / f"{name}.md").is_file(), name
        assert f"(docs/{name}.md)" in README.read_text(), f"README does not link docs/{name}.md"
    assert "## The server (platforms)" in (DOCS / "verification.md").read_text()
    assert "## The BMC" in (DOCS / "diagnosis.md").read_text()


# -- the legend -------------------------------------------------------------------------------


def _legend_terms() -> list[str]:
    """The first cell of every row of docs/legend.md's tables, backticks dropped."""
    rows = re.findall(r"^\| (.+?) \| .+ \|$", (DOCS / "legend.md").read_text(), flags=re.M)
    return [r.replace("`", "") for r in rows if r not in ("word", "---")]


def _in_legend(term: str, terms: list[str]) -> bool:
    return any(term == t or term in re.split(r", | / ", t) or t.startswith(term + " ") for t in terms)


def _table_words(real_matrix) -> dict[str, list[str]]:
    """Every column name and legend term the tables print, by where they come from."""
    from provision.cli import mig as mig_cli
    from provision.cli import runs as runs_cli
    from provision.cli.doctor import HEADERS as DOCTOR
    from provision.cli.plan import listing_legend
    from provision.cli.plan_run import PLAN_HEADERS, plan_rows
    from provision.matrix.listing import TOPICS, listing
    from provision.plan.model import PlanRequest
    from provision.plan.resolve import BRANCH_TYPES, resolve
    from provision.tiers import WORKLOADS, legend, rank, table_rows

    words: dict[str, list[str]] = {}
    for topic in TOPICS:
        found = listing(real_matrix, topic)
        terms = [line.split(": ", 1)[0] for line in listing_legend(topic, found.headers, found.rows, found.records)]
        words[f"matrix {topic}"] = [*found.headers, *(t for t in terms if t != "type")]
    words["branch types"] = list(BRANCH_TYPES)
    for workload in WORKLOADS:
        headers, _ = table_rows(rank(real_matrix, workload))
        terms = [line.split(" [", 1)[0].split(": ", 1)[0] for line in legend(workload)]
        words[f"gpus --rank {workload}"] = [*headers, *terms]
    words["mig"] = [*mig_cli.PLAN_HEADERS, *mig_cli.SUGGEST_HEADERS]
    words["doctor"] = list(DOCTOR)
    words["diff"] = list(runs_cli.DIFF_HEADERS)
    b200 = resolve(real_matrix, PlanRequest("ubuntu22.04", "b200"))
    words["plan"] = [*PLAN_HEADERS, *(row for row, _ in plan_rows(b200))]
    return words


def test_the_legend_names_every_column_and_legend_term(real_matrix):
    terms = _legend_terms()
    missing = {
        where: [w for w in found if not _in_legend(w, terms)] for where, found in _table_words(real_matrix).items()
    }
    missing = {where: found for where, found in missing.items() if found}
    assert not missing, f"docs/legend.md does not explain: {missing}"


# -- the stacks examples ----------------------------------------------------------------------


def _stack_examples() -> list[tuple[list[str], list[str]]]:
    """(plan arguments, the versions its comment promises) for each `provision plan` line of the
    README's Stacks block; a comment on the next line belongs to the command above it."""
    text = README.read_text()
    block = text[text.index("## Stacks") :]
    block = block[block.index("```\n") + 4 : block.index("\n```", block.index("```\n") + 4)]
    out: list[tuple[list[str], list[str]]] = []
    for line in block.splitlines():
        command, _, comment = line.partition("#")
        if command.strip():
            out.append((shlex.split(command)[2:], []))
        out[-1][1].extend(re.findall(r"\d+\.\d+(?:\.\d+)*", comment))
    return out


@pytest.mark.parametrize(("args", "versions"), _stack_examples(), ids=lambda v: " ".join(v)[:60])
def test_the_readme_stack_examples_print_what_their_comments_say(args, versions, monkeypatch, capsys):
    from provision.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("PROVISION_COMPAT_DIR", str(COMPAT))
    with contextlib.suppress(SystemExit):
        main(["plan", *args])
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert versions, args
    missing = [v for v in versions if not re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", printed)]
    assert not missing, f"README promises {missing} for plan {' '.join(args)}; it printed:\n{printed[:2000]}"


def test_the_stack_examples_cover_every_stack_package(real_matrix):
    named = {a for args, _ in _stack_examples() for i, a in enumerate(args) if args[i - 1] in ("--with", "--framework")}
    assert {s.id for s in real_matrix.stacks} <= {n.split("==")[0] for n in named}
