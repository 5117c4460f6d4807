"""Issue 23: `matrix drivers` says "unknown" where NVIDIA has published no end of life for a branch
(R590), instead of "past EOL: no", which read as supported while the newer R610 was past its end."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from provision.matrix.listing import listing
from provision.matrix.model import EOL_PAST, EOL_SUPPORTED, EOL_UNKNOWN


def _rows(out: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("R")}


def test_a_branch_without_a_published_end_of_life_reads_unknown(cli, real_matrix):
    unknown = [b for b in real_matrix.drivers if not b.eol_known]
    assert unknown, "the catalogue has a branch whose end of life NVIDIA has not published (R590)"
    r = cli("matrix", "drivers")
    assert r.code == 0, r.err
    rows = _rows(r.out)
    for b in real_matrix.drivers:
        cells = rows[b.label]
        if not b.eol_known:
            assert cells[2:4] == ["unknown", "unknown"], cells
            assert not b.past_eol(real_matrix.as_of)  # the resolver's boolean: not past, but not known either
        else:
            assert cells[3] == ("yes" if b.past_eol(real_matrix.as_of) else "no"), cells


def test_json_gives_null_and_the_state(cli, real_matrix):
    r = cli("matrix", "drivers", "--format", "json")
    records = {rec["branch"]: rec for rec in json.loads(r.out)}
    for b in real_matrix.drivers:
        rec = records[str(b.branch)]
        assert rec["eol_state"] == b.eol_state(real_matrix.as_of)
        if rec["eol_state"] == EOL_UNKNOWN:
            assert rec["past_eol"] is None
            assert (rec["eol"], rec["eol_listed"]) == (None, None)
        else:
            assert rec["past_eol"] is (rec["eol_state"] == EOL_PAST)


def test_r590_is_unknown_while_the_newer_r610_is_past(real_matrix):
    as_of = real_matrix.as_of
    assert real_matrix.branch(590).eol_state(as_of) == EOL_UNKNOWN
    assert real_matrix.branch(610).eol_state(as_of) == EOL_PAST
    lst = listing(real_matrix, "drivers")
    col = lst.headers.index("past EOL")
    cells = {row[0]: row[col] for row in lst.rows}
    assert (cells["R590"], cells["R610"]) == ("unknown", True)


@pytest.mark.parametrize(
    ("eol", "listed", "as_of", "state"),
    [
        ("2026-08", None, dt.date(2026, 8, 31), EOL_SUPPORTED),  # the EOL month itself is still supported
        ("2026-08", None, dt.date(2026, 9, 1), EOL_PAST),
        (None, "2026-08-21", dt.date(2026, 8, 20), EOL_SUPPORTED),
        (None, "2026-08-21", dt.date(2026, 8, 21), EOL_PAST),
        (None, None, dt.date(2099, 1, 1), EOL_UNKNOWN),
    ],
)
def test_eol_state_boundaries(real_matrix, eol, listed, as_of, state):
    b = real_matrix.branch(590)._replace(eol=eol, eol_listed=listed)
    assert b.eol_state(as_of) == state
    assert b.past_eol(as_of) is (state == EOL_PAST)
    assert b.eol_known is (state != EOL_UNKNOWN or eol is not None or listed is not None)
