"""The provision.gpu.host_state module's facts and its driver-activation decision."""

import importlib.util

import pytest
from paths import MODULES

spec = importlib.util.spec_from_file_location("host_state", MODULES / "host_state.py")
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
    var = tmp_path / "efivars" / "SecureBoot"
    assert host_state.secure_boot_state(str(var)) == "unsupported"  # no efivars: a legacy BIOS boot
    var.parent.mkdir()
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


# -- GPU use: busy, idle or unknown (fails closed) ------------------------------------------------
def fake_proc(tmp_path, processes):
    """A /proc with {pid: (comm, [fd targets])}; fd links point at the given paths."""
    proc = tmp_path / "proc"
    for pid, (comm, targets) in processes.items():
        fd = proc / str(pid) / "fd"
        fd.mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
        for i, target in enumerate(targets):
            (fd / str(i)).symlink_to(target)
    return str(proc)


def test_device_users_skip_nvidia_daemons(tmp_path):
    proc = fake_proc(
        tmp_path,
        {
            100: ("python", ["/dev/null", "/dev/nvidia0"]),
            101: ("nvidia-persiste", ["/dev/nvidiactl", "/dev/nvidia0"]),
            102: ("nv-fabricmanage", ["/dev/nvidia-nvswitchctl"]),
            103: ("bash", ["/dev/pts/0"]),
            104: ("trainer", ["/dev/nvidia-uvm"]),
        },
    )
    assert host_state.device_users(proc) == {100: "python", 104: "trainer"}


def test_uvm_refcount(tmp_path):
    (tmp_path / "nvidia_uvm").mkdir()
    (tmp_path / "nvidia_uvm" / "refcnt").write_text("3\n")
    assert host_state.uvm_refcount(str(tmp_path)) == 3
    assert host_state.uvm_refcount(str(tmp_path / "absent")) == 0


@pytest.mark.parametrize(
    ("loaded", "pids", "error", "users", "uvm", "state", "said"),
    [
        (False, [], None, {}, 0, "idle", "no NVIDIA kernel module"),
        (True, [], None, {}, 0, "idle", "no compute process"),
        (True, [4242], None, {}, 0, "busy", "compute processes 4242"),
        (True, [], None, {77: "python"}, 0, "busy", "python[77]"),
        (True, [], None, {}, 2, "busy", "reference count 2"),
        (False, [], None, {77: "sleep"}, 0, "busy", "sleep[77]"),
        (True, [], "Failed to initialize NVML: Driver/library version mismatch", {}, 0, "unknown", "version mismatch"),
        (False, [], "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", {}, 0, "idle", ""),
        (True, None, None, {}, 0, "unknown", "nvidia-smi is not installed"),
        (False, None, None, {}, 0, "idle", "no NVIDIA kernel module"),
    ],
)
def test_gpu_use_fails_closed(loaded, pids, error, users, uvm, state, said):
    got, evidence = host_state.gpu_use(loaded, pids, error, users, uvm)
    assert got == state
    assert said in evidence


# -- no reboot into a kernel without the module ---------------------------------------------------
def test_boot_kernel_follows_the_vmlinuz_link_else_the_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(host_state.shutil, "which", lambda name: None)  # no grubby: a Debian-family host
    for v in ("5.15.0-91-generic", "5.15.0-125-generic", "5.15.0-99-generic"):
        (tmp_path / f"vmlinuz-{v}").write_text("")
    assert host_state.boot_kernel(str(tmp_path), "running") == "5.15.0-125-generic"
    (tmp_path / "vmlinuz").symlink_to(tmp_path / "vmlinuz-5.15.0-99-generic")
    assert host_state.boot_kernel(str(tmp_path), "running") == "5.15.0-99-generic"
    assert host_state.boot_kernel(str(tmp_path / "absent"), "6.1.0-running") == "6.1.0-running"


@pytest.mark.parametrize(
    ("secure_boot", "module", "signer", "refused", "said"),
    [
        ("disabled", "/lib/modules/k/updates/dkms/nvidia.ko", None, False, ""),
        ("enabled", "/lib/modules/k/updates/dkms/nvidia.ko", "provision MOK", False, ""),
        ("disabled", None, None, True, "no nvidia module is built for k"),
        ("enabled", "/lib/modules/k/updates/dkms/nvidia.ko", "", True, "is unsigned"),
    ],
)
def test_boot_check(secure_boot, module, signer, refused, said):
    why = host_state.boot_check("k", secure_boot, {"path": module, "signer": signer})
    assert (why is not None) == refused
    if refused:
        assert said in why
        assert "dkms" in why


def test_gpu_processes_tells_an_absent_nvidia_smi_from_an_idle_one(tmp_path):
    assert host_state.gpu_processes(str(tmp_path / "no-such-nvidia-smi")) == (None, None)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '4242\\n'\n")
    smi.chmod(0o755)
    assert host_state.gpu_processes(str(smi)) == ([4242], None)
