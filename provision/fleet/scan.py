"""`provision inventory scan`: what each host of an inventory runs now, read over SSH.

Every host gets one round trip: a batch of read-only commands (`COMMANDS`) framed by a per-run
random token (provision/verify/batch.py: each command under coreutils ``timeout --kill-after``,
its process group SIGKILLed at its share, none run past the host's deadline, which the script
counts on the host's own clock). The batch runs as the ssh client itself where Ansible would
reach the host over plain ssh (`hostpool.ssh_argv`), otherwise in a worker process that builds
testinfra's backend from the host's checked Connection (``python -m provision.fleet.scan``); either
way a job of `hostpool.run_jobs`, at most --forks at once, each ended with its process group at
--host-timeout, each stream read up to `OUTPUT_LIMIT` bytes.

What comes back is untrusted. A batch whose output holds the run's token anywhere but in the
script's own markers is refused whole. Each command's answer is read up to `SECTION_LIMIT`
characters, `MAX_LINES` lines of `LINE_LIMIT` characters, by parsers that do one pass over what
they keep; every string that goes into the document is held to the pattern the scan schema
(provision/plan/schema/scan.schema.json) gives it, matched whole, and a value that does not match
is not a fact (null). The finished document is held to the schema once more before anyone sees it.

The facts, and where each comes from:

* driver: the loaded module's version and flavour from /proc/driver/nvidia/version ("Open Kernel
  Module" marks the open flavour), else nvidia-smi's driver_version, else the installed driver
  packages the catalogue names for the host's OS (compat/drivers.yaml packaging); the flavour
  from the version file, else ``modinfo -F license nvidia`` ("Dual MIT/GPL": open, "NVIDIA":
  proprietary, as NVIDIA's README kernel_open says), else the flavour whose catalogued packages
  are installed; signed from ``modinfo -F signer nvidia``; loaded from the version file or
  /proc/modules.
* GPUs: ``nvidia-smi --query-gpu=index,name,pci.device_id``, each PCI device id mapped to the
  catalogue's GPU id (compat/gpus.yaml pci_device_ids).
* packages: dpkg's (Debian family) or rpm's (RedHat family) list of installed packages: the CUDA
  user-space packages (cuda-*, libcudart*, cuda-compat), the Container Toolkit, Docker, containerd
  and Fabric Manager versions (the binaries' --version where no package is installed), and the held
  packages (dpkg's hold selection; dnf's versionlock list, dnf 4 and dnf 5 files).
* OS (/etc/os-release, mapped to a catalogue OS id), kernel (``uname -r``), Fabric Manager's unit
  state (``systemctl is-active nvidia-fabricmanager``).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from provision.hostpool import (
    DEFAULT_FORKS,
    DEFAULT_HOST_TIMEOUT,
    Budget,
    Connection,
    Job,
    connection_error,
    timed_out_rc,
)

SCHEMA_VERSION = 1
KIND = "provision-scan"
SECTION_LIMIT = 1024 * 1024  # characters of one command's answer parsed
OUTPUT_LIMIT = 4 * 1024 * 1024  # bytes of a host's stdout (and of its stderr) read; the rest is dropped
MAX_LINES = 20000  # lines of a package listing parsed (dpkg lists a few thousand on a server)
LINE_LIMIT = 4096  # characters of one line a parser reads
MAX_GPUS = 64
MAX_PACKAGES = 512  # cuda_packages and held (the schema's maxItems)
NO_TIMEOUT = 3  # the script's exit status on a host without coreutils timeout
UNREACHABLE = 255  # ssh's own exit status on a connection failure (the worker exits with it too)

# The read-only commands of a scan, in the order the batch runs them: the cheap reads first, then
# what can hang on a GPU that fell off the bus (nvidia-smi and the tools that talk to the driver).
COMMANDS: tuple[tuple[str, str], ...] = (
    ("os-release", "cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release"),
    ("kernel", "uname -r"),
    ("proc-version", "cat /proc/driver/nvidia/version"),
    ("modules", "grep -E '^nvidia ' /proc/modules"),
    ("module-license", "modinfo -F license nvidia"),
    ("module-signer", "modinfo -F signer nvidia"),
    ("dpkg", "dpkg-query -W -f='${db:Status-Abbrev}\\t${binary:Package}\\t${Version}\\n'"),
    ("rpm", "rpm -qa"),
    ("versionlock", "cat /etc/dnf/plugins/versionlock.list"),
    ("versionlock-dnf5", "cat /etc/dnf/versionlock.toml"),
    ("fabric-manager-unit", "systemctl is-active nvidia-fabricmanager"),
    ("docker-version", "docker --version"),
    ("containerd-version", "containerd --version"),
    ("ctk-version", "nvidia-ctk --version"),
    ("fabric-manager-version", "nv-fabricmanager --version"),
    ("nvidia-smi", "nvidia-smi --query-gpu=index,name,pci.device_id,driver_version --format=csv"),
)
# Before the batch: it needs coreutils timeout to bound each command.
PREAMBLE = (
    "command -v timeout >/dev/null 2>&1 || "
    f"{{ echo 'provision: no coreutils timeout on the host' >&2; exit {NO_TIMEOUT}; }}\n"
)

# Packages, by what they are (names as Debian/Ubuntu and EL repositories spell them)
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base")
DOCKER_PACKAGES = ("docker-ce", "docker.io", "moby-engine", "docker-engine")
CONTAINERD_PACKAGES = ("containerd.io", "containerd", "moby-containerd")
NOT_CUDA_USER_SPACE = re.compile(r"cuda-drivers(?:-\d+)?|cuda-keyring|cuda-repo-.*")
CUDA_USER_SPACE = re.compile(r"cuda-.+|libcudart.*|nvidia-cuda-.+")
ARCHES = frozenset({"x86_64", "noarch", "aarch64", "i686", "ppc64le", "s390x", "armv7hl", "src"})
DRIVER_RELEASE = re.compile(r"\d{3,4}\.\d{1,3}(?:\.\d{1,3})?")
# Ubuntu's own archive names the driver's packages by branch (libnvidia-compute-470,
# nvidia-compute-utils-550-server; tests/fixtures/scan): read where no catalogued name is installed
ARCHIVE_DRIVER = re.compile(r"(?:libnvidia-compute|nvidia-compute-utils|nvidia-driver)-\d{3,4}(?:-server)?(?:-open)?")

_PROC_VERSION = re.compile(
    r"NVRM version: NVIDIA UNIX (?:(Open) Kernel Module for \S{1,32}|\S{1,32} Kernel Module)[ \t]{1,8}(\d{1,4}(?:\.\d{1,4}){1,2})\s"
)
_LEADING_VERSION = re.compile(r"\d{1,9}(?:\.\d{1,9}){0,5}")
_DOCKER_VERSION = re.compile(r"Docker version v?(\d{1,9}(?:\.\d{1,9}){1,3})")
_CTK_VERSION = re.compile(r"version v?(\d{1,9}(?:\.\d{1,9}){1,3})")
_FM_VERSION = re.compile(r"version is\s{0,8}:?\s{0,8}(\d{1,9}(?:\.\d{1,9}){1,3})")
_TOML_NAME = re.compile(r'\s{0,16}name\s{0,4}=\s{0,4}"([^"]{1,128})"\s{0,16}')


# -- the schema's patterns, matched whole -----------------------------------------------------
SCHEMA_FILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plan", "schema", "scan.schema.json"
)


@functools.cache
def _patterns() -> dict[str, re.Pattern[str]]:
    """The scan schema's string patterns by name ($defs and the inline ones), compiled once. They
    are matched with fullmatch: Python's ``$`` would let a trailing newline through."""
    with open(SCHEMA_FILE, encoding="utf-8") as handle:
        schema = json.load(handle)
    defs, props = schema["$defs"], schema["properties"]
    found = {name: defs[name]["pattern"] for name in ("name", "word", "version", "text", "package")}
    found["branch"] = props["driver"]["anyOf"][1]["properties"]["branch"]["pattern"]
    found["pci"] = props["gpus"]["items"]["properties"]["pci_device_id"]["pattern"]
    found["scanned_at"] = props["scanned_at"]["pattern"]
    return {name: re.compile(pattern) for name, pattern in found.items()}


def held_to(kind: str, value: object) -> str | None:
    """``value`` when it is a string the schema's ``kind`` pattern matches whole; otherwise None."""
    if not isinstance(value, str) or len(value) > 400:
        return None
    return value if _patterns()[kind].fullmatch(value) else None


# what the schema's text refuses (control characters, line separators, braces) and, stricter, the
# bidirectional controls that would reorder a terminal line
_NOT_TEXT = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029{}\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def as_text(value: str, width: int = 400) -> str:
    """``value`` as the schema's text: control characters, line separators, bidirectional controls
    and braces shown as '?', at most ``width`` characters."""
    cleaned = _NOT_TEXT.sub("?", value[: width * 2].strip())
    return cleaned if len(cleaned) <= width else cleaned[: width - 1] + "…"


def version_of(value: str | None) -> str | None:
    """A version as the schema holds it: the value itself when it is one, else its leading numbers
    (Docker's ``20.10.24+dfsg1`` is 20.10.24); None when it does not start with a number."""
    if not value:
        return None
    if held_to("version", value):
        return value
    match = _LEADING_VERSION.match(value)
    return held_to("version", match.group(0)) if match else None


def upstream(version: str) -> str:
    """580.95.05 from 580.95.05-1, 3:580.95.05-1.el9 or 5:24.0.7-1~ubuntu.22.04~jammy."""
    head, sep, tail = version.partition(":")
    if sep and head.isdigit():
        version = tail
    return version.rsplit("-", 1)[0] if "-" in version else version


def _lines(text: str, limit: int = MAX_LINES) -> Iterable[str]:
    """At most ``limit`` lines of ``text`` (split at newlines only, as a shell's output is; a
    trailing carriage return dropped), each cut to LINE_LIMIT characters."""
    for line in text[:SECTION_LIMIT].split("\n", limit)[:limit]:
        yield line[:LINE_LIMIT].removesuffix("\r")


# -- one command's answer --------------------------------------------------------------------
class Answer(NamedTuple):
    out: str
    err: str
    rc: int | None  # None: not run (the deadline had passed when its turn came)
    seconds: int  # the timeout it ran under

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def stopped(self) -> bool:
        return self.rc is not None and timed_out_rc(self.rc)


# -- parsers: each one pass over a bounded text ------------------------------------------------
def parse_os_release(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in _lines(text, 256):  # os-release(5) has a few dozen lines
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", key) and key not in out:
            out[key] = value.strip().strip("\"'")
    return out


def os_family(release: Mapping[str, str]) -> str | None:
    """Debian or RedHat (Ansible's os_family) from os-release's ID and ID_LIKE; None for others."""
    names = {release.get("ID", "").lower(), *release.get("ID_LIKE", "").lower().split()}
    if names & {"debian", "ubuntu"}:
        return "Debian"
    if names & {"rhel", "fedora", "centos", "rocky", "almalinux"}:
        return "RedHat"
    return None


def parse_proc_version(text: str) -> tuple[str, str] | None:
    """(version, flavour) from /proc/driver/nvidia/version's first line; None when it is not the
    NVRM line of a driver release (a Jetson's 35.3.1 is not one)."""
    first = next(iter(_lines(text, 1)), "")
    match = _PROC_VERSION.search(first + " ")
    if not match or not DRIVER_RELEASE.fullmatch(match.group(2)):
        return None
    return match.group(2), "open" if match.group(1) else "proprietary"


def parse_license(text: str) -> str | None:
    """The module flavour from ``modinfo -F license nvidia`` (NVIDIA's README, kernel_open)."""
    value = next(iter(_lines(text, 1)), "").strip()
    return {"Dual MIT/GPL": "open", "NVIDIA": "proprietary"}.get(value)


class Installed(NamedTuple):
    name: str  # as the package manager prints it (dpkg: with :arch where it is multi-arch)
    version: str  # epoch dropped: [upstream]-[revision]
    held: bool


def parse_dpkg(text: str) -> list[Installed]:
    """``dpkg-query -W -f='${db:Status-Abbrev}\\t${binary:Package}\\t${Version}\\n'``: the installed
    packages (state i, or awaiting a trigger) and the held ones (selection h)."""
    out = []
    for line in _lines(text):
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        status, name, version = (p.strip() for p in parts)
        if len(status) < 2 or status[1] not in "iWt" or not name or not version:
            continue
        out.append(Installed(name, _drop_epoch(version), status[0] == "h"))
    return out


def parse_rpm(text: str) -> list[Installed]:
    """``rpm -qa`` (NAME-VERSION-RELEASE.ARCH, one a line): VERSION and RELEASE hold no '-'."""
    out = []
    for line in _lines(text):
        nevra = line.strip()
        parts = nevra.rsplit("-", 2)
        if len(parts) != 3 or not all(parts):
            continue
        name, version, release = parts
        stem, dot, arch = release.rpartition(".")
        if dot and arch in ARCHES:
            release = stem
        out.append(Installed(name, f"{_drop_epoch(version)}-{release}", False))
    return out


def parse_versionlock(text: str) -> list[str]:
    """The package names dnf 4's versionlock.list locks (NAME-[EPOCH:]VERSION-RELEASE.*, one a
    line; '#' comments, '!' excludes)."""
    names = []
    for line in _lines(text):
        entry = line.strip()
        if not entry or entry.startswith(("#", "!")):
            continue
        parts = entry.rsplit("-", 2)
        if len(parts) == 3 and parts[0]:
            names.append(parts[0])
    return names


def parse_versionlock_toml(text: str) -> list[str]:
    """The package names dnf 5's versionlock.toml locks (``name = "NAME"`` under [[packages]])."""
    names = []
    for line in _lines(text):
        match = _TOML_NAME.fullmatch(line)
        if match:
            names.append(match.group(1))
    return names


class SmiGpu(NamedTuple):
    index: int
    name: str
    device_id: str  # 0x20B5
    driver: str | None


def parse_smi(text: str) -> list[SmiGpu]:
    """``nvidia-smi --query-gpu=index,name,pci.device_id,driver_version --format=csv`` (its header
    line first: columns are found by name). Rows that do not read as a GPU are left out."""
    import csv

    from provision.matrix.detect import pci_device

    lines = [line for line in _lines(text, MAX_GPUS + 1) if line.strip()]
    if not lines:
        return []
    header = [cell.strip().split(" [")[0] for cell in lines[0].split(",")]
    if "name" not in header or "pci.device_id" not in header:
        return []
    gpus: list[SmiGpu] = []
    for row in csv.reader(lines[1:], skipinitialspace=True):
        if len(row) != len(header):
            continue
        cells = dict(zip(header, (c.strip() for c in row), strict=True))
        index = cells.get("index", "")
        device = pci_device(cells["pci.device_id"])
        if not index.isdigit() or int(index) >= MAX_GPUS or not held_to("pci", device):
            continue
        driver = cells.get("driver_version")
        gpus.append(SmiGpu(int(index), as_text(cells["name"]), device, driver if driver else None))
    return gpus


def first_match(pattern: re.Pattern[str], text: str, lines: int = 8) -> str | None:
    for line in _lines(text, lines):
        match = pattern.search(line)
        if match:
            return match.group(1)
    return None


def _drop_epoch(version: str) -> str:
    head, sep, tail = version.partition(":")
    return tail if sep and head.isdigit() else version


def _base(name: str) -> str:
    """A package name without dpkg's :arch qualifier."""
    return name.split(":", 1)[0]


# -- the catalogue's packages ----------------------------------------------------------------
def _name_pattern(template: str) -> re.Pattern[str]:
    """compat/drivers.yaml's package name with "{branch}" standing for a branch number."""
    return re.compile(re.escape(template).replace(re.escape("{branch}"), r"\d{3,4}"))


def driver_from_packages(matrix, os_id: str | None, installed: Mapping[str, Installed]) -> str | None:
    """The driver release of the installed packages the catalogue names as the driver for this OS
    (every OS's names when the OS is not catalogued), in the catalogue's order."""
    rows = [p for p in matrix.driver_packaging if os_id is None or os_id in p.os] or list(matrix.driver_packaging)
    patterns = [_name_pattern(t) for t in dict.fromkeys(name for row in rows for name in row.packages)]
    for pattern in [*patterns, ARCHIVE_DRIVER]:
        for name, package in installed.items():
            if pattern.fullmatch(name):
                release = upstream(package.version)
                if DRIVER_RELEASE.fullmatch(release):
                    return release
    return None


def fabric_manager_package(matrix, os_id: str | None, installed: Mapping[str, Installed]) -> str | None:
    """The version of the installed Fabric Manager package (its catalogued names: the first of each
    packaging row's fabric_manager list)."""
    rows = [p for p in matrix.driver_packaging if os_id is None or os_id in p.os] or list(matrix.driver_packaging)
    for template in dict.fromkeys(row.fabric_manager[0] for row in rows if row.fabric_manager):
        pattern = _name_pattern(template)
        for name, package in installed.items():
            if pattern.fullmatch(name):
                return version_of(upstream(package.version))
    return None


def flavour_from_packages(matrix, os_id: str | None, branch: str, installed: Mapping[str, Installed]) -> str | None:
    """The kernel-module flavour whose catalogued packages (for this OS and branch) are installed;
    of two, the one whose packages include the other's (Ubuntu's open flavour installs
    cuda-drivers-<branch> too); None when neither or both remain."""
    if os_id is None:
        return None
    sets: dict[str, set[str]] = {}
    for row in matrix.driver_packaging:
        if os_id in row.os and row.branches.contains(branch):
            sets.setdefault(row.kernel_module, set()).update(p.replace("{branch}", branch) for p in row.packages)
    complete = {flavour: names for flavour, names in sets.items() if names and names <= installed.keys()}
    left = [f for f, names in complete.items() if not any(names < other for other in complete.values())]
    return left[0] if len(left) == 1 else None


# -- the document ----------------------------------------------------------------------------
def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def empty(host: str, scanned_at: str, *, reachable: bool, error: str | None) -> dict[str, Any]:
    """A scan that holds no fact (the host was not reached, or its answers were refused)."""
    return {
        "schema": SCHEMA_VERSION,
        "kind": KIND,
        "host": host,
        "scanned_at": scanned_at,
        "reachable": reachable,
        "error": as_text(error) if error else None,
        "os": None,
        "kernel": None,
        "driver": None,
        "gpus": [],
        "cuda_packages": [],
        "container_toolkit": None,
        "docker": None,
        "containerd": None,
        "fabric_manager": None,
        "held": [],
    }


class _Answers:
    """The commands' answers, read as the parsers take them."""

    def __init__(self, answers: Mapping[str, Answer]):
        self.answers = answers

    def text(self, key: str, *, ok_only: bool = True) -> str | None:
        """What the command printed, when it ran to its end (and, with ok_only, exited 0)."""
        answer = self.answers.get(key)
        if answer is None or answer.rc is None or answer.stopped or (ok_only and not answer.ok):
            return None
        return answer.out[:SECTION_LIMIT]

    def first_line(self, key: str, *, ok_only: bool = True) -> str | None:
        text = self.text(key, ok_only=ok_only)
        return None if text is None else next(iter(_lines(text, 1)), "").strip()

    def stopped(self) -> list[str]:
        return [
            f"`{command.split()[0]}` did not answer within {self.answers[key].seconds} s "
            "(stopped with its process group)"
            for key, command in COMMANDS
            if key in self.answers and self.answers[key].stopped
        ]


def document(
    host: str, answers: Mapping[str, Answer], matrix, *, scanned_at: str, problems: Sequence[str] = ()
) -> dict[str, Any]:
    """The scan of one host from its commands' answers (keys of COMMANDS; a command without an
    answer was not reached). ``problems``: what already went wrong (the deadline, a cut output);
    each command stopped by its timeout is added. Held to the schema before it is returned: a
    document that breaks it is refused (`checked`)."""
    read = _Answers(answers)
    doc = empty(host, scanned_at, reachable=True, error=None)
    doc["os"], os_id, family = _os_part(read, matrix)
    kernel = read.first_line("kernel")
    doc["kernel"] = held_to("word", kernel) if kernel else None
    packages = _packages(read, family)
    installed: dict[str, Installed] = {}
    for package in packages:
        installed.setdefault(_base(package.name), package)
    doc["held"] = _held(read, packages)
    doc["cuda_packages"] = _cuda_packages(installed)

    def package_version(names: Sequence[str]) -> str | None:
        return next((version_of(upstream(installed[n].version)) for n in names if n in installed), None)

    doc["container_toolkit"] = package_version(TOOLKIT_PACKAGES) or version_of(
        first_match(_CTK_VERSION, read.text("ctk-version") or "")
    )
    doc["docker"] = package_version(DOCKER_PACKAGES) or version_of(
        first_match(_DOCKER_VERSION, read.text("docker-version") or "")
    )
    doc["containerd"] = package_version(CONTAINERD_PACKAGES) or version_of(_containerd(read.text("containerd-version")))
    fm_version = fabric_manager_package(matrix, os_id, installed) or version_of(
        first_match(_FM_VERSION, read.text("fabric-manager-version") or "")
    )
    active = read.first_line("fabric-manager-unit", ok_only=False) == "active"  # is-active exits 3 when not
    if fm_version or active:
        doc["fabric_manager"] = {"version": fm_version, "active": active}
    smi_text = read.text("nvidia-smi")
    gpus = parse_smi(smi_text) if smi_text else []
    doc["gpus"] = _gpus(gpus, matrix)
    doc["driver"] = _driver(read, matrix, os_id, installed, gpus)
    notes = [*problems, *read.stopped()]
    if notes:
        doc["error"] = as_text("; ".join(dict.fromkeys(notes)))
    return checked(doc)


def _os_part(read: _Answers, matrix) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(the document's os, the catalogue's OS id, the OS family) from /etc/os-release."""
    from provision.matrix.detect import os_id as catalogue_os

    text = read.text("os-release")
    if text is None:
        return None, None, None
    release = parse_os_release(text)
    family = os_family(release)
    os_id = catalogue_os(matrix, "\n".join(f"{k}={v}" for k, v in release.items() if k in ("ID", "VERSION_ID")))
    if os_id is not None:
        family = matrix.os(os_id).family
    ident, version = held_to("word", release.get("ID")), held_to("version", release.get("VERSION_ID"))
    if not (ident and version):
        return None, os_id, family
    return {"id": ident, "version_id": version, "family": family, "catalogue_id": held_to("word", os_id)}, os_id, family


def _packages(read: _Answers, family: str | None) -> list[Installed]:
    """The installed packages, from the OS family's package manager (either's answer when the family
    is unknown)."""
    listings = {"Debian": ("dpkg", parse_dpkg), "RedHat": ("rpm", parse_rpm)}
    for key, parse in [listings[family]] if family in listings else list(listings.values()):
        listed = read.text(key)
        packages = parse(listed) if listed else []
        if packages:
            return packages
    return []


def _held(read: _Answers, packages: Sequence[Installed]) -> list[str]:
    held = [p.name for p in packages if p.held]
    for key, parse_locks in (("versionlock", parse_versionlock), ("versionlock-dnf5", parse_versionlock_toml)):
        locks = read.text(key)
        if locks:
            held += parse_locks(locks)
    return sorted({n for n in (held_to("package", h) for h in held) if n})[:MAX_PACKAGES]


def _cuda_packages(installed: Mapping[str, Installed]) -> list[dict[str, str]]:
    out = []
    for name, package in sorted(installed.items()):
        if CUDA_USER_SPACE.fullmatch(name) and not NOT_CUDA_USER_SPACE.fullmatch(name):
            entry_name, entry_version = held_to("package", name), held_to("word", package.version)
            if entry_name and entry_version:
                out.append({"name": entry_name, "version": entry_version})
    return out[:MAX_PACKAGES]


def _gpus(gpus: Sequence[SmiGpu], matrix) -> list[dict[str, Any]]:
    from provision.matrix.detect import catalogue_gpu

    out = []
    for gpu in gpus:
        found = catalogue_gpu(matrix, gpu.device_id)
        catalogue_id = held_to("word", found.id) if found else None
        out.append({"index": gpu.index, "name": gpu.name, "pci_device_id": gpu.device_id, "catalogue_id": catalogue_id})
    return out


def _driver(
    read: _Answers, matrix, os_id: str | None, installed: Mapping[str, Installed], gpus: Sequence[SmiGpu]
) -> dict[str, Any] | None:
    """The driver: the loaded module's, else nvidia-smi's, else the installed packages' (module
    docstring); None when none of them names a driver release."""
    proc = parse_proc_version(read.text("proc-version") or "")
    loaded = proc is not None or any(line.startswith("nvidia ") for line in _lines(read.text("modules") or "", 64))
    smi_driver = next((g.driver for g in gpus if g.driver and DRIVER_RELEASE.fullmatch(g.driver)), None)
    if proc:
        version, source = proc[0], "proc"
    elif smi_driver:
        version, source = smi_driver, "nvidia-smi"
    else:
        version, source = driver_from_packages(matrix, os_id, installed), "package"
    branch = version.split(".", 1)[0] if version else None
    if not (version and held_to("version", version) and held_to("branch", branch)):
        return None
    license_text = read.text("module-license")
    flavour = proc[1] if proc else parse_license(license_text) if license_text else None
    signer = read.text("module-signer")  # rc 0: the module is there; an empty answer: unsigned
    return {
        "version": version,
        "branch": branch,
        "kernel_module": flavour or flavour_from_packages(matrix, os_id, branch, installed),
        "loaded": loaded,
        "signed": None if signer is None else bool(next(iter(_lines(signer, 1)), "").strip()),
        "source": source,
    }


def _containerd(text: str | None) -> str | None:
    """containerd --version: ``containerd containerd.io 1.6.26 3dd1e88…`` or ``containerd
    github.com/containerd/containerd v1.7.2 …``: the first word after the name that is a version."""
    for word in next(iter(_lines(text or "", 1)), "").split()[1:4]:
        match = _LEADING_VERSION.fullmatch(word.removeprefix("v").split("~", 1)[0].split("+", 1)[0])
        if match and "." in word:
            return match.group(0)
    return None


def checked(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` once it passes the scan schema, and holds no control character in any string (the
    schema's patterns end in ``$``, which Python's re lets match before a trailing newline); a
    document that does not is refused: what comes back says so and holds no fact."""
    from provision.errors import InputError
    from provision.plan.diff import check_scan

    try:
        check_scan(doc, f"the scan of {doc.get('host')!r}")
        where = _control_character(doc)
        if where:
            raise InputError(f"{where}: holds a control character", hint="")
        return doc
    except InputError as exc:
        host = held_to("name", doc.get("host")) or "unnamed"
        why = f"the scan's document broke its schema and was refused ({exc.message})"
        return empty(
            host,
            held_to("scanned_at", doc.get("scanned_at")) or now(),
            reachable=bool(doc.get("reachable") is True),
            error=why,
        )


def _control_character(doc: Any, path: str = "") -> str | None:
    """The path of the first string in ``doc`` that holds a control character, or None."""
    todo = [(path, doc)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, str):
            if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
                return where or "the document"
        elif isinstance(value, dict):
            todo += [(f"{where}.{k}" if where else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            todo += [(f"{where}.{i}", v) for i, v in enumerate(value)]
    return None


# -- one host's round trip ---------------------------------------------------------------------
class Batch(NamedTuple):
    """provision.verify.batch's framing, handed in by the command (fleet may not import verify:
    pyproject's import layers): new_token(), script(commands, token, left=, share=), parse(out,
    err, token, count)."""

    new_token: Callable[[], str]
    script: Callable[..., str]
    parse: Callable[[str, str, str, int], Any]


class Target(NamedTuple):
    name: str  # the inventory host name (held to the schema's name pattern by the caller)
    connection: Connection


def host_script(batch: Batch, token: str, host_timeout: float) -> str:
    """The one command a host runs: the preamble, then the batch of COMMANDS, each command under its
    share of the host's deadline (hostpool.Budget, as verify's commands get theirs)."""
    budget = Budget(host_timeout)
    commands = [command for _, command in COMMANDS]
    return PREAMBLE + batch.script(commands, token, left=budget.remaining(), share=budget.command_timeout())


def read_outcome(
    name: str, outcome, batch: Batch, token: str, matrix, *, host_timeout: float, scanned_at: str
) -> dict[str, Any]:
    """The scan document of one host from its job's outcome (hostpool.Outcome: the ssh client's or
    the worker's exit status, stdout and stderr)."""
    stderr_lines = [line.strip() for line in outcome.stderr[:SECTION_LIMIT].splitlines()[-64:] if line.strip()]
    sections = batch.parse(outcome.stdout, outcome.stderr, token, len(COMMANDS))
    if sections is None:
        return checked(
            empty(
                name,
                scanned_at,
                reachable=True,
                error="the host's output held this scan's marker outside the scan's own lines: "
                "its answers were refused (a command on the host echoes what it should not see)",
            )
        )
    if not sections:
        if outcome.timed_out:
            why = f"no answer within {host_timeout:g} s (--host-timeout)"
            return checked(empty(name, scanned_at, reachable=False, error=why))
        if outcome.rc == NO_TIMEOUT:
            why = "the host has no coreutils timeout: a scan bounds every command with it"
            return checked(empty(name, scanned_at, reachable=True, error=why))
        why = stderr_lines[-1] if stderr_lines else f"exit {outcome.rc}"
        if outcome.rc == UNREACHABLE or not outcome.stdout.strip():
            return checked(empty(name, scanned_at, reachable=False, error=f"unreachable: {why}"))
        return checked(empty(name, scanned_at, reachable=True, error=f"no scan output came back: {why}"))
    answers = {
        key: Answer(section.out, section.err, section.rc, section.seconds)
        for (key, _), section in zip(COMMANDS, sections, strict=False)
    }
    problems = []
    if outcome.timed_out:
        problems.append(
            f"did not finish within {host_timeout:g} s (--host-timeout): {len(sections)} of {len(COMMANDS)} "
            "commands answered"
        )
    elif len(sections) < len(COMMANDS):
        problems.append(f"the scan stopped after {len(sections)} of {len(COMMANDS)} commands")
    if any(section.rc is None for section in sections):
        problems.append("commands were left unrun: the host's deadline had passed")
    if getattr(outcome, "cut", False):
        problems.append(f"the host printed more than {OUTPUT_LIMIT // (1024 * 1024)} MiB: the rest was not read")
    return document(name, answers, matrix, scanned_at=scanned_at, problems=problems)


def scan(
    targets: Sequence[Target],
    matrix,
    batch: Batch,
    *,
    forks: int = DEFAULT_FORKS,
    host_timeout: float = DEFAULT_HOST_TIMEOUT,
) -> list[dict[str, Any]]:
    """Scan the hosts, `forks` at a time, each within `host_timeout` seconds; one document per
    target, in their order. Touches nothing on the hosts."""
    import pickle

    from provision.hostpool import build_host, run_jobs, ssh_argv
    from provision.tools import tool_path

    token = batch.new_token()
    script = host_script(batch, token, host_timeout)
    jobs = []
    for target in targets:
        argv = None
        try:
            argv = ssh_argv(build_host(target.connection), script)
        except Exception:  # the worker reports what is wrong with this host
            argv = None
        if argv is not None:
            jobs.append(Job(target.name, argv))
        else:
            request = pickle.dumps((target.connection, script))
            jobs.append(Job(target.name, [sys.executable, "-m", "provision.fleet.scan"], request))
    env = {**os.environ, "PATH": tool_path()}
    outcomes = run_jobs(jobs, forks=forks, timeout=host_timeout, env=env, limit=OUTPUT_LIMIT)
    scanned_at = now()
    return [
        read_outcome(t.name, o, batch, token, matrix, host_timeout=host_timeout, scanned_at=scanned_at)
        for t, o in zip(targets, outcomes, strict=True)
    ]


def _worker(stdin: bytes) -> int:
    """One host reached through testinfra (a connection ssh_argv cannot run as an ssh client: local,
    docker, podman, ansible, a password): runs the script there and relays what it printed, as the
    ssh client would; a connection failure is its last stderr line and exit UNREACHABLE."""
    import pickle

    from provision.hostpool import build_host
    from provision.tools import tools_on_path

    connection, script = pickle.loads(stdin)  # written by `scan` in the parent process
    with tools_on_path():
        try:
            # a byte more than the parent keeps: a host that printed more than OUTPUT_LIMIT shows as cut there
            host = build_host(connection, output_limit=OUTPUT_LIMIT + 1)
            res = host.run(script)
        except Exception as exc:
            sys.stderr.write(connection_error(exc) + "\n")
            return UNREACHABLE
    sys.stdout.write(res.stdout or "")
    sys.stderr.write(res.stderr or "")
    return res.rc if isinstance(res.rc, int) and 0 <= res.rc < UNREACHABLE else 1


if __name__ == "__main__":
    sys.exit(_worker(sys.stdin.buffer.read()))
