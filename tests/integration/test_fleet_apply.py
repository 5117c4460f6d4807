"""provision apply over the local test fleet: converge, re-run, partial failure, serial, check."""

import itertools
import json

import pytest
from harness.fleet import run_apply

from provision.fleet.runner import CHECK_PLAY

pytestmark = [pytest.mark.fleet]


def events(run_dir):
    """ansible-runner's job events of a run, in order."""
    artifacts = next((run_dir / "artifacts").iterdir())
    out = []
    for path in (artifacts / "job_events").glob("*.json"):
        out.append(json.loads(path.read_text()))
    return sorted(out, key=lambda e: e["counter"])


def test_apply_converges_a_mixed_fleet(fleet_env, tmp_path):
    inventory = fleet_env.inventory()
    rc, out, summary = run_apply(
        "-i", str(inventory), "--fleet", str(fleet_env.fleet_file()), run_dir=tmp_path / "run1"
    )
    assert rc == 0, out
    assert "run folder:" in out
    assert "gpu-a" in out
    assert set(summary["hosts"]) == {"gpu-a", "gpu-b", "gpu-c"}
    assert all(h["failed"] == 0 and h["unreachable"] == 0 and h["changed"] > 0 for h in summary["hosts"].values())
    a100, h100 = fleet_env.plans["a100"], fleet_env.plans["h100"]
    for host, plan in (("gpu-a", a100), ("gpu-b", h100), ("gpu-c", a100)):
        for pkg in plan.driver.packages:
            assert fleet_env.dpkg_version(host, pkg.name) == f"{plan.driver.version}-1"
        for pkg in plan.container_toolkit.packages:
            assert fleet_env.dpkg_version(host, pkg.name) == f"{plan.container_toolkit.version}-1"
        held = fleet_env.fleet.exec(host, "apt-mark showhold").split()
        assert {p.name for p in plan.driver.packages} <= set(held)
        assert {p.name for p in plan.container_toolkit.packages} <= set(held)
        prefs = fleet_env.fleet.exec(host, "cat /etc/apt/preferences.d/provision-nvidia-driver")
        assert f"Pin: version {plan.driver.version}-*" in prefs
        assert '"nvidia-";' in fleet_env.fleet.exec(host, "cat /etc/apt/apt.conf.d/51provision-nvidia")
        daemon = json.loads(fleet_env.fleet.exec(host, "cat /etc/docker/daemon.json"))
        assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
        assert daemon["storage-driver"] == "vfs", "a key that was there before survives the merge"
        assert fleet_env.fleet.exec(host, "ls /etc/docker/ | grep -c '^daemon.json.*~$' || true").strip() == "1", (
            "the old daemon.json is kept as a backup"
        )
        assert fleet_env.fleet.exec(host, "systemctl is-enabled nvidia-persistenced").strip() == "enabled"
        assert fleet_env.fleet.exec(host, "systemctl is-active nvidia-persistenced").strip() == "active"
        assert "Persistence" not in fleet_env.fleet.exec(
            host, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader"
        )
        assert set(
            fleet_env.fleet.exec(host, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader").split()
        ) == {"Enabled"}
        assert "nvidia" in json.loads(fleet_env.fleet.exec(host, "docker info --format '{{json .Runtimes}}'"))
        assert "blacklist nouveau" in fleet_env.fleet.exec(host, "cat /etc/modprobe.d/blacklist-nouveau.conf")
        assert "nvidia.com/gpu" in fleet_env.fleet.exec(host, "cat /var/run/cdi/nvidia.yaml")
    # fabric manager only on the NVSwitch (SXM) host, at the driver's exact version, enabled and held
    assert fleet_env.dpkg_version("gpu-b", "nvidia-fabricmanager") == f"{h100.driver.version}-1"
    assert fleet_env.fleet.exec("gpu-b", "systemctl is-active nvidia-fabricmanager").strip() == "active"
    assert "nvidia-fabricmanager" in fleet_env.fleet.exec("gpu-b", "apt-mark showhold").split()
    for host in ("gpu-a", "gpu-c"):
        assert fleet_env.dpkg_version(host, "nvidia-fabricmanager") == ""
    # mirrors and proxy: packages came from the loopback mirror, through the proxy
    served = [path for _, path, _ in fleet_env.kit.server.requests]
    assert any(p.endswith(".deb") for p in served)
    assert any("/compute/cuda/repos/debian12/x86_64/" in url for _, url in fleet_env.proxy.seen)
    assert any("/libnvidia-container/stable/deb/amd64/" in url for _, url in fleet_env.proxy.seen)
    # the private data dir is kept as the run's artifacts
    assert (tmp_path / "run1" / "plans" / "a100.lock.json").exists()
    assert any(e["event"] == "playbook_on_stats" for e in events(tmp_path / "run1"))


def test_second_apply_changes_nothing(fleet_env, tmp_path):
    # every task again (--full): the roles themselves are idempotent
    rc, out, summary = run_apply(
        "-i", str(fleet_env.inventory()), "--fleet", str(fleet_env.fleet_file()), "--full", run_dir=tmp_path / "full"
    )
    assert rc == 0, out
    assert {h: v["changed"] for h, v in summary["hosts"].items()} == {"gpu-a": 0, "gpu-b": 0, "gpu-c": 0}, out
    assert all(v["ok"] > 40 for v in summary["hosts"].values()), "the full run ran the roles"
    # a plain re-run: the recorded state still holds, so each host ends after one check
    rc, out, summary = run_apply(
        "-i", str(fleet_env.inventory()), "--fleet", str(fleet_env.fleet_file()), run_dir=tmp_path / "quick"
    )
    assert rc == 0, out
    assert {h: v["changed"] for h, v in summary["hosts"].items()} == {"gpu-a": 0, "gpu-b": 0, "gpu-c": 0}, out
    assert all(v["ok"] < 5 for v in summary["hosts"].values()), summary


def test_check_diff_changes_nothing(fleet_env, tmp_path):
    host = "gpu-a"
    original = fleet_env.fleet.exec(host, "cat /etc/docker/daemon.json")
    tampered = json.loads(original)
    del tampered["runtimes"]
    fleet_env.fleet.exec(host, f"echo '{json.dumps(tampered)}' > /etc/docker/daemon.json")
    try:
        rc, out, summary = run_apply(
            "-i",
            str(fleet_env.inventory()),
            "--fleet",
            str(fleet_env.fleet_file()),
            "--check",
            "--diff",
            "--limit",
            host,
            run_dir=tmp_path / "check",
        )
        assert rc == 0, out
        assert summary["check"] is True
        assert summary["hosts"][host]["changed"] >= 1
        after = json.loads(fleet_env.fleet.exec(host, "cat /etc/docker/daemon.json"))
        assert after == tampered, "check mode must not write"
        diffs = [
            e
            for e in events(tmp_path / "check")
            if e["event"] == "runner_on_ok" and e["event_data"].get("res", {}).get("diff")
        ]
        assert any("nvidia-container-runtime" in json.dumps(e["event_data"]["res"]["diff"]) for e in diffs)
    finally:
        fleet_env.fleet.exec(host, f"cat > /etc/docker/daemon.json <<'EOF'\n{original}\nEOF")


def test_serial_runs_hosts_in_batches(fleet_env, tmp_path):
    """The hosts to change (all of them: --full; the toolkit role only, to keep it short) change one
    batch at a time, after one check of every host at once."""
    rc, out, _summary = run_apply(
        "-i",
        str(fleet_env.inventory()),
        "--fleet",
        str(fleet_env.fleet_file()),
        "--serial",
        "1",
        "--full",
        "--tags",
        "container_runtime",
        run_dir=tmp_path / "serial",
    )
    assert rc == 0, out
    spans = {}
    checked = []
    for e in events(tmp_path / "serial"):
        host = e.get("event_data", {}).get("host")
        if e.get("event_data", {}).get("play") == CHECK_PLAY:
            checked += [host] if e["event"] == "runner_on_ok" else []
            continue
        if host and e["event"].startswith("runner_on_"):
            first, last = spans.get(host, (e["counter"], e["counter"]))
            spans[host] = (min(first, e["counter"]), max(last, e["counter"]))
    ordered = sorted(spans.values())
    assert len(ordered) == 3
    assert sorted(set(checked)) == ["gpu-a", "gpu-b", "gpu-c"]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ordered)), f"batches overlap: {spans}"


def test_a_failed_batch_stops_the_rollout_and_the_rest_are_not_run(fleet_env, tmp_path):
    """Default rollout: batches of 20% (here one host each), fail budget 0."""
    inventory = fleet_env.inventory("rolling.yml", hosts=("gpu-d", "gpu-e", "gpu-x"))
    rc, out, summary = run_apply(
        "-i", str(inventory), "--fleet", str(fleet_env.fleet_file()), run_dir=tmp_path / "rolling"
    )
    assert rc == 1, out
    hosts = summary["hosts"]
    assert hosts["gpu-d"]["outcome"] == "failed"
    assert "simulated driver install failure" in hosts["gpu-d"]["cause"]
    # every host is checked first, at once: gpu-x cannot be reached (it is no host to change)
    assert hosts["gpu-x"]["outcome"] == "unreachable", hosts["gpu-x"]
    assert hosts["gpu-e"]["outcome"] == "not run", hosts["gpu-e"]
    assert "the rollout stopped after the batch where gpu-d failed" in hosts["gpu-e"]["not_run"]
    assert "not run" in out
    lock = fleet_env.fleet.exec("gpu-d", "test -e /var/lib/provision/apply.lock && echo held || echo free")
    assert lock.strip() == "free", "the failed host's run lock was given back"


def test_unreachable_and_failing_hosts_do_not_stop_the_others(fleet_env, tmp_path):
    """Opted out of the rolling default: one batch, any number of failures tolerated."""
    inventory = fleet_env.inventory("partial.yml", hosts=("gpu-d", "gpu-e", "gpu-x"))
    rc, out, summary = run_apply(
        "-i",
        str(inventory),
        "--fleet",
        str(fleet_env.fleet_file()),
        "--serial",
        "100%",
        "--max-fail-percentage",
        "100",
        run_dir=tmp_path / "partial",
    )
    assert rc == 1, out
    hosts = summary["hosts"]
    assert hosts["gpu-e"]["failed"] == 0
    assert hosts["gpu-e"]["unreachable"] == 0
    assert hosts["gpu-e"]["changed"] > 0
    assert fleet_env.dpkg_version("gpu-e", "nvidia-fabricmanager") == f"{fleet_env.plans['h100'].driver.version}-1"
    assert hosts["gpu-x"]["unreachable"] == 1
    assert hosts["gpu-x"]["cause"].startswith("unreachable")
    assert hosts["gpu-d"]["failed"] == 1
    assert "simulated driver install failure" in hosts["gpu-d"]["cause"]
    assert "gpu-x" in out
    assert "gpu-d" in out
    assert "unreachable" in out


def test_invalid_daemon_json_is_refused_and_kept(fleet_env, tmp_path):
    host = "gpu-c"
    original = fleet_env.fleet.exec(host, "cat /etc/docker/daemon.json")
    fleet_env.fleet.exec(host, 'printf \'{"storage-driver": "vfs",\' > /etc/docker/daemon.json')
    try:
        rc, _out, summary = run_apply(
            "-i",
            str(fleet_env.inventory()),
            "--fleet",
            str(fleet_env.fleet_file()),
            "--limit",
            host,
            run_dir=tmp_path / "bad-json",
        )
        assert rc == 1
        assert "is not a valid JSON object" in summary["hosts"][host]["cause"]
        assert fleet_env.fleet.exec(host, "cat /etc/docker/daemon.json") == '{"storage-driver": "vfs",'
    finally:
        fleet_env.fleet.exec(host, f"cat > /etc/docker/daemon.json <<'EOF'\n{original}\nEOF")


def test_interrupted_run_reconverges(fleet_env, tmp_path):
    """A run that stopped half-way (toolkit removed, runtime gone, hold dropped) converges again."""
    host = "gpu-c"
    fleet_env.fleet.exec(
        host,
        "apt-mark unhold nvidia-container-toolkit >/dev/null; "
        "dpkg -r nvidia-container-toolkit >/dev/null 2>&1; "
        "python3 -c \"import json; p='/etc/docker/daemon.json'; d=json.load(open(p)); "
        "d.pop('runtimes', None); json.dump(d, open(p, 'w'))\"",
    )
    rc, out, _summary = run_apply(
        "-i",
        str(fleet_env.inventory()),
        "--fleet",
        str(fleet_env.fleet_file()),
        "--limit",
        host,
        run_dir=tmp_path / "reconverge",
    )
    assert rc == 0, out
    assert (
        fleet_env.dpkg_version(host, "nvidia-container-toolkit")
        == f"{fleet_env.plans['a100'].container_toolkit.version}-1"
    )
    assert "nvidia" in json.loads(fleet_env.fleet.exec(host, "cat /etc/docker/daemon.json"))["runtimes"]
