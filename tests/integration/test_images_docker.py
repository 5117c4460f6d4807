"""Real builds through the docker SDK on an engine the harness starts (tests marked docker).

Base images cannot be pulled here, so a local Debian base (debootstrap minbase + docker import,
cached) stands in for nvidia/cuda through --base-image; render -> SDK build -> inspect runs for real.
"""

import json
import secrets
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.docker]


@pytest.fixture(scope="module")
def engine():
    from harness import engine as eng

    return eng.ensure_engine()


@pytest.fixture(scope="module")
def local_base(engine):
    from harness import rootfs

    return rootfs.image(engine, "bookworm-minbase", trust_host_ca=True)


@pytest.fixture
def repo(engine):
    name = f"provision-test/img-{secrets.token_hex(4)}"
    yield name
    for image in engine.images.list(name=name):
        for tag in image.tags:
            engine.images.remove(tag, force=True)


def provision(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=1800, check=False, env=env
    )


def test_build_inspect_and_lock(engine, local_base, repo, tmp_path):
    lock = tmp_path / "image.lock.json"
    plan = tmp_path / "plan.lock.json"
    assert (
        provision(
            "plan", "--os", "ubuntu22.04", "--gpu", "a100-pcie", "--lock", str(plan), "--format", "json"
        ).returncode
        == 0
    )
    proc = provision(
        "build",
        "--plan",
        str(plan),
        "--variant",
        "base",
        "--base-image",
        local_base,
        "--tag",
        repo,
        "--image-lock",
        str(lock),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Step 1/" in proc.stdout, "the build log streams"
    doc = json.loads(lock.read_text())
    plan_doc = json.loads(plan.read_text())
    assert doc["plan_digest"] == plan_doc["digest"]
    assert doc["base_image"] == local_base
    assert doc["tags"] == [
        f"{repo}:base-cuda{plan_doc['cuda']['version']}-ubuntu22.04",
        f"{repo}:{doc['tags'][1].split(':')[-1]}",
    ]
    assert doc["tags"][1].split(":")[-1].startswith("content-")
    image = engine.images.get(doc["image_id"])
    assert set(doc["tags"]) <= set(image.tags)
    labels = image.attrs["Config"]["Labels"]
    assert labels["io.provision.sm"].startswith("sm_")
    assert labels["io.provision.driver-floor"] == plan_doc["driver_floor"]
    assert labels["io.provision.cuda"] == plan_doc["cuda"]["version"]
    assert labels["org.opencontainers.image.base.name"] == local_base
    env = dict(e.split("=", 1) for e in image.attrs["Config"]["Env"])
    assert env["NVIDIA_REQUIRE_CUDA"] == "cuda>=" + ".".join(plan_doc["cuda"]["version"].split(".")[:2])
    assert image.attrs["Config"]["User"] == "10001:10001"
    out = engine.containers.run(
        doc["image_id"], ["sh", "-c", "id -u; find /var/lib/apt/lists -type f | wc -l"], remove=True
    )
    uid, lists = out.decode().split()
    assert uid == "10001"
    assert lists == "0"


def test_packages_and_pip_leave_no_caches(engine, local_base, repo, tmp_path):
    """A user template that extends ours runs the apt and pip macros for real (host network)."""
    templates = tmp_path / "templates"
    (templates / "tools").mkdir(parents=True)
    (templates / "variants.yaml").write_text(
        "variants:\n  tools:\n    template: tools/Dockerfile.j2\n    flavour: base\n    framework: null\n"
        "    description: python tools\n"
    )
    (templates / "tools" / "Dockerfile.j2").write_text(
        '{% extends "provision/base/Dockerfile.j2" %}\n{% block software %}\n{{ macros.python_venv() }}\n'
        "RUN python -m pip install --no-cache-dir six==1.16.0\n{% endblock %}\n"
    )
    proc = provision(
        "build",
        "--os",
        "ubuntu22.04",
        "--gpu",
        "l4",
        "--variant",
        "tools",
        "--templates",
        str(templates),
        "--base-image",
        local_base,
        "--tag",
        repo,
        "--image-lock",
        str(tmp_path / "lock.json"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    image_id = json.loads((tmp_path / "lock.json").read_text())["image_id"]
    script = (
        "python -c 'import six; print(six.__version__)'; find /var/lib/apt/lists -type f | wc -l; "
        "ls -A /root/.cache/pip /home/app/.cache/pip 2>/dev/null | wc -l; whoami"
    )
    out = engine.containers.run(image_id, ["sh", "-c", script], remove=True).decode().split()
    assert out == ["1.16.0", "0", "0", "app"]


def test_broken_build_reports_its_failing_step(engine, local_base, repo, tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "variants.yaml").write_text(
        "variants:\n  broken:\n    template: broken.j2\n    flavour: base\n    framework: null\n    description: fails\n"
    )
    (templates / "broken.j2").write_text(
        '{% extends "provision/base/Dockerfile.j2" %}\n{% block software %}\n'
        "RUN echo about to fail && exit 3\n{% endblock %}\n"
    )
    proc = provision(
        "build",
        "--os",
        "rocky9",
        "--gpu",
        "t4",
        "--variant",
        "broken",
        "--templates",
        str(templates),
        "--base-image",
        local_base,
        "--tag",
        repo,
        "--image-lock",
        str(tmp_path / "lock.json"),
    )
    assert proc.returncode == 1
    assert "error: image build failed" in proc.stderr
    assert "failing step:" in proc.stderr
    assert "RUN echo about to fail && exit 3" in proc.stderr
    assert "about to fail" in proc.stderr, "the tail of the step's log"
    assert not (tmp_path / "lock.json").exists()
