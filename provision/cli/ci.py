"""`provision ci`: pipelines that build the plans' images (GitHub Actions, GitLab CI), and the two
steps those pipelines run (`context-digest`, `image-lock`)."""

import os

import click

from provision import __version__
from provision.cli.common import check_output, load_matrix, write_output
from provision.errors import InputError

_plan_options = [
    click.option(
        "--plan", "plans", multiple=True, type=click.Path(dir_okay=False), help="Plan lock file (repeatable)."
    ),
    click.option("--plans", "plans_dir", type=click.Path(file_okay=False), help="Directory of *.lock.json plans."),
    click.option(
        "--variant",
        help="Variant for every plan (default: each plan's framework, --framework onnxruntime|tensorrt included, "
        "else base).",
    ),
    click.option(
        "--locks",
        default="image-locks",
        show_default=True,
        help="Repository directory of the committed requirements.lock files the jobs render with.",
    ),
    click.option("--relock", is_flag=True, help="Resolve every lock again instead of reusing the committed ones."),
    click.option(
        "--base-digests",
        type=click.Path(dir_okay=False),
        help="provision pin-base's file: every job builds FROM its base by digest, and an sdist build stage "
        "FROM the plan's devel tag by digest.",
    ),
    click.option(
        "--registry",
        metavar="HOST[:PORT][/PATH]",
        help="The mirror of nvidia/cuda the --base-digests file was pinned through (pin-base --registry).",
    ),
    click.option(
        "--tool-lock",
        type=click.Path(dir_okay=False),
        help="The hash lock the jobs install gpu-provision from, in the repository (default: gpu-provision.lock "
        "beside the pipeline); reused when it pins this version, else resolved and written.",
    ),
    click.option(
        "--tool-index-url",
        metavar="URL",
        envvar="PROVISION_TOOL_INDEX_URL",
        help="The package index serving gpu-provision at this version, which the tool lock is resolved from "
        "and names (default: pypi.org; env: PROVISION_TOOL_INDEX_URL).",
    ),
]


def check_out(out: str) -> list[str]:
    """The pipeline's --out, checked before any work; the folders to create when it is written: a
    missing .github/workflows of an existing directory (a fresh repository has none), nothing else."""
    parent = os.path.dirname(os.path.abspath(out))
    github = os.path.dirname(parent)
    if (
        os.path.basename(parent) == "workflows"
        and os.path.basename(github) == ".github"
        and os.path.isdir(os.path.dirname(github))
        and not os.path.lexists(parent)
        and (not os.path.lexists(github) or (os.path.isdir(github) and not os.path.islink(github)))
    ):
        return [d for d in (github, parent) if not os.path.lexists(d)]
    check_output(out, "--out")
    return []


def write_pipeline(out: str, pipeline, folders: list[str]) -> None:
    """The files the pipeline needs first (each written whole), then the pipeline that names them;
    each one reported once ("wrote PATH")."""
    for relative, text in sorted(pipeline.files.items()):
        path = os.path.join(pipeline.root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shown = os.path.relpath(path)
        path = path if shown.startswith(os.pardir) else shown  # reported as given: relative to here when inside
        write_output(path, text, "--tool-lock" if relative == pipeline.tool.path else "--locks")
    if pipeline.tool.replaced:
        click.echo(
            f"note: {pipeline.tool.path} pinned gpu-provision {pipeline.tool.replaced}; resolved again for "
            f"{__version__}, the version that generated the pipeline",
            err=True,
        )
    for folder in folders:
        os.makedirs(folder, exist_ok=True)
    write_output(out, pipeline.text, "--out")


def plan_options(func):
    for option in reversed(_plan_options):
        func = option(func)
    return func


@click.group("ci")
def ci_group():
    """Generate CI pipelines that build each distinct plan image once, pinned and attested."""


@ci_group.command("github")
@plan_options
@click.option(
    "--repo", default="ghcr.io/${{ github.repository_owner }}/gpu", show_default=True, help="Image repository."
)
@click.option(
    "--push/--no-push", default=True, show_default=True, help="Push from the default branch and tags (never from PRs)."
)
@click.option("--default-branch", default="main", show_default=True, help="The branch whose builds are pushed.")
@click.option(
    "--out", default=".github/workflows/provision-images.yml", show_default=True, type=click.Path(dir_okay=False)
)
@click.pass_context
def ci_github_cmd(ctx, *, plans, plans_dir, out, **options):
    """Write a GitHub Actions workflow: one BuildKit job per distinct image (plans that render the
    same build context share it), with a layer cache, SBOM and provenance, actions pinned by commit.

    The jobs install gpu-provision at this version from a hash lock written beside the workflow
    (gpu-provision.lock, resolved from --tool-index-url), so the workflow runs in any repository.
    A missing .github/workflows folder is created."""
    from provision.images.ci import github_workflow

    folders = check_out(out)
    pipeline = github_workflow(list(plans), plans_dir, out=out, matrix=load_matrix(ctx), **options)
    write_pipeline(out, pipeline, folders)
    return 0


@ci_group.command("gitlab")
@plan_options
@click.option("--repo", default="$CI_REGISTRY_IMAGE", show_default=True, help="Image repository.")
@click.option(
    "--push/--no-push", default=True, show_default=True, help="Push from the default branch and tags (never from MRs)."
)
@click.option("--default-branch", help="The branch whose builds are pushed (default: the project's default branch).")
@click.option(
    "--image",
    "images",
    multiple=True,
    metavar="NAME=REF@sha256:…",
    help="Job image instead of the catalogue's (python, docker), pinned by digest.",
)
@click.option("--out", default=".gitlab-ci.yml", show_default=True, type=click.Path(dir_okay=False))
@click.pass_context
def ci_gitlab_cmd(ctx, *, plans, plans_dir, images, out, **options):
    """Write a .gitlab-ci.yml: per distinct image, render -> BuildKit build (docker:dind) -> image lock,
    with job images pinned by digest, a registry layer cache, SBOM and provenance.

    The jobs install gpu-provision at this version from a hash lock written beside the pipeline
    (gpu-provision.lock, resolved from --tool-index-url), so the pipeline runs in any repository."""
    from provision.images.ci import gitlab_pipeline

    check_output(out, "--out")
    overrides = {}
    for item in images:
        name, sep, ref = item.partition("=")
        if not sep:
            raise InputError(
                f"--image {item!r} is not NAME=REF", hint="e.g. --image docker=docker:29.8.0-dind@sha256:…"
            )
        overrides[name] = ref
    pipeline = gitlab_pipeline(list(plans), plans_dir, out=out, images=overrides, matrix=load_matrix(ctx), **options)
    write_pipeline(out, pipeline, [])
    return 0


@ci_group.command("context-digest")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--expect", metavar="sha256:…", help="Exit 1 unless the context has this digest.")
def ci_context_digest_cmd(*, directory, expect):
    """Print the content digest of a rendered build context (plan.lock.json aside).

    Pipelines run it after `provision render` so that a job never builds content other than what it
    was generated for: a catalogue or template change must regenerate the pipeline."""
    from provision.errors import OperationFailed
    from provision.images.ci import context_digest

    digest = context_digest(directory)
    click.echo(digest)
    if expect is not None and digest != expect:
        raise OperationFailed(
            f"the build context in {directory} has content {digest}, the pipeline was generated for {expect}",
            hint="regenerate the pipeline (provision ci github|gitlab) and commit it",
        )
    return 0


@ci_group.command("image-lock")
@click.option("--context", required=True, type=click.Path(file_okay=False), help="The rendered build context.")
@click.option("--plans", "plans", required=True, help="The job's plan files, separated by spaces.")
@click.option("--variant", required=True, help="The variant built.")
@click.option("--repo", required=True, help="The image repository the tags belong to.")
@click.option("--tags", required=True, help="The job's tags, separated by spaces.")
@click.option("--image-id", metavar="sha256:…", help="The image id (build-push-action's imageid output).")
@click.option("--digest", metavar="sha256:…", help="The image digest (build-push-action's digest output).")
@click.option(
    "--metadata", type=click.Path(dir_okay=False), help="buildx --metadata-file output instead of --image-id/--digest."
)
@click.option("--pushed", required=True, type=click.Choice(["true", "false"]), help="Whether the tags were pushed.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Where to write image.lock.json.")
@click.pass_context
def ci_image_lock_cmd(ctx, *, context, plans, variant, repo, tags, image_id, digest, metadata, pushed, out):
    """Write image.lock.json for an image a pipeline built with BuildKit (the step after the build)."""
    from provision.images.ci import record_image_lock

    check_output(out, "--out")
    record_image_lock(
        out,
        context=context,
        plans=plans,
        variant=variant,
        repo=repo,
        tags=tags,
        pushed=pushed,
        image_id=image_id,
        digest=digest,
        metadata=metadata,
        matrix=load_matrix(ctx),
    )
    click.echo(out)
    return 0
