"""The MIG layout planner (provision/mig/, `provision mig plan`).

The exhaustive test checks the planner against an independent, naive oracle: every way of
putting one instance (or none) at each memory slot, with no pruning, kept when the
instances do not overlap and stay within the compute slices, instance limits and the one
media instance. The multisets those arrangements realise are exactly the valid layouts.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from itertools import product

import pytest
import yaml
from click.testing import CliRunner

from provision.cli.mig import mig_group
from provision.errors import InputError
from provision.mig import parted
from provision.mig import planner as mig

EXHAUSTIVE_SETS = ("a100-40gb", "a100-80gb", "h100-sxm5-80gb")


# -- the independent oracle -------------------------------------------------------------------


def _naive_ok(profile_set, chosen):
    """chosen: (profile, start) pairs. The model's rules, checked literally."""
    occupied = []
    for p, s in chosen:
        if s not in p.placements or s + p.memory_slices > profile_set.memory_slices:
            return False
        occupied.extend(range(s, s + p.memory_slices))
    if len(occupied) != len(set(occupied)):
        return False
    if sum(p.compute_slices for p, _ in chosen) > profile_set.compute_slices:
        return False
    counts = Counter(p.name for p, _ in chosen)
    if any(counts[p.name] > p.max_instances for p in profile_set.profiles):
        return False
    return sum(1 for p, _ in chosen if p.media) <= 1


def oracle_valid(profile_set):
    """Every valid layout as a count vector over profile_set.profiles.

    Two instances never share a start slot, so each arrangement is one choice per slot of
    "nothing" or "an instance of P starts here"; all such choices are tried (itertools.product).
    """
    options = [
        [None, *(p for p in profile_set.profiles if s in p.placements)] for s in range(profile_set.memory_slices)
    ]
    valid = set()
    for choice in product(*options):
        chosen = [(p, s) for s, p in enumerate(choice) if p is not None]
        if chosen and _naive_ok(profile_set, chosen):
            valid.add(tuple(sum(1 for p, _ in chosen if p == q) for q in profile_set.profiles))
    return valid


def oracle_by_instances(profile_set, profiles):
    """A second naive oracle: every start for every instance (itertools.product), no pruning."""
    return any(
        _naive_ok(profile_set, list(zip(profiles, starts, strict=True)))
        for starts in product(*(p.placements for p in profiles))
    )


def expand(profile_set, vec):
    return [p for p, n in zip(profile_set.profiles, vec, strict=True) for _ in range(n)]


def assert_arrangement(profile_set, plan, wanted):
    assert Counter(i.profile.name for i in plan.instances) == Counter(p.name for p in wanted)
    slots = [s for i in plan.instances for s in i.slots]
    assert len(slots) == len(set(slots))
    assert all(i.start in i.profile.placements and i.end <= profile_set.memory_slices for i in plan.instances)
    assert plan.compute_used <= profile_set.compute_slices


@pytest.fixture(scope="module")
def sets(real_matrix):
    return {s.id: s for s in real_matrix.mig}


# -- exhaustive ---------------------------------------------------------------------------------


@pytest.mark.parametrize("set_id", EXHAUSTIVE_SETS)
def test_exhaustive_against_brute_force(sets, set_id):
    ps = sets[set_id]
    t0 = time.perf_counter()
    valid = oracle_valid(ps)
    checked = accepted = compute_sum_only = both_sums = within_compute = 0
    # every multiset of the set's profiles with at most 3 compute slices too many: all that
    # could fit, and a band that limits, media and compute slices must refuse
    budget = ps.compute_slices + 3
    for vec in product(*(range(budget // p.compute_slices + 1) for p in ps.profiles)):
        profiles = expand(ps, vec)
        compute = sum(p.compute_slices for p in profiles)
        if not profiles or compute > budget:
            continue
        checked += 1
        within_compute += compute <= ps.compute_slices
        if len(profiles) <= 4:  # the two oracles agree where the second is cheap
            assert oracle_by_instances(ps, profiles) == (vec in valid), vec
        try:
            plan, refused = mig.plan_layout(ps, profiles), None
        except mig.MigLayoutError as exc:
            plan, refused = None, exc
        if plan is not None:
            assert vec in valid, f"planner accepted an invalid layout {mig.layout_text(profiles)}"
            assert_arrangement(ps, plan, profiles)
            accepted += 1
            continue
        assert vec not in valid, f"planner refused a valid layout {mig.layout_text(profiles)}"
        assert refused.problems
        assert refused.completions
        for sub in refused.completions:  # every suggestion is a valid sub-layout of the request
            sub_vec = tuple(sub.count(p.name) for p in ps.profiles)
            assert sub_vec in valid
            assert all(a <= b for a, b in zip(sub_vec, vec, strict=True))
        within_limits = all(n <= p.max_instances for p, n in zip(ps.profiles, vec, strict=True))
        if compute <= ps.compute_slices and within_limits and sum(p.media for p in profiles) <= 1:
            # a naive check (compute-slice sum, instance limits, one media instance) accepts it
            compute_sum_only += 1
            assert any("finds no placement" in line for line in refused.problems), refused.problems
            if sum(p.memory_slices for p in profiles) <= ps.memory_slices:
                both_sums += 1
    assert accepted == len(valid)  # every valid layout lies inside the enumeration
    elapsed = time.perf_counter() - t0
    print(
        f"\n{set_id}: {checked} multisets checked ({within_compute} within {ps.compute_slices} compute slices), "
        f"{accepted} accepted, {checked - accepted} refused "
        f"({compute_sum_only} of them pass a compute-slice sum and limits, {both_sums} pass compute and "
        f"memory sums), {elapsed:.2f}s"
    )
    assert checked > 1000
    assert within_compute > 250
    assert accepted > 100
    assert compute_sum_only > 10


@pytest.mark.parametrize("set_id", EXHAUSTIVE_SETS)
def test_fill_is_maximal_for_every_valid_layout(sets, set_id):
    ps = sets[set_id]
    valid = oracle_valid(ps)
    for vec in sorted(valid):
        base = expand(ps, vec)
        for i, p in enumerate(ps.profiles):
            best = 0
            while tuple(n + (best + 1 if j == i else 0) for j, n in enumerate(vec)) in valid:
                best += 1
            plan = mig.plan_layout(ps, base, fill=p.name)
            assert plan.filled == best, (mig.layout_text(base), p.name)
            assert_arrangement(ps, plan, base + [p] * best)


# -- known layouts ----------------------------------------------------------------------------


def starts(plan):
    return sorted((i.profile.name, i.start) for i in plan.instances)


def test_known_valid_a100_40gb(sets):
    ps = sets["a100-40gb"]
    assert starts(mig.plan_layout(ps, "4g.20gb,3g.20gb")) == [("3g.20gb", 4), ("4g.20gb", 0)]
    assert starts(mig.plan_layout(ps, "3g.20gb,3g.20gb")) == [("3g.20gb", 0), ("3g.20gb", 4)]
    plan = mig.plan_layout(ps, "3g.20gb,2g.10gb,1g.5gb,1g.5gb")
    assert plan.compute_used == 7
    assert plan.memory_used == 8
    assert plan.free_slots == []
    plan = mig.plan_layout(ps, "4x1g.10gb")
    assert [i.start for i in plan.instances] == [6, 4, 2, 0]
    plan = mig.plan_layout(ps, "7g.40gb")
    assert plan.instances[0].start == 0
    assert plan.instances[0].profile.id == 0


def test_issue_example_needs_the_3g_at_slot_4(sets):
    """3g at 0 leaves 2g@4, 1g@6 and no start for the last 1g (slot 7); 3g at 4 fits all."""
    plan = mig.plan_layout(sets["h100-sxm5-80gb"], "3g.40gb,2g.20gb,1g.10gb,1g.10gb")
    assert [i.label for i in plan.instances] == ["3g.40gb@4", "2g.20gb@2", "1g.10gb@1", "1g.10gb@0"]
    assert plan.instances[0].to_dict()["memory_slots"] == [4, 5, 6, 7]


def test_refused_although_slices_sum_up(sets):
    """3g.20gb+2g.10gb+1g.10gb+1g.5gb is 7 compute slices, but 9 memory slots."""
    ps = sets["a100-40gb"]
    with pytest.raises(mig.MigLayoutError) as info:
        mig.plan_layout(ps, "3g.20gb,2g.10gb,1g.10gb,1g.5gb")
    exc = info.value
    assert exc.exit_code == 2
    assert "does not fit on a100-40gb" in exc.message
    assert any(line.startswith("memory slices: 4+2+2+1 = 9") for line in exc.problems)
    assert any("finds no placement" in line for line in exc.problems)
    assert exc.completions[0] == ("3g.20gb", "2g.10gb", "1g.10gb")  # keeps 3 of 4, most compute


def test_invalid_with_valid_slice_sum_found_by_search_is_explained(sets):
    ps = sets["a100-80gb"]
    valid = oracle_valid(ps)
    candidates = [
        vec
        for vec in product(*(range(p.max_instances + 1) for p in ps.profiles))
        if vec not in valid
        and any(vec)
        and sum(p.compute_slices * n for p, n in zip(ps.profiles, vec, strict=True)) <= ps.compute_slices
        and sum(n for p, n in zip(ps.profiles, vec, strict=True) if p.media) <= 1
    ]
    assert candidates
    vec = min(candidates, key=lambda v: (sum(v), v))
    with pytest.raises(mig.MigLayoutError) as info:
        mig.plan_layout(ps, expand(ps, vec))
    text = "\n".join(info.value.details)
    assert "finds no placement" in text
    assert "overlap" in text
    assert "fits: --layout" in text


def test_placement_only_failure_names_the_blocked_instance(sets):
    """A made-up set where sums pass and placement alone fails: 1g.10gb only at {0,4}."""
    base = sets["a100-40gb"]
    profiles = tuple(p._replace(placements=(0, 4)) if p.name == "1g.10gb" else p for p in base.profiles)
    ps = base._replace(id="test-set", profiles=profiles)
    with pytest.raises(mig.MigLayoutError) as info:
        mig.plan_layout(ps, "2g.10gb,2g.10gb,1g.10gb,1g.10gb")  # 6 compute, 8 memory slices
    problems = info.value.problems
    assert not any(line.startswith(("memory slices", "compute slices")) for line in problems)
    # the 2g instances go first (2g@4, 2g@2), the first 1g.10gb takes 0, the second finds 0 and 4 taken
    assert problems[0] == (
        "1g.10gb #2 of 2 finds no placement: it may start at {0,4} (2 memory slots); "
        "start 0 overlaps 1g.10gb@0 (slots 0-1); start 4 overlaps 2g.10gb@4 (slots 4-5)"
    )
    assert problems[1] == "  free slots {6,7} hold no allowed 1g.10gb placement"
    assert "none of their 2 arrangements leaves room for it" in problems[2]
    assert info.value.completions[0] == ("2g.10gb", "2g.10gb", "1g.10gb")


def test_media_profile_limit(sets):
    ps = sets["a100-40gb"]
    plan = mig.plan_layout(ps, "1g.5gb+me,6x1g.5gb")
    assert len(plan.instances) == 7
    assert plan.devices() == {"1g.5gb+me": 1, "1g.5gb": 6}
    with pytest.raises(mig.MigLayoutError) as info:
        mig.plan_layout(ps, "1g.5gb+me,1g.5gb+me")
    assert info.value.completions == [("1g.5gb+me",)]
    assert mig.plan_layout(ps, "3g.20gb", fill="1g.5gb+me").filled == 1
    # two different media profiles: the one-media rule, not max_instances, refuses them
    extra = next(p for p in ps.profiles if p.name == "2g.10gb")._replace(
        name="2g.10gb+me", id=None, media=True, max_instances=1
    )
    ps2 = ps._replace(profiles=(*ps.profiles, extra))
    with pytest.raises(mig.MigLayoutError) as info:
        mig.plan_layout(ps2, "1g.5gb+me,2g.10gb+me")
    assert any("media instances" in line for line in info.value.problems)


def test_instance_limit_and_compute(sets):
    ps = sets["h100-sxm5-80gb"]
    with pytest.raises(mig.MigLayoutError) as info:
        mig.plan_layout(ps, "5x1g.20gb")
    assert info.value.problems == ["5x 1g.20gb: at most 4 on a GPU of h100-sxm5-80gb"]
    with pytest.raises(mig.MigLayoutError) as info:
        mig.plan_layout(ps, "4g.40gb,3g.40gb,1g.10gb")
    assert info.value.problems == ["compute slices: 4+3+1 = 8, the GPU has 7"]
    assert info.value.completions[0] == ("4g.40gb", "3g.40gb")


def test_fill(sets):
    ps = sets["a100-40gb"]
    plan = mig.plan_layout(ps, None, fill="1g.5gb")
    assert plan.filled == 7
    assert plan.request == ()
    assert plan.compute_used == 7
    assert mig.plan_layout(ps, "", fill="1g.10gb").filled == 4
    assert mig.plan_layout(ps, None, fill="2g.10gb").filled == 3
    assert mig.plan_layout(ps, None, fill="7g.40gb").filled == 1
    plan = mig.plan_layout(ps, "3g.20gb", fill="1g.5gb")
    assert plan.filled == 4
    assert plan.devices() == {"3g.20gb": 1, "1g.5gb": 4}
    plan = mig.plan_layout(ps, "4g.20gb", fill="3g.20gb")
    assert plan.filled == 1
    assert mig.plan_layout(ps, "7g.40gb", fill="1g.5gb").filled == 0
    with pytest.raises(InputError, match="no MIG layout"):
        mig.plan_layout(ps, None)


def test_parse_layout(sets):
    ps = sets["a100-80gb"]
    names = [p.name for p in mig.parse_layout(ps, " 3G.40GB, 2x1g.10gb ,1g.10gb+ME")]
    assert names == ["3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb+me"]
    assert mig.parse_layout(ps, "") == ()
    assert mig.parse_layout(ps, None) == ()
    with pytest.raises(InputError) as info:
        mig.parse_layout(ps, "1g.5gb")
    assert "unknown MIG profile '1g.5gb' for a100-80gb" in info.value.message
    assert "3g.40gb" in info.value.hint
    assert len(info.value.details) == len(ps.profiles)
    with pytest.raises(InputError, match="empty entry"):
        mig.parse_layout(ps, "3g.40gb,,1g.10gb")
    with pytest.raises(InputError, match="asks for no instance"):
        mig.parse_layout(ps, "0x1g.10gb")


def test_config_and_ansible_vars(sets):
    ps = sets["h100-sxm5-80gb"]
    plan = mig.plan_layout(ps, "3g.40gb,2g.20gb,1g.10gb,1g.10gb", gpu="h100-sxm")
    assert plan.name == "provision-h100-sxm-3g.40gb-2g.20gb-2x1g.10gb"
    cfg = parted.mig_parted_config(plan)
    assert cfg == {
        "version": "v1",
        "mig-configs": {
            plan.name: [
                {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}
            ]
        },
    }
    assert yaml.safe_load(parted.mig_parted_yaml(plan)) == cfg
    assert '"3g.40gb": 1' in parted.mig_parted_yaml(plan)
    av = parted.ansible_vars(plan)
    assert set(av) == {
        "provision_mig_enabled",
        "provision_mig_gpu",
        "provision_mig_profile_set",
        "provision_mig_placements_confirmed",
        "provision_mig_config_name",
        "provision_mig_config",
        "provision_mig_devices",
        "provision_mig_layout",
        "provision_mig_cgi",
    }
    assert av["provision_mig_enabled"] is True
    assert av["provision_mig_config_name"] == plan.name
    assert av["provision_mig_config"] == cfg
    assert av["provision_mig_layout"][0] == {
        "profile": "3g.40gb",
        "profile_id": 9,
        "placement": 4,
        "memory_slices": 4,
        "compute_slices": 3,
    }
    assert av["provision_mig_cgi"] == "9:4,14:2,19:1,19:0"
    doc = plan.to_dict()
    assert list(doc)[:3] == ["gpu", "profile_set", "placements_confirmed"]
    assert {"instances", "free", "mig_parted", "ansible_vars"} <= set(doc)
    assert json.loads(json.dumps(doc)) == doc
    assert yaml.safe_load(yaml.safe_dump(doc)) == doc
    filtered = mig.plan_layout(ps, "7g.80gb", pci_device_ids=("0x2330",), device_filter=True)
    (entry,) = parted.mig_parted_config(filtered)["mig-configs"][filtered.name]
    assert entry["device-filter"] == ["0x233010DE"]
    assert yaml.safe_load(parted.mig_parted_yaml(filtered))["mig-configs"][filtered.name] == [entry]


def test_config_names(sets):
    ps = sets["a100-40gb"]
    assert mig.plan_layout(ps, "1g.5gb+me", gpu="a100-40gb").name == "provision-a100-40gb-1g.5gb.me"
    long = mig.plan_layout(ps, "2g.10gb,1g.10gb,1g.5gb,1g.5gb+me,1g.5gb,1g.5gb", gpu="a100-sxm4-40gb")
    assert len(long.name) <= 63
    assert long.name.startswith("provision-a100-sxm4-40gb-")
    assert mig.plan_layout(ps, "7g.40gb", name="full").name == "full"
    with pytest.raises(InputError, match="not a usable mig-parted config name"):
        mig.plan_layout(ps, "7g.40gb", name="bad name")


def test_every_mig_gpu_resolves_and_plans(real_matrix):
    capable = mig.mig_capable(real_matrix)
    for gpu in [
        "a100-80gb",
        "a100-40gb",
        "a100-pcie-80gb",
        "a100-sxm4-40gb",
        "h100-sxm",
        "h100-pcie",
        "h200",
        "b200",
        "h100-sxm5",
    ]:
        canonical, ps, members = mig.gpu_profile_set(real_matrix, gpu)
        assert canonical in capable
        assert members
        plan = mig.plan_layout(ps, None, fill=ps.profiles[0].name, gpu=canonical)
        assert plan.filled == 7
    assert "t4" not in capable
    assert "a100-pcie" not in capable


# -- the command ---------------------------------------------------------------------------------


def run(*args):
    result = CliRunner().invoke(
        mig_group, ["plan", *args], obj={"debug": False, "compat_dir": None}, catch_exceptions=True
    )
    return result


def test_cli_yaml_and_json():
    r = run("--gpu", "h100-sxm", "--layout", "3g.40gb,2g.20gb,1g.10gb,1g.10gb", "--format", "yaml")
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(r.stdout)
    assert doc["gpu"] == "h100-sxm"
    assert doc["profile_set"] == "h100-sxm5-80gb"
    assert doc["placements_confirmed"]
    assert doc["mig_parted"]["version"] == "v1"
    assert "mig-configs" in doc["mig_parted"]
    assert doc["free"] == {"compute_slices": 0, "memory_slices": 0, "memory_slots": [], "can_add": {}}
    assert r.stderr == ""
    r = run("--gpu", "a100-80gb", "--fill", "1g.10gb", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["fill"] == {"profile": "1g.10gb", "added": 7}
    assert len(doc["instances"]) == 7
    assert doc["placements_confirmed"] is False
    assert "note" in doc
    assert "note: placements for a100-80gb come from the same die family" in r.stderr


def test_cli_writes_files(tmp_path):
    config, vars_file = tmp_path / "mig" / "config.yaml", tmp_path / "vars.yml"
    config.parent.mkdir()
    r = run(
        "--gpu",
        "a100-sxm4-40gb",
        "--layout",
        "4g.20gb,3g.20gb",
        "--name",
        "half-half",
        "--out-config",
        str(config),
        "--out-vars",
        str(vars_file),
    )
    assert r.exit_code == 0, r.output
    cfg = yaml.safe_load(config.read_text())
    assert cfg == {
        "version": "v1",
        "mig-configs": {
            "half-half": [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.20gb": 1, "3g.20gb": 1}}]
        },
    }
    from ansible.parsing.yaml.loader import AnsibleLoader  # the file is for Ansible: !unsafe strings

    av = AnsibleLoader(vars_file.read_text()).get_single_data()
    assert av["provision_mig_config_name"] == "half-half"
    assert av["provision_mig_config"] == cfg
    assert [x["placement"] for x in av["provision_mig_layout"]] == [0, 4]
    assert f"wrote {config}" in r.stderr
    assert f"wrote {vars_file}" in r.stderr
    r = run("--gpu", "a100-pcie-40gb", "--layout", "7g.40gb", "--device-filter", "--format", "json")
    entry = json.loads(r.stdout)["mig_parted"]["mig-configs"]["provision-a100-pcie-40gb-7g.40gb"][0]
    assert entry["device-filter"] == ["0x20F110DE", "0x20B110DE"]


def test_cli_refusals():
    r = run("--gpu", "t4", "--layout", "1g.5gb")
    assert isinstance(r.exception, InputError)
    assert r.exception.exit_code == 2
    assert r.exception.message == "t4 has no MIG"
    assert "a100-80gb" in r.exception.hint
    assert "h100-sxm" in r.exception.hint
    r = run("--gpu", "a100-pcie", "--layout", "1g.5gb")
    assert isinstance(r.exception, InputError)
    assert "different MIG layouts" in r.exception.message
    r = run("--gpu", "h100-pcie", "--layout", "3g.40gb,1g.5gb")
    assert isinstance(r.exception, InputError)
    assert "unknown MIG profile '1g.5gb'" in r.exception.message
    r = run("--gpu", "a100-80gb", "--layout", "3g.40gb,3g.40gb,1g.10gb")
    assert isinstance(r.exception, mig.MigLayoutError)
    assert r.exception.exit_code == 2
    assert r.exception.hint == "try --layout 2x3g.40gb"
    r = run("--gpu", "nosuchgpu", "--layout", "1g.5gb")
    assert isinstance(r.exception, InputError)
    r = run("--gpu", "a100-40gb", "--layout", "7g.40gb", "--fill", "1g.5gb")
    assert r.exit_code == 0
    assert "no 1g.5gb fits beside the layout" in r.stderr


def test_main_reports_refusal(capsys, monkeypatch, real_matrix):
    """Through provision.cli.main: exit 2, `error:`, indented details, `hint:`."""
    from provision.cli import COMMANDS, main

    monkeypatch.setitem(COMMANDS, "mig", "provision.cli.mig:mig_group")  # until provision/cli.py lists it
    code = main(["mig", "plan", "--gpu", "a100-80gb", "--layout", "3g.40gb,3g.40gb,1g.10gb"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: MIG layout 2x3g.40gb,1g.10gb does not fit on a100-80gb")
    assert "  1g.10gb finds no placement" in err
    assert err.splitlines()[-1] == "hint: try --layout 2x3g.40gb"
    assert main(["mig", "plan", "--gpu", "t4", "--fill", "1g.5gb"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: t4 has no MIG",
        "hint: MIG-capable GPUs: " + ", ".join(mig.mig_capable(real_matrix)),
    ]
