"""The images refresh source, offline: NVIDIA's container-images repository as recorded in
tests/fixtures/refresh/cuda-images (verbatim files of commit e3c1b680, see its SOURCE.txt) in,
the committed images.yaml rows out; a changed copy makes --check exit 1 with a diff."""

import shutil
from pathlib import Path

import pytest
import yaml
from support import COMPAT

from provision.matrix import refresh, refresh_images
from provision.matrix.loader import load_matrix
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.versions import DottedVersion as Version

COPY = Path(__file__).resolve().parent.parent / "fixtures" / "refresh" / "cuda-images"


def text(path: str) -> str:
    return (COPY / path).read_text()


def test_the_recorded_copy_names_a_catalogued_source():
    key = refresh_images.recorded_key(COPY)
    sources = yaml.safe_load((COMPAT / "sources.yaml").read_text())["sources"]
    assert key in sources
    assert "e3c1b680f08e358d51d190aaa156bba111e32509" in sources[key]["url"]


def test_tags_parsed_per_os_and_flavour():
    tags = refresh_images.parse_tags(text("doc/supported-tags.md"))
    assert tags["13.0.2"].os["rockylinux9"] == {"base", "runtime", "devel", "cudnn-runtime", "cudnn-devel"}
    assert tags["13.0.2"].marker == "cudnn"
    assert tags["12.3.2"].marker == "cudnn9"
    assert tags["12.2.2"].marker == "cudnn8"
    assert tags["12.5.1"].os["ubuntu24.04"] == {"base", "runtime", "devel"}  # no cudnn tags there
    assert tags["13.1.0"].os["ubi9"] == {"base", "runtime", "devel"}
    assert "rockylinux9" not in tags["11.8.0"].os
    ended = refresh_images.parse_tags(text("doc/unsupported-tags.md"))
    assert "13.0.1" in ended
    assert "13.0.1" not in tags


def test_tag_under_the_wrong_heading_is_refused():
    with pytest.raises(refresh_images.ImagesRefreshError, match="listed under"):
        refresh_images.parse_tags("### ubi9\n\n- `13.0.2-base-ubuntu22.04`\n")


def test_cudnn_from_both_dockerfile_forms():
    assert refresh_images.parse_cudnn(text("dist/13.0.2/rockylinux9/runtime/cudnn/Dockerfile")) == "9.14.0.64"
    assert refresh_images.parse_cudnn(text("dist/12.2.2/ubuntu2204/runtime/cudnn8/Dockerfile")) == "8.9.6.50"
    with pytest.raises(refresh_images.ImagesRefreshError, match="NV_CUDNN_VERSION"):
        refresh_images.parse_cudnn("FROM x\n")


def test_recorded_copy_round_trips_into_the_committed_rows():
    get = refresh_images.recorded_get(COPY)
    images = yaml.safe_load((COMPAT / "images.yaml").read_text())
    committed = refresh_images.catalogue_rows(images)
    lines = {
        ".".join(r["version"].split(".")[:2]) for r in yaml.safe_load((COMPAT / "cuda.yaml").read_text())["releases"]
    }
    oses = ["ubuntu22.04", "ubuntu24.04", "rockylinux9", "ubi9"]
    upstream = refresh_images.upstream_rows(get, oses, lines, set(committed))
    old, new = refresh_images.compare(upstream, committed, refresh_images.recorded_key(COPY))
    owned = "13.1.0 13.0.2 13.0.1 13.0.0 12.9.1 12.8.1 12.6.3 12.5.1 12.4.1 12.3.2 12.2.2 12.1.1 12.0.1 11.8.0"
    assert [r["cuda"] for r in old] == owned.split(), "every release the copy lists is compared"
    assert old == new
    assert refresh_images.check(COMPAT, get, refresh_images.recorded_key(COPY)) == []


def test_every_committed_row_line_is_in_the_writers_format():
    for line in (COMPAT / "images.yaml").read_text().splitlines(keepends=True):
        if refresh_images._ROW.match(line):
            assert refresh_images.format_row(yaml.safe_load(line[4:])) == line


def moved_copy(tmp_path: Path) -> Path:
    """The recorded copy as if upstream had moved: 12.9.1's cuDNN rebuilt, and 12.6.3's
    rockylinux9 cudnn tags withdrawn."""
    copy = tmp_path / "copy"
    shutil.copytree(COPY, copy)
    for dockerfile in (copy / "dist" / "12.9.1").glob("*/runtime/cudnn/Dockerfile"):
        dockerfile.write_text(dockerfile.read_text().replace("9.10.2.21-1", "9.10.3.1-1"))
    tags = copy / "doc" / "supported-tags.md"
    kept = [
        ln for ln in tags.read_text().splitlines(keepends=True) if "`12.6.3-cudnn-" not in ln or "rockylinux9" not in ln
    ]
    tags.write_text("".join(kept))
    return copy


def test_check_exits_0_on_the_recorded_copy(capsys):
    assert refresh.main(["--source", "images", "--check", "--from", str(COPY)]) == 0
    assert capsys.readouterr().out == ""


def test_check_exits_1_with_a_diff_when_upstream_moved(tmp_path, capsys):
    assert refresh.main(["--source", "images", "--check", "--from", str(moved_copy(tmp_path))]) == 1
    out = capsys.readouterr().out
    assert out.startswith("--- compat/images.yaml\n+++ upstream\n")
    assert '-{cuda: "12.9.1"' in out
    assert 'cudnn: {version: "9.10.3.1", marker: cudnn}' in out
    assert '+{cuda: "12.6.3"' in out
    assert "os: [ubuntu22.04, ubuntu24.04, ubi9]}" in out


def test_write_brings_the_rows_to_upstream_and_keeps_the_catalogue_valid(tmp_path, capsys):
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    images = compat / "images.yaml"
    # a catalogue that missed 13.1.0 and had 12.4.1 only on Ubuntu
    lines = [ln for ln in images.read_text().splitlines(keepends=True) if '{cuda: "13.1.0"' not in ln]
    lines = [
        ln.replace("os: [ubuntu22.04, rockylinux9, ubi9]", "os: [ubuntu22.04]") if '"12.4.1"' in ln else ln
        for ln in lines
    ]
    images.write_text("".join(lines))
    args = ["--compat-dir", str(compat), "--source", "images", "--from"]
    assert refresh.main([*args, str(COPY), "--check"]) == 1
    assert refresh.main([*args, str(moved_copy(tmp_path))]) == 0
    assert refresh.main([*args, str(moved_copy(tmp_path / "again")), "--check"]) == 0
    rows = {r["cuda"]: r for r in yaml.safe_load(images.read_text())["releases"]}
    assert rows["13.1.0"]["source"] == "cuda-images-2512"
    assert rows["13.1.0"]["cudnn"] is None
    assert rows["12.4.1"]["os"] == ["ubuntu22.04", "rockylinux9", "ubi9"]
    assert rows["12.9.1"]["cudnn"]["version"] == "9.10.3.1"
    assert rows["12.9.1"]["eol"]["superseded_by"] == "12.9.2", "an existing eol is kept"
    original = {r["cuda"]: r for r in yaml.safe_load((COMPAT / "images.yaml").read_text())["releases"]}
    assert {k: v for k, v in rows["12.9.1"].items() if k not in ("cudnn", "source")} == {
        k: v for k, v in original["12.9.1"].items() if k not in ("cudnn", "source")
    }, "fields the source does not own (platforms, ...) are kept"
    assert rows["13.2.1"] == yaml.safe_load((COMPAT / "images.yaml").read_text())["releases"][0], (
        "unowned rows untouched"
    )
    load_matrix(compat)  # schema and loader accept what was written


def test_unsafe_paths_are_refused(tmp_path):
    get = refresh_images.recorded_get(COPY)
    for path in ("../SOURCE.txt", "/etc/passwd", "doc/../../x"):
        with pytest.raises(refresh_images.ImagesRefreshError, match="unsafe"):
            get(path)


def test_from_needs_a_recorded_copy(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        refresh.main(["--source", "images", "--check", "--from", str(tmp_path)])
    assert exc.value.code == 2
    assert "not a recorded copy" in capsys.readouterr().err


def test_rocky9_has_the_supported_13x_updates_and_a_13_2_plan_resolves():
    """The rows NVIDIA's repository gives (cuda-images-2026): rockylinux9 tags and cuDNN for
    13.0.3, 13.1.2, 13.2.1 and 12.9.2; `provision plan --os rocky9 --gpu h100-sxm --cuda 13.2`
    resolves on the 13.2.1 image (it had no rockylinux9 image before)."""
    matrix = load_matrix(COMPAT)
    image = {str(i.cuda): i for i in matrix.images}
    expected = {"13.2.1": "9.20.0.48", "13.1.2": "9.17.1.4", "13.0.3": "9.14.0.64", "12.9.2": "9.10.2.21"}
    for version, cudnn in expected.items():
        assert {"rockylinux9", "ubi9"} <= set(image[version].os)
        assert image[version].cudnn_version == cudnn
        assert image[version].source == "cuda-images-2026"
    assert image["12.9.1"].superseded_by == image["12.9.2"].cuda
    assert image["12.8.1"].superseded_by == image["12.8.2"].cuda
    assert image["12.8.2"].cudnn_marker is None
    plan = resolve(matrix, PlanRequest(os="rocky9", gpu="h100-sxm", cuda="13.2"))
    assert plan.base_image == "nvidia/cuda:13.2.1-runtime-rockylinux9"
    assert plan.cudnn is not None
    assert plan.cudnn.version == "9.20.0.48"


def test_live_reads_nvidias_raw_files_and_treats_404_as_absent():
    import io
    import urllib.error

    asked = []

    def fetch(url: str, headers: dict) -> bytes:
        asked.append(url)
        path = url.removeprefix(refresh_images.UPSTREAM)
        if (COPY / path).is_file():
            return (COPY / path).read_bytes()
        raise urllib.error.HTTPError(url, 404, "Not Found", {}, io.BytesIO())

    get = refresh_images.live_get(fetch)
    assert refresh_images.check(COMPAT, get, refresh_images.LIVE_KEYS) != [], "newer rows upstream lacks show up"
    assert asked[0] == "https://gitlab.com/nvidia/container-images/cuda/-/raw/master/doc/supported-tags.md"
    assert get("doc/nothing.md") is None


COPY_2026 = COPY.parent / "cuda-images-2026"


@pytest.mark.parametrize("cuda", ["13.2.1", "13.1.2", "13.0.3", "12.9.2"])
def test_2026_rows_carry_the_cudnn_of_nvidias_rockylinux9_dockerfiles(cuda):
    dockerfile = (COPY_2026 / "dist" / cuda / "rockylinux9" / "runtime" / "cudnn" / "Dockerfile").read_text()
    assert f"FROM ${{IMAGE_NAME}}:{cuda}-runtime-rockylinux9 AS base" in dockerfile
    row = next(r for r in yaml.safe_load((COMPAT / "images.yaml").read_text())["releases"] if r["cuda"] == cuda)
    assert row["source"] == refresh_images.recorded_key(COPY_2026)
    assert "rockylinux9" in row["os"]
    assert row["cudnn"]["version"] == refresh_images.parse_cudnn(dockerfile)


def test_a_partial_copy_is_refused_by_from(capsys):
    assert refresh.main(["--source", "images", "--check", "--from", str(COPY_2026)]) == 1
    assert "supported-tags.md is missing" in capsys.readouterr().err


def test_write_keeps_a_rows_toolkit(tmp_path):
    """`toolkit` (the cuda.yaml release an image set carries) is not the images source's to own:
    a row the write rewrites keeps it, in the file's one-line style, and the catalogue still loads."""
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    images = compat / "images.yaml"
    toolkit = ', toolkit: {version: "12.9.0", cublas: "12.9.1.4", source: cuda-images-2026-toolkit}'
    lines = [
        ln.replace(", source: cuda-images}", f"{toolkit}, source: cuda-images}}") if '{cuda: "12.9.1"' in ln else ln
        for ln in images.read_text().splitlines(keepends=True)
    ]
    assert any(toolkit in ln for ln in lines), "catalogue changed: no 12.9.1 row to mark"
    images.write_text("".join(lines))
    load_matrix(compat)
    args = ["--compat-dir", str(compat), "--source", "images", "--from", str(moved_copy(tmp_path))]
    assert refresh.main(args) == 0
    row = next(ln for ln in images.read_text().splitlines() if '{cuda: "12.9.1"' in ln)
    assert 'cudnn: {version: "9.10.3.1", marker: cudnn}' in row, "the row was rewritten"
    assert toolkit in row
    assert row.endswith(f", source: {refresh_images.recorded_key(COPY)}}}"), "the row cites the refresh's source"
    assert str(load_matrix(compat).image_of(Version("12.9.0"), "nvidia/cuda:12.9.1-base-ubuntu22.04").cuda) == "12.9.1"
