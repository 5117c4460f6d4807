"""`provision doctor`: read what a GPU host says about itself and name the fault and the fix."""

from __future__ import annotations

import os
import re
import shlex
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
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown", "json"]),
    default="table",
    show_default=True,
    help="table: fits COLUMNS, else the terminal, else 100 columns (cells wrap at spaces, else one block per "
    "finding); markdown: a table of the findings, unwrapped; json: every finding and what was read.",
)
@click.pass_context
def doctor_cmd(ctx, *, local, inventory, limit, files, app_logs, save_dir, sudo, forks, host_timeout, fmt):
    """Name GPU faults and their fixes from nvidia-smi, the kernel log and error output: Xid
    errors, driver/library mismatch, a driver that is not loaded, a GPU the driver does not
    support or cannot initialise, no NVIDIA GPU on the PCI bus, CUDA newer than the driver,
    throttling and temperatures, ECC / retired pages / remapped rows, inactive NVLink, MIG
    changes pending, persistence off, a degraded PCIe link, out-of-memory. From the server's BMC
    (ipmitool, FreeIPMI): fans, temperatures and power past their thresholds, failed or unpowered
    power supplies and lost redundancy, chassis intrusion, each linked to the GPU slowdown it
    causes; --local and -i read it in-band with ipmitool where installed.

    \b
    provision doctor --local
    provision doctor -i hosts.yml --limit gpu-a --format json
    provision doctor --from-file nvidia-smi-q.xml --from-file dmesg.log

    The table fits COLUMNS, else the terminal, else 100 columns (piped output too): the title,
    evidence and fix wrap at spaces only (a word, path, PCI id or GPU UUID is never split, a
    `command` stays on one line, one longer than the line is shown as the commands it chains),
    as one block per finding when columns do not fit. --format markdown and --format json carry
    the same text unwrapped.

    A host's output is read up to 16 MiB, each command's up to 4 MiB (of a log, its newest), and
    what was cut is a finding (output-cut).

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
    logs = [_read_tail(path) for path in app_logs]
    results = []
    for item in collected:
        if save_dir and item.text is not None:
            _save(save_dir, item.host, item.text)
        if item.text is None:
            results.append((item.host, None, item.problem))
            continue
        sections = split_bundle(item.text, item.token or None)
        for text, _cut in logs:
            sections["app-log"] = sections.get("app-log", "") + text
        report = diagnose_texts(sections, matrix=matrix)
        extra = [_cut_finding(path, size) for path, (_text, size) in zip(app_logs, logs, strict=True) if size]
        if item.cut:
            extra.append(_host_cut())
        if item.problem:  # partial output: the collector was stopped at the host's deadline
            extra.append(_stopped(item.problem))
        results.append((item.host, _with(report, extra), None))
    if local:
        return _emit_single(results[0][1], fmt)
    return _emit_hosts(results, fmt, inventory)


def _save(folder: str, host: str, text: str) -> None:
    """What a host's collector printed, as FOLDER/HOST.doctor.txt (readable by its owner only: a
    kernel log can say more than a GPU's health); never through a symlink."""
    from provision.documents import write_text

    if not _SAVED_NAME.fullmatch(host):
        raise InputError(f"host {host!r}: not a name to save a file as", hint="drop --save-dir for this inventory")
    os.makedirs(folder, exist_ok=True)
    write_text(os.path.join(folder, f"{host}.doctor.txt"), text, mode=0o600)


def _read_tail(path: str) -> tuple[str, int]:
    """An --app-log's text: its last SECTION_CHARS bytes (a training log ends with what failed),
    and its size when it was larger (0 when read whole)."""
    from provision.doctor.bounds import SECTION_CHARS
    from provision.doctor.diagnose import decode_bytes

    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > SECTION_CHARS:
                handle.seek(size - SECTION_CHARS)
            data = handle.read(SECTION_CHARS)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})", hint="check the --app-log path") from None
    text = decode_bytes(data)
    if size > SECTION_CHARS:
        text = text[text.find("\n") + 1 :]  # from the first whole line
    return text, (size if size > SECTION_CHARS else 0)


def _with(report, extra: list):
    from provision.doctor import Report
    from provision.doctor.model import sort_findings

    return Report(sort_findings([*report.findings, *extra]), report.read) if extra else report


def _stopped(problem: str):
    from provision.doctor import Finding

    return Finding(
        "collector-stopped",
        "error",
        "the host's deadline stopped the collector: what it read before is diagnosed",
        problem,
        "Something on the host hangs (nvidia-smi on a lost GPU, a stuck filesystem): read the findings "
        "above, then `sudo dmesg | tail` on the host; raise --host-timeout if the host is only slow.",
    )


def _host_cut():
    from provision.doctor import Finding
    from provision.doctor.bounds import HOST_BYTES, size

    return Finding(
        "output-cut",
        "error",
        f"the host printed more than {size(HOST_BYTES)}: only its first {size(HOST_BYTES)} were diagnosed",
        f"the collector's output was cut at {HOST_BYTES:,} bytes",
        "The collector prints a few hundred KiB on a healthy host (each command is cut at 4 MiB), so this host "
        "floods its output, or something on it rewrites what the collector prints: what came after the cut "
        "(nvidia-smi comes last) was not diagnosed. Run `nvidia-smi -q` and `sudo dmesg | tail` on the host.",
    )


def _cut_finding(path: str, whole: int):
    from provision.doctor import Finding
    from provision.doctor.bounds import SECTION_CHARS, size

    return Finding(
        "output-cut",
        "warning",
        f"the application log {os.path.basename(path)} is {size(whole)}: only its last {size(SECTION_CHARS)} were read",
        f"{path}: {whole:,} bytes",
        "An error earlier in the log was not analysed: pass the part around the failure "
        "(`grep -n -iE 'cuda|nccl|error' LOG`) with --app-log.",
    )


_SAVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,252}")


def _unreachable_fix(inventory: str, host: str) -> str:
    """A command that connects to the host as doctor does (the inventory's user, port, key and ssh
    options), to see the error whole."""
    inv, name = shlex.quote(inventory), shlex.quote(host)
    return (
        f"Connect to it the way doctor does, with the inventory's settings: `ansible -i {inv} {name} -m ping` "
        f"(`-vvv` shows the ssh command and its error); fix what it reports (address, user, key, "
        f"host key, firewall), then run doctor again with `--limit {name}`."
    )


HEADERS = ["severity", "id", "title", "evidence", "fix"]
WRAPPED = ("title", "evidence", "fix")  # the columns that wrap; the others are one token each
LABEL_ROOM = len("  evidence: ")  # what a finding's block puts before its values (output.table_lines)


def _rows(findings, host: str | None = None) -> list[list[str]]:
    rows = []
    for f in findings:
        row = [f.severity, f.id, f.title, " ".join(f.evidence.split()), " ".join(f.fix.split())]
        rows.append(([host] if host is not None else []) + row)
    return rows


def _print_findings(headers: list[str], rows: list[list[str]], fmt: str = "table") -> None:
    from provision.cli.output import terminal_width

    if fmt == "markdown":
        click.echo(findings_markdown(headers, rows), nl=False)
    else:
        click.echo(findings_table(headers, rows, terminal_width()), nl=False)


def findings_table(headers: list[str], rows: list[list[str]], width: int) -> str:
    """The findings as text no wider than ``width`` (0: unbounded, one line per finding), through
    the one table writer (provision/cli/output.py): columns whose title, evidence and fix wrap at
    spaces, else one block per finding. A word, a path, a PCI id or a GPU UUID is never split, and
    a `command` stays on one line, so it can be copied: one of a fix longer than the line is cut
    into the commands it chains (``a; b``, ``a && b``, ``a || b``), each whole (the evidence is
    what the host printed, shown as it is); only a word or a command longer than the line itself
    is wider than it, on a line of its own."""
    from provision.cli.output import table_lines

    if width > 0:
        room = max(1, width - LABEL_ROOM)
        rows = [[split_commands(v, room) if h == "fix" else v for h, v in zip(headers, r, strict=True)] for r in rows]
    whole = {i for i, h in enumerate(headers) if h not in WRAPPED}
    lines = table_lines(headers, rows, width=width if width > 0 else 10**9, title="provision doctor", whole=whole)
    return "\n".join(lines) + "\n"


def findings_markdown(headers: list[str], rows: list[list[str]]) -> str:
    from provision.cli.output import markdown_table

    return "## provision doctor\n\n" + markdown_table(headers, rows) + "\n"


_COMMAND = re.compile(r"`([^`\n]+)`")
_CHAIN = re.compile(r"\s*(;|&&|\|\|)\s+")


def split_commands(text: str, room: int) -> str:
    """``text`` with each `command` longer than ``room`` written as the commands it chains, each
    quoted on its own: `a; b && c` becomes `a`; `b` && `c` (an operator inside quotes is no break).
    The words and the operators between them are the same as in the finding's text (and its JSON)."""

    def split(match: re.Match) -> str:
        command = match[1]
        if len(match[0]) <= room:
            return match[0]
        parts, start, quote, at = [], 0, "", 0
        while at < len(command):
            char = command[at]
            if char == "\\" and quote != "'":  # an escaped character, no break
                at += 1
            elif quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif chain := _CHAIN.match(command, at):
                parts.append((command[start:at].strip(), chain[1]))
                start = at = chain.end()
                continue
            at += 1
        parts.append((command[start:].strip(), ""))
        if len(parts) == 1 or not all(part for part, _ in parts):
            return match[0]
        out = ""
        for part, operator in parts:
            out += f"`{part}`" + {"": "", ";": "; ", "&&": " && ", "||": " || "}[operator]
        return out

    return _COMMAND.sub(split, text)


def _emit_single(report, fmt: str) -> int:
    from provision.cli.output import dumps_json, echo_wrapped

    if fmt == "json":
        sys.stdout.write(dumps_json(report.to_dict()))
        return report.exit_code
    if report.findings:
        _print_findings(HEADERS, _rows(report.findings), fmt)
    c = report.counts()
    verdict = "unhealthy" if report.exit_code else "healthy"
    echo_wrapped(
        f"{verdict}: {c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s); "
        f"read {len(report.read)} source(s)"
    )
    return report.exit_code


def _emit_hosts(results, fmt: str, inventory: str) -> int:
    from provision.cli.output import dumps_json, echo_wrapped

    hosts, flat, code = [], [], 0
    for host, report, problem in results:
        if report is None:
            finding = {
                "id": "host-unreachable",
                "severity": "error",
                "title": "the host could not be read",
                "evidence": problem or "",
                "fix": _unreachable_fix(inventory, host),
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
        _print_findings(["host", *HEADERS], rows, fmt)
    for h in hosts:
        c = h["counts"]
        verdict = "unhealthy" if h["exit_code"] else "healthy"
        echo_wrapped(f"{h['host']}: {verdict}: {c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s)")
    return code
