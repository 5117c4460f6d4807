"""Builds and serves the fake-GPU package repositories (see tests/fakegpu/README.md).

Packages carry NVIDIA's names at the plan's exact versions; each repository is a flat apt
repository (like NVIDIA's) signed with a throw-away GPG key, served on 127.0.0.1.
"""

from __future__ import annotations

import http.client
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

PAYLOAD = Path(__file__).resolve().parent.parent / "fakegpu" / "payload"
SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
CUDA_REPO = "compute/cuda/repos/{repo}/x86_64"
TOOLKIT_REPO = "libnvidia-container/stable/deb/amd64"
DEBIAN_REPO = "debian"


@dataclass
class Key:
    home: Path
    fingerprint: str
    armored: str

    @classmethod
    def generate(cls, home: Path, uid: str) -> Key:
        home.mkdir(parents=True, mode=0o700)
        env = {**os.environ, "GNUPGHOME": str(home)}
        subprocess.run(
            ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"],
            env=env,
            check=True,
            capture_output=True,
        )
        colons = subprocess.run(
            ["gpg", "--batch", "--with-colons", "--list-keys"], env=env, check=True, capture_output=True, text=True
        ).stdout
        fpr = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
        armored = subprocess.run(
            ["gpg", "--batch", "--armor", "--export", fpr], env=env, check=True, capture_output=True, text=True
        ).stdout
        return cls(home, fpr, armored)

    def sign_repo(self, directory: Path) -> None:
        env = {**os.environ, "GNUPGHOME": str(self.home)}
        for name in ("InRelease", "Release.gpg"):
            (directory / name).unlink(missing_ok=True)
        subprocess.run(
            [
                "gpg",
                "--batch",
                "--yes",
                "--local-user",
                self.fingerprint,
                "--clearsign",
                "-o",
                str(directory / "InRelease"),
                str(directory / "Release"),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                "gpg",
                "--batch",
                "--yes",
                "--local-user",
                self.fingerprint,
                "-abs",
                "-o",
                str(directory / "Release.gpg"),
                str(directory / "Release"),
            ],
            env=env,
            check=True,
            capture_output=True,
        )

    def close(self) -> None:
        subprocess.run(
            ["gpgconf", "--kill", "all"],
            env={**os.environ, "GNUPGHOME": str(self.home)},
            check=False,
            capture_output=True,
        )


@dataclass
class Package:
    name: str
    version: str  # full Debian version, revision included
    files: dict[str, tuple[Path | str, int]] = field(default_factory=dict)  # dest -> (source file or text, mode)
    depends: list[str] = field(default_factory=list)
    postinst: str | None = None
    description: str = "fakegpu stand-in package (tests only)"

    def build(self, out: Path) -> Path:
        root = Path(tempfile.mkdtemp(prefix=f"fakegpu-{self.name}-"))
        try:
            (root / "DEBIAN").mkdir()
            control = [
                f"Package: {self.name}",
                f"Version: {self.version}",
                "Architecture: all",
                "Maintainer: provision tests <tests@fakegpu.invalid>",
                "Section: misc",
                "Priority: optional",
            ]
            if self.depends:
                control.append("Depends: " + ", ".join(self.depends))
            control.append(f"Description: {self.description}")
            (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
            if self.postinst:
                script = root / "DEBIAN" / "postinst"
                script.write_text("#!/bin/sh\nset -e\n" + self.postinst + "\nexit 0\n")
                script.chmod(0o755)
            for dest, (source, mode) in self.files.items():
                target = root / dest.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(source, Path):
                    shutil.copyfile(source, target)
                else:
                    target.write_text(source)
                target.chmod(mode)
            deb = out / f"{self.name}_{self.version.replace(':', '%3a')}_all.deb"
            subprocess.run(
                ["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(root), str(deb)], check=True, capture_output=True
            )
            return deb
        finally:
            shutil.rmtree(root, ignore_errors=True)


def driver_packages(names: list[str], version: str) -> list[Package]:
    """The plan's driver packages: the first carries nvidia-smi and nvidia-persistenced."""
    core, *others = names
    persistenced_unit = (
        "[Unit]\nDescription=NVIDIA Persistence Daemon (fakegpu)\n\n[Service]\nType=simple\n"
        "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose\n"
        "ExecStopPost=/bin/rm -rf /run/nvidia-persistenced\n\n[Install]\nWantedBy=multi-user.target\n"
    )
    # What a boot does to the GPUs' MIG state (the kernel module reading the InfoROM): pending
    # Ampere mode changes take effect; instances are gone with /run. Before any GPU client.
    boot_unit = (
        "[Unit]\nDescription=fakegpu: the GPUs come up after a reboot\nDefaultDependencies=no\n"
        "After=local-fs.target\nBefore=nvidia-persistenced.service provision-mig.service\n\n"
        "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/usr/bin/nvidia-smi mig --boot\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    postinst = (
        'if [ -e /etc/fakegpu/fail-install ]; then echo "fakegpu: simulated driver install failure" >&2; exit 1; fi\n'
        "if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi\n"
        "systemctl enable fakegpu-boot.service >/dev/null 2>&1 || true"
    )
    packages = [
        Package(
            core,
            f"{version}-1",
            files={
                "/usr/bin/nvidia-smi": (PAYLOAD / "nvidia-smi", 0o755),
                "/usr/lib/fakegpu/fakegpu_mig.py": (PAYLOAD / "fakegpu_mig.py", 0o644),
                "/lib/systemd/system/fakegpu-boot.service": (boot_unit, 0o644),
                "/usr/bin/nvidia-persistenced": (PAYLOAD / "nvidia-persistenced", 0o755),
                "/lib/systemd/system/nvidia-persistenced.service": (persistenced_unit, 0o644),
                "/usr/lib/fakegpu/driver-version": (version + "\n", 0o644),
            },
            postinst=postinst,
            description=f"fakegpu stand-in for the NVIDIA driver {version}",
        )
    ]
    packages += [Package(n, f"{version}-1", depends=[f"{core} (= {version}-1)"]) for n in others]
    return packages


def fabric_manager_packages(names: list[str], version: str) -> list[Package]:
    unit = (
        "[Unit]\nDescription=NVIDIA fabric manager service (fakegpu)\n\n[Service]\nType=simple\n"
        "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    fm, *others = names
    return [
        Package(
            fm,
            f"{version}-1",
            files={
                "/usr/bin/nv-fabricmanager": (PAYLOAD / "nv-fabricmanager", 0o755),
                "/lib/systemd/system/nvidia-fabricmanager.service": (unit, 0o644),
                "/usr/share/nvidia/nvswitch/fabricmanager.cfg": ("# fakegpu\nLOG_LEVEL=4\n", 0o644),
                "/usr/lib/fakegpu/fabricmanager-version": (version + "\n", 0o644),
            },
            postinst="if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi",
        )
    ] + [Package(n, f"{version}-1") for n in others]


def toolkit_packages(version: str) -> list[Package]:
    v = f"{version}-1"
    return [
        Package(
            "nvidia-container-toolkit-base",
            v,
            files={
                "/usr/bin/nvidia-ctk": (PAYLOAD / "nvidia-ctk", 0o755),
                "/usr/bin/nvidia-container-runtime": (PAYLOAD / "nvidia-container-runtime", 0o755),
                "/usr/lib/fakegpu/toolkit-version": (version + "\n", 0o644),
            },
        ),
        Package("libnvidia-container1", v),
        Package(
            "libnvidia-container-tools",
            v,
            depends=[f"libnvidia-container1 (= {v})"],
            files={"/usr/bin/nvidia-container-cli": (f"#!/bin/sh\necho 'cli-version: {version} (fakegpu)'\n", 0o755)},
        ),
        Package(
            "nvidia-container-toolkit",
            v,
            depends=[f"nvidia-container-toolkit-base (= {v})", f"libnvidia-container-tools (= {v})"],
        ),
    ]


class Kit:
    """Signed repositories under one directory, served on 127.0.0.1."""

    def __init__(self, root: Path):
        self.root = root
        self.keys: dict[str, Key] = {}
        self.server: RecordingServer | None = None

    def key(self, name: str) -> Key:
        if name not in self.keys:
            self.keys[name] = Key.generate(
                self.root.parent / f"gnupg-{name}", f"provision test {name} <{name}@fakegpu.invalid>"
            )
        return self.keys[name]

    def add(self, repo: str, packages: list[Package], key: str) -> Path:
        directory = self.root / repo
        directory.mkdir(parents=True, exist_ok=True)
        for pkg in packages:
            pkg.build(directory)
        return directory

    def publish(self, repo: str, key: str, *, key_file: str | None = None) -> None:
        directory = self.root / repo
        with (directory / "Packages").open("w") as handle:
            subprocess.run(["apt-ftparchive", "packages", "."], cwd=directory, stdout=handle, check=True)
        subprocess.run(["gzip", "-kf", "Packages"], cwd=directory, check=True)
        with (directory / "Release").open("w") as handle:
            subprocess.run(
                [
                    "apt-ftparchive",
                    "-o",
                    "APT::FTPArchive::Release::Origin=fakegpu",
                    "-o",
                    f"APT::FTPArchive::Release::Label={key}",
                    "release",
                    ".",
                ],
                cwd=directory,
                stdout=handle,
                check=True,
            )
        self.key(key).sign_repo(directory)
        if key_file:
            target = self.root / key_file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self.key(key).armored)

    def serve(self) -> str:
        self.server = RecordingServer(self.root)
        return self.server.url

    def close(self) -> None:
        if self.server:
            self.server.close()
        for key in self.keys.values():
            key.close()


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        self.server.requests.append((self.command, self.path, args[1] if len(args) > 1 else ""))


class _LoopbackServer:
    """An HTTP server on 127.0.0.1 (a free port) served from a daemon thread."""

    def __init__(self, handler, **state):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        for name, value in state.items():
            setattr(self.httpd, name, value)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class RecordingServer(_LoopbackServer):
    """A static file server on 127.0.0.1 that records every request."""

    def __init__(self, root: Path):
        super().__init__(lambda *a, **kw: _Handler(*a, directory=str(root), **kw), requests=[])

    @property
    def requests(self) -> list[tuple[str, str, str]]:
        return self.httpd.requests


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self._forward()

    def do_HEAD(self):
        self._forward()

    def _forward(self):
        url = urllib.parse.urlsplit(self.path)
        self.server.seen.append((self.command, self.path))
        if url.hostname not in ("127.0.0.1", "localhost"):
            self.send_error(403, "this test proxy forwards to loopback only")
            return
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60)
        path = url.path + (f"?{url.query}" if url.query else "")
        conn.request(
            self.command, path, headers={k: v for k, v in self.headers.items() if k.lower() != "proxy-connection"}
        )
        resp = conn.getresponse()
        body = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, fmt, *args):
        return


class RecordingProxy(_LoopbackServer):
    """An HTTP forward proxy on 127.0.0.1 (to loopback targets only) that records what it saw."""

    def __init__(self):
        super().__init__(_ProxyHandler, seen=[])

    @property
    def seen(self) -> list[tuple[str, str]]:
        return self.httpd.seen
