"""Issue 24, "Done when": every catalogued stack combination the resolver can produce holds the
stack invariants. For a few (image OS, GPU) pairs, every framework build of PyTorch (on each CUDA
release of its line the catalogue has) and every CUDA release alone (an inference image) is paired
with every release and build of every stack package, through the rule function the resolver's
search uses (provision.plan.rules: PACKAGE_RULES via package_candidates); each pairing it accepts
must keep one CUDA major across every CUDA-using package and the image, cuDNN majors that agree,
a cuDNN at or above every package's floor, and an SM floor at or below the GPU's. Then the real
resolver, each package unpinned beside the newest PyTorch and as an inference image, on the same
pairs, holds its plans to the same invariants.
"""

from __future__ import annotations

import pytest

from provision.errors import BadPin, NoCompatibleStack
from provision.plan import rules
from provision.plan.context import inference_frameworks, needs_framework
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.versions import DottedVersion as Version
from provision.versions import major_minor

# (host OS, GPU): x86_64 Hopper, Ada, Volta (below TensorRT 10.5's floor), aarch64 Grace Hopper, and
# an EL8 image OS (glibc 2.28, Python 3.6 to 3.12)
PAIRS = (("ubuntu22.04", "h100-sxm"), ("ubuntu24.04", "l4"), ("ubuntu22.04", "v100-pcie-32gb"), ("rocky8", "a100-pcie-80gb"))
ARM_PAIR = ("ubuntu22.04", "gh200")


def _setting(matrix, os_id, gpu_id):
    gpu = matrix.gpu(gpu_id)
    return matrix.os(os_id).cuda_image_os, gpu.host_arches[0], gpu.compute_capability


def _check(matrix, drafts, cuda: Version, cudnn: str | None, cc: str, fw_build=None) -> int:
    """The invariants over one accepted set of drafts; the number of drafts checked."""
    major = fw_build.cuda_version.release[0] if fw_build is not None else cuda.release[0]
    assert cuda.release[0] == major, "the image's CUDA major is the framework build's"
    for d in drafts:
        b = d.build
        if b.cuda_major is not None:
            assert b.cuda_major == major, d.name
            if b.cuda is not None:
                assert Version(b.cuda) <= Version(major_minor(cuda)), d.name
        if b.cudnn_major is not None or b.cudnn_min is not None:
            assert cudnn is not None, d.name
            if b.cudnn_major is not None:
                assert Version(cudnn).release[0] == b.cudnn_major, d.name
            if b.cudnn_min is not None:
                assert Version(cudnn) >= b.cudnn_min, d.name
        floor, _ = rules.sm_floor(d.package, d.release, b)
        if floor is not None:
            assert Version(cc) >= Version(floor), d.name
    return len(drafts)


def _cudas_of_line(matrix, line: str):
    return [c for c in matrix.cuda if major_minor(c.version) == line]


def _walk(matrix, os_id, gpu_id) -> tuple[int, int]:
    """(pairings tried, pairings accepted) on one (OS, GPU)."""
    img_os, host, cc = _setting(matrix, os_id, gpu_id)
    tried = accepted = 0
    torch = matrix.framework("pytorch")
    packages = list(matrix.stacks)
    # every PyTorch build with every stack package release and build
    for release in torch.releases:
        for build in release.builds:
            if host not in build.arches:
                continue
            key = ("pytorch", release.version, build.variant)
            cudnn = build.cudnn if build.libraries == "wheels" else None
            for cuda in _cudas_of_line(matrix, build.cuda)[:1]:
                q = rules.package_question(matrix, (host, cc, img_os), key, cuda.version, cudnn)
                for package in packages:
                    for rel in package.releases:
                        passed, dropped = rules.package_candidates(
                            matrix, (package.id, f"{package.id}=={rel.version}", "with"), q
                        )
                        tried += len(passed) + len(dropped)
                        accepted += _check(matrix, passed, cuda.version, cudnn, cc, build)
    # every CUDA release's images alone (an inference image) with the inference frameworks
    for cuda in matrix.cuda:
        image = next((i for i in matrix.images_for(cuda.version) if img_os in i.os), None)
        if image is None:
            continue
        q = rules.package_question(matrix, (host, cc, img_os), None, cuda.version, image.cudnn_version)
        for package in inference_frameworks(matrix):
            for rel in package.releases:
                passed, dropped = rules.package_candidates(
                    matrix, (package.id, f"{package.id}=={rel.version}", "framework"), q
                )
                tried += len(passed) + len(dropped)
                accepted += _check(matrix, passed, cuda.version, image.cudnn_version, cc)
    return tried, accepted


@pytest.mark.parametrize(("os_id", "gpu_id"), [*PAIRS, ARM_PAIR])
def test_every_catalogued_combination_the_rules_accept_holds_the_invariants(real_matrix, os_id, gpu_id):
    tried, accepted = _walk(real_matrix, os_id, gpu_id)
    assert tried > 1000, "the walk reached the catalogue"
    assert 0 < accepted < tried, "some combinations fit and some are refused"


def test_the_walk_refuses_what_breaks_an_invariant(real_matrix):
    """The checks can fail: a pairing the rules refuse (torch 2.5.1's cuDNN 9 with onnxruntime 1.18.1's
    cuDNN 8; TensorRT 10.6 on SM 7.0) breaks the invariant the walk asserts."""
    torch = real_matrix.framework("pytorch").release(Version("2.5.1"))
    build = next(b for b in torch.builds if b.default)
    cuda = _cudas_of_line(real_matrix, build.cuda)[0].version
    q = rules.package_question(
        real_matrix, ("x86_64", "8.9", "ubuntu22.04"), ("pytorch", torch.version, build.variant), cuda, build.cudnn
    )
    passed, dropped = rules.package_candidates(real_matrix, ("onnxruntime", "onnxruntime==1.18.1", "with"), q)
    assert not passed
    assert dropped[0].rule == "stack-cudnn"
    pkg = real_matrix.stack("onnxruntime")
    rel = pkg.release(Version("1.18.1"))
    draft = rules.PackageDraft(pkg, rel, rel.builds[0], "with")
    with pytest.raises(AssertionError):
        _check(real_matrix, [draft], cuda, build.cudnn, "8.9", build)
    trt = real_matrix.stack("tensorrt")
    rel = trt.release(Version("10.6.0"))
    draft = rules.PackageDraft(trt, rel, rel.default_build, "framework")
    with pytest.raises(AssertionError):
        _check(real_matrix, [draft], Version("12.6.3"), None, "7.0")


@pytest.mark.parametrize(("os_id", "gpu_id"), [*PAIRS, ARM_PAIR])
def test_the_resolver_s_stack_plans_hold_the_invariants(real_matrix, os_id, gpu_id):
    """Each stack package unpinned beside the newest PyTorch, and each inference framework alone,
    through resolve(): its plan (or refusal) keeps one CUDA major, agreeing cuDNN, the SM floor."""
    cc = real_matrix.gpu(gpu_id).compute_capability
    plans = 0
    requests = [PlanRequest(os=os_id, gpu=gpu_id, framework=p.id) for p in inference_frameworks(real_matrix)]
    requests += [
        PlanRequest(os=os_id, gpu=gpu_id, framework="pytorch", with_=(p.id,))
        for p in real_matrix.stacks
        if not needs_framework(real_matrix, p) or "torch" in needs_framework(real_matrix, p)
    ]
    for request in requests:
        try:
            plan = resolve(real_matrix, request, suggest=False)
        except (NoCompatibleStack, BadPin):
            continue
        plans += 1
        major = Version(plan.cuda.version).release[0]
        if plan.framework is not None:
            assert Version(plan.framework.cuda).release[0] == major
        for part in plan.stack:
            if part.cuda_major is not None:
                assert part.cuda_major == major, (request, part)
            if part.cudnn_major is not None:
                assert Version(plan.cudnn.version).release[0] == part.cudnn_major, (request, part)
            if part.cudnn_min is not None:
                assert Version(plan.cudnn.version) >= Version(part.cudnn_min), (request, part)
            if part.sm_floor is not None:
                assert Version(cc) >= Version(part.sm_floor), (request, part)
            if part.needs_nvcc:
                assert plan.base_image == plan.images["devel"]
    assert plans > 0
