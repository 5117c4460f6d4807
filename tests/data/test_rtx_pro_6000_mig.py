"""Issue 11: the RTX PRO 6000 Blackwell Server Edition's MIG profiles (PCI 0x2BB5), read against
their sources, quoted here verbatim: the MIG user guide's table for the RTX PRO 6000 96GB products,
mig-parted's all-balanced entry for 0x2BB5, and `nvidia-smi mig -lgip` / `-lgipp` / `-lgi` as
captured on that GPU with driver 610.43.02 (compat/sources.yaml mig-rtx-pro-6000-capture). Its
memory is a 12-unit placement grid and its compute 4 slices, not the 8 and 7 of the data-center
parts."""

from __future__ import annotations

from fractions import Fraction

import pytest

from provision.matrix.detect import mig_differences, parse_lgip, parse_lgipp
from provision.mig import planner as mig

# -- MIG user guide, "Supported MIG Profiles", the table for the RTX PRO 6000 Blackwell Workstation,
# Max-Q Workstation and Server Edition 96GB products: name, fraction of memory, fraction of SMs,
# NVDEC, NVENC, JPEG, OFA, L2, copy engines, instances ----------------------------------------------
GUIDE_TABLE = """\
MIG 1g.24gb | 1/4 | 1/4 | 1 | 1 | 1 | 0 | 1/4 | 1 | 4
MIG 1g.24gb+me | 1/4 | 1/4 | 1 | 1 | 1 | 1 | 1/4 | 1 | 1
MIG 1g.24gb+gfx | 1/4 | 1/4 | 1 | 1 | 1 | 0 | 1/4 | 1 | 4
MIG 1g.24gb+me.all | 1/4 | 1/4 | 4 | 4 | 4 | 1 | 1/4 | 1 | 1
MIG 1g.24gb-me | 1/4 | 1/4 | 0 | 0 | 0 | 0 | 1/4 | 1 | 4
MIG 2g.48gb | 1/2 | 1/2 | 2 | 2 | 2 | 0 | 1/2 | 2 | 2
MIG 2g.48gb+gfx | 1/2 | 1/2 | 2 | 2 | 2 | 0 | 1/2 | 2 | 2
MIG 2g.48gb+me.all | 1/2 | 1/2 | 4 | 4 | 4 | 1 | 1/2 | 2 | 1
MIG 2g.48gb-me | 1/2 | 1/2 | 0 | 0 | 0 | 0 | 1/2 | 2 | 2
MIG 4g.96gb | Full | Full | 4 | 4 | 4 | 1 | Full | 4 | 1
MIG 4g.96gb+gfx | Full | Full | 4 | 4 | 4 | 1 | Full | 4 | 1
"""
# -- NVIDIA/mig-parted deployments/systemd/config-default.yaml @bd7160f4, all-balanced --------------
MIG_PARTED_BALANCED = {"device-filter": "0x2BB510DE", "1g.24gb": 2, "2g.48gb": 1}

# -- the capture: nvidia-smi mig -i 0 -lgip (each profile's first table line), -lgipp, and -lgi of a
# mixed layout, on an NVIDIA RTX PRO 6000 Blackwell Server Edition, driver 610.43.02 -----------------
LGIP = """\
|   0  MIG 1g.24gb         14     4/4        23.62      No     46     1     1   |
|   0  MIG 1g.24gb+me      21     1/1        23.62      No     46     1     1   |
|   0  MIG 1g.24gb+gfx     47     4/4        23.62      No     46     1     1   |
|   0  MIG 1g.24gb+me.all  65     1/1        23.62      No     46     4     4   |
|   0  MIG 1g.24gb-me      67     4/4        23.62      No     46     0     0   |
|   0  MIG 2g.48gb          5     2/2        47.38      No     94     2     2   |
|   0  MIG 2g.48gb+gfx     35     2/2        47.38      No     94     2     2   |
|   0  MIG 2g.48gb+me.all  64     1/1        47.38      No     94     4     4   |
|   0  MIG 2g.48gb-me      66     2/2        47.38      No     94     0     0   |
|   0  MIG 4g.96gb          0     1/1        95.12      No     188    4     4   |
|   0  MIG 4g.96gb+gfx     32     1/1        95.12      No     188    4     4   |
"""
LGIPP = """\
GPU  0 Profile ID 14 Placements: {0,3,6,9}:3
GPU  0 Profile ID 21 Placements: {0,3,6,9}:3
GPU  0 Profile ID 47 Placements: {0,3,6,9}:3
GPU  0 Profile ID 65 Placements: {0,3,6,9}:3
GPU  0 Profile ID 67 Placements: {0,3,6,9}:3
GPU  0 Profile ID  5 Placements: {0,6}:6
GPU  0 Profile ID 35 Placements: {0,6}:6
GPU  0 Profile ID 64 Placements: {0,6}:6
GPU  0 Profile ID 66 Placements: {0,6}:6
GPU  0 Profile ID  0 Placement : {0}:12
GPU  0 Profile ID 32 Placement : {0}:12
"""
# `-cgi 2g.48gb,1g.24gb,1g.24gb -C`, then -lgi: (profile, placement start, size)
MIXED_LGI = [("1g.24gb", 6, 3), ("1g.24gb", 9, 3), ("2g.48gb", 0, 6)]


SET = "rtx-pro-6000-96gb"


@pytest.fixture(scope="module")
def ps(real_matrix):
    return real_matrix.mig_set(SET)


def test_the_gpu_points_at_its_set(real_matrix, ps):
    gpu = real_matrix.gpu("rtx-pro-6000-blackwell-se")
    assert gpu.mig == SET
    assert MIG_PARTED_BALANCED["device-filter"] == f"{gpu.pci_device_ids[0]}10DE"
    assert {"mig-user-guide", "mig-parted", "mig-rtx-pro-6000-capture"} <= set(ps.sources)


def test_the_set_is_the_guide_table(ps):
    table = {}
    for line in GUIDE_TABLE.splitlines():
        name, memory, sms, _dec, _enc, _jpeg, ofa, _l2, _ce, instances = (c.strip() for c in line.split("|"))
        table[name.removeprefix("MIG ")] = (memory, sms, int(ofa), int(instances))
    assert [p.name for p in ps.profiles] == list(table)
    assert (ps.memory_slices, ps.compute_slices) == (12, 4)
    for p in ps.profiles:
        memory, sms, _ofa, instances = table[p.name]
        as_fraction = {c: Fraction(1) if c == "Full" else Fraction(c) for c in (memory, sms)}
        assert Fraction(p.memory_slices, ps.memory_slices) == as_fraction[memory], p.name
        assert Fraction(p.compute_slices, ps.compute_slices) == as_fraction[sms], p.name
        assert p.max_instances == instances, p.name
        # media: the instances that take the media engines one GPU has once (+me, +me.all)
        assert p.media == ("+me" in p.name), p.name


def test_the_set_is_the_capture_ids_counts_memory_sms_and_placements(real_matrix, ps):
    assert ps.placements_confirmed
    assert mig_differences(ps, parse_lgip(LGIP), parse_lgipp(LGIPP)) == []
    sms = {line.split()[3]: int(line.split()[8]) for line in LGIP.splitlines()}  # the SM column
    gib = {row.name: row.memory_gib for row in parse_lgip(LGIP)}
    assert {p.name: (p.memory_gib, p.sms) for p in ps.profiles} == {name: (gib[name], sms[name]) for name in sms}
    assert real_matrix.sources["mig-rtx-pro-6000-capture"].kind == "secondary"


def test_the_captured_mixed_layout_is_one_the_planner_accepts(ps):
    layout = mig.plan_layout(ps, "2g.48gb,2x1g.24gb")
    assert sorted((i.profile.name, i.start) for i in layout.instances) in (
        sorted((name, start) for name, start, _ in MIXED_LGI),
        [("1g.24gb", 0), ("1g.24gb", 3), ("2g.48gb", 6)],  # the mirror image, as valid
    )
    assert layout.memory_used == 12


def test_one_media_instance_at_most_and_the_grid_is_full_at_four_quarters(ps):
    with pytest.raises(mig.MigLayoutError) as media:
        mig.plan_layout(ps, "1g.24gb+me,1g.24gb+me.all")
    assert any("media engines go to one +me instance at most" in p for p in media.value.problems)
    assert mig.plan_layout(ps, "1g.24gb+me,1g.24gb-me,2x1g.24gb+gfx").memory_used == 12
    with pytest.raises(mig.MigLayoutError) as five:
        mig.plan_layout(ps, "4x1g.24gb,1g.24gb-me")
    assert any("the GPU has 4" in p for p in five.value.problems)
