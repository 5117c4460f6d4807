"""The provision.gpu.host_state module's facts and its driver-activation decision."""

import importlib.util

import pytest
from support import ROOT

spec = importlib.util.spec_from_file_location(
    "host_state", ROOT / "playbooks/collections/ansible_collections/provision/gpu/plugins/modules/host_state.py"
)
host_state = importlib.util.module_from_spec(spec)
spec.loader.exec_module(host_state)

# /proc/driver/nvidia/version as the open and proprietary modules print it
OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 10:21:35 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.06  Wed Jun 26 06:46:07 UTC 2024\n"
    "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n"
)


@pytest.mark.parametrize(("text", "version"), [(OPEN, "580.95.05"), (PROPRIETARY, "535.183.06"), ("", None)])
def test_loaded_version(tmp_path, text, version):
    path = tmp_path / "version"
    path.write_text(text)
    assert host_state.loaded_version(str(path)) == version
    assert host_state.loaded_version(str(tmp_path / "absent")) is None


def test_nvidia_gpus_reads_vendor_device_and_class(tmp_path):
    for addr, vendor, device, klass in (
        ("0000:17:00.0", "0x10de", "0x20b5", "0x030200"),
        ("0000:18:00.0", "0x10de", "0x22a3", "0x068000"),  # NVSwitch: not a GPU
        ("0000:00:1f.0", "0x8086", "0xa1c1", "0x060100"),
    ):
        d = tmp_path / addr
        d.mkdir()
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
        (d / "class").write_text(klass + "\n")
    assert host_state.nvidia_gpus(str(tmp_path)) == [
        {"address": "0000:17:00.0", "vendor": "0x10de", "device": "0x20b5"}
    ]
    assert host_state.nvidia_gpus(str(tmp_path / "none")) == []


def test_secure_boot_state(tmp_path):
    var = tmp_path / "SecureBoot"
    assert host_state.secure_boot_state(str(var)) == "unsupported"
    var.write_bytes(b"\x06\x00\x00\x00\x01")
    assert host_state.secure_boot_state(str(var)) == "enabled"
    var.write_bytes(b"\x06\x00\x00\x00\x00")
    assert host_state.secure_boot_state(str(var)) == "disabled"


def test_loaded_modules(tmp_path):
    p = tmp_path / "modules"
    p.write_text("nvidia_uvm 1564672 0 - Live 0x0\nnvidia 56803328 2 nvidia_uvm, Live 0x0\nnouveau 2 0 - Live 0x0\n")
    assert {"nvidia", "nvidia_uvm", "nouveau"} == host_state.loaded_modules(str(p))


@pytest.mark.parametrize(
    ("policy", "loaded", "nvidia", "nouveau", "changed", "action"),
    [
        ("auto", "595.91.07", True, False, True, "none"),  # already running the plan
        ("auto", None, False, False, True, "load"),  # fresh host: modprobe suffices
        ("auto", "580.95.05", True, False, True, "reboot"),  # an old driver holds the GPU
        ("auto", None, False, True, True, "reboot"),  # nouveau holds it
        ("never", "580.95.05", True, False, True, "none"),  # waits for the next reboot
        ("never", None, False, False, True, "load"),
        ("never", None, False, True, True, "none"),
        ("always", "595.91.07", True, False, True, "reboot"),  # always: any change reboots
        ("always", "595.91.07", True, False, False, "none"),
    ],
)
def test_decide(policy, loaded, nvidia, nouveau, changed, action):
    got, reason = host_state.decide(policy, "595.91.07", loaded, nvidia, nouveau, changed)
    assert got == action
    assert reason


def test_disk_free(tmp_path):
    assert host_state.disk_free_mb(str(tmp_path)) > 0
    assert host_state.disk_free_mb(str(tmp_path / "absent")) == 0
