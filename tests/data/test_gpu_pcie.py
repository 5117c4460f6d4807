"""Issue 23: the H200 SXM and the B200 carry their host interface, read from the recorded MLCommons
system descriptions (tests/fixtures/refresh/gpu-specs, SOURCE.txt)."""

from __future__ import annotations

import re

import pytest
from support import ROOT

RECORDED = ROOT / "tests" / "fixtures" / "refresh" / "gpu-specs"
# x16 link bandwidth both ways by generation: gpus.yaml's header convention
X16_GBS = {3: 32, 4: 64, 5: 128}


def host_link(name: str) -> tuple[str, int]:
    """(the accelerator model, its PCIe generation) of a recorded system description's opening."""
    text = (RECORDED / name).read_text()
    model = re.search(r'"accelerator_model_name": "([^"]+)"', text).group(1)
    gen = re.search(r'"accelerator_host_interconnect": "PCIe Gen(\d) x16"', text).group(1)
    return model, int(gen)


@pytest.mark.parametrize(
    ("gpu", "recorded", "source"),
    [
        ("h200", "H200-SXM-141GBx8_TRT_MaxQ.json.head", "mlperf-nvidia"),
        ("b200", "nebius_b200_n1.json.head", "mlperf-b200-host"),
    ],
)
def test_host_interface_from_the_recorded_system_description(real_matrix, gpu, recorded, source):
    g = real_matrix.gpu(gpu)
    model, gen = host_link(recorded)
    assert f"{g.memory_gb:g}GB" in model  # the description is of this board: H200-SXM-141GB, B200-SXM-180GB
    assert (g.pcie_generation, g.pcie_bandwidth_gbs) == (gen, X16_GBS[gen])
    assert source in g.sources
    assert source in (RECORDED / "SOURCE.txt").read_text()
