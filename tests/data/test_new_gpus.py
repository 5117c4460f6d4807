"""Issue 11, item 6: the data-center GPUs added to the catalogue, each row read against its source.

The sources are not in this repository, so the parts of them each row rests on are quoted here
verbatim (pci.ids lines, open-gpu-kernel-modules README rows with the first tag listing them,
`nvidia-smi mig -lgip`/`-lgipp` output, datasheet cells with their sparsity marks) and parsed;
the rest are invariants the MIG planner depends on.
"""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction
from itertools import product

import pytest

from provision.errors import NoCompatibleStack
from provision.mig import planner as mig
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.versions import DottedVersion as Version

NEW_GPUS = ("a10", "a30", "a40", "l40", "h100-nvl", "h200-nvl", "v100-sxm2-16gb", "v100-pcie-16gb")
NEW_MIG_SETS = ("a30-24gb", "h100-nvl-94gb", "h200-nvl-141gb")

# -- pci.ids (pciutils/pciids @c1c12547, vendor 10de), verbatim -----------------------------------
PCI_IDS = """\
\t1db1  GV100GL [Tesla V100 SXM2 16GB]
\t1db4  GV100GL [Tesla V100 PCIe 16GB]
\t1df5  GV100GL [Tesla V100 SXM2 16GB]
\t20b7  GA100GL [A30 PCIe]
\t2235  GA102GL [A40]
\t2236  GA102GL [A10]
\t2321  GH100 [H100L 94GB]
\t233b  GH100 [H200 NVL]
\t26b5  AD102GL [L40]
"""
PCI_NAME = {
    "v100-sxm2-16gb": ("Tesla V100 SXM2 16GB",),
    "v100-pcie-16gb": ("Tesla V100 PCIe 16GB",),
    "a30": ("A30 PCIe",),
    "a40": ("A40",),
    "a10": ("A10",),
    "h100-nvl": ("H100L 94GB",),
    "h200-nvl": ("H200 NVL",),
    "l40": ("L40",),
}

# -- NVIDIA/open-gpu-kernel-modules README "Compatible GPUs": the first tag whose README lists the
# id, and the production releases just below it that do not (git show <tag>:README.md) -------
OGKM_FIRST = {
    "a30": ("515.48.07", "| NVIDIA A30 | 20B7 10DE 1532 |", ("515.43.04",)),
    "a40": ("515.48.07", "| NVIDIA A40 | 2235 10DE 145A |", ("515.43.04",)),
    "a10": ("515.48.07", "| NVIDIA A10 | 2236 10DE 1482 |", ("515.43.04",)),
    "l40": ("525.78.01", "| NVIDIA L40 | 26B5 10DE 169D |", ("525.53", "525.60.13")),
    "h100-nvl": ("535.104.05", "| NVIDIA H100 NVL | 2321 10DE 1839 |", ("535.54.03", "535.86.05", "535.98")),
    "h200-nvl": ("565.57.01", "| NVIDIA H200 NVL | 233B 10DE 1996 |", ("560.35.03",)),
}

# -- datasheet cells as printed ("x | y*": dense | with sparsity); tdp the configurable maximum --
DATASHEET = {
    # gpu: (source, memory GB, type, GB/s, "FP16 cell", "BF16 cell", "FP8 cell", tdp W, pcie gen, pcie GB/s, nvlink GB/s)
    "a10": ("gpu-datasheets-summary", 24, "GDDR6", 600, "125", "125", None, 150, 4, None, None),
    "a30": ("gpu-datasheets-summary", 24, "HBM2", 933, "165", "165", None, 165, 4, 64, 200),
    "a40": ("a40-datasheet", 48, "GDDR6", 696, "149.7 | 299.4*", "149.7 | 299.4*", None, 300, 4, 64, 112.5),
    "l40": ("l40-datasheet", 48, "GDDR6", 864, "181.05 | 362.1*", "181.05 | 362.1*", "362 | 724*", 300, 4, 64, None),
    "h100-nvl": ("h100-nvl-specs", 94, "HBM3", 3900, "1,671*", "1,671*", "3,341*", 400, 5, 128, 600),
    "h200-nvl": ("h200-nvl-specs", 141, "HBM3e", 4800, "1,671*", "1,671*", "3,341*", 600, 5, 128, 900),
    "v100-sxm2-16gb": ("gpu-datasheets-summary", 16, "HBM2", 900, None, None, None, 300, 3, 32, 300),
    "v100-pcie-16gb": ("gpu-datasheets-summary", 16, "HBM2", 900, None, None, None, 250, 3, 32, None),
}

# -- nvidia-smi mig captures, verbatim (the columns the catalogue records) ----------------------
A30_LGIP = """\
|   0  MIG 1g.6gb        14     4/4        5.81       No     14     1     0   |
|   0  MIG 1g.6gb+me     21     1/1        5.81       No     14     1     0   |
|   0  MIG 2g.12gb        5     2/2        11.69      No     28     2     0   |
|   0  MIG 2g.12gb+me     6     1/1        11.69      No     28     2     0   |
|   0  MIG 4g.24gb        0     1/1        23.44      No     56     4     0   |
"""
A30_LGIPP = """\
GPU  0 Profile ID 14 Placements: {0,1,2,3}:1
GPU  0 Profile ID 21 Placements: {0,1,2,3}:1
GPU  0 Profile ID  5 Placements: {0,2}:2
GPU  0 Profile ID  6 Placements: {0,2}:2
GPU  0 Profile ID  0 Placement : {0}:4
"""
H100_NVL_LGIP = """\
|   0  MIG 1g.12gb       19     7/7        10.75      No     16     1     0   |
|   0  MIG 1g.12gb+me    20     1/1        10.75      No     16     1     0   |
|   0  MIG 1g.24gb       15     4/4        21.62      No     26     1     0   |
|   0  MIG 2g.24gb       14     3/3        21.62      No     32     2     0   |
|   0  MIG 3g.47gb        9     2/2        46.38      No     60     3     0   |
|   0  MIG 4g.47gb        5     1/1        46.38      No     64     4     0   |
|   0  MIG 7g.94gb        0     1/1        93.12      No     132    7     0   |
"""
H100_NVL_LGIPP = """\
GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 15 Placements: {0,2,4,6}:2
GPU  0 Profile ID 14 Placements: {0,2,4}:2
GPU  0 Profile ID  9 Placements: {0,4}:4
GPU  0 Profile ID  5 Placement : {0}:4
GPU  0 Profile ID  0 Placement : {0}:8
"""
CAPTURES = {"a30-24gb": (A30_LGIP, A30_LGIPP), "h100-nvl-94gb": (H100_NVL_LGIP, H100_NVL_LGIPP)}

# -- MIG user guide, "Supported MIG Profiles": (fraction of memory, fraction of SMs, instances) ---
MIG_GUIDE = {
    "a30-24gb": {
        "1g.6gb": ("1/4", "1/4", 4),
        "1g.6gb+me": ("1/4", "1/4", 1),
        "2g.12gb": ("2/4", "2/4", 2),
        "2g.12gb+me": ("2/4", "2/4", 1),
        "4g.24gb": ("Full", "4/4", 1),
    },
    "h100-nvl-94gb": {  # "H100 94GB product (PCIe and SXM5)"
        "1g.12gb": ("1/8", "1/7", 7),
        "1g.12gb+me": ("1/8", "1/7", 1),
        "1g.24gb": ("1/4", "1/7", 4),
        "2g.24gb": ("2/8", "2/7", 3),
        "3g.47gb": ("4/8", "3/7", 2),
        "4g.47gb": ("4/8", "4/7", 1),
        "7g.94gb": ("Full", "7/7", 1),
    },
    "h200-nvl-141gb": {  # "H200 141GB product"
        "1g.18gb": ("1/8", "1/7", 7),
        "1g.18gb+me": ("1/8", "1/7", 1),
        "1g.35gb": ("1/4", "1/7", 4),
        "2g.35gb": ("2/8", "2/7", 3),
        "3g.71gb": ("4/8", "3/7", 2),
        "4g.71gb": ("4/8", "4/7", 1),
        "7g.141gb": ("Full", "7/7", 1),
    },
}


def dense(cell: str | None) -> float | None:
    """A datasheet cell as the catalogue records it: the dense figure, or half the sparse one."""
    if cell is None:
        return None
    first = cell.split("|")[0].strip()
    value = float(first.rstrip("*").replace(",", ""))
    return value / 2 if first.endswith("*") else value


def parse_lgip(text: str) -> dict[str, tuple[int, int, float, int]]:
    rows = re.findall(r"MIG (\S+)\s+(\d+)\s+\d+/(\d+)\s+([\d.]+)\s+\w+\s+(\d+)", text)
    return {name: (int(pid), int(total), float(gib), int(sms)) for name, pid, total, gib, sms in rows}


def parse_lgipp(text: str) -> dict[int, tuple[tuple[int, ...], int]]:
    rows = re.findall(r"Profile ID\s+(\d+) Placements?\s*:\s*\{([\d,]+)\}:(\d+)", text)
    return {int(pid): (tuple(int(s) for s in starts.split(",")), int(size)) for pid, starts, size in rows}


def fraction(cell: str) -> Fraction:
    return Fraction(1) if cell == "Full" else Fraction(cell)


@pytest.fixture(scope="module")
def sets(real_matrix):
    return {s.id: s for s in real_matrix.mig}


# -- rows and their sources ---------------------------------------------------------------------
@pytest.mark.parametrize("gpu_id", NEW_GPUS)
def test_every_new_row_cites_known_sources(real_matrix, gpu_id):
    gpu = real_matrix.gpu(gpu_id)
    assert gpu.id == gpu_id
    assert {"cuda-gpus", "pci-ids"} <= set(gpu.sources)
    assert set(gpu.sources) <= set(real_matrix.sources)


@pytest.mark.parametrize("gpu_id", NEW_GPUS)
def test_pci_ids_are_the_pci_ids_database_entries(real_matrix, gpu_id):
    listed = {f"0x{line.split()[0].upper()}": re.search(r"\[(.*)\]", line).group(1) for line in PCI_IDS.splitlines()}
    gpu = real_matrix.gpu(gpu_id)
    assert gpu.pci_device_ids
    for pci in gpu.pci_device_ids:
        assert listed[pci] in PCI_NAME[gpu_id], pci
    others = {p for g in real_matrix.gpus if g.id != gpu_id for p in g.pci_device_ids}
    assert not others & set(gpu.pci_device_ids)


@pytest.mark.parametrize("gpu_id", sorted(OGKM_FIRST))
def test_min_driver_is_the_first_open_module_readme_listing_the_id(real_matrix, gpu_id):
    first, row, older_without = OGKM_FIRST[gpu_id]
    gpu = real_matrix.gpu(gpu_id)
    assert "ogkm" in gpu.sources
    assert gpu.min_driver == Version(first)
    assert row.split("|")[2].split()[0] == gpu.pci_device_ids[0][2:]
    assert all(Version(v) < gpu.min_driver for v in older_without)


@pytest.mark.parametrize("gpu_id", sorted(DATASHEET))
def test_specs_are_the_datasheet_figures(real_matrix, gpu_id):
    source, size, kind, gbs, fp16, bf16, fp8, tdp, pcie_gen, pcie_gbs, nvlink = DATASHEET[gpu_id]
    gpu = real_matrix.gpu(gpu_id)
    assert source in gpu.sources
    assert (gpu.memory_gb, gpu.memory_type, gpu.memory_bandwidth_gbs, gpu.tdp_w) == (size, kind, gbs, tdp)
    if fp16 is not None:
        assert (gpu.fp16_tflops, gpu.bf16_tflops, gpu.fp8_tflops) == (dense(fp16), dense(bf16), dense(fp8))
    assert gpu.pcie_generation == pcie_gen
    assert gpu.pcie_bandwidth_gbs == (pcie_gbs or {3: 32, 4: 64, 5: 128}[pcie_gen])
    assert gpu.nvlink_bandwidth_gbs == nvlink
    assert not gpu.nvswitch


def test_v100_16gb_rows_match_their_32gb_siblings_but_memory(real_matrix):
    for form in ("sxm2", "pcie"):
        small, big = real_matrix.gpu(f"v100-{form}-16gb"), real_matrix.gpu(f"v100-{form}-32gb")
        same = ("architecture", "compute_capability", "memory_type", "memory_bandwidth_gbs", "fp16_tflops", "tdp_w")
        assert [getattr(small, f) for f in same] == [getattr(big, f) for f in same]
        assert (small.memory_gb, big.memory_gb) == (16, 32)
        assert small.form_factor == big.form_factor
    assert real_matrix.group("v100-16gb").members == ("v100-pcie-16gb", "v100-sxm2-16gb")


@pytest.mark.parametrize(
    ("gpu_id", "arch", "cc", "mig_set"),
    [
        ("a10", "ampere", "8.6", None),
        ("a30", "ampere", "8.0", "a30-24gb"),
        ("a40", "ampere", "8.6", None),
        ("l40", "ada", "8.9", None),
        ("h100-nvl", "hopper", "9.0", "h100-nvl-94gb"),
        ("h200-nvl", "hopper", "9.0", "h200-nvl-141gb"),
        ("v100-sxm2-16gb", "volta", "7.0", None),
        ("v100-pcie-16gb", "volta", "7.0", None),
    ],
)
def test_architecture_compute_capability_and_mig(real_matrix, gpu_id, arch, cc, mig_set):
    gpu = real_matrix.gpu(gpu_id)
    assert (gpu.architecture, gpu.compute_capability, gpu.mig) == (arch, cc, mig_set)
    assert cc in real_matrix.architecture(arch).compute_capabilities


# -- plans ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("os_id", ["ubuntu22.04", "rocky9"])
@pytest.mark.parametrize("gpu_id", NEW_GPUS)
def test_each_new_gpu_resolves(real_matrix, os_id, gpu_id):
    plan = resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu_id))
    gpu = real_matrix.gpu(gpu_id)
    if gpu.min_driver is not None:
        assert Version(plan.driver.version) >= gpu.min_driver
    if gpu.architecture == "volta":
        assert plan.driver.kernel_module == "proprietary"


@pytest.mark.parametrize(
    ("gpu_id", "driver"),
    [("h100-nvl", "535.54.03"), ("l40", "525.60.13"), ("h200-nvl", "560")],
)
def test_drivers_older_than_the_first_listing_are_refused(real_matrix, gpu_id, driver):
    with pytest.raises(NoCompatibleStack):
        resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu=gpu_id, driver=driver))


# -- MIG ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("set_id", sorted(CAPTURES))
def test_captured_sets_are_the_lgip_and_lgipp_output(sets, set_id):
    lgip, lgipp = (parse_lgip(CAPTURES[set_id][0]), parse_lgipp(CAPTURES[set_id][1]))
    ps = sets[set_id]
    assert ps.placements_confirmed
    assert [p.name for p in ps.profiles] == list(lgip)
    for p in ps.profiles:
        pid, total, gib, sms = lgip[p.name]
        assert (p.id, p.max_instances, p.memory_gib, p.sms) == (pid, total, gib, sms)
        assert (p.placements, p.memory_slices) == lgipp[pid]


@pytest.mark.parametrize("set_id", NEW_MIG_SETS)
def test_sets_follow_the_mig_user_guide_table(sets, set_id):
    ps = sets[set_id]
    assert {"mig-user-guide", "mig-parted"} <= set(ps.sources)
    assert [p.name for p in ps.profiles] == list(MIG_GUIDE[set_id])
    for p in ps.profiles:
        memory, sm, instances = MIG_GUIDE[set_id][p.name]
        assert Fraction(p.memory_slices, ps.memory_slices) == fraction(memory), p.name
        assert Fraction(p.compute_slices, ps.compute_slices) == fraction(sm), p.name
        assert p.max_instances == instances
        assert p.media == p.name.endswith("+me")


def test_a30_is_a_four_slice_gpu_confirmed_by_nvidias_model(sets):
    ps = sets["a30-24gb"]
    assert (ps.memory_slices, ps.compute_slices) == (4, 4)
    assert "go-nvml-mock-a30" in ps.sources


def test_h200_nvl_set_claims_nothing_it_did_not_capture(sets):
    ps = sets["h200-nvl-141gb"]
    assert not ps.placements_confirmed
    assert all(p.id is None and p.sms is None and p.memory_gib is None for p in ps.profiles)


@pytest.mark.parametrize("set_id", NEW_MIG_SETS)
def test_mig_invariants(real_matrix, sets, set_id):
    ps = sets[set_id]
    gpu = next(g for g in real_matrix.gpus if g.mig == set_id)
    full = [p for p in ps.profiles if (p.memory_slices, p.compute_slices) == (ps.memory_slices, ps.compute_slices)]
    assert [f.placements for f in full] == [(0,)]
    for p in ps.profiles:
        g, gb = re.fullmatch(r"(\d+)g\.(\d+)gb(\+me)?", p.name).groups()[:2]
        assert int(g) == p.compute_slices
        # the name's GB is the profile's share of the GPU's memory, rounded to the nearest GB
        assert abs(int(gb) - gpu.memory_gb * p.memory_slices / ps.memory_slices) <= 0.5, p.name
        assert all(s >= 0 and s + p.memory_slices <= ps.memory_slices for s in p.placements)
        assert all(s % p.memory_slices == 0 for s in p.placements), "placements are aligned to their size"
        # as many instances as there are starts and compute slices for; one for a media profile
        fit = min(len(p.placements), ps.compute_slices // p.compute_slices)
        assert p.max_instances == (1 if p.media else fit), p.name
    captured = [p for p in ps.profiles if p.memory_gib is not None]
    for a, b in product(captured, captured):
        if a.memory_slices < b.memory_slices:
            assert a.memory_gib < b.memory_gib <= full[0].memory_gib


def _naive_layouts(ps):
    """Every valid multiset of instances on this set, by brute force over start slots."""
    options = [[None, *(p for p in ps.profiles if s in p.placements)] for s in range(ps.memory_slices)]
    valid = set()
    for choice in product(*options):
        chosen = [(p, s) for s, p in enumerate(choice) if p is not None]
        slots = [x for p, s in chosen for x in range(s, s + p.memory_slices)]
        counts = Counter(p.name for p, _ in chosen)
        if (
            chosen
            and all(s + p.memory_slices <= ps.memory_slices for p, s in chosen)
            and len(slots) == len(set(slots))
            and sum(p.compute_slices for p, _ in chosen) <= ps.compute_slices
            and all(counts[p.name] <= p.max_instances for p in ps.profiles)
            and sum(p.media for p, _ in chosen) <= 1
        ):
            valid.add(tuple(sorted(counts.items())))
    return valid


def test_a30_planner_accepts_exactly_the_brute_force_layouts(sets):
    ps = sets["a30-24gb"]
    valid = _naive_layouts(ps)
    assert (("1g.6gb", 2), ("2g.12gb", 1)) in valid
    assert (("1g.6gb", 4),) in valid
    for vec in product(*(range(p.max_instances + 1) for p in ps.profiles)):
        profiles = [p for p, n in zip(ps.profiles, vec, strict=True) for _ in range(n)]
        if profiles:
            key = tuple(sorted(Counter(p.name for p in profiles).items()))
            assert mig.fits(ps, profiles) == (key in valid), key


@pytest.mark.parametrize(
    ("gpu", "layout", "fits"),
    [
        ("a30", "2g.12gb,2x1g.6gb", True),
        ("a30", "4x1g.6gb", True),
        ("a30", "2x2g.12gb,1g.6gb", False),  # 5 compute slices of 4
        ("a30", "1g.6gb+me,2g.12gb+me", False),  # one media instance at most
        ("h100-nvl", "3g.47gb,2g.24gb,1g.24gb", True),
        ("h100-nvl", "3g.47gb,3g.47gb,1g.12gb", False),  # 9 memory slots of 8
        ("h200-nvl", "4g.71gb,3g.71gb", True),
    ],
)
def test_mig_plan_on_the_new_sets(real_matrix, gpu, layout, fits):
    _, ps, members = mig.gpu_profile_set(real_matrix, gpu)
    if fits:
        plan = mig.plan_layout(ps, layout, gpu=gpu, pci_device_ids=members[0].pci_device_ids, device_filter=True)
        assert plan.profile_set.id == ps.id
    else:
        with pytest.raises(mig.MigLayoutError):
            mig.plan_layout(ps, layout, gpu=gpu)


# -- a short new id must not capture typos of longer ones -----------------------------------------
@pytest.mark.parametrize(
    ("typed", "first"),
    [("a100-pice", "a100-pcie"), ("a10", "a10"), ("h100nvl", "h100-nvl"), ("a30-pcie", "a30")],
)
def test_suggestions_with_the_new_ids(real_matrix, typed, first):
    from provision.matrix.suggest import close_ids

    names = {n: g.id for g in real_matrix.gpus for n in (g.id, *g.aliases)}
    names.update({grp.id: grp.id for grp in real_matrix.gpu_groups})
    shown, _ = close_ids(typed, names)
    assert shown[0] == first, shown
    assert "a10" not in shown or (typed.startswith("a10") and not typed.startswith("a100"))


def test_a_typed_id_continues_a_listed_one_only_past_a_whole_number():
    from provision.matrix.suggest import close_ids

    assert close_ids("rocky9.4", ["rocky9", "ubuntu22.04"])[0] == ["rocky9"]
    assert close_ids("a100-pice", ["a10", "a100-pcie"])[0][0] == "a100-pcie"
