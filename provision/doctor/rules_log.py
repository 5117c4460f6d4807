"""Findings from events and messages: Xids, other kernel-log events, the fabric manager log,
nvidia-smi/NVML errors, application errors (out of memory, CUDA vs driver), and the driver's
state on the host (loaded modules, Secure Boot, kernel release).

Repeated events are grouped: one finding per Xid code per GPU (with the count and the first
and last line), one per message kind. Severities follow the policy in ``rules``; an Xid takes
the severity of its immediate-action bucket in compat/xid.yaml.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from provision.doctor.model import Finding
from provision.doctor.parse_log import (
    FabricEvent,
    KernelEvent,
    KernelLog,
    Message,
    XidEvent,
)
from provision.doctor.state import GpuState, same_gpu
from provision.doctor.xid import XidCatalog

Add = Callable[[Finding, str], None]
_LINE = 240  # evidence lines are cut to this many characters


def _cut(line: str) -> str:
    return line if len(line) <= _LINE else line[: _LINE - 3] + "..."


@dataclass
class Facts:
    """Everything read, from every file or section, before rules run."""

    gpus: list[GpuState] = field(default_factory=list)
    driver_versions: list[tuple[str, str]] = field(default_factory=list)  # (version, source) from nvidia-smi
    cuda_versions: list[tuple[str, str]] = field(default_factory=list)  # the driver's CUDA (nvidia-smi header)
    nvlink: list[tuple[str, Any]] = field(default_factory=list)
    kernel: list[tuple[str, KernelLog]] = field(default_factory=list)
    fabric: list[tuple[str, list[FabricEvent]]] = field(default_factory=list)
    messages: list[tuple[str, Message]] = field(default_factory=list)
    app_texts: list[str] = field(default_factory=list)  # application logs, for version hints (+cu124)
    unreadable: list[tuple[str, str, str, str]] = field(default_factory=list)  # (source, key, why, first line)
    module_version: tuple[str, str] | None = None  # (version, source) of the loaded kernel module
    modules: set[str] | None = None
    secure_boot: bool | None = None
    uname: str | None = None
    smi_rc: int | None = None

    def kernel_events(self, kind: str) -> list[tuple[str, KernelEvent]]:
        return [(src, e) for src, log in self.kernel for e in log.events if e.kind == kind]

    def kernel_module_version(self) -> str | None:
        if self.module_version:
            return self.module_version[0]
        loaded = self.kernel_events("kernel-module")
        return loaded[-1][1].detail if loaded else None

    def driver_version(self) -> str | None:
        return self.driver_versions[0][0] if self.driver_versions else self.kernel_module_version()

    def mig_enabled(self) -> bool:
        return any((g.mig_current or "").lower() == "enabled" for g in self.gpus)


# -- Xids ------------------------------------------------------------------------------------
def xid_rules(facts: Facts, catalog: XidCatalog, add: Add) -> None:
    groups: dict[tuple[int, str | None], list[tuple[str, XidEvent]]] = {}
    uuids: dict[str, str] = {}
    for src, log in facts.kernel:
        uuids.update(log.uuids)
        for x in log.xids:
            groups.setdefault((x.code, x.bus), []).append((src, x))
    for (code, bus), events in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        entry = catalog.get(code)
        src, first = events[0]
        last = events[-1][1]
        n = len(events)
        named = next((g.name for g in facts.gpus if g.name and same_gpu(g.bus_id, bus)), None)
        extra = ", ".join(x for x in (named, uuids.get(bus or "")) if x)
        gpu = (f"GPU {bus}" + (f" ({extra})" if extra else "")) if bus else "an unnamed GPU"
        what = f"{entry.mnemonic}: {entry.description}" if entry else "not in NVIDIA's Xid catalogue"
        count = f", {n} times" if n > 1 else ""
        evidence = f"{n} event(s) on {gpu} [{src}]; first: {_cut(first.line.raw)}"
        if n > 1:
            evidence += f"; last: {_cut(last.line.raw)}"
        fix = catalog.fix(code).replace("<bus-id>", (bus if "." in bus else f"{bus}.0") if bus else "<bus-id>")
        add(
            Finding(f"xid-{code}", catalog.severity(code), f"Xid {code} ({what}) on {gpu}{count}", evidence, fix),
            f"{code}/{bus}",
        )


# -- other kernel-log events ------------------------------------------------------------------
def kernel_rules(facts: Facts, add: Add) -> None:
    xid79 = [x.bus for _, log in facts.kernel for x in log.xids if x.code == 79]
    for src, e in facts.kernel_events("fallen-off-bus"):
        if any(same_gpu(e.bus, bus) for bus in xid79):
            continue  # the Xid 79 finding already says it
        where = f"GPU {e.bus}" if e.bus else "a GPU"
        add(
            Finding(
                "gpu-fallen-off-bus",
                "error",
                f"{where} has fallen off the bus",
                f"{_cut(e.line.raw)} [{src}]",
                "The GPU stopped answering on PCIe and will not come back without a reboot (power-cycle if a "
                "warm reboot does not bring it back). If it happens again, check its seating, power cables, "
                "the PSU and the slot, update the BIOS/VBIOS, then have it replaced.",
            ),
            e.bus or "?",
        )
    probes = facts.kernel_events("probe-failed")
    if probes:
        src, e = probes[0]
        add(
            Finding(
                "driver-probe-failed",
                "error",
                "The NVIDIA driver failed to probe a GPU",
                f"{_cut(e.line.raw)} [{src}]" + (f" (and {len(probes) - 1} more line(s))" if len(probes) > 1 else ""),
                "Read the kernel-log lines just before it: a GPU that fell off the bus, a GPU this driver branch "
                "does not support, or a GPU already bound to nouveau or vfio-pci (`lspci -k -d 10de:`).",
            ),
            "host",
        )
    for kind, ident, title, fix in (
        (
            "init-failed",
            "gpu-init-failed",
            "The driver could not initialise a GPU (RmInitAdapter failed)",
            "Check that the driver branch supports this GPU, that its power cables are connected, and reboot; "
            "if it persists, collect `sudo nvidia-bug-report.sh` for NVIDIA support.",
        ),
        (
            "unsupported-gpu",
            "gpu-unsupported-by-driver",
            "The installed driver does not support a GPU in this system",
            "Install a driver branch that supports the GPU (a legacy branch for old GPUs, a newer one for new GPUs); "
            "`provision plan --gpu <id>` picks one.",
        ),
        (
            "inforom-corrupted",
            "inforom-corrupted",
            "A GPU's infoROM is corrupted",
            "The GPU still works but its ECC and page-retirement records may be unreliable: collect "
            "`sudo nvidia-bug-report.sh` and ask NVIDIA or the vendor for an infoROM reflash or an RMA.",
        ),
    ):
        hits = facts.kernel_events(kind)
        if hits:
            src, e = hits[0]
            severity = "warning" if kind == "inforom-corrupted" else "error"
            add(Finding(ident, severity, title, f"{_cut(e.line.raw)} [{src}]", fix), e.bus or "host")
    _aer(facts, add)
    kills = facts.kernel_events("oom-kill")
    if kills:
        names = ", ".join(sorted({e.detail for _, e in kills if e.detail})[:5])
        add(
            Finding(
                "host-out-of-memory",
                "warning",
                f"The kernel's OOM killer ended {len(kills)} process(es) (host memory, not GPU memory)",
                f"{_cut(kills[0][1].line.raw)} [{kills[0][0]}]" + (f"; processes: {names}" if names else ""),
                "The host ran out of RAM: lower data-loader workers / prefetch and pinned-memory use, run fewer "
                "jobs per node or add memory; `journalctl -k | grep -i 'killed process'` lists every kill.",
            ),
            "host",
        )
    sxids: dict[tuple[str | None, str], list[tuple[str, KernelEvent]]] = {}
    for src, e in facts.kernel_events("sxid"):
        sxids.setdefault((e.bus, (e.detail.split() or ["?"])[0]), []).append((src, e))
    for (bus, code), hits in sxids.items():
        fatal = any("fatal" in e.detail.lower() and "non-fatal" not in e.detail.lower() for _, e in hits)
        _nvswitch(add, fatal=fatal, code=code, bus=bus, lines=[e.line.raw for _, e in hits], src=hits[0][0])


_AER = {"uncorrected (fatal)": "error", "uncorrected (non-fatal)": "warning", "corrected": "info"}


def _aer(facts: Facts, add: Add) -> None:
    groups: dict[str, list[tuple[str, KernelEvent]]] = {}
    for src, e in facts.kernel_events("aer"):
        groups.setdefault(e.detail.lower(), []).append((src, e))
    for kind, hits in groups.items():
        src, first = hits[0]
        devices = ", ".join(sorted({e.bus for _, e in hits if e.bus})[:4])
        last = f"; last: {_cut(hits[-1][1].line.raw)}" if len(hits) > 1 else ""
        add(
            Finding(
                "pcie-aer-error",
                _AER.get(kind, "warning"),
                f"{len(hits)} PCIe AER {kind} error report(s)" + (f" on {devices}" if devices else ""),
                f"{_cut(first.line.raw)} [{src}]{last}",
                "PCIe errors between a GPU and its root port: corrected ones are harmless unless they flood the "
                "log; uncorrected ones often come just before a GPU falls off the bus. Reseat the GPU and riser, "
                "check `sudo lspci -vvv -s <bus-id> | grep -iA4 'AER\\|UESta\\|CESta'`, update the BIOS, and "
                "replace the riser or GPU if they recur.",
            ),
            kind,
        )


def _nvswitch(add: Add, *, fatal: bool, code: str, bus: str | None, lines: list[str], src: str) -> None:
    n = len(lines)
    evidence = f"{n} event(s) [{src}]; first: {_cut(lines[0])}" + (f"; last: {_cut(lines[-1])}" if n > 1 else "")
    where = f"NVSwitch {bus}" if bus else "an NVSwitch"
    if fatal:
        add(
            Finding(
                "nvswitch-error",
                "error",
                f"Fatal NVSwitch error {code} on {where}",
                evidence,
                "A fatal NVSwitch error takes the fabric down for the GPUs behind it: stop the jobs, reset the "
                "GPUs and switches (`sudo nvidia-smi -r`) and restart nvidia-fabricmanager, or reboot; a "
                "recurring fatal error means the baseboard needs service (send `nvidia-bug-report.sh` with the "
                "fabric manager log).",
            ),
            f"{code}/{bus}",
        )
    else:
        times = f", {n} times" if n > 1 else ""
        add(
            Finding(
                "nvswitch-error",
                "warning",
                f"Non-fatal NVSwitch error {code} on {where}{times}",
                evidence,
                "The switch corrected it, but it marks a link with errors: watch the counters "
                "(`nvidia-smi nvlink -e`, DCGM NVSwitch health) and have the NVLink/NVSwitch tray serviced if "
                "they keep rising.",
            ),
            f"{code}/{bus}",
        )


def unreadable_rules(facts: Facts, add: Add) -> None:
    for source, key, why, first in facts.unreadable:
        add(
            Finding(
                "section-unreadable",
                "warning",
                f"The {key} capture could not be read ({why})",
                f"[{source}] " + (f"starts with: {_cut(first)}" if first else "(no text)"),
                f"Nothing from it was analysed, so the verdict may miss faults: run the command by hand on the "
                f"host (the collector's `{key}` section) and look at what it prints.",
            ),
            source,
        )


def fabric_rules(facts: Facts, add: Add) -> None:
    for src, events in facts.fabric:
        groups: dict[tuple[str, str | None, str | None], list[FabricEvent]] = {}
        for e in events:
            groups.setdefault((e.kind, e.code, e.bus), []).append(e)
        for (kind, code, bus), hits in groups.items():
            if kind.startswith("nvswitch"):
                _nvswitch(
                    add,
                    fatal=kind == "nvswitch-fatal",
                    code=code or "?",
                    bus=bus,
                    lines=[e.line for e in hits],
                    src=src,
                )
        others = [e for e in events if e.kind == "error"]
        if others:
            add(
                Finding(
                    "fabric-manager-error",
                    "error",
                    f"The fabric manager logged {len(others)} error(s)",
                    f"[{src}] first: {_cut(others[0].line)}"
                    + (f"; last: {_cut(others[-1].line)}" if len(others) > 1 else ""),
                    "Read the fabric manager log around these lines (`journalctl -u nvidia-fabricmanager`); check "
                    "that its version equals the driver's and restart it after resetting the GPUs.",
                ),
                "fm",
            )
