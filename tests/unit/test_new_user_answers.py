"""Issue 23's misleading answers, each reproduced with the new user's command."""

from __future__ import annotations


def test_a_branch_without_a_published_end_of_life_is_chosen_with_a_warning(cli, real_matrix):
    unknown = next(b for b in real_matrix.drivers if not b.eol_known)
    result = cli("plan", "--os", "ubuntu22.04", "--gpu", "l4", "--driver", str(unknown.branch))
    assert result.code == 0, result
    text = " ".join(result.out.split())  # reasons wrap at spaces to the width
    line = text[text.index(f"[driver] {unknown.label},") :].split(" [", 1)[0]
    assert "end of life unknown" in line
    assert f"warning: NVIDIA publishes no end of life for {unknown.label}" in line
    assert "past EOL: no" not in result.out


def test_the_plan_table_does_not_put_a_cudnn_in_a_base_image_without_one(cli):
    result = cli("plan", "--os", "ubuntu22.04", "--gpu", "t4", "--cuda", "11.8")
    assert result.code == 0
    lines = result.out.splitlines()
    at = next(n for n, x in enumerate(lines) if x.startswith("cudnn "))
    row = " ".join(" ".join(lines[at : at + 3]).split())  # the cell wraps at spaces under its column
    assert "not in the base image" in row
    assert "cudnn8-runtime" in row  # the tag that does carry it


def test_help_lists_every_command_whole_within_the_width(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = cli("--help")
    assert result.code == 0
    commands = result.out.split("Commands:", 1)[1]
    assert "..." not in commands
    assert max(len(line) for line in result.out.splitlines()) <= 80
    from provision.cli import SUMMARIES

    flat = " ".join(commands.split())
    for summary in SUMMARIES.values():
        assert " ".join(summary.split()) in flat


def test_a_framework_with_an_extra_is_named_once(cli):
    result = cli("plan", "--os", "ubuntu22.04", "--gpu", "l4", "--framework", "tensorflow")
    assert result.code == 0
    row = next(x for x in result.out.splitlines() if x.startswith("framework "))
    assert row.count("and-cuda") == 1


def test_one_instance_is_singular():
    from provision.tiers import TermValue, term_cell

    fields = TermValue._fields
    one = TermValue(**{f: ("instances" if f == "unit" else 1 if f == "value" else None) for f in fields})
    two = one._replace(value=2)
    assert term_cell(one) == "1 instance"
    assert term_cell(two) == "2 instances"
