"""Findings from GPU state: clocks, temperature, ECC, retired pages, remapped rows, MIG,
persistence, PCIe, fans, fabric, NVLink.

Severity policy (applies to every finding doctor reports, see also ``rules_log``):

* ``error`` means "this GPU or host should not take work until someone acts": a fault the
  hardware or driver reports (uncorrectable ECC since the driver loaded, pages or rows
  pending retirement/remapping, row-remapping failure, fallen off the bus, fan failure, fabric
  not ready, driver not talking to the GPUs), or a hardware-asserted slowdown that says the
  chassis is failing: **HW Thermal Slowdown** (the GPU reached its hardware slowdown
  temperature) and **HW Power Brake** (the system's power-brake line is asserted, usually a
  power-supply fault) both cut clocks by half or more and need a hands-on fix. Xids take the
  severity of their immediate-action bucket in compat/xid.yaml.
* ``warning`` means "degraded or risky, worth a look": **HW Slowdown** on its own (NVML notes it
  can also be reported briefly during P-state changes, so one sample is not proof of a fault;
  its sub-reasons, when active, are reported as errors separately), SW Thermal Slowdown (the
  driver keeps the GPU under its operating limit: cooling is marginal), temperature within 5 C
  of the slowdown threshold, uncorrectable ECC errors counted only in the lifetime aggregate,
  PCIe links narrower than the GPU's maximum, PCIe generation below max *while the GPU is busy*
  (idle GPUs lower the link speed on purpose, so an idle gen downshift is not reported), MIG
  mode waiting for a reset, persistence mode off on a Linux data-center GPU.
* ``info`` means "normal, but you may want to know": **SW Power Cap** (the GPU is drawing up to
  its power limit: expected under load and meaningless at idle) unless the enforced limit was
  lowered below the default on a busy GPU (then warning), correctable ECC counts, retired
  pages that are already retired.

Persistence mode is reported only for Linux data-center GPUs: Windows has no persistence mode
(nvidia-smi shows N/A) and on desktop/workstation cards the display server keeps the driver
loaded anyway. A capture of a healthy host therefore yields no error findings.
"""

from __future__ import annotations

from collections.abc import Callable

from provision.doctor.model import Finding
from provision.doctor.parse_smi import NvlinkGpu
from provision.doctor.state import CLOCK_REASONS, GpuState

Add = Callable[[Finding, str], None]  # (finding, dedupe key)

NEAR_THRESHOLD_C = 5.0
BUSY_UTIL = 10.0

_CLOCK_RULES = (
    # reason key, finding id, severity, title, fix
    (
        "hw_thermal_slowdown",
        "clocks-hw-thermal-slowdown",
        "error",
        "HW Thermal Slowdown is active",
        "The GPU reached its hardware slowdown temperature: check airflow, fans and inlet temperature "
        "(`nvidia-smi -q -d TEMPERATURE`, `ipmitool sdr type temperature`), clear blocked vents or failed fans, "
        "and keep the GPU out of service until it runs below its slowdown threshold.",
    ),
    (
        "hw_power_brake_slowdown",
        "clocks-power-brake",
        "error",
        "HW Power Brake Slowdown is active",
        "An external power-brake signal (usually a failed power supply or lost PSU redundancy) is holding the clocks "
        "down: check the power supplies and the BMC event log (`ipmitool sel list`, `ipmitool sdr type 'Power Supply'`), "
        "replace or reseat the failed PSU, and drain the node meanwhile.",
    ),
    (
        "hw_slowdown",
        "clocks-hw-slowdown",
        "warning",
        "HW Slowdown is active",
        "The board asserted HW Slowdown (over-temperature, power brake or power-excursion protection). It can flicker "
        "during P-state changes, so sample again (`nvidia-smi -q -d PERFORMANCE`); if it stays active, act on its "
        "sub-reason and check the chassis cooling, power supplies and the BMC event log (`ipmitool sel list`).",
    ),
    (
        "sw_thermal_slowdown",
        "clocks-sw-thermal-slowdown",
        "warning",
        "SW Thermal Slowdown is active",
        "The driver is lowering clocks to keep the GPU under its maximum operating temperature: improve cooling "
        "(airflow, fan policy, inlet temperature) and compare `nvidia-smi -q -d TEMPERATURE` with the thresholds.",
    ),
)


def _where(g: GpuState) -> str:
    parts = [
        g.pstate and f"{g.pstate}",
        g.util_gpu is not None and f"GPU util {g.util_gpu:g} %",
        g.power_draw is not None and g.power_limit and f"{g.power_draw:g} W of {g.power_limit:g} W limit",
        g.temp is not None and f"{g.temp:g} C",
    ]
    shown = [p for p in parts if p]
    return f" ({', '.join(shown)})" if shown else ""


def _busy(g: GpuState) -> bool:
    if g.util_gpu is not None and g.util_gpu >= BUSY_UTIL:
        return True
    return g.pstate == "P0" and g.clocks.get("gpu_idle") is False and (g.util_gpu is None or g.util_gpu > 0)


def _bus(g: GpuState) -> str:
    return g.bus_id or (str(g.index) if g.index is not None else "<bus-id>")


def _key(g: GpuState) -> str:
    return g.bus_id or g.uuid or f"index {g.index}"


def gpu_rules(g: GpuState, add: Add) -> None:
    for rule in (_clocks, _temperature, _ecc, _retirement, _mig, _pcie, _fan, _fabric, _reset):
        rule(g, add)


def _clocks(g: GpuState, add: Add) -> None:
    for key, ident, severity, title, fix in _CLOCK_RULES:
        if g.clocks.get(key):
            evidence = f"{g.label}: {g.clocks_label} > {CLOCK_REASONS[key]}: Active{_where(g)} [{g.source}]"
            add(Finding(ident, severity, f"{title} on {g.label}", evidence, fix), _key(g))
    if g.clocks.get("sw_power_cap"):
        lowered = (
            g.power_limit is not None
            and g.power_default_limit is not None
            and g.power_limit < g.power_default_limit - 0.5
        )
        evidence = f"{g.label}: {g.clocks_label} > SW Power Cap: Active{_where(g)} [{g.source}]"
        if lowered and _busy(g):
            add(
                Finding(
                    "clocks-sw-power-cap",
                    "warning",
                    f"SW Power Cap holds back busy {g.label}: its power limit was lowered",
                    f"{evidence}; enforced limit {g.power_limit:g} W, default {g.power_default_limit:g} W",
                    f"Restore the default limit with `sudo nvidia-smi -i {_bus(g)} -pl {g.power_default_limit:g}` "
                    "and find what lowered it (a `nvidia-smi -pl` in a boot script, a DCGM power policy).",
                ),
                _key(g),
            )
        else:
            add(
                Finding(
                    "clocks-sw-power-cap",
                    "info",
                    f"SW Power Cap is active on {g.label} (normal power management)",
                    evidence,
                    "Nothing to do: the GPU is drawing up to its power limit, which is how it manages power "
                    "under load (and is meaningless at idle). Check `nvidia-smi -q -d POWER` only if jobs run "
                    "slower than expected.",
                ),
                _key(g),
            )


def _temperature(g: GpuState, add: Add) -> None:
    if g.temp is None or g.temp <= 0:
        return
    to_slow = to_stop = None
    if g.temp_slowdown:
        to_slow = g.temp_slowdown - g.temp
    elif g.tlimit is not None and g.tlimit_slowdown is not None:
        to_slow = g.tlimit - g.tlimit_slowdown
    if g.temp_shutdown:
        to_stop = g.temp_shutdown - g.temp
    elif g.tlimit is not None and g.tlimit_shutdown is not None:
        to_stop = g.tlimit - g.tlimit_shutdown
    limits = (
        f"slowdown at {g.temp_slowdown:g} C, shutdown at {g.temp_shutdown or 0:g} C"
        if g.temp_slowdown
        else f"T.Limit headroom {g.tlimit:g} C, slowdown at {g.tlimit_slowdown:g} C"
        if to_slow is not None
        else ""
    )
    evidence = f"{g.label}: GPU Current Temp {g.temp:g} C; {limits} [{g.source}]"
    fix = (
        "Improve cooling before the GPU throttles: check fans, airflow and inlet temperature "
        "(`nvidia-smi -q -d TEMPERATURE`, `ipmitool sdr type temperature`)."
    )
    if to_stop is not None and to_stop <= NEAR_THRESHOLD_C:
        where = "has reached" if to_stop <= 0 else f"is within {to_stop:g} C of"
        add(
            Finding(
                "temperature-near-shutdown",
                "error",
                f"{g.label} {where} its shutdown temperature",
                evidence,
                "Stop the work on this GPU now and fix its cooling; " + fix,
            ),
            _key(g),
        )
    elif to_slow is not None and to_slow <= NEAR_THRESHOLD_C:
        where = "has reached" if to_slow <= 0 else f"is within {to_slow:g} C of"
        add(
            Finding(
                "temperature-near-slowdown", "warning", f"{g.label} {where} its slowdown temperature", evidence, fix
            ),
            _key(g),
        )


def _ecc(g: GpuState, add: Add) -> None:
    fix = (
        f"Drain the GPU, then reset it (`sudo nvidia-smi -r -i {_bus(g)}`) or reboot so the failing memory is "
        "retired or remapped; check `nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER` afterwards and run "
        "`dcgmi diag -r 3`. Replace the GPU if uncorrectable errors keep appearing."
    )
    if g.ecc_volatile_unc:
        add(
            Finding(
                "ecc-uncorrectable",
                "error",
                f"{g.ecc_volatile_unc} uncorrectable ECC error(s) on {g.label} since the driver loaded",
                f"{g.label}: ECC Errors > Volatile uncorrectable {g.ecc_volatile_unc}, aggregate "
                f"{g.ecc_aggregate_unc if g.ecc_aggregate_unc is not None else 'n/a'} [{g.source}]",
                fix,
            ),
            _key(g),
        )
    elif g.ecc_aggregate_unc:
        add(
            Finding(
                "ecc-uncorrectable",
                "warning",
                f"{g.ecc_aggregate_unc} uncorrectable ECC error(s) in {g.label}'s lifetime "
                "(none since the driver loaded)",
                f"{g.label}: ECC Errors > Aggregate uncorrectable {g.ecc_aggregate_unc}, volatile 0 [{g.source}]",
                "Past uncorrectable errors: check that their pages are retired or rows remapped "
                "(`nvidia-smi -q -d PAGE_RETIREMENT,ROW_REMAPPER`) and watch whether the count grows; "
                "a rising count means the GPU should be replaced.",
            ),
            _key(g),
        )
    corr = g.ecc_volatile_corr or g.ecc_aggregate_corr
    if corr:
        add(
            Finding(
                "ecc-correctable",
                "info",
                f"Correctable ECC errors on {g.label}",
                f"{g.label}: correctable volatile {g.ecc_volatile_corr}, aggregate {g.ecc_aggregate_corr} [{g.source}]",
                "Corrected by the hardware; nothing to do unless the count climbs quickly "
                "(then run `dcgmi diag -r 3`).",
            ),
            _key(g),
        )


def _retirement(g: GpuState, add: Add) -> None:
    reset = f"`sudo nvidia-smi -r -i {_bus(g)}` (stop its processes first) or reboot"
    if g.retired_pending:
        add(
            Finding(
                "retired-pages-pending",
                "error",
                f"Retired pages are pending on {g.label}",
                f"{g.label}: Retired Pages > Pending: Yes (single-bit {g.retired_sbe}, double-bit "
                f"{g.retired_dbe}) [{g.source}]",
                f"Memory pages are waiting to be retired, which happens only when the driver reloads: {reset}.",
            ),
            _key(g),
        )
    elif (g.retired_sbe or 0) + (g.retired_dbe or 0) > 0:
        add(
            Finding(
                "retired-pages",
                "info",
                f"{g.label} has retired memory pages",
                f"{g.label}: Retired Pages > single-bit {g.retired_sbe}, double-bit {g.retired_dbe} [{g.source}]",
                "Already retired, nothing to do now; a GPU that keeps retiring pages should be replaced.",
            ),
            _key(g),
        )
    if g.remap_pending:
        add(
            Finding(
                "remapped-rows-pending",
                "error",
                f"A row remap is pending on {g.label}",
                f"{g.label}: Remapped Rows > Pending: Yes (uncorrectable {g.remap_unc}, correctable "
                f"{g.remap_corr}) [{g.source}]",
                f"A memory row is marked for remapping, which takes effect only after a GPU reset: {reset}.",
            ),
            _key(g),
        )
    if g.remap_failure:
        add(
            Finding(
                "remapped-rows-failed",
                "error",
                f"Row remapping failed on {g.label}",
                f"{g.label}: Remapped Rows > Remapping Failure Occurred: Yes [{g.source}]",
                "The GPU could not remap a failing memory row (no spare rows left or an unrecoverable error): "
                "drain it and have it replaced; collect `sudo nvidia-bug-report.sh` for the RMA.",
            ),
            _key(g),
        )


def _mig(g: GpuState, add: Add) -> None:
    if g.mig_current and g.mig_pending and g.mig_current.lower() != g.mig_pending.lower():
        add(
            Finding(
                "mig-pending-reboot",
                "warning",
                f"MIG mode change on {g.label} waits for a GPU reset",
                f"{g.label}: MIG Mode > Current: {g.mig_current}, Pending: {g.mig_pending} [{g.source}]",
                f"Stop the GPU's processes and reset it (`sudo nvidia-smi -r -i {_bus(g)}`) or reboot to apply "
                f"MIG mode {g.mig_pending}; to cancel, set it back with "
                f"`sudo nvidia-smi -i {_bus(g)} -mig {1 if g.mig_current.lower() == 'enabled' else 0}`.",
            ),
            _key(g),
        )


def persistence_rule(gpus: list[GpuState], add: Add) -> None:
    """One finding for all Linux data-center GPUs with persistence mode off."""
    off: dict[str, GpuState] = {}
    for g in gpus:
        if g.persistence is False and not g.windows and g.datacenter:
            off.setdefault(_key(g), g)
    if not off:
        return
    shown = list(off.values())
    names = ", ".join(g.bus_id or f"#{g.index}" for g in shown[:8])
    if len(shown) > 8:
        names += f" and {len(shown) - 8} more"
    add(
        Finding(
            "persistence-off",
            "warning",
            f"Persistence mode is off on {len(shown)} data-center GPU(s)",
            f"Persistence Mode: Disabled on {names} ({shown[0].name}) [{shown[0].source}]",
            "Without persistence the driver tears the GPU state down whenever the last client exits, so every "
            "job start pays the initialisation and settings such as application clocks can reset: "
            "`sudo systemctl enable --now nvidia-persistenced` (it survives reboots, unlike `nvidia-smi -pm 1`).",
        ),
        "host",
    )


def _pcie(g: GpuState, add: Add) -> None:
    lspci = f"`sudo lspci -vv -s {g.bus_id or '<bus-id>'} | grep -E 'LnkCap|LnkSta'`"
    link = (
        f"{g.label}: PCIe link x{g.pcie_width} of x{g.pcie_width_max}, gen {g.pcie_gen} of "
        f"{g.pcie_gen_max}{_where(g)} [{g.source}]"
    )
    if g.pcie_width and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
        add(
            Finding(
                "pcie-link-degraded",
                "warning",
                f"{g.label} runs its PCIe link at x{g.pcie_width} instead of x{g.pcie_width_max}",
                link,
                "The link trained narrower than the GPU and slot allow (NVML's maximum already accounts for the "
                f"slot): reseat the GPU or riser, check the slot wiring and BIOS bifurcation settings ({lspci}). "
                "A narrow link cuts host-GPU bandwidth.",
            ),
            _key(g),
        )
    elif g.pcie_gen and g.pcie_gen_max and g.pcie_gen < g.pcie_gen_max and _busy(g):
        add(
            Finding(
                "pcie-link-degraded",
                "warning",
                f"Busy {g.label} runs PCIe gen {g.pcie_gen} instead of gen {g.pcie_gen_max}",
                link,
                "Under load the link should run at its maximum generation (idle GPUs lower it on purpose): "
                f"check {lspci}, the BIOS PCIe speed setting, risers and retimers; reseat the GPU.",
            ),
            _key(g),
        )


def _fan(g: GpuState, add: Add) -> None:
    fan = (g.fan or "").strip()
    if "ERR" in fan.upper() or "unknown error" in fan.lower():
        add(
            Finding(
                "fan-error",
                "error",
                f"The fan of {g.label} reports an error",
                f"{g.label}: Fan: {fan} [{g.source}]",
                "The fan failed, is disconnected, or its sensor cannot be read: inspect it (and the chassis fans "
                "for passively cooled boards), and watch `nvidia-smi -q -d TEMPERATURE,PERFORMANCE` for thermal "
                "slowdown until it is replaced.",
            ),
            _key(g),
        )


def _fabric(g: GpuState, add: Add) -> None:
    state, status = g.fabric_state, g.fabric_status
    if (state and state.lower() != "completed") or (status and status.lower() != "success"):
        add(
            Finding(
                "fabric-not-ready",
                "error",
                f"The NVLink fabric of {g.label} is not ready",
                f"{g.label}: Fabric > State: {state}, Status: {status} [{g.source}]",
                "CUDA on NVSwitch systems waits for the fabric manager: `sudo systemctl enable --now "
                "nvidia-fabricmanager` (its version must equal the driver's) and read "
                "`journalctl -u nvidia-fabricmanager`.",
            ),
            _key(g),
        )


def _reset(g: GpuState, add: Add) -> None:
    action = g.recovery_action if g.recovery_action and g.recovery_action.lower() != "none" else None
    if g.reset_required or g.drain_recommended or action:
        shown = ", ".join(
            x
            for x in (
                g.reset_required and "Reset Required: Yes",
                g.drain_recommended and "Drain and Reset Recommended: Yes",
                action and f"GPU Recovery Action: {action}",
            )
            if x
        )
        add(
            Finding(
                "gpu-reset-required",
                "error",
                f"The driver asks for a reset of {g.label}",
                f"{g.label}: {shown} [{g.source}]",
                f"Drain the GPU, then `sudo nvidia-smi -r -i {_bus(g)}`; reboot the node if the reset fails "
                "or the recovery action says so.",
            ),
            _key(g),
        )


def nvlink_rules(gpus: list[NvlinkGpu], source: str, add: Add) -> None:
    for gpu in gpus:
        down = [n for n, v in sorted(gpu.links.items()) if "inactive" in v.lower()]
        if not down:
            continue
        links = ", ".join(f"Link {n}" for n in down)
        add(
            Finding(
                "nvlink-inactive",
                "error",
                f"{len(down)} NVLink link(s) inactive on GPU {gpu.index} ({gpu.name})",
                f"GPU {gpu.index} ({gpu.name}, {gpu.uuid}): {links}: <inactive>; "
                f"{len(gpu.links) - len(down)} of {len(gpu.links)} active [{source}]",
                "Inactive links cut GPU-to-GPU bandwidth and can push NCCL onto PCIe: reset the GPUs "
                "(`sudo nvidia-smi -r`, all GPUs of the baseboard) or reboot, then restart nvidia-fabricmanager on "
                f"NVSwitch systems; check `nvidia-smi nvlink -e -i {gpu.index}` and have the baseboard serviced if "
                "links stay down.",
            ),
            gpu.uuid,
        )
