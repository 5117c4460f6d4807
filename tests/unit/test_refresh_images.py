"""The images refresh source, offline: NVIDIA's container-images repository as recorded in
tests/fixtures/refresh/cuda-images (verbatim files of commit e3c1b680, see its SOURCE.txt) in,
the committed images.yaml rows out; a changed copy makes --check exit 1 with a diff."""

import shutil
from pathlib import Path

import pytest
import yaml
from support import COMPAT, one_error_line

from provision.errors import CompatDataError
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
    oses = list(dict.fromkeys(o["cuda_image_os"] for o in yaml.safe_load((COMPAT / "os.yaml").read_text())["os"]))
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
    assert "os: [ubuntu22.04, ubuntu24.04, ubi9, rockylinux8, ubi8]}" in out, "rockylinux9 left cudnn.os"


def test_write_brings_the_rows_to_upstream_and_keeps_the_catalogue_valid(tmp_path, capsys):
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    images = compat / "images.yaml"
    original = {r["cuda"]: r for r in yaml.safe_load((COMPAT / "images.yaml").read_text())["releases"]}
    # a catalogue that missed 13.1.0 and had 12.4.1 only on Ubuntu
    lines = [ln for ln in images.read_text().splitlines(keepends=True) if '{cuda: "13.1.0"' not in ln]
    listed = "os: [" + ", ".join(original["12.4.1"]["os"]) + "]"
    lines = [ln.replace(listed, "os: [ubuntu22.04]") if '"12.4.1"' in ln else ln for ln in lines]
    assert sum("os: [ubuntu22.04]," in ln for ln in lines) == 1
    images.write_text("".join(lines))
    args = ["--compat-dir", str(compat), "--source", "images", "--from"]
    assert refresh.main([*args, str(COPY), "--check"]) == 1
    assert refresh.main([*args, str(moved_copy(tmp_path))]) == 0
    assert refresh.main([*args, str(moved_copy(tmp_path / "again")), "--check"]) == 0
    rows = {r["cuda"]: r for r in yaml.safe_load(images.read_text())["releases"]}
    assert rows["13.1.0"]["source"] == "cuda-images-2512"
    assert rows["13.1.0"]["cudnn"] is None
    assert rows["12.4.1"]["os"] == original["12.4.1"]["os"]
    assert rows["12.9.1"]["cudnn"]["version"] == "9.10.3.1"
    assert rows["12.9.1"]["eol"]["superseded_by"] == "12.9.2", "an existing eol is kept"
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
    assert refresh.main(["--source", "images", "--check", "--from", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert "not a recorded copy" in err


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


def test_a_partial_copy_is_refused_by_from(tmp_path, capsys):
    """A broken recorded copy is bad input (exit 2); exit 1 means only that --check found drift.
    The 2026 copy without its TREE.txt lists no tags at all."""
    copy = tmp_path / "copy"
    shutil.copytree(COPY_2026, copy)
    (copy / "TREE.txt").unlink()
    assert refresh.main(["--source", "images", "--check", "--from", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "supported-tags.md is missing" in err
    assert err.count("\n") == 1
    assert "(hint: " in err


def test_write_keeps_a_rows_toolkit(tmp_path):
    """`toolkit` (the cuda.yaml release an image set carries) is not the images source's to own:
    a row the write rewrites keeps it, in the file's one-line style, and the catalogue still loads."""
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    images = compat / "images.yaml"
    toolkit = ', toolkit: {version: "12.9.0", cublas: "12.9.1.4", source: cuda-images-2026-toolkit}'
    lines = [
        "{0}{2}{1}".format(*ln.rpartition(", source: ")[::2], toolkit + ", source: ") if '{cuda: "12.9.1"' in ln else ln
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


# -- a write never leaves a catalogue that does not load ----------------------------------------
def with_tags(tmp_path: Path, *tags: str, name: str = "copy") -> Path:
    """The recorded copy with extra tags listed under ``### ubuntu22.04`` of supported-tags.md."""
    copy = tmp_path / name
    shutil.copytree(COPY, copy)
    doc = copy / "doc" / "supported-tags.md"
    listed = "".join(f"- `{tag}`\n" for tag in tags)
    doc.write_text(doc.read_text().replace("### ubuntu22.04\n", f"### ubuntu22.04\n\n{listed}", 1))
    return copy


def rebuilt_copy(tmp_path: Path, cudart_of_12_8_1: str = "12.8.90") -> Path:
    """The recorded copy plus a 12.8.2 image set on ubuntu22.04 (a cuBLAS rebuild, not a cuda.yaml
    release). Its runtime Dockerfile is NVIDIA's recorded 12.8.2 one (cuda-images-2026, there for
    rockylinux9); the base Dockerfiles are stand-ins holding only the NV_CUDA_CUDART_VERSION line
    (12.8.90, the cudart of 12.8.1 and 12.8.2: compat/cuda.yaml header)."""
    copy = with_tags(tmp_path, *(f"12.8.2-{f}-ubuntu22.04" for f in ("base", "runtime", "devel")))
    runtime = copy / "dist" / "12.8.2" / "ubuntu2204" / "runtime" / "Dockerfile"
    runtime.parent.mkdir(parents=True)
    shutil.copyfile(COPY_2026 / "dist" / "12.8.2" / "rockylinux9" / "runtime" / "Dockerfile", runtime)
    for cuda, cudart in (("12.8.2", "12.8.90"), ("12.8.1", cudart_of_12_8_1)):
        base = copy / "dist" / cuda / "ubuntu2204" / "base" / "Dockerfile"
        base.parent.mkdir(parents=True)
        base.write_text(f"ARG IMAGE_NAME\nENV NV_CUDA_CUDART_VERSION={cudart}-1\n")
    return copy


def catalogue_without_12_8_2(tmp_path: Path) -> Path:
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    images = compat / "images.yaml"
    lines = [ln for ln in images.read_text().splitlines(keepends=True) if '{cuda: "12.8.2"' not in ln]
    images.write_text("".join(ln.replace('superseded_by: "12.8.2"', "superseded_by: null") for ln in lines))
    load_matrix(compat)
    return compat


def images_args(compat: Path, copy: Path) -> list[str]:
    return ["--compat-dir", str(compat), "--source", "images", "--from", str(copy)]


def test_a_new_image_set_past_its_toolkit_is_written_with_its_toolkit_and_cublas(tmp_path, capsys):
    compat = catalogue_without_12_8_2(tmp_path)
    assert refresh.main(images_args(compat, rebuilt_copy(tmp_path))) == 0
    rows = {r["cuda"]: r for r in yaml.safe_load((compat / "images.yaml").read_text())["releases"]}
    assert rows["12.8.2"]["toolkit"] == {"version": "12.8.1", "cublas": "12.8.5.5", "source": "cuda-images-2512"}
    assert rows["12.8.2"]["os"] == ["ubuntu22.04"]
    assert rows["12.8.2"]["flavours"] == ["base", "runtime", "devel"]
    image = {str(i.cuda): i for i in load_matrix(compat).images}["12.8.2"]
    assert str(image.carries) == "12.8.1"


def unchanged_after(compat: Path, args: list[str], capsys) -> str:
    """Runs a refresh that must fail without touching images.yaml; returns its one error line."""
    before = (compat / "images.yaml").read_bytes()
    rc = refresh.main(args)
    err = capsys.readouterr().err
    assert (compat / "images.yaml").read_bytes() == before, "images.yaml must be left as it was"
    assert sorted(p.name for p in compat.iterdir()) == sorted(p.name for p in COMPAT.iterdir()), "no stray files"
    load_matrix(compat)
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    return f"{rc} {err}"


def test_a_new_image_set_whose_cudart_no_release_carries_is_refused(tmp_path, capsys):
    compat = catalogue_without_12_8_2(tmp_path)
    out = unchanged_after(compat, images_args(compat, rebuilt_copy(tmp_path, cudart_of_12_8_1="12.8.57")), capsys)
    assert out.startswith("2 error: images: add its toolkit row by hand: CUDA 12.8.2")
    assert "cudart 12.8.90" in out


def test_a_new_image_set_past_its_toolkit_without_dockerfiles_is_refused(tmp_path, capsys):
    """The reviewer's repro: a 12.6.4 tag (12.6.4 is no cuda.yaml release) used to be written without
    `toolkit`, exit 0, and every provision command then exited 3."""
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    out = unchanged_after(compat, images_args(compat, with_tags(tmp_path, "12.6.4-base-ubuntu22.04")), capsys)
    assert out.startswith("2 error: images: add its toolkit row by hand: CUDA 12.6.4 is not a cuda.yaml")


def test_the_source_txt_key_must_be_a_sources_yaml_key(tmp_path, capsys):
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    copy = moved_copy(tmp_path)
    (copy / "SOURCE.txt").write_text((copy / "SOURCE.txt").read_text().replace("key: cuda-images-2512", "key: nope"))
    out = unchanged_after(compat, images_args(compat, copy), capsys)
    assert out.startswith("2 error: ")
    assert "key nope: not a key of compat/sources.yaml" in out


def test_text_that_would_break_the_catalogue_is_not_written(tmp_path):
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    before = (compat / "images.yaml").read_text()
    broken = before.replace("source: cuda-images-2512}", "source: nowhere}", 1)
    with pytest.raises(CompatDataError, match=r"not written.*nowhere") as exc:
        refresh.replace_checked(compat, "images.yaml", broken)
    assert exc.value.exit_code == 3
    assert (compat / "images.yaml").read_text() == before
    assert sorted(p.name for p in compat.iterdir()) == sorted(p.name for p in COMPAT.iterdir())
    refresh.replace_checked(compat, "images.yaml", before.replace("# Published", "# (refreshed) Published", 1))
    assert (compat / "images.yaml").read_text().startswith("# (refreshed) Published")


# -- every error is one line with its exit code -------------------------------------------------
def test_source_txt_without_a_key_line_is_bad_input(tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(COPY, copy)
    (copy / "SOURCE.txt").write_text("upstream: somewhere\n")
    rc, err = one_error_line(["--source", "images", "--check", "--from", str(copy)], capsys)
    assert (rc, "no 'key:' line" in err) == (2, True)


@pytest.mark.parametrize("path", ["SOURCE.txt", "doc/supported-tags.md"])
def test_a_non_utf8_recorded_file_is_bad_input(tmp_path, capsys, path):
    copy = tmp_path / "copy"
    shutil.copytree(COPY, copy)
    (copy / path).write_bytes(b"\xff" + (copy / path).read_bytes())
    rc, err = one_error_line(["--source", "images", "--check", "--from", str(copy)], capsys)
    assert (rc, "not UTF-8 (byte 0xff at offset 0)" in err) == (2, True)


def test_missing_and_empty_compat_dirs(tmp_path, capsys):
    args = ["--source", "images", "--from", str(COPY)]
    rc, err = one_error_line(["--compat-dir", str(tmp_path / "nonexistent"), *args, "--check"], capsys)
    assert (rc, "does not exist" in err) == (2, True)
    rc, err = one_error_line(["--compat-dir", str(tmp_path), *args, "--source-key", "x"], capsys)
    assert (rc, "sources.yaml: cannot read" in err) == (3, True), "a compat dir without its files: broken catalogue"


def test_a_broken_catalogue_exits_3_before_reading_upstream(tmp_path, capsys):
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    images = compat / "images.yaml"
    images.write_text(images.read_text().replace('{cuda: "12.4.1"', '{cuda: "12.x"', 1))
    rc, err = one_error_line(
        ["--compat-dir", str(compat), "--source", "images", "--check", "--from", str(COPY)], capsys
    )
    assert (rc, "images.yaml" in err) == (3, True)


# -- the recorded-copy reader ---------------------------------------------------------------------
def test_symlinks_in_a_recorded_copy_are_refused(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "supported-tags.md").write_text(text("doc/supported-tags.md"))
    copy = tmp_path / "copy"
    shutil.copytree(COPY, copy)
    (copy / "doc" / "supported-tags.md").unlink()
    (copy / "doc" / "supported-tags.md").symlink_to(outside / "supported-tags.md")
    with pytest.raises(refresh_images.ImagesRefreshError, match="symlink"):
        refresh_images.recorded_get(copy)("doc/supported-tags.md")
    rc, err = one_error_line(["--source", "images", "--check", "--from", str(copy)], capsys)
    assert (rc, "a symlink" in err) == (2, True)
    shutil.rmtree(copy / "doc")
    (copy / "doc").symlink_to(outside, target_is_directory=True)  # a symlinked directory on the way
    with pytest.raises(refresh_images.ImagesRefreshError, match="symlink"):
        refresh_images.recorded_get(copy)("doc/supported-tags.md")


def test_a_recorded_file_over_the_cap_is_refused_before_it_is_read(tmp_path, monkeypatch):
    size = len((COPY / "doc" / "supported-tags.md").read_bytes())
    monkeypatch.setattr(refresh_images, "MAX_RECORDED_BYTES", size - 1)
    with pytest.raises(refresh_images.ImagesRefreshError, match="over the"):
        refresh_images.recorded_get(COPY)("doc/supported-tags.md")
    monkeypatch.setattr(refresh_images, "MAX_RECORDED_BYTES", size)
    assert refresh_images.recorded_get(COPY)("doc/supported-tags.md") == text("doc/supported-tags.md")
    assert size == refresh_images.MAX_RECORDED_BYTES
    monkeypatch.undo()
    assert refresh_images.MAX_RECORDED_BYTES == 8 * 1024 * 1024


def test_an_empty_supported_tags_is_refused_not_read_as_every_row_withdrawn(tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(COPY, copy)
    (copy / "doc" / "supported-tags.md").write_text("# Supported tags\n")
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    out = unchanged_after(compat, images_args(compat, copy), capsys)
    assert out.startswith("2 error: images: doc/supported-tags.md lists no nvidia/cuda tags")
    rc, _err = one_error_line(["--source", "images", "--check", "--from", str(copy)], capsys)
    assert rc == 2


# -- a copy without supported-tags.md lists its tags by its Dockerfiles (TREE.txt) ------------------
def test_tree_paths_are_read_as_tags():
    supported, ended = refresh_images.parse_tree(
        "# comment\n\n"
        "dist/13.1.2/ubuntu2404/base/Dockerfile\n"
        "dist/13.1.2/ubuntu2404/runtime/cudnn/Dockerfile\n"
        "dist/13.1.2/rockylinux8/devel/Dockerfile\n"
        "dist/end-of-life/12.9.1/ubi8/runtime/Dockerfile\n"
    )
    assert supported["13.1.2"].os == {"ubuntu24.04": {"base", "cudnn-runtime"}, "rockylinux8": {"devel"}}
    assert supported["13.1.2"].marker == "cudnn"
    assert ended["12.9.1"].os == {"ubi8": {"runtime"}}


@pytest.mark.parametrize(
    "line",
    ["dist/13.1.2/ubuntu2404/runtime/Dockerfile.bak", "../dist/13.1.2/ubi8/base/Dockerfile", "doc/supported-tags.md"],
)
def test_a_tree_line_that_is_not_a_dockerfile_path_is_refused(line):
    with pytest.raises(refresh_images.ImagesRefreshError, match=r"TREE\.txt line 1"):
        refresh_images.parse_tree(line + "\n")


def test_the_2026_copy_checks_clean_and_a_platform_change_is_drift(tmp_path, capsys):
    assert refresh.main(["--source", "images", "--check", "--from", str(COPY_2026)]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(COPY_2026, copy)
    platforms = copy / "dist" / "13.1.2" / "cuda-platforms.json"
    platforms.write_text(platforms.read_text().replace('"ubi8": [\n        "arm64",\n', '"ubi8": [\n', 1))
    capsys.readouterr()
    assert refresh.main(["--source", "images", "--check", "--from", str(copy)]) == 1
    out = capsys.readouterr().out
    assert '+{cuda: "13.1.2"' in out
    assert "platforms: null" in out.split('+{cuda: "13.1.2"')[1].splitlines()[0]


def test_platforms_of_a_release_without_a_recorded_json_are_not_compared():
    """The 2512 copy records no cuda-platforms.json: the rows' platforms (cuda-images-platforms)
    stand, and --check passes."""
    get = refresh_images.recorded_get(COPY)
    assert refresh_images.check(COMPAT, get, refresh_images.recorded_key(COPY)) == []
