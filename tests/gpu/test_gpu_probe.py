"""The GPU tests' detection and skip logic, with a fake nvidia-smi on PATH printing real captures
(not marked gpu: this runs everywhere)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from livegpu import plan_target, probe
from support import ROOT, SEVEN_SLICE_LGIPP

from provision.matrix.detect import catalogue_gpu

DATA = Path(__file__).parent / "data"
DOCTOR = ROOT / "tests" / "fixtures" / "doctor"
H200_QUERY = DATA / "query-gpu__h200__gpu-exporter.csv"
H200_LIST = DOCTOR / "list__h200-mig.txt"
UBUNTU_2204 = 'NAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\nPRETTY_NAME="Ubuntu 22.04.5 LTS"\n'
ROCKY_94 = 'NAME="Rocky Linux"\nVERSION_ID="9.4"\nID="rocky"\nPRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"\n'
ALPINE = 'NAME="Alpine Linux"\nID=alpine\nVERSION_ID=3.20.0\nPRETTY_NAME="Alpine Linux v3.20"\n'


def fake_smi(tmp_path: Path, listing: str, query: str = "", rc: int = 0, hang: bool = False) -> str:
    """A directory holding an nvidia-smi that answers -L and --query-gpu from files; the PATH to use."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "L.txt").write_text(listing, encoding="utf-8")
    (tmp_path / "query.csv").write_text(query, encoding="utf-8")
    body = "trap '' TERM; sleep 60\n" if hang else ""
    script = bindir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        + body
        + f'case "$1" in\n  -L) cat "{tmp_path}/L.txt"; exit {rc} ;;\n'
        + f'  --query-gpu=*) cat "{tmp_path}/query.csv" ;;\n'
        + '  *) echo "fake nvidia-smi: unexpected $*" >&2; exit 9 ;;\nesac\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    return f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin"


def test_probe_finds_and_maps_an_h200(tmp_path, real_matrix):
    path = fake_smi(tmp_path, H200_LIST.read_text(encoding="utf-8"), H200_QUERY.read_text(encoding="utf-8"))
    live, reason = probe(real_matrix, path=path)
    assert reason == ""
    assert live.smi == str(tmp_path / "bin" / "nvidia-smi")
    assert [(g.index, g.name, g.device_id, g.catalogue_id) for g in live.gpus] == [(0, "NVIDIA H200", "0x2335", "h200")]
    assert plan_target(real_matrix, live, UBUNTU_2204) == (("ubuntu22.04", "h200"), "")
    assert plan_target(real_matrix, live, ROCKY_94) == (("rocky9", "h200"), "")
    target, reason = plan_target(real_matrix, live, ALPINE)
    assert target is None
    assert reason == "Alpine Linux v3.20 is not in compat/os.yaml: no plan to verify against"


def test_probe_names_an_uncatalogued_gpu(tmp_path, real_matrix):
    unused = next(f"{n:04X}" for n in range(0x1000, 0x10000) if catalogue_gpu(real_matrix, f"0x{n:04X}") is None)
    query = H200_QUERY.read_text(encoding="utf-8").replace("0x233510DE", f"0x{unused}10DE", 1)
    live, _ = probe(real_matrix, path=fake_smi(tmp_path, H200_LIST.read_text(encoding="utf-8"), query))
    assert live.gpus[0].catalogue_id is None
    target, reason = plan_target(real_matrix, live, UBUNTU_2204)
    assert target is None
    assert reason == f"NVIDIA H200 (PCI device 0x{unused}) is not in compat/gpus.yaml"


@pytest.mark.parametrize(
    ("listing", "rc", "reason"),
    [
        ("", None, "no NVIDIA GPU: nvidia-smi is not on PATH"),
        (
            (DOCTOR / "error__couldnt-communicate.txt").read_text(encoding="utf-8"),
            9,
            "no usable NVIDIA GPU: nvidia-smi -L failed (exit 9): NVIDIA-SMI has failed because it couldn't "
            "communicate with the NVIDIA driver.",
        ),
        ((DOCTOR / "error__no-devices.txt").read_text(encoding="utf-8"), 0, "no NVIDIA GPU: nvidia-smi -L lists none"),
    ],
    ids=["absent", "driver-not-loaded", "no-devices"],
)
def test_probe_skip_reasons(tmp_path, real_matrix, listing, rc, reason):
    if rc is None:
        (tmp_path / "empty").mkdir()
        path = str(tmp_path / "empty")
    else:
        path = fake_smi(tmp_path, listing, rc=rc)
    live, why = probe(real_matrix, path=path)
    assert live is None
    assert why.startswith(reason), why


def test_probe_gives_up_on_a_hung_nvidia_smi(tmp_path, real_matrix):
    path = fake_smi(tmp_path, H200_LIST.read_text(encoding="utf-8"), hang=True)
    start = time.monotonic()
    live, why = probe(real_matrix, path=path, timeout=1)
    assert live is None
    assert why == "no usable NVIDIA GPU: nvidia-smi -L did not answer in 1 s"
    assert time.monotonic() - start < 10  # the process group was killed, the SIGTERM-proof sleep too


@pytest.mark.slow
def test_gpu_tests_skip_with_the_reason_without_a_gpu(tmp_path):
    """`pytest -m gpu tests/gpu` on a machine without nvidia-smi: every GPU test is skipped, with
    the reason, and none fails or errors."""
    (tmp_path / "empty").mkdir()
    env = {**os.environ, "PATH": str(tmp_path / "empty")}
    env.pop("PROVISION_GPU_CAPTURES", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-m", "gpu", "-p", "no:cacheprovider", "tests/gpu"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    summary = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " skipped" in summary, summary
    assert not any(word in summary for word in ("passed", "failed", "error")), summary
    assert "no NVIDIA GPU: nvidia-smi is not on PATH" in proc.stdout


# `nvidia-smi mig -lgipp` on an A100-SXM4-40GB, as printed in NVIDIA's MIG user guide.
A100_LGIPP = SEVEN_SLICE_LGIPP


def fake_a100(tmp_path: Path, lgipp: str) -> str:
    """An nvidia-smi for an A100-SXM4-40GB with MIG on: -q -x and mig -lgip are real captures
    (tests/fixtures/doctor), the --query-gpu answers carry the same values."""
    (tmp_path / "lgipp.txt").write_text(lgipp, encoding="utf-8")
    answers = {
        "-L": 'echo "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-27b94a00-ed54-5c24-b1fd-1054085de32a)"',
        "--query-gpu=index,name,pci.device_id --format=csv": (
            "printf 'index, name, pci.device_id\\n0, NVIDIA A100-SXM4-40GB, 0x20B010DE\\n'"
        ),
        "--query-gpu=index,name,pci.bus_id,*": (
            "printf 'index, name, pci.bus_id, driver_version, persistence_mode, mig.mode.current, mig.mode.pending\\n"
            "0, NVIDIA A100-SXM4-40GB, 00000000:00:04.0, 510.47.03, Disabled, Enabled, Enabled\\n'"
        ),
        "-q -x": f'cat "{DOCTOR / "q-x__a100__mig-enabled.xml"}"',
        "mig -lgip": f'cat "{DOCTOR / "mig-lgip__a100.txt"}"',
        "mig -lgipp": f'cat "{tmp_path / "lgipp.txt"}"',
    }
    bindir = tmp_path / "bin"
    bindir.mkdir()
    cases = "".join(
        f'  "{k}") {v} ;;\n' if "*" not in k else f"  {k.replace(',*', ',')}*) {v} ;;\n" for k, v in answers.items()
    )
    script = bindir / "nvidia-smi"
    script.write_text(
        f'#!/bin/sh\ncase "$*" in\n{cases}  *) echo "fake nvidia-smi: unexpected $*" >&2; exit 9 ;;\nesac\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    return f"{bindir}{os.pathsep}{os.environ['PATH']}"


def run_gpu_tests(path: str, captures: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path, "PROVISION_GPU_CAPTURES": str(captures)}
    select = "q_x or mig_profiles or gpus_lists or mig_plan"  # those that read only nvidia-smi
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-k", select, "-p", "no:cacheprovider", "tests/gpu"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_gpu_tests_pass_on_a_fake_a100_and_catch_a_wrong_placement(tmp_path):
    """The GPU tests' own code, end to end, on an nvidia-smi serving real A100 captures: they pass
    and keep their captures; with one placement changed, the catalogue comparison fails naming it."""
    good = tmp_path / "good"
    good.mkdir()
    proc = run_gpu_tests(fake_a100(good, A100_LGIPP), good / "captures")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "4 passed" in proc.stdout.strip().splitlines()[-1]
    kept = sorted(p.name for p in (good / "captures").iterdir())
    assert {"q-x.xml", "query-gpu.csv", "mig-lgip.txt", "mig-lgipp.txt", "mig-plan.json"} <= set(kept), kept

    bad = tmp_path / "bad"
    bad.mkdir()
    proc = run_gpu_tests(fake_a100(bad, A100_LGIPP.replace("{0,4}:4", "{0,2}:4")), bad / "captures")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "GPU 0: 3g.20gb (id 9) places at {0,2}:4; a100-40gb says {0,4}:4" in proc.stdout
    assert "1 failed, 3 passed" in proc.stdout.strip().splitlines()[-1]
