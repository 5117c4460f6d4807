"""Committed requirements.lock files that agree with a plan, framework and stack alike, for tests that
render many plans (resolving each with uv would be slow; tests/images/test_stack_render.py resolves).

The pins are read from the plan: the framework and its CUDA wheel constraints, every stack package at
the version it installs with each of its distributions, and what building the image's sdists needs
(lock_target's build requirements). The hashes stand in for files (sha256 of the pin itself): pip
checks them when an image is built; these tests render and lint Dockerfiles."""

import hashlib
import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from provision.images.pylock import lock_target, plan_constraints, requirement_name
from provision.plan.model import Plan, PlanStackPackage

STAND_IN = "75.0.0"  # the version a build requirement is pinned at (above every floor the catalogue names)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def stack_pins(plan: Plan, stack: tuple[PlanStackPackage, ...]) -> dict[str, str]:
    """canonical name -> version of a lock that agrees with the plan's image of `stack`."""
    fw = plan.framework
    pins: dict[str, str] = {}
    if fw is not None:
        pins[canonical(fw.package)] = fw.version
        for constraint in plan_constraints(fw):  # "name==X", or "name>=X,<Y,==A.B.*": take X
            name, spec = re.match(r"([a-z0-9-]+)(.*)", constraint).groups()
            pins[name] = next(s.version for s in SpecifierSet(spec) if s.operator in ("==", ">="))
    for pkg in stack:
        pins[requirement_name(pkg)] = pkg.install  # tensorrt, or tensorrt-cu12 for that build line
        for name, _ in pkg.distributions:
            pins[canonical(name)] = pkg.install
    if stack:
        target = lock_target(fw, python="3.12", platform="x86_64-manylinux_2_35", stack=stack)
        for requirement in target.more:
            pins.setdefault(canonical(Requirement(requirement).name), STAND_IN)
    return pins


def agreeing_stack_lock(plan: Plan, stack: tuple[PlanStackPackage, ...], folder: Path, header: str = "") -> str:
    """A lock file for the plan's image of `stack` (see stack_pins), written once per content."""
    pins = stack_pins(plan, stack)
    body = "".join(
        f"{name}=={version} \\\n    --hash=sha256:{hashlib.sha256(f'{name}=={version}'.encode()).hexdigest()}\n"
        for name, version in sorted(pins.items())
    )
    text = header + body
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.lock"
    if not path.exists():
        path.write_text(text)
    return str(path)
