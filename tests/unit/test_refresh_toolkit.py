"""The container-toolkit refresh source, offline: the release tags of NVIDIA/nvidia-container-toolkit
as recorded in tests/fixtures/refresh/container-toolkit/tags.txt (``git for-each-ref`` of the stored
repository, see its SOURCE.txt) in, compat/container_toolkit.yaml's rows out."""

import shutil
from pathlib import Path

import pytest
import yaml
from support import COMPAT, one_error_line

from provision.matrix import refresh, refresh_toolkit
from provision.matrix.loader import load_matrix

COPY = Path(__file__).resolve().parent.parent / "fixtures" / "refresh" / "container-toolkit"


def test_final_releases_only_with_their_tag_dates():
    tags = refresh_toolkit.parse_tags((COPY / "tags.txt").read_text())
    assert tags["1.20.0"] == "2026-08-12"
    assert tags["1.17.5"] == "2025-03-07"  # a lightweight tag: its commit's date
    assert not any("rc" in v for v in tags)
    with pytest.raises(refresh_toolkit.ToolkitRefreshError):
        refresh_toolkit.parse_tags("v1.0.0-rc.1 2020-01-01\n")


def test_recorded_tags_round_trip_into_the_committed_rows():
    doc = yaml.safe_load((COMPAT / "container_toolkit.yaml").read_text())
    mine = refresh_toolkit.committed(doc)
    theirs = refresh_toolkit.rows((COPY / "tags.txt").read_text(), mine[-1]["version"])
    assert len(theirs) == len(mine) >= 25
    assert theirs == mine
    assert refresh.main(["--source", "container-toolkit", "--check", "--from", str(COPY)]) == 0


def moved(tmp_path: Path) -> Path:
    """The recorded tags as if upstream had moved: a new release, one retagged a day later."""
    copy = tmp_path / "ctk"
    shutil.copytree(COPY, copy)
    tags = (copy / "tags.txt").read_text().replace("v1.18.2 2026-01-23", "v1.18.2 2026-01-24")
    (copy / "tags.txt").write_text("v1.20.1 2026-11-20\nv1.21.0-rc.1 2026-11-25\n" + tags)
    return copy


def test_check_exits_1_with_a_diff_when_upstream_moved(tmp_path, capsys):
    assert refresh.main(["--source", "container-toolkit", "--check", "--from", str(moved(tmp_path))]) == 1
    out = capsys.readouterr().out
    assert out.startswith("--- compat/container_toolkit.yaml\n+++ upstream\n")
    assert '+{version: "1.20.1", date: "2026-11-20"}' in out
    assert '-{version: "1.18.2", date: "2026-01-23"}' in out
    assert '+{version: "1.18.2", date: "2026-01-24"}' in out
    assert "1.21.0" not in out


def test_write_adds_and_corrects_rows_keeping_the_rest(tmp_path):
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    before = (compat / "container_toolkit.yaml").read_text()
    args = ["--compat-dir", str(compat), "--source", "container-toolkit", "--from", str(moved(tmp_path))]
    assert refresh.main(args) == 0
    assert refresh.main([*args, "--check"]) == 0
    after = (compat / "container_toolkit.yaml").read_text()
    assert '  - {version: "1.20.1", date: "2026-11-20", source: nvidia-container-toolkit}\n' in after
    assert (
        after.splitlines()[: before.splitlines().index("releases:") + 1]
        == before.splitlines()[: before.splitlines().index("releases:") + 1]
    )
    assert str(load_matrix(compat).toolkit[0].version) == "1.20.1"


def copy_with_tags(tmp_path: Path, data: bytes | None) -> Path:
    copy = tmp_path / "ctk"
    shutil.copytree(COPY, copy)
    if data is not None:
        (copy / "tags.txt").write_bytes(data)
    return copy


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\xff" + (COPY / "tags.txt").read_bytes(), "not UTF-8 (byte 0xff at offset 0)"),
        (b"", "no vX.Y.Z release tag in the listing"),
        (b"v1.21.0-rc.1 2026-11-25\n", "no vX.Y.Z release tag in the listing"),
    ],
    ids=["not-utf8", "empty", "no-final-release"],
)
def test_a_bad_recorded_listing_is_bad_input_and_writes_nothing(tmp_path, capsys, data, says):
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    before = (compat / "container_toolkit.yaml").read_bytes()
    copy = copy_with_tags(tmp_path, data)
    for check in ([], ["--check"]):
        rc, err = one_error_line(
            ["--compat-dir", str(compat), "--source", "container-toolkit", "--from", str(copy), *check], capsys
        )
        assert (rc, says in err) == (2, True), err
    assert (compat / "container_toolkit.yaml").read_bytes() == before


def test_a_symlinked_or_oversized_listing_is_refused(tmp_path, monkeypatch):
    copy = copy_with_tags(tmp_path, None)
    (copy / "tags.txt").unlink()
    (copy / "tags.txt").symlink_to(COPY / "tags.txt")
    with pytest.raises(refresh_toolkit.ToolkitRefreshError, match="symlink"):
        refresh_toolkit.recorded_listing(copy)
    from provision.matrix import refresh_images

    monkeypatch.setattr(refresh_images, "MAX_RECORDED_BYTES", 100)
    with pytest.raises(refresh_toolkit.ToolkitRefreshError, match="over the 100-byte cap"):
        refresh_toolkit.recorded_listing(COPY)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda text: "releases: [\n", "container_toolkit.yaml: line 2: invalid YAML"),
        (lambda text: text.replace('{version: "1.', '{version: "1.x', 1), "'1.x"),
    ],
    ids=["unclosed-list", "version-1.x"],
)
def test_a_broken_catalogue_exits_3(tmp_path, capsys, edit, says):
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    path = compat / "container_toolkit.yaml"
    path.write_text(edit(path.read_text()))
    for check in ([], ["--check"]):
        args = ["--compat-dir", str(compat), "--source", "container-toolkit", "--from", str(COPY), *check]
        rc, err = one_error_line(args, capsys)
        assert (rc, says in err) == (3, True), err


def test_an_unknown_source_key_is_one_line_exit_2(tmp_path, capsys):
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    args = ["--compat-dir", str(compat), "--source", "container-toolkit", "--from", str(moved(tmp_path))]
    rc, err = one_error_line([*args, "--source-key", "nope"], capsys)
    assert (rc, "--source-key nope: not a key of compat/sources.yaml" in err) == (2, True)
