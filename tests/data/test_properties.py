"""Property tests over the real catalogue: every plan satisfies every rule; every refusal explains."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rules import violations
from support import COMPAT

from provision.errors import InputError, NoCompatibleStack
from provision.matrix.loader import load_matrix
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.versions import major_minor

MATRIX = load_matrix(COMPAT)
OS_IDS = [o.id for o in MATRIX.os_releases]
GPU_IDS = [g.id for g in MATRIX.gpus] + [g.id for g in MATRIX.gpu_groups]
BRANCHES = [str(b.branch) for b in MATRIX.drivers] + [str(r.version) for b in MATRIX.drivers for r in b.releases[:2]]
CUDAS = sorted({major_minor(c.version) for c in MATRIX.cuda}) + [str(c.version) for c in MATRIX.cuda[:6]]
CUDNNS = ["8", "9", "9.1", "9.10", "8.9.6.50"]
FRAMEWORKS = [f"{fw.id}=={r.version}" for fw in MATRIX.frameworks for r in fw.releases] + ["pytorch", "tensorflow"]
# the images' OS: every published nvidia/cuda suffix and every host OS id (its own images)
IMAGE_OSES = sorted({o for i in MATRIX.images for o in i.os}) + OS_IDS
# platforms by id and alias; with one, --gpu may be left out (the platform implies it, or refuses)
PLATFORMS = [name for p in MATRIX.platforms for name in (p.id, *p.aliases)]
# GPUs the platforms list, drawn more often beside a platform so that most pairings resolve
PLATFORM_GPUS = sorted({g for p in MATRIX.platforms for g in p.gpus})
# stack packages (--with): bare ids and each package's two newest releases; the walk over every
# catalogued combination is tests/data/test_stack_combinations.py, this draws them beside every other pin
WITH = [s.id for s in MATRIX.stacks] + [f"{s.id}=={r.version}" for s in MATRIX.stacks for r in s.releases[:2]]

requests = st.builds(
    PlanRequest,
    os=st.sampled_from(OS_IDS),
    gpu=st.sampled_from(GPU_IDS) | st.sampled_from(PLATFORM_GPUS) | st.none(),
    platform=st.none() | st.sampled_from(PLATFORMS),
    driver=st.none() | st.sampled_from(BRANCHES),
    cuda=st.none() | st.sampled_from(CUDAS),
    cudnn=st.none() | st.sampled_from(CUDNNS),
    framework=st.none() | st.sampled_from(FRAMEWORKS),
    policy=st.sampled_from(["lts", "latest"]),
    image_os=st.none() | st.sampled_from(IMAGE_OSES),
    host_only=st.booleans(),
    with_=st.just(()) | st.lists(st.sampled_from(WITH), max_size=2).map(tuple),
    mig=st.none()
    | st.sampled_from(
        [
            "7g.80gb",
            "3g.40gb,2g.20gb,2x1g.10gb",
            "4g.40gb,3g.40gb",
            "3g.40gb,3g.40gb,1g.10gb",
            "1g.5gb",
            "2x3g.20gb",
            "nonsense",
        ]
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests)
def test_plans_obey_every_rule_and_refusals_explain(request):
    try:
        plan = resolve(MATRIX, request, suggest=False)
    except NoCompatibleStack as exc:
        assert exc.eliminations, "a refusal without a single eliminated candidate"
        assert all(c and why for c, why in exc.eliminations)
        assert exc.exit_code == 2
        return
    except InputError as exc:  # groups whose members need different setups; MIG layouts that cannot be
        if request.mig and ("MIG" in exc.message or "does not fit" in exc.message):
            assert exc.hint, exc.message
            return
        if request.host_only and request.cuda and exc.message.startswith(f"--host-only --cuda {request.cuda}"):
            # no candidate driver runs that CUDA's images on the GPU (or no such release): named, with a hint
            assert exc.hint, exc.message
            return
        if request.with_ and (exc.message.startswith("--with") or "named twice" in exc.message):
            # --with without a framework, or beside one its package cannot join, or a package named twice
            assert exc.hint, exc.message
            return
        if request.host_only and "--host-only plans no image" in exc.message:
            assert any((request.cuda, request.cudnn, request.framework, request.image_os, request.with_)), exc.message
            assert exc.hint
            return
        if request.gpu is None and request.platform is None:
            assert exc.message == "no GPU given", exc.message
            assert "--platform" in exc.hint
            return
        if request.platform is not None and exc.message.startswith(f"platform {MATRIX.platform(request.platform).id} "):
            # a GPU the platform does not take, or one of several it leaves to --gpu: the hint lists its GPUs
            assert "--gpu" in exc.hint, exc.hint
            return
        assert "differ in" in exc.message
        assert exc.hint
        return
    assert violations(MATRIX, plan) == [], request


@settings(max_examples=60, deadline=None)
@given(requests)
def test_refusal_hints_resolve(request):
    try:
        resolve(MATRIX, request, suggest=False)
        return
    except (NoCompatibleStack, InputError):
        pass
    try:
        resolve(MATRIX, request)
    except NoCompatibleStack as exc:
        assert exc.hint
        if exc.hint.startswith("try "):
            assert "gives driver" in exc.hint
    except InputError:
        pass
