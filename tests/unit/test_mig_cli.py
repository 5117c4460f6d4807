"""`provision mig plan`'s table and `provision mig suggest` (issue 23 item 2).

Expected values come from compat/mig.yaml read as plain YAML, and the suggestions are checked
against an independent oracle: every way of starting one instance (or none) at each memory slot,
no pruning, as tests/unit/test_mig_planner.py's oracle does.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import product

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import COMPAT

from provision.cli import main
from provision.cli.mig import mig_group
from provision.errors import InputError
from provision.mig import planner
from provision.mig import suggest as sg

RAW = {s["id"]: s for s in yaml.safe_load((COMPAT / "mig.yaml").read_text())["profile_sets"]}


def raw_profile(set_id, name):
    return next(p for p in RAW[set_id]["profiles"] if p["name"] == name)


def invoke(*args, columns=100):
    return CliRunner().invoke(
        mig_group, list(args), obj={"debug": False, "compat_dir": None}, env={"COLUMNS": str(columns)}
    )


@pytest.fixture(scope="module")
def sets(real_matrix):
    return {s.id: s for s in real_matrix.mig}


def parse_table(text):
    """The aligned table in ``text``: header, the dashes line that gives the column spans, rows."""
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("--") or line.startswith("- "))
    spans, pos = [], 0
    for dashes in lines[i].split("  "):
        spans.append((pos, pos + len(dashes)))
        pos += len(dashes) + 2
    headers = [lines[i - 1][a:b].strip() for a, b in spans]
    rows = []
    for line in lines[i + 1 :]:
        if not line.strip():
            break
        rows.append(dict(zip(headers, (line[a:b].strip() for a, b in spans), strict=True)))
    return headers, rows, lines[i + 1 + len(rows) :]


# -- mig plan: the table ------------------------------------------------------------------------


def test_plan_prints_a_table_read_from_compat_mig_yaml():
    r = invoke("plan", "--gpu", "h100-sxm", "--layout", "3g.40gb,2g.20gb,2x1g.10gb")
    assert r.exit_code == 0, r.output
    assert "mig-configs" not in r.stdout
    assert "provision_mig" not in r.stdout
    assert r.stdout.splitlines()[0] == "MIG layout 3g.40gb,2g.20gb,2x1g.10gb on h100-sxm (profile set h100-sxm5-80gb)"
    headers, rows, rest = parse_table(r.stdout)
    assert headers == ["start", "profile", "id", "GiB", "compute slices", "SMs", "memory slots", "map"]
    assert Counter(row["profile"] for row in rows) == Counter({"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
    raw_set = RAW["h100-sxm5-80gb"]
    taken = []
    for row in rows:
        p = raw_profile("h100-sxm5-80gb", row["profile"])
        start = int(row["start"])
        assert start in p["placements"]
        assert int(row["id"]) == p["id"]
        assert float(row["GiB"]) == p["memory_gib"]
        assert int(row["compute slices"]) == p["compute_slices"]
        assert int(row["SMs"]) == p["sms"]
        slots = list(range(start, start + p["memory_slices"]))
        assert row["memory slots"] == (str(start) if len(slots) == 1 else f"{slots[0]}-{slots[-1]}")
        assert row["map"] == "".join("#" if s in slots else "." for s in range(raw_set["memory_slices"]))
        taken += slots
    assert len(taken) == len(set(taken))  # no two instances share a memory slot
    assert [int(row["start"]) for row in rows] == sorted(int(row["start"]) for row in rows)
    compute = sum(raw_profile("h100-sxm5-80gb", row["profile"])["compute_slices"] for row in rows)
    assert rest[1] == (
        f"compute slices {compute}/{raw_set['compute_slices']} used, memory slots {len(taken)}/"
        f"{raw_set['memory_slices']} used; free: none"
    )
    assert "--format yaml|json" in r.stdout


def test_plan_summary_names_what_is_free_and_what_fits(sets):
    r = invoke("plan", "--gpu", "h100-sxm", "--layout", "3g.40gb")
    assert r.exit_code == 0, r.output
    _, rows, rest = parse_table(r.stdout)
    start = int(rows[0]["start"])
    free = [s for s in range(8) if s not in range(start, start + 4)]
    assert f"free: 4 compute slices, memory slots {free[0]}-{free[-1]}" in rest[1]
    room = planner.room(sets["h100-sxm5-80gb"], [sets["h100-sxm5-80gb"].profile("3g.40gb")])
    assert rest[2].startswith("room for " + " or ".join(p.name if n == 1 else f"{n}x{p.name}" for p, n in room))
    one = invoke("plan", "--gpu", "h100-sxm", "--layout", "4g.40gb,2g.20gb")
    assert "free: 1 compute slice, memory slot" in one.stdout  # one slice, one slot: singular


def test_a100_80gb_memory_reads_from_the_catalogue():
    """The issue saw memory_gib: null for 3g.40gb; the table and the YAML now carry the lgip figure."""
    for name in ("3g.40gb", "4g.40gb", "7g.80gb"):
        expected = raw_profile("a100-80gb", name)["memory_gib"]
        assert expected is not None
        r = invoke("plan", "--gpu", "a100-80gb", "--layout", name)
        assert r.exit_code == 0, r.output
        _, rows, _ = parse_table(r.stdout)
        assert float(rows[0]["GiB"]) == expected
        doc = yaml.safe_load(invoke("plan", "--gpu", "a100-80gb", "--layout", name, "--format", "yaml").stdout)
        assert doc["instances"][0]["memory_gib"] == expected


def test_plan_marks_what_the_catalogue_lacks():
    missing = [p for p in RAW["b200-180gb"]["profiles"] if p["memory_gib"] is None and p["id"] is None]
    assert missing, "b200-180gb has every figure now: pick another profile set for this test"
    r = invoke("plan", "--gpu", "b200", "--layout", missing[0]["name"])
    assert r.exit_code == 0, r.output
    _, rows, rest = parse_table(r.stdout)
    assert (rows[0]["id"], rows[0]["GiB"]) == ("?", "?")
    assert any(line.startswith("?: not in compat/mig.yaml") for line in rest)


def test_plan_markdown():
    r = invoke("plan", "--gpu", "h100-sxm", "--layout", "3g.40gb,2g.20gb,2x1g.10gb", "--format", "markdown")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    table = [line for line in lines if line.startswith("|")]
    assert table[0] == "| start | profile | id | GiB | compute slices | SMs | memory slots | map |"
    assert len(table) == 2 + 4
    assert "| 4 | 3g.40gb | 9 | 39.50 | 3 | 60 | 4-7 | `....####` |" in table
    assert any(line.startswith("compute slices 7/7 used") for line in lines)


def test_yaml_and_json_keep_config_and_vars_and_files_are_written_as_before(tmp_path):
    for fmt, load in (("yaml", yaml.safe_load), ("json", json.loads)):
        doc = load(invoke("plan", "--gpu", "h100-sxm", "--layout", "3g.40gb", "--format", fmt).stdout)
        assert doc["mig_parted"]["version"] == "v1"
        assert doc["ansible_vars"]["provision_mig_enabled"] is True
    config, vars_file = tmp_path / "c.yaml", tmp_path / "v.yml"
    r = invoke(
        "plan", "--gpu", "h100-sxm", "--layout", "3g.40gb", "--out-config", str(config), "--out-vars", str(vars_file)
    )
    assert r.exit_code == 0, r.output
    assert parse_table(r.stdout)[1][0]["profile"] == "3g.40gb"  # the table on stdout, the files beside it
    assert yaml.safe_load(config.read_text())["mig-configs"]
    assert "provision_mig_config" in vars_file.read_text()


def test_every_line_fits_100_columns_and_narrow_terminals_get_blocks(real_matrix, sets):
    for gpu in planner.mig_capable(real_matrix):
        _, ps, _ = planner.gpu_profile_set(real_matrix, gpu)
        plain = sg.plain_profiles(ps)
        for fill in plain:
            r = invoke("plan", "--gpu", gpu, "--fill", fill.name)
            assert r.exit_code == 0, r.output
            assert max(map(len, r.stdout.splitlines())) <= 100, (gpu, fill.name, r.stdout)
        for n in range(1, ps.compute_slices + 1):
            r = invoke("suggest", "--gpu", gpu, "--services", str(n), "--top", "50")
            assert r.exit_code == 0, r.output
            assert max(map(len, r.stdout.splitlines())) <= 100, (gpu, n, r.stdout)
    layout = "3g.40gb,2g.20gb,2x1g.10gb"
    r = invoke("plan", "--gpu", "h100-sxm", "--layout", layout, columns=40)
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 40
    assert "-----" not in r.stdout  # blocks, not a table
    assert lines[lines.index("start: 4") + 1].split() == ["profile:", "3g.40gb"]  # one block per row
    words = r.stdout.split()
    for token in ("3g.40gb,2g.20gb,2x1g.10gb", "h100-sxm5-80gb)", "....####", "--format", "yaml|json,"):
        assert token in words, token  # never split across lines
    assert ["SMs:", "60"] in [line.split() for line in lines]  # a header stays with its value
    r = invoke("suggest", "--gpu", "h100-sxm", "--services", "3", columns=40)
    lines = r.stdout.splitlines()
    commands = [line for line in lines if line.startswith("  provision ")]
    assert commands
    assert all(len(line) <= 40 for line in lines if line not in commands)
    best = sg.suggest(sets["h100-sxm5-80gb"], 3).ranked[0].layout
    assert f"  provision mig plan --gpu h100-sxm --layout {best}" in commands  # a command is never wrapped


def test_terminal_width_falls_back_to_100(monkeypatch):
    from provision.cli.mig import terminal_width

    monkeypatch.setenv("COLUMNS", "72")
    assert terminal_width() == 72
    for bad in ("", "0", "wide", "-5"):
        monkeypatch.setenv("COLUMNS", bad)
        assert terminal_width() == 100  # pytest's stdout is no terminal


# -- mig suggest: an independent oracle ------------------------------------------------------------


def _naive_ok(ps, chosen):
    occupied = [s for p, start in chosen for s in range(start, start + p.memory_slices)]
    return (
        all(start in p.placements and start + p.memory_slices <= ps.memory_slices for p, start in chosen)
        and len(occupied) == len(set(occupied))
        and sum(p.compute_slices for p, _ in chosen) <= ps.compute_slices
        and all(n <= p.max_instances for p, n in Counter(p for p, _ in chosen).items())
    )


def oracle_layouts(ps, profiles):
    """Every valid multiset of ``profiles`` (one instance or none starting at each slot)."""
    options = [[None, *(p for p in profiles if s in p.placements)] for s in range(ps.memory_slices)]
    out = set()
    for choice in product(*options):
        chosen = [(p, s) for s, p in enumerate(choice) if p is not None]
        if chosen and _naive_ok(ps, chosen):
            out.add(frozenset(Counter(p.name for p, _ in chosen).items()))
    return out


@pytest.fixture(scope="module")
def oracle(sets):
    plain = {
        sid: tuple(p for p in ps.profiles if not p.media and "+" not in p.name and "-" not in p.name)
        for sid, ps in sets.items()
    }
    return {sid: (plain[sid], oracle_layouts(sets[sid], plain[sid])) for sid in sets}


def _size(layout):
    return sum(n for _, n in layout)


def _floors(ps):
    values = sorted({p.memory_gib for p in ps.profiles if p.memory_gib is not None})
    return [None, *values, *(v + 0.01 for v in values)]


def rank_key(ps, by_name, lay):
    """The ranking the brief asks for: fewest unused compute slices, the largest smallest
    instance (memory slots), the least spread of compute slices."""
    profiles = [by_name[name] for name, k in lay for _ in range(k)]
    compute = [p.compute_slices for p in profiles]
    return (ps.compute_slices - sum(compute), -min(p.memory_slices for p in profiles), max(compute) - min(compute))


def test_suggestions_are_exactly_the_oracle_layouts_in_rank_order(sets, oracle):
    for sid, ps in sets.items():
        plain, valid = oracle[sid]
        by_name = {p.name: p for p in plain}
        for floor_gib in _floors(ps):
            floor = None if floor_gib is None else sg.MemoryFloor(floor_gib, f"{floor_gib} GiB")
            for n in range(1, ps.compute_slices + 2):
                want = {
                    lay
                    for lay in valid
                    if _size(lay) == n
                    and all(floor is None or (by_name[name].memory_gib or 0) >= floor.gib for name, _ in lay)
                    and all(floor is None or by_name[name].memory_gib is not None for name, _ in lay)
                }
                result = sg.suggest(ps, n, floor)
                got = [frozenset(Counter(p.name for p in s.profiles).items()) for s in result.ranked]
                assert len(got) == len(set(got))
                assert set(got) == want, (sid, n, floor_gib)

                keys = [rank_key(ps, by_name, lay) for lay in got]
                assert keys == sorted(keys), (sid, n, floor_gib)


def test_a_compute_slice_sum_would_suggest_what_does_not_fit(sets):
    """3g.40gb,3g.40gb,1g.10gb adds up to the H100's 7 compute slices (no compute slice left: it
    would rank first) but needs 9 of its 8 memory slots: it is never suggested."""
    ps = sets["h100-sxm5-80gb"]
    bad = [ps.profile("3g.40gb"), ps.profile("3g.40gb"), ps.profile("1g.10gb")]
    assert sum(p.compute_slices for p in bad) == ps.compute_slices
    assert not planner.fits(ps, bad)
    layouts = [s.layout for s in sg.suggest(ps, 3).ranked]
    assert "2x3g.40gb,1g.10gb" not in layouts
    assert layouts[0] == "3g.40gb,2x2g.20gb"  # 3+2+2 compute slices, 4+2+2 memory slots


def test_suggest_a100_40gb():
    r = invoke("suggest", "--gpu", "a100-40gb", "--services", "3")
    assert r.exit_code == 0, r.output
    headers, rows, rest = parse_table(r.stdout)
    assert headers == ["#", "--layout", "GiB each", "compute slices", "memory slots"]
    assert rows[0]["--layout"] == "3g.20gb,2x2g.10gb"
    gib = [raw_profile("a100-40gb", n)["memory_gib"] for n in ("3g.20gb", "2g.10gb")]
    assert rows[0]["GiB each"] == f"{gib[0]:.2f}, 2x {gib[1]:.2f}"
    assert rows[0]["compute slices"] == "7/7"
    assert "  provision mig plan --gpu a100-40gb --layout 3g.20gb,2x2g.10gb" in rest
    assert "  provision plan --os OS --gpu a100-40gb --mig 3g.20gb,2x2g.10gb" in rest
    # 4 services of 10 GiB: the 2g.10gb has 9.62 GiB, so only the 3g.20gb pair qualifies
    refused = invoke("suggest", "--gpu", "a100-40gb", "--services", "4", "--min-memory", "10")
    assert isinstance(refused.exception, InputError)
    assert refused.exception.exit_code == 2
    small = raw_profile("a100-40gb", "2g.10gb")["memory_gib"]
    assert refused.exception.hint == (
        f"2 instances of at least 10 GiB fit (--services 2); or 4 instances fit with up to {small:g} GiB each "
        f"(--min-memory {small:g})"
    )


def test_suggest_h100_min_memory_units():
    """20GB is 10^9 bytes (18.63 GiB): the 20gb profiles (19.62 GiB) qualify; 20 (GiB) they do not."""
    si = invoke("suggest", "--gpu", "h100-sxm", "--services", "2", "--min-memory", "20GB", "--top", "50")
    assert si.exit_code == 0, si.output
    assert "of at least 20 GB (18.63 GiB) each" in si.stdout.splitlines()[0]
    _, rows, _ = parse_table(si.stdout)
    assert rows[0]["--layout"] == "4g.40gb,3g.40gb"
    assert any("2g.20gb" in row["--layout"] for row in rows)
    binary = invoke("suggest", "--gpu", "h100-sxm", "--services", "2", "--min-memory", "20GiB", "--top", "50")
    _, rows, _ = parse_table(binary.stdout)
    assert not any("20gb" in row["--layout"] for row in rows)
    assert all(float(g.split()[-1]) >= 20 for row in rows for g in row["GiB each"].split(", "))


def test_suggest_rtx_pro_6000_twelve_slot_grid():
    """RTX PRO 6000 Blackwell SE: 4 compute slices over a 12-unit memory grid (a 1g takes 3 units
    at 0/3/6/9, a 2g 6 at 0/6): read as 8 memory slots, 2g.48gb,2x1g.24gb (12 units) would not fit."""
    raw = RAW["rtx-pro-6000-96gb"]
    assert (raw["memory_slices"], raw["compute_slices"]) == (12, 4)
    r = invoke("suggest", "--gpu", "rtx-pro-6000-blackwell-se", "--services", "3")
    assert r.exit_code == 0, r.output
    _, rows, _ = parse_table(r.stdout)
    assert [row["--layout"] for row in rows] == ["2g.48gb,2x1g.24gb", "3x1g.24gb"]
    assert [row["memory slots"] for row in rows] == ["12/12", "9/12"]
    assert [row["compute slices"] for row in rows] == ["4/4", "3/4"]
    r = invoke("suggest", "--gpu", "rtx-pro-6000-blackwell-se", "--services", "2")
    assert parse_table(r.stdout)[1][0]["--layout"] == "2x2g.48gb"
    four = invoke("suggest", "--gpu", "rtx-pro-6000-blackwell-se", "--services", "4")
    assert [row["--layout"] for row in parse_table(four.stdout)[1]] == ["4x1g.24gb"]
    five = invoke("suggest", "--gpu", "rtx-pro-6000-blackwell-se", "--services", "5")
    assert five.exception.hint == "rtx-pro-6000-blackwell-se holds at most 4 instances (--services 4)"
    big = invoke("suggest", "--gpu", "rtx-pro-6000-blackwell-se", "--services", "3", "--min-memory", "30")
    one_g = raw_profile("rtx-pro-6000-96gb", "1g.24gb")["memory_gib"]
    assert big.exception.hint == (
        f"2 instances of at least 30 GiB fit (--services 2); or 3 instances fit with up to {one_g:g} GiB each "
        f"(--min-memory {one_g:g})"
    )


def test_suggest_markdown_and_json():
    md = invoke("suggest", "--gpu", "h100-sxm", "--services", "2", "--format", "markdown")
    assert md.exit_code == 0, md.output
    assert "| 1 | `4g.40gb,3g.40gb` |" in md.stdout
    assert "```\nprovision mig plan --gpu h100-sxm --layout 4g.40gb,3g.40gb\n" in md.stdout
    doc = json.loads(invoke("suggest", "--gpu", "h100-sxm", "--services", "2", "--format", "json", "--top", "2").stdout)
    assert doc["profile_set"] == "h100-sxm5-80gb"
    assert [s["rank"] for s in doc["suggestions"]] == [1, 2]
    assert doc["suggestions"][0]["layout"] == "4g.40gb,3g.40gb"
    assert doc["valid_layouts"] > 2
    first = doc["suggestions"][0]
    assert sorted(i["placement"] for i in first["instances"]) == [0, 4]
    assert first["mig_plan"] == "provision mig plan --gpu h100-sxm --layout 4g.40gb,3g.40gb"


def test_profiles_without_a_catalogued_memory_are_left_out_and_said_so():
    unknown = [p["name"] for p in RAW["b200-180gb"]["profiles"] if p["memory_gib"] is None and "+" not in p["name"]]
    assert unknown
    r = invoke("suggest", "--gpu", "b200", "--services", "1", "--min-memory", "1", "--top", "50")
    assert r.exit_code == 0, r.output
    assert not any(row["--layout"] in unknown for row in parse_table(r.stdout)[1])
    assert "not considered with --min-memory: " + ", ".join(unknown) in " ".join(r.stdout.split())
    r = invoke("suggest", "--gpu", "b200", "--services", "1", "--top", "50")  # no floor: all of them
    assert {row["--layout"] for row in parse_table(r.stdout)[1]} >= set(unknown)
    assert "?" in r.stdout


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["20TB", "abc", "-5", "1e3", "20 G B", "", "nan", "inf", "20MB", "2O"])
def test_min_memory_refused(text):
    with pytest.raises(InputError, match="is not a memory size") as exc:
        sg.parse_memory(text)
    assert exc.value.hint.startswith("give the memory each instance needs")


@pytest.mark.parametrize(
    ("text", "gib"),
    [
        ("20GB", 20e9 / 2**30),
        ("20gb", 20e9 / 2**30),
        ("20 GB", 20e9 / 2**30),
        ("20G", 20),
        ("20GiB", 20),
        ("20Gi", 20),
        ("20", 20),
        ("19.5", 19.5),
        (" 40gib ", 40),
    ],
)
def test_min_memory_accepted(text, gib):
    assert sg.parse_memory(text).gib == pytest.approx(gib)


def test_refusals_through_main(capsys, real_matrix):
    """exit 2, one error line and a hint, no traceback."""
    cases = {
        ("--gpu", "t4", "--services", "2"): ["error: t4 has no MIG", "hint: MIG-capable GPUs: "],
        ("--gpu", "h100-sxm", "--services", "2", "--min-memory", "lots"): [
            "error: --min-memory 'lots' is not a memory size",
            "hint: give the memory",
        ],
        ("--gpu", "h100-sxm", "--services", "0"): ["error: Invalid value for '--services'", "hint: see "],
        ("--gpu", "h100-sxm", "--services", "2", "--min-memory", "0"): [
            "error: --min-memory '0' asks for no memory",
            "hint: leave --min-memory out",
        ],
        ("--gpu", "h100-sxm", "--services", "8"): [
            "error: no MIG layout of h100-sxm (h100-sxm5-80gb) gives 8 instances",
            "hint: h100-sxm holds at most 7 instances (--services 7)",
        ],
    }
    for args, expected in cases.items():
        assert main(["mig", "suggest", *args]) == 2, args
        err = capsys.readouterr().err.splitlines()
        assert "Traceback" not in "\n".join(err)
        assert len(err) == 2, err
        assert all(line.startswith(want) for line, want in zip(err, expected, strict=True)), err


def test_refusal_names_the_largest_n_and_memory(sets, oracle):
    """The hint's figures are the oracle's: the most instances of the asked memory, and the most
    memory the asked number of instances can each have."""
    for sid in ("a100-40gb", "h100-sxm5-80gb", "rtx-pro-6000-96gb"):
        ps = sets[sid]
        plain, valid = oracle[sid]
        by_name = {p.name: p for p in plain}
        for floor_gib in sorted({p.memory_gib for p in plain}):
            floor = sg.MemoryFloor(floor_gib + 0.01, f"{floor_gib + 0.01:g} GiB")
            fitting = [lay for lay in valid if all(by_name[n].memory_gib >= floor.gib for n, _ in lay)]
            most = max((_size(lay) for lay in fitting), default=0)
            n = most + 1
            if n > ps.compute_slices:
                continue
            result = sg.suggest(ps, n, floor)
            assert not result.ranked
            hint = sg.refusal(result, sid).hint
            if most:
                assert f"(--services {most})" in hint
            best = max(min(by_name[name].memory_gib for name, _ in lay) for lay in valid if _size(lay) == n)
            assert f"(--min-memory {best:g})" in hint


def test_singular_wording():
    one = invoke("suggest", "--gpu", "h100-sxm", "--services", "1")
    assert one.stdout.splitlines()[0].endswith(": 1 instance")
    refused = invoke("suggest", "--gpu", "h100-sxm", "--services", "2", "--min-memory", "60")
    assert refused.exception.hint.startswith("1 instance of at least 60 GiB fits (--services 1); or 2 instances fit")
    alone = invoke("suggest", "--gpu", "h100-sxm", "--services", "1", "--min-memory", "100")
    assert alone.exception.message.endswith("gives 1 instance of at least 100 GiB")
    assert alone.exception.hint.startswith("1 instance fits with up to ")
    for r in (one,):
        assert "1 instances" not in r.output


# -- the property: every suggestion is a layout `mig plan` accepts ---------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_suggestion_is_accepted_by_mig_plan(real_matrix, data):
    gpu = data.draw(st.sampled_from(planner.mig_capable(real_matrix)), label="gpu")
    _, ps, _ = planner.gpu_profile_set(real_matrix, gpu)
    n = data.draw(st.integers(1, ps.compute_slices), label="services")
    gibs = sorted({p.memory_gib for p in ps.profiles if p.memory_gib is not None})
    floor_text = data.draw(
        st.one_of(
            st.none(),
            st.sampled_from([f"{g:g}" for g in gibs] or ["1"]),
            st.integers(1, 150).map(lambda v: f"{v}GB"),
            st.integers(1, 150).map(lambda v: f"{v}GiB"),
        ),
        label="min_memory",
    )
    floor = None if floor_text is None else sg.parse_memory(floor_text)
    result = sg.suggest(ps, n, floor)
    for s in result.ranked:  # the library path `mig plan` takes, for every layout
        plan = planner.plan_layout(ps, s.layout, gpu=gpu)
        assert len(plan.instances) == n
        assert floor is None or all(i.profile.memory_gib >= floor.gib for i in plan.instances)
    args = ["suggest", "--gpu", gpu, "--services", str(n), "--format", "json"]
    r = invoke(*args, *(["--min-memory", floor_text] if floor_text else []))
    if not result.ranked:
        assert isinstance(r.exception, InputError)
        assert r.exception.exit_code == 2
        return
    for s in json.loads(r.stdout)["suggestions"]:  # and the command itself, for what is printed
        planned = invoke("plan", "--gpu", gpu, "--layout", s["layout"], "--format", "json")
        assert planned.exit_code == 0, planned.output
        instances = json.loads(planned.stdout)["instances"]
        assert len(instances) == n
        assert Counter(i["profile"] for i in instances) == Counter(i["profile"] for i in s["instances"])
        assert floor is None or all(i["memory_gib"] >= floor.gib for i in instances)


def test_suggest_notes_placements_not_captured_on_that_gpu():
    unconfirmed = invoke("suggest", "--gpu", "b200", "--services", "2")
    assert unconfirmed.exit_code == 0, unconfirmed.output
    assert RAW["b200-180gb"]["placements_confirmed"] is False
    assert unconfirmed.stderr.startswith("note: placements for b200-180gb come from the same die family")
    confirmed = invoke("suggest", "--gpu", "h100-sxm", "--services", "2")
    assert RAW["h100-sxm5-80gb"]["placements_confirmed"] is True
    assert confirmed.stderr == ""
