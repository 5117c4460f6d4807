"""What the test processes of one machine share. tests/run runs two pytest processes side by side
(--part fleet and --part rest, tests/support.py), and either may install Debian packages, start
dockerd or build a base image first: each of those steps runs under a lock of this machine's."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

LOCKS = Path(os.environ.get("PROVISION_TEST_LOCKS", tempfile.gettempdir()))


@contextlib.contextmanager
def lock(name: str) -> Iterator[None]:
    """Hold this machine's lock `name` (a [a-z0-9-] word) for the block; waits while another test
    process holds it."""
    path = LOCKS / f"provision-test-{name}.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def apt_install(packages: list[str], timeout: int = 1200) -> None:
    """apt-get update, then install `packages` without recommends (root only; one process at a time,
    as dpkg allows)."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with lock("apt"):
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL, timeout=600)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
            timeout=timeout,
        )
