"""`provision render`, `provision build` and `provision ci github`."""

import os
import sys

import click

from provision.cli.common import check_output, default_variant, load_plan, plan_source


@click.command("render")
@plan_source
@click.option("--variant", help="base, pytorch, tensorflow or devel (default: the plan's framework, else base).")
@click.option(
    "--out", required=True, type=click.Path(file_okay=False), help="Directory for the build context (new or empty)."
)
@click.option(
    "--templates", type=click.Path(file_okay=False), help="Your templates; they may extend ours as provision/<path>."
)
@click.option("--base-image", metavar="REF", help="FROM this instead (a mirror, or nvidia/cuda@sha256:…).")
@click.pass_context
def render_cmd(
    ctx, *, plan_file, os_id, gpu, driver, cuda, cudnn, framework, policy, variant, out, templates, base_image
):
    """Write the Dockerfile (and its files) for a plan's image. Needs no Docker engine."""
    from provision.images.render import render_image, write_context

    plan = load_plan(
        ctx,
        plan_file=plan_file,
        os_id=os_id,
        gpu=gpu,
        driver=driver,
        cuda=cuda,
        cudnn=cudnn,
        framework=framework,
        policy=policy,
    )
    rendered = render_image(plan, default_variant(plan, variant), templates=templates, base_image=base_image)
    click.echo(write_context(rendered, plan, out))
    return 0


@click.command("build")
@plan_source
@click.option("--variant", help="base, pytorch, tensorflow or devel (default: the plan's framework, else base).")
@click.option(
    "--tag",
    "repo_tag",
    metavar="REPO[:TAG]",
    default="provision",
    show_default=True,
    help="Repository (deterministic tags added) or repository:tag.",
)
@click.option("--push", is_flag=True, help="Push the tags and record the repository digests.")
@click.option("--platform", metavar="OS/ARCH", help="Target platform, e.g. linux/amd64.")
@click.option("--base-image", metavar="REF", help="FROM this instead (a mirror, or nvidia/cuda@sha256:…).")
@click.option("--cache-from", metavar="REF", multiple=True, help="Images to use as a build cache.")
@click.option("--no-cache", is_flag=True, help="Do not use the build cache.")
@click.option("--templates", type=click.Path(file_okay=False), help="Your templates; they may extend ours.")
@click.option(
    "--image-lock",
    default="image.lock.json",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Where to write the image lock.",
)
@click.pass_context
def build_cmd(
    ctx,
    *,
    plan_file,
    os_id,
    gpu,
    driver,
    cuda,
    cudnn,
    framework,
    policy,
    variant,
    repo_tag,
    push,
    platform,
    base_image,
    cache_from,
    no_cache,
    templates,
    image_lock,
):
    """Render and build a plan's image through the Docker engine, tag it deterministically, lock it.

    Exit 1 when the build fails (the failing step and the end of its log are shown), 4 when no
    engine answers.
    """
    check_output(image_lock, "--image-lock")
    import tempfile

    from provision.images.build import build_image, client, push_image, write_image_lock
    from provision.images.render import render_image, write_context

    plan = load_plan(
        ctx,
        plan_file=plan_file,
        os_id=os_id,
        gpu=gpu,
        driver=driver,
        cuda=cuda,
        cudnn=cudnn,
        framework=framework,
        policy=policy,
    )
    variant = default_variant(plan, variant)
    rendered = render_image(plan, variant, templates=templates, base_image=base_image)
    api = client()  # exit 4 before anything is written when no engine answers
    repo, sep, explicit = repo_tag.rpartition(":") if ":" in repo_tag.split("/")[-1] else (repo_tag, "", "")
    tags = ([f"{repo}:{explicit}"] if sep else []) + [f"{repo}:{t}" for t in rendered.tags]
    display = BuildDisplay()
    with tempfile.TemporaryDirectory(prefix="provision-build-") as tmp:
        context = write_context(rendered, plan, os.path.join(tmp, "context"))
        with display:
            result = build_image(
                context,
                tags=tags,
                platform=platform,
                cache_from=list(cache_from),
                no_cache=no_cache,
                docker_client=api,
                on_line=display,
            )
            digests = push_image(list(tags), docker_client=api, on_line=display) if push else ()
    write_image_lock(
        image_lock,
        plan_digest=plan.digest(),
        variant=variant,
        result=result,
        repo_digests=digests,
        from_ref=rendered.from_ref,
    )
    click.echo(f"built {result.image_id}")
    for tag in result.tags:
        click.echo(f"  tag {tag}")
    for digest in digests:
        click.echo(f"  pushed {digest}")
    click.echo(f"image lock: {image_lock}")
    return 0


class BuildDisplay:
    """The build log, streamed: a rich status line with the current step on a terminal, plain lines otherwise."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.status = None

    def __enter__(self):
        if self.stream.isatty():
            from rich.console import Console

            self.console = Console(file=self.stream)
            self.status = self.console.status("building")
            self.status.__enter__()
        return self

    def __exit__(self, *exc):
        if self.status is not None:
            self.status.__exit__(*exc)

    def __call__(self, line: str) -> None:
        if self.status is not None:
            if line.startswith("Step "):
                self.status.update(line)
            self.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.stream, flush=True)
