"""Broken data is reported with the file and the key path (exit 3), never loaded."""

import re

import pytest
from support import FIXTURE_COMPAT, edited_compat, make_compat

from provision.errors import CompatDataError
from provision.matrix.loader import key_path, load_matrix


@pytest.mark.parametrize(
    ("file", "old", "new", "where", "what"),
    [
        (
            "cuda.yaml",
            'min_driver: "580.95.05"',
            "min_driver: 580.95",
            "releases[0](13.0.2).min_driver",
            "quoted string",
        ),
        (
            "gpus.yaml",
            'compute_capability: "9.0"',
            "compute_capability: 9.0",
            "gpus[1](h100-sxm).compute_capability",
            "quoted string",
        ),
        ("drivers.yaml", "type: pb", "type: stable", "branches[1](595).type", "is not one of"),
        ("os.yaml", "pkg_manager: apt", "pkg_manager: apt, colour: blue", "os[0](ubuntu22.04)", "unknown key"),
        ("images.yaml", "repository: nvidia/cuda\n", "", "", "'repository' is a required property"),
    ],
)
def test_schema_errors_name_file_and_key(tmp_path, file, old, new, where, what):
    compat = edited_compat(tmp_path, file, old, new, FIXTURE_COMPAT)
    with pytest.raises(CompatDataError) as info:
        load_matrix(compat)
    err = info.value
    assert err.exit_code == 3
    assert err.file == file
    assert err.key_path == where
    assert what in err.message


@pytest.mark.parametrize(
    ("file", "old", "new", "what"),
    [
        ("gpus.yaml", "architecture: hopper", "architecture: kepler", "unknown architecture 'kepler'"),
        (
            "cuda.yaml",
            'source: fixture}\n  - {version: "13.0.0"',
            'source: nowhere}\n  - {version: "13.0.0"',
            "unknown source 'nowhere'",
        ),
        ("drivers.yaml", '{version: "595.91.07"', '{version: "596.91.07"', "is not a 595 release"),
        ("cuda.yaml", '"13.0.2"', '"11.0.2"', "newest first"),
        (
            "gpus.yaml",
            "members: [a100-pcie-80gb, h100-sxm]",
            "members: [a100-pcie-80gb, h100-pcie]",
            "unknown GPU 'h100-pcie'",
        ),
        ("gpus.yaml", "aliases: [h100-sxm5]", "aliases: [b200]", "also used by"),
    ],
)
def test_invariants(tmp_path, file, old, new, what):
    compat = edited_compat(tmp_path, file, old, new, FIXTURE_COMPAT)
    with pytest.raises(CompatDataError, match=re.escape(what)) as info:
        load_matrix(compat)
    assert info.value.exit_code == 3


def test_invalid_yaml_names_the_line(tmp_path):
    compat = edited_compat(tmp_path, "os.yaml", "os:\n", "os:\n  - {id: [\n", FIXTURE_COMPAT)
    with pytest.raises(CompatDataError, match=r"os\.yaml: line \d+: invalid YAML"):
        load_matrix(compat)


def test_missing_file(tmp_path):
    compat = make_compat(tmp_path / "compat")
    (compat / "cudnn.yaml").unlink()
    with pytest.raises(CompatDataError, match=r"cudnn\.yaml: cannot read"):
        load_matrix(compat)


def test_key_path_annotates_ids():
    doc = {"gpus": [{"id": "a"}, {"id": "b", "memory": {"size_gb": 1}}]}
    assert key_path(doc, ["gpus", 1, "memory", "size_gb"]) == "gpus[1](b).memory.size_gb"
