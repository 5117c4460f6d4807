"""What a new user reads: refusals summarised (--explain for every candidate), suggestions only
among listed ids, hints that name the command's own flags, legends under tables."""

import json

import pytest

from provision.errors import InputError, NoCompatibleStack
from provision.matrix.suggest import close_ids, did_you_mean
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve


def details(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("  ")]


# -- an impossible pin is summarised; --explain lists every candidate ------------------------
def test_impossible_cudnn_pin_is_summarised(cli, fixture_compat, fixture_matrix):
    argv = ("--compat-dir", str(fixture_compat), "plan", "--os", "ubuntu22.04", "--gpu", "a100-pcie-80gb")
    with pytest.raises(NoCompatibleStack) as info:
        resolve(fixture_matrix, PlanRequest(os="ubuntu22.04", gpu="a100-pcie-80gb", cudnn="7"))
    every = info.value.eliminations
    assert len(every) > 10, "the fixture refusal tries many candidates"

    r = cli(*argv, "--cudnn", "7")
    assert r.code == 2, r
    assert r.out == ""
    lines = details(r.err)
    assert len(lines) <= 6, r.err
    assert lines[0].startswith(
        "  --cudnn 7: no nvidia/cuda image for ubuntu22.04 with a catalogued cuDNN carries it"
    ), lines
    assert "; no catalogued support matrix matches either" in lines[0]
    assert any(" stacks whose cuDNN does not match --cudnn 7, e.g. " in ln for ln in lines), lines
    assert any(ln.startswith("  not tried:") for ln in lines)
    assert lines[-1] == f"  ({len(every) - 1} candidates in all: provision plan … --explain lists each)"
    hint = r.err.splitlines()[-1]
    assert hint.startswith("hint: try --cudnn 9 (gives driver ")
    assert "drop --cudnn" in hint

    full = cli(*argv, "--cudnn", "7", "--explain")
    assert full.code == 2
    assert details(full.err) == [f"  {cand}: {why}" for cand, why in every]
    assert full.err.splitlines()[-1] == hint


def test_one_candidate_per_rule_is_shown_as_is(cli, fixture_compat):
    r = cli("--compat-dir", str(fixture_compat), "plan", "--os", "ubuntu22.04", "--gpu", "b200", "--driver", "535")
    assert r.code == 2, r
    lines = details(r.err)
    assert lines == ["  R535: predates Blackwell support (first branch R570)"]
    assert "--explain" not in r.err


def test_the_summary_is_short_for_every_catalogued_refusal(fixture_matrix):
    """Over many refusals: a line per rule at most, plus pin facts, not-tried and the pointer to --explain."""
    seen = 0
    for os_rel in fixture_matrix.os_releases:
        for gpu in fixture_matrix.gpu_ids():
            for pins in ({"cudnn": "7"}, {"cuda": "11.8"}, {"driver": "535"}, {"framework": "pytorch==2.5.1"}):
                try:
                    resolve(fixture_matrix, PlanRequest(os=os_rel.id, gpu=gpu, **pins), suggest=False)
                except NoCompatibleStack as exc:
                    if exc.kinds == {"declared-unsupported"}:
                        continue
                    seen += 1
                    assert exc.summary, exc.message
                    assert len(exc.summary) <= len(exc.kinds) + 3, exc.summary
                    assert len(exc.summary) <= len(exc.eliminations) + 1
                except InputError:  # an unknown pin of this catalogue, a group of different GPUs: not refusals
                    continue
    assert seen >= 5


def test_on_the_fly_plans_of_other_commands_are_summarised(cli, fixture_compat, tmp_path):
    r = cli(
        "--compat-dir",
        str(fixture_compat),
        "render",
        "--os",
        "ubuntu22.04",
        "--gpu",
        "a100-pcie-80gb",
        "--cudnn",
        "7",
        "--out",
        str(tmp_path / "ctx"),
    )
    assert r.code == 2, r
    assert len(details(r.err)) <= 6, r.err
    assert "--explain lists each" in r.err


# -- suggestions: listed ids only, prefix and substring before similarity --------------------
NAMES = {
    "a100-pcie": "a100-pcie",
    "a100-sxm4-80gb": "a100-sxm4-80gb",
    "v100": "v100",
    "v100-pcie-32gb": "v100-pcie-32gb",
    "v100-pcie": "v100-pcie-32gb",  # an alias: matched, never shown
    "b200": "b200",
    "hgx-b200": "b200",
    "rtx-4090": "rtx-4090",
    "geforce-rtx-4090": "rtx-4090",
}


@pytest.mark.parametrize(
    ("typed", "first", "absent"),
    [
        ("a100", "a100-pcie", "v100"),
        ("A100_PCIE", "a100-pcie", "v100"),
        ("v100pcie", "v100-pcie-32gb", "v100-pcie"),
        ("4090", "rtx-4090", "geforce-rtx-4090"),
        ("geforce-4090", "rtx-4090", "geforce-rtx-4090"),
        ("hgx-b20", "b200", "hgx-b200"),
        ("b100", "b200", "hgx-b200"),
    ],
)
def test_close_ids_rank_and_only_listed_ids(typed, first, absent):
    shown, _ = close_ids(typed, NAMES)
    assert shown[0] == first, shown
    assert absent not in shown
    assert set(shown) <= set(NAMES.values())


def test_close_ids_counts_what_it_leaves_out():
    names = [f"a100-{x}" for x in ("pcie", "80gb", "40gb", "sxm4-80gb", "sxm4-40gb")] + ["v100"]
    shown, more = close_ids("a100", names)
    assert shown == ["a100-pcie", "a100-80gb", "a100-40gb"]
    assert more == 2
    assert "(2 more match; list: provision matrix gpus)" in did_you_mean("a100", names, "provision matrix gpus")
    assert close_ids("centos", ["rocky9", "ubuntu22.04"]) == ([], 0)
    assert did_you_mean("centos", ["rocky9"], "provision matrix os") == "list: provision matrix os"


def test_cli_suggests_only_what_the_listings_show(cli):
    gpus = {g["id"] for g in json.loads(cli("matrix", "gpus", "--format", "json").out)}
    oses = {o["id"] for o in json.loads(cli("matrix", "os", "--format", "json").out)}
    for typed in ("a100", "h100", "rtx4090", "geforce-4090", "hgx-b20", "b100", "a100-pice"):
        r = cli("plan", "--os", "rocky9", "--gpu", typed)
        assert r.code == 2, r
        hint = r.err.splitlines()[-1]
        assert hint.startswith("hint: did you mean "), hint
        shown = hint.removeprefix("hint: did you mean ").split("?")[0].split(" or ")
        assert set(shown) <= gpus, (typed, shown)
        if typed in ("a100", "h100"):
            assert all(s.startswith(typed) for s in shown), shown
    for typed in ("rocky", "ubuntu_22.04", "el7", "jammy2"):  # el8, el9, el10: aliases of rocky8/9/10
        hint = cli("plan", "--os", typed, "--gpu", "a100-pcie").err.splitlines()[-1]
        shown = hint.removeprefix("hint: did you mean ").split("?")[0].split(" or ")
        assert set(shown) <= oses, (typed, shown)


def test_mig_profile_suggestion(cli):
    r = cli("mig", "plan", "--gpu", "a100-40gb", "--layout", "3g.20")
    assert r.code == 2
    assert r.err.splitlines()[-1].startswith("hint: did you mean 3g.20gb? ")


# -- hints name the flags of the command that was run ----------------------------------------
@pytest.mark.parametrize(
    ("layout", "text"),
    [
        ("4g.40gb,4g.40gb", "try --mig 4g.40gb"),
        ("3g.40gb,,1g.10gb", "single commas: --mig "),
        (" ", "e.g. --mig "),
    ],
)
def test_plan_mig_hints_name_plan_flags(cli, layout, text):
    r = cli("plan", "--os", "rocky9", "--gpu", "a100-80gb", "--mig", layout)
    assert r.code == 2, r
    assert text in r.err
    assert "--layout" not in r.err
    assert "--fill" not in r.err


def test_mig_plan_hints_name_mig_plan_flags(cli):
    r = cli("mig", "plan", "--gpu", "a100-80gb", "--layout", "4g.40gb,4g.40gb")
    assert r.code == 2, r
    assert "fits: --layout 4g.40gb" in r.err
    assert r.err.splitlines()[-1] == "hint: try --layout 4g.40gb and --fill PROFILE to pack what is left"
    assert "--mig" not in r.err


# -- legends under tables, for the markers they show -----------------------------------------
def test_plan_table_legend(cli, fixture_compat):
    for driver in ("580", "595"):
        argv = ("--compat-dir", str(fixture_compat), "plan", "--os", "ubuntu22.04", "--gpu", "a100-pcie-80gb")
        doc = json.loads(cli(*argv, "--driver", driver, "--format", "json").out)
        kind = doc["driver"]["branch_type"]
        out = cli(*argv, "--driver", driver).out
        assert f"({kind})," in out
        legend = [ln for ln in out.splitlines() if ln.startswith(f"({kind}) = ")]
        assert len(legend) == 1, out
        assert "branch" in legend[0]


def test_driver_listing_legend_explains_what_it_shows(cli, fixture_compat, tmp_path):
    from support import make_compat

    records = json.loads(cli("--compat-dir", str(fixture_compat), "matrix", "drivers", "--format", "json").out)
    out = cli("--compat-dir", str(fixture_compat), "matrix", "drivers").out
    legend = next(ln for ln in out.splitlines() if ln.startswith("type: "))
    assert {part.split(" = ")[0] for part in legend.removeprefix("type: ").split(", ")} == {r["type"] for r in records}
    assert "EOL listed" not in out, "no branch of the fixture is listed without a date"
    compat = make_compat(tmp_path / "compat")
    text = (compat / "drivers.yaml").read_text()
    text = text.replace(
        '{branch: "535", type: ltsb, eol: "2026-06", eol_listed: null',
        '{branch: "535", type: ltsb, eol: null, eol_listed: "2026-06-01"',
    )
    (compat / "drivers.yaml").write_text(text)
    listed = cli("--compat-dir", str(compat), "matrix", "drivers")
    assert listed.code == 0, listed
    assert "EOL listed: " in listed.out
    md = cli("--compat-dir", str(compat), "matrix", "drivers", "--format", "markdown").out
    assert "\nEOL listed: " in md


def test_listings_without_markers_have_no_legend(cli, fixture_compat):
    out = cli("--compat-dir", str(fixture_compat), "matrix", "cuda").out
    assert not [ln for ln in out.splitlines() if " = " in ln or ln.startswith("(")]
    gpus = cli("--compat-dir", str(fixture_compat), "matrix", "gpus").out
    assert gpus.count("(group): ") == 1


@pytest.mark.parametrize(
    ("gpu", "pin", "first"),
    [
        ("a100-pcie-80gb", "9.17", "  --cudnn 9.17: no nvidia/cuda image for ubuntu22.04 with a catalogued cuDNN"),
        ("v100-pcie", "9.12", "  6 stacks whose cuDNN does not match --cudnn 9.12, e.g. "),
    ],
)
def test_pin_facts_only_when_no_image_carries_the_pin(cli, fixture_compat, gpu, pin, first):
    """9.17 has a support matrix but no image; 9.12 is in an image, so the rules below say the rest."""
    r = cli("--compat-dir", str(fixture_compat), "plan", "--os", "ubuntu22.04", "--gpu", gpu, "--cudnn", pin)
    assert r.code == 2, r
    assert details(r.err)[0].startswith(first), r.err
    if pin == "9.17":
        assert details(r.err)[0].endswith("the catalogue's support matrices list 9.17.0")
