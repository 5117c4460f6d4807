"""The facts doctor reads before any rule runs, shared by every input's parser and rules.

``Facts`` holds what every file or collector section said; the inputs of the table in
``provision.doctor.inputs`` that have no field of their own keep what they read in ``parsed``
under their key (``facts.parsed["bmc-sel"]``: a list of (source, what the parser returned)).
``Add`` is how a rule reports a finding: ``add(finding, key)``, de-duplicated by (id, key).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from provision.doctor.model import Finding
from provision.doctor.parse_log import FabricEvent, KernelEvent, KernelLog, Message, PciScan
from provision.doctor.state import GpuState

Add = Callable[[Finding, str], None]  # (finding, dedupe key)


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
    pci: PciScan | None = None  # the NVIDIA devices on the PCI bus (collector section pci-nvidia)
    cut: list[tuple[str, str, int, str]] = field(default_factory=list)  # (source, key, characters, part kept)
    parsed: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)  # input key -> [(source, parsed)]

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

    def inputs(self, key: str) -> list[tuple[str, Any]]:
        """What the table's input ``key`` read: (source, parsed) pairs, in reading order."""
        return self.parsed.get(key, [])
