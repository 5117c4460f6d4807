"""provision.gpu.site in two plays: a check of every host at once (no batches), then the rolling
rollout over the hosts the check did not find converged. A converged fleet's re-run is one round
of checks, not one batch per host (issue #12); the rollout's safety holds for the hosts that change.

The play structure is read from site.yml; the behaviour is Ansible's own, run through ansible-runner
as `provision apply` runs it, with site.yml's plays keeping their hosts, batches, fail budget and
sorting task but with stand-in tasks (a fake check result, a task that fails on chosen hosts)."""

import re
import sys

import pytest
import yaml
from paths import SITE

from provision.fleet.inventory import RESERVED_GROUPS
from provision.fleet.runner import CHECK_PLAY, CONVERGED_GROUP, HostResult, RunResult, run_playbook

VARS_FILE = "vars/converged_state.yml"
SHARED = {
    "provision_managed_packages",
    "provision_managed_services",
    "provision_managed_files",
    "provision_inputs_digest",
}


def plays() -> list[dict]:
    return yaml.safe_load(SITE.read_text())


def sort_task(play: dict) -> dict:
    (task,) = [t for t in play["tasks"] if "ansible.builtin.group_by" in t]
    return task


def test_the_check_play_comes_first_and_rolls_nothing():
    check, rolling = plays()
    assert check["name"] == CHECK_PLAY, "runner.CHECK_PLAY names site.yml's first play"
    assert "serial" not in check, "every host is checked at once"
    assert check["hosts"] == "{{ provision_hosts | default('all') }}"
    assert check["max_fail_percentage"] == rolling["max_fail_percentage"]
    assert check["timeout"] == rolling["timeout"]
    assert check["become"] is True
    # it changes nothing: it loads the plan, checks the guards, fixes the digest, checks, sorts
    modules = [next(k for k in t if "." in k) for t in check["tasks"]]
    assert modules == [
        "ansible.builtin.include_vars",
        "ansible.builtin.fail",  # the guards, skipped when they hold (test_safety_guards.py)
        "ansible.builtin.set_fact",
        "provision.gpu.applied_state",
        "ansible.builtin.group_by",
    ]
    (compare,) = [t for t in check["tasks"] if "provision.gpu.applied_state" in t]
    assert compare["provision.gpu.applied_state"]["mode"] == "check"
    assert all("always" in t["tags"] for t in check["tasks"]), "--tags never skips the check"
    key = sort_task(check)["ansible.builtin.group_by"]["key"]
    assert f"'{CONVERGED_GROUP}'" in key
    assert "'provision_to_change'" in key
    # the names an inventory or fleet file may not use are exactly those the check sorts into
    assert set(re.findall(r"'(provision_[a-z_]+)'", key)) == set(RESERVED_GROUPS)
    assert "provision_to_change" in rolling["hosts"], "the rollout changes only the hosts to change"
    assert rolling["serial"] == "{{ provision_serial | default('20%') }}"


def test_both_plays_share_one_definition_of_the_converged_state():
    for play in plays():
        assert play["vars_files"][0] == VARS_FILE, play["name"]
        assert play["vars_files"][1:] in ([], ["vars/safety.yml"]), "the check play also reads the safety list"
        assert not SHARED & set(play.get("vars", {})), "defined once, in the vars file"
    shared = yaml.safe_load((SITE.parent / VARS_FILE).read_text())
    assert set(shared) == SHARED


# ------------------------------------------------------------------------------- behaviour


def probe(tmp_path, hosts: list[str]) -> tuple[str, str]:
    """site.yml's two plays with stand-in tasks, against local hosts: the check reports a host
    converged when it is in `conv`, fails it when in `bad_check`; the rollout fails a host in `bad`."""
    check, rolling = plays()
    fake_check = {  # reaches the host, as the check does
        "name": "Stand in for the applied_state check.",
        "tags": ["always"],
        "ansible.builtin.command": {"cmd": "echo check failed"},
        "changed_when": False,
        "failed_when": "inventory_hostname in bad_check | default([])",
    }
    fake_result = {
        "name": "Stand in for its result.",
        "tags": ["always"],
        "ansible.builtin.set_fact": {"provision_applied": {"converged": "{{ inventory_hostname in conv }}"}},
    }
    change = {
        "name": "Change the host.",
        "ansible.builtin.command": {"cmd": "true"},
        "changed_when": True,
        "failed_when": "inventory_hostname in bad | default([])",
        "tags": ["driver"],
    }
    site = [
        {**{k: v for k, v in check.items() if k not in ("tasks", "vars_files", "become")},
         "tasks": [fake_check, fake_result, sort_task(check)]},
        {**{k: v for k, v in rolling.items() if k not in ("pre_tasks", "roles", "post_tasks", "vars_files", "become")},
         "tasks": [change]},
    ]  # fmt: skip
    project = tmp_path / "project"
    project.mkdir()
    (project / "probe.yml").write_text(yaml.safe_dump(site, sort_keys=False))
    inventory = tmp_path / "hosts"
    inventory.write_text(
        "\n".join(hosts) + f"\n[all:vars]\nansible_connection=local\nansible_python_interpreter={sys.executable}\n"
    )
    return str(project), str(inventory)


HOSTS = [f"n{i}" for i in range(1, 7)]


def run(tmp_path, name: str, **extravars):
    project, inventory = probe(tmp_path, HOSTS)
    result = run_playbook(
        run_dir=str(tmp_path / name),
        playbooks=project,
        inventory=inventory,
        extravars={"provision_serial": 1, **extravars},
        playbook="probe.yml",
        forks=6,
    )
    full = result.with_not_run(HOSTS, extravars.get("provision_max_fail_percentage"))
    return result, {h.host: h for h in full.hosts}


def test_a_converged_fleet_checks_every_host_and_changes_none(tmp_path):
    result, hosts = run(tmp_path, "converged", conv=HOSTS)
    assert result.rc == 0, result
    assert {h: r.outcome for h, r in hosts.items()} == dict.fromkeys(HOSTS, "ok")
    assert result.held == frozenset()


def test_only_the_hosts_to_change_roll_and_a_failure_stops_the_rest(tmp_path):
    """n1, n3 converged; n2, n4, n5, n6 roll one by one; n4 fails: n5, n6 are not run, the
    converged hosts are still ok."""
    _, hosts = run(tmp_path, "rollout", conv=["n1", "n3"], bad=["n4"])
    assert {h: r.outcome for h, r in hosts.items()} == {
        "n1": "ok",
        "n2": "changed",
        "n3": "ok",
        "n4": "failed",
        "n5": "not run",
        "n6": "not run",
    }
    assert "the rollout stopped after the batch where n4 failed" in hosts["n6"].not_run
    assert hosts["n1"].changed == 0


def test_a_failed_check_fails_its_host_and_ends_the_run_before_any_change(tmp_path):
    """A check that fails is no converged host: it fails, and with the fail budget of 0 no host changes."""
    _, hosts = run(tmp_path, "check", conv=["n1"], bad_check=["n3"])
    outcomes = {h: r.outcome for h, r in hosts.items()}
    assert outcomes["n3"] == "failed"
    assert "check failed" in hosts["n3"].cause
    assert {o for h, o in outcomes.items() if h != "n3"} == {"not run"}
    assert "the run stopped after the check of n3 failed (fail budget 0%" in hosts["n1"].not_run
    assert all(r.changed == 0 for r in hosts.values())


def test_a_failed_check_within_the_fail_budget_leaves_the_others_rolling(tmp_path):
    _, hosts = run(tmp_path, "budget", conv=["n1"], bad_check=["n3"], provision_max_fail_percentage=50)
    assert {h: r.outcome for h, r in hosts.items()} == {
        "n1": "ok",
        "n2": "changed",
        "n3": "failed",
        "n4": "changed",
        "n5": "changed",
        "n6": "changed",
    }


@pytest.mark.parametrize("tags", ["driver", None])
def test_the_check_and_sort_run_under_any_tags(tmp_path, tags):
    """Under --tags the check still sorts: the host to change is reached, the converged one is not."""
    project, inventory = probe(tmp_path, HOSTS[:2])
    result = run_playbook(
        run_dir=str(tmp_path / "tags"),
        playbooks=project,
        inventory=inventory,
        extravars={"conv": ["n1"]},
        tags=tags,
        playbook="probe.yml",
    )
    assert result.rc == 0, result
    assert {h.host: h.outcome for h in result.hosts} == {"n1": "ok", "n2": "changed"}
    assert result.held == frozenset()


def test_a_held_host_is_not_run_only_when_it_succeeded_so_far():
    """with_not_run: a held host the check passed is "not run"; a failed one keeps its failure."""
    ok = HostResult("n2", 3, 0, 0, 0, 1, False, None)
    failed = HostResult("n3", 2, 0, 1, 0, 0, False, "boom")
    result = RunResult("failed", 2, (ok, failed), "/r", "/r/a", frozenset({"n2", "n3"}), frozenset())
    full = {h.host: h for h in result.with_not_run(["n2", "n3"], 0).hosts}
    assert full["n2"].outcome == "not run"
    assert "the rollout stopped after the batch where n3 failed" in full["n2"].not_run
    assert full["n3"].outcome == "failed"
    assert RunResult("successful", 0, (ok,), "/r", "/r/a").with_not_run(["n2"], 0).hosts == (ok,)


def test_a_host_unreachable_at_the_check_is_reported_so_and_the_others_roll(tmp_path):
    """Ansible's fail budget counts failed hosts, not unreachable ones: a host the check cannot reach
    is unreachable (never converged), the others roll; a later rollout failure names only itself."""
    project, inventory = probe(tmp_path, HOSTS[:4])
    with open(inventory, "a", encoding="utf-8") as handle:
        handle.write("[gone]\nn9 ansible_connection=ssh ansible_host=127.0.0.1 ansible_port=1 ansible_timeout=2\n")
    result = run_playbook(
        run_dir=str(tmp_path / "gone"),
        playbooks=project,
        inventory=inventory,
        extravars={"provision_serial": 1, "conv": ["n1"], "bad": ["n3"]},
        playbook="probe.yml",
    )
    hosts = {h.host: h for h in result.with_not_run([*HOSTS[:4], "n9"], None).hosts}
    assert {h: r.outcome for h, r in hosts.items()} == {
        "n1": "ok",
        "n2": "changed",
        "n3": "failed",
        "n4": "not run",
        "n9": "unreachable",
    }
    assert result.check_failed == frozenset({"n9"})
    assert "the rollout stopped after the batch where n3 failed (fail budget 0%" in hosts["n4"].not_run
