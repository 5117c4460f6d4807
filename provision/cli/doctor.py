"""`provision doctor`: read what a GPU host says about itself and name the fault and the fix."""

from __future__ import annotations

import os
import sys

import click

from provision.cli.common import load_matrix
from provision.errors import InputError


@click.command("doctor")
@click.option("--local", "local", is_flag=True, help="Diagnose this machine.")
@click.option("-i", "--inventory", type=click.Path(), help="Diagnose the hosts of an Ansible inventory (over SSH).")
@click.option("--limit", metavar="HOSTS", help="With -i: comma-separated hosts or groups.")
@click.option(
    "--from-file",
    "files",
    multiple=True,
    type=click.Path(),
    help="Diagnose captured output instead: nvidia-smi -q / -q -x / table / CSV, nvlink -s, a kernel "
    "log, an error message, a framework log, a fabric manager log; repeatable.",
)
@click.option(
    "--app-log",
    "app_logs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="With --local: a framework/application log to read too (out-of-memory, CUDA errors).",
)
@click.option("--save-dir", type=click.Path(file_okay=False), help="Keep what was collected, one file per host.")
@click.option("--sudo", is_flag=True, help="With -i: collect through sudo (the kernel log may need it).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_context
def doctor_cmd(ctx, *, local, inventory, limit, files, app_logs, save_dir, sudo, fmt):
    """Name GPU faults and their fixes from nvidia-smi, the kernel log and error output: Xid
    errors, driver/library mismatch, a driver that is not loaded, CUDA newer than the driver,
    throttling and temperatures, ECC / retired pages / remapped rows, inactive NVLink, MIG
    changes pending, persistence off, a degraded PCIe link, out-of-memory.

    \b
    provision doctor --local
    provision doctor -i hosts.yml --limit gpu-a --format json
    provision doctor --from-file nvidia-smi-q.xml --from-file dmesg.log

    Exit status: 0 healthy (warnings and notes only), 1 an error finding (or a host that could
    not be read), 2 bad input (a file that cannot be read or is not GPU tool output).
    """
    from provision.doctor import diagnose_files, diagnose_texts, split_bundle

    if sum(bool(x) for x in (local, inventory, files)) != 1:
        raise InputError(
            "give exactly one of --local, -i INVENTORY and --from-file FILE",
            hint="provision doctor --local, or provision doctor --from-file nvidia-smi-q.xml",
        )
    if app_logs and not local:
        raise InputError("--app-log goes with --local", hint="with --from-file, pass the log as another --from-file")
    if limit and not inventory:
        raise InputError("--limit needs -i INVENTORY", hint="provision doctor -i hosts.yml --limit gpu-a")
    matrix = load_matrix(ctx)
    if files:
        report = diagnose_files(list(files), matrix=matrix)
        return _emit_single(report, fmt)
    from provision.doctor.collect import collect_local, collect_remote

    if local:
        collected = [collect_local()]
    else:
        from provision.fleet.inventory import load_inventory, select_hosts

        inv = load_inventory(inventory)
        collected = collect_remote(select_hosts(inv, limit), os.path.abspath(inventory), sudo=sudo)
    results = []
    for item in collected:
        if save_dir and item.text is not None:
            os.makedirs(save_dir, exist_ok=True)
            with open(os.path.join(save_dir, f"{item.host}.doctor.txt"), "w", encoding="utf-8") as handle:
                handle.write(item.text)
        if item.text is None:
            results.append((item.host, None, item.problem))
            continue
        sections = split_bundle(item.text)
        for path in app_logs:
            sections["app-log"] = sections.get("app-log", "") + _read(path)
        results.append((item.host, diagnose_texts(sections, matrix=matrix), None))
    if local:
        return _emit_single(results[0][1], fmt)
    return _emit_hosts(results, fmt)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", hint="check the --app-log path") from None


def _rows(findings, host: str | None = None):
    from provision.text import clip

    rows = []
    for f in findings:
        row = [f.severity, f.id, f.title, clip(f.evidence, 70), clip(f.fix, 90)]
        rows.append(([host] if host is not None else []) + row)
    return rows


def _emit_single(report, fmt: str) -> int:
    from provision.cli.output import dumps_json, print_table

    if fmt == "json":
        sys.stdout.write(dumps_json(report.to_dict()))
        return report.exit_code
    if report.findings:
        print_table(["severity", "id", "title", "evidence", "fix"], _rows(report.findings), title="provision doctor")
    c = report.counts()
    verdict = "unhealthy" if report.exit_code else "healthy"
    click.echo(
        f"{verdict}: {c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s); "
        f"read {len(report.read)} source(s)"
    )
    return report.exit_code


def _emit_hosts(results, fmt: str) -> int:
    from provision.cli.output import dumps_json, print_table

    hosts, flat, code = [], [], 0
    for host, report, problem in results:
        if report is None:
            finding = {
                "id": "host-unreachable",
                "severity": "error",
                "title": "the host could not be read",
                "evidence": problem or "",
                "fix": "check SSH access (provision inventory check -i INVENTORY)",
            }
            hosts.append(
                {
                    "host": host,
                    "exit_code": 1,
                    "findings": [finding],
                    "counts": {"error": 1, "warning": 0, "info": 0},
                    "read": [],
                }
            )
            flat.append({"host": host, **finding})
            code = 1
            continue
        doc = report.to_dict()
        hosts.append({"host": host, **doc})
        flat += [{"host": host, **f} for f in doc["findings"]]
        code = max(code, report.exit_code)
    if fmt == "json":
        sys.stdout.write(dumps_json({"exit_code": code, "hosts": hosts, "findings": flat}))
        return code
    from provision.text import clip

    rows = [[f["host"], f["severity"], f["id"], f["title"], clip(f["evidence"], 70), clip(f["fix"], 90)] for f in flat]
    if rows:
        print_table(["host", "severity", "id", "title", "evidence", "fix"], rows, title="provision doctor")
    for h in hosts:
        c = h["counts"]
        verdict = "unhealthy" if h["exit_code"] else "healthy"
        click.echo(f"{h['host']}: {verdict}: {c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s)")
    return code
