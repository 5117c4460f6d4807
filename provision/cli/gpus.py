"""`provision gpus`: the catalogued GPUs ranked per workload from their specs."""

from __future__ import annotations

import sys

import click

from provision.cli.common import check_output, load_matrix, write_output
from provision.cli.output import dumps_json, fit_table, markdown_table, terminal_width, wrap_text
from provision.errors import InputError
from provision.tiers import (
    DEFAULT_WORKLOAD,
    NODE_HEADERS,
    WORKLOADS,
    legend,
    node_cells,
    node_figures,
    node_legend,
    platform_gpus,
    platform_summary,
    rank,
    render_svg,
    table_rows,
)
from provision.tiers import explain as explain_text

FORMATS = ["table", "json", "markdown", "svg"]


@click.command("gpus")
@click.option(
    "--rank",
    "workload_id",
    type=click.Choice(list(WORKLOADS)),
    default=DEFAULT_WORKLOAD,
    show_default=True,
    help="The workload to rank for.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="svg: a horizontal bar chart, one bar per GPU.",
)
@click.option(
    "--explain", is_flag=True, help="Show the workload's scoring formula and terms (on stderr for json and svg)."
)
@click.option(
    "--gpu",
    "gpu_ids",
    metavar="GPU",
    multiple=True,
    help="Only these GPUs (ids, aliases or groups such as a100-80gb); repeatable.",
)
@click.option(
    "--platform",
    "platform_id",
    metavar="PLATFORM",
    help="Only the GPUs this server or baseboard takes (provision matrix platforms), with per-node memory "
    "and NVLink for its GPU count; with --gpu, each must be one it takes.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True),
    help="Write the output to this file instead of stdout (e.g. the SVG chart).",
)
@click.option(
    "--compat-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Compatibility data to use instead of the built-in compat/.",
)
@click.pass_context
def gpus_cmd(ctx, *, workload_id, fmt, explain, gpu_ids, platform_id, out, compat_dir):
    """Rank the catalogued GPUs for a workload from their specs: a tier list.

    Scores are weighted geometric means of dense tensor TFLOPS (BF16/FP16, FP8), memory,
    memory bandwidth, NVLink, TDP (per watt) and MIG from compat/gpus.yaml, normalised to the
    best catalogued GPU (100). Columns computed from those specs (the training blend of BF16 and
    FP8 TFLOPS, GPU-to-GPU, per-watt figures, MIG instances) are named as such under the table.
    --explain shows the formula for the workload.

    --platform ranks the GPUs a server or baseboard takes (compat/platforms.yaml: a DGX or HGX
    board the GPUs it lists, a server any GPU of its form factor), names its GPU count and
    interconnect in the title, and adds per-node memory and NVLink: the GPU's figure times the
    platform's count. Scores stay the GPU's own.
    """
    check_output(out, "--out")
    matrix = load_matrix(ctx, compat_dir)
    platform = matrix.platform(platform_id) if platform_id is not None else None  # UnknownId: did you mean
    ranked = rank(matrix, workload_id, _selected(matrix, gpu_ids, platform))
    wl = WORKLOADS[workload_id]
    title = f"GPU tiers: {wl.title}"
    headers, rows = table_rows(ranked)
    width = terminal_width()
    notes = explain_text(workload_id, 92 if fmt == "markdown" else width) if explain else ""
    key = legend(workload_id)
    records = [r.to_dict() for r in ranked]
    if platform is not None:
        title += f" on {platform_summary(platform)}"
        headers, key = _add_node_columns(platform, ranked, headers=headers, rows=rows, records=records, key=key)

    if fmt == "json":
        text = dumps_json(records)
    elif fmt == "svg":
        text = render_svg(ranked, title)
    elif fmt == "markdown":
        text = f"### {title}\n\n"
        if explain:
            text += "```text\n" + notes + "```\n\n"
        else:
            text += f"`{wl.formula}` (see `provision gpus --rank {wl.id} --explain`)\n\n"
        text += markdown_table(headers, rows) + "".join(f"\n{line}\n" for line in key)
    else:  # a table: fits COLUMNS, else the terminal, else 100 (a file written with --out too)
        table = fit_table(headers, rows, width=width, title=title, right={0, 4}, optional=[headers.index("name")])
        text = (notes + "\n" if notes else "") + table + "\n"
        text += "".join(line + "\n" for k in key for line in wrap_text(k, width))

    if notes and fmt in ("json", "svg"):
        click.echo(notes, err=True, nl=False)
    if out:
        write_output(out, text, "--out")
    else:
        sys.stdout.write(text)
    return 0


def _selected(matrix, gpu_ids, platform) -> list[str] | None:
    """The GPU ids to rank: --gpu's (each one the platform takes), else the platform's, else all (None)."""
    if not gpu_ids:
        return platform_gpus(matrix, platform) if platform is not None else None
    selected: list[str] = []
    for ident in gpu_ids:
        _, members = matrix.gpu_members(ident)  # UnknownId (exit 2, with a hint) if unknown
        if platform is not None:
            from provision.plan.resolve import platform_refusal

            refused = platform_refusal(matrix, platform, members)
            if refused is not None:  # names the platform's form factor and the GPUs it takes
                raise InputError(refused[0], hint=refused[1])
        selected += [g.id for g in members if g.id not in selected]
    return selected


def _add_node_columns(platform, ranked, *, headers, rows, records, key) -> tuple[list[str], list[str]]:
    """The per-node columns (rows and records gain them in place): node memory where the platform
    has a GPU count, node NVLink where its board NVLinks every GPU; the headers and legend with them."""
    figures = [node_figures(platform, r.gpu) for r in ranked]
    shown = [n for n, _ in enumerate(NODE_HEADERS) if any(node_cells(f)[n] != "-" for f in figures)]
    for row, record, f in zip(rows, records, figures, strict=True):
        cells = node_cells(f)
        row.extend(cells[n] for n in shown)
        record["platform"] = {"id": platform.id, **f.to_dict()}
    return [*headers, *(NODE_HEADERS[n] for n in shown)], [*key, node_legend(platform)]
