"""Resolver cases as a table over the tiny fixture catalogue (tests/fixtures/compat)."""

import pytest
from rules import violations

from provision.errors import BadPin, InputError, NoCompatibleStack, UnknownId
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.versions import DottedVersion as Version

OK = [
    # (os, gpu, pins, expected fields)
    (
        "rocky9",
        "a100-pcie-80gb",
        {},
        {
            "branch": "595",
            "driver": "595.91.07",
            "module": "open",
            "cuda": "13.0.0",
            "cudnn": "9.12.0.46",
            "image": "nvidia/cuda:13.0.0-runtime-rockylinux9",
        },
    ),
    (
        "ubuntu22.04",
        "a100-pcie-80gb",
        {},
        {"driver": "595.91.07", "cuda": "13.0.2", "cudnn": None, "packages": ["nvidia-open"]},
    ),
    (
        "ubuntu22.04",
        "v100-pcie",
        {},
        {"branch": "580", "module": "proprietary", "cuda": "12.9.1", "packages": ["cuda-drivers-580"]},
    ),
    ("ubuntu22.04", "h100-sxm", {}, {"fm": "nvidia-fabricmanager", "fm_version": "595.91.07"}),
    ("rocky9", "b200", {}, {"module": "open", "stream": "nvidia-driver:595-open", "fm": "nvidia-fabricmanager"}),
    ("ubuntu22.04", "a100-pcie-80gb", {"policy": "latest"}, {"branch": "610", "driver": "610.57.04"}),
    (
        "ubuntu22.04",
        "a100-pcie-80gb",
        {"driver": "535"},
        {"branch": "535", "module": "proprietary", "cuda": "12.2.2", "compat": "toolkit-driver"},
    ),
    (
        "ubuntu22.04",
        "a100-pcie-80gb",
        {"driver": "535", "cuda": "12.4"},
        {"cuda": "12.4.1", "compat": "minor-version", "floor": "525.60.13"},
    ),
    ("ubuntu22.04", "a100-pcie-80gb", {"driver": "595.58.03"}, {"driver": "595.58.03"}),
    ("ubuntu22.04", "a100-pcie-80gb", {"cuda": "12.4"}, {"cuda": "12.4.1", "cudnn": "9.1.0.70"}),
    ("ubuntu22.04", "a100-pcie-80gb", {"cudnn": "9.10"}, {"cuda": "12.9.1", "cudnn": "9.10.2.21"}),
    (
        "rocky9",
        "a100-pcie-80gb",
        {"framework": "pytorch==2.5.1"},
        {
            "cuda": "12.4.1",
            "variant": "cu124",
            "cudnn": "9.1.0.70",
            "index": None,
            "image": "nvidia/cuda:12.4.1-base-rockylinux9",
        },
    ),
    (
        "ubuntu22.04",
        "v100-pcie",
        {"framework": "pytorch==2.9.1"},
        {"variant": "cu126", "cuda": "12.6.3", "index": "https://download.pytorch.org/whl/cu126"},
    ),
    ("ubuntu22.04", "a100-pcie-80gb", {"framework": "pytorch"}, {"variant": "cu128", "fw_version": "2.9.1"}),
    ("ubuntu22.04", "a100-pcie-80gb", {"driver": "580", "cuda": "12.2"}, {"cuda": "12.2.2", "cudnn": None}),
]


def fields(plan):
    return {
        "branch": plan.driver.branch,
        "driver": plan.driver.version,
        "module": plan.driver.kernel_module,
        "packages": [p.name for p in plan.driver.packages],
        "stream": plan.driver.module_stream,
        "cuda": plan.cuda.version,
        "compat": plan.cuda.compatibility,
        "floor": plan.driver_floor,
        "cudnn": plan.cudnn.version if plan.cudnn else None,
        "image": plan.base_image,
        "fm": plan.fabric_manager.package if plan.fabric_manager else None,
        "fm_version": plan.fabric_manager.version if plan.fabric_manager else None,
        "variant": plan.framework.variant if plan.framework else None,
        "index": plan.framework.index_url if plan.framework else None,
        "fw_version": plan.framework.version if plan.framework else None,
    }


@pytest.mark.parametrize(("os_id", "gpu", "pins", "expected"), OK)
def test_resolves(fixture_matrix, os_id, gpu, pins, expected):
    plan = resolve(fixture_matrix, PlanRequest(os=os_id, gpu=gpu, **pins))
    got = fields(plan)
    assert {k: got[k] for k in expected} == expected
    assert violations(fixture_matrix, plan) == []


REFUSED = [
    # (os, gpu, pins, text that must appear among the eliminations, text in the hint)
    (
        "rocky9",
        "a100-pcie-80gb",
        {"cuda": "11.8"},
        "cuda 11.8.0: no nvidia/cuda runtime image for rockylinux9",
        "--cuda 13.0",
    ),
    ("ubuntu22.04", "b200", {"cuda": "12.4"}, "cannot build for sm_100", "--cuda 13.0"),
    ("ubuntu22.04", "v100-pcie", {"cuda": "13.0"}, "cannot build for sm_70", "--cuda 12.9"),
    (
        "ubuntu22.04",
        "v100-pcie",
        {"driver": "595"},
        "R595: does not support Volta (R580 is the last branch for it)",
        "--driver 580",
    ),
    ("ubuntu22.04", "b200", {"driver": "535"}, "predates Blackwell", "--driver"),
    (
        "ubuntu22.04",
        "b200",
        {"driver": "570.86.15"},
        "older than 570.133.20, the first driver confirmed for b200",
        "--driver",
    ),
    (
        "ubuntu22.04",
        "v100-pcie",
        {"framework": "pytorch==2.5.1", "cuda": "13.0"},
        "built for CUDA 12.4, not --cuda 13.0",
        "--cuda 12.4",
    ),
    ("ubuntu22.04", "a100-pcie-80gb", {"cudnn": "8"}, "no cuDNN 8.x support matrix", "drop --cudnn"),
    ("ubuntu22.04", "b200", {"framework": "pytorch==2.5.1"}, "not compiled for sm_100", "--framework pytorch==2.9.1"),
    (
        "ubuntu22.04",
        "a100-pcie-80gb",
        {"framework": "tensorflow==2.12.0"},
        "no cuDNN 8.x support matrix",
        "drop --framework",
    ),
]


@pytest.mark.parametrize(("os_id", "gpu", "pins", "eliminated", "hint"), REFUSED)
def test_refuses_with_reasons_and_a_working_pin(fixture_matrix, os_id, gpu, pins, eliminated, hint):
    with pytest.raises(NoCompatibleStack) as info:
        resolve(fixture_matrix, PlanRequest(os=os_id, gpu=gpu, **pins))
    err = info.value
    assert err.exit_code == 2
    assert any(eliminated in line for line in err.details), err.details
    assert hint in err.hint
    # the suggested pin change really resolves
    assert "gives driver" in err.hint


def test_lts_skips_feature_and_eol_branches(fixture_matrix):
    with pytest.raises(NoCompatibleStack) as info:
        resolve(fixture_matrix, PlanRequest(os="rocky9", gpu="a100-pcie-80gb", cuda="11.8"))
    skipped = [d for d in info.value.details if d.startswith("not tried")]
    assert skipped
    assert "R610 (new feature branch)" in skipped[0]
    assert "R570 (end of life 2026-02)" in skipped[0]


def test_end_of_life_pin_is_used_with_a_warning(fixture_matrix):
    plan = resolve(fixture_matrix, PlanRequest(os="ubuntu22.04", gpu="a100-pcie-80gb", driver="570"))
    assert plan.driver.branch == "570"
    assert any("warning: past end of life" in r.text for r in plan.reasons)


@pytest.mark.parametrize(
    ("pins", "error", "text"),
    [
        ({"cuda": "banana"}, BadPin, "--cuda 'banana' is not a CUDA version"),
        ({"cuda": "10.2"}, BadPin, "CUDA 10.2 is not in the catalogue"),
        ({"driver": "latest"}, BadPin, "neither a branch nor a release"),
        ({"driver": "999"}, BadPin, "R999 is not in the catalogue"),
        ({"driver": "580.1.1"}, BadPin, "580.1.1 is not a catalogued R580 release"),
        ({"cudnn": "nine"}, BadPin, "not a cuDNN version"),
        ({"framework": "jax==0.4"}, UnknownId, "unknown framework 'jax'"),
        ({"framework": "pytorch==9.9.9"}, UnknownId, "PyTorch 9.9.9 is not in the catalogue"),
        ({"framework": "pytorch=2.5.1"}, BadPin, "is not NAME or NAME==VERSION"),
        ({"policy": "stable"}, BadPin, "unknown policy"),
    ],
)
def test_bad_pins(fixture_matrix, pins, error, text):
    with pytest.raises(error, match=text) as info:
        resolve(fixture_matrix, PlanRequest(os="ubuntu22.04", gpu="a100-pcie-80gb", **pins))
    assert info.value.exit_code == 2
    assert info.value.hint


def test_unknown_ids_suggest_the_nearest(fixture_matrix):
    with pytest.raises(UnknownId) as info:
        resolve(fixture_matrix, PlanRequest(os="ubuntu22.04", gpu="a100-pcie-80g"))
    assert "did you mean a100-pcie-80gb" in info.value.hint
    with pytest.raises(UnknownId) as info:
        resolve(fixture_matrix, PlanRequest(os="rocky", gpu="b200"))
    assert "rocky9" in info.value.hint


def test_alias_resolves_to_the_gpu(fixture_matrix):
    plan = resolve(fixture_matrix, PlanRequest(os="el9", gpu="h100-sxm5"))
    assert plan.gpu.id == "h100-sxm"
    assert plan.os.id == "rocky9"


def test_group_with_different_setups_asks_for_one(fixture_matrix):
    with pytest.raises(InputError, match="differ in") as info:
        resolve(fixture_matrix, PlanRequest(os="rocky9", gpu="mixed"))
    assert "--gpu a100-pcie-80gb or --gpu h100-sxm" in info.value.hint


def test_every_choice_has_a_reason(fixture_matrix):
    plan = resolve(fixture_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="pytorch==2.5.1"))
    components = {r.component for r in plan.reasons}
    assert {
        "os",
        "gpu",
        "driver",
        "kernel-module",
        "cuda",
        "cudnn",
        "framework",
        "image",
        "fabric-manager",
        "container-toolkit",
    } <= components


# -- host architecture (issue 11, item 2): a GH200 plan is aarch64 end to end --------------------
def test_gh200_plan_is_aarch64_end_to_end(real_matrix):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="gh200", framework="pytorch"))
    assert (plan.os.arch, plan.os.repo_arch, plan.platform) == ("aarch64", "sbsa", "linux/arm64")
    assert plan.driver.kernel_module == "open"
    image = real_matrix.image_of(Version(plan.cuda.version), plan.base_image)
    assert "linux/arm64" in image.platforms  # only image sets published for arm64
    release = real_matrix.framework("pytorch").release(Version(plan.framework.version))
    build = next(b for b in release.builds if b.variant == plan.framework.variant)
    assert "aarch64" in build.arches  # aarch64 CUDA wheels
    assert plan.framework.requires_python == release.python_aarch64
    assert "ubuntu2204/sbsa" in next(r.text for r in plan.reasons if r.component == "os")
    assert violations(real_matrix, plan) == []


def test_h100_plan_stays_x86_64_and_digests_as_before(real_matrix):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="pytorch"))
    assert (plan.os.arch, plan.os.repo_arch, plan.platform) == ("x86_64", "x86_64", "linux/amd64")
    doc = plan.to_dict()
    assert doc["os"]["arch"] == "x86_64"
    assert doc["platform"] == "linux/amd64"
    # a lock written before plans had an architecture has none of these keys, and still verifies
    for key in ("arch", "repo_arch"):
        doc["os"].pop(key)
    doc.pop("platform")
    again = type(plan).from_dict(doc, origin="old lock")
    assert again.os.arch == "x86_64"
    assert again.platform == "linux/amd64"
    assert again.digest() == plan.digest()


def test_gh200_and_h100_plans_differ_only_where_the_host_does(real_matrix):
    arm = resolve(real_matrix, PlanRequest(os="rocky9", gpu="gh200"))
    x86 = resolve(real_matrix, PlanRequest(os="rocky9", gpu="h100-pcie"))
    assert (arm.os.nvidia_repo, x86.os.nvidia_repo) == ("rhel9", "rhel9")
    assert (arm.os.repo_arch, x86.os.repo_arch) == ("sbsa", "x86_64")
    assert arm.digest() != x86.digest()
    from provision.plan.model import Plan

    assert Plan.from_dict(arm.to_dict()).to_dict() == arm.to_dict()  # the plan schema takes it


def test_gh200_on_an_os_without_an_sbsa_directory_is_refused_with_a_hint(real_matrix):
    with pytest.raises(NoCompatibleStack, match="gh200 needs an aarch64 host") as info:
        resolve(real_matrix, PlanRequest(os="debian12", gpu="gh200"))
    assert info.value.kinds == frozenset({"os-arch"})
    assert "--os ubuntu22.04" in info.value.hint
    assert info.value.exit_code == 2


def test_gh200_refuses_frameworks_without_aarch64_cuda_wheels(real_matrix):
    with pytest.raises(NoCompatibleStack) as info:
        resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="gh200", framework="pytorch==2.10.0"))
    assert info.value.kinds == frozenset({"framework-arch"})
    assert "no aarch64 CUDA wheels" in "\n".join(info.value.details)
    assert "--framework pytorch==2.14.1" in info.value.hint  # the newest release that has them (and images)
    with pytest.raises(NoCompatibleStack) as info:
        resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="gh200", framework="tensorflow"))
    assert "framework-arch" in info.value.kinds


def test_gh200_takes_open_modules_even_where_the_branch_defaults_to_proprietary(real_matrix):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="gh200", driver="535"))
    assert plan.driver.kernel_module == "open"
    text = next(r.text for r in plan.reasons if r.component == "kernel-module")
    assert "gh200 needs them (R535 defaults to proprietary)" in text
    x86 = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-pcie", driver="535"))
    assert x86.driver.kernel_module == "proprietary"


def test_image_sets_without_arm64_are_eliminated_for_aarch64(real_matrix):
    with pytest.raises(NoCompatibleStack) as info:
        resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="gh200", cuda="13.2"))
    assert "image-platform" in info.value.kinds
    assert "not linux/arm64" in "\n".join(info.value.details)


def test_extravars_carry_the_host_architecture(real_matrix):
    from provision.fleet.extravars import to_extravars

    arm = to_extravars(resolve(real_matrix, PlanRequest(os="rhel9", gpu="gh200")))
    x86 = to_extravars(resolve(real_matrix, PlanRequest(os="rhel9", gpu="h100-pcie")))
    assert (arm["provision_arch"], arm["provision_nvidia_repo_arch"], arm["provision_deb_arch"]) == (
        "aarch64",
        "sbsa",
        "arm64",
    )
    assert (x86["provision_arch"], x86["provision_nvidia_repo_arch"], x86["provision_deb_arch"]) == (
        "x86_64",
        "x86_64",
        "amd64",
    )
