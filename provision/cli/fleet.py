"""`provision apply` and `provision inventory check`."""

import sys
import time

import click

from provision.cli.common import matrix_loader
from provision.cli.output import print_table
from provision.errors import InputError


class LiveProgress:
    """Per-host progress: a live rich table on a terminal, plain lines otherwise."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.state: dict[str, dict] = {}
        self.task = ""
        self.live = None
        self.started = time.monotonic()

    def __enter__(self):
        if self.tty:
            from rich.console import Console
            from rich.live import Live

            self.live = Live(self._render(), console=Console(file=self.stream), refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)

    def __call__(self, event) -> None:
        if event.kind == "task":
            self.task = event.task or ""
        elif event.kind == "play":
            self._line(f"play: {event.task}")
        elif event.host:
            st = self.state.setdefault(
                event.host, {"ok": 0, "changed": 0, "failed": 0, "unreachable": 0, "skipped": 0, "task": ""}
            )
            st[event.kind] = st.get(event.kind, 0) + 1
            if event.kind == "changed":
                st["ok"] += 1
            st["task"] = event.task or ""
            if event.kind in ("changed", "failed", "unreachable"):
                detail = f" -- {event.message}" if event.message else ""
                self._line(f"{event.host}: {event.kind}: {event.task}{detail}")
        if self.live is not None:
            self.live.update(self._render())

    def _line(self, text: str) -> None:
        if self.live is not None:
            self.live.console.log(text)
        else:
            print(f"[{time.monotonic() - self.started:6.1f}s] {text}", file=self.stream, flush=True)

    def _render(self):
        from rich.table import Table

        table = Table(title=f"task: {self.task}", expand=False)
        for col in ("host", "ok", "changed", "failed", "unreachable", "current task"):
            table.add_column(col)
        for host, st in sorted(self.state.items()):
            table.add_row(
                host, str(st["ok"]), str(st["changed"]), str(st["failed"]), str(st["unreachable"]), st["task"]
            )
        return table


@click.command("apply")
@click.option("-i", "--inventory", required=True, type=click.Path(), help="Ansible inventory (file or directory).")
@click.option("--plan", "plan_file", type=click.Path(dir_okay=False), help="Plan lock file for every host.")
@click.option(
    "--fleet",
    "fleet_file",
    type=click.Path(dir_okay=False),
    help="Fleet file: inventory group -> plan request or lock.",
)
@click.option("--limit", help="Ansible host pattern to restrict the run to.")
@click.option(
    "--tags",
    help="Only run these roles: driver, container_runtime, mig (comma-separated; the checks, preflight, "
    "health gate and run lock always run, and such a run records no converged state).",
)
@click.option("--check", is_flag=True, help="Dry run: report what would change, change nothing.")
@click.option("--diff", is_flag=True, help="Show file differences.")
@click.option("--serial", metavar="N|N%", help="Provision hosts in batches of N or N% (default 20%).")
@click.option(
    "--max-fail-percentage",
    type=int,
    metavar="P",
    help="Stop the rollout after a batch where more than P% of hosts failed (default 0: any failure stops it).",
)
@click.option(
    "--forks",
    type=int,
    default=20,
    show_default=True,
    metavar="N",
    help="Hosts Ansible works on at once (its forks, 1-1000; playbooks/ansible.cfg sets 20).",
)
@click.option(
    "--task-timeout",
    type=int,
    metavar="SECONDS",
    help="Fail any one task that runs longer (30-86400; default 1800: a DKMS build's worst case). "
    "The reboot and drain commands keep their own deadlines.",
)
@click.option(
    "--allow-disruption",
    is_flag=True,
    help="Change the driver even while the GPUs are in use, or their use cannot be known (also restarts "
    "Docker with containers running and lets the mig role reset GPUs). Recorded in the summary.",
)
@click.option(
    "--no-gpu-process-check",
    is_flag=True,
    help="Skip preflight's check for processes using the GPUs before a driver change "
    "(preflight_check_gpu_processes: false). Recorded in the summary.",
)
@click.option(
    "--allow-mig-reset",
    is_flag=True,
    help="Let the mig role reset a GPU whose MIG mode change is pending, stopping its clients "
    "(mig_allow_reset: true). Recorded in the summary.",
)
@click.option(
    "--no-health-gate",
    is_flag=True,
    help="Return changed hosts to service without the health gate (provision_health_gate: false). "
    "Recorded in the summary.",
)
@click.option(
    "--drain-command",
    metavar="CMD",
    help="Run before a host changes, on the controller; {{ inventory_hostname }} becomes the host's name "
    "(e.g. 'scontrol update nodename={{ inventory_hostname }} state=drain reason=provision').",
)
@click.option(
    "--undrain-command",
    metavar="CMD",
    help="Run after the host passed the health gate (e.g. scontrol ... state=resume).",
)
@click.option("--drain-on", "drain_delegate", metavar="HOST", help="Run the drain commands on this inventory host.")
@click.option("--full", is_flag=True, help="Run every task, also on hosts whose recorded state still holds.")
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    metavar="KEY=VALUE",
    help="A role variable (preflight_*, nvidia_driver_*, container_runtime_*, mig_*), one line; passed to Ansible "
    "as data, never templated. Safety switches only by their flags above.",
)
@click.option("--run-dir", type=click.Path(file_okay=False), help="Run folder (default: ./provision-runs/<time>-<id>).")
@click.pass_context
def apply_cmd(
    ctx,
    *,
    inventory,
    plan_file,
    fleet_file,
    limit,
    tags,
    check,
    diff,
    serial,
    max_fail_percentage,
    forks,
    task_timeout,
    allow_disruption,
    no_gpu_process_check,
    allow_mig_reset,
    no_health_gate,
    full,
    drain_command,
    undrain_command,
    drain_delegate,
    extra,
    run_dir,
):
    """Provision hosts to match their plan: driver, Fabric Manager, Docker, the Container Toolkit and the plan's MIG layout.

    Runs playbooks/site.yml through ansible-runner; its private data directory stays in the run
    folder (0700: it holds every -e value) as the run's artifacts, beside summary.json. Exit 0 when
    every host succeeded, 1 when some failed or were unreachable, 2 for bad input (nothing is
    touched then).
    """
    from provision.fleet.apply import ApplyRequest, apply
    from provision.fleet.extravars import site_vars
    from provision.resources import playbooks_dir

    playbooks = playbooks_dir()
    extra_vars = site_vars(extra, playbooks)
    request = ApplyRequest(
        inventory=inventory,
        plan=plan_file,
        fleet=fleet_file,
        limit=limit,
        tags=tags,
        check=check,
        diff=diff,
        serial=serial,
        max_fail_percentage=max_fail_percentage,
        forks=forks,
        task_timeout=task_timeout,
        allow_disruption=allow_disruption,
        no_gpu_process_check=no_gpu_process_check,
        allow_mig_reset=allow_mig_reset,
        no_health_gate=no_health_gate,
        extra_vars=extra_vars,
        run_dir=run_dir,
        full=full,
        drain_command=drain_command,
        undrain_command=undrain_command,
        drain_delegate=drain_delegate,
    )
    with LiveProgress() as progress:
        prepared, result = apply(request, matrix_loader=matrix_loader(ctx), playbooks=playbooks, on_event=progress)
    ran = not all(h.not_run is not None for h in result.hosts)
    code = (0 if result.succeeded else 1) if ran else 1
    _write_summary(prepared, result, check, code)
    print_summary(prepared, result, check)
    return code


def print_summary(prepared, result, check: bool) -> None:
    """apply's summary: a row per host (host and outcome whole, the cause wrapped at spaces), the
    guards turned off and the run folder, all fit to COLUMNS, else the terminal, else 100."""
    from provision.cli.output import echo_wrapped

    rows = [
        (
            h.host,
            h.outcome,
            h.ok,
            h.changed,
            h.failed,
            h.unreachable,
            "yes" if h.rebooted else "no",
            h.cause or h.not_run or "",
        )
        for h in result.hosts
    ]
    title = f"provision apply{' --check' if check else ''}: {len(result.hosts)} host(s), {result.status}"
    print_table(
        ("host", "result", "ok", "changed", "failed", "unreachable", "rebooted", "cause"),
        rows,
        title=title,
        whole={0, 1},  # a host name and its outcome ("not run") stay on one line
    )
    for off in prepared.guards_off:
        echo_wrapped(f"guard off by {off.flag}: {off.guard} ({off.variable}: {str(off.value).lower()})", hanging="  ")
    echo_wrapped(f"run folder: {prepared.run_dir}", hanging="  ")
    if all(h.not_run is not None for h in result.hosts):
        echo_wrapped(
            f"error: the playbook did not run (ansible-runner status {result.status}); see {result.artifacts}",
            err=True,
            hanging="  ",
        )


def _write_summary(prepared, result, check: bool, code: int) -> None:
    import json
    import os

    from provision.fleet.apply import write_private

    doc = {
        "status": result.status,
        "rc": code,  # what provision apply exited with
        "ansible_rc": result.rc,  # ansible-playbook's own (4: a host was unreachable)
        "check": check,
        "succeeded": result.succeeded,
        "artifacts": result.artifacts,
        "plans": {group: plan.digest() for group, plan in prepared.plans.items()},
        "guards_off": [
            {"flag": off.flag, "variable": off.variable, "value": off.value, "guard": off.guard}
            for off in prepared.guards_off
        ],
        "hosts": {
            h.host: {
                "ok": h.ok,
                "changed": h.changed,
                "failed": h.failed,
                "unreachable": h.unreachable,
                "skipped": h.skipped,
                "rebooted": h.rebooted,
                "cause": h.cause,
                "outcome": h.outcome,
                "not_run": h.not_run,
            }
            for h in result.hosts
        },
    }
    write_private(os.path.join(prepared.run_dir, "summary.json"), json.dumps(doc, indent=2) + "\n")


@click.group("inventory")
def inventory_group():
    """Check inventories before anything runs, and read what their hosts run now."""


@inventory_group.command("check")
@click.option("-i", "--inventory", required=True, type=click.Path(), help="Ansible inventory (file or directory).")
@click.option(
    "--fleet", "fleet_file", type=click.Path(dir_okay=False), help="Fleet file whose groups must cover every host once."
)
@click.option("--plan", "plan_file", type=click.Path(dir_okay=False), help="Or one plan lock file for every host.")
@click.pass_context
def inventory_check_cmd(ctx, *, inventory, fleet_file, plan_file):
    """Run the checks provision apply runs before it starts, list each with pass or FAIL, and every problem.

    It reads the files only and connects to no host (provision verify does). The checks: the
    inventory is YAML or INI data (no executable, no inventory plugin); host names are host names
    or addresses; connection variables hold no shell metacharacter and no ssh option that runs a
    program on this machine; no safety switch is turned off and every deadline is within its
    bounds (only apply's flags turn a guard off); and with --fleet or --plan, exactly apply's
    validation of the plans (each group's request resolves, or its lock file is a valid, unedited
    plan the catalogue agrees with) and of the groups (every host planned exactly once). With
    neither, an inventory whose hosts are all ungrouped is refused (no fleet file can plan them).
    Exit 0 when apply would start, 2 on problems (as apply).
    """
    from provision.cli.output import echo_wrapped
    from provision.fleet.apply import check_run
    from provision.fleet.inventory import CHECKS, GROUPS, check_inventory, read_inventory, ungrouped_hosts

    planned_run = bool(fleet_file or plan_file)
    if planned_run:
        inv, plans, groups, problems = check_run(inventory, plan_file, fleet_file, matrix_loader(ctx))
    else:
        inv, plans, groups = read_inventory(inventory), {}, None
        problems = check_inventory(inv, None)
    rows = []
    for host, hv in sorted(inv.hosts.items()):
        if groups is None:
            planned = "all" if plans else "-"
        else:
            planned = ", ".join(g for g in groups if host in inv.groups.get(g, set())) or "-"
        rows.append((_cell(host), _cell(hv.get("ansible_host", host)), _cell(hv.get("ansible_port", 22)), planned))
    print_table(
        ("host", "address", "port", "planned group"),
        rows,
        title=f"{len(inv.hosts)} host(s) in {inventory}",
        whole={0, 1, 2},  # a host name, an address, a port: one token each (a quoted one may hold a space)
    )
    for group, plan in plans.items():
        echo_wrapped(f"plan {group}: {plan_line(plan)}", hanging="  ")
    failed = {p.check for p in problems}
    done = {
        "host names": f"{len(inv.hosts)} inventory host name(s), each a host name or IP address",
        "connection variables": "no shell metacharacter, template or control character; no ssh option that runs "
        "a program here (ProxyCommand, LocalCommand, -F, ...); ports, users, key files; one host per address",
        "safety switches": "no guard turned off, every deadline and limit within its bounds, no controller command",
        GROUPS: (
            "every host in exactly one planned group; no group named as apply sorts hosts"
            if planned_run
            else "no group named as apply sorts hosts (planned groups not checked: give --fleet FILE or --plan FILE)"
        ),
    }
    echo_wrapped("checks (the files only: no host was contacted):")
    echo_wrapped("inventory data: read as YAML/INI only (no executable, no inventory plugin)", indent="  pass  ")
    for check in CHECKS:
        count = sum(1 for p in problems if p.check == check)
        status = "FAIL" if check in failed else "pass"
        echo_wrapped(f"{check}: " + (f"{count} problem(s)" if count else done[check]), indent=f"  {status}  ")
    if planned_run:
        what = f"{len(plans)} group plan(s) resolve" if fleet_file else "the lock file"
        echo_wrapped(f"plans: {what}, valid and held to the catalogue", indent="  pass  ")
    else:
        echo_wrapped("plans: not checked (give --fleet FILE or --plan FILE)", indent="  skip  ")
    if problems:
        for line in merged(problems):
            echo_wrapped(f"error: {line}", err=True, hanging="  ")
        fix = "the inventory or the fleet file" if fleet_file else "the inventory"
        echo_wrapped(f"hint: fix {fix}; provision apply refuses to start until this passes", err=True, hanging="  ")
        return 2
    if planned_run:
        echo_wrapped(
            "ok: every check provision apply runs before it starts passed (no host was contacted: "
            "provision verify checks the hosts themselves)"
        )
        return 0
    lonely = ungrouped_hosts(inv)
    if len(lonely) == len(inv.hosts):
        raise InputError(
            f"every host ({len(lonely)}) is ungrouped: a fleet file plans inventory groups, "
            "so provision apply --fleet would provision none of them",
            hint="put the hosts in groups (YAML: all: children: GROUP: hosts:, INI: [GROUP]) and check with "
            "--fleet FILE, or check one plan for every host with --plan FILE",
        )
    if lonely:
        echo_wrapped(f"note: in no group but all (no fleet file can plan them): {', '.join(lonely)}", err=True)
    echo_wrapped(
        "the inventory passed; the plans were not checked: give --fleet FILE or --plan FILE "
        "to run every check provision apply runs"
    )
    return 0


def plan_line(plan) -> str:
    """One plan in a line: GPU, OS, driver and, with an image part, its CUDA (a host-only plan has
    none), then what the image installs: the framework as NAME==VERSION (pytorch==2.15.0; an
    inference plan's is its stack framework, onnxruntime==1.31.1) and each other stack package
    (--with, and what their builds require) after "with", in the plan's order."""
    image = f"CUDA {plan.cuda.version}" if plan.cuda is not None else "host only (no image part)"
    server = ""
    if plan.server is not None:
        count = plan.server.gpu_count
        server = f" in {plan.server.id}" + (f" (x{count})" if count else "")
    line = f"{plan.gpu.id}{server} on {plan.os.id}, driver {plan.driver.version}, {image}"
    heads = [f"{plan.framework.name}=={plan.framework.version}"] if plan.framework is not None else []
    heads += [f"{s.id}=={s.version}" for s in plan.stack if s.role == "framework"]
    others = [f"{s.id}=={s.version}" for s in plan.stack if s.role != "framework"]
    if heads:
        line += f", {' '.join(heads)}"
    if others:
        listed = others[0] if len(others) == 1 else f"{', '.join(others[:-1])} and {others[-1]}"
        line += f"{' with' if heads else ', with'} {listed}"
    return line


def _cell(value) -> str:
    """A table cell from an inventory value: shown as Python writes it where it holds a control character."""
    from provision.documents import control_character

    text = str(value)
    return repr(text) if control_character(text) else text


def merged(problems) -> list[str]:
    """One line per problem text, naming the hosts that share it (a group variable repeats on every host)."""
    hosts: dict[str, list[str]] = {}
    for p in problems:
        hosts.setdefault(p.text, [])
        if p.host:
            hosts[p.text].append(p.host)
    out = []
    for text, names in hosts.items():
        if not names:
            out.append(text)
            continue
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        out.append(f"{shown}: {text}")
    return out


def _add_scan() -> None:
    """`provision inventory scan` lives in provision/cli/scan.py; the group lists it here."""
    from provision.cli.scan import scan_cmd

    inventory_group.add_command(scan_cmd)


_add_scan()
