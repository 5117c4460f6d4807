"""Rolling rollouts: every targeted host is in the summary, those never attempted as "not run"."""

import json

import pytest
import yaml
from support import ROOT

from provision.fleet import runner
from provision.fleet.runner import HostResult, RunResult

INVENTORY = {
    "all": {
        "children": {
            "a100": {"hosts": {f"n{i}": {"ansible_host": "127.0.0.1", "ansible_port": 2200 + i} for i in range(1, 6)}}
        }
    }
}


def host(name, **counts):
    base = {"ok": 5, "changed": 0, "failed": 0, "unreachable": 0, "skipped": 0}
    base.update(counts)
    return HostResult(name, rebooted=False, cause="boom" if counts.get("failed") else None, **base)


def test_hosts_after_a_failed_batch_are_not_run():
    result = RunResult("failed", 2, (host("n1", failed=1),), "/r", "/r/a")
    full = result.with_not_run(["n1", "n2", "n3"], None)
    assert [h.host for h in full.hosts] == ["n1", "n2", "n3"]
    assert [h.outcome for h in full.hosts] == ["failed", "not run", "not run"]
    assert "stopped after the batch where n1 failed" in full.hosts[1].not_run
    assert "fail budget 0%" in full.hosts[1].not_run
    assert not full.succeeded


def test_nothing_missing_changes_nothing():
    result = RunResult("successful", 0, (host("n1", changed=2), host("n2")), "/r", "/r/a")
    assert result.with_not_run(["n1", "n2"], 0) is result
    assert [h.outcome for h in result.hosts] == ["changed", "ok"]
    assert result.succeeded


def test_site_rolls_by_default():
    play = yaml.safe_load(
        (ROOT / "playbooks/collections/ansible_collections/provision/gpu/playbooks/site.yml").read_text()
    )[-1]  # the rolling play (the check play before it runs every host at once)
    assert play["serial"] == "{{ provision_serial | default('20%') }}"
    assert play["max_fail_percentage"] == "{{ provision_max_fail_percentage | default(0) }}"


@pytest.fixture
def fake_runner(monkeypatch):
    """The runner faked at the SDK edge: n1 fails in the first batch, nothing else runs."""
    calls = []

    def run_playbook(**kwargs):
        calls.append(kwargs)
        return RunResult("failed", 2, (host("n1", failed=1),), kwargs["run_dir"], kwargs["run_dir"] + "/artifacts")

    monkeypatch.setattr(runner, "run_playbook", run_playbook)
    return calls


def test_apply_summary_names_every_host(cli, tmp_path, fake_runner):
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump(INVENTORY))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"groups": {"a100": {"os": "ubuntu22.04", "gpu": "a100-pcie"}}}))
    run_dir = tmp_path / "run"
    r = cli("apply", "-i", str(inv), "--fleet", str(fleet), "--run-dir", str(run_dir))
    assert r.code == 1, r
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {h: v["outcome"] for h, v in summary["hosts"].items()} == {
        "n1": "failed",
        "n2": "not run",
        "n3": "not run",
        "n4": "not run",
        "n5": "not run",
    }
    assert "the rollout stopped" in summary["hosts"]["n5"]["not_run"]
    assert "not run" in r.out
    site, release = fake_runner
    assert "provision_serial" not in site["extravars"], "the playbook's default (20%) applies"
    assert site["extravars"]["provision_run_id"] == "run"
    assert release["playbook"] == "release-lock.yml", "the failed host's run lock is given back"
    assert release["limit"] == "n1"
    assert release["extravars"] == {"provision_run_id": "run"}


def test_apply_forks_reach_ansible_and_are_checked(cli, tmp_path, fake_runner):
    """--forks: Ansible's forks for the run and for giving back a failed host's lock; 20 without
    it (as playbooks/ansible.cfg); outside 1..1000 one line and exit 2, before anything runs."""
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump(INVENTORY))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"groups": {"a100": {"os": "ubuntu22.04", "gpu": "a100-pcie"}}}))
    args = ("apply", "-i", str(inv), "--fleet", str(fleet))
    cli(*args, "--run-dir", str(tmp_path / "r12"), "--forks", "12")
    assert [c["forks"] for c in fake_runner] == [12, 12]
    cli(*args, "--run-dir", str(tmp_path / "r20"))
    assert [c["forks"] for c in fake_runner[2:]] == [20, 20]
    for bad in ("0", "1001"):
        r = cli(*args, "--run-dir", str(tmp_path / f"bad{bad}"), "--forks", bad)
        assert r.code == 2, r
        assert f"--forks must be between 1 and 1000, not {bad}" in r.err
        assert "Traceback" not in r.err
    assert len(fake_runner) == 4
    assert "--forks N" in cli("apply", "--help").out
