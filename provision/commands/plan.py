"""`provision plan`: resolve a request into a plan (and its lock file)."""


import os
from typing import NamedTuple

from provision.matrix.model import Matrix
from provision.plan import Plan, PlanRequest, write_plan


class PlanResult(NamedTuple):
    plan: Plan
    lock: str | None


def plan(request: PlanRequest, *, matrix: Matrix, lock: str | os.PathLike[str] | None = None) -> PlanResult:
    from provision.matrix.resolve import resolve

    result = resolve(matrix, request)
    if lock is not None:
        write_plan(result, lock)
    return PlanResult(result, os.fspath(lock) if lock is not None else None)


def plan_rows(p: Plan) -> list[tuple[str, str]]:
    """(component, choice) rows of the human summary."""
    rows = [
        ("os", f"{p.os.name} ({p.os.id}, {p.os.pkg_manager}, repo {p.os.nvidia_repo})"),
        ("gpu", f"{p.gpu.name} ({p.gpu.id}, sm_{p.gpu.compute_capability.replace('.', '')}, {p.gpu.architecture})"),
        ("driver", f"R{p.driver.branch} {p.driver.version} ({p.driver.branch_type}), {p.driver.kernel_module} kernel modules"),
        ("packages", ", ".join(f"{pkg.name} {pkg.version}" for pkg in p.driver.packages)
         + (f" [stream {p.driver.module_stream}]" if p.driver.module_stream else "")),
        ("cuda", f"{p.cuda.version} ({p.cuda.label})" + (" via minor-version compatibility" if p.cuda.compatibility == "minor-version" else "")),
        ("cudnn", f"{p.cudnn.version} (from the {p.cudnn.origin})" if p.cudnn else "-"),
        ("framework", f"{p.framework.requirement} [{p.framework.variant}]" + (f" from {p.framework.index_url}" if p.framework.index_url else "")
         if p.framework else "-"),
        ("fabric manager", f"{p.fabric_manager.package} {p.fabric_manager.version}" if p.fabric_manager else "not needed"),
        ("container toolkit", p.container_toolkit.version),
        ("base image", p.base_image),
        ("driver floor", p.driver_floor),
        ("digest", p.digest()),
    ]
    return rows
