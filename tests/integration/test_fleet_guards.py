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


def test_a_rolling_run_drains_changes_gates_and_undrains_each_host_in_turn(fleet_env, tmp_path):
    log = tmp_path / "drain.log"
    record = tmp_path / "record"
    record.write_text(f'#!/bin/sh\necho "$1 $2" >> {log}\n')
    record.chmod(0o755)
    run_dir = tmp_path / "rolling"
    rc, out, summary = run_apply(
        "-i",
        str(fleet_env.inventory()),
        "--fleet",
        str(fleet_env.fleet_file()),
        "--full",
        "--drain-command",
        f"{record} drain {{{{ inventory_hostname }}}}",
        "--undrain-command",
        f"{record} undrain {{{{ inventory_hostname }}}}",
        run_dir=run_dir,
    )
    assert rc == 0, out
    lines = log.read_text().split("\n")[:-1]
    hosts = [line.split()[1] for line in lines if line.startswith("drain ")]  # the inventory's batch order
    assert sorted(hosts) == ["gpu-a", "gpu-b", "gpu-c"]
    assert lines == [f"{step} {h}" for h in hosts for step in ("drain", "undrain")], "one host at a time"
    artifacts = next((run_dir / "artifacts").iterdir())
    events = sorted(
        (json.loads(p.read_text()) for p in (artifacts / "job_events").glob("*.json")), key=lambda e: e["counter"]
    )
    steps = {
        "Drain the host before changing it.": "drain",
        "Check that the host runs the OS its plan was made for.": "change",
        "Check the host's health before it returns to service.": "gate",
        "Return the host to service.": "undrain",
    }
    order = [
        (e["event_data"]["host"], steps[e["event_data"]["task"]])
        for e in events
        if e["event"] == "runner_on_ok" and e["event_data"].get("task") in steps
    ]
    assert order == [(h, step) for h in hosts for step in ("drain", "change", "gate", "undrain")]
    assert all(summary["hosts"][h]["outcome"] in ("ok", "changed") for h in hosts)


def test_a_failed_health_gate_keeps_the_host_drained_and_stops_the_rollout(fleet_env, tmp_path):
    """A GPU gone after the change (nvidia-smi shows 1 of the 2 GPUs on the bus): no undrain, no next batch."""
    log = tmp_path / "drain.log"
    record = tmp_path / "record"
    record.write_text(f'#!/bin/sh\necho "$1 $2" >> {log}\n')
    record.chmod(0o755)
    exec_ = fleet_env.fleet.exec
    original = exec_(HOST, "cat /etc/fakegpu/gpu.json")
    gpu = json.loads(original)
    gpu["count"] = 1
    exec_(HOST, f"cat > /etc/fakegpu/gpu.json <<'EOF'\n{json.dumps(gpu)}\nEOF")
    try:
        rc, out, summary = run_apply(
            "-i",
            str(fleet_env.inventory()),
            "--fleet",
            str(fleet_env.fleet_file()),
            "--limit",
            f"{HOST},gpu-b",
            "--full",
            "--drain-command",
            f"{record} drain {{{{ inventory_hostname }}}}",
            "--undrain-command",
            f"{record} undrain {{{{ inventory_hostname }}}}",
            run_dir=tmp_path / "gate",
        )
        assert rc == 1, out
        assert "health gate failed: 1 GPU(s) answer, 2 before the change" in summary["hosts"][HOST]["cause"]
        assert summary["hosts"]["gpu-b"]["outcome"] == "not run"
        assert log.read_text() == f"drain {HOST}\n", "the host stays drained; the next batch never starts"
    finally:
        exec_(HOST, f"cat > /etc/fakegpu/gpu.json <<'EOF'\n{original}\nEOF")


LOCK = "/var/lib/provision/apply.lock"


def test_a_second_apply_is_refused_while_another_run_holds_the_host(fleet_env, tmp_path):
    exec_ = fleet_env.fleet.exec
    held = {"run_id": "20261130T190000Z-abc123", "controller": "ops-1", "since": "2026-11-30T19:00:00+00:00",
            "expires": "2999-01-01T00:00:00+00:00"}  # fmt: skip
    exec_(HOST, f"mkdir -p /var/lib/provision && cat > {LOCK} <<'EOF'\n{json.dumps(held)}\nEOF")
    try:
        rc, out, summary = apply_full(fleet_env, tmp_path / "second")
        assert rc == 1, out
        cause = summary["hosts"][HOST]["cause"]
        assert "another provision apply holds this host: run 20261130T190000Z-abc123 from ops-1" in cause
        assert json.loads(exec_(HOST, f"cat {LOCK}")) == held, "the other run's lock is left alone"
    finally:
        exec_(HOST, f"rm -f {LOCK}")


def test_an_expired_lock_is_taken_over_and_every_run_gives_its_lock_back(fleet_env, tmp_path):
    exec_ = fleet_env.fleet.exec
    dead = {"run_id": "dead-run", "controller": "ops-1", "since": "2020-01-01T00:00:00+00:00",
            "expires": "2020-01-01T04:00:00+00:00"}  # fmt: skip
    exec_(HOST, f"mkdir -p /var/lib/provision && cat > {LOCK} <<'EOF'\n{json.dumps(dead)}\nEOF")
    rc, out, _ = apply_full(fleet_env, tmp_path / "takeover")
    assert rc == 0, out
    assert "took over the lock of run dead-run" in out or "took over the lock of run dead-run" in "".join(
        p.read_text() for p in (tmp_path / "takeover" / "artifacts").rglob("stdout")
    )
    assert exec_(HOST, f"test -e {LOCK} && echo held || echo free").strip() == "free"


def test_no_reboot_into_a_kernel_without_the_nvidia_module(fleet_env, tmp_path):
    """The driver changes and a reboot is due, but the kernel the next boot starts has no nvidia
    module (a container has no /lib/modules of its own): the host fails, naming the kernel, and is
    not rebooted."""
    exec_ = fleet_env.fleet.exec
    package = fleet_env.plans["a100"].driver.packages[-1].name
    exec_(HOST, f"apt-mark unhold {package} >/dev/null; dpkg -r --force-depends {package} >/dev/null 2>&1")
    try:
        rc, out, summary = apply_full(
            fleet_env,
            tmp_path / "reboot",
            "-e",
            "nvidia_driver_manage_kernel_modules=true",
            "-e",
            "nvidia_driver_reboot=always",
        )
        assert rc == 1, out
        host = summary["hosts"][HOST]
        assert "no reboot: no nvidia module is built for" in host["cause"]
        assert "dkms autoinstall" in host["cause"]
        assert host["rebooted"] is False
    finally:
        rc, out, _ = apply_full(fleet_env, tmp_path / "repair")
        assert rc == 0, out
