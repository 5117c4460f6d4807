"""Tests marked gpu run against this machine's real NVIDIA GPU, read-only. Without one (no
nvidia-smi, or one that does not answer `nvidia-smi -L`), each is skipped with the reason.

PROVISION_GPU_CAPTURES=DIR keeps what the tests read in DIR (tests/gpu/capture.sh sets it);
otherwise it goes to a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from livegpu import SMI_TIMEOUT, Ran, plan_target, probe, run


@pytest.fixture(scope="session")
def live(real_matrix):
    found, reason = probe(real_matrix)
    if found is None:
        pytest.skip(reason)
    return found


@pytest.fixture(scope="session")
def target(real_matrix, live):
    """(os id, gpu id) of this machine in the catalogue; skips when either is not catalogued."""
    try:
        text = Path("/etc/os-release").read_text(encoding="utf-8")
    except OSError as exc:
        pytest.skip(f"/etc/os-release cannot be read ({exc.strerror}): no OS to plan for")
    found, reason = plan_target(real_matrix, live, text)
    if found is None:
        pytest.skip(reason)
    return found


@pytest.fixture(scope="session")
def captures(tmp_path_factory, live) -> Path:
    chosen = os.environ.get("PROVISION_GPU_CAPTURES")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("gpu-captures")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def smi(live):
    """Run the nvidia-smi that was found with read-only arguments, under a timeout."""

    def call(*args: str, timeout: float = SMI_TIMEOUT) -> Ran:
        return run([live.smi, *args], timeout)

    return call
