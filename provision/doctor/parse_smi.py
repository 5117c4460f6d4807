"""Parsers for nvidia-smi's own outputs: ``-q -x`` XML, ``-q`` text, the default table,
``--query-gpu`` CSV and ``nvlink -s``. Each returns normalised records (``state.GpuState``) or
raises ``ParseFailure`` with a short reason; the caller names the file.

XML is parsed with the standard library (expat). Entity declarations are refused before
parsing, so nothing is ever expanded, and the ``<!DOCTYPE ... SYSTEM "nvsmi_device_vNN.dtd">``
line nvidia-smi writes is never fetched (expat does not load external DTDs).
"""

from __future__ import annotations

import csv
import io
import re
from typing import NamedTuple

from provision.doctor.state import (
    CLOCK_REASONS,
    GpuState,
    SmiResult,
    clean,
    flag,
    integer,
    normalize_bus,
    number,
)

_VERSION = re.compile(r"\d{1,6}(?:\.\d{1,6}){1,3}")


class ParseFailure(Exception):
    """The text is (or claims to be) a known format but cannot be read; str() says why."""


def _version(text: str | None) -> str | None:
    m = _VERSION.match(clean(text) or "")
    return m[0] if m else None


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# -- -q -x XML ------------------------------------------------------------------------------
def parse_xml(text: str, source: str) -> SmiResult:
    import xml.etree.ElementTree as ET

    start = min(
        (i for i in (text.find("<?xml"), text.find("<!DOCTYPE"), text.find("<nvidia_smi_log")) if i >= 0), default=-1
    )
    if start < 0:
        raise ParseFailure("no XML document found")
    if re.search(r"<!ENTITY", text, re.I):
        raise ParseFailure("the XML declares entities; doctor does not expand them")
    end_tag = "</nvidia_smi_log>"
    end = text.find(end_tag, start)
    body = text[start : end + len(end_tag)] if end >= 0 else text[start:]
    try:
        root = ET.fromstring(body)
    except (ET.ParseError, ValueError) as exc:
        line, _col = getattr(exc, "position", (0, 0))  # ValueError: text the parser cannot encode
        what = "truncated" if end < 0 else "malformed"
        raise ParseFailure(f"{what} XML ({str(exc).split(':')[0]} at line {line})") from None
    if root.tag != "nvidia_smi_log":
        raise ParseFailure(f"XML whose root is <{root.tag}>, not <nvidia_smi_log>")
    outside = text[:start] + (text[end + len(end_tag) :] if end >= 0 else "")
    result = SmiResult(
        driver_version=_version(root.findtext("driver_version")),
        cuda_version=_version(root.findtext("cuda_version")),
        attached=integer(root.findtext("attached_gpus")),
        messages=[ln.strip() for ln in outside.splitlines() if ln.strip()],
    )
    for i, gpu in enumerate(root.findall("gpu")):
        result.gpus.append(_xml_gpu(gpu, i, source))
    return result


def _xml_ecc(el) -> tuple[int | None, int | None]:
    """(correctable, uncorrectable) of a <volatile>/<aggregate> element, old or new schema."""
    if el is None:
        return None, None
    if el.find("double_bit") is not None or el.find("single_bit") is not None:
        return integer(el.findtext("single_bit/total")), integer(el.findtext("double_bit/total"))
    tags = {child.tag: child.text for child in el}
    unc_tags = [t for t in tags if "uncorrectable" in t]
    if any(t.endswith(("_parity", "_secded")) for t in unc_tags):
        unc_tags = [t for t in unc_tags if t != "sram_uncorrectable"]
    corr = _sum([integer(tags[t]) for t in tags if t.endswith("_correctable") and "uncorrectable" not in t])
    return corr, _sum([integer(tags[t]) for t in unc_tags])


def _xml_gpu(gpu, index: int, source: str) -> GpuState:
    def t(*paths: str) -> str | None:
        for path in paths:
            value = clean(gpu.findtext(path))
            if value is not None:
                return value
        return None

    clocks: dict[str, bool] = {}
    label = "Clocks Event Reasons"
    reasons = gpu.find("clocks_event_reasons")
    if reasons is None:
        reasons = gpu.find("clocks_throttle_reasons")
        label = "Clocks Throttle Reasons"
    if reasons is not None:
        for child in reasons:
            m = re.match(r"clocks_(?:event|throttle)_reason_(\w+)$", child.tag)
            state = flag(child.text)
            if m and state is not None:
                clocks[m[1]] = state
    ecc = gpu.find("ecc_errors")
    v_corr, v_unc = _xml_ecc(ecc.find("volatile") if ecc is not None else None)
    a_corr, a_unc = _xml_ecc(ecc.find("aggregate") if ecc is not None else None)
    power = "gpu_power_readings" if gpu.find("gpu_power_readings") is not None else "power_readings"
    return GpuState(
        source=source,
        fmt="-q -x",
        index=index,
        bus_id=normalize_bus(gpu.get("id") or t("pci/pci_bus_id")),
        name=t("product_name"),
        brand=t("product_brand"),
        uuid=t("uuid"),
        persistence=flag(t("persistence_mode")),
        driver_model=t("driver_model/current_dm"),
        pstate=t("performance_state"),
        util_gpu=number(t("utilization/gpu_util")),
        clocks_label=label,
        clocks=clocks,
        temp=number(t("temperature/gpu_temp")),
        temp_slowdown=number(t("temperature/gpu_temp_slow_threshold")),
        temp_shutdown=number(t("temperature/gpu_temp_max_threshold")),
        tlimit=number(t("temperature/gpu_temp_tlimit")),
        tlimit_slowdown=number(t("temperature/gpu_temp_slow_tlimit_threshold")),
        tlimit_shutdown=number(t("temperature/gpu_temp_max_tlimit_threshold")),
        power_draw=number(t(f"{power}/power_draw", f"{power}/average_power_draw", f"{power}/instant_power_draw")),
        power_limit=number(t(f"{power}/enforced_power_limit", f"{power}/current_power_limit", f"{power}/power_limit")),
        power_default_limit=number(t(f"{power}/default_power_limit")),
        ecc_enabled=flag(t("ecc_mode/current_ecc")),
        ecc_volatile_unc=v_unc,
        ecc_aggregate_unc=a_unc,
        ecc_volatile_corr=v_corr,
        ecc_aggregate_corr=a_corr,
        retired_sbe=integer(t("retired_pages/multiple_single_bit_retirement/retired_count")),
        retired_dbe=integer(t("retired_pages/double_bit_retirement/retired_count")),
        retired_pending=flag(t("retired_pages/pending_retirement", "retired_pages/pending_blacklist")),
        remap_corr=integer(t("remapped_rows/remapped_row_corr")),
        remap_unc=integer(t("remapped_rows/remapped_row_unc")),
        remap_pending=flag(t("remapped_rows/remapped_row_pending")),
        remap_failure=flag(t("remapped_rows/remapped_row_failure")),
        mig_current=t("mig_mode/current_mig"),
        mig_pending=t("mig_mode/pending_mig"),
        pcie_gen=integer(t("pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
        pcie_gen_max=integer(t("pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
        pcie_width=integer(t("pci/pci_gpu_link_info/link_widths/current_link_width")),
        pcie_width_max=integer(t("pci/pci_gpu_link_info/link_widths/max_link_width")),
        fan=clean(gpu.findtext("fan_speed")) or (gpu.findtext("fan_speed") or "").strip() or None,
        fabric_state=t("fabric/state"),
        fabric_status=t("fabric/status"),
        reset_required=flag(t("gpu_reset_status/reset_required")),
        drain_recommended=flag(t("gpu_reset_status/drain_and_reset_recommended")),
        recovery_action=t("gpu_recovery_action"),
    )


# -- -q text ---------------------------------------------------------------------------------
class Node:
    __slots__ = ("children", "name", "value")

    def __init__(self, name: str, value: str | None) -> None:
        self.name = name
        self.value = value
        self.children: list[Node] = []

    def get(self, *path: str) -> Node | None:
        node: Node | None = self
        for name in path:
            if node is None:
                return None
            node = next((c for c in node.children if c.name.lower() == name.lower()), None)
        return node

    def v(self, *path: str) -> str | None:
        node = self.get(*path)
        return clean(node.value) if node is not None else None

    def first(self, *paths: tuple[str, ...]) -> str | None:
        for path in paths:
            value = self.v(*path)
            if value is not None:
                return value
        return None

    def find(self, name: str) -> Node | None:
        """Depth-first search for a descendant called ``name`` (iterative: no recursion limit)."""
        stack = list(reversed(self.children))
        while stack:
            node = stack.pop()
            if node.name.lower() == name.lower():
                return node
            stack.extend(reversed(node.children))
        return None


_KV = re.compile(r"^(?P<key>\S.*?)\s+:(?:\s(?P<value>.*))?$")
_GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
NVSMI_LOG = "==============NVSMI LOG=============="
MAX_LINE = 4000  # longer lines are not nvidia-smi output; skipping them keeps the regexes linear


def text_tree(text: str) -> Node:
    """The indentation tree of ``nvidia-smi -q`` output (everything after the NVSMI LOG line)."""
    root = Node("", None)
    marker = text.find(NVSMI_LOG)
    body = text[marker + len(NVSMI_LOG) :] if marker >= 0 else text
    stack: list[tuple[int, Node]] = [(-1, root)]
    for raw in body.splitlines():
        line = raw.expandtabs(8).rstrip()
        if not line.strip() or len(line) > MAX_LINE:
            continue
        indent = len(line) - len(line.lstrip())
        content = line.strip()
        m = _KV.match(content)
        node = Node(m["key"].strip(), (m["value"] or "").strip()) if m else Node(content.rstrip(":").strip(), None)
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def parse_q_text(text: str, source: str) -> SmiResult:
    if NVSMI_LOG not in text:
        raise ParseFailure("no '==============NVSMI LOG==============' header")
    root = text_tree(text)
    result = SmiResult(
        driver_version=_version(root.first(("KMD Version",), ("Driver Version",))),
        cuda_version=_version(root.first(("CUDA UMD Version",), ("CUDA Version",))),
        attached=integer(root.v("Attached GPUs")),
    )
    index = 0
    for node in root.children:
        m = _GPU_HEADER.match(node.name)
        if m:
            result.gpus.append(_text_gpu(node, m[1], index, source))
            index += 1
    if not result.gpus and result.driver_version is None:
        raise ParseFailure("an NVSMI LOG header but no driver version and no GPU sections")
    return result


def _text_ecc(node: Node | None) -> tuple[int | None, int | None]:
    if node is None:
        return None, None
    if node.get("Double Bit") is not None or node.get("Single Bit") is not None:
        return integer(node.v("Single Bit", "Total")), integer(node.v("Double Bit", "Total"))
    names = [c.name for c in node.children]
    unc = [n for n in names if "uncorrectable" in n.lower()]
    if any(n.lower().endswith(("parity", "sec-ded")) for n in unc):
        unc = [n for n in unc if n.lower() != "sram uncorrectable"]
    corr = [n for n in names if n.lower().endswith("correctable") and "uncorrectable" not in n.lower()]
    return _sum([integer(node.v(n)) for n in corr]), _sum([integer(node.v(n)) for n in unc])


def _text_gpu(g: Node, bus: str, index: int, source: str) -> GpuState:
    clocks: dict[str, bool] = {}
    label = "Clocks Event Reasons"
    reasons = g.get(label)
    if reasons is None:
        label = "Clocks Throttle Reasons"
        reasons = g.get(label)
    if reasons is not None:
        for key, text in CLOCK_REASONS.items():
            hit = reasons.find(text)
            state = flag(hit.value) if hit is not None else None
            if state is not None:
                clocks[key] = state
    ecc = g.get("ECC Errors")
    v_corr, v_unc = _text_ecc(ecc.get("Volatile") if ecc else None)
    a_corr, a_unc = _text_ecc(ecc.get("Aggregate") if ecc else None)
    power = "GPU Power Readings" if g.get("GPU Power Readings") is not None else "Power Readings"
    retired = g.get("Retired Pages")
    pending = None
    if retired is not None:
        pending = next((flag(c.value) for c in retired.children if c.name.lower().startswith("pending")), None)
    temp = "Temperature"
    link = ("PCI", "GPU Link Info")
    fan = g.get("Fan Speed")
    return GpuState(
        source=source,
        fmt="-q",
        index=index,
        bus_id=normalize_bus(bus),
        name=g.v("Product Name"),
        brand=g.v("Product Brand"),
        uuid=g.v("GPU UUID"),
        persistence=flag(g.v("Persistence Mode")),
        driver_model=g.v("Driver Model", "Current"),
        pstate=g.v("Performance State"),
        util_gpu=number(g.v("Utilization", "Gpu")),
        clocks_label=label,
        clocks=clocks,
        temp=number(g.v(temp, "GPU Current Temp")),
        temp_slowdown=number(g.v(temp, "GPU Slowdown Temp")),
        temp_shutdown=number(g.v(temp, "GPU Shutdown Temp")),
        tlimit=number(g.v(temp, "GPU T.Limit Temp")),
        tlimit_slowdown=number(g.v(temp, "GPU Slowdown T.Limit Temp")),
        tlimit_shutdown=number(g.v(temp, "GPU Shutdown T.Limit Temp")),
        power_draw=number(
            g.first((power, "Power Draw"), (power, "Average Power Draw"), (power, "Instantaneous Power Draw"))
        ),
        power_limit=number(
            g.first((power, "Enforced Power Limit"), (power, "Current Power Limit"), (power, "Power Limit"))
        ),
        power_default_limit=number(g.v(power, "Default Power Limit")),
        ecc_enabled=flag(g.first(("ECC Mode", "Current"), ("Ecc Mode", "Current"))),
        ecc_volatile_unc=v_unc,
        ecc_aggregate_unc=a_unc,
        ecc_volatile_corr=v_corr,
        ecc_aggregate_corr=a_corr,
        retired_sbe=integer(g.v("Retired Pages", "Single Bit ECC")),
        retired_dbe=integer(g.v("Retired Pages", "Double Bit ECC")),
        retired_pending=pending,
        remap_corr=integer(g.v("Remapped Rows", "Correctable Error")),
        remap_unc=integer(g.v("Remapped Rows", "Uncorrectable Error")),
        remap_pending=flag(g.v("Remapped Rows", "Pending")),
        remap_failure=flag(g.v("Remapped Rows", "Remapping Failure Occurred")),
        mig_current=g.v("MIG Mode", "Current"),
        mig_pending=g.v("MIG Mode", "Pending"),
        pcie_gen=integer(g.v(*link, "PCIe Generation", "Current")),
        pcie_gen_max=integer(g.v(*link, "PCIe Generation", "Max")),
        pcie_width=integer(g.v(*link, "Link Width", "Current")),
        pcie_width_max=integer(g.v(*link, "Link Width", "Max")),
        fan=(fan.value or None) if fan is not None else None,
        fabric_state=g.v("Fabric", "State"),
        fabric_status=g.v("Fabric", "Status"),
        reset_required=flag(g.v("GPU Reset Status", "Reset Required")),
        drain_recommended=flag(g.v("GPU Reset Status", "Drain and Reset Recommended")),
        recovery_action=g.v("GPU Recovery Action"),
    )


# -- default table ---------------------------------------------------------------------------
_TABLE_HEAD = re.compile(r"NVIDIA-SMI\s+(\S+)\s+(?:Driver|KMD) Version:\s*(\S+)\s+CUDA(?: UMD)? Version:\s*(\S+)")
_ROW1 = re.compile(
    r"^\|\s*(\d{1,4})\s+(.*?)\s+(On|Off|N/A|WDDM|TCC|MCDM)\s+\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"
    r"\s+(\S+)\s*\|\s*(.*?)\s*\|"
)
_ROW2 = re.compile(r"^\|\s*(\S+)\s+(\S+)\s+(\S+)\s+(.*?)\|\s*(.*?)\|\s*(\S+)\s+(.*?)\s*\|")
_ROW3 = re.compile(r"^\|\s+\|\s+\|\s*(\S+)\s*\|")


def parse_table(text: str, source: str) -> SmiResult:
    head = _TABLE_HEAD.search(text)
    if not head:
        raise ParseFailure("no 'NVIDIA-SMI ... Driver Version ... CUDA Version' header line")
    result = SmiResult(driver_version=_version(head[2]), cuda_version=_version(head[3]))
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _ROW1.match(line.strip()) if len(line) < MAX_LINE else None
        if not m:
            continue
        row2 = _ROW2.match(lines[i + 1].strip()) if i + 1 < len(lines) and len(lines[i + 1]) < MAX_LINE else None
        row3 = _ROW3.match(lines[i + 2].strip()) if i + 2 < len(lines) and len(lines[i + 2]) < MAX_LINE else None
        windows = m[3] in ("WDDM", "TCC", "MCDM")
        volatile = integer(clean(m[6]))
        result.gpus.append(
            GpuState(
                source=source,
                fmt="table",
                index=int(m[1]),
                bus_id=normalize_bus(m[4]),
                name=m[2].strip(),
                persistence=None if windows else flag(m[3]),
                driver_model=m[3] if windows else None,
                ecc_volatile_unc=volatile,
                fan=row2[1] if row2 else None,
                temp=number(row2[2]) if row2 else None,
                pstate=row2[3] if row2 and re.fullmatch(r"P\d+", row2[3]) else None,
                util_gpu=number(row2[6]) if row2 else None,
                mig_current=clean(row3[1]) if row3 else None,
            )
        )
    trailer = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith(("|", "+"))]
    result.messages.extend(trailer)
    return result


# -- --query-gpu CSV -------------------------------------------------------------------------
_CSV_FIELDS = {
    "index": "index",
    "name": "name",
    "gpu_name": "name",
    "pci.bus_id": "bus",
    "gpu_bus_id": "bus",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "persistence_mode": "persistence",
    "driver_model.current": "driver_model",
    "pstate": "pstate",
    "utilization.gpu": "util",
    "temperature.gpu": "temp",
    "power.draw": "power_draw",
    "enforced.power.limit": "power_limit",
    "power.limit": "power_limit2",
    "power.default_limit": "power_default",
    "ecc.mode.current": "ecc",
    "ecc.errors.uncorrected.volatile.total": "v_unc",
    "ecc.errors.uncorrected.aggregate.total": "a_unc",
    "ecc.errors.corrected.volatile.total": "v_corr",
    "ecc.errors.corrected.aggregate.total": "a_corr",
    "retired_pages.single_bit_ecc.count": "r_sbe",
    "retired_pages.double_bit.count": "r_dbe",
    "retired_pages.pending": "r_pending",
    "remapped_rows.correctable": "rm_corr",
    "remapped_rows.uncorrectable": "rm_unc",
    "remapped_rows.pending": "rm_pending",
    "remapped_rows.failure": "rm_failure",
    "mig.mode.current": "mig",
    "mig.mode.pending": "mig_pending",
    "pcie.link.gen.current": "gen",
    "pcie.link.gen.max": "gen_max",
    "pcie.link.width.current": "width",
    "pcie.link.width.max": "width_max",
    "fan.speed": "fan",
    "fabric.state": "fabric_state",
    "fabric.status": "fabric_status",
    "gpu_recovery_action": "recovery",
    "driver_version": "driver_version",
}


def csv_header(line: str) -> list[str] | None:
    """Field names of a ``--format=csv`` header line ("name, pci.bus_id, fan.speed [%]"), or None."""
    if len(line) > MAX_LINE * 4:
        return None
    fields = [f.strip() for f in line.split(",")]
    fields = [f[: f.rfind("[")].rstrip() if f.endswith("]") and "[" in f else f for f in fields]  # "fan.speed [%]"
    if len(fields) < 2 or not all(re.fullmatch(r"[a-z_][A-Za-z0-9_.]*", f) for f in fields):
        return None
    known = sum(1 for f in fields if f in _CSV_FIELDS or f.startswith(("clocks_", "ecc.", "temperature.", "memory.")))
    return fields if known else None


def parse_csv(text: str, source: str) -> SmiResult:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = csv_header(lines[0]) if lines else None
    if header is None:
        raise ParseFailure("no --query-gpu header line (was it run with --format=csv,noheader?)")
    result = SmiResult()
    try:
        rows = list(csv.reader(io.StringIO("\n".join(lines[1:])), skipinitialspace=True))
    except csv.Error as exc:
        raise ParseFailure(f"unreadable CSV ({exc})") from None
    for index, row in enumerate(rows):
        if len(row) != len(header):
            raise ParseFailure(f"row {index + 2} has {len(row)} values for {len(header)} columns")
        raw = dict(zip(header, row, strict=True))
        f = {_CSV_FIELDS[k]: clean(v) for k, v in raw.items() if k in _CSV_FIELDS}
        clocks: dict[str, bool] = {}
        label = "Clocks Event Reasons"
        for key, value in raw.items():
            m = re.fullmatch(r"clocks_(event|throttle)_reasons\.(\w+)", key)
            if m and m[2] in CLOCK_REASONS and flag(value) is not None:
                clocks[m[2]] = bool(flag(value))
                label = "Clocks Event Reasons" if m[1] == "event" else "Clocks Throttle Reasons"
        result.driver_version = result.driver_version or _version(f.get("driver_version"))
        result.gpus.append(
            GpuState(
                source=source,
                fmt="csv",
                index=integer(f.get("index")) if f.get("index") else index,
                bus_id=normalize_bus(f.get("bus")),
                name=f.get("name"),
                uuid=f.get("uuid"),
                persistence=flag(f.get("persistence")),
                driver_model=f.get("driver_model"),
                pstate=f.get("pstate"),
                util_gpu=number(f.get("util")),
                clocks_label=label,
                clocks=clocks,
                temp=number(f.get("temp")),
                power_draw=number(f.get("power_draw")),
                power_limit=number(f.get("power_limit") or f.get("power_limit2")),
                power_default_limit=number(f.get("power_default")),
                ecc_enabled=flag(f.get("ecc")),
                ecc_volatile_unc=integer(f.get("v_unc")),
                ecc_aggregate_unc=integer(f.get("a_unc")),
                ecc_volatile_corr=integer(f.get("v_corr")),
                ecc_aggregate_corr=integer(f.get("a_corr")),
                retired_sbe=integer(f.get("r_sbe")),
                retired_dbe=integer(f.get("r_dbe")),
                retired_pending=flag(f.get("r_pending")),
                remap_corr=integer(f.get("rm_corr")),
                remap_unc=integer(f.get("rm_unc")),
                remap_pending=flag(f.get("rm_pending")),
                remap_failure=flag(f.get("rm_failure")),
                mig_current=f.get("mig"),
                mig_pending=f.get("mig_pending"),
                pcie_gen=integer(f.get("gen")),
                pcie_gen_max=integer(f.get("gen_max")),
                pcie_width=integer(f.get("width")),
                pcie_width_max=integer(f.get("width_max")),
                fan=raw.get("fan.speed"),
                fabric_state=f.get("fabric_state"),
                fabric_status=f.get("fabric_status"),
                recovery_action=f.get("recovery"),
            )
        )
    if not result.gpus:
        raise ParseFailure("a --query-gpu header but no rows")
    return result


# -- nvlink -s -------------------------------------------------------------------------------
class NvlinkGpu(NamedTuple):
    index: int
    name: str
    uuid: str
    links: dict[int, str]  # link number -> "25.781 GB/s" | "<inactive>"
    note: str | None  # "Nvlink queries are not supported for Devices in MIG mode", ...


_NVLINK_GPU = re.compile(r"^GPU (\d{1,4}): (.+?) \(UUID: ([^)]+)\)\s*$")
_NVLINK_LINK = re.compile(r"^\s+Link (\d{1,4}): (.+?)\s*$")


def parse_nvlink(text: str) -> list[NvlinkGpu]:
    gpus: list[NvlinkGpu] = []
    for line in text.splitlines():
        m = _NVLINK_GPU.match(line)
        if m:
            gpus.append(NvlinkGpu(int(m[1]), m[2], m[3], {}, None))
            continue
        link = _NVLINK_LINK.match(line)
        if link and gpus:
            gpus[-1].links[int(link[1])] = link[2]
        elif line.strip() and gpus and not gpus[-1].links:
            gpus[-1] = gpus[-1]._replace(note=line.strip())
    if not gpus:
        raise ParseFailure("no 'GPU n: <name> (UUID: ...)' lines")
    return gpus
