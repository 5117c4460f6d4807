"""Parsers for nvidia-smi's own outputs: ``-q -x`` XML, ``-q`` text, the default table,
``--query-gpu`` CSV and ``nvlink -s``. Each returns normalised records (``state.GpuState``) or
raises ``ParseFailure`` with a short reason; the caller names the file.

Every pattern is linear in its input and the line-oriented formats skip lines longer than
``bounds.MAX_LINE`` (no nvidia-smi line is that long); rows of the table are split on ``|``
rather than matched whole (tests/unit/test_doctor_linear.py).

XML is parsed with the standard library (expat). Entity declarations are refused before
parsing, so nothing is ever expanded, and the ``<!DOCTYPE ... SYSTEM "nvsmi_device_vNN.dtd">``
line nvidia-smi writes is never fetched (expat does not load external DTDs).
"""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Callable
from dataclasses import fields as dataclass_fields
from typing import Any, NamedTuple

from provision.doctor.bounds import MAX_GPUS, MAX_LINE, MAX_MESSAGE_LINES, lines
from provision.doctor.state import CLOCK_REASONS, GpuState, SmiResult, normalize_bus
from provision.smi import (
    FIELDS,
    GPU_FIELDS,
    LOG_FIELDS,
    QUERY_ALIASES,
    TEXT_POWER,
    XML_POWER,
    Field,
    clean,
    first,
    flag,
    integer,
)
from provision.smi import version as _version

# The table's fields a GpuState carries; index and bus id are read as each format's identity.
_IDENTITY = ("index", "bus_id")
_STATE = {f.name for f in dataclass_fields(GpuState)}
STATE_FIELDS = tuple(f for f in GPU_FIELDS if f.name in _STATE and f.name not in _IDENTITY)


class ParseFailure(Exception):
    """The text is (or claims to be) a known format but cannot be read; str() says why."""


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _present(sections: tuple[str, ...], find: Callable[[str], Any]) -> str:
    """The first of ``sections`` this GPU has (the last when it has none)."""
    return next((s for s in sections if find(s) is not None), sections[-1])


def _read_fields(paths_of: str, read: Callable[[str], str | None], power: str) -> dict[str, Any]:
    """Every STATE_FIELDS field with ``paths_of`` ("xml" or "text") paths, through ``read``."""
    out: dict[str, Any] = {}
    for f in STATE_FIELDS:
        paths = tuple(p.replace("{power}", power) for p in getattr(f, paths_of))
        if not paths:
            continue
        if f.raw:
            out[f.name] = (read(paths[0]) or "").strip() or None
        else:
            out[f.name] = f.convert(first(paths, read))
    return out


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
        messages=_message_lines(outside),
        **{f.name: f.convert(first(f.xml, root.findtext)) for f in LOG_FIELDS if f.xml},
    )
    gpus = root.findall("gpu")
    _gpu_count(len(gpus))
    for i, gpu in enumerate(gpus):
        result.gpus.append(_xml_gpu(gpu, i, source))
    return result


def _gpu_count(n: int) -> None:
    if n > MAX_GPUS:
        raise ParseFailure(f"{n} GPUs listed: more than {MAX_GPUS} is not nvidia-smi output")


def _message_lines(text: str) -> list[str]:
    """Lines of text printed around a capture (warnings, errors), stripped: the first MAX_MESSAGE_LINES."""
    out: list[str] = []
    for ln in lines(text):
        if ln and not ln.isspace():
            out.append(ln.strip()[:MAX_LINE])
            if len(out) >= MAX_MESSAGE_LINES:
                break
    return out


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
    return GpuState(
        source=source,
        fmt="-q -x",
        index=index,
        bus_id=normalize_bus(gpu.get("id") or first(FIELDS["bus_id"].xml, gpu.findtext)),
        clocks_label=label,
        clocks=clocks,
        ecc_volatile_unc=v_unc,
        ecc_aggregate_unc=a_unc,
        ecc_volatile_corr=v_corr,
        ecc_aggregate_corr=a_corr,
        **_read_fields("xml", gpu.findtext, _present(XML_POWER, gpu.find)),
    )


# -- -q text ---------------------------------------------------------------------------------
class Node:
    __slots__ = ("_index", "children", "name", "value")

    def __init__(self, name: str, value: str | None) -> None:
        self.name = name
        self.value = value
        self.children: list[Node] = []
        self._index: tuple[int, dict[str, Node]] | None = None  # (children seen, lower name -> first child)

    def child(self, want: str) -> Node | None:
        """The first child called ``want`` (lower case): a dict, so a GPU section of 100,000 lines
        answers the parser's fifty lookups without reading them fifty times."""
        if self._index is None or self._index[0] != len(self.children):
            index: dict[str, Node] = {}
            for c in self.children:
                index.setdefault(c.name.lower(), c)
            self._index = (len(self.children), index)
        return self._index[1].get(want)

    def get(self, *path: str) -> Node | None:
        """The node at a path of labels (any case); a label ending in ``*`` is a prefix."""
        node: Node | None = self
        for name in path:
            if node is None:
                return None
            want = name.lower()
            if want.endswith("*"):
                node = next((c for c in node.children if c.name.lower().startswith(want[:-1])), None)
            else:
                node = node.child(want)
        return node

    def v(self, *path: str) -> str | None:
        node = self.get(*path)
        return clean(node.value) if node is not None else None

    def label(self, path: str) -> str | None:
        """The printed value at a ``/``-separated label path ("Temperature/GPU Current Temp")."""
        node = self.get(*path.split("/"))
        return node.value if node is not None else None

    def find(self, name: str) -> Node | None:
        """Depth-first search for a descendant called ``name`` (iterative: no recursion limit)."""
        stack = list(reversed(self.children))
        while stack:
            node = stack.pop()
            if node.name.lower() == name.lower():
                return node
            stack.extend(reversed(node.children))
        return None


# "    Product Name                          : NVIDIA H100": the first colon with space before it
# and space or the end after it (a lookbehind: one step per character, where "(\S.*?)\s+:" went
# back over every run of spaces)
_KV_COLON = re.compile(r"(?<=\s):(?=\s|$)")
_GPU_HEADER = re.compile(r"^GPU\s++([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*+$")
NVSMI_LOG = "==============NVSMI LOG=============="


def text_tree(text: str) -> Node:
    """The indentation tree of ``nvidia-smi -q`` output (everything after the NVSMI LOG line)."""
    root = Node("", None)
    marker = text.find(NVSMI_LOG)
    body = text[marker + len(NVSMI_LOG) :] if marker >= 0 else text
    stack: list[tuple[int, Node]] = [(-1, root)]
    for raw in lines(body):
        if len(raw) > MAX_LINE:  # before expandtabs: a line of tabs grows eightfold
            continue
        line = raw.expandtabs(8).rstrip()
        if not line.strip() or len(line) > MAX_LINE:
            continue
        indent = len(line) - len(line.lstrip())
        content = line.strip()
        m = _KV_COLON.search(content)
        if m:
            node = Node(content[: m.start()].rstrip(), content[m.end() :].strip())
        else:
            node = Node(content.rstrip(":").strip(), None)
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def parse_q_text(text: str, source: str) -> SmiResult:
    if NVSMI_LOG not in text:
        raise ParseFailure("no '==============NVSMI LOG==============' header")
    root = text_tree(text)
    result = SmiResult(**{f.name: f.convert(first(f.text, root.label)) for f in LOG_FIELDS if f.text})
    index = 0
    for node in root.children:
        m = _GPU_HEADER.match(node.name)
        if m:
            _gpu_count(index + 1)
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
    return GpuState(
        source=source,
        fmt="-q",
        index=index,
        bus_id=normalize_bus(bus),
        clocks_label=label,
        clocks=clocks,
        ecc_volatile_unc=v_unc,
        ecc_aggregate_unc=a_unc,
        ecc_volatile_corr=v_corr,
        ecc_aggregate_corr=a_corr,
        **_read_fields("text", g.label, _present(TEXT_POWER, g.get)),
    )


# -- default table ---------------------------------------------------------------------------
_TABLE_HEAD = re.compile(
    r"NVIDIA-SMI\s++(\S{1,32})\s++(?:Driver|KMD) Version:\s*+(\S{1,32})\s++CUDA(?: UMD)? Version:\s*+(\S{1,32})"
)
_BUS_CELL = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_PERSISTENCE = ("On", "Off", "N/A", "WDDM", "TCC", "MCDM")

# A GPU's three table rows, as tuples numbered like a match's groups (index 0 the whole row):
# the field table (provision.smi, Field.table) names a value by (row, group).
#   1: |   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                    0 |
#      (index, name, persistence, bus id, display, volatile uncorrectable ECC)
#   2: | N/A   29C    P0             69W /  700W |       4MiB /  81559MiB |      0%      Default |
#      (fan, temperature, perf, power, memory, utilisation, compute mode)
#   3: |                                         |                        |             Disabled |
#      (MIG mode)
Row = tuple[str, ...]


def _cells(line: str) -> list[str] | None:
    """The cells of a table line "| a | b | c |" (None for anything else)."""
    text = line.strip()
    if len(text) > MAX_LINE or not text.startswith("|") or not text.endswith("|"):
        return None
    return [c.strip() for c in text[1:-1].split("|")]


def _row1(line: str) -> Row | None:
    cells = _cells(line)
    if cells is None or len(cells) < 3:
        return None
    left, mid = cells[0].split(), cells[1].split()
    if len(left) < 3 or not left[0].isdigit() or len(left[0]) > 4 or left[-1] not in _PERSISTENCE:
        return None
    if len(mid) != 2 or not _BUS_CELL.fullmatch(mid[0]):
        return None
    return (line, left[0], " ".join(left[1:-1]), left[-1], mid[0], mid[1], cells[2])


def _row2(line: str) -> Row | None:
    cells = _cells(line)
    if cells is None or len(cells) < 3:
        return None
    left, right = cells[0].split(maxsplit=3), cells[2].split(maxsplit=1)
    if len(left) < 3 or not right:
        return None
    return (line, *left[:3], left[3] if len(left) > 3 else "", cells[1], right[0], right[1] if len(right) > 1 else "")


def _row3(line: str) -> Row | None:
    cells = _cells(line)
    if cells is None or len(cells) < 3 or cells[0] or cells[1] or not cells[2] or len(cells[2].split()) != 1:
        return None
    return (line, cells[2])


def _cell(f: Field, row: Row | None, group: int) -> Any:
    if row is None:
        return None
    return row[group] if f.raw else f.convert(clean(row[group]))


def parse_table(text: str, source: str) -> SmiResult:
    head = _TABLE_HEAD.search(text)
    if not head:
        raise ParseFailure("no 'NVIDIA-SMI ... Driver Version ... CUDA Version' header line")
    result = SmiResult(driver_version=_version(head[2]), cuda_version=_version(head[3]))
    window: list[str] = []  # the line and the two after it
    stream = lines(text)
    trailer: list[str] = []
    for line in itertools.chain(stream, ("", "")):
        window.append(line)
        if len(window) < 3:
            continue
        first = window.pop(0)
        if first.strip() and not first.lstrip().startswith(("|", "+")) and len(trailer) < MAX_MESSAGE_LINES:
            trailer.append(first.strip()[:MAX_LINE])
        m = _row1(first)
        if not m:
            continue
        _gpu_count(len(result.gpus) + 1)
        rows = {1: m, 2: _row2(window[0]), 3: _row3(window[1])}
        row2 = rows[2]
        # The persistence column says WDDM/TCC/MCDM on Windows; a name is kept as printed.
        windows = m[3] in ("WDDM", "TCC", "MCDM")
        result.gpus.append(
            GpuState(
                source=source,
                fmt="table",
                index=int(m[1]),
                bus_id=normalize_bus(m[4]),
                name=m[2].strip(),
                persistence=None if windows else flag(m[3]),
                driver_model=m[3] if windows else None,
                pstate=row2[3] if row2 and _PSTATE.fullmatch(row2[3]) else None,
                **{f.name: _cell(f, rows[f.table[0]], f.table[1]) for f in STATE_FIELDS if f.table},
            )
        )
    result.messages.extend(trailer)
    return result


_PSTATE = re.compile(r"P\d{1,2}")


# -- --query-gpu CSV -------------------------------------------------------------------------
# The --query-gpu columns doctor reads (the GPU's and the host's), other spellings included.
_CSV_FIELDS = {q for f in (*LOG_FIELDS, *(g for g in GPU_FIELDS if g.name in _STATE)) for q in f.query}
_CSV_FIELDS |= {alias for alias, name in QUERY_ALIASES.items() if name in _CSV_FIELDS}


_CSV_NAME = re.compile(r"[a-z_][A-Za-z0-9_.]{0,127}")


def csv_header(line: str) -> list[str] | None:
    """Field names of a ``--format=csv`` header line ("name, pci.bus_id, fan.speed [%]"), or None."""
    if len(line) > MAX_LINE * 4:
        return None
    fields = [f.strip() for f in line.split(",")]
    fields = [f[: f.rfind("[")].rstrip() if f.endswith("]") and "[" in f else f for f in fields]  # "fan.speed [%]"
    if len(fields) < 2 or not all(_CSV_NAME.fullmatch(f) for f in fields):
        return None
    known = sum(1 for f in fields if f in _CSV_FIELDS or f.startswith(("clocks_", "ecc.", "temperature.", "memory.")))
    return fields if known else None


def parse_csv(text: str, source: str) -> SmiResult:
    rest = (ln for ln in lines(text) if ln and not ln.isspace())
    top = next(rest, None)
    header = csv_header(top) if top is not None else None
    if header is None:
        raise ParseFailure("no --query-gpu header line (was it run with --format=csv,noheader?)")
    result = SmiResult()
    try:
        rows = list(itertools.islice(csv.reader(rest, skipinitialspace=True), MAX_GPUS + 1))
    except csv.Error as exc:
        raise ParseFailure(f"unreadable CSV ({exc})") from None
    _gpu_count(len(rows))
    for index, row in enumerate(rows):
        if len(row) != len(header):
            raise ParseFailure(f"row {index + 2} has {len(row)} values for {len(header)} columns")
        raw = dict(zip(header, row, strict=True))
        # one value per property: of two spellings of it (name, gpu_name), the later column counts
        f = {QUERY_ALIASES.get(k, k): clean(v) for k, v in raw.items() if k in _CSV_FIELDS}
        clocks: dict[str, bool] = {}
        label = "Clocks Event Reasons"
        for key, value in raw.items():
            m = re.fullmatch(r"clocks_(event|throttle)_reasons\.(\w+)", key)
            if m and m[2] in CLOCK_REASONS and flag(value) is not None:
                clocks[m[2]] = bool(flag(value))
                label = "Clocks Event Reasons" if m[1] == "event" else "Clocks Throttle Reasons"
        for fld in LOG_FIELDS:
            if fld.query and getattr(result, fld.name) is None:
                setattr(result, fld.name, fld.convert(first(fld.query, f.get)))
        given = f.get(FIELDS["index"].query[0])
        result.gpus.append(
            GpuState(
                source=source,
                fmt="csv",
                index=integer(given) if given else index,
                bus_id=normalize_bus(first(FIELDS["bus_id"].query, f.get)),
                clocks_label=label,
                clocks=clocks,
                **{
                    fld.name: raw.get(fld.query[0]) if fld.raw else fld.convert(first(fld.query, f.get))
                    for fld in STATE_FIELDS
                    if fld.query
                },
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


_NVLINK_GPU = re.compile(r"GPU (\d{1,4}): ")
_NVLINK_LINK = re.compile(r"^[ \t]++Link (\d{1,4}): (.*)")
_UUID = " (UUID: "


def nvlink_gpu(line: str) -> tuple[int, str, str] | None:
    """(index, name, uuid) of an ``nvlink -s`` / ``-L`` GPU line "GPU 0: NVIDIA A100 (UUID: GPU-...)";
    read with str methods: a regex "(.+?) \\(UUID: ([^)]+)\\)" scans the rest of the line from
    every "(UUID: " in it."""
    if len(line) > MAX_LINE:
        return None
    m = _NVLINK_GPU.match(line)
    rest = line[m.end() :].rstrip() if m else ""
    at = rest.rfind(_UUID)
    if at <= 0 or not rest.endswith(")"):
        return None
    uuid = rest[at + len(_UUID) : -1]
    if not uuid or ")" in uuid:
        return None
    return int(m[1]), rest[:at], uuid  # type: ignore[index]


def parse_nvlink(text: str) -> list[NvlinkGpu]:
    gpus: list[NvlinkGpu] = []
    for line in lines(text):
        if not line or len(line) > MAX_LINE:
            continue
        gpu = nvlink_gpu(line)
        if gpu:
            _gpu_count(len(gpus) + 1)
            gpus.append(NvlinkGpu(*gpu, {}, None))
            continue
        link = _NVLINK_LINK.match(line)
        state = link[2].strip() if link else ""
        if link and state and gpus:
            gpus[-1].links[int(link[1])] = state
        elif line.strip() and gpus and not gpus[-1].links:
            gpus[-1] = gpus[-1]._replace(note=line.strip())
    if not gpus:
        raise ParseFailure("no 'GPU n: <name> (UUID: ...)' lines")
    return gpus
