"""`provision matrix images` shows what each image set installs (its toolkit release, and the newer
cuBLAS of sets numbered past it: 12.8.2, 12.9.2, 13.0.3, 13.1.2) and the platforms its tags are
published for. The fixture catalogue has no set numbered past its toolkit, so those rows are
checked on the live catalogue as an invariant: every such row shows it."""

from __future__ import annotations

import json

import pytest

from provision.matrix.listing import TOOLKIT_MARK, listing

LEGEND = f"toolkit X{TOOLKIT_MARK}: the image set is numbered past the CUDA toolkit release it installs"


def _table_rows(out: str) -> dict[str, str]:
    """CUDA version -> its table line."""
    return {line.split()[0]: line for line in out.splitlines() if line[:1].isdigit()}


def test_every_set_numbered_past_its_toolkit_shows_it(cli, real_matrix, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one line per row: this test reads the cells, not the width
    past = [i for i in real_matrix.images if i.toolkit_source is not None]
    assert {str(i.cuda) for i in past} >= {"12.8.2", "12.9.2", "13.0.3", "13.1.2"}
    r = cli("matrix", "images")
    assert r.code == 0, r.err
    rows = _table_rows(r.out)
    for i in real_matrix.images:
        cells = rows[str(i.cuda)].split()
        if i.toolkit_source is not None:
            assert cells[1] == f"{i.toolkit}{TOOLKIT_MARK}", cells
            assert f"(cuBLAS {i.cublas})" in rows[str(i.cuda)]
            assert i.toolkit != i.cuda
        else:
            assert cells[1] == str(i.cuda), cells
        assert ", ".join(i.platforms) in rows[str(i.cuda)]
    assert LEGEND in r.out
    assert rows["12.9.2"].split()[1:4] == [f"12.9.1{TOOLKIT_MARK}", "(cuBLAS", "12.9.2.10)"]


def test_json_records_carry_toolkit_and_platforms(cli, real_matrix):
    r = cli("matrix", "images", "--format", "json")
    assert r.code == 0, r.err
    records = {rec["cuda"]: rec for rec in json.loads(r.out)}
    for i in real_matrix.images:
        rec = records[str(i.cuda)]
        assert rec["carries"] == str(i.carries)
        assert rec["platforms"] == list(i.platforms)
        assert rec["platforms_source"] == i.platforms_source
        if i.toolkit_source is None:
            assert rec["toolkit"] is None
        else:
            assert rec["toolkit"] == {"version": str(i.toolkit), "cublas": i.cublas, "source": i.toolkit_source}
            assert rec["toolkit"]["source"] in real_matrix.sources
    assert records["13.0.3"]["toolkit"]["version"] == "13.0.2"
    assert "linux/arm64" in records["13.0.3"]["platforms"]


def test_fixture_catalogue_has_no_marker_and_no_toolkit_legend(cli, fixture_compat, fixture_matrix):
    assert all(i.toolkit_source is None for i in fixture_matrix.images)
    r = cli("matrix", "images", "--compat-dir", str(fixture_compat))
    assert r.code == 0, r.err
    assert LEGEND not in r.out
    rows = _table_rows(r.out)
    for i in fixture_matrix.images:
        assert rows[str(i.cuda)].split()[1] == str(i.cuda)
        assert TOOLKIT_MARK not in rows[str(i.cuda)].split()[1]


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_headers_name_the_new_columns(cli, fmt, real_matrix):
    lst = listing(real_matrix, "images")
    assert lst.headers[:5] == ("CUDA", "toolkit", "status", "OS", "platforms")
    r = cli("matrix", "images", "--format", fmt)
    assert r.code == 0, r.err
    assert "toolkit" in r.out
    assert "platforms" in r.out


# -- issue 23: no tag that does not exist, and each set's status ----------------------------------
def test_no_listed_tag_names_an_os_without_that_flavour(cli, real_matrix):
    """12.5.1's cudnn tags exist on every OS but ubuntu24.04 (images.yaml cudnn.os, from NVIDIA's
    cudnn-platforms.json): neither the JSON tags nor the example tag may name one there."""
    r = cli("matrix", "images", "--format", "json")
    assert r.code == 0, r.err
    records = {rec["cuda"]: rec for rec in json.loads(r.out)}
    for i in real_matrix.images:
        listed = set(records[str(i.cuda)]["tags"].values())
        wanted = {f"{real_matrix.image_repository}:{i.tag(f, o)}" for o in i.os for f in i.flavours_for(o)}
        assert listed == wanted, str(i.cuda)
    limited = [i for i in real_matrix.images if i.cudnn_os is not None and set(i.cudnn_os) != set(i.os)]
    assert limited, "the catalogue has a set whose cudnn tags skip an OS"
    for i in limited:
        for o in set(i.os) - set(i.cudnn_os):
            assert f"nvidia/cuda:{i.tag('cudnn-runtime', o)}" not in records[str(i.cuda)]["tags"].values()
            assert records[str(i.cuda)]["cudnn"]["os"] == list(i.cudnn_os)
    assert "nvidia/cuda:12.5.1-cudnn-runtime-ubuntu24.04" not in records["12.5.1"]["tags"].values()


def test_the_table_example_tag_exists_and_names_the_oses_without_cudnn(real_matrix):
    lst = listing(real_matrix, "images")
    col = {h: n for n, h in enumerate(lst.headers)}
    for i, row in zip(real_matrix.images, lst.rows, strict=True):
        tag = row[col["example tag"]].removeprefix(f"{real_matrix.image_repository}:")
        assert tag in {t for _f, _o, t in i.tags()}, tag
        missing = [o for o in i.os if i.cudnn_os is not None and o not in i.cudnn_os]
        if i.cudnn_marker and missing:
            assert row[col["cuDNN"]].endswith(f"(not on {', '.join(missing)})"), row
    row = next(r for i, r in zip(real_matrix.images, lst.rows, strict=True) if str(i.cuda) == "12.5.1")
    assert "(not on ubuntu24.04)" in row[col["cuDNN"]]


def test_each_set_shows_whether_it_is_supported_superseded_or_end_of_life(cli, real_matrix):
    r = cli("matrix", "images", "--format", "json")
    records = {rec["cuda"]: rec for rec in json.loads(r.out)}
    lst = listing(real_matrix, "images")
    status = {row[0]: row[lst.headers.index("status")] for row in lst.rows}
    seen = set()
    for i in real_matrix.images:
        rec = records[str(i.cuda)]
        seen.add(rec["status"])
        if i.eol_source is None:
            assert (rec["status"], status[str(i.cuda)], rec["eol"]) == ("supported", "supported", None)
            continue
        assert rec["eol"]["source"] == i.eol_source
        dated = i.eol_date is not None and i.eol_date <= real_matrix.as_of.isoformat()
        assert rec["status"] == ("end-of-life" if dated else "superseded"), str(i.cuda)
        if i.superseded_by is not None:
            assert f"superseded by {i.superseded_by}" in status[str(i.cuda)]
        if dated:
            assert status[str(i.cuda)].startswith(f"end of life {i.eol_date}")
        assert rec["status_text"] == status[str(i.cuda)]
    assert seen == {"supported", "superseded", "end-of-life"}


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_status_column_in_table_and_markdown(cli, fmt, real_matrix, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one line per row: this test reads the cells, not the width
    r = cli("matrix", "images", "--format", fmt)
    assert r.code == 0, r.err
    superseded = next(i for i in real_matrix.images if i.eol_source and i.eol_date is None)
    cells = [ln.strip("| ").split(" | ") if fmt == "markdown" else ln.split("  ") for ln in r.out.splitlines()]
    line = next(" ".join(c) for c in cells if c and c[0].strip() == str(superseded.cuda))
    assert f"superseded by {superseded.superseded_by}" in line


def test_a_future_end_of_life_date_reads_superseded_until_it_comes():
    import datetime as dt

    from provision.matrix.model import ImageRelease
    from provision.versions import DottedVersion as Version

    img = ImageRelease(
        Version("13.0.2"), ("ubuntu22.04",), ("base",), None, None, "x", None, "2026-12-24", Version("13.0.3"), "x"
    )
    assert img.status(dt.date(2026, 12, 1)) == ("superseded", "superseded by 13.0.3 (end of life 2026-12-24)")
    assert img.status(dt.date(2026, 12, 24)) == ("end-of-life", "end of life 2026-12-24, superseded by 13.0.3")
