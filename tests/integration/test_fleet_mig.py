"""The mig role over the test fleet: planned MIG layouts on A100 (mode change needs a GPU reset)
and H100 hosts, through the fake nvidia-smi that records the commands and reports the layout;
a second run changes nothing; the layout comes back after a reboot; verify checks it."""

import json
import subprocess
import sys

import pytest
from harness.fleet import run_apply

# From fresh hosts or converged ones alike (its first run converges them to MIG plans), and it
# leaves MIG off again: tests/run runs it on a session fleet of its own, beside the shared one.
pytestmark = [pytest.mark.fleet, pytest.mark.fresh_fleet]
A100_LAYOUT = "3g.40gb,2g.20gb,2x1g.10gb"
H100_LAYOUT = "4g.40gb,3g.40gb"
EXPECTED = {"a100": ["1g.10gb@0", "1g.10gb@1", "2g.20gb@2", "3g.40gb@4"], "h100": ["3g.40gb@4", "4g.40gb@0"]}
HOST_GROUPS = {"gpu-a": "a100", "gpu-b": "h100", "gpu-c": "a100"}


def layout(fleet, host):
    out = fleet.exec(host, "nvidia-smi mig -lgi", check=False)
    rows = [line.split() for line in out.splitlines() if " MIG " in line]
    per_gpu: dict[str, list[str]] = {}
    for row in rows:  # | 0  MIG 3g.40gb  9  1  4:4  |
        per_gpu.setdefault(row[1], []).append(f"{row[3]}@{row[6].split(':')[0]}")
    return {gpu: sorted(v) for gpu, v in per_gpu.items()}


@pytest.fixture(scope="module")
def mig_fleet(fleet_env):
    fleet_file = fleet_env.fleet_file(
        "fleet-mig.yaml", a100={"gpu": "a100-pcie-80gb", "mig": A100_LAYOUT}, h100={"mig": H100_LAYOUT}
    )
    yield fleet_env, fleet_file
    for host in HOST_GROUPS:  # back to GPUs without MIG for the other tests
        fleet_env.fleet.exec(
            host,
            "systemctl disable --now provision-mig.service >/dev/null 2>&1; "
            "rm -f /var/lib/fakegpu/mig-mode.json /run/fakegpu/mig-mode.json "
            "/run/fakegpu/mig-instances.json",
            check=False,
        )


def test_mig_layouts_converge_and_stay(mig_fleet, tmp_path):
    env, fleet_file = mig_fleet
    inventory = str(env.inventory())
    # Ampere needs a GPU reset to switch MIG mode: without --allow-disruption the A100 hosts stop
    # and say so; the H100 host (no reset needed) converges. One batch, failures tolerated, so that
    # every host's outcome shows in one run (the rolling default would stop after the first).
    rc, out, summary = run_apply(
        "-i",
        inventory,
        "--fleet",
        str(fleet_file),
        "--serial",
        "100%",
        "--max-fail-percentage",
        "100",
        run_dir=tmp_path / "no-reset",
    )
    assert rc == 1, out
    for host in ("gpu-a", "gpu-c"):
        assert summary["hosts"][host]["failed"] == 1
        assert "MIG mode change pending" in summary["hosts"][host]["cause"], summary["hosts"][host]
    assert summary["hosts"]["gpu-b"]["failed"] == 0
    assert layout(env.fleet, "gpu-b") == {"0": EXPECTED["h100"], "1": EXPECTED["h100"]}

    rc, out, summary = run_apply(
        "-i", inventory, "--fleet", str(fleet_file), "--allow-disruption", run_dir=tmp_path / "converge"
    )
    assert rc == 0, out
    for host, group in HOST_GROUPS.items():
        assert layout(env.fleet, host) == {"0": EXPECTED[group], "1": EXPECTED[group]}, host
        assert env.fleet.exec(host, "systemctl is-enabled provision-mig.service").strip() == "enabled"
        config = json.loads(env.fleet.exec(host, "cat /etc/provision/mig.json"))
        assert sorted(f"{i['profile']}@{i['placement']}" for i in config["layout"]) == EXPECTED[group]
    log = env.fleet.exec("gpu-a", "cat /var/lib/fakegpu/commands.log")
    assert "nvidia-smi --gpu-reset -i 0,1" in log, "the A100's pending mode change was applied by a reset"
    assert "nvidia-smi mig -cgi 9:4,14:2,19:1,19:0 -C -i 0" in log, "instances created at their planned placements"
    # persistenced was stopped for the reset and is back
    assert env.fleet.exec("gpu-a", "systemctl is-active nvidia-persistenced").strip() == "active"

    # a second run changes nothing: the quick path, and every task again
    for extra, name in (((), "again"), (("--full",), "again-full")):
        rc, out, summary = run_apply("-i", inventory, "--fleet", str(fleet_file), *extra, run_dir=tmp_path / name)
        assert rc == 0, out
        assert {h: v["changed"] for h, v in summary["hosts"].items()} == {"gpu-a": 0, "gpu-b": 0, "gpu-c": 0}, out
    calls = env.fleet.exec("gpu-a", "grep -c -- '-cgi' /var/lib/fakegpu/commands.log").strip()
    assert calls == "2", "no instance was re-created by the second runs"

    # verify checks the layout
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "verify",
            "-i",
            inventory,
            "--fleet",
            str(fleet_file),
            "--only",
            "mig,nvidia-smi",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert {h["host"]: {c["id"]: c["status"] for c in h["checks"]}["mig"] for h in doc["hosts"]} == {
        "gpu-a": "pass",
        "gpu-b": "pass",
        "gpu-c": "pass",
    }


def test_mig_layout_survives_a_reboot_and_drift_is_named(mig_fleet):
    env, fleet_file = mig_fleet
    # a reboot loses the instances (and, on Hopper, MIG mode); the boot unit creates them again
    env.fleet.reboot("gpu-b")
    assert env.fleet.exec("gpu-b", "systemctl is-active provision-mig.service").strip() == "active"
    assert layout(env.fleet, "gpu-b") == {"0": EXPECTED["h100"], "1": EXPECTED["h100"]}
    # someone re-partitions a GPU by hand: verify names the mig check
    env.fleet.exec("gpu-c", "nvidia-smi mig -dci -i 1 && nvidia-smi mig -dgi -i 1 && nvidia-smi mig -cgi 0 -C -i 1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "verify",
            "-i",
            str(env.inventory()),
            "--fleet",
            str(fleet_file),
            "--limit",
            "gpu-c",
            "--only",
            "mig",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 1
    check = json.loads(proc.stdout)["hosts"][0]["checks"][0]
    assert check["status"] == "fail", check
    assert "GPU 1 has 7g.80gb@0" in check["detail"], check
    # and a full apply puts the planned layout back
    rc, out, _ = run_apply(
        "-i",
        str(env.inventory()),
        "--fleet",
        str(fleet_file),
        "--limit",
        "gpu-c",
        "--full",
        run_dir=env.workdir / "mig-repair",
    )
    assert rc == 0, out
    assert layout(env.fleet, "gpu-c") == {"0": EXPECTED["a100"], "1": EXPECTED["a100"]}
