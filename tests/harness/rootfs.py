"""Base images made locally with debootstrap (no registry is reachable), cached between runs.

The cache key covers the suite, variant and package list, so a changed recipe builds anew.
Tarballs live under ~/.cache/provision-test, so a second run on the same machine reuses them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from harness import machine

CACHE = Path(os.environ.get("PROVISION_TEST_CACHE", Path.home() / ".cache" / "provision-test"))
RECIPE_VERSION = "2"


def debian_mirror() -> str:
    explicit = os.environ.get("PROVISION_TEST_DEBIAN_MIRROR")
    if explicit:
        return explicit
    for path in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        if path.exists():
            m = re.search(r"(?:URIs:|deb)\s+(https?://\S+/debian)\b", path.read_text())
            if m:
                return m.group(1)
    return "http://deb.debian.org/debian"


HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
# outside /etc/ssl/certs, which the ca-certificates package rebuilds when a build installs it
IMAGE_CA = "/usr/local/share/provision-test/ca-bundle.crt"


def image(
    client,
    name: str,
    *,
    suite: str = "bookworm",
    variant: str = "minbase",
    include: tuple[str, ...] = (),
    cmd: str = '["/bin/bash"]',
    trust_host_ca: bool = False,
    files: dict[str, str] | None = None,
    setup: tuple[str, ...] = (),
) -> str:
    """The tag of a local image built from Debian `suite` with `include`d packages.

    trust_host_ca: copy this machine's CA bundle into the image and point pip and Python at it,
    as a site behind a TLS-inspecting proxy does with its mirror of nvidia/cuda.
    files: path -> text written into the root after debootstrap (replacing a file or symlink
    there), to make the root look like another distribution; part of the cache key.
    setup: shell commands run in the root (chroot) after the files are written; part of the key.
    """
    ca = HOST_CA.read_bytes() if trust_host_ca and HOST_CA.exists() else b""
    recipe = f"{RECIPE_VERSION}|{suite}|{variant}|{','.join(sorted(include))}|{cmd}|{hashlib.sha256(ca).hexdigest()}"
    if files or setup:
        recipe += "|" + hashlib.sha256(repr((sorted((files or {}).items()), setup)).encode()).hexdigest()
    key = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    tag = f"provision-test/{name}:{key}"
    with machine.lock(f"image-{name}-{key}"):  # built once, whichever test process asks first
        try:
            client.images.get(tag)
            return tag
        except Exception:
            pass
        CACHE.mkdir(parents=True, exist_ok=True)
        tarball = CACHE / f"{name}-{key}.tar"
        if not tarball.exists():
            _debootstrap(tarball, suite, variant, include, ca, files or {}, setup)
        changes = [f"CMD {cmd}"]
        if ca:
            changes += [f"ENV {var}={IMAGE_CA}" for var in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")]
        client.api.import_image_from_file(str(tarball), repository=f"provision-test/{name}", tag=key, changes=changes)
    return tag


def _debootstrap(
    tarball: Path,
    suite: str,
    variant: str,
    include: tuple[str, ...],
    ca: bytes = b"",
    files: dict[str, str] | None = None,
    setup: tuple[str, ...] = (),
) -> None:
    work = Path(tempfile.mkdtemp(prefix="provision-rootfs-", dir=CACHE))
    try:
        root = work / "root"
        args = ["debootstrap", f"--variant={variant}"]
        if include:
            args.append("--include=" + ",".join(include))
        proc = subprocess.run(
            [*args, suite, str(root), debian_mirror()], capture_output=True, text=True, check=False, timeout=1800
        )
        if proc.returncode != 0:
            raise RuntimeError(f"debootstrap failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        if ca:
            target = root / IMAGE_CA.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(ca)
        for path, text in (files or {}).items():
            target = root / path.lstrip("/")
            if target.is_symlink() or target.exists():
                target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        for command in setup:
            proc = subprocess.run(
                ["chroot", str(root), "/bin/sh", "-c", command],
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"image setup `{command}` failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        # apt caches and lists are not part of an image
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "var/cache/apt"):
            for child in (root / junk).glob("*"):
                if child.is_file():
                    child.unlink()
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True, timeout=600)
        partial.rename(tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)
