"""compat/platforms.yaml against the real captures it rests on (tests/fixtures/platforms, each with a
.source.txt naming where it was published): the DMI strings a platform matches are substrings of
what a real machine prints, and the `nvidia-smi topo -m` relation and GPU count it expects are what
a real board of that kind shows."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from support import COMPAT

from provision.matrix.loader import load_matrix

CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "platforms"
MATRIX = load_matrix(COMPAT)


def dmidecode_type1(name: str) -> dict[str, str]:
    """`dmidecode -t 1` System Information as {field: value}."""
    fields = {}
    for line in (CAPTURES / name).read_text().splitlines():
        m = re.match(r"^\t([A-Za-z ]+): (.*?)\s*$", line)
        if m:
            fields[m[1]] = m[2]
    return fields


def topo_pairs(name: str) -> tuple[int, set[str]]:
    """(GPU count, the relations between every two distinct GPUs) of an `nvidia-smi topo -m` matrix."""
    rows = {}
    for line in (CAPTURES / name).read_text().splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"GPU\d+", cells[0]) and len(cells) > 1 and not re.fullmatch(r"GPU\d+", cells[1]):
            rows[int(cells[0][3:])] = cells[1:]
    n = len(rows)
    assert sorted(rows) == list(range(n)), name
    for i, cells in rows.items():
        assert cells[i] == "X", (name, i)  # the diagonal: the columns are read in GPU order
    return n, {rows[i][j] for i, j in itertools.permutations(range(n), 2)}


def test_every_capture_names_its_source():
    captures = sorted(p for p in CAPTURES.iterdir() if not p.name.endswith(".source.txt"))
    assert len(captures) >= 6
    for path in captures:
        source = path.with_name(path.name + ".source.txt").read_text()
        assert re.search(r"Source: https://github\.com/\S+", source), path.name
        key = re.search(r"sources\.yaml keys?: ([a-z0-9-]+)", source)
        assert key, path.name
        assert key[1] in MATRIX.sources, path.name


def test_the_dgx_a100_dmi_strings_match_a_real_dgx_a100_by_substring():
    fields = dmidecode_type1("dmidecode-t1__dgx-a100.txt")
    dgx = MATRIX.platform("dgx-a100")
    assert all(s in fields["Manufacturer"] for s in dgx.dmi_vendor)
    assert all(s in fields["Product Name"] for s in dgx.dmi_product)
    assert all(s in fields["Family"] for s in dgx.dmi_family)
    # the product name carries a part number: an exact match would miss it
    assert fields["Product Name"] == "DGXA100 920-23687-2531-001"
    assert fields["Product Name"] not in dgx.dmi_product


@pytest.mark.parametrize("platform", ["r750xa", "xe9680"])
def test_dells_vendor_string_is_what_a_poweredge_prints(platform):
    fields = dmidecode_type1("dmidecode-t1__dell-poweredge-t-xe8545.txt")
    row = MATRIX.platform(platform)
    assert row.dmi_vendor == ("Dell Inc.",)
    assert all(s in fields["Manufacturer"] for s in row.dmi_vendor)
    # captured on another PowerEdge model: the row says so, and names no product it has not seen
    assert "dmi" in row.unconfirmed
    assert row.dmi_product == ()
    # the model name carries a prefix ("T-XE8545"): products match by substring
    assert fields["Product Name"].startswith("PowerEdge T-")


@pytest.mark.parametrize(
    ("capture", "platform", "gpu"),
    [
        ("topo-m__dgx-a100__nv12.txt", "dgx-a100", "a100-sxm4-80gb"),
        ("topo-m__4x-a100__polaris-nv4.txt", "hgx-a100-4gpu", "a100-sxm4-80gb"),
        ("topo-m__4x-h100__nv6.txt", "hgx-h100-4gpu", "h100-sxm"),
        ("topo-m__hgx-h100-8gpu__nv18.txt", "dgx-h100", "h100-sxm"),
        ("topo-m__hgx-h100-8gpu__nv18.txt", "xe9680", "h100-sxm"),
    ],
)
def test_the_topology_and_gpu_count_a_platform_expects_are_a_real_boards(capture, platform, gpu):
    count, relations = topo_pairs(capture)
    row = MATRIX.platform(platform)
    link = row.link(MATRIX.gpu(gpu))
    assert relations == set(link.topology)
    assert count == row.gpu_count


def test_a_generic_pcie_server_expects_only_the_pcie_relations_of_the_legend():
    legend = (CAPTURES / "topo-m__4x-a100__polaris-nv4.txt").read_text().split("Legend:", 1)[1]
    named = set(re.findall(r"^\s+([A-Z#]+)\s+=", legend, re.MULTILINE))
    assert {"SYS", "NODE", "PHB", "PXB", "PIX", "NV#"} <= named
    assert set(MATRIX.platform("pcie-server").topology) == named - {"X", "NV#"}


def test_nvswitch_platforms_plan_fabric_manager_and_nvlink_boards_do_not_on_every_os():
    from provision.plan.model import PlanRequest
    from provision.plan.resolve import resolve

    for os_rel in MATRIX.os_releases:
        for platform in MATRIX.platforms:
            for gpu in platform.gpus:
                plan = resolve(MATRIX, PlanRequest(os_rel.id, gpu, platform=platform.id), suggest=False)
                assert (plan.fabric_manager is not None) == (platform.interconnect == "nvswitch"), (
                    os_rel.id,
                    platform.id,
                    gpu,
                )
