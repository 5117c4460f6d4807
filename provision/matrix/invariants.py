"""Data invariants over a loaded matrix: dangling ids, order, sources, coverage.

The JSON Schemas check each file's shape; these check what a schema cannot: references between
files, newest-first order, and that every fact cites a known source.
"""

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from provision.matrix.model import PLATFORMS, Matrix
from provision.versions import DottedVersion as Version
from provision.versions import VersionSpec


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
                if (key == "source" or key.endswith("_source")) and isinstance(value, str):
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

    named: dict[str, str] = {}  # every name --framework takes -> the framework it means
    for fi, fw in enumerate(matrix.frameworks):
        for name in dict.fromkeys((fw.id, fw.package, *fw.aliases)):
            if named.setdefault(name, fw.id) != fw.id:
                add(
                    "frameworks.yaml",
                    f"frameworks[{fi}]({fw.id}).aliases",
                    f"{name!r} also names {named[name]}: --framework {name} would be ambiguous",
                    "duplicate",
                )
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
    problems.extend(stack_problems(matrix))
    problems.extend(platform_problems(matrix))
    return problems


# -- platforms.yaml ---------------------------------------------------------------------------------
_FACT_PRESENT = {
    "gpus": lambda p: bool(p.gpus) or p.gpu_count is not None,
    "interconnect": lambda p: p.interconnect is not None,
    "fabric_manager": lambda p: False,  # follows from the interconnect: its sources are optional
    "topology": lambda p: bool(p.topology) or any(v.topology for v in p.variants),
    "pcie": lambda p: p.pcie_generation is not None or any(v.pcie_generation is not None for v in p.variants),
    "psus": lambda p: p.psu_count is not None,
    "inlet_c": lambda p: p.inlet_min_c is not None,
    "dmi": lambda p: bool(p.dmi_vendor or p.dmi_product or p.dmi_family),
    "dmi_unverified": lambda p: bool(p.dmi_unverified),
}
_SUBFIELDS = {  # left_out "fact.sub": is that part present?
    ("dmi", "vendor"): lambda p: bool(p.dmi_vendor),
    ("dmi", "product"): lambda p: bool(p.dmi_product),
    ("dmi", "family"): lambda p: bool(p.dmi_family),
    ("psus", "redundancy"): lambda p: p.psu_redundancy is not None,
}


def platform_problems(matrix: Matrix) -> list[Problem]:
    """platforms.yaml: what its schema cannot say. Ids and aliases unique; every GPU a catalogued
    GPU whose form factor the platform takes, and every form factor one a listed GPU has; the
    NVSwitch generation the GPU's own where both give one, and NVSwitch facts only on an NVSwitch
    interconnect; variants name the platform's GPUs, each at most once; every fact cites its
    sources (evidence) and they are the row's; a doubt names a fact the row has; a fact left out is
    absent."""
    problems: list[Problem] = []

    def add(path: str, text: str, kind: str) -> None:
        problems.append(Problem("platforms.yaml", path, text, kind))

    gpus = {g.id: g for g in matrix.gpus}
    seen: dict[str, str] = {}
    for i, p in enumerate(matrix.platforms):
        at = f"platforms[{i}]({p.id})"
        for name in (p.id, *p.aliases):
            if name in seen:
                add(at, f"id or alias {name!r} also used by {seen[name]}", "duplicate")
            seen[name] = p.id
        listed = [gpus[g] for g in p.gpus if g in gpus]
        for g in p.gpus:
            if g not in gpus:
                add(f"{at}.gpus.ids", f"unknown GPU {g!r} (gpus.yaml gpus, not a group)", "dangling-id")
            elif gpus[g].form_factor not in p.form_factors:
                add(
                    f"{at}.gpus.form_factor",
                    f"{g} is a {gpus[g].form_factor} GPU; the platform takes {'/'.join(p.form_factors)}",
                    "coverage",
                )
        unused = [f for f in p.form_factors if listed and f not in {g.form_factor for g in listed}]
        if unused:
            add(f"{at}.gpus.form_factor", f"{'/'.join(unused)}: no listed GPU has it", "coverage")
        if p.strict and not p.gpus:
            add(f"{at}.gpus.ids", f"a {p.kind} takes only the GPUs it lists: it lists none", "coverage")
        nvswitch = p.interconnect == "nvswitch"
        if not nvswitch and (
            p.nvswitch_generation
            or p.nvswitch_count
            or any(v.nvswitch_generation or v.nvswitch_count for v in p.variants)
        ):
            add(f"{at}.interconnect", f"NVSwitch facts on a {p.interconnect or 'unknown'} interconnect", "coverage")
        in_variants: dict[str, int] = {}
        for vi, v in enumerate(p.variants):
            for g in v.gpus:
                if g not in p.gpus:
                    add(f"{at}.variants[{vi}].gpus", f"{g} is not one of the platform's GPUs", "dangling-id")
                if g in in_variants:
                    add(f"{at}.variants[{vi}].gpus", f"{g} is also in variants[{in_variants[g]}]", "duplicate")
                in_variants[g] = vi
            extra = [s for s in v.sources if s not in p.sources]
            if extra:
                add(f"{at}.variants[{vi}].sources", f"{', '.join(extra)} not in the row's sources", "source")
        for g in listed:
            link = p.link(g)
            if link.nvswitch_generation is not None and g.nvswitch_generation not in (None, link.nvswitch_generation):
                add(
                    f"{at}.interconnect.nvswitch_generation",
                    f"generation {link.nvswitch_generation} for {g.id}, whose gpus.yaml nvswitch_generation is "
                    f"{g.nvswitch_generation}",
                    "range",
                )
            if nvswitch and link.nvswitch_generation is None:
                add(f"{at}.interconnect", f"an NVSwitch interconnect without a generation for {g.id}", "coverage")
        if p.inlet_min_c is not None and p.inlet_max_c is not None and p.inlet_min_c >= p.inlet_max_c:
            add(f"{at}.inlet_c", f"min {p.inlet_min_c} is not below max {p.inlet_max_c}", "range")
        problems.extend(_platform_evidence(p, at))
    return problems


def _platform_evidence(p: Any, at: str) -> list[Problem]:
    out: list[Problem] = []
    evidence = dict(p.evidence)
    definitional = ("gpus", "interconnect") if p.kind == "generic" else ()
    for fact, present in _FACT_PRESENT.items():
        if fact == "gpus" and p.gpu_count is None and not p.gpus:
            continue
        in_row = present(p._replace(variants=()))  # a variant's facts cite the variant's sources
        if in_row and fact not in evidence and fact not in definitional:
            out.append(Problem("platforms.yaml", f"{at}.evidence", f"{fact} cites no source", "source"))
        if fact in evidence and fact != "fabric_manager" and not present(p):
            out.append(
                Problem("platforms.yaml", f"{at}.evidence.{fact}", f"cites sources for an absent {fact}", "source")
            )
    cited = {s for sources in evidence.values() for s in sources} | {s for v in p.variants for s in v.sources}
    for s in sorted(cited - set(p.sources)):
        out.append(Problem("platforms.yaml", f"{at}.sources", f"{s} is cited in evidence but not in sources", "source"))
    for s in sorted(set(p.sources) - cited):
        out.append(Problem("platforms.yaml", f"{at}.sources", f"{s} backs no fact (evidence, variants)", "source"))
    for di, doubt in enumerate(p.doubts):
        for field in doubt.fields:
            fact, _, part = field.partition(".")
            present = {"ids": bool(p.gpus), "count": p.gpu_count is not None}.get(part) if part else None
            if fact != "fabric_manager" and not (_FACT_PRESENT[fact](p) if present is None else present):
                out.append(Problem("platforms.yaml", f"{at}.doubts[{di}]", f"doubts an absent {field}", "coverage"))
    for key, _ in p.left_out:
        fact, _, sub = key.partition(".")
        present = _SUBFIELDS.get((fact, sub)) if sub else _FACT_PRESENT.get(fact)
        if present is not None and present(p):
            out.append(
                Problem("platforms.yaml", f"{at}.left_out.{key}", f"left out, but the row gives {key}", "coverage")
            )
    return out


# -- stacks.yaml ------------------------------------------------------------------------------------
_SONAME_MAJOR = re.compile(r"^(lib[A-Za-z0-9_+-]+?)\.so\.(\d+)(?:\.\d+)*$")
_FLOOR = re.compile(r"(?:~=|==|>=|===)\s*(\d+)")
_CU_SUFFIX = re.compile(r"^nvidia-(?:cuda-runtime|cudnn)-cu(\d+)")


def declared_major(requirement: str) -> int | None:
    """The major a CUDA runtime or cuDNN requirement names, read as the refresh reads it: its lower
    bound or pin (``~=13.0``, ``>=12,<13``), else (a bare name, or a ``0.0.0a0`` placeholder pin)
    the ``-cuNN`` of the NVIDIA package it names."""
    bound = _FLOOR.search(requirement)
    if bound and int(bound[1]) > 0:
        return int(bound[1])
    suffix = _CU_SUFFIX.match(requirement)
    return int(suffix[1]) if suffix else None


def soname_majors(build: Any, library: str) -> set[int]:
    """The majors of ``library`` (libcudart, libcudnn: its sub-libraries too) the build's objects need."""
    found = set()
    for _, names in build.sonames:
        for name in names or ():
            m = _SONAME_MAJOR.match(name)
            if m and (m[1] == library or m[1].startswith(library + "_")):
                found.add(int(m[2]))
    return found


def stack_problems(matrix: Matrix) -> list[Problem]:
    """stacks.yaml: what its schema cannot say. Each package kind is unique and no framework's id;
    its releases newest first, from its first_release on; every build's distributions are the kind's
    (the artefact it describes); the CUDA major agrees with every evidence the row carries (the
    runtime requirement, `cuda`, the libcudart sonames, the flavour NVIDIA documents), the cuDNN
    major likewise (requirement, range, libcudnn sonames, the package's own floor); documented
    facts are the rules' (SM floor, source); a library index only where a distribution's build
    fetches from it; pins to torch and the other stack packages name catalogued releases."""
    problems: list[Problem] = []

    def add(path: str, text: str, kind: str) -> None:
        problems.append(Problem("stacks.yaml", path, text, kind))

    framework_ids = {fw.id for fw in matrix.frameworks}
    seen: dict[str, str] = {}
    for pi, package in enumerate(matrix.stacks):
        at = f"packages[{pi}]({package.id})"
        for name in (package.id, package.pip):
            if name in seen and seen[name] != package.id:
                add(at, f"id or pip name {name!r} also used by {seen[name]}", "duplicate")
            seen[name] = package.id
        if package.id in framework_ids:
            add(f"{at}.id", f"{package.id!r} is also a framework id (frameworks.yaml)", "duplicate")
        if package.distribution(_entry_role(package)) is None or package.distributions[0].pip != package.pip:
            add(f"{at}.pip", f"{package.pip} is not the kind's first distribution", "dangling-id")
        flavour_names = [f.name for f in package.flavours]
        templated = [d.pip for d in package.distributions if "{flavour}" in d.pip]
        if templated and not flavour_names:
            add(f"{at}.distributions", f"{templated[0]} names a flavour but the kind has none", "dangling-id")
        for fi, f in enumerate(package.flavours):
            if (f.cuda_major is None) != (f.source is None):
                add(
                    f"{at}.flavours[{fi}]({f.name})",
                    "a documented CUDA major needs its source, and only then",
                    "source",
                )
        for di, dist in enumerate(package.distributions):
            # an sdist that is compiled or downloads (source, extension, libraries) says what its build
            # needs; a selector or meta sdist only names other distributions; a wheel has no build
            if dist.build is None and dist.artefact == "sdist" and dist.role not in ("selector", "meta"):
                add(f"{at}.distributions[{di}]", f"the sdist {dist.pip} says nothing of its build", "coverage")
            if dist.build is not None and dist.artefact == "wheel":
                add(f"{at}.distributions[{di}]", f"{dist.pip} is a wheel: it has no build", "coverage")
        if (bad := _newest_first([r.version for r in package.releases])) is not None:
            add(f"{at}.releases[{bad}]", "releases must be listed newest first, without repeats", "order")
        for ri, rel in enumerate(package.releases):
            rat = f"{at}.releases[{ri}]({rel.version})"
            if rel.version < package.first_release:
                add(rat, f"older than the kind's first_release {package.first_release}", "range")
            flavours = [b.flavour for b in rel.builds]
            if len(set(flavours)) != len(flavours):
                add(rat, f"two builds of one flavour: {flavours}", "duplicate")
            if sum(b.default for b in rel.builds) != 1:
                add(rat, f"{sum(b.default for b in rel.builds)} default builds (one is what pip installs)", "coverage")
            for bi, build in enumerate(rel.builds):
                problems.extend(_stack_build(package, rel, build, f"{rat}.builds[{bi}]({build.flavour or 'only'})"))
    problems.extend(_stack_pins(matrix))
    return problems


def _admits_major(spec: VersionSpec, major: int) -> bool:
    """Some release of ``major`` meets ``spec``: the major itself, a bound of that major, or the
    highest one can write."""
    bounds = [b for b in re.findall(r"\d+(?:\.\d+)*", str(spec)) if int(b.split(".")[0]) == major]
    return any(spec.contains(v) for v in (str(major), *bounds, f"{major}.999999"))


def _entry_role(package: Any) -> str:
    return package.distributions[0].role if package.distributions else ""


def _stack_build(package: Any, rel: Any, build: Any, at: str) -> list[Problem]:
    """One build row: its shape, its CUDA and cuDNN majors, its documented facts."""
    return [
        *_stack_build_shape(package, rel, build, at),
        *_stack_build_majors(package, build, at),
        *_stack_build_facts(package, rel, build, at),
    ]


def _stack_build_shape(package: Any, rel: Any, build: Any, at: str) -> list[Problem]:
    problems: list[Problem] = []

    def add(path: str, text: str, kind: str) -> None:
        problems.append(Problem("stacks.yaml", path, text, kind))

    flavours = {f.name: f for f in package.flavours}
    if package.flavours and build.flavour not in flavours:
        add(f"{at}.flavour", f"{build.flavour!r} is not one of the kind's flavours {sorted(flavours)}", "dangling-id")
    if not package.flavours and build.flavour is not None:
        add(f"{at}.flavour", "the kind has no flavours", "dangling-id")
    described = {d.name(build.flavour): d for d in package.distributions}
    for name, artefact in build.distributions:
        dist = described.get(name)
        if dist is None:
            add(
                f"{at}.distributions",
                f"{name} is not a distribution of {package.id} (stacks.yaml description)",
                "dangling-id",
            )
        elif dist.artefact != artefact:
            add(
                f"{at}.distributions", f"{name} is an {artefact} here, the description says {dist.artefact}", "coverage"
            )
    for arch, _ in build.manylinux:
        if arch not in build.arches:
            add(f"{at}.manylinux.{arch}", f"{arch} is not in the build's arches", "coverage")
    if build.python_aarch64 is not None and "aarch64" not in build.arches:
        add(f"{at}.python_aarch64", "aarch64 is not in the build's arches", "coverage")
    for text, where in ((build.python, "python"), (build.python_aarch64, "python_aarch64")):
        if text is not None:
            try:
                VersionSpec(text)
            except ValueError as exc:
                add(f"{at}.{where}", str(exc), "range")
    return problems


def _stack_build_majors(package: Any, build: Any, at: str) -> list[Problem]:
    problems: list[Problem] = []

    def add(path: str, text: str, kind: str) -> None:
        problems.append(Problem("stacks.yaml", path, text, kind))

    flavours = {f.name: f for f in package.flavours}
    # the CUDA major and every evidence of it
    if package.uses_cuda and build.cuda_major is None:
        add(f"{at}.cuda_major", f"{package.id} builds carry a CUDA of their own: none read", "coverage")
    if not package.uses_cuda and build.cuda_major is not None:
        add(f"{at}.cuda_major", f"{package.id} follows torch's CUDA (uses_cuda: false)", "coverage")
    evidences = {
        "cuda": Version(build.cuda).release[0] if build.cuda else None,
        "cuda_requirement": declared_major(build.cuda_requirement) if build.cuda_requirement else None,
    }
    for name, major in evidences.items():
        if major is not None and major != build.cuda_major:
            add(f"{at}.{name}", f"says CUDA {major}, the build's cuda_major is {build.cuda_major}", "range")
    for major in soname_majors(build, "libcudart"):
        if major != build.cuda_major:
            add(
                f"{at}.sonames",
                f"libcudart.so.{major}: CUDA {major}, the build's cuda_major is {build.cuda_major}",
                "range",
            )
    flavour = flavours.get(build.flavour)
    if flavour is not None and flavour.cuda_major is not None and build.cuda_major != flavour.cuda_major:
        add(
            f"{at}.cuda_major",
            f"CUDA {build.cuda_major}, NVIDIA documents {flavour.cuda_major} for {flavour.name}",
            "range",
        )
    if build.cuda_from == "documented" and (flavour is None or build.cuda_source != flavour.source):
        add(f"{at}.cuda_source", "a documented CUDA major cites its flavour's source", "source")
    if build.cuda_from != "documented" and build.cuda_source is not None:
        add(f"{at}.cuda_source", "only a documented CUDA major has a cuda_source", "source")
    # the cuDNN major and its evidence
    cudnn = {
        "cudnn_requirement": declared_major(build.cudnn_requirement) if build.cudnn_requirement else None,
        "cudnn_min": build.cudnn_min.release[0] if build.cudnn_min is not None else None,
    }
    for name, major in cudnn.items():
        if major is not None and major != build.cudnn_major:
            add(f"{at}.{name}", f"says cuDNN {major}, the build's cudnn_major is {build.cudnn_major}", "range")
    for major in soname_majors(build, "libcudnn"):
        if major != build.cudnn_major:
            add(
                f"{at}.sonames",
                f"libcudnn.so.{major}: cuDNN {major}, the build's cudnn_major is {build.cudnn_major}",
                "range",
            )
    if (
        build.cudnn_spec is not None
        and build.cudnn_major is not None
        and not _admits_major(build.cudnn_spec, build.cudnn_major)
    ):
        add(f"{at}.cudnn_spec", f"{build.cudnn_spec} admits no cuDNN {build.cudnn_major}", "range")
    if build.cudnn_spec is not None and build.cudnn_min is not None and not build.cudnn_spec.contains(build.cudnn_min):
        add(f"{at}.cudnn_min", f"{build.cudnn_spec} does not admit the floor {build.cudnn_min}", "range")
    return problems


def _stack_build_facts(package: Any, rel: Any, build: Any, at: str) -> list[Problem]:
    problems: list[Problem] = []

    def add(path: str, text: str, kind: str) -> None:
        problems.append(Problem("stacks.yaml", path, text, kind))

    # documented facts: the rules', with their source
    rule = next((r for r in package.documented if r.sm_floor is not None and r.releases.contains(rel.version)), None)
    expected = (rule.sm_floor, rule.source) if rule else (None, None)
    if (build.sm_floor, build.sm_source) != expected:
        add(
            f"{at}.sm_floor",
            f"{build.sm_floor} ({build.sm_source}), the documented rule gives {expected[0]} ({expected[1]})",
            "source",
        )
    # a second index only where a distribution's build downloads from it
    fetching = [d for d in package.distributions if d.build is not None and d.build.fetches == "library_index"]
    if fetching and build.library_index is None:
        add(
            f"{at}.library_index",
            f"{fetching[0].name(build.flavour)} downloads from the library index: none read",
            "coverage",
        )
    if not fetching and build.library_index is not None:
        add(f"{at}.library_index", "no distribution of the kind downloads from a library index", "coverage")
    if (build.library_index is None) != (build.library_index_source is None):
        add(f"{at}.library_index_source", "a library index and its source come together", "source")
    if build.nvcc_minor_mismatch_ok is not None and not any(
        d.build is not None and d.build.nvcc == "framework" for d in package.distributions
    ):
        add(f"{at}.nvcc_minor_mismatch_ok", "only a kind built with the framework's nvcc has this table", "coverage")
    if build.pin is not None and build.pin not in rel.post:
        add(f"{at}.pin", f"{build.pin} is not a post release of {rel.version} ({list(rel.post)})", "dangling-id")
    return problems


def _canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503), without importing packaging.utils (whose
    import of packaging.tags costs `matrix check` a tenth of a second)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _stack_pins(matrix: Matrix) -> list[Problem]:
    """Every pin a build declares on torch or on a distribution of a catalogued stack kind is met by
    a catalogued release (its own version or one of its post releases): torch-tensorrt X.Y pins
    torch X.Y and a TensorRT that the catalogue has. PEP 440, as pip reads it; each distinct pin is
    worked out once."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version as Pep440

    texts: dict[str, set[str]] = {}
    for fw in matrix.frameworks:
        texts.setdefault(_canonical(fw.package), set()).update(str(r.version) for r in fw.releases)
    for package in matrix.stacks:
        for rel in package.releases:
            own = {str(rel.version), *rel.post}
            for build in rel.builds:
                for name, _ in build.distributions:
                    texts.setdefault(_canonical(name), set()).update(own)
            for dist in package.distributions:
                if "{flavour}" not in dist.pip:  # the selector: a release of any build
                    texts.setdefault(_canonical(dist.pip), set()).update(own)
    versions = {name: [Pep440(v) for v in found] for name, found in texts.items()}
    met: dict[tuple[str, str], str | None] = {}  # (name, pin) -> the problem, None: met
    problems = []
    for pi, package in enumerate(matrix.stacks):
        for ri, rel in enumerate(package.releases):
            for bi, build in enumerate(rel.builds):
                for name, text in build.requires:
                    key = (_canonical(name), text)
                    if key not in met:
                        try:
                            spec = SpecifierSet(text)
                        except InvalidSpecifier:
                            met[key] = f"{text!r} is not a PEP 440 specifier"
                        else:
                            known = versions.get(key[0])
                            met[key] = (
                                f"no catalogued {name} release meets {text or 'any'}"
                                if known is not None and not any(spec.contains(v) for v in known)
                                else None
                            )
                    if met[key] is not None:
                        at = f"packages[{pi}]({package.id}).releases[{ri}]({rel.version}).builds[{bi}].requires.{name}"
                        problems.append(Problem("stacks.yaml", at, met[key], "dangling-id"))
    return problems
