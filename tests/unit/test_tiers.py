"""`provision gpus`: GPU tier lists ranked per workload from the catalogue's specs.

The properties of the ranking are checked on the fixture catalogue (fixed) and on the live one
(whatever a refresh brings); the command runs on the fixture catalogue and must print what
`rank` gives for its rows. Only the reference ranking and the named reference claims are about the
live GPUs, and they compare GPUs, never today's scores."""

import inspect
import itertools
import json
import math
import xml.etree.ElementTree as ET

import pytest

from provision import tiers
from provision.tiers import WORKLOADS, rank

SVG = "{http://www.w3.org/2000/svg}"

# The reference training ranking, as groups of catalogue ids: every GPU of a group ranks above
# every GPU of each later group. Within a group any order is fine ("RTX 6000 Ada / RTX 4090").
REFERENCE_TRAINING = [
    ("H100", {"h100-sxm", "h100-pcie"}),
    ("A100 80GB", {"a100-sxm4-80gb", "a100-pcie-80gb"}),
    ("A100 40GB", {"a100-sxm4-40gb", "a100-pcie-40gb"}),
    ("RTX 6000 Ada / RTX 4090", {"rtx-6000-ada", "rtx-4090"}),
    ("T4 / L4", {"t4", "l4"}),
]


def order(matrix, workload):
    return [r.gpu.id for r in rank(matrix, workload)]


def positions(matrix, workload):
    return {r.gpu.id: i for i, r in enumerate(rank(matrix, workload))}


def with_gpu(matrix, gpu_id, **changes):
    gpus = tuple(g._replace(**changes) if g.id == gpu_id else g for g in matrix.gpus)
    return matrix._replace(gpus=gpus)


@pytest.fixture
def matrix(each_matrix):
    """A property of the ranking holds for any catalogue: the fixture one and the live one."""
    return each_matrix


@pytest.fixture
def fixture_gpus(cli, on_fixture_catalogue):
    """`provision gpus …` through the real entry point, on the fixture catalogue."""
    return lambda *args: cli("gpus", *args)


def mig_gpu(matrix):
    """A GPU with MIG profiles and a GPU without (from the catalogue rows)."""
    return next(g for g in matrix.gpus if g.mig), next(g for g in matrix.gpus if not g.mig)


# -- the reference ranking ---------------------------------------------------------------------


def test_reference_gpus_are_in_the_catalogue(real_matrix):
    ids = {g.id for g in real_matrix.gpus}
    for _, group in REFERENCE_TRAINING:
        assert group <= ids


@pytest.mark.parametrize("upper", range(len(REFERENCE_TRAINING) - 1))
def test_training_order_reproduces_reference_tiers(real_matrix, upper):
    pos = positions(real_matrix, "training")
    above_name, above = REFERENCE_TRAINING[upper]
    for below_name, below in REFERENCE_TRAINING[upper + 1 :]:
        worst_above = max(pos[g] for g in above)
        best_below = min(pos[g] for g in below)
        assert worst_above < best_below, f"{above_name} must rank above {below_name}: {order(real_matrix, 'training')}"


def test_training_is_the_default_and_reference_scores_strictly_separate(real_matrix):
    assert tiers.DEFAULT_WORKLOAD == "training"
    score = {r.gpu.id: r.score for r in rank(real_matrix)}
    for (_, above), (_, below) in itertools.pairwise(REFERENCE_TRAINING):
        # a margin, not a coin toss: each reference tier beats the next by at least 5 %
        assert min(score[g] for g in above) > 1.05 * max(score[g] for g in below)


def test_ranks_depend_on_specs_not_ids(matrix):
    """Renaming every GPU (id, name, aliases) leaves the order of the specs unchanged."""
    renamed = matrix._replace(
        gpus=tuple(g._replace(id=f"gpu{i:02d}", name=f"GPU {i}", aliases=()) for i, g in enumerate(matrix.gpus))
    )
    index = {g.id: i for i, g in enumerate(matrix.gpus)}
    for workload in WORKLOADS:
        original = [f"gpu{index[g]:02d}" for g in order(matrix, workload)]
        assert order(renamed, workload) == original


def test_source_has_no_per_gpu_special_cases(matrix):
    source = inspect.getsource(tiers)
    for gpu in matrix.gpus:
        assert f'"{gpu.id}"' not in source
        assert f"'{gpu.id}'" not in source


# -- other workloads -------------------------------------------------------------------------


def test_memory_bandwidth_efficiency_orders_differ(real_matrix):
    """The live catalogue is varied enough that each workload orders it its own way."""
    orders = {w: order(real_matrix, w) for w in ("training", "memory", "bandwidth", "efficiency")}
    names = list(orders)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert orders[a] != orders[b], f"{a} and {b} give the same order"


def test_memory_top_is_the_largest_memory(matrix):
    ranked = rank(matrix, "memory")
    assert ranked[0].gpu.memory_gb == max(g.memory_gb for g in matrix.gpus)
    # capacity leads: every 80 GB card above every 48 GB or smaller card
    pos = positions(matrix, "memory")
    big = [g.id for g in matrix.gpus if g.memory_gb >= 80]
    small = [g.id for g in matrix.gpus if g.memory_gb <= 48]
    assert big, "the catalogue has some"
    assert small, "the catalogue has some"
    assert max(pos[g] for g in big) < min(pos[g] for g in small)


def test_bandwidth_order_is_memory_bandwidth_order(matrix):
    bandwidths = [r.gpu.memory_bandwidth_gbs for r in rank(matrix, "bandwidth")]
    assert bandwidths == sorted(bandwidths, reverse=True)
    assert bandwidths[0] == max(g.memory_bandwidth_gbs for g in matrix.gpus)


def test_efficiency_is_per_watt(real_matrix):
    """Live GPUs: the per-watt leaders lead, and the reference claim about the L4 holds."""
    ranked = rank(real_matrix, "efficiency")
    per_watt = {g.id: tiers.inference_tflops(g) / g.tdp_w for g in real_matrix.gpus}
    median = sorted(per_watt.values())[len(per_watt) // 2]
    assert per_watt[ranked[0].gpu.id] >= median
    assert all(per_watt[r.gpu.id] >= median for r in ranked[:3])
    pos, training = positions(real_matrix, "efficiency"), positions(real_matrix, "training")
    # the 72 W L4 is a poor training card but one of the most efficient
    assert pos["l4"] < pos["a100-sxm4-80gb"]
    assert training["l4"] > training["a100-sxm4-80gb"]
    assert pos["l4"] < pos["rtx-4090"]


def test_halving_tdp_raises_efficiency_only(matrix):
    # every efficiency term is per watt: half the TDP doubles the score, which overtakes a GPU
    # above that scores less than twice as much
    gpu = next(r.gpu for above, r in itertools.pairwise(rank(matrix, "efficiency")) if 2 * r.score > 1.01 * above.score)
    cooler = with_gpu(matrix, gpu.id, tdp_w=gpu.tdp_w / 2)
    assert positions(cooler, "efficiency")[gpu.id] < positions(matrix, "efficiency")[gpu.id]
    assert order(cooler, "training") == order(matrix, "training")


def test_interconnect_favours_nvswitch(matrix):
    pos = positions(matrix, "interconnect")
    switched = [g.id for g in matrix.gpus if g.nvswitch]
    pcie_only = [g.id for g in matrix.gpus if not g.nvlink_bandwidth_gbs]
    assert switched, "the catalogue has some"
    assert pcie_only, "the catalogue has some"
    assert max(pos[g] for g in switched) < min(pos[g] for g in pcie_only)


def test_mig_counts_for_inference(matrix):
    gpu, plain = mig_gpu(matrix)
    one_slice = [p.max_instances for p in matrix.mig_set(gpu.mig).profiles if p.compute_slices == 1 and not p.media]
    assert tiers.mig_instances(gpu, matrix) == max(one_slice) > 1
    assert tiers.mig_instances(plain, matrix) == 1
    without = with_gpu(matrix, gpu.id, mig=None)
    before = {r.gpu.id: r.score for r in rank(matrix, "inference")}[gpu.id]
    after = {r.gpu.id: r.score for r in rank(without, "inference")}[gpu.id]
    assert after < before


# -- properties: the ranks come from the data ------------------------------------------------


def test_doubling_bandwidth_moves_a_gpu_up(matrix):
    ranked = rank(matrix, "bandwidth")
    gpu = next(
        r.gpu
        for above, r in itertools.pairwise(ranked)
        if r.gpu.memory_bandwidth_gbs * 2 > above.gpu.memory_bandwidth_gbs
    )
    faster = with_gpu(matrix, gpu.id, memory_bandwidth_gbs=gpu.memory_bandwidth_gbs * 2)
    assert positions(faster, "bandwidth")[gpu.id] < positions(matrix, "bandwidth")[gpu.id]
    assert positions(faster, "training")[gpu.id] <= positions(matrix, "training")[gpu.id]


def test_bandwidth_just_above_the_next_gpu_overtakes_it(matrix):
    ranked = rank(matrix, "bandwidth")
    assert len(ranked) > 2
    for index in range(1, len(ranked)):
        gpu, above = ranked[index].gpu, ranked[index - 1].gpu
        if gpu.memory_bandwidth_gbs == above.memory_bandwidth_gbs:
            continue  # a tie: 1 % more overtakes it, and the GPU above may tie the next one up too
        bumped = with_gpu(matrix, gpu.id, memory_bandwidth_gbs=above.memory_bandwidth_gbs * 1.01)
        new = positions(bumped, "bandwidth")
        assert new[gpu.id] < index, gpu.id
        assert new[gpu.id] < new[above.id], gpu.id


@pytest.mark.parametrize(
    "field", ["memory_gb", "memory_bandwidth_gbs", "bf16_tflops", "fp16_tflops", "fp8_tflops", "nvlink_bandwidth_gbs"]
)
def test_more_of_a_spec_never_lowers_a_score(matrix, field):
    for gpu in matrix.gpus:
        value = getattr(gpu, field)
        if value is None:
            continue
        more = with_gpu(matrix, gpu.id, **{field: value * 1.5})
        for workload in WORKLOADS:
            old = {r.gpu.id: r.score for r in rank(matrix, workload)}[gpu.id]
            new = {r.gpu.id: r.score for r in rank(more, workload)}[gpu.id]
            assert new >= old - 1e-9, (gpu.id, field, workload)


def test_scaling_a_spec_for_every_gpu_keeps_the_order(matrix):
    """Normalised, unit-free: GB/s vs MB/s changes no rank."""
    scaled = matrix._replace(
        gpus=tuple(
            g._replace(memory_bandwidth_gbs=g.memory_bandwidth_gbs * 1000, memory_gb=g.memory_gb * 1024)
            for g in matrix.gpus
        )
    )
    for workload in WORKLOADS:
        assert order(scaled, workload) == order(matrix, workload)


# -- every workload ------------------------------------------------------------------------


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_every_workload_ranks_every_gpu(matrix, workload):
    ranked = rank(matrix, workload)
    assert sorted(r.gpu.id for r in ranked) == sorted(g.id for g in matrix.gpus)
    scores = [r.score for r in ranked]
    assert all(math.isfinite(s) and 0 < s <= 100 + 1e-9 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert ranked[0].rank == 1
    assert ranked[0].tier == "S"
    assert [r.rank for r in ranked] == sorted(r.rank for r in ranked)
    assert all(r.tier in "SABCD" for r in ranked)
    assert all(r.workload == workload for r in ranked)
    weights = [t.weight for t in WORKLOADS[workload].terms]
    assert math.isclose(sum(weights), 1.0)
    for r in ranked:
        product = 100 * math.prod(t.factor for t in r.terms)
        assert math.isclose(product, r.score)


def test_tiers_halve():
    labels = [tiers.tier_for(r) for r in (1.0, 0.5, 0.49, 0.25, 0.2, 0.1, 0.01)]
    assert labels == ["S", "S", "A", "A", "B", "C", "D"]


def test_filter_keeps_scores_and_renumbers(matrix):
    ranked = rank(matrix, "training")
    full = {r.gpu.id: r for r in ranked}
    low, high = ranked[-1].gpu.id, ranked[1].gpu.id  # neither is first: both are renumbered
    some = rank(matrix, "training", [low, high])
    assert [r.gpu.id for r in some] == [high, low]
    assert [r.rank for r in some] == [1, 2]
    assert all(r.score == full[r.gpu.id].score and r.tier == full[r.gpu.id].tier for r in some)


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_explain_shows_the_formula(workload):
    text = tiers.explain(workload)
    assert WORKLOADS[workload].formula in " ".join(text.split())  # wrapped at spaces
    for term in WORKLOADS[workload].terms:
        assert term.metric.id in text
        assert f"weight {term.weight:.2f}" in text


# -- the command -------------------------------------------------------------------------------


def test_cli_table_default_training(fixture_gpus, fixture_matrix, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # wide enough for the optional name column
    r = fixture_gpus()
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert "Training" in lines[0]
    header = next(line for line in lines if line.startswith("rank"))
    assert header.split()[:5] == ["rank", "tier", "gpu", "name", "score"]
    body = lines[lines.index(header) + 2 :]
    ids_in_order = [line.split()[2] for line in body[: body.index("")]]  # the legend follows a blank line
    assert ids_in_order == order(fixture_matrix, "training")


def test_cli_json_schema(fixture_gpus, fixture_matrix):
    r = fixture_gpus("--format", "json")
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert isinstance(doc, list)
    assert len(doc) == len(fixture_matrix.gpus)
    for item in doc:
        assert {"id", "name", "score", "rank", "tier", "workload", "terms", "inputs"} <= set(item)
        assert item["workload"] == "training"
        assert set(item["terms"]) == {t.metric.id for t in WORKLOADS["training"].terms}
    scores = [item["score"] for item in doc]
    assert scores == sorted(scores, reverse=True)
    assert [item["id"] for item in doc] == order(fixture_matrix, "training")
    assert [item["score"] for item in doc] == [pytest.approx(r.score, abs=0.1) for r in rank(fixture_matrix)]
    assert doc[0]["rank"] == 1


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_cli_json_each_workload(fixture_gpus, fixture_matrix, workload):
    r = fixture_gpus("--rank", workload, "--format", "json")
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert [item["id"] for item in doc] == order(fixture_matrix, workload)
    assert all(item["workload"] == workload for item in doc)


def parse_svg(text):
    root = ET.fromstring(text.encode())
    assert root.tag == f"{SVG}svg"
    assert root.get("viewBox")
    bars = [e for e in root.iter(f"{SVG}rect") if "bar" in (e.get("class") or "").split()]
    texts = ["".join(e.itertext()) for e in root.iter(f"{SVG}text")]
    return root, bars, texts


def test_cli_svg_one_bar_per_gpu(fixture_gpus, fixture_matrix):
    r = fixture_gpus("--format", "svg", "--rank", "memory")
    assert r.code == 0, r
    _, bars, texts = parse_svg(r.out)
    assert len(bars) == len(fixture_matrix.gpus)
    for gpu in fixture_matrix.gpus:
        assert any(gpu.name in t for t in texts), gpu.name
    widths = [float(b.get("width")) for b in bars]
    assert widths == sorted(widths, reverse=True)
    assert all(w > 0 for w in widths)


def test_cli_svg_out_file_and_filter(fixture_gpus, fixture_matrix, tmp_path):
    group = fixture_matrix.gpu_groups[0]
    other = next(g for g in fixture_matrix.gpus if g.id not in group.members)
    out = tmp_path / "tiers.svg"
    r = fixture_gpus("--format", "svg", "--gpu", group.id, "--gpu", other.id, "--out", str(out))
    assert r.code == 0, r
    assert r.out == ""
    assert f"wrote {out}" in r.err
    _, bars, texts = parse_svg(out.read_text())
    assert len(bars) == len(group.members) + 1
    assert any(other.name in t for t in texts)


def test_svg_escapes_names(matrix):
    last = rank(matrix, "training")[-1].gpu.id
    odd = with_gpu(matrix, last, name='T4 <"fast"> & cheap')
    _, bars, texts = parse_svg(tiers.render_svg(rank(odd, "training"), "tiers <&>"))
    assert len(bars) == len(matrix.gpus)
    assert any('T4 <"fast"> & cheap' in t for t in texts)
    assert any("tiers <&>" in t for t in texts)


def test_cli_markdown(fixture_gpus, fixture_matrix):
    r = fixture_gpus("--format", "markdown", "--rank", "bandwidth")
    assert r.code == 0, r
    assert r.out.startswith("### GPU tiers: ")
    assert WORKLOADS["bandwidth"].formula in r.out
    rows = [line for line in r.out.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| rank | tier | gpu | name | score |")
    assert len(rows) == 1 + len(fixture_matrix.gpus)
    assert [row.split("|")[3].strip() for row in rows[1:]] == order(fixture_matrix, "bandwidth")


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_cli_explain(fixture_gpus, workload):
    r = fixture_gpus("--rank", workload, "--explain")
    assert r.code == 0, r
    assert WORKLOADS[workload].formula in " ".join(r.out.split())  # wrapped at spaces
    assert "weight" in r.out
    assert "tier:" in r.out


def test_cli_explain_keeps_json_parseable(fixture_gpus):
    r = fixture_gpus("--format", "json", "--explain")
    assert r.code == 0, r
    json.loads(r.out)
    assert WORKLOADS["training"].formula in " ".join(r.err.split())


def test_cli_gpu_filter_accepts_groups_and_aliases(fixture_gpus, fixture_matrix):
    group = fixture_matrix.gpu_groups[0]
    aliased = next(g for g in fixture_matrix.gpus if g.aliases and g.id in group.members)  # named twice
    other = next(g for g in fixture_matrix.gpus if g.id not in group.members)
    r = fixture_gpus("--format", "json", "--gpu", group.id, "--gpu", aliased.aliases[0], "--gpu", other.id)
    assert r.code == 0, r
    ids = [item["id"] for item in json.loads(r.out)]
    assert sorted(ids) == sorted({*group.members, other.id})
    assert [item["rank"] for item in json.loads(r.out)] == list(range(1, len(ids) + 1))


def test_cli_unknown_gpu(fixture_gpus, fixture_matrix):
    gpu = fixture_matrix.gpus[0].id
    typo = gpu.replace("-", "") + "x"
    r = fixture_gpus("--gpu", typo)
    assert r.code == 2, r
    assert r.err.splitlines()[0] == f"error: unknown GPU '{typo}'"
    assert r.err.splitlines()[-1].startswith(f"hint: did you mean {gpu}")
    assert "Traceback" not in r.err


def test_cli_unknown_workload(fixture_gpus):
    r = fixture_gpus("--rank", "gaming")
    assert r.code == 2, r
    assert "Invalid value for '--rank'" in r.err
    assert "training" in r.err
