"""`provision apply`: plans per inventory group -> site.yml through ansible-runner."""

import datetime as dt
import json
import os
import re
import secrets
import socket
import stat
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from provision.documents import control_character
from provision.errors import InputError
from provision.fleet.extravars import dump_unsafe_yaml, to_extravars
from provision.fleet.inventory import (
    Inventory,
    Problem,
    check_group_name,
    check_inventory,
    load_fleet,
    one_line,
    read_inventory,
)
from provision.fleet.runner import APPLY_FORKS
from provision.plan.lockcheck import check_run_plans
from provision.plan.model import Plan, PlanRequest, read_plan

MIN_FORKS, MAX_FORKS = 1, 1000
MIN_TASK_TIMEOUT, MAX_TASK_TIMEOUT = 30, 86400  # --task-timeout: provision_task_timeout, site.yml's play timeout


class ApplyRequest(NamedTuple):
    inventory: str
    plan: str | None = None  # a lock file for every host
    fleet: str | None = None  # or a fleet file: group -> plan
    limit: str | None = None
    tags: str | None = None
    check: bool = False
    diff: bool = False
    serial: str | None = None  # N or N%
    max_fail_percentage: int | None = None
    allow_disruption: bool = False
    extra_vars: Mapping[str, Any] = MappingProxyType({})
    run_dir: str | None = None
    full: bool = False  # run every task even on a host whose recorded state still holds
    drain_command: str | None = None  # run on the controller before a host changes
    undrain_command: str | None = None  # ... and after it passed the health gate
    drain_delegate: str | None = None  # where they run (default: the controller)
    forks: int = APPLY_FORKS  # hosts Ansible works on at once (playbooks/ansible.cfg's forks)
    task_timeout: int | None = None  # seconds any one task may run (site.yml's default: 1800)
    # the safety switches only these flags turn off (provision.fleet.guards; recorded in the summary)
    no_health_gate: bool = False  # provision_health_gate: false
    no_gpu_process_check: bool = False  # preflight_check_gpu_processes: false
    allow_mig_reset: bool = False  # mig_allow_reset: true


# ApplyRequest field -> (the switch it sets, the flag)
SWITCH_FLAGS = {
    "allow_disruption": ("provision_allow_disruption", "--allow-disruption"),
    "no_health_gate": ("provision_health_gate", "--no-health-gate"),
    "no_gpu_process_check": ("preflight_check_gpu_processes", "--no-gpu-process-check"),
    "allow_mig_reset": ("mig_allow_reset", "--allow-mig-reset"),
}


class GuardOff(NamedTuple):
    """A guard this run turned off, and the flag that did."""

    variable: str
    value: bool
    flag: str
    guard: str


class Prepared(NamedTuple):
    inventory: Inventory
    plans: dict[str, Plan]  # group ("all" for a single plan) -> plan
    extravars: dict[str, Any]
    run_dir: str
    guards_off: tuple[GuardOff, ...] = ()


class Checked(NamedTuple):
    inventory: Inventory
    plans: dict[str, Plan]  # group ("all" for a single plan) -> plan
    groups: list[str] | None  # the fleet file's groups, in its order; None for one plan
    problems: list[Problem]  # every problem of the inventory against the plans


def check_run(
    inventory: str,
    plan: str | None,
    fleet: str | None,
    matrix_loader: Callable[[], Any],
    playbooks: str | None = None,
) -> Checked:
    """What apply checks about its inputs before anything is written, and what `provision
    inventory check` runs: exactly one of a lock file and a fleet file; the inventory is YAML or
    INI data and parses; the lock file (or each fleet group's lock file) is a valid, unedited plan
    the catalogue agrees with and each fleet group's request resolves; group names are usable;
    host names, connection variables and safety switches keep the boundary; every host is planned
    once. InputError for an unusable file or plan; the inventory's problems are returned, all of them."""
    if bool(plan) == bool(fleet):
        raise InputError("give exactly one of --plan and --fleet", hint="--plan plan.lock.json, or --fleet fleet.yaml")
    inv = read_inventory(inventory, playbooks)
    plans, groups = load_plans(plan, fleet, matrix_loader)
    check_run_plans(plans, matrix_loader, plan)  # a lock against the catalogue's rows, not only its schema
    for group in plans:
        check_group_name(group)
    return Checked(inv, plans, groups, check_inventory(inv, groups, playbooks))


def prepare(request: ApplyRequest, *, matrix_loader: Callable[[], Any], playbooks: str) -> Prepared:
    """Validate everything and write the run folder; touches no host."""
    from provision.fleet.extravars import check_site_vars
    from provision.fleet.guards import load_safety

    safety = load_safety(playbooks)
    # Ansible reads a batch of 0 as every host at once: never (nor 0%, 00, -1, over 100%)
    if request.serial is not None and not (
        re.fullmatch(r"[0-9]{1,9}%?", request.serial) and safety.serial.match(request.serial)
    ):
        raise InputError(
            f"--serial {request.serial!r} is not a host count or percentage",
            hint="e.g. --serial 1 or --serial 25%: a positive number of hosts, or 1% to 100% (0 would be all at once)",
        )
    if request.max_fail_percentage is not None and not 0 <= request.max_fail_percentage <= 100:
        raise InputError("--max-fail-percentage must be between 0 and 100", hint="e.g. --max-fail-percentage 20")
    if not MIN_FORKS <= request.forks <= MAX_FORKS:
        raise InputError(
            f"--forks must be between {MIN_FORKS} and {MAX_FORKS}, not {request.forks}",
            hint="e.g. --forks 20: hosts Ansible works on at once",
        )
    if request.task_timeout is not None and not MIN_TASK_TIMEOUT <= request.task_timeout <= MAX_TASK_TIMEOUT:
        raise InputError(
            f"--task-timeout must be between {MIN_TASK_TIMEOUT} and {MAX_TASK_TIMEOUT} seconds, not {request.task_timeout}",
            hint="e.g. --task-timeout 3600: the longest any one task (a DKMS build, a package download) may run",
        )
    if request.tags is not None:
        check_tags(request.tags, playbooks)
    check_site_vars(request.extra_vars, playbooks)
    for key in ("drain_command", "undrain_command", "drain_delegate"):
        value = getattr(request, key)
        if value and (control_character(value) or not value.strip()):
            raise InputError(f"--{key.replace('_', '-')} must be one line", hint="one command; no shell runs it")
    inventory, plans, groups, problems = check_run(
        request.inventory, request.plan, request.fleet, matrix_loader, playbooks
    )
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(
            f"{one_line(problems[0])}{more}",
            hint="provision inventory check -i INVENTORY "
            + ("--fleet FILE" if groups is not None else "--plan FILE")
            + " lists every problem",
        )
    guards_off = tuple(
        GuardOff(name, not safety.switches[name].safe, flag, safety.switches[name].guard)
        for field, (name, flag) in SWITCH_FLAGS.items()
        if getattr(request, field)
    )
    run_dir = make_run_dir(request.run_dir)
    extravars: dict[str, Any] = {}
    for group, plan in plans.items():
        write_private(os.path.join(run_dir, "plans", f"{group}.lock.json"), json.dumps(plan.to_dict(), indent=2))
        if group != "all":
            write_private(os.path.join(run_dir, "plans", f"{group}.yml"), dump_unsafe_yaml(to_extravars(plan)))
    if request.plan:
        extravars.update(to_extravars(plans["all"]))
    else:
        extravars["provision_plan_dir"] = os.path.join(run_dir, "plans")
        extravars["provision_plan_groups"] = list(plans)
    if request.serial:
        extravars["provision_serial"] = request.serial
    if request.max_fail_percentage is not None:
        extravars["provision_max_fail_percentage"] = request.max_fail_percentage
    extravars["provision_allow_disruption"] = request.allow_disruption
    if request.task_timeout is not None:
        extravars["provision_task_timeout"] = request.task_timeout
    extravars["provision_full_run"] = request.full
    extravars["provision_roles_digest"] = roles_digest(playbooks)
    extravars["provision_run_id"] = os.path.basename(run_dir)
    extravars["provision_controller"] = socket.gethostname()
    for key in ("drain_command", "undrain_command", "drain_delegate"):
        value = getattr(request, key)
        if value:
            extravars[f"provision_{key}"] = value
    extravars.update(request.extra_vars)
    for off in guards_off:  # after -e, which cannot name a switch (check_site_vars)
        extravars[off.variable] = off.value
    return Prepared(inventory, plans, extravars, run_dir, guards_off)


def make_run_dir(path: str | None) -> str:
    """The run folder (it holds every -e value): created 0700, or an empty folder of ours made
    0700; never through a symbolic link. Its plans/ and env/ folders are made here too."""
    run_dir = os.path.abspath(
        path
        or os.path.join(
            "provision-runs", dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
        )
    )
    where = f"run folder {run_dir!r}"
    try:
        os.makedirs(os.path.dirname(run_dir), exist_ok=True)
        try:
            os.mkdir(run_dir, 0o700)
        except FileExistsError:
            info = os.lstat(run_dir)
            if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
                raise InputError(
                    f"{where} exists and is not a folder (a symbolic link is not followed)",
                    hint="give --run-dir a new folder",
                ) from None
            if os.listdir(run_dir):
                raise InputError(
                    f"{where} exists and is not empty", hint="give --run-dir a new (or empty) folder"
                ) from None
            os.chmod(run_dir, 0o700)
        for sub in ("plans", "env"):
            os.mkdir(os.path.join(run_dir, sub), 0o700)
    except OSError as exc:
        raise InputError(
            f"cannot create {where}: {exc.strerror or exc}", hint="give --run-dir a folder you can write"
        ) from None
    return run_dir


def write_private(path: str, text: str) -> None:
    """A file of the run folder: 0600, written by renaming a finished file over the path (no link followed)."""
    from provision.documents import write_text

    write_text(path, text, mode=0o600)


# provision.gpu.site inside the playbooks directory (site.yml there imports it).
SITE_PLAYBOOK = os.path.join("collections", "ansible_collections", "provision", "gpu", "playbooks", "site.yml")
# Tags Ansible itself understands in --tags.
_SPECIAL_TAGS = frozenset({"all", "tagged", "untagged"})


def site_tags(playbooks: str) -> frozenset[str] | None:
    """The tags provision.gpu.site and its roles' task files declare (``always``/``never`` aside), or
    None where the playbooks directory has another layout (then --tags goes to Ansible unchecked)."""
    import yaml

    collection = os.path.dirname(os.path.dirname(os.path.join(playbooks, SITE_PLAYBOOK)))
    files = [os.path.join(playbooks, SITE_PLAYBOOK)]
    roles = os.path.join(collection, "roles")
    if os.path.isdir(roles):
        for role in sorted(os.listdir(roles)):
            tasks = os.path.join(roles, role, "tasks")
            if os.path.isdir(tasks):
                files += [os.path.join(tasks, f) for f in sorted(os.listdir(tasks)) if f.endswith((".yml", ".yaml"))]
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            tags = node.get("tags")
            found.update([tags] if isinstance(tags, str) else [t for t in tags or () if isinstance(t, str)])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    try:
        for path in files:
            with open(path, encoding="utf-8") as handle:
                walk(yaml.safe_load(handle))
    except (OSError, yaml.YAMLError):
        return None
    return frozenset(found - {"always", "never"})


def check_tags(tags: str, playbooks: str) -> None:
    """--tags names tags the playbook has: a misspelt tag would run the always-tasks and nothing else."""
    names = [t.strip() for t in tags.split(",")]
    known = site_tags(playbooks)
    if known is None:
        return
    choices = ", ".join(sorted(known))
    if not all(names):
        raise InputError(f"--tags {tags!r} has an empty tag", hint=f"a comma-separated list of: {choices}")
    unknown = [n for n in names if n not in known and n not in _SPECIAL_TAGS]
    if unknown:
        raise InputError(f"--tags: the playbook has no tag {', '.join(map(repr, unknown))}", hint=f"tags: {choices}")


def load_plans(
    plan: str | None, fleet: str | None, matrix_loader: Callable[[], Any]
) -> tuple[dict[str, Plan], list[str] | None]:
    """The plans of a run: {"all": plan} for one lock file, or group -> plan from a fleet file
    (groups in the file's order, which is the order a host in several groups is matched in)."""
    if plan:
        return {"all": read_plan(plan)}, None
    plans: dict[str, Plan] = {}
    groups: list[str] = []
    matrix = None
    for fg in load_fleet(fleet or ""):
        groups.append(fg.group)
        if fg.lock:
            try:
                plans[fg.group] = read_plan(fg.lock, given_as="the group's lock: path (relative to the fleet file)")
            except InputError as exc:
                raise InputError(f"fleet group {fg.group!r}: {exc.message}", hint=exc.hint) from None
            continue
        if matrix is None:
            matrix = matrix_loader()
        from provision.plan.resolve import resolve

        if fg.request.get("with_"):
            _check_stack_names(matrix, fg.group, fg.request["with_"])
        try:
            plans[fg.group] = resolve(matrix, PlanRequest(**fg.request))
        except InputError as exc:  # a refusal keeps its summary (provision plan --explain lists each candidate)
            details = getattr(exc, "summary", exc.details)
            raise InputError(f"fleet group {fg.group!r}: {exc.message}", hint=exc.hint, details=details) from None
    return plans, groups


def _check_stack_names(matrix: Any, group: str, entries: tuple[str, ...]) -> None:
    """A group's `with:` names catalogued stack packages (compat/stacks.yaml: an id, or the pip name
    the catalogue gives it), each once; load_fleet has checked the entries' form."""
    known = {name: ident for ident, pip, _ in matrix.stack_names() for name in (ident, pip)}  # builds no package
    seen: dict[str, str] = {}
    for entry in entries:
        name = entry.partition("==")[0]
        if name not in known:
            raise InputError(
                f"fleet group {group!r}: with names {name!r}, which is not a stack package of the catalogue",
                hint=f"stack packages: {', '.join(dict.fromkeys(known.values()))} (list: provision matrix stacks)",
            )
        ident = known[name]
        if ident in seen:
            raise InputError(
                f"fleet group {group!r}: with names {ident} twice ({seen[ident]!r} and {name!r})",
                hint="list each stack package once, pinned or not",
            )
        seen[ident] = name


def plan_of_host(inventory: Inventory, plans: dict[str, Plan], host: str) -> tuple[str, Plan] | None:
    """The plan site.yml applies to a host: the first fleet group it belongs to (or the one plan)."""
    if "all" in plans and len(plans) == 1:
        return "all", plans["all"]
    for group, plan in plans.items():
        if host in inventory.groups.get(group, set()):
            return group, plan
    return None


def roles_digest(playbooks: str) -> str:
    """sha256 over every file of the playbooks tree: new roles never count as converged."""
    import hashlib

    h = hashlib.sha256()
    for root, dirs, files in os.walk(playbooks):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".pyc", ".retry")):
                continue
            path = os.path.join(root, name)
            h.update(os.path.relpath(path, playbooks).encode() + b"\0")
            with open(path, "rb") as handle:
                h.update(handle.read())
    return h.hexdigest()


def apply(request: ApplyRequest, *, matrix_loader: Callable[[], Any], playbooks: str, on_event=None):
    from provision.fleet.runner import run_playbook

    prepared = prepare(request, matrix_loader=matrix_loader, playbooks=playbooks)
    result = run_playbook(
        run_dir=prepared.run_dir,
        playbooks=playbooks,
        inventory=request.inventory,
        extravars=prepared.extravars,
        limit=request.limit,
        tags=request.tags,
        check=request.check,
        diff=request.diff,
        on_event=on_event,
        forks=request.forks,
    )
    failed = [h.host for h in result.hosts if h.failed and not h.unreachable]
    if failed and not request.check:
        # A failed host ends before site.yml's post_tasks: give back its run lock, so the next apply
        # (after the fix) is not refused by a run that is over.
        run_playbook(
            run_dir=os.path.join(prepared.run_dir, "release-lock"),
            playbooks=playbooks,
            inventory=request.inventory,
            extravars={"provision_run_id": prepared.extravars["provision_run_id"]},
            limit=",".join(failed),
            playbook="release-lock.yml",
            forks=request.forks,
        )
    return prepared, result.with_not_run(targets(prepared, request.limit), request.max_fail_percentage)


def targets(prepared: Prepared, limit: str | None) -> list[str]:
    """The hosts this run meant to provision: the inventory's (or --limit's) hosts that have a plan."""
    from provision.fleet.inventory import select_hosts

    try:
        hosts = select_hosts(prepared.inventory, limit)
    except InputError:  # an Ansible pattern (gpu-*, a:&b) select_hosts does not read: report only what ran
        return []
    return [h for h in hosts if plan_of_host(prepared.inventory, prepared.plans, h) is not None]
