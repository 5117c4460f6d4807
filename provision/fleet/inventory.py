"""Inventories (read through ansible-inventory, so INI, YAML, directories and plugins all work),
fleet files (inventory group -> plan request), and the checks run before any host is touched."""

import json
import os
import re
import subprocess
from typing import Any, NamedTuple

from provision.errors import InputError
from provision.tools import ansible_inventory_binary

KNOWN_CONNECTIONS = {
    "ssh",
    "paramiko",
    "smart",
    "local",
    "docker",
    "community.docker.docker",
    "podman",
    "containers.podman.podman",
    "ansible.builtin.ssh",
    "ansible.builtin.local",
    "ansible.builtin.paramiko_ssh",
    "paramiko_ssh",
}


class Inventory(NamedTuple):
    path: str
    hosts: dict[str, dict[str, Any]]  # host -> hostvars
    groups: dict[str, set[str]]  # group -> every host in it (children included)


def load_inventory(path: str) -> Inventory:
    if not os.path.exists(path):
        raise InputError(f"inventory {path!r} does not exist", hint="pass -i with an inventory file or directory")
    proc = subprocess.run(
        [ansible_inventory_binary(), "-i", path, "--list"],
        capture_output=True,
        text=True,
        check=False,
        env={
            **os.environ,
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "True",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_DEPRECATION_WARNINGS": "False",
        },
    )
    problem = next(
        (
            line.strip()
            for line in proc.stderr.splitlines()
            if "Unable to parse" in line or "ERROR" in line or "Failed to parse" in line
        ),
        None,
    )
    if proc.returncode != 0 or problem:
        detail = problem or proc.stderr.strip().splitlines()[-1:] or ["ansible-inventory failed"]
        raise InputError(
            f"inventory {path!r} cannot be parsed: {detail if isinstance(detail, str) else detail[0]}",
            hint="check it with: ansible-inventory -i INVENTORY --list",
        )
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise InputError(
            f"inventory {path!r} cannot be parsed", hint="check it with: ansible-inventory -i INVENTORY --list"
        ) from None
    hostvars = doc.get("_meta", {}).get("hostvars", {})

    def members(group: str, seen: set[str]) -> set[str]:
        if group in seen:
            return set()
        seen.add(group)
        node = doc.get(group, {})
        out = set(node.get("hosts", []))
        for child in node.get("children", []):
            out |= members(child, seen)
        return out

    groups = {g: members(g, set()) for g in doc if g != "_meta"}
    hosts = {h: hostvars.get(h, {}) for g in groups.values() for h in g}
    if not hosts:
        raise InputError(f"inventory {path!r} has no hosts", hint="add hosts, or check the path")
    return Inventory(path, hosts, groups)


def select_hosts(inventory: Inventory, limit: str | None) -> list[str]:
    """The inventory's hosts, sorted; --limit: comma-separated host or group names."""
    names = sorted(inventory.hosts)
    if not limit:
        return names
    wanted: set[str] = set()
    for part in (p.strip() for p in limit.split(",") if p.strip()):
        if part in inventory.hosts:
            wanted.add(part)
        elif part in inventory.groups:
            wanted |= inventory.groups[part]
        else:
            raise InputError(
                f"--limit {part!r} is neither a host nor a group of {inventory.path}",
                hint="ansible-inventory -i INVENTORY --graph lists them",
            )
    selected = [n for n in names if n in wanted]
    if not selected:
        raise InputError(f"--limit {limit!r} selects no host", hint="ansible-inventory -i INVENTORY --graph lists them")
    return selected


_GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
# The groups provision.gpu.site's check play sorts hosts into (group_by): the rolling play
# changes the hosts of provision_to_change. An inventory or fleet file that names one of them
# would put hosts there that the check did not sort there (one whose check failed, too).
RESERVED_GROUPS = ("provision_converged", "provision_to_change")


def check_group_name(group: str) -> str:
    """A fleet group names an inventory group and a file of the run folder: letters, digits, '_'
    and '-' only (no separator, no '..'), as Ansible's own group names."""
    if not _GROUP_NAME.fullmatch(group):
        raise InputError(
            f"fleet group {group!r} is not a usable group name",
            hint="letters, digits, '_' and '-', starting with a letter or '_' (as Ansible group names)",
        )
    if group in RESERVED_GROUPS:
        raise InputError(
            f"fleet group {group!r} is a name provision apply sorts hosts into",
            hint=f"rename the group: {' and '.join(RESERVED_GROUPS)} are reserved",
        )
    return group


class FleetGroup(NamedTuple):
    group: str
    request: dict[str, Any] | None  # plan request fields (os, gpu, pins)
    lock: str | None  # or a lock file written by provision plan --lock


def load_fleet(path: str) -> list[FleetGroup]:
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)
    except OSError as exc:
        raise InputError(f"cannot read fleet file {path!r}: {exc.strerror}", hint="check the --fleet path") from None
    except yaml.YAMLError as exc:
        raise InputError(
            f"fleet file {path!r} is not YAML: {str(exc).splitlines()[0]}", hint="see the README's fleet file example"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), dict) or not doc["groups"]:
        raise InputError(
            f"fleet file {path!r} has no groups", hint="write groups: {GROUP: {os: OS, gpu: GPU}} (see README)"
        )
    allowed = {"os", "gpu", "driver", "cuda", "cudnn", "framework", "policy", "mig"}
    out = []
    base = os.path.dirname(os.path.abspath(path))
    for group, spec in doc["groups"].items():
        check_group_name(str(group))
        if not isinstance(spec, dict):
            raise InputError(
                f"fleet file {path!r}: group {group!r} must map to a plan request or {{lock: FILE}}",
                hint="e.g. a100: {os: rocky9, gpu: a100-pcie}",
            )
        if "lock" in spec:
            if set(spec) != {"lock"}:
                raise InputError(
                    f"fleet file {path!r}: group {group!r} mixes lock with request fields",
                    hint="give either lock: FILE or os/gpu/pins",
                )
            lock = spec["lock"]
            if not isinstance(lock, str) or not lock.strip() or any(c in lock for c in "\0\n\r"):
                raise InputError(
                    f"fleet file {path!r}: group {group!r} lock must be a file path", hint="e.g. lock: a100.lock.json"
                )
            out.append(FleetGroup(str(group), None, os.path.join(base, lock)))
            continue
        unknown = set(spec) - allowed
        if unknown or not {"os", "gpu"} <= set(spec):
            what = f"unknown keys {sorted(unknown)}" if unknown else "needs os and gpu"
            raise InputError(
                f"fleet file {path!r}: group {group!r} {what}", hint=f"allowed: {', '.join(sorted(allowed))}"
            )
        out.append(FleetGroup(str(group), {k: (None if v is None else str(v)) for k, v in spec.items()}, None))
    return out


def ungrouped_hosts(inventory: Inventory) -> list[str]:
    """Hosts in no inventory group but Ansible's implicit all/ungrouped: no fleet file can plan them."""
    implicit = {"all", "ungrouped"}
    grouped = set().union(*(hosts for group, hosts in inventory.groups.items() if group not in implicit))
    return sorted(h for h in inventory.hosts if h not in grouped)


class Problem(NamedTuple):
    host: str | None
    text: str


def check_inventory(inventory: Inventory, fleet_groups: list[str] | None) -> list[Problem]:
    """Problems that must stop a run before it starts."""
    problems: list[Problem] = [
        Problem(None, f"the inventory has a group {group!r}: provision apply sorts hosts into it; rename the group")
        for group in RESERVED_GROUPS
        if group in inventory.groups
    ]
    endpoints: dict[tuple[str, str], str] = {}
    for host, hv in sorted(inventory.hosts.items()):
        port = hv.get("ansible_port", hv.get("ansible_ssh_port"))
        if port is not None:
            try:
                ok = 1 <= int(port) <= 65535
            except (TypeError, ValueError):
                ok = False
            if not ok:
                problems.append(Problem(host, f"ansible_port {port!r} is not a TCP port"))
        address = hv.get("ansible_host", host)
        if not isinstance(address, str) or not address.strip() or " " in address.strip():
            problems.append(Problem(host, f"ansible_host {address!r} is not a host name or address"))
        connection = hv.get("ansible_connection")
        if connection is not None and connection not in KNOWN_CONNECTIONS:
            problems.append(Problem(host, f"ansible_connection {connection!r} is not a known connection plugin"))
        user = hv.get("ansible_user")
        if user is not None and (not isinstance(user, str) or not user.strip()):
            problems.append(Problem(host, "ansible_user is empty"))
        key = hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file")
        if key and not os.path.exists(os.path.expanduser(str(key))):
            problems.append(Problem(host, f"ansible_ssh_private_key_file {key!r} does not exist"))
        if connection not in ("local", "ansible.builtin.local"):
            endpoint = (str(address), str(port or 22))
            if endpoint in endpoints:
                problems.append(
                    Problem(host, f"same address and port as {endpoints[endpoint]} ({endpoint[0]}:{endpoint[1]})")
                )
            else:
                endpoints[endpoint] = host
    if fleet_groups is not None:
        for group in fleet_groups:
            if group not in inventory.groups:
                problems.append(
                    Problem(None, f"the fleet file plans group {group!r}, which the inventory does not have")
                )
        for host in sorted(inventory.hosts):
            planned = [g for g in fleet_groups if host in inventory.groups.get(g, set())]
            if not planned:
                problems.append(Problem(host, "is in no planned group (add its group to the fleet file)"))
            elif len(planned) > 1:
                problems.append(Problem(host, f"is in more than one planned group: {', '.join(planned)}"))
    return problems
