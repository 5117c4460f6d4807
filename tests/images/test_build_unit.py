"""build.py against a fake docker API client (the integration tests use a real engine)."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import docker.errors
import pytest

from provision.errors import InputError, OperationFailed, ToolingError
from provision.images.build import (
    BuildError,
    BuildResult,
    base_digest,
    build_image,
    pull_base,
    requirements_digest,
    split_ref,
    write_image_lock,
)


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


IMAGE_ID = "sha256:" + "a" * 64
BASE_DIGEST = "sha256:" + "b" * 64
PUSHED = "sha256:" + "c" * 64
LOCK_SCHEMA = Path(__file__).resolve().parents[2] / "provision/images/schema/image-lock.schema.json"


def lock_fields(**overrides):
    fields = {
        "plan_digest": "sha256:" + "d" * 64,
        "variant": "base",
        "result": BuildResult(IMAGE_ID, ("registry.local:5000/gpu:a", "registry.local:5000/gpu:b"), (), ()),
        "repo_digests": (f"registry.local:5000/gpu@{PUSHED}",),
        "from_ref": f"registry.local:5000/nvidia/cuda:12.4.1-base-ubuntu22.04@{BASE_DIGEST}",
        "base_digest": BASE_DIGEST,
        "build_base": None,
        "requirements": {"file": "requirements.lock", "digest": "sha256:" + "e" * 64},
    }
    fields.update(overrides)
    return fields


def test_image_lock_matches_its_published_schema(tmp_path):
    import jsonschema

    path = tmp_path / "image.lock.json"
    write_image_lock(str(path), **lock_fields())
    doc = json.loads(path.read_text())
    assert doc == {
        "schema": 3,
        "plan_digest": "sha256:" + "d" * 64,
        "variant": "base",
        "base_image": f"registry.local:5000/nvidia/cuda:12.4.1-base-ubuntu22.04@{BASE_DIGEST}",
        "base_digest": BASE_DIGEST,
        "build_base": None,
        "image_id": IMAGE_ID,
        "requirements": {"file": "requirements.lock", "digest": "sha256:" + "e" * 64},
        "tags": ["registry.local:5000/gpu:a", "registry.local:5000/gpu:b"],
        "repo_digests": [f"registry.local:5000/gpu@{PUSHED}"],
    }
    jsonschema.Draft202012Validator(json.loads(LOCK_SCHEMA.read_text())).validate(doc)
    tool = Path(sys.executable).with_name("check-jsonschema")
    proc = subprocess.run(
        [str(tool), "--schemafile", str(LOCK_SCHEMA), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_image_lock_records_the_build_stage_base(tmp_path):
    """An image with an sdist build stage: its base and digest beside the image's (schema 3)."""
    import jsonschema

    devel = f"registry.local:5000/nvidia/cuda:12.4.1-devel-ubuntu22.04@{BASE_DIGEST}"
    path = tmp_path / "image.lock.json"
    write_image_lock(str(path), **lock_fields(build_base={"image": devel, "digest": BASE_DIGEST}))
    doc = json.loads(path.read_text())
    assert doc["build_base"] == {"image": devel, "digest": BASE_DIGEST}
    schema = json.loads(LOCK_SCHEMA.read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
    local = {**doc, "build_base": {"image": "base:1", "digest": None}}  # never from a registry
    jsonschema.Draft202012Validator(schema).validate(local)
    for bad in ({"image": devel}, {"image": devel, "digest": BASE_DIGEST, "x": 1}, "devel:1"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft202012Validator(schema).validate({**doc, "build_base": bad})
    without = {k: v for k, v in doc.items() if k != "build_base"}
    with pytest.raises(jsonschema.ValidationError, match="'build_base' is a required property"):
        jsonschema.Draft202012Validator(schema).validate(without)


def test_image_lock_without_push_or_requirements(tmp_path):
    path = tmp_path / "image.lock.json"
    write_image_lock(str(path), **lock_fields(repo_digests=(), requirements=None, base_digest=None, from_ref="base:1"))
    doc = json.loads(path.read_text())
    assert (doc["repo_digests"], doc["requirements"], doc["base_digest"]) == ([], None, None)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"base_digest": "sha256:short"}, "base_digest"),
        ({"build_base": {"image": "FROM x AS build", "digest": None}}, "build_base"),
        ({"build_base": {"image": "devel:1", "digest": "sha256:short"}}, "build_base"),
        ({"result": BuildResult("feed", ("r:a",), (), ())}, "image_id"),
        ({"repo_digests": ("r:a",)}, "repo_digests.0"),
        ({"from_ref": "FROM base\nRUN x"}, "base_image"),
        ({"requirements": {"file": "../etc/passwd", "digest": "sha256:" + "e" * 64}}, "requirements"),
    ],
)
def test_image_lock_refuses_what_its_schema_does(tmp_path, override, field):
    path = tmp_path / "image.lock.json"
    with pytest.raises(OperationFailed, match=f"schema: {field}"):
        write_image_lock(str(path), **lock_fields(**override))
    assert not path.exists()
    assert list(tmp_path.iterdir()) == [], "no staging file is left behind"


def test_lock_schema_checks_itself():
    """The published schema is a valid draft 2020-12 schema (check-jsonschema's metaschema check)."""
    tool = Path(sys.executable).with_name("check-jsonschema")
    schemas = sorted(LOCK_SCHEMA.parent.glob("*.schema.json"))
    assert len(schemas) == 2
    proc = subprocess.run(
        [str(tool), "--check-metaschema", *map(str, schemas)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("nvidia/cuda:12.4.1-base-ubuntu22.04", ("nvidia/cuda", "12.4.1-base-ubuntu22.04", None)),
        (
            "127.0.0.1:5000/nvidia/cuda:12.4.1-base-ubuntu22.04@" + BASE_DIGEST,
            ("127.0.0.1:5000/nvidia/cuda", "12.4.1-base-ubuntu22.04", BASE_DIGEST),
        ),
        ("127.0.0.1:5000/nvidia/cuda@" + BASE_DIGEST, ("127.0.0.1:5000/nvidia/cuda", None, BASE_DIGEST)),
        ("127.0.0.1:5000/debian", ("127.0.0.1:5000/debian", None, None)),
        ("debian", ("debian", None, None)),
    ],
)
def test_split_ref(ref, expected):
    assert split_ref(ref) == expected


def pulling_client(chunks=None, error=None):
    api = mock.Mock(spec=["pull", "ping", "inspect_image"])
    api.inspect_image.side_effect = docker.errors.ImageNotFound("No such image")
    if error is not None:
        api.pull.side_effect = error
    else:
        api.pull.return_value = iter(chunks or [])
    return api


def test_pull_base_pulls_by_digest():
    ref = f"127.0.0.1:5000/nvidia/cuda:12.4.1-base-ubuntu22.04@{BASE_DIGEST}"
    lines = []
    api = pulling_client([{"status": "Pulling from nvidia/cuda"}, {"status": f"Digest: {BASE_DIGEST}"}])
    assert pull_base(ref, docker_client=api, on_line=lines.append) == BASE_DIGEST
    api.pull.assert_called_once_with("127.0.0.1:5000/nvidia/cuda", tag=BASE_DIGEST, stream=True, decode=True)
    assert lines[0].endswith("Pulling from nvidia/cuda")


@pytest.mark.parametrize(
    "api",
    [
        pulling_client([{"errorDetail": {"message": "manifest unknown"}, "error": "manifest unknown"}]),
        pulling_client(error=docker.errors.NotFound("404", explanation="manifest for x not found: manifest unknown")),
    ],
)
def test_pull_base_that_does_not_resolve_is_bad_input(api):
    with pytest.raises(InputError) as info:
        pull_base(f"r.local/nvidia/cuda:t@{BASE_DIGEST}", docker_client=api)
    assert info.value.exit_code == 2
    assert "does not resolve" in info.value.message
    assert "manifest" in info.value.message
    assert "provision pin-base" in info.value.hint


def test_pull_base_uses_an_image_the_engine_holds_by_that_digest():
    ref = f"127.0.0.1:5000/nvidia/cuda:12.4.1-base-ubuntu22.04@{BASE_DIGEST}"
    api = pulling_client()
    api.inspect_image.side_effect = None
    api.inspect_image.return_value = {"Id": IMAGE_ID}
    assert pull_base(ref, docker_client=api) == BASE_DIGEST
    api.inspect_image.assert_called_once_with(f"127.0.0.1:5000/nvidia/cuda@{BASE_DIGEST}")
    api.pull.assert_not_called()


def test_pull_base_needs_a_digest():
    with pytest.raises(InputError, match="carries no digest"):
        pull_base("nvidia/cuda:12.4.1-base-ubuntu22.04", docker_client=pulling_client())


@pytest.mark.parametrize(
    ("ref", "repo_digests", "expected"),
    [
        ("nvidia/cuda:t", [f"nvidia/cuda@{BASE_DIGEST}"], BASE_DIGEST),
        ("docker.io/nvidia/cuda:t", [f"nvidia/cuda@{BASE_DIGEST}"], BASE_DIGEST),
        ("debian:12", [f"debian@{BASE_DIGEST}"], BASE_DIGEST),
        ("nvidia/cuda:t", [f"mirror.local/nvidia/cuda@{BASE_DIGEST}"], None),  # another repository's
        ("nvidia/cuda:t", [], None),  # local-only (docker import): nothing to record
        ("nvidia/cuda:t", [f"nvidia/cuda@{BASE_DIGEST}", f"nvidia/cuda@{PUSHED}"], None),  # ambiguous
    ],
)
def test_base_digest_of_a_tag(ref, repo_digests, expected):
    api = pulling_client()
    api.inspect_image.side_effect = None
    api.inspect_image.return_value = {"Id": IMAGE_ID, "RepoDigests": repo_digests}
    assert base_digest(ref, docker_client=api) == expected


def test_base_digest_of_a_digest_ref_asks_nothing():
    api = pulling_client()
    assert base_digest(f"r.local/nvidia/cuda:t@{BASE_DIGEST}", docker_client=api) == BASE_DIGEST
    api.inspect_image.assert_not_called()


def test_requirements_digest_prefers_the_lock(tmp_path):
    assert requirements_digest(str(tmp_path)) is None
    (tmp_path / "requirements.txt").write_text("torch==2.5.1\n")
    txt = requirements_digest(str(tmp_path))
    assert txt == {"file": "requirements.txt", "digest": "sha256:" + hashlib.sha256(b"torch==2.5.1\n").hexdigest()}
    (tmp_path / "requirements.lock").write_text("torch==2.5.1 --hash=sha256:00\n")
    lock = requirements_digest(str(tmp_path))
    assert lock["file"] == "requirements.lock"
    assert lock["digest"] == "sha256:" + hashlib.sha256(b"torch==2.5.1 --hash=sha256:00\n").hexdigest()


def test_build_cli_without_engine(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    r = cli("build", "--os", "rocky9", "--gpu", "a100-pcie", "--image-lock", str(tmp_path / "lock.json"))
    assert r.code == 4
    assert r.err.startswith("error: no Docker engine answers")
    assert "hint:" in r.err
    assert not (tmp_path / "lock.json").exists()
