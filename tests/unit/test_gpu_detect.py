"""provision.matrix.detect: live nvidia-smi output -> catalogue ids, and MIG profiles against the catalogue."""

from __future__ import annotations

import pytest
from support import ROOT, SEVEN_SLICE_LGIPP

from provision.matrix.detect import (
    catalogue_gpu,
    identify,
    mig_differences,
    os_id,
    parse_gpu_query,
    parse_lgip,
    parse_lgipp,
    pci_device,
)

DOCTOR = ROOT / "tests" / "fixtures" / "doctor"
H200_QUERY = ROOT / "tests" / "gpu" / "data" / "query-gpu__h200__gpu-exporter.csv"
# `nvidia-smi mig -lgipp` on an A100-SXM4-40GB, as printed in NVIDIA's MIG user guide
# (the placements compat/mig.yaml cites for a100-40gb).
A100_LGIPP = SEVEN_SLICE_LGIPP


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("0x233510DE", "0x2335"), ("0x20b510de", "0x20B5"), ("0x2335", "0x2335"), ("2330", "0x2330"), ("N/A", "N/A")],
)
def test_pci_device(raw, expected):
    assert pci_device(raw) == expected


def test_identify_a_real_h200_query(real_matrix):
    gpus = identify(real_matrix, H200_QUERY.read_text(encoding="utf-8"))
    assert [(g.index, g.name, g.device_id, g.catalogue_id) for g in gpus] == [(0, "NVIDIA H200", "0x2335", "h200")]


def test_identify_every_catalogued_device_id(real_matrix):
    """Each catalogued PCI device id, printed as nvidia-smi does (device then vendor), maps back to its GPU."""
    rows = [(g.id, d) for g in real_matrix.gpus for d in g.pci_device_ids]
    assert rows
    text = "index, name, pci.device_id\n" + "".join(
        f"{i}, {gid}, 0x{d[2:].upper()}10DE\n" for i, (gid, d) in enumerate(rows)
    )
    assert [g.catalogue_id for g in identify(real_matrix, text)] == [gid for gid, _ in rows]


def test_identify_leaves_an_unknown_gpu_uncatalogued(real_matrix):
    unused = next(f"{n:04X}" for n in range(0x1000, 0x10000) if catalogue_gpu(real_matrix, f"0x{n:04X}") is None)
    text = f"name, pci.device_id\nSome GPU, 0x{unused}10DE\n"
    assert identify(real_matrix, text) == [(0, "Some GPU", f"0x{unused}", None)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "nvidia-smi printed nothing"),
        (
            (DOCTOR / "query-gpu__p100.csv").read_text(encoding="utf-8"),
            "not --query-gpu CSV with name and pci.device_id",
        ),
        ("name, pci.device_id\nNVIDIA H200, 0x233510DE, extra\n", "row 2 has 3 values for 2 columns"),
    ],
)
def test_parse_gpu_query_refuses_other_output(text, message):
    with pytest.raises(ValueError, match=message):
        parse_gpu_query(text)


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        ('ID=ubuntu\nVERSION_ID="22.04"\n', "ubuntu22.04"),
        ('ID=ubuntu\nVERSION_ID="24.04"\n', "ubuntu24.04"),
        ('ID="rocky"\nVERSION_ID="9.4"\n', "rocky9"),
        ('ID="rhel"\nVERSION_ID="9.3"\n', "rhel9"),
        ('ID=debian\nVERSION_ID="12"\n', "debian12"),
        ('ID=ubuntu\nVERSION_ID="20.04"\n', None),
        ('ID=alpine\nVERSION_ID="3.20.0"\n', None),
        ("", None),
    ],
)
def test_os_id(real_matrix, release, expected):
    if expected is not None and expected not in real_matrix.os_ids():
        pytest.skip(f"{expected} is not catalogued")
    assert os_id(real_matrix, release) == expected


def test_lgip_and_lgipp_of_an_a100_match_the_catalogue(real_matrix):
    rows = parse_lgip((DOCTOR / "mig-lgip__a100.txt").read_text(encoding="utf-8"))
    assert [(r.name, r.id, r.total) for r in rows] == [
        ("1g.5gb", 19, 7),
        ("1g.5gb+me", 20, 1),
        ("1g.10gb", 15, 4),
        ("2g.10gb", 14, 3),
        ("3g.20gb", 9, 2),
        ("4g.20gb", 5, 1),
        ("7g.40gb", 0, 1),
    ]
    placements = parse_lgipp(A100_LGIPP)
    assert placements[4] == (0, 9, (0, 4), 4)
    assert placements[6] == (0, 0, (0,), 8)
    assert mig_differences(real_matrix.mig_set("a100-40gb"), rows, placements) == []


def test_mig_differences_name_each_disagreement(real_matrix):
    profile_set = real_matrix.mig_set("a100-40gb")
    rows = parse_lgip((DOCTOR / "mig-lgip__a100.txt").read_text(encoding="utf-8"))
    rows = [r._replace(total=6) if r.id == 19 else r for r in rows if r.id != 0]
    placements = parse_lgipp(A100_LGIPP.replace("{0,4}:4", "{0,2,4}:4"))
    assert mig_differences(profile_set, rows, placements) == [
        "GPU 0: 1g.5gb allows 6 instances; a100-40gb says 7",
        "GPU 0: a100-40gb lists 7g.40gb (id 0); nvidia-smi mig -lgip does not",
        "GPU 0: 3g.20gb (id 9) places at {0,2,4}:4; a100-40gb says {0,4}:4",
    ]
    # Another GPU's profiles (an 80 GB A100) differ by name from the 40 GB set.
    lgip = parse_lgip((DOCTOR / "mig-lgip__a100.txt").read_text(encoding="utf-8"))
    other = mig_differences(real_matrix.mig_set("a100-80gb"), lgip, [])
    assert "GPU 0: profile id 19 is 1g.5gb; a100-80gb says 1g.10gb" in other


def test_mig_differences_only_look_at_the_given_gpu(real_matrix):
    profile_set = real_matrix.mig_set("a100-40gb")
    on_gpu1 = [r._replace(gpu=1) for r in parse_lgip((DOCTOR / "mig-lgip__a100.txt").read_text(encoding="utf-8"))]
    wrong_on_gpu0 = parse_lgipp(A100_LGIPP.replace("{0,4}:4", "{0}:4"))
    assert mig_differences(profile_set, on_gpu1, wrong_on_gpu0, gpu=1) == []
    problems = mig_differences(profile_set, on_gpu1, wrong_on_gpu0, gpu=0)
    assert len([p for p in problems if p.endswith("nvidia-smi mig -lgip does not")]) == len(profile_set.profiles)
    assert "GPU 0: 3g.20gb (id 9) places at {0}:4; a100-40gb says {0,4}:4" in problems
