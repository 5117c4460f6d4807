"""The images' smoke test (images/smoke/smoke.py) on this machine's real GPU (marked gpu; skipped
with the reason without one).

1. The script itself, run with a Python that has PyTorch (this interpreter, or
   PROVISION_SMOKE_PYTHON=/path/to/venv/bin/python), against the promises `provision render` writes
   for the plan of this machine and that torch release: with a GPU nothing may be skipped and every
   promise must hold (CUDA available, the plan's cuDNN major); a promise one cuDNN major off must fail.
2. A built stack image (PROVISION_SMOKE_IMAGE=REF, e.g. built with `provision build --variant
   pytorch` from a plan with --with deepspeed --with onnxruntime), run with the GPU:
   `docker run --rm --gpus all REF python /opt/provision/smoke.py` must pass with nothing skipped.
Both only read: the script imports packages and asks them questions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provision.errors import InputError
from provision.images.render import smoke_promises
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

pytestmark = pytest.mark.gpu

SMOKE = Path(__file__).resolve().parents[2] / "images" / "smoke" / "smoke.py"
TIMEOUT_S = 300


def _torch_python() -> tuple[str, str]:
    """(python, torch version) of the interpreter to run the smoke test with; skips without torch."""
    python = os.environ.get("PROVISION_SMOKE_PYTHON", sys.executable)
    try:
        proc = subprocess.run(
            [python, "-c", "import torch; print(torch.__version__)"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"{python} cannot run: {exc}")
    if proc.returncode != 0:
        pytest.skip(f"no PyTorch in {python} (set PROVISION_SMOKE_PYTHON to a venv with torch)")
    return python, proc.stdout.strip()


def _run(python: str, promises: dict, folder: Path) -> subprocess.CompletedProcess:
    doc = folder / "smoke.json"
    doc.write_text(json.dumps(promises))
    return subprocess.run(
        [python, str(SMOKE), str(doc)], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def test_smoke_script_keeps_the_plans_promises_on_this_gpu(real_matrix, target, tmp_path):
    python, installed = _torch_python()
    os_id, gpu_id = target
    release = installed.split("+")[0]
    try:
        plan = resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu_id, framework=f"pytorch=={release}"))
    except InputError as exc:
        pytest.skip(f"the installed torch {installed} does not plan for {gpu_id} on {os_id}: {exc.message}")
    if plan.cudnn is None:
        pytest.skip(f"the plan of torch {release} names no cuDNN")
    promises = json.loads(smoke_promises(plan, plan.framework, (), {"torch": installed}))
    r = _run(python, promises, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped:" not in r.stdout, r.stdout
    assert "ok: torch.cuda.is_available()" in r.stdout
    promises["torch"]["cudnn_major"] += 1
    broken = _run(python, promises, tmp_path)
    assert broken.returncode == 1, broken.stdout
    assert "FAIL: torch.backends.cudnn.version()" in broken.stdout


def test_a_built_stack_image_passes_its_smoke_test_on_this_gpu(live):
    image = os.environ.get("PROVISION_SMOKE_IMAGE")
    if not image:
        pytest.skip("set PROVISION_SMOKE_IMAGE to a rendered and built stack image to run its smoke test")
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI on this machine")
    r = subprocess.run(
        [docker, "run", "--rm", "--gpus", "all", image, "python", "/opt/provision/smoke.py"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "skipped:" not in r.stdout, r.stdout
    assert r.stdout.rstrip().endswith("smoke: 0 failed, 0 skipped")
