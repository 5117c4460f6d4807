"""`provision matrix check`: the invariants, then every catalogued request resolved (each
(OS, platform) pair with every GPU the platform lists, and with none where it implies one)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from provision.errors import InputError, NoCompatibleStack
from provision.matrix.invariants import Problem, check_invariants
from provision.matrix.model import Matrix
from provision.plan.model import PlanRequest
from provision.versions import major_minor


class CheckResult:
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        self.groups: dict[str, dict[str, int]] = {}  # request kind -> {resolved, refused, not applicable}
        self.refusals: Counter[str] = Counter()  # rule -> refused requests it eliminated candidates of
        self.unresolved_pairs: list[tuple[str, str, str]] = []  # (os, gpu, first reason)
        self.seconds = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems and not self.unresolved_pairs


def check(matrix: Matrix, raw: dict[str, Any] | None = None) -> CheckResult:
    """Resolve every catalogued (os, gpu), (os, gpu, cuda) and (os, gpu, framework) request."""
    from provision.plan.resolve import resolve

    start = time.perf_counter()
    result = CheckResult(problems=check_invariants(matrix, raw) if raw is not None else [])
    if result.problems:  # resolving over dangling ids would only repeat the same problems
        result.seconds = time.perf_counter() - start
        return result
    gpu_ids = [g.id for g in matrix.gpus] + [g.id for g in matrix.gpu_groups]
    declared = {(x.os, x.gpu) for x in matrix.exclusions}
    cuda_lines = sorted({major_minor(c.version) for c in matrix.cuda})
    fw_releases = [(fw.id, str(r.version)) for fw in matrix.frameworks for r in fw.releases]

    def run(kind: str, req: PlanRequest) -> bool:
        counts = result.groups.setdefault(kind, {"resolved": 0, "refused": 0, "not applicable": 0})
        try:
            resolve(
                matrix, req, suggest=False
            )  # the requests share what the catalogue gives them (provision.matrix.memo)
        except NoCompatibleStack as exc:
            counts["refused"] += 1
            for k in exc.kinds or {"other"}:
                result.refusals[k] += 1
            if (
                kind == "os+gpu"
                and "os-arch" not in exc.kinds  # os.yaml declares the OS's architectures
                and (req.os, req.gpu) not in declared
                and (None, req.gpu) not in declared
                and (req.os, None) not in declared
            ):
                first = exc.eliminations[0][1] if exc.eliminations else exc.message
                result.unresolved_pairs.append((req.os, req.gpu, first))
            return False
        except InputError:
            counts["not applicable"] += 1  # e.g. a group whose members need different setups
            return False
        counts["resolved"] += 1
        return True

    for os_rel in matrix.os_releases:
        for gpu in gpu_ids:
            if not run("os+gpu", PlanRequest(os_rel.id, gpu)):
                continue
            for line in cuda_lines:
                run("os+gpu+cuda", PlanRequest(os_rel.id, gpu, cuda=line))
            for fw, ver in fw_releases:
                run("os+gpu+framework", PlanRequest(os_rel.id, gpu, framework=f"{fw}=={ver}"))
    for os_rel in matrix.os_releases:
        for platform in matrix.platforms:
            for gpu in (*platform.gpus, None):  # None: the GPU the platform implies (or its refusal)
                run("os+platform", PlanRequest(os_rel.id, gpu, platform=platform.id))
    result.seconds = time.perf_counter() - start
    return result
