"""Run tasks of provision.gpu.site (taken from it by name, never restated) in a small playbook on
this machine, with local hosts of any inventory name, and read back every task result."""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from paths import COLLECTION, COLLECTIONS, SITE

BIN = Path(sys.executable).parent
CALLBACKS = Path(__file__).with_name("callback")  # record: one JSON line per task result
SAFETY_VARS = COLLECTION / "playbooks" / "vars" / "safety.yml"


def site_plays() -> list[dict[str, Any]]:
    return yaml.safe_load(SITE.read_text())


def site_task(name: str) -> dict[str, Any]:
    """The task of provision.gpu.site with this name (any play, any section)."""
    found = [
        task
        for play in site_plays()
        for section in ("pre_tasks", "tasks", "post_tasks")
        for task in play.get(section, [])
        if task.get("name") == name
    ]
    assert len(found) == 1, f"site.yml has {len(found)} tasks named {name!r}"
    return found[0]


@dataclass
class Run:
    rc: int
    output: str
    results: list[dict[str, Any]]

    def of(self, host: str, task: str) -> dict[str, Any]:
        """The result line of task on host ({host, task, status, result})."""
        lines = [r for r in self.results if r["host"] == host and r["task"] == task]
        assert lines, f"no result of {task!r} on {host!r}: {self.output[-3000:]}"
        return lines[-1]

    def ran(self, host: str, task: str) -> bool:
        return any(r["host"] == host and r["task"] == task and r["status"] != "skipped" for r in self.results)


def local_hosts(names: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """An inventory of hosts run on this machine, under whatever names the test gives them."""
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **hv}
             for name, hv in names.items()}  # fmt: skip
    return {"all": {"hosts": hosts}}


def run_play(
    tmp_path: Path,
    plays: list[dict[str, Any]],
    inventory: dict[str, Any],
    *,
    extravars_yaml: str | None = None,
    timeout: int = 300,
) -> Run:
    """ansible-playbook on the plays; extravars_yaml is written as given (so it may tag !unsafe)."""
    (tmp_path / "play.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    argv = [str(BIN / "ansible-playbook"), "-i", "inventory.yml", "play.yml"]
    if extravars_yaml is not None:
        (tmp_path / "extravars.yml").write_text(extravars_yaml)
        argv += ["-e", "@extravars.yml"]
    results = tmp_path / "results.jsonl"
    results.unlink(missing_ok=True)
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
        "ANSIBLE_CALLBACKS_ENABLED": "record",
        "PROVISION_TEST_RESULTS": str(results),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    lines = results.read_text().splitlines() if results.exists() else []
    return Run(proc.returncode, proc.stdout + proc.stderr, [json.loads(line) for line in lines])
