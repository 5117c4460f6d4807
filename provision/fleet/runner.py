"""The one place that drives ansible-runner: runs site.yml and turns its events into a per-host
summary. Its private data directory stays in the run folder as the run's artifacts."""

import os
import re
import shutil
from collections.abc import Callable
from typing import Any, NamedTuple

from provision.documents import write_text
from provision.errors import ToolingError
from provision.fleet.extravars import dump_unsafe_yaml
from provision.fleet.inventory import INVENTORY_ENV
from provision.tools import tool_path

APPLY_FORKS = 20  # as playbooks/ansible.cfg sets for a plain ansible-playbook run

# A host counts as rebooted when a task run by Ansible's reboot module says it rebooted, whatever
# the task is called (the event's resolved_action is the module's full name).
REBOOT_ACTIONS = frozenset({"ansible.builtin.reboot", "ansible.legacy.reboot"})

# provision.gpu.site's first play checks every host at once and sorts it (group_by) into
# CONVERGED_GROUP or the hosts its rolling play changes; tests/ansible/test_string_couplings.py
# checks these names against site.yml. A host the check passed that is neither converged nor
# reached by a later play was held back: the run stopped before its batch.
CHECK_PLAY = "Check each host against the state its last run recorded"
CONVERGED_GROUP = "provision_converged"  # one of provision.fleet.inventory.RESERVED_GROUPS
GROUP_BY_ACTIONS = frozenset({"ansible.builtin.group_by", "ansible.legacy.group_by"})


class HostResult(NamedTuple):
    host: str
    ok: int
    changed: int
    failed: int
    unreachable: int
    skipped: int
    rebooted: bool
    cause: str | None  # the first failed task and its message
    not_run: str | None = None  # why a targeted host was never attempted (the rollout stopped first)

    @property
    def succeeded(self) -> bool:
        return self.failed == 0 and self.unreachable == 0 and self.not_run is None

    @property
    def outcome(self) -> str:
        """failed, unreachable, not run, changed or ok: one word for the summary."""
        if self.not_run is not None:
            return "not run"
        if self.unreachable:
            return "unreachable"
        if self.failed:
            return "failed"
        return "changed" if self.changed else "ok"


class RunResult(NamedTuple):
    status: str  # ansible-runner's status: successful, failed, timeout, canceled
    rc: int
    hosts: tuple[HostResult, ...]
    run_dir: str
    artifacts: str
    held: frozenset[str] = frozenset()  # checked, not converged, never reached by the rollout
    check_failed: frozenset[str] = frozenset()  # failed or unreachable in site.yml's check play

    @property
    def succeeded(self) -> bool:
        return self.rc == 0 and all(h.succeeded for h in self.hosts) and bool(self.hosts)

    def with_not_run(self, targets: list[str], max_fail_percentage: int | None) -> "RunResult":
        """Every targeted host in the summary: those Ansible never reached, and those it checked but
        stopped before changing, are "not run", with why."""
        seen = {h.host for h in self.hosts}
        missing = [t for t in targets if t not in seen]
        held = {h.host for h in self.hosts if h.host in self.held and h.succeeded}
        if not missing and not held:
            return self
        down = [h.host for h in self.hosts if h.failed or h.unreachable]
        stopped = [h for h in down if h not in self.check_failed]
        budget = 0 if max_fail_percentage is None else max_fail_percentage
        if stopped:
            why = (
                f"the rollout stopped after the batch where {', '.join(stopped)} failed "
                f"(fail budget {budget}%: --max-fail-percentage)"
            )
        elif down:
            why = (
                f"the run stopped after the check of {', '.join(down)} failed "
                f"(fail budget {budget}%: --max-fail-percentage)"
            )
        else:
            why = f"the run ended before this host's batch (ansible-runner status {self.status})"
        extra = tuple(HostResult(h, 0, 0, 0, 0, 0, False, None, why) for h in missing)
        kept = tuple(h._replace(not_run=why) if h.host in held else h for h in self.hosts)
        return self._replace(hosts=tuple(sorted(kept + extra)))


class Progress(NamedTuple):
    """What the display gets for each interesting event."""

    kind: str  # play, task, ok, changed, failed, unreachable, skipped
    host: str | None
    task: str | None
    message: str | None


_ERROR_LINE = re.compile(r"(?i)(\berror\b|\bfail|denied|not found|^E: )")


def _message(res: dict[str, Any]) -> str:
    """The cause of a failed task in a line: the lines of its output that say what went wrong."""
    if isinstance(res.get("results"), list):
        failed = next((r for r in res["results"] if isinstance(r, dict) and r.get("failed")), None)
        if failed:
            res = failed
    output = "\n".join(str(res.get(k) or "") for k in ("stderr", "stdout"))
    lines = []
    for raw in output.splitlines():
        line = raw.strip()
        if line and _ERROR_LINE.search(line) and line not in lines:
            lines.append(line)
    msg = str(res.get("msg") or res.get("reason") or "").strip()
    text = "; ".join(lines[-3:]) if lines else msg
    return " ".join(text.split())[:400]


def _action(event_data: dict[str, Any]) -> str:
    """The module an event's task called (its full name where ansible-runner resolves it)."""
    return event_data.get("resolved_action") or event_data.get("task_action") or ""


def is_reboot(event_data: dict[str, Any]) -> bool:
    """Whether a runner_on_ok event is a reboot that happened: the reboot module, rebooted: true."""
    return _action(event_data) in REBOOT_ACTIONS and (event_data.get("res") or {}).get("rebooted") is True


def is_converged(event_data: dict[str, Any]) -> bool:
    """Whether a runner_on_ok event is site.yml's check sorting its host into CONVERGED_GROUP."""
    return _action(event_data) in GROUP_BY_ACTIONS and (event_data.get("res") or {}).get("add_group") == CONVERGED_GROUP


class _Sorting:
    """What site.yml's check play made of each host, followed event by event."""

    def __init__(self) -> None:
        self.checked = False  # the playbook ran the check play
        self.converged: set[str] = set()  # hosts the check sorted into CONVERGED_GROUP
        self.reached: set[str] = set()  # hosts with a task in a play after the check
        self.failed: set[str] = set()  # hosts failed or unreachable in the check

    def observe(self, name: str, data: dict[str, Any]) -> None:
        host = data.get("host")
        if name == "playbook_on_play_start":
            self.checked = self.checked or (data.get("play") or data.get("name")) == CHECK_PLAY
        elif name.startswith("runner_on_") and host:
            if data.get("play") != CHECK_PLAY:
                self.reached.add(host)
            elif name == "runner_on_ok" and is_converged(data):
                self.converged.add(host)
            elif name == "runner_on_unreachable" or (name == "runner_on_failed" and not data.get("ignore_errors")):
                self.failed.add(host)

    def held(self, hosts: set[str]) -> frozenset[str]:
        """The hosts the check neither found converged nor the rollout reached."""
        return frozenset(hosts - self.converged - self.reached) if self.checked else frozenset()


def run_playbook(
    *,
    run_dir: str,
    playbooks: str,
    inventory: str,
    extravars: dict[str, Any],
    limit: str | None = None,
    tags: str | None = None,
    check: bool = False,
    diff: bool = False,
    forks: int = APPLY_FORKS,
    on_event: Callable[[Progress], None] | None = None,
    playbook: str = "site.yml",
) -> RunResult:
    try:
        import ansible_runner
    except ImportError as exc:  # pragma: no cover - a dependency of provision
        raise ToolingError("ansible-runner is not installed", hint="pip install gpu-provision") from exc
    cmdline = " ".join(x for x in ("--check" if check else "", "--diff" if diff else "") if x)
    first_failure: dict[str, str] = {}
    rebooted: set[str] = set()
    sorting = _Sorting()

    def handler(event: dict[str, Any]) -> bool:
        name = event.get("event", "")
        data = event.get("event_data", {})
        host, task = data.get("host"), data.get("task")
        sorting.observe(name, data)
        kind = None
        if name == "playbook_on_play_start":
            kind = "play"
        elif name == "playbook_on_task_start":
            kind = "task"
        elif name == "runner_on_ok":
            kind = "changed" if data.get("res", {}).get("changed") else "ok"
            if is_reboot(data):
                rebooted.add(host)
        elif name == "runner_on_failed" and not data.get("ignore_errors"):
            kind = "failed"
            first_failure.setdefault(host, f"{task}: {_message(data.get('res', {}))}")
        elif name == "runner_on_unreachable":
            kind = "unreachable"
            first_failure.setdefault(host, f"unreachable: {_message(data.get('res', {}))}")
        elif name == "runner_on_skipped":
            kind = "skipped"
        if kind and on_event is not None:
            on_event(
                Progress(
                    kind,
                    host,
                    task or data.get("play"),
                    _message(data.get("res", {})) if kind in ("failed", "unreachable") else None,
                )
            )
        return True

    os.makedirs(os.path.join(run_dir, "env"), mode=0o700, exist_ok=True)
    # ansible-runner would write these as JSON, which Ansible templates; written here as YAML with
    # every string tagged !unsafe, they reach the play as data (ansible-runner passes -e @env/extravars).
    # They hold every -e value: 0600, in the 0700 run folder, never written through a link.
    write_text(os.path.join(run_dir, "env", "extravars"), dump_unsafe_yaml(extravars), mode=0o600)
    if shutil.which("ansible-playbook", path=tool_path()) is None:
        raise ToolingError(
            "ansible-playbook is not installed", hint="pip install gpu-provision (it depends on ansible-core)"
        )
    os.environ["PATH"] = tool_path()  # ansible-runner looks ansible-playbook up before it applies envvars
    runner = ansible_runner.run(
        private_data_dir=run_dir,
        project_dir=playbooks,
        playbook=playbook,
        inventory=os.path.abspath(inventory),
        limit=limit,
        tags=tags,
        cmdline=cmdline or None,
        forks=forks,
        quiet=True,
        event_handler=handler,
        envvars={
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_DEPRECATION_WARNINGS": "False",
            "ANSIBLE_CONFIG": os.path.join(playbooks, "ansible.cfg"),
            "PATH": tool_path(),
            **INVENTORY_ENV,  # the inventory as YAML/INI data, as provision read and checked it
        },
        settings={"suppress_ansible_output": True},
    )
    stats = runner.stats or {}
    names = set()
    for key in ("ok", "changed", "failures", "dark", "skipped", "processed"):
        names |= set((stats.get(key) or {}).keys())
    hosts = tuple(
        HostResult(
            host=h,
            ok=(stats.get("ok") or {}).get(h, 0),
            changed=(stats.get("changed") or {}).get(h, 0),
            failed=(stats.get("failures") or {}).get(h, 0),
            unreachable=(stats.get("dark") or {}).get(h, 0),
            skipped=(stats.get("skipped") or {}).get(h, 0),
            rebooted=h in rebooted,
            cause=first_failure.get(h),
        )
        for h in sorted(names)
    )
    artifacts = os.path.join(run_dir, "artifacts", runner.config.ident)
    return RunResult(
        runner.status, runner.rc, hosts, run_dir, artifacts, sorting.held(names), frozenset(sorting.failed)
    )
