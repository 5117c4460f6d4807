"""`provision doctor`: read what a GPU host says about itself and name the fault and the fix."""

from __future__ import annotations

import os
import sys

import click

from provision.cli.common import host_pool_options, load_matrix
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
@host_pool_options(
    forks_help="With -i: hosts read at the same time (as Ansible's forks).",
    timeout_help="With --local or -i: deadline per host. nvidia-smi gets a third of it under timeout "
    "--kill-after (a hung one is a finding); the kernel log is read before it.",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_context
def doctor_cmd(ctx, *, local, inventory, limit, files, app_logs, save_dir, sudo, forks, host_timeout, fmt):
    """Name GPU faults and their fixes from nvidia-smi, the kernel log and error output: Xid
    errors, driver/library mismatch, a driver that is not loaded, CUDA newer than the driver,
    throttling and temperatures, ECC / retired pages / remapped rows, inactive NVLink, MIG
    changes pending, persistence off, a degraded PCIe link, out-of-memory.

    \b
    provision doctor --local
    provision doctor -i hosts.yml --limit gpu-a --format json
    provision doctor --from-file nvidia-smi-q.xml --from-file dmesg.log

    The table wraps the evidence and the fix to the terminal's width (COLUMNS); piped without
    COLUMNS, each finding stays on one line. Nothing is cut: --format json carries the same text.

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
        collected = [collect_local(host_timeout)]
    else:
        from provision.fleet.inventory import load_inventory, select_hosts

        inv = load_inventory(inventory)
        collected = collect_remote(
            select_hosts(inv, limit),
            os.path.abspath(inventory),
            sudo=sudo,
            forks=forks,
            host_timeout=host_timeout,
            hostvars=inv.hosts,
        )
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
        report = diagnose_texts(sections, matrix=matrix)
        if item.problem:  # partial output: the collector was stopped at the host's deadline
            report = _with_stopped(report, item.problem)
        results.append((item.host, report, None))
    if local:
        return _emit_single(results[0][1], fmt)
    return _emit_hosts(results, fmt)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", hint="check the --app-log path") from None


def _with_stopped(report, problem: str):
    from provision.doctor import Finding, Report

    stopped = Finding(
        "collector-stopped",
        "error",
        "the host's deadline stopped the collector: what it read before is diagnosed",
        problem,
        "Something on the host hangs (nvidia-smi on a lost GPU, a stuck filesystem): read the findings "
        "above, then `sudo dmesg | tail` on the host; raise --host-timeout if the host is only slow.",
    )
    return Report((*report.findings, stopped), report.read)


HEADERS = ["severity", "id", "title", "evidence", "fix"]
WRAPPED = ("title", "evidence", "fix")  # the columns that wrap; the others are short
MIN_WRAP = 24  # narrower than this per wrapped column, each finding is printed as a block


def _rows(findings, host: str | None = None) -> list[list[str]]:
    rows = []
    for f in findings:
        row = [f.severity, f.id, f.title, " ".join(f.evidence.split()), " ".join(f.fix.split())]
        rows.append(([host] if host is not None else []) + row)
    return rows


def _print_findings(headers: list[str], rows: list[list[str]]) -> None:
    import shutil

    width = shutil.get_terminal_size((0, 0)).columns  # COLUMNS, else the terminal; 0 when piped
    click.echo(findings_table(headers, rows, width), nl=False)


def findings_table(headers: list[str], rows: list[list[str]], width: int) -> str:
    """The findings as text no wider than `width` (0: unbounded, one line per finding). The
    title, evidence and fix columns wrap; nothing is cut. Too narrow for columns, each finding
    becomes a block of wrapped lines."""
    import textwrap

    wrap = [i for i, h in enumerate(headers) if h in WRAPPED]
    natural = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    if width <= 0:
        widths = natural
    else:
        fixed = sum(natural[i] for i in range(len(headers)) if i not in wrap) + 2 * (len(headers) - 1)
        widths = _share(natural, wrap, width - fixed)
        if widths is None:
            return _blocks(headers, rows, width)
    out = ["provision doctor", ""]
    out.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    out.append("  ".join("-" * w for w in widths))
    for row in rows:
        cells = [
            textwrap.wrap(v, w, break_long_words=True, break_on_hyphens=False) or [""]
            if i in wrap and width > 0
            else [v]
            for i, (v, w) in enumerate(zip(row, widths, strict=True))
        ]
        for n in range(max(len(c) for c in cells)):
            line = "  ".join((c[n] if n < len(c) else "").ljust(w) for c, w in zip(cells, widths, strict=True))
            out.append(line.rstrip())
    return "\n".join(out) + "\n"


def _share(natural: list[int], wrap: list[int], room: int) -> list[int] | None:
    """Widths for the wrapped columns within `room`: each gets what it needs, up to an equal
    share of what is left (water-filling); None when each cannot get MIN_WRAP."""
    if room < MIN_WRAP * len(wrap):
        return None
    widths = list(natural)
    pending = sorted(wrap, key=lambda i: natural[i])
    while pending:
        share = room // len(pending)
        i = pending.pop(0)
        widths[i] = min(natural[i], share) if pending else min(natural[i], room)
        room -= widths[i]
    return widths


def _blocks(headers: list[str], rows: list[list[str]], width: int) -> str:
    import textwrap

    out = ["provision doctor", ""]
    for row in rows:
        head = [v for h, v in zip(headers, row, strict=True) if h not in WRAPPED]
        out += textwrap.wrap("  ".join(head), width, break_long_words=True) or [""]
        for h, v in zip(headers, row, strict=True):
            if h in WRAPPED:
                out += textwrap.wrap(
                    v,
                    width,
                    initial_indent=f"  {h}: "[:width],
                    subsequent_indent="    "[: max(0, width - 1)],
                    break_long_words=True,
                    break_on_hyphens=False,
                )
        out.append("")
    return "\n".join(out)


def _emit_single(report, fmt: str) -> int:
    from provision.cli.output import dumps_json

    if fmt == "json":
        sys.stdout.write(dumps_json(report.to_dict()))
        return report.exit_code
    if report.findings:
        _print_findings(HEADERS, _rows(report.findings))
    c = report.counts()
    verdict = "unhealthy" if report.exit_code else "healthy"
    click.echo(
        f"{verdict}: {c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s); "
        f"read {len(report.read)} source(s)"
    )
    return report.exit_code


def _emit_hosts(results, fmt: str) -> int:
    from provision.cli.output import dumps_json

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
    rows = [
        [f["host"], f["severity"], f["id"], f["title"], " ".join(f["evidence"].split()), " ".join(f["fix"].split())]
        for f in flat
    ]
    if rows:
        _print_findings(["host", *HEADERS], rows)
    for h in hosts:
        c = h["counts"]
        verdict = "unhealthy" if h["exit_code"] else "healthy"
        click.echo(f"{h['host']}: {verdict}: {c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s)")
    return code
