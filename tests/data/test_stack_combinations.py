"""Issue 24, "Done when": every catalogued stack combination the resolver can produce holds the
stack invariants. For a few (image OS, GPU) pairs, every framework build of PyTorch (on each CUDA
release of its line the catalogue has) and every CUDA release alone (an inference image) is paired
with every release and build of every stack package, through the rule function the resolver's
search uses (provision.plan.rules: PACKAGE_RULES via package_candidates); each pairing it accepts
must keep one CUDA major across every CUDA-using package and the image, cuDNN majors that agree,
a cuDNN at or above every package's floor, and an SM floor at or below the GPU's. Then the real
resolver, each package unpinned beside the newest PyTorch and as an inference image, on the same
pairs, holds its plans to the same invariants.

The packages that load TensorRT's libraries (ONNX Runtime's TensorRT provider, TensorRT's own
bindings, Torch-TensorRT) are walked two by two through the pair rules the search uses
(rules.PAIR_RULES): every pair they accept loads one libnvinfer soname major (the ONNX Runtime
build's tensorrt-provider needs the one the TensorRT build links) and keeps the other's declared
requirement; the resolver's plans that hold two of them, or that Torch-TensorRT's requirement
brought TensorRT into, are held to the same.
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
PAIRS = (
    ("ubuntu22.04", "h100-sxm"),
    ("ubuntu24.04", "l4"),
    ("ubuntu22.04", "v100-pcie-32gb"),
    ("rocky8", "a100-pcie-80gb"),
)
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


def _libnvinfer(build, obj: str | None = None) -> set[str]:
    """The libnvinfer sonames a build's read shared objects (or one of them, ``obj``) need."""
    return {n for o, names in build.sonames if obj in (None, o) for n in names or () if n.startswith("libnvinfer.so.")}


def _check_pair(a, b) -> None:
    """The pair invariants: one libnvinfer major between them (ONNX Runtime's tensorrt-provider's
    is the one TensorRT's bindings link), and each one's declared requirement on the other kept."""
    for x, y in ((a, b), (b, a)):
        if x.package.id == "onnxruntime" and y.package.id == "tensorrt":
            assert _libnvinfer(x.build, "tensorrt-provider") == _libnvinfer(y.build, "bindings"), (x.name, y.name)
        for name, spec in x.build.requires:
            if name in {y.package.pip, *y.build.pip_names}:
                assert rules.spec_holds(spec, y.release.version), (x.name, y.name)
    if _libnvinfer(a.build) and _libnvinfer(b.build):
        assert _libnvinfer(a.build) == _libnvinfer(b.build), (a.name, b.name)


TRT_LOADERS = ("onnxruntime", "tensorrt", "torch-tensorrt")


def _walk_pairs(matrix, os_id, gpu_id) -> tuple[int, int, set[str]]:
    """(pairs tried, pairs accepted, the kinds of the refusals) of the packages that load TensorRT,
    each build that fits a candidate (every CUDA release's images alone; the newest PyTorch build
    on each CUDA line) paired with each of another such package's."""
    img_os, host, cc = _setting(matrix, os_id, gpu_id)
    questions = []
    for cuda in matrix.cuda:
        image = next((i for i in matrix.images_for(cuda.version) if img_os in i.os), None)
        if image is not None:
            questions.append(
                rules.package_question(matrix, (host, cc, img_os), None, cuda.version, image.cudnn_version)
            )
    lines = set()
    for release in matrix.framework("pytorch").releases:
        for build in release.builds:
            if host in build.arches and build.cuda not in lines and _cudas_of_line(matrix, build.cuda):
                lines.add(build.cuda)
                key = ("pytorch", release.version, build.variant)
                cudnn = build.cudnn if build.libraries == "wheels" else None
                cuda = _cudas_of_line(matrix, build.cuda)[0].version
                questions.append(rules.package_question(matrix, (host, cc, img_os), key, cuda, cudnn))
    tried = accepted = 0
    kinds: set[str] = set()
    for q in questions:
        drafts = {}
        for ident in TRT_LOADERS:
            drafts[ident] = rules.package_candidates(matrix, (ident, ident, "with"), q)[0]
        for i, first in enumerate(TRT_LOADERS):
            for second in TRT_LOADERS[i + 1 :]:
                for a in drafts[first]:
                    for b in drafts[second]:
                        tried += 1
                        clash = rules.pair_clash(a, b)
                        if clash is None:
                            _check_pair(a, b)
                            accepted += 1
                        else:
                            kinds.add(clash[0])
    return tried, accepted, kinds


@pytest.mark.parametrize(("os_id", "gpu_id"), [*PAIRS, ARM_PAIR])
def test_every_pair_of_packages_that_load_tensorrt_the_pair_rules_accept_holds_the_invariants(
    real_matrix, os_id, gpu_id
):
    tried, accepted, kinds = _walk_pairs(real_matrix, os_id, gpu_id)
    # aarch64 has fewer builds (TensorRT cu13 and ONNX Runtime only, no Torch-TensorRT)
    assert tried > (300 if gpu_id == "gh200" else 1000), "the walk reached the catalogue"
    assert 0 < accepted < tried
    assert "stack-soname" in kinds, "some pair loads two libnvinfer majors"


def test_the_pair_walk_fails_without_the_soname_rule(real_matrix, monkeypatch):
    monkeypatch.setattr(rules, "PAIR_RULES", tuple(r for r in rules.PAIR_RULES if r.kind != "stack-soname"))
    with pytest.raises(AssertionError, match=r"onnxruntime==.*tensorrt=="):
        _walk_pairs(real_matrix, "ubuntu22.04", "h100-sxm")


@pytest.mark.parametrize(("os_id", "gpu_id"), [*PAIRS, ARM_PAIR])
def test_the_resolver_s_plans_with_two_packages_that_load_tensorrt_hold_the_pair_invariants(real_matrix, os_id, gpu_id):
    plans = 0
    requests = [
        PlanRequest(os=os_id, gpu=gpu_id, framework="pytorch", with_=("onnxruntime", "tensorrt")),
        PlanRequest(os=os_id, gpu=gpu_id, framework="pytorch", with_=("tensorrt", "onnxruntime")),
        PlanRequest(os=os_id, gpu=gpu_id, framework="tensorrt", with_=("onnxruntime",)),
        PlanRequest(os=os_id, gpu=gpu_id, framework="onnxruntime", with_=("tensorrt",)),
        PlanRequest(os=os_id, gpu=gpu_id, framework="pytorch", with_=("torch-tensorrt",)),
        PlanRequest(os=os_id, gpu=gpu_id, framework="pytorch", with_=("onnxruntime", "torch-tensorrt")),
    ]
    for request in requests:
        try:
            plan = resolve(real_matrix, request, suggest=False)
        except (NoCompatibleStack, BadPin):
            continue
        plans += 1
        drafts = []
        for part in plan.stack:
            package = real_matrix.stack(part.id)
            release = package.release(Version(part.version))
            drafts.append(rules.PackageDraft(package, release, release.build(part.flavour), part.role))
        for i, a in enumerate(drafts):
            for b in drafts[i + 1 :]:
                _check_pair(a, b)
        ids = [s.id for s in plan.stack]
        if "torch-tensorrt" in ids:
            assert "tensorrt" in ids, (request, ids)
            if "tensorrt" not in request.with_:
                trt = plan.stack[ids.index("tensorrt")]
                assert (trt.role, trt.required_by) == ("requires", "torch-tensorrt")
    if gpu_id != "gh200":
        assert plans > 0


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
