"""What is this text? Decided from the content; a file name is only a tie-breaker.

``classify(text, name)`` returns one of ``KINDS``. Diagnosable kinds are the rows of the inputs
table (``provision.doctor.inputs.INPUTS``: the collector's section keys plus ``query-gpu-csv``);
the NVIDIA outputs are told apart here, in this order, and the rows with a recogniser (the
BMC's) after them, in the table's order; ``collector-bundle`` and
``capture-bundle`` are containers that are split into sections; everything else in ``KINDS``
is recognised but either carries no health signal (``nvidia-smi topo -m``, ``pmon``,
``mig -lgip``, ``--help-query-gpu``, ``-L`` ...) or is not an NVIDIA tool's output at all, and
``diagnose_files`` rejects it with an ``InputError`` that says what the file looks like.

Nothing here parses a foreign document (a YAML alias bomb stays text): JSON and YAML are told by
their first lines, and every pattern is linear in its input.
"""

from __future__ import annotations

import itertools
import json
import re

from provision.doctor import bounds
from provision.doctor.inputs import BY_KEY, INPUTS, recognise
from provision.doctor.parse_log import PROC_VERSION_LINE, has_kernel_prefix, is_fabric_manager_line, scan_messages
from provision.doctor.parse_smi import NVSMI_LOG, csv_header, nvlink_gpu

# The collector's section keys, in the order it prints them: the table's rows (provision.doctor.inputs).
SECTION_KEYS = tuple(row.key for row in INPUTS if row.section)

# Sections the collector may add that carry context only (listed under ``read``, not analysed).
INFO_KEYS = frozenset({"kernel-log-source"})

KINDS = {
    # diagnosable: the table's rows
    **{row.key: row.what for row in INPUTS},
    # containers
    "collector-bundle": "a provision doctor collector bundle",
    "capture-bundle": "a multi-command nvidia-smi capture bundle",
    # recognised, nothing to diagnose
    "nvidia-smi-L": "nvidia-smi -L (a GPU list: no health data)",
    "nvidia-smi-help": "nvidia-smi help text (a field reference, not a capture)",
    "nvidia-smi-version": "nvidia-smi --version (versions only)",
    "topo": "nvidia-smi topo -m / -p2p (a topology matrix: no health data)",
    "pmon": "nvidia-smi pmon (per-process utilisation: no health data)",
    "dmon": "nvidia-smi dmon (a utilisation sample: no health data)",
    "mig-list": "nvidia-smi mig -lgip/-lgi/-lcip (a MIG layout listing: no health data)",
    "query-csv-noheader": "a CSV without a header line (--format=csv,noheader): the columns are unknown",
    "query-other-csv": "an nvidia-smi --query-* CSV other than --query-gpu (process/accounting list)",
    # foreign
    "empty": "an empty file",
    "binary": "binary data",
    "json": "JSON",
    "yaml": "YAML",
    "html": "HTML",
    "xml-other": "XML that is not nvidia-smi -q -x output",
    "text": "text with no NVIDIA tool output doctor recognises",
}
DIAGNOSABLE = frozenset(BY_KEY)
CLASSIFY_LINES = 10_000
CONTAINERS = frozenset({"collector-bundle", "capture-bundle"})

# "===== provision-doctor: <key> ===== <token>", the token random per run (collect.new_token): a
# host that prints a marker cannot start a section, since the collector passes no output that
# holds the token. A marker ends its line; it may follow output that had no trailing newline.
# Bundles saved before markers carried a token have none.
COLLECTOR_MARKER = re.compile(
    r"===== provision-doctor: (?P<key>[A-Za-z0-9_.-]{1,64}) =====(?: (?P<token>[0-9a-f]{32}))?[ \t]*+$", re.M
)
_CAPTURE_HEADER = re.compile(r"^#{20,}+\n# (?P<title>[^\n]*)\n(?:# \$ (?P<cmd>[^\n]*)\n)?#{20,}+\n", re.M)
_TABLE_HEAD = re.compile(r"^\|[ \t]*+NVIDIA-SMI[ \t]++\S{1,32}[ \t]++(?:Driver|KMD) Version:", re.M)
_NVLINK_LINK = re.compile(r"^[ \t]++Link \d{1,4}: ", re.M)
_NVLINK_WORD = re.compile(r"nvlink", re.I)
_MODULE_LINE = re.compile(
    r"^[A-Za-z0-9_]{1,64} \d{1,12} \d{1,6} \S{1,4096} (?:Live|Loading|Unloading) 0x[0-9a-f]{1,16}", re.M
)
_NVRM = re.compile(r"\bNVRM: ")
_MODULE_HEAD = re.compile(r"^Module[ \t]++Size[ \t]++Used by", re.M)
_SECURE_BOOT = re.compile(r"SecureBoot (?:enabled|disabled)")
_XML_HEAD = re.compile(r"<\?xml[^>]{0,256}>\s*+<!DOCTYPE nvidia_smi_log")
_SMI_VERSION = re.compile(r"^NVIDIA-SMI version[ \t]*+:", re.M)
_TOPO_LEGEND = re.compile(r"X[ \t]++= Self")
_PMON = re.compile(r"^#[ \t]*+gpu[ \t]++pid[ \t]++type", re.M)
_DMON = re.compile(r"^#[ \t]*+gpu[ \t]++pwr[ \t]++gtemp", re.M)
_MIG_LIST = re.compile(r"\|[ \t]*+(?:GPU instance profiles|GPU instances|Compute instance profiles|Compute instances):")
_OTHER_QUERY = re.compile(r"^[ \t]*+(?:timestamp, )?(?:gpu_name|gpu_bus_id|pid|retired_pages)")
_NVIDIA_NAME = re.compile(r"NVIDIA|Tesla|GeForce|Quadro|[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d")
_HTML = re.compile(r"(?is)(<!doctype html|<html|<head|<body)")
_YAML_LINE = re.compile(r"^(?:- )?[\w.-]{1,64}:(?:[ \t]|$)")
_SMI_IDS = {
    "nvidia-smi-timeout",
    "driver-library-mismatch",
    "nvml-library-version",
    "driver-not-loaded",
    "no-devices",
    "nvml-not-found",
    "nvml-unknown-error",
    "nvml-no-permission",
    "gpu-lost",
    "gpu-reset-required",
    "inforom-corrupted",
}


def _printable_ratio(text: str) -> float:
    sample = text[:4096]
    bad = sum(1 for ch in sample if (ord(ch) < 32 and ch not in "\t\n\r\x1b\x0c") or ch == "\ufffd")
    return 1 - bad / max(1, len(sample))


def classify(text: str, name: str = "") -> str:
    """The kind of ``text`` (a key of ``KINDS``); ``name`` only breaks ties."""
    stripped = text.strip()
    if not stripped:
        return "empty"
    if "\x00" in text[:65536] or _printable_ratio(text) < 0.95:
        return "binary"
    if COLLECTOR_MARKER.search(text):
        return "collector-bundle"
    if _CAPTURE_HEADER.search(text) and "nvidia-smi" in text:
        return "capture-bundle"
    head = stripped[:2048]
    if "<nvidia_smi_log" in text[:65536] or _XML_HEAD.match(head):
        return "nvidia-smi-q-x"
    if NVSMI_LOG in text:
        return "nvidia-smi-q"
    if _TABLE_HEAD.search(text):
        return "nvidia-smi"
    # the first CLASSIFY_LINES lines decide (a 200 MB log is not listed whole to be named)
    lines = list(itertools.islice((ln for ln in bounds.lines(text) if ln and not ln.isspace()), CLASSIFY_LINES))
    if any(nvlink_gpu(ln) for ln in lines):
        if _NVLINK_LINK.search(text) or _NVLINK_WORD.search(text):
            return "nvlink-s"
        return "nvidia-smi-L"
    if sum(1 for ln in lines if is_fabric_manager_line(ln)) >= max(1, len(lines) // 4):
        return "fabricmanager-log"
    kernelish = sum(1 for ln in lines if has_kernel_prefix(ln))
    if kernelish >= max(1, len(lines) // 2) or _NVRM.search(text):
        return "kernel-log"
    ids = {m.id for m in scan_messages(text)}
    if ids & _SMI_IDS:
        return "nvidia-smi-stderr"
    if ids:
        return "app-log"
    if PROC_VERSION_LINE.search(text):
        return "proc-driver-version"
    if _MODULE_HEAD.search(text) or sum(1 for ln in lines if _MODULE_LINE.match(ln)) >= max(1, len(lines) // 2):
        return "modules"
    if _SECURE_BOOT.search(text):
        return "secure-boot"
    kind = _other_nvidia(text, lines) or recognise(text)
    if kind:
        return kind
    return _foreign(stripped, name)


def _other_nvidia(text: str, lines: list[str]) -> str | None:
    if "List of valid properties to query" in text or "NVIDIA System Management Interface -- v" in text:
        return "nvidia-smi-help"
    if _SMI_VERSION.search(text):
        return "nvidia-smi-version"
    if "Legend:" in text and _TOPO_LEGEND.search(text):
        return "topo"
    if _PMON.search(text):
        return "pmon"
    if _DMON.search(text):
        return "dmon"
    if _MIG_LIST.search(text):
        return "mig-list"
    first = lines[0] if lines else ""
    if csv_header(first):
        return "query-gpu-csv"
    if _OTHER_QUERY.match(first) and "," in first:
        return "query-other-csv"
    if lines and all("," in ln for ln in lines) and _NVIDIA_NAME.search(text):
        return "query-csv-noheader"
    return None


def _foreign(stripped: str, name: str) -> str:
    low_name = name.lower()
    if stripped[:1] in "{[" and len(stripped) <= JSON_PARSED:
        try:
            json.loads(stripped)
            return "json"
        except (ValueError, RecursionError):
            pass
    elif stripped[:1] in "{[" and stripped[-1:] in "}]":
        return "json"  # too large to parse only to name it
    if _HTML.match(stripped[:200]):
        return "html"
    if stripped.startswith("<"):
        return "xml-other"
    # Name hints for plain logs that carry no NVIDIA lines at all (a healthy host's dmesg).
    if re.search(r"dmesg|kern|journal", low_name):
        return "kernel-log"
    if re.search(r"lsmod|modules", low_name):
        return "modules"
    if re.search(r"fabricmanager|fabric-manager", low_name):
        return "fabricmanager-log"
    if _looks_like_yaml(stripped):
        return "yaml"
    return "text"


JSON_PARSED = 1 << 20  # JSON up to this size is parsed to tell it from text that starts with "["


def _looks_like_yaml(stripped: str) -> bool:
    """YAML told by its first lines, never parsed (an alias bomb is a few hundred bytes): a "---"
    start, or most of the first 20 lines "key: value" / "- key: value" / indented."""
    head = [ln for ln in stripped[:4096].splitlines()[:20] if ln.strip() and not ln.lstrip().startswith("#")]
    if stripped.startswith("---"):
        return True
    keyed = sum(1 for ln in head if _YAML_LINE.match(ln.lstrip()))
    return bool(head) and _YAML_LINE.match(head[0]) is not None and keyed * 2 > len(head)


def split_bundle(text: str, token: str | None = None) -> dict[str, str]:
    """Sections of a collector bundle: ``===== provision-doctor: <key> ===== <token>`` starts a section.

    ``token``: the run's token (the collector's output as it arrives): only markers that carry it
    count, and any other marker is text of the section it is in. Without it (a bundle saved with
    --save-dir and read again) the token is the first marker's; a bundle saved before markers
    carried a token is read by its plain markers.

    Text before the first marker is dropped. A marker glued to the end of the previous
    section's last line (output without a trailing newline) still counts. A key that appears
    twice has its texts joined with a newline (a kernel log gathered from two sources stays one
    log).
    """
    parts: dict[str, list[str]] = {}
    start: tuple[str, int] | None = None  # (key, end of its marker)
    for m in COLLECTOR_MARKER.finditer(text):
        if token is None:
            token = m["token"] or ""  # the first marker decides; "" = markers without a token
        if (m["token"] or "") != token:
            continue
        if start is not None:
            _keep(parts, start, text, m.start())
        start = (m["key"], m.end())
    if start is not None:
        _keep(parts, start, text, len(text))
    return {key: "\n".join(bodies) for key, bodies in parts.items()}


def _keep(parts: dict[str, list[str]], start: tuple[str, int], text: str, end: int) -> None:
    key, begin = start
    body = text[begin:end]
    parts.setdefault(key, []).append(body[1:] if body.startswith("\n") else body)


# What a capture-bundle command is, as a section key (None: kept but not analysed).
def _capture_key(cmd: str) -> str | None:
    c = " ".join(cmd.split())
    if re.fullmatch(r"nvidia-smi -q -x|nvidia-smi -x -q", c):
        return "nvidia-smi-q-x"
    if c == "nvidia-smi -q":
        return "nvidia-smi-q"
    if c == "nvidia-smi":
        return "nvidia-smi"
    if c == "nvidia-smi nvlink -s":
        return "nvlink-s"
    if c.startswith("nvidia-smi --query-gpu="):
        return "query-gpu-csv"
    return None


def split_capture_bundle(text: str) -> list[tuple[str, str | None, str]]:
    """(title, section key or None, body) for each block of a multi-command capture bundle."""
    out: list[tuple[str, str | None, str]] = []
    matches = list(_CAPTURE_HEADER.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        cmd = m["cmd"] or ""
        out.append((m["title"].strip(), _capture_key(cmd) if cmd else None, text[m.end() : end]))
    return out
