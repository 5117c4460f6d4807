"""provision.gpu.health's checks, against a stand-in nvidia-smi (the fleet tests run it for real)."""

import importlib.util

import pytest
from paths import MODULES

spec = importlib.util.spec_from_file_location("health", MODULES / "health.py")
health = importlib.util.module_from_spec(spec)
spec.loader.exec_module(health)


def smi(tmp_path, body: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("body", "gpus", "bad"),
    [
        ("printf '0, 580.95.05\\n1, 580.95.05\\n'", 2, []),
        ("printf '0, 580.95.05\\n'", 2, ["gpu-count"]),
        ("printf '0, 570.86.15\\n1, 570.86.15\\n'", 2, ["driver"]),
        ("echo 'Failed to initialize NVML: Driver/library version mismatch'; exit 18", 2, ["nvidia-smi"]),
        ("sleep 5", 2, ["nvidia-smi"]),
    ],
)
def test_smi_checks(tmp_path, body, gpus, bad):
    checks = health.smi_checks(smi(tmp_path, body), "580.95.05", gpus, timeout=1)
    assert [c["name"] for c in checks if not c["ok"]] == bad


def test_a_hung_nvidia_smi_is_reported_with_its_deadline(tmp_path):
    (check,) = health.smi_checks(smi(tmp_path, "sleep 5"), "580.95.05", 0, timeout=1)
    assert "did not answer in 1 s" in check["detail"]


def test_loaded_module(tmp_path):
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n")
    assert health.loaded_check(str(version), "580.95.05")["ok"]
    assert not health.loaded_check(str(version), "595.91.07")["ok"]
    assert "none" in health.loaded_check(str(tmp_path / "absent"), "580.95.05")["detail"]
