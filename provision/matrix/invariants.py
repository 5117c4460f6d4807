"""Data invariants over a loaded matrix: dangling ids, order, sources, coverage.

The JSON Schemas check each file's shape; these check what a schema cannot: references between
files, newest-first order, and that every fact cites a known source.
"""

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from provision.matrix.model import PLATFORMS, Matrix
from provision.versions import DottedVersion as Version


class Problem(NamedTuple):
    file: str
    key_path: str
    problem: str
    kind: str  # dangling-id | order | source | coverage | duplicate | range

    def __str__(self) -> str:
        return f"{self.file}: {self.key_path}: {self.problem}"


def _sources_cited(raw: dict[str, Any]) -> Iterable[tuple[str, str, str]]:
    """Yield (file, key path, source key) for every source reference in the raw documents."""

    def walk(file: str, node: Any, path: str) -> Iterable[tuple[str, str, str]]:
        if isinstance(node, dict):
            for key, value in node.items():
                sub = f"{path}.{key}" if path else str(key)
                if key in ("source", "arch_source") and isinstance(value, str):
                    yield file, sub, value
                elif key == "sources" and isinstance(value, list):
                    for i, v in enumerate(value):
                        yield file, f"{sub}[{i}]", v
                else:
                    yield from walk(file, value, sub)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                yield from walk(file, item, f"{path}[{i}]")

    for name, doc in raw.items():
        if name != "sources":
            yield from walk(f"{name}.yaml", doc, "")


def _arch_coverage(matrix: Matrix) -> list[Problem]:
    """Every GPU's host architecture is served end to end: an OS whose NVIDIA repository has a
    directory for it, nvidia/cuda images published for its platform, and framework wheels built for
    it; and a GPU narrows its architecture's kernel modules, never widens them."""
    problems = []
    os_arches = {arch for o in matrix.os_releases for arch, _ in o.arches}
    image_platforms = {p for rel in matrix.images for p in rel.platforms}
    wheel_arches = {a for fw in matrix.frameworks for r in fw.releases for b in r.builds for a in b.arches}
    for i, g in enumerate(matrix.gpus):
        where = f"gpus[{i}]({g.id})"
        for arch in g.host_arches:
            missing = [
                what
                for what, ok in (
                    ("no OS in os.yaml has a repository directory for it (arches)", arch in os_arches),
                    (
                        f"no nvidia/cuda release in images.yaml is published for {PLATFORMS[arch]}",
                        PLATFORMS[arch] in image_platforms,
                    ),
                    ("no framework build in frameworks.yaml publishes wheels for it", arch in wheel_arches),
                )
                if not ok
            ]
            for what in missing:
                problems.append(Problem("gpus.yaml", f"{where}.host_arches", f"{arch} host: {what}", "coverage"))
        arch_ids = {a.id for a in matrix.architectures}
        if g.kernel_modules is not None and g.architecture in arch_ids:
            allowed = matrix.architecture(g.architecture).kernel_modules
            extra = [k for k in g.kernel_modules if k not in allowed]
            if extra:
                problems.append(
                    Problem(
                        "gpus.yaml",
                        f"{where}.kernel_modules",
                        f"{'/'.join(extra)} is not a kernel-module flavour of {g.architecture} ({'/'.join(allowed)})",
                        "dangling-id",
                    )
                )
    return problems


def _newest_first(values: Sequence[Version]) -> int | None:
    """Index of the first item that is not strictly older than the one before it."""
    for i in range(1, len(values)):
        if not values[i] < values[i - 1]:
            return i
    return None


def check_invariants(matrix: Matrix, raw: dict[str, Any]) -> list[Problem]:  # noqa: PLR0915 - one rule a paragraph
    problems: list[Problem] = []

    def add(file: str, path: str, text: str, kind: str) -> None:
        problems.append(Problem(file, path, text, kind))

    # Sources: every cited key exists; every row that must cite one does (schema: minItems).
    for file, path, key in _sources_cited(raw):
        if key not in matrix.sources:
            add(file, path, f"cites unknown source {key!r} (not in sources.yaml)", "source")

    # Unique ids and aliases across OS and GPUs.
    seen: dict[str, str] = {}
    for i, o in enumerate(matrix.os_releases):
        for name in (o.id, *o.aliases):
            if name in seen:
                add("os.yaml", f"os[{i}]({o.id})", f"id or alias {name!r} also used by {seen[name]}", "duplicate")
            seen[name] = o.id
    seen = {}
    for i, g in enumerate(matrix.gpus):
        for name in (g.id, *g.aliases):
            if name in seen:
                add("gpus.yaml", f"gpus[{i}]({g.id})", f"id or alias {name!r} also used by {seen[name]}", "duplicate")
            seen[name] = g.id
    for i, grp in enumerate(matrix.gpu_groups):
        if grp.id in seen:
            add("gpus.yaml", f"groups[{i}]({grp.id})", f"group id {grp.id!r} also names a GPU", "duplicate")

    os_ids = set(matrix.os_ids())
    gpu_ids = {g.id for g in matrix.gpus}
    arch_ids = {a.id for a in matrix.architectures}
    mig_ids = {s.id for s in matrix.mig}
    image_os = {suffix for rel in matrix.images for suffix in rel.os}

    for i, o in enumerate(matrix.os_releases):
        if o.cuda_image_os not in image_os:
            add(
                "os.yaml",
                f"os[{i}]({o.id}).cuda_image_os",
                f"no nvidia/cuda image in images.yaml has OS {o.cuda_image_os!r}",
                "dangling-id",
            )

    # GPUs -> architectures, MIG sets; architectures own the GPU's compute capability.
    for i, g in enumerate(matrix.gpus):
        if g.architecture not in arch_ids:
            add(
                "gpus.yaml",
                f"gpus[{i}]({g.id}).architecture",
                f"unknown architecture {g.architecture!r}",
                "dangling-id",
            )
        elif g.compute_capability not in matrix.architecture(g.architecture).compute_capabilities:
            add(
                "gpus.yaml",
                f"gpus[{i}]({g.id}).compute_capability",
                f"{g.compute_capability} is not listed for architecture {g.architecture}",
                "dangling-id",
            )
        if g.mig is not None and g.mig not in mig_ids:
            add("gpus.yaml", f"gpus[{i}]({g.id}).mig", f"unknown MIG profile set {g.mig!r}", "dangling-id")
        if not any(s.compute_capability == g.compute_capability for s in matrix.compute_support):
            add(
                "cuda.yaml",
                "compute_capabilities",
                f"no CUDA support range for compute capability {g.compute_capability} ({g.id})",
                "coverage",
            )
    problems.extend(_arch_coverage(matrix))
    for i, grp in enumerate(matrix.gpu_groups):
        for member in grp.members:
            if member not in gpu_ids:
                add("gpus.yaml", f"groups[{i}]({grp.id}).members", f"unknown GPU {member!r}", "dangling-id")

    # Driver branches: order, releases inside their branch, references, packaging coverage.
    branches = [Version(str(b.branch)) for b in matrix.drivers]
    if (bad := _newest_first(branches)) is not None:
        add("drivers.yaml", f"branches[{bad}]", "branches must be listed newest first, without repeats", "order")
    for i, b in enumerate(matrix.drivers):
        where = f"branches[{i}]({b.branch})"
        if b.default_module not in b.kernel_modules:
            add(
                "drivers.yaml",
                f"{where}.default_module",
                f"{b.default_module} is not one of {list(b.kernel_modules)}",
                "dangling-id",
            )
        if (bad := _newest_first([r.version for r in b.releases])) is not None:
            add(
                "drivers.yaml",
                f"{where}.releases[{bad}]",
                "releases must be listed newest first, without repeats",
                "order",
            )
        for j, r in enumerate(b.releases):
            if r.version.release[0] != b.branch:
                add("drivers.yaml", f"{where}.releases[{j}]", f"{r.version} is not a {b.branch} release", "dangling-id")
            for os_id in r.os:
                if os_id not in os_ids:
                    add("drivers.yaml", f"{where}.releases[{j}].os", f"unknown OS {os_id!r}", "dangling-id")
        for os_id in sorted({o for r in b.releases for o in r.os}):
            for module in b.kernel_modules:
                if matrix.packaging_for(os_id, b.branch, module) is None:
                    add(
                        "drivers.yaml",
                        "packaging",
                        f"no {os_id} packaging entry for branch {b.branch} ({module} modules)",
                        "coverage",
                    )
    for i, p in enumerate(matrix.driver_packaging):
        for os_id in p.os:
            if os_id not in os_ids:
                add("drivers.yaml", f"packaging[{i}].os", f"unknown OS {os_id!r}", "dangling-id")

    # CUDA: order, minimum drivers, OS ids, a minor-compat floor per major.
    if (bad := _newest_first([c.version for c in matrix.cuda])) is not None:
        add("cuda.yaml", f"releases[{bad}]", "releases must be listed newest first, without repeats", "order")
    for i, c in enumerate(matrix.cuda):
        for os_id in c.os:
            if os_id not in os_ids:
                add("cuda.yaml", f"releases[{i}]({c.version}).os", f"unknown OS {os_id!r}", "dangling-id")
        if matrix.minor_compat_floor(c.version.release[0]) is None:
            add(
                "cuda.yaml",
                "minor_version_compatibility",
                f"missing minimum driver for CUDA {c.version.release[0]}.x",
                "coverage",
            )

    if (bad := _newest_first([c.version for c in matrix.cudnn])) is not None:
        add("cudnn.yaml", f"releases[{bad}]", "releases must be listed newest first, without repeats", "order")

    for fi, fw in enumerate(matrix.frameworks):
        if (bad := _newest_first([r.version for r in fw.releases])) is not None:
            add(
                "frameworks.yaml",
                f"frameworks[{fi}]({fw.id}).releases[{bad}]",
                "releases must be listed newest first, without repeats",
                "order",
            )
        for ri, rel in enumerate(fw.releases):
            for bi, b in enumerate(rel.builds):
                at = f"frameworks[{fi}]({fw.id}).releases[{ri}]({rel.version}).builds[{bi}]({b.variant})"
                if b.cudnn_spec is not None and (b.cudnn is None or not b.cudnn_spec.contains(b.cudnn)):
                    add(
                        "frameworks.yaml", f"{at}.cudnn_spec", f"{b.cudnn_spec} does not admit cudnn {b.cudnn}", "range"
                    )
                for arch, *_ in b.arch_sms:
                    if arch not in b.arches:
                        add(
                            "frameworks.yaml",
                            f"{at}.arch_sms.{arch}",
                            f"{arch} is not in the build's arches",
                            "coverage",
                        )
            defaults = [b.variant for b in rel.builds if b.default]
            if len(defaults) > 1:
                add(
                    "frameworks.yaml",
                    f"frameworks[{fi}]({fw.id}).releases[{ri}]({rel.version})",
                    f"more than one default build: {defaults}",
                    "duplicate",
                )

    cuda_versions = {c.version for c in matrix.cuda}
    if (bad := _newest_first([i.cuda for i in matrix.images])) is not None:
        add("images.yaml", f"releases[{bad}]", "releases must be listed newest first, without repeats", "order")
    for i, img in enumerate(matrix.images):
        has_cudnn_flavour = any(f.startswith("cudnn-") for f in img.flavours)
        if has_cudnn_flavour != (img.cudnn_marker is not None):
            add(
                "images.yaml",
                f"releases[{i}]({img.cuda}).cudnn",
                "cudnn flavours and the cudnn entry must come together",
                "coverage",
            )
        if img.cudnn_os is not None and not set(img.cudnn_os) <= set(img.os):
            add(
                "images.yaml",
                f"releases[{i}]({img.cuda}).cudnn.os",
                "names an OS the release does not list",
                "coverage",
            )
        newer = img.superseded_by
        if newer is not None and (
            newer <= img.cuda or newer.release[:2] != img.cuda.release[:2] or matrix.image(newer) is None
        ):
            add(
                "images.yaml",
                f"releases[{i}]({img.cuda}).eol.superseded_by",
                f"{newer} is not a listed newer update of CUDA {img.cuda.release[0]}.{img.cuda.release[1]}",
                "dangling-id",
            )
        # an image set carries a cuda.yaml toolkit release: its own number's, or `toolkit`'s
        toolkit = img.carries
        if img.toolkit_source is None and toolkit not in cuda_versions:
            add(
                "images.yaml",
                f"releases[{i}]({img.cuda})",
                f"CUDA {img.cuda} is not a cuda.yaml toolkit release: name the one the images carry (toolkit)",
                "dangling-id",
            )
        elif img.toolkit_source is not None and (
            toolkit not in cuda_versions or toolkit.release[:2] != img.cuda.release[:2] or toolkit >= img.cuda
        ):
            add(
                "images.yaml",
                f"releases[{i}]({img.cuda}).toolkit.version",
                f"{toolkit} is not an older cuda.yaml release of CUDA {img.cuda.release[0]}.{img.cuda.release[1]}",
                "dangling-id",
            )

    if (bad := _newest_first([t.version for t in matrix.toolkit])) is not None:
        add(
            "container_toolkit.yaml",
            f"releases[{bad}]",
            "releases must be listed newest first, without repeats",
            "order",
        )

    for si, s in enumerate(matrix.mig):
        for pi, p in enumerate(s.profiles):
            where = f"profile_sets[{si}]({s.id}).profiles[{pi}]({p.name})"
            if p.compute_slices > s.compute_slices or any(
                start + p.memory_slices > s.memory_slices for start in p.placements
            ):
                add("mig.yaml", where, "a placement runs past the GPU's slices", "coverage")

    for i, x in enumerate(matrix.exclusions):
        if x.os is not None and x.os not in os_ids:
            add("unsupported.yaml", f"unsupported[{i}].os", f"unknown OS {x.os!r}", "dangling-id")
        if x.gpu is not None and x.gpu not in gpu_ids and matrix.group(x.gpu) is None:
            add("unsupported.yaml", f"unsupported[{i}].gpu", f"unknown GPU {x.gpu!r}", "dangling-id")
    return problems
