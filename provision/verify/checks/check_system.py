"""The machine: reachable, the planned OS, Secure Boot against module signing, nouveau, the
nvidia kernel module at the planned version and flavour."""

from __future__ import annotations

import re

import pytest

from provision.verify.checks import check, fail, kernel_check
from provision.verify.facts import (
    DNF_KERNEL_SECURITY,
    LINE_LIMIT,
    MODULE_SIGNER,
    NOUVEAU_BLACKLIST,
    NOUVEAU_LOADED,
    SECURE_BOOT_ABSENT,
    secure_boot_command,
    secure_boot_path,
)
from provision.verify.settings import flag

# /etc/os-release ID for each of the plan's distributions (Ansible's names).
OS_RELEASE_IDS = {"Ubuntu": "ubuntu", "Debian": "debian", "Rocky": "rocky", "RedHat": "rhel"}


@check("reachable", "the host runs commands")
def check_reachable(facts_raw, evidence):
    if facts_raw.unreachable:
        fail(f"cannot run commands on the host: {facts_raw.unreachable}")
    evidence("`true` ran")


@check("os", "the OS is the plan's")
def check_os(facts, plan, evidence):
    rel = facts.os_release
    found_id, found_version = rel.get("ID", "?"), rel.get("VERSION_ID", "?")
    evidence(f"/etc/os-release: ID={found_id} VERSION_ID={found_version}")
    want_id = OS_RELEASE_IDS.get(plan.os.distribution, plan.os.distribution.lower())
    # EL plans name the major release (9); Ubuntu and Debian the full one (22.04, 12).
    got = found_version.split(".")[0] if plan.os.family == "RedHat" else found_version
    if found_id != want_id or got != plan.os.version:
        fail(f"host runs {found_id} {found_version}; the plan is for {plan.os.name} ({want_id} {plan.os.version})")


def secure_boot_state(res) -> tuple[str, str]:
    """("enabled" | "disabled" | "absent" | "unknown", what was read) from secure_boot_command's
    result. Only a variable that is not there is absent; one that is there but cannot be read
    (permission denied, an I/O error), did not answer in time, or does not hold the 4 attribute
    bytes and a 0/1 value is unknown: the check then fails closed."""
    if res.timed_out is not None:
        return "unknown", f"not read within {res.timed_out} s"
    if res.rc == SECURE_BOOT_ABSENT:
        return "absent", "absent (legacy BIOS boot, or firmware without Secure Boot)"
    if res.rc != 0:
        lines = [line.strip() for line in res.err.splitlines() if line.strip()]
        return "unknown", f"unreadable ({lines[-1][:200] if lines else f'exit {res.rc}'})"
    data = res.out.split()
    if len(data) < 5 or not all(b.isdigit() for b in data[:5]) or data[4] not in ("0", "1"):
        return "unknown", f"holds {' '.join(data[:8])[:80] or 'nothing'} (4 attribute bytes and 0 or 1 expected)"
    return ("enabled" if data[4] == "1" else "disabled"), f"Secure Boot {'enabled' if data[4] == '1' else 'disabled'}"


@check("secure-boot", "Secure Boot state allows the nvidia module to load")
def check_secure_boot(facts, target, evidence):
    path = secure_boot_path(target.hostvars or {})
    state, seen = secure_boot_state(facts.run(secure_boot_command(target.hostvars or {})))
    evidence(f"{path}: {seen}")
    if state == "unknown":
        fail(
            f"Secure Boot state unknown: {path} is {seen}; an unsigned nvidia module would not load if it is "
            "enabled (read it as root: provision verify --sudo)"
        )
    if state != "enabled":
        return
    kernel_check(facts)
    signer = facts.run(MODULE_SIGNER)
    if signer.rc != 0:
        fail("Secure Boot is enabled and no nvidia module is installed for the running kernel")
    if not signer.out.strip():
        fail(
            "Secure Boot is enabled but the nvidia module is not signed: the kernel will refuse it "
            "(set nvidia_driver_module_signing_key/cert and re-apply, or enrol a MOK)"
        )
    evidence(f"nvidia module signed by: {signer.out.strip()}")


@check("nouveau-blacklisted", "nouveau is blacklisted")
def check_nouveau_blacklisted(facts, target, evidence):
    if not flag(target.hostvars, "nvidia_driver_blacklist_nouveau"):
        pytest.skip("nvidia_driver_blacklist_nouveau is false for this host")
    res = facts.run(NOUVEAU_BLACKLIST)
    if res.rc != 0 or not res.out.strip():
        fail("no modprobe.d file blacklists nouveau: it can bind the GPU before nvidia does")
    evidence("blacklisted in " + ", ".join(res.out.split()))


@check("nouveau-not-loaded", "nouveau is not loaded")
def check_nouveau_not_loaded(facts, evidence):
    kernel_check(facts)
    res = facts.run(NOUVEAU_LOADED)
    if res.out.strip():
        fail("the nouveau module is loaded: reboot after blacklisting it (initramfs regenerated)")
    evidence("/proc/modules: no nouveau")


_NVRM = re.compile(r"NVRM version:.*?(Open Kernel Module|Kernel Module).*?\s(\d{1,4}\.\d{1,4}(?:\.\d{1,4})?)\s")


@check("kernel-module", "the nvidia kernel module is loaded at the planned version and flavour")
def check_kernel_module(facts, plan, evidence):
    kernel_check(facts)
    text = facts.read("/proc/driver/nvidia/version")
    if text is None:
        fail(
            "/proc/driver/nvidia/version is absent: the nvidia module is not loaded "
            "(run provision doctor for the cause: Secure Boot, no module for this kernel, nouveau)"
        )
    first = text.strip().splitlines()[0][:LINE_LIMIT] if text.strip() else ""  # the version line is ~100 characters
    evidence(f"/proc/driver/nvidia/version: {first}")
    match = _NVRM.search(first + " ")
    if not match:
        fail(f"cannot read the module version from: {first!r}")
    flavour = "open" if match.group(1).startswith("Open") else "proprietary"
    if match.group(2) != plan.driver.version:
        fail(
            f"kernel module {match.group(2)} is loaded; the plan pins {plan.driver.version} "
            "(reboot, or reload the modules, after a driver change)"
        )
    if flavour != plan.driver.kernel_module:
        fail(f"the {flavour} kernel module is loaded; the plan chose the {plan.driver.kernel_module} flavour")


def _security_candidate(policy: str) -> tuple[str | None, str | None, bool]:
    """(installed, candidate, whether the candidate comes from a -security suite) from apt-cache policy."""
    installed = re.search(r"^[ \t]*Installed:[ \t]*(\S+)", policy, re.M)
    candidate = re.search(r"^[ \t]*Candidate:[ \t]*(\S+)", policy, re.M)
    inst = installed.group(1) if installed else None
    cand = candidate.group(1) if candidate else None
    if not cand or cand in ("(none)", inst):
        return inst, cand, False
    block = re.search(rf"^[ \t]*(?:\*\*\* )?{re.escape(cand)} \d+\n((?:[ \t]{{8,}}.*\n?)*)", policy, re.M)
    return inst, cand, bool(block and "-security" in block.group(1))


@check("kernel-hold", "held kernel packages do not keep back a security update")
def check_kernel_hold(facts, plan, target, evidence, warning):
    if not flag(target.hostvars, "nvidia_driver_hold_kernel"):
        pytest.skip("nvidia_driver_hold_kernel is false for this host: kernels move freely")
    if plan.os.pkg_manager == "apt":
        held = [p for p in sorted(facts.held_packages()) if re.match(r"linux-(image|headers|modules)", p)]
        if not held:
            pytest.skip("no kernel package is held")
        pending = []
        for name in held:
            inst, cand, security = _security_candidate(facts.run(f"apt-cache policy {name}").out)
            evidence(f"{name}: installed {inst}, candidate {cand}{' (security)' if security else ''}")
            if security:
                pending.append(f"{name} {inst} -> {cand}")
    else:
        res = facts.run(DNF_KERNEL_SECURITY)
        pending = [line.split()[-1] for line in res.out.splitlines() if line.strip() and "kernel" in line]
        evidence(f"dnf updateinfo --security kernel*: {len(pending)} advisory line(s)")
    if pending:
        warning(
            f"the kernel hold keeps back security updates ({', '.join(pending)}): move kernel and driver together "
            "in a maintenance run (lift the hold, update, provision apply --full so DKMS builds for the new kernel)"
        )
