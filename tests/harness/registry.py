"""A real image registry on loopback for tests marked docker: Debian's docker-registry package
(the CNCF distribution registry), installed when missing, storage in a temporary directory.

dockerd talks plain HTTP to registries on 127.0.0.0/8 without configuration, so tests push to
and pull from 127.0.0.1:<port>/… as they would from any registry.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from harness import machine

BINARY = "/usr/bin/docker-registry"
PACKAGE = "docker-registry"

CONFIG = """\
version: 0.1
log:
  level: warn
  fields:
    service: provision-test-registry
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


class RegistryUnavailable(RuntimeError):
    pass


def ensure_installed() -> str:
    if os.path.exists(BINARY):
        return BINARY
    if os.geteuid() != 0:
        raise RegistryUnavailable(f"{BINARY} is missing and installing {PACKAGE} needs root")
    # the package's service is not started: a policy-rc.d denies it in containers, and a machine with
    # systemd gets it on :5000, which the tests never use
    machine.apt_install([PACKAGE], timeout=600)
    return BINARY


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Registry:
    """A running registry: `host` is what image references start with (127.0.0.1:PORT)."""

    def __init__(self, workdir: Path, port: int, proc: subprocess.Popen, log: Path):
        self.workdir, self.port, self.proc, self.log = workdir, port, proc, log

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def ref(self, path: str) -> str:
        return f"{self.host}/{path}"

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        """The registry's own answer (Docker-Content-Digest) for repository:reference, or None."""
        accept = ", ".join(
            [
                "application/vnd.oci.image.index.v1+json",
                "application/vnd.docker.distribution.manifest.list.v2+json",
                "application/vnd.oci.image.manifest.v1+json",
                "application/vnd.docker.distribution.manifest.v2+json",
            ]
        )
        request = urllib.request.Request(
            f"{self.url}/v2/{repository}/manifests/{reference}", method="HEAD", headers={"Accept": accept}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.headers.get("Docker-Content-Digest")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        if not os.environ.get("PROVISION_TEST_KEEP"):
            shutil.rmtree(self.workdir, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v2/", timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def start(timeout: float = 30.0, attempts: int = 3) -> Registry:
    """Start a registry on a free loopback port (another port when one is taken meanwhile)."""
    binary = ensure_installed()
    workdir = Path(tempfile.mkdtemp(prefix="provision-registry-"))
    (workdir / "storage").mkdir()
    log = workdir / "registry.log"
    for _ in range(attempts):
        port = _free_port()
        config = workdir / "config.yml"
        config.write_text(CONFIG.format(root=workdir / "storage", port=port))
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [binary, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        registry = Registry(workdir, port, proc, log)
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            if _answers(registry.url):
                return registry
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=15)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    shutil.rmtree(workdir, ignore_errors=True)
    raise RegistryUnavailable(f"{binary} did not answer on 127.0.0.1 within {timeout:.0f}s:\n{tail}")
