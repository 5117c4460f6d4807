"""`provision mig plan`: place a MIG layout on a GPU, write the mig-parted config and Ansible vars."""

from __future__ import annotations

import sys

import click

from provision.cli.common import check_output, load_matrix, write_output
from provision.cli.output import dumps_json, dumps_yaml


@click.group("mig")
def mig_group():
    """Plan Multi-Instance GPU layouts (A100, H100, H200, B200)."""


@mig_group.command("plan")
@click.option(
    "--gpu",
    required=True,
    metavar="GPU",
    help="MIG-capable GPU id, alias or group: a100-80gb, a100-sxm4-40gb, h100-sxm, h100-pcie, h200, b200, a30, …",
)
@click.option(
    "--layout", metavar="PROFILES", help="GPU instances, comma-separated, Nx to repeat: 3g.40gb,2g.20gb,2x1g.10gb."
)
@click.option(
    "--fill",
    metavar="PROFILE",
    help="Add as many instances of PROFILE as fit beside --layout (alone: fill the whole GPU).",
)
@click.option("--name", metavar="NAME", help="mig-parted config name (default: provision-<gpu>-<layout>).")
@click.option(
    "--device-filter",
    is_flag=True,
    help="Restrict the mig-parted entry to the GPU's PCI device ids (hosts with mixed GPUs).",
)
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.option("--out-config", type=click.Path(dir_okay=False), help="Also write the mig-parted config (YAML) here.")
@click.option(
    "--out-vars", type=click.Path(dir_okay=False), help="Also write the Ansible provision_mig_* variables (YAML) here."
)
@click.pass_context
def plan_cmd(ctx, *, gpu, layout, fill, name, device_filter, fmt, out_config, out_vars):
    """Check a MIG layout against the GPU's real placements and lay it out.

    A layout is valid when every instance gets a start slot `nvidia-smi mig -lgipp` allows
    without overlapping another, within the GPU's compute slices (7; 4 on an A30) and instance limits;
    slice sums alone are not enough. A refusal (exit 2) names the instance that finds no
    placement and the largest layouts of the request that fit.
    """
    from provision.mig.parted import ansible_vars, mig_parted_yaml
    from provision.mig.planner import gpu_profile_set, plan_layout

    check_output(out_config, "--out-config")
    check_output(out_vars, "--out-vars")
    matrix = load_matrix(ctx)
    canonical, profile_set, members = gpu_profile_set(matrix, gpu)
    pci_ids = tuple(dict.fromkeys(p for g in members for p in g.pci_device_ids))
    plan = plan_layout(
        profile_set, layout, fill, gpu=canonical, name=name, pci_device_ids=pci_ids, device_filter=device_filter
    )
    doc = plan.to_dict()
    sys.stdout.write(dumps_json(doc) if fmt == "json" else dumps_yaml(doc))
    if (note := plan.note()) is not None:
        click.echo(f"note: {note}", err=True)
    if plan.fill is not None and plan.filled == 0:
        click.echo(f"note: no {plan.fill} fits beside the layout; nothing was added", err=True)
    if out_config:
        write_output(out_config, mig_parted_yaml(plan), "--out-config")
    if out_vars:
        header = f"# provision mig plan --gpu {canonical}: Ansible variables for the mig role\n"
        from provision.fleet.extravars import dump_unsafe_yaml

        write_output(out_vars, header + dump_unsafe_yaml(ansible_vars(plan)), "--out-vars")
    return 0
