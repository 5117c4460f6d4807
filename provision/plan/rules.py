"""The resolver's elimination rules: ordered lists of small rule objects, one list per stage of the
search (provision.plan.search runs them), and the kinds of elimination they make, in the order a
refusal's summary names them (provision.plan.explain).

A rule takes the stage's question and a draft of the candidate and returns either the draft
(narrowed or completed: a kernel-module flavour chosen, the releases a repository carries) or an
:class:`Elimination`; the first elimination ends the candidate. A new package kind adds rows here
(its stage's rules, its kinds' wording), not branches in the search.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from provision.matrix import model as m
from provision.matrix import runs_on
from provision.matrix.memo import per_matrix
from provision.plan.context import Elimination
from provision.versions import DottedVersion as Version
from provision.versions import major_minor, prefix_matches


class Rule(NamedTuple):
    kind: str  # the elimination kind it makes (KINDS)
    test: Callable[[Any, Any], Any]  # (question, draft) -> draft | Elimination


class Kind(NamedTuple):
    kind: str
    says: Callable[[Any, str], str]  # (context, plural "s" or "") -> what the candidates it eliminated share


def run(rules: tuple[Rule, ...], question: Any, draft: Any) -> Any:
    """The draft after every rule, or the first Elimination."""
    for rule in rules:
        draft = rule.test(question, draft)
        if isinstance(draft, Elimination):
            return draft
    return draft


# -- driver branches ------------------------------------------------------------------------------
class DriverQuestion(NamedTuple):
    matrix: m.Matrix
    facts: Any  # provision.plan.context.Facts
    release_pin: Version | None


class DriverDraft(NamedTuple):
    branch: m.DriverBranch
    module: str | None = None
    packaging: m.DriverPackaging | None = None
    releases: tuple[m.DriverRelease, ...] = ()


def _last_branch(q: DriverQuestion, d: DriverDraft):
    arch = q.facts.arch
    if arch.last_driver_branch is not None and d.branch.branch > arch.last_driver_branch:
        return Elimination(
            d.branch.label,
            f"does not support {arch.name} (R{arch.last_driver_branch} is the last branch for it)",
            "driver-architecture",
        )
    return d


def _first_branch(q: DriverQuestion, d: DriverDraft):
    arch = q.facts.arch
    if arch.first_driver_branch is not None and d.branch.branch < arch.first_driver_branch:
        return Elimination(
            d.branch.label,
            f"predates {arch.name} support (first branch R{arch.first_driver_branch})",
            "driver-architecture",
        )
    return d


def _kernel_module(q: DriverQuestion, d: DriverDraft):
    """The branch's kernel-module flavour for this GPU: its default where the GPU runs it (the
    architecture's flavours, narrowed by the GPU's own: GH200 open only)."""
    f, b = q.facts, d.branch
    runs = [mod for mod in f.arch.kernel_modules if f.gpu_modules is None or mod in f.gpu_modules]
    usable = [mod for mod in b.kernel_modules if mod in runs]
    if not usable:
        who = f.arch.name if f.gpu_modules is None else f.gpu_id
        return Elimination(
            b.label,
            f"ships {'/'.join(b.kernel_modules)} kernel modules only; {who} needs {'/'.join(runs)}",
            "kernel-module",
        )
    return d._replace(module=b.default_module if b.default_module in usable else usable[0])


def _packaging(q: DriverQuestion, d: DriverDraft):
    packaging = q.matrix.packaging_for(q.facts.os.id, d.branch.branch, d.module)
    if packaging is None:
        return Elimination(
            d.branch.label, f"no catalogued {q.facts.os.id} packages for its {d.module} kernel modules", "os-packages"
        )
    return d._replace(packaging=packaging)


def _subnet_manager_floor(q: DriverQuestion, d: DriverDraft):
    sm = q.facts.subnet_manager
    if sm is not None and d.branch.branch < sm.min_branch:
        why = f"predates NVLink Subnet Manager systems (NVSwitch generation {sm.nvswitch_generation}: R{sm.min_branch} first)"
        return Elimination(d.branch.label, why, "subnet-manager")
    return d


def _subnet_manager_packages(q: DriverQuestion, d: DriverDraft):
    if q.facts.subnet_manager is not None and d.packaging.subnet_manager is None:
        return Elimination(
            d.branch.label, f"no catalogued {q.facts.os.id} NVLink Subnet Manager packages", "os-packages"
        )
    return d


def _in_repository(q: DriverQuestion, d: DriverDraft):
    os_rel = q.facts.os
    releases = tuple(r for r in d.branch.releases if os_rel.id in r.os)
    if q.release_pin is not None:
        releases = tuple(r for r in releases if r.version == q.release_pin)
        if not releases:
            return Elimination(
                str(q.release_pin),
                f"not in the {os_rel.nvidia_repo} repository (released before it existed)",
                "os-packages",
            )
    if not releases:
        return Elimination(d.branch.label, f"no release in the {os_rel.nvidia_repo} repository", "os-packages")
    return d._replace(releases=releases)


def _gpu_min_driver(q: DriverQuestion, d: DriverDraft):
    floor = q.facts.min_driver
    if floor is None:
        return d
    fit = tuple(r for r in d.releases if r.version >= floor)
    if not fit:
        return Elimination(
            d.branch.label if q.release_pin is None else str(q.release_pin),
            f"older than {floor}, the first driver confirmed for {q.facts.gpu_id}",
            "gpu-min-driver",
        )
    return d._replace(releases=fit)


DRIVER_RULES = (
    Rule("driver-architecture", _last_branch),
    Rule("driver-architecture", _first_branch),
    Rule("kernel-module", _kernel_module),
    Rule("os-packages", _packaging),
    Rule("subnet-manager", _subnet_manager_floor),
    Rule("os-packages", _subnet_manager_packages),
    Rule("os-packages", _in_repository),
    Rule("gpu-min-driver", _gpu_min_driver),
)


# -- framework builds -----------------------------------------------------------------------------
class BuildQuestion(NamedTuple):
    matrix: m.Matrix
    package: str
    cuda_pin: str | None
    host: str
    cc: str


class BuildDraft(NamedTuple):
    release: m.FrameworkRelease
    build: m.FrameworkBuild

    def name(self, q: BuildQuestion) -> str:
        return f"{q.package}=={self.release.version} ({self.build.variant})"


def _build_arch(q: BuildQuestion, d: BuildDraft):
    if q.host not in d.build.arches:
        why = f"no {q.host} CUDA wheels (the build's wheels are for {'/'.join(d.build.arches)})"
        return Elimination(d.name(q), why, "framework-arch")
    return d


def _build_cuda(q: BuildQuestion, d: BuildDraft):
    if q.cuda_pin is not None and ".".join(q.cuda_pin.split(".")[:2]) != d.build.cuda:
        return Elimination(d.name(q), f"built for CUDA {d.build.cuda}, not --cuda {q.cuda_pin}", "framework-cuda")
    return d


def _build_sm(q: BuildQuestion, d: BuildDraft):
    ok, how = carries_sm(q.matrix, d.build, q.cc, q.host)
    return d if ok else Elimination(d.name(q), how, "framework-sm")


BUILD_RULES = (
    Rule("framework-arch", _build_arch),
    Rule("framework-cuda", _build_cuda),
    Rule("framework-sm", _build_sm),
)


def carries_sm(matrix: m.Matrix, build: m.FrameworkBuild, cc: str, arch: str = m.DEFAULT_ARCH) -> tuple[bool, str]:
    """Whether a framework build's wheels for host architecture ``arch`` run on compute capability
    ``cc``, and how (the SM set of that architecture's wheels: FrameworkBuild.sms_for)."""
    sm = "sm_" + cc.replace(".", "")
    sass, ptx, _ = build.sms_for(arch)
    if sass is None and ptx is None:
        if matrix.cuda_supports_cc(Version(build.cuda + ".0"), cc) or any(
            matrix.cuda_supports_cc(c.version, cc) for c in matrix.cuda if major_minor(c.version) == build.cuda
        ):
            return True, f"the build's compiled architectures are not published; CUDA {build.cuda} builds for {sm}"
        return False, f"CUDA {build.cuda} cannot build for {sm}"
    gmaj, gmin = (int(x) for x in cc.split("."))
    for target in sass or ():
        amaj, amin = (int(x) for x in target.split("."))
        if amaj == gmaj and amin <= gmin:
            exact = "" if amin == gmin else f" (sm_{amaj}{amin} code runs on {sm}: same major, binary compatible)"
            return True, f"compiled for sm_{amaj}{amin}{exact}"
    if ptx is not None and Version(ptx) <= Version(cc):
        return True, f"no {sm} code, but PTX for compute_{ptx.replace('.', '')} is JIT-compiled on it"
    archs = ", ".join("sm_" + a.replace(".", "") for a in sass or ())
    extra = f" + PTX {ptx}" if ptx else ""
    return False, f"not compiled for {sm} (the build carries {archs}{extra})"


# -- CUDA releases and their image sets -----------------------------------------------------------
class CudaAsk(NamedTuple):
    """What a CUDA release's candidates depend on besides the catalogue."""

    cc: str
    arch_name: str
    img_os: str
    host: str
    flavour: str


class CudaQuestion(NamedTuple):
    matrix: m.Matrix
    cc: str
    arch_name: str
    img_os: str
    host: str
    flavour: str  # the base image flavour the candidate starts from (provision.matrix.model.base_flavour)


class CudaDraft(NamedTuple):
    cuda: m.CudaRelease
    images: tuple[m.ImageRelease, ...] = ()

    @property
    def name(self) -> str:
        return f"cuda {self.cuda.version}"


def _cuda_sm(q: CudaQuestion, d: CudaDraft):
    if not q.matrix.cuda_supports_cc(d.cuda.version, q.cc):
        return Elimination(d.name, f"cannot build for sm_{q.cc.replace('.', '')} ({q.arch_name})", "cuda-sm")
    return d


def _cuda_images(q: CudaQuestion, d: CudaDraft):
    """Every image set that carries the toolkit: its own, and those numbered past it (12.9.2
    carries 12.9.1 with a newer cuBLAS), in the flavour the candidate starts from."""
    cuda = d.cuda
    images = tuple(i for i in q.matrix.images_for(cuda.version) if q.flavour in i.flavours_for(q.img_os))
    if not images:
        published = [
            str(i.cuda)
            for i in q.matrix.images
            if q.img_os in i.os and major_minor(i.cuda) == major_minor(cuda.version)
        ]
        also = f" (published for {major_minor(cuda.version)}: {', '.join(published)})" if published else ""
        return Elimination(d.name, f"no nvidia/cuda {q.flavour} image for {q.img_os}{also}", "image")
    return d._replace(images=images)


CUDA_RULES = (Rule("cuda-sm", _cuda_sm), Rule("image", _cuda_images))


class ImageDraft(NamedTuple):
    cuda: m.CudaRelease
    image: m.ImageRelease


def _image_platform(q: CudaQuestion, d: ImageDraft):
    platform = m.PLATFORMS[q.host]
    image = d.image
    if platform not in image.platforms:
        sets = f"nvidia/cuda {image.cuda} images" if image.cuda != d.cuda.version else "its nvidia/cuda images"
        why = f"{sets} are confirmed for {'/'.join(image.platforms)} only, not {platform}"
        return Elimination(f"cuda {d.cuda.version}", why, "image-platform")
    return d


IMAGE_RULES = (Rule("image-platform", _image_platform),)


# -- what the stack rules ask of the catalogue ----------------------------------------------------
@per_matrix
def minor_compat_floor(matrix: m.Matrix, major: int) -> m.MinorCompat | None:
    return matrix.minor_compat_floor(major)


@per_matrix
def image_needs(matrix: m.Matrix, cuda: m.CudaRelease, build: m.FrameworkBuild | None, host: str) -> runs_on.ImageNeeds:
    """What a candidate's image asks of the driver: its CUDA release and the SMs its framework
    build's wheels for the host architecture carry (without a framework: what the CUDA builds for)."""
    if build is None:
        return runs_on.needs_for_cuda(matrix, cuda)
    sass, ptx, _ = build.sms_for(host)
    return runs_on.ImageNeeds(
        cuda.version, cuda.min_driver, tuple(sass) if sass else None, ptx, runs_on.cuda_targets(matrix, cuda.version)
    )


@per_matrix
def runs(
    matrix: m.Matrix, cuda: m.CudaRelease, build: m.FrameworkBuild | None, driver: Version, on: tuple[str, str]
) -> tuple[m.MinorCompat | None, runs_on.Verdict, CudaLink | None]:
    """(the CUDA major's minor-version floor, runs_on's verdict, the link a plan records; None
    where the driver does not run it) for a candidate's image (CUDA release and framework build)
    on a driver, ``on`` (host architecture, GPU id)."""
    host, gpu = on
    floor = minor_compat_floor(matrix, cuda.version.release[0])
    verdict = decide(matrix, image_needs(matrix, cuda, build, host), driver, gpu)
    link = None if verdict.mode == runs_on.NO else CudaLink(PLAN_COMPAT[verdict.mode], floor, verdict)
    return floor, verdict, link


@per_matrix
def decide(matrix: m.Matrix, needs: runs_on.ImageNeeds, driver: Version, gpu: str) -> runs_on.Verdict:
    """runs_on's verdict for an image on a driver and a GPU (by id)."""
    return runs_on.decide(matrix, needs, driver, matrix.gpu(gpu))


@per_matrix
def cudnn_supports_kept(matrix: m.Matrix, cudnn: str, cuda: Version, cc: str, origin: str) -> tuple:
    return cudnn_supports(matrix, Version(cudnn), cuda, cc, origin)


def cudnn_for(
    matrix: m.Matrix, build: m.FrameworkBuild | None, image: m.ImageRelease, cuda: Version, cc: str
) -> tuple[str | None, str]:
    """The cuDNN of a candidate: the framework wheel's pin; for a wheel that accepts a range
    (TensorFlow 2.20 [and-cuda]: >=9.3.0.75,<10.0), the newest catalogued cuDNN build inside it
    that supports the CUDA release and the GPU's SM (cuDNN 9.17 dropped sm_70), which the lock then
    pins; else the image's."""
    if build is not None and build.libraries == "wheels" and build.cudnn is not None:
        if build.cudnn_spec is None:
            return build.cudnn, "framework"
        for version in cudnn_builds(matrix, build.cuda_version.release[0]):
            if build.cudnn_allows(version):
                ok, _, _ = cudnn_supports_kept(matrix, str(version), cuda, cc, "framework-range")
                if ok:
                    return str(version), "framework"
        return build.cudnn, "framework"
    return image.cudnn_version, "image"


@per_matrix
def cudnn_builds(matrix: m.Matrix, cuda_major: int) -> tuple[Version, ...]:
    """Every full cuDNN build the catalogue names for a CUDA major (the exact pins of framework
    builds and the cuDNN of nvidia/cuda images of that major: nvidia-cudnn-cuNN wheels), newest first."""
    named = {
        b.cudnn
        for f in matrix.frameworks
        for r in f.releases
        for b in r.builds
        if b.cudnn and b.cudnn_spec is None and b.cuda_version.release[0] == cuda_major
    }
    named |= {i.cudnn_version for i in matrix.images if i.cudnn_version and i.cuda.release[0] == cuda_major}
    return tuple(sorted({Version(v) for v in named if v.count(".") == 3}, reverse=True))


def cudnn_supports(
    matrix: m.Matrix, version: Version, cuda: Version, cc: str, origin: str
) -> tuple[bool, str, Version | None]:
    """(supported, why, minimum driver) for a cuDNN build with a CUDA release on compute capability cc."""
    sm = "sm_" + cc.replace(".", "")
    exact = matrix.cudnn_release(version)
    if exact is not None:
        rows = [b for b in exact.builds if b.cuda.contains(cuda)]
        if not rows:
            return False, f"its support matrix ({exact.version}) does not cover CUDA {cuda}", None
        rows_sm = [b for b in rows if cc in b.compute_capabilities]
        if not rows_sm:
            return False, f"its support matrix ({exact.version}) does not list {sm} with CUDA {cuda}", None
        return (
            True,
            f"support matrix {exact.version} lists CUDA {major_minor(cuda)} and {sm}",
            min(b.min_driver for b in rows_sm),
        )
    same_major = [c for c in matrix.cudnn if c.version.release[0] == version.release[0]]
    older = next((c for c in same_major if c.version < version), None)
    newer = next((c for c in reversed(same_major) if c.version > version), None)
    bounds = [c for c in (older, newer) if c is not None]
    if not bounds:
        return False, f"no cuDNN {version.release[0]}.x support matrix is catalogued", None
    verdicts = {c.version: any(cc in b.compute_capabilities for b in c.builds) for c in bounds}
    names = " and ".join(str(c.version) for c in bounds)
    pairing = {
        "framework": "the framework build pins it",
        "framework-range": "the framework wheel's cuDNN range admits it",
    }.get(origin, "NVIDIA's image pairs it")
    if all(verdicts.values()):
        return (
            True,
            (
                f"no matrix for {version}; the catalogued matrices either side ({names}) list {sm}, "
                f"and {pairing} with CUDA {major_minor(cuda)}"
            ),
            None,
        )
    if not any(verdicts.values()):
        return False, f"no matrix for {version}; the catalogued matrices either side ({names}) do not list {sm}", None
    said = ", ".join(f"{v} {'lists' if ok else 'does not list'} it" for v, ok in verdicts.items())
    return (
        False,
        f"{sm} support cannot be confirmed: no matrix for {version} and the neighbours disagree ({said})",
        None,
    )


# -- the stack: driver, CUDA, cuDNN together ------------------------------------------------------
# runs_on's modes in the order the search accepts them, and how a plan records each
TIERS = (runs_on.NATIVE, runs_on.MINOR, runs_on.FORWARD)
PLAN_COMPAT = {runs_on.NATIVE: "toolkit-driver", runs_on.MINOR: "minor-version", runs_on.FORWARD: "forward-compat"}


class CudaLink(NamedTuple):
    """How the driver runs the CUDA release, as provision.matrix.runs_on decided it."""

    compat: str  # "toolkit-driver" | "minor-version" | "forward-compat" (PlanCuda.compatibility)
    floor: m.MinorCompat | None
    verdict: runs_on.Verdict


class CudnnChoice(NamedTuple):
    version: str | None
    origin: str  # "framework" | "image"
    reason: str | None


class StackQuestion(NamedTuple):
    matrix: m.Matrix
    on: tuple[str, str]  # (host architecture, the id of the GPU the verdict is for: a group's first member)
    cc: str
    cudnn_pin: str | None
    tier: int  # the most lenient runs_on mode accepted (index into TIERS)
    package: str | None  # the framework's pip name (its builds are named by it)


class StackDraft:
    """A candidate stack as the stack rules complete it (one object per candidate, filled in place:
    the search tries thousands of them in `provision matrix check`)."""

    __slots__ = ("build", "cuda", "cudnn", "cudnn_found", "driver", "fw_release", "image", "link")

    def __init__(self, driver, fw_release, build, cuda, image) -> None:
        self.driver = driver  # provision.plan.search.DriverChoice
        self.fw_release: m.FrameworkRelease | None = fw_release
        self.build: m.FrameworkBuild | None = build
        self.cuda: m.CudaRelease = cuda
        self.image: m.ImageRelease = image
        self.link: CudaLink | None = None  # cuda-driver: how the driver runs the CUDA release
        self.cudnn_found: tuple[str | None, str] | None = None  # cudnn-pin: (version, origin)
        self.cudnn: CudnnChoice | None = None  # cudnn-support: the cuDNN the plan takes, and why


def _combo(q: StackQuestion, d: StackDraft) -> str:
    """A candidate stack as an elimination names it."""
    combo = f"{d.driver.branch.label} {d.driver.release.version} + cuda {d.cuda.version}"
    if d.build is not None:
        combo += f" + {q.package}=={d.fw_release.version} ({d.build.variant})"
    return combo


def _cuda_driver(q: StackQuestion, d: StackDraft):
    version, cuda = d.driver.release.version, d.cuda
    floor, verdict, link = runs(q.matrix, cuda, d.build, version, q.on)
    if link is None or TIERS.index(verdict.mode) > q.tier:
        extra = ""
        if verdict.mode != runs_on.NO:
            extra = f"; {verdict.mode} compatibility ({verdict.short}) is kept for when no stack meets it"
        elif version >= cuda.min_driver or (floor is not None and version >= floor.min_driver):
            extra = f" ({verdict.reason})"  # the driver would do, but not for the GPU's code
        why = f"CUDA {cuda.version} needs driver >= {cuda.min_driver} (release notes, Table 3){extra}"
        return Elimination(_combo(q, d), why, "cuda-driver")
    d.link = link
    return d


def _cudnn_pin(q: StackQuestion, d: StackDraft):
    d.cudnn_found = version, origin = cudnn_for(q.matrix, d.build, d.image, d.cuda.version, q.cc)
    if q.cudnn_pin is not None:
        if version is None:
            why = (
                f"the cuDNN build in the nvidia/cuda {d.image.cuda} images is not catalogued, so --cudnn "
                f"{q.cudnn_pin} cannot be checked"
            )
            return Elimination(_combo(q, d), why, "cudnn-pin")
        if not prefix_matches(q.cudnn_pin, Version(version)):
            return Elimination(
                _combo(q, d), f"cuDNN {version} ({origin}) does not match --cudnn {q.cudnn_pin}", "cudnn-pin"
            )
    return d


def _cudnn_support(q: StackQuestion, d: StackDraft):
    version, origin = d.cudnn_found
    if version is None:
        d.cudnn = CudnnChoice(None, origin, None)
        return d
    # cuDNN is part of the stack when asked for (--cudnn) or when the framework uses it; a
    # plain CUDA plan only reports the image's cuDNN, and leaves it out when unconfirmed.
    required = q.cudnn_pin is not None or d.build is not None
    said = "framework-range" if origin == "framework" and d.build.cudnn_spec is not None else origin
    ok, why, min_driver = cudnn_supports_kept(q.matrix, version, d.cuda.version, q.cc, said)
    if ok and min_driver is not None and d.driver.release.version < min_driver:
        ok, why = False, f"needs driver >= {min_driver}"
    if not ok and required:
        return Elimination(_combo(q, d), f"cuDNN {version}: {why}", "cudnn-support")
    if not ok:
        d.cudnn = CudnnChoice(None, origin, f"the images' cuDNN {d.image.cudnn_version} is left out: {why}")
    else:
        d.cudnn = CudnnChoice(version, origin, why)
    return d


STACK_RULES = (
    Rule("cuda-driver", _cuda_driver),
    Rule("cudnn-pin", _cudnn_pin),
    Rule("cudnn-support", _cudnn_support),
)


# -- the kinds, in the order a refusal's summary names them: the stages nearest to a plan first ----
def _s(n: int) -> str:
    return "" if n == 1 else "s"


KINDS = (
    Kind("cudnn-pin", lambda ctx, s: f"stack{s} whose cuDNN does not match --cudnn {ctx.request.cudnn}"),
    Kind(
        "cudnn-support", lambda ctx, s: f"stack{s} whose cuDNN does not support the CUDA release, the GPU or the driver"
    ),
    Kind("cuda-driver", lambda ctx, s: f"stack{s} whose driver is older than the CUDA release needs"),
    Kind("framework-cuda", lambda ctx, s: f"framework build{s} for another CUDA than --cuda {ctx.request.cuda}"),
    Kind("framework-arch", lambda ctx, s: f"framework build{s} without {ctx.host} CUDA wheels"),
    Kind("framework-sm", lambda ctx, s: f"framework build{s} without code for sm_{ctx.cc.replace('.', '')}"),
    Kind("cuda-uncatalogued", lambda ctx, s: f"framework CUDA version{s} not in the catalogue"),
    Kind(
        "image-platform",
        lambda ctx, s: f"CUDA release{s} whose nvidia/cuda images are not confirmed for {m.PLATFORMS[ctx.host]}",
    ),
    Kind("image", lambda ctx, s: f"CUDA release{s} without a matching nvidia/cuda image for {ctx.img_os}"),
    Kind(
        "cuda-sm",
        lambda ctx, s: f"CUDA release{s} that cannot build for sm_{ctx.cc.replace('.', '')} ({ctx.arch.name})",
    ),
    Kind("gpu-min-driver", lambda ctx, s: f"driver{s} older than {ctx.min_driver}, the first driver for {ctx.gpu_id}"),
    Kind(
        "subnet-manager",
        lambda ctx, s: f"driver branch{'es' if s else ''} older than the NVLink Subnet Manager floor",
    ),
    Kind("os-packages", lambda ctx, s: f"driver{s} not packaged in the {ctx.os.nvidia_repo} repository"),
    Kind(
        "kernel-module", lambda ctx, s: f"driver branch{'es' if s else ''} without kernel modules {ctx.arch.name} runs"
    ),
    Kind("driver-architecture", lambda ctx, s: f"driver branch{'es' if s else ''} without {ctx.arch.name} support"),
)


def kind_text(ctx: Any, kind: str, n: int) -> str:
    """What ``n`` candidates eliminated by rules of ``kind`` have in common, in words."""
    for row in KINDS:
        if row.kind == kind:
            return row.says(ctx, _s(n))
    return f"candidate{_s(n)} eliminated by rule {kind}"
