"""A running Docker engine for tests marked docker or fleet.

Installs Debian's docker.io (and the other tools the harness needs) when missing, and starts
dockerd itself when no engine answers: CI machines have the client and nothing else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from harness import machine

# tool -> Debian package that provides it
TOOLS = {
    "dockerd": "docker.io",
    "debootstrap": "debootstrap",
    "apt-ftparchive": "apt-utils",
    "gpg": "gnupg",
    "dpkg-deb": "dpkg",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    # the fake-GPU kit's RPMs and dnf repositories (Rocky-shaped hosts)
    "rpmbuild": "rpm",
    "rpmsign": "rpm",
    "createrepo_c": "createrepo-c",
    "modifyrepo_c": "createrepo-c",
}
LOG = Path(os.environ.get("PROVISION_TEST_DOCKERD_LOG", "/tmp/provision-test-dockerd.log"))


class EngineUnavailable(RuntimeError):
    pass


def ensure_tools() -> None:
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if not missing:
        return
    if os.geteuid() != 0:
        raise EngineUnavailable(f"missing {', '.join(missing)} and not root to install them")
    machine.apt_install(missing)


def _ping() -> bool:
    import docker

    try:
        docker.from_env(timeout=10).ping()
    except Exception:
        return False
    return True


def ensure_engine(timeout: float = 90.0):
    """A docker.DockerClient for a running engine, starting dockerd when needed."""
    import docker

    ensure_tools()
    with machine.lock("dockerd"):  # the other test process may be starting it too
        _start_engine(timeout)
    return docker.from_env(timeout=600)


def _start_engine(timeout: float) -> None:
    if not _ping():
        if os.geteuid() != 0:
            raise EngineUnavailable("no Docker engine answers and dockerd needs root to start")
        with LOG.open("ab") as log:
            subprocess.Popen(
                ["dockerd", "--host", "unix:///var/run/docker.sock"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not _ping():
            if time.monotonic() > deadline:
                tail = LOG.read_text(errors="replace")[-2000:] if LOG.exists() else ""
                raise EngineUnavailable(f"dockerd did not answer within {timeout:.0f}s:\n{tail}")
            time.sleep(0.5)
