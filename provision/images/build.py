"""Image builds through the docker SDK (docker >= 7): the one place that talks to an engine."""

import json
import os
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from provision.errors import OperationFailed, ToolingError

STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
TAIL = 25


class BuildError(OperationFailed):
    def __init__(self, message: str, *, step: str | None, tail: list[str]):
        details = ([f"failing step: {step}"] if step else []) + ["--- last lines of the build log ---", *tail]
        super().__init__(
            message, hint="fix the step above (the full log streamed before this), then rebuild", details=details
        )
        self.step = step
        self.tail = tail


class BuildResult(NamedTuple):
    image_id: str
    tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    log: tuple[str, ...]


def client(docker_client=None):
    """A docker APIClient; ToolingError (exit 4) when no engine answers."""
    if docker_client is not None:
        return docker_client
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - a dependency of provision
        raise ToolingError("the docker SDK is not installed", hint="pip install gpu-provision") from exc
    try:
        api = docker.APIClient(base_url=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), timeout=600)
        api.ping()
    except Exception as exc:
        raise ToolingError(
            f"no Docker engine answers ({type(exc).__name__})",
            hint="start dockerd (or set DOCKER_HOST); render works without one: provision render",
        ) from None
    return api


def build_image(
    context: str,
    *,
    tags: list[str],
    labels: dict[str, str] | None = None,
    platform: str | None = None,
    cache_from: list[str] | None = None,
    no_cache: bool = False,
    docker_client=None,
    on_line: Callable[[str], None] | None = None,
) -> BuildResult:
    api = client(docker_client)
    log: list[str] = []
    step: str | None = None
    image_id = None
    stream = api.build(
        path=context,
        tag=tags[0],
        rm=True,
        forcerm=True,
        decode=True,
        nocache=no_cache,
        pull=False,
        platform=platform,
        cache_from=cache_from or None,
        network_mode="host",
        labels=labels or None,
    )
    for chunk in stream:
        if "stream" in chunk:
            for line in chunk["stream"].splitlines():
                if not line.strip():
                    continue
                log.append(line)
                m = STEP.match(line.strip())
                if m:
                    step = f"{m.group(1)}/{m.group(2)} {m.group(3)}"
                if on_line:
                    on_line(line)
        if "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
        if "error" in chunk or "errorDetail" in chunk:
            message = (chunk.get("errorDetail") or {}).get("message") or chunk.get("error") or "build failed"
            log.append(message)
            if on_line:
                on_line(message)
            raise BuildError(f"image build failed: {message.strip()}", step=step, tail=log[-TAIL:])
    if image_id is None:
        info = api.inspect_image(tags[0])
        image_id = info["Id"]
    for extra in tags[1:]:
        repo, _, tag = extra.rpartition(":")
        api.tag(image_id, repo, tag)
    return BuildResult(image_id, tuple(tags), (), tuple(log))


def push_image(tags: list[str], *, docker_client=None, on_line: Callable[[str], None] | None = None) -> tuple[str, ...]:
    api = client(docker_client)
    digests = []
    for ref in tags:
        repo, _, tag = ref.rpartition(":")
        for chunk in api.push(repo, tag=tag, stream=True, decode=True):
            if "error" in chunk or "errorDetail" in chunk:
                message = (chunk.get("errorDetail") or {}).get("message") or chunk.get("error")
                raise OperationFailed(f"push of {ref} failed: {message}", hint="check the registry login and the tag")
            if on_line and chunk.get("status"):
                on_line(f"{ref}: {chunk['status']}")
            digest = (chunk.get("aux") or {}).get("Digest")
            if digest:
                digests.append(f"{repo}@{digest}")
    return tuple(dict.fromkeys(digests))


def write_image_lock(
    path: str, *, plan_digest: str, variant: str, result: BuildResult, repo_digests: tuple[str, ...], from_ref: str
) -> None:
    doc: dict[str, Any] = {
        "schema": 1,
        "plan_digest": plan_digest,
        "variant": variant,
        "image_id": result.image_id,
        "tags": list(result.tags),
        "repo_digests": list(repo_digests),
        "base_image": from_ref,
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=2)
        handle.write("\n")
