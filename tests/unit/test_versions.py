import pytest

from provision.versions import (
    DottedVersion,
    PackageVersion,
    VersionSpec,
    major_minor,
    prefix_matches,
)


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("570.26", "570.124.06"),
        ("570.124.06", "580.65.06"),
        ("12.4", "12.10"),
        ("9.1.0.70", "9.10.2.21"),
        ("535.54.03", "535.104.05"),
    ],
)
def test_numeric_order(low, high):
    assert DottedVersion(low) < DottedVersion(high)
    assert DottedVersion(high) > DottedVersion(low)


def test_prints_as_written_and_ignores_trailing_zeros():
    v = DottedVersion("580.95.05")
    assert str(v) == "580.95.05"
    assert DottedVersion("12.4") == DottedVersion("12.4.0")
    assert hash(DottedVersion("12.4")) == hash(DottedVersion("12.4.0"))


@pytest.mark.parametrize("bad", ["", "12.", "v12", "12.4-1", "banana", "1.2.3rc1", None, 12.4])
def test_rejects_non_dotted(bad):
    with pytest.raises(ValueError, match="not a dotted"):
        DottedVersion(bad)


@pytest.mark.parametrize(
    ("spec", "inside", "outside"),
    [
        (">=12.0,<13", ["12.0", "12.9.1", "12.10"], ["11.8", "13.0", "13.0.0"]),
        (">=11.8,<11.9", ["11.8", "11.8.0"], ["11.9", "12.0", "11.7.1"]),
        ("<590", ["580", "535"], ["590", "610"]),
        ("==12.4", ["12.4.0"], ["12.4.1"]),
        ("!=13.1", ["13.0"], ["13.1.0"]),
    ],
)
def test_specs(spec, inside, outside):
    s = VersionSpec(spec)
    assert all(s.contains(v) for v in inside)
    assert not any(s.contains(v) for v in outside)


@pytest.mark.parametrize("bad", ["~=12.0", ">=12.0,", "12.0", ">= banana"])
def test_rejects_bad_specs(bad):
    with pytest.raises(ValueError, match="not a version constraint"):
        VersionSpec(bad)


def test_helpers():
    assert major_minor(DottedVersion("12")) == "12.0"
    assert major_minor(DottedVersion("12.4.1")) == "12.4"
    assert prefix_matches("12.4", DottedVersion("12.4.1"))
    assert not prefix_matches("12.4", DottedVersion("12.40.1"))


def test_package_pins():
    assert PackageVersion("1.17.8", "1").pin("nvidia-container-toolkit", "apt") == "nvidia-container-toolkit=1.17.8-1"
    assert PackageVersion("580.95.05").pin("cuda-drivers-580", "apt") == "cuda-drivers-580=580.95.05-*"
    assert PackageVersion("580.95.05").pin("nvidia-driver", "dnf") == "nvidia-driver-580.95.05"
    with pytest.raises(ValueError, match="unknown package manager"):
        PackageVersion("1").pin("x", "zypper")
