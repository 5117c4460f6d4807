"""A local package index serving gpu-provision as `pip wheel .` builds it, and every package it needs.

The gpu-provision wheel is built from this checkout (`pip wheel --no-deps --no-build-isolation .`,
with the hatchling of the test environment: nothing is fetched). Its dependencies cannot be fetched
either (test traffic stays on 127.0.0.1), so each installed distribution of the closure of
gpu-provision's requirements is packed back into a wheel from its own RECORD (the files pip
installed, the dist-info's WHEEL tags kept): the index serves the versions this test environment
runs. Zip timestamps are fixed, so a wheel's hash is the same for the same installed files.
"""

import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support import ROOT
from wheelhouse import STAMP, write_simple_index

DIST = "gpu-provision"


def build_tool_wheel(dest: Path) -> Path:
    """The wheel `pip wheel .` builds of this checkout."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(dest), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False, env=isolated_pip_env(),
    )  # fmt: skip
    assert proc.returncode == 0, (
        "pip wheel . failed (the test extra's hatchling builds it offline: pip install -e '.[test]')\n"
        + proc.stdout
        + proc.stderr
    )
    (wheel,) = dest.glob("gpu_provision-*.whl")
    return wheel


def isolated_pip_env(**extra: str) -> dict[str, str]:
    """The environment minus every pip and uv setting (a machine's find-links or extra index would
    let pip take packages from elsewhere than the lock's index), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PROVISION_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **extra)
    return env


def requirement_closure(name: str) -> list[metadata.Distribution]:
    """The installed distributions `name` needs, transitively (markers evaluated here, no extras)."""
    environment = default_environment()
    seen: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        current = canonicalize_name(todo.pop())
        if current in seen:
            continue
        dist = metadata.distribution(current)
        seen[current] = dist
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({**environment, "extra": ""}):
                todo.append(req.name)
    seen.pop(canonicalize_name(name), None)
    return sorted(seen.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))


def repack(dist: metadata.Distribution, dest: Path) -> Path:
    """An installed distribution as a wheel again: its RECORD's files under site-packages, its
    programs in bin/ (uv's binary) as the wheel's scripts (console scripts pip makes again from
    entry_points.txt), and its WHEEL file's tags."""
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    scripts = {e.name for e in dist.entry_points if e.group in ("console_scripts", "gui_scripts")}
    members: dict[str, Path] = {}
    for f in dist.files or ():
        if "__pycache__" in f.parts:
            continue
        if str(f).startswith(".."):
            if f.parent.name == "bin" and f.name not in scripts:
                members[f"{name}-{dist.version}.data/scripts/{f.name}"] = Path(dist.locate_file(f))
            continue
        members[str(f)] = Path(dist.locate_file(f))
    info = next(m for m in members if m.endswith(".dist-info/WHEEL")).rsplit("/", 1)[0]
    for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
        members.pop(f"{info}/{n}", None)
    tags = re.findall(r"^Tag: (\S+)$", members[f"{info}/WHEEL"].read_text(), re.M)
    parts = [sorted({t.split("-")[i] for t in tags}) for i in range(3)]
    path = dest / f"{name}-{dist.version}-{'-'.join('.'.join(p) for p in parts)}.whl"
    record = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member in sorted(members):
            data = members[member].read_bytes()
            entry = zipfile.ZipInfo(member, STAMP)
            entry.external_attr = (members[member].stat().st_mode & 0o777) << 16
            archive.writestr(entry, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{member},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        archive.writestr(zipfile.ZipInfo(f"{info}/RECORD", STAMP), "\n".join(record) + "\n")
    return path


def build_tool_index(root: Path) -> list[Path]:
    """root/simple: gpu-provision of this checkout and its installed closure; returns the wheels."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    wheels = [build_tool_wheel(files)] + [repack(d, files) for d in requirement_closure(DIST)]
    write_simple_index(root, wheels)
    return wheels
