"""Findings about the driver on the host and about applications: nvidia-smi/NVML error
messages, why the driver is not loaded (modules, kernel log, Secure Boot, kernel release),
user-space vs kernel-module versions, and CUDA/framework errors in application output,
including CUDA-vs-driver checks against the compatibility matrix when one is given.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from provision.doctor.model import Finding
from provision.doctor.parse_log import CUDA_FOUND, CUDA_RUNTIME, OOM_DETAIL, TORCH_CUDA, Message, search_lines
from provision.doctor.rules_log import Add, Facts, _cut

# A kernel release as uname -r prints it: it goes into the commands a fix names, so nothing else
KERNEL_RELEASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}")

RELOAD = (
    "`sudo systemctl stop nvidia-persistenced nvidia-fabricmanager nvidia-dcgm 2>/dev/null; "
    "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia` "
    "(stop the display manager and every GPU process first: `sudo lsof /dev/nvidia*`), or reboot"
)


def _grouped(facts: Facts) -> dict[str, list[tuple[str, Message]]]:
    out: dict[str, list[tuple[str, Message]]] = {}
    for src, m in facts.messages:
        out.setdefault(m.id, []).append((src, m))
    return out


def _evidence(hits: list[tuple[str, Message]]) -> str:
    src, first = hits[0]
    text = f"{_cut(first.line, first.note)} [{src}]"
    n = sum(m.count for _, m in hits)
    if n > 1:
        text += f"; {n} lines in all, last: {_cut(hits[-1][1].line, hits[-1][1].note)}"
    return text


def host_rules(facts: Facts, matrix: Any, add: Add) -> None:
    msgs = _grouped(facts)
    _mismatch(facts, msgs, add)
    if _no_gpu(facts, msgs, add):  # nothing for a driver to drive: its advice would mislead
        msgs = {k: v for k, v in msgs.items() if k not in _NO_GPU_SAYS}
    else:
        _not_loaded(facts, msgs, add)
        _exit_code(facts, msgs, add)
    _simple_messages(facts, msgs, add)
    _app_messages(facts, msgs, add)
    _cuda_insufficient(facts, msgs, matrix, add)


# What nvidia-smi says on a machine without an NVIDIA GPU (not installed, no driver, no device)
_NO_GPU_SAYS = frozenset({"nvml-not-found", "driver-not-loaded", "no-devices"})
_NO_GPU_RC = frozenset({127, 12, 9, 6})


def _no_gpu(facts: Facts, msgs: dict[str, list[tuple[str, Message]]], add: Add) -> bool:
    """No NVIDIA GPU on the PCI bus (the collector's pci-nvidia section, from sysfs) while
    nvidia-smi could not report one: the machine has none, so "install nvidia-utils" or "load the
    module" would send the user the wrong way. nvidia-smi reporting GPUs always wins (a container
    or VM whose sysfs hides them)."""
    scan = facts.pci
    if scan is None or scan.scanned == 0 or scan.gpus() or facts.gpus:
        return False
    if not (set(msgs) & _NO_GPU_SAYS or facts.smi_rc in _NO_GPU_RC):
        return False
    others = ", ".join(f"{bus} (class {cls})" for bus, _, cls in scan.nvidia[:4])
    evidence = f"/sys/bus/pci/devices: {scan.scanned} PCI devices, " + (
        f"NVIDIA functions but no GPU among them: {others}" if others else "none with NVIDIA's vendor id 0x10de"
    )
    said = [m for hits in (msgs.get(k, []) for k in sorted(_NO_GPU_SAYS)) for m in hits]
    if said:
        evidence += f"; {_evidence(said[:1])}"
    elif facts.smi_rc:
        evidence += f"; nvidia-smi exit code {facts.smi_rc}"
    add(
        Finding(
            "no-nvidia-gpu",
            "error",
            "This machine has no NVIDIA GPU on its PCI bus: there is nothing for an NVIDIA driver to drive",
            evidence,
            "Installing nvidia-smi or loading the driver will not help here. If the machine should have GPUs: "
            "check that they are seated and powered and that the firmware enables their slots (above-4G "
            "decoding), and in a VM or container that they are passed through (`lspci -nn -d 10de:` on the "
            "host). To diagnose GPU hosts from this machine: `provision doctor -i INVENTORY`.",
        ),
        "host",
    )
    return True


def _mismatch(facts: Facts, msgs: dict[str, list[tuple[str, Message]]], add: Add) -> None:
    module = facts.kernel_module_version()
    library = next((m.detail for _, m in msgs.get("nvml-library-version", [])), None)
    client = next((e.detail for _, e in facts.kernel_events("api-mismatch")), None)
    smi = facts.driver_versions[0] if facts.driver_versions else None
    lines: list[str] = []
    if "driver-library-mismatch" in msgs:
        lines.append(_evidence(msgs["driver-library-mismatch"]))
        lines.extend(f"{_cut(m.line, m.note)} [{src}]" for src, m in msgs.get("nvml-library-version", [])[:1])
        if facts.module_version:
            lines.append(f"loaded kernel module {facts.module_version[0]} [{facts.module_version[1]}]")
    for src, e in facts.kernel_events("api-mismatch")[:1]:
        lines.append(f"{_cut(e.line.raw, e.line.note)} [{src}]")
    if not lines and facts.smi_rc == 18:
        lines.append("nvidia-smi exit code 18 (NVML: library and kernel-module versions differ)")
    if not lines and smi and facts.module_version and smi[0] != facts.module_version[0]:
        lines.append(
            f"nvidia-smi reports driver {smi[0]} [{smi[1]}], the loaded kernel module is "
            f"{facts.module_version[0]} [{facts.module_version[1]}]"
        )
    if not lines:
        return
    user = library or client or (smi[0] if smi else None)
    versions = ", ".join(x for x in (user and f"user-space {user}", module and f"kernel module {module}") if x)
    add(
        Finding(
            "driver-library-mismatch",
            "error",
            "Driver/library version mismatch: the user-space driver and the loaded kernel module differ"
            + (f" ({versions})" if versions else ""),
            "; ".join(lines),
            "The driver packages were upgraded but the old kernel module is still loaded. Load the new one: "
            f"{RELOAD}. Hold the driver packages (`apt-mark hold` / `dnf versionlock`) so unattended upgrades "
            "cannot replace them under a running module again.",
        ),
        "host",
    )


def _not_loaded(facts: Facts, msgs: dict[str, list[tuple[str, Message]]], add: Add) -> None:
    said = msgs.get("driver-not-loaded")
    sb_kernel = facts.kernel_events("secure-boot")
    sb_reject = [(s, e) for s, e in sb_kernel if "verification failed" not in e.line.msg]
    missing = facts.kernel_events("module-missing")
    if not (said or sb_reject or missing or (facts.smi_rc == 9)):
        return
    nouveau = facts.kernel_events("nouveau")
    loaded = facts.modules
    evidence = [_evidence(said)] if said else []
    if facts.smi_rc is not None and facts.smi_rc != 0:
        evidence.append(f"nvidia-smi exit code {facts.smi_rc}")
    named = missing[0][1].detail.rsplit("/", 1)[-1] if missing else None
    if named is not None and not KERNEL_RELEASE.fullmatch(named):
        named = None  # a host-written path goes into no command
    release = facts.uname or named or "$(uname -r)"
    if (loaded is not None and "nouveau" in loaded) or (nouveau and (loaded is None or "nvidia" not in loaded)):
        cause = "the nouveau driver holds the GPU"
        evidence.append(
            "nouveau is loaded"
            if loaded and "nouveau" in loaded
            else f"kernel log: {_cut(nouveau[0][1].line.raw, nouveau[0][1].line.note)}"
        )
        fix = (
            "Blacklist nouveau: `printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee "
            "/etc/modprobe.d/blacklist-nouveau.conf`, rebuild the initramfs (`sudo update-initramfs -u` on "
            "Debian/Ubuntu, `sudo dracut --force` on RHEL/Rocky) and reboot."
        )
    elif sb_reject or (facts.secure_boot and (loaded is None or "nvidia" not in loaded)):
        cause = "Secure Boot refuses the unsigned nvidia module"
        if facts.secure_boot:
            evidence.append("mokutil: SecureBoot enabled")
        if sb_reject:
            evidence.append(
                f"kernel log: {_cut(sb_reject[0][1].line.raw, sb_reject[0][1].line.note)} [{sb_reject[0][0]}]"
            )
        fix = (
            "Sign the module with an enrolled key: enroll the DKMS key (`sudo mokutil --import "
            "/var/lib/dkms/mok.pub`, reboot, confirm in the MOK manager) or install the distribution's signed "
            "precompiled driver packages; or turn Secure Boot off in the firmware. Check with `mokutil --sb-state`."
        )
    elif missing or (loaded is not None and "nvidia" not in loaded):
        cause = f"no nvidia module is built for the running kernel {release}"
        if missing:
            evidence.append(f"kernel log: {_cut(missing[0][1].line.raw, missing[0][1].line.note)} [{missing[0][0]}]")
        if loaded is not None:
            evidence.append(f"nvidia is not among the {len(loaded)} loaded modules")
        fix = (
            f"Check `dkms status` for a build for {release}, install the matching headers "
            "(`sudo apt install linux-headers-$(uname -r)` or `sudo dnf install kernel-devel-$(uname -r)`), rebuild "
            "with `sudo dkms autoinstall -k $(uname -r)` and load it with `sudo modprobe nvidia`; if the kernel was "
            "upgraded without headers, reboot into the previous kernel meanwhile."
        )
    elif loaded is not None and "nvidia" in loaded:
        cause = "the module is loaded but the GPU does not answer"
        evidence.append("nvidia is loaded")
        fix = (
            "Look in the kernel log for Xid 79 / 'fallen off the bus', probe or RmInitAdapter failures "
            "(`sudo dmesg | grep -iE 'nvrm|xid'`), check `ls -l /dev/nvidia*`, and inside a container check that "
            "it was started with the GPUs (`--gpus all`, CDI). A reboot recovers a GPU that fell off the bus."
        )
    else:
        cause = "cause unknown from what was read"
        fix = (
            "Find out why the module is not loaded: `lsmod | grep -E 'nvidia|nouveau'`, `dkms status`, "
            "`mokutil --sb-state`, `sudo dmesg | grep -iE 'nvidia|nouveau|lockdown'`; then load it with "
            "`sudo modprobe nvidia` (or reinstall the driver for the running kernel). Running doctor with the "
            "kernel log and module list names the cause."
        )
    add(
        Finding(
            "driver-not-loaded",
            "error",
            f"nvidia-smi cannot talk to the NVIDIA driver: {cause}",
            "; ".join(evidence) or "(no nvidia-smi output)",
            fix,
        ),
        "host",
    )


_SIMPLE = {
    "no-devices": (
        "error",
        "nvidia-smi found no GPUs",
        "Check that the GPUs are on the bus (`lspci -nn | grep -i nvidia`). If they are: see which driver "
        "holds them (`lspci -k -d 10de:`; not nouveau or vfio-pci), and whether this driver branch supports "
        "them (kernel log: `sudo dmesg | grep NVRM`). If they are not: reseat and power-cycle.",
    ),
    "nvml-not-found": (
        "error",
        "NVML / nvidia-smi is not installed where it was run",
        "Install the driver's user-space part (`nvidia-utils-<branch>` on Ubuntu, `nvidia-driver-cuda` "
        "on RHEL-family), matching the kernel module's version; in a container, start it through the "
        "NVIDIA Container Toolkit (`--gpus all`, `--runtime nvidia` or CDI).",
    ),
    "nvml-unknown-error": (
        "error",
        "NVML failed to initialise (Unknown Error)",
        "In a container this usually means it lost its /dev/nvidia* devices (for example after "
        "`systemctl daemon-reload` with cgroup v2 and the legacy runtime hook): restart the "
        "container and move the toolkit to CDI (`sudo nvidia-ctk cdi generate --output="
        "/etc/cdi/nvidia.yaml`). On the host check `ls -l /dev/nvidia*` and the kernel log.",
    ),
    "nvml-no-permission": (
        "error",
        "NVML has no permission to open the GPUs",
        "Check the device nodes (`ls -l /dev/nvidia*`, module option `NVreg_DeviceFileMode`) and "
        "that the user may open them, or run the tool as root.",
    ),
    "gpu-lost": (
        "error",
        "nvidia-smi cannot reach a GPU (GPU is lost)",
        "A lost GPU needs a reboot (power-cycle if needed); look for Xid 79 / 'fallen off the bus' in the "
        "kernel log, and have the GPU checked or replaced if it happens again.",
    ),
    "gpu-reset-required": (
        "error",
        "nvidia-smi says a GPU needs a reset",
        "Drain the GPU and reset it (`sudo nvidia-smi -r -i <bus-id>`), or reboot.",
    ),
    "inforom-corrupted": (
        "warning",
        "A GPU's infoROM is corrupted",
        "The GPU still works, but its ECC and page-retirement records may be unreliable: check "
        "`nvidia-smi -q -d ECC,PAGE_RETIREMENT`, collect `sudo nvidia-bug-report.sh` and ask NVIDIA "
        "or the vendor for an infoROM reflash or an RMA.",
    ),
    "fabric-not-ready": (
        "error",
        "CUDA reports the system is not initialised (fabric manager)",
        "On NVSwitch systems CUDA waits for the fabric: `sudo systemctl enable --now "
        "nvidia-fabricmanager` (same version as the driver) and check `journalctl -u "
        "nvidia-fabricmanager`.",
    ),
    "no-cuda-device": (
        "error",
        "The application found no CUDA device",
        "Check that nvidia-smi lists the GPUs, that CUDA_VISIBLE_DEVICES is not empty or wrong, and "
        "that a container was started with the GPUs (`--gpus all` or CDI).",
    ),
    "cuda-no-kernel-image": (
        "error",
        "The application has no GPU code for this GPU's architecture",
        "Install a framework build compiled for this GPU's compute capability (compare "
        "`torch.cuda.get_arch_list()` with `nvidia-smi --query-gpu=compute_cap --format=csv`), "
        "or rebuild with `-gencode arch=compute_XX,code=sm_XX`.",
    ),
    "cuda-compat-mismatch": (
        "error",
        "CUDA forward compatibility failed",
        "The cuda-compat libraries in use do not fit this GPU or driver (forward compatibility "
        "needs a data-center GPU and a supported driver branch): remove cuda-compat from "
        "LD_LIBRARY_PATH / the image, or upgrade the host driver to one the CUDA runtime "
        "supports natively.",
    ),
    "ecc-uncorrectable": (
        "error",
        "The application hit an uncorrectable ECC error",
        "Drain the GPU, reset it or reboot so the memory is retired/remapped, and check "
        "`nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER`.",
    ),
}


def _simple_messages(facts: Facts, msgs: dict[str, list[tuple[str, Message]]], add: Add) -> None:
    for ident, (severity, title, fix) in _SIMPLE.items():
        hits = msgs.get(ident)
        if hits:
            detail = next((m.detail for _, m in hits if re.match(r"[0-9A-Fa-f]{4,8}:", m.detail or "")), None)
            add(
                Finding(
                    ident,
                    severity,
                    title + (f" ({detail})" if detail else ""),
                    _evidence(hits),
                    fix.replace("<bus-id>", detail or "<bus-id>"),
                ),
                "host",
            )


def _app_messages(facts: Facts, msgs: dict[str, list[tuple[str, Message]]], add: Add) -> None:
    hits = msgs.get("out-of-memory")
    if not hits:
        return
    detail = next((d for _, m in hits for d in OOM_DETAIL.findall(m.line)), None)
    mig = (
        " This host runs MIG: a larger MIG profile (for example 3g.40gb instead of 1g.10gb) gives the job more memory."
        if facts.mig_enabled()
        else " On a MIG GPU, use a larger MIG profile."
    )
    add(
        Finding(
            "out-of-memory",
            "error",
            "The application ran out of GPU memory" + (f" ({detail})" if detail else ""),
            _evidence(hits),
            "Lower the batch size (or sequence length), enable gradient checkpointing (activation "
            "recomputation), use mixed precision, or shard the model over more GPUs; check that no other process "
            "holds memory (`nvidia-smi --query-compute-apps=pid,used_memory --format=csv`)." + mig,
        ),
        "host",
    )


def _cuda_insufficient(facts: Facts, msgs: dict[str, list[tuple[str, Message]]], matrix: Any, add: Add) -> None:
    hits = msgs.get("cuda-driver-insufficient")
    if not hits:
        return
    driver = facts.driver_version()
    needed = next((m.detail for _, m in hits if m.detail), None)
    if needed is None:
        texts = [m.line for _, m in facts.messages] + facts.app_texts
        r = search_lines(CUDA_RUNTIME, texts) or search_lines(TORCH_CUDA, texts)
        if r:
            needed = r[1] if "." in r[1] else f"{r[1][:-1]}.{r[1][-1]}"
    driver_cuda = facts.cuda_versions[0][0] if facts.cuda_versions else None
    found = next((CUDA_FOUND.search(m.line) for _, m in hits if CUDA_FOUND.search(m.line)), None)
    if found and not driver_cuda:
        value = int(found[1])
        driver_cuda = f"{value // 1000}.{value % 1000 // 10}"
    facts_text = [
        x
        for x in (
            needed and f"the application needs CUDA {needed}",
            driver and f"host driver {driver}",
            driver_cuda and f"whose native CUDA is {driver_cuda} (nvidia-smi's CUDA Version)",
        )
        if x
    ]
    evidence = _evidence(hits) + (f"; {', '.join(facts_text)}" if facts_text else "")
    fix = (
        "A driver runs applications built for CUDA up to its own CUDA version natively (nvidia-smi's `CUDA "
        "Version`; NVIDIA's CUDA release notes, Table 3) and, through minor-version compatibility, any other "
        "release of that CUDA major (without PTX JIT of newer PTX). So the application was built for a newer "
        "CUDA major than the driver's (check `torch.version.cuda`, the wheel's `+cuXYZ`, the image's "
        "CUDA_VERSION), or needs PTX JIT or a newer-driver feature, or loads another libcuda (`ldconfig -p | "
        "grep libcuda`, a cuda-compat package in the image): use a build for the driver's CUDA major, or "
        "upgrade the driver."
    )
    if matrix is not None:
        fix = _matrix_fix(matrix, needed, driver) or fix
    add(
        Finding(
            "cuda-driver-insufficient",
            "error",
            "CUDA driver version is insufficient for the application's CUDA runtime"
            + (f" (CUDA {needed}, driver {driver})" if needed and driver else f" (driver {driver})" if driver else ""),
            evidence,
            fix,
        ),
        "host",
    )


# -- CUDA vs driver: the one decision doctor makes about it ---------------------------------------
def cuda_mode(matrix: Any, driver: Any, cuda: str) -> str | None:
    """How a driver runs an application built for CUDA ``cuda`` ("12.6"): issue 21's one rule,
    provision.matrix.runs_on.decide, asked for the oldest catalogued release the prefix names —
    ``native`` (the driver meets that release's minimum, CUDA release notes Table 3, or serves a
    newer major), ``minor-version`` (at or above the major's Table 2 floor: no PTX JIT of newer
    PTX, features of the newer toolkit missing) or ``no``. Forward compatibility is not assumed: an
    application that reports "insufficient" did not load a cuda-compat libcuda, and the GPU is not
    known here. None for a CUDA the catalogue does not hold. ``driver`` is a parsed Version."""
    from provision.matrix.runs_on import decide, needs_for_cuda
    from provision.versions import prefix_matches

    releases = [c for c in matrix.cuda if prefix_matches(cuda, c.version)]
    if not releases:
        return None
    first = releases[-1]  # newest first: the last is the oldest release the prefix names
    needs = needs_for_cuda(matrix, first, f"CUDA {first.version}")._replace(compat_package=False)
    return decide(matrix, needs, driver).mode


class Reach(NamedTuple):
    """What a driver runs, read from the catalogue: its newest native CUDA release and the CUDA
    major it serves through minor-version compatibility (with that major's floor)."""

    native: Any  # CudaRelease or None
    major: int | None
    floor: Any  # MinorCompat or None
    next_major: Any  # CudaRelease: the first release of the next major, or None


def driver_reach(matrix: Any, driver: Any) -> Reach:
    native = next((c for c in matrix.cuda if c.min_driver <= driver), None)
    major = native.version.release[0] if native is not None else None
    floor = matrix.minor_compat_floor(major) if major is not None else None
    later = [c for c in matrix.cuda if major is not None and c.version.release[0] == major + 1]
    return Reach(native, major, floor, later[-1] if later else None)


def _matrix_fix(matrix: Any, needed: str | None, driver: str | None) -> str | None:
    """The fix sentence with the catalogue's facts: the driver's native CUDA (Table 3), the major
    it serves through minor-version compatibility and that major's floor, and the likely cause."""
    from provision.versions import parse_version, prefix_matches

    host = None
    if driver:
        try:
            host = parse_version(driver)
        except ValueError:
            host = None
    releases = [c for c in matrix.cuda if needed and prefix_matches(needed, c.version)]
    parts: list[str] = []
    if host is not None:
        reach = driver_reach(matrix, host)
        if reach.native is None:
            parts.append(f"Driver {driver} is older than the minimum of every catalogued CUDA release")
        else:
            served = (
                f" and every CUDA {reach.major}.x application through minor-version compatibility (CUDA "
                f"{reach.major} needs driver >= {reach.floor.min_driver}; no PTX JIT of newer PTX)"
                if reach.floor is not None and host >= reach.floor.min_driver
                else ""
            )
            parts.append(
                f"Driver {driver} runs CUDA up to {reach.native.version} natively ({reach.native.label}; CUDA "
                f"release notes, Table 3){served}"
            )
    else:
        reach = None
    if releases:
        first = releases[-1]
        major = first.version.release[0]
        floor = matrix.minor_compat_floor(major)
        parts.append(
            f"CUDA {needed} needs driver >= {first.min_driver} ({first.label})"
            + (
                f", or >= {floor.min_driver} for any CUDA {major}.x through minor-version compatibility"
                if floor
                else ""
            )
        )
    if not parts:
        return None
    mode = cuda_mode(matrix, host, needed) if host is not None and needed and releases else None
    pick = f"`provision plan --gpu <id> --cuda {needed}`" if needed else "`provision plan --gpu <id> --cuda <X.Y>`"
    libcuda = (
        "it loads another libcuda than the host driver's (`ldconfig -p | grep libcuda`; a cuda-compat package "
        "in the image works only on data-center GPUs and the branches NVIDIA lists for it)"
    )
    if mode == "native":
        advice = f"This driver runs CUDA {needed} natively, so the application does not see it: {libcuda}."
    elif mode == "minor-version":
        advice = (
            f"This driver runs CUDA {needed} through minor-version compatibility, so the application needs PTX "
            f"JIT of code newer than {reach.native.version if reach and reach.native else 'the driver'} or a "
            f"newer-driver feature, or {libcuda}. Upgrading the driver ({pick} picks one) lifts both limits."
        )
    elif mode == "no":
        advice = (
            f"Upgrade the driver ({pick} picks one) or use a build for CUDA {reach.major}.x."
            if reach and reach.major
            else f"Upgrade the driver ({pick} picks one) or use a build for an older CUDA."
        )
    elif reach is not None and reach.major is not None and reach.next_major is not None:
        nxt = reach.next_major
        advice = (
            f"So the application was most likely built for CUDA {nxt.version.release[0]} (driver >= "
            f"{nxt.min_driver}): check what it was built for (`torch.version.cuda`, the wheel's `+cuXYZ`, the "
            f"image's CUDA_VERSION) and use its CUDA {reach.major}.x build, or upgrade the driver (`provision plan "
            f"--gpu <id> --cuda {nxt.version.release[0]}.{nxt.version.release[1]}` picks one). If it is a CUDA "
            f"{reach.major} build, it needs PTX JIT of newer code or a newer-driver feature, or {libcuda}."
        )
    else:
        advice = f"Upgrade the driver ({pick} picks one) or use a build for an older CUDA."
    return "; ".join(parts) + ". " + advice


# nvidia-smi's exit codes are NVML's return codes (nvmlReturn_t); 124/127 come from the shell.
_RC = {
    9: ("driver-not-loaded", None),  # handled with its cause in _not_loaded
    18: ("driver-library-mismatch", None),  # NVML_ERROR_LIB_RM_VERSION_MISMATCH, handled in _mismatch
    4: ("nvml-no-permission", "nvidia-smi exited 4: no permission to access the GPUs"),
    12: ("nvml-not-found", "nvidia-smi exited 12: the NVML library could not be found or loaded"),
    14: ("inforom-corrupted", "nvidia-smi exited 14: a GPU's infoROM is corrupted"),
    15: ("gpu-lost", "nvidia-smi exited 15: a GPU has fallen off the bus or is otherwise inaccessible"),
    16: ("gpu-reset-required", "nvidia-smi exited 16: a GPU requires a reset before it can be used again"),
    17: ("nvml-no-permission", "nvidia-smi exited 17: the operating system or cgroups block the GPU device"),
    127: ("nvml-not-found", "nvidia-smi is not installed (exit code 127)"),
    6: ("no-devices", "nvidia-smi exited 6: it found no GPU"),
}
_SMI_MESSAGES = {
    "driver-library-mismatch",
    "driver-not-loaded",
    "no-devices",
    "nvml-not-found",
    "nvml-unknown-error",
    "nvml-no-permission",
    "gpu-lost",
    "gpu-reset-required",
    "inforom-corrupted",
}


def _exit_code(facts: Facts, msgs: dict[str, list[tuple[str, Message]]], add: Add) -> None:
    rc = facts.smi_rc
    if not rc:
        return
    if rc not in _RC and rc not in (124, 137) and set(msgs) & _SMI_MESSAGES:
        return  # nvidia-smi's own message already says what failed
    if rc in _RC:
        ident, title = _RC[rc]
        if title is None:
            return
        severity, _t, fix = _SIMPLE[ident]
        add(Finding(ident, severity, title, f"nvidia-smi exit code {rc}", fix), "host")
    elif rc in (124, 137):
        return  # smi_hung_rule, run first so that its finding leads the report
    elif rc == 8:
        add(
            Finding(
                "gpu-power-cables",
                "error",
                "nvidia-smi exited 8: a GPU's external power cables are not attached",
                "nvidia-smi exit code 8",
                "Power the machine down and connect/reseat the GPU's auxiliary power cables.",
            ),
            "host",
        )
    else:
        add(
            Finding(
                "nvidia-smi-failed",
                "error",
                f"nvidia-smi failed (exit code {rc})",
                f"nvidia-smi exit code {rc}",
                "Run `nvidia-smi` by hand to see its message, and read the kernel log (`sudo dmesg | grep NVRM`).",
            ),
            "host",
        )


def smi_hung_rule(facts: Facts, add: Add) -> None:
    """nvidia-smi stopped by the collector's timeout (124: SIGTERM, 137: SIGKILL after it ignored
    SIGTERM). The report leads with it; the kernel log findings that follow name the cause."""
    if facts.smi_rc not in (124, 137):
        return
    rc = facts.smi_rc
    hits = _grouped(facts).get("nvidia-smi-timeout", [])
    seconds = next((m.detail for _, m in hits if m.detail), None)
    lost = facts.kernel_events("fallen-off-bus") or [
        (src, x) for src, log in facts.kernel for x in log.xids if x.code in (79, 119, 120)
    ]
    said = "the kernel log below names it" if lost else "see the kernel log below"
    waited = f"in {seconds} s" if seconds else "in time"
    add(
        Finding(
            "nvidia-smi-hung",
            "error",
            f"nvidia-smi did not answer {waited}: the GPU may have fallen off the bus; {said}",
            f"nvidia-smi exit code {rc} ({'stopped by SIGTERM' if rc == 124 else 'killed: it ignored SIGTERM'})"
            + (f"; {_evidence(hits)}" if hits else ""),
            "The driver is stuck on a GPU: look for Xid 119/120 (GSP timeouts), Xid 79 or 'fallen off the "
            "bus' in the kernel log (`sudo dmesg | grep -i xid`); a GPU reset (`sudo nvidia-smi -r -i "
            "<bus-id>`) or a reboot usually recovers it.",
        ),
        "host",
    )
