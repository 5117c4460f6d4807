"""The stack images' render sweep (issue 24 item 3), beside test_render.py's sweep of the framework
images: plans through the real resolver on the live catalogue, every applicable variant rendered
with a committed lock that agrees with the plan, each distinct Dockerfile linted once by hadolint,
and the build stage held to the plan: present exactly when the image builds sdists, FROM the tag
pin-base pins for it, and the runtime stage builds nothing."""

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stack_locks import agreeing_stack_lock

from provision.errors import InputError
from provision.images import pin
from provision.images.pylock import source_builds
from provision.images.render import build_env, render_image, variant_stack, variants
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

HADOLINT = Path(sys.executable).parent / "hadolint"
CONFIG = Path(__file__).resolve().parents[2] / ".hadolint.yaml"

# apt (Ubuntu 22.04 and 24.04) and dnf (Rocky 9 and RHEL 9's UBI) image families
OSES = ("ubuntu22.04", "ubuntu24.04", "rocky9", "rhel9")
# Hopper, Ada, Ampere, Volta (SM 7.0: TensorRT >= 10.5 refuses it) and Grace Hopper (aarch64)
GPUS = ("h100-sxm", "l4", "a100-sxm4-80gb", "v100-sxm2-32gb", "gh200")
STACK_PACKAGES = ("onnxruntime", "tensorrt", "torch-tensorrt", "deepspeed", "megatron-core", "transformer-engine")
REQUESTS = (
    [("onnxruntime", ()), ("tensorrt", ())] + [("pytorch", (name,)) for name in STACK_PACKAGES] + [("pytorch", ())]
)


def stages(dockerfile: str) -> list[str]:
    """The Dockerfile's stages, each from its FROM line on."""
    parts = dockerfile.split("\nFROM ")
    return ["FROM " + part for part in parts[1:]]


def check_stages(name: str, plan, variant: str, r, sdists: tuple[str, ...]) -> tuple[str, ...]:
    """The build stage is there exactly when the image builds sdists, FROM the tag pin-base pins for
    it; the runtime stage starts FROM the image's base and builds nothing. Returns the sdists."""
    parts = stages(r.dockerfile)
    if sdists:
        assert len(parts) == 2, name
        build, runtime = parts
        assert build.startswith(f"FROM {r.build_from} AS build\n"), name
        assert r.build_from == pin.build_base_tag(plan, variant), "pin-base pins what the stage starts FROM"
        assert r.build_from in (plan.images.get("devel"), plan.images.get("cudnn-devel")), name
        assert "pip wheel " in build
        assert "--no-build-isolation" in build
        assert r.files["sdists.lock"].count("==") == len(sdists), name
        for key, value in build_env(sdists).items():  # TensorRT's frontend: no pip inside the build
            assert f"\nENV {key}={value}\n" in build, name
            assert key not in runtime, name
    else:
        assert len(parts) == 1, name
        assert r.build_from is None
        assert pin.build_base_tag(plan, variant) is None
        assert "sdists.lock" not in r.files
        (runtime,) = parts
    assert runtime.startswith(f"FROM {r.from_ref}\n")
    assert r.from_ref == pin.base_tag(plan, variant)
    for word in ("pip wheel", "--no-binary", "--no-build-isolation", "setup.py", "nvcc -", "make "):
        assert word not in runtime, (name, word)
    for line in runtime.split("\n"):
        if "pip install" in line:
            assert "--require-hashes" in line, name
            assert "--only-binary=:all:" in line or "--no-index" in line, name
    return sdists


def sweep(matrix):
    """Every (OS, GPU, request) of the bounded set: the plan, or the refusal's message."""
    for os_id in OSES:
        for gpu in GPUS:
            for framework, with_ in REQUESTS:
                request = PlanRequest(os=os_id, gpu=gpu, framework=framework, with_=with_)
                name = f"{os_id}-{gpu}-{framework}{''.join('+' + w for w in with_)}"
                try:
                    yield name, resolve(matrix, request, suggest=False)
                except InputError as exc:
                    yield name, exc


def test_stack_sweep_renders_lints_and_builds_sdists_only_in_the_build_stage(real_matrix, tmp_path):
    """4 OS (apt and dnf) x 5 GPUs x 9 requests (--framework onnxruntime, --framework tensorrt,
    --framework pytorch alone and with each of the 6 stack packages) = 180 requests through the
    resolver (6 refused today, counted); every applicable variant of each plan rendered (522
    Dockerfiles with base and devel, 78 of them with a build stage), the 170 distinct ones linted
    in one hadolint run: about 20 s on a 2-core machine, held under 60 s."""
    started = time.monotonic()
    known = variants()
    locks = tmp_path / "locks"
    locks.mkdir()
    distinct: dict[str, Path] = {}
    rendered = refused = built = 0
    kinds: set[str] = set()
    for name, plan in sweep(real_matrix):
        if isinstance(plan, InputError):
            refused += 1
            assert plan.exit_code == 2, (name, plan.message)
            continue
        for variant, spec in known.items():
            stack = variant_stack(spec, plan)
            needs = spec.get("framework")
            if needs and not stack and (plan.framework is None or plan.framework.name != needs):
                continue  # not this plan's variant: test_stack_render refuses it
            lock = (
                agreeing_stack_lock(plan, stack, locks)
                if (needs or variant == "devel") and (stack or plan.framework)
                else None
            )
            try:
                r = render_image(plan, variant, lock_file=lock)
            except InputError as exc:  # no interpreter on the image's OS for the stack's Python ranges
                assert "Requires-Python" in exc.message, (name, variant, exc.message)
                refused += 1
                continue
            rendered += 1
            sdists = check_stages(f"{name}-{variant}", plan, variant, r, source_builds(stack))
            built += bool(sdists)
            kinds.update(sdists)
            digest = hashlib.sha256(r.dockerfile.encode()).hexdigest()
            if digest not in distinct:
                distinct[digest] = tmp_path / f"{len(distinct):04d}-{name}-{variant}.Dockerfile"
                distinct[digest].write_text(r.dockerfile)
    proc = subprocess.run(
        [str(HADOLINT), "--config", str(CONFIG), *map(str, distinct.values())],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[:3000]
    assert proc.stdout == "", proc.stdout[:3000]
    elapsed = time.monotonic() - started
    print(f"rendered {rendered}, refused {refused}, {built} with a build stage, linted {len(distinct)} distinct")
    # what the sweep must reach: stacks with and without sdists, DeepSpeed's and TensorRT's among them
    assert rendered > 150, rendered
    assert len(distinct) > 40, len(distinct)
    assert built > 20, built
    assert {"deepspeed", "transformer-engine-torch"} <= kinds, kinds
    assert any(k.startswith("tensorrt-cu") for k in kinds), kinds
    assert refused > 0, "V100 with TensorRT >= 10.5 and the like: refusals are counted"
    assert elapsed < 60, elapsed


@pytest.mark.parametrize("variant", ["tensorrt", "pytorch"])
def test_a_libs_stub_is_never_built(real_matrix, variant):
    """TensorRT's -libs is an sdist whose build downloads the real wheel (wheel_stub): no sweep
    image builds it; the lock takes NVIDIA's wheel from the catalogue's library index."""
    request = PlanRequest(
        os="ubuntu22.04",
        gpu="h100-sxm",
        framework="tensorrt" if variant == "tensorrt" else "pytorch",
        with_=() if variant == "tensorrt" else ("tensorrt",),
    )
    plan = resolve(real_matrix, request)
    trt = next(p for p in plan.stack if p.id == "tensorrt")
    libs = [n for n, kind in trt.distributions if n.endswith("-libs")]
    assert libs
    assert all(kind == "sdist" for n, kind in trt.distributions if n in libs)
    assert not set(libs) & set(source_builds(plan.stack))
