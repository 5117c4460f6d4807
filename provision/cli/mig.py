"""`provision mig plan` and `provision mig suggest`: place a MIG layout on a GPU (a table, or the
mig-parted config and Ansible vars), and propose layouts for N services of a given memory."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from provision.cli.common import check_output, load_matrix, write_output
from provision.cli.output import (
    dumps_json,
    dumps_yaml,
    echo_wrapped,
    markdown_table,
    table_lines,
    terminal_width,
    wrap_text,
)

FLAT = ("table", "markdown")


@click.group("mig")
def mig_group():
    """Plan and suggest Multi-Instance GPU layouts (A100, A30, H100, H200, GH200, B200, RTX PRO 6000).

    `mig plan` checks a layout against the GPU's real placements; `mig suggest` proposes layouts
    for N services of a given memory. Both cover every GPU with a profile set in compat/mig.yaml
    (also A30, H100 NVL, H200 NVL, GH200 and RTX PRO 6000 Blackwell Server Edition).
    """


def _gpu_option(f):
    f = click.option(
        "--platform",
        "platform_id",
        metavar="PLATFORM",
        help="The server or baseboard (provision matrix platforms): gives the GPU where it takes one model, "
        "refuses a --gpu it does not take, and counts the layout on each of its GPUs.",
    )(f)
    return click.option(
        "--gpu",
        metavar="GPU",
        help="MIG-capable GPU id, alias or group: a100-80gb, a100-sxm4-40gb, h100-sxm, h100-pcie, h200, b200, a30, "
        "… (required without --platform).",
    )(f)


def _gpu_of(matrix, gpu: str | None, platform_id: str | None):
    """(the GPU ident to plan for, the platform or None): --gpu, or the one --platform implies (its
    one GPU model, or the catalogued group of exactly its models), held to what the platform takes."""
    from provision.errors import InputError

    if platform_id is None:
        if gpu is None:
            raise InputError(
                "no GPU given",
                hint="name a MIG-capable GPU with --gpu (provision matrix gpus), or a server with --platform "
                "(provision matrix platforms)",
            )
        return gpu, None
    from provision.plan.model import PlanRequest
    from provision.plan.resolve import gpu_ident, platform_refusal

    platform = matrix.platform(platform_id)  # UnknownId: did you mean
    # the plan's own rule (provision plan --platform): the request's OS plays no part in it
    ident = gpu_ident(matrix, PlanRequest(os="", gpu=gpu, platform=platform.id), platform)
    refused = platform_refusal(matrix, platform, matrix.gpu_members(ident)[1])
    if refused is not None:  # names the platform's form factor and the GPUs it takes
        raise InputError(refused[0], hint=refused[1])
    return ident, platform


def per_node(platform, instances: int) -> str:
    """How the layout counts on the platform: on each of its GPUs (mig-parted's devices: all)."""
    head = f"on {platform.name} ({platform.id}): the layout applies to each"
    if platform.gpu_count is None:
        return f"{head} of its GPUs (no catalogued GPU count): {plural(instances, 'instance')} per GPU"
    up_to = "up to " if platform.gpu_count_is == "up-to" else ""
    total = platform.gpu_count * instances
    return (
        f"{head} of its {up_to}{platform.gpu_count} GPUs: {up_to}{platform.gpu_count} x {instances} = "
        f"{up_to}{plural(total, 'instance')} per node"
    )


def node_doc(platform, instances: int) -> dict:
    count = platform.gpu_count
    return {
        "id": platform.id,
        "name": platform.name,
        "gpu_count": count,
        "count_is": platform.gpu_count_is,
        "instances_per_gpu": instances,
        "instances_per_node": None if count is None else count * instances,
    }


@mig_group.command("plan")
@_gpu_option
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
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown", "yaml", "json"]),
    default="table",
    show_default=True,
    help="table/markdown: one row per instance and a summary; yaml/json: the whole plan with the "
    "mig-parted config (mig_parted) and the Ansible variables (ansible_vars).",
)
@click.option("--out-config", type=click.Path(dir_okay=False), help="Also write the mig-parted config (YAML) here.")
@click.option(
    "--out-vars", type=click.Path(dir_okay=False), help="Also write the Ansible provision_mig_* variables (YAML) here."
)
@click.pass_context
def plan_cmd(ctx, *, gpu, platform_id, layout, fill, name, device_filter, fmt, out_config, out_vars):
    """Check a MIG layout against the GPU's real placements and lay it out.

    A layout is valid when every instance gets a start slot `nvidia-smi mig -lgipp` allows
    without overlapping another, within the GPU's compute slices (7; 4 on an A30 and an RTX PRO
    6000) and instance limits; slice sums alone are not enough. A refusal (exit 2) names the
    instance that finds no placement and the largest layouts of the request that fit.

    The table shows each instance's start slot, profile, profile id, memory (GiB), compute
    slices, SMs and the memory slots it occupies (map: # its slots, . the others), then what is
    used and free. The table fits the terminal's width (COLUMNS, else the terminal, else 100).

    --platform (provision matrix platforms) gives the GPU where the server or baseboard takes one
    model (--platform dgx-h100: h100-sxm), refuses a --gpu it does not take, and says the layout
    applies to each of its GPUs (mig-parted's devices: all) with the instances per node.
    """
    from provision.mig.parted import ansible_vars, mig_parted_yaml
    from provision.mig.planner import gpu_profile_set, plan_layout

    check_output(out_config, "--out-config")
    check_output(out_vars, "--out-vars")
    matrix = load_matrix(ctx)
    ident, platform = _gpu_of(matrix, gpu, platform_id)
    canonical, profile_set, members = gpu_profile_set(matrix, ident)
    pci_ids = tuple(dict.fromkeys(p for g in members for p in g.pci_device_ids))
    plan = plan_layout(
        profile_set, layout, fill, gpu=canonical, name=name, pci_device_ids=pci_ids, device_filter=device_filter
    )
    if fmt in FLAT:
        sys.stdout.write(plan_text(plan, fmt, terminal_width(), platform=platform))
    else:
        doc = plan.to_dict()
        if platform is not None:
            doc["platform"] = node_doc(platform, len(plan.instances))
        sys.stdout.write(dumps_json(doc) if fmt == "json" else dumps_yaml(doc))
    if (note := plan.note()) is not None:
        echo_wrapped(f"note: {note}", err=True)
    if plan.fill is not None and plan.filled == 0:
        echo_wrapped(f"note: no {plan.fill} fits beside the layout; nothing was added", err=True)
    if out_config:
        write_output(out_config, mig_parted_yaml(plan), "--out-config")
    if out_vars:
        header = f"# provision mig plan --gpu {canonical}: Ansible variables for the mig role\n"
        from provision.fleet.extravars import dump_unsafe_yaml

        write_output(out_vars, header + dump_unsafe_yaml(ansible_vars(plan)), "--out-vars")
    return 0


@mig_group.command("suggest")
@_gpu_option
@click.option(
    "--services",
    required=True,
    type=click.IntRange(min=1),
    metavar="N",
    help="How many GPU instances: one per service (model server, job, tenant).",
)
@click.option(
    "--min-memory",
    metavar="SIZE",
    help="Memory each instance needs: 20 / 20G / 20Gi / 20GiB (GiB), or 20GB (10^9 bytes).",
)
@click.option(
    "--top", type=click.IntRange(min=1), default=5, show_default=True, metavar="K", help="Show the K best layouts."
)
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "json"]), default="table", show_default=True)
@click.pass_context
def suggest_cmd(ctx, *, gpu, platform_id, services, min_memory, top, fmt):
    """Propose MIG layouts with N instances of at least a given memory each.

    Each suggestion has exactly N instances of the GPU's plain profiles (a +me, +gfx or -me
    variant takes the same place as its plain profile: swap one in by hand), every one with at
    least --min-memory, and is placed by the same planner as `mig plan` (each instance at a start
    slot `nvidia-smi mig -lgipp` allows, no overlap; slice sums are not enough). Best first:
    fewest compute slices left unused, then the largest smallest instance, then the most balanced.
    Each row's --layout goes to `provision mig plan --layout` or `provision plan --mig`. When none
    fits, exit 2 names the most instances of that memory and the most memory N instances can have.

    --platform gives the GPU where the server or baseboard takes one model, refuses a --gpu it does
    not take, and counts N on each of its GPUs (instances per node).
    """
    from provision.mig.planner import gpu_profile_set, placements_note
    from provision.mig.suggest import parse_memory, refusal, suggest

    floor = parse_memory(min_memory) if min_memory is not None else None
    matrix = load_matrix(ctx)
    ident, platform = _gpu_of(matrix, gpu, platform_id)
    canonical, profile_set, _ = gpu_profile_set(matrix, ident)
    result = suggest(profile_set, services, floor)
    if not result.ranked:
        raise refusal(result, canonical)
    if fmt == "json":
        doc = suggestions_doc(result, canonical, top, platform)
        if platform is not None:
            doc["platform"] = node_doc(platform, services)
        sys.stdout.write(dumps_json(doc))
    else:
        sys.stdout.write(suggest_text(result, canonical, top, fmt, terminal_width(), platform=platform))
    if (note := placements_note(profile_set)) is not None:
        echo_wrapped(f"note: {note}", err=True)
    return 0


# -- text ------------------------------------------------------------------------------------


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def _gib(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def _slots(slots: Sequence[int]) -> str:
    """[4, 5, 6, 7] -> "4-7"; [1, 3] -> "1,3"; runs joined by commas."""
    runs: list[list[int]] = []
    for s in slots:
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _where(gpu: str, set_id: str) -> str:
    return gpu if gpu == set_id else f"{gpu} (profile set {set_id})"


PLAN_HEADERS = ("start", "profile", "id", "GiB", "compute slices", "SMs", "memory slots", "map")


def plan_rows(plan, markdown: bool = False) -> list[list[str]]:
    """One row per instance, by start slot: the values of compat/mig.yaml's profile."""
    slots = plan.profile_set.memory_slices
    rows = []
    for i in sorted(plan.instances, key=lambda i: i.start):
        p = i.profile
        bar = "".join("#" if s in i.slots else "." for s in range(slots))
        rows.append(
            [
                str(i.start),
                p.name,
                "?" if p.id is None else str(p.id),
                _gib(p.memory_gib),
                str(p.compute_slices),
                "?" if p.sms is None else str(p.sms),
                _slots(list(i.slots)),
                f"`{bar}`" if markdown else bar,
            ]
        )
    return rows


def plan_summary(plan) -> list[str]:
    """The used/free line, and what could still be added."""
    from provision.mig.planner import room

    ps = plan.profile_set
    free_compute, free_slots = ps.compute_slices - plan.compute_used, plan.free_slots
    free = []
    if free_compute:
        free.append(plural(free_compute, "compute slice"))
    if free_slots:
        free.append(("memory slot " if len(free_slots) == 1 else "memory slots ") + _slots(free_slots))
    lines = [
        f"compute slices {plan.compute_used}/{ps.compute_slices} used, memory slots {plan.memory_used}/"
        f"{ps.memory_slices} used; free: {', '.join(free) or 'none'}"
    ]
    extra = room(ps, [i.profile for i in plan.instances])
    if extra:
        lines.append(
            "room for "
            + " or ".join(p.name if n == 1 else f"{n}x{p.name}" for p, n in extra)
            + " (--fill PROFILE adds them)"
        )
    return lines


def plan_text(plan, fmt: str, width: int, *, platform=None) -> str:
    from provision.mig.planner import layout_text

    ps = plan.profile_set
    title = f"MIG layout {layout_text(i.profile for i in plan.instances)} on {_where(plan.gpu, ps.id)}"
    if plan.fill is not None and plan.filled:
        title += f", {plan.filled}x {plan.fill} added by --fill"
    unknown = any(None in (i.profile.id, i.profile.memory_gib, i.profile.sms) for i in plan.instances)
    footer = "?: not in compat/mig.yaml (no -lgip capture of this GPU gives it)" if unknown else None
    pointer = "mig-parted config and Ansible variables: --format yaml|json, or --out-config FILE --out-vars FILE"
    summary = plan_summary(plan)
    if platform is not None:
        summary.append(per_node(platform, len(plan.instances)))
    if fmt == "markdown":
        table_md = markdown_table(PLAN_HEADERS, plan_rows(plan, markdown=True)).rstrip("\n")
        return "\n\n".join([title, table_md, *summary, *([footer] if footer else []), pointer]) + "\n"
    out = [*wrap_text(title, width), ""]
    out += table_lines(PLAN_HEADERS, plan_rows(plan), width=width, right={0, 2, 3, 4, 5})
    out.append("")
    for line in [*summary, *([footer] if footer else []), pointer]:
        out += wrap_text(line, width)
    return "\n".join(out) + "\n"


# -- suggestions -----------------------------------------------------------------------------


SUGGEST_HEADERS = ("#", "--layout", "GiB each", "compute slices", "memory slots")


def _gib_each(s) -> str:
    """ "39.50, 2x 19.62": each instance's memory, creation order, repeats counted."""
    runs: list[list] = []
    for p in s.profiles:
        if runs and runs[-1][0] == p.memory_gib:
            runs[-1][1] += 1
        else:
            runs.append([p.memory_gib, 1])
    return ", ".join(_gib(g) if n == 1 else f"{n}x {_gib(g)}" for g, n in runs)


def suggest_rows(result, top: int, markdown: bool = False) -> list[list[str]]:
    ps = result.profile_set
    return [
        [
            str(rank),
            f"`{s.layout}`" if markdown else s.layout,
            _gib_each(s),
            f"{s.compute_used}/{ps.compute_slices}",
            f"{s.memory_used}/{ps.memory_slices}",
        ]
        for rank, s in enumerate(result.ranked[:top], 1)
    ]


def _commands(result, gpu: str, platform=None) -> list[str]:
    best = result.ranked[0].layout
    on = f" --platform {platform.id}" if platform is not None else ""
    return [
        f"provision mig plan{on} --gpu {gpu} --layout {best}",
        f"provision plan --os OS --gpu {gpu} --mig {best}",
    ]


def _suggest_lines(result, gpu: str, top: int, platform=None) -> tuple[str, list[str]]:
    ps, floor = result.profile_set, result.floor
    each = f" of at least {floor.text()} each" if floor else ""
    title = f"MIG layouts of {_where(gpu, ps.id)}: {plural(result.services, 'instance')}{each}"
    notes = ["best first: fewest compute slices unused, then the largest smallest instance, then the most balanced"]
    shown = min(top, len(result.ranked))
    if len(result.ranked) > shown:
        notes.append(f"{shown} of {len(result.ranked)} valid layouts shown (--top {len(result.ranked)} for all)")
    if result.unknown_memory:
        notes.append(
            "not considered with --min-memory: "
            + ", ".join(p.name for p in result.unknown_memory)
            + " (memory not in compat/mig.yaml)"
        )
    if any(s.smallest_gib is None for s in result.ranked[:top]):
        notes.append("?: memory not in compat/mig.yaml (no -lgip capture of this GPU gives it)")
    if platform is not None:
        notes.append(per_node(platform, result.services))
    return title, notes


def suggest_text(result, gpu: str, top: int, fmt: str, width: int, *, platform=None) -> str:
    title, notes = _suggest_lines(result, gpu, top, platform)
    commands = _commands(result, gpu, platform)
    if fmt == "markdown":
        parts = [f"{title}; {notes[0]}"]
        parts.append(markdown_table(SUGGEST_HEADERS, suggest_rows(result, top, markdown=True)).rstrip("\n"))
        parts += notes[1:]
        parts.append("Plan the first:\n\n```\n" + "\n".join(commands) + "\n```")
        return "\n\n".join(parts) + "\n"
    out = [*wrap_text(title, width), *wrap_text(notes[0], width), ""]
    out += table_lines(SUGGEST_HEADERS, suggest_rows(result, top), width=width, right={0})
    out.append("")
    for line in notes[1:]:
        out += wrap_text(line, width)
    out.append("plan the first:")
    for command in commands:  # a command is never wrapped: longer than the width, it overflows
        out += wrap_text(command, width, indent="  ", whole=True)
    return "\n".join(out) + "\n"


def suggestions_doc(result, gpu: str, top: int, platform=None) -> dict:
    ps, floor = result.profile_set, result.floor
    on = f" --platform {platform.id}" if platform is not None else ""
    return {
        "gpu": gpu,
        "profile_set": ps.id,
        "placements_confirmed": ps.placements_confirmed,
        "services": result.services,
        "min_memory": None if floor is None else {"given": floor.given, "gib": round(floor.gib, 4)},
        "profiles": [p.name for p in result.eligible],
        "not_considered": [{"profile": p.name, "why": "memory not in compat/mig.yaml"} for p in result.unknown_memory],
        "valid_layouts": len(result.ranked),
        "suggestions": [
            {
                "rank": rank,
                "layout": s.layout,
                "instances": [i.to_dict() for i in s.instances],
                "compute_slices": {"used": s.compute_used, "total": ps.compute_slices},
                "memory_slots": {"used": s.memory_used, "total": ps.memory_slices},
                "smallest_memory_gib": s.smallest_gib,
                "mig_plan": f"provision mig plan{on} --gpu {gpu} --layout {s.layout}",
            }
            for rank, s in enumerate(result.ranked[:top], 1)
        ],
    }
