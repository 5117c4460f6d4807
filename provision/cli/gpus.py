"""`provision gpus`: the catalogued GPUs ranked per workload from their specs."""

from __future__ import annotations

import sys

import click

from provision.cli.common import check_output, load_matrix, write_output
from provision.cli.output import dumps_json, fit_table, markdown_table, terminal_width, wrap_text
from provision.tiers import DEFAULT_WORKLOAD, WORKLOADS, legend, rank, render_svg, table_rows
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
def gpus_cmd(ctx, *, workload_id, fmt, explain, gpu_ids, out, compat_dir):
    """Rank the catalogued GPUs for a workload from their specs: a tier list.

    Scores are weighted geometric means of dense tensor TFLOPS (BF16/FP16, FP8), memory,
    memory bandwidth, NVLink, TDP (per watt) and MIG from compat/gpus.yaml, normalised to the
    best catalogued GPU (100). Columns computed from those specs (the training blend of BF16 and
    FP8 TFLOPS, GPU-to-GPU, per-watt figures, MIG instances) are named as such under the table.
    --explain shows the formula for the workload.
    """
    check_output(out, "--out")
    matrix = load_matrix(ctx, compat_dir)
    selected = None
    if gpu_ids:
        selected = []
        for ident in gpu_ids:
            _, members = matrix.gpu_members(ident)  # UnknownId (exit 2, with a hint) if unknown
            selected += [g.id for g in members if g.id not in selected]
    ranked = rank(matrix, workload_id, selected)
    wl = WORKLOADS[workload_id]
    title = f"GPU tiers: {wl.title}"
    headers, rows = table_rows(ranked)
    width = terminal_width()
    notes = explain_text(workload_id, 92 if fmt == "markdown" else width) if explain else ""
    key = legend(workload_id)

    if fmt == "json":
        text = dumps_json([r.to_dict() for r in ranked])
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
