"""`provision inventory scan`: what each host of an inventory runs now (provision/fleet/scan.py)."""

from __future__ import annotations

import os
import sys

import click

from provision.cli.common import host_pool_options, load_matrix
from provision.errors import InputError


@click.command("scan")
@click.option("-i", "--inventory", required=True, type=click.Path(), help="Ansible inventory (file or directory).")
@click.option("--limit", metavar="HOSTS", help="Comma-separated hosts or groups to scan.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    help="Write one JSON document per host here (HOST.json; made if absent). Default: print only.",
)
@host_pool_options(
    forks_help="Hosts scanned at the same time (as Ansible's forks).",
    timeout_help="Deadline per host. Each command on it gets at most a third, under timeout --kill-after; "
    "a host past it is reported with the facts it gave by then.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown", "json"]),
    default="table",
    show_default=True,
    help="table: fits COLUMNS, else the terminal, else 100 columns (cells wrap at spaces, else one block per "
    "host); markdown: the same rows, unwrapped; json: each host's whole scan document.",
)
@click.pass_context
def scan_cmd(ctx, *, inventory, limit, out_dir, forks, host_timeout, fmt):
    """Read what each host runs now: driver release, branch and kernel-module flavour (open or
    proprietary, signed, loaded), GPUs, CUDA user-space packages, Container Toolkit, Docker,
    containerd, Fabric Manager, held packages, kernel and OS. Changes nothing on the hosts.

    \b
    provision inventory scan -i hosts.yml
    provision inventory scan -i hosts.yml --limit gpu7 --out scans/
    provision diff scans/gpu7.json plan.lock.json

    Each host is one SSH round trip of read-only commands, --forks hosts at a time, each under
    --host-timeout: a command that hangs (an nvidia-smi stuck on a GPU that fell off the bus) is
    stopped with its process group and named, and an unreachable host comes back as such, with
    ssh's reason. GPUs and the OS are mapped to the catalogue's ids where one matches.

    What a host prints is data: read up to 4 MiB, every value held to the pattern of the scan
    schema (provision/plan/schema/scan.schema.json); a value that does not match is null, and a
    batch whose output forges the run's random marker is refused whole.

    Exit status: 0 every host was scanned, 1 a host could not be (unreachable, a command stopped,
    the deadline), 2 bad input.
    """
    from provision.fleet.inventory import load_inventory, select_hosts
    from provision.fleet.scan import Batch, Target, held_to, scan
    from provision.hostpool import inventory_connection
    from provision.verify import batch

    out_dir = _out_dir(out_dir)
    inv = load_inventory(inventory)
    names = select_hosts(inv, limit)
    path = os.path.abspath(inventory)
    targets = []
    for name in names:  # every host's connection checked before any is contacted
        if held_to("name", name) is None:
            raise InputError(
                f"inventory host {name!r} cannot name a scan (letters, digits, '.', '_', '-')",
                hint="name the host and give its address in ansible_host",
            )
        targets.append(Target(name, inventory_connection(name, inv.hosts[name], inventory=path)))
    matrix = load_matrix(ctx)
    docs = scan(
        targets,
        matrix,
        Batch(batch.new_token, batch.script, batch.parse),
        forks=forks,
        host_timeout=host_timeout,
    )
    if out_dir is not None:
        _write(out_dir, docs)
    if fmt == "json":
        from provision.cli.output import dumps_json

        sys.stdout.write(dumps_json(docs))
    else:
        _print_table(docs, fmt)
    return 1 if any(doc["error"] or not doc["reachable"] for doc in docs) else 0


def _out_dir(path: str | None) -> str | None:
    """--out, made when absent, before any host is contacted."""
    if path is None:
        return None
    if os.path.lexists(path) and not os.path.isdir(path):
        raise InputError(f"--out {path} is not a directory", hint="give --out a directory (it is made if absent)")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot make --out {path}: {exc.strerror or exc}", hint="choose a writable --out") from None
    return path


def _write(out_dir: str, docs: list[dict]) -> None:
    from provision.cli.output import dumps_json
    from provision.documents import write_text

    for doc in docs:  # host names are held to the schema's name pattern: no separator, no leading dot
        target = os.path.join(out_dir, f"{doc['host']}.json")
        try:
            write_text(target, dumps_json(doc))  # a link planted at the path is replaced, never followed
        except OSError as exc:
            raise InputError(f"cannot write {target}: {exc.strerror or exc}", hint="choose a writable --out") from None
    click.echo(f"wrote {len(docs)} scan(s) to {out_dir}", err=True)


def table_rows(docs: list[dict]) -> list[tuple]:
    """host, reachable, OS, driver (branch, flavour), GPUs, toolkit, docker, held count."""
    rows = []
    for doc in docs:
        os_doc, driver = doc["os"], doc["driver"]
        shown_os = (os_doc["catalogue_id"] or f"{os_doc['id']} {os_doc['version_id']}") if os_doc else None
        shown_driver = None
        if driver:
            shown_driver = f"{driver['version']} (R{driver['branch']}, {driver['kernel_module'] or 'flavour unknown'})"
        counts: dict[str, int] = {}
        for gpu in doc["gpus"]:
            key = gpu["catalogue_id"] or gpu["name"]
            counts[key] = counts.get(key, 0) + 1
        gpus = ", ".join(f"{n}x {key}" for key, n in counts.items()) or None
        rows.append(
            (
                doc["host"],
                doc["reachable"],
                shown_os,
                shown_driver,
                gpus,
                doc["container_toolkit"],
                doc["docker"],
                len(doc["held"]) if doc["reachable"] else None,
            )
        )
    return rows


HEADERS = ("host", "reachable", "OS", "driver", "GPUs", "toolkit", "docker", "held")


def _print_table(docs: list[dict], fmt: str = "table") -> None:
    from provision.cli.output import echo_wrapped, markdown_table, print_table

    if fmt == "markdown":
        click.echo("## provision inventory scan\n\n" + markdown_table(HEADERS, table_rows(docs)))
    else:
        print_table(HEADERS, table_rows(docs), title="provision inventory scan", whole={0})
    for doc in docs:
        if doc["error"]:
            echo_wrapped(f"{doc['host']}: {doc['error']}", hanging="  ")
    scanned = sum(1 for doc in docs if doc["reachable"] and not doc["error"])
    echo_wrapped(f"{scanned} of {len(docs)} host(s) scanned")
