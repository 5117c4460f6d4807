"""`provision verify`: does each host still match its plan?"""

from __future__ import annotations

import os
import sys

import click

from provision.cli.common import check_output, host_pool_options, load_matrix, load_plan, plan_source, write_output
from provision.errors import InputError


@click.command("verify")
@click.option(
    "-i", "--inventory", type=click.Path(), help="Ansible inventory (as for apply): verify its hosts over SSH."
)
@click.option(
    "--fleet", "fleet_file", type=click.Path(dir_okay=False), help="With -i: fleet file (group -> plan), as for apply."
)
@click.option("--limit", metavar="HOSTS", help="With -i: comma-separated hosts or groups to verify.")
@click.option("--local", "local", is_flag=True, help="Verify this machine.")
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="URL",
    help="Verify a host: ssh://[user@]host[:port] (or user@host), safe-ssh://…, docker://NAME, podman://NAME, "
    "local://; no ?options (use --sudo, --ssh-identity-file); repeatable.",
)
@plan_source
@click.option(
    "--gpu-count",
    type=click.IntRange(min=1),
    help="GPUs each host must show (default: at least one; an inventory host can set provision_gpu_count).",
)
@click.option(
    "--mig-vars",
    type=click.Path(dir_okay=False),
    help="MIG layout the hosts must show: the vars file "
    "provision mig plan --out-vars writes (inventory hosts may carry provision_mig_* vars instead).",
)
@click.option("--only", metavar="CHECKS", help="Comma-separated check ids to run (see --list).")
@click.option("--list", "list_checks", is_flag=True, help="List the checks (in --format) and exit.")
@click.option("--sudo", is_flag=True, help="Run the checks' commands through sudo.")
@click.option("--ssh-identity-file", type=click.Path(dir_okay=False), help="SSH key for --host.")
@host_pool_options(
    forks_help="Hosts checked at the same time (as Ansible's forks).",
    timeout_help="Deadline per host. Each command on it gets at most a third, under timeout --kill-after; "
    "a host past it is reported as an error with the checks it finished.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown", "json"]),
    default="table",
    show_default=True,
    help="table: fits COLUMNS, else the terminal, else 100 columns (cells wrap at spaces, else a line per check "
    "under its host); markdown: the same rows, unwrapped; json: every check with its evidence.",
)
@click.option("--junit", "junit_file", type=click.Path(dir_okay=False), help="Also write a JUnit XML report (CI).")
@click.pass_context
def verify_cmd(
    ctx,
    *,
    inventory,
    fleet_file,
    limit,
    local,
    hosts,
    plan_args,
    gpu_count,
    mig_vars,
    only,
    list_checks,
    sudo,
    ssh_identity_file,
    forks,
    host_timeout,
    fmt,
    junit_file,
):
    """Check that hosts match their plan: OS, nouveau, the nvidia module and nvidia-smi at the
    planned driver, GPU model and count, packages at planned versions and held, persistence, the
    fabric manager, the Container Toolkit, the nvidia runtime, a GPU container, the MIG layout,
    Secure Boot against module signing; with a platform in the plan (platform: in the fleet file,
    plan --platform), the server around the GPUs: DMI vendor and product, GPU count, PCIe link,
    NVLink, the topo -m relation (server-*); with --fleet, that each image a host's group lists
    (images:) runs on the driver and GPU the host reports (image-runs). Changes nothing on the
    hosts.

    \b
    provision verify -i hosts.yml --fleet fleet.yaml
    provision verify --local --plan plan.lock.json --format json
    provision verify --host ssh://root@gpu7 --os ubuntu22.04 --gpu h100-sxm --junit verify.xml

    Hosts are checked side by side (--forks at a time), each under --host-timeout: a hung
    command (an nvidia-smi stuck on a GPU that fell off the bus) is stopped and reported, and an
    unreachable host is an error with its cause, never a traceback.

    How each host is reached is checked before any is contacted: host names and addresses must
    be host names or IP addresses, ssh arguments ssh options that run nothing here (no
    ProxyCommand, LocalCommand, -F; use ProxyJump), booleans what Ansible reads as booleans.
    What a host prints is data: each command's output is read up to 1 MiB (a check that read a
    cut output says so).

    Exit status: 0 every check passed, warned or was skipped, 1 a check failed or a host could
    not be checked, 2 bad input.
    """
    check_output(junit_file, "--junit")
    from provision.verify import run_verify

    if list_checks:
        from provision.cli.output import dumps_json, markdown_table, print_table

        if fmt == "json":
            sys.stdout.write(dumps_json([{"id": c, "title": t} for c, t in _checks()]))
        elif fmt == "markdown":
            sys.stdout.write(markdown_table(["check", "what it proves"], _checks()))
        else:
            print_table(["check", "what it proves"], _checks(), keyed=True)
        return 0
    if sum(bool(x) for x in (inventory, local, hosts)) != 1:
        raise InputError(
            "give exactly one of -i INVENTORY, --local and --host URL",
            hint="provision verify -i hosts.yml --fleet fleet.yaml, or provision verify --local --plan plan.lock.json",
        )
    selected = None
    if only:
        known = {c for c, _ in _checks()}
        selected = [c.strip() for c in only.split(",") if c.strip()]
        unknown = [c for c in selected if c not in known]
        if unknown:
            raise InputError(f"unknown check {unknown[0]!r}", hint="provision verify --list shows the checks")
    mig = _read_mig_vars(mig_vars) if mig_vars else None
    catalogue = _Catalogue(ctx)
    targets = _targets(
        ctx,
        catalogue,
        inventory=inventory,
        local=local,
        hosts=hosts,
        fleet_file=fleet_file,
        limit=limit,
        plan_args=plan_args,
        gpu_count=gpu_count,
        mig=mig,
    )
    report = run_verify(
        targets,
        sudo=sudo,
        ssh_identity_file=ssh_identity_file,
        only=selected,
        forks=forks,
        host_timeout=host_timeout,
        # the image-runs check's catalogue: shared with the workers forked from here, loaded from the
        # same folder's validated-data cache by a worker started on its own
        **({"matrix": catalogue(), "compat_dir": catalogue.compat_dir} if any(t.images for t in targets) else {}),
    )
    if junit_file:
        write_output(junit_file, report.junit(), "--junit")
    if fmt == "json":
        from provision.cli.output import dumps_json

        sys.stdout.write(dumps_json(report.to_dict()))
    else:
        _print_table(report, fmt)
    return report.exit_code


class _Catalogue:
    """The catalogue this command reads (--compat-dir, else the built-in data), loaded once, on first use."""

    def __init__(self, ctx):
        from provision.resources import compat_dir

        self.ctx = ctx
        self.compat_dir = compat_dir((ctx.obj or {}).get("compat_dir"))
        self._matrix = None

    def __call__(self):
        if self._matrix is None:
            self._matrix = load_matrix(self.ctx, self.compat_dir)
        return self._matrix


def _targets(ctx, catalogue, *, inventory, local, hosts, fleet_file, limit, plan_args, gpu_count, mig) -> list:
    """Every host to verify, each one's connection and variables checked (nothing is contacted
    before all are)."""
    from provision.hostpool import Connection, url_connection
    from provision.verify import Target

    if inventory:
        return _inventory_targets(
            catalogue,
            inventory=inventory,
            plan_file=plan_args["plan_file"],
            fleet_file=fleet_file,
            limit=limit,
            plan_flags=plan_args["os_id"] or plan_args["gpu"],
            gpu_count=gpu_count,
            mig=mig,
        )
    if fleet_file or limit:
        raise InputError("--fleet and --limit need -i INVENTORY", hint="for one host give --plan FILE or --os/--gpu")
    connections = [url_connection(h) for h in hosts]  # all checked before the plan is even read
    plan = load_plan(ctx, **plan_args)
    mig = mig or _plan_mig(plan)
    if local:
        return [Target("local", Connection("local"), plan, gpu_count, mig)]
    return [Target(c.label or "local", c, plan, gpu_count, mig) for c in connections]


def _checks() -> list[tuple[str, str]]:
    import importlib

    from provision.verify import CHECKS_DIR

    out = []
    for name in sorted(os.listdir(CHECKS_DIR)):
        if name.startswith("check_") and name.endswith(".py"):
            module = importlib.import_module(f"provision.verify.checks.{name[:-3]}")
            out += [
                (f.provision_check, f.provision_title)
                for f in vars(module).values()
                if callable(f) and getattr(f, "__module__", None) == module.__name__ and hasattr(f, "provision_check")
            ]
    return out


def _plan_mig(plan) -> dict | None:
    """The layout a plan made with --mig (or a fleet group's mig:) asks for."""
    from provision.fleet.extravars import mig_vars

    return mig_vars(plan) if plan.mig else None


def _read_mig_vars(path: str) -> dict:
    from provision.documents import load_yaml, read_text
    from provision.verify.settings import checked_hostvars

    hint = "write it with provision mig plan --out-vars FILE"
    doc = load_yaml(read_text(path, "--mig-vars"), f"--mig-vars {path!r}")
    if not isinstance(doc, dict) or "provision_mig_layout" not in doc:
        raise InputError(f"{path!r} holds no provision_mig_layout", hint=hint)
    return checked_hostvars(f"--mig-vars {path}", doc)


def _inventory_targets(catalogue, *, inventory, plan_file, fleet_file, limit, plan_flags, gpu_count, mig):
    from provision.fleet.apply import load_plans, plan_of_host
    from provision.fleet.inventory import load_fleet, load_inventory, select_hosts
    from provision.hostpool import inventory_connection
    from provision.plan.lockcheck import check_run_plans
    from provision.verify import Target
    from provision.verify.images import assigned_images
    from provision.verify.settings import checked_hostvars

    if plan_flags:
        raise InputError(
            "with -i give --plan FILE or --fleet FILE, not --os/--gpu",
            hint="provision plan --os OS --gpu GPU --lock plan.lock.json writes one",
        )
    if bool(plan_file) == bool(fleet_file):
        raise InputError(
            "with -i give exactly one of --plan and --fleet", hint="the same ones provision apply was given"
        )
    inv = load_inventory(inventory)
    plans, _ = load_plans(plan_file, fleet_file, catalogue)
    # a digest is no signature: every plan held to the catalogue, as apply holds it
    check_run_plans(plans, catalogue, plan_file)
    listed = {fg.group: fg.images for fg in load_fleet(fleet_file)} if fleet_file else {}
    images: dict[str, tuple] = {}  # group -> its images' needs, read once per group
    names = select_hosts(inv, limit)
    path = os.path.abspath(inventory)
    targets = []
    for name in names:
        found = plan_of_host(inv, plans, name)
        if found is None:
            raise InputError(
                f"host {name!r} is in none of the fleet file's groups",
                hint=f"add one of its groups to the fleet file, or --limit the hosts ({', '.join(sorted(plans))})",
            )
        # the connection and every variable verify reads, checked as the roles read them
        connection = inventory_connection(name, inv.hosts[name], inventory=path)
        hv = checked_hostvars(name, inv.hosts[name])
        count = hv.get("provision_gpu_count", gpu_count)
        host_mig = {k: v for k, v in hv.items() if k.startswith("provision_mig_")} or mig or _plan_mig(found[1])
        group = found[0] if fleet_file else None
        if group is not None and group not in images:
            images[group] = assigned_images(catalogue(), group, listed[group], fleet_file) if listed[group] else ()
        assigned = images[group] if group is not None else None
        targets.append(Target(name, connection, found[1], count, host_mig, hv, assigned, group))
    return targets


HEADERS = ["host", "check", "status", "evidence / reason"]


def _print_table(report, fmt: str = "table") -> None:
    from provision.cli.output import echo_wrapped, markdown_table

    rows = report.table_rows()
    if fmt == "markdown":
        click.echo("## provision verify\n\n" + markdown_table(HEADERS, rows))
    else:
        click.echo(report_table(rows), nl=False)
    host_errors = report.host_errors()
    for host, results in report.by_host().items():
        c = report.counts(results)
        if host in host_errors:  # the error itself is its row above: said once (issue 23)
            echo_wrapped(
                f"{host}: ERROR, not verified"
                + (f" ({c['pass']} passed, {c['fail']} failed before it)" if results else ""),
                hanging="  ",
            )
            continue
        echo_wrapped(f"{host}: {c['pass']} passed, {c['fail']} failed, {c['skip']} skipped")
    for error in report.errors:
        echo_wrapped(f"error: {error}", err=True, hanging="  ")


def report_table(rows: list[list[str]], width: int | None = None) -> str:
    """The report's rows as text no wider than ``width`` (default: COLUMNS, else the terminal, else
    100): one table (host, check, status, evidence / reason) where its columns fit, wrapped at
    spaces; else, per host, a line per check (status, check, then its evidence or reason, wrapped
    beneath), rather than four lines per check. A word, path, version or `command` is never split:
    only one longer than the line is wider than it, on a line of its own."""
    from provision.cli.output import fits_as_columns, longest_token, table_lines, terminal_width, wrap_text

    width = terminal_width() if width is None else width
    whole = {0, 1, 2}
    if fits_as_columns(HEADERS, rows, width=width, whole=whole):
        return "\n".join(table_lines(HEADERS, rows, width=width, title="provision verify", whole=whole)) + "\n"
    out = ["provision verify"]
    hosts: dict[str, list[list[str]]] = {}
    for row in rows:
        hosts.setdefault(row[0], []).append(row)
    for host, host_rows in hosts.items():
        out += ["", *wrap_text(f"host {host}:", width)]
        labels = [f"  {status:<5} {check}" if check != "-" else f"  {status}" for _, check, status, _ in host_rows]
        pad = max(len(label) for label in labels) + 2
        for label, (_, _, _, shown) in zip(labels, host_rows, strict=True):
            head = label.ljust(pad) if pad <= width // 2 else label + "  "
            if not shown or shown == "-":
                out.append(label)
            elif longest_token(shown) <= width - len(head):
                out += wrap_text(shown, width, indent=head, hanging=" " * len(head))
            else:  # beside its label the value would pass the width: beneath it
                out.append(label)
                out += wrap_text(shown, width, indent=" " * 8, hanging=" " * 8)
    return "\n".join(out) + "\n"
