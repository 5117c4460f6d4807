"""The driver as the GPUs see it: nvidia-smi, the GPUs, persistence, packages and their holds,
the fabric manager, the MIG layout."""

from __future__ import annotations

import re
import shlex

import pytest

from provision.errors import InputError
from provision.hostpool import ansible_boolean
from provision.verify.checks import assert_packages, check, fail, first_line, need_smi
from provision.verify.facts import FABRIC_MANAGER_VERSION, LINE_LIMIT, MIG_LGI, MODULE_OPTIONS_FILE
from provision.verify.settings import flag


@check("nvidia-smi", "nvidia-smi runs and reports the planned driver")
def check_nvidia_smi(facts, plan, evidence):
    res, gpus = facts.smi
    if res.timed_out is not None:
        lines = facts.kernel_log
        for line in lines:
            evidence(f"kernel log: {line}")
        last = f"; the kernel log's last GPU line: {lines[-1]}" if lines else "; the kernel log shows no GPU line"
        fail(
            f"nvidia-smi did not answer in {res.timed_out} s: the GPU may have fallen off the bus{last} "
            "(provision doctor names the cause)"
        )
    if res.rc != 0:
        first = first_line(res.text) or f"exit {res.rc}"
        evidence(f"nvidia-smi: exit {res.rc}: {first}")
        fail(f"nvidia-smi fails: {first} (provision doctor names the cause)")
    if not gpus:
        fail("nvidia-smi lists no GPU")
    drivers = sorted({g.driver for g in gpus})
    evidence(f"nvidia-smi: driver {', '.join(drivers)} on {len(gpus)} GPU(s)")
    if drivers != [plan.driver.version]:
        fail(f"nvidia-smi reports driver {', '.join(drivers)}; the plan pins {plan.driver.version}")


@check("gpus", "the GPU model and count are the plan's")
def check_gpus(facts, plan, target, evidence):
    gpus = need_smi(facts)
    wanted = {d.lower() for d in plan.gpu.pci_device_ids}
    names = sorted({f"{g.name} ({g.device_id})" for g in gpus})
    evidence(f"{len(gpus)} GPU(s): {', '.join(names)}")
    foreign = [g for g in gpus if g.device_id.lower() not in wanted]
    if foreign:
        fail(
            f"GPU {foreign[0].index} is {foreign[0].name} ({foreign[0].device_id}); the plan is for "
            f"{plan.gpu.name} (PCI device {', '.join(sorted(wanted))})"
        )
    if target.gpu_count is not None and len(gpus) != target.gpu_count:
        fail(f"{len(gpus)} GPU(s) visible; {target.gpu_count} expected (a GPU fell off the bus or is not seated?)")


@check("persistence", "persistence mode is on and nvidia-persistenced runs")
def check_persistence(facts, target, evidence):
    if not flag(target.hostvars, "nvidia_driver_persistenced"):
        pytest.skip("nvidia_driver_persistenced is false for this host")
    active, enabled = facts.systemd("nvidia-persistenced")
    evidence(f"nvidia-persistenced: {active}, {enabled}")
    if active != "active":
        fail(
            f"nvidia-persistenced is {active}: GPUs drop state between jobs (systemctl enable --now nvidia-persistenced)"
        )
    if enabled != "enabled":
        fail(f"nvidia-persistenced is {enabled}: it will not start after a reboot")
    gpus = need_smi(facts)
    off = [g.index for g in gpus if g.persistence != "Enabled"]
    evidence(f"persistence mode: {', '.join(sorted({g.persistence for g in gpus}))}")
    if off:
        fail(f"persistence mode is off on GPU {', '.join(off)}")


@check("driver-packages", "the driver packages are at the planned version and held")
def check_driver_packages(facts, plan, target, evidence):
    packages = list(plan.driver.packages) + (list(plan.fabric_manager.packages) if plan.fabric_manager else [])
    assert_packages(facts, packages, flag(target.hostvars, "nvidia_driver_hold"), evidence)


@check("fabric-manager", "Fabric Manager runs where the interconnect needs it, at the driver's version")
def check_fabric_manager(facts, plan, evidence):
    """The plan decides (its platform's interconnect where it has one, else the GPU's NVSwitch), and
    what the plan decided is what apply installed and started: a host that differs fails, also
    where compat/platforms.yaml doubts the platform's interconnect (the message says so)."""
    active, enabled = facts.systemd("nvidia-fabricmanager")
    evidence(f"nvidia-fabricmanager: {active}, {enabled}")
    server = getattr(plan, "server", None)
    doubt = (
        f" (compat/platforms.yaml marks the interconnect of {server.id} unconfirmed: if this board has NVSwitches, "
        "plan it with an NVSwitch platform)"
        if server is not None and "interconnect" in server.unconfirmed
        else ""
    )
    needed = server.fabric_manager if server is not None else plan.fabric_manager is not None
    if not needed:
        if active == "active":
            if server is not None:
                fail(
                    f"nvidia-fabricmanager runs, but {server.name} has no NVSwitch ({_interconnect(server)}): "
                    f"the plan has no fabric manager{doubt}"
                )
            fail("nvidia-fabricmanager runs on a host without NVSwitch: the plan has no fabric manager")
        return
    if plan.fabric_manager is None:  # lockcheck keeps a plan from saying both: a hand-edited document
        fail(f"{server.name} needs Fabric Manager, but the plan installs none: make the plan again")
    start = _fabric_manager_start(facts.target.hostvars or {})
    if not start and active != "active":
        pytest.skip(
            "nvidia_driver_fabric_manager_start is false for this host: apply installs Fabric Manager, never starts it"
        )
    if active != "active" or enabled != "enabled":
        board = f"{server.name}'s NVSwitch baseboard" if server is not None else "NVSwitch"
        fail(
            f"nvidia-fabricmanager is {active}/{enabled}: Fabric Manager down, the GPUs on {board} stay unusable "
            "for CUDA without it (systemctl enable --now nvidia-fabricmanager; journalctl -u nvidia-fabricmanager)"
        )
    res = facts.run(FABRIC_MANAGER_VERSION)
    first = first_line(res.text)
    match = re.search(r"(\d{1,4}\.\d{1,4}(?:\.\d{1,4})?)", res.out[:LINE_LIMIT])
    evidence(f"nv-fabricmanager --version: {first or res.rc}")
    if not match or match.group(1) != plan.fabric_manager.version:
        fail(
            f"fabric manager {match.group(1) if match else 'version unknown'}; it must equal the driver "
            f"({plan.fabric_manager.version})"
        )


def _interconnect(server) -> str:
    kind = server.interconnect
    if kind == "nvlink":
        return "NVLink between the GPUs on the board"
    if kind == "nvlink-bridge":
        return "NVLink bridges between PCIe cards"
    return "PCIe only" if kind == "none" else f"interconnect {kind or 'not catalogued'}"


def _fabric_manager_start(hostvars) -> bool:
    """nvidia_driver_fabric_manager_start as the role reads it (default true); a value Ansible would
    not read as a boolean fails the check naming it."""
    value = hostvars.get("nvidia_driver_fabric_manager_start", True)
    try:
        return ansible_boolean(value, "nvidia_driver_fabric_manager_start")
    except InputError as exc:
        fail(f"{exc}: write true or false")
        raise


@check("subnet-manager", "the NVLink Subnet Manager is installed, held, loaded and running when planned")
def check_subnet_manager(facts, plan, target, evidence):
    sm = plan.subnet_manager
    if sm is None:
        pytest.skip("no NVLink Subnet Manager planned (not a fourth-generation NVSwitch host)")
    if not flag(target.hostvars, "nvidia_driver_subnet_manager"):
        pytest.skip("nvidia_driver_subnet_manager is false for this host")
    names = [*sm.packages, *sm.requires]
    found = facts.installed(names)
    for name in names:
        evidence(f"{name} {found[name].raw or 'absent'}{' (held)' if found[name].held else ''}")
    missing = [n for n in names if found[n].version is None]
    if missing:
        fail(f"{', '.join(missing)} not installed: {sm.service} cannot run the NVLink Subnet Manager")
    loose = [n for n in sm.packages if not found[n].held]
    if flag(target.hostvars, "nvidia_driver_hold") and loose:
        fail(f"{', '.join(loose)} not held/versionlocked: an upgrade can replace it under Fabric Manager")
    if not facts.container:
        loaded = {line.split()[0] for line in (facts.read("/proc/modules") or "").splitlines() if line.strip()}
        absent = [mod for mod in sm.kernel_modules if mod not in loaded]
        state = "missing " + ", ".join(absent) if absent else "loaded"
        evidence(f"kernel modules {', '.join(sm.kernel_modules)}: {state}")
        if absent:
            fail(f"kernel module {', '.join(absent)} not loaded: {sm.service} will not start without it (modprobe it)")
    res = facts.run(f"pgrep -x {shlex.quote(sm.process)}")
    evidence(f"pgrep -x {sm.process}: {' '.join(res.out.split()) or 'no process'}")
    if res.rc != 0:
        why = f"{sm.service} runs without the NVLink Subnet Manager (journalctl -u {sm.service})"
        fail(f"no {sm.process} process: {why}")


@check("module-options", "the planned kernel-module options are configured and in effect")
def check_module_options(facts, plan, evidence):
    options = plan.driver.module_options
    if not options:
        pytest.skip("the plan carries no kernel-module options for this GPU")
    if facts.container:
        pytest.skip(f"inside a {facts.container} container: the host's kernel modules are not this system's")
    conf = facts.read(MODULE_OPTIONS_FILE) or ""
    # /proc/driver/nvidia/params prints the nvidia module's options without their NVreg_ prefix
    params = dict(
        (key.strip(), value.strip().strip('"'))
        for key, sep, value in (
            line.partition(":") for line in (facts.read("/proc/driver/nvidia/params") or "").splitlines()
        )
        if sep
    )
    for o in options:
        line = f"options {o.module} {o.option}={o.value}"
        configured = line in conf.splitlines()
        loaded = params.get(o.option.removeprefix("NVreg_")) if o.module == "nvidia" else None
        evidence(
            f"{o.module} {o.option}: {MODULE_OPTIONS_FILE} {'has' if configured else 'lacks'} it; loaded {loaded!r}"
        )
        if not configured:
            fail(f"{MODULE_OPTIONS_FILE} lacks '{line}' (run provision apply --tags driver)")
        if o.module == "nvidia" and loaded != o.value:
            fail(
                f"the loaded nvidia module has {o.option}={loaded or 'unset'}, planned {o.value}: "
                "configured, not yet in effect (reboot to load the module with it)"
            )


_LGI = re.compile(r"\|\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s+\|")


@check("mig", "the MIG layout is the planned one")
def check_mig(facts, target, evidence):
    if not target.mig or not flag(target.mig, "provision_mig_enabled"):
        pytest.skip("no MIG layout planned for this host")
    gpus = need_smi(facts)
    modes = {g.index: (g.mig_current, g.mig_pending) for g in gpus}
    evidence("MIG mode (current/pending): " + ", ".join(f"GPU {i}: {c}/{p}" for i, (c, p) in modes.items()))
    pending = [i for i, (c, p) in modes.items() if c != p]
    if pending:
        fail(f"MIG mode change pending on GPU {', '.join(pending)}: reset the GPU or reboot")
    off = [i for i, (c, _) in modes.items() if c != "Enabled"]
    if off:
        fail(f"MIG mode is off on GPU {', '.join(off)}")
    res = facts.run(MIG_LGI)
    if res.rc != 0:
        fail(f"nvidia-smi mig -lgi fails: {first_line(res.text) or res.rc}")
    found: dict[str, list[tuple[str, int]]] = {}
    for m in _LGI.finditer(res.out):
        found.setdefault(m.group(1), []).append((m.group(2), int(m.group(5))))
    want = sorted((i["profile"], int(i["placement"])) for i in target.mig.get("provision_mig_layout", []))
    for gpu in gpus:
        have = sorted(found.get(gpu.index, []))
        evidence(f"GPU {gpu.index} instances: " + (", ".join(f"{p}@{s}" for p, s in have) or "none"))
        if have != want:
            fail(
                f"GPU {gpu.index} has {', '.join(f'{p}@{s}' for p, s in have) or 'no GPU instances'}; "
                f"planned {', '.join(f'{p}@{s}' for p, s in want)}"
            )
