"""`provision render`, `provision build` and `provision pin-base` (the pipelines are in cli/ci.py)."""

import os
import sys

import click

from provision.cli.common import check_output, load_matrix, load_plan, plan_source


def lock_options(func):
    """--lock-file and --index-url: where a framework image's requirements.lock comes from."""
    func = click.option(
        "--index-url",
        metavar="URL",
        envvar="PROVISION_INDEX_URL",
        help="Resolve the lock from this package index (a PyPI mirror) instead of pypi.org (env: PROVISION_INDEX_URL).",
    )(func)
    return click.option(
        "--lock-file",
        type=click.Path(dir_okay=False),
        help="Reuse this requirements.lock byte for byte (checked: hash-pinned lines only, agrees with the plan).",
    )(func)


def registry_option(func):
    """--registry for commands that read a base-digest file: the mirror it was pinned through."""
    return click.option(
        "--registry",
        metavar="HOST[:PORT][/PATH]",
        help="The mirror of nvidia/cuda the --base-digests file was pinned through (pin-base --registry); "
        "without it only Docker Hub refs are accepted.",
    )(func)


def read_base_digests(path: str | None, registry: str | None):
    """The base-digest file, or None; --registry without it is refused, a malformed one before any work."""
    from provision.errors import InputError
    from provision.images import pin

    if registry is not None:
        if path is None:
            raise InputError("--registry applies to --base-digests", hint="give the base-digest file it was pinned for")
        pin.source_ref(f"{pin.REPOSITORY}:x", registry)
    return pin.read_pins(path, registry) if path is not None else None


@click.command("render")
@plan_source
@click.option(
    "--variant",
    help="base, pytorch, tensorflow, onnxruntime, tensorrt or devel (default: the plan's framework, "
    "--framework onnxruntime|tensorrt included, else base).",
)
@click.option(
    "--out", required=True, type=click.Path(file_okay=False), help="Directory for the build context (new or empty)."
)
@click.option(
    "--templates", type=click.Path(file_okay=False), help="Your templates; they may extend ours as provision/<path>."
)
@click.option(
    "--base-image",
    metavar="REF",
    help="FROM this instead (a mirror, or nvidia/cuda@sha256:…); also the sdist build stage's, unless "
    "--build-base-image names another.",
)
@click.option(
    "--build-base-image",
    metavar="REF",
    help="FROM this in the sdist build stage instead of the plan's devel image (its digest: pin-base); "
    "exit 2 for an image that builds no sdists.",
)
@lock_options
@click.option(
    "--platform",
    metavar="OS/ARCH",
    help="Expect this platform (linux/amd64 or linux/arm64): exit 2 unless it is the plan's, which the "
    "lock and image are always for.",
)
@click.pass_context
def render_cmd(
    ctx,
    *,
    plan_args,
    variant,
    out,
    templates,
    base_image,
    build_base_image,
    lock_file,
    index_url,
    platform,
):
    """Write the Dockerfile and requirements.lock (framework images) for a plan's image. Needs no
    Docker engine; resolving a lock needs the package index, unless --lock-file gives one.

    A framework image's requirements.lock pins every package with its hashes, resolved by uv for the
    image's Python and platform, with the plan's CUDA and cuDNN wheels as constraints. Exit 2 when
    the plan's pin cannot be installed, or a lock contradicts the plan.
    """
    from provision.images.pylock import LOCK_NAME, PackageIndex
    from provision.images.render import plan_variant, render_image, require_image_part, write_context

    plan = require_image_part(load_plan(ctx, **plan_args), "render")
    rendered = render_image(
        plan,
        variant or plan_variant(plan),
        templates=templates,
        base_image=base_image,
        lock_file=lock_file,
        index=PackageIndex.default(index_url),
        platform=platform,
        build_base_image=build_base_image,
    )
    for line in rendered.files.get(LOCK_NAME, "").splitlines():
        if line.startswith("# note: "):
            click.echo(f"note: {line.removeprefix('# note: ')}", err=True)
    click.echo(write_context(rendered, plan, out))
    return 0


@click.command("build")
@plan_source
@click.option(
    "--variant",
    help="base, pytorch, tensorflow, onnxruntime, tensorrt or devel (default: the plan's framework, "
    "--framework onnxruntime|tensorrt included, else base).",
)
@click.option(
    "--tag",
    "repo_tag",
    metavar="REPO[:TAG]",
    default="provision",
    show_default=True,
    help="Repository (deterministic tags added) or repository:tag.",
)
@click.option("--push", is_flag=True, help="Push the tags and record the repository digests.")
@click.option(
    "--platform",
    metavar="OS/ARCH",
    help="Expect this platform (linux/amd64 or linux/arm64): exit 2 unless it is the plan's, which the image "
    "is always built for.",
)
@click.option("--base-image", metavar="REF", help="FROM this instead (a mirror, or nvidia/cuda@sha256:…).")
@click.option(
    "--base-digests",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="FROM the plan's nvidia/cuda tag at the digest pinned in FILE (provision pin-base), the sdist build "
    "stage's devel tag too; pulled by digest.",
)
@registry_option
@lock_options
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
    plan_args,
    variant,
    repo_tag,
    push,
    platform,
    base_image,
    base_digests,
    registry,
    lock_file,
    index_url,
    cache_from,
    no_cache,
    templates,
    image_lock,
):
    """Render and build a plan's image through the Docker engine, tag it deterministically, lock it.

    A base given by digest (--base-digests, or --base-image REF@sha256:…) is pulled by that digest
    first; with --base-digests an image that builds sdists builds them FROM the plan's devel tag at
    its pinned digest too (a file without it is refused, exit 2). image.lock.json records the base and its digest, the build stage's base and its digest
    (build_base, null without one), the image id, the requirements' digest and the pushed repository digests (schema: provision/images/schema/image-lock.schema.json).
    Warns when the plan's nvidia/cuda tag is past NVIDIA's end of life.

    Exit 1 when the build fails (the failing step and the end of its log are shown), 2 when a
    base digest does not resolve (nothing is built or pushed), 4 when no engine answers.
    """
    check_output(image_lock, "--image-lock")
    import tempfile

    from provision.errors import InputError
    from provision.images import pin
    from provision.images.build import (
        base_digest,
        build_image,
        client,
        pull_base,
        push_image,
        requirements_digest,
        split_ref,
        write_image_lock,
    )
    from provision.images.render import plan_variant, render_image, require_image_part, write_context

    if base_image and base_digests:
        raise InputError("give either --base-image or --base-digests, not both", hint="see provision build --help")

    pins = read_base_digests(base_digests, registry)
    plan = require_image_part(load_plan(ctx, **plan_args), "build")
    variant = variant or plan_variant(plan)
    plan_tag = pin.base_tag(plan, variant, templates)
    build_base_image = None
    if pins is not None:
        base_image = pin.pinned_ref(pins, plan_tag, base_digests)
        build_tag = pin.build_base_tag(plan, variant, templates)
        if build_tag is not None:  # the sdists' build stage starts FROM the devel tag: by digest too
            build_base_image = pin.pinned_ref(pins, build_tag, base_digests, stage="the sdist build stage's base")
    from provision.images.pylock import PackageIndex

    rendered = render_image(
        plan,
        variant,
        templates=templates,
        base_image=base_image,
        lock_file=lock_file,
        index=PackageIndex.default(index_url),
        platform=platform,
        build_base_image=build_base_image,
    )
    api = client()  # exit 4 before anything is written when no engine answers
    warning = pin.end_of_life(load_matrix(ctx), plan, plan_tag)
    if warning:
        click.echo(f"warning: {warning}", err=True)
    repo, sep, explicit = repo_tag.rpartition(":") if ":" in repo_tag.split("/")[-1] else (repo_tag, "", "")
    tags = ([f"{repo}:{explicit}"] if sep else []) + [f"{repo}:{t}" for t in rendered.tags]
    display = BuildDisplay()
    with tempfile.TemporaryDirectory(prefix="provision-build-") as tmp:
        context = write_context(rendered, plan, os.path.join(tmp, "context"))
        requirements = requirements_digest(context)
        with display:
            # by digest: pulled first (the build stage's base too), or refused before the build
            for ref in dict.fromkeys(r for r in (rendered.build_from, rendered.from_ref) if r):
                if split_ref(ref)[2]:
                    pull_base(ref, docker_client=api, on_line=display)
            result = build_image(
                context,
                tags=tags,
                platform=rendered.platform,  # the plan's (linux/arm64 for aarch64 hosts); --platform only checks it
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
        base_digest=base_digest(rendered.from_ref, docker_client=api),
        build_base=(
            {"image": rendered.build_from, "digest": base_digest(rendered.build_from, docker_client=api)}
            if rendered.build_from
            else None
        ),
        requirements=requirements,
    )
    click.echo(f"built {result.image_id} from {rendered.from_ref}")
    for tag in result.tags:
        click.echo(f"  tag {tag}")
    for digest in digests:
        click.echo(f"  pushed {digest}")
    click.echo(f"image lock: {image_lock}")
    return 0


@click.command("pin-base")
@plan_source
@click.option(
    "--variant",
    "variants",
    multiple=True,
    help="Pin only the bases these variants start from, their sdist build stage's devel tag included "
    "(repeatable; default: every nvidia/cuda tag of the plan).",
)
@click.option("--templates", type=click.Path(file_okay=False), help="Your templates (for their variants).")
@click.option(
    "--registry",
    metavar="HOST[:PORT][/PATH]",
    help="Resolve through this mirror of nvidia/cuda instead of Docker Hub; builds then pull from it.",
)
@click.option(
    "--out",
    default="base-digests.json",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The base-digest file to write or update (read by provision build --base-digests).",
)
@click.pass_context
def pin_base_cmd(ctx, *, plan_args, variants, templates, registry, out):
    """Resolve the plan's nvidia/cuda tags to their registry digests and record them.

    Asks the registry through the Docker engine (the engine's credentials apply) for each tag's
    manifest-list digest (with --variant: the variant's base, and the devel tag its sdist build
    stage starts from where it builds sdists) and writes them to --out (schema: provision/images/schema/base-digests.schema.json);
    tags pinned before keep their entries. `provision build --base-digests FILE` then builds
    FROM nvidia/cuda:<tag>@sha256:…. Warns when a tag is past NVIDIA's end of life.

    Exit 2 when a tag does not resolve (nothing is written), 4 when no engine answers.
    """
    from provision.images import pin
    from provision.images.build import client
    from provision.images.render import require_image_part

    check_output(out, "--out")
    if registry is not None:
        pin.source_ref("nvidia/cuda:x", registry)  # refuse a malformed --registry before any work
    plan = require_image_part(load_plan(ctx, **plan_args), "pin-base")
    if variants:  # each variant's base, and its build stage's (the plan's devel tag) where it builds sdists
        tags = [tag for v in variants for tag in pin.variant_tags(plan, v, templates)]
    else:
        tags = list(plan.images.values())
    if os.path.lexists(out):
        pin.read_pins(out, registry, flag="--out")  # an unreadable file is refused before the registry is asked
    api = client()  # exit 4 when no engine answers
    tags = list(dict.fromkeys(tags))
    # one warning: every tag of a plan is of the plan's CUDA release
    subject = tags[0] if len(tags) == 1 else f"the plan's {len(tags)} nvidia/cuda {plan.cuda.version} tags"
    warning = pin.end_of_life(load_matrix(ctx), plan, subject)
    if warning:
        click.echo(f"warning: {warning}", err=True)
    pins = pin.resolve_all(api, tags, registry=registry)
    pin.write_pins(out, pins, registry=registry)
    for p in pins:
        click.echo(f"{p.tag}  {p.digest}")
    click.echo(f"base digests: {out}", err=True)
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
