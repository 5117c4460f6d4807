"""The plan JSON contract, its round trip and lock files."""

import json

import pytest

from provision.errors import InputError
from provision.plan.model import Plan, PlanRequest, read_plan, write_plan
from provision.plan.resolve import resolve


@pytest.fixture
def plan(fixture_matrix):
    return resolve(fixture_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="pytorch==2.5.1"))


def test_contract_keys(plan):
    doc = plan.to_dict()
    assert doc["schema"] == 2
    assert next(iter(doc)) == "schema"
    assert {
        "request",
        "os",
        "gpu",
        "driver",
        "cuda",
        "cudnn",
        "framework",
        "fabric_manager",
        "container_toolkit",
        "base_image",
        "reasons",
        "digest",
    } <= set(doc)
    assert set(doc["os"]) >= {"id", "family"}
    assert set(doc["gpu"]) >= {"id", "name", "compute_capability"}
    assert set(doc["driver"]) >= {"branch", "version", "kernel_module", "packages"}
    assert doc["driver"]["kernel_module"] in ("open", "proprietary")
    assert set(doc["framework"]) >= {"name", "version", "cuda", "cudnn", "index_url"}
    assert set(doc["fabric_manager"]) >= {"package", "version"}
    assert doc["base_image"].startswith("nvidia/cuda:")
    json.dumps(doc)  # serialisable


def test_round_trip(plan):
    doc = plan.to_dict()
    again = Plan.from_dict(json.loads(json.dumps(doc)))
    assert again == plan
    assert again.to_dict() == doc


def test_digest_ignores_prose_but_not_choices(plan):
    reworded = plan._replace(reasons=())
    assert reworded.digest() == plan.digest()
    other = plan._replace(base_image="nvidia/cuda:12.4.1-runtime-ubuntu22.04")
    assert other.digest() != plan.digest()


def test_lock_file(tmp_path, plan):
    path = tmp_path / "plan.lock.json"
    write_plan(plan, path)
    assert read_plan(path) == plan


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ("not json", "not a plan: not JSON"),
        ('{"hello": 1}', "is not a provision plan"),
        ("[1, 2]", "is not a provision plan"),
    ],
)
def test_not_a_plan(tmp_path, content, text):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(InputError, match=text):
        read_plan(path)


def test_other_schema_version(tmp_path, plan):
    doc = plan.to_dict()
    doc["schema"] = 3
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="plan schema 3"):
        read_plan(path)


def test_edited_plan_is_refused(tmp_path, plan):
    doc = plan.to_dict()
    doc["driver"]["version"] = "999.1.1"
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="edited after it was written"):
        read_plan(path)


def test_missing_key(tmp_path, plan):
    doc = plan.to_dict()
    del doc["cuda"]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="'cuda' is a required property"):
        read_plan(path)


def test_unreadable(tmp_path):
    with pytest.raises(InputError, match="cannot read plan"):
        read_plan(tmp_path / "absent.json")


# -- MIG layouts in the plan --------------------------------------------------------------------
def test_mig_layout_in_the_plan(real_matrix, tmp_path, cli):
    from provision.fleet.extravars import to_extravars

    plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "h100-sxm", mig="3g.40gb,2g.20gb,2x1g.10gb"))
    assert [(i.profile, i.placement) for i in plan.mig.instances] == [
        ("3g.40gb", 4),
        ("2g.20gb", 2),
        ("1g.10gb", 1),
        ("1g.10gb", 0),
    ]
    assert plan.mig.cgi == "9:4,14:2,19:1,19:0"
    assert plan.mig.profile_set == "h100-sxm5-80gb"
    assert any(r.component == "mig" and "3g.40gb@4" in r.text for r in plan.reasons)
    # lock round trip keeps it, and it is part of what the digest pins
    path = tmp_path / "mig.lock.json"
    write_plan(plan, path)
    assert read_plan(path) == plan
    plain = resolve(real_matrix, PlanRequest("ubuntu22.04", "h100-sxm"))
    assert plain.mig is None
    assert plain.digest() != plan.digest()
    assert plain.to_dict()["request"]["mig"] is None
    assert plain.to_dict()["mig"] is None
    extravars = to_extravars(plan)
    assert extravars["provision_mig_enabled"] is True
    assert extravars["provision_mig_layout"][0] == {
        "profile": "3g.40gb",
        "profile_id": 9,
        "placement": 4,
        "memory_slices": 4,
        "compute_slices": 3,
    }
    assert extravars["provision_mig_config"]["mig-configs"][plan.mig.config_name][0]["mig-devices"] == {
        "3g.40gb": 1,
        "2g.20gb": 1,
        "1g.10gb": 2,
    }
    assert to_extravars(plain)["provision_mig_enabled"] is False
    res = cli("plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--mig", "4g.40gb,3g.40gb")
    assert res.code == 0
    assert "[mig]" in res.out
    assert "4g.40gb@0" in res.out


def test_digest_of_a_plan_without_mig_is_unchanged_by_the_mig_field(plan):
    """Lock files written before plans could carry MIG still verify."""
    import hashlib

    from provision.plan.model import _dump

    body = _dump(plan)
    for key in ("reasons", "data", "mig", "subnet_manager", "platform"):
        body.pop(key)
    body["request"].pop("mig")
    for key in ("image_os", "host_only"):  # schema 2's request keys: absent unless used
        body["request"].pop(key)
    body["driver"].pop("module_options")  # added after schema 1: absent unless the GPU has any
    for key in ("arch", "repo_arch"):  # the host architecture, added after schema 1: absent on x86_64
        body["os"].pop(key)
    for part, key in (("cuda", "compute_capabilities"), ("framework", "compute_capabilities"), ("framework", "ptx")):
        if body[part] is not None and body[part][key] is None:
            body[part].pop(key)  # added after schema 1 too: absent unless set
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    assert plan.digest() == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@pytest.mark.parametrize(
    ("gpu", "layout", "message"),
    [
        ("t4", "1g.5gb", "t4 has no MIG"),
        ("a100-pcie", "1g.10gb", "different MIG layouts"),
        ("a100-40gb", "3g.20gb,3g.20gb,1g.5gb", "does not fit"),
        ("h100-sxm", "5g.50gb", "5g.50gb"),
    ],
)
def test_bad_mig_layouts_are_refused(cli, gpu, layout, message):
    res = cli("plan", "--os", "ubuntu22.04", "--gpu", gpu, "--mig", layout)
    assert res.code == 2, res
    assert message in res.err, res
    assert "hint:" in res.err, res


def test_a_lock_written_before_the_sm_fields_still_verifies(plan):
    """Plans written before they recorded SM lists (cuda and framework compute_capabilities, ptx) load
    with those fields unset and keep their digest."""
    doc = plan.to_dict()
    doc["cuda"].pop("compute_capabilities")
    doc["framework"].pop("compute_capabilities")
    doc["framework"].pop("ptx")
    stripped = plan._replace(
        cuda=plan.cuda._replace(compute_capabilities=None),
        framework=plan.framework._replace(compute_capabilities=None, ptx=None),
    )
    doc["digest"] = stripped.digest()
    loaded = Plan.from_dict(doc, origin="old.lock.json")
    assert loaded.cuda.compute_capabilities is None
    assert loaded.framework.ptx is None
    assert loaded.digest() == doc["digest"]
    assert plan.digest() != stripped.digest(), "the SM lists are pinned by the digest once recorded"


def test_the_fast_schema_check_accepts_exactly_what_the_schema_accepts(plan):
    """model._fast_validator (local $refs written out) is only a shortcut for valid documents: on
    every mutation of a plan document it must agree with the schema itself."""
    import copy
    import random

    from provision.plan.model import _fast_validator, _validator

    doc = plan.to_dict()
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                paths.append((*path, key))
                walk(value, (*path, key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                paths.append((*path, i))
                walk(value, (*path, i))

    walk(doc, ())
    values = [None, "", "x", "{{ x }}", "580.95.05\n", 1, 1.5, True, [], {}, "a" * 300, "nvidia/cuda:1", "-rf"]
    rng = random.Random(22)
    disagreements = []
    for _ in range(1500):
        mutated = copy.deepcopy(doc)
        path = rng.choice(paths)
        parent = mutated
        for key in path[:-1]:
            parent = parent[key]
        action = rng.random()
        if action < 0.7:
            parent[path[-1]] = rng.choice(values)
        elif action < 0.85 and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent["unexpected"] = "x"
        if _fast_validator().is_valid(mutated) != _validator().is_valid(mutated):
            disagreements.append(path)
    assert disagreements == []
