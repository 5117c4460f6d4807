"""Hosts and images, apart, over the test fleet: two host groups on different driver branches (the
a100 group pinned to the older branch the session kit serves, conftest.OLDER_BRANCH, R575; the h100 group
on the fleet file's default) and three image plan locks (CUDA 13.2, 12.9 and 12.4). `provision
check` names exactly the pair that cannot run; `provision verify`'s image-runs check reads the
driver a host has, not its plan's: it fails the host whose installed driver cannot run an image its
group lists, passes the others, and passes once `provision apply` moves that group to a driver that
runs it. Only gpu-a changes (twice: to the older branch and back), so the fleet is left converged."""

import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from harness.fleet import run_apply
from support import COMPAT

from provision.matrix.loader import load_matrix
from provision.plan.model import PlanRequest, write_plan
from provision.plan.resolve import resolve

pytestmark = [pytest.mark.fleet]
# image -> the pins of the a100 plan request whose image part it is (None: the older branch)
IMAGES = {
    "cuda13.lock.json": {},  # the default branch's CUDA 13.x
    "cuda129.lock.json": None,  # the older branch's own CUDA (R575: 12.9)
    "cuda124.lock.json": {"cuda": "12.4"},
}
A100_IMAGES = ["images/cuda13.lock.json", "images/cuda129.lock.json"]
H100_IMAGES = [f"images/{name}" for name in IMAGES]  # all three
HOSTS = ("gpu-a", "gpu-b")  # one host per group: gpu-a (a100) is the one that moves


def provision(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=600, check=False
    )
    return proc.returncode, proc.stdout, proc.stderr


def verify(inventory, fleet_file, *more):
    rc, out, err = provision("verify", "-i", str(inventory), "--fleet", str(fleet_file), "--format", "json", *more)
    try:
        doc = json.loads(out)
    except ValueError:
        raise AssertionError(f"verify printed no JSON (exit {rc}): {out[-2000:]} {err[-2000:]}") from None
    return rc, {h["host"]: {c["id"]: c for c in h["checks"]} for h in doc["hosts"]}


def failed(checks):
    return {host: sorted(c for c, r in by_id.items() if r["status"] == "fail") for host, by_id in checks.items()}


class Setup(NamedTuple):
    env: object  # conftest.FleetEnv
    images: Path  # the folder of the three image locks
    pinned: Path  # fleet file: the a100 group pinned to the older branch, listing A100_IMAGES
    unpinned: Path  # the same without the pin
    inventory: Path  # gpu-a and gpu-b
    older: str  # the older branch's release (the pinned a100 plan's driver)
    cuda13_min: str  # the CUDA 13 image's Table 3 minimum


@pytest.fixture(scope="module")
def images_fleet(converged_fleet):
    env = converged_fleet
    folder = env.workdir / "images-check"
    (folder / "images").mkdir(parents=True, exist_ok=True)
    matrix = load_matrix(COMPAT)
    older = env.older_plan  # the a100 group's plan pinned to conftest.OLDER_BRANCH; the kit serves it
    plans = {
        name: older if pins is None else resolve(matrix, PlanRequest(older.request.os, older.request.gpu, **pins))
        for name, pins in IMAGES.items()
    }
    for name, plan in plans.items():
        write_plan(plan, folder / "images" / name)
    return Setup(
        env,
        folder / "images",
        env.fleet_file(
            "images-check/pinned.yaml",
            a100={"driver": older.request.driver, "images": A100_IMAGES},
            h100={"images": H100_IMAGES},
        ),
        env.fleet_file("images-check/unpinned.yaml", a100={"images": A100_IMAGES}, h100={"images": H100_IMAGES}),
        env.inventory("images-check/hosts.yml", hosts=HOSTS),
        older.driver.version,
        plans["cuda13.lock.json"].cuda.min_driver,
    )


def test_check_names_exactly_the_pairs_that_cannot_run(images_fleet):
    s = images_fleet
    rc, out, err = provision("check", "--fleet", str(s.pinned), "--images", str(s.images), "--format", "json")
    assert rc == 1, out + err
    doc = json.loads(out)
    assert doc["groups"]["a100"]["driver"] == s.older
    assert doc["groups"]["h100"]["driver"] == s.env.plans["h100"].driver.version
    pairs = {(p["group"], Path(p["image"]).name): p for p in doc["pairs"]}
    assert len(pairs) == 2 * len(IMAGES)
    assert sorted(k for k, p in pairs.items() if not p["runs"]) == [("a100", "cuda13.lock.json")]
    cannot = pairs["a100", "cuda13.lock.json"]
    assert cannot["assigned"]
    assert cannot["mode"] == "no"
    # R575 is not a base branch of the image's cuda-compat package (compat/cuda.yaml forward_compatibility)
    assert "cuda-compat-13-2 supports base branches" in cannot["reason"], cannot["reason"]
    assert not pairs["a100", "cuda124.lock.json"]["assigned"]
    assert all(p["assigned"] for (group, _), p in pairs.items() if group == "h100")
    # the table says the same: one cannot-run line, and the exit
    rc, out, _ = provision("check", "--fleet", str(s.pinned), "--images", str(s.images))
    assert rc == 1
    text = " ".join(out.split())
    assert text.count("cannot run: ") == 1, out
    assert "cuda13.lock.json on a100: " in text, out
    assert "4 of 5 assigned pairs run, exit 1" in text, out


def test_verify_fails_the_host_whose_driver_cannot_run_its_image_until_apply_moves_it(images_fleet, tmp_path):
    s = images_fleet
    newer = s.env.plans["a100"].driver.version
    # before apply: gpu-a still runs the default branch, which runs both of its images; the check
    # reads that driver, not the pinned plan's (the nvidia-smi check names the difference)
    rc, checks = verify(s.inventory, s.pinned, "--only", "image-runs,nvidia-smi")
    assert rc == 1
    assert failed(checks) == {"gpu-a": ["nvidia-smi"], "gpu-b": []}, checks
    assert checks["gpu-a"]["image-runs"]["status"] == "pass", checks["gpu-a"]["image-runs"]
    assert any(f": native on driver {newer} on " in e for e in checks["gpu-a"]["image-runs"]["evidence"])

    # apply moves gpu-a to the older branch: verify fails it on image-runs alone, naming the image,
    # the reason and the fix
    rc, out, _ = run_apply(
        "-i", str(s.inventory), "--fleet", str(s.pinned), "--limit", "gpu-a", run_dir=tmp_path / "pin"
    )
    assert rc == 0, out
    assert s.env.dpkg_version("gpu-a", "nvidia-open") == f"{s.older}-1"
    rc, checks = verify(s.inventory, s.pinned)
    assert rc == 1
    assert failed(checks) == {"gpu-a": ["image-runs"], "gpu-b": []}, failed(checks)
    detail = checks["gpu-a"]["image-runs"]["detail"]
    assert detail.startswith(f"images/cuda13.lock.json cannot run on driver {s.older} on "), detail
    assert f"(mode no): driver {s.older} is below CUDA 13.2" in detail, detail
    assert f"fix: plan the group with a driver at or above {s.cuda13_min}" in detail, detail
    assert "cuda129" not in detail, "an image the driver runs is not named"
    assert checks["gpu-b"]["image-runs"]["status"] == "pass"  # all three, natively on the default branch
    assert sum(": native on driver " in e for e in checks["gpu-b"]["image-runs"]["evidence"]) == len(IMAGES)

    # drop the pin: apply moves gpu-a back, and every check passes
    rc, out, _ = run_apply(
        "-i", str(s.inventory), "--fleet", str(s.unpinned), "--limit", "gpu-a", run_dir=tmp_path / "up"
    )
    assert rc == 0, out
    assert s.env.dpkg_version("gpu-a", "nvidia-open") == f"{newer}-1"
    rc, checks = verify(s.inventory, s.unpinned)
    assert rc == 0, failed(checks)
    assert {h: by_id["image-runs"]["status"] for h, by_id in checks.items()} == {"gpu-a": "pass", "gpu-b": "pass"}
