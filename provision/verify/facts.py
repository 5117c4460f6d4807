"""What the checks read from a host, read once per host and shared by every check."""

from __future__ import annotations

import functools
import shlex
from typing import Any, NamedTuple

from provision import smi

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

    @property
    def text(self) -> str:
        return (self.out + self.err).strip()


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


class HostFacts:
    def __init__(self, host, target, *, budget=None, have_timeout: bool = True):
        self.host = host
        self.target = target
        self.hostvars: dict[str, Any] = dict(target.hostvars or {})
        self.budget = budget  # provision.hostpool.Budget; None: commands run without a deadline
        self.have_timeout = have_timeout
        self._installed: dict[tuple[str, ...], dict[str, Installed]] = {}

    def run(self, command: str) -> Result:
        """Run a command on the host. Under a budget it runs under coreutils timeout, its share of
        the host's deadline (hostpool.Budget); one it stopped comes back with timed_out set."""
        if self.budget is None:
            res = self.host.run(command)
            return Result(res.rc, res.stdout, res.stderr)
        from provision.hostpool import remote_command, timed_out_rc

        seconds = self.budget.command_timeout()
        if seconds <= 0:
            return Result(124, "", "not run: the host's deadline has passed", 0)
        res = self.host.run(remote_command(command, seconds, have_timeout=self.have_timeout))
        stopped = seconds if self.have_timeout and timed_out_rc(res.rc) else None
        return Result(res.rc, res.stdout, res.stderr, stopped)

    @functools.cached_property
    def kernel_log(self) -> list[str]:
        """The newest GPU lines of the kernel log (NVRM, Xid, fallen off the bus)."""
        res = self.run(KERNEL_LOG)
        return [line.strip() for line in res.out.splitlines() if line.strip()] if res.rc == 0 else []

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
        res = self.run("systemd-detect-virt --container 2>/dev/null")
        kind = res.out.strip()
        if res.rc == 0 and kind and kind != "none":
            return kind
        for marker, kind in (("/.dockerenv", "docker"), ("/run/.containerenv", "podman")):
            if self.host.file(marker).exists:
                return kind
        return None

    @functools.cached_property
    def os_release(self) -> dict[str, str]:
        res = self.run("cat /etc/os-release")
        out: dict[str, str] = {}
        for line in res.out.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip().strip('"')
        return out

    @functools.cached_property
    def smi(self) -> tuple[Result, list[Gpu]]:
        self.kernel_log  # noqa: B018 - read first: it still answers when nvidia-smi hangs on a lost GPU
        res = self.run(f"nvidia-smi --query-gpu={','.join(SMI_FIELDS)} --format=csv,noheader")
        gpus: list[Gpu] = []
        if res.rc == 0:
            for line in res.out.splitlines():
                cells = [c.strip() for c in line.split(",")]
                if len(cells) == len(SMI_FIELDS):
                    cells[_DEVICE] = smi.device_id(cells[_DEVICE])
                    gpus.append(Gpu(*cells))
        return res, gpus

    def installed(self, names: list[str]) -> dict[str, Installed]:
        key = tuple(names)
        if key not in self._installed:
            self._installed[key] = self._query_packages(names)
        return self._installed[key]

    def _query_packages(self, names: list[str]) -> dict[str, Installed]:
        quoted = " ".join(shlex.quote(n) for n in names)
        versions: dict[str, str] = {}
        held: set[str] = set()
        if self.target.plan.os.pkg_manager == "apt":
            res = self.run(
                f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{db:Status-Abbrev}}\\n' {quoted} 2>/dev/null"
            )
            for line in res.out.splitlines():
                parts = line.split("\t")
                if len(parts) == 3 and parts[2].strip().startswith(("ii", "hi")):
                    versions[parts[0]] = parts[1]
                    if parts[2].startswith("h"):
                        held.add(parts[0])
            held |= set(self.run("apt-mark showhold 2>/dev/null").out.split())
        else:
            res = self.run(f"rpm -q --qf '%{{NAME}}\\t%{{VERSION}}\\t%{{RELEASE}}\\n' {quoted} 2>/dev/null")
            for line in res.out.splitlines():
                parts = line.split("\t")
                if len(parts) == 3 and "not installed" not in line:
                    versions[parts[0]] = f"{parts[1]}-{parts[2]}"
            locks = self.run("dnf -q versionlock list 2>/dev/null").out
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
        res = self.run(f"systemctl is-active {shlex.quote(unit)}; systemctl is-enabled {shlex.quote(unit)} 2>/dev/null")
        lines = res.out.split()
        return (lines[0] if lines else "unknown", lines[1] if len(lines) > 1 else "not-found")

    def read(self, path: str) -> str | None:
        """A file's content (through sudo when testinfra runs with it), None when absent."""
        res = self.run(f"cat {shlex.quote(path)}")
        return res.out if res.rc == 0 else None
