"""requirements/provision.lock, the versions this repository is tested with: every
dependency of pyproject.toml (and the build backend) pinned with hashes, satisfying its specifier.
Regenerate with requirements/lock."""

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support import ROOT

LOCK = ROOT / "requirements" / "provision.lock"


def pins() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of every requirement in the lock."""
    out: dict[str, tuple[str, list[str]]] = {}
    name = None
    for line in LOCK.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^ \\]+)", line)
        if m:
            name = canonicalize_name(m.group(1))
            out[name] = (m.group(2), [])
        elif name and (h := re.search(r"--hash=sha256:([0-9a-f]{64})", line)):
            out[name][1].append(h.group(1))
    return out


def test_every_line_is_pinned_with_hashes():
    locked = pins()
    assert len(locked) > 20
    assert all(hashes for _, hashes in locked.values()), [n for n, (_, h) in locked.items() if not h]
    requirement_lines = [line for line in LOCK.read_text().splitlines() if re.match(r"^[A-Za-z0-9]", line)]
    assert all("==" in line for line in requirement_lines)


def test_the_lock_satisfies_pyproject_and_carries_the_build_backend():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    locked = pins()
    wanted = [Requirement(r) for r in project["project"]["dependencies"]]
    wanted += [Requirement(r) for r in project["build-system"]["requires"]]
    stale = [
        str(r)
        for r in wanted
        if canonicalize_name(r.name) not in locked or not r.specifier.contains(locked[canonicalize_name(r.name)][0])
    ]
    assert stale == [], f"requirements/provision.lock is stale for {stale}: run requirements/lock"


def test_the_distribution_is_gpu_provision():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["name"] == "gpu-provision"
    assert project["project"]["scripts"] == {"provision": "provision.cli:main"}
