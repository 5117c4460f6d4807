"""`provision runs-on` and `provision check` agree with the rule (provision.matrix.runs_on) on every
catalogued driver release and CUDA release, and say why an image cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.errors import InputError, NoCompatibleStack
from provision.matrix.runs_on import RUNS, decide, needs_for_cuda
from provision.plan.model import PlanRequest, write_plan
from provision.plan.resolve import resolve
from provision.plan.runs import check, image_needs, read_images


def all_releases(matrix):
    return sorted({r.version for b in matrix.drivers for r in b.releases})


def test_runs_on_agrees_with_the_rule_on_every_catalogued_driver_release(real_matrix, cli):
    cudas = {str(c.version): c for c in real_matrix.cuda}
    walked = 0
    for release in all_releases(real_matrix):
        result = cli("runs-on", "--driver", str(release), "--only", "all", "--format", "json")
        assert result.code == 0, result
        doc = json.loads(result.out)
        assert doc["driver"] == str(release)
        rows = [r for r in doc["rows"] if r["kind"] == "cuda"]
        assert len(rows) == len(cudas)
        for row in rows:
            verdict = decide(real_matrix, needs_for_cuda(real_matrix, cudas[row["cuda"]]), release)
            assert row["mode"] == verdict.mode, (str(release), row)
            assert row["runs"] == (verdict.mode in RUNS)
            walked += 1
    assert walked >= 31 * 50


def test_runs_on_with_a_gpu_checks_its_sm_and_forward_compat(cli):
    doc = json.loads(cli("runs-on", "--driver", "535.183.01", "--gpu", "v100", "--only", "all", "--format", "json").out)
    cuda13 = [r for r in doc["rows"] if r["kind"] == "cuda" and r["cuda"].startswith("13.")]
    assert cuda13
    assert all(r["mode"] == "no" and "sm_70" in r["reason"] for r in cuda13)  # CUDA 13 dropped Volta
    rtx = json.loads(cli("runs-on", "--driver", "535.183.01", "--gpu", "rtx-4090", "--format", "json").out)
    assert not any(r["mode"] == "forward-compat" for r in rtx["rows"])  # a GeForce card
    l4 = json.loads(cli("runs-on", "--driver", "535.183.01", "--gpu", "l4", "--format", "json").out)
    assert any(r["mode"] == "forward-compat" for r in l4["rows"])


def test_runs_on_a_branch_names_the_release_it_took(cli):
    result = cli("runs-on", "--driver", "535")
    assert result.code == 0
    assert "R535: its newest catalogued release" in result.out


@pytest.mark.parametrize(("value", "words"), [("banana", "neither a driver release"), ("999", "not in the catalogue")])
def test_runs_on_refuses_bad_drivers(cli, value, words):
    result = cli("runs-on", "--driver", value)
    assert result.code == 2
    assert words in result.err
    assert "Traceback" not in result.err


def test_runs_on_table_filters_by_image_os(cli):
    result = cli("runs-on", "--driver", "580.95.05", "--os", "rocky9")
    assert result.code == 0
    images = [line for line in result.out.splitlines() if line.startswith("nvidia/cuda ")]
    assert images
    assert all("rockylinux9" in line for line in images)


# -- check: every catalogued driver release x CUDA release ---------------------------------
@pytest.fixture(scope="module")
def cuda_locks(real_matrix, tmp_path_factory) -> list[Path]:
    """One plan lock per catalogued CUDA release (a plain CUDA image for a T4), on the first image
    OS that has it."""
    folder = tmp_path_factory.mktemp("images")
    locks = []
    for cuda in real_matrix.cuda:
        for image_os in ("ubuntu22.04", "ubuntu24.04", "rockylinux9", "rockylinux8"):
            try:
                plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "t4", cuda=str(cuda.version), image_os=image_os))
            except (NoCompatibleStack, InputError):
                continue
            path = folder / f"cuda-{cuda.version}.lock.json"
            write_plan(plan, path)
            locks.append(path)
            break
    return locks


def test_check_agrees_with_the_rule_on_every_catalogued_driver_and_cuda_release(real_matrix, cuda_locks):
    # every CUDA release that has nvidia/cuda images at all (the others' tags are gone)
    assert len(cuda_locks) == sum(1 for c in real_matrix.cuda if real_matrix.images_for(c.version))
    images = read_images([str(p) for p in cuda_locks])
    groups = {}
    for release in all_releases(real_matrix):
        os_ids = next(r.os for b in real_matrix.drivers for r in b.releases if r.version == release)
        try:
            groups[str(release)] = resolve(
                real_matrix, PlanRequest(os_ids[0], "t4", driver=str(release), host_only=True)
            )
        except (NoCompatibleStack, InputError):
            continue
    assert len(groups) >= 40
    result = check(real_matrix, groups, images)
    t4 = real_matrix.gpu("t4")
    for cell in result.cells:
        image = next(i for i in images if i.label == cell.image)
        expected = decide(real_matrix, image.needs, _v(groups[cell.group].driver.version), t4)
        assert cell.verdict.mode == expected.mode, (cell.group, cell.image)
    assert len(result.cells) == len(groups) * len(images)
    assert not result.ok  # old drivers cannot run CUDA 13 images on anything


def _v(text):
    from provision.versions import DottedVersion

    return DottedVersion(text)


def test_image_needs_of_a_plan_lock_round_trip(real_matrix, cuda_locks):
    for lock in cuda_locks:
        image = read_images([str(lock)])[0]
        assert image.needs.cuda == next(c.version for c in real_matrix.cuda if str(c.version) in lock.name)


# -- the command -----------------------------------------------------------------------------------
@pytest.fixture
def fleet(tmp_path, real_matrix):
    images = tmp_path / "images"
    images.mkdir()
    write_plan(
        resolve(real_matrix, PlanRequest("ubuntu22.04", "h100-sxm", framework="pytorch")), images / "torch.lock.json"
    )
    write_plan(resolve(real_matrix, PlanRequest("ubuntu22.04", "t4", cuda="12.4")), images / "cuda124.lock.json")
    (tmp_path / "fleet.yaml").write_text(
        "groups:\n"
        '  old: {os: rocky9, gpu: rtx-4090, driver: "535", host_only: true, images: [images/torch.lock.json]}\n'
        "  new: {os: ubuntu22.04, gpu: h100-sxm, host_only: true}\n"
    )
    return tmp_path


def test_check_names_exactly_the_pairs_that_cannot_run(cli, fleet, monkeypatch):
    monkeypatch.chdir(fleet)
    result = cli("check", "--fleet", "fleet.yaml", "--images", "images", "--format", "json")
    assert result.code == 1, result
    doc = json.loads(result.out)
    failing = [(p["group"], p["image"]) for p in doc["pairs"] if p["assigned"] and not p["runs"]]
    assert failing == [("old", "images/torch.lock.json")]
    unassigned = [p for p in doc["pairs"] if not p["assigned"]]
    assert [(p["group"], p["image"]) for p in unassigned] == [("old", "images/cuda124.lock.json")]
    table = cli("check", "--fleet", "fleet.yaml", "--images", "images")
    assert table.code == 1
    assert "cannot run: images/torch.lock.json on old:" in table.out
    assert "data-center" in table.out


def test_check_passes_when_every_assigned_image_runs(cli, fleet, monkeypatch):
    monkeypatch.chdir(fleet)
    (fleet / "fleet.yaml").write_text(
        "groups:\n"
        '  old: {os: rocky9, gpu: rtx-4090, driver: "535", host_only: true, images: [images/cuda124.lock.json]}\n'
        "  new: {os: ubuntu22.04, gpu: h100-sxm, host_only: true}\n"
    )
    result = cli("check", "--fleet", "fleet.yaml", "--images", "images")
    assert result.code == 0, result
    assert "assigned pairs run" in result.out


def test_check_refuses_host_only_images_and_strangers(cli, fleet, monkeypatch, real_matrix):
    monkeypatch.chdir(fleet)
    write_plan(
        resolve(real_matrix, PlanRequest("ubuntu22.04", "t4", host_only=True)), fleet / "images" / "host.lock.json"
    )
    result = cli("check", "--fleet", "fleet.yaml", "--images", "images")
    assert result.code == 2
    assert "no image part" in result.err
    (fleet / "images" / "host.lock.json").write_text('{"not": "a plan"}')
    result = cli("check", "--fleet", "fleet.yaml", "--images", "images/host.lock.json")
    assert result.code == 2
    assert "not a provision plan" in result.err


def test_an_image_lock_is_read_through_its_plan(tmp_path, real_matrix):
    plan = resolve(real_matrix, PlanRequest("ubuntu22.04", "t4", cuda="12.4"))
    (tmp_path / "plans").mkdir()
    write_plan(plan, tmp_path / "plans" / "a.lock.json")
    lock = {
        "schema": 2,
        "plan_digest": plan.digest(),
        "variant": "base",
        "base_image": plan.base_image,
        "base_digest": None,
        "image_id": "sha256:" + "a" * 64,
        "requirements": None,
        "tags": ["reg.example/gpu:base"],
        "repo_digests": [],
        "plans": [{"path": "plans/a.lock.json", "digest": plan.digest()}],
    }
    (tmp_path / "image.lock.json").write_text(json.dumps(lock))
    (image,) = read_images([str(tmp_path / "image.lock.json")])
    assert image.needs == image_needs(plan, str(tmp_path / "image.lock.json"))
    lock["plans"] = [{"path": "../etc/passwd", "digest": plan.digest()}]
    (tmp_path / "image.lock.json").write_text(json.dumps(lock))
    with pytest.raises(InputError, match="not a plan path"):
        read_images([str(tmp_path / "image.lock.json")])
