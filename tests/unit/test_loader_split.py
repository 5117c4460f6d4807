"""loader.build() maps each file's records through declared field tables: the declarations are
checked against the model, and every conversion keeps its file and key path in errors."""

import copy
import json

import pytest
from support import FIXTURE_COMPAT, make_compat

from provision.errors import CompatDataError
from provision.matrix import loader
from provision.matrix import model as m
from provision.versions import parse_specifier, parse_version


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return loader.read_raw(make_compat(tmp_path_factory.mktemp("split") / "compat", FIXTURE_COMPAT))


def test_a_declared_field_the_model_lacks_is_refused():
    with pytest.raises(TypeError, match="Gpu has no field memory_size"):
        loader._record(m.Gpu, memory_size=loader._tuple)


def test_undeclared_fields_copy_the_same_named_key():
    make = loader._record(m.Exclusion)
    item = {"os": "rocky9", "gpu": None, "reason": "r", "source": "s"}
    assert make(item, "unsupported.yaml", "unsupported[0]") == m.Exclusion("rocky9", None, "r", "s")
    with pytest.raises(KeyError, match="reason"):
        make({"os": None, "gpu": None, "source": None}, "unsupported.yaml", "unsupported[0]")


def test_fixture_catalogue_maps_every_file(raw):
    matrix = loader.build(raw)
    b200 = next(g for g in matrix.gpus if g.id == "b200")
    assert (b200.memory_gb, b200.fp8_tflops, b200.nvlink_generation) == (180, 4500, 5)
    assert b200.min_driver == parse_version("570.133.20")
    a100 = next(g for g in matrix.gpus if g.id == "a100-pcie-80gb")
    assert (a100.nvlink_generation, a100.nvlink_bandwidth_gbs, a100.min_driver, a100.pcie_generation) == (
        None,
        None,
        None,
        None,
    )
    branch_595 = next(b for b in matrix.drivers if b.branch == 595)
    assert [str(r.version) for r in branch_595.releases] == ["595.91.07", "595.58.03"]
    assert branch_595.releases[1].os == ("ubuntu22.04",)
    assert matrix.driver_packaging[0].branches == parse_specifier("<590")
    toolkit_doc = raw["container_toolkit"]
    assert len(matrix.toolkit) == len(toolkit_doc["releases"]) >= 2
    assert all(t.packages == tuple(toolkit_doc["packages"]) for t in matrix.toolkit)
    assert all(t.revision == toolkit_doc["revision"] for t in matrix.toolkit)
    first_image = matrix.images[0]
    assert (first_image.cudnn_version, first_image.cudnn_marker, first_image.cudnn_os) == (None, "cudnn", None)
    assert (first_image.eol_date, first_image.superseded_by, first_image.eol_source) == (None, None, None)


def test_image_end_of_life_block(raw):
    doc = copy.deepcopy(raw)
    release = doc["images"]["releases"][1]
    release["eol"] = {"date": "2026-01-01", "superseded_by": "13.0.2", "source": "fixture"}
    release["cudnn"]["os"] = ["ubuntu22.04"]
    image = loader.build(doc).images[1]
    assert (image.eol_date, image.superseded_by, image.eol_source) == (
        "2026-01-01",
        parse_version("13.0.2"),
        "fixture",
    )
    assert image.cudnn_os == ("ubuntu22.04",)


def test_the_cache_round_trip_builds_the_same_matrix(raw):
    assert loader.build(json.loads(json.dumps(raw))) == loader.build(raw)


def _set(doc, path, value):
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


V, S = parse_version, parse_specifier


@pytest.mark.parametrize(
    ("file", "path", "key_path", "parse"),
    [
        ("gpus", ["gpus", 0, "min_driver"], "gpus[0].min_driver", V),
        ("drivers", ["branches", 1, "releases", 1, "version"], "branches[1].releases[1].version", V),
        ("drivers", ["packaging", 1, "branches"], "packaging[1].branches", S),
        ("cuda", ["releases", 1, "min_driver"], "releases[1].min_driver", V),
        ("cuda", ["compute_capabilities", 0, "cuda"], "compute_capabilities[0].cuda", S),
        ("cuda", ["minor_version_compatibility", 0, "min_driver"], "minor_version_compatibility[0].min_driver", V),
        ("cudnn", ["releases", 0, "builds", 0, "cuda"], "releases[0].builds[0].cuda", S),
        ("cudnn", ["releases", 0, "builds", 0, "min_driver"], "releases[0].builds[0].min_driver", V),
        ("frameworks", ["frameworks", 0, "releases", 1, "version"], "frameworks[0].releases[1].version", V),
        ("images", ["releases", 2, "cuda"], "releases[2].cuda", V),
        ("images", ["releases", 2, "eol"], "releases[2].eol.superseded_by", V),
        ("container_toolkit", ["releases", 1, "version"], "releases[1].version", V),
    ],
)
def test_a_bad_version_names_its_file_and_key_path(raw, file, path, key_path, parse):
    bad = "not a version"
    try:
        parse(bad)
    except ValueError as exc:
        expected = str(exc)
    else:
        pytest.fail(f"{parse.__name__} accepted {bad!r}")
    doc = copy.deepcopy(raw)
    value = {"date": "2026-01-01", "superseded_by": bad, "source": "fixture"} if path[-1] == "eol" else bad
    _set(doc[file], path, value)
    with pytest.raises(CompatDataError) as info:
        loader.build(doc)
    err = info.value
    assert (err.file, err.key_path) == (f"{file}.yaml", key_path)
    assert str(err) == str(CompatDataError(f"{file}.yaml", key_path, expected))
