"""The test fleet: containers running systemd and sshd on the host network, one sshd port each on
127.0.0.1, reached by Ansible over SSH exactly as it reaches servers.
"""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import socket
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness import fakegpu, rootfs

HOST_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-apt",
    "sudo",
    "ca-certificates",
    "gnupg",
    "docker.io",
    "kmod",
    "procps",
    "iproute2",
)
# A Rocky-Linux-9-shaped host: a Debian root with Debian's dnf 4.14 (the version Rocky 9 ships),
# rpm and the dnf plugins, dressed as Rocky 9 so that Ansible reports os_family RedHat,
# distribution Rocky, pkg_mgr dnf and the roles run their RedHat task files. The rpm database is
# where Rocky keeps it; dnf sees only the repositories of /etc/yum.repos.d (the site's mirrors, on
# loopback), never Debian's. The Docker engine's binaries are Debian's docker.io (see fakegpu
# docker_ce_packages for the packages the role installs).
ROCKY_RELEASE = "9.6"
ROCKY_HOST_PACKAGES = (
    *(p for p in HOST_PACKAGES if p != "python3-apt"),
    "dnf",
    "python3-dnf",
    "rpm",
    "dnf-plugins-core",
    "createrepo-c",
)
ROCKY_OS_RELEASE = f"""NAME="Rocky Linux"
VERSION="{ROCKY_RELEASE} (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="{ROCKY_RELEASE}"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux {ROCKY_RELEASE} (Blue Onyx)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:9::baseos"
HOME_URL="https://rockylinux.org/"
BUG_REPORT_URL="https://bugs.rockylinux.org/"
SUPPORT_END="2032-05-31"
ROCKY_SUPPORT_PRODUCT="Rocky-Linux-9"
ROCKY_SUPPORT_PRODUCT_VERSION="{ROCKY_RELEASE}"
REDHAT_SUPPORT_PRODUCT="Rocky Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="{ROCKY_RELEASE}"
"""
ROCKY_FILES = {
    "/etc/os-release": ROCKY_OS_RELEASE,
    "/usr/lib/os-release": ROCKY_OS_RELEASE,
    "/etc/redhat-release": f"Rocky Linux release {ROCKY_RELEASE} (Blue Onyx)\n",
    "/etc/rocky-release": f"Rocky Linux release {ROCKY_RELEASE} (Blue Onyx)\n",
    "/etc/system-release": f"Rocky Linux release {ROCKY_RELEASE} (Blue Onyx)\n",
    "/etc/dnf/dnf.conf": (
        "[main]\ngpgcheck=1\ninstallonly_limit=3\nclean_requirements_on_remove=True\nbest=True\n"
        "skip_if_unavailable=False\n"
    ),
    # Rocky's rocky-release package provides system-release(releasever); here dnf reads the vars.
    "/etc/dnf/vars/releasever": "9\n",
    "/etc/dnf/vars/basearch": "x86_64\n",
    # Debian's dnf-plugins-core enables `local` (a createrepo run after every transaction); Rocky
    # does not ship it.
    "/etc/dnf/plugins/local.conf": "[main]\nenabled=0\n",
    # Debian's rpm keeps its database in ~/.rpmdb; Rocky's is /var/lib/rpm.
    "/etc/rpm/macros.dbpath": "%_dbpath /var/lib/rpm\n",
}
ROCKY_SETUP = (
    "rm -f /etc/debian_version /etc/apt/sources.list /etc/apt/sources.list.d/* /var/cache/apt/*.bin",
    "mkdir -p /etc/yum.repos.d /etc/pki/rpm-gpg /var/lib/rpm && rpmdb --initdb",
    "rm -rf /etc/yum.repos.d/* /etc/yum/repos.d /etc/distro.repos.d",
)
# Docker inside a container: no overlay mounts, no iptables, no bridge. These keys are already in
# daemon.json when provision runs, and must survive its merge.
PRESET_DAEMON_JSON = {
    "storage-driver": "vfs",
    "iptables": False,
    "ip6tables": False,
    "bridge": "none",
    "log-level": "warn",
}


@dataclass
class Host:
    name: str
    group: str
    gpu: dict  # /etc/fakegpu/gpu.json
    secure_boot: bool = False
    fail_install: bool = False
    unreachable: bool = False  # in the inventory, but no container listens on its port
    os: str = "debian12"  # or rocky9: the Rocky-9-shaped image, the site's dnf mirrors
    port: int = 0
    container: object = None


@dataclass
class Fleet:
    client: object
    kit: fakegpu.Kit
    workdir: Path
    hosts: list[Host]
    prefix: str = field(default_factory=lambda: f"provision-test-{secrets.token_hex(4)}")
    key: Path | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        images = {}
        if any(h.os == "debian12" for h in self.hosts):
            images["debian12"] = rootfs.image(self.client, "debian12-host", include=HOST_PACKAGES, cmd='["/sbin/init"]')
        if any(h.os == "rocky9" for h in self.hosts):
            images["rocky9"] = rootfs.image(
                self.client,
                "rocky9-host",
                include=ROCKY_HOST_PACKAGES,
                cmd='["/sbin/init"]',
                files=ROCKY_FILES,
                setup=ROCKY_SETUP,
            )
        self.key = self.workdir / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True)
        for host in self.hosts:
            host.port = free_port()
            if host.unreachable:
                continue
            host.container = self.client.containers.create(
                images[host.os],
                command="/sbin/init",
                name=f"{self.prefix}-{host.name}",
                detach=True,
                network_mode="host",
                tmpfs={"/run": "", "/run/lock": ""},
                cap_add=["SYS_ADMIN"],
                volumes={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "ro"}},
                labels={"provision-test": self.prefix},
            )
            host.container.put_archive("/", self._files(host))
            host.container.start()
        for host in self.hosts:
            if not host.unreachable:
                # the site's own mirror only, and no package cache left from the image build
                self.exec(
                    host, "rm -f /etc/apt/sources.list /etc/apt/sources.list.d/debian.sources /var/cache/apt/*.bin"
                )
        for host in self.hosts:
            if not host.unreachable:
                self._wait_ssh(host)
        for host in self.hosts:
            if host.os == "rocky9" and not host.unreachable:
                # a Rocky host as installed: bash and its kernel packages in the rpm database (from
                # the site's BaseOS mirror, which imports Rocky's key), nothing else
                self.exec(
                    host,
                    f"timeout 300 dnf -y -q install {' '.join(fakegpu.ROCKY_INSTALLED)} && timeout 120 dnf -q clean all",
                )

    def stop(self) -> None:
        for host in self.hosts:
            if host.container is not None:
                with contextlib.suppress(Exception):
                    host.container.remove(force=True)
        for c in self.client.containers.list(all=True, filters={"label": f"provision-test={self.prefix}"}):
            c.remove(force=True)

    def reboot(self, host: Host | str) -> None:
        """Restart the host's container: systemd boots again, /run starts empty."""
        host = self.host(host) if isinstance(host, str) else host
        host.container.restart(timeout=20)
        self._wait_ssh(host)
        self.exec(host, "timeout 120 systemctl is-system-running --wait >/dev/null 2>&1 || true", check=False)

    # -- helpers for tests ----------------------------------------------------------------
    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def exec(self, host: Host | str, command: str, *, check: bool = True) -> str:
        host = self.host(host) if isinstance(host, str) else host
        code, out = host.container.exec_run(["sh", "-c", command])
        text = out.decode(errors="replace")
        if check and code != 0:
            raise RuntimeError(f"{host.name}: `{command}` exited {code}: {text}")
        return text

    def ssh(self, host: Host | str, command: str) -> subprocess.CompletedProcess:
        host = self.host(host) if isinstance(host, str) else host
        return subprocess.run(
            ["ssh", *self.ssh_options(), "-p", str(host.port), "root@127.0.0.1", command],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ssh_options(self) -> list[str]:
        return [
            "-i",
            str(self.key),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "ConnectTimeout=5",
            "-o",
            "BatchMode=yes",
        ]

    def inventory(
        self, path: Path, group_vars: dict, *, hosts: list[Host] | None = None, groups_vars: dict | None = None
    ) -> Path:
        """groups_vars: group -> variables of that group only (over group_vars, which all hosts get)."""
        groups: dict[str, dict] = {}
        for host in hosts or self.hosts:
            groups.setdefault(host.group, {"hosts": {}})["hosts"][host.name] = {
                "ansible_host": "127.0.0.1",
                "ansible_port": host.port,
            }
        for group, variables in (groups_vars or {}).items():
            if group in groups:
                groups[group]["vars"] = variables
        doc = {
            "all": {
                "vars": {
                    "ansible_user": "root",
                    "ansible_ssh_private_key_file": str(self.key),
                    "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
                    "ansible_python_interpreter": "/usr/bin/python3",
                    **group_vars,
                },
                "children": groups,
            }
        }
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    # -- internals ------------------------------------------------------------------------
    def _files(self, host: Host) -> bytes:
        files: dict[str, tuple[str, int]] = {
            "etc/ssh/sshd_config.d/provision-test.conf": (
                f"ListenAddress 127.0.0.1:{host.port}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                "UseDNS no\n",
                0o644,
            ),
            "root/.ssh/authorized_keys": (Path(f"{self.key}.pub").read_text(), 0o600),
            **(self._rocky_repos() if host.os == "rocky9" else self._debian_sources()),
            "etc/docker/daemon.json": (json.dumps(PRESET_DAEMON_JSON, indent=2) + "\n", 0o644),
            "etc/fakegpu/gpu.json": (json.dumps(host.gpu, indent=2) + "\n", 0o644),
        }
        for i in range(host.gpu.get("count", 1)):
            base = f"opt/fakegpu/pci/0000:{0x17 + i * 0x20:02x}:00.0"
            files[f"{base}/vendor"] = ("0x10de\n", 0o444)
            files[f"{base}/device"] = (f"0x{host.gpu['device_id'].lower()}\n", 0o444)
            files[f"{base}/class"] = ("0x030200\n", 0o444)
        files["opt/fakegpu/pci/0000:00:1f.0/vendor"] = ("0x8086\n", 0o444)  # a non-NVIDIA device
        files["opt/fakegpu/pci/0000:00:1f.0/device"] = ("0xa1c1\n", 0o444)
        if host.secure_boot:
            files[f"opt/fakegpu/efivars/{fakegpu.SECURE_BOOT_VAR}"] = ("\x06\x00\x00\x00\x01", 0o644)
        if host.fail_install:
            files["etc/fakegpu/fail-install"] = ("simulate a failing driver package install\n", 0o644)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            dirs = set()
            for name in files:
                parts = Path(name).parents
                for parent in reversed(list(parts)[:-1]):
                    dirs.add(str(parent))
            for d in sorted(dirs):
                info = tarfile.TarInfo(d)
                info.type = tarfile.DIRTYPE
                info.mode = 0o700 if d == "root/.ssh" else 0o755
                tar.addfile(info)
            for name, (content, mode) in files.items():
                data = content.encode("latin-1" if "efivars" in name else "utf-8")
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = mode
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    def _debian_sources(self) -> dict[str, tuple[str, int]]:
        return {
            "etc/apt/keyrings/provision-test-debian.asc": (self.kit.key("debian").armored, 0o644),
            "etc/apt/sources.list.d/provision-test-debian.list": (
                "# the site's Debian mirror (fakegpu kit, loopback)\n"
                f"deb [signed-by=/etc/apt/keyrings/provision-test-debian.asc] {self.kit.server.url}/{fakegpu.DEBIAN_REPO}/ /\n",
                0o644,
            ),
        }

    def _rocky_repos(self) -> dict[str, tuple[str, int]]:
        """Rocky's rocky.repo and rocky-extras.repo, pointed at the site's mirror (fakegpu kit,
        loopback): BaseOS and extras enabled, CRB present and disabled, as Rocky installs them."""
        url = self.kit.server.url
        key = "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9\n"

        def section(repo_id: str, name: str, path: str, enabled: int) -> str:
            baseurl = f"{url}/{path}".replace("/9/", "/$releasever/").replace("/x86_64/", "/$basearch/")
            return f"[{repo_id}]\nname=Rocky Linux $releasever - {name}\nbaseurl={baseurl}/\ngpgcheck=1\nenabled={enabled}\n{key}"

        rocky = "\n".join(
            [
                section("baseos", "BaseOS", fakegpu.ROCKY_BASEOS_REPO, 1),
                section("crb", "CRB", fakegpu.ROCKY_CRB_REPO, 0),
            ]
        )
        return {
            "etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9": (self.kit.key("rocky").armored, 0o644),
            "etc/yum.repos.d/rocky.repo": (rocky, 0o644),
            "etc/yum.repos.d/rocky-extras.repo": (section("extras", "Extras", fakegpu.ROCKY_EXTRAS_REPO, 1), 0o644),
        }

    def _wait_ssh(self, host: Host, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            proc = self.ssh(host, "systemctl is-system-running --wait >/dev/null 2>&1; true")
            if proc.returncode == 0:
                return
            last = proc.stderr
            time.sleep(1)
        logs = host.container.logs(tail=40).decode(errors="replace") if host.container else ""
        raise RuntimeError(f"{host.name}: sshd on 127.0.0.1:{host.port} did not answer: {last}\n{logs}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_apply(*args: str, run_dir: Path) -> tuple[int, str, dict]:
    """The installed CLI, in its own process, as an operator runs it."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "provision", "apply", *args, "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return proc.returncode, proc.stdout + proc.stderr, summary
