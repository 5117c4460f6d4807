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


def test_every_set_numbered_past_its_toolkit_shows_it(cli, real_matrix):
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
    assert lst.headers[:4] == ("CUDA", "toolkit", "OS", "platforms")
    r = cli("matrix", "images", "--format", fmt)
    assert r.code == 0, r.err
    assert "toolkit" in r.out
    assert "platforms" in r.out
