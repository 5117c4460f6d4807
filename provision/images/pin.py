"""Base images by digest: a plan's nvidia/cuda tags resolved through the registry API, kept in a
base-digest file (``base-digests.json``, schema ``provision/images/schema/base-digests.schema.json``)
that ``provision build --base-digests`` reads to build ``FROM nvidia/cuda:<tag>@sha256:…``.

The file is separate from the plan: a plan is resolved offline from the catalogue and digested,
while a digest is a fact of one registry at one time (a mirror serves the same digest under
another name). Tags are keys, so pins for several plans accumulate in one file.

End of life follows NVIDIA's CUDA container support policy (nvidia/container-images/cuda
doc/support-policy.md; catalogue sources ``cuda-images`` and ``cuda-images-issue-177``): an image
set reaches end of life when a newer update of its toolkit replaces it (images.yaml ``eol``), when
the driver branch its toolkit shipped with does, or when its CUDA major is two behind the newest;
NVIDIA deletes end-of-life tags six months later. Dates and releases come from the catalogue.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from functools import cache
from typing import Any, NamedTuple

from provision.errors import InputError, ToolingError
from provision.plan.model import Plan, check_image_ref

SCHEMA_VERSION = 1
SCHEMA_FILE = os.path.join(os.path.dirname(__file__), "schema", "base-digests.schema.json")
DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
REGISTRY = re.compile(r"^[a-z0-9]+([.-][a-z0-9]+)*(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
SUPPORTED_MAJORS = 2  # NVIDIA supports two CUDA majors' images at a time (support-policy.md)


class BasePin(NamedTuple):
    tag: str  # the plan's reference: nvidia/cuda:12.4.1-base-ubuntu22.04
    ref: str  # what FROM uses: [mirror/]nvidia/cuda:12.4.1-base-ubuntu22.04@sha256:…
    digest: str  # the manifest list's (or single manifest's) digest
    media_type: str
    platforms: tuple[str, ...]  # os/arch[/variant] the manifest list serves
    resolved_at: str  # UTC, ISO 8601

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "digest": self.digest,
            "media_type": self.media_type,
            "platforms": list(self.platforms),
            "resolved_at": self.resolved_at,
        }


# -- which tag a variant starts from --------------------------------------------------------------
def _spec(plan: Plan, variant: str, templates: str | None, command: str) -> dict[str, Any]:
    from provision.images.render import require_image_part, variants

    require_image_part(plan, command)
    known = variants(templates)
    if variant not in known:
        raise InputError(f"unknown variant {variant!r}", hint=f"variants: {', '.join(sorted(known))}")
    return known[variant]


def base_tag(plan: Plan, variant: str, templates: str | None = None) -> str:
    """The plan's nvidia/cuda reference that `render_image(plan, variant)` puts in FROM, without
    rendering (a render may resolve requirements). tests/images hold the two to the same answer."""
    from provision.images.render import start_flavour

    flavour = start_flavour(_spec(plan, variant, templates, "pin-base"), plan)
    if flavour not in plan.images:
        raise InputError(
            f"the plan has no nvidia/cuda {flavour} image for {plan.image_os}",
            hint=f"published: {', '.join(sorted(plan.images))}",
        )
    return plan.images[flavour]


def build_base_tag(plan: Plan, variant: str, templates: str | None = None) -> str | None:
    """The plan's nvidia/cuda reference the variant's sdist build stage starts FROM (the plan's
    devel image, or the image's own devel base), or None when the variant builds no sdists: what
    `render_image(plan, variant).build_from` is, without rendering. pin-base pins it beside the
    base, and build and ci build the stage FROM its digest."""
    from provision.images.render import build_stage_tag

    return build_stage_tag(_spec(plan, variant, templates, "pin-base"), plan)


def variant_tags(plan: Plan, variant: str, templates: str | None = None) -> list[str]:
    """Every nvidia/cuda tag an image of the variant is built FROM: its base, and its build stage's."""
    tags = [base_tag(plan, variant, templates)]
    build = build_base_tag(plan, variant, templates)
    return tags + ([build] if build is not None and build not in tags else [])


# -- resolving through the registry API -----------------------------------------------------------
def source_ref(tag: str, registry: str | None) -> str:
    """Where to ask for `tag`: the tag itself (Docker Hub), or the same path under a mirror."""
    if registry is None:
        return tag
    registry = registry.rstrip("/")
    if not REGISTRY.fullmatch(registry):
        raise InputError(
            f"--registry {registry!r} is not a registry address",
            hint="HOST[:PORT][/PATH], e.g. 127.0.0.1:5000 or registry.example.com/mirror",
        )
    return f"{registry}/{tag}"


def resolve(api, tag: str, *, registry: str | None = None, now: dt.datetime | None = None) -> BasePin:
    """One tag's digest from the registry (APIClient.inspect_distribution: the engine asks the
    registry for the manifest, with the engine's credentials). InputError (exit 2) when the
    registry does not answer with a digest."""
    import docker.errors
    import requests.exceptions

    source = source_ref(tag, registry)
    check_image_ref(source, "--registry")
    try:
        data = api.inspect_distribution(source)
    except docker.errors.APIError as exc:
        reason = (exc.explanation or str(exc)).strip()
        raise InputError(f"{source} does not resolve to a digest: {reason}", hint=_hint(reason, registry)) from None
    except requests.exceptions.RequestException as exc:
        raise ToolingError(
            f"the Docker engine stopped answering while resolving {source} ({type(exc).__name__})",
            hint="check dockerd, then run the command again",
        ) from None
    descriptor = data.get("Descriptor") if isinstance(data, dict) else None
    digest = descriptor.get("digest") if isinstance(descriptor, dict) else None
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise InputError(
            f"{source} does not resolve to a digest: the registry answered {digest!r}, not a sha256 digest",
            hint="check that the registry serves OCI/Docker v2 manifests",
        )
    platforms = []
    for p in data.get("Platforms") or []:
        if isinstance(p, dict) and p.get("os") and p.get("architecture"):
            platforms.append("/".join(str(p[k]) for k in ("os", "architecture", "variant") if p.get(k)))
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return BasePin(tag, f"{source}@{digest}", digest, str(descriptor.get("mediaType") or ""), tuple(platforms), stamp)


def _hint(reason: str, registry: str | None) -> str:
    lowered = reason.lower()
    if "manifest unknown" in lowered or "not found" in lowered:
        where = registry or "Docker Hub"
        return f"{where} has no such tag: NVIDIA deletes end-of-life nvidia/cuda tags; mirror it, or plan a newer CUDA"
    if "unauthorized" in lowered or "denied" in lowered:
        return "docker login to the registry first (the engine's credentials are used)"
    return "check that the engine can reach the registry (docker pull REF), then run the command again"


def resolve_all(api, tags: list[str], *, registry: str | None = None) -> list[BasePin]:
    """Every tag, or InputError naming each that failed (nothing is written on a failure)."""
    pins, failures = [], []
    for tag in dict.fromkeys(tags):
        try:
            pins.append(resolve(api, tag, registry=registry))
        except InputError as exc:
            failures.append(exc)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise InputError(
            f"{len(failures)} of {len(pins) + len(failures)} base images do not resolve to a digest",
            hint=failures[0].hint,
            details=[f.message for f in failures],
        )
    return pins


# -- the base-digest file ------------------------------------------------------------------------
REPOSITORY = "nvidia/cuda"  # the only repository a base-digest file pins (under a mirror, if named)
MAX_PINS_BYTES = 4 * 1024 * 1024
_HINT = "write it with provision pin-base (it is untrusted input, checked on every read)"


@cache
def _validator():
    import jsonschema

    with open(SCHEMA_FILE, encoding="utf-8") as handle:
        return jsonschema.Draft202012Validator(json.load(handle))


def check_pins(doc: Any, origin: str, registry: str | None = None) -> dict[str, BasePin]:
    """A base-digest document held to its schema (control characters refused first), and each
    entry to its key: the key is an nvidia/cuda tag, and the ref is that tag at the recorded digest,
    from Docker Hub or from the mirror `registry` (the one the user named with --registry; no other
    prefix is accepted: the ref is where the build pulls its base from)."""
    import jsonschema

    from provision.documents import control_character

    stack = [doc]
    while stack:  # a string the schema's patterns would take with a newline at its end (Python's `$`)
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and (found := control_character(node)):
            raise InputError(f"{origin}: a string holds the control character {found}", hint=_HINT)
    error = jsonschema.exceptions.best_match(_validator().iter_errors(doc))
    if error is not None:
        # the schema's own message quotes the offending value: the file's content is not echoed
        field = (".".join(str(p) for p in error.absolute_path) or "the document")[:200]
        rule = error.message if error.validator == "required" else f"its {error.validator!s} rule"
        raise InputError(f"{origin}: {field}: does not match the base-digest schema ({rule})", hint=_HINT)
    where = registry.rstrip("/") if registry else None
    pins = {}
    for tag, entry in doc["images"].items():
        if not tag.startswith(REPOSITORY + ":"):
            raise InputError(
                f"{origin}: images: a key is not an {REPOSITORY} tag",
                hint=f"a base-digest file pins {REPOSITORY}:<tag> bases only; {_HINT}",
            )
        expected = f"{source_ref(tag, where)}@{entry['digest']}"
        if entry["ref"] != expected:
            source = f"the mirror {where}" if where else f"Docker Hub ({REPOSITORY})"
            raise InputError(
                f"{origin}: images.{tag}: ref is not {tag} from {source} at the recorded digest",
                hint="pass the --registry the file was pinned through"
                if where is None and entry["ref"].endswith("/" + tag + "@" + entry["digest"])
                else _HINT,
            )
        pins[tag] = BasePin(
            tag, entry["ref"], entry["digest"], entry["media_type"], tuple(entry["platforms"]), entry["resolved_at"]
        )
    return pins


def read_pins(path: str, registry: str | None = None, *, flag: str = "--base-digests") -> dict[str, BasePin]:
    """A base-digest file, read as untrusted (provision.documents: no symbolic link, bounded, no
    duplicate keys; its content never shown in an error) and checked by check_pins."""
    from provision.documents import load_json, read_text

    if not os.path.lexists(path):
        raise InputError(f"{flag} {path}: no such file", hint="write it with provision pin-base --plan PLAN --out FILE")
    text = read_text(path, flag, max_bytes=MAX_PINS_BYTES)
    return check_pins(load_json(text, f"{flag} {path}"), f"{flag} {path}", registry)


def write_pins(
    path: str, pins: list[BasePin], *, merge: bool = True, registry: str | None = None
) -> dict[str, BasePin]:
    """Write (or update) the base-digest file: a finished file renamed over the path (a symbolic link
    there is replaced, never followed); tags pinned before keep their entries (the file is then
    read as --base-digests is: one pinned through another mirror is refused)."""
    current = read_pins(path, registry, flag="--out") if merge and os.path.lexists(path) else {}
    current.update({p.tag: p for p in pins})
    doc = {"schema": SCHEMA_VERSION, "images": {t: current[t].to_dict() for t in sorted(current)}}
    check_pins(doc, "base-digest file", registry)  # what we write is what we accept
    from provision.images.build import write_json

    write_json(path, doc, what="the base-digest file", hint="choose a writable --out")
    return current


def pinned_ref(pins: dict[str, BasePin], tag: str, origin: str, *, stage: str | None = None) -> str:
    """The pinned reference of `tag`; InputError (exit 2) when the file lacks it. `stage` names what
    starts FROM it when that is not the image itself (the build stage of sdists)."""
    if tag not in pins:
        what = f" ({stage})" if stage else ""
        raise InputError(
            f"{origin} has no digest for {tag}{what}",
            hint=f"pin it first: provision pin-base --plan PLAN --out {origin}"
            + (" (pin-base --variant V pins a variant's build stage base too)" if stage else ""),
            details=[f"pinned: {t}" for t in sorted(pins)][:10],
        )
    return pins[tag].ref


# -- end of life ---------------------------------------------------------------------------------
def end_of_life(matrix, plan: Plan, tag: str, today: dt.date | None = None) -> str | None:
    """Why the plan's nvidia/cuda images (`tag` names them in the message) are past NVIDIA's end
    of life on `today`, or None.

    Catalogue data only: the image set's own end of life (images.yaml `eol`: superseded by a newer
    update, or moved to end of life), the driver branch the toolkit shipped with (cuda.yaml
    min_driver; drivers.yaml eol), and the CUDA majors published."""
    from provision.versions import DottedVersion

    today = today or dt.date.today()
    cuda = DottedVersion(plan.cuda.version)
    reasons = []
    image = matrix.image_of(cuda, plan.base_image) or matrix.image(cuda)  # 12.9.1's toolkit: the 12.9.2 tags
    if image is not None and image.past_eol(today):
        newer = f"superseded by {image.superseded_by}" if image.superseded_by else "moved to end of life"
        when = f", end of life {image.eol_date}" if image.eol_date else ""
        reasons.append(f"CUDA {cuda} images {newer}{when} (source: {image.eol_source})")
    branch = matrix.branch(int(plan.cuda.min_driver.split(".")[0]))
    if branch is not None and branch.past_eol(today):
        when = f"end of life {branch.eol}" if branch.eol else f"listed as end of life on {branch.eol_listed}"
        reasons.append(f"CUDA {cuda} shipped with driver {branch.label}, {when}")
    majors = sorted({i.cuda.release[0] for i in matrix.images}, reverse=True)
    if majors and cuda.release[0] <= majors[0] - SUPPORTED_MAJORS:
        reasons.append(f"CUDA {cuda.release[0]} is {SUPPORTED_MAJORS} majors behind CUDA {majors[0]}")
    if not reasons:
        return None
    return (
        f"{tag}: past NVIDIA's end of life ({'; '.join(reasons)}). NVIDIA deletes end-of-life tags six months "
        "later: build from a digest (provision pin-base) and keep a mirror, or plan a newer CUDA"
    )
