"""`provision plan` and `provision matrix …`."""

from __future__ import annotations

import sys

import click

from provision.cli.common import load_matrix
from provision.cli.output import dumps_json, echo_wrapped, markdown_table, print_table
from provision.cli.plan_run import run_plan
from provision.matrix.listing import TOPICS

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
@click.option(
    "--gpu",
    metavar="GPU",
    help="GPU id: a100-pcie, h100-sxm, … (provision matrix gpus). Required unless --platform implies it.",
)
@click.option(
    "--platform",
    metavar="PLATFORM",
    help="The server or GPU baseboard: dgx-a100, hgx-h100-4gpu, r750xa, … (provision matrix platforms). "
    "It implies the GPU or checks --gpu against the GPUs it takes, decides Fabric Manager and NVLSM from its "
    "interconnect, and gives verify the server to check (GPU count, PCIe link, NVLink, topology, DMI).",
)
@click.option("--driver", metavar="BRANCH|RELEASE", help="Pin the driver branch (580) or release (580.95.05).")
@click.option("--cuda", metavar="X.Y[.Z]", help="Pin the CUDA version (12.4 or 12.4.1).")
@click.option("--cudnn", metavar="VERSION", help="Pin the cuDNN major (9), minor (9.1) or build (9.1.0.70).")
@click.option(
    "--framework",
    metavar="NAME[==VERSION]",
    help="Plan a framework build: pytorch==2.5.1, tensorflow==2.15.0; or an inference image without PyTorch: "
    "onnxruntime, tensorrt (provision matrix stacks; ==VERSION may be a prefix: tensorrt==10.6).",
)
@click.option(
    "--with",
    "with_",
    metavar="NAME[==VERSION]",
    multiple=True,
    help="Add a stack package to the framework (repeatable): onnxruntime, tensorrt, torch-tensorrt, deepspeed, "
    "megatron-core, transformer-engine (provision matrix stacks). Unpinned: the newest release that fits the "
    "framework build's CUDA and cuDNN, the GPU and the others.",
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
    "--image-os",
    metavar="OS",
    help="The images' OS, independent of the host's: an nvidia/cuda suffix (ubuntu22.04, ubi9, …) "
    "or a host OS id (its own images). Default: the host OS's own images.",
)
@click.option(
    "--host-only",
    is_flag=True,
    help="Plan the host alone (driver, kernel modules, Fabric Manager, Container Toolkit): no image part, "
    "never refused because of an image. With --cuda, the driver is one that runs those CUDA images.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown", "json", "yaml", "ansible"]),
    default="table",
    show_default=True,
    help="table: fits COLUMNS, else the terminal, else 100 columns; markdown: a Markdown table and the "
    "reasons; ansible: the provision_* variables, for ansible-playbook site.yml -e @vars.yml.",
)
@click.option(
    "--lock", type=click.Path(dir_okay=False, writable=True), help="Also write the plan (JSON) to this lock file."
)
@click.option(
    "--explain", is_flag=True, help="On a refusal, list every candidate tried and why (default: a summary per rule)."
)
@compat_option
@click.pass_context
def plan_cmd(
    ctx,
    *,
    os_id,
    gpu,
    platform,
    driver,
    cuda,
    cudnn,
    framework,
    with_,
    policy,
    mig,
    image_os,
    host_only,
    fmt,
    lock,
    explain,
    compat_dir,
):
    """Resolve driver, kernel modules, CUDA, cuDNN, framework and image for an OS and a GPU (or a
    platform, which implies its GPU).

    Every choice comes with its reason; an impossible combination is refused (exit 2) with a
    summary of the candidates tried per rule (--explain: each candidate) and the pin changes
    that would work.
    """
    # the body is run_plan() (provision/cli/plan_run.py), which `provision plan`'s fast path also
    # runs: an option added here goes there too (and into plan_run._VALUES to take the fast path)
    return run_plan(
        os_id=os_id,
        gpu=gpu,
        platform=platform,
        driver=driver,
        cuda=cuda,
        cudnn=cudnn,
        framework=framework,
        with_=tuple(with_),
        policy=policy,
        mig=mig,
        image_os=image_os,
        host_only=host_only,
        fmt=fmt,
        lock=lock,
        explain=explain,
        compat_dir=compat_dir or (ctx.obj or {}).get("compat_dir"),
    )


def listing_legend(topic: str, headers, rows, records) -> list[str]:
    """What a listing's markers mean, for the markers the listing shows."""
    lines = []
    if topic == "gpus" and any("members" in r for r in records):
        lines.append(
            "(group): one id for the GPUs named after its name (a plan refuses a group whose GPUs need different "
            "setups); its PCI ids are theirs"
        )
    elif topic == "drivers":
        from provision.plan.resolve import BRANCH_TYPES

        types = [t for t in BRANCH_TYPES if any(r["type"] == t for r in records)]
        if types:
            lines.append("type: " + ", ".join(f"{t} = {BRANCH_TYPES[t]}" for t in types))
        if any(r["eol"] is None and r["eol_listed"] for r in records):
            lines.append("EOL listed: NVIDIA's support page lists the branch as end of life, without a date")
        if any(r.get("eol_state") == "unknown" for r in records):
            lines.append("EOL unknown: NVIDIA publishes no end of life for the branch (a plan that takes it says so)")
    elif topic == "frameworks":
        if any(r["compute_capabilities"] is None and r["ptx"] is None for r in records):
            lines.append("SMs -: the build's compiled GPU architectures are not published")
        if any(r["ptx"] for r in records):
            lines.append("+PTX X.Y: the build also carries PTX for compute capability X.Y, JIT-compiled on newer GPUs")
    elif topic == "stacks":
        if any(r["cuda_from"] == "documented" for r in records):
            lines.append(
                "CUDA N*: no file of the build declares its CUDA; NVIDIA documents it for the build's flavour "
                "(TensorRT 10.15 on)"
            )
        if any(r["cuda_major"] is None for r in records):
            lines.append(
                "CUDA torch's: no CUDA of its own; the package follows the framework build's (DeepSpeed compiles "
                "its ops with that CUDA's nvcc)"
            )
        if any(r["pin"] for r in records):
            lines.append("version X (Y): the release's own files are incomplete; its post release Y is installed")
        if any(r["library_index"] for r in records):
            lines.append(
                "TensorRT: its -libs sdist downloads the libraries from NVIDIA's index (library_index in --format json)"
            )
    elif topic == "images":
        from provision.matrix.listing import TOOLKIT_MARK

        if any(r["toolkit"] for r in records):
            lines.append(
                f"toolkit X{TOOLKIT_MARK}: the image set is numbered past the CUDA toolkit release it installs "
                "(X, with a newer cuBLAS patch release); plans pin X and use these tags"
            )
        if any(r["platforms"] == ["linux/amd64"] for r in records):
            lines.append("platforms: those confirmed for every tag of the set; linux/amd64 alone where arm64 is not")
        if any(r.get("status") for r in records):
            lines.append(
                "status: supported; superseded by X (NVIDIA no longer updates it: use X); end of life DATE "
                "(NVIDIA deletes the tags six months after)"
            )
        col = headers.index("cuDNN")
        if any(str(row[col]).startswith("(not on") or "(not on " in str(row[col]) for row in rows):
            lines.append("cuDNN V (not on OS): the release has cudnn tags, but not for that OS")
        if any(str(row[col]).startswith("?") for row in rows):
            lines.append("cuDNN ?: the tags have cuDNN flavours, but the cuDNN build in them is not catalogued")
        if any(row[col] == "-" for row in rows):
            lines.append("cuDNN -: no cuDNN flavours for this CUDA release")
    return lines


TABLE_HELP = (
    "table: fits COLUMNS, else the terminal, else 100 columns (cells wrap at spaces; columns left out to fit are "
    "named under it); markdown and json: every column, unwrapped."
)


@click.group("matrix")
def matrix_group():
    """List the compatibility catalogue, or check it end to end."""


def _listing_command(topic: str) -> click.Command:
    @click.command(topic, help=f"List the catalogued {topic}.")
    @click.option(
        "--format",
        "fmt",
        type=click.Choice(["table", "json", "markdown"]),
        default="table",
        show_default=True,
        help=TABLE_HELP,
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
            optional = [result.headers.index(h) for h in result.optional]
            print_table(result.headers, result.rows, title=result.title, optional=optional, keyed=True)
            for line in legend:
                echo_wrapped(line)
        return 0

    return command


for _topic in TOPICS:
    matrix_group.add_command(_listing_command(_topic))


@matrix_group.command("check")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "markdown"]),
    default="table",
    show_default=True,
    help=TABLE_HELP,
)
@compat_option
@click.pass_context
def check_cmd(ctx, *, fmt, compat_dir):
    """Check data invariants and resolve every catalogued request.

    Resolves each (os, gpu), (os, gpu, cuda) and (os, gpu, framework version) request, prints
    how many resolve and the refusals by rule. Exit 1 when an invariant is broken (dangling
    id, unsorted versions, missing minimum driver or source) or an (os, gpu) pair neither
    resolves nor is declared in unsupported.yaml. Data files that passed their schema checks
    byte for byte before come from the validated-data cache (PROVISION_NO_CACHE=1: checked anew).
    """
    import gc

    from provision.matrix.cache import cached_raw, store_raw
    from provision.matrix.loader import build, read_raw
    from provision.plan.check import check
    from provision.resources import compat_dir as find

    directory = find(compat_dir or (ctx.obj or {}).get("compat_dir"))
    # documents that passed the schema checks byte for byte before (the validated-data cache), else read and checked now
    raw = cached_raw(directory)
    fresh = raw is None
    if fresh:
        raw = read_raw(directory)
    matrix = build(raw)
    gc.freeze()  # the catalogue and the documents outlive the check: collections need not scan them (~10%)
    try:
        result = check(matrix, raw)
    finally:
        gc.unfreeze()
    if fresh and not result.problems:
        store_raw(directory, raw)
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
            echo_wrapped(f"problem: {p}")
        for o, g, r in result.unresolved_pairs:
            echo_wrapped(f"unresolved: {g} on {o} ({r}); resolve it or declare it in unsupported.yaml")
        click.echo(f"{'ok' if result.ok else 'FAILED'} in {result.seconds:.2f}s")
    return 0 if result.ok else 1
