"""The nvidia-smi fields the product reads, declared once: where each one is in ``-q -x`` XML,
in ``-q`` text, in ``--query-gpu`` CSV and in the default table, and how its text is converted.

doctor's parsers (``provision.doctor.parse_smi``) walk ``GPU_FIELDS`` and ``LOG_FIELDS`` instead
of naming fields themselves, and verify (``provision.verify.facts``) takes its ``--query-gpu``
property names from here; what stays in a parser is structure the formats do not share (the
GPU's bus id in a section header, ECC counters summed over a family of elements, clock reasons,
which default-table column means what on Windows).

Path conventions:

- ``xml``: ElementTree paths under ``<gpu>`` (``LOG_FIELDS``: under ``<nvidia_smi_log>``);
- ``text``: ``/``-separated labels under the ``GPU 0000:..`` section of ``nvidia-smi -q``,
  matched case-insensitively; a label ending in ``*`` matches the first child whose label
  starts with the rest;
- both may name the power section as ``{power}``: the first of ``XML_POWER`` / ``TEXT_POWER``
  the GPU has (newer drivers print ``GPU Power Readings``, older ``Power Readings``);
- ``query``: ``--query-gpu`` property names; ``QUERY_ALIASES`` maps the other spellings
  nvidia-smi accepts (``gpu_name``) to the one used here;
- ``table``: (row, regex group) of the GPU's rows in the default table (rows 1-3 of a GPU block).

Several paths (or names) are alternatives, first readable one wins. A value that reads "N/A",
"[Not Supported]" and the like is ``None`` (``clean``), except for a ``raw`` field, whose text is
kept as printed ("ERR!" on a fan is the fault itself).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_NUMBER = re.compile(r"^\s*[+-]?\d{1,15}(?:\.\d{1,15})?")
_VERSION = re.compile(r"\d{1,6}(?:\.\d{1,6}){1,3}")


# -- converters ------------------------------------------------------------------------------
def clean(text: str | None) -> str | None:
    """Strip whitespace; map the not-available spellings to None."""
    if text is None:
        return None
    t = text.strip()
    if not t or t.strip("[]").lower() in (
        "n/a",
        "not supported",
        "not found",
        "unknown",
        "none",
        "requested functionality has been deprecated",
        "insufficient permissions",
    ):
        return None
    return t


def number(text: str | None) -> float | None:
    """The leading number of "38 C", "67.74 W", "16x", "99 %"; None for N/A and friends."""
    if text is None:
        return None
    m = _NUMBER.match(text)
    return float(m[0]) if m else None


def integer(text: str | None) -> int | None:
    value = number(text)
    return int(value) if value is not None else None


def flag(text: str | None) -> bool | None:
    """Yes/No, Active/Not Active, Enabled/Disabled -> True/False; anything else None."""
    if text is None:
        return None
    t = text.strip().lower()
    if t in ("yes", "active", "enabled", "on", "true"):
        return True
    if t in ("no", "not active", "disabled", "off", "false"):
        return False
    return None


def version(text: str | None) -> str | None:
    """``580.95.05`` from "580.95.05", "13.3 [Deprecated; ...]"; None when it does not start with one."""
    m = _VERSION.match(clean(text) or "")
    return m[0] if m else None


def device_id(text: str) -> str:
    """``0x20b5`` from ``0x20B510DE`` (nvidia-smi prints the device id, then the vendor's)."""
    dev = text.lower()
    return "0x" + dev[2:6] if dev.startswith("0x") and len(dev) == 10 else dev


# -- the table -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Field:
    name: str  # the record attribute it fills (doctor's GpuState / SmiResult, verify's Gpu)
    convert: Callable[[str | None], Any] = clean
    xml: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    query: tuple[str, ...] = ()
    table: tuple[int, int] | None = None
    raw: bool = False  # keep the printed text (stripped), N/A included


def _f(name: str, convert: Callable[[str | None], Any], xml=(), text=(), query=(), *, table=None, raw=False) -> Field:
    as_tuple = lambda v: (v,) if isinstance(v, str) else tuple(v)  # noqa: E731
    return Field(name, convert, as_tuple(xml), as_tuple(text), as_tuple(query), table, raw)


XML_POWER = ("gpu_power_readings", "power_readings")
TEXT_POWER = ("GPU Power Readings", "Power Readings")
_LINK = "pci/pci_gpu_link_info"
_TLINK = "PCI/GPU Link Info"

# Host-wide values: under <nvidia_smi_log> / before the first GPU section; CSV repeats them per row.
LOG_FIELDS: tuple[Field, ...] = (
    _f("driver_version", version, "driver_version", ("KMD Version", "Driver Version"), "driver_version"),
    _f("cuda_version", version, "cuda_version", ("CUDA UMD Version", "CUDA Version")),
    _f("attached", integer, "attached_gpus", "Attached GPUs"),
)

# Per GPU. Identity (index, bus id) and the ECC counters are here for their --query-gpu names;
# the XML and -q parsers read those from the section header and by summing element families.
# fmt: off
GPU_FIELDS: tuple[Field, ...] = (
    _f("index", integer, query="index"),
    _f("bus_id", clean, "pci/pci_bus_id", query="pci.bus_id"),
    _f("device_id", clean, "pci/pci_device_id", "PCI/Device Id", "pci.device_id"),
    _f("name", clean, "product_name", "Product Name", "name"),
    _f("brand", clean, "product_brand", "Product Brand"),
    _f("uuid", clean, "uuid", "GPU UUID", "uuid"),
    _f("persistence", flag, "persistence_mode", "Persistence Mode", "persistence_mode"),
    _f("driver_model", clean, "driver_model/current_dm", "Driver Model/Current", "driver_model.current"),
    _f("pstate", clean, "performance_state", "Performance State", "pstate"),
    _f("util_gpu", number, "utilization/gpu_util", "Utilization/Gpu", "utilization.gpu", table=(2, 6)),
    _f("temp", number, "temperature/gpu_temp", "Temperature/GPU Current Temp", "temperature.gpu", table=(2, 2)),
    _f("temp_slowdown", number, "temperature/gpu_temp_slow_threshold", "Temperature/GPU Slowdown Temp"),
    _f("temp_shutdown", number, "temperature/gpu_temp_max_threshold", "Temperature/GPU Shutdown Temp"),
    _f("tlimit", number, "temperature/gpu_temp_tlimit", "Temperature/GPU T.Limit Temp"),
    _f("tlimit_slowdown", number, "temperature/gpu_temp_slow_tlimit_threshold",
       "Temperature/GPU Slowdown T.Limit Temp"),
    _f("tlimit_shutdown", number, "temperature/gpu_temp_max_tlimit_threshold",
       "Temperature/GPU Shutdown T.Limit Temp"),
    _f("power_draw", number,
       ("{power}/power_draw", "{power}/average_power_draw", "{power}/instant_power_draw"),
       ("{power}/Power Draw", "{power}/Average Power Draw", "{power}/Instantaneous Power Draw"),
       "power.draw"),
    _f("power_limit", number,
       ("{power}/enforced_power_limit", "{power}/current_power_limit", "{power}/power_limit"),
       ("{power}/Enforced Power Limit", "{power}/Current Power Limit", "{power}/Power Limit"),
       ("enforced.power.limit", "power.limit")),
    _f("power_default_limit", number, "{power}/default_power_limit", "{power}/Default Power Limit",
       "power.default_limit"),
    _f("ecc_enabled", flag, "ecc_mode/current_ecc", "ECC Mode/Current", "ecc.mode.current"),
    _f("ecc_volatile_unc", integer, query="ecc.errors.uncorrected.volatile.total", table=(1, 6)),
    _f("ecc_aggregate_unc", integer, query="ecc.errors.uncorrected.aggregate.total"),
    _f("ecc_volatile_corr", integer, query="ecc.errors.corrected.volatile.total"),
    _f("ecc_aggregate_corr", integer, query="ecc.errors.corrected.aggregate.total"),
    _f("retired_sbe", integer, "retired_pages/multiple_single_bit_retirement/retired_count",
       "Retired Pages/Single Bit ECC", "retired_pages.single_bit_ecc.count"),
    _f("retired_dbe", integer, "retired_pages/double_bit_retirement/retired_count",
       "Retired Pages/Double Bit ECC", "retired_pages.double_bit.count"),
    _f("retired_pending", flag, ("retired_pages/pending_retirement", "retired_pages/pending_blacklist"),
       "Retired Pages/Pending*", "retired_pages.pending"),
    _f("remap_corr", integer, "remapped_rows/remapped_row_corr", "Remapped Rows/Correctable Error",
       "remapped_rows.correctable"),
    _f("remap_unc", integer, "remapped_rows/remapped_row_unc", "Remapped Rows/Uncorrectable Error",
       "remapped_rows.uncorrectable"),
    _f("remap_pending", flag, "remapped_rows/remapped_row_pending", "Remapped Rows/Pending", "remapped_rows.pending"),
    _f("remap_failure", flag, "remapped_rows/remapped_row_failure", "Remapped Rows/Remapping Failure Occurred",
       "remapped_rows.failure"),
    _f("mig_current", clean, "mig_mode/current_mig", "MIG Mode/Current", "mig.mode.current", table=(3, 1)),
    _f("mig_pending", clean, "mig_mode/pending_mig", "MIG Mode/Pending", "mig.mode.pending"),
    _f("pcie_gen", integer, f"{_LINK}/pcie_gen/current_link_gen", f"{_TLINK}/PCIe Generation/Current",
       "pcie.link.gen.current"),
    _f("pcie_gen_max", integer, f"{_LINK}/pcie_gen/max_link_gen", f"{_TLINK}/PCIe Generation/Max",
       "pcie.link.gen.max"),
    _f("pcie_width", integer, f"{_LINK}/link_widths/current_link_width", f"{_TLINK}/Link Width/Current",
       "pcie.link.width.current"),
    _f("pcie_width_max", integer, f"{_LINK}/link_widths/max_link_width", f"{_TLINK}/Link Width/Max",
       "pcie.link.width.max"),
    _f("fan", clean, "fan_speed", "Fan Speed", "fan.speed", table=(2, 1), raw=True),
    _f("fabric_state", clean, "fabric/state", "Fabric/State", "fabric.state"),
    _f("fabric_status", clean, "fabric/status", "Fabric/Status", "fabric.status"),
    _f("reset_required", flag, "gpu_reset_status/reset_required", "GPU Reset Status/Reset Required"),
    _f("drain_recommended", flag, "gpu_reset_status/drain_and_reset_recommended",
       "GPU Reset Status/Drain and Reset Recommended"),
    _f("recovery_action", clean, "gpu_recovery_action", "GPU Recovery Action", "gpu_recovery_action"),
)
# fmt: on

FIELDS: dict[str, Field] = {f.name: f for f in (*LOG_FIELDS, *GPU_FIELDS)}

# Other spellings --query-gpu accepts for the same property.
QUERY_ALIASES = {"gpu_name": "name", "gpu_bus_id": "pci.bus_id", "gpu_uuid": "uuid"}


def query_names(*names: str) -> tuple[str, ...]:
    """The ``--query-gpu`` property of each field named (its first spelling), in that order."""
    return tuple(FIELDS[n].query[0] for n in names)


def first(paths: tuple[str, ...], read: Callable[[str], str | None]) -> str | None:
    """The first of ``paths`` that ``read`` finds readable (not N/A), cleaned; else None."""
    for path in paths:
        value = clean(read(path))
        if value is not None:
            return value
    return None
