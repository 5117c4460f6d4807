#!/usr/bin/python
"""Report what a provisioning run must know about a host's GPUs, and decide driver activation."""

from __future__ import annotations

DOCUMENTATION = r"""
module: host_state
short_description: NVIDIA GPU host state and driver-activation decision
description:
  - Lists NVIDIA PCI devices (vendor 0x10de), the Secure Boot state, whether the nvidia and
    nouveau kernel modules are loaded, the loaded NVIDIA driver version and its flavour (open or
    proprietary kernel modules), and the processes using the GPUs.
  - >-
    The Secure Boot state is C(unknown), never C(unsupported), when the variable is there but cannot
    be read (permissions, an I/O error, a short value) or when efivarfs is not mounted on an EFI boot
    (its directory empty): the roles then act as under Secure Boot, failing closed.
  - >-
    With I(reboot_policy), decides how to activate a newly installed driver; C(action) is C(none),
    C(load) (modprobe, no reboot) or C(reboot). A loaded module of the planned version but the
    other flavour (an open/proprietary switch) needs activating like another version. Before a
    reboot, the nvidia module built for the kernel that will boot must be the planned version and
    flavour (modinfo), and signed under Secure Boot (or when its state is unknown); otherwise
    C(action) is C(refuse).
options:
  pci_devices_path:
    description: Directory of PCI devices (one entry per device, each with vendor and device files).
    type: path
    default: /sys/bus/pci/devices
  secure_boot_efivar:
    description: The SecureBoot EFI variable (absent on legacy BIOS boots).
    type: path
    default: /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c
  proc_modules_path:
    description: The kernel's list of loaded modules.
    type: path
    default: /proc/modules
  driver_version_path:
    description: The loaded NVIDIA driver's version file.
    type: path
    default: /proc/driver/nvidia/version
  nvidia_smi:
    description: nvidia-smi executable used to list GPU processes (skipped when absent).
    type: str
    default: nvidia-smi
  reboot_policy:
    description: C(auto), C(never) or C(always); omit to skip the decision.
    type: str
    choices: [auto, never, always]
  planned_version:
    description: The driver version the plan installs.
    type: str
  planned_flavour:
    description: The kernel-module flavour the plan installs; omitted, the flavour is not compared.
    type: str
    choices: [open, proprietary]
  driver_changed:
    description: Whether this run changed the driver packages.
    type: bool
    default: false
  disk_path:
    description: Report the free space of the file system holding this path.
    type: path
    default: /
  proc_path:
    description: The proc file system, read for processes holding /dev/nvidia* open.
    type: path
    default: /proc
  sys_module_path:
    description: The kernel's module directory, read for the nvidia_uvm reference count.
    type: path
    default: /sys/module
  boot_path:
    description: Where the kernels that can boot are (vmlinuz-*), to find the one the next boot starts.
    type: path
    default: /boot
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the host's GPUs, Secure Boot state and loaded driver.
  provision.gpu.host_state:
  register: gpu_host

- name: Decide how to activate a newly installed driver.
  provision.gpu.host_state:
    reboot_policy: auto
    planned_version: "{{ provision_driver_version }}"
    driver_changed: true
  register: activation
"""

RETURN = r"""
gpus:
  description: NVIDIA PCI devices as {address, vendor, device}.
  type: list
  returned: always
secure_boot:
  description: >-
    enabled, disabled, unsupported (no SecureBoot variable: a legacy BIOS boot, or firmware without
    Secure Boot) or unknown (the variable or efivarfs cannot be read).
  type: str
  returned: always
nvidia_loaded:
  description: Whether the nvidia kernel module is loaded.
  type: bool
  returned: always
nouveau_loaded:
  description: Whether the nouveau kernel module (which blocks the NVIDIA driver) is loaded.
  type: bool
  returned: always
loaded_version:
  description: Version of the loaded NVIDIA kernel module, or null.
  type: str
  returned: always
loaded_flavour:
  description: >-
    open or proprietary, the loaded NVIDIA kernel module's flavour (/proc/driver/nvidia/version
    names the open modules "Open Kernel Module"), or null when none is loaded.
  type: str
  returned: always
gpu_processes:
  description: PIDs of processes using the GPUs (empty when nvidia-smi is absent or fails).
  type: list
  returned: always
gpu_use:
  description: >-
    busy, idle or unknown, from nvidia-smi's compute processes, the processes holding /dev/nvidia*
    open (NVIDIA's daemons aside) and the nvidia_uvm reference count; unknown when nvidia-smi fails
    while the driver is loaded, since then nothing rules out a running job.
  type: str
  returned: always
gpu_use_evidence:
  description: What gpu_use was decided from, in a line.
  type: str
  returned: always
boot_kernel:
  description: The kernel the next boot starts (when the decision is a reboot).
  type: str
  returned: when action is reboot or refuse
boot_module:
  description: The nvidia module built for boot_kernel (modinfo -k), or null.
  type: str
  returned: when action is reboot or refuse
boot_module_version:
  description: That module's version (modinfo -F version), or null.
  type: str
  returned: when action is reboot or refuse
boot_module_flavour:
  description: That module's flavour from its licence (C(Dual MIT/GPL) open, C(NVIDIA) proprietary), or null.
  type: str
  returned: when action is reboot or refuse
disk_free_mb:
  description: Free MiB (for unprivileged users) on the file system holding disk_path.
  type: int
  returned: always
action:
  description: >-
    none, load or reboot; refuse when a reboot is needed but the kernel that would boot has no
    nvidia module of the planned version and flavour (or, under Secure Boot or an unknown Secure
    Boot state, only an unsigned one).
  type: str
  returned: when reboot_policy is given
reason:
  description: Why the action was chosen, in a line.
  type: str
  returned: when reboot_policy is given
"""

import os
import re
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule

NVIDIA_VENDOR = "0x10de"
_VERSION = re.compile(r"Kernel Module(?: for [^ ]+)?\s+(\d+\.\d+(?:\.\d+)?)")
# The licence each flavour's nvidia.ko declares: the open modules MODULE_LICENSE("Dual MIT/GPL")
# (NVIDIA/open-gpu-kernel-modules, kernel-open/nvidia/nv-frontend.c), the proprietary ones "NVIDIA"
# (the kernel logs "module license 'NVIDIA' taints kernel" when it loads).
LICENSE_FLAVOURS = {"Dual MIT/GPL": "open", "NVIDIA": "proprietary"}


def nvidia_gpus(pci_path):
    out = []
    try:
        entries = sorted(os.listdir(pci_path))
    except OSError:
        return out
    for entry in entries:
        vendor = _read(os.path.join(pci_path, entry, "vendor"))
        if vendor is None or vendor.strip().lower() != NVIDIA_VENDOR:
            continue
        device = (_read(os.path.join(pci_path, entry, "device")) or "").strip().lower()
        klass = (_read(os.path.join(pci_path, entry, "class")) or "").strip().lower()
        # 0x03xxxx display/3D controllers are GPUs; NVSwitches and audio functions are not
        if klass and not klass.startswith("0x03"):
            continue
        out.append({"address": entry, "vendor": NVIDIA_VENDOR, "device": device})
    return out


def secure_boot_state(efivar):
    """enabled, disabled, unsupported (no variable) or unknown (it, or efivarfs, cannot be read)."""
    try:
        with open(efivar, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        folder = os.path.dirname(efivar)
        try:
            mounted = bool(os.listdir(folder))
        except FileNotFoundError:
            return "unsupported"  # no efivars folder: a legacy BIOS boot
        except OSError:
            return "unknown"
        # the kernel makes an empty efivars folder on every EFI boot; empty, efivarfs is not mounted
        return "unsupported" if mounted else "unknown"
    except OSError:
        return "unknown"  # there, but unreadable: Secure Boot may well be on
    # efivarfs: 4 bytes of attributes, then the value byte (1 on, 0 off)
    if len(data) != 5 or data[4] not in (0, 1):
        return "unknown"
    return "enabled" if data[4] == 1 else "disabled"


def loaded_modules(proc_modules):
    text = _read(proc_modules) or ""
    return {line.split(" ", 1)[0] for line in text.splitlines() if line}


def loaded_version(version_path):
    m = _VERSION.search(_read(version_path) or "")
    return m.group(1) if m else None


def loaded_flavour(version_path):
    """open or proprietary, from the NVRM line of /proc/driver/nvidia/version; None when not loaded."""
    text = _read(version_path) or ""
    line = next((x for x in text.splitlines() if x.startswith("NVRM version:")), "")
    if not _VERSION.search(line):
        return None
    return "open" if "Open Kernel Module" in line else "proprietary"


def gpu_processes(nvidia_smi):
    """(compute PIDs, error): PIDs None when nvidia-smi is not installed; error None when it answered."""
    exe = shutil.which(nvidia_smi)
    if exe is None:
        return None, None
    try:
        proc = subprocess.run([exe, "--query-compute-apps=pid", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], str(exc)
    if proc.returncode != 0:
        return [], (proc.stdout + proc.stderr).strip()
    return [int(x) for x in proc.stdout.split() if x.strip().isdigit()], None


# The device nodes a CUDA job opens; NVIDIA's own daemons hold them too and do not count as use.
_DEVICE = re.compile(r"^/dev/nvidia(\d+|ctl|-uvm|-uvm-tools|-modeset|-caps/.+)$")
_DAEMONS = ("nvidia-persiste", "nv-fabricmanage", "nvidia-powerd", "nv-hostengine", "nvidia-smi")


def device_users(proc_path):
    """{pid: command} of processes holding an NVIDIA device node open, NVIDIA's daemons aside."""
    users = {}
    try:
        pids = [p for p in os.listdir(proc_path) if p.isdigit()]
    except OSError:
        return users
    for pid in pids:
        fd_dir = os.path.join(proc_path, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if _DEVICE.match(target):
                comm = (_read(os.path.join(proc_path, pid, "comm")) or "?").strip()
                if not comm.startswith(_DAEMONS):
                    users[int(pid)] = comm
                break
    return users


def uvm_refcount(sys_module_path):
    """nvidia_uvm's reference count: every CUDA context holds /dev/nvidia-uvm open."""
    try:
        return int((_read(os.path.join(sys_module_path, "nvidia_uvm", "refcnt")) or "0").strip())
    except ValueError:
        return 0


def gpu_use(nvidia_loaded, smi_pids, smi_error, users, uvm_refs):
    """(busy | idle | unknown, evidence): fails closed when nvidia-smi errors with the driver loaded."""
    evidence = []
    if smi_pids:
        evidence.append("nvidia-smi lists compute processes %s" % ", ".join(str(p) for p in smi_pids))
    if users:
        evidence.append("/dev/nvidia* held open by %s" % ", ".join("%s[%d]" % (c, p) for p, c in sorted(users.items())))
    if uvm_refs > 0:
        evidence.append("nvidia_uvm is in use (reference count %d)" % uvm_refs)
    if evidence:
        return "busy", "; ".join(evidence)
    if not nvidia_loaded:
        return "idle", "no NVIDIA kernel module is loaded and no process holds an NVIDIA device"
    if smi_error is not None:
        first = smi_error.strip().splitlines()[0][:200] if smi_error.strip() else "no output"
        return "unknown", "nvidia-smi failed (%s): running jobs cannot be ruled out" % first
    if smi_pids is None:
        return "unknown", "the nvidia module is loaded but nvidia-smi is not installed: running jobs cannot be ruled out"
    return "idle", "no compute process (nvidia-smi), no /dev/nvidia* user, nvidia_uvm unused"


def _version_key(name):
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name)]


def boot_kernel(boot_path, running):
    """The kernel the next boot starts: grubby's default (EL), /boot/vmlinuz's target (Debian,
    Ubuntu), else the newest /boot/vmlinuz-*, else the running one."""
    exe = shutil.which("grubby")
    if exe:
        try:
            out = subprocess.run([exe, "--default-kernel"], capture_output=True, text=True, timeout=30, check=False)
            name = os.path.basename(out.stdout.strip())
            if out.returncode == 0 and name.startswith("vmlinuz-"):
                return name[len("vmlinuz-"):]
        except (OSError, subprocess.TimeoutExpired):
            pass
    link = os.path.join(boot_path, "vmlinuz")
    if os.path.islink(link):
        name = os.path.basename(os.path.realpath(link))
        if name.startswith("vmlinuz-"):
            return name[len("vmlinuz-"):]
    try:
        kernels = [n[len("vmlinuz-"):] for n in os.listdir(boot_path) if n.startswith("vmlinuz-")]
    except OSError:
        kernels = []
    return max(kernels, key=_version_key) if kernels else running


def modinfo(kernel, field):
    """modinfo -k KERNEL -F FIELD nvidia, or None when the module is not there for that kernel."""
    try:
        proc = subprocess.run(
            ["modinfo", "-k", kernel, "-F", field, "nvidia"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def boot_check(kernel, secure_boot, module, planned=None):
    """None when the kernel that will boot loads the planned nvidia module; else why not, and the fix.
    module: {path, version, flavour, signer} from modinfo (path None when there is none);
    planned: (version, flavour or None), None to accept any version."""
    path = module.get("path")
    if not path:
        return (
            "no nvidia module is built for %s, the kernel the next boot starts: it would come up without "
            "a GPU driver. Run `dkms autoinstall -k %s` (or install that kernel's headers and rerun), "
            "or boot the running kernel by default" % (kernel, kernel)
        )
    if planned is not None:
        version, flavour = planned
        if module.get("version") != version or (flavour and module.get("flavour") != flavour):
            return (
                "the nvidia module built for %s, the kernel the next boot starts, is %s %s (%s), not the planned "
                "%s %s: it would boot another driver. Check `dkms status`, rebuild with `dkms autoinstall -k %s`, "
                "or remove the other flavour's packages"
                % (kernel, module.get("version") or "of unknown version", module.get("flavour") or "of unknown flavour",
                   path, version, flavour or "", kernel)
            )
    if secure_boot in ("enabled", "unknown") and not module.get("signer"):
        state = "enabled" if secure_boot == "enabled" else "unknown (its EFI variable cannot be read)"
        return (
            "Secure Boot is %s and the nvidia module for %s (%s) is unsigned: it would not load. "
            "Set nvidia_driver_module_signing_key/cert (an enrolled MOK) and rebuild it with dkms"
            % (state, kernel, path)
        )
    return None


def boot_module(kernel):
    """The nvidia module modinfo finds for kernel: {path, version, flavour, signer}."""
    path = modinfo(kernel, "filename")
    if not path:
        return {"path": None, "version": None, "flavour": None, "signer": None}
    license_ = modinfo(kernel, "license")
    return {
        "path": path,
        "version": modinfo(kernel, "version") or None,
        "flavour": LICENSE_FLAVOURS.get(license_ or ""),
        "signer": modinfo(kernel, "signer"),
    }


def decide(policy, planned, loaded, nvidia_loaded, nouveau_loaded, changed, planned_flavour=None, flavour=None):
    """How to activate the planned driver: (action, reason) with action none | load | reboot.
    A loaded module of the planned version but another flavour is not the planned driver."""
    want = "%s %s" % (planned, planned_flavour) if planned_flavour else planned
    have = "%s %s" % (loaded, flavour) if planned_flavour and loaded else loaded
    if policy == "always" and changed:
        return "reboot", "nvidia_driver_reboot is always and the driver changed"
    if loaded == planned and (not planned_flavour or flavour == planned_flavour):
        return "none", f"driver {want} is already loaded"
    if policy == "never":
        if loaded is None and not nouveau_loaded:
            return "load", "no NVIDIA module is loaded; loading it needs no reboot"
        return "none", (f"driver {have or 'nouveau'} stays loaded until the next reboot "
                        f"(nvidia_driver_reboot is never); {want} is installed")
    if nouveau_loaded:
        return "reboot", "nouveau holds the GPU; a reboot applies the blacklist and loads nvidia"
    if nvidia_loaded or loaded is not None:
        return "reboot", f"driver {have} is loaded; {want} takes effect after a reboot"
    return "load", "no NVIDIA module is loaded; loading it needs no reboot"


def disk_free_mb(path):
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize // (1024 * 1024)


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def main():
    module = AnsibleModule(
        argument_spec={
            "pci_devices_path": {"type": "path", "default": "/sys/bus/pci/devices"},
            "secure_boot_efivar": {"type": "path",
                                   "default": "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"},
            "proc_modules_path": {"type": "path", "default": "/proc/modules"},
            "driver_version_path": {"type": "path", "default": "/proc/driver/nvidia/version"},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "reboot_policy": {"type": "str", "choices": ["auto", "never", "always"]},
            "planned_version": {"type": "str"},
            "planned_flavour": {"type": "str", "choices": ["open", "proprietary"]},
            "driver_changed": {"type": "bool", "default": False},
            "disk_path": {"type": "path", "default": "/"},
            "proc_path": {"type": "path", "default": "/proc"},
            "sys_module_path": {"type": "path", "default": "/sys/module"},
            "boot_path": {"type": "path", "default": "/boot"},
        },
        supports_check_mode=True,
    )
    p = module.params
    modules = loaded_modules(p["proc_modules_path"])
    version = loaded_version(p["driver_version_path"])
    flavour = loaded_flavour(p["driver_version_path"])
    pids, smi_error = gpu_processes(p["nvidia_smi"])
    use, evidence = gpu_use("nvidia" in modules, pids, smi_error, device_users(p["proc_path"]),
                            uvm_refcount(p["sys_module_path"]))
    result = {
        "changed": False,
        "gpus": nvidia_gpus(p["pci_devices_path"]),
        "secure_boot": secure_boot_state(p["secure_boot_efivar"]),
        "nvidia_loaded": "nvidia" in modules,
        "nouveau_loaded": "nouveau" in modules,
        "loaded_version": version,
        "loaded_flavour": flavour,
        "gpu_processes": pids or [],
        "nvidia_smi_error": smi_error,
        "gpu_use": use,
        "gpu_use_evidence": evidence,
        "disk_free_mb": disk_free_mb(p["disk_path"]),
    }
    if p["reboot_policy"]:
        if not p["planned_version"]:
            module.fail_json(msg="planned_version is required with reboot_policy", **result)
        result["action"], result["reason"] = decide(
            p["reboot_policy"], p["planned_version"], version, "nvidia" in modules, "nouveau" in modules,
            p["driver_changed"], p["planned_flavour"], flavour)
        if result["action"] == "reboot":
            kernel = boot_kernel(p["boot_path"], os.uname().release)
            module_ = boot_module(kernel)
            result.update(boot_kernel=kernel, boot_module=module_["path"], boot_module_version=module_["version"],
                          boot_module_flavour=module_["flavour"])
            refusal = boot_check(kernel, result["secure_boot"], module_, (p["planned_version"], p["planned_flavour"]))
            if refusal:
                result["action"], result["reason"] = "refuse", refusal
    module.exit_json(**result)


if __name__ == "__main__":
    main()
