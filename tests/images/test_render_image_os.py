"""render, build, pin-base and ci follow the plan's image OS (issue 21: the images' OS is its own
choice, `image_os`), and refuse a host-only plan, which has no image part, in one line with exit 2.

Plans come from the fixture catalogue (tests/fixtures/compat)."""

import json

import pytest

GPU = "a100-pcie-80gb"  # a fixture catalogue id

pytestmark = pytest.mark.usefixtures("on_fixture_catalogue")


@pytest.fixture
def plan(cli, tmp_path):
    def make(name, *args):
        path = tmp_path / f"{name}.lock.json"
        r = cli("plan", "--gpu", GPU, *args, "--lock", str(path))
        assert r.code == 0, r
        return path

    return make


def test_a_rocky_host_with_ubuntu_images_renders_ubuntu(cli, plan, tmp_path):
    """The issue's case: a Rocky host running Ubuntu images. The image is the one an Ubuntu host's plan
    of the same CUDA and framework renders, to the byte (the lock resolved for Ubuntu's Python)."""
    path = plan("mixed", "--os", "rocky9", "--image-os", "ubuntu22.04", "--framework", "pytorch==2.5.1")
    doc = json.loads(path.read_text())
    assert doc["os"]["cuda_image_os"] == "rockylinux9"
    assert doc["image_os"] == "ubuntu22.04"
    r = cli("render", "--plan", str(path), "--out", str(tmp_path / "ctx"))
    assert r.code == 0, r
    dockerfile = (tmp_path / "ctx" / "Dockerfile").read_text()
    from_ref = dockerfile.split("\nFROM ", 1)[1].split("\n", 1)[0]
    assert from_ref in doc["images"].values()
    assert from_ref.endswith("-ubuntu22.04")
    assert "apt-get install" in dockerfile
    assert "dnf" not in dockerfile
    assert 'io.provision.image-os="ubuntu22.04"' in dockerfile
    ubuntu = plan("ubuntu", "--os", "ubuntu22.04", "--cuda", doc["cuda"]["version"], "--framework", "pytorch==2.5.1")
    assert cli("render", "--plan", str(ubuntu), "--out", str(tmp_path / "ctx2")).code == 0
    for name in ("Dockerfile", "requirements.lock"):
        assert (tmp_path / "ctx2" / name).read_text() == (tmp_path / "ctx" / name).read_text(), name


def test_the_readable_tag_names_the_image_os(plan, fixture_matrix):
    from provision.images.render import image_tags
    from provision.plan.model import read_plan

    mixed = read_plan(plan("mixed", "--os", "rocky9", "--image-os", "ubuntu22.04"))
    assert image_tags(mixed, "base", {})[0].endswith("-ubuntu22.04")


def one_line_refusal(r, command):
    assert r.code == 2, r
    assert r.err.startswith(f"error: the plan has no image part (--host-only): {command} needs")
    assert len([line for line in r.err.splitlines() if line.startswith("error:")]) == 1
    assert "hint: plan with the image part" in r.err
    assert "Traceback" not in r.err


def test_a_host_only_plan_is_refused_by_every_image_command(cli, plan, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # exit 4 if build got that far
    host = str(plan("host", "--os", "ubuntu22.04", "--host-only"))
    one_line_refusal(cli("render", "--plan", host, "--out", str(tmp_path / "ctx")), "render")
    one_line_refusal(cli("build", "--plan", host, "--image-lock", str(tmp_path / "l.json")), "build")
    one_line_refusal(cli("pin-base", "--plan", host, "--out", str(tmp_path / "d.json")), "pin-base")
    assert not any((tmp_path / n).exists() for n in ("ctx", "l.json", "d.json"))


def test_ci_refuses_a_host_only_plan(cli, plan, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    host = plan("host", "--os", "ubuntu22.04", "--host-only")
    r = cli("ci", "github", "--plan", host.name, "--out", ".github/workflows/images.yml")
    one_line_refusal(r, f"ci ({host.name})")
    assert not (tmp_path / ".github").exists()
