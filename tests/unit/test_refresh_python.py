"""The refresh tool's Python ranges, offline: the CPython versions with manylinux x86_64 wheels on
the index (a recorded real listing, tests/fixtures/package-index/) reproduce the committed
`python` rows of compat/frameworks.yaml instead of undoing them with Requires-Python."""

import json
from pathlib import Path

import pytest
import yaml
from support import COMPAT

from provision.matrix import refresh

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LISTINGS = FIXTURES / "package-index"
METADATA = FIXTURES / "wheel-metadata"


def listing(package: str) -> dict:
    return json.loads((LISTINGS / f"{package}.json").read_text())


def files_of(package: str, version: str) -> list[str]:
    names = [f["filename"] for f in listing(package)["files"] if f["filename"].split("-")[1] == version]
    assert names, f"no recorded files for {package} {version}"
    return names


def committed() -> dict[tuple[str, str], str]:
    doc = yaml.safe_load((COMPAT / "frameworks.yaml").read_text())
    return {(fw["package"], r["version"]): r["python"] for fw in doc["frameworks"] for r in fw["releases"]}


def recorded_releases() -> list[tuple[str, str]]:
    files = sorted(METADATA.glob("*x86_64*.METADATA"))  # the aarch64 ones: tests/data/test_arch.py
    assert files, "no recorded metadata"
    return [tuple(p.name.split("-")[:2]) for p in files]


@pytest.mark.parametrize(("package", "version"), recorded_releases())
def test_recorded_listing_gives_the_committed_range(package, version):
    requires = {f["requires-python"] for f in listing(package)["files"] if f["filename"].split("-")[1] == version}
    assert len(requires) == 1
    got = refresh.python_range(files_of(package, version), requires.pop())
    assert got == committed()[(package, version)]


def test_requires_python_alone_would_be_wrong():
    """torch 2.5.1 declares >=3.8.0, but its file list has no cp38 wheel and a cp313 one."""
    names = files_of("torch", "2.5.1")
    assert not any("-cp38-" in n for n in names)
    assert any("-cp313-" in n and "x86_64" in n for n in names)
    assert refresh.python_range(names, ">=3.8.0") == ">=3.9,<3.14"


def test_free_threaded_and_other_platforms_do_not_count():
    names = files_of("torch", "2.14.1")
    assert any("cp314t" in n and "manylinux" in n and "x86_64" in n for n in names)
    # the cp314t wheels alone would not give 3.14: only the default-ABI cp314 wheel does
    without = [n for n in names if "-cp314-cp314-" not in n]
    assert refresh.python_range(without, ">=3.10") == ">=3.10,<3.14"
    mac_and_arm = ["torch-9.0-cp315-cp315-macosx_14_0_arm64.whl", "torch-9.0-cp316-cp316-manylinux_2_28_aarch64.whl"]
    assert refresh.python_range(names + mac_and_arm, ">=3.10") == ">=3.10,<3.15"


@pytest.mark.parametrize(
    ("names", "requires", "expected"),
    [
        (
            ["x-1.0-cp39-cp39-manylinux_2_17_x86_64.whl", "x-1.0-cp312-cp312-manylinux_2_17_x86_64.whl"],
            None,
            ">=3.9,<3.13",
        ),
        (["x-1.0-cp38-cp38-manylinux1_x86_64.whl", "x-1.0-cp310-cp310-manylinux1_x86_64.whl"], ">=3.9", ">=3.10,<3.11"),
        (["x-1.0-cp39-abi3-manylinux_2_17_x86_64.whl"], ">=3.9", ">=3.9"),
        (["x-1.0-1-cp311-cp311-manylinux_2_28_x86_64.whl"], None, ">=3.11,<3.12"),  # a build tag
        (["x-1.0-py3-none-any.whl", "x-1.0-cp311-cp311-win_amd64.whl"], ">=3.8", ">=3.8"),
        ([], None, None),
    ],
)
def test_python_range_cases(names, requires, expected):
    assert refresh.python_range(names, requires) == expected


def recorded_index():
    """PyPI as recorded: the trimmed listings, and the recorded METADATA per wheel (PEP 658)."""
    metadata = {p.name.removesuffix(".METADATA"): p.read_text() for p in METADATA.glob("*.METADATA")}

    def fetch(url: str, headers: dict) -> bytes:
        for package in ("torch", "tensorflow"):
            if url == f"https://pypi.org/simple/{package}/":
                return (LISTINGS / f"{package}.json").read_bytes()
        if url.startswith("https://files.pythonhosted.org/") and url.endswith(".metadata"):
            return metadata[url.rsplit("/", 1)[1].removesuffix(".metadata")].encode()
        if "download.pytorch.org" in url:
            raise OSError("unreachable in this test")
        raise AssertionError(f"unexpected fetch {url}")

    return fetch


def test_refresh_writes_the_committed_ranges_and_header():
    doc = refresh.refresh(COMPAT, fetch=recorded_index(), ranged=None, log=lambda m: None)
    got = {(fw["package"], r["version"]): r["python"] for fw in doc["frameworks"] for r in fw["releases"]}
    assert sorted(got) == sorted(recorded_releases())
    old = committed()
    assert {k: old[k] for k in got} == got
    header = [ln for ln in (COMPAT / "frameworks.yaml").read_text().splitlines() if ln.startswith("#")]
    assert [ln for ln in refresh.dump(doc).splitlines() if ln.startswith("#")] == header
