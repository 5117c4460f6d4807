"""`provision runs-on` and `provision check`: what runs on a driver, and whether a fleet's images
run on its hosts; both ask provision.matrix.runs_on, the one rule."""

from __future__ import annotations

import sys

import click

from provision.cli.common import load_matrix
from provision.cli.output import dumps_json, echo_wrapped, markdown_table, print_table

FORMATS = click.Choice(["table", "json", "markdown"])
TABLE_HELP = "table: fits COLUMNS, else the terminal, else 100 columns (cells wrap at spaces); markdown: unwrapped."
KIND_TITLES = {
    "cuda": "CUDA releases",
    "image": "nvidia/cuda image sets",
    "framework": "framework builds",
}


@click.command("runs-on")
@click.option(
    "--driver", required=True, metavar="RELEASE|BRANCH", help="The driver the hosts run: 535.183.01 (or 535)."
)
@click.option(
    "--gpu", metavar="GPU", help="The hosts' GPU: checks its SM and forward compatibility (data-center GPUs)."
)
@click.option(
    "--os",
    "os_id",
    metavar="OS",
    help="Only image sets published for this OS's images (a host OS id or an nvidia/cuda suffix).",
)
@click.option(
    "--only",
    type=click.Choice(["runs", "all"]),
    default="runs",
    show_default=True,
    help="runs: what runs on the driver; all: also what does not, with the reason.",
)
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True, help=TABLE_HELP)
@click.pass_context
def runs_on_cmd(ctx, *, driver, gpu, os_id, only, fmt):
    """List the CUDA releases, nvidia/cuda image sets and framework builds a driver runs.

    Each with its mode: native (the driver meets the CUDA release's minimum, release notes Table 3),
    minor-version (same CUDA major, driver at or above the Table 2 floor: no PTX JIT of newer
    PTX), forward-compat (the image's cuda-compat package on a data-center GPU and a supported
    branch). With --gpu, the GPU's SM must be in the image. Exit 0; 2 for bad input.
    """
    from provision.plan.resolve import _published_image_oses, image_os_of
    from provision.plan.runs import driver_release, runs_on

    matrix = load_matrix(ctx)
    release, note = driver_release(matrix, driver)
    gpu_row = matrix.gpu_members(gpu)[1][0] if gpu else None
    image_os = None
    if os_id:
        published = _published_image_oses(matrix)
        image_os = os_id if os_id in published else image_os_of(matrix, matrix.os(os_id), None)
    result = runs_on(matrix, release, gpu_row, image_os)
    rows = [r for r in result.rows if only == "all" or r.mode != "no"]
    if fmt == "json":
        doc = {
            "driver": str(release),
            "driver_note": note,
            "gpu": gpu_row.id if gpu_row else None,
            "image_os": image_os,
            "rows": [r.to_dict() for r in rows],
        }
        sys.stdout.write(dumps_json(doc))
        return 0
    what = f"driver {release}" + (f" on {gpu_row.id}" if gpu_row else "") + (f", {image_os} images" if image_os else "")
    if note:
        echo_wrapped(f"({note})")
    for kind, title in KIND_TITLES.items():
        section = [r for r in rows if r.kind == kind]
        if not section:
            continue
        headers = ("name", "mode", "why") if kind != "image" else ("name", "mode", "status", "why")
        table = [
            (r.name, r.mode, r.verdict.short) if kind != "image" else (r.name, r.mode, r.status, r.verdict.short)
            for r in section
        ]
        if fmt == "markdown":
            sys.stdout.write(f"### {title} for {what}\n\n" + markdown_table(headers, table) + "\n")
        else:
            print_table(headers, table, title=f"{title} for {what}", keyed=True)
            click.echo()
    counts = {
        mode: sum(1 for r in result.rows if r.mode == mode)
        for mode in ("native", "minor-version", "forward-compat", "no")
    }
    echo_wrapped(
        "legend: native = the driver meets the CUDA release's minimum (Table 3); minor-version = same CUDA major, "
        "driver at or above the Table 2 floor (no PTX JIT of newer PTX); forward-compat = the image's cuda-compat "
        "package, data-center GPUs and supported branches only"
    )
    echo_wrapped(", ".join(f"{n} {mode}" for mode, n in counts.items()))
    if gpu_row is None:
        echo_wrapped("without --gpu, the GPU's SM and forward compatibility (data-center GPUs only) are not checked")
    return 0


@click.command("check")
@click.option(
    "--fleet",
    "fleet_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="Fleet file: host groups and their plans (the images: key of a group assigns it images).",
)
@click.option(
    "--images",
    "images",
    required=True,
    multiple=True,
    metavar="DIR|LOCK",
    help="Plan locks or image.lock.json files, or folders of them (repeat the option for more).",
)
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True, help=TABLE_HELP)
@click.pass_context
def check_cmd(ctx, *, fleet_file, images, fmt):
    """Check that every image assigned to a host group runs on that group's driver and GPU.

    Each host group of the fleet file (its driver and GPU, as planned) against each image (its CUDA
    release and the SMs it carries): the mode in which it runs, or why it cannot. A group lists
    its images with images: [LOCK, ...] in the fleet file; a group without one runs every image
    given. Exit 0 when every assigned image runs on its group, 1 otherwise, 2 for bad input.
    """
    from provision.cli.common import matrix_loader
    from provision.fleet.apply import load_plans
    from provision.fleet.inventory import load_fleet
    from provision.plan.runs import check, checked_json, read_images

    plans, _ = load_plans(None, fleet_file, matrix_loader(ctx))
    assigned = {fg.group: fg.images for fg in load_fleet(fleet_file) if fg.images}
    loaded = read_images([*images, *(p for paths in assigned.values() for p in paths)])
    result = check(load_matrix(ctx), plans, loaded, assigned)
    if fmt == "json":
        sys.stdout.write(checked_json(result, plans))
        return 0 if result.ok else 1
    headers = ("group", "driver", "image", "mode", "why")
    rows = [
        (
            c.group,
            f"{plans[c.group].driver.version} ({plans[c.group].gpu.id})",
            c.image if c.assigned else f"{c.image} (not assigned)",
            c.verdict.mode,
            c.verdict.short,
        )
        for c in result.cells
    ]
    if fmt == "markdown":
        sys.stdout.write(markdown_table(headers, rows))
    else:
        print_table(headers, rows, title=f"provision check: {len(result.groups)} groups x {len(result.images)} images")
    failing = [c for c in result.cells if c.assigned and not c.verdict.runs]
    for cell in failing:
        echo_wrapped(f"cannot run: {cell.image} on {cell.group}: {cell.verdict.reason}", hanging="  ")
    assigned_count = sum(1 for c in result.cells if c.assigned)
    echo_wrapped(
        f"{assigned_count - len(failing)} of {assigned_count} assigned pairs run" + (", exit 1" if failing else "")
    )
    return 0 if result.ok else 1


@click.command("diff")
@click.argument("old", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown", "json"]),
    default="table",
    show_default=True,
    help="table: a line per change, wrapped at spaces to COLUMNS, else the terminal, else 100 columns; markdown: a "
    "table of the changes.",
)
def diff_cmd(*, old, new, fmt):
    """Name what changes from OLD to NEW: two plan locks, or a host's scan and its plan.

    Driver branch or release (reboot needed), kernel-module flavour switch, Fabric Manager and
    NVLink Subnet Manager, Container Toolkit, MIG layout, and the image part (image OS, CUDA,
    cuDNN, framework, base image). Exit 0 when nothing differs, 1 when something does (as diff
    does), 2 for bad input. A scan comes from provision inventory scan --out DIR.
    """
    from provision.plan.diff import changes, changes_json, read_state, summary

    before, after = read_state(old), read_state(new)
    found = changes(before, after)
    if fmt == "json":
        sys.stdout.write(changes_json(before, after, found))
    elif fmt == "markdown" and found:
        rows = [(c.key, c.old, c.new, c.note) for c in found]
        sys.stdout.write(f"### {before.name} -> {after.name}\n\n" + markdown_table(DIFF_HEADERS, rows))
        if any(c.reboot for c in found):
            sys.stdout.write("\n" + summary(before, after, found)[-1] + "\n")
    else:
        for line in summary(before, after, found):
            echo_wrapped(line, hanging="  ")
    return 1 if found else 0


DIFF_HEADERS = ("change", "from", "to", "what it means")
