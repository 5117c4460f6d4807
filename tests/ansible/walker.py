"""Walk a role's tasks the way Ansible would select them for a given OS, without a host.

Loads defaults, family vars (include_vars), follows include_tasks and blocks, and evaluates
each `when:` with Ansible's own templar. Conditions on results registered at run time are
treated as met (the task is selected), which is what a task-selection test wants to see.
"""

from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
from paths import COLLECTIONS, ROLES

init_plugin_loader([str(COLLECTIONS)])

FACTS = {
    "ubuntu22.04": {
        "os_family": "Debian",
        "distribution": "Ubuntu",
        "distribution_version": "22.04",
        "distribution_major_version": "22",
        "distribution_release": "jammy",
    },
    "debian12": {
        "os_family": "Debian",
        "distribution": "Debian",
        "distribution_version": "12.8",
        "distribution_major_version": "12",
        "distribution_release": "bookworm",
    },
    "rocky9": {
        "os_family": "RedHat",
        "distribution": "Rocky",
        "distribution_version": "9.5",
        "distribution_major_version": "9",
        "distribution_release": "Blue Onyx",
    },
    "rhel9": {
        "os_family": "RedHat",
        "distribution": "RedHat",
        "distribution_version": "9.5",
        "distribution_major_version": "9",
        "distribution_release": "Plow",
    },
}


def trust(value: Any) -> Any:
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trust(v) for v in value]
    if isinstance(value, dict):
        return {k: trust(v) for k, v in value.items()}
    return value


class Walk:
    def __init__(self, role: str, os_id: str, extravars: dict[str, Any], overrides: dict[str, Any] | None = None):
        self.role = role
        self.dir = ROLES / role
        facts = {**FACTS[os_id], "kernel": "6.8.0-1-generic", "architecture": "x86_64", "mounts": []}
        self.vars: dict[str, Any] = {}
        self.vars.update(trust(yaml.safe_load((self.dir / "defaults" / "main.yml").read_text()) or {}))
        self.vars.update(
            {
                "ansible_facts": facts,
                "role_path": str(self.dir),
                "ansible_check_mode": False,
                **{f"ansible_{k}": v for k, v in facts.items()},
            }
        )
        role_vars = self.dir / "vars" / "main.yml"  # loaded with the role, above its defaults
        if role_vars.is_file():
            self.vars.update(trust(yaml.safe_load(role_vars.read_text()) or {}))
        self.vars.update(extravars)
        self.vars.update(overrides or {})
        self.selected: list[dict[str, Any]] = []

    @property
    def templar(self) -> Templar:
        return Templar(loader=DataLoader(), variables=self.vars)

    def render(self, value: Any) -> Any:
        return self.templar.template(trust(value))

    def condition(self, when: Any, extra: dict | None = None) -> bool:
        conds = when if isinstance(when, list) else [when]
        templar = Templar(loader=DataLoader(), variables={**self.vars, **(extra or {})})
        for c in conds:
            if isinstance(c, bool):
                if not c:
                    return False
                continue
            try:
                if not templar.evaluate_conditional(trust_as_template(str(c))):
                    return False
            except AnsibleError:
                continue  # depends on a result registered at run time: selected
        return True

    def run(self, file: str = "main.yml") -> "Walk":
        self._tasks(yaml.safe_load((self.dir / "tasks" / file).read_text()) or [], file)
        return self

    def _tasks(self, tasks: list[dict], file: str, extra: dict | None = None) -> None:
        for task in tasks:
            task_vars = {**(extra or {}), **trust(task.get("vars", {}))}
            if "when" in task and not self.condition(task["when"], task_vars):
                continue
            if "block" in task:
                self._tasks(task["block"], file, task_vars)
                continue
            module = next(
                k
                for k in task
                if k
                not in (
                    "name",
                    "when",
                    "vars",
                    "register",
                    "notify",
                    "loop",
                    "loop_control",
                    "changed_when",
                    "failed_when",
                    "check_mode",
                    "environment",
                    "listen",
                    "become",
                    "tags",
                )
            )
            args = task[module]
            if module == "ansible.builtin.include_vars":
                path = self.render(args)
                self.vars.update(trust(yaml.safe_load(Path(path).read_text()) or {}))
            if module == "ansible.builtin.include_tasks":
                name = self.render(args) if isinstance(args, str) else self.render(args["file"])
                self.selected.append({"file": file, "name": task.get("name"), "module": module, "args": name})
                included = yaml.safe_load((self.dir / "tasks" / name).read_text()) or []
                if "loop" not in task:
                    self._tasks(included, name, task_vars)
                    continue
                loop_var = (task.get("loop_control") or {}).get("loop_var", "item")
                saved = dict(self.vars)
                self.vars.update(task_vars)
                try:
                    items = self.render(task["loop"])
                except AnsibleError:  # the loop depends on a result registered at run time: once, unlooped
                    self._tasks(included, name, task_vars)
                    continue
                finally:
                    self.vars = saved
                for item in items:  # once per item, as Ansible includes it
                    self._tasks(included, name, {**task_vars, loop_var: item})
                continue
            self.selected.append(
                {
                    "file": file,
                    "name": task.get("name"),
                    "module": module,
                    "args": args,
                    "vars": task_vars,
                    "loop": task.get("loop"),
                }
            )

    def args(self, name_part: str) -> Any:
        """The rendered arguments of the selected task whose name contains name_part."""
        task = self.task(name_part)
        saved = dict(self.vars)
        self.vars.update(task["vars"])
        try:
            return self.render(task["args"])
        finally:
            self.vars = saved

    def task(self, name_part: str) -> dict:
        matches = [t for t in self.selected if name_part in (t["name"] or "")]
        assert matches, f"no selected task like {name_part!r} in {[t['name'] for t in self.selected]}"
        return matches[0]

    def names(self) -> list[str]:
        return [t["name"] for t in self.selected]

    def modules(self) -> set[str]:
        return {t["module"] for t in self.selected}
