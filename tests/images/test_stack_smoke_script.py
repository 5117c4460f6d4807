"""The images' smoke test (images/smoke/smoke.py), run as the image runs it (python smoke.py, in a
subprocess) against stand-in modules on sys.path, so each promise is seen passing and failing,
with and without a GPU (PROVISION_SMOKE_DEVICE names the device node it looks for)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SMOKE = Path(__file__).resolve().parents[2] / "images" / "smoke" / "smoke.py"

PROMISES = {
    "schema": 1,
    "packages": [
        {"id": "pytorch", "distribution": "torch", "module": "torch", "version": "2.5.1"},
        {"id": "deepspeed", "distribution": "deepspeed", "module": "deepspeed", "version": "0.16.4"},
        {"id": "onnxruntime", "distribution": "onnxruntime-gpu", "module": "onnxruntime", "version": "1.20.1"},
    ],
    "torch": {"cudnn_major": 9},
    "onnxruntime": {"providers": ["CUDAExecutionProvider", "TensorrtExecutionProvider"]},
    "deepspeed": {"ops": ["fused_adam", "cpu_adam"]},
}


def stand_ins(root: Path, *, cuda=True, cudnn=90100, providers=None, versions=None, compatible=True, nvcc_ok=True):
    """torch, onnxruntime and deepspeed as small modules with dist-info metadata."""
    providers = providers or ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    versions = {"torch": "2.5.1", "deepspeed": "0.16.4", "onnxruntime_gpu": "1.20.1", **(versions or {})}
    modules = {
        "torch/__init__.py": (
            "from torch import cuda, backends\n__version__ = " + repr(versions["torch"]) + "\n"
            "class version:\n    cuda = '12.4'\n"
        ),
        "torch/cuda.py": f"def is_available():\n    return {cuda!r}\n",
        "torch/backends/__init__.py": "from torch.backends import cudnn\n",
        "torch/backends/cudnn.py": f"def version():\n    return {cudnn!r}\n",
        "onnxruntime/__init__.py": f"def get_available_providers():\n    return {providers!r}\n",
        "deepspeed/__init__.py": "",
        "deepspeed/ops/__init__.py": "",
        "deepspeed/ops/op_builder/__init__.py": "",
        "deepspeed/ops/op_builder/all_ops.py": (
            f"class Op:\n    def is_compatible(self, verbose=True):\n        return {compatible!r}\n"
            "ALL_OPS = {'fused_adam': Op(), 'cpu_adam': Op(), 'async_io': Op()}\n"
        ),
        "deepspeed/ops/op_builder/builder.py": (
            "class CUDAMismatchException(Exception):\n    pass\n"
            "def assert_no_cuda_mismatch(name=''):\n"
            + (
                "    return True\n"
                if nvcc_ok
                else "    raise CUDAMismatchException('Installed CUDA version 12.1 does not match 12.4')\n"
            )
        ),
    }
    for dist, version in versions.items():
        info = root / f"{dist}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        name = dist.replace("_", "-")
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for path, text in modules.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def run(tmp_path: Path, *, gpu: bool, promises=None, **state):
    site = tmp_path / "site"
    stand_ins(site, **state)
    doc = tmp_path / "smoke.json"
    doc.write_text(json.dumps(promises or PROMISES))
    device = tmp_path / "nvidia0"
    if gpu:
        device.write_text("")
    env = {**os.environ, "PYTHONPATH": str(site), "PROVISION_SMOKE_DEVICE": str(device)}
    return subprocess.run(
        [sys.executable, "-S", str(SMOKE), str(doc)], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_a_gpu_host_that_keeps_every_promise_passes(tmp_path):
    r = run(tmp_path, gpu=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped" not in r.stdout.replace("0 skipped", "")
    for line in (
        "ok: import torch",
        "ok: torch 2.5.1",
        "ok: onnxruntime provider CUDAExecutionProvider",
        "ok: onnxruntime provider TensorrtExecutionProvider",
        "ok: torch.cuda.is_available()",
        "ok: cuDNN 90100 (major 9)",
        "ok: deepspeed: nvcc's CUDA matches torch.version.cuda",
        "ok: deepspeed op fused_adam compatible",
    ):
        assert line in r.stdout, (line, r.stdout)
    assert r.stdout.rstrip().endswith("smoke: 0 failed, 0 skipped")


def test_without_a_gpu_it_runs_what_it_can_and_names_what_it_skipped(tmp_path):
    r = run(tmp_path, gpu=False, cuda=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok: import deepspeed" in r.stdout
    assert "ok: onnxruntime provider TensorrtExecutionProvider" in r.stdout
    assert "ok: deepspeed: nvcc's CUDA matches torch.version.cuda" in r.stdout, "nvcc needs no GPU"
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("smoke: 0 failed, 4 skipped: ")
    for skipped in (
        "torch.cuda.is_available()",
        "torch.backends.cudnn.version()",
        "deepspeed op fused_adam compatible",
        "deepspeed op cpu_adam compatible",
    ):
        assert skipped in last
    assert "nvcc" not in last


@pytest.mark.parametrize(
    ("gpu", "state", "says", "failed"),
    [
        (True, {"cuda": False}, "FAIL: torch.cuda.is_available() is False on a host with", 1),
        (True, {"cudnn": 8902}, "FAIL: torch.backends.cudnn.version() is 8902, the plan cuDNN 9", 1),
        (True, {"compatible": False}, "FAIL: deepspeed op fused_adam is not compatible", 2),
        (
            True,
            {"nvcc_ok": False},
            "FAIL: deepspeed's CUDA check: CUDAMismatchException: Installed CUDA version 12.1",
            1,
        ),
        (
            False,
            {"nvcc_ok": False, "cuda": False},
            "FAIL: deepspeed's CUDA check: CUDAMismatchException: Installed CUDA version 12.1",
            1,
        ),
        (True, {"providers": ["CUDAExecutionProvider"]}, "FAIL: onnxruntime lists no TensorrtExecutionProvider", 1),
        (False, {"providers": ["CPUExecutionProvider"]}, "FAIL: onnxruntime lists no CUDAExecutionProvider", 2),
        (False, {"versions": {"deepspeed": "0.16.3"}}, "FAIL: deepspeed 0.16.3 is installed, the plan 0.16.4", 1),
    ],
)
def test_each_broken_promise_fails(tmp_path, gpu, state, says, failed):
    r = run(tmp_path, gpu=gpu, **state)
    assert r.returncode == 1, r.stdout
    assert says in r.stdout
    assert f"smoke: {failed} failed" in r.stdout


def test_a_missing_module_fails_and_the_rest_still_runs(tmp_path):
    promises = json.loads(json.dumps(PROMISES))
    promises["packages"].append(
        {"id": "megatron-core", "distribution": "megatron-core", "module": "megatron.core", "version": "0.9.0"}
    )
    r = run(tmp_path, gpu=True, promises=promises)
    assert r.returncode == 1
    assert "FAIL: import megatron.core: ModuleNotFoundError" in r.stdout
    assert "ok: deepspeed op cpu_adam compatible" in r.stdout


@pytest.mark.parametrize("content", ["{not json", json.dumps({"schema": 2, "packages": []}), json.dumps([1])])
def test_a_bad_promise_document_is_exit_2(tmp_path, content):
    doc = tmp_path / "smoke.json"
    doc.write_text(content)
    r = subprocess.run(
        [sys.executable, "-S", str(SMOKE), str(doc)], capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 2
    assert r.stdout.startswith("error: ")


def deepspeeds_own_check(tmp_path: Path, *, nvcc_release: str, torch_cuda: str) -> subprocess.CompletedProcess:
    """No GPU, the image's nvcc (CUDA_HOME/bin/nvcc printing `nvcc -V`'s release line) and torch's
    version.cuda: DeepSpeed's op builder as the stand-in sdist carries it (stackhouse.DS_BUILDER,
    nvcc found under CUDA_HOME as torch finds it, no minor mismatch accepted)."""
    from stackhouse import DS_BUILDER

    site = tmp_path / "site"
    stand_ins(site, cuda=False)
    (site / "torch" / "__init__.py").write_text(
        f"from torch import cuda, backends\n__version__ = '2.5.1'\nclass version:\n    cuda = {torch_cuda!r}\n"
    )
    (site / "deepspeed/ops/op_builder/builder.py").write_text(DS_BUILDER.format(mismatch_ok={}))
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(
        "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
        f"echo 'Cuda compilation tools, release {nvcc_release}, V{nvcc_release}.105'\n"
    )
    nvcc.chmod(0o755)
    doc = tmp_path / "smoke.json"
    doc.write_text(json.dumps(PROMISES))
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "PROVISION_SMOKE_DEVICE": str(tmp_path / "nvidia0"),
        "CUDA_HOME": str(home),
    }
    return subprocess.run(
        [sys.executable, "-S", str(SMOKE), str(doc)], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_deepspeeds_nvcc_trap_is_caught_without_a_gpu(tmp_path):
    """The issue's nvcc trap, with no GPU: an nvcc of CUDA 12.1 beside a torch built with 12.4 fails
    with DeepSpeed's own message; the op checks, which need a device, are not reached."""
    r = deepspeeds_own_check(tmp_path, nvcc_release="12.1", torch_cuda="12.4")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no GPU: " in r.stdout
    assert (
        "FAIL: deepspeed's CUDA check: CUDAMismatchException: >- DeepSpeed Op Builder: Installed CUDA version "
        "12.1 does not match the version torch was compiled with 12.4" in r.stdout
    )
    assert "smoke: 1 failed, 2 skipped" in r.stdout
    assert "deepspeed op" not in r.stdout


def test_deepspeeds_matching_nvcc_passes_without_a_gpu(tmp_path):
    r = deepspeeds_own_check(tmp_path, nvcc_release="12.4", torch_cuda="12.4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok: deepspeed: nvcc's CUDA matches torch.version.cuda" in r.stdout
    assert "skipped: deepspeed op fused_adam compatible (no GPU)" in r.stdout
    assert "smoke: 0 failed, 4 skipped" in r.stdout
