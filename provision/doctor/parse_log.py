"""Parsers for logs and small host facts: the kernel log (dmesg in its time formats, journalctl
-k), the fabric manager log, error messages of nvidia-smi/NVML/CUDA/frameworks found in any
text, /proc/driver/nvidia/version, loaded modules, mokutil output.

They never fail on unknown lines: a log is mostly lines doctor has no opinion about.

Every pattern here is linear in its input (no two unbounded quantifiers that can trade
characters, no unbounded gap between two literals: gaps are bounded, quantifiers possessive where
they meet), and the patterns read each line only up to ``bounds.MAX_LINE`` characters, so no
hostile line makes doctor slow; tests/unit/test_doctor_linear.py feeds each 1 MB adversarial lines.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable
from typing import NamedTuple

from provision.doctor.bounds import MAX_JOINED, MAX_LINE, line_note, lines
from provision.doctor.state import normalize_bus

# Kernel-log line prefixes, in the formats dmesg and journalctl print them.
_PREFIXES = (
    re.compile(r"^\w+\s*:\s*\w+\s*:\s+"),  # dmesg --decode: "kern  :warn  : "
    re.compile(r"^\[\s*\d+\.\d+\]\s*"),  # dmesg
    re.compile(r"^\[\w{3} \w{3}\s+\d+ \d\d:\d\d:\d\d \d{4}\]\s*"),  # dmesg -T / --ctime
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:[+-]\d{2}:?\d{2}|Z)? \S+ kernel:\s*"),  # short-iso
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[,.]\d+)?(?:[+-]\d\d:?\d\d|Z)?\s+"),  # --time-format iso
    re.compile(r"^\w{3} [ \d]\d \d\d:\d\d:\d\d \S+ kernel:\s*"),  # journalctl -k / syslog
)

XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.\d)?)\):?\s*+(\d{1,6})\b[,:]?\s*+(.*)"
)
SXID = re.compile(r"SXid \((?:PCI:)?([0-9A-Fa-f:.]{1,20})\):?\s*+(\d{1,6})\b[,:]?\s*+(.*)")
_BUS_IN_TEXT = re.compile(r"\b([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?)\b")


def bounded(line: str) -> tuple[str, str]:
    """(the part of ``line`` the patterns read, the evidence's note when it was cut, else "")."""
    if len(line) <= MAX_LINE:
        return line, ""
    return line[:MAX_LINE], line_note(len(line))


def strip_prefix(line: str) -> str:
    """The message part of a kernel-log line (timestamps, host and facility removed)."""
    out = line
    for _ in range(3):  # "kern :warn : <iso>" stacks two prefixes; "kernel: [ 1.2]" too
        for rx in _PREFIXES:
            m = rx.match(out)
            if m:
                out = out[m.end() :]
                break
        else:
            break
    return out.strip()


def has_kernel_prefix(line: str) -> bool:
    return any(rx.match(line) for rx in _PREFIXES)


class KernelLine(NamedTuple):
    raw: str  # the line as it appeared (continuations joined with " "), cut to MAX_LINE per physical line
    msg: str  # without the timestamp prefix
    number: int  # 1-based line number of its first physical line
    note: str = ""  # what was cut, for the evidence ("a line of 1,048,576 characters: its first 4,096 read")


class XidEvent(NamedTuple):
    code: int
    bus: str | None
    detail: str
    line: KernelLine
    count: int = 1  # events this one stands for (Kept: the newest of a group past its first KEEP)


class KernelEvent(NamedTuple):
    kind: str  # fallen-off-bus, probe-failed, init-failed, api-mismatch, unsupported-gpu, secure-boot,
    #            nouveau, module-missing, sxid, kernel-module, inforom-corrupted, aer, oom-kill
    bus: str | None
    detail: str  # captured value (versions, code, ...)
    line: KernelLine
    count: int = 1


KEEP = 4  # events kept per group (an Xid code on a GPU, a message id): the first ones, then the newest
GROUPS = 4096  # groups kept per log or text; events of further groups are counted, not kept
KEPT_CHARS = 512  # characters of a kept line (evidence shows 240 of them)


class Kept:
    """Events grouped by a key, in order: each group keeps its first KEEP events and, past that,
    one more slot that always holds its newest event, with ``count`` saying how many it stands
    for. Memory is bounded by KEEP x GROUPS whatever the log holds; rules read first, last and
    the sum of ``count``. Events of a group past GROUPS are counted in ``dropped``."""

    def __init__(self) -> None:
        self.items: list = []
        self._groups: dict[object, list[int]] = {}  # key -> [events kept, index of the newest-slot or -1]
        self.dropped = 0

    def add(self, key: object, item: NamedTuple) -> None:
        group = self._groups.get(key)
        if group is None:
            if len(self._groups) >= GROUPS:
                self.dropped += 1
                return
            group = self._groups[key] = [0, -1]
        if group[0] < KEEP:
            group[0] += 1
            self.items.append(item)
        elif group[1] < 0:
            group[1] = len(self.items)
            self.items.append(item)
        else:
            before = self.items[group[1]]
            self.items[group[1]] = item._replace(count=before.count + item.count)  # type: ignore[attr-defined]


def _kept_line(ln: KernelLine) -> KernelLine:
    """A matched line as kept for the evidence: joined continuations make it up to 37 KB."""
    if len(ln.raw) <= KEPT_CHARS and len(ln.msg) <= KEPT_CHARS:
        return ln
    return ln._replace(raw=ln.raw[:KEPT_CHARS], msg=ln.msg[:KEPT_CHARS])


class KernelLog(NamedTuple):
    xids: list[XidEvent]
    events: list[KernelEvent]
    uuids: dict[str, str]  # bus -> GPU UUID ("NVRM: GPU at PCI:0000:9b:00: GPU-...")
    lines: int
    cut: int = 0  # lines longer than MAX_LINE, read in part
    dropped: int = 0  # events past GROUPS groups, counted only

    def summary(self) -> str:
        """What ``read`` says of the log: "1204 lines, 2 Xid event(s)"."""
        xids = sum(x.count for x in self.xids)
        cut = f", {self.cut} line(s) over {MAX_LINE:,} characters read in part" if self.cut else ""
        dropped = f", {self.dropped} event(s) past {GROUPS} kinds not kept" if self.dropped else ""
        return f"{self.lines} lines, {xids} Xid event(s){cut}{dropped}"


_KERNEL_PATTERNS = (
    ("fallen-off-bus", re.compile(r"fallen off the bus", re.I)),
    (
        "probe-failed",
        re.compile(r"probe routine (?:failed|was not called)|No NVIDIA (?:GPU|devices?) (?:found|probed)", re.I),
    ),
    ("init-failed", re.compile(r"RmInitAdapter failed|rm_init_adapter failed|GPU initialization failed", re.I)),
    ("api-mismatch", re.compile(r"API mismatch: the client has the version (\S{1,40}?),? but")),
    ("api-mismatch-kernel", re.compile(r"this kernel module has the version (\S{1,40}?)\.?\s")),
    # "... is not supported by the NVIDIA 535.104.05 driver release", a GPU outside the branch's
    # list; "... is not supported by open nvidia.ko because it does not include the required GPU
    # System Processor (GSP)", a pre-Turing GPU with the open kernel modules (detail: "open")
    (
        "unsupported-gpu",
        re.compile(
            r"is not supported by (?:the\s*+(?:NVRM:\s*+)?NVIDIA ([\d.x]{1,20}) driver|(open)\s*+(?:NVRM:\s*+)?nvidia\.ko)",
            re.I,
        ),
    ),
    (
        "secure-boot",
        re.compile(
            r"unsigned module loading is restricted|Loading of unsigned module is rejected|Key was rejected by service"
            r"|Required key not available|module verification failed|Lockdown: (?:modprobe|insmod|nvidia[\w-]{0,32}): ",
            re.I,
        ),
    ),
    ("nouveau", re.compile(r"\bnouveau\b")),
    ("module-missing", re.compile(r"Module nvidia\S{0,32} not found in directory (\S{1,255})")),
    (
        "kernel-module",
        re.compile(
            r"NVRM: loading NVIDIA UNIX [^\n]{0,40}?Kernel Module(?: for \S{1,32})?\s{1,16}+(\d{1,4}\.\d{1,4}(?:\.\d{1,4})?)"
        ),
    ),
    ("inforom-corrupted", re.compile(r"infoROM is corrupted", re.I)),
    (
        "aer",
        re.compile(
            r"AER: (?:Multiple )?(Corrected|Uncorrected \((?:Non-)?Fatal\)) error received"
            r"|PCIe Bus Error: severity=(Corrected|Uncorrected \((?:Non-)?Fatal\))"
        ),
    ),
    ("oom-kill", re.compile(r"[Oo]ut of memory: Killed process \d{1,10} \(([^)\n]{0,64})\)")),
)
_GPU_AT = re.compile(r"NVRM: GPU at PCI:([0-9A-Fa-f:.]{1,20}): (GPU-[0-9A-Za-z-]{1,64})")


def worth_a_look(line: str) -> bool:
    """Whether any kernel-log pattern above can match the line: every one needs one of these
    words. A line without any is only counted (most of a busy host's log), which keeps a 200 MB
    log fast and its memory flat. Substring tests written out: about 1 µs a line, where one
    case-blind regex of the same words takes 40."""
    low = line.lower()
    return (
        "nvrm" in low
        or "xid" in low
        or "nvidia" in low
        or "nouveau" in low
        or "nvswitch" in low
        or "fallen off" in low
        or "probe routine" in low
        or "rminitadapter" in low
        or "rm_init_adapter" in low
        or "gpu initialization" in low
        or "api mismatch" in low
        or "kernel module has" in low
        or "not supported by" in low
        or "unsigned module" in low
        or "key was rejected" in low
        or "required key" in low
        or "module verification" in low
        or "lockdown" in low
        or "inforom" in low
        or "aer:" in low
        or "pcie bus error" in low
        or "out of memory" in low
    )


class KernelScan:
    """The kernel-log parser, fed one physical line at a time (`feed`), so a log of any size is
    read in constant memory: only the lines that match a pattern are kept, with the three
    logical lines before the current one as context (a fallen-off-the-bus line can name its GPU
    on the line before). A physical line is read up to MAX_LINE characters and a logical line
    takes at most MAX_JOINED continuation lines (the rest are counted, not read; the evidence
    says so), so each line costs at most a bounded amount whatever the log holds.
    `parse_kernel_log(text)` is this over ``bounds.lines(text)``."""

    def __init__(self) -> None:
        self.xids = Kept()
        self.events = Kept()
        self.uuids: dict[str, str] = {}
        self.lines = 0  # logical lines
        self._current: KernelLine | None = None
        self._recent: collections.deque[KernelLine] = collections.deque(maxlen=3)
        self._number = 0
        self._joined = 0  # continuation lines of the current line
        self.cut = 0  # physical lines longer than MAX_LINE (read in part)

    def feed(self, full: str) -> None:
        self._number += 1
        if not full or full.isspace():
            return
        raw, note = bounded(full)
        if note:
            self.cut += 1
        if self._current is not None and raw[:1].isspace() and not has_kernel_prefix(raw.lstrip()):
            self._continue(raw, note)
            return
        self._close()
        self.lines += 1
        self._current = KernelLine(raw.rstrip(), strip_prefix(raw) if worth_a_look(raw) else "", self._number, note)
        self._joined = 0

    def _continue(self, raw: str, note: str) -> None:
        last = self._current
        assert last is not None
        self._joined += 1
        if self._joined > MAX_JOINED:
            if self._joined == MAX_JOINED + 1:
                notes = [n for n in (last.note, f"continuation lines past the first {MAX_JOINED} not read") if n]
                self._current = last._replace(note="; ".join(notes))
            return
        cont = raw.strip()
        msg = last.msg or strip_prefix(last.raw)
        notes = "; ".join(n for n in (last.note, note) if n)
        self._current = KernelLine(f"{last.raw} {cont}", f"{msg} {strip_prefix(cont)}", last.number, notes)

    def finish(self) -> KernelLog:
        self._close()
        dropped = self.xids.dropped + self.events.dropped
        return KernelLog(self.xids.items, self.events.items, self.uuids, self.lines, self.cut, dropped)

    def _close(self) -> None:
        ln = self._current
        if ln is None:
            return
        self._current = None
        if ln.msg or (self._joined and worth_a_look(ln.raw)):
            if not ln.msg:  # a continuation brought the keyword in
                ln = ln._replace(msg=strip_prefix(ln.raw))
            self._match(ln)
        self._recent.append(ln)

    def _match(self, ln: KernelLine) -> None:
        m = XID.search(ln.msg)
        if m:
            code, bus = int(m[2]), normalize_bus(m[1])
            self.xids.add((code, bus), XidEvent(code, bus, m[3].strip()[:KEPT_CHARS], _kept_line(ln)))
            return
        s = SXID.search(ln.msg)
        if s:
            bus, detail = normalize_bus(s[1]), f"{s[2]} {s[3]}".strip()[:KEPT_CHARS]
            fatal = "fatal" in detail.lower() and "non-fatal" not in detail.lower()
            self.events.add(("sxid", bus, s[2], fatal), KernelEvent("sxid", bus, detail, _kept_line(ln)))
            return
        g = _GPU_AT.search(ln.msg)
        if g:
            bus = normalize_bus(g[1])
            if bus and (bus in self.uuids or len(self.uuids) < GROUPS):
                self.uuids[bus] = g[2]
        for kind, rx in _KERNEL_PATTERNS:
            hit = rx.search(ln.msg)
            if not hit:
                continue
            bus_match = _BUS_IN_TEXT.search(ln.msg)
            if bus_match is None and kind == "fallen-off-bus":  # "The NVIDIA GPU <bus>" a line or two before
                for prev in reversed(self._recent):
                    bus_match = _BUS_IN_TEXT.search(prev.msg or strip_prefix(prev.raw))
                    if bus_match:
                        break
            detail = (next((g for g in hit.groups() if g), "") if hit.groups() else "")[:KEPT_CHARS]
            bus = normalize_bus(bus_match[1]) if bus_match else None
            variant = kind == "secure-boot" and "verification failed" in ln.msg  # a taint note, not a refusal
            self.events.add((kind, bus, detail, variant), KernelEvent(kind, bus, detail, _kept_line(ln)))
            break


def parse_kernel_lines(stream: Iterable[str]) -> KernelLog:
    """A kernel log from an iterable of lines (a file read line by line)."""
    scan = KernelScan()
    for line in stream:
        scan.feed(line)
    return scan.finish()


def parse_kernel_log(text: str) -> KernelLog:
    return parse_kernel_lines(lines(text))


# -- fabric manager ----------------------------------------------------------------------------
_FM_LINE = re.compile(
    r"^\[(?P<ts>[^\]]{1,64})\]\s*+\[(?P<level>[A-Z]{1,16})\]\s*+(?:\[tid \d{1,10}\]\s*+)?(?P<msg>.*)$"
)
_FM_NVSWITCH = re.compile(r"NVSwitch (?P<sev>non-fatal|fatal) error (?P<code>\d{1,10})(?P<rest>.*)", re.I)
_FM_START = re.compile(r"^\[\w{3} \d{1,2} \d{4} \d\d:\d\d:\d\d\] \[[A-Z]{1,16}\]")


class FabricEvent(NamedTuple):
    level: str  # ERROR, FATAL, WARNING ...
    kind: str  # nvswitch-nonfatal, nvswitch-fatal, error
    code: str | None
    bus: str | None
    line: str
    note: str = ""  # what was cut, for the evidence
    count: int = 1  # lines this one stands for (Kept)


def is_fabric_manager_line(line: str) -> bool:
    return bool(_FM_START.match(line))


def parse_fabric_manager(text: str) -> tuple[list[FabricEvent], int]:
    return parse_fabric_manager_lines(lines(text))


def parse_fabric_manager_lines(stream: Iterable[str]) -> tuple[list[FabricEvent], int]:
    """The fabric manager log's ERROR/FATAL lines from an iterable of lines (a file read line by line),
    grouped as Kept groups them, and the number of log lines."""
    events = Kept()
    count = 0
    for full in stream:
        raw, note = bounded(full.strip())
        m = _FM_LINE.match(raw)
        if not m:
            continue
        count += 1
        level = m["level"]
        if level not in ("ERROR", "FATAL", "CRITICAL"):
            continue
        sw = _FM_NVSWITCH.search(m["msg"])
        bus_match = _BUS_IN_TEXT.search(m["msg"])
        bus = normalize_bus(bus_match[1]) if bus_match else None
        kind = ("nvswitch-fatal" if sw["sev"].lower() == "fatal" else "nvswitch-nonfatal") if sw else "error"
        code = sw["code"] if sw else None
        events.add((kind, code, bus), FabricEvent(level, kind, code, bus, raw[:KEPT_CHARS], note))
    return events.items, count


# -- messages in any text ------------------------------------------------------------------------
class Message(NamedTuple):
    id: str  # finding id the message maps to
    line: str  # the line, stripped, up to MAX_LINE characters
    detail: str  # captured value ("550.144", "12.4", bus id ...)
    note: str = ""  # what was cut, for the evidence
    count: int = 1  # lines this one stands for (Kept: the newest of a group past its first KEEP)


# (finding id, pattern). The first group, when there is one, is kept as the detail.
MESSAGE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nvidia-smi-timeout", re.compile(r"nvidia-smi did not answer in (\d{1,6}) s")),  # the collector's line
    ("driver-library-mismatch", re.compile(r"Driver/library version mismatch")),
    ("nvml-library-version", re.compile(r"NVML library version:\s*(\d+\.\d+(?:\.\d+)?)")),
    ("driver-not-loaded", re.compile(r"couldn't communicate with the NVIDIA driver|NVIDIA driver is not loaded", re.I)),
    ("no-devices", re.compile(r"^No devices were found|^No devices found", re.I)),
    (
        "nvml-not-found",
        re.compile(
            r"NVML Shared Library Not Found|couldn't find libnvidia-ml\.so|libnvidia-ml\.so(?:\.1)?: cannot open shared"
            r"|nvidia-smi: (?:command )?not found|nvidia-smi: No such file",
            re.I,
        ),
    ),
    ("nvml-unknown-error", re.compile(r"Failed to initialize NVML: Unknown Error")),
    (
        "nvml-no-permission",
        re.compile(r"Failed to initialize NVML: Insufficient Permissions|NVML[^\n]{0,80}?no permission", re.I),
    ),
    (
        "gpu-lost",
        re.compile(r"Unable to determine the device handle for (?:GPU|gpu)\s*+([0-9A-Fa-f:.]{1,20})?:?\s*+(.*)"),
    ),
    ("gpu-lost", re.compile(r"GPU is lost|GPU has fallen off the bus", re.I)),
    ("gpu-reset-required", re.compile(r"GPU requires (?:a )?reset|requires a reset before it can be used", re.I)),
    ("inforom-corrupted", re.compile(r"infoROM is corrupted(?: at gpu ([0-9A-Fa-f:.]{1,20}))?", re.I)),
    (
        "out-of-memory",
        re.compile(
            r"CUDA out of memory|CUDA error: out of memory|RESOURCE_EXHAUSTED:?[^\n]{0,80}?(?:OOM|[Oo]ut of memory)"
            r"|OOM when allocating tensor|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation"
            r"|CUDA_ERROR_OUT_OF_MEMORY|torch\.(?:cuda\.)?OutOfMemoryError|cudaMalloc(?:Async)? failed:? out of memory"
            r"|Cuda failure 'out of memory'"
        ),
    ),
    (
        "cuda-driver-insufficient",
        re.compile(
            r"CUDA driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver"
            r"|NVIDIA driver on your system is too old|unsatisfied condition: cuda>=\s*+(\d{1,3}\.\d{1,3})"
            r"|please update your driver to a newer version",
            re.I,
        ),
    ),
    (
        "cuda-compat-mismatch",
        re.compile(
            r"forward compatibility was attempted on non supported HW|unsupported display driver / cuda driver combination"
            r"|cudaErrorCompatNotSupportedOnDevice|cudaErrorSystemDriverMismatch|CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"
        ),
    ),
    ("no-cuda-device", re.compile(r"no CUDA-capable device is detected|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE")),
    ("fabric-not-ready", re.compile(r"system not yet initialized|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY")),
    (
        "cuda-no-kernel-image",
        re.compile(r"no kernel image is available for execution on the device|cudaErrorNoKernelImageForDevice"),
    ),
    (
        "ecc-uncorrectable",
        re.compile(r"uncorrectable ECC error encountered|cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE"),
    ),
)

# Extra values pulled out of a matched line for the finding's evidence.
CUDA_FOUND = re.compile(r"too old \(found version (\d{4,6})\)")
CUDA_RUNTIME = re.compile(r"runtime version\s*+(?:[:=]\s*+)?(\d{1,3}\.\d{1,3})", re.I)
TORCH_CUDA = re.compile(r"\+cu(\d{2,3})\b")
OOM_DETAIL = re.compile(r"Tried to allocate [\d.]{1,20} ?[KMGT]?i?B")


def scan_messages(text: str) -> list[Message]:
    """The known messages in ``text``, one per line at most (each line read up to MAX_LINE),
    grouped by id and detail as Kept groups them: a text of a million such lines keeps a few."""
    out = Kept()
    for raw in lines(text):
        line, note = bounded(raw.strip())
        if not line:
            continue
        for ident, rx in MESSAGE_PATTERNS:
            m = rx.search(line)
            if m:
                detail = (next((g for g in m.groups() if g), "") if m.groups() else "")[:KEPT_CHARS]
                out.add((ident, detail), Message(ident, line, detail, note))
                break
    return out.items


def search_lines(rx: re.Pattern[str], texts: Iterable[str]) -> re.Match[str] | None:
    """The first match of ``rx`` in the lines of ``texts``, each line read up to MAX_LINE."""
    for text in texts:
        for line in lines(text):
            m = rx.search(bounded(line)[0])
            if m:
                return m
    return None


# -- small host facts ---------------------------------------------------------------------------
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 ..." and
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build ..."
PROC_VERSION_LINE = re.compile(r"NVRM version:[^\n]{0,80}?Kernel Module")
_PROC_VERSION = re.compile(r"Kernel Module(?: for \S{1,32})?\s{1,16}+(\d{1,4}\.\d{1,4}(?:\.\d{1,4})?)")


def parse_proc_version(text: str) -> str | None:
    """The kernel module's version from /proc/driver/nvidia/version."""
    for raw in lines(text):
        line = bounded(raw)[0]
        head = PROC_VERSION_LINE.search(line)
        if head:
            m = _PROC_VERSION.match(line, head.end() - len("Kernel Module"))
            return m[1] if m else None
    return None


def parse_modules(text: str) -> set[str]:
    """Module names from /proc/modules or lsmod output."""
    names: set[str] = set()
    for line in lines(text):
        if not line:
            continue
        parts = bounded(line)[0].split(maxsplit=2)
        if len(parts) >= 2 and parts[0] != "Module" and _MODULE_NAME.fullmatch(parts[0]) and parts[1].isdigit():
            names.add(parts[0])
    return names


_MODULE_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")


def parse_secure_boot(text: str) -> bool | None:
    low = text.lower()
    if "secureboot enabled" in low:
        return True
    if "secureboot disabled" in low or "efi variables are not supported" in low:
        return False
    return None


# -- the PCI bus ------------------------------------------------------------------------------------
class PciScan(NamedTuple):
    """What the collector's ``pci-nvidia`` section says: how many PCI devices it read in
    /sys/bus/pci/devices, and those with NVIDIA's vendor id 0x10de as (bus id, device id, class)."""

    scanned: int
    nvidia: list[tuple[str, str, str]]

    def gpus(self) -> list[tuple[str, str, str]]:
        """The NVIDIA devices of PCI class 0x03 (display: VGA 0x0300, 3D controller 0x0302); the
        others are NVSwitches (0x0680), audio and USB functions of a GPU board."""
        return [d for d in self.nvidia if d[2].startswith("0x03")]


_PCI_LINE = re.compile(r"([0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (0x[0-9a-f]{4}) (0x[0-9a-f]{6})")
_PCI_SCANNED = re.compile(r"devices scanned: (\d{1,7})")
MAX_PCI = 256  # NVIDIA functions kept (a DGX has 8 GPUs and 4 NVSwitches)


def parse_pci(text: str) -> PciScan | None:
    """The ``pci-nvidia`` section; None when it does not say how many devices it read (no sysfs)."""
    scanned: int | None = None
    nvidia: list[tuple[str, str, str]] = []
    for raw in lines(text):
        line = bounded(raw)[0].strip()
        if not line:
            continue
        m = _PCI_LINE.fullmatch(line)
        if m and len(nvidia) < MAX_PCI:
            nvidia.append((m[1], m[2], m[3]))
        s = _PCI_SCANNED.fullmatch(line)
        if s:
            scanned = int(s[1])
    return PciScan(scanned, nvidia) if scanned is not None else None
