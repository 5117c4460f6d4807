"""The plan JSON contract, its round trip and lock files."""

import json

import pytest

from provision.errors import InputError
from provision.matrix.resolve import resolve
from provision.plan import Plan, PlanRequest, read_plan, write_plan


@pytest.fixture
def plan(fixture_matrix):
    return resolve(fixture_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="pytorch==2.5.1"))


def test_contract_keys(plan):
    doc = plan.to_dict()
    assert doc["schema"] == 1
    assert list(doc)[0] == "schema"
    assert {"request", "os", "gpu", "driver", "cuda", "cudnn", "framework", "fabric_manager",
            "container_toolkit", "base_image", "reasons", "digest"} <= set(doc)
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


@pytest.mark.parametrize(("content", "text"), [
    ("not json", "not a plan: not JSON"),
    ('{"hello": 1}', "is not a provision plan"),
    ('[1, 2]', "is not a provision plan"),
])
def test_not_a_plan(tmp_path, content, text):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(InputError, match=text):
        read_plan(path)


def test_other_schema_version(tmp_path, plan):
    doc = plan.to_dict()
    doc["schema"] = 2
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="plan schema 2"):
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
    del doc["digest"]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="missing plan key 'cuda'"):
        read_plan(path)


def test_unreadable(tmp_path):
    with pytest.raises(InputError, match="cannot read plan"):
        read_plan(tmp_path / "absent.json")
