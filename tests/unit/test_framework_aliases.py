"""The names --framework takes come from the catalogue (frameworks.yaml id, package, aliases),
not from the resolver: an alias added to the data is taken, one that two frameworks share is an
invariant problem, and a malformed one is refused by the schema."""

import pytest
from support import edited_compat

from provision.errors import CompatDataError, UnknownId
from provision.matrix.loader import load_matrix
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve


def test_the_catalogue_names_the_aliases(real_matrix):
    tf = real_matrix.framework("tensorflow")
    assert "tf" in tf.aliases
    assert real_matrix.framework("tf") is tf
    for name in ("tf", "TF", "tensorflow", "TensorFlow"):
        plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "h100-sxm", framework=name))
        assert plan.framework.name == "tensorflow", name
    for name in ("torch", "PyTorch", "pytorch==2.5.1"):
        assert resolve(real_matrix, PlanRequest("ubuntu22.04", "h100-sxm", framework=name)).framework.name == "pytorch"


def test_an_alias_added_to_the_data_is_taken(tmp_path):
    compat = edited_compat(tmp_path, "frameworks.yaml", 'aliases: ["tf"]', 'aliases: ["tf", "tflow"]')
    matrix = load_matrix(compat)
    plan = resolve(matrix, PlanRequest("ubuntu22.04", "h100-sxm", framework="tflow"))
    assert plan.framework.name == "tensorflow"
    with pytest.raises(UnknownId) as refused:
        resolve(matrix, PlanRequest("ubuntu22.04", "h100-sxm", framework="jax"))
    assert refused.value.hint == "known: pytorch, tensorflow, onnxruntime, tensorrt"


def test_a_shared_alias_is_an_invariant_problem(tmp_path):
    compat = edited_compat(tmp_path, "frameworks.yaml", 'aliases: ["tf"]', 'aliases: ["tf", "torch"]')
    with pytest.raises(CompatDataError) as refused:
        load_matrix(compat)
    assert "frameworks[1](tensorflow).aliases: 'torch' also names pytorch" in str(refused.value)


def test_a_malformed_alias_is_refused_by_the_schema(tmp_path):
    compat = edited_compat(tmp_path, "frameworks.yaml", 'aliases: ["tf"]', 'aliases: ["Tf Flow"]')
    with pytest.raises(CompatDataError) as refused:
        load_matrix(compat)
    assert "aliases" in str(refused.value)


def test_the_refresh_writes_the_aliases_it_is_given():
    """frameworks.yaml is generated: the refresh copies each framework's aliases from
    framework_variants.yaml, where the committed file has them (before its releases)."""
    import yaml
    from support import COMPAT
    from test_refresh import fake_index, recorded

    from provision.matrix import refresh

    doc = refresh.refresh(COMPAT, fetch=fake_index(recorded()), ranged=None, log=lambda m: None)
    committed = yaml.safe_load((COMPAT / "frameworks.yaml").read_text())
    for new, old in zip(doc["frameworks"], committed["frameworks"], strict=True):
        assert list(new)[:-1] == list(old)[:-1] == ["id", "name", "package", *(["aliases"] if "aliases" in old else [])]
        assert new.get("aliases") == old.get("aliases")
    assert {fw["id"]: fw.get("aliases") for fw in doc["frameworks"]} == {"pytorch": None, "tensorflow": ["tf"]}
