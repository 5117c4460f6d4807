"""Images for an aarch64 plan (GH200): the lock is resolved by uv for aarch64 wheels, the image is
built for linux/arm64 (render, provision build, and both CI pipelines), and its tags say so.

Locks resolve against the local test index (conftest.py), with the real uv; CI plans render the
`base` variant (no requirements to resolve)."""

import sys
from pathlib import Path

import pytest
import yaml

from provision.errors import InputError
from provision.images.pylock import parse_lock
from provision.images.render import render_image
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

BIN = Path(sys.executable).parent


@pytest.fixture
def gh200_plan(real_matrix):
    return resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="gh200", framework="pytorch==2.14.1"))


def test_the_lock_resolver_gets_the_plans_aarch64_platform(gh200_plan):
    rendered = render_image(gh200_plan, "pytorch")
    lock = rendered.files["requirements.lock"]
    assert "for Python 3.10 on aarch64-manylinux_2_35." in lock
    assert parse_lock(lock, "lock")["torch"] == "2.14.1"
    assert parse_lock(lock, "lock")["nvidia-cudnn-cu13"] == gh200_plan.framework.cudnn
    assert rendered.platform == "linux/arm64"
    assert rendered.labels["io.provision.platform"] == "linux/arm64"
    assert rendered.tags[0] == f"pytorch2.14.1-cuda{gh200_plan.cuda.version}-ubuntu22.04-arm64"
    assert rendered.tags[1].startswith("content-")
    assert rendered.tags[1].endswith("-pytorch-arm64")


def test_x86_64_plans_render_as_before(real_matrix):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="pytorch==2.14.1"))
    rendered = render_image(plan, "pytorch")
    assert "on x86_64-manylinux_2_35." in rendered.files["requirements.lock"]
    assert rendered.platform == "linux/amd64"
    assert "io.provision.platform" not in rendered.labels
    assert not rendered.tags[0].endswith("-arm64")
    # --platform naming the plan's own platform is a check that passes
    assert render_image(plan, "base", platform="linux/amd64").platform == "linux/amd64"


@pytest.mark.parametrize(
    ("os_id", "gpu", "platform", "plans"),
    [
        ("ubuntu22.04", "v100-sxm2-32gb", "linux/arm64", "linux/amd64"),  # image sets catalogued amd64 only
        ("ubuntu22.04", "gh200", "linux/amd64", "linux/arm64"),  # an aarch64-only GPU
    ],
)
def test_a_platform_other_than_the_plans_is_refused(cli, tmp_path, real_matrix, os_id, gpu, platform, plans):
    plan = resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu))
    assert plan.platform == plans
    with pytest.raises(InputError) as info:
        render_image(plan, "base", platform=platform)
    assert info.value.exit_code == 2
    assert f"not the plan's platform ({plans}" in info.value.message
    assert f"the plan builds for {plans}" in info.value.hint
    out = tmp_path / "r1"
    r = cli("render", "--os", os_id, "--gpu", gpu, "--out", str(out), "--platform", platform)
    assert r.code == 2, r
    assert f"--platform {platform} is not the plan's platform ({plans}" in r.err
    assert "Traceback" not in r.err
    assert not out.exists(), "nothing rendered"
    # the plan's own platform renders
    r = cli("render", "--os", os_id, "--gpu", gpu, "--out", str(out), "--platform", plans)
    assert r.code == 0, r


def test_build_uses_the_plans_platform(cli, tmp_path, monkeypatch):
    """provision build hands the engine linux/arm64 for a GH200 plan, with no --platform given."""
    from provision.images import build

    seen = {}

    def fake_build(context, **kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(build, "client", lambda docker_client=None: object())
    monkeypatch.setattr(build, "build_image", fake_build)
    lock = tmp_path / "plan.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", "gh200", "--lock", str(lock), "--format", "json").code == 0
    with pytest.raises(SystemExit):
        cli("build", "--plan", str(lock), "--image-lock", str(tmp_path / "image.lock.json"))
    assert seen["platform"] == "linux/arm64"


@pytest.fixture
def plans(cli, tmp_path):
    out = tmp_path / "plans"
    out.mkdir()
    for name, gpu in (("gh200", "gh200"), ("h100", "h100-pcie")):
        args = ("plan", "--os", "ubuntu22.04", "--gpu", gpu, "--cuda", "12.6", "--format", "json")
        assert cli(*args, "--lock", str(out / f"{name}.lock.json")).code == 0
    return out


@pytest.mark.usefixtures("on_tool_index")
def test_ci_builds_each_plan_for_its_platform(cli, plans, tmp_path):
    gh = tmp_path / ".github" / "workflows" / "images.yml"
    gh.parent.mkdir(parents=True)
    assert cli("ci", "github", "--plans", str(plans), "--variant", "base", "--out", str(gh)).code == 0
    doc = yaml.safe_load(gh.read_text())
    jobs = {j["plan"].split("/")[-1]: j for j in doc["jobs"]["build"]["strategy"]["matrix"]["include"]}
    assert jobs["gh200.lock.json"]["platform"] == "linux/arm64"
    assert jobs["h100.lock.json"]["platform"] == "linux/amd64"
    assert all(t.endswith("-arm64") for t in jobs["gh200.lock.json"]["tags"].split())
    assert not any(t.endswith("-arm64") for t in jobs["h100.lock.json"]["tags"].split())
    step = next(s for s in doc["jobs"]["build"]["steps"] if s.get("id") == "build")
    assert step["with"]["platforms"] == "${{ matrix.platform }}"

    gl = tmp_path / ".gitlab-ci.yml"
    assert cli("ci", "gitlab", "--plans", str(plans), "--variant", "base", "--out", str(gl)).code == 0
    lab = yaml.safe_load(gl.read_text())
    builds = {k: v for k, v in lab.items() if k.startswith("build:")}
    assert sorted(v["variables"]["PLATFORM"] for v in builds.values()) == ["linux/amd64", "linux/arm64"]
    assert '--platform "$PLATFORM"' in "\n".join(lab[".build"]["script"])
