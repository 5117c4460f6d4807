"""Inventories, fleet files (inventory group -> plan request), and the checks run before any host
is touched.

An inventory is the site's configuration, read as data only: an executable file or an inventory
plugin configuration in it is refused first, then ansible-inventory parses it with the YAML and
INI plugins alone (``ANSIBLE_INVENTORY_ENABLED``) and group_vars/host_vars as its only variables
(``ANSIBLE_VARS_ENABLED``), so nothing in it runs. What it says is then held to the boundary
(`boundary_problems`): host names are host names or IP addresses (never an option or a URL), the
connection variables hold no shell metacharacter and no ssh option that runs a program on this
machine (ProxyCommand, LocalCommand, ...), no safety switch is turned off, no deadline is out of
its bounds and no command for the controller is named (provision.fleet.guards). `load_inventory`,
which apply, verify and doctor use, refuses the first of these; `provision inventory check` lists
them all."""

import os
import re
import stat
import subprocess
from collections.abc import Mapping
from typing import Any, NamedTuple

from provision.errors import InputError, ToolingError
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

# How ansible-inventory (and apply's ansible-playbook) read an inventory: these plugins only.
INVENTORY_PLUGINS = "ansible.builtin.yaml,ansible.builtin.ini"
VARS_PLUGINS = "ansible.builtin.host_group_vars"
INVENTORY_ENV = {"ANSIBLE_INVENTORY_ENABLED": INVENTORY_PLUGINS, "ANSIBLE_VARS_ENABLED": VARS_PLUGINS}
INVENTORY_TIMEOUT = 300  # seconds ansible-inventory may take (1,000 hosts: about 2 s)
INVENTORY_HINT = "check it with: provision inventory check -i INVENTORY"

# The checks `provision inventory check` reports, in order (Problem.check is one of them).
HOST_NAMES, CONNECTION, SWITCHES, GROUPS = "host names", "connection variables", "safety switches", "groups"
CHECKS = (HOST_NAMES, CONNECTION, SWITCHES, GROUPS)


class Inventory(NamedTuple):
    path: str
    hosts: dict[str, dict[str, Any]]  # host -> hostvars
    groups: dict[str, set[str]]  # group -> every host in it (children included)


class Problem(NamedTuple):
    host: str | None
    text: str
    check: str = GROUPS  # which of CHECKS found it


# Entries ansible-inventory skips in an inventory directory (hidden ones, the variable folders).
_SKIPPED = re.compile(r"^\.|^host_vars$|^group_vars$")
_PLUGIN_CONFIG = re.compile(rb"(?m)^[\"']?plugin[\"']?\s*:")


def _refuse_code(path: str) -> None:
    """An executable file (ansible-inventory's script plugin would run it) or an inventory plugin
    configuration (``plugin: NAME``) anywhere in the inventory is refused before anything runs."""

    def check_file(file: str, st: os.stat_result) -> None:
        if st.st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH):
            raise InputError(
                f"inventory file {file!r} is executable: provision reads inventories as YAML or INI data, "
                "never runs them",
                hint=f"write the inventory out as YAML or INI (ansible-inventory -i SCRIPT --list -y), or: chmod a-x {file}",
            )
        if st.st_size <= 16 * 1024 * 1024:
            try:
                with open(file, "rb") as handle:
                    head = handle.read()
            except OSError as exc:
                raise InputError(f"cannot read inventory file {file!r}: {exc.strerror}", hint=INVENTORY_HINT) from None
            if _PLUGIN_CONFIG.search(head):
                raise InputError(
                    f"inventory file {file!r} is an inventory plugin configuration (plugin: ...): provision reads "
                    "inventories as YAML or INI data only",
                    hint="write the hosts out as a YAML or INI inventory (ansible-inventory -i FILE --list -y)",
                )

    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        if stat.S_ISREG(st.st_mode):
            check_file(path, st)
        return
    for root, dirs, files in os.walk(path):  # symbolic links to folders are not followed
        dirs[:] = sorted(d for d in dirs if not _SKIPPED.search(d))
        for name in sorted(files):
            if _SKIPPED.search(name):
                continue
            full = os.path.join(root, name)
            try:
                info = os.stat(full)
            except OSError:
                continue  # a dangling link: ansible-inventory reports it
            if stat.S_ISREG(info.st_mode):
                check_file(full, info)


def read_inventory(path: str, playbooks: str | None = None) -> Inventory:
    """The inventory's hosts, their variables and its groups, read as data (module docstring);
    its contents are not checked here (boundary_problems, check_inventory)."""
    from provision.documents import load_json
    from provision.resources import resource_dir

    if not os.path.exists(path):
        raise InputError(f"inventory {path!r} does not exist", hint="pass -i with an inventory file or directory")
    _refuse_code(path)
    env = {
        **os.environ,
        **INVENTORY_ENV,
        # the playbooks' ansible.cfg, as apply's run reads it (not one found in the working directory)
        "ANSIBLE_CONFIG": os.path.join(resource_dir("playbooks", playbooks), "ansible.cfg"),
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "True",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
    }
    try:
        proc = subprocess.run(
            [ansible_inventory_binary(), "-i", path, "--list"],
            capture_output=True,
            text=True,
            check=False,
            env=env,
            timeout=INVENTORY_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise ToolingError(
            f"ansible-inventory did not read {path!r} within {INVENTORY_TIMEOUT} s", hint=INVENTORY_HINT
        ) from None
    problem = next(
        (
            line.strip()
            for line in proc.stderr.splitlines()
            if "Unable to parse" in line or "ERROR" in line or "Failed to parse" in line
        ),
        None,
    )
    if proc.returncode != 0 or problem:
        detail = problem or (proc.stderr.strip().splitlines() or ["ansible-inventory failed"])[-1]
        raise InputError(
            f"inventory {path!r} cannot be parsed: {detail[:300]}",
            hint="provision reads YAML and INI inventories; check it with: ansible-inventory -i INVENTORY --list",
        )
    doc = load_json(proc.stdout, f"ansible-inventory's reading of {path!r}", max_bytes=256 * 1024 * 1024)
    if not isinstance(doc, dict):
        raise InputError(f"inventory {path!r} cannot be parsed", hint=INVENTORY_HINT)
    meta = doc.get("_meta")
    hostvars = meta.get("hostvars", {}) if isinstance(meta, dict) else {}
    nodes = {g: n for g, n in doc.items() if g != "_meta" and isinstance(n, dict)}

    def members(group: str) -> set[str]:  # iterative: a deep chain of children is no recursion
        out: set[str] = set()
        seen: set[str] = set()
        todo = [group]
        while todo:
            g = todo.pop()
            if g in seen:
                continue
            seen.add(g)
            node = nodes.get(g, {})
            out.update(str(h) for h in node.get("hosts", []) or [])
            todo.extend(str(c) for c in node.get("children", []) or [])
        return out

    groups = {str(g): members(g) for g in nodes}
    hosts = {h: dict(hostvars.get(h) or {}) for g in groups.values() for h in g}
    if not hosts:
        raise InputError(f"inventory {path!r} has no hosts", hint="add hosts, or check the path")
    return Inventory(path, hosts, groups)


def load_inventory(path: str, playbooks: str | None = None) -> Inventory:
    """read_inventory, refused (InputError, exit 2) when anything in it breaks the boundary."""
    inv = read_inventory(path, playbooks)
    problems = boundary_problems(inv, playbooks)
    if problems:
        raise InputError(
            one_line(problems[0]) + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            hint=f"{problems[0].check}: {BOUNDARY_HINTS[problems[0].check]}; provision inventory check -i "
            "INVENTORY lists every problem",
        )
    return inv


def one_line(problem: Problem) -> str:
    return f"{problem.host + ': ' if problem.host else ''}{problem.text}"


BOUNDARY_HINTS = {
    HOST_NAMES: "name each host by its host name or address (letters, digits, '.', '-', '_'); an alias goes in "
    "ansible_host",
    CONNECTION: "connection variables are data: no shell metacharacters, and ssh options that run nothing here "
    "(reach a host behind a bastion with -o ProxyJump=bastion)",
    SWITCHES: "only provision apply's flags turn a guard off (--no-health-gate, --no-gpu-process-check, "
    "--allow-mig-reset, --allow-disruption); deadlines stay within their bounds",
    GROUPS: "fix the inventory or the fleet file",
}

# Connection variables, by what they must hold. Secrets (ansible_password, ansible_become_password,
# ...) are not read: they are passed to ssh or sudo as data, and may be vault lookups.
_HOST_VARS = ("ansible_host", "ansible_ssh_host")
_PORT_VARS = ("ansible_port", "ansible_ssh_port")
_USER_VARS = ("ansible_user", "ansible_ssh_user", "ansible_remote_user", "ansible_become_user")
_SSH_ARG_VARS = {  # variable -> the client that reads it (hostpool.ssh_option_problem's grammar)
    "ansible_ssh_args": "ssh",
    "ansible_ssh_common_args": "ssh",
    "ansible_ssh_extra_args": "ssh",
    "ansible_scp_extra_args": "scp",
    "ansible_sftp_extra_args": "sftp",
}
_PROGRAM_VARS = (
    "ansible_ssh_executable",
    "ansible_python_interpreter",
    "ansible_shell_executable",
    "ansible_become_exe",
    "ansible_become_method",
    "ansible_become_flags",
    "ansible_ssh_private_key_file",
    "ansible_private_key_file",
    "ansible_connection",
)
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\$?\Z")
# Variables whose value is a command or a client configuration another connection plugin runs or
# reads on this machine: paramiko runs its proxy command here; netconf's ssh_config may hold a
# ProxyCommand. No value of them is data.
_COMMAND_VARS = ("ansible_paramiko_proxy_command", "ansible_netconf_ssh_config")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


def connection_problems(hostvars: Mapping[str, Any]) -> list[str]:
    """What in one host's connection variables is not data (one line each, the variable named)."""
    from provision.documents import control_character
    from provision.hostpool import SHELL_METACHARACTERS, host_name_problem, ssh_option_problem

    out = []
    for name in _HOST_VARS:
        if name in hostvars:
            problem = host_name_problem(hostvars[name])
            if problem:
                out.append(f"{name} {_shown(hostvars[name])} {problem}")
    for name in _PORT_VARS:
        if name in hostvars:
            port = hostvars[name]
            text = str(port) if isinstance(port, int) and not isinstance(port, bool) else port
            if not isinstance(text, str) or not re.fullmatch(r"[0-9]{1,5}", text) or not 1 <= int(text) <= 65535:
                out.append(f"{name} {_shown(port)} is not a TCP port (1-65535)")
    for name in _USER_VARS:
        if name in hostvars and hostvars[name] is not None:
            user = hostvars[name]
            if not isinstance(user, str) or not _USER.match(user):
                out.append(f"{name} {_shown(user)} is not a user name (letters, digits, '.', '_', '-', '@')")
    for name, program in _SSH_ARG_VARS.items():
        value = hostvars.get(name)
        if value is None or value == "":
            continue
        problem = f"is a {type(value).__name__}, not {program} options" if not isinstance(value, str) else None
        problem = problem or ssh_option_problem(value, program)
        if problem:
            out.append(f"{name} {problem}")
    for name in _COMMAND_VARS:
        if hostvars.get(name) not in (None, "", False):
            out.append(f"{name} is set: it names a command or ssh configuration that would run on this machine")
    for name in _PROGRAM_VARS:
        value = hostvars.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            out.append(f"{name} is a {type(value).__name__}, not a string")
            continue
        bad = control_character(value) or next((repr(c) for c in value if c in SHELL_METACHARACTERS), None)
        if bad:
            out.append(f"{name} holds {bad} (a shell metacharacter, template brace or control character)")
        elif name == "ansible_ssh_executable" and os.path.basename(value) != "ssh":
            out.append(f"{name} {_shown(value)} is not ssh: it would run on this machine for every connection")
        elif name == "ansible_connection" and value not in KNOWN_CONNECTIONS:
            out.append(f"ansible_connection {value!r} is not a known connection plugin")
    return out


def boundary_problems(inventory: Inventory, playbooks: str | None = None, *, booleans: bool = False) -> list[Problem]:
    """Every host name, connection variable and safety switch of the inventory that breaks the
    boundary (module docstring), one Problem each, hosts in sorted order; ``booleans``: also every
    other boolean the roles read that Ansible would not read as one (apply and inventory check;
    verify reads the ones it uses itself)."""
    from provision.fleet.guards import load_safety, variable_problems
    from provision.hostpool import host_name_problem

    safety = load_safety(playbooks)
    out: list[Problem] = []
    for host, hv in sorted(inventory.hosts.items()):
        bad_name = host_name_problem(host)
        label = host if bad_name is None else _shown(host)
        if bad_name:
            out.append(Problem(label, f"the host name {bad_name}", HOST_NAMES))
        out += [Problem(label, text, CONNECTION) for text in connection_problems(hv)]
        out += [
            Problem(label, text, SWITCHES) for text in variable_problems(hv, "the inventory", safety, booleans=booleans)
        ]
    return out


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
    request: dict[str, Any] | None  # plan request fields (os, gpu, platform, pins, image_os, host_only)
    lock: str | None  # or a lock file written by provision plan --lock
    images: tuple[str, ...] = ()  # image locks assigned to the group (plan locks or image.lock.json files)


# A group is a plan request (REQUEST_KEYS) or a lock file, and may list the images it runs. A
# platform (compat/platforms.yaml: dgx-a100, hgx-h100-4gpu, r750xa, ...) stands in for gpu where it
# implies one, and is checked against gpu where both are given (as `provision plan --platform`).
STRING_KEYS = ("os", "gpu", "platform", "driver", "cuda", "cudnn", "framework", "policy", "mig", "image_os")
REQUEST_KEYS = (*STRING_KEYS, "host_only", "with")
VERSION_KEYS = ("driver", "cuda", "cudnn", "framework")  # must be YAML strings: cudnn: 9.10 is the float 9.1
FLEET_HINT = "see the fleet file example in docs/fleets.md"
# `with:` (provision plan --with, repeatable): the stack packages added to the group's framework, a
# list of NAME or NAME==VERSION, NAME a compat/stacks.yaml package (checked against the catalogue
# by load_plans), VERSION dotted numbers; no spaces, no other operator, no upper case.
WITH_ENTRY = re.compile(r"[a-z][a-z0-9]{0,31}(?:-[a-z0-9]{1,32}){0,3}(?:==[0-9]{1,8}(?:\.[0-9]{1,8}){0,4})?\Z")
MAX_WITH = 16  # more entries than the catalogue has packages can only be a mistake (or an attack)
WITH_HINT = "e.g. with: [deepspeed, onnxruntime==1.20.1] (NAME or NAME==VERSION; list: provision matrix stacks)"


def _fleet_path(value: Any, where: str, example: str) -> str:
    from provision.documents import control_character

    if not isinstance(value, str) or not value.strip() or control_character(value):
        raise InputError(f"{where} must be a file path (one line)", hint=f"e.g. {example}")
    return value


def load_fleet(path: str) -> list[FleetGroup]:
    """A fleet file, read as data (provision.documents: no aliases, duplicate keys, deep nesting or
    unquoted versions; not through a symbolic link) and checked key by key; lock and image paths are
    relative to the fleet file's folder."""
    from provision.documents import control_character, load_yaml, read_text

    origin = f"fleet file {path!r}"
    doc = load_yaml(read_text(path, "fleet file", max_bytes=1024 * 1024), origin, versions=VERSION_KEYS)
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), dict) or not doc["groups"]:
        raise InputError(
            f"{origin} has no groups", hint="write groups: {GROUP: {os: OS, gpu: GPU}} (see docs/fleets.md)"
        )
    if set(doc) != {"groups"}:
        raise InputError(f"{origin} has unknown top-level keys {sorted(set(doc) - {'groups'})}", hint=FLEET_HINT)
    out = []
    base = os.path.dirname(os.path.abspath(path))
    allowed = (*REQUEST_KEYS, "lock", "images")
    for group, spec in doc["groups"].items():
        check_group_name(group)
        where = f"{origin}: group {group!r}"
        if not isinstance(spec, dict):
            raise InputError(
                f"{where} must map to a plan request or {{lock: FILE}}", hint="e.g. a100: {os: rocky9, gpu: a100-pcie}"
            )
        unknown = set(spec) - set(allowed)
        if unknown:
            raise InputError(f"{where} has unknown keys {sorted(unknown)}", hint=f"allowed: {', '.join(allowed)}")
        images = _images(spec["images"], where, base) if "images" in spec else ()
        if "lock" in spec:
            request_keys = sorted(set(spec) & set(REQUEST_KEYS))
            if request_keys:
                raise InputError(
                    f"{where} mixes lock with request fields ({', '.join(request_keys)})",
                    hint="give either lock: FILE or os/gpu/pins (images: may go with either)",
                )
            lock = _fleet_path(spec["lock"], f"{where} lock", "lock: a100.lock.json")
            out.append(FleetGroup(group, None, os.path.join(base, lock), images))
            continue
        request: dict[str, Any] = {}
        for key in STRING_KEYS:
            value = spec.get(key)
            if value is None:
                continue
            if not isinstance(value, str) or not value.strip() or control_character(value):
                raise InputError(
                    f"{where}: {key} must be a string of one line, not {_shown(value)}",
                    hint=f'quote it: {key}: "{value}"' if isinstance(value, (int, float)) else FLEET_HINT,
                )
            request[key] = value
        if "os" not in request or not {"gpu", "platform"} & set(request):  # os: null is no OS either
            raise InputError(
                f"{where} needs os and gpu (or a platform that implies the GPU)",
                hint="e.g. a100: {os: rocky9, gpu: a100-pcie} or dgx: {os: ubuntu22.04, platform: dgx-h100} "
                f"(allowed: {', '.join(allowed)})",
            )
        request.setdefault("gpu", None)  # the platform's GPU (PlanRequest.gpu None: the platform implies it)
        if "with" in spec:
            request["with_"] = _with_entries(spec["with"], where)
            if spec.get("host_only") is True:
                raise InputError(
                    f"{where}: host_only plans no image, so with cannot apply",
                    hint="drop with:, or drop host_only: to plan an image with its stack",
                )
            if "framework" not in request:
                raise InputError(
                    f"{where}: with adds stack packages to a framework, and the group names no framework",
                    hint="add framework: pytorch (or, for an inference image without PyTorch: framework: onnxruntime "
                    "or framework: tensorrt)",
                )
        if "host_only" in spec:
            if not isinstance(spec["host_only"], bool):
                raise InputError(
                    f"{where}: host_only must be true or false, not {_shown(spec['host_only'])}",
                    hint="host_only: true plans the host alone (driver, modules, Fabric Manager, toolkit): no image",
                )
            if spec["host_only"]:
                request["host_only"] = True
        out.append(FleetGroup(group, request, None, images))
    return out


def _images(listed: Any, where: str, base: str) -> tuple[str, ...]:
    """A group's `images:` list: image lock files, each once, relative to the fleet file's folder."""
    if not isinstance(listed, list) or not listed:
        raise InputError(
            f"{where} images must be a list of image lock files",
            hint="e.g. images: [train.lock.json, serve/image.lock.json]; leave images out to check every image",
        )
    names = [_fleet_path(p, f"{where} images entry {i + 1}", "images: [train.lock.json]") for i, p in enumerate(listed)]
    if len(set(names)) != len(names):
        raise InputError(f"{where} lists an image twice", hint="list each image lock file once")
    return tuple(os.path.join(base, n) for n in names)


def _with_entries(listed: Any, where: str) -> tuple[str, ...]:
    """A group's `with:` list, held to WITH_ENTRY: a YAML list of at most MAX_WITH strings, each
    package named once. An unquoted number is what YAML made of it (1.20 is the float 1.2)."""
    if not isinstance(listed, list) or not listed:
        raise InputError(f"{where}: with must be a list of stack packages, not {_shown(listed)}", hint=WITH_HINT)
    if len(listed) > MAX_WITH:
        raise InputError(
            f"{where}: with lists {len(listed)} entries, more than the {MAX_WITH} a stack can hold",
            hint="list each stack package once (list: provision matrix stacks)",
        )
    out: list[str] = []
    names: dict[str, int] = {}
    for i, entry in enumerate(listed, 1):
        what = f"{where}: with entry {i}"
        if isinstance(entry, (int, float)) and not isinstance(entry, bool):
            raise InputError(
                f"{what} is read by YAML as the {type(entry).__name__} {entry!r}, not NAME or NAME==VERSION",
                hint='quote it, and name the package: with: ["NAME==VERSION"] (an unquoted 1.20 is the float 1.2)',
            )
        if isinstance(entry, dict):
            pins = [f'"{k}=={v}"' if isinstance(v, str) else f'"{k}==VERSION"' for k, v in list(entry.items())[:2]]
            raise InputError(
                f"{what} is a mapping ({_shown(entry)}), not NAME or NAME==VERSION",
                hint=f"write each entry as one quoted string: with: [{', '.join(pins)}]" if pins else WITH_HINT,
            )
        if not isinstance(entry, str) or not WITH_ENTRY.match(entry):
            raise InputError(f"{what} {_shown(entry)} is not NAME or NAME==VERSION", hint=WITH_HINT)
        name = entry.partition("==")[0]
        if name in names:
            raise InputError(
                f"{what} names {name!r} again (entry {names[name]})", hint="list each stack package once, pinned or not"
            )
        names[name] = i
        out.append(entry)
    return tuple(out)


def ungrouped_hosts(inventory: Inventory) -> list[str]:
    """Hosts in no inventory group but Ansible's implicit all/ungrouped: no fleet file can plan them."""
    implicit = {"all", "ungrouped"}
    grouped = set().union(*(hosts for group, hosts in inventory.groups.items() if group not in implicit))
    return sorted(h for h in inventory.hosts if h not in grouped)


def check_inventory(
    inventory: Inventory, fleet_groups: list[str] | None, playbooks: str | None = None
) -> list[Problem]:
    """Every problem that must stop a run before it starts: the boundary's (boundary_problems),
    reserved group names, missing key files, two hosts at one address, and with a fleet file's
    groups, hosts planned by no group or by more than one."""
    problems = boundary_problems(inventory, playbooks, booleans=True)
    problems += [
        Problem(None, f"the inventory has a group {group!r}: provision apply sorts hosts into it; rename the group")
        for group in RESERVED_GROUPS
        if group in inventory.groups
    ]
    endpoints: dict[tuple[str, str], str] = {}
    for host, hv in sorted(inventory.hosts.items()):
        key = hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file")
        if isinstance(key, str) and key and not os.path.exists(os.path.expanduser(key)):
            problems.append(Problem(host, f"ansible_ssh_private_key_file {key!r} does not exist", CONNECTION))
        if hv.get("ansible_connection") not in ("local", "ansible.builtin.local"):
            address = hv.get("ansible_host", hv.get("ansible_ssh_host", host))
            port = hv.get("ansible_port", hv.get("ansible_ssh_port"))
            endpoint = (str(address), str(port or 22))
            if endpoint in endpoints:
                problems.append(
                    Problem(
                        host,
                        f"same address and port as {endpoints[endpoint]} ({endpoint[0]}:{endpoint[1]})",
                        CONNECTION,
                    )
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
