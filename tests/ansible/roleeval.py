"""Evaluate one of a role's assert tasks, as Ansible would, for given variable values: the role's
defaults and vars under them (walker.Walk), the task's own vars, then every `that`."""

import yaml
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from paths import ROLES
from walker import Walk


def role_tasks(role: str, file: str = "main.yml") -> list[dict]:
    return yaml.safe_load((ROLES / role / "tasks" / file).read_text())


def named(role: str, name: str, file: str = "main.yml") -> dict:
    (task,) = [t for t in role_tasks(role, file) if t.get("name") == name]
    return task


def assert_result(role: str, name: str, file: str = "main.yml", **values) -> tuple[bool, str]:
    """(whether every `that` of the role's assert task holds, its rendered fail_msg) with the values."""
    walk = Walk(role, "ubuntu22.04", {}, values)
    task = named(role, name, file)
    variables = {**walk.vars}
    own = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in (task.get("vars") or {}).items()}
    variables.update(Templar(loader=DataLoader(), variables=variables).template(own))
    templar = Templar(loader=DataLoader(), variables=variables)
    that = task["ansible.builtin.assert"]["that"]
    conditions = that if isinstance(that, list) else [that]
    ok = all(templar.evaluate_conditional(trust_as_template(str(c))) for c in conditions)
    try:
        msg = templar.template(trust_as_template(task["ansible.builtin.assert"]["fail_msg"]))
    except AnsibleError as exc:  # a message reading a registered result the test did not give
        msg = str(exc)
    return ok, " ".join(str(msg).split())
