"""build.py against a fake docker API client (the integration tests use a real engine)."""

from unittest import mock

import pytest

from provision.errors import ToolingError
from provision.images.build import BuildError, build_image, write_image_lock


def fake_client(chunks, image_id="sha256:abc"):
    api = mock.Mock(spec=["build", "tag", "inspect_image", "push", "ping"])
    api.build.return_value = iter(chunks)
    api.inspect_image.return_value = {"Id": image_id}
    return api


def test_build_kwargs_tags_and_stream(tmp_path):
    lines = []
    api = fake_client(
        [
            {"stream": "Step 1/3 : FROM base\n"},
            {"stream": " ---> 1\n"},
            {"aux": {"ID": "sha256:feed"}},
            {"stream": "Successfully built feed\n"},
        ]
    )
    result = build_image(
        str(tmp_path),
        tags=["repo:a", "repo:b"],
        platform="linux/amd64",
        cache_from=["repo:old"],
        docker_client=api,
        on_line=lines.append,
    )
    kwargs = api.build.call_args.kwargs
    assert kwargs["path"] == str(tmp_path)
    assert kwargs["tag"] == "repo:a"
    assert kwargs["decode"] is True
    assert kwargs["network_mode"] == "host"
    assert kwargs["platform"] == "linux/amd64"
    assert kwargs["cache_from"] == ["repo:old"]
    assert kwargs["rm"] is True
    assert kwargs["nocache"] is False
    api.tag.assert_called_once_with("sha256:feed", "repo", "b")
    assert result.image_id == "sha256:feed"
    assert lines[0] == "Step 1/3 : FROM base"


def test_failing_step_and_tail(tmp_path):
    chunks = [
        {"stream": "Step 1/2 : FROM base\n"},
        {"stream": "Step 2/2 : RUN false\n"},
        {"stream": " ---> Running\n"},
        {
            "errorDetail": {"message": "The command '/bin/sh -c false' returned a non-zero code: 1"},
            "error": "The command '/bin/sh -c false' returned a non-zero code: 1",
        },
    ]
    with pytest.raises(BuildError) as info:
        build_image(str(tmp_path), tags=["repo:a"], docker_client=fake_client(chunks))
    err = info.value
    assert err.exit_code == 1
    assert err.step == "2/2 RUN false"
    assert err.tail[-1].startswith("The command")
    assert "failing step: 2/2 RUN false" in err.details


def test_no_engine(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    from provision.images.build import client

    with pytest.raises(ToolingError) as info:
        client()
    assert info.value.exit_code == 4
    assert "render works without one" in info.value.hint


def test_image_lock(tmp_path):
    from provision.images.build import BuildResult

    path = tmp_path / "image.lock.json"
    write_image_lock(
        str(path),
        plan_digest="sha256:x",
        variant="base",
        result=BuildResult("sha256:id", ("r:a",), (), ()),
        repo_digests=("r@sha256:d",),
        from_ref="base:1",
    )
    import json

    assert json.loads(path.read_text()) == {
        "schema": 1,
        "plan_digest": "sha256:x",
        "variant": "base",
        "image_id": "sha256:id",
        "tags": ["r:a"],
        "repo_digests": ["r@sha256:d"],
        "base_image": "base:1",
    }


def test_build_cli_without_engine(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    r = cli("build", "--os", "rocky9", "--gpu", "a100-pcie", "--image-lock", str(tmp_path / "lock.json"))
    assert r.code == 4
    assert r.err.startswith("error: no Docker engine answers")
    assert "hint:" in r.err
    assert not (tmp_path / "lock.json").exists()
