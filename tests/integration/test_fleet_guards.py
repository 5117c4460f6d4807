"""Guards fail closed on a live host: a GPU in use, or whose use cannot be known, refuses a driver
change before anything on the host changes (issue "Safe on a live fleet")."""

import json

import pytest
from harness.fleet import run_apply

pytestmark = [pytest.mark.fleet]

HOST = "gpu-a"


def apply_full(fleet_env, run_dir, *extra):
    return run_apply(
        "-i",
        str(fleet_env.inventory()),
        "--fleet",
        str(fleet_env.fleet_file()),
        "--limit",
        HOST,
        "--full",
        *extra,
        run_dir=run_dir,
    )


def test_a_process_holding_a_gpu_device_refuses_the_driver_change(fleet_env, tmp_path):
    exec_ = fleet_env.fleet.exec
    exec_(HOST, "touch /dev/nvidia0 && (setsid sleep 900 3</dev/nvidia0 >/dev/null 2>&1 & echo $! > /run/busy.pid)")
    try:
        before = fleet_env.dpkg_version(HOST, "nvidia-container-toolkit")
        rc, out, summary = apply_full(fleet_env, tmp_path / "busy")
        assert rc == 1, out
        cause = summary["hosts"][HOST]["cause"]
        assert "the GPUs are busy" in cause
        assert "sleep[" in cause
        assert fleet_env.dpkg_version(HOST, "nvidia-container-toolkit") == before
    finally:
        exec_(HOST, "kill $(cat /run/busy.pid); rm -f /dev/nvidia0 /run/busy.pid")


def test_nvidia_smi_failing_with_the_driver_loaded_refuses_the_driver_change(fleet_env, tmp_path):
    """The state right after a half-done upgrade: the old module loaded, NVML mismatched."""
    exec_ = fleet_env.fleet.exec
    rc, out, _ = run_apply(
        "-i", str(fleet_env.inventory()), "--fleet", str(fleet_env.fleet_file()), "--limit", HOST,
        run_dir=tmp_path / "converge",
    )  # fmt: skip
    assert rc == 0, out
    original = exec_(HOST, "cat /etc/fakegpu/gpu.json")
    gpu = json.loads(original)
    gpu["fault"] = "mismatch"
    exec_(
        HOST,
        "mkdir -p /opt/fakegpu/proc && printf 'nvidia 1 0 - Live 0x0\\n' > /opt/fakegpu/proc/modules && "
        "printf 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\\n' "
        "> /opt/fakegpu/proc/version && "
        f"cat > /etc/fakegpu/gpu.json <<'EOF'\n{json.dumps(gpu)}\nEOF",
    )
    try:
        rc, out, summary = apply_full(
            fleet_env,
            tmp_path / "unknown",
            "-e",
            "preflight_proc_modules_path=/opt/fakegpu/proc/modules",
            "-e",
            "preflight_driver_version_path=/opt/fakegpu/proc/version",
        )
        assert rc == 1, out
        cause = summary["hosts"][HOST]["cause"]
        assert "the GPUs are unknown" in cause
        assert "Driver/library version mismatch" in cause
        assert "--allow-disruption" in cause
    finally:
        exec_(HOST, f"cat > /etc/fakegpu/gpu.json <<'EOF'\n{original}\nEOF\nrm -rf /opt/fakegpu/proc")
