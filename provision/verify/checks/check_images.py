"""Images: each image the host's fleet group lists (its images: key) runs on the driver and GPU the
host has now, as provision.matrix.runs_on.decide (the one rule) says; not on the plan's driver."""

from __future__ import annotations

import re

import pytest

from provision.matrix.detect import catalogue_gpu
from provision.matrix.runs_on import NATIVE, decide
from provision.verify.checks import check, fail, need_smi
from provision.versions import DottedVersion as Version

_RELEASE = re.compile(r"\d{3,4}\.\d{1,3}(?:\.\d{1,3})?")  # what nvidia-smi prints: 550.163.01, 620.70.06


@check("image-runs", "each image the host's fleet group lists runs on the driver and GPU the host has")
def check_image_runs(facts, target, catalogue, evidence, warning):
    if target.images is None:
        pytest.skip(
            "no fleet group assigns this host images (with -i INVENTORY --fleet FILE, a group's images: list "
            "does; --plan, --local and --host give none)"
        )
    if not target.images:
        pytest.skip(f"fleet group {target.group!r} lists no images (images: in the fleet file)")
    if catalogue is None:
        fail("no catalogue reached this worker: the image rule cannot be asked")
    gpus = need_smi(facts)
    if not gpus:
        pytest.skip("nvidia-smi lists no GPU (see the nvidia-smi check)")
    drivers = sorted({g.driver for g in gpus})
    odd = [d for d in drivers if not _RELEASE.fullmatch(d)]
    if odd:
        fail(f"nvidia-smi reports driver {odd[0][:80]!r}, not a driver release: the image rule cannot be asked")
    # each distinct (driver, GPU model) the host reports (one, on a sane host): no more pairs than GPUs
    pairs = sorted({(g.driver, g.device_id) for g in gpus})
    kinds = {d: catalogue_gpu(catalogue, d) for d in sorted({d for _, d in pairs})}
    evidence(
        f"nvidia-smi: driver {', '.join(drivers)}; GPU "
        + ", ".join(f"{d} ({gpu.id if gpu else 'not in the catalogue'})" for d, gpu in kinds.items())
    )
    failures: list[str] = []
    for needs in target.images:
        for text, device in pairs:
            driver, gpu = Version(text), kinds[device]
            on = f"driver {driver} on {gpu.id if gpu else device}"
            verdict = decide(catalogue, needs, driver, gpu)
            evidence(f"{needs.label}: {verdict.mode} on {on}: {verdict.reason}")
            if not verdict.runs:
                fix = _fix(catalogue, needs, driver, gpu, target.plan)
                failures.append(f"{needs.label} cannot run on {on} (mode {verdict.mode}): {verdict.reason}; {fix}")
                continue
            if verdict.mode != NATIVE:
                warning(f"{needs.label} runs on {on} in {verdict.mode} mode: {'; '.join(verdict.limits)}")
            if gpu is None:
                warning(
                    f"GPU {device} is not in the catalogue: whether {needs.label} carries code for it, and "
                    "forward compatibility, were not checked"
                )
    if failures:
        fail(" / ".join(failures))


def _fix(matrix, needs, driver: Version, gpu, plan) -> str:
    """What makes the image run here: the plan (when its driver runs it and the host is not at it),
    another driver (the image CUDA release's minimum runs it natively, when the GPU's SM is in it),
    or another group for the image."""
    planned = Version(plan.driver.version)
    if planned != driver:
        verdict = decide(matrix, needs, planned, gpu)
        if verdict.runs:
            how = "natively" if verdict.mode == NATIVE else f"in {verdict.mode} mode"
            return f"fix: apply the plan (provision apply): its driver {planned} runs it {how}"
        head = f"the plan's driver {planned} does not run it either"
    else:
        head = f"the host runs its plan's driver {planned}"
    if not decide(matrix, needs, needs.min_driver, gpu).runs:
        return f"{head}, and no driver runs it on this GPU; fix: assign it to a group whose GPUs it carries code for"
    runs_on = f"provision runs-on --driver {driver}" + (f" --gpu {gpu.id}" if gpu is not None else "")
    return (
        f"{head}; fix: plan the group with a driver at or above {needs.min_driver}, CUDA {needs.cuda}'s minimum "
        f"(the group's driver: pin, or provision plan --driver), or assign it an image this driver runs ({runs_on})"
    )
