"""The installed wheel carries compat/, images/ and playbooks/, and provision runs from it."""

import subprocess
import sys
import zipfile

import pytest
from support import ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:  # the isolated build fetches hatchling; the venv already has it
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(ROOT)],
            capture_output=True,
            text=True,
            check=False,
        )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    wheels = sorted(out.glob("gpu_provision-*.whl"))
    assert wheels, "no wheel built"
    return wheels[0]


def test_wheel_contains_the_resources(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "provision/_resources/compat/gpus.yaml",
        "provision/_resources/compat/schema/gpus.schema.json",
        "provision/_resources/compat/frameworks.yaml",
        "provision/_resources/compat/ci_actions.yaml",
        "provision/plan/schema/plan.schema.json",
        "provision/images/schema/image-lock.schema.json",
        "provision/images/schema/base-digests.schema.json",
        "provision/_resources/images/variants.yaml",
        "provision/_resources/images/base/Dockerfile.j2",
        "provision/_resources/playbooks/site.yml",
        "provision/_resources/playbooks/collections/ansible_collections/provision/gpu/roles/nvidia_driver/tasks/main.yml",
        "provision/_resources/playbooks/collections/ansible_collections/provision/gpu/playbooks/site.yml",
        "provision/_resources/playbooks/collections/ansible_collections/provision/gpu/plugins/modules/host_state.py",
        "provision/cli/__init__.py",
        "provision/verify/checks/pytest.ini",
        "provision/verify/checks/check_driver.py",
        "provision/verify/schema/report.schema.json",
        "provision/verify/schema/junit.xsd",
    ):
        assert required in names, required
    for top in ("compat/", "images/", "playbooks/"):
        count = sum(1 for n in names if n.startswith(f"provision/_resources/{top}"))
        source = sum(1 for p in (ROOT / top.rstrip("/")).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        assert count == source, f"{top}: {count} in the wheel, {source} in the checkout"


def test_installed_wheel_plans_from_its_own_data(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert pip.returncode == 0, pip.stderr
    proc = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import provision.resources as r; print(r.compat_dir(), r.images_dir(), r.playbooks_dir())",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    dirs = proc.stdout.split()
    assert all("/site-packages/provision/_resources/" in d for d in dirs), dirs
    plan = subprocess.run(
        [str(venv / "bin" / "provision"), "plan", "--os", "rocky9", "--gpu", "a100-pcie", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert plan.returncode == 0, plan.stderr
    assert '"schema": 2' in plan.stdout, plan.stderr
