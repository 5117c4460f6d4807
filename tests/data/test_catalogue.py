"""Invariants over the real compat/ data."""

import json
import re
from pathlib import Path

import pytest
import yaml
from rules import violations
from support import COMPAT

from provision.errors import NoCompatibleStack
from provision.matrix.loader import FILES, read_raw
from provision.plan.check import check
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.versions import DottedVersion as Version

VERSION_KEYS = {
    "version",
    "min_driver",
    "branch",
    "cuda",
    "cudnn",
    "cuda_runtime",
    "as_of",
    "eol",
    "eol_listed",
    "date",
    "retrieved",
    "generated",
    "ptx",
}


def walk(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, f"{path}.{k}")
            yield f"{path}.{k}", k, v
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}[{i}]")


@pytest.mark.parametrize("name", FILES)
def test_every_version_is_a_quoted_string(name):
    doc = yaml.safe_load((COMPAT / f"{name}.yaml").read_text())
    seen = 0
    for path, key, value in walk(doc):
        if key in VERSION_KEYS and value is not None and not isinstance(value, (dict, list)):
            seen += 1
            assert isinstance(value, str), f"{name}.yaml{path}: {value!r} must be quoted"
        if key == "compute_capabilities" and isinstance(value, list):
            assert all(isinstance(v, (str, dict)) for v in value), f"{name}.yaml{path}"
    if name not in ("sources", "unsupported", "mig"):
        assert seen, f"no version fields found in {name}.yaml"


def test_schemas_exist_for_every_file():
    schemas = sorted(p.stem.removesuffix(".schema") for p in (COMPAT / "schema").glob("*.schema.json"))
    assert schemas, "no schemas found"
    assert set(FILES) <= set(schemas)
    for p in (COMPAT / "schema").glob("*.schema.json"):
        assert json.loads(p.read_text())["$schema"].startswith("https://json-schema.org/")


def test_every_source_is_cited_and_every_citation_known():
    raw = read_raw(COMPAT)
    # the files read outside the matrix loader (doctor's Xid catalogue, the CI action pins) cite too
    others = {path.stem: yaml.safe_load(path.read_text()) for path in COMPAT.glob("*.yaml") if path.stem not in raw}
    assert "ci_actions" in others
    cited = set()
    for name, doc in {**raw, **others}.items():
        if name == "sources":
            continue
        for _, key, value in walk(doc):
            if key in ("source", "arch_source") and isinstance(value, str):
                cited.add(value)
            if key == "sources" and isinstance(value, list):
                cited.update(value)
    known = set(raw["sources"]["sources"])
    assert cited <= known
    unused = known - cited
    assert not unused, f"sources nobody cites: {sorted(unused)}"


def serves(os_rel, gpu) -> bool:
    """os.yaml declares the host architectures each OS's repository serves (GH200: aarch64 only)."""
    return os_rel.repo_arch(gpu.host_arches[0]) is not None


def test_every_os_gpu_pair_resolves_or_is_declared(real_matrix):
    declared = {(x.os, x.gpu) for x in real_matrix.exclusions}
    for os_rel in real_matrix.os_releases:
        for gpu in real_matrix.gpus:
            if (os_rel.id, gpu.id) in declared or not serves(os_rel, gpu):
                continue
            plan = resolve(real_matrix, PlanRequest(os_rel.id, gpu.id), suggest=False)
            assert violations(real_matrix, plan) == [], (os_rel.id, gpu.id)


def test_matrix_check_is_clean_and_fast(real_matrix):
    raw = read_raw(COMPAT)
    result = check(real_matrix, raw)
    assert result.ok, (result.problems, result.unresolved_pairs)
    other_arch = sum(1 for o in real_matrix.os_releases for g in real_matrix.gpus if not serves(o, g))
    pairs = len(real_matrix.os_releases) * len(real_matrix.gpus) - other_arch
    declared = sum(1 for x in real_matrix.exclusions if x.os and x.gpu)  # unsupported.yaml pairs
    assert result.groups["os+gpu"]["resolved"] == pairs - declared + sum(
        1
        for _ in real_matrix.os_releases
        for g in real_matrix.gpu_groups
        if len({real_matrix.gpu(m).nvswitch for m in g.members}) == 1
    )


@pytest.mark.parametrize(
    ("os_id", "gpu", "pins", "expect"),
    [
        ("rocky9", "a100-pcie", {}, {"fm": None}),
        ("ubuntu22.04", "h100-sxm", {}, {"fm": "nvidia-fabricmanager"}),
        ("rocky9", "b200", {}, {"module": "open"}),
        # CUDA 13 does not build for sm_70; the 12.9.1 toolkit's supported images are the 12.9.2 set
        # (images.yaml toolkit: 12.9.1 with a newer cuBLAS)
        ("ubuntu22.04", "v100", {}, {"branch": "580", "module": "proprietary", "cuda": "12.9.1"}),
        ("rocky9", "a100-pcie", {"framework": "pytorch==2.5.1"}, {"cuda": "12.4.1", "cudnn": "9.1.0.70"}),
        ("ubuntu22.04", "h100-sxm", {"framework": "tensorflow==2.15.0"}, {"cuda": "12.2.2", "cudnn": "8.9.4.25"}),
        ("ubuntu22.04", "v100", {"framework": "pytorch==2.14.0"}, {"variant": "cu126"}),
    ],
)
def test_issue_examples(real_matrix, os_id, gpu, pins, expect):
    plan = resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu, **pins))
    got = {
        "cuda": plan.cuda.version,
        "fm": plan.fabric_manager and plan.fabric_manager.package,
        "module": plan.driver.kernel_module,
        "branch": plan.driver.branch,
        "cudnn": plan.cudnn and plan.cudnn.version,
        "variant": plan.framework and plan.framework.variant,
    }
    assert {k: got[k] for k in expect} == expect
    assert violations(real_matrix, plan) == []


@pytest.mark.parametrize(
    ("os_id", "gpu", "pins", "why"),
    [
        ("rocky9", "a100-pcie", {"cuda": "11.8"}, "no nvidia/cuda runtime image for rockylinux9"),
        ("ubuntu22.04", "b200", {"cuda": "12.4"}, "cannot build for sm_100"),
        ("ubuntu22.04", "v100", {"cuda": "13.0"}, "cannot build for sm_70"),
        ("ubuntu22.04", "v100", {"driver": "590"}, "R580 is the last branch"),
        ("ubuntu22.04", "b200", {"driver": "570.124.06"}, "older than 570.133.20"),
    ],
)
def test_issue_refusals(real_matrix, os_id, gpu, pins, why):
    with pytest.raises(NoCompatibleStack) as info:
        resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu, **pins))
    assert any(why in d for d in info.value.details)


def test_framework_builds_cite_their_wheel():
    doc = yaml.safe_load((COMPAT / "frameworks.yaml").read_text())
    n = 0
    for fw in doc["frameworks"]:
        for rel in fw["releases"]:
            assert sum(b["default"] for b in rel["builds"]) <= 1
            for b in rel["builds"]:
                if b["source"] == "pypi-wheel-metadata":
                    n += 1
                    name = Path(b["evidence"]).name
                    assert b["evidence"].startswith("https://files.pythonhosted.org/")
                    assert re.match(rf"{fw['package']}-{re.escape(rel['version'])}-", name), name
                    assert b["cuda_runtime"]
                    assert b["cudnn"]
                else:
                    # documented builds: no wheel read, or (system CUDA) a wheel that declares no CUDA libraries
                    assert b["cuda_runtime"] is None
                    assert b["evidence"] is None or b["libraries"] == "system"
    assert n >= 40


def test_default_plans_avoid_end_of_life_images_when_a_supported_set_fits(real_matrix):
    """NVIDIA deletes end-of-life nvidia/cuda tags six months on: an unpinned plan takes an image set
    past end of life only when no supported set fits its OS and GPU."""
    checked = 0
    for os_rel in real_matrix.os_releases:
        for gpu in real_matrix.gpus:
            if any((x.os, x.gpu) == (os_rel.id, gpu.id) for x in real_matrix.exclusions) or not serves(os_rel, gpu):
                continue
            plan = resolve(real_matrix, PlanRequest(os_rel.id, gpu.id), suggest=False)
            image = real_matrix.image_of(Version(plan.cuda.version), plan.base_image)  # 12.9.1: the 12.9.2 set
            if image.past_eol(real_matrix.as_of):
                supported = [
                    i
                    for i in real_matrix.images
                    if not i.past_eol(real_matrix.as_of)
                    and "runtime" in i.flavours_for(os_rel.cuda_image_os)
                    and plan.platform in i.platforms  # a GH200 plan needs linux/arm64 tags
                    and real_matrix.cuda_supports_cc(i.cuda, gpu.compute_capability)
                ]
                assert not supported, (os_rel.id, gpu.id, plan.cuda.version, [str(i.cuda) for i in supported])
                assert "past NVIDIA's end of life" in next(r.text for r in plan.reasons if r.component == "image")
            checked += 1
    assert checked > 50
