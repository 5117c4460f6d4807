"""A stack image built for real from its rendered Dockerfile (tests marked docker): PyTorch with
DeepSpeed (an sdist, built in the image's build stage with isolation off against the locked torch)
and ONNX Runtime, on the suite's local Debian base and a test index on 127.0.0.1.

The index (tests/images/stackhouse.py) serves stand-ins whose metadata mirrors the catalogue's rows:
the frameworks' wheels (wheelhouse, with an importable torch), ONNX Runtime's wheels, DeepSpeed's
sdists, a setuptools that builds wheels, and what the rows require besides. The base stands in for
the plan's devel image: the local Debian base (as in test_images_docker.py, the same engine and
cached base) with an nvcc that reports the plan's CUDA where NVIDIA's devel images keep it
(/usr/local/cuda/bin, on PATH), and pip pointed at the test index (PIP_INDEX_URL), as a site's mirror
of nvidia/cuda points pip at its package mirror. The smoke test then runs in the container with no
GPU: imports, versions and DeepSpeed's nvcc against torch.version.cuda pass, and it says what it skipped.
"""

import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "images"))  # stackhouse, wheelhouse

pytestmark = [pytest.mark.docker]

REQUEST = ("--os", "ubuntu22.04", "--gpu", "a100-pcie", "--framework", "pytorch")
WITH = ("deepspeed", "onnxruntime")


@pytest.fixture(scope="module")
def engine():
    from harness import engine as eng

    return eng.ensure_engine()  # the engine test_images_docker.py uses: started once, shared


@pytest.fixture(scope="module")
def local_base(engine):
    from harness import rootfs

    return rootfs.image(engine, "bookworm-minbase", trust_host_ca=True)  # cached: the same base image


@pytest.fixture(scope="module")
def stack_index(tmp_path_factory):
    from stackhouse import build_stack_index
    from wheelhouse import serve

    root = tmp_path_factory.mktemp("stack-index")
    build_stack_index(root)
    with serve(root) as url:
        yield url


@pytest.fixture
def repo(engine):
    name = f"provision-test/stack-{secrets.token_hex(4)}"
    yield name
    for image in engine.images.list(name=name):
        for tag in image.tags:
            engine.images.remove(tag, force=True)


def provision(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=1800, check=False, env=env
    )


def devel_standin(engine, local_base: str, cuda: str, index: str, folder: Path) -> str:
    """The local base with an nvcc of `cuda` where nvidia/cuda's devel images have theirs, and pip
    pointed at the test index: the plan's devel image, as far as building and running DeepSpeed asks."""
    major_minor = ".".join(cuda.split(".")[:2])
    (folder / "nvcc").write_text(
        "#!/bin/sh\n# stand-in for nvcc -V of the plan's CUDA (tests/integration/test_images_stack_docker.py)\n"
        f"echo 'nvcc: NVIDIA (R) Cuda compiler driver'\necho 'Cuda compilation tools, release {major_minor}, V{cuda}'\n"
    )
    (folder / "nvcc").chmod(0o755)  # COPY keeps the mode (the SDK's builder takes no --chmod)
    (folder / "Dockerfile").write_text(
        f"FROM {local_base}\n"
        "COPY nvcc /usr/local/cuda/bin/nvcc\n"
        "ENV PATH=/usr/local/cuda/bin:$PATH\n"
        f"ENV PIP_INDEX_URL={index}/simple\n"
    )
    tag = f"provision-test/devel-standin:{secrets.token_hex(4)}"
    engine.images.build(path=str(folder), tag=tag, rm=True, network_mode="host")
    return tag


def sh(engine, image: str, script: str) -> tuple[int, str]:
    """Run `script` in a container of `image`; its exit status and output (stdout and stderr)."""
    container = engine.containers.run(image, ["sh", "-c", script], detach=True)
    try:
        status = container.wait(timeout=300)["StatusCode"]
        return status, container.logs().decode()
    finally:
        container.remove(force=True)


def test_stack_image_builds_its_sdists_and_passes_its_smoke_test(engine, local_base, stack_index, repo, tmp_path):
    started = time.monotonic()
    env = {**os.environ, "PROVISION_INDEX_URL": f"{stack_index}/simple", "UV_CACHE_DIR": str(tmp_path / "uv")}
    plan = tmp_path / "plan.lock.json"
    args = [a for name in WITH for a in ("--with", name)]
    proc = provision("plan", *REQUEST, *args, "--lock", str(plan), "--format", "json", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(plan.read_text())
    assert {p["id"] for p in doc["stack"]} == set(WITH)
    assert doc["base_image"] == doc["images"]["devel"], "DeepSpeed compiles its ops at run time: a devel base"
    context = tmp_path / "standin"
    context.mkdir()
    base = devel_standin(engine, local_base, doc["cuda"]["version"], stack_index, context)
    lock = tmp_path / "image.lock.json"
    try:
        build = ("build", "--plan", str(plan), "--variant", "pytorch", "--base-image", base, "--tag", repo)
        proc = provision(*build, "--image-lock", str(lock), env=env)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        built = time.monotonic()
        assert f"FROM {base} AS build" in proc.stdout, "the sdist build stage starts from the devel image"
        assert "--no-build-isolation" in proc.stdout
        image_lock = json.loads(lock.read_text())
        image_id = image_lock["image_id"]
        # the build stage's base is recorded beside the image's (a local stand-in: no registry digest)
        assert image_lock["build_base"] == {"image": base, "digest": None}, image_lock
        check_smoke_test(engine, image_id, doc)
        check_deepspeed_built_here(engine, image_id, doc)
        check_no_build_leftovers(engine, image_id, doc)
        print(f"stack image: planned and built in {built - started:.0f} s, checked in {time.monotonic() - built:.0f} s")
    finally:
        engine.images.remove(base, force=True)


def check_smoke_test(engine, image_id: str, doc: dict) -> None:
    """The image's smoke test passes its imports and versions, and says what it skipped (no GPU)."""
    status, out = sh(engine, image_id, "python /opt/provision/smoke.py")
    assert status == 0, out
    assert "no GPU:" in out
    for package in doc["stack"]:
        assert f"ok: {package['pip']} {package['install']}" in out, out
    assert f"ok: torch {doc['framework']['version']}" in out, out
    for module in ("torch", "deepspeed", "onnxruntime"):
        assert f"ok: import {module}" in out, out
    assert "ok: onnxruntime provider CUDAExecutionProvider" in out, out
    assert "skipped: torch.cuda.is_available() (no GPU" in out, out
    assert "skipped: deepspeed op fused_adam compatible (no GPU)" in out, out
    # DeepSpeed's nvcc-vs-torch check needs no GPU: it runs against the image's nvcc
    assert "ok: deepspeed: nvcc's CUDA matches torch.version.cuda" in out, out
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("smoke: 0 failed, "), summary
    assert "torch.cuda.is_available()" in summary, "the summary names what it skipped"


def check_deepspeed_built_here(engine, image_id: str, doc: dict) -> None:
    """DeepSpeed is the wheel the build stage built against the locked torch, and its ops are
    compatible with the image's nvcc (the plan's devel CUDA is the torch build's)."""
    status, out = sh(
        engine,
        image_id,
        "python -c \"import deepspeed, torch; print(deepspeed.torch_info['version'], "
        "deepspeed.torch_info['cuda_version'], torch.version.cuda)\"; ds_report; "
        "grep -h Generator /opt/venv/lib/python*/site-packages/deepspeed-*.dist-info/WHEEL",
    )
    assert status == 0, out
    minor = ".".join(doc["framework"]["version"].split(".")[:2])
    assert out.splitlines()[0].split() == [minor, doc["framework"]["cuda"], doc["framework"]["cuda"]], out
    assert out.count("[OKAY]") >= 2, out
    assert "[WARNING]" not in out, out
    assert "Generator: setuptools-stand-in" in out, "built from the sdist in the image's build stage"


def check_no_build_leftovers(engine, image_id: str, doc: dict) -> None:
    """Nothing of the build stage is in the runtime image: no sdist, lock, built wheel, build folder
    or pip cache, no layer of the build stage in its history, and none of the packages only the
    sdist's build needed."""
    sdists = [name for p in doc["stack"] for name, kind in p["distributions"] if kind == "sdist"]
    assert sdists, "the plan builds an sdist"
    patterns = [re.sub(r"[-_.]+", "[-_.]", n) for n in sdists]
    names = " ".join(f"-o -name '{p}-*.{ext}'" for p in patterns for ext in ("tar.gz", "whl", "egg-info"))
    script = (
        "ls -A /tmp; "  # the build stage's folders (/tmp/lock, /tmp/wheels) and pip's build folders
        f"find / -xdev \\( -name sdists.lock -o -name wheels.lock -o -name build.lock -o -name built.lock -o -name hash_wheels.py {names} "
        "-o -name 'pip-*-build*' \\) -not -path '/proc/*' -print 2>/dev/null; "
        "for d in /root/.cache/pip /home/app/.cache/pip; do test ! -e $d || echo $d; done"
    )
    status, out = sh(engine, image_id, script)
    assert status == 0, out
    assert out.strip() == "", f"build leftovers in the runtime image:\n{out}"
    history = engine.api.history(image_id)
    assert not any("AS build" in (layer.get("CreatedBy") or "") for layer in history)
    # what only the sdist's build needed (build.lock: the locked setuptools and wheel) stayed in the
    # build stage; a venv's own bundled setuptools (ensurepip's, Python < 3.12) is not the lock's
    from stackhouse import SETUPTOOLS

    status, out = sh(engine, image_id, "python -m pip list --format=freeze --disable-pip-version-check")
    assert status == 0, out
    installed = dict(line.split("==", 1) for line in out.split() if "==" in line)
    assert "wheel" not in installed, out
    assert installed.get("setuptools") != SETUPTOOLS, out
