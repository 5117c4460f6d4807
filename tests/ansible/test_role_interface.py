"""Every public role variable is prefixed, commented in defaults/ and declared in argument_specs;
internals are __prefixed; registered and set facts carry the role prefix."""

import re

import pytest
import yaml
from walker import ROLES

ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "tasks" / "main.yml").exists())


def test_roles_found():
    assert {"preflight", "nvidia_driver", "container_runtime"} <= set(ROLE_NAMES)


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_defaults_are_prefixed_commented_and_declared(role):
    text = (ROLES / role / "defaults" / "main.yml").read_text()
    defaults = yaml.safe_load(text) or {}
    assert defaults, f"{role} has no defaults"
    lines = text.splitlines()
    for key in defaults:
        assert key.startswith(f"{role}_"), f"{role}: {key} lacks the role prefix"
        i = next(n for n, line in enumerate(lines) if line.startswith(f"{key}:"))
        above = next(line for line in reversed(lines[:i]) if line.strip() and not line.startswith(" "))
        assert above.startswith(("#", f"{role}_")), f"{role}: {key} has no comment"
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"][
        "options"
    ]
    missing = set(defaults) - set(specs)
    assert not missing, f"{role}: defaults not declared in argument_specs: {sorted(missing)}"
    for key, spec in specs.items():
        assert spec.get("description"), f"{role}: {key} has no description"
        assert key.startswith((f"{role}_", "provision_")), (
            f"{role}: argument {key} is neither the role's nor the plan's"
        )


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_internal_vars_and_registers(role):
    for vars_file in (ROLES / role / "vars").glob("*.yml"):
        for key in yaml.safe_load(vars_file.read_text()) or {}:
            assert key.startswith(f"__{role}_"), f"{vars_file}: {key}"
    for tasks_file in list((ROLES / role / "tasks").glob("*.yml")) + list((ROLES / role / "handlers").glob("*.yml")):
        text = tasks_file.read_text()
        for name in re.findall(r"^\s*register:\s*(\S+)", text, re.M):
            assert name.startswith(f"{role}_"), f"{tasks_file}: register {name}"


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_modules_are_fully_qualified_and_names_are_sentences(role):
    for tasks_file in (ROLES / role / "tasks").glob("*.yml"):
        for task in _all_tasks(yaml.safe_load(tasks_file.read_text()) or []):
            assert task.get("name"), f"{tasks_file}: unnamed task"
            for key in task:
                if key not in (
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
                    "block",
                    "become",
                    "tags",
                ):
                    assert key.count(".") >= 2, f"{tasks_file}: {task['name']}: module {key} is not fully qualified"


def _all_tasks(tasks):
    for t in tasks:
        yield t
        yield from _all_tasks(t.get("block", []))
