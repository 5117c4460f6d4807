"""The resolver's elimination rules: ordered lists of small rule objects, one list per stage of the
search (provision.plan.search runs them), and the kinds of elimination they make, in the order a
refusal's summary names them (provision.plan.explain).

A rule takes the stage's question and a draft of the candidate and returns either the draft
(narrowed or completed: a kernel-module flavour chosen, the releases a repository carries) or an
:class:`Elimination`; the first elimination ends the candidate. A new package kind adds rows here
(its stage's rules, its kinds' wording), not branches in the search.
"""

from __future__ import annotations

import functools
import re
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
    # the stack packages asked for (provision.plan.context.StackPin), and what they are checked
    # against besides the candidate: (image OS, the framework's id) (); () without a stack
    stack: tuple = ()
    img_os: str = ""
    framework: str | None = None


class StackDraft:
    """A candidate stack as the stack rules complete it (one object per candidate, filled in place:
    the search tries thousands of them in `provision matrix check`)."""

    __slots__ = ("build", "cuda", "cudnn", "cudnn_found", "driver", "fw_release", "image", "link", "packages")

    def __init__(self, driver, fw_release, build, cuda, image) -> None:
        self.driver = driver  # provision.plan.search.DriverChoice
        self.fw_release: m.FrameworkRelease | None = fw_release
        self.build: m.FrameworkBuild | None = build
        self.cuda: m.CudaRelease = cuda
        self.image: m.ImageRelease = image
        self.link: CudaLink | None = None  # cuda-driver: how the driver runs the CUDA release
        self.cudnn_found: tuple[str | None, str] | None = None  # cudnn-pin: (version, origin)
        self.cudnn: CudnnChoice | None = None  # cudnn-support: the cuDNN the plan takes, and why
        self.packages: tuple[PackageDraft, ...] = ()  # stack-*: the stack packages chosen (PackageDraft)


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


def _stack_packages(q: StackQuestion, d: StackDraft):
    """The stack packages (--framework onnxruntime|tensorrt, --with): one release and build of
    each that fits the candidate and every other package (PACKAGE_RULES, then the pairs)."""
    if not q.stack:
        return d
    fw = (q.framework, d.fw_release.version, d.build.variant) if d.build is not None else None
    pins = tuple((p.package.id, p.given, p.role) for p in q.stack)
    found = choose_packages(q.matrix, pins, (q.on[0], q.cc, q.img_os), fw, d.cuda.version, d.cudnn.version)
    if isinstance(found, Elimination):
        return found._replace(candidate=f"{_stack_base(q, d)}: {found.candidate}")
    d.packages = found
    return d


def _stack_base(q: StackQuestion, d: StackDraft) -> str:
    if d.build is not None:
        return f"{q.package}=={d.fw_release.version} ({d.build.variant}) + cuda {d.cuda.version}"
    return f"cuda {d.cuda.version} images"


STACK_RULES = (
    Rule("cuda-driver", _cuda_driver),
    Rule("cudnn-pin", _cudnn_pin),
    Rule("cudnn-support", _cudnn_support),
    Rule("stack", _stack_packages),
)


# -- stack packages (compat/stacks.yaml): each release and build against the candidate ------------
class PackageQuestion(NamedTuple):
    """What a stack package's build is checked against: the candidate's framework build (None
    for an inference image: --framework onnxruntime), its image's CUDA toolkit and OS, its cuDNN,
    the host and the GPU."""

    matrix: m.Matrix
    host: str
    cc: str
    img_os: str
    fw: tuple | None  # (framework id, release version, FrameworkBuild)
    cuda: Version  # the image's CUDA toolkit
    cudnn: str | None  # the plan's cuDNN (the framework build's pin, or the image's)
    pythons: tuple[str, ...]  # the image OS's Pythons the framework release takes (images/os.yaml)
    glibc: Version | None  # the image OS's glibc (images/os.yaml)
    fw_key: tuple | None = None  # (framework id, release version, the build's variant)

    @property
    def cuda_major(self) -> int:
        """The one CUDA major of the image: the framework build's (torch's), else the image CUDA's."""
        return self.fw[2].cuda_version.release[0] if self.fw is not None else self.cuda.release[0]

    def holder(self) -> str:
        """What a package's CUDA and cuDNN are held to, as a refusal names it."""
        if self.fw is None:
            return f"the CUDA {self.cuda} image"
        fw_id, version, build = self.fw
        return f"{self.matrix.framework(fw_id).package} {version}'s {build.variant} build"


class PackageDraft(NamedTuple):
    package: m.StackPackage
    release: m.StackRelease
    build: m.StackBuild
    role: str  # framework | with | requires (brought in by another package's declared requirement)
    pythons: tuple[str, ...] = ()  # the image OS's Pythons it takes
    required_by: str | None = None  # role requires: the id of the package whose requirement brought it

    @property
    def name(self) -> str:
        flavour = f" ({self.build.flavour})" if self.build.flavour else ""
        return f"{self.package.id}=={self.release.version}{flavour}"


def spec_holds(spec: str | None, version: Version | str) -> bool:
    """A declared PEP 440 range (">=3.8, <3.13", "<2.15.0,>=2.14.0"; empty: any) holds ``version``
    (clauses the version grammar does not read, such as ``!=3.9.*``, are left out)."""
    if not spec or not spec.strip():
        return True
    readable = _readable_spec(spec)
    return readable.contains(version) if readable is not None else True


@functools.lru_cache(maxsize=512)
def _readable_spec(spec: str):
    """The clauses of a declared range the version grammar reads, parsed once (None: none)."""
    from provision.versions import VersionSpec

    clauses = [c.strip() for c in spec.split(",") if c.strip()]
    clean = ",".join(c for c in clauses if re.match(r"^(==|!=|>=|<=|>|<)\s*\d+(\.\d+)*$", c))
    return VersionSpec(clean) if clean else None


def sm_floor(package: m.StackPackage, release: m.StackRelease, build: m.StackBuild) -> tuple[str | None, str | None]:
    """(the oldest compute capability the build supports, its source): the row's, else the
    package's documented rule for the release."""
    if build.sm_floor is not None:
        return build.sm_floor, build.sm_source
    rule = next((r for r in package.documented if r.sm_floor and r.releases.contains(release.version)), None)
    return (rule.sm_floor, rule.source) if rule is not None else (None, None)


def _pkg_arch(q: PackageQuestion, d: PackageDraft):
    if q.host not in d.build.arches:
        return Elimination(d.name, f"no {q.host} build (its builds are for {'/'.join(d.build.arches)})", "stack-arch")
    return d


def _pkg_sm(q: PackageQuestion, d: PackageDraft):
    floor, source = sm_floor(d.package, d.release, d.build)
    if floor is not None and Version(q.cc) < Version(floor):
        why = f"supports SM {floor} and newer ({source}); the GPU is SM {q.cc}"
        return Elimination(d.name, why, "stack-sm")
    return d


def _pkg_framework(q: PackageQuestion, d: PackageDraft):
    """The build's pin on the framework (torch-tensorrt X.Y: torch X.Y; megatron-core 0.16: torch >= 2.6)."""
    if q.fw is None:
        return d
    fw_id, version, _ = q.fw
    package = q.matrix.framework(fw_id).package
    spec = d.build.requirement(package)
    if spec is not None and not spec_holds(spec, version):
        return Elimination(d.name, f"requires {package}{spec}; the plan's is {package} {version}", "stack-requires")
    return d


def _pkg_python(q: PackageQuestion, d: PackageDraft):
    spec = d.build.python_for(q.host)
    fits = tuple(v for v in q.pythons if spec_holds(spec, v))
    if not fits:
        also = f" that {q.fw[0]} {q.fw[1]} takes" if q.fw is not None else ""
        why = f"needs Python {spec}; {q.img_os} images offer {', '.join(q.pythons) or 'none'}{also}"
        return Elimination(d.name, why, "stack-python")
    return d._replace(pythons=fits)


def _pkg_glibc(q: PackageQuestion, d: PackageDraft):
    floor = d.build.glibc_for(q.host)
    if floor is not None and q.glibc is not None and floor > q.glibc:
        why = f"its {q.host} wheels are manylinux_{str(floor).replace('.', '_')} (glibc >= {floor}); {q.img_os} has glibc {q.glibc}"
        return Elimination(d.name, why, "stack-glibc")
    return d


def _pkg_cudnn(q: PackageQuestion, d: PackageDraft):
    """cuDNN: the build's major and declared range agree with the plan's cuDNN (the framework
    build's pin, or the image's), never below the package's own floor (Transformer Engine)."""
    b = d.build
    if b.cudnn_major is None and b.cudnn_spec is None and b.cudnn_min is None:
        return d
    if q.cudnn is None:
        why = f"uses cuDNN {b.cudnn_major or ''}, and the cuDNN {q.holder()} brings is not catalogued".replace(
            "  ", " "
        )
        return Elimination(d.name, why, "stack-cudnn")
    have = Version(q.cudnn)
    holder = q.holder()
    brings = "bundles" if q.fw is not None else "carries"
    if b.cudnn_major is not None and have.release[0] != b.cudnn_major:
        why = f"{d.package.id} {d.release.version} is built for cuDNN {b.cudnn_major}; {holder} {brings} cuDNN {have}"
        return Elimination(d.name, why, "stack-cudnn")
    if b.cudnn_spec is not None and not b.cudnn_spec.contains(have):
        why = f"declares cuDNN {b.cudnn_spec}; {holder} {brings} cuDNN {have}"
        return Elimination(d.name, why, "stack-cudnn")
    if b.cudnn_min is not None and have < b.cudnn_min:
        why = f"refuses cuDNN older than {b.cudnn_min} (its MIN_CUDNN_VERSION); {holder} {brings} cuDNN {have}"
        return Elimination(d.name, why, "stack-cudnn")
    return d


def _pkg_cuda(q: PackageQuestion, d: PackageDraft):
    """One CUDA major for every CUDA-using package: the framework build's, else the image's; the
    image's CUDA not older than the CUDA the build records."""
    b = d.build
    if b.cuda_major is None:
        return d
    if b.cuda_major != q.cuda_major:
        why = f"{d.package.id} {d.release.version}{' ' + b.flavour if b.flavour else ''} is built for CUDA {b.cuda_major}; {q.holder()} is CUDA {q.cuda_major}"
        return Elimination(d.name, why, "stack-cuda")
    if b.cuda is not None and Version(major_minor(q.cuda)) < Version(b.cuda):
        why = f"is built with CUDA {b.cuda}; the image's CUDA is {q.cuda}"
        return Elimination(d.name, why, "stack-cuda")
    return d


def _pkg_nvcc(q: PackageQuestion, d: PackageDraft):
    """A package that compiles against the framework at run time or build time (DeepSpeed:
    nvcc = torch.version.cuda) gets the devel image of the framework build's CUDA; minors may
    differ only where the release's nvcc_minor_mismatch_ok lists both."""
    wants = (d.package.runtime is not None and d.package.runtime.nvcc == "framework") or any(
        x.build is not None and x.build.nvcc == "framework" for x in d.package.distributions
    )
    if not wants:
        return d
    if q.fw is None:
        return Elimination(
            d.name, "compiles against the framework's CUDA (nvcc), and the plan has no framework", "stack-nvcc"
        )
    torch_cuda = q.fw[2].cuda
    nvcc = major_minor(q.cuda)
    if nvcc == torch_cuda:
        return d
    ok = dict(d.build.nvcc_minor_mismatch_ok or ()).get(q.cuda.release[0], ())
    if nvcc in ok and torch_cuda in ok:
        return d
    why = f"needs nvcc {torch_cuda} (the framework build's CUDA); the image's nvcc is {nvcc}"
    return Elimination(d.name, why, "stack-nvcc")


PACKAGE_RULES = (
    Rule("stack-arch", _pkg_arch),
    Rule("stack-sm", _pkg_sm),
    Rule("stack-requires", _pkg_framework),
    Rule("stack-python", _pkg_python),
    Rule("stack-glibc", _pkg_glibc),
    Rule("stack-cudnn", _pkg_cudnn),
    Rule("stack-cuda", _pkg_cuda),
    Rule("stack-nvcc", _pkg_nvcc),
)


def _requirement_on(a: PackageDraft, b: PackageDraft) -> str | None:
    """Why ``a``'s declared requirement on ``b``'s package refuses ``b`` (its version or its build
    line: torch-tensorrt 2.14 requires tensorrt-cu13 >=11.1,<11.2), or None."""
    names = {b.package.pip, *b.build.pip_names}
    patterns = [x.pip for x in b.package.distributions]
    for name, spec in a.build.requires:
        if name in names:
            if not spec_holds(spec, b.release.version):
                return f"{a.name} requires {name}{spec}; {b.name} does not fit it"
        elif any(_pattern_matches(p, name) for p in patterns):
            return f"{a.name} requires {name}{spec}, another build line than {b.name}"
    return None


def _pair_requires(a: PackageDraft, b: PackageDraft) -> str | None:
    return _requirement_on(a, b) or _requirement_on(b, a)


def _soname_needs(build: m.StackBuild) -> dict[str, dict[int, list[str]]]:
    """{library: {soname major: [the build's shared objects that need it]}} over the read sonames."""
    found: dict[str, dict[int, list[str]]] = {}
    for obj, names in build.sonames:
        for name in names or ():
            lib, _, rest = name.partition(".so.")
            if rest and rest.split(".")[0].isdigit():
                found.setdefault(lib, {}).setdefault(int(rest.split(".")[0]), []).append(obj)
    return found


def _pair_sonames(a: PackageDraft, b: PackageDraft) -> str | None:
    """Two packages whose shared objects load the same library need the same soname major of it:
    an image holds one of each library (ONNX Runtime's TensorRT provider needs libnvinfer.so.10,
    TensorRT 11's bindings link libnvinfer.so.11). From the rows' sonames, never from names."""
    needs_a, needs_b = _soname_needs(a.build), _soname_needs(b.build)
    for lib in sorted(needs_a.keys() & needs_b.keys()):
        if set(needs_a[lib]) != set(needs_b[lib]):
            return f"{_soname_text(a, lib, needs_a[lib])}; {_soname_text(b, lib, needs_b[lib])}"
    return None


def _soname_text(d: PackageDraft, lib: str, majors: dict[int, list[str]]) -> str:
    objects = sorted({o for objs in majors.values() for o in objs})
    sonames = " and ".join(f"{lib}.so.{n}" for n in sorted(majors))
    return f"{d.name}'s {'/'.join(objects)} need{'s' if len(objects) == 1 else ''} {sonames}"


class PairRule(NamedTuple):
    kind: str  # the elimination kind it makes (KINDS)
    test: Callable[[PackageDraft, PackageDraft], str | None]  # why the two cannot go together, or None


# the rules every two stack packages of a set are held to, in order (a common Python is the
# search's own: it narrows with each package)
PAIR_RULES = (
    PairRule("stack-requires", _pair_requires),
    PairRule("stack-soname", _pair_sonames),
)


def pair_clash(a: PackageDraft, b: PackageDraft) -> tuple[str, str] | None:
    """(kind, why) of the first pair rule two stack packages break, or None."""
    for rule in PAIR_RULES:
        why = rule.test(a, b)
        if why is not None:
            return rule.kind, why
    return None


def requires_packages(matrix: m.Matrix, draft: PackageDraft) -> tuple[tuple[m.StackPackage, str, str], ...]:
    """(stack package, name, specifier) of each other stack package the build's declared
    requirements name (torch-tensorrt: tensorrt-cu13<11.2.0,>=11.1.0): StackBuild.requires are
    the unconditional ones; an extra (megatron-core[te]) the plan does not take is not among them."""
    out: list[tuple[m.StackPackage, str, str]] = []
    for name, spec in draft.build.requires:
        for pid, pip, patterns in matrix.stack_names():  # only a package named is built
            if pid == draft.package.id or any(p.id == pid for p, _, _ in out):
                continue
            if name == pip or any(_pattern_matches(x, name) for x in patterns):
                out.append((matrix.stack(pid), name, spec))
    return tuple(out)


def _pattern_matches(pattern: str, name: str) -> bool:
    if "{flavour}" not in pattern:
        return pattern == name
    head, _, tail = pattern.partition("{flavour}")
    return name.startswith(head) and name.endswith(tail) and len(name) > len(head) + len(tail)


def _builds_in_order(release: m.StackRelease) -> tuple[m.StackBuild, ...]:
    """A release's builds as pip would take them: the default first, then the others, newest CUDA first."""
    return tuple(sorted(release.builds, key=lambda b: (not b.default, -(b.cuda_major or 0))))


def package_candidates(
    matrix: m.Matrix, pin: tuple[str, str, str], q: PackageQuestion
) -> tuple[tuple[PackageDraft, ...], tuple[Elimination, ...]]:
    """(the builds of a stack pin that pass PACKAGE_RULES, newest release first; the eliminations
    of the others, in order)."""
    from provision.plan.context import stack_pin

    _, given, role = pin
    found = stack_pin(matrix, given, role)
    passed, dropped = [], []
    for release in found.releases:
        for build in _builds_in_order(release):
            done = run(PACKAGE_RULES, q, PackageDraft(found.package, release, build, role, q.pythons))
            (dropped if isinstance(done, Elimination) else passed).append(done)
    return tuple(passed), tuple(dropped)


def package_question(
    matrix: m.Matrix, on: tuple[str, str, str], fw_key: tuple | None, cuda: Version, cudnn: str | None
) -> PackageQuestion:
    """What a candidate's stack packages are checked against (``on``: host architecture, compute
    capability, image OS; ``fw_key``: framework id, release version, build variant, or None)."""
    host, cc, img_os = on
    os_facts = image_os_facts(img_os)
    pythons = tuple(os_facts["python"]) if os_facts else ()
    fw = None
    if fw_key is not None:
        fw_id, version, variant = fw_key
        release = matrix.framework(fw_id).release(version)
        fw = (fw_id, version, next(b for b in release.builds if b.variant == variant))
        pythons = tuple(v for v in pythons if spec_holds(release.python_for(host), v))
    glibc = Version(os_facts["glibc"]) if os_facts and os_facts.get("glibc") else None
    return PackageQuestion(matrix, host, cc, img_os, fw, cuda, cudnn, pythons, glibc, fw_key)


@per_matrix
def choose_packages(  # noqa: PLR0917 - per_matrix keys by positional arguments
    matrix: m.Matrix,
    pins: tuple[tuple[str, str, str], ...],
    on: tuple[str, str, str],
    fw_key: tuple | None,
    cuda: Version,
    cudnn: str | None,
) -> tuple[PackageDraft, ...] | Elimination:
    """One release and build per stack pin, in the order given, each the newest that fits the
    candidate and every package before it (PAIR_RULES and a common Python; a depth-first search:
    an older release of an earlier package is taken when a later one fits nothing with the newer);
    then each stack package a chosen build declares a requirement on that the pins do not name
    (torch-tensorrt: tensorrt), role "requires", by the same search: the newest release that the
    requirement and every rule take. Or the Elimination saying why none fits (a pinned package
    with no fitting build: its builds' reasons; else the first pair that conflicts).
    ``on``: (host architecture, compute capability, image OS); ``fw_key``: (framework id, release
    version, build variant), None for an inference image."""
    q = package_question(matrix, on, fw_key, cuda, cudnn)
    options = []
    for pin in pins:
        passed, dropped = package_candidates(matrix, pin, q)
        if not passed:
            return _no_build(pin, dropped)
        options.append(passed)
    conflicts: list[tuple[str, str]] = []
    required: dict[str, tuple[tuple[PackageDraft, ...], tuple[Elimination, ...]]] = {}

    def pending(chosen: tuple[PackageDraft, ...]) -> tuple[tuple[PackageDraft, ...], str] | None:
        """The drafts of the first stack package a chosen build requires and the set lacks, and
        the requirement as a reason names it; None when the set is closed."""
        have = {c.package.id for c in chosen}
        for c in chosen:
            for package, name, spec in requires_packages(matrix, c):
                if package.id not in have:
                    if package.id not in required:
                        required[package.id] = package_candidates(matrix, (package.id, package.id, "requires"), q)
                    passed, dropped = required[package.id]
                    by = f"{c.name} requires {name}{spec}"
                    if not passed:
                        none = _no_build((package.id, package.id, "requires"), dropped)
                        conflicts.append((none.rule, f"{by}; no {package.id} build fits: {none.why}"))
                    drafts = tuple(d._replace(required_by=c.package.id) for d in passed)
                    return drafts, by
        return None

    def walk(i: int, chosen: tuple[PackageDraft, ...], pythons: tuple[str, ...]):
        if i < len(options):
            drafts, by = options[i], None
        else:
            more = pending(chosen)
            if more is None:
                return chosen
            drafts, by = more
        for draft in drafts:
            common = tuple(v for v in pythons if v in draft.pythons)
            if not common:
                conflicts.append(
                    (
                        "stack-python",
                        f"{draft.name} takes Python {', '.join(draft.pythons)}; with "
                        f"{', '.join(c.name for c in chosen)} none is left of {q.img_os}'s",
                    )
                )
                continue
            clash = next((w for c in chosen for w in (pair_clash(c, draft),) if w), None)
            if clash is not None:
                kind, why = clash
                conflicts.append((kind, why if by is None or kind == "stack-requires" else f"{by}: {why}"))
                continue
            done = walk(i + 1, (*chosen, draft), common)
            if done is not None:
                return done
        return None

    done = walk(0, (), q.pythons)
    if done is not None:
        return done
    kind, why = conflicts[0] if conflicts else ("stack-requires", "no set fits")
    return Elimination(" + ".join(p[1] for p in pins), why, kind)


_KIND_ORDER = (
    "stack-sm",
    "stack-arch",
    "stack-requires",
    "stack-soname",
    "stack-cudnn",
    "stack-cuda",
    "stack-python",
    "stack-glibc",
    "stack-nvcc",
)


def _no_build(pin: tuple[str, str, str], dropped: tuple[Elimination, ...]) -> Elimination:
    """The Elimination of a stack pin none of whose builds fits: the reasons of its newest
    release's builds (a pinned release: that release's), the most telling kind first."""
    newest = dropped[0].candidate.split(" ")[0]
    first = [e for e in dropped if e.candidate.split(" ")[0] == newest]
    first.sort(key=lambda e: _KIND_ORDER.index(e.rule) if e.rule in _KIND_ORDER else len(_KIND_ORDER))
    same = len({e.why for e in first}) == 1
    whys = list(dict.fromkeys(e.why if same else f"{e.candidate}: {e.why}" for e in first))
    releases = len({e.candidate.split(" ")[0] for e in dropped})
    more = f" ({releases} releases tried, none fits)" if releases > 1 else ""
    candidate = first[0].candidate if len(first) == 1 else (newest if same else pin[1])
    return Elimination(candidate, "; ".join(whys) + more, first[0].rule)


_IMAGE_OS: dict[str, dict | None] = {}


def image_os_facts(img_os: str) -> dict | None:
    """The image OS's facts for a stack: its Pythons (versions, default first) and glibc
    (images/os.yaml, the file `render` picks the image's Python from); None: not listed there.
    Kept as JSON in the validated-data cache under the file's hash (a stack plan does not import
    a YAML parser for it)."""
    if img_os not in _IMAGE_OS:
        _IMAGE_OS.update(_read_image_oses())
        _IMAGE_OS.setdefault(img_os, None)
    return _IMAGE_OS[img_os]


def _read_image_oses() -> dict[str, dict]:
    import hashlib
    import json
    import os

    from provision.matrix.cache import cache_dir
    from provision.resources import images_dir

    with open(os.path.join(images_dir(), "os.yaml"), "rb") as fh:
        data = fh.read()
    kept = os.path.join(cache_dir(), f"image-os-{hashlib.sha256(data).hexdigest()[:32]}.json")
    use_cache = not os.environ.get("PROVISION_NO_CACHE")
    if use_cache:
        try:
            with open(kept, encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            pass
    import yaml

    facts = {
        str(name): {"glibc": row.get("glibc"), "python": [str(p["version"]) for p in row.get("python", ())]}
        for name, row in yaml.safe_load(data)["image_os"].items()
    }
    if use_cache:
        try:
            os.makedirs(os.path.dirname(kept), exist_ok=True)
            partial = f"{kept}.{os.getpid()}.partial"
            with open(partial, "w", encoding="utf-8") as fh:
                json.dump(facts, fh)
            os.replace(partial, kept)
        except OSError:
            pass  # a cache that cannot be written is only slower
    return facts


def image_flavour(matrix: m.Matrix, build: m.FrameworkBuild | None, stack: tuple) -> str:
    """The flavour of the images a candidate starts from (provision.matrix.model.base_flavour), with
    a stack: devel when a package compiles or reads the CUDA headers at run time (DeepSpeed's JIT
    ops, Transformer Engine); an inference image's libraries come from the image: cuDNN's
    (cudnn-runtime) when its package uses cuDNN (ONNX Runtime), else CUDA's (runtime: TensorRT).
    The packages a stack package's builds require (role requires) count too."""
    closure = required_closure(matrix, tuple(p.package.id for p in stack)) if stack else ()
    if any(p.runtime is not None and p.runtime.image == "devel" for p in closure):
        return "devel"
    if build is None and stack:
        uses_cudnn = any(b.cudnn_major is not None for r in stack[0].package.releases for b in r.builds)
        return m.base_flavour("system" if uses_cudnn else None)
    return m.base_flavour(build.libraries if build is not None else None)


@per_matrix
def required_closure(matrix: m.Matrix, ids: tuple[str, ...]) -> tuple[m.StackPackage, ...]:
    """The stack packages of ``ids`` and every stack package any of their builds declares a
    requirement on, transitively (what a role-requires package may bring in)."""
    found = [matrix.stack(i) for i in ids]
    seen = set(ids)
    for package in found:  # grows as it goes
        for release in package.releases:
            for build in release.builds:
                for other, _, _ in requires_packages(matrix, PackageDraft(package, release, build, "with")):
                    if other.id not in seen:
                        seen.add(other.id)
                        found.append(other)
    return tuple(found)


# -- the kinds, in the order a refusal's summary names them: the stages nearest to a plan first ----
def _s(n: int) -> str:
    return "" if n == 1 else "s"


KINDS = (
    Kind("stack-sm", lambda ctx, s: f"stack package build{s} that do not support sm_{ctx.cc.replace('.', '')}"),
    Kind("stack-requires", lambda ctx, s: f"stack package build{s} whose declared requirements refuse the others"),
    Kind(
        "stack-soname",
        lambda ctx, s: f"stack package build{s} that need another soname of a library than the others load",
    ),
    Kind("stack-cudnn", lambda ctx, s: f"stack package build{s} whose cuDNN disagrees with the plan's"),
    Kind("stack-cuda", lambda ctx, s: f"stack package build{s} for another CUDA than the plan's"),
    Kind("stack-python", lambda ctx, s: f"stack package build{s} for no Python the {ctx.img_os} images offer"),
    Kind("stack-glibc", lambda ctx, s: f"stack package build{s} whose wheels need a newer glibc than {ctx.img_os}'s"),
    Kind("stack-arch", lambda ctx, s: f"stack package build{s} without {ctx.host} wheels"),
    Kind("stack-nvcc", lambda ctx, s: f"stack package build{s} whose nvcc differs from the framework build's CUDA"),
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
