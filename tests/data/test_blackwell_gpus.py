"""Issue 11, item 6: RTX PRO 6000 Blackwell Server Edition and B300, each row read against its sources.

The sources are not in this repository, so the parts of them each row rests on are quoted here
verbatim (pci.ids lines, open-gpu-kernel-modules README rows with the first tag listing them and
the tags just below that do not, the CUDA GPUs table, the MIG user guide's supported-GPU row,
mig-parted's device filters, product-page figures) and parsed.
"""

from __future__ import annotations

import re

import pytest
import yaml
from support import COMPAT

from provision.errors import NoCompatibleStack
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.versions import DottedVersion as Version

NEW_GPUS = ("b300", "rtx-pro-6000-blackwell-se")

# -- pci.ids (pciutils/pciids @c1c12547, vendor 10de), verbatim -----------------------------------
PCI_IDS = """\
\t2bb5  GB202GL [RTX PRO 6000 Blackwell Server Edition]
\t3182  GB110 [B300 SXM6 AC]
"""
PCI_NAME = {"rtx-pro-6000-blackwell-se": "RTX PRO 6000 Blackwell Server Edition", "b300": "B300 SXM6 AC"}

# -- NVIDIA/open-gpu-kernel-modules README "Compatible GPUs" (git show <tag>:README.md): the first
# tag listing the id, its row, and the production tags just below it that do not -----------------
OGKM_FIRST = {
    "rtx-pro-6000-blackwell-se": (
        "575.57.08",
        "| NVIDIA RTX PRO 6000 Blackwell Server Edition            | 2BB5 10DE 204E |",
        ("575.51.02", "575.51.03", "570.211.01"),
    ),
    "b300": (
        "580.82.07",
        "| NVIDIA B300 SXM6 AC                                     | 3182 10DE 20E6 |",
        ("580.76.05", "580.65.06"),
    ),
}

# -- CUDA GPUs page (developer.nvidia.com/cuda-gpus), rows as printed ----------------------------
CUDA_GPUS = """\
12.0 | NVIDIA RTX PRO 6000 Blackwell Server Edition |
10.3 | NVIDIA GB300 NVIDIA B300 |
"""
CUDA_GPUS_NAME = {"rtx-pro-6000-blackwell-se": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "b300": "NVIDIA B300"}

# -- MIG user guide, "Supported GPUs" (product | architecture | microarchitecture | CC | memory | max instances)
MIG_GUIDE_SUPPORTED = "RTX PRO 6000 Blackwell Server Edition | Blackwell | GB202 | 12.0 | 96GB | 4"

# -- NVIDIA/mig-parted config-default.yaml @bd7160f4, all-balanced entries for the two ids -------
MIG_PARTED_BALANCED = {
    "0x2BB510DE": {"1g.24gb": 2, "2g.48gb": 1},
    "0x318210DE": {"1g.34gb": 2, "2g.67gb": 1, "3g.135gb": 1, "7g.141gb": 1},
}

# -- product figures as printed ("*": with sparsity); (source, GB, type, GB/s, FP16, BF16, FP8, W) --
SPECS = {
    "rtx-pro-6000-blackwell-se": (
        "rtx-pro-6000-se-specs",
        "96 GB",
        "GDDR7",
        "1,597 GB/s",
        "1 PFLOPS*",
        "1 PFLOPS*",
        "2 PFLOPS*",
        "600 W",
    ),
    "b300": ("b300-specs", "288 GB", "HBM3e", "8 TB/s", "2250", "2250", "4500", "1400 W"),
}

# -- Fabric Manager guide (fabric-manager-guide-nvlsm), "NVSwitch-Based Systems" ---------------
FM_FOURTH_GEN = "HGX B200/B300/B100: fourth-generation NVSwitches"


@pytest.fixture(scope="module")
def notes(real_matrix):
    """Each new row's notes (the loader keeps no notes), read from the catalogue file."""
    rows = yaml.safe_load((COMPAT / "gpus.yaml").read_text())["gpus"]
    return {r["id"]: r.get("notes", "") for r in rows if r["id"] in NEW_GPUS}


def tflops(cell: str) -> float:
    """A figure as the catalogue records it: dense TFLOPS, half of a with-sparsity one."""
    number, unit = re.fullmatch(r"([\d.,]+)(?: (PFLOPS|TFLOPS))?(\*)?", cell).groups()[:2]
    value = float(number.replace(",", "")) * (1000 if unit == "PFLOPS" else 1)
    return value / 2 if cell.endswith("*") else value


def quantity(cell: str) -> float:
    number, unit = re.fullmatch(r"([\d.,]+) (GB|TB/s|GB/s|W)", cell).groups()
    return float(number.replace(",", "")) * (1000 if unit == "TB/s" else 1)


# -- rows and their sources ---------------------------------------------------------------------
@pytest.mark.parametrize("gpu_id", NEW_GPUS)
def test_rows_cite_known_sources(real_matrix, gpu_id):
    gpu = real_matrix.gpu(gpu_id)
    assert {"cuda-gpus", "pci-ids", "ogkm", "mig-user-guide", "mig-parted", SPECS[gpu_id][0]} <= set(gpu.sources)
    assert set(gpu.sources) <= set(real_matrix.sources)


@pytest.mark.parametrize("gpu_id", NEW_GPUS)
def test_pci_id_is_the_pci_ids_database_entry(real_matrix, gpu_id):
    listed = {f"0x{line.split()[0].upper()}": re.search(r"\[(.*)\]", line).group(1) for line in PCI_IDS.splitlines()}
    gpu = real_matrix.gpu(gpu_id)
    assert [listed[p] for p in gpu.pci_device_ids] == [PCI_NAME[gpu_id]]
    others = {p for g in real_matrix.gpus if g.id != gpu_id for p in g.pci_device_ids}
    assert not others & set(gpu.pci_device_ids)


@pytest.mark.parametrize("gpu_id", NEW_GPUS)
def test_compute_capability_is_the_cuda_gpus_row(real_matrix, gpu_id):
    rows = {cc: names for cc, names in re.findall(r"^([\d.]+) \| (.*) \|$", CUDA_GPUS, re.M)}
    (cc,) = [cc for cc, names in rows.items() if CUDA_GPUS_NAME[gpu_id] in names]
    gpu = real_matrix.gpu(gpu_id)
    assert (gpu.architecture, gpu.compute_capability) == ("blackwell", cc)
    assert cc in real_matrix.architecture("blackwell").compute_capabilities
    # Blackwell runs the open kernel modules only
    assert real_matrix.architecture("blackwell").kernel_modules == ("open",)


def test_rtx_pro_6000_is_the_mig_guides_supported_gpu(real_matrix):
    product, arch, _, cc, memory, _ = (c.strip() for c in MIG_GUIDE_SUPPORTED.split("|"))
    gpu = real_matrix.gpu("rtx-pro-6000-blackwell-se")
    assert gpu.name == f"NVIDIA {product}"
    assert (gpu.compute_capability, f"{gpu.memory_gb:g}GB") == (cc, memory)
    assert real_matrix.architecture(gpu.architecture).name == arch


def test_b300_has_no_mig_set_without_a_confirmed_profile_table(real_matrix, notes):
    gpu = real_matrix.gpu("b300")
    # mig-parted filters on the id (device then vendor), but only for a mixed layout: not a profile table
    assert f"{gpu.pci_device_ids[0]}10DE" in MIG_PARTED_BALANCED
    assert gpu.mig is None
    assert "mig: null" in notes["b300"]


def test_rtx_pro_6000_mig_set_has_the_guides_instance_count(real_matrix):
    """Its profile set (tests/data/test_rtx_pro_6000_mig.py) allows the supported-GPU row's maximum."""
    gpu = real_matrix.gpu("rtx-pro-6000-blackwell-se")
    assert f"{gpu.pci_device_ids[0]}10DE" in MIG_PARTED_BALANCED
    instances = int(MIG_GUIDE_SUPPORTED.rsplit("|", maxsplit=1)[-1])
    assert max(p.max_instances for p in real_matrix.mig_set(gpu.mig).profiles) == instances


@pytest.mark.parametrize("gpu_id", sorted(OGKM_FIRST))
def test_min_driver_is_the_first_open_module_readme_listing_the_id(real_matrix, gpu_id):
    first, row, older_without = OGKM_FIRST[gpu_id]
    gpu = real_matrix.gpu(gpu_id)
    assert gpu.min_driver == Version(first)
    assert row.split("|")[2].split()[0] == gpu.pci_device_ids[0][2:]
    assert all(Version(v) < gpu.min_driver for v in older_without)
    # the first listing is a catalogued release, so a plan can pin it
    branch = next(b for b in real_matrix.drivers if b.branch == gpu.min_driver.release[0])
    assert first in {str(r.version) for r in branch.releases}


@pytest.mark.parametrize("gpu_id", sorted(SPECS))
def test_specs_are_the_quoted_figures(real_matrix, notes, gpu_id):
    source, size, kind, gbs, fp16, bf16, fp8, tdp = SPECS[gpu_id]
    gpu = real_matrix.gpu(gpu_id)
    assert source in gpu.sources
    assert (gpu.memory_gb, gpu.memory_type, gpu.memory_bandwidth_gbs) == (quantity(size), kind, quantity(gbs))
    assert gpu.tdp_w == quantity(tdp)
    assert (gpu.fp16_tflops, gpu.bf16_tflops, gpu.fp8_tflops) == (tflops(fp16), tflops(bf16), tflops(fp8))
    # figures from secondary sources say so in the row
    assert real_matrix.sources[source].kind == "secondary"
    assert "not confirmed" in notes[gpu_id]


def test_rtx_pro_6000_is_a_pcie_card_without_nvlink(real_matrix):
    gpu = real_matrix.gpu("rtx-pro-6000-blackwell-se")
    assert (gpu.form_factor, gpu.pcie_generation, gpu.pcie_bandwidth_gbs) == ("pcie", 5, 128)
    assert gpu.nvlink_bandwidth_gbs is None
    assert not gpu.nvswitch
    assert gpu.nvswitch_generation is None


def test_b300_sits_on_a_fourth_generation_nvswitch_baseboard(real_matrix):
    gpu = real_matrix.gpu("b300")
    generation = {"second": 2, "third": 3, "fourth": 4}[re.search(r"(\w+)-generation", FM_FOURTH_GEN).group(1)]
    assert "B300" in FM_FOURTH_GEN.split(":", maxsplit=1)[0]
    assert "fabric-manager-guide-nvlsm" in gpu.sources
    assert (gpu.form_factor, gpu.nvswitch, gpu.nvswitch_generation) == ("sxm", True, generation)
    assert gpu.nvlink_bandwidth_gbs == 1800
    assert real_matrix.subnet_manager.needed_by(gpu)


# -- plans ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("os_id", ["ubuntu22.04", "ubuntu24.04", "rocky9", "rocky10"])
@pytest.mark.parametrize("gpu_id", NEW_GPUS)
def test_each_new_gpu_resolves(real_matrix, os_id, gpu_id):
    plan = resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu_id))
    gpu = real_matrix.gpu(gpu_id)
    assert Version(plan.driver.version) >= gpu.min_driver
    assert plan.driver.kernel_module == "open"
    if gpu.nvswitch:
        assert plan.fabric_manager is not None
        assert plan.subnet_manager is not None
    else:
        assert plan.fabric_manager is None
        assert plan.subnet_manager is None


@pytest.mark.parametrize(
    ("gpu_id", "driver"),
    # catalogued releases whose README does not list the id (R570's newest is 570.211.01)
    [("rtx-pro-6000-blackwell-se", "570"), ("rtx-pro-6000-blackwell-se", "570.211.01"), ("b300", "580.65.06")],
)
def test_drivers_older_than_the_first_listing_are_refused(real_matrix, gpu_id, driver):
    with pytest.raises(NoCompatibleStack):
        resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu=gpu_id, driver=driver))


@pytest.mark.parametrize(("gpu_id", "driver"), [("rtx-pro-6000-blackwell-se", "575.57.08"), ("b300", "580.82.07")])
def test_the_first_listing_itself_is_accepted(real_matrix, gpu_id, driver):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu=gpu_id, driver=driver))
    assert plan.driver.version == driver
