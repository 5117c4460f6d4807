"""A reviewed-looking lock is checked against the catalogue (issue 22): the digest is integrity, not
authenticity, so a lock whose digest was recomputed after an edit must still match the catalogue's
rows in every field a role or a template reads, in apply, verify, render, build and ci."""

from __future__ import annotations

import copy
import json

import pytest

from provision.errors import InputError
from provision.plan.lockcheck import check_against_catalogue
from provision.plan.model import Plan, PlanRequest, _load, read_plan
from provision.plan.resolve import resolve


def redigest(doc: dict) -> dict:
    """What an attacker does after editing a lock: recompute the digest."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    doc["digest"] = _load(Plan, body).digest()
    return doc


@pytest.fixture(scope="module")
def plans(real_matrix):
    return {
        "torch": resolve(real_matrix, PlanRequest("ubuntu22.04", "h100-sxm", framework="pytorch")),
        "b200": resolve(real_matrix, PlanRequest("ubuntu22.04", "b200")),
        "t4": resolve(real_matrix, PlanRequest("rocky9", "t4", cuda="12.4")),
    }


def edited(plan: Plan, change) -> dict:
    doc = copy.deepcopy(plan.to_dict())
    change(doc)
    return redigest(doc)


ATTACKS = {
    "driver release of another branch": (
        "torch",
        lambda d: (
            [d["driver"].update(version="450.36.06")] + [p.update(version="450.36.06") for p in d["driver"]["packages"]]
        ),
        "driver.version",
    ),
    "an invented GPU": ("t4", lambda d: d["gpu"].update(id="h300-sxm", members=["h300-sxm"]), "gpu.members"),
    "an invented CUDA": (
        "t4",
        lambda d: d["cuda"].update(version="12.7.0", label="12.7 GA"),
        "cuda.version",
    ),
    "an attacker's base image": (
        "t4",
        lambda d: d.update(base_image="attacker.example/cuda:12.4.1-runtime-rockylinux9"),
        "base_image",
    ),
    "an attacker's image among the flavours": (
        "t4",
        lambda d: d["images"].update(devel="attacker.example/cuda:devel"),
        "images",
    ),
    "an attacker's package index": (
        "torch",
        lambda d: d["framework"].update(index_url="https://attacker.example/simple"),
        "framework.index_url",
    ),
    "a framework release that does not exist": (
        "torch",
        lambda d: d["framework"].update(version="9.9.9", requirement="torch==9.9.9"),
        "framework.version",
    ),
    "a widened NVIDIA_REQUIRE_CUDA": ("t4", lambda d: d.update(require_cuda="driver>=100"), "require_cuda"),
    "minor-version claimed where the driver runs it natively": (
        "t4",
        lambda d: d["cuda"].update(compatibility="minor-version"),
        "cuda.compatibility",
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_redigested_edit_is_refused_against_the_catalogue(attack, plans, real_matrix, tmp_path):
    name, change, field = ATTACKS[attack]
    doc = edited(plans[name], change)
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(doc))
    try:
        plan = read_plan(path)  # schema, digest and consistency may already refuse some
    except InputError as exc:
        assert field.split(".")[0] in exc.message
        return
    with pytest.raises(InputError) as info:
        check_against_catalogue(plan, real_matrix, "lock.json")
    assert f"lock.json: {field}" in info.value.message
    assert "\n" not in info.value.message


def test_fabric_manager_packages_must_match_the_driver(plans, tmp_path):
    """The mutation hole: a re-digested B200 lock whose Fabric Manager is another release."""
    doc = edited(plans["b200"], lambda d: d["fabric_manager"]["packages"][0].update(version="570.86.15"))
    path = tmp_path / "b200.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"fabric_manager\.packages\.0\.version"):
        read_plan(path)


def test_every_plan_the_resolver_writes_passes(real_matrix):
    checked = 0
    for os_rel in real_matrix.os_releases:
        for gpu in real_matrix.gpus:
            for pins in ({}, {"framework": "pytorch"}, {"driver": "535"}, {"host_only": True}):
                try:
                    plan = resolve(real_matrix, PlanRequest(os_rel.id, gpu.id, **pins))
                except InputError:
                    continue
                check_against_catalogue(plan, real_matrix)
                checked += 1
    assert checked > 300


@pytest.mark.parametrize("command", [["render", "--out", "ctx"], ["build"], ["pin-base"]])
def test_render_build_and_pin_refuse_such_a_lock(cli, plans, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    doc = edited(plans["t4"], lambda d: d.update(base_image="attacker.example/cuda:12.4.1-runtime-rockylinux9"))
    (tmp_path / "p.json").write_text(json.dumps(doc))
    result = cli(*command, "--plan", "p.json")
    assert result.code == 2, result
    assert "base_image" in result.err
    assert not (tmp_path / "ctx").exists()


def test_schema1_locks_users_committed_pass_too(real_matrix):
    from pathlib import Path

    locks = sorted((Path(__file__).resolve().parent.parent / "fixtures" / "plans" / "schema1").glob("*.lock.json"))
    assert locks
    for lock in locks:
        check_against_catalogue(read_plan(lock), real_matrix, lock.name)
