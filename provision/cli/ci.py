"""`provision ci`: pipelines that build the plans' images (GitHub Actions, GitLab CI), and the two
steps those pipelines run (`context-digest`, `image-lock`)."""

import os

import click

from provision.cli.common import check_output, write_output
from provision.errors import InputError

_plan_options = [
    click.option(
        "--plan", "plans", multiple=True, type=click.Path(dir_okay=False), help="Plan lock file (repeatable)."
    ),
    click.option("--plans", "plans_dir", type=click.Path(file_okay=False), help="Directory of *.lock.json plans."),
    click.option("--variant", help="Variant for every plan (default: each plan's framework, else base)."),
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
        help="provision pin-base's file: every job builds FROM its base by digest.",
    ),
]


def write_pipeline(out: str, text: str, locks: dict[str, str], root: str) -> None:
    """The new lock files first (each written whole), then the pipeline that names them."""
    for relative, lock_text in sorted(locks.items()):
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_output(path, lock_text, "--locks")
        click.echo(f"wrote {relative}")
    write_output(out, text, "--out")


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
def ci_github_cmd(*, plans, plans_dir, out, **options):
    """Write a GitHub Actions workflow: one BuildKit job per distinct image (plans that render the
    same build context share it), with a layer cache, SBOM and provenance, actions pinned by commit."""
    from provision.images.ci import github_workflow, repository_root

    check_output(out, "--out")
    text, new_locks = github_workflow(list(plans), plans_dir, out=out, **options)
    write_pipeline(out, text, new_locks, repository_root(out, (".github", "workflows")))
    click.echo(out)
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
def ci_gitlab_cmd(*, plans, plans_dir, images, out, **options):
    """Write a .gitlab-ci.yml: per distinct image, render -> BuildKit build (docker:dind) -> image lock,
    with job images pinned by digest, a registry layer cache, SBOM and provenance."""
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
    text, new_locks = gitlab_pipeline(list(plans), plans_dir, out=out, images=overrides, **options)
    write_pipeline(out, text, new_locks, os.path.dirname(os.path.abspath(out)))
    click.echo(out)
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
def ci_image_lock_cmd(*, context, plans, variant, repo, tags, image_id, digest, metadata, pushed, out):
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
    )
    click.echo(out)
    return 0
