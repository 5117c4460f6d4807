"""render, build and pin-base read no file through a symbolic link and write none through one (issue 22).

A lock that is a link to another file was followed and that file's first line echoed in the error
(a CI log shows it); an output path holding a planted link was written through. Now every file a
user hands these commands is read with provision.documents (no link, bounded, content never shown)
and every output is a finished file renamed over its path, replacing a link there."""

import json

import pytest

from provision.images import build

GPU = "a100-pcie-80gb"  # a fixture catalogue id
SECRET = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

pytestmark = pytest.mark.usefixtures("on_fixture_catalogue")


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "outside" / "credentials"
    path.parent.mkdir()
    path.write_text(SECRET + "\n")
    return path


def link(path, target):
    path.symlink_to(target)
    return path


@pytest.fixture
def torch_plan(cli, tmp_path):
    path = tmp_path / "torch.lock.json"
    args = ["plan", "--os", "ubuntu22.04", "--gpu", GPU, "--framework", "pytorch==2.5.1", "--lock", str(path)]
    assert cli(*args).code == 0
    return path


@pytest.fixture
def base_plan(cli, tmp_path):
    path = tmp_path / "base.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", GPU, "--lock", str(path)).code == 0
    return path


def refused(r, what="is a symbolic link"):
    assert r.code == 2, r
    assert what in r.err
    assert "wJalrXUtnFEMI" not in r.err + r.out, "the linked file's content is not echoed"
    assert "Traceback" not in r.err


def test_render_refuses_a_lock_file_that_is_a_link(cli, torch_plan, secret, tmp_path):
    lock = link(tmp_path / "requirements.lock", secret)
    r = cli("render", "--plan", str(torch_plan), "--lock-file", str(lock), "--out", str(tmp_path / "ctx"))
    refused(r)
    assert not (tmp_path / "ctx").exists()


def test_render_replaces_a_link_at_out(cli, base_plan, tmp_path):
    elsewhere = tmp_path / "outside" / "ctx"
    elsewhere.mkdir(parents=True)
    out = link(tmp_path / "ctx", elsewhere)
    r = cli("render", "--plan", str(base_plan), "--out", str(out))
    assert r.code == 0, r
    assert not out.is_symlink()
    assert (out / "Dockerfile").is_file()
    assert list(elsewhere.iterdir()) == [], "nothing written through the link"


def test_render_refuses_template_data_that_is_a_link(cli, base_plan, secret, tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    link(templates / "variants.yaml", secret)
    r = cli("render", "--plan", str(base_plan), "--templates", str(templates), "--out", str(tmp_path / "ctx"))
    refused(r)


def test_build_refuses_base_digests_that_are_a_link(cli, base_plan, secret, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # exit 4 if it got that far
    digests = link(tmp_path / "base-digests.json", secret)
    r = cli("build", "--plan", str(base_plan), "--base-digests", str(digests), "--image-lock", str(tmp_path / "l"))
    refused(r)


def test_pin_base_leaves_a_linked_out_alone(cli, base_plan, secret, tmp_path, monkeypatch):
    """The base-digest file is merged into: a link there is refused as input (before the registry is
    asked), and the file it points at is left as it was."""
    from unittest import mock

    api = mock.Mock()
    monkeypatch.setattr("provision.images.build.client", lambda docker_client=None: api)
    out = link(tmp_path / "base-digests.json", secret)
    refused(cli("pin-base", "--plan", str(base_plan), "--out", str(out)))
    api.inspect_distribution.assert_not_called()
    assert secret.read_text() == SECRET + "\n"


def test_the_image_lock_and_base_digests_replace_a_link(tmp_path, secret):
    out = link(tmp_path / "image.lock.json", secret)
    build.write_json(str(out), {"schema": 2}, what="--image-lock", hint="h")
    assert not out.is_symlink()
    assert json.loads(out.read_text()) == {"schema": 2}
    assert secret.read_text() == SECRET + "\n"


def test_requirements_of_a_context_are_not_read_through_a_link(tmp_path, secret):
    from provision.errors import InputError

    link(tmp_path / "requirements.lock", secret)
    with pytest.raises(InputError, match="is a symbolic link") as info:
        build.requirements_digest(str(tmp_path))
    assert "wJalrXUtnFEMI" not in info.value.message
