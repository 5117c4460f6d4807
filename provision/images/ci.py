"""CI pipelines that build the plans' images: GitHub Actions and GitLab CI.

Both build each distinct image once. Plans are rendered at generation time; plans whose build
contexts are identical (the same Dockerfile and requirements: images carry no GPU or plan id) share
one job, and the job re-renders in CI and refuses to build when the context no longer matches the
content digest it was generated for. Builds run on BuildKit with a layer cache, SBOM and provenance
attestations; pushes happen only from the default branch and tags. The tool itself is installed at
the version that generated the pipeline, hash-locked, from gpu-provision.lock written beside the
pipeline (provision/images/toollock.py): the pipeline needs no file of provision's own repository.

Every file read from the repository (plans, committed locks, base-digest files, build contexts,
buildx metadata) is read as untrusted (provision.documents: never through a symbolic link, bounded,
content never echoed in an error); every file written replaces a symbolic link planted at its path,
and no file is written through a linked directory inside the repository.
"""

from __future__ import annotations

import glob
import json
import os
import re
import tempfile
from typing import Any, NamedTuple

from provision import __version__
from provision.errors import CompatDataError, InputError
from provision.images import toollock
from provision.plan.model import Plan, read_plan
from provision.resources import compat_dir

ACTIONS_FILE = "ci_actions.yaml"
OWNER_PLACEHOLDER = "${{ github.repository_owner }}"
CONTEXT_DIR = "build-context"
PLAN_FILE = "plan.lock.json"  # written beside the Dockerfile for people; not part of the image's content
PLATFORM = "linux/amd64"
LOCKS_DIR = "image-locks"  # committed requirements.lock files, one per readable tag
# every job renders with its committed lock (the variable is empty for images without one)
# and its bases by digest (the image's, and its sdist build stage's: empty when the bases are tags)
RENDER = (
    'provision render --plan "$PLAN" --variant "$VARIANT" ${LOCK:+--lock-file "$LOCK"} ${BASE:+--base-image "$BASE"} '
    '${BUILD_BASE:+--build-base-image "$BUILD_BASE"} --out'
)
# what a path in a pipeline may look like: relative, inside the repository, no shell or YAML syntax
SAFE_PATH = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,250}$")
# the pipeline's own files may also live in dot-folders (.github/workflows); never a `.` or `..` part
REPO_FILE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,250}$")


class Job(NamedTuple):
    """One image to build: the plans that render it, its variant and its tags."""

    name: str
    plan: str  # the plan CI renders from (the first of `plans`)
    plans: tuple[str, ...]  # every plan whose image this is, repository-relative
    plan_digests: tuple[str, ...]
    variant: str
    content: str  # sha256 over the build context
    tags: tuple[str, ...]  # repository-relative: the content tag, then the readable tag unless it collides
    lock: str | None = None  # the committed requirements.lock the job renders with (repository-relative)
    base: str | None = None  # FROM this (nvidia/cuda:<tag>@sha256:…) instead of the plan's tag
    platform: str = PLATFORM  # the plans' image platform (linux/arm64 for aarch64 hosts)
    build_base: str | None = None  # the sdist build stage FROM this (the devel tag by digest)

    def variables(self) -> dict[str, str]:
        """What the pipeline hands the job's scripts (as environment variables, never as script text)."""
        return {
            "name": self.name,
            "plan": self.plan,
            "plans": " ".join(self.plans),
            "variant": self.variant,
            "lock": self.lock or "",
            "base": self.base or "",
            "build_base": self.build_base or "",
            "content": self.content,
            "tags": " ".join(self.tags),
            "platform": self.platform,
        }


def load_actions(directory: str | None = None) -> dict[str, Any]:
    """compat/ci_actions.yaml, checked against its schema: {"actions": {...}, "images": {...}}."""
    import jsonschema
    import yaml

    base = compat_dir(directory)
    try:
        with open(os.path.join(base, ACTIONS_FILE), encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)
        with open(os.path.join(base, "schema", "ci_actions.schema.json"), encoding="utf-8") as handle:
            schema = json.load(handle)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise CompatDataError(ACTIONS_FILE, "", f"unreadable ({exc})") from None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    if error is not None:
        where = ".".join(str(x) for x in error.absolute_path)
        raise CompatDataError(ACTIONS_FILE, where, error.message)
    return doc


# -- which images to build -----------------------------------------------------------------------
def plan_files(plans: list[str], plans_dir: str | None) -> list[str]:
    files = list(plans)
    if plans_dir:
        if os.path.islink(plans_dir.rstrip("/") or "/"):
            raise InputError(
                f"--plans {plans_dir!r} is a symbolic link", hint="give the directory itself: links are not followed"
            )
        found = sorted(glob.glob(os.path.join(glob.escape(plans_dir), "*.lock.json")))
        if not found:
            raise InputError(f"no *.lock.json plans in {plans_dir!r}", hint="write them with provision plan --lock")
        files += found
    if not files:
        raise InputError("no plans given", hint="--plan FILE (repeatable) or --plans DIR")
    return files


def repository_root(out: str, ci_dir: tuple[str, ...]) -> str:
    """The repository the pipeline file lives in: above .github/workflows, or the current directory."""
    where = os.path.dirname(os.path.abspath(out))
    if ci_dir and where.endswith(os.path.join(*ci_dir)):
        for _ in ci_dir:
            where = os.path.dirname(where)
        return where
    return os.getcwd()


def relative_plan(path: str, root: str, what: str = "plan", pattern: re.Pattern[str] = SAFE_PATH) -> str:
    relative = os.path.relpath(os.path.abspath(path), root)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        raise InputError(
            f"{what} {path!r} is outside the repository ({root})",
            hint=f"keep the {what} inside the repository the pipeline builds from",
        )
    relative = relative.replace(os.sep, "/")
    if not pattern.fullmatch(relative) or {".", ".."} & set(relative.split("/")):
        raise InputError(
            f"{what} path {relative!r} cannot be used in a pipeline",
            hint="name files with letters, digits, '.', '_', '-' and '/' only",
        )
    return relative


def check_repository_path(root: str, relative: str, flag: str, *, folder: bool = False) -> str:
    """`relative` names a path inside `root` reached through no symbolic link (a linked folder would
    carry a file written there out of the repository); the last part of a file's path may be a link,
    which the writer replaces."""
    if not REPO_FILE.fullmatch(relative) or {".", ".."} & set(relative.split("/")):
        raise InputError(f"{flag} {relative!r} is not a repository-relative path", hint="e.g. image-locks")
    parts = relative.split("/")
    for depth in range(1, len(parts) + folder):
        folder = os.path.join(root, *parts[:depth])
        if os.path.islink(folder):
            raise InputError(
                f"{flag} {relative}: {'/'.join(parts[:depth])} is a symbolic link",
                hint="files the pipeline needs are written into the repository itself, not through a link",
            )
    return relative


def read_checked_plan(path: str, matrix) -> Plan:
    """A plan file of the repository: read as untrusted, held to the catalogue in every field a
    template reads (a digest is no signature), and with an image part."""
    from provision.images.render import require_image_part
    from provision.plan.lockcheck import check_against_catalogue

    plan = read_plan(path)  # refuses anything that is not a plan
    check_against_catalogue(plan, matrix, repr(path))
    return require_image_part(plan, f"ci ({path})")


def plan_jobs(
    files: list[str],
    root: str,
    variant: str | None,
    *,
    matrix,
    locks: str | None = None,
    relock: bool = False,
    base_digests: str | None = None,
    registry: str | None = None,
) -> tuple[list[Job], dict[str, str]]:
    """Render every plan; plans with one build context share one job. Readable tags that two
    different contents would claim are dropped (each keeps its content tag): no two jobs push a tag.

    A framework image's requirements.lock is a committed input: `locks` (repository-relative) holds
    one per readable tag; an existing one is reused byte for byte (checked against the plan), a
    missing one (or every one, with `relock`) is resolved. With `base_digests` (provision pin-base's
    file) every job builds FROM its base by digest, and an image that builds sdists its build stage
    FROM the plan's devel tag by digest (a file that lacks either is refused). Returns the jobs and
    the lock files to write (repository-relative path -> text)."""
    from provision.images import pin
    from provision.images.render import content_digest, image_tags, plan_variant, render_image

    if registry is not None and not base_digests:
        raise InputError("--registry applies to --base-digests", hint="give the base-digest file it was pinned for")
    pins = pin.read_pins(base_digests, registry) if base_digests else None

    groups: dict[str, dict[str, Any]] = {}
    new_locks: dict[str, str] = {}
    if locks is not None:
        locks = check_repository_path(root, locks.rstrip("/"), "--locks", folder=True)
    staging = tempfile.TemporaryDirectory(prefix="provision-ci-locks-")
    with staging:
        for path in files:
            plan = read_checked_plan(path, matrix)
            relative = relative_plan(path, root)
            chosen = variant or plan_variant(plan)
            lock = f"{locks}/{image_tags(plan, chosen, {})[0]}.requirements.lock" if locks else None
            source = None
            if lock is not None and lock in new_locks:  # resolved for an earlier plan of this run
                source = os.path.join(staging.name, str(len(new_locks)))
                with open(source, "w", encoding="utf-8") as handle:
                    handle.write(new_locks[lock])
            elif lock is not None and not relock and os.path.lexists(os.path.join(root, lock)):
                source = os.path.join(root, lock)  # committed: reused byte for byte (a link is refused)
            base = build_base = None
            if pins is not None:
                base = pin.pinned_ref(pins, pin.base_tag(plan, chosen), base_digests)
                build_tag = pin.build_base_tag(plan, chosen)
                if build_tag is not None:
                    build_base = pin.pinned_ref(pins, build_tag, base_digests, stage="the sdist build stage's base")
            rendered = render_image(plan, chosen, lock_file=source, base_image=base, build_base_image=build_base)
            if "requirements.lock" not in rendered.files:
                lock = None
            elif lock is not None and source is None:
                new_locks[lock] = rendered.files["requirements.lock"]
            _group(
                groups,
                rendered,
                variant=chosen,
                base=base,
                build_base=build_base,
                lock=lock,
                plan_path=relative,
                plan_digest=plan.digest(),
                content=content_digest(rendered.files),
            )
    claims: dict[str, int] = {}
    for group in groups.values():
        claims[group["readable"]] = claims.get(group["readable"], 0) + 1
    jobs = []
    for content, group in sorted(groups.items(), key=lambda item: (item[1]["readable"], item[0])):
        readable = group["readable"]
        tags = (group["content_tag"],) + ((readable,) if claims[readable] == 1 else ())
        plans = tuple(group["plans"])
        jobs.append(
            Job(
                name=f"{readable}-{content.removeprefix('sha256:')[:12]}",
                plan=plans[0],
                plans=plans,
                plan_digests=tuple(group["plans"].values()),
                variant=group["variant"],
                content=content,
                tags=tags,
                lock=group["lock"],
                base=group["base"],
                platform=group["platform"],
                build_base=group["build_base"],
            )
        )
    return jobs, new_locks


def _group(groups, rendered, *, variant, base, build_base, lock, plan_path: str, plan_digest: str, content: str):
    from provision.images.render import platform_suffix

    suffix = platform_suffix(rendered.platform)  # an arm64 image is another image: its tags say so
    group = groups.setdefault(
        content,
        {
            "variant": variant,
            "base": base,
            "build_base": build_base,
            "readable": rendered.tags[0],
            "content_tag": f"content-{content.removeprefix('sha256:')[:12]}-{variant}{suffix}",
            "lock": lock,
            "platform": rendered.platform,
            "plans": {},
        },
    )
    group["plans"].setdefault(plan_path, plan_digest)


def context_digest(directory: str) -> str:
    """The content digest of a rendered build context on disk, as render computed it."""
    from provision.images.render import content_digest

    if not os.path.isdir(directory):
        raise InputError(f"{directory!r} is not a build context directory", hint="provision render --out DIR first")
    from provision.documents import read_text

    if os.path.islink(directory.rstrip("/") or "/"):
        raise InputError(f"{directory!r} is a symbolic link", hint="give the build context directory itself")
    files = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name == PLAN_FILE:
            continue
        if os.path.islink(path) or not os.path.isfile(path):
            raise InputError(f"{path!r} is not a plain file", hint="a build context holds rendered files only")
        files[name] = read_text(path, "build context file", max_bytes=64 * 1024 * 1024)
    return content_digest(files)


def record_image_lock(
    out: str,
    *,
    context: str,
    plans: str,
    variant: str,
    repo: str,
    tags: str,
    pushed: str,
    image_id: str | None = None,
    digest: str | None = None,
    metadata: str | None = None,
    matrix,
) -> dict[str, Any]:
    """image.lock.json for an image a pipeline built with BuildKit: the plans it serves (read and
    checked from the checkout), the base and requirements of the context, the image id and, when
    pushed, the repository digest. From build-push-action's outputs or buildx's --metadata-file."""
    from provision.images.build import BuildResult, requirements_digest, split_ref, write_image_lock

    if metadata is not None:
        meta = _read_metadata(metadata)
        image_id = image_id or meta.get("containerimage.config.digest")
        digest = digest or meta.get("containerimage.digest")
    for name, value in (("--image-id", image_id), ("--digest", digest)):
        if not isinstance(value, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", value):
            raise InputError(f"{name} {value!r} is not a sha256 digest", hint="pass the build step's outputs")
    if pushed not in ("true", "false"):
        raise InputError(f"--pushed {pushed!r} is not true or false", hint="the pipeline's publish condition")
    _check_repo(repo, OWNER_PLACEHOLDER)
    tag_list = tags.split()
    if not tag_list or not all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", t) for t in tag_list):
        raise InputError(f"--tags {tags!r} are not image tags", hint="the job's tags, separated by spaces")
    entries = []
    for path in plans.split():
        if not SAFE_PATH.fullmatch(path) or ".." in path.split("/"):
            raise InputError(f"plan path {path!r} cannot be used", hint="repository-relative plan paths only")
        entries.append({"path": path, "digest": read_checked_plan(path, matrix).digest()})
    if not entries:
        raise InputError("--plans names no plan", hint="the job's plans, separated by spaces")
    base, build_from = _from_lines(context)
    return write_image_lock(
        out,
        plan_digest=entries[0]["digest"],
        variant=variant,
        result=BuildResult(image_id, tuple(f"{repo}:{t}" for t in tag_list), (), ()),
        repo_digests=(f"{repo}@{digest}",) if pushed == "true" else (),
        from_ref=base,
        base_digest=split_ref(base)[2],
        build_base={"image": build_from, "digest": split_ref(build_from)[2]} if build_from else None,
        requirements=requirements_digest(context),
        plans=entries,
        content_digest=context_digest(context),
    )


def _read_metadata(path: str) -> dict[str, Any]:
    from provision.documents import load_json, read_text

    meta = load_json(read_text(path, "buildx metadata"), f"buildx metadata {path!r}")
    if not isinstance(meta, dict):
        raise InputError(f"{path!r} is not buildx metadata", hint="docker buildx build --metadata-file")
    return meta


def _from_lines(context: str) -> tuple[str, str | None]:
    """The base the context's image starts FROM: its final stage's (a Dockerfile with an sdist build
    stage starts that stage `FROM <devel> AS build` first; the image is the one unnamed stage, last),
    and the build stage's base (None without one)."""
    from provision.documents import read_text

    text = read_text(os.path.join(context, "Dockerfile"), "the build context's Dockerfile")
    froms = [line.split()[1:] for line in text.split("\n") if line.startswith("FROM ") and len(line.split()) >= 2]
    final = [i for i, words in enumerate(froms) if len(words) == 1]
    stages = [words for words in froms if len(words) == 3 and words[1] == "AS"]
    if final != [len(froms) - 1] or len(stages) != len(froms) - 1:
        raise InputError(
            f"{context}/Dockerfile is not a rendered image: its image FROM line is not one and last",
            hint="render it with provision render",
        )
    build = [words[0] for words in stages if words[2] == "build"]
    return froms[-1][0], (build[0] if build else None)


def default_matrix():
    """The catalogue of PROVISION_COMPAT_DIR, else the built-in one (the CLI passes --compat-dir's)."""
    from provision.matrix.cache import load_cached

    return load_cached(compat_dir())


# -- the pipeline and the files it needs -----------------------------------------------------------
class Pipeline(NamedTuple):
    """A generated pipeline: its text, the files to write before it (repository-relative path ->
    text: new image locks, the tool lock when resolved), its repository and its tool lock."""

    text: str
    files: dict[str, str]
    root: str
    tool: toollock.ToolLock


def prepare_tool_lock(root: str, out: str, tool_lock: str | None, tool_index_url: str | None) -> toollock.ToolLock:
    """gpu-provision.lock beside the pipeline file, or where --tool-lock says (inside the repository)."""
    path = (
        tool_lock if tool_lock is not None else os.path.join(os.path.dirname(os.path.abspath(out)), toollock.LOCK_NAME)
    )
    relative = check_repository_path(root, relative_plan(path, root, "--tool-lock", REPO_FILE), "--tool-lock")
    return toollock.tool_lock(root, relative, tool_index_url)


def install_command(tool: toollock.ToolLock) -> str:
    return f"{toollock.INSTALL} {tool.path}"


def _files(new_locks: dict[str, str], tool: toollock.ToolLock) -> dict[str, str]:
    return {**new_locks, **({tool.path: tool.text} if tool.written else {})}


# -- GitHub Actions ------------------------------------------------------------------------------
def _publish_condition(default_branch: str) -> str:
    return (
        "github.event_name != 'pull_request' && (github.ref == format('refs/heads/{0}', '"
        + default_branch
        + "') || startsWith(github.ref, 'refs/tags/'))"
    )


def _check_repo(repo: str, placeholder: str) -> None:
    if not re.fullmatch(r"[a-z0-9][a-z0-9._:/-]*", repo.replace(placeholder, "owner")):
        raise InputError(
            f"--repo {repo!r} is not an image repository",
            hint="lower-case registry/owner/name, e.g. ghcr.io/acme/gpu (the owner placeholder "
            f"{placeholder} is lower-cased in the job)",
        )


def _check_branch(default_branch: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*", default_branch):
        raise InputError(f"--default-branch {default_branch!r} is not a branch name", hint="e.g. main")


def github_workflow(
    plans: list[str],
    plans_dir: str | None,
    *,
    variant: str | None,
    repo: str,
    push: bool,
    out: str,
    default_branch: str = "main",
    locks: str | None = LOCKS_DIR,
    relock: bool = False,
    base_digests: str | None = None,
    registry: str | None = None,
    tool_lock: str | None = None,
    tool_index_url: str | None = None,
    matrix=None,
) -> Pipeline:
    """The workflow, the lock files to write beside it, and the tool lock its jobs install from.
    Plans are held to `matrix` (the catalogue; the built-in one when None)."""
    _check_repo(repo, OWNER_PLACEHOLDER)
    _check_branch(default_branch)
    root = repository_root(out, (".github", "workflows"))
    workflow = check_repository_path(root, relative_plan(out, root, "--out", REPO_FILE), "--out")
    jobs, new_locks = plan_jobs(
        plan_files(plans, plans_dir),
        root,
        variant,
        locks=locks,
        relock=relock,
        base_digests=base_digests,
        registry=registry,
        matrix=matrix if matrix is not None else default_matrix(),
    )
    tool = prepare_tool_lock(root, out, tool_lock, tool_index_url)
    pins = load_actions()
    actions = pins["actions"]

    def uses(name: str) -> str:
        action = actions[name]
        return f"{action['uses']}@{action['sha']}"

    lower_owner = OWNER_PLACEHOLDER in repo
    image_repo = repo.replace(OWNER_PLACEHOLDER, "${OWNER,,}") if lower_owner else repo
    publish = _publish_condition(default_branch)
    name_repo: dict[str, Any] = {"name": "Name the image repository"}
    if lower_owner:
        name_repo["env"] = {"OWNER": "${{ github.repository_owner }}"}
    name_repo["run"] = f'echo "IMAGE_REPO={image_repo}" >> "$GITHUB_ENV"'
    steps: list[dict[str, Any]] = [
        {"name": "Check out", "uses": uses("checkout"), "with": {"persist-credentials": False}},
        {"name": "Set up Python", "uses": uses("setup-python"), "with": {"python-version": toollock.PYTHON}},
        {
            "name": f"Install gpu-provision {__version__} (hash-locked, {tool.path})",
            "run": install_command(tool),
        },
        name_repo,
        {
            "name": "Render the build context (refused if it is not the content this job was generated for)",
            "env": {
                "PLAN": "${{ matrix.plan }}",
                "VARIANT": "${{ matrix.variant }}",
                "LOCK": "${{ matrix.lock }}",
                "BASE": "${{ matrix.base }}",
                "BUILD_BASE": "${{ matrix.build_base }}",
                "CONTENT": "${{ matrix.content }}",
            },
            "run": f'{RENDER} {CONTEXT_DIR}\nprovision ci context-digest {CONTEXT_DIR} --expect "$CONTENT"',
        },
        {
            "name": "Tags",
            "id": "tags",
            "env": {"TAGS": "${{ matrix.tags }}"},
            "run": 'echo "tags<<EOF" >> "$GITHUB_OUTPUT"\n'
            'for tag in $TAGS; do echo "$IMAGE_REPO:$tag" >> "$GITHUB_OUTPUT"; done\n'
            'echo "EOF" >> "$GITHUB_OUTPUT"',
        },
        {"name": "Set up BuildKit", "uses": uses("setup-buildx")},
    ]
    if push:
        steps.append(
            {
                "name": "Log in to the registry",
                "if": publish,
                "uses": uses("login"),
                "with": {
                    "registry": repo.split("/", maxsplit=1)[0],
                    "username": "${{ github.actor }}",
                    "password": "${{ secrets.GITHUB_TOKEN }}",
                },
            }
        )
    steps += [
        {
            "name": "Build" + (" (pushed only from the default branch and tags)" if push else ""),
            "id": "build",
            "uses": uses("build-push"),
            "with": {
                "context": CONTEXT_DIR,
                "platforms": "${{ matrix.platform }}",
                "pull": True,
                # always an image (so the lock gets its id and digest), pushed only when publishing
                "outputs": "type=image,push=${{ " + publish + " }}" if push else "type=image,push=false",
                "tags": "${{ steps.tags.outputs.tags }}",
                "cache-from": "type=gha,scope=${{ matrix.name }}",
                "cache-to": "type=gha,mode=max,scope=${{ matrix.name }}",
                "sbom": True,
                "provenance": "mode=max",
            },
        },
        {
            "name": "Record the image lock",
            "env": {
                "PLANS": "${{ matrix.plans }}",
                "VARIANT": "${{ matrix.variant }}",
                "JOB": "${{ matrix.name }}",
                "TAGS": "${{ matrix.tags }}",
                "IMAGE_ID": "${{ steps.build.outputs.imageid }}",
                "DIGEST": "${{ steps.build.outputs.digest }}",
                "PUSHED": "${{ " + publish + " }}" if push else "false",
            },
            "run": "mkdir -p image-lock\n"
            f'provision ci image-lock --context {CONTEXT_DIR} --plans "$PLANS" --variant "$VARIANT" '
            '--repo "$IMAGE_REPO" --tags "$TAGS" --image-id "$IMAGE_ID" --digest "$DIGEST" --pushed "$PUSHED" '
            '--out "image-lock/$JOB.json"',
        },
        {
            "name": "Keep the image lock",
            "uses": uses("upload-artifact"),
            "with": {"name": "image-lock-${{ matrix.name }}", "path": "image-lock/${{ matrix.name }}.json"},
        },
    ]
    include = [job.variables() for job in jobs]
    # what the jobs read from the repository: the plans, the committed locks, the tool lock, this workflow
    paths = sorted(
        {p for job in jobs for p in job.plans} | {job.lock for job in jobs if job.lock} | {tool.path, workflow}
    )
    doc = {
        "name": "provision images",
        "on": {
            "push": {"branches": [default_branch], "tags": ["v*"], "paths": paths},
            "pull_request": {"paths": paths},
            "workflow_dispatch": {},
        },
        "permissions": {"contents": "read"},
        "concurrency": {
            "group": "provision-images-${{ github.ref }}",
            "cancel-in-progress": "${{ github.event_name == 'pull_request' }}",
        },
        "jobs": {
            "build": {
                "name": "${{ matrix.name }}",
                "runs-on": "ubuntu-22.04",
                "permissions": {"contents": "read", "packages": "write" if push else "read"},
                "timeout-minutes": 120,
                "strategy": {"fail-fast": False, "matrix": {"include": include}},
                "steps": steps,
            }
        },
    }
    text = _dump_yaml(doc)
    for action in actions.values():
        text = text.replace(
            f"uses: {action['uses']}@{action['sha']}\n",
            f"uses: {action['uses']}@{action['sha']}  # {action['version']}\n",
        )
    return Pipeline(
        _header("provision ci github", jobs, ".github/workflows") + text, _files(new_locks, tool), root, tool
    )


def _header(command: str, jobs: list[Job], where: str) -> str:
    plans = sum(len(job.plans) for job in jobs)
    lines = [
        f"# Generated by `{command}` (gpu-provision {__version__}): {len(jobs)} image(s) from {plans} plan(s).",
        "# Regenerate instead of editing. Pins come from compat/ci_actions.yaml; the jobs install this",
        "# gpu-provision from the hash lock written beside this file, so they render what was generated here.",
    ]
    if any(job.base is None for job in jobs):
        lines.append("# Bases are FROM their tags: pin them (provision pin-base) and regenerate with --base-digests.")
    dropped = sorted({job.name.rsplit("-", 1)[0] for job in jobs if len(job.tags) == 1})
    if dropped:
        lines.append(
            "# Readable tags left off (different contents would share them): "
            + ", ".join(dropped)
            + "; those images carry their content tags only."
        )
    return "\n".join(lines) + "\n"


def _dump_yaml(doc: dict[str, Any]) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):  # one copy of each list: no &id001 anchors
            return True

    def text_block(dumper, value):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text_block)
    return yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=200)


# -- GitLab CI -----------------------------------------------------------------------------------
GITLAB_REPO_DEFAULT = "$CI_REGISTRY_IMAGE"
IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._/:-]*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}@sha256:[a-f0-9]{64}$")


def gitlab_pipeline(
    plans: list[str],
    plans_dir: str | None,
    *,
    variant: str | None,
    repo: str,
    push: bool,
    out: str,
    default_branch: str | None = None,
    images: dict[str, str] | None = None,
    locks: str | None = LOCKS_DIR,
    relock: bool = False,
    base_digests: str | None = None,
    registry: str | None = None,
    tool_lock: str | None = None,
    tool_index_url: str | None = None,
    matrix=None,
) -> Pipeline:
    """A .gitlab-ci.yml with three jobs per image: render (Python image) -> build (docker:dind with
    BuildKit) -> lock (Python image), chained by `needs`.

    Job images are pinned by digest (compat/ci_actions.yaml, or --image NAME=REF@sha256:…); the
    plan, tags and content reach scripts as variables only, never as text inside a script; pushes
    happen only on the default branch and tags, merge requests build without pushing, and a newer
    pipeline interrupts an older one (interruptible)."""
    if repo != GITLAB_REPO_DEFAULT and not re.fullmatch(r"[a-z0-9][a-z0-9._:/-]*", repo):
        raise InputError(
            f"--repo {repo!r} is not an image repository",
            hint="lower-case registry/group/name, or $CI_REGISTRY_IMAGE (GitLab lower-cases it)",
        )
    if default_branch is not None:
        _check_branch(default_branch)
    root = os.path.dirname(os.path.abspath(out))
    jobs, new_locks = plan_jobs(
        plan_files(plans, plans_dir),
        root,
        variant,
        locks=locks,
        relock=relock,
        base_digests=base_digests,
        registry=registry,
        matrix=matrix if matrix is not None else default_matrix(),
    )
    tool = prepare_tool_lock(root, out, tool_lock, tool_index_url)
    pinned = {name: f"{e['image']}:{e['tag']}@{e['digest']}" for name, e in load_actions()["images"].items()}
    for name, ref in (images or {}).items():
        if name not in pinned:
            raise InputError(f"--image {name}=…: no such job image", hint=f"images: {', '.join(sorted(pinned))}")
        if not IMAGE_REF.fullmatch(ref):
            raise InputError(
                f"--image {name}={ref!r} is not pinned by digest", hint="give REPOSITORY:TAG@sha256:<64 hex>"
            )
        pinned[name] = ref
    branch = f'"{default_branch}"' if default_branch else "$CI_DEFAULT_BRANCH"
    publish = f"$CI_COMMIT_TAG || $CI_COMMIT_BRANCH == {branch}"
    python_setup = [install_command(tool)]
    publish_rules = [{"if": publish, "variables": {"PUBLISH": "true"}}, {"when": "on_success"}] if push else []
    doc: dict[str, Any] = {
        "workflow": {
            "rules": [
                {"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'},
                {"if": f"$CI_COMMIT_BRANCH == {branch}"},
                {"if": "$CI_COMMIT_TAG"},
                {"if": '$CI_PIPELINE_SOURCE == "web"'},
            ]
        },
        "stages": ["render", "build", "lock"],
        "default": {"interruptible": True},
        "variables": {"IMAGE_REPO": repo, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PUBLISH": "false"},
        ".render": {
            "stage": "render",
            "image": pinned["python"],
            "timeout": "30m",
            "script": [
                *python_setup,
                f'{RENDER} "{CONTEXT_DIR}/$NAME"',
                f'provision ci context-digest "{CONTEXT_DIR}/$NAME" --expect "$CONTENT"',
            ],
            "artifacts": {"paths": [f"{CONTEXT_DIR}/"], "expire_in": "1 day"},
        },
        ".build": {
            "stage": "build",
            "image": pinned["docker"],
            "services": [{"name": pinned["docker"], "alias": "docker"}],
            "timeout": "2h",
            "variables": {
                "DOCKER_HOST": "tcp://docker:2376",
                "DOCKER_TLS_CERTDIR": "/certs",
                "DOCKER_TLS_VERIFY": "1",
                "DOCKER_CERT_PATH": "/certs/client",
            },
            "script": [
                "mkdir -p build-metadata",
                'if [ "$PUBLISH" = "true" ]; then echo "$CI_REGISTRY_PASSWORD" | docker login --username '
                '"$CI_REGISTRY_USER" --password-stdin "$CI_REGISTRY"; fi',
                "docker buildx create --use --driver docker-container --name provision",
                "set --",
                'for tag in $TAGS; do set -- "$@" --tag "$IMAGE_REPO:$tag"; done',
                'if [ "$PUBLISH" = "true" ]; then set -- "$@" '
                '--cache-to "type=registry,ref=$IMAGE_REPO/cache:$NAME,mode=max"; fi',
                # always an image (the lock job needs its id and digest), pushed only when publishing
                'docker buildx build "$@" --platform "$PLATFORM" --pull'
                ' --cache-from "type=registry,ref=$IMAGE_REPO/cache:$NAME"'
                ' --output "type=image,push=$PUBLISH" --sbom=true --provenance=mode=max'
                f' --metadata-file "build-metadata/$NAME.json" "{CONTEXT_DIR}/$NAME"',
            ],
            "artifacts": {"paths": ["build-metadata/"], "expire_in": "30 days"},
        },
        ".lock": {
            "stage": "lock",
            "image": pinned["python"],
            "timeout": "30m",
            "script": [
                *python_setup,
                "mkdir -p image-lock",
                f'provision ci image-lock --context "{CONTEXT_DIR}/$NAME" --plans "$PLANS" --variant "$VARIANT" '
                '--repo "$IMAGE_REPO" --tags "$TAGS" --metadata "build-metadata/$NAME.json" --pushed "$PUBLISH" '
                '--out "image-lock/$NAME.json"',
            ],
            "artifacts": {"paths": ["image-lock/"], "expire_in": "never"},
        },
    }
    for job in jobs:
        variables = {key.upper(): value for key, value in job.variables().items()}
        doc[f"render:{job.name}"] = {"extends": ".render", "variables": variables}
        build: dict[str, Any] = {"extends": ".build", "variables": variables, "needs": [f"render:{job.name}"]}
        lock: dict[str, Any] = {
            "extends": ".lock",
            "variables": variables,
            "needs": [f"render:{job.name}", f"build:{job.name}"],
        }
        if publish_rules:
            build["rules"] = publish_rules
            lock["rules"] = publish_rules
        doc[f"build:{job.name}"] = build
        doc[f"lock:{job.name}"] = lock
    return Pipeline(_header("provision ci gitlab", jobs, ".") + _dump_yaml(doc), _files(new_locks, tool), root, tool)
