"""Image builds through the docker SDK (docker >= 7): the one place that talks to an engine."""

import hashlib
import json
import os
import re
from collections.abc import Callable
from functools import cache
from typing import Any, NamedTuple

from provision.errors import InputError, OperationFailed, ToolingError

STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
TAIL = 25
LOCK_SCHEMA_VERSION = 3  # 3: build_base, the sdist build stage's base and its digest
LOCK_SCHEMA_FILE = os.path.join(os.path.dirname(__file__), "schema", "image-lock.schema.json")
DIGEST_REF = re.compile(
    r"^(?P<name>[^@]+?)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?@(?P<digest>sha256:[a-f0-9]{64})$"
)
# the build context's Python requirements, the hash-locked one first
REQUIREMENTS_FILES = ("requirements.lock", "requirements.txt")


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


def split_ref(ref: str) -> tuple[str, str | None, str | None]:
    """repository, tag, digest of an image reference (registry host:port stays in the repository)."""
    m = DIGEST_REF.match(ref)
    if m:
        return m["name"], m["tag"], m["digest"]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, _, tag = ref.rpartition(":")
        return repo, tag, None
    return ref, None, None


def pull_base(ref: str, *, docker_client=None, on_line: Callable[[str], None] | None = None) -> str:
    """Pull a base image by its digest before the build (the build itself never pulls), so the
    image built is FROM exactly that content; an image the engine already holds under that digest
    is used as it is. Returns the digest; InputError (exit 2) when the registry does not serve it,
    before anything is built or pushed."""
    import docker.errors

    repo, _, digest = split_ref(ref)
    if digest is None:
        raise InputError(f"base image {ref!r} carries no digest", hint="pin it: provision pin-base")
    api = client(docker_client)
    try:
        api.inspect_image(f"{repo}@{digest}")
    except docker.errors.NotFound:
        pass
    else:  # content-addressed: what the engine holds under this digest is what a pull would bring
        if on_line:
            on_line(f"{repo}@{digest[:19]}: present locally")
        return digest
    try:
        for chunk in api.pull(repo, tag=digest, stream=True, decode=True):
            if "error" in chunk or "errorDetail" in chunk:
                message = (chunk.get("errorDetail") or {}).get("message") or chunk.get("error")
                raise InputError(
                    f"base image {ref} does not resolve: {message}",
                    hint="re-pin the base (provision pin-base), or mirror the digest into a registry you control",
                )
            if on_line and chunk.get("status"):
                on_line(f"{repo}@{digest[:19]}: {chunk['status']}")
    except docker.errors.APIError as exc:
        raise InputError(
            f"base image {ref} does not resolve: {(exc.explanation or str(exc)).strip()}",
            hint="re-pin the base (provision pin-base), or mirror the digest into a registry you control",
        ) from None
    return digest


def base_digest(ref: str, *, docker_client=None) -> str | None:
    """The registry digest of a base given by tag: the engine's RepoDigests entry for the same
    repository, when the image came from a registry; None for a local-only image."""
    repo, _, digest = split_ref(ref)
    if digest:
        return digest
    api = client(docker_client)
    try:
        info = api.inspect_image(ref)
    except Exception:  # an image the build could not have used either; the lock records no digest
        return None
    found = {
        d.partition("@")[2] for d in info.get("RepoDigests") or [] if _familiar(d.partition("@")[0]) == _familiar(repo)
    }
    return found.pop() if len(found) == 1 else None


def _familiar(repo: str) -> str:
    """A Docker Hub repository as the engine records it (nvidia/cuda, debian)."""
    for prefix in ("docker.io/", "index.docker.io/"):
        repo = repo.removeprefix(prefix)
    return repo.removeprefix("library/")


def requirements_digest(context: str) -> dict[str, str] | None:
    """sha256 of the context's requirements (requirements.lock when the render wrote one)."""
    from provision.documents import read_bytes

    for name in REQUIREMENTS_FILES:
        path = os.path.join(context, name)
        if os.path.lexists(path):  # read as untrusted: a symbolic link is refused, not followed
            data = read_bytes(path, "the build context's requirements", max_bytes=64 * 1024 * 1024)
            return {"file": name, "digest": "sha256:" + hashlib.sha256(data).hexdigest()}
    return None


@cache
def _lock_validator():
    import jsonschema

    with open(LOCK_SCHEMA_FILE, encoding="utf-8") as handle:
        return jsonschema.Draft202012Validator(json.load(handle))


def image_lock(
    *,
    plan_digest: str,
    variant: str,
    result: BuildResult,
    repo_digests: tuple[str, ...],
    from_ref: str,
    base_digest: str | None,
    build_base: dict[str, str | None] | None,
    requirements: dict[str, str] | None,
    plans: list[dict[str, str]] | None = None,
    content_digest: str | None = None,
) -> dict[str, Any]:
    """The image lock document, held to provision/images/schema/image-lock.schema.json.

    `build_base` is the sdist build stage's FROM and its registry digest ({"image", "digest"}: what
    the built wheels were compiled on), None for an image without a build stage. A CI job builds one image for every plan that renders the same context: `plans` lists them
    (path and digest; `plan_digest` is the first) and `content_digest` names the context."""
    doc: dict[str, Any] = {
        "schema": LOCK_SCHEMA_VERSION,
        "plan_digest": plan_digest,
        "variant": variant,
        "base_image": from_ref,
        "base_digest": base_digest,
        "build_base": build_base,
        "image_id": result.image_id,
        "requirements": requirements,
        "tags": list(result.tags),
        "repo_digests": list(repo_digests),
    }
    if plans is not None:
        doc["plans"] = plans
    if content_digest is not None:
        doc["content_digest"] = content_digest
    import jsonschema

    error = jsonschema.exceptions.best_match(_lock_validator().iter_errors(doc))
    if error is not None:
        field = ".".join(str(p) for p in error.absolute_path) or "the document"
        raise OperationFailed(
            f"the image lock would not match its schema: {field}: {error.message[:200]}",
            hint="this is a bug in provision; rerun with --debug and report it",
        )
    return doc


def write_image_lock(path: str, **fields: Any) -> dict[str, Any]:
    """Write the image lock atomically (a partial lock is never left behind)."""
    doc = image_lock(**fields)
    write_json(path, doc, what="--image-lock", hint="choose a writable path")
    return doc


def write_json(path: str, doc: Any, *, what: str, hint: str) -> None:
    """A JSON document written whole or not at all: a finished file renamed over the path, so a
    symbolic link planted there is replaced, never followed (provision.documents.write_text)."""
    from provision.documents import write_text

    try:
        write_text(path, json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise InputError(f"cannot write {what} {path}: {exc.strerror or exc}", hint=hint) from None
