"""An open<->proprietary switch at the same driver version is a driver change (issue 22): before, the
activation saw the planned version loaded and did nothing, the role's check and the health gate
passed the old flavour, and the pre-reboot check accepted any nvidia.ko for the next kernel."""

import importlib.util

import pytest
from paths import MODULES
from playrun import site_task
from roleeval import assert_result
from test_host_state import OPEN, PROPRIETARY


def load(name):
    spec = importlib.util.spec_from_file_location(name, MODULES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


host_state, health = load("host_state"), load("health")
OPEN_580 = OPEN  # NVIDIA UNIX Open Kernel Module for x86_64  580.95.05
PROPRIETARY_580 = PROPRIETARY.replace("535.183.06", "580.95.05")


@pytest.mark.parametrize(("text", "flavour"), [(OPEN_580, "open"), (PROPRIETARY_580, "proprietary"), ("", None)])
def test_the_loaded_flavour_is_read_from_the_version_file(tmp_path, text, flavour):
    path = tmp_path / "version"
    path.write_text(text)
    assert host_state.loaded_flavour(str(path)) == flavour
    assert host_state.loaded_flavour(str(tmp_path / "absent")) is None


@pytest.mark.parametrize(
    ("policy", "loaded_flavour", "action"),
    [
        ("auto", "proprietary", "reboot"),  # the switch: the planned version, the other flavour loaded
        ("auto", "open", "none"),
        ("always", "proprietary", "reboot"),
        ("never", "proprietary", "none"),  # waits for the next reboot, and says so
    ],
)
def test_a_flavour_switch_at_the_same_version_is_activated_like_a_new_version(policy, loaded_flavour, action):
    got, reason = host_state.decide(policy, "580.95.05", "580.95.05", True, False, True, "open", loaded_flavour)
    assert got == action
    if loaded_flavour == "proprietary" and policy != "always":
        assert "580.95.05 proprietary" in reason
        assert "580.95.05 open" in reason


def test_without_a_planned_flavour_the_decision_is_the_version_alone():
    assert host_state.decide("auto", "580.95.05", "580.95.05", True, False, True)[0] == "none"


BOOT = {"path": "/lib/modules/k/updates/dkms/nvidia.ko", "version": "580.95.05", "flavour": "open", "signer": ""}


@pytest.mark.parametrize(
    ("module", "refused", "said"),
    [
        (BOOT, False, ""),
        ({**BOOT, "flavour": "proprietary"}, True, "is 580.95.05 proprietary"),
        ({**BOOT, "version": "570.86.15"}, True, "is 570.86.15 open"),
        ({**BOOT, "flavour": None}, True, "of unknown flavour"),
        ({**BOOT, "version": None}, True, "of unknown version"),
    ],
)
def test_before_a_reboot_the_next_kernels_module_must_be_the_planned_one(module, refused, said):
    why = host_state.boot_check("6.8.0-60-generic", "disabled", module, ("580.95.05", "open"))
    assert (why is not None) == refused
    if refused:
        assert said in why
        assert "not the planned 580.95.05 open" in why


def test_the_boot_module_flavour_comes_from_its_licence(tmp_path, monkeypatch):
    """modinfo -F license: the open modules declare "Dual MIT/GPL", the proprietary ones "NVIDIA"."""
    fields = {"filename": "/lib/modules/k/updates/dkms/nvidia.ko", "version": "580.95.05", "signer": "MOK"}
    for license_, flavour in (("Dual MIT/GPL", "open"), ("NVIDIA", "proprietary"), ("GPL", None)):
        modinfo = tmp_path / "modinfo"
        cases = "".join(f'  {k}) echo "{v}";;\n' for k, v in {**fields, "license": license_}.items())
        modinfo.write_text(f'#!/bin/sh\n[ "$1 $2 $3" = "-k k -F" ] || exit 1\ncase "$4" in\n{cases}esac\n')
        modinfo.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
        got = host_state.boot_module("k")
        assert got == {"path": fields["filename"], "version": "580.95.05", "flavour": flavour, "signer": "MOK"}


def test_the_health_gate_fails_a_host_running_the_other_flavour(tmp_path):
    version = tmp_path / "version"
    version.write_text(PROPRIETARY_580)
    check = health.loaded_check(str(version), "580.95.05", "open")
    assert not check["ok"]
    assert check["detail"] == "loaded kernel module 580.95.05 proprietary, planned 580.95.05 open"
    version.write_text(OPEN_580)
    assert health.loaded_check(str(version), "580.95.05", "open")["ok"]
    assert health.loaded_check(str(version), "580.95.05")["ok"], "no planned flavour: the version alone"


def test_the_site_gate_and_the_activation_pass_the_planned_flavour():
    gate = site_task("Check the host's health before it returns to service.")["provision.gpu.health"]
    assert "provision_driver_kernel_module" in gate["planned_flavour"]
    import yaml
    from paths import ROLES

    handlers = yaml.safe_load((ROLES / "nvidia_driver" / "handlers" / "main.yml").read_text())
    (decide,) = [h for h in handlers if h["name"] == "Decide how to activate the new driver."]
    assert decide["provision.gpu.host_state"]["planned_flavour"] == "{{ provision_driver_kernel_module }}"


def loaded(flavour):
    return {"loaded_version": "580.95.05", "loaded_flavour": flavour, "nouveau_loaded": False}


def test_the_roles_check_of_the_loaded_driver_fails_the_other_flavour():
    args = {"provision_driver_version": "580.95.05", "provision_driver_kernel_module": "open"}
    ok, msg = assert_result("nvidia_driver", "Check that the planned driver is loaded.",
                            nvidia_driver_loaded=loaded("proprietary"), **args)  # fmt: skip
    assert not ok
    assert "the loaded NVIDIA driver is 580.95.05 proprietary, planned 580.95.05 open" in msg
    assert assert_result("nvidia_driver", "Check that the planned driver is loaded.",
                         nvidia_driver_loaded=loaded("open"), **args)[0]  # fmt: skip


def test_preflight_refuses_a_flavour_switch_on_busy_gpus():
    """Before: the planned version loaded counted as no driver change, whatever its flavour."""
    task = "Refuse a driver change while the GPUs are in use, or when their use cannot be ruled out."
    busy = {"gpu_use": "busy", "gpu_use_evidence": "python[77]", **loaded("proprietary")}
    args = {"provision_driver_version": "580.95.05", "provision_driver_kernel_module": "open"}
    ok, msg = assert_result("preflight", task, preflight_state=busy, **args)
    assert not ok
    assert "from 580.95.05 proprietary to 580.95.05 open" in msg
    assert assert_result("preflight", task, preflight_state={**busy, "loaded_flavour": "open"}, **args)[0]
