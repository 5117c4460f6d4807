"""The safety guards of provision.gpu.site, as the controller holds them: which values turn a guard
off, and which named `provision apply` flag alone may do so.

The list itself is the collection's ``playbooks/vars/safety.yml`` (one place: the check play
refuses the same values on each host). It is read here as data (`provision.documents.load_yaml`):

- a **switch** is a boolean whose unsafe value turns a guard off (``provision_health_gate: false``,
  ``mig_allow_reset: true``). An inventory (host or group variables) and ``-e`` may not set one to
  anything but its safe value; only the flag named in ``FLAGS`` sets it, and the run's summary
  records which flag switched which guard off;
- a **bound** is an integer a guard needs within [min, max] (a timeout of 0 is no deadline at all,
  a lock ttl of 0 expires at once): an inventory or ``-e`` value outside it is refused;
- ``provision_serial`` holds a positive batch size (Ansible reads 0 as every host at once).

Ansible reads a switch, and every other boolean the roles read, as its ``bool`` filter does:
true/yes/on/1 and false/no/off/0, any case (INI inventories give strings); any other value (``y``,
``maybe``, a template) is refused.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from provision.errors import InputError, ToolingError

# where safety.yml sits in the playbooks directory (beside converged_state.yml)
SAFETY_FILE = os.path.join("collections", "ansible_collections", "provision", "gpu", "playbooks", "vars", "safety.yml")

# switch -> the `provision apply` flag that turns its guard off (the only way to)
FLAGS = {
    "preflight_check_gpu_processes": "--no-gpu-process-check",
    "provision_health_gate": "--no-health-gate",
    "mig_allow_reset": "--allow-mig-reset",
    "provision_allow_disruption": "--allow-disruption",
}

# commands run on the controller: only from the command line (--drain-command, ...), never from a file
CONTROLLER_COMMANDS = {
    "provision_drain_command": "--drain-command",
    "provision_undrain_command": "--undrain-command",
    "provision_drain_delegate": "--drain-on",
}

# what Ansible's `bool` filter reads as a boolean (ansible-core 2.19 plugins/filter/core.py); any
# other value it reads as false with a deprecation warning ("y" and "t" among them)
_TRUE = frozenset({"yes", "on", "true", "1"})
_FALSE = frozenset({"no", "off", "false", "0"})


class Switch(NamedTuple):
    name: str
    safe: bool  # the value that keeps the guard on
    guard: str  # what the guard protects, in a line
    flag: str  # the apply flag that turns it off


class Bound(NamedTuple):
    name: str
    low: int
    high: int
    unit: str
    guard: str


class Safety(NamedTuple):
    switches: dict[str, Switch]
    bounds: dict[str, Bound]
    serial: re.Pattern[str]
    booleans: frozenset[str] = frozenset()  # every boolean the roles read (the switches among them)


@functools.lru_cache(maxsize=4)
def load_safety(playbooks: str | None = None) -> Safety:
    """safety.yml of ``playbooks`` (default: provision's own playbooks directory), checked."""
    from provision.documents import load_yaml, read_text
    from provision.resources import resource_dir

    path = os.path.join(resource_dir("playbooks", playbooks), SAFETY_FILE)
    try:
        doc = load_yaml(read_text(path, "the roles' safety list"), f"the roles' safety list {path}")
        switches = {
            name: Switch(name, _strict_bool(spec["safe"]), str(spec["guard"]), FLAGS[name])
            for name, spec in doc["provision_safety_switches"].items()
        }
        bounds = {
            name: Bound(name, int(spec["min"]), int(spec["max"]), str(spec["unit"]), str(spec["guard"]))
            for name, spec in doc["provision_safety_bounds"].items()
        }
        serial = re.compile(doc["provision_serial_pattern"])
        booleans = frozenset(str(name) for name in doc.get("provision_boolean_variables", ()))
    except InputError as exc:
        raise ToolingError(exc.message, hint="reinstall provision: its playbooks are damaged") from None
    except (KeyError, TypeError, ValueError, AttributeError, re.error) as exc:
        raise ToolingError(
            f"the roles' safety list {path} is not as provision reads it ({type(exc).__name__}: {exc})",
            hint="a switch needs a flag in provision.fleet.guards.FLAGS; reinstall provision if the file is damaged",
        ) from None
    return Safety(switches, bounds, serial, booleans | frozenset(switches))


def _strict_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"safe: {value!r} is not a boolean")
    return value


def ansible_bool(value: Any) -> bool | None:
    """``value`` as Ansible's ``bool`` filter reads it; None for what it does not read as a boolean."""
    if isinstance(value, bool):
        return value
    word = str(value).lower() if isinstance(value, (str, int)) else None
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def bound_problem(bound: Bound, value: Any) -> str | None:
    """Why ``value`` is not an integer within ``bound`` (None when it is)."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not re.fullmatch(r"-?[0-9]{1,12}", text.strip()):
        return f"{bound.name} is {_shown(value)}, not a whole number of {bound.unit}"
    number = int(text)
    if not bound.low <= number <= bound.high:
        return (
            f"{bound.name} is {number}: it must be from {bound.low} to {bound.high} {bound.unit} "
            f"({bound.guard}{'; 0 would be none at all' if number == 0 and bound.unit == 'seconds' else ''})"
        )
    return None


def variable_problems(variables: Mapping[str, Any], where: str, safety: Safety, *, booleans: bool = True) -> list[str]:
    """What in ``variables`` (an inventory host's or ``-e``'s) would switch a guard off, move a bound
    out of its range, run everything at once or name a command for the controller, and (``booleans``)
    any other boolean of the roles Ansible would not read as one; one line each, ``where`` saying
    whose variables they are."""
    problems = []
    for name in sorted(set(variables) & set(safety.switches)):
        switch, value = safety.switches[name], variables[name]
        read = ansible_bool(value)
        if read is None:
            problems.append(
                f"{where} sets {name}: {_shown(value)}, which Ansible does not read as a boolean "
                "(true/false, yes/no, on/off, 1/0)"
            )
        elif read != switch.safe:
            problems.append(
                f"{where} sets {name}: {str(read).lower()}, which turns a guard off ({switch.guard}): "
                f"only provision apply {switch.flag} may"
            )
    for name in sorted((set(variables) & safety.booleans) - set(safety.switches) if booleans else ()):
        if ansible_bool(variables[name]) is None:
            problems.append(
                f"{where} sets {name}: {_shown(variables[name])}, which Ansible does not read as a boolean "
                "(true/false, yes/no, on/off, 1/0)"
            )
    for name in sorted(set(variables) & set(safety.bounds)):
        problem = bound_problem(safety.bounds[name], variables[name])
        if problem:
            problems.append(f"{where}: {problem}")
    if "provision_serial" in variables:
        serial = variables["provision_serial"]
        items = serial if isinstance(serial, list) else [serial]
        if not items or not all(
            isinstance(i, (str, int)) and not isinstance(i, bool) and safety.serial.match(str(i)) for i in items
        ):
            problems.append(
                f"{where} sets provision_serial: {_shown(serial)}: each batch is a positive number of hosts or 1% to "
                "100% (Ansible reads 0 as every host at once)"
            )
    for name in sorted(set(variables) & set(CONTROLLER_COMMANDS)):
        problems.append(
            f"{where} sets {name}: a command for the controller comes only from provision apply "
            f"{CONTROLLER_COMMANDS[name]}"
        )
    return problems
