"""The server around the GPUs, held to the plan's platform (Plan.server, from compat/platforms.yaml):
the DMI strings, the GPU count, NVLink links up, the nvidia-smi topo -m relation between GPU pairs,
the PCIe link. Without a platform in the plan each check skips saying so.

Each failure names its likely cause (a GPU off the bus, a missing NVLink bridge, a riser at x8,
Fabric Manager down). A fact the catalogue doubts (server.unconfirmed, compat/platforms.yaml
doubts) gives a warning instead of a failure: the host may be right and the catalogue wrong.

The PCIe rule. nvidia-smi's own help (`nvidia-smi --help-query-gpu`) says of pcie.link.gen.current
and pcie.link.width.current "These may be reduced when the GPU is not in use", and of
pcie.link.gen.max "The maximum PCI-E link generation possible with this GPU and system
configuration ... if the GPU supports a higher PCIe generation than the system supports then this
reports the system PCIe generation". An idle GPU reads Gen1 now and Gen4 at most (a real capture:
tests/fakegpu/captures/pcie__l40s-8gpu-idle.txt), so the generation is held on gen.max, never
on gen.current. The width is held on the smaller of width.current and width.max: a card at x8
reports width.max 16 (the GPU's, not the slot's: tests/fakegpu/captures/pcie__rtx5060ti-x8-idle.txt
reads x8 now and x16 at most, idle and under load alike), and no capture shows the width dropping at
idle (the generation does). The readings now are shown as evidence either way.

Everything here is parsed as data: bounded lines, plain string splits, no pattern that can
backtrack.
"""

from __future__ import annotations

import pytest

from provision.verify.checks import check, fail, first_line, need_smi
from provision.verify.facts import (
    LINE_LIMIT,
    MAX_GPU_LINES,
    NVLINK_STATUS,
    PCIE_QUERY,
    TOPOLOGY,
    dmi_command,
    dmi_dir,
)

MAX_LINES = 4096  # lines of nvlink -s / topo -m read (8 GPUs x 18 links is under 200)
MAX_SHOWN = 6  # findings named in one message (the rest counted)
PCIE_RELATIONS = ("X", "SYS", "NODE", "PHB", "PXB", "PIX")  # nvidia-smi topo -m's legend, besides NV#


def need_server(plan):
    server = getattr(plan, "server", None)
    if server is None:
        pytest.skip(
            "no platform in the plan (provision plan --platform, or platform: in the fleet file): "
            "the server around the GPUs is not checked"
        )
    return server


def conclude(server, problems: list[str], facts_named: tuple[str, ...], warning) -> None:
    """Fail with the problems, or warn when the catalogue doubts a fact they rest on."""
    if not problems:
        return
    shown = "; ".join(problems[:MAX_SHOWN]) + (
        f"; and {len(problems) - MAX_SHOWN} more" if len(problems) > MAX_SHOWN else ""
    )
    doubted = [f for f in facts_named if f in server.unconfirmed]
    if doubted:
        warning(
            f"{shown} (compat/platforms.yaml marks {', '.join(doubted)} of {server.id} unconfirmed: "
            "a warning, not a failure)"
        )
        return
    fail(shown)


def command_failed(res, what: str) -> str | None:
    if res.timed_out is not None:
        return f"{what} did not answer in {res.timed_out} s (a GPU may have fallen off the bus: provision doctor)"
    if res.rc != 0:
        return f"{what} fails: {first_line(res.text) or f'exit {res.rc}'}"
    return None


def lines(text: str) -> list[str]:
    return [line[:LINE_LIMIT] for line in text.splitlines()[:MAX_LINES]]


# -- parsers: what nvidia-smi and the DMI files printed, as data -----------------------------------
def parse_pcie(text: str) -> dict[str, tuple[str, str, str, str]]:
    """index -> (gen now, gen max, width now, width max), as printed (a value may be [N/A])."""
    out: dict[str, tuple[str, str, str, str]] = {}
    for line in lines(text)[:MAX_GPU_LINES]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 5 and cells[0].isdigit():
            out.setdefault(cells[0], (cells[1], cells[2], cells[3], cells[4]))
    return out


def parse_nvlink(text: str) -> dict[str, dict[str, str] | None]:
    """GPU index -> {link number: its speed, or "inactive"}; None for a GPU whose every link is
    inactive (nvidia-smi then prints "all links are inActive" instead of the links)."""
    out: dict[str, dict[str, str] | None] = {}
    gpu: str | None = None
    for line in lines(text):
        stripped = line.strip()
        if line.startswith("GPU ") and ":" in line:
            index = line[4 : line.index(":")]
            gpu = index if index.isdigit() else None
            if gpu is not None:
                out.setdefault(gpu, {})
            continue
        if gpu is None:
            continue
        if "all links are inactive" in stripped.lower():
            out[gpu] = None
        elif stripped.startswith("Link ") and ":" in stripped:
            number, _, value = stripped[5:].partition(":")
            links = out.get(gpu)
            if number.strip().isdigit() and links is not None:
                value = value.strip()
                links[number.strip()] = "inactive" if "inactive" in value.lower() else value[:40]
    return out


def parse_topology(text: str) -> tuple[list[str], dict[tuple[str, str], str]]:
    """(the GPU columns of nvidia-smi topo -m, (GPUi, GPUj) -> relation). The GPU columns come first
    in its header; a row is a GPU's name and then one cell per column."""
    rows = lines(text)
    header: list[str] = []
    matrix: dict[tuple[str, str], str] = {}
    for n, line in enumerate(rows):
        words = line.split()
        if words and words[0] == "GPU0" and not header and (len(words) < 2 or words[1] != "X"):
            for word in words:
                if not (word.startswith("GPU") and word[3:].isdigit()):
                    break
                header.append(word)
            for row in rows[n + 1 :]:
                cells = row.split()
                if not cells or not (cells[0].startswith("GPU") and cells[0][3:].isdigit()):
                    continue
                for column, value in zip(header, cells[1 : 1 + len(header)], strict=False):
                    matrix[(cells[0], column)] = value[:16]
            break
    return header, matrix


def parse_dmi(text: str) -> dict[str, str | None]:
    """DMI file -> its value (None: not readable), from dmi_command's lines."""
    from provision.verify.facts import DMI_FILES

    values = lines(text)[: len(DMI_FILES)]
    out: dict[str, str | None] = {}
    for name, line in zip(DMI_FILES, values + ["-"] * (len(DMI_FILES) - len(values)), strict=True):
        out[name] = line[1:].strip() if line.startswith("+") else None
    return out


def nv_links(relation: str) -> int | None:
    """NV12 -> 12; None for a PCIe relation."""
    return int(relation[2:]) if relation.startswith("NV") and relation[2:].isdigit() else None


# -- the checks -------------------------------------------------------------------------------------
@check("server-dmi", "the server's DMI vendor and product are the platform's")
def check_server_dmi(facts, plan, target, evidence, warning):
    server = need_server(plan)
    if not server.dmi_vendor and not server.dmi_product:
        pytest.skip(
            f"compat/platforms.yaml has no DMI strings for {server.id} "
            f"({'a baseboard: DMI names the OEM server it sits in' if server.kind == 'baseboard' else 'none captured'})"
        )
    folder, refused = dmi_dir(target.hostvars or {})
    if folder is None:
        fail(f"{refused}: the DMI files cannot be read")
    res = facts.run(dmi_command(folder))
    failed = command_failed(res, f"reading {folder}")
    if failed:
        fail(failed)
    dmi = parse_dmi(res.out)
    evidence(f"{folder}: " + ", ".join(f"{k}={v!r}" if v is not None else f"{k} unreadable" for k, v in dmi.items()))
    if all(v is None for v in dmi.values()):
        warning(
            f"no DMI file readable in {folder} (a VM or a container without DMI): the server is not confirmed "
            f"to be {server.name}"
        )
        return
    problems = []
    vendor = " ".join(v for v in (dmi["sys_vendor"], dmi["product_name"]) if v).casefold()
    if server.dmi_vendor and not any(s.casefold() in vendor for s in server.dmi_vendor):
        problems.append(
            f"DMI vendor {dmi['sys_vendor']!r}; {server.name} reports {' or '.join(map(repr, server.dmi_vendor))}: "
            "this is not the plan's platform (plan the host with its own, or fix platform: in the fleet file)"
        )
    product = " ".join(v for v in (dmi["product_name"], dmi["board_name"]) if v).casefold()
    if server.dmi_product and not any(s.casefold() in product for s in server.dmi_product):
        problems.append(
            f"DMI product {dmi['product_name']!r} (board {dmi['board_name']!r}); {server.name} reports "
            f"{' or '.join(map(repr, server.dmi_product))}: this is not the plan's platform"
        )
    conclude(server, problems, ("dmi",), warning)


@check("server-gpus", "the host shows the GPU count its platform holds")
def check_server_gpus(facts, plan, evidence, warning):
    server = need_server(plan)
    if server.gpu_count is None:
        pytest.skip(f"compat/platforms.yaml gives no GPU count for {server.id}")
    gpus = need_smi(facts)
    up_to = server.gpu_count_is == "up-to"
    evidence(f"{len(gpus)} GPU(s) visible; {server.name} holds {'up to ' if up_to else ''}{server.gpu_count}")
    problems = []
    if len(gpus) < server.gpu_count and not up_to:
        for line in facts.kernel_log:
            evidence(f"kernel log: {line}")
        seen = f"; the kernel log's last GPU line: {facts.kernel_log[-1]}" if facts.kernel_log else ""
        problems.append(
            f"{len(gpus)} of the {server.gpu_count} GPUs {server.name} holds are visible: a GPU fell off the bus "
            f"or is not seated (reseat it, check its power cables; provision doctor reads the kernel log){seen}"
        )
    if len(gpus) > server.gpu_count:
        problems.append(
            f"{len(gpus)} GPUs visible; {server.name} holds {'at most ' if up_to else ''}{server.gpu_count}: "
            "the plan's platform is not this server"
        )
    conclude(server, problems, ("gpus", "gpus.count"), warning)


@check("server-pcie", "each GPU's PCIe link is at the platform's generation and width")
def check_server_pcie(facts, plan, evidence, warning):
    server = need_server(plan)
    gen, width = server.pcie_generation, server.pcie_width
    if not gen and not width:
        pytest.skip(f"compat/platforms.yaml gives no PCIe link for {server.id}")
    gpus = need_smi(facts)
    res = facts.run(PCIE_QUERY)
    failed = command_failed(res, "nvidia-smi --query-gpu=pcie.link.*")
    if failed:
        fail(failed)
    links = parse_pcie(res.out)
    problems, unread = [], []
    for g in gpus:
        row = links.get(g.index)
        if row is None:
            problems.append(f"GPU {g.index} is missing from the PCIe query (a GPU that fell off the bus?)")
            continue
        gen_now, gen_max, width_now, width_max = row
        evidence(f"GPU {g.index}: Gen{gen_now} now, Gen{gen_max} at most; x{width_now} now, x{width_max} at most")
        if not all(v.isdigit() for v in row):
            unread.append(g.index)
            continue
        if gen and int(gen_max) < gen:
            problems.append(
                f"GPU {g.index} links at PCIe Gen{gen_max} at most; {server.name} gives Gen{gen}: the slot, a riser "
                "or a BIOS setting holds the link down (a riser of an older generation, a PCIe speed set in the BIOS)"
            )
        narrow = min(int(width_now), int(width_max))
        if width and narrow < width:
            problems.append(
                f"GPU {g.index} runs at x{narrow} (x{width_now} now, x{width_max} at most); {server.name} gives "
                f"x{width}: a riser or slot at x{narrow}, or a card not fully seated"
            )
    if unread:
        warning(f"nvidia-smi does not report the PCIe link of GPU {', '.join(unread)}: not checked")
    conclude(server, problems, ("pcie",), warning)


_NVLINK_CAUSE = {
    "nvswitch": "an NVLink to the NVSwitch baseboard is down (Fabric Manager down, or a GPU/baseboard fault: "
    "systemctl status nvidia-fabricmanager; provision doctor)",
    "nvlink": "the board's GPU-to-GPU NVLink is down (reseat the GPU; run a field diagnostic)",
    "nvlink-bridge": "a missing or badly seated NVLink bridge",
}


@check("server-nvlink", "every NVLink the platform's interconnect gives is up")
def check_server_nvlink(facts, plan, evidence, warning):
    server = need_server(plan)
    kind = server.interconnect
    if kind not in _NVLINK_CAUSE:
        pytest.skip(
            f"{server.name} has no NVLink (interconnect {kind})"
            if kind
            else f"compat/platforms.yaml gives no interconnect for {server.id}"
        )
    gpus = need_smi(facts)
    res = facts.run(NVLINK_STATUS)
    failed = command_failed(res, NVLINK_STATUS)
    if failed:
        fail(failed)
    found = parse_nvlink(res.out)
    optional = kind == "nvlink-bridge" and server.interconnect_optional
    cause = _NVLINK_CAUSE[kind]
    problems = []
    for g in gpus:
        links = found.get(g.index, {})
        down = sorted((n for n, v in (links or {}).items() if v == "inactive"), key=int)
        up = len(links or {}) - len(down)
        if links is None:
            evidence(f"GPU {g.index}: every NVLink inactive")
        else:
            evidence(f"GPU {g.index}: {up} NVLink(s) up" + (f", link {', '.join(down)} inactive" if down else ""))
        if optional and not up:
            continue  # no bridge on this GPU: the platform's bridges are optional
        if links is None or (not links and not optional):
            problems.append(f"GPU {g.index} has no NVLink up: {cause}")
        elif down:
            problems.append(f"GPU {g.index}: NVLink {', '.join(down)} down of {len(links)}: {cause}")
    if optional and not any(found.get(g.index) for g in gpus):
        evidence(f"no NVLink bridge fitted (optional on {server.name})")
    conclude(server, problems, ("interconnect",), warning)


@check("server-topology", "the nvidia-smi topo -m relation between every GPU pair is the platform's")
def check_server_topology(facts, plan, evidence, warning):
    server = need_server(plan)
    if not server.topology:
        pytest.skip(f"compat/platforms.yaml gives no topo -m relation for {server.id}")
    gpus = need_smi(facts)
    res = facts.run(TOPOLOGY)
    failed = command_failed(res, TOPOLOGY)
    if failed:
        fail(failed)
    columns, matrix = parse_topology(res.out)
    names = [f"GPU{g.index}" for g in gpus]
    expected = set(server.topology)
    seen: dict[str, int] = {}
    problems = []
    missing = [n for n in names if n not in columns]
    if missing:
        problems.append(f"nvidia-smi topo -m lists no {', '.join(missing[:MAX_SHOWN])}: a GPU fell off the bus?")
    wanted_links = max((nv_links(r) or 0) for r in expected)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            relation = matrix.get((a, b))
            if relation is None:
                continue
            seen[relation] = seen.get(relation, 0) + 1
            if relation in expected:
                continue
            links = nv_links(relation)
            if wanted_links and links is None:
                why = "no NVLink between them: NVLink down, or Fabric Manager not running on an NVSwitch board"
            elif wanted_links and links is not None:
                why = f"{links} of the {wanted_links} NVLinks up between them: links down"
            elif links is not None:
                why = f"an NVLink bridge {server.name} does not expect (plan a platform with bridges)"
            else:
                why = "another PCIe path than the platform's"
            problems.append(f"{a}-{b} is {relation}, {server.name} gives {'/'.join(server.topology)}: {why}")
    evidence(
        "nvidia-smi topo -m between GPU pairs: " + (", ".join(f"{r} x{n}" for r, n in sorted(seen.items())) or "none")
    )
    conclude(server, problems, ("topology",), warning)
