"""Real builds through the docker SDK on an engine the harness starts (tests marked docker).

Base images cannot be pulled from Docker Hub here, so a local Debian base (debootstrap minbase +
docker import, cached) stands in for nvidia/cuda: through --base-image, or pushed as
nvidia/cuda:<the plan's tag> to a real registry on loopback (harness/registry.py) and pinned by
digest from there. render -> SDK build -> push -> pull by digest runs for real.
"""

import contextlib
import json
import secrets
import subprocess
import sys
import urllib.request
from pathlib import Path

import docker.errors
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


@pytest.fixture(scope="module")
def registry(engine):
    from harness import registry as reg

    running = reg.start()
    yield running
    running.close()


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
    assert doc["base_digest"] is None, "an imported base never came from a registry"
    check_jsonschema(IMAGE_LOCK_SCHEMA, lock)
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
    assert env["NVIDIA_REQUIRE_CUDA"] == plan_doc["require_cuda"]  # the rule's hosts (provision.matrix.runs_on)
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


IMAGE_LOCK_SCHEMA = Path(__file__).resolve().parents[2] / "provision/images/schema/image-lock.schema.json"
BASE_DIGESTS_SCHEMA = IMAGE_LOCK_SCHEMA.with_name("base-digests.schema.json")


def check_jsonschema(schema: Path, document: Path) -> None:
    """The outside validator (check-jsonschema, installed beside this interpreter) agrees."""
    tool = Path(sys.executable).with_name("check-jsonschema")
    proc = subprocess.run(
        [str(tool), "--schemafile", str(schema), str(document)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def mirrored_base(engine, local_base, registry, tmp_path):
    """A plan, and its base tag served by the loopback registry as 127.0.0.1:PORT/nvidia/cuda:<tag>
    (the local Debian base standing in for the image); the local mirror tag is removed again, so
    only a pull through the registry brings it back under that name."""
    plan = tmp_path / "plan.lock.json"
    proc = provision("plan", "--os", "ubuntu22.04", "--gpu", "a100-pcie", "--lock", str(plan), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    tag = json.loads(plan.read_text())["images"]["base"]
    mirror_repo, _, mirror_tag = registry.ref(tag).rpartition(":")
    engine.images.get(local_base).tag(mirror_repo, mirror_tag)
    try:
        for chunk in engine.api.push(mirror_repo, tag=mirror_tag, stream=True, decode=True):
            assert "error" not in chunk, chunk
    finally:
        engine.images.remove(f"{mirror_repo}:{mirror_tag}")
    digest = registry.manifest_digest(tag.partition(":")[0], mirror_tag)
    assert digest is not None
    assert digest.startswith("sha256:"), digest
    with contextlib.suppress(docker.errors.ImageNotFound):  # untagging may have dropped it already
        engine.images.remove(f"{mirror_repo}@{digest}")
    with pytest.raises(docker.errors.ImageNotFound):  # so the build has to pull it from the registry
        engine.images.get(f"{mirror_repo}@{digest}")
    return plan, tag, digest


def test_build_from_a_pinned_digest_pushes_and_pulls_back(engine, registry, mirrored_base, tmp_path):
    """pin-base resolves the plan's tag through the registry API; build pulls that digest, builds
    FROM it, pushes to the registry; the image lock names base and pushed digests and validates
    against its published schema; the pushed digest pulls back as the same image."""
    import jsonschema

    plan, tag, base_digest = mirrored_base
    digests = tmp_path / "base-digests.json"
    proc = provision(
        "pin-base", "--plan", str(plan), "--variant", "base", "--registry", registry.host, "--out", str(digests)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == [tag, base_digest]
    pins = json.loads(digests.read_text())
    entry = pins["images"][tag]
    assert entry["digest"] == base_digest
    assert entry["ref"] == f"{registry.ref(tag)}@{base_digest}"
    assert entry["platforms"] in ([], ["linux/amd64"])  # a single-manifest image names no platforms
    check_jsonschema(BASE_DIGESTS_SCHEMA, digests)

    target = registry.ref(f"provision-test/pinned-{secrets.token_hex(4)}")
    lock = tmp_path / "image.lock.json"
    try:
        proc = provision(
            "build",
            "--plan",
            str(plan),
            "--variant",
            "base",
            "--base-digests",
            str(digests),
            "--registry",
            registry.host,
            "--tag",
            target,
            "--push",
            "--image-lock",
            str(lock),
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"FROM {entry['ref']}" in proc.stdout, "the build log streams, FROM the pinned digest"
        mirror_repo = registry.ref(tag).rpartition(":")[0]
        assert f"{mirror_repo}@{base_digest[:19]}: Digest: {base_digest}" in proc.stdout, "pulled by digest"
        doc = json.loads(lock.read_text())
        jsonschema.Draft202012Validator(json.loads(IMAGE_LOCK_SCHEMA.read_text())).validate(doc)
        check_jsonschema(IMAGE_LOCK_SCHEMA, lock)
        assert doc["base_image"] == entry["ref"]
        assert doc["base_digest"] == base_digest
        assert doc["requirements"] is None  # the base variant installs no Python packages
        assert doc["repo_digests"], "pushed digests recorded"
        repo_digest = doc["repo_digests"][0]
        assert repo_digest.startswith(f"{target}@sha256:")
        pushed = repo_digest.partition("@")[2]
        for ref in doc["tags"]:
            assert registry.manifest_digest(target.partition("/")[2], ref.rpartition(":")[2]) == pushed
        image = engine.images.get(doc["image_id"])
        assert image.attrs["Config"]["Labels"]["org.opencontainers.image.base.name"] == entry["ref"]
        assert f"{registry.ref('nvidia/cuda')}@{base_digest}" in engine.images.get(entry["ref"]).attrs["RepoDigests"]

        engine.images.remove(doc["image_id"], force=True)
        with pytest.raises(Exception, match="No such image"):
            engine.images.get(doc["image_id"])
        pulled = engine.images.pull(target, tag=pushed)
        assert pulled.id == doc["image_id"]
        assert repo_digest in pulled.attrs["RepoDigests"]
    finally:
        for image in engine.images.list(name=target):
            engine.images.remove(image.id, force=True)


def test_digests_that_do_not_resolve_stop_before_anything_is_pushed(registry, mirrored_base, tmp_path):
    plan, tag, _ = mirrored_base
    digests = tmp_path / "base-digests.json"
    # every flavour of the plan: only the base is in the registry
    proc = provision("pin-base", "--plan", str(plan), "--registry", registry.host, "--out", str(digests))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "do not resolve to a digest" in proc.stderr
    assert "-runtime-" in proc.stderr
    assert "hint:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not digests.exists(), "nothing is written when a tag does not resolve"

    # a digest the registry does not have (a deleted tag's, or a pin from another registry)
    missing = "sha256:" + "0" * 64
    digests.write_text(
        json.dumps(
            {
                "schema": 1,
                "images": {
                    tag: {
                        "ref": f"{registry.ref(tag)}@{missing}",
                        "digest": missing,
                        "media_type": "",
                        "platforms": [],
                        "resolved_at": "2026-11-30T00:00:00Z",
                    }
                },
            }
        )
    )
    target = registry.ref(f"provision-test/never-{secrets.token_hex(4)}")
    lock = tmp_path / "image.lock.json"
    proc = provision(
        "build",
        "--plan",
        str(plan),
        "--variant",
        "base",
        "--base-digests",
        str(digests),
        "--registry",
        registry.host,
        "--tag",
        target,
        "--push",
        "--image-lock",
        str(lock),
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"error: base image {registry.ref(tag)}@{missing} does not resolve" in proc.stderr
    assert "Step 1/" not in proc.stdout, "nothing is built"
    assert not lock.exists()
    assert registry.manifest_digest(target.partition("/")[2], "latest") is None
    catalog = json.loads(urllib.request.urlopen(f"{registry.url}/v2/_catalog", timeout=10).read())
    assert target.partition("/")[2] not in catalog["repositories"], "nothing is pushed"
