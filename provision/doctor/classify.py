"""What is this text? Decided from the content; a file name is only a tie-breaker.

``classify(text, name)`` returns one of ``KINDS``. Diagnosable kinds are the collector's
section keys (``SECTION_KEYS``) plus ``query-gpu-csv``; ``collector-bundle`` and
``capture-bundle`` are containers that are split into sections; everything else in ``KINDS``
is recognised but either carries no health signal (``nvidia-smi topo -m``, ``pmon``,
``mig -lgip``, ``--help-query-gpu``, ``-L`` ...) or is not an NVIDIA tool's output at all, and
``diagnose_files`` rejects it with an ``InputError`` that says what the file looks like.
"""

from __future__ import annotations

import json
import re

from provision.doctor.parse_log import has_kernel_prefix, is_fabric_manager_line, scan_messages
from provision.doctor.parse_smi import NVSMI_LOG, csv_header

# The collector's section keys, in the order it prints them.
SECTION_KEYS = (
    "nvidia-smi-q-x",
    "nvidia-smi-q",
    "nvidia-smi",
    "nvidia-smi-stderr",
    "nvidia-smi-rc",
    "nvlink-s",
    "kernel-log",
    "proc-driver-version",
    "modules",
    "fabricmanager-log",
    "app-log",
    "secure-boot",
    "uname-r",
)

# Sections the collector may add that carry context only (listed under ``read``, not analysed).
INFO_KEYS = frozenset({"kernel-log-source"})

KINDS = {
    # diagnosable
    "nvidia-smi-q-x": "nvidia-smi -q -x XML",
    "nvidia-smi-q": "nvidia-smi -q text",
    "nvidia-smi": "the default nvidia-smi table",
    "nvidia-smi-stderr": "nvidia-smi / NVML error output",
    "nvidia-smi-rc": "nvidia-smi's exit code",
    "nvlink-s": "nvidia-smi nvlink -s",
    "kernel-log": "a kernel log (dmesg / journalctl -k)",
    "proc-driver-version": "/proc/driver/nvidia/version",
    "modules": "loaded kernel modules (/proc/modules or lsmod)",
    "fabricmanager-log": "an NVIDIA fabric manager log",
    "app-log": "application output with CUDA / framework errors",
    "secure-boot": "mokutil --sb-state output",
    "uname-r": "the running kernel release (uname -r)",
    "query-gpu-csv": "nvidia-smi --query-gpu CSV",
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
DIAGNOSABLE = frozenset(SECTION_KEYS) | {"query-gpu-csv"}
CONTAINERS = frozenset({"collector-bundle", "capture-bundle"})

# A marker ends its line; it may follow output that had no trailing newline.
COLLECTOR_MARKER = re.compile(r"===== provision-doctor: (?P<key>[A-Za-z0-9_.-]+) =====[ \t]*$", re.M)
_CAPTURE_HEADER = re.compile(r"^#{20,}\n# (?P<title>[^\n]*)\n(?:# \$ (?P<cmd>[^\n]*)\n)?#{20,}\n", re.M)
_TABLE_HEAD = re.compile(r"^\|\s*NVIDIA-SMI\s+\S+\s+(?:Driver|KMD) Version:", re.M)
_NVLINK_GPU = re.compile(r"^GPU \d+: .+ \(UUID: [^)]+\)\s*$", re.M)
_MODULE_LINE = re.compile(r"^[A-Za-z0-9_]+ \d+ \d+ \S+ (?:Live|Loading|Unloading) 0x[0-9a-f]+", re.M)
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
    if "<nvidia_smi_log" in text[:65536] or re.match(r"<\?xml[^>]*>\s*<!DOCTYPE nvidia_smi_log", head):
        return "nvidia-smi-q-x"
    if NVSMI_LOG in text:
        return "nvidia-smi-q"
    if _TABLE_HEAD.search(text):
        return "nvidia-smi"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if _NVLINK_GPU.search(text):
        if re.search(r"^\s+Link \d+: ", text, re.M) or re.search(r"nvlink", text, re.I):
            return "nvlink-s"
        return "nvidia-smi-L"
    if sum(1 for ln in lines if is_fabric_manager_line(ln)) >= max(1, len(lines) // 4):
        return "fabricmanager-log"
    kernelish = sum(1 for ln in lines if has_kernel_prefix(ln))
    if kernelish >= max(1, len(lines) // 2) or re.search(r"\bNVRM: ", text):
        return "kernel-log"
    ids = {m.id for m in scan_messages(text)}
    if ids & _SMI_IDS:
        return "nvidia-smi-stderr"
    if ids:
        return "app-log"
    if re.search(r"NVRM version:.*Kernel Module", text):
        return "proc-driver-version"
    if re.search(r"^Module\s+Size\s+Used by", text, re.M) or len(_MODULE_LINE.findall(text)) >= max(1, len(lines) // 2):
        return "modules"
    if re.search(r"SecureBoot (?:enabled|disabled)", text):
        return "secure-boot"
    kind = _other_nvidia(text, lines)
    if kind:
        return kind
    return _foreign(stripped, name)


def _other_nvidia(text: str, lines: list[str]) -> str | None:
    if "List of valid properties to query" in text or "NVIDIA System Management Interface -- v" in text:
        return "nvidia-smi-help"
    if re.search(r"^NVIDIA-SMI version\s*:", text, re.M):
        return "nvidia-smi-version"
    if "Legend:" in text and re.search(r"X\s+= Self", text):
        return "topo"
    if re.search(r"^#\s*gpu\s+pid\s+type", text, re.M):
        return "pmon"
    if re.search(r"^#\s*gpu\s+pwr\s+gtemp", text, re.M):
        return "dmon"
    if re.search(r"\|\s*(?:GPU instance profiles|GPU instances|Compute instance profiles|Compute instances):", text):
        return "mig-list"
    first = lines[0] if lines else ""
    if csv_header(first):
        return "query-gpu-csv"
    if re.match(r"^\s*(?:timestamp, )?(?:gpu_name|gpu_bus_id|pid|retired_pages)", first) and "," in first:
        return "query-other-csv"
    csvish = [ln for ln in lines if ln.count(",") >= 1]
    if (
        csvish
        and len(csvish) == len(lines)
        and re.search(r"NVIDIA|Tesla|GeForce|Quadro|[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d", text)
    ):
        return "query-csv-noheader"
    return None


def _foreign(stripped: str, name: str) -> str:
    low_name = name.lower()
    if stripped[:1] in "{[":
        try:
            json.loads(stripped)
            return "json"
        except (ValueError, RecursionError):
            pass
    if re.match(r"(?is)(<!doctype html|<html|<head|<body)", stripped[:200]):
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
    if len(stripped) < 1_000_000 and (re.search(r"(?m)^[\w.-]+:\s+\S", stripped[:2048]) or stripped.startswith("---")):
        try:
            import yaml

            doc = yaml.safe_load(stripped)
            if isinstance(doc, dict | list):
                return "yaml"
        except Exception:
            pass
    return "text"


def split_bundle(text: str) -> dict[str, str]:
    """Sections of a collector bundle: ``===== provision-doctor: <key> =====`` starts a section.

    Text before the first marker is dropped. A marker glued to the end of the previous
    section's last line (output without a trailing newline) still counts. A key that appears
    twice has its texts joined with a newline (a kernel log gathered from two sources stays one
    log).
    """
    sections: dict[str, str] = {}
    matches = list(COLLECTOR_MARKER.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[m.end() : end]
        body = body[1:] if body.startswith("\n") else body
        key = m["key"]
        sections[key] = f"{sections[key]}\n{body}" if key in sections else body
    return sections


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
