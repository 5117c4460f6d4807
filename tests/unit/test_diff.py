"""`provision diff`: what changes between two plans, or between a host's scan and its plan, named
the way an operator acts on it; `plan --lock` says it before overwriting another plan."""

from __future__ import annotations

import json

import pytest

from provision.errors import InputError
from provision.plan.diff import changes, check_scan, plan_state, read_state, scan_state
from provision.plan.model import PlanRequest, write_plan
from provision.plan.resolve import resolve


def keys(found):
    return [c.key for c in found]


def state(matrix, name="p", **request):
    return plan_state(resolve(matrix, PlanRequest(**request)), name)


def test_a_branch_change_and_a_flavour_switch_need_a_reboot(real_matrix):
    old = state(real_matrix, os="ubuntu22.04", gpu="h100-sxm", driver="535", host_only=True)
    new = state(real_matrix, os="ubuntu22.04", gpu="h100-sxm", host_only=True)
    found = changes(old, new)
    assert keys(found)[:3] == ["driver-branch", "kernel-module", "fabric-manager"]
    assert all(c.reboot for c in found[:2])
    assert "R535" in found[0].old
    assert found[2].new == new.fabric_manager  # Fabric Manager follows the driver


def test_a_release_within_the_branch(real_matrix):
    branch = real_matrix.branch(580)
    newest, older = branch.releases[0], branch.releases[1]
    old = state(real_matrix, os="ubuntu22.04", gpu="l4", driver=str(older.version), host_only=True)
    new = state(real_matrix, os="ubuntu22.04", gpu="l4", driver=str(newest.version), host_only=True)
    (change,) = changes(old, new)
    assert change.key == "driver-release"
    assert "same R580 branch" in change.note
    assert change.reboot


def test_image_part_changes_are_named(real_matrix):
    old = state(real_matrix, os="ubuntu22.04", gpu="t4", cuda="12.4")
    new = state(real_matrix, os="ubuntu22.04", gpu="t4", cuda="12.4", image_os="rockylinux9")
    assert keys(changes(old, new)) == ["image-OS", "base-image"]
    host = state(real_matrix, os="ubuntu22.04", gpu="t4", host_only=True)
    assert keys(changes(old, host)) == ["image-part"]


def test_mig_and_toolkit(real_matrix):
    old = state(real_matrix, os="ubuntu22.04", gpu="h100-sxm", host_only=True)
    new = state(real_matrix, os="ubuntu22.04", gpu="h100-sxm", host_only=True, mig="3g.40gb,2g.20gb")
    assert keys(changes(old, new)) == ["mig"]
    assert keys(changes(old, old._replace(container_toolkit="1.17.8"))) == ["container-toolkit"]


def test_the_command_exits_as_diff_does(cli, tmp_path, real_matrix):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_plan(resolve(real_matrix, PlanRequest("rocky9", "a100-pcie", driver="570")), a)
    write_plan(resolve(real_matrix, PlanRequest("rocky9", "a100-pcie")), b)
    same = cli("diff", str(a), str(a))
    assert same.code == 0
    assert "no change" in same.out
    different = cli("diff", str(a), str(b), "--format", "json")
    assert different.code == 1
    doc = json.loads(different.out)
    assert doc["reboot"] is True
    assert doc["changes"][0]["key"] == "driver-branch"


# -- a scan against its plan --------------------------------------------------------------------
def scan(**over):
    doc = {
        "schema": 1,
        "kind": "provision-scan",
        "host": "gpu1",
        "scanned_at": "2026-12-01T10:00:00Z",
        "reachable": True,
        "error": None,
        "os": {"id": "ubuntu", "version_id": "22.04", "family": "Debian", "catalogue_id": "ubuntu22.04"},
        "kernel": "5.15.0-126-generic",
        "driver": {
            "version": "535.183.01",
            "branch": "535",
            "kernel_module": "proprietary",
            "loaded": True,
            "signed": None,
        },
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x2330", "catalogue_id": "h100-sxm"}],
        "cuda_packages": [],
        "container_toolkit": "1.17.8",
        "docker": "27.5.1",
        "containerd": "1.7.25",
        "fabric_manager": {"version": "535.183.01", "active": True},
        "held": ["nvidia-driver-535"],
    }
    doc.update(over)
    return doc


def test_a_scan_names_its_drift_from_the_plan(real_matrix, tmp_path, cli):
    plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "h100-sxm", host_only=True))
    (tmp_path / "gpu1.json").write_text(json.dumps(scan()))
    write_plan(plan, tmp_path / "plan.json")
    result = cli("diff", str(tmp_path / "gpu1.json"), str(tmp_path / "plan.json"))
    assert result.code == 1
    assert "driver-branch: R535 535.183.01 -> R" in result.out
    assert "container-toolkit: 1.17.8 -> " in result.out
    assert "reboot needed: yes" in result.out
    # a host that holds its plan: no change (a scan knows no image part and no MIG layout)
    matching = scan(
        driver={
            "version": plan.driver.version,
            "branch": plan.driver.branch,
            "kernel_module": plan.driver.kernel_module,
            "loaded": True,
            "signed": None,
        },
        container_toolkit=plan.container_toolkit.version,
        fabric_manager={"version": plan.fabric_manager.version, "active": True},
    )
    assert changes(scan_state(matching), plan_state(plan)) == []


def test_a_stopped_fabric_manager_is_drift(real_matrix):
    plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "h100-sxm", host_only=True))
    stopped = scan(
        driver={
            "version": plan.driver.version,
            "branch": plan.driver.branch,
            "kernel_module": plan.driver.kernel_module,
            "loaded": True,
            "signed": None,
        },
        container_toolkit=plan.container_toolkit.version,
        fabric_manager={"version": plan.fabric_manager.version, "active": False},
    )
    assert keys(changes(scan_state(stopped), plan_state(plan))) == ["fabric-manager"]


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"host": "gpu1?ssh_config=x"}, "host"),
        ({"kernel": "5.15\n{{ lookup('pipe','id') }}"}, "kernel"),
        ({"extra": 1}, "Additional properties"),
        (
            {
                "driver": {
                    "version": "535;rm -rf /",
                    "branch": "535",
                    "kernel_module": "open",
                    "loaded": True,
                    "signed": None,
                }
            },
            "driver.version",
        ),
        ({"gpus": [{"index": 0, "name": "x\u2028y", "pci_device_id": "0x2330"}]}, "gpus.0.name"),
    ],
)
def test_a_hostile_scan_is_refused(over, words):
    with pytest.raises(InputError) as info:
        check_scan(scan(**over), "gpu1.json")
    assert words in info.value.message


def test_an_unreachable_scan_is_not_compared(tmp_path):
    path = tmp_path / "gpu1.json"
    path.write_text(
        json.dumps(
            scan(
                reachable=False,
                error="ssh: connect to host 127.0.0.1 port 2299: Connection refused",
                driver=None,
                os=None,
                kernel=None,
                gpus=[],
                container_toolkit=None,
                docker=None,
                containerd=None,
                fabric_manager=None,
                held=[],
            )
        )
    )
    with pytest.raises(InputError, match="was not reachable"):
        read_state(str(path))


# -- plan --lock over another plan ---------------------------------------------------------------
def test_plan_lock_over_another_plan_says_what_changes(cli, tmp_path):
    lock = tmp_path / "p.lock.json"
    assert cli("plan", "--os", "rocky9", "--gpu", "a100-pcie", "--driver", "570", "--lock", str(lock)).code == 0
    again = cli("plan", "--os", "rocky9", "--gpu", "a100-pcie", "--lock", str(lock))
    assert again.code == 0
    err = " ".join(again.err.split())  # wrapped at spaces to the width
    assert f"--lock {lock} holds another plan; it changes:" in err
    assert "driver-branch: R570" in err
    same = cli("plan", "--os", "rocky9", "--gpu", "a100-pcie", "--lock", str(lock))
    assert "holds another plan" not in same.err
