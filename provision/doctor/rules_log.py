"""Findings from events and messages: Xids, other kernel-log events, the fabric manager log,
nvidia-smi/NVML errors, application errors (out of memory, CUDA vs driver), and the driver's
state on the host (loaded modules, Secure Boot, kernel release).

Repeated events are grouped: one finding per Xid code per GPU (with the count and the first
and last line), one per message kind. Severities follow the policy in ``rules``; an Xid takes
the severity of its immediate-action bucket in compat/xid.yaml.
"""

from __future__ import annotations

import re

from provision.doctor.bounds import SECTION_CHARS, size
from provision.doctor.facts import Add, Facts
from provision.doctor.model import Finding, worse
from provision.doctor.parse_log import (
    GROUPS,
    FabricEvent,
    KernelEvent,
    XidEvent,
)
from provision.doctor.state import same_gpu
from provision.doctor.xid import XidCatalog

_LINE = 240  # evidence lines are cut to this many characters


def _cut(line: str, note: str = "") -> str:
    """An evidence line: cut to _LINE characters, with what doctor did not read of it (``note``)."""
    shown = line if len(line) <= _LINE else line[: _LINE - 3] + "..."
    return f"{shown} [{note}]" if note else shown


# -- Xids ------------------------------------------------------------------------------------
# What an Xid's own line asks for where NVIDIA's catalogue bucket says less. Xid 63 reads "Row
# Remapper: New row (0x...) marked for remapping, reset gpu to activate": its catalogue bucket is
# IGNORE (work running now is not affected), but the remap only takes effect at the next GPU reset:
# NVIDIA, "A100 GPU memory error management: Error Recovery and Response Flags": "Row-remapping
# pending flag: This flag indicates that row-remapping will happen at the next GPU reset."
ROW_REMAP_FLAGS = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html"
_RESET_TO_ACTIVATE = re.compile(r"reset (?:the )?gpu to activate", re.I)


def _line_action(code: int, bucket: str, bus: str, events: list[XidEvent]) -> str | None:
    """The fix an Xid's line itself asks for, when it asks for more than its catalogue bucket."""
    if not any(_RESET_TO_ACTIVATE.search(x.detail) for x in events):
        return None
    return (
        "The line says it: a memory row is marked for remapping, and the remap takes effect only at the next "
        f"GPU reset. Work running now is not affected (NVIDIA's immediate action for Xid {code}: {bucket}), but "
        f"reset the GPU once it is drained: stop its processes, `sudo nvidia-smi -r -i {bus}` (or reboot), then "
        'check that `nvidia-smi -q -d ROW_REMAPPER` shows Pending: No. NVIDIA: "row-remapping will happen at the '
        f'next GPU reset" ({ROW_REMAP_FLAGS}).'
    )


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
        n = sum(x.count for _, x in events)
        named = next((g.name for g in facts.gpus if g.name and same_gpu(g.bus_id, bus)), None)
        extra = ", ".join(x for x in (named, uuids.get(bus or "")) if x)
        gpu = (f"GPU {bus}" + (f" ({extra})" if extra else "")) if bus else "an unnamed GPU"
        what = f"{entry.mnemonic}: {entry.description}" if entry else "not in NVIDIA's Xid catalogue"
        count = f", {n} times" if n > 1 else ""
        evidence = f"{n} event(s) on {gpu} [{src}]; first: {_cut(first.line.raw, first.line.note)}"
        if n > 1:
            evidence += f"; last: {_cut(last.line.raw, last.line.note)}"
        where = (bus if "." in bus else f"{bus}.0") if bus else "<bus-id>"
        fix = catalog.fix(code).replace("<bus-id>", where)
        severity, title = catalog.severity(code), f"Xid {code} ({what}) on {gpu}{count}"
        asked = _line_action(code, (entry.immediate if entry else None) or "none given", where, [x for _, x in events])
        if asked:
            severity, fix = worse(severity, "warning"), asked
            title += ": a row remap waits for a GPU reset"
        add(Finding(f"xid-{code}", severity, title, evidence, fix), f"{code}/{bus}")


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
                f"{_cut(e.line.raw, e.line.note)} [{src}]",
                "The GPU stopped answering on PCIe and will not come back without a reboot (power-cycle if a "
                "warm reboot does not bring it back). If it happens again, check its seating, power cables, "
                "the PSU and the slot, update the BIOS/VBIOS, then have it replaced.",
            ),
            e.bus or "?",
        )
    probes = facts.kernel_events("probe-failed")
    if probes:
        src, e = probes[0]
        more = _count(probes) - 1
        add(
            Finding(
                "driver-probe-failed",
                "error",
                "The NVIDIA driver failed to probe a GPU",
                f"{_cut(e.line.raw, e.line.note)} [{src}]" + (f" (and {more} more line(s))" if more else ""),
                "Read the kernel-log lines just before it: a GPU that fell off the bus, a GPU this driver branch "
                "does not support, or a GPU already bound to nouveau or vfio-pci (`lspci -k -d 10de:`).",
            ),
            "host",
        )
    _per_gpu(facts, add)
    hits = facts.kernel_events("inforom-corrupted")
    if hits:
        src, e = hits[0]
        add(
            Finding(
                "inforom-corrupted",
                "warning",
                "A GPU's infoROM is corrupted",
                f"{_cut(e.line.raw, e.line.note)} [{src}]",
                "The GPU still works but its ECC and page-retirement records may be unreliable: collect "
                "`sudo nvidia-bug-report.sh` and ask NVIDIA or the vendor for an infoROM reflash or an RMA.",
            ),
            e.bus or "host",
        )
    _aer(facts, add)
    kills = facts.kernel_events("oom-kill")
    if kills:
        names = ", ".join(sorted({e.detail for _, e in kills if e.detail})[:5])
        add(
            Finding(
                "host-out-of-memory",
                "warning",
                f"The kernel's OOM killer ended {_count(kills)} process(es) (host memory, not GPU memory)",
                f"{_cut(kills[0][1].line.raw, kills[0][1].line.note)} [{kills[0][0]}]"
                + (f"; processes: {names}" if names else ""),
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
        lines = [(e.line.raw, e.line.note) for _, e in hits]
        _nvswitch(add, fatal=fatal, code=code, bus=bus, lines=lines, src=hits[0][0], count=_count(hits))


def _count(hits: list[tuple[str, KernelEvent]]) -> int:
    """Events the hits stand for (a kept event may stand for many: parse_log.Kept)."""
    return sum(e.count for _, e in hits)


_OPEN_MODULES = (
    "This GPU has no GPU System Processor (GSP), which NVIDIA's open kernel modules need (GPUs before "
    "Turing: Volta, Pascal, Maxwell): install the proprietary kernel modules of the same driver (the "
    "distribution's non-open package, e.g. `nvidia-dkms-<branch>` rather than `nvidia-dkms-<branch>-open`, "
    "or the runfile's `-m=kernel`); `provision plan --gpu <id>` names the module flavour a GPU needs."
)


def _per_gpu(facts: Facts, add: Add) -> None:
    """A GPU the driver refuses or cannot bring up: one finding per GPU, naming it."""
    for src, e, n in _by_gpu(facts.kernel_events("init-failed")):
        where = f"GPU {e.bus}" if e.bus else "a GPU"
        add(
            Finding(
                "gpu-init-failed",
                "error",
                f"The driver could not initialise {where} (RmInitAdapter failed)",
                f"{_cut(e.line.raw, e.line.note)} [{src}]" + (f"; {n} lines in all" if n > 1 else ""),
                "Read the kernel-log lines just before it for the cause (a GSP firmware error, a GPU that fell "
                "off the bus, an unsupported GPU); check that the driver branch supports this GPU and that its "
                "power cables are connected, and reboot; if it persists, collect `sudo nvidia-bug-report.sh` "
                "for NVIDIA or the vendor.",
            ),
            e.bus or "host",
        )
    for src, e, _n in _by_gpu(facts.kernel_events("unsupported-gpu")):
        where = f"GPU {e.bus}" if e.bus else "a GPU"
        if e.detail.lower() == "open":
            title = f"The open NVIDIA kernel modules do not support {where}"
            fix = _OPEN_MODULES
        else:
            title = f"The installed driver{f' ({e.detail})' if e.detail else ''} does not support {where}"
            fix = (
                "Install a driver branch that supports the GPU (a legacy branch for old GPUs, a newer one for new "
                "GPUs; NVIDIA's README lists them under 'Supported NVIDIA GPU Products'); `provision plan --gpu "
                "<id>` picks one. A virtual GPU (vGPU profile) needs NVIDIA's vGPU guest driver instead."
            )
        evidence = f"{_cut(e.line.raw, e.line.note)} [{src}]"
        add(Finding("gpu-unsupported-by-driver", "error", title, evidence, fix), e.bus or "host")


def _by_gpu(hits: list[tuple[str, KernelEvent]]) -> list[tuple[str, KernelEvent, int]]:
    """The first event per GPU, with how many events that GPU had."""
    first: dict[str | None, tuple[str, KernelEvent]] = {}
    counts: dict[str | None, int] = {}
    for src, e in hits:
        first.setdefault(e.bus, (src, e))
        counts[e.bus] = counts.get(e.bus, 0) + e.count
    return [(src, e, counts[bus]) for bus, (src, e) in first.items()]


_AER = {"uncorrected (fatal)": "error", "uncorrected (non-fatal)": "warning", "corrected": "info"}


def _aer(facts: Facts, add: Add) -> None:
    groups: dict[str, list[tuple[str, KernelEvent]]] = {}
    for src, e in facts.kernel_events("aer"):
        groups.setdefault(e.detail.lower(), []).append((src, e))
    for kind, hits in groups.items():
        src, first = hits[0]
        devices = ", ".join(sorted({e.bus for _, e in hits if e.bus})[:4])
        n = _count(hits)
        last = f"; last: {_cut(hits[-1][1].line.raw, hits[-1][1].line.note)}" if n > 1 else ""
        add(
            Finding(
                "pcie-aer-error",
                _AER.get(kind, "warning"),
                f"{n} PCIe AER {kind} error report(s)" + (f" on {devices}" if devices else ""),
                f"{_cut(first.line.raw, first.line.note)} [{src}]{last}",
                "PCIe errors between a GPU and its root port: corrected ones are harmless unless they flood the "
                "log; uncorrected ones often come just before a GPU falls off the bus. Reseat the GPU and riser, "
                "check `sudo lspci -vvv -s <bus-id> | grep -iA4 'AER\\|UESta\\|CESta'`, update the BIOS, and "
                "replace the riser or GPU if they recur.",
            ),
            kind,
        )


def _nvswitch(
    add: Add, *, fatal: bool, code: str, bus: str | None, lines: list[tuple[str, str]], src: str, count: int
) -> None:
    """One NVSwitch finding from its event lines, (text, note) each, standing for ``count`` events."""
    n = count
    evidence = f"{n} event(s) [{src}]; first: {_cut(*lines[0])}" + (f"; last: {_cut(*lines[-1])}" if n > 1 else "")
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


def cut_rules(facts: Facts, add: Add) -> None:
    """A capture larger than doctor reads, or a log with more kinds of event than it keeps."""
    for source, key, length, kept in facts.cut:
        add(
            Finding(
                "output-cut",
                "warning",
                f"The {key} capture was cut: {size(length)}, of which the {kept} {size(SECTION_CHARS)} were analysed",
                f"[{source}] {length:,} characters",
                f"doctor reads at most {size(SECTION_CHARS)} of one capture (of a log, its newest part), so a fault "
                f"in the rest is not analysed: run the collector's `{key}` command by hand on the host. A capture "
                "this large means something floods it (a log storm, or output that is not the tool's).",
            ),
            source,
        )
    for source, log in facts.kernel:
        if log.dropped:
            add(
                Finding(
                    "output-cut",
                    "warning",
                    f"The kernel log holds more than {GROUPS} kinds of GPU event: {log.dropped} event(s) past "
                    "them were counted, not analysed",
                    f"[{source}] {log.summary()}",
                    "A log this varied is flooded (thousands of GPUs, codes or processes): read it on the host "
                    "(`sudo dmesg | grep -iE 'nvrm|xid'`) and find what floods it.",
                ),
                f"{source}/events",
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
                    lines=[(e.line, e.note) for e in hits],
                    src=src,
                    count=sum(e.count for e in hits),
                )
        others = [e for e in events if e.kind == "error"]
        if others:
            add(
                Finding(
                    "fabric-manager-error",
                    "error",
                    f"The fabric manager logged {sum(e.count for e in others)} error(s)",
                    f"[{src}] first: {_cut(others[0].line, others[0].note)}"
                    + (f"; last: {_cut(others[-1].line, others[-1].note)}" if len(others) > 1 else ""),
                    "Read the fabric manager log around these lines (`journalctl -u nvidia-fabricmanager`); check "
                    "that its version equals the driver's and restart it after resetting the GPUs.",
                ),
                "fm",
            )
