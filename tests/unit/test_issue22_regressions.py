"""Issue 22's attacks that had no end-to-end test with the issue's own payload (the others: the
audit in the issue's thread; tests/unit/test_hostile_fleet.py, test_hostile_verify.py,
test_lock_catalogue.py, tests/ansible/..., tests/images/...).

"A reviewed-looking lock is not checked against the catalogue": with the digest recomputed
(integrity, not authenticity), `driver.version: 450.36.06` on branch 620, an invented GPU or CUDA,
or `base_image: attacker.example/...` passed `inventory check`. "Duplicate JSON keys are accepted
(the last wins); deep nesting crashes with 'this is a bug'." Each is now refused by `provision
inventory check` with exit 2 and one error line naming the field, before any host is contacted."""

from __future__ import annotations

import json

import pytest

from provision.plan.model import Plan, _load


def redigest(doc: dict) -> dict:
    """What an attacker does after an edit: recompute the digest."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    doc["digest"] = _load(Plan, body).digest()
    return doc


@pytest.fixture
def lock(cli, tmp_path):
    def make(*pins: str) -> dict:
        path = tmp_path / "planned.json"
        assert cli("plan", "--os", "ubuntu22.04", *pins, "--lock", str(path), "--format", "json").code == 0
        return json.loads(path.read_text())

    return make


def inventory_check(cli, tmp_path, text: str):
    (tmp_path / "inv.ini").write_text("[g]\nn1 ansible_host=127.0.0.1 ansible_port=1\n")
    (tmp_path / "lock.json").write_text(text)
    return cli("inventory", "check", "-i", str(tmp_path / "inv.ini"), "--plan", str(tmp_path / "lock.json"))


def refused(result, *words: str) -> str:
    assert result.code == 2, (result.out, result.err)
    assert "this is a bug" not in result.err
    assert "Traceback" not in result.err
    (error,) = [line for line in result.err.splitlines() if line.startswith("error: ")]
    for word in words:
        assert word in error, error
    assert "hint: " in result.err
    return error


def on_branch_620_450(doc: dict) -> None:
    assert doc["driver"]["branch"] == "620"
    doc["driver"]["version"] = "450.36.06"
    for package in doc["driver"]["packages"]:
        package["version"] = "450.36.06"


ATTACKS = {
    "driver.version 450.36.06 on branch 620": (("--gpu", "a100-pcie", "--driver", "620"), on_branch_620_450, "driver"),
    "an invented GPU": (
        ("--gpu", "t4"),
        lambda d: d["gpu"].update(id="h300-sxm", members=["h300-sxm"]),
        "gpu",
    ),
    "an invented CUDA": (("--gpu", "t4", "--cuda", "12.4"), lambda d: d["cuda"].update(version="12.7.0"), "cuda"),
    "base_image attacker.example": (
        ("--gpu", "t4", "--cuda", "12.4"),
        lambda d: d.update(base_image="attacker.example/cuda:12.4.1-runtime-ubuntu22.04"),
        "base_image",
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_inventory_check_holds_a_redigested_lock_to_the_catalogue(cli, tmp_path, lock, attack):
    pins, change, field = ATTACKS[attack]
    doc = lock(*pins)
    assert inventory_check(cli, tmp_path, json.dumps(doc)).code == 0, "the lock as planned passes"
    change(doc)
    result = inventory_check(cli, tmp_path, json.dumps(redigest(doc)))
    refused(result, field)
    assert "ok: every check" not in result.out


def test_a_duplicate_key_in_a_lock_is_refused_not_read_as_the_last(cli, tmp_path, lock):
    """The last `base_image` is the planned one (what Python's json module kept); a reader that keeps
    the first gets the attacker's. The lock is refused, whichever a reader would keep."""
    doc = lock("--gpu", "t4", "--cuda", "12.4")
    good = json.dumps(doc)
    assert inventory_check(cli, tmp_path, good).code == 0
    planted = '{"base_image": "attacker.example/cuda:12.4.1-runtime-ubuntu22.04", ' + good[1:]
    assert json.loads(planted) == doc, "json.loads alone keeps the last and sees the planned lock"
    refused(inventory_check(cli, tmp_path, planted), "base_image", "twice")


@pytest.mark.parametrize("depth", [40, 100_000])
def test_a_deeply_nested_lock_is_refused_not_a_crash(cli, tmp_path, lock, depth):
    doc = lock("--gpu", "t4", "--cuda", "12.4")
    text = json.dumps(doc)
    nested = text[:-1] + ', "padding": ' + "[" * depth + "]" * depth + "}"
    refused(inventory_check(cli, tmp_path, nested), "nests deeper")
