"""Dockerfiles from the plan: Jinja2 templates in images/ (sandboxed, strict), one build context
per render. Never needs a Docker engine."""

import copy
import functools
import os
import re
import shutil
import tempfile
from typing import Any, NamedTuple

from provision import __version__
from provision.errors import InputError
from provision.images.pylock import (
    ARCHES,
    LOCK_NAME,
    PackageIndex,
    image_lock,
    requirement_name,
    source_builds,
    split_lock,
    stack_library_index,
    uv_platform,
)
from provision.matrix.model import DEVEL_FLAVOURS, base_flavour
from provision.plan.model import Plan, PlanStackPackage, check_image_ref, nvidia_require_cuda
from provision.resources import images_dir

USER, UID = "app", 10001
SMOKE_DIR = "/opt/provision"  # the smoke test's place in an image: smoke.py and smoke.json


class RenderedImage(NamedTuple):
    variant: str
    dockerfile: str
    files: dict[str, str]  # context-relative path -> content (Dockerfile included)
    from_ref: str
    tags: tuple[str, ...]  # repository-relative tags: "pytorch2.5.1-cuda12.4.1-ubuntu22.04", "plan-<digest>-pytorch"
    labels: dict[str, str]
    platform: str = "linux/amd64"  # what the image is built for: the plan's (linux/arm64 on aarch64 hosts)
    build_from: str | None = None  # the sdist build stage's FROM (None: the image has no build stage)


def _yaml(path: str) -> Any:
    """A YAML file of ours (images/) or of a user's template directory: parsed once per content
    stamp (rendering many images reads the same two files for each), a fresh copy for each caller.
    Read as untrusted (provision.documents): no symbolic link, bounded, no aliases or duplicate keys."""
    stat = os.lstat(path)
    return copy.deepcopy(_parsed_yaml(path, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=16)
def _parsed_yaml(path: str, mtime_ns: int, size: int) -> Any:
    from provision.documents import load_yaml, read_text

    return load_yaml(read_text(path, "template data"), path)


def variants(templates: str | None = None) -> dict[str, dict[str, Any]]:
    """Our variants, plus those a user's template directory declares in its variants.yaml."""
    found = dict(_yaml(os.path.join(images_dir(), "variants.yaml"))["variants"])
    if templates and os.path.exists(os.path.join(templates, "variants.yaml")):
        found.update((_yaml(os.path.join(templates, "variants.yaml")) or {}).get("variants", {}))
    return found


def make_env(templates: str | None = None):
    """Sandboxed, StrictUndefined. A user's directory comes first; ours stay reachable as
    provision/<path> so user templates can extend them ({% extends "provision/base/Dockerfile.j2" %})."""
    from jinja2 import ChoiceLoader, FileSystemLoader, PrefixLoader, StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    ours = FileSystemLoader(images_dir())
    loaders = [PrefixLoader({"provision": ours})]
    if templates:
        if not os.path.isdir(templates):
            raise InputError(
                f"--templates {templates!r} is not a directory", hint="point it at a folder of *.j2 templates"
            )
        loaders.insert(0, FileSystemLoader(templates))
    loaders.append(ours)
    return SandboxedEnvironment(
        loader=ChoiceLoader(loaders),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _variant(variant: str, templates: str | None) -> dict[str, Any]:
    known = variants(templates)
    if variant not in known:
        raise InputError(f"unknown variant {variant!r}", hint=f"variants: {', '.join(sorted(known))}")
    return known[variant]


def _satisfies(version: str, spec: str, who: str = "the framework's") -> bool:
    """Whether an interpreter (``3.11``) is in a declared Requires-Python range (``>=3.11,<3.15``).
    Every clause counts (!=3.9.*, ~=3.10 included); a range that is not PEP 440 is refused, never
    read as "any Python"."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(spec).contains(version, prereleases=True)
    except InvalidSpecifier:
        raise InputError(
            f"{who} Requires-Python {spec!r} is not a version range",
            hint="re-plan with this provision (the catalogue's ranges are PEP 440 specifiers)",
        ) from None


def content_digest(files: dict[str, str]) -> str:
    """sha256 over a build context (names and contents): plans that render the same files share an image."""
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(files):
        for part in (name, files[name]):
            data = part.encode()
            digest.update(len(data).to_bytes(8, "big") + data)
    return "sha256:" + digest.hexdigest()


def image_tags(plan: Plan, variant: str, files: dict[str, str], platform: str | None = None) -> tuple[str, ...]:
    """The readable tag (what is inside) and the content tag (exactly which build context).

    Neither names a GPU or a plan: plans for different GPUs that render the same context share both,
    so a CI matrix builds and pushes each image once (image.lock.json maps plans to images). An
    image for another platform than linux/amd64 says so in both (…-arm64): the same Dockerfile built
    for two platforms is two images."""
    fw = f"{plan.framework.name}{plan.framework.version}" if plan.framework and variant != "base" else variant
    content = content_digest(files).removeprefix("sha256:")[:12]
    arch = platform_suffix(platform or plan.platform)
    return (f"{fw}-cuda{plan.cuda.version}-{plan.image_os}{arch}", f"content-{content}-{variant}{arch}")


def variant_stack(spec: dict[str, Any], plan: Plan) -> tuple[PlanStackPackage, ...]:
    """The stack packages a variant installs: all of the plan's, in a variant whose framework is
    the plan's framework (pytorch with --with deepspeed) or the plan's stack framework
    (``framework: onnxruntime`` for --framework onnxruntime); none in base and devel."""
    needs = spec.get("framework")
    if not needs or not plan.stack:
        return ()
    if plan.framework is not None and plan.framework.name == needs:
        return plan.stack
    if any(p.role == "framework" and p.id == needs for p in plan.stack):
        return plan.stack
    return ()


def plan_variant(plan: Plan) -> str:
    """The variant a plan's image is by default: its framework's (pytorch, tensorflow), its stack
    framework's (onnxruntime, tensorrt for --framework onnxruntime|tensorrt), else base."""
    if plan.framework is not None:
        return plan.framework.name
    head = next((p for p in plan.stack if p.role == "framework"), None)
    return head.id if head is not None else "base"


def plan_base_flavour(plan: Plan) -> str | None:
    """The flavour of the plan's base image (the resolver's choice), or None when it is none of its images."""
    return next((f for f, ref in sorted(plan.images.items()) if ref == plan.base_image), None)


def start_flavour(spec: dict[str, Any], plan: Plan) -> str:
    """The nvidia/cuda flavour a variant (images/variants.yaml ``spec``) starts FROM for ``plan``:
    the variant's own, but a framework variant whose build takes CUDA and cuDNN from the image
    starts where the resolver's base image does (provision.matrix.model.base_flavour: the build's
    ``libraries``, not its name), a variant that installs stack packages starts from the plan's
    base image (the resolver chose it for the stack: devel where DeepSpeed compiles its ops with
    nvcc at run time), and devel takes cudnn-devel when the plan has a cuDNN.
    render_image and pin-base's base_tag both ask this."""
    flavour = spec["flavour"]
    if spec.get("framework") and plan.framework is not None and plan.framework.libraries != "wheels":
        flavour = base_flavour(plan.framework.libraries)
    if variant_stack(spec, plan):
        flavour = plan_base_flavour(plan) or flavour
        check_nvcc(plan)
        return flavour
    if flavour == "devel" and plan.cudnn is not None and "cudnn-devel" in plan.images:
        flavour = "cudnn-devel"
    return flavour


def check_nvcc(plan: Plan) -> None:
    """A stack package that compiles with nvcc at run time (DeepSpeed's JIT ops) needs the plan's
    base to be a devel image whose CUDA is the framework build's (op_builder refuses an nvcc of
    another CUDA than torch.version.cuda): the plan says so, and a plan that does not is refused."""
    needing = [p.id for p in plan.stack if p.needs_nvcc]
    if not needing:
        return
    flavour = plan_base_flavour(plan)
    if flavour not in DEVEL_FLAVOURS:
        raise InputError(
            f"{', '.join(needing)} compiles its ops with nvcc at run time, and the plan's base image "
            f"{plan.base_image} is not a devel image",
            hint="re-plan with this provision (the resolver gives such a stack a devel base): "
            f"provision plan --os {plan.os.id} --gpu {plan.gpu.id} ... --lock FILE",
        )
    fw = plan.framework
    if fw is not None and ".".join(plan.cuda.version.split(".")[:2]) != ".".join(fw.cuda.split(".")[:2]):
        raise InputError(
            f"{', '.join(needing)} needs nvcc of the framework build's CUDA {fw.cuda}; the plan's devel "
            f"image has CUDA {plan.cuda.version}",
            hint=f"re-plan with --cuda {fw.cuda}",
        )


def build_stage_tag(spec: dict[str, Any], plan: Plan) -> str | None:
    """The plan's nvidia/cuda reference the sdist build stage of a variant (images/variants.yaml
    ``spec``) starts FROM, or None when the variant builds no sdists: the image's own base when
    that is a devel image already (DeepSpeed's), else the plan's devel image. render_image and
    pin-base's build_base_tag both ask this, so a build stage is pinned by digest as its image is."""
    sdists = source_builds(variant_stack(spec, plan))
    if not sdists:
        return None
    flavour = start_flavour(spec, plan)
    tag = plan.images.get(flavour) if flavour in DEVEL_FLAVOURS else plan.images.get("devel")
    if tag is None:
        raise InputError(
            f"the plan has no nvidia/cuda devel image for {plan.image_os} to build {', '.join(sdists)} in",
            hint=f"published: {', '.join(sorted(plan.images))}",
        )
    return tag


def require_image_part(plan: Plan, command: str) -> Plan:
    """The plan, unless it is host-only (InputError): render, build, pin-base and ci need its images."""
    if plan.host_only:
        raise InputError(
            f"the plan has no image part (--host-only): {command} needs its CUDA, base images and framework",
            hint=f"plan with the image part (without --host-only; --image-os picks the images' OS): provision plan "
            f"--os {plan.os.id} --gpu {plan.gpu.id} --lock FILE",
        )
    return plan


def check_platform(plan: Plan, platform: str | None) -> str:
    """The platform an image of the plan is built for: the plan's. A `platform` given must name it
    (InputError otherwise): --platform checks the plan, it does not retarget it."""
    if platform is None or platform == plan.platform:
        return plan.platform
    if platform not in ARCHES:
        raise InputError(f"--platform {platform!r} is not supported", hint=f"one of: {', '.join(ARCHES)}")
    raise InputError(
        f"--platform {platform} is not the plan's platform ({plan.platform}, {plan.os.arch} hosts)",
        hint=f"drop --platform (the plan builds for {plan.platform}); for {platform} hosts, plan for a GPU "
        f"catalogued on them: provision plan --os {plan.os.id} --gpu GPU --lock FILE",
    )


def platform_suffix(platform: str) -> str:
    """What an image tag adds for its platform: nothing for linux/amd64 (tags as before), "-arm64"."""
    return "" if platform == "linux/amd64" else "-" + platform.split("/")[1]


def supported_sms(plan: Plan, variant_framework: bool) -> str:
    """The GPUs an image serves, as compute capabilities: the framework build's SASS (and PTX), else
    what the plan's CUDA can build for. Replaces a GPU id, which would split identical images."""
    fw = plan.framework if variant_framework else None
    if fw is not None and (fw.compute_capabilities or fw.ptx):
        sms = " ".join(f"sm_{cc.replace('.', '')}" for cc in fw.compute_capabilities or ())
        return (sms + (f" +PTX compute_{fw.ptx.replace('.', '')}" if fw.ptx else "")).strip()
    if plan.cuda.compute_capabilities:
        return " ".join(f"sm_{cc.replace('.', '')}" for cc in plan.cuda.compute_capabilities)
    return "unknown"


def render_image(
    plan: Plan,
    variant: str,
    *,
    templates: str | None = None,
    base_image: str | None = None,
    lock_file: str | None = None,
    index: PackageIndex | None = None,
    platform: str | None = None,
    build_base_image: str | None = None,
) -> RenderedImage:
    """The build context of one image. `base_image` replaces the plan's tag in every FROM (the
    image's and its sdist build stage's); `build_base_image` replaces the build stage's only
    (pin-base's digest of the plan's devel tag), and is refused for an image without one.
    A framework image gets requirements.lock: `lock_file`
    (checked, reused byte for byte) or a fresh uv resolution from `index` for the image's Python and
    `platform` (the plan's: linux/arm64 for an aarch64 host, else linux/amd64); a lock that
    contradicts the plan is refused. A `platform` given (--platform) must be the plan's: the plan's
    images, wheels and host packages are chosen for one architecture, and another would get an image
    the catalogue never confirmed (amd64-only image sets, aarch64-only GPUs)."""
    require_image_part(plan, "render")
    plan.check()
    platform = check_platform(plan, platform)
    for ref, flag in ((base_image, "--base-image"), (build_base_image, "--build-base-image")):
        if ref is not None:
            check_image_ref(ref, flag)
    spec = _variant(variant, templates)
    needs = spec.get("framework")
    stack = variant_stack(spec, plan)
    if needs and not stack and (plan.framework is None or plan.framework.name != needs):
        have = f"a {plan.framework.name} plan" if plan.framework else _stack_plan(plan)
        raise InputError(
            f"variant {variant!r} needs a plan with --framework {needs}==VERSION, got {have}",
            hint=f"provision plan ... --framework {needs}==VERSION --lock plan.lock.json",
        )
    image_os_name = plan.image_os
    image_os = _image_os(image_os_name)
    flavour = start_flavour(spec, plan)
    if flavour not in plan.images:
        raise InputError(
            f"the plan has no nvidia/cuda {flavour} image for {image_os_name}",
            hint=f"published: {', '.join(sorted(plan.images))}",
        )
    from_ref = base_image or plan.images[flavour]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*", from_ref):
        raise InputError(
            f"--base-image {from_ref!r} is not an image reference", hint="e.g. registry.local/nvidia/cuda@sha256:…"
        )
    fw = plan.framework if needs or variant == "devel" else None
    labels = _labels(plan, variant, spec, from_ref, fw=fw, stack=stack, platform=platform, needs=bool(needs))
    python = _pythons(image_os, fw.requires_python if fw else None, image_os_name, stack)
    if lock_file is not None and fw is None and not stack:
        raise InputError(
            f"--lock-file: the {variant} image of this plan installs no Python packages",
            hint="a lock is for framework images (plan with --framework NAME==VERSION)",
        )
    lock = None
    if fw is not None or stack:  # resolved first: the labels say what the lock installs (2.15.0 -> 2.15.0.post1)
        target = uv_platform(image_os["glibc"], platform)
        lock = image_lock(fw, python=python["version"], platform=target, lock_file=lock_file, index=index, stack=stack)
        installed = lock.pins.get(_canonical(fw.package)) if fw is not None else None
        if installed and installed != fw.version:
            labels["org.opencontainers.image.version"] = installed
            labels["io.provision.framework"] = fw.requirement.replace(f"=={fw.version}", f"=={installed}")
    sdists = source_builds(stack)
    smoke = lock is not None and bool(needs)  # framework and stack images carry the smoke test
    indexes = [i for i in (fw.index_url if fw else None, stack_library_index(stack)) if i]
    torch = (fw is not None and fw.name == "pytorch") or any(p.id == "torch-tensorrt" for p in stack)
    toolchain = [*image_os["compiler"], *python["devel"]]
    build = _build_stage(
        spec, plan, sdists, base_image=build_base_image or base_image, python=python, toolchain=toolchain
    )
    if build_base_image is not None and build is None:
        raise InputError(
            f"--build-base-image: the {variant} image of this plan builds no sdists, so it has no build stage",
            hint="drop --build-base-image (--base-image sets the image's FROM)",
        )
    image = {
        "description": spec["description"],
        "from_ref": from_ref,
        "pkg_manager": image_os["pkg_manager"],
        "user": USER,
        "uid": UID,
        "python": python,
        "extra_index_url": indexes[0] if indexes else None,
        "extra_index_urls": indexes,
        "labels": labels,
        "nvidia_require_cuda": nvidia_require_cuda(plan),
        "provision_version": __version__,
        # a C and C++ compiler and the Python headers: torch.compile (Inductor, Triton) compiles at run time
        "toolchain": toolchain if torch else [],
        "sdist_build": build,
        "smoke_dir": SMOKE_DIR if smoke else None,
    }
    env = make_env(templates)
    from jinja2 import TemplateError

    try:
        dockerfile = env.get_template(spec["template"]).render(plan={**plan.to_dict()}, image=image)
    except TemplateError as exc:
        raise InputError(
            f"template {spec['template']} failed to render: {exc}",
            hint="check your --templates; every variable must exist (StrictUndefined)",
        ) from None
    files = {"Dockerfile": dockerfile, **_lock_files(plan, lock, sdists, fw=fw, stack=stack, smoke=smoke)}
    return RenderedImage(
        variant,
        dockerfile,
        files,
        from_ref,
        image_tags(plan, variant, files, platform),
        labels,
        platform,
        build["from_ref"] if build else None,
    )


# requirements.lock split for a build stage: the image's wheels, the sdists, the wheels only their builds need
WHEELS_LOCK, SDISTS_LOCK, BUILD_LOCK = "wheels.lock", "sdists.lock", "build.lock"
HASH_WHEELS = "hash_wheels.py"  # the build stage's record of the wheels it built (their sha256)
SMOKE, SMOKE_PROMISES = "smoke.py", "smoke.json"


def _lock_files(plan: Plan, lock, sdists, *, fw, stack, smoke: bool) -> dict[str, str]:
    """The context's files besides the Dockerfile: the lock (split for a build stage where the image
    builds sdists: wheels.lock for the image, sdists.lock and build.lock for the stage only, with the
    script that records the built wheels' hashes), the smoke test and its promises."""
    files: dict[str, str] = {}
    if lock is None:
        return files
    files[LOCK_NAME] = lock.text
    if sdists:
        # the build requirements only the sdists' builds need (setuptools, wheel) stay in the build stage
        files[WHEELS_LOCK], files[SDISTS_LOCK], files[BUILD_LOCK] = split_lock(lock.text, sdists, lock.build_only)
        files[HASH_WHEELS] = _image_file("files", HASH_WHEELS)
    if smoke:
        files[SMOKE] = _image_file("smoke", SMOKE)
        files[SMOKE_PROMISES] = smoke_promises(plan, fw, stack, lock.pins)
    return files


def _image_file(folder: str, name: str) -> str:
    """A static file of ours (images/files/, images/smoke/), copied verbatim into build contexts."""
    from provision.documents import read_text

    return read_text(os.path.join(images_dir(), folder, name), "image file")


def _labels(plan: Plan, variant: str, spec, from_ref: str, *, fw, stack, platform: str, needs: bool) -> dict[str, str]:
    head = next((p for p in stack if p.role == "framework"), None)  # --framework onnxruntime|tensorrt
    return {
        "org.opencontainers.image.title": f"provision-{variant}",
        "org.opencontainers.image.description": spec["description"],
        "org.opencontainers.image.version": fw.version if fw else head.install if head else plan.cuda.version,
        "org.opencontainers.image.base.name": from_ref,
        "io.provision.variant": variant,
        "io.provision.image-os": plan.image_os,
        "io.provision.sm": supported_sms(plan, fw is not None and needs),
        "io.provision.driver-floor": plan.driver_floor,
        "io.provision.cuda": plan.cuda.version,
        "io.provision.cudnn": plan.cudnn.version if plan.cudnn else "none",
        "io.provision.framework": fw.requirement if fw else head.requirement if head else "none",
        **({"io.provision.stack": " ".join(p.requirement for p in stack)} if stack else {}),
        # an arm64 build of the same context is another image (amd64 contexts are as before)
        **({"io.provision.platform": platform} if platform != "linux/amd64" else {}),
    }


def _build_stage(spec, plan: Plan, sdists, *, base_image, python, toolchain) -> dict[str, Any] | None:
    """The build stage of an image with sdists: FROM the plan's devel image (build_stage_tag: the
    image's own base when that is devel already; `base_image` replaces it), with the compilers and
    Python headers, and the environment the sdists' builds take (images/build.yaml)."""
    if not sdists:
        return None
    build_ref = base_image or build_stage_tag(spec, plan)
    return {
        "from_ref": build_ref,
        "sdists": list(sdists),
        "packages": [*python["packages"], *toolchain],
        "env": build_env(sdists),
    }


_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
_ENV_VALUE = re.compile(r"[A-Za-z0-9._:/-]{0,200}")


def build_env(sdists) -> dict[str, str]:
    """What the build stage sets for `pip wheel` (images/build.yaml): the variables of every row
    whose `match` names one of the sdists built (TensorRT's frontend: no nested pip install)."""
    rows = _yaml(os.path.join(images_dir(), "build.yaml"))["builds"]
    env: dict[str, str] = {}
    for row in rows:
        if any(re.fullmatch(row["match"], name) for name in sdists):
            for key, value in row["env"].items():
                if not _ENV_NAME.fullmatch(key) or not _ENV_VALUE.fullmatch(str(value)):
                    raise InputError(
                        f"images/build.yaml: {key!r} is not a plain variable", hint="fix images/build.yaml"
                    )
                env[key] = str(value)
    return dict(sorted(env.items()))


def _image_os(name: str) -> dict[str, Any]:
    os_facts = _yaml(os.path.join(images_dir(), "os.yaml"))["image_os"]
    if name not in os_facts:
        raise InputError(f"no image facts for {name!r} in images/os.yaml", hint="add the OS there")
    return os_facts[name]


def _stack_plan(plan: Plan) -> str:
    head = next((p for p in plan.stack if p.role == "framework"), None)
    return f"a {head.id} plan" if head else "a plan without a framework"


def _pythons(image_os: dict[str, Any], requires: str | None, os_name: str, stack=()) -> dict[str, Any]:
    """The OS's first interpreter that satisfies the framework wheel's Requires-Python and every
    stack package's declared range (PlanStackPackage.requires_python, where the build declares one)."""
    ranges = [(requires, "the framework's")] if requires else []
    ranges += [(r, f"{p.id} {p.version}'s") for p in stack if (r := p.requires_python)]
    if not ranges:
        return image_os["python"][0]
    for option in image_os["python"]:
        if all(_satisfies(option["version"], r, who) for r, who in ranges):
            return option
    offered = ", ".join(o["version"] for o in image_os["python"])
    wants = "; ".join(f"{who} Requires-Python {r}" for r, who in ranges)
    raise InputError(
        f"no Python on {os_name} images satisfies {wants} (offered: {offered})",
        hint="plan an older release of the framework or package, or another OS",
    )


def smoke_promises(plan: Plan, fw, stack: tuple[PlanStackPackage, ...], pins: dict[str, str]) -> str:
    """smoke.json: what the plan promises, as data for the smoke test (images/smoke/smoke.py):
    each planned package's import, distribution and locked version, the cuDNN major torch must
    load, the ONNX Runtime providers (TensorRT's where TensorRT is planned), DeepSpeed's ops."""
    import json

    table = _yaml(os.path.join(images_dir(), "smoke", "packages.yaml"))["packages"]
    planned = ([(fw.name, fw.package)] if fw is not None else []) + [(p.id, requirement_name(p)) for p in stack]
    packages = []
    for ident, dist in planned:
        row = table.get(ident)
        if row is None:
            raise InputError(f"images/smoke/packages.yaml has no row for {ident!r}", hint="add its import name there")
        version = pins.get(_canonical(dist))
        packages.append({"id": ident, "distribution": dist, "module": row["module"], "version": version})
    ids = {ident for ident, _ in planned}
    doc: dict[str, Any] = {"schema": 1, "packages": packages}
    if "pytorch" in ids:
        doc["torch"] = {"cudnn_major": int(plan.cudnn.version.split(".")[0]) if plan.cudnn else None}
    if "tensorflow" in ids:
        doc["tensorflow"] = {"gpu": True}
    if "onnxruntime" in ids:
        providers = ["CUDAExecutionProvider"] + (["TensorrtExecutionProvider"] if "tensorrt" in ids else [])
        doc["onnxruntime"] = {"providers": providers}
    if "deepspeed" in ids:
        doc["deepspeed"] = {"ops": list(table["deepspeed"]["ops"])}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def write_context(rendered: RenderedImage, plan: Plan, out: str) -> str:
    """Write the build context to `out` atomically: all of it, or nothing."""
    import json

    out = os.path.abspath(out)
    link = os.path.islink(out)  # a symbolic link planted at --out is replaced, never written through
    if not link and os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise InputError(f"--out {out!r} exists and is not an empty directory", hint="choose a new or empty directory")
    parent = os.path.dirname(out)
    try:
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".provision-render-", dir=parent)
    except OSError as exc:
        raise InputError(f"cannot write to {parent!r}: {exc.strerror}", hint="choose a writable --out") from None
    try:
        for name, content in {**rendered.files, "plan.lock.json": json.dumps(plan.to_dict(), indent=2) + "\n"}.items():
            # a new file in the fresh staging directory (O_EXCL: never an existing file or link)
            fd = os.open(os.path.join(staging, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                handle.write(content)
        if link:
            os.unlink(out)
        elif os.path.isdir(out):
            os.rmdir(out)
        os.rename(staging, out)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise InputError(
            f"cannot write the build context to {out!r}: {exc.strerror}", hint="choose a writable --out"
        ) from None
    return out
