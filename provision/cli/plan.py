"""`provision plan` and `provision matrix …`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from provision.cli.common import check_output, load_matrix, resolve_or_refuse
from provision.cli.output import dumps_json, dumps_yaml, markdown_table, print_table
from provision.matrix.listing import TOPICS
from provision.plan.model import PlanRequest

if TYPE_CHECKING:
    from provision.plan.model import Plan

compat_option = click.option(
    "--compat-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Compatibility data to use instead of the built-in compat/.",
)


@click.command("plan")
@click.option(
    "--os", "os_id", required=True, metavar="OS", help="Host OS id: ubuntu22.04, rocky9, … (provision matrix os)."
)
@click.option("--gpu", required=True, metavar="GPU", help="GPU id: a100-pcie, h100-sxm, … (provision matrix gpus).")
@click.option("--driver", metavar="BRANCH|RELEASE", help="Pin the driver branch (580) or release (580.95.05).")
@click.option("--cuda", metavar="X.Y[.Z]", help="Pin the CUDA version (12.4 or 12.4.1).")
@click.option("--cudnn", metavar="VERSION", help="Pin the cuDNN major (9), minor (9.1) or build (9.1.0.70).")
@click.option(
    "--framework", metavar="NAME[==VERSION]", help="Plan a framework build: pytorch==2.5.1, tensorflow==2.15.0."
)
@click.option(
    "--policy",
    type=click.Choice(["lts", "latest"]),
    default="lts",
    show_default=True,
    help="lts: long-term support and production branches; latest: the newest branch.",
)
@click.option(
    "--mig",
    metavar="LAYOUT",
    help="Partition the GPUs: a MIG layout such as 3g.40gb,2g.20gb,2x1g.10gb "
    "(checked as provision mig plan does; the mig role applies it).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "yaml", "ansible"]),
    default="table",
    show_default=True,
    help="ansible: the provision_* variables, for ansible-playbook site.yml -e @vars.yml.",
)
@click.option(
    "--lock", type=click.Path(dir_okay=False, writable=True), help="Also write the plan (JSON) to this lock file."
)
@click.option(
    "--explain", is_flag=True, help="On a refusal, list every candidate tried and why (default: a summary per rule)."
)
@compat_option
@click.pass_context
def plan_cmd(ctx, *, os_id, gpu, driver, cuda, cudnn, framework, policy, mig, fmt, lock, explain, compat_dir):
    """Resolve driver, kernel modules, CUDA, cuDNN, framework and image for an OS and a GPU.

    Every choice comes with its reason; an impossible combination is refused (exit 2) with a
    summary of the candidates tried per rule (--explain: each candidate) and the pin changes
    that would work.
    """
    from provision.plan.model import write_plan

    check_output(lock, "--lock")
    matrix = load_matrix(ctx, compat_dir)
    request = PlanRequest(
        os=os_id, gpu=gpu, driver=driver, cuda=cuda, cudnn=cudnn, framework=framework, policy=policy, mig=mig
    )
    p = resolve_or_refuse(matrix, request, explain=explain)
    if lock is not None:
        write_plan(p, lock)
    if fmt == "json":
        sys.stdout.write(dumps_json(p.to_dict()))
    elif fmt == "yaml":
        sys.stdout.write(dumps_yaml(p.to_dict()))
    elif fmt == "ansible":
        from provision.fleet.extravars import dump_unsafe_yaml, to_extravars

        sys.stdout.write(dumps_yaml_unsafe_note() + dump_unsafe_yaml(to_extravars(p)))
    else:
        print_table(("component", "choice"), plan_rows(p), title=f"Plan: {p.gpu.id} on {p.os.id}")
        for line in plan_legend(p):
            click.echo(line)
        click.echo("\nwhy:")
        for r in p.reasons:
            click.echo(f"  [{r.component}] {r.text}")
    if lock:
        click.echo(f"wrote {lock}", err=True)
    return 0


def dumps_yaml_unsafe_note() -> str:
    return "# provision plan: variables for ansible-playbook -e @FILE; !unsafe: Ansible never templates them\n"


def plan_rows(p: Plan) -> list[tuple[str, str]]:
    """(component, choice) rows of the human summary."""
    rows = [
        ("os", f"{p.os.name} ({p.os.id}, {p.os.pkg_manager}, repo {p.os.nvidia_repo})"),
        ("gpu", f"{p.gpu.name} ({p.gpu.id}, sm_{p.gpu.compute_capability.replace('.', '')}, {p.gpu.architecture})"),
        (
            "driver",
            f"R{p.driver.branch} {p.driver.version} ({p.driver.branch_type}), {p.driver.kernel_module} kernel modules",
        ),
        (
            "packages",
            ", ".join(f"{pkg.name} {pkg.version}" for pkg in p.driver.packages)
            + (f" [stream {p.driver.module_stream}]" if p.driver.module_stream else ""),
        ),
        (
            "cuda",
            f"{p.cuda.version} ({p.cuda.label})"
            + (" via minor-version compatibility" if p.cuda.compatibility == "minor-version" else ""),
        ),
        ("cudnn", f"{p.cudnn.version} (from the {p.cudnn.origin})" if p.cudnn else "-"),
        (
            "framework",
            f"{p.framework.requirement} [{p.framework.variant}]"
            + (f" from {p.framework.index_url}" if p.framework.index_url else "")
            if p.framework
            else "-",
        ),
        (
            "fabric manager",
            f"{p.fabric_manager.package} {p.fabric_manager.version}" if p.fabric_manager else "not needed",
        ),
        ("container toolkit", p.container_toolkit.version),
        ("base image", p.base_image),
        ("driver floor", p.driver_floor),
        ("digest", p.digest()),
    ]
    return rows


def plan_legend(p: Plan) -> list[str]:
    """What the plan table's abbreviations mean (only those it shows)."""
    from provision.plan.resolve import BRANCH_TYPES

    return [f"({p.driver.branch_type}) = {BRANCH_TYPES.get(p.driver.branch_type, p.driver.branch_type)}"]


def listing_legend(topic: str, headers, rows, records) -> list[str]:
    """What a listing's markers mean, for the markers the listing shows."""
    lines = []
    if topic == "gpus" and any("members" in r for r in records):
        lines.append(
            "(group): one id for the GPUs in the last column (a plan refuses a group whose GPUs need different setups)"
        )
    elif topic == "drivers":
        from provision.plan.resolve import BRANCH_TYPES

        types = [t for t in BRANCH_TYPES if any(r["type"] == t for r in records)]
        if types:
            lines.append("type: " + ", ".join(f"{t} = {BRANCH_TYPES[t]}" for t in types))
        if any(r["eol"] is None and r["eol_listed"] for r in records):
            lines.append("EOL listed: NVIDIA's support page lists the branch as end of life, without a date")
    elif topic == "frameworks":
        if any(r["compute_capabilities"] is None and r["ptx"] is None for r in records):
            lines.append("SMs -: the build's compiled GPU architectures are not published")
        if any(r["ptx"] for r in records):
            lines.append("+PTX X.Y: the build also carries PTX for compute capability X.Y, JIT-compiled on newer GPUs")
    elif topic == "images":
        col = headers.index("cuDNN")
        if any(row[col] == "?" for row in rows):
            lines.append("cuDNN ?: the tags have cuDNN flavours, but the cuDNN build in them is not catalogued")
        if any(row[col] == "-" for row in rows):
            lines.append("cuDNN -: no cuDNN flavours for this CUDA release")
    return lines


@click.group("matrix")
def matrix_group():
    """List the compatibility catalogue, or check it end to end."""


def _listing_command(topic: str) -> click.Command:
    @click.command(topic, help=f"List the catalogued {topic}.")
    @click.option(
        "--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True
    )
    @compat_option
    @click.pass_context
    def command(ctx, fmt, compat_dir):
        from provision.matrix.listing import listing

        result = listing(load_matrix(ctx, compat_dir), topic)
        legend = listing_legend(topic, result.headers, result.rows, result.records)
        if fmt == "json":
            sys.stdout.write(dumps_json(result.records))
        elif fmt == "markdown":
            sys.stdout.write(f"### {result.title}\n\n" + markdown_table(result.headers, result.rows))
            sys.stdout.write("".join(f"\n{line}\n" for line in legend))
        else:
            print_table(result.headers, result.rows, title=result.title)
            for line in legend:
                click.echo(line)
        return 0

    return command


for _topic in TOPICS:
    matrix_group.add_command(_listing_command(_topic))


@matrix_group.command("check")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@compat_option
@click.pass_context
def check_cmd(ctx, *, fmt, compat_dir):
    """Check data invariants and resolve every catalogued request.

    Resolves each (os, gpu), (os, gpu, cuda) and (os, gpu, framework version) request, prints
    how many resolve and the refusals by rule. Exit 1 when an invariant is broken (dangling
    id, unsorted versions, missing minimum driver or source) or an (os, gpu) pair neither
    resolves nor is declared in unsupported.yaml.
    """
    from provision.matrix.loader import build, read_raw
    from provision.plan.check import check
    from provision.resources import compat_dir as find

    directory = find(compat_dir or (ctx.obj or {}).get("compat_dir"))
    raw = read_raw(directory)
    result = check(build(raw), raw)
    doc = {
        "ok": result.ok,
        "seconds": round(result.seconds, 3),
        "requests": result.groups,
        "refusals_by_rule": dict(result.refusals.most_common()),
        "problems": [str(p) for p in result.problems],
        "unresolved_pairs": [{"os": o, "gpu": g, "reason": r} for o, g, r in result.unresolved_pairs],
    }
    if fmt == "json":
        sys.stdout.write(dumps_json(doc))
    else:
        rows = [(k, v["resolved"], v["refused"], v["not applicable"]) for k, v in result.groups.items()]
        rules = [(k, v) for k, v in result.refusals.most_common()]
        if fmt == "markdown":
            sys.stdout.write(markdown_table(("request", "resolved", "refused", "not applicable"), rows) + "\n")
            sys.stdout.write(markdown_table(("rule that eliminated candidates", "refused requests"), rules))
        else:
            print_table(("request", "resolved", "refused", "not applicable"), rows, title="provision matrix check")
            print_table(("rule that eliminated candidates", "refused requests"), rules)
        for p in result.problems:
            click.echo(f"problem: {p}")
        for o, g, r in result.unresolved_pairs:
            click.echo(f"unresolved: {g} on {o} ({r}); resolve it or declare it in unsupported.yaml")
        click.echo(f"{'ok' if result.ok else 'FAILED'} in {result.seconds:.2f}s")
    return 0 if result.ok else 1
