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
        if not line.strip() or line.startswith("left out"):
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


# -- provision gpus --platform ----------------------------------------------------------------
GPU_COLUMNS = ["rank", "tier", "gpu", "name", "score", "training blend", "memory", "memory bandwidth", "GPU-to-GPU"]


def test_gpus_ranks_only_a_systems_gpus_with_per_node_figures(cli, monkeypatch, real_matrix):
    r = wide(cli, monkeypatch, "gpus", "--platform", "dgx-a100")
    assert "GPU tiers: Training (single node and multi-GPU) on NVIDIA DGX A100 (8x, NVSwitch)" in r.out
    rows = table_rows(r.out, [*GPU_COLUMNS, "node memory", "node NVLink"])
    assert [row["gpu"] for row in rows] == ["a100-sxm4-80gb", "a100-sxm4-40gb"]
    by_gpu = {row["gpu"]: row for row in rows}
    assert by_gpu["a100-sxm4-80gb"]["node memory"] == "640 GB"  # 8 x 80 GB
    assert by_gpu["a100-sxm4-40gb"]["node memory"] == "320 GB"
    assert by_gpu["a100-sxm4-80gb"]["node NVLink"] == "4,800 GB/s"  # 8 x 600 GB/s
    # the scores are the GPU's own: the same as in the whole catalogue's ranking
    everything = {row["gpu"]: row for row in table_rows(wide(cli, monkeypatch, "gpus").out, GPU_COLUMNS)}
    assert by_gpu["a100-sxm4-80gb"]["score"] == everything["a100-sxm4-80gb"]["score"]
    assert by_gpu["a100-sxm4-80gb"]["tier"] == everything["a100-sxm4-80gb"]["tier"]
    assert "node memory: 8 x the GPU's memory; node NVLink: 8 x the GPU's NVLink bandwidth" in r.out


def test_gpus_on_a_four_gpu_board_counts_four_and_names_its_nvlink(cli, monkeypatch):
    r = wide(cli, monkeypatch, "gpus", "--platform", "hgx-h100-4gpu")
    assert "on NVIDIA HGX H100 4-GPU (4x, NVLink without NVSwitch)" in r.out
    (row,) = table_rows(r.out, [*GPU_COLUMNS, "node memory", "node NVLink"])
    assert (row["gpu"], row["node memory"], row["node NVLink"]) == ("h100-sxm", "320 GB", "3,600 GB/s")


def test_gpus_on_a_server_ranks_every_gpu_of_its_form_and_no_node_nvlink(cli, monkeypatch, real_matrix):
    r = wide(cli, monkeypatch, "gpus", "--platform", "r750xa")
    assert "on Dell PowerEdge R750xa (up to 4x, optional NVLink bridges between pairs)" in r.out
    rows = table_rows(r.out, [*GPU_COLUMNS, "node memory"])  # bridges are optional: no node NVLink column
    pcie = [g.id for g in real_matrix.gpus if g.form_factor == "pcie"]
    assert sorted(row["gpu"] for row in rows) == sorted(pcie)
    h100 = next(row for row in rows if row["gpu"] == "h100-pcie")
    assert h100["node memory"] == "up to 320 GB"
    assert "no node NVLink: r750xa does not NVLink every GPU on a board" in r.out


def test_gpus_json_carries_the_node_figures(cli):
    r = cli("gpus", "--platform", "hgx-a100-4gpu", "--format", "json")
    assert r.code == 0, r
    records = json.loads(r.out)
    assert [rec["id"] for rec in records] == ["a100-sxm4-80gb", "a100-sxm4-40gb"]
    assert records[0]["platform"] == {
        "id": "hgx-a100-4gpu",
        "gpu_count": 4,
        "count_is": "exact",
        "memory_gb": 320,
        "nvlink_gbs": 2400,
    }
    generic = json.loads(cli("gpus", "--platform", "pcie-server", "--gpu", "t4", "--format", "json").out)
    assert generic[0]["platform"] == {
        "id": "pcie-server",
        "gpu_count": None,
        "count_is": None,
        "memory_gb": None,
        "nvlink_gbs": None,
    }


def test_gpus_with_a_gpu_the_platform_takes_ranks_that_one(cli, monkeypatch):
    r = wide(cli, monkeypatch, "gpus", "--platform", "dgx-a100", "--gpu", "a100-sxm4-40gb")
    rows = table_rows(r.out, [*GPU_COLUMNS, "node memory", "node NVLink"])
    assert [row["gpu"] for row in rows] == ["a100-sxm4-40gb"]


@pytest.mark.parametrize(
    ("args", "error", "hint"),
    [
        (
            ["--platform", "r750xa", "--gpu", "h100-sxm"],
            "error: platform r750xa (Dell PowerEdge R750xa) takes PCIe cards; h100-sxm is an SXM5 module",
            "h100-pcie",
        ),
        (
            ["--platform", "dgx-a100", "--gpu", "a100-80gb"],  # a group: its PCIe member is refused
            "error: platform dgx-a100 (NVIDIA DGX A100) takes SXM4 modules; a100-pcie-80gb is a PCIe card",
            "a100-sxm4-80gb",
        ),
        (["--platform", "dgx-h10"], "error: unknown platform 'dgx-h10'", "did you mean dgx-h100?"),
    ],
)
def test_gpus_refuses_a_gpu_the_platform_does_not_take(cli, args, error, hint):
    r = cli("gpus", *args)
    assert r.code == 2, r
    lines = r.err.splitlines()
    assert error in lines
    assert any(line.startswith("hint: ") and hint in line for line in lines), r
    assert r.out == ""


# -- provision mig plan / suggest --platform ----------------------------------------------------
def test_mig_plan_takes_the_gpu_from_the_platform_and_counts_it_per_node(cli, monkeypatch):
    r = wide(cli, monkeypatch, "mig", "plan", "--platform", "dgx-h100", "--layout", "3g.40gb,2x2g.20gb")
    assert r.out.startswith("MIG layout 3g.40gb,2x2g.20gb on h100-sxm (profile set h100-sxm5-80gb)")
    assert "on NVIDIA DGX H100 (dgx-h100): the layout applies to each of its 8 GPUs: 8 x 3 = 24 instances per node" in (
        r.out
    )
    alone = wide(cli, monkeypatch, "mig", "plan", "--gpu", "h100-sxm", "--layout", "3g.40gb,2x2g.20gb")
    assert "per node" not in alone.out
    assert (
        r.out.replace(
            "on NVIDIA DGX H100 (dgx-h100): the layout applies to each of its 8 GPUs: 8 x 3 = 24 instances per node\n",
            "",
        )
        == alone.out
    ), "the same layout; the platform adds its count"


def test_mig_plan_json_and_up_to_counts(cli):
    r = cli("mig", "plan", "--platform", "r750xa", "--gpu", "a100-pcie-80gb", "--fill", "1g.10gb", "--format", "json")
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert doc["gpu"] == "a100-pcie-80gb"
    assert doc["platform"] == {
        "id": "r750xa",
        "name": "Dell PowerEdge R750xa",
        "gpu_count": 4,
        "count_is": "up-to",
        "instances_per_gpu": 7,
        "instances_per_node": 28,
    }
    text = cli("mig", "plan", "--platform", "r750xa", "--gpu", "a100-pcie-80gb", "--fill", "1g.10gb").out
    assert "each of its up to 4 GPUs: up to 4 x 7 = up to 28 instances per node" in " ".join(text.split())


@pytest.mark.parametrize("command", [["plan", "--layout", "7g.80gb"], ["suggest", "--services", "2"]])
@pytest.mark.parametrize(
    ("args", "error", "hint"),
    [
        (
            ["--platform", "r750xa", "--gpu", "h100-sxm"],
            "error: platform r750xa (Dell PowerEdge R750xa) takes PCIe cards; h100-sxm is an SXM5 module",
            "--gpu h100-pcie",
        ),
        (
            ["--platform", "xe9680", "--gpu", "b200"],
            "error: platform xe9680 (Dell PowerEdge XE9680) takes SXM4 modules or SXM5 modules; b200 is an SXM module",
            "--gpu h200",
        ),
        (
            ["--platform", "dgx-a100"],  # it implies the a100-sxm4 group, whose models' MIG layouts differ
            "error: a100-sxm4 covers GPUs with different MIG layouts",
            "--gpu a100-sxm4-40gb, --gpu a100-sxm4-80gb",
        ),
        (["--platform", "hgx-h100"], "error: unknown platform 'hgx-h100'", "did you mean"),
        ([], "error: no GPU given", "--platform"),
    ],
    ids=["pcie-server", "sxm-board", "two-models", "unknown", "neither"],
)
def test_mig_refuses_what_the_platform_does_not_take(cli, command, args, error, hint):
    r = cli("mig", command[0], *args, *command[1:])
    assert r.code == 2, r
    lines = r.err.splitlines()
    assert error in lines, r
    assert any(line.startswith("hint: ") and hint in line for line in lines), r
    assert "Traceback" not in r.err


def test_mig_suggest_counts_the_services_on_each_gpu(cli, monkeypatch):
    r = wide(cli, monkeypatch, "mig", "suggest", "--platform", "hgx-h100-4gpu", "--services", "3")
    assert r.out.startswith("MIG layouts of h100-sxm (profile set h100-sxm5-80gb): 3 instances")
    assert "on NVIDIA HGX H100 4-GPU (hgx-h100-4gpu): the layout applies to each of its 4 GPUs: 4 x 3 = 12" in r.out
    assert "provision mig plan --platform hgx-h100-4gpu --gpu h100-sxm --layout 3g.40gb,2x2g.20gb" in r.out
    doc = json.loads(cli("mig", "suggest", "--platform", "hgx-h100-4gpu", "--services", "3", "--format", "json").out)
    assert doc["platform"]["instances_per_node"] == 12
    assert doc["suggestions"][0]["mig_plan"].startswith("provision mig plan --platform hgx-h100-4gpu --gpu h100-sxm ")
    # the command it prints works as printed
    layout = doc["suggestions"][0]["layout"]
    assert cli("mig", "plan", "--platform", "hgx-h100-4gpu", "--gpu", "h100-sxm", "--layout", layout).code == 0


@pytest.mark.parametrize("width", [60, 80, 100])
@pytest.mark.parametrize(
    "args",
    [
        ["gpus", "--platform", "r750xa", "--rank", "inference"],
        ["gpus", "--platform", "dgx-h100"],
        ["mig", "plan", "--platform", "dgx-h100", "--layout", "3g.40gb,2x2g.20gb"],
        ["mig", "suggest", "--platform", "hgx-h100-4gpu", "--services", "3"],
    ],
    ids=["gpus-server", "gpus-system", "mig-plan", "mig-suggest"],
)
def test_platform_output_fits_the_terminal(cli, monkeypatch, width, args):
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli(*args)
    assert r.code == 0, r
    commands = [line for line in r.out.splitlines() if line.startswith("  provision ")]  # never wrapped
    assert max(len(line) for line in r.out.splitlines() if line not in commands) <= width
