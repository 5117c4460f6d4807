"""provision doctor end to end over SSH: healthy converged hosts, then the fake GPUs' fault modes
(throttling, a driver/library mismatch) and an Xid in the kernel log, each named with its fix."""

import json
import re
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.fleet]
XID_79 = (
    "Nov 30 02:11:07 gpu-c kernel: [ 8412.441061] NVRM: Xid (PCI:0000:17:00): 79, pid=0, "
    "name=python3, GPU has fallen off the bus."
)


def doctor(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "provision", "doctor", *args, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        return proc.returncode, json.loads(proc.stdout), proc.stderr
    except ValueError:
        raise AssertionError(
            f"doctor printed no JSON (exit {proc.returncode}): {proc.stdout[-1500:]} {proc.stderr[-1500:]}"
        ) from None


def ids(doc, host, severity=None):
    entry = next(h for h in doc["hosts"] if h["host"] == host)
    return {f["id"] for f in entry["findings"] if severity is None or f["severity"] == severity}


def set_fault(fleet, host, fault):
    fleet.exec(
        host,
        "python3 -c \"import json; p='/etc/fakegpu/gpu.json'; d=json.load(open(p)); "
        f"d['fault']={fault!r}; json.dump(d, open(p, 'w'))\"",
    )


def test_doctor_finds_converged_hosts_healthy(converged_fleet, tmp_path):
    rc, doc, err = doctor("-i", str(converged_fleet.inventory()), "--save-dir", str(tmp_path / "saved"))
    assert rc == 0, json.dumps(doc["findings"], indent=1) + err
    assert {h["host"] for h in doc["hosts"]} == {"gpu-a", "gpu-b", "gpu-c"}
    assert all(not ids(doc, h, "error") for h in ("gpu-a", "gpu-b", "gpu-c"))
    saved = (tmp_path / "saved" / "gpu-b.doctor.txt").read_text()
    assert "===== provision-doctor: nvidia-smi-q-x =====" in saved
    assert "NVIDIA H100 80GB HBM3" in saved
    # what was saved is a capture doctor reads again offline, to the same verdict
    proc = subprocess.run(
        [sys.executable, "-m", "provision", "doctor", "--from-file", str(tmp_path / "saved" / "gpu-b.doctor.txt")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_doctor_names_each_fault_over_ssh(converged_fleet):
    env = converged_fleet.fleet
    set_fault(env, "gpu-a", "throttle")
    set_fault(env, "gpu-b", "mismatch")
    env.exec("gpu-c", f"printf '%s\\n' '{XID_79}' >> /var/log/kern.log")
    try:
        rc, doc, err = doctor("-i", str(converged_fleet.inventory()))
        assert rc == 1, err
        a, b, c = ids(doc, "gpu-a"), ids(doc, "gpu-b"), ids(doc, "gpu-c")
        assert a & {"clocks-hw-thermal-slowdown", "clocks-hw-slowdown", "temperature-near-slowdown"}, a
        assert "driver-library-mismatch" in ids(doc, "gpu-b", "error"), b
        assert "xid-79" in ids(doc, "gpu-c", "error"), c
        findings = {(f["host"], f["id"]): f for f in doc["findings"]}
        assert "fallen off the bus" in findings[("gpu-c", "xid-79")]["evidence"]
        assert findings[("gpu-b", "driver-library-mismatch")]["fix"]
        # one host at a time, as a table
        proc = subprocess.run(
            [sys.executable, "-m", "provision", "doctor", "-i", str(converged_fleet.inventory()), "--limit", "gpu-b"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 1
        assert "driver-library-mismatch" in proc.stdout
        assert "gpu-a" not in proc.stdout
    finally:
        set_fault(env, "gpu-a", None)
        set_fault(env, "gpu-b", None)
        env.exec("gpu-c", "sed -i '/NVRM: Xid/d' /var/log/kern.log")


def test_doctor_reports_an_unreachable_host(fleet_env):
    rc, doc, _ = doctor("-i", str(fleet_env.inventory("unreachable-doctor.yml", hosts=("gpu-x",))))
    assert rc == 1
    assert ids(doc, "gpu-x") == {"host-unreachable"}


def test_a_hung_nvidia_smi_is_a_finding_and_the_kernel_log_names_the_cause(converged_fleet):
    """nvidia-smi on gpu-a hangs and ignores SIGTERM; the Xid 79 is in the kernel log. doctor
    reads the kernel log first, stops nvidia-smi at its share of --host-timeout, and reports
    both; the hung process is gone afterwards."""
    from test_fleet_verify import hang_nvidia_smi, restore_nvidia_smi

    env = converged_fleet.fleet
    hang_nvidia_smi(env, "gpu-a")
    try:
        t0 = time.monotonic()
        rc, doc, err = doctor("-i", str(converged_fleet.inventory()), "--host-timeout", "30")
        wall = time.monotonic() - t0
        assert rc == 1, err
        findings = {(f["host"], f["id"]): f for f in doc["findings"]}
        hung = findings[("gpu-a", "nvidia-smi-hung")]
        # Budget(30): nvidia-smi's share ends before the collector's own limit (remote_script)
        assert re.match(r"nvidia-smi did not answer in \d+ s: the GPU may have fallen off the bus", hung["title"])
        assert "killed: it ignored SIGTERM" in hung["evidence"]
        assert ("gpu-a", "xid-79") in findings
        first = next(h for h in doc["hosts"] if h["host"] == "gpu-a")["findings"][0]
        assert first["id"] == "nvidia-smi-hung"
        assert wall < 30 + 15, wall
        assert not ids(doc, "gpu-b", "error")
        assert not ids(doc, "gpu-c", "error")
        still = env.exec(
            "gpu-a",
            "for p in $(cat /run/hung-smi.pids); do [ -d /proc/$p ] && grep -q '^State:.*[RS]' /proc/$p/status "
            "&& echo $p; done; true",
        )
        assert not still.split(), f"hung nvidia-smi processes left on gpu-a: {still}"
    finally:
        assert restore_nvidia_smi(env, "gpu-a") == []
