"""The host-architecture check runs under every --tags selection (review item C).

The driver role and the container runtime role both name repositories by the plan's architecture
(repos/<repo>/<x86_64|sbsa>, deb/<amd64|arm64>): the check lives in preflight, which site.yml tags
`always`, so `provision apply --tags container_runtime` with a GH200 lock on an x86_64 host stops
before any repository is added. Task selection is Ansible's own (ansible-playbook --list-tasks); the
condition is evaluated with Ansible's templar (walker.py)."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from paths import PLAYBOOKS
from walker import Walk

from provision.fleet.extravars import to_extravars
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

CHECK = "provision.gpu.preflight : Check the host's CPU architecture is the plan's."


def listed_tasks(tags: str) -> list[str]:
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "site.yml"]
    out = subprocess.run(
        [*argv, "--list-tasks", "--tags", tags], check=False, cwd=PLAYBOOKS, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return [line.strip().split("\tTAGS:")[0] for line in out.stdout.splitlines() if "\tTAGS:" in line]


@pytest.mark.parametrize(("tags", "role"), [("container_runtime", "container_runtime"), ("driver", "nvidia_driver")])
def test_every_tag_selection_checks_the_architecture_before_its_role(tags, role):
    tasks = listed_tasks(tags)
    assert CHECK in tasks
    first = next(i for i, t in enumerate(tasks) if t.startswith(f"provision.gpu.{role} : "))
    assert tasks.index(CHECK) < first, "checked before the role's first task"


def test_no_role_but_preflight_carries_the_check():
    from paths import ROLES

    holders = [
        p.relative_to(ROLES).parts[0]
        for p in ROLES.glob("*/tasks/*.yml")
        if "ansible_facts['architecture'] == provision_arch" in p.read_text()
    ]
    assert holders == ["preflight"]


def check_task(walk: Walk) -> dict:
    tasks = yaml.safe_load((walk.dir / "tasks" / "main.yml").read_text())
    return next(t for t in tasks if t.get("name") == CHECK.split(" : ")[1])


@pytest.mark.parametrize("os_id", ["ubuntu22.04", "rocky9"])
def test_a_gh200_plan_is_refused_on_an_x86_64_host(real_matrix, os_id):
    arm = to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu="gh200")))
    x86 = to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu="h100-sxm")))
    walk = Walk("preflight", os_id, arm).run()
    assert CHECK.split(" : ")[1] in walk.names()
    task = check_task(walk)["ansible.builtin.assert"]
    assert walk.condition(task["that"]) is False  # the walker's host is x86_64
    message = walk.render(task["fail_msg"])
    assert "the plan is for aarch64 hosts" in message
    assert "/sbsa" in message
    assert ("arm64" if os_id == "ubuntu22.04" else "aarch64") in message
    assert "this host is x86_64" in message
    on_arm = Walk("preflight", os_id, arm)
    on_arm.vars["ansible_facts"] = {**on_arm.vars["ansible_facts"], "architecture": "aarch64"}
    assert on_arm.condition(task["that"]) is True
    assert Walk("preflight", os_id, x86).condition(task["that"]) is True
