"""Parsers for logs and small host facts: the kernel log (dmesg in its time formats, journalctl
-k), the fabric manager log, error messages of nvidia-smi/NVML/CUDA/frameworks found in any
text, /proc/driver/nvidia/version, loaded modules, mokutil output.

They never fail on unknown lines: a log is mostly lines doctor has no opinion about.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable
from typing import NamedTuple

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
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.\d)?)\):?\s*(\d{1,6})\b[,:]?\s*(.*)"
)
SXID = re.compile(r"SXid \((?:PCI:)?([0-9A-Fa-f:.]{1,20})\):?\s*(\d{1,6})\b[,:]?\s*(.*)")
_BUS_IN_TEXT = re.compile(r"\b([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?)\b")


MAX_LINE = 4000  # longer lines are cut: no kernel message is that long


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
    raw: str  # the line as it appeared (continuations joined with " ")
    msg: str  # without the timestamp prefix
    number: int  # 1-based line number of its first physical line


def kernel_lines(text: str) -> list[KernelLine]:
    """Logical kernel-log lines: an indented line without a prefix continues the previous one."""
    out: list[KernelLine] = []
    for number, full in enumerate(text.splitlines(), 1):
        if not full.strip():
            continue
        raw = full[:MAX_LINE]
        if out and raw[:1].isspace() and not has_kernel_prefix(raw.lstrip()):
            last = out[-1]
            cont = raw.strip()
            out[-1] = KernelLine(f"{last.raw} {cont}", f"{last.msg} {strip_prefix(cont)}", last.number)
            continue
        out.append(KernelLine(raw.rstrip(), strip_prefix(raw), number))
    return out


class XidEvent(NamedTuple):
    code: int
    bus: str | None
    detail: str
    line: KernelLine


class KernelEvent(NamedTuple):
    kind: str  # fallen-off-bus, probe-failed, init-failed, api-mismatch, unsupported-gpu, secure-boot,
    #            nouveau, module-missing, sxid, kernel-module, inforom-corrupted, aer, oom-kill
    bus: str | None
    detail: str  # captured value (versions, code, ...)
    line: KernelLine


class KernelLog(NamedTuple):
    xids: list[XidEvent]
    events: list[KernelEvent]
    uuids: dict[str, str]  # bus -> GPU UUID ("NVRM: GPU at PCI:0000:9b:00: GPU-...")
    lines: int


_KERNEL_PATTERNS = (
    ("fallen-off-bus", re.compile(r"fallen off the bus", re.I)),
    (
        "probe-failed",
        re.compile(r"probe routine (?:failed|was not called)|No NVIDIA (?:GPU|devices?) (?:found|probed)", re.I),
    ),
    ("init-failed", re.compile(r"RmInitAdapter failed|rm_init_adapter failed|GPU initialization failed", re.I)),
    ("api-mismatch", re.compile(r"API mismatch: the client has the version (\S+?),? but")),
    ("api-mismatch-kernel", re.compile(r"this kernel module has the version (\S+?)\.?\s")),
    ("unsupported-gpu", re.compile(r"is not supported by the\s*(?:NVRM:\s*)?NVIDIA ([\d.x]+) driver", re.I)),
    (
        "secure-boot",
        re.compile(
            r"unsigned module loading is restricted|Loading of unsigned module is rejected|Key was rejected by service"
            r"|Required key not available|module verification failed|Lockdown:.*(?:nvidia|modprobe|insmod)",
            re.I,
        ),
    ),
    ("nouveau", re.compile(r"\bnouveau\b")),
    ("module-missing", re.compile(r"Module nvidia\S* not found in directory (\S+)")),
    ("kernel-module", re.compile(r"NVRM: loading NVIDIA UNIX .*?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")),
    ("inforom-corrupted", re.compile(r"infoROM is corrupted", re.I)),
    (
        "aer",
        re.compile(
            r"AER: (?:Multiple )?(Corrected|Uncorrected \((?:Non-)?Fatal\)) error received"
            r"|PCIe Bus Error: severity=(Corrected|Uncorrected \((?:Non-)?Fatal\))"
        ),
    ),
    ("oom-kill", re.compile(r"[Oo]ut of memory: Killed process \d+ \(([^)]*)\)")),
)
_GPU_AT = re.compile(r"NVRM: GPU at PCI:([0-9A-Fa-f:.]+): (GPU-[0-9A-Za-z-]+)")


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
    on the line before). `parse_kernel_log(text)` is this over ``text.splitlines()``."""

    def __init__(self) -> None:
        self.xids: list[XidEvent] = []
        self.events: list[KernelEvent] = []
        self.uuids: dict[str, str] = {}
        self.lines = 0  # logical lines
        self._current: KernelLine | None = None
        self._recent: collections.deque[KernelLine] = collections.deque(maxlen=3)
        self._number = 0
        self._joined = False  # the current line has continuation lines

    def feed(self, full: str) -> None:
        self._number += 1
        if not full.strip():
            return
        raw = full[:MAX_LINE]
        if self._current is not None and raw[:1].isspace() and not has_kernel_prefix(raw.lstrip()):
            last, cont = self._current, raw.strip()
            msg = last.msg or strip_prefix(last.raw)
            self._current = KernelLine(f"{last.raw} {cont}", f"{msg} {strip_prefix(cont)}", last.number)
            self._joined = True
            return
        self._close()
        self.lines += 1
        self._current = KernelLine(raw.rstrip(), strip_prefix(raw) if worth_a_look(raw) else "", self._number)
        self._joined = False

    def finish(self) -> KernelLog:
        self._close()
        return KernelLog(self.xids, self.events, self.uuids, self.lines)

    def _close(self) -> None:
        ln = self._current
        if ln is None:
            return
        self._current = None
        if ln.msg or (self._joined and worth_a_look(ln.raw)):
            if not ln.msg:  # a continuation brought the keyword in
                ln = KernelLine(ln.raw, strip_prefix(ln.raw), ln.number)
            self._match(ln)
        self._recent.append(ln)

    def _match(self, ln: KernelLine) -> None:
        m = XID.search(ln.msg)
        if m:
            self.xids.append(XidEvent(int(m[2]), normalize_bus(m[1]), m[3].strip(), ln))
            return
        s = SXID.search(ln.msg)
        if s:
            self.events.append(KernelEvent("sxid", normalize_bus(s[1]), f"{s[2]} {s[3]}".strip(), ln))
            return
        g = _GPU_AT.search(ln.msg)
        if g:
            bus = normalize_bus(g[1])
            if bus:
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
            detail = next((g for g in hit.groups() if g), "") if hit.groups() else ""
            self.events.append(KernelEvent(kind, normalize_bus(bus_match[1]) if bus_match else None, detail or "", ln))
            break


def parse_kernel_lines(lines: Iterable[str]) -> KernelLog:
    """A kernel log from an iterable of lines (a file read line by line)."""
    scan = KernelScan()
    for line in lines:
        scan.feed(line)
    return scan.finish()


def parse_kernel_log(text: str) -> KernelLog:
    return parse_kernel_lines(text.splitlines())


# -- fabric manager ----------------------------------------------------------------------------
_FM_LINE = re.compile(r"^\[(?P<ts>[^\]]+)\]\s*\[(?P<level>[A-Z]+)\]\s*(?:\[tid \d+\]\s*)?(?P<msg>.*)$")
_FM_NVSWITCH = re.compile(r"NVSwitch (?P<sev>non-fatal|fatal) error (?P<code>\d+)(?P<rest>.*)", re.I)


class FabricEvent(NamedTuple):
    level: str  # ERROR, FATAL, WARNING ...
    kind: str  # nvswitch-nonfatal, nvswitch-fatal, error
    code: str | None
    bus: str | None
    line: str


def is_fabric_manager_line(line: str) -> bool:
    return bool(re.match(r"^\[\w{3} \d{1,2} \d{4} \d\d:\d\d:\d\d\] \[[A-Z]+\]", line))


def parse_fabric_manager(text: str) -> tuple[list[FabricEvent], int]:
    return parse_fabric_manager_lines(text.splitlines())


def parse_fabric_manager_lines(lines: Iterable[str]) -> tuple[list[FabricEvent], int]:
    """The fabric manager log's ERROR/FATAL lines from an iterable of lines (a file read line by line)."""
    events: list[FabricEvent] = []
    count = 0
    for raw in lines:
        if len(raw) > MAX_LINE:
            continue
        m = _FM_LINE.match(raw.strip())
        if not m:
            continue
        count += 1
        level = m["level"]
        if level not in ("ERROR", "FATAL", "CRITICAL"):
            continue
        sw = _FM_NVSWITCH.search(m["msg"])
        bus_match = _BUS_IN_TEXT.search(m["msg"])
        bus = normalize_bus(bus_match[1]) if bus_match else None
        if sw:
            kind = "nvswitch-fatal" if sw["sev"].lower() == "fatal" else "nvswitch-nonfatal"
            events.append(FabricEvent(level, kind, sw["code"], bus, raw.strip()))
        else:
            events.append(FabricEvent(level, "error", None, bus, raw.strip()))
    return events, count


# -- messages in any text ------------------------------------------------------------------------
class Message(NamedTuple):
    id: str  # finding id the message maps to
    line: str  # the line, stripped
    detail: str  # captured value ("550.144", "12.4", bus id ...)


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
        re.compile(r"Failed to initialize NVML: Insufficient Permissions|NVML.*no permission", re.I),
    ),
    ("gpu-lost", re.compile(r"Unable to determine the device handle for (?:GPU|gpu)\s*([0-9A-Fa-f:.]+)?:?\s*(.*)")),
    ("gpu-lost", re.compile(r"GPU is lost|GPU has fallen off the bus", re.I)),
    ("gpu-reset-required", re.compile(r"GPU requires (?:a )?reset|requires a reset before it can be used", re.I)),
    ("inforom-corrupted", re.compile(r"infoROM is corrupted(?: at gpu ([0-9A-Fa-f:.]+))?", re.I)),
    (
        "out-of-memory",
        re.compile(
            r"CUDA out of memory|CUDA error: out of memory|RESOURCE_EXHAUSTED:?.*(?:OOM|[Oo]ut of memory)"
            r"|OOM when allocating tensor|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation"
            r"|CUDA_ERROR_OUT_OF_MEMORY|torch\.(?:cuda\.)?OutOfMemoryError|cudaMalloc(?:Async)? failed:? out of memory"
            r"|Cuda failure 'out of memory'"
        ),
    ),
    (
        "cuda-driver-insufficient",
        re.compile(
            r"CUDA driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver"
            r"|NVIDIA driver on your system is too old|unsatisfied condition: cuda>=\s*(\d{1,3}\.\d{1,3})"
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
CUDA_RUNTIME = re.compile(r"(?:CUDA runtime version|runtime version)\s*[:=]?\s*(\d{1,3}\.\d{1,3})", re.I)
TORCH_CUDA = re.compile(r"\+cu(\d{2,3})\b")
OOM_DETAIL = re.compile(r"Tried to allocate [\d.]+ ?[KMGT]?i?B")


def scan_messages(text: str) -> list[Message]:
    out: list[Message] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or len(line) > MAX_LINE:
            continue
        for ident, rx in MESSAGE_PATTERNS:
            m = rx.search(line)
            if m:
                detail = next((g for g in m.groups() if g), "") if m.groups() else ""
                out.append(Message(ident, line, detail))
                break
    return out


# -- small host facts ---------------------------------------------------------------------------
_PROC_VERSION = re.compile(r"NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def parse_proc_version(text: str) -> str | None:
    m = _PROC_VERSION.search(text)
    return m[1] if m else None


def parse_modules(text: str) -> set[str]:
    """Module names from /proc/modules or lsmod output."""
    names: set[str] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] != "Module" and re.fullmatch(r"[A-Za-z0-9_]+", parts[0]) and parts[1].isdigit():
            names.add(parts[0])
    return names


def parse_secure_boot(text: str) -> bool | None:
    low = text.lower()
    if "secureboot enabled" in low:
        return True
    if "secureboot disabled" in low or "efi variables are not supported" in low:
        return False
    return None
