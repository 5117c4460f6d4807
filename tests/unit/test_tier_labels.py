"""The tier table names computed columns honestly: a spec-sheet figure keeps its spec's name and
unit; a value computed from spec figures (the training blend of BF16 and FP8 TFLOPS, GPU-to-GPU,
per-watt, MIG instances) is labelled as what it is, and a legend under the table says how it is
computed from which specs. Figures come from the catalogue, so the tests survive data refreshes: the
properties are checked on the fixture catalogue and the live one, the command runs on the fixture one."""

import json

import pytest

from provision import tiers
from provision.tiers import FP8_TRAINING_WEIGHT, WORKLOADS, legend, rank

SPEC_FIELDS = {"memory_gb": "memory_gb", "bandwidth_gbs": "memory_bandwidth_gbs"}


@pytest.fixture
def gpus(cli, on_fixture_catalogue):
    return lambda *args: cli("gpus", *args)


def metrics():
    return {t.metric.id: t.metric for w in WORKLOADS.values() for t in w.terms}


def test_the_training_column_is_not_labelled_as_a_spec():
    train = tiers.TRAIN
    assert not train.spec
    assert "TFLOPS" not in train.label
    assert train.unit != "TFLOPS"
    assert "not a spec" in train.definition
    assert "BF16" in train.definition
    assert "FP8" in train.definition
    assert f"{FP8_TRAINING_WEIGHT:g} x dense FP8" in train.definition


def test_the_blend_is_what_its_definition_says(each_matrix):
    w = FP8_TRAINING_WEIGHT
    with_fp8 = [g for g in each_matrix.gpus if g.fp8_tflops and g.bf16_tflops]
    without = [g for g in each_matrix.gpus if not g.fp8_tflops]
    assert with_fp8, "the catalogue has FP8 GPUs"
    assert without, "the catalogue has GPUs without FP8"
    for g in with_fp8:
        assert tiers.training_blend(g) == pytest.approx((1 - w) * g.bf16_tflops + w * g.fp8_tflops)
    for g in without:
        assert tiers.training_blend(g) == (g.bf16_tflops or g.fp16_tflops)


def test_spec_columns_are_the_spec_figures(each_matrix):
    specs = {mid: m for mid, m in metrics().items() if m.spec}
    assert set(specs) == set(SPEC_FIELDS), "a column marked spec must be a gpus.yaml field as is"
    for mid, metric in specs.items():
        for g in each_matrix.gpus:
            assert metric.value(g, each_matrix) == getattr(g, SPEC_FIELDS[mid])


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_legend_explains_every_computed_column(workload):
    lines = legend(workload)
    computed = [t.metric for t in WORKLOADS[workload].terms if not t.metric.spec]
    for metric in computed:
        assert f"{metric.label} [{metric.unit}]: {metric.definition}" in lines
    assert not any(
        line.startswith(f"{t.metric.label} [") for t in WORKLOADS[workload].terms if t.metric.spec for line in lines
    )
    assert lines[-1].startswith("score: 100 * ")
    assert f"--rank {workload} --explain" in lines[-1]


def test_table_and_markdown_carry_the_legend(gpus):
    table = gpus()
    assert table.code == 0, table
    header = next(line for line in table.out.splitlines() if line.startswith("rank"))
    assert "training blend" in header
    assert "training TFLOPS" not in table.out
    flat = " ".join(table.out.split())  # legend lines wrap at spaces to the width
    for line in legend("training"):
        assert " ".join(line.split()) in flat
    assert "TFLOPS-eq" in table.out

    md = gpus("--format", "markdown")
    assert md.code == 0, md
    assert "| training blend |" in md.out
    for line in legend("training"):
        assert line in md.out.splitlines()


def test_out_file_carries_the_legend(gpus, tmp_path):
    out = tmp_path / "tiers.txt"
    r = gpus("--rank", "interconnect", "--out", str(out))
    assert r.code == 0, r
    text = " ".join(out.read_text().split())  # wrapped at spaces to the width, as on a terminal
    for line in legend("interconnect"):
        assert " ".join(line.split()) in text


def test_json_marks_computed_terms(gpus, fixture_matrix):
    r = gpus("--format", "json")
    assert r.code == 0, r
    doc = json.loads(r.out)
    first = doc[0]["terms"]
    assert first["train_blend"]["spec"] is False
    assert first["train_blend"]["unit"] == "TFLOPS-eq"
    assert first["memory_gb"]["spec"] is True
    assert "train_tflops" not in first
    best = rank(fixture_matrix, "training")[0].gpu
    assert doc[0]["id"] == best.id
    assert first["train_blend"]["value"] == pytest.approx(tiers.training_blend(best), abs=1e-3)
