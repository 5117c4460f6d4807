"""Hosts and images apart (issue 21): the image's OS is its own choice, a host can be planned alone,
and schema 1 locks users already committed are still read and their digests verified."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.errors import BadPin, InputError, NoCompatibleStack, UnknownId
from provision.plan.model import PlanRequest, read_plan, write_plan
from provision.plan.resolve import resolve
from provision.versions import DottedVersion as V

SCHEMA1 = Path(__file__).resolve().parent.parent / "fixtures" / "plans" / "schema1"


# -- --image-os --------------------------------------------------------------------------------
def test_ubuntu_images_on_a_rocky_host(cli):
    result = cli(
        "plan", "--os", "rocky9", "--gpu", "t4", "--cuda", "11.8", "--image-os", "ubuntu22.04", "--format", "json"
    )
    assert result.code == 0, result
    doc = json.loads(result.out)
    assert doc["os"]["id"] == "rocky9"
    assert doc["driver"]["packages"][0]["name"] in ("nvidia-open", "nvidia-driver")  # the host's dnf packages
    assert doc["driver"]["install_method"] == "dnf-module"
    assert doc["image_os"] == "ubuntu22.04"
    assert doc["base_image"].startswith("nvidia/cuda:11.8.0-")
    assert doc["base_image"].endswith("-ubuntu22.04")
    assert all(ref.endswith("-ubuntu22.04") for ref in doc["images"].values())
    assert doc["request"]["image_os"] == "ubuntu22.04"


def test_the_refusal_names_image_os_as_the_fix(cli):
    result = cli("plan", "--os", "rocky9", "--gpu", "t4", "--cuda", "11.8")
    assert result.code == 2
    assert "no nvidia/cuda runtime image for rockylinux9" in result.err
    hint = next(line for line in result.err.splitlines() if line.startswith("hint: "))
    assert hint.startswith("hint: try --image-os ")
    # every change the hint offers resolves: the first one keeps --cuda 11.8
    first = hint.removeprefix("hint: try --image-os ").split(" ", 1)[0]
    plan = cli("plan", "--os", "rocky9", "--gpu", "t4", "--cuda", "11.8", "--image-os", first, "--format", "json")
    assert plan.code == 0
    assert json.loads(plan.out)["cuda"]["version"] == "11.8.0"


def test_every_suggestion_resolves(real_matrix):
    with pytest.raises(NoCompatibleStack) as info:
        resolve(real_matrix, PlanRequest("rocky9", "t4", cuda="11.8"))
    for offer in info.value.hint.removeprefix("try ").split("; or "):
        label = offer.split(" (gives", 1)[0]
        if label.startswith("--image-os "):
            request = PlanRequest("rocky9", "t4", cuda="11.8", image_os=label.split()[1])
        elif label.startswith("--cuda "):
            request = PlanRequest("rocky9", "t4", cuda=label.split()[1])
        elif label == "drop --cuda":
            request = PlanRequest("rocky9", "t4")
        else:
            pytest.fail(f"unexpected offer {offer!r}")
        assert resolve(real_matrix, request).cuda is not None


def test_a_host_os_id_means_its_own_images(real_matrix):
    plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "a100-pcie", image_os="rocky9"))
    assert plan.image_os == "rockylinux9"
    assert plan.base_image.endswith("-rockylinux9")
    assert plan.os.id == "ubuntu22.04"
    assert resolve(real_matrix, PlanRequest("ubuntu22.04", "a100-pcie")).image_os == "ubuntu22.04"


def test_an_unknown_image_os_is_refused_with_the_choices(real_matrix):
    with pytest.raises(UnknownId) as info:
        resolve(real_matrix, PlanRequest("rocky9", "t4", image_os="windows11"))
    assert "ubuntu22.04" in info.value.hint
    assert "rockylinux9" in info.value.hint


def test_an_image_os_without_the_platform_is_refused_on_arm(real_matrix):
    """GH200 is an aarch64 host: its images must be published for linux/arm64 on that image OS too."""
    plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "gh200", image_os="ubuntu24.04"))
    assert plan.platform == "linux/arm64"
    assert plan.image_os == "ubuntu24.04"
    image = real_matrix.image_of(V(plan.cuda.version), plan.base_image)
    assert "linux/arm64" in image.platforms
    assert "ubuntu24.04" in image.os


# -- --host-only -------------------------------------------------------------------------------
def test_host_only_is_never_refused_because_of_an_image(cli, tmp_path):
    lock = tmp_path / "host.lock.json"
    result = cli("plan", "--os", "rocky9", "--gpu", "t4", "--host-only", "--format", "json", "--lock", str(lock))
    assert result.code == 0, result
    doc = json.loads(result.out)
    for key in ("cuda", "cudnn", "framework", "base_image", "driver_floor", "image_os"):
        assert doc[key] is None, key
    assert doc["images"] == {}
    assert doc["driver"]["version"]
    assert doc["container_toolkit"]["version"]
    assert doc["request"]["host_only"] is True
    plan = read_plan(lock)
    assert plan.host_only
    assert plan.digest() == doc["digest"]


def test_host_only_keeps_fabric_manager_and_mig(real_matrix):
    plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "h100-sxm", host_only=True, mig="3g.40gb,2g.20gb"))
    assert plan.fabric_manager is not None
    assert plan.fabric_manager.version == plan.driver.version
    assert plan.mig is not None
    assert plan.cuda is None


def test_host_only_takes_the_driver_a_full_plan_takes(real_matrix):
    for os_id, gpu in (("rocky9", "a100-pcie"), ("ubuntu22.04", "b200"), ("ubuntu22.04", "v100")):
        full = resolve(real_matrix, PlanRequest(os_id, gpu))
        host = resolve(real_matrix, PlanRequest(os_id, gpu, host_only=True))
        assert host.driver == full.driver
        assert host.fabric_manager == full.fabric_manager
        assert host.subnet_manager == full.subnet_manager
        assert host.container_toolkit == full.container_toolkit


@pytest.mark.parametrize("pins", [{"framework": "pytorch"}, {"cudnn": "9"}, {"image_os": "ubuntu22.04"}])
def test_host_only_with_image_pins_is_refused(real_matrix, pins):
    with pytest.raises(BadPin) as info:
        resolve(real_matrix, PlanRequest("rocky9", "t4", host_only=True, **pins))
    assert "--host-only plans no image" in info.value.message
    assert "drop" in info.value.hint


def test_host_only_on_the_refused_request_exits_0_with_no_image_part(cli):
    """Issue 21: the request refused for want of a rockylinux9 CUDA 11.8 image plans its host with
    --host-only; --cuda (and --image-os) then say which images the host must run."""
    refused = cli("plan", "--os", "rocky9", "--gpu", "t4", "--cuda", "11.8")
    assert refused.code == 2
    assert "--image-os" in refused.err
    for extra in ([], ["--image-os", "ubuntu22.04"]):
        result = cli(
            "plan", "--os", "rocky9", "--gpu", "t4", "--cuda", "11.8", *extra, "--host-only", "--format", "json"
        )
        assert result.code == 0, result
        doc = json.loads(result.out)
        for key in ("cuda", "cudnn", "framework", "base_image", "image_os"):
            assert doc[key] is None, key
        assert doc["request"]["cuda"] == "11.8"
        image = next(r["text"] for r in doc["reasons"] if r["component"] == "image")
        assert "runs the CUDA 11.8 images the host must run: native" in image


def test_host_only_cuda_chooses_a_driver_that_runs_it_by_the_rule(real_matrix):
    from provision.matrix.runs_on import decide, needs_for_cuda
    from provision.versions import parse_version

    plan = resolve(real_matrix, PlanRequest("rocky9", "t4", driver="535", cuda="13.0", host_only=True))
    assert plan.cuda is None
    assert plan.driver.branch == "535"
    gpu = next(g for g in real_matrix.gpus if g.id == "t4")
    for cuda in (c for c in real_matrix.cuda if str(c.version).startswith("13.0")):
        verdict = decide(real_matrix, needs_for_cuda(real_matrix, cuda), parse_version(plan.driver.version), gpu)
        assert verdict.mode == "forward-compat"  # R535 runs CUDA 13.0 on a T4 only through cuda-compat
    assert any("forward-compat" in r.text for r in plan.reasons if r.component == "image")
    with pytest.raises(BadPin) as info:  # CUDA 13 dropped Volta: no driver runs its images on a V100
        resolve(real_matrix, PlanRequest("rocky9", "v100", cuda="13.0", host_only=True))
    assert "no candidate driver runs CUDA 13.0 images on v100" in info.value.message
    assert "sm_70" in info.value.message


def test_host_only_table_says_there_is_no_image(cli):
    result = cli("plan", "--os", "rocky9", "--gpu", "t4", "--host-only")
    assert result.code == 0
    assert "- (--host-only: no image part)" in result.out
    assert "provision runs-on --driver" in result.out


# -- the driver you have: newest framework build that runs ------------------------------------
def test_a_pinned_driver_gets_the_newest_framework_build_it_runs(real_matrix):
    """R535 runs every CUDA 12.x build through minor-version compatibility: the plan takes the newest
    PyTorch release that resolves on it at all, not the newest one built for CUDA <= 12.2."""
    plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "t4", driver="535", framework="pytorch"))
    torch = real_matrix.framework("pytorch")
    newer = [r for r in torch.releases if r.version > V(plan.framework.version)]
    for release in newer:
        with pytest.raises(NoCompatibleStack):
            resolve(
                real_matrix, PlanRequest("ubuntu22.04", "t4", driver="535", framework=f"pytorch=={release.version}")
            )
    # T4 is a data-center GPU: past minor-version compatibility, the images' cuda-compat package
    # (forward compatibility) runs CUDA 13 builds on R535 too
    assert plan.cuda.compatibility in ("minor-version", "forward-compat")
    assert any(r.component == "cuda" and "compatibility" in r.text for r in plan.reasons)
    assert V(plan.framework.version) >= V("2.9.1")


def test_a_pinned_driver_on_a_consumer_gpu_stops_at_minor_version(real_matrix):
    """Forward compatibility serves data-center GPUs only: an RTX 4090 on R535 gets the newest
    CUDA 12 build (minor-version compatibility), never a CUDA 13 one."""
    plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "rtx-4090", driver="535", framework="pytorch"))
    assert plan.cuda.compatibility == "minor-version"
    assert plan.cuda.version.startswith("12.")
    torch = real_matrix.framework("pytorch")
    for release in (r for r in torch.releases if r.version > V(plan.framework.version)):
        with pytest.raises(NoCompatibleStack):
            resolve(
                real_matrix,
                PlanRequest("ubuntu22.04", "rtx-4090", driver="535", framework=f"pytorch=={release.version}"),
            )


def test_without_a_framework_native_cuda_still_comes_first(real_matrix):
    plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "t4", driver="535"))
    assert plan.cuda.compatibility == "toolkit-driver"
    assert V(plan.driver.version) >= V(plan.cuda.min_driver)


# -- schema 1 locks, committed before -----------------------------------------------------------
@pytest.mark.parametrize("lock", sorted(SCHEMA1.glob("*.lock.json")), ids=lambda p: p.name)
def test_schema1_locks_are_read_and_their_digests_verified(lock, tmp_path):
    doc = json.loads(lock.read_text())
    assert doc["schema"] == 1
    assert "image_os" not in doc
    plan = read_plan(lock)
    assert plan.digest() == doc["digest"]
    assert plan.image_os == doc["os"]["cuda_image_os"]
    assert plan.base_image.endswith(f"-{plan.image_os}")
    # written back, it stays a schema 1 plan with the same digest
    again = tmp_path / "again.json"
    write_plan(plan, again)
    assert read_plan(again).digest() == doc["digest"]
    # and an edit is still caught
    doc["driver"]["version"] = "999.1.1"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="edited after it was written"):
        read_plan(edited)


def test_a_schema1_lock_cannot_claim_another_image_os(tmp_path):
    lock = SCHEMA1 / "rocky9-a100-pcie.lock.json"
    doc = json.loads(lock.read_text())
    doc["image_os"] = "ubuntu22.04"
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="schema 1 plan's images are its host OS's own"):
        read_plan(path)


def test_new_plans_are_schema2_and_old_digests_do_not_move(real_matrix):
    plan = resolve(real_matrix, PlanRequest("rocky9", "a100-pcie"))
    assert plan.schema == 2
    assert plan.to_dict()["schema"] == 2
    old = read_plan(SCHEMA1 / "rocky9-a100-pcie.lock.json")
    assert old.schema == 1
    assert old._replace(schema=2, data=plan.data, reasons=plan.reasons).digest() != old.digest()
