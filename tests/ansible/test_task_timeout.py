"""Every task run on a host has a deadline (review item D): the play's `timeout`, from
provision_task_timeout (default 1800 s), which every task and role inside the play inherits; the
reboot and the drain commands keep deadlines of their own. `provision apply --task-timeout N` sets it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from paths import COLLECTION, PLAYBOOKS, ROLES

EXPRESSION = "{{ provision_task_timeout | default(1800) | int }}"
PLAYS = sorted((COLLECTION / "playbooks").glob("*.yml"))


@pytest.mark.parametrize("playbook", PLAYS, ids=lambda p: p.name)
def test_every_play_carries_the_task_deadline(playbook):
    plays = yaml.safe_load(playbook.read_text())
    assert plays
    for play in plays:
        assert play.get("timeout") == EXPRESSION, (playbook.name, play.get("name"))


def test_the_top_level_playbooks_only_import_the_collections_plays():
    """playbooks/site.yml and release-lock.yml hold no play of their own that could lack the deadline."""
    for wrapper in sorted(PLAYBOOKS.glob("*.yml")):
        for entry in yaml.safe_load(wrapper.read_text()):
            assert set(entry) <= {"name", "ansible.builtin.import_playbook"}, wrapper.name


def test_only_the_tasks_that_wait_longer_set_their_own():
    own = []
    for path in [
        *(COLLECTION / "playbooks").glob("*.yml"),
        *ROLES.glob("*/tasks/*.yml"),
        *ROLES.glob("*/handlers/*.yml"),
    ]:
        doc = yaml.safe_load(path.read_text()) or []
        tasks = [t for play in doc for t in (play.get(k, []) for k in ("pre_tasks", "tasks", "post_tasks")) for t in t]
        tasks += [t for t in doc if "timeout" in t and "hosts" not in t]  # role task files
        own += [(path.name, t["name"], t["timeout"]) for t in tasks if "timeout" in t]
    longer = {name for _, name, value in own if not (isinstance(value, int) and value <= 1800)}
    assert longer == {
        "Drain the host before changing it.",
        "Return the host to service.",
        "Reboot to activate the new driver.",
    }, "a task that may outlast the play's deadline is one of the known waits"
    reboot = next(t for _, name, t in own if name.startswith("Reboot"))
    assert "nvidia_driver_reboot_timeout" in reboot  # past the reboot's own wait, not the play's


def test_the_play_deadline_reaches_tasks_inside_roles(tmp_path):
    """Ansible itself: a play-level timeout, the site play's expression, fails a role's `sleep 5` at 2 s."""
    (tmp_path / "roles" / "slow" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "slow" / "tasks" / "main.yml").write_text(
        "- name: Wait on a stalled mirror.\n  ansible.builtin.command: sleep 5\n  changed_when: false\n"
    )
    site = yaml.safe_load((COLLECTION / "playbooks" / "site.yml").read_text())[0]
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "timeout": site["timeout"],
             "roles": ["slow"]}]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    exe = Path(sys.executable).with_name("ansible-playbook")
    argv = [str(exe), "-i", "localhost,", "play.yml", "-e", f"ansible_python_interpreter={sys.executable}"]
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "False"}

    def run(seconds: int) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*argv, "-e", f"provision_task_timeout={seconds}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )

    proc = run(2)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Timed out after 2 second(s)" in proc.stdout
    proc = run(30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


INVENTORY = {"all": {"children": {"a100": {"hosts": {"n1": {"ansible_host": "127.0.0.1", "ansible_port": 2201}}}}}}


def test_apply_task_timeout_reaches_the_play_and_is_checked(cli, tmp_path, monkeypatch, on_fixture_catalogue):
    from provision.fleet import runner
    from provision.fleet.runner import HostResult, RunResult

    calls = []

    def run_playbook(**kwargs):
        calls.append(kwargs)
        done = HostResult("n1", rebooted=False, cause=None, ok=5, changed=0, failed=0, unreachable=0, skipped=0)
        return RunResult("successful", 0, (done,), kwargs["run_dir"], kwargs["run_dir"] + "/artifacts")

    monkeypatch.setattr(runner, "run_playbook", run_playbook)
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump(INVENTORY))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"groups": {"a100": {"os": "ubuntu22.04", "gpu": "a100-pcie-80gb"}}}))
    args = ("apply", "-i", str(inv), "--fleet", str(fleet))
    assert cli(*args, "--run-dir", str(tmp_path / "r1"), "--task-timeout", "3600").code == 0
    assert calls[0]["extravars"]["provision_task_timeout"] == 3600
    assert cli(*args, "--run-dir", str(tmp_path / "r2")).code == 0
    assert "provision_task_timeout" not in calls[1]["extravars"], "the play's default (1800 s) applies"
    for bad in ("29", "86401"):
        r = cli(*args, "--run-dir", str(tmp_path / f"bad{bad}"), "--task-timeout", bad)
        assert r.code == 2, r
        assert f"--task-timeout must be between 30 and 86400 seconds, not {bad}" in r.err
        assert not (tmp_path / f"bad{bad}").exists()
    assert len(calls) == 2
    assert "--task-timeout SECONDS" in cli("apply", "--help").out
