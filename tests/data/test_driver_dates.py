"""Issue 23: driver release dates are NVIDIA's, read from the recorded opening lines of its driver
manifests (tests/fixtures/refresh/driver-redist, SOURCE.txt), not the day NVIDIA's driver container
first built the release (535.154.05, 580.105.08 and 515.48.07 carried those build dates)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from support import ROOT

from provision.versions import DottedVersion as Version

RECORDED = ROOT / "tests" / "fixtures" / "refresh" / "driver-redist"
_DATE = re.compile(r'^    "release_date": "(\d{4}-\d{2}-\d{2})",$', re.M)
_LABEL = re.compile(r'^    "release_label": "([0-9.]+)",$', re.M)


def manifests() -> dict[str, str]:
    """{driver version: release_date} from every recorded manifest head."""
    out = {}
    for path in sorted(RECORDED.glob("redistrib_*.json.head")):
        text = path.read_text()
        version = path.name.removeprefix("redistrib_").removesuffix(".json.head")
        assert text.startswith("{\n"), path.name
        (date,) = _DATE.findall(text)
        dt.date.fromisoformat(date)
        labels = _LABEL.findall(text)
        assert labels in ([], [version]), (path.name, labels)  # the R515 format has no release_label
        out[version] = date
    return out


def test_the_recorded_copy_names_its_source_key(real_matrix):
    key = re.search(r"^key: (\S+)$", (RECORDED / "SOURCE.txt").read_text(), re.M).group(1)
    assert key == "driver-redist"
    assert real_matrix.sources[key].kind == "primary"


@pytest.mark.parametrize(("version", "date"), sorted(manifests().items()))
def test_each_recorded_manifest_dates_its_release(real_matrix, version, date):
    v = Version(version)
    branch = real_matrix.branch(v.release[0])
    assert branch is not None, version
    rel = branch.release(v)
    assert rel is not None, f"{version}: recorded, not catalogued"
    assert (rel.date, rel.source) == (date, "driver-redist")


def test_the_three_container_build_dates_are_gone(real_matrix):
    """The audit's three rows: each now cites the manifest, and differs from the container date it had."""
    dated = manifests()
    container_dates = {"535.154.05": "2024-02-01", "580.105.08": "2025-11-13", "515.48.07": "2022-06-16"}
    for version, container in container_dates.items():
        rel = real_matrix.branch(int(version.split(".")[0])).release(Version(version))
        assert rel.date == dated[version] != container, version
