"""What the checks read from a host, read once per host and shared by every check."""

from __future__ import annotations

import functools
import shlex
from typing import Any, NamedTuple

from provision import smi
from provision.hostpool import KILL_AFTER, OUTPUT_LIMIT, output_limit, remote_command, timed_out_rc
from provision.verify import batch
from provision.verify.settings import engine, flag

# The table fields a check reads, in Gpu's order; values stay as nvidia-smi prints them
# ("Enabled", "[N/A]"): the checks compare and show those spellings.
GPU_FIELDS = ("index", "name", "device_id", "driver_version", "persistence", "mig_current", "mig_pending")
SMI_FIELDS = smi.query_names(*GPU_FIELDS)
_DEVICE = GPU_FIELDS.index("device_id")


class Gpu(NamedTuple):  # one attribute per GPU_FIELDS entry, in its order
    index: str
    name: str
    device_id: str  # "0x20B5" (nvidia-smi prints 0x20B510DE: device then vendor)
    driver: str
    persistence: str
    mig_current: str
    mig_pending: str


class Installed(NamedTuple):
    name: str
    version: str | None  # upstream version (epoch and package revision stripped); None: absent
    raw: str | None  # the package manager's full version string
    held: bool


class Result(NamedTuple):
    rc: int
    out: str
    err: str
    timed_out: int | None = None  # seconds the command had when timeout stopped it; None: it ended
    cut: bool = False  # the host printed more than OUTPUT_LIMIT: only that much was read

    @property
    def text(self) -> str:
        return (self.out + self.err).strip()


def secure_boot_path(hostvars: dict[str, Any]) -> str:
    """The EFI variable the secure-boot check reads (the inventory may name another one)."""
    return str(hostvars.get("preflight_secure_boot_efivar", SECURE_BOOT_EFIVAR))


KERNEL_LOG_LINES = 50  # lines of KERNEL_LOG's answer looked at (it prints 5)
MAX_GPU_LINES = 1024  # lines of nvidia-smi's table parsed (one per GPU)
MAX_LINES = 20000  # lines of a package listing parsed (dpkg lists every package: a few thousand)
LINE_LIMIT = 4096  # characters of host output a check's pattern reads (its line or lines are far shorter)
SECURE_BOOT_ABSENT = 3  # secure_boot_command's exit status when there is no such variable


def secure_boot_command(hostvars: dict[str, Any]) -> str:
    """Reads the variable's bytes; exits SECURE_BOOT_ABSENT only when the variable is not there
    (no EFI, or firmware without Secure Boot), 1 when it is there and cannot be read (permission
    denied, an I/O error) or its directory cannot be searched. The path comes from the
    inventory, so it is quoted."""
    path = shlex.quote(secure_boot_path(hostvars))
    folder = shlex.quote(secure_boot_path(hostvars).rsplit("/", 1)[0] or "/")
    return (
        f"if [ -e {path} ]; then od -An -t u1 {path}; "
        f"elif [ -d {folder} ] && ! [ -x {folder} ]; then echo {folder}: permission denied >&2; exit 1; "
        f"else exit {SECURE_BOOT_ABSENT}; fi"
    )


def upstream_version(version: str) -> str:
    """580.95.05 from 580.95.05-1, 3:580.95.05-1ubuntu1 or (rpm VERSION) 580.95.05."""
    version = version.split(":", 1)[1] if ":" in version.split("-", 1)[0] else version
    return version.rsplit("-", 1)[0] if "-" in version else version


# GPU lines of the kernel log: what to show when nvidia-smi fails or hangs (doctor reads more).
KERNEL_LOG = (
    "{ dmesg 2>/dev/null; journalctl -k -b --no-pager -q 2>/dev/null; "
    "cat /var/log/kern.log /var/log/messages 2>/dev/null; } "
    "| grep -aiE 'NVRM|Xid|fallen off the bus' | tail -n 5"
)

# -- the commands the checks send, so that `prefetch` can send them all at once -------------------
SMI_QUERY = f"nvidia-smi --query-gpu={','.join(SMI_FIELDS)} --format=csv,noheader"
DETECT_VIRT = "systemd-detect-virt --container 2>/dev/null"
CONTAINER_MARKERS = "for f in /.dockerenv /run/.containerenv; do [ -e $f ] && echo $f; done; true"
# every package held on an apt host, as apt-mark showhold lists them, without apt's cache (building
# it costs apt-mark half a second of CPU where the image disables pkgcache.bin)
DPKG_HELD = "dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package}\\n' 2>/dev/null"
SECURE_BOOT_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
MODULE_SIGNER = "modinfo -F signer nvidia 2>/dev/null"
NOUVEAU_BLACKLIST = (
    "grep -lsE '^[[:space:]]*blacklist[[:space:]]+nouveau' /etc/modprobe.d/*.conf /usr/lib/modprobe.d/*.conf"
)
NOUVEAU_LOADED = "grep -E '^nouveau ' /proc/modules"
FABRIC_MANAGER_VERSION = "nv-fabricmanager --version"
CTK_VERSION = "nvidia-ctk --version"
MIG_LGI = "nvidia-smi mig -lgi"
DNF_KERNEL_SECURITY = "dnf -q updateinfo list --security --available 'kernel*' 2>/dev/null"
MODULE_OPTIONS_FILE = "/etc/modprobe.d/provision-nvidia.conf"  # the nvidia_driver role's

# -- the server around the GPUs (provision/verify/checks/check_server.py; a plan with a platform) ---
# each GPU's PCIe link as nvidia-smi reports it: generation and width, now and at most
PCIE_FIELDS = ("index", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max")
PCIE_QUERY = f"nvidia-smi --query-gpu={','.join(PCIE_FIELDS)} --format=csv,noheader"
NVLINK_STATUS = "nvidia-smi nvlink -s"  # each GPU's NVLinks: a speed, or <inactive>
TOPOLOGY = "nvidia-smi topo -m"  # the relation between every pair of GPUs (NV#, PIX, PXB, PHB, NODE, SYS)
DMI_DIR = "/sys/class/dmi/id"  # read-only files the firmware fills (SMBIOS type 1 and 2)
DMI_DIR_VARIABLE = "verify_dmi_dir"  # host variable naming another folder (the test fleet's stand-in)
DMI_FILES = ("sys_vendor", "product_name", "board_name")
DMI_VALUE_LIMIT = 256  # characters read of each DMI file (real values are a few dozen)
SERVER_CHECKS = ("server-dmi", "server-gpus", "server-nvlink", "server-topology", "server-pcie")
NVLINK_KINDS = ("nvswitch", "nvlink", "nvlink-bridge")  # interconnects whose GPUs have NVLinks


def dmi_dir(hostvars: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the folder the DMI check reads, None) or (None, why the inventory's value is refused): an
    absolute path of printable ASCII without '..', at most 256 characters."""
    value = hostvars.get(DMI_DIR_VARIABLE, DMI_DIR)
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or len(value) > 256
        or not all(32 < ord(c) < 127 for c in value)
        or ".." in value.split("/")
    ):
        return None, f"{DMI_DIR_VARIABLE} is {str(value)[:60]!r}, not an absolute path (printable, no '..')"
    return value.rstrip("/") or "/", None


def dmi_command(folder: str) -> str:
    """One line per DMI_FILES entry, in order: '+' and the file's first DMI_VALUE_LIMIT characters with
    control characters removed (a value cannot start another line), or '-' when it cannot be read."""
    quoted = shlex.quote(folder)
    return (
        f"for f in {' '.join(DMI_FILES)}; do if [ -r {quoted}/$f ]; then "
        f"printf '+%s\\n' \"$(head -c {DMI_VALUE_LIMIT} {quoted}/$f | tr -d '\\000-\\037\\177')\"; "
        "else echo -; fi; done"
    )


def server_commands(target, wanted) -> tuple[list[str], list[str], bool]:
    """(cheap reads, nvidia-smi commands, whether they read nvidia-smi's GPU table) of the server
    checks selected by `wanted`, for a plan with a platform."""
    server = getattr(target.plan, "server", None)
    if server is None:
        return [], [], False
    first: list[str] = []
    gpu: list[str] = []
    folder, _ = dmi_dir(target.hostvars or {})
    if wanted("server-dmi") and folder and (server.dmi_vendor or server.dmi_product):
        first.append(dmi_command(folder))
    if wanted("server-pcie") and (server.pcie_generation or server.pcie_width):
        gpu.append(PCIE_QUERY)
    if wanted("server-nvlink") and server.interconnect in NVLINK_KINDS:
        gpu.append(NVLINK_STATUS)
    if wanted("server-topology") and server.topology:
        gpu.append(TOPOLOGY)
    return first, gpu, any(wanted(c) for c in SERVER_CHECKS if c != "server-dmi")


def read_command(path: str) -> str:
    return f"cat {shlex.quote(path)}"


def systemd_command(unit: str) -> str:
    return f"systemctl is-active {shlex.quote(unit)}; systemctl is-enabled {shlex.quote(unit)} 2>/dev/null"


def package_commands(pkg_manager: str, names: list[str]) -> list[str]:
    """apt: the dpkg-query of the packages; rpm: their rpm query and dnf's versionlock list."""
    quoted = " ".join(shlex.quote(n) for n in names)
    if pkg_manager == "apt":
        return [f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{db:Status-Abbrev}}\\n' {quoted} 2>/dev/null"]
    return [
        f"rpm -q --qf '%{{NAME}}\\t%{{VERSION}}\\t%{{RELEASE}}\\n' {quoted} 2>/dev/null",
        "dnf -q versionlock list 2>/dev/null",
    ]


def image_inspect_command(image: str) -> str:
    return f"docker image inspect --format '{{{{.Id}}}}' {shlex.quote(image)}"


def planned_packages(target, checks: set[str] | None = None) -> list[str]:
    """Every package the selected checks look up with `installed`, in one list."""
    plan, hv = target.plan, target.hostvars or {}
    wanted = (lambda c: True) if checks is None else checks.__contains__
    names: list[str] = []
    if wanted("driver-packages"):
        names += [p.name for p in plan.driver.packages]
        names += [p.name for p in plan.fabric_manager.packages] if plan.fabric_manager else []
    sm = plan.subnet_manager
    if wanted("subnet-manager") and sm is not None and flag(hv, "nvidia_driver_subnet_manager"):
        names += [*sm.packages, *sm.requires]
    if wanted("container-toolkit"):
        names += [p.name for p in plan.container_toolkit.packages]
    return list(dict.fromkeys(names))


def planned_commands(target, checks: set[str] | None = None) -> list[str]:
    """The commands the checks with these ids (None: all) send to `target`, as they spell them,
    in the order a batch runs them: the cheap reads first, then what can hang on a lost GPU
    (nvidia-smi and the tools that talk to the driver), dnf's advisories (a metadata download)
    last. A command left out still runs, on its own (tests/unit/test_verify_batch.py runs every
    check on a batch and fails on any command sent outside it)."""
    plan, hv = target.plan, target.hostvars or {}
    wanted = (lambda c: True) if checks is None else checks.__contains__
    docker = engine(hv) == "docker"
    sm = plan.subnet_manager if flag(hv, "nvidia_driver_subnet_manager") else None
    images = wanted("image-runs") and bool(target.images)  # it reads the driver and GPUs nvidia-smi reports
    # the server checks read the GPUs nvidia-smi lists (SMI_QUERY) before their own commands
    server_first, server_gpu, server_smi = server_commands(target, wanted)
    smi_checks = wanted("nvidia-smi") or wanted("gpus") or wanted("persistence") or images or server_smi
    mig = bool(target.mig) and flag(target.mig, "provision_mig_enabled") and wanted("mig")
    first = ["true", DETECT_VIRT, CONTAINER_MARKERS, read_command("/etc/os-release")]
    late: list[str] = []
    if wanted("secure-boot"):
        first += [secure_boot_command(hv), MODULE_SIGNER]
    if wanted("nouveau-blacklisted") and flag(hv, "nvidia_driver_blacklist_nouveau"):
        first.append(NOUVEAU_BLACKLIST)
    if wanted("nouveau-not-loaded"):
        first.append(NOUVEAU_LOADED)
    packages = planned_packages(target, checks)
    if packages:
        first += package_commands(plan.os.pkg_manager, packages)
    if wanted("kernel-hold") and flag(hv, "nvidia_driver_hold_kernel"):
        if plan.os.pkg_manager == "apt":
            first.append(DPKG_HELD)
        else:
            late.append(DNF_KERNEL_SECURITY)  # may refresh metadata: last
    if wanted("persistence") and flag(hv, "nvidia_driver_persistenced"):
        first.append(systemd_command("nvidia-persistenced"))
    if wanted("fabric-manager"):
        first.append(systemd_command("nvidia-fabricmanager"))
    if wanted("subnet-manager") and sm is not None:
        first += [read_command("/proc/modules"), f"pgrep -x {shlex.quote(sm.process)}"]
    if wanted("docker-runtime") and docker:
        first.append(read_command(hv.get("container_runtime_daemon_json", "/etc/docker/daemon.json")))
    if wanted("module-options") and plan.driver.module_options:
        first.append(read_command(MODULE_OPTIONS_FILE))
    if wanted("container-toolkit"):
        first.append(CTK_VERSION)
    if wanted("gpu-container") and docker:
        first.append(image_inspect_command(plan.base_image))
    gpu: list[str] = []
    if wanted("kernel-module"):
        gpu.append(read_command("/proc/driver/nvidia/version"))
    if wanted("module-options") and plan.driver.module_options:
        gpu.append(read_command("/proc/driver/nvidia/params"))
    if smi_checks or mig:
        gpu += [KERNEL_LOG, SMI_QUERY]  # the kernel log first: it still answers when nvidia-smi hangs
    if mig:
        gpu.append(MIG_LGI)
    if wanted("fabric-manager") and plan.fabric_manager is not None:
        gpu.append(FABRIC_MANAGER_VERSION)
    return list(dict.fromkeys(first + server_first + gpu + server_gpu + late))


def _bounded(rc: int, res, stopped: int | None) -> Result:
    """A command's Result, each stream at most OUTPUT_LIMIT characters (the host's backend
    already stopped reading there; a host object that did not is cut here)."""
    out, err = res.stdout or "", res.stderr or ""
    cut = bool(getattr(res, "cut", False)) or len(out) > OUTPUT_LIMIT or len(err) > OUTPUT_LIMIT
    return Result(rc, out[:OUTPUT_LIMIT], err[:OUTPUT_LIMIT], stopped, cut)


class HostFacts:
    def __init__(self, host, target, *, budget=None, have_timeout: bool = True):
        self.host = host
        self.target = target
        self.hostvars: dict[str, Any] = dict(target.hostvars or {})
        self.budget = budget  # provision.hostpool.Budget; None: commands run without a deadline
        self.have_timeout = have_timeout
        self._packages: dict[str, Installed] = {}
        self._fetched: dict[str, Result] = {}  # command -> what it printed, from `prefetch`
        self.round_trips = 0  # commands sent to the host (a batch counts once)
        self.cut: list[str] = []  # each command read whose output was cut at OUTPUT_LIMIT, as read

    def prefetch(self, checks: set[str] | None = None) -> int:
        """Run the commands the `checks` (ids; None: all) will send, in one round trip (see
        provision/verify/batch.py); `run` then answers them from what came back. Only under a
        deadline with coreutils timeout on the host (otherwise one hung command would take the
        whole batch's results with it). Returns how many commands it answered; 0 when the batch
        failed or its output was not the script's (the commands then go one by one, as before)."""
        if self.budget is None or not self.have_timeout:
            return 0
        commands = list(dict.fromkeys(planned_commands(self.target, checks)))
        left = self.budget.remaining()
        if not commands or left - KILL_AFTER <= 0:
            return 0
        token = batch.new_token()
        text = batch.script(commands, token, left=left, share=self.budget.command_timeout())
        self.round_trips += 1
        try:
            # each command may print OUTPUT_LIMIT (a section past it is cut below); the batch as a
            # whole is read up to that many times the commands, the markers besides
            with output_limit(self.host, len(commands) * (OUTPUT_LIMIT + 256) + 65536):
                res = self.host.run(text)
        except Exception:  # the connection failed: `unreachable` sends `true` alone and says why
            return 0
        sections = batch.parse(res.stdout or "", res.stderr or "", token, len(commands))
        if not sections:
            return 0
        for command, section in zip(commands, sections, strict=False):
            if section.rc is None:
                self._fetched[command] = Result(124, "", batch.NOT_RUN, 0)
            else:
                stopped = section.seconds if timed_out_rc(section.rc) else None
                cut = len(section.out) > OUTPUT_LIMIT or len(section.err) > OUTPUT_LIMIT
                out, err = section.out[:OUTPUT_LIMIT], section.err[:OUTPUT_LIMIT]
                self._fetched[command] = Result(section.rc, out, err, stopped, cut)
        names = planned_packages(self.target, checks)
        queries = package_commands(self.target.plan.os.pkg_manager, names) if names else []
        if queries and all(q in self._fetched and self._fetched[q].timed_out is None for q in queries):
            self.installed(names)  # one query for every check's packages (none stopped or left unrun)
        return len(sections)

    def answers(self, check: str) -> bool:
        """Whether `prefetch` read everything the check sends (it can then run past the deadline:
        it sends nothing more)."""
        names = planned_packages(self.target, {check})
        queries = set(package_commands(self.target.plan.os.pkg_manager, names)) if names else set()
        return all(n in self._packages for n in names) and all(
            c in self._fetched and self._fetched[c].err != batch.NOT_RUN
            for c in planned_commands(self.target, {check})
            if c not in queries  # the packages come from the query of every check's packages
        )

    def run(self, command: str) -> Result:
        """Run a command on the host. Under a budget it runs under coreutils timeout, its share of
        the host's deadline (hostpool.Budget); one it stopped comes back with timed_out set. A
        command `prefetch` ran is answered from its output."""
        result = self._fetched.get(command) or self._run(command)
        if result.cut:
            self.cut.append(command)
        return result

    def _run(self, command: str) -> Result:
        self.round_trips += 1
        if self.budget is None:
            res = self.host.run(command)
            return _bounded(res.rc, res, None)
        seconds = self.budget.command_timeout()
        if seconds <= 0:
            return Result(124, "", "not run: the host's deadline has passed", 0)
        res = self.host.run(remote_command(command, seconds, have_timeout=self.have_timeout))
        stopped = seconds if self.have_timeout and timed_out_rc(res.rc) else None
        return _bounded(res.rc, res, stopped)

    @functools.cached_property
    def kernel_log(self) -> list[str]:
        """The newest GPU lines of the kernel log (NVRM, Xid, fallen off the bus)."""
        res = self.run(KERNEL_LOG)
        tail = res.out.splitlines()[-KERNEL_LOG_LINES:]  # the command keeps its last 5: a host may send more
        return [line.strip()[:LINE_LIMIT] for line in tail if line.strip()][-5:] if res.rc == 0 else []

    @functools.cached_property
    def unreachable(self) -> str | None:
        """None when a command runs there; otherwise why not."""
        try:
            res = self.run("true")
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}".strip()
        if res.rc != 0:
            return (res.err.strip().splitlines() or [f"exit {res.rc}"])[-1]
        return None

    @functools.cached_property
    def container(self) -> str | None:
        """The container technology the host runs in (docker, podman, lxc…), or None."""
        res = self.run(DETECT_VIRT)
        kind = res.out.strip()
        if res.rc == 0 and kind and kind != "none":
            return kind
        present = set(self.run(CONTAINER_MARKERS).out.split())
        for marker, kind in (("/.dockerenv", "docker"), ("/run/.containerenv", "podman")):
            if marker in present:
                return kind
        return None

    @functools.cached_property
    def os_release(self) -> dict[str, str]:
        res = self.run(read_command("/etc/os-release"))
        out: dict[str, str] = {}
        for line in res.out.splitlines()[:256]:  # os-release(5) has a few dozen lines
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip().strip('"')
        return out

    @functools.cached_property
    def smi(self) -> tuple[Result, list[Gpu]]:
        self.kernel_log  # noqa: B018 - read first: it still answers when nvidia-smi hangs on a lost GPU
        res = self.run(SMI_QUERY)
        gpus: list[Gpu] = []
        if res.rc == 0:
            for line in res.out.splitlines()[:MAX_GPU_LINES]:
                cells = [c.strip() for c in line.split(",")]
                if len(cells) == len(SMI_FIELDS):
                    cells[_DEVICE] = smi.device_id(cells[_DEVICE])
                    gpus.append(Gpu(*cells))
        return res, gpus

    def installed(self, names: list[str]) -> dict[str, Installed]:
        """Each package's installed version and hold; read once per host (`prefetch` reads
        every package the checks name in one query)."""
        missing = [n for n in dict.fromkeys(names) if n not in self._packages]
        if missing:
            self._packages.update(self._query_packages(missing))
        return {n: self._packages[n] for n in names}

    def held_packages(self) -> set[str]:
        """apt: every package held (what apt-mark showhold lists), from dpkg's selections."""
        res = self.run(DPKG_HELD)
        return {
            parts[1]
            for parts in (line.split() for line in res.out.splitlines()[:MAX_LINES])
            if len(parts) == 2 and parts[0].startswith("h")
        }

    def _query_packages(self, names: list[str]) -> dict[str, Installed]:
        versions: dict[str, str] = {}
        held: set[str] = set()
        if self.target.plan.os.pkg_manager == "apt":
            res = self.run(package_commands("apt", names)[0])
            for line in res.out.splitlines()[:MAX_LINES]:
                parts = line.split("\t")
                # db:Status-Abbrev: the selection (h: hold, what apt-mark hold and Ansible's
                # dpkg_selections set), then the state (i: installed)
                if len(parts) == 3 and parts[2].strip().startswith(("ii", "hi")):
                    versions[parts[0]] = parts[1]
                    if parts[2].startswith("h"):
                        held.add(parts[0])
        else:
            rpm_query, versionlock = package_commands("rpm", names)
            res = self.run(rpm_query)
            for line in res.out.splitlines()[:MAX_LINES]:
                parts = line.split("\t")
                if len(parts) == 3 and "not installed" not in line:
                    versions[parts[0]] = f"{parts[1]}-{parts[2]}"
            locks = "\n".join(self.run(versionlock).out.splitlines()[:MAX_LINES])
            for name in names:
                # entries read NAME-[EPOCH:]VERSION-RELEASE.* (one per locked package)
                if any(
                    entry.strip().startswith(f"{name}-") and entry.strip()[len(name) + 1 : len(name) + 2].isdigit()
                    for entry in locks.splitlines()
                ):
                    held.add(name)
        return {
            n: Installed(n, upstream_version(versions[n]) if n in versions else None, versions.get(n), n in held)
            for n in names
        }

    def systemd(self, unit: str) -> tuple[str, str]:
        """(is-active, is-enabled) as systemctl prints them."""
        res = self.run(systemd_command(unit))
        lines = res.out.split()
        return (lines[0] if lines else "unknown", lines[1] if len(lines) > 1 else "not-found")

    def read(self, path: str) -> str | None:
        """A file's content (through sudo when testinfra runs with it), None when absent."""
        res = self.run(read_command(path))
        return res.out if res.rc == 0 else None
