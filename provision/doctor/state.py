"""The normalised state the nvidia-smi parsers produce and the rules read.

Every nvidia-smi format (``-q -x`` XML schema v9-v13, ``-q`` text, the default table,
``--query-gpu`` CSV) is reduced to ``GpuState`` records with the same fields, so a rule is
written once. A field the format does not carry, or that reads "N/A" / "[Not Supported]", is
``None``: rules only fire on values that were actually read. Where each field is in each format,
and its converter, is declared once in ``provision.smi``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_BUS = re.compile(r"(?:PCI:)?([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.([0-7]))?")

# Clock event (formerly "throttle") reasons: canonical key -> label nvidia-smi -q prints.
CLOCK_REASONS = {
    "gpu_idle": "Idle",
    "applications_clocks_setting": "Applications Clocks Setting",
    "sw_power_cap": "SW Power Cap",
    "hw_slowdown": "HW Slowdown",
    "hw_thermal_slowdown": "HW Thermal Slowdown",
    "hw_power_brake_slowdown": "HW Power Brake Slowdown",
    "sync_boost": "Sync Boost",
    "sw_thermal_slowdown": "SW Thermal Slowdown",
    "display_clocks_setting": "Display Clock Setting",
}


def normalize_bus(text: str | None) -> str | None:
    """``00000000:3B:00.0`` / ``PCI:0000:3b:00`` / ``0001:00:00.0`` -> ``0000:3b:00.0`` style.

    The domain keeps at least four hex digits, everything is lower case, and the function is
    kept only when the input had one (Xid lines name ``bus:device`` without it).
    """
    if not text:
        return None
    m = _BUS.search(text)
    if not m:
        return None
    domain = f"{int(m[1], 16):04x}"
    out = f"{domain}:{int(m[2], 16):02x}:{int(m[3], 16):02x}"
    return f"{out}.{m[4]}" if m[4] is not None else out


def same_gpu(a: str | None, b: str | None) -> bool:
    """Bus ids match, ignoring a missing PCI function on either side."""
    if not a or not b:
        return False
    return a.split(".")[0] == b.split(".")[0]


@dataclass(frozen=True, slots=True)
class GpuState:
    source: str  # where it was read (file or section) - for evidence
    fmt: str  # "-q -x", "-q", "table", "csv"
    index: int | None = None
    bus_id: str | None = None
    name: str | None = None
    brand: str | None = None
    uuid: str | None = None
    persistence: bool | None = None
    driver_model: str | None = None  # WDDM / TCC on Windows
    pstate: str | None = None
    util_gpu: float | None = None
    clocks_label: str = "Clocks Event Reasons"
    clocks: dict[str, bool] = field(default_factory=dict)
    temp: float | None = None
    temp_slowdown: float | None = None
    temp_shutdown: float | None = None
    tlimit: float | None = None  # headroom to T.Limit (newer drivers)
    tlimit_slowdown: float | None = None  # headroom value at which slowdown starts
    tlimit_shutdown: float | None = None
    power_draw: float | None = None
    power_limit: float | None = None
    power_default_limit: float | None = None
    ecc_enabled: bool | None = None
    ecc_volatile_unc: int | None = None
    ecc_aggregate_unc: int | None = None
    ecc_volatile_corr: int | None = None
    ecc_aggregate_corr: int | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    remap_corr: int | None = None
    remap_unc: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    mig_current: str | None = None
    mig_pending: str | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    fan: str | None = None  # raw text: "30 %", "ERR!", "N/A"
    fabric_state: str | None = None
    fabric_status: str | None = None
    reset_required: bool | None = None
    drain_recommended: bool | None = None
    recovery_action: str | None = None

    @property
    def label(self) -> str:
        """``GPU 0000:19:00.0 (NVIDIA H100 80GB HBM3)`` - how evidence names this GPU."""
        ident = self.bus_id or (f"#{self.index}" if self.index is not None else "?")
        return f"GPU {ident} ({self.name})" if self.name else f"GPU {ident}"

    @property
    def windows(self) -> bool:
        return (self.driver_model or "").upper() in ("WDDM", "TCC", "MCDM")

    @property
    def datacenter(self) -> bool:
        """A data-center board (Tesla, A100, H100, L4 ...), not GeForce/TITAN/Quadro/RTX/vGPU."""
        name = self.name or ""
        brand = (self.brand or "").lower()
        if re.search(r"geforce|titan|quadro|\brtx\b|grid|laptop|graphics device", name, re.I):
            return False
        if brand and brand not in ("tesla", "nvidia"):
            return False
        return bool(re.search(r"tesla|\b[abhlkptv]\d{1,3}[a-z]?\b|[abh]\d{3}|gh200|gb200|gb300|\bl40", name, re.I))


@dataclass(slots=True)
class SmiResult:
    """What one nvidia-smi capture says about the host and its GPUs."""

    gpus: list[GpuState] = field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    attached: int | None = None
    messages: list[str] = field(default_factory=list)  # lines outside the structured output
