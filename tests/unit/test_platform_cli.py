"""Platforms in the commands that list and rank (issue 25 item 2): `provision matrix platforms`, the
tier list's --platform and the MIG commands' --platform. The real catalogue (compat/platforms.yaml)."""

import json
import re

import pytest
from support import COMPAT

from provision.matrix.listing import TOPICS, listing


@pytest.fixture(autouse=True)
def _real_catalogue(monkeypatch):
    monkeypatch.setenv("PROVISION_COMPAT_DIR", str(COMPAT))


def wide(cli, monkeypatch, *args):
    monkeypatch.setenv("COLUMNS", "1000")
    r = cli(*args)
    assert r.code == 0, r
    return r


def table_rows(out: str, headers: list[str]) -> list[dict[str, str]]:
    """The rows of a one-line-per-row table, cut at the columns its dashes line marks."""
    lines = out.splitlines()
    rule = next(i for i, line in enumerate(lines) if re.fullmatch(r"-+(  -+)*", line))
    spans = [m.span() for m in re.finditer(r"-+", lines[rule])]
    assert [lines[rule - 1][a:b].strip() for a, b in spans] == headers
    rows = []
    for line in lines[rule + 1 :]:
        if not line.strip() or line.startswith(("left out", "  ")):
            break
        cells = [line[a : (spans[n + 1][0] if n + 1 < len(spans) else None)].strip() for n, (a, _) in enumerate(spans)]
        rows.append(dict(zip(headers, cells, strict=True)))
    return rows


# -- provision matrix platforms ---------------------------------------------------------------
HEADERS = [
    "id",
    "name",
    "kind",
    "GPUs",
    "count",
    "form",
    "interconnect",
    "NVSwitch",
    "topo -m",
    "PCIe",
    "PSUs",
    "inlet C",
    "unconfirmed",
    "sources",
]


def test_platforms_is_a_matrix_topic(cli):
    assert "platforms" in TOPICS
    r = cli("matrix", "--help")
    assert r.code == 0
    assert "platforms" in r.out


def test_the_table_shows_each_platforms_facts(cli, monkeypatch, real_matrix):
    rows = table_rows(wide(cli, monkeypatch, "matrix", "platforms").out, HEADERS)
    assert [r["id"] for r in rows] == [
        "dgx-a100",
        "hgx-a100-8gpu",
        "hgx-a100-4gpu",
        "dgx-h100",
        "dgx-h200",
        "hgx-h100-4gpu",
        "r750xa",
        "xe9680",  # one row per GPU set its facts differ with
        "xe9680",
        "esc8000a-e11",
        "pcie-server",
    ]
    by_id = {}
    for r in rows:
        by_id.setdefault(r["id"], []).append(r)
    (dgx,) = by_id["dgx-a100"]
    assert dgx == {
        "id": "dgx-a100",
        "name": "NVIDIA DGX A100",
        "kind": "system",
        "GPUs": "a100-sxm4-40gb, a100-sxm4-80gb",
        "count": "8",
        "form": "sxm4",
        "interconnect": "nvswitch",
        "NVSwitch": "6x gen2",
        "topo -m": "NV12",
        "PCIe": "Gen4 x16",
        "PSUs": "6 (3+3)",
        "inlet C": "5-30",
        "unconfirmed": "gpus.ids, psus, inlet_c",
        "sources": ", ".join(real_matrix.platform("dgx-a100").sources),
    }
    (hgx4,) = by_id["hgx-h100-4gpu"]
    assert (hgx4["interconnect"], hgx4["NVSwitch"], hgx4["topo -m"], hgx4["count"]) == ("nvlink", "none", "NV6", "4")
    assert (hgx4["PSUs"], hgx4["inlet C"]) == ("-", "-")  # the OEM chassis': not the board's
    (r750xa,) = by_id["r750xa"]
    assert r750xa["GPUs"] == "a100-pcie-80gb, h100-pcie (any pcie)"  # a server takes any GPU of its form
    assert r750xa["count"] == "up to 4"
    assert r750xa["interconnect"] == "nvlink-bridge (optional)"
    a100, h100 = by_id["xe9680"]
    assert (a100["GPUs"], a100["NVSwitch"], a100["topo -m"], a100["PCIe"]) == (
        "a100-sxm4-80gb (any sxm4 or sxm5)",
        "6x gen2",
        "NV12",
        "-",
    )
    assert (h100["GPUs"], h100["NVSwitch"], h100["topo -m"], h100["PCIe"]) == (
        "h100-sxm, h200 (any sxm4 or sxm5)",
        "4x gen3",
        "NV18",
        "Gen5 x16",
    )
    assert a100["PSUs"] == h100["PSUs"] == "6"  # no redundancy mode: sources conflict
    (esc,) = by_id["esc8000a-e11"]
    assert (esc["interconnect"], esc["NVSwitch"]) == ("-", "-")  # no source gives it: not "none"
    (generic,) = by_id["pcie-server"]
    assert (generic["GPUs"], generic["count"], generic["topo -m"]) == ("any pcie", "-", "PIX/PXB/PHB/NODE/SYS")


def test_every_fact_in_the_table_comes_from_the_catalogue(real_matrix):
    result = listing(real_matrix, "platforms")
    assert result.headers == tuple(HEADERS)
    assert set(result.optional) <= set(HEADERS)
    for row in result.rows:
        p = real_matrix.platform(row[0])
        cells = dict(zip(HEADERS, row, strict=True))
        if p.psu_count is None:
            assert cells["PSUs"] == "-"
        if p.inlet_min_c is None:
            assert cells["inlet C"] == "-"
        if p.interconnect != "nvswitch":
            assert cells["NVSwitch"] in ("none", "-")
        assert set(cells["sources"]) <= set(real_matrix.sources)


def test_json_has_every_platform_with_its_evidence(cli, real_matrix):
    r = cli("matrix", "platforms", "--format", "json")
    assert r.code == 0, r
    records = json.loads(r.out)
    assert [rec["id"] for rec in records] == real_matrix.platform_ids()
    by_id = {rec["id"]: rec for rec in records}
    dgx = by_id["dgx-a100"]
    assert dgx["gpus"] == {
        "ids": ["a100-sxm4-40gb", "a100-sxm4-80gb"],
        "count": 8,
        "count_is": "exact",
        "form_factors": ["sxm4"],
        "takes": "listed",
    }
    assert dgx["interconnect"] == {"kind": "nvswitch", "optional": False, "nvswitch_generation": 2, "nvswitch_count": 6}
    assert dgx["psus"] == {"count": 6, "redundancy": "3+3"}
    assert dgx["inlet_c"] == {"min": 5, "max": 30}
    assert dgx["dmi"]["product"] == ["DGXA100"]
    assert dgx["evidence"]["psus"] == ["dgx-a100-ug-secondary"]
    assert dgx["unconfirmed"] == ["gpus.ids", "psus", "inlet_c"]
    assert by_id["esc8000a-e11"]["interconnect"]["kind"] is None
    assert "interconnect" in by_id["esc8000a-e11"]["left_out"]  # why no source gives it
    xe = by_id["xe9680"]
    assert [v["gpus"] for v in xe["variants"]] == [["a100-sxm4-80gb"], ["h100-sxm", "h200"]]
    assert xe["gpus"]["takes"] == "form_factor"
    assert by_id["r750xa"]["aliases"] == ["poweredge-r750xa"]
    assert by_id["r750xa"]["dmi"]["unverified"] == {"product": ["R750xa"]}
    for rec in records:
        cited = {key for keys in rec["evidence"].values() for key in keys}
        assert cited <= set(rec["sources"]) <= set(real_matrix.sources), rec["id"]


def test_markdown_has_every_column(cli):
    r = cli("matrix", "platforms", "--format", "markdown")
    assert r.code == 0, r
    assert r.out.startswith("### Platforms: servers and GPU baseboards\n")
    assert "| " + " | ".join(HEADERS) + " |" in r.out
    assert "| hgx-h100-4gpu | NVIDIA HGX H100 4-GPU | baseboard | h100-sxm | 4 | sxm5 | nvlink | none | NV6 |" in r.out


@pytest.mark.parametrize("width", [60, 80, 100, 120])
def test_the_table_fits_the_terminal(cli, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli("matrix", "platforms")
    assert r.code == 0, r
    assert max(len(line) for line in r.out.splitlines()) <= width
    for token in ("dgx-a100", "hgx-h100-4gpu", "PIX/PXB/PHB/NODE/SYS", "a100-sxm4-80gb", "esc8000a-e11"):
        assert token in r.out.split() or f"{token}," in r.out.split() or f"{token}:" in r.out.split(), token
    if width >= 100:
        assert re.search(r"^-+  -+", r.out, re.M), "a table, not blocks"
