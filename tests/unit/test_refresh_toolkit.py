"""The container-toolkit refresh source, offline: the release tags of NVIDIA/nvidia-container-toolkit
as recorded in tests/fixtures/refresh/container-toolkit/tags.txt (``git for-each-ref`` of the stored
repository, see its SOURCE.txt) in, compat/container_toolkit.yaml's rows out."""

import shutil
from pathlib import Path

import pytest
import yaml
from support import COMPAT

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
