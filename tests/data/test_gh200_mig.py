"""Issue 11: the GH200's MIG profiles (the H100 96GB of a GH200, PCI 0x2342), read against their sources.

The sources are not in this repository, so the parts of them each row rests on are quoted here
verbatim (the MIG user guide's "H100 96GB product (H100 on GH200)" table, mig-parted's device
filter and its "all-balanced" entry for 0x2342, an `nvidia-smi mig -lgip` capture on a GH200 480GB)
and parsed; the placements, which no GH200 -lgipp capture confirms, are the H100 SXM5 layout.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction

import pytest
from click.testing import CliRunner
from support import SEVEN_SLICE_LGIPP

from provision.cli.mig import mig_group
from provision.errors import InputError
from provision.mig import planner as mig

# -- MIG user guide, "Supported MIG Profiles", the table after "The following table shows the
# supported profiles on the H100 96GB product (H100 on GH200)."; columns: name, fraction of memory,
# fraction of SMs, number of instances available (verbatim cells) ----------------------------------
GUIDE_TABLE = """\
MIG 1g.12gb | 1/8 | 1/7 | 1 NVDEC /1 JPEG /0 OFA | 1/8 | 1 | 7 |
MIG 1g.12gb+me | 1/8 | 1/7 | 1 NVDEC /1 JPEG /1 OFA | 1/8 | 1 | 1 (A single 1g profile can include media extensions) |
MIG 1g.24gb | 1/4 | 1/7 | 1 NVDEC /1 JPEG /0 OFA | 1/8 | 1 | 4 |
MIG 2g.24gb | 2/8 | 2/7 | 2 NVDECs /2 JPEG /0 OFA | 2/8 | 2 | 3 |
MIG 3g.48gb | 4/8 | 3/7 | 3 NVDECs /3 JPEG /0 OFA | 4/8 | 3 | 2 |
MIG 4g.48gb | 4/8 | 4/7 | 4 NVDECs /4 JPEG /0 OFA | 4/8 | 4 | 1 |
MIG 7g.96gb | Full | 7/7 | 7 NVDECs /7 JPEG /1 OFA | Full | 8 | 1 |
"""
# MIG user guide, "Supported GPUs": the row for the GH200
GUIDE_SUPPORTED = "H100 on GH200 | Hopper | GH100 | 9.0 | 96GB | 7"

# -- NVIDIA/mig-parted deployments/systemd/config-default.yaml @bd7160f4, all-balanced -------------
MIG_PARTED_BALANCED = """\
    # H100-96GB, PG506-96GB, GH200, H20
    - device-filter: ["0x234210DE", "0x233D10DE", "0x20B610DE", "0x232910DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.12gb": 2
        "2g.24gb": 1
        "3g.48gb": 1
"""
# its all-<profile> entries under "# H100 NVL, H800 NVL, GH200" and "# H100-96GB, PG506-96GB, GH200"
MIG_PARTED_ALL = {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1}

# -- nvidia-smi mig -lgip on a GH200 480GB (kf-cuanschutz/NVIDIA_Grace_Hopper_benchmarking_logs_), verbatim
GH200_LGIP = """\
|   0  MIG 1g.12gb       19     7/7        11.00      No     16     1     0   |
|   0  MIG 1g.12gb+me    20     1/1        11.00      No     16     1     0   |
|   0  MIG 1g.24gb       15     4/4        23.00      No     26     1     0   |
|   0  MIG 2g.24gb       14     3/3        23.00      No     32     2     0   |
|   0  MIG 3g.48gb        9     2/2        46.50      No     60     3     0   |
|   0  MIG 4g.48gb        5     1/1        46.50      No     64     4     0   |
|   0  MIG 7g.96gb        0     1/1        93.00      No     132    7     0   |
"""
# -- the H100 SXM5 -lgipp (MIG user guide, getting started), whose layout the set assumes ---------
H100_LGIPP = SEVEN_SLICE_LGIPP


def guide_rows() -> dict[str, tuple[Fraction, Fraction, int]]:
    rows = {}
    for line in GUIDE_TABLE.splitlines():
        name, memory, sms, *_, instances, _ = (c.strip() for c in line.split("|"))
        frac = {c: Fraction(1) if c == "Full" else Fraction(c) for c in (memory, sms)}
        rows[name.removeprefix("MIG ")] = (frac[memory], frac[sms], int(instances.split()[0]))
    return rows


def lgip_rows() -> dict[str, tuple[int, int, float, int]]:
    found = re.findall(r"MIG (\S+)\s+(\d+)\s+\d+/(\d+)\s+([\d.]+)\s+\w+\s+(\d+)", GH200_LGIP)
    return {n: (int(pid), int(total), float(gib), int(sms)) for n, pid, total, gib, sms in found}


def lgipp_rows() -> dict[int, tuple[tuple[int, ...], int]]:
    found = re.findall(r"Profile ID\s+(\d+) Placements?\s*:\s*\{([\d,]+)\}:(\d+)", H100_LGIPP)
    return {int(pid): (tuple(int(s) for s in starts.split(",")), int(size)) for pid, starts, size in found}


@pytest.fixture(scope="module")
def gh200(real_matrix):
    return real_matrix.gpu("gh200")


@pytest.fixture(scope="module")
def ps(real_matrix, gh200):
    return real_matrix.mig_set(gh200.mig)


def test_gh200_points_at_its_set_and_the_guide_supports_it(gh200, ps):
    assert gh200.mig == ps.id == "gh200-96gb"
    product, _arch, die, cc, memory, instances = (c.strip() for c in GUIDE_SUPPORTED.split("|"))
    assert (product, die, cc) == ("H100 on GH200", "GH100", gh200.compute_capability)
    assert int(memory.removesuffix("GB")) == gh200.memory_gb
    assert max(p.max_instances for p in ps.profiles) == int(instances)
    assert f'"{gh200.pci_device_ids[0]}10DE"' in MIG_PARTED_BALANCED


def test_set_is_the_guide_table(ps):
    table = guide_rows()
    assert [p.name for p in ps.profiles] == list(table)
    assert (ps.memory_slices, ps.compute_slices) == (8, 7)
    for p in ps.profiles:
        memory, sms, instances = table[p.name]
        assert Fraction(p.memory_slices, ps.memory_slices) == memory, p.name
        assert Fraction(p.compute_slices, ps.compute_slices) == sms, p.name
        assert p.max_instances == instances, p.name
        assert p.media == p.name.endswith("+me")
    assert {"mig-user-guide", "mig-parted", "mig-lgip-captures-gh200"} <= set(ps.sources)


def test_ids_memory_and_sms_are_the_gh200_lgip_capture(real_matrix, ps):
    lgip = lgip_rows()
    assert [p.name for p in ps.profiles] == list(lgip)
    for p in ps.profiles:
        assert (p.id, p.max_instances, p.memory_gib, p.sms) == lgip[p.name], p.name
    assert real_matrix.sources["mig-lgip-captures-gh200"].kind == "secondary"


def test_placements_are_the_h100_layout_and_say_so(real_matrix, ps):
    lgipp = lgipp_rows()
    assert not ps.placements_confirmed  # no -lgipp capture of a GH200
    for p in ps.profiles:
        assert (p.placements, p.memory_slices) == lgipp[p.id], p.name
    h100 = real_matrix.mig_set("h100-sxm5-80gb")
    assert [(p.id, p.placements) for p in h100.profiles] == [(p.id, p.placements) for p in ps.profiles]


def test_mig_parted_geometries_fit(ps):
    balanced = dict(re.findall(r'"(\dg\.\d+gb)": (\d+)', MIG_PARTED_BALANCED))
    layout = ",".join(f"{n}x{name}" for name, n in balanced.items())
    plan = mig.plan_layout(ps, layout, gpu="gh200")
    assert sorted(i.profile.name for i in plan.instances) == ["1g.12gb", "1g.12gb", "2g.24gb", "3g.48gb"]
    for name, count in MIG_PARTED_ALL.items():
        assert mig.fits(ps, [mig.find_profile(ps, name)] * count), name
        assert not mig.fits(ps, [mig.find_profile(ps, name)] * (count + 1)), name


@pytest.mark.parametrize(
    ("layout", "fits"),
    [
        ("3g.48gb,2g.24gb,1g.24gb", True),
        ("4g.48gb,3g.48gb", True),
        ("7x1g.12gb", True),
        ("3g.48gb,3g.48gb,1g.12gb", False),  # 9 memory slots of 8
        ("1g.12gb+me,1g.12gb+me", False),  # one media instance at most
        ("3g.47gb", False),  # an H100 NVL profile, not a GH200 one
    ],
)
def test_mig_plan_for_gh200(ps, layout, fits):
    if fits:
        plan = mig.plan_layout(ps, layout, gpu="gh200", pci_device_ids=("0x2342",), device_filter=True)
        assert plan.profile_set.id == "gh200-96gb"
    else:
        with pytest.raises(InputError):
            mig.plan_layout(ps, layout, gpu="gh200")


def run_plan(*args):
    return CliRunner().invoke(mig_group, ["plan", *args], obj={"debug": False, "compat_dir": None})


def test_cli_mig_plan_gh200(tmp_path):
    out = tmp_path / "config.yaml"
    layout = "3g.48gb,2g.24gb,2x1g.12gb"
    result = run_plan(
        "--gpu", "gh200", "--layout", layout, "--device-filter", "--format", "json", "--out-config", str(out)
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["profile_set"] == "gh200-96gb"
    assert doc["placements_confirmed"] is False
    assert [i["profile"] for i in doc["instances"]] == ["3g.48gb", "2g.24gb", "1g.12gb", "1g.12gb"]
    assert "0x234210DE" in out.read_text()
    refused = run_plan("--gpu", "gh200", "--layout", "3g.48gb,3g.48gb,1g.12gb")
    assert isinstance(refused.exception, mig.MigLayoutError)
    assert refused.exception.exit_code == 2
    assert "gh200-96gb" in str(refused.exception)
