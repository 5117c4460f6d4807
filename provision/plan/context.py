"""The resolver's first room: a request read against the catalogue (its OS, GPU and platform facts,
its pins, the images' OS) and the record of what the search eliminates. Every refusal of the
request itself (an unknown id, a bad pin, a GPU group whose members differ, a platform that does
not take the GPU, an OS without the GPU's host architecture) is raised here, before any search.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from provision.errors import BadPin, InputError, NoCompatibleStack, UnknownId
from provision.matrix import model as m
from provision.matrix.memo import per_matrix
from provision.plan.model import PlanRequest
from provision.versions import DottedVersion as Version
from provision.versions import major_minor, parse_version, prefix_matches

POLICIES = ("lts", "latest")


class Elimination(NamedTuple):
    """A candidate the search dropped, why, and the rule (provision.plan.rules) that dropped it."""

    candidate: str
    why: str
    rule: str


class Subject(NamedTuple):
    """What a request's facts are worked out from (the key of everything they decide)."""

    os: str
    gpu: str | None
    platform: str | None
    policy: str

    @classmethod
    def of(cls, request: PlanRequest) -> Subject:
        return cls(request.os, request.gpu, request.platform, request.policy)


class PinText(NamedTuple):
    """A request's pins as given (the key of what they read as)."""

    driver: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    framework: str | None = None
    host_only: bool = False
    image_os: str | None = None
    with_: tuple[str, ...] = ()  # --with NAME[==VERSION], in the order given

    @classmethod
    def of(cls, request: PlanRequest) -> PinText:
        return cls(
            request.driver,
            request.cuda,
            request.cudnn,
            request.framework,
            request.host_only,
            request.image_os,
            tuple(request.with_),
        )


class StackPin(NamedTuple):
    """A stack package a request asks for (compat/stacks.yaml): the releases a pin allows (every
    release, newest first, when unpinned) and its role: "framework" (--framework onnxruntime) or
    "with" (--with)."""

    package: m.StackPackage
    releases: tuple[m.StackRelease, ...]
    role: str
    given: str  # as the user wrote it, for messages
    pinned: bool


class Pins(NamedTuple):
    driver_branch: int | None
    driver_release: Version | None
    cuda: str | None
    cudnn: str | None
    framework: m.Framework | None
    framework_release: m.FrameworkRelease | None
    # the stack packages asked for: --framework onnxruntime|tensorrt first (role framework), then
    # each --with in the order given; () without (the stacks catalogue is then never read)
    stack: tuple[StackPin, ...] = ()


class Facts(NamedTuple):
    """What the request's OS, GPU, platform and policy give a resolution (each refusal of those raised)."""

    os: m.OsRelease
    gpu_id: str
    gpu_name: str
    gpus: tuple[m.Gpu, ...]
    arch: m.Architecture
    cc: str
    nvswitch: bool
    min_driver: Version | None
    subnet_manager: m.SubnetManager | None  # the catalogue's, when this GPU's NVSwitch needs it
    host: str  # the host CPU architecture (the GPU's: GH200 is an aarch64 superchip)
    repo_arch: str  # the OS repository's directory for it (x86_64, sbsa)
    gpu_modules: tuple[str, ...] | None  # GPU-level kernel-module limits (GH200: open)
    platform: m.Platform | None  # --platform, and what it gives the GPU (interconnect, topology, PCIe)
    link: m.PlatformLink | None


class Context:
    """One resolution: the request, its facts and pins, the images' OS, and what was eliminated."""

    __slots__ = (
        "_seen",
        "arch",
        "asks",
        "cc",
        "eliminated",
        "facts",
        "gpu_id",
        "gpus",
        "host",
        "img_os",
        "kinds",
        "matrix",
        "min_driver",
        "os",
        "pins",
        "request",
        "skipped",
        "subject",
    )

    def __init__(self, matrix: m.Matrix, request: PlanRequest, subject: Subject, facts: Facts, pins: Pins) -> None:
        self.matrix, self.request, self.subject, self.facts, self.pins = matrix, request, subject, facts, pins
        # the facts the search reads most, as attributes (the others: ctx.facts)
        self.os, self.gpu_id, self.gpus, self.arch = facts.os, facts.gpu_id, facts.gpus, facts.arch
        self.cc, self.host, self.min_driver = facts.cc, facts.host, facts.min_driver
        self.asks: dict = {}  # provision.plan.search: what CUDA releases are asked, per build's libraries
        # the OS of the plan's images (nvidia/cuda tag suffix): --image-os, else the host OS's own
        self.img_os = image_os_of(matrix, facts.os, request.image_os)
        self.eliminated: list[Elimination] = []
        self._seen: set[str] = set()
        self.kinds: set[str] = set()  # which rules eliminated candidates
        self.skipped: list[tuple[m.DriverBranch, str]] = []  # branches the policy or end of life left out, why

    def drop(self, elimination: Elimination) -> None:
        """Record an elimination; the same candidate and reason are listed once (under the first rule)."""
        self.kinds.add(elimination.rule)
        seen = f"{elimination.candidate}\x00{elimination.why}"  # a str: no tuple for the collector to track
        if seen not in self._seen:
            self._seen.add(seen)
            self.eliminated.append(elimination)


def context(matrix: m.Matrix, request: PlanRequest) -> Context:
    """The request's facts (first: their refusals come before a bad pin's) and pins."""
    subject = Subject.of(request)
    facts = request_facts(matrix, subject)
    return Context(matrix, request, subject, facts, parse_pins(matrix, PinText.of(request)))


@per_matrix
def request_facts(matrix: m.Matrix, subject: Subject) -> Facts:
    os_id, gpu, platform_id, policy = subject
    os_rel = matrix.os(os_id)
    platform = matrix.platform(platform_id) if platform_id is not None else None
    gpu_id, gpus = matrix.gpu_members(gpu_ident(matrix, gpu, platform_id, platform))
    first = gpus[0]
    if platform is not None:
        refusal = platform_refusal(matrix, platform, gpus)
        if refusal is not None:
            raise InputError(refusal[0], hint=refusal[1])
    links = {g.id: platform.link(g) for g in gpus} if platform is not None else {}
    getters = (
        ("architecture", lambda g: g.architecture),
        ("compute capability", lambda g: g.compute_capability),
        ("Fabric Manager (NVSwitch)", lambda g: links[g.id].nvswitch if links else g.nvswitch),
        ("NVSwitch generation", lambda g: links[g.id].nvswitch_generation if links else g.nvswitch_generation),
        ("host architecture", lambda g: g.host_arches),
    )
    differs = [what for what, get in getters if len({get(g) for g in gpus}) > 1]
    if links and len(set(links.values())) > 1 and not differs:
        differs.append(f"what {platform.name} gives them (topology, PCIe link)")
    if "Fabric Manager (NVSwitch)" in differs and "NVSwitch generation" in differs:
        differs.remove("NVSwitch generation")  # one fact: some members have no NVSwitch at all
    if differs:
        raise InputError(
            f"GPU {gpu_id!r} covers {', '.join(g.id for g in gpus)}, which differ in {' and '.join(differs)}",
            hint=f"name one of them: {' or '.join('--gpu ' + g.id for g in gpus)}",
        )
    if policy not in POLICIES:
        raise BadPin(f"unknown policy {policy!r}", hint=f"use one of: {', '.join(POLICIES)}")
    for x in matrix.exclusions:
        if (x.os in (None, os_rel.id)) and (x.gpu in (None, gpu_id, *[g.id for g in gpus])):
            error = NoCompatibleStack(
                f"{gpu_id} on {os_rel.id} is declared unsupported",
                eliminations=[(f"{os_rel.id} + {gpu_id}", x.reason)],
                hint="see compat/unsupported.yaml",
            )
            error.kinds = frozenset({"declared-unsupported"})
            raise error
    host = first.host_arches[0]
    if os_rel.repo_arch(host) is None:
        raise _os_arch_refusal(matrix, os_rel, gpu_id, host)
    limits = [g.kernel_modules for g in gpus if g.kernel_modules is not None]
    mins = [g.min_driver for g in gpus if g.min_driver is not None]
    group = matrix.group(gpu_id)
    link = links.get(first.id)
    generation = link.nvswitch_generation if link is not None else first.nvswitch_generation
    sm = matrix.subnet_manager
    return Facts(
        os=os_rel,
        gpu_id=gpu_id,
        gpu_name=group.name if group else first.name,
        gpus=gpus,
        arch=matrix.architecture(first.architecture),
        cc=first.compute_capability,
        nvswitch=link.nvswitch if link is not None else first.nvswitch,
        min_driver=max(mins) if mins else None,
        subnet_manager=sm if sm is not None and sm.needed_at(generation) else None,
        host=host,
        repo_arch=os_rel.repo_arch(host) or host,
        gpu_modules=tuple(k for k in limits[0] if all(k in lim for lim in limits)) if limits else None,
        platform=platform,
        link=link,
    )


# -- platforms: the GPU a platform implies, and the GPUs it takes ---------------------------------
_FORM_FACTORS = {  # gpus.yaml form factor -> (one, many)
    "pcie": ("a PCIe card", "PCIe cards"),
    "sxm": ("an SXM module", "SXM modules"),
    "sxm2": ("an SXM2 module", "SXM2 modules"),
    "sxm4": ("an SXM4 module", "SXM4 modules"),
    "sxm5": ("an SXM5 module", "SXM5 modules"),
    "superchip": ("a superchip", "superchips"),
}


def _form_factor(form: str, *, many: bool = False) -> str:
    return _FORM_FACTORS.get(form, (f"a {form} GPU", f"{form} GPUs"))[many]


def _platform_takes_text(platform: m.Platform, *, many: bool = True) -> str:
    """``SXM4 modules or SXM5 modules``; ``many=False``: ``PCIe card`` (for "any PCIe card")."""
    if many:
        return " or ".join(_form_factor(f, many=True) for f in platform.form_factors)
    return " or ".join(_form_factor(f).split(" ", 1)[1] for f in platform.form_factors)


def _platform_hint(matrix: m.Matrix, platform: m.Platform, lead: str = "") -> str:
    """The GPUs a platform takes, as --gpu options (a server: those a source shows in it, and that
    any of its form factors fits; a generic server: the catalogue's GPUs of its form factors)."""
    if platform.gpus:
        options = " or ".join(f"--gpu {g}" for g in platform.gpus)
        if platform.strict:
            return f"{lead}the GPUs {platform.id} takes: {options}"
        return f"{lead}GPUs a source shows in {platform.id}: {options} (it takes any {_platform_takes_text(platform, many=False)})"
    fitting = [g.id for g in matrix.gpus if g.form_factor in platform.form_factors]
    shown = ", ".join(fitting[:6]) + (
        f", … ({len(fitting) - 6} more: provision matrix gpus)" if len(fitting) > 6 else ""
    )
    return f"{lead}{platform.id} takes any catalogued {_platform_takes_text(platform, many=False)}: --gpu {shown}"


def gpu_ident(
    matrix: m.Matrix, request: PlanRequest | str | None, platform_id: str | None = None, platform=None
) -> str:
    """The GPU a request names, or the one its platform implies: the platform's one GPU model, or
    the catalogued group of exactly its models. ``request``: a PlanRequest, or its gpu (then
    ``platform_id`` is its platform); ``platform``: the platform, where already looked up."""
    if isinstance(request, PlanRequest):
        gpu, platform_id = request.gpu, request.platform
    else:
        gpu = request
    if gpu is not None:
        return gpu
    if platform is None and platform_id is not None:
        platform = matrix.platform(platform_id)
    if platform is None:
        raise InputError(
            "no GPU given", hint="name one with --gpu (provision matrix gpus), or a server with --platform"
        )
    if len(platform.gpus) == 1:
        return platform.gpus[0]
    group = next((g for g in matrix.gpu_groups if platform.gpus and set(g.members) == set(platform.gpus)), None)
    if group is not None:
        return group.id
    what = f"{len(platform.gpus)} GPU models" if platform.gpus else f"any {_platform_takes_text(platform, many=False)}"
    raise InputError(
        f"platform {platform.id} ({platform.name}) takes {what}: --gpu must say which",
        hint=_platform_hint(matrix, platform),
    )


def platform_refusal(matrix: m.Matrix, platform: m.Platform, gpus: tuple[m.Gpu, ...]) -> tuple[str, str] | None:
    """(message, hint) when the platform does not take one of ``gpus``; None when it takes them all.
    A system or baseboard takes only the GPUs it lists; a server, any GPU of its form factors."""
    for gpu in gpus:
        if platform.takes(gpu):
            continue
        if gpu.form_factor not in platform.form_factors:
            why = f"{gpu.id} is {_form_factor(gpu.form_factor)}"
        else:
            why = f"no source puts {gpu.id} in it (a {platform.kind} takes only the GPUs it lists)"
        return (
            f"platform {platform.id} ({platform.name}) takes {_platform_takes_text(platform)}; {why}",
            _platform_hint(matrix, platform),
        )
    return None


def _os_arch_refusal(matrix: m.Matrix, os_rel: m.OsRelease, gpu_id: str, host: str) -> NoCompatibleStack:
    """The GPU's host architecture has no directory in the OS's NVIDIA repository (os.yaml arches)."""
    serving = [o.id for o in matrix.os_releases if o.repo_arch(host) is not None]
    served = "/".join(a for a, _ in os_rel.arches)
    error = NoCompatibleStack(
        f"{gpu_id} needs an {host} host, and {os_rel.id} is catalogued for {served} hosts only",
        eliminations=[
            (
                f"{os_rel.id} + {gpu_id}",
                f"NVIDIA's {os_rel.nvidia_repo} repository has no {host} directory in the catalogue (os.yaml arches)",
            )
        ],
        hint=f"plan an OS whose repository serves {host}: {' or '.join('--os ' + o for o in serving)}"
        if serving
        else f"no catalogued OS serves {host} hosts (compat/os.yaml arches)",
    )
    error.kinds = frozenset({"os-arch"})
    error.summary = [f"{os_rel.id}: no {host} repository directory catalogued (os.yaml arches: {served})"]
    return error


# -- the images' OS ------------------------------------------------------------------------------
def image_os_of(matrix: m.Matrix, os_rel: m.OsRelease, requested: str | None) -> str:
    """The OS of a plan's images: ``requested`` (an nvidia/cuda tag suffix the catalogue publishes
    images for, or a host OS id or alias, meaning that OS's own images), else the host OS's own."""
    if requested is None:
        return os_rel.cuda_image_os
    text = requested.strip()
    published = published_image_oses(matrix)
    if text in published:
        return text
    for rel in matrix.os_releases:
        if text in (rel.id, *rel.aliases):
            return rel.cuda_image_os
    raise UnknownId(
        f"--image-os {requested!r} is not an OS nvidia/cuda images are catalogued for",
        hint=f"one of: {', '.join(published)} (or a host OS id: its own images)",
    )


@per_matrix
def published_image_oses(matrix: m.Matrix) -> list[str]:
    """Every nvidia/cuda tag suffix the catalogue lists images for, hosts' own first (os.yaml order)."""
    listed = {o for i in matrix.images for o in i.os}
    ordered = [o.cuda_image_os for o in matrix.os_releases] + sorted(listed)
    return [o for o in dict.fromkeys(ordered) if o in listed]


# -- pins ------------------------------------------------------------------------------------------
def _host_only_pins(
    host_only: bool, cuda: str | None, cudnn: str | None, framework: str | None, image_os: str | None
) -> None:
    """A --host-only request with a cuDNN or framework pin: refused, since nothing would honour
    them. --cuda (and --image-os) say which images the host must run: the driver is chosen so
    that it runs them (provision.plan.search.host_cuda), and no image is planned."""
    given = [f"--{k}" for k, v in (("cudnn", cudnn), ("framework", framework)) if v]
    if host_only and given:
        raise BadPin(
            f"--host-only plans no image, so {' and '.join(given)} cannot apply",
            hint=f"drop {' and '.join(given)} (--cuda alone names the CUDA images the host must run), or drop "
            "--host-only to plan an image too",
        )
    if host_only and image_os and not cuda:
        raise BadPin(
            "--host-only plans no image, so --image-os alone cannot apply (a host runs images of any OS)",
            hint="drop --image-os, or add --cuda X.Y to name the CUDA images the host must run",
        )


@per_matrix
def parse_pins(matrix: m.Matrix, given: PinText) -> Pins:
    """A request's pins read against the catalogue (each bad one refused, in the order of its flags)."""
    driver, cuda, cudnn, framework, host_only, image_os, with_ = given
    _host_only_pins(host_only, cuda, cudnn, framework, image_os)
    if host_only and with_:
        raise BadPin(
            "--host-only plans no image, so --with cannot apply",
            hint="drop --with, or drop --host-only to plan an image with its stack",
        )
    branch, release = _driver_pin(matrix, driver) if driver is not None else (None, None)
    cuda_pin = _cuda_pin(matrix, cuda) if cuda is not None else None
    cudnn_pin = None
    if cudnn is not None:
        cudnn_pin = cudnn.strip()
        if not re.fullmatch(r"\d+(\.\d+){0,3}", cudnn_pin):
            raise BadPin(
                f"--cudnn {cudnn!r} is not a cuDNN version",
                hint="use a major (9), major.minor (9.1) or a build (9.1.0.70)",
            )
    stack: tuple[StackPin, ...] = ()
    if framework is not None and _stack_framework(matrix, framework, refuse=True):
        fw, fw_release = None, None
        stack = (stack_pin(matrix, framework, "framework"),)
    else:
        fw, fw_release = framework_pin(matrix, framework) if framework is not None else (None, None)
    if with_:
        stack = with_pins(matrix, fw, stack, with_)
    return Pins(branch, release, cuda_pin, cudnn_pin, fw, fw_release, stack)


def _driver_pin(matrix: m.Matrix, driver: str) -> tuple[int, Version | None]:
    text = driver.strip().lstrip("Rr")
    release = None
    if re.fullmatch(r"\d{3}", text):
        branch = int(text)
    elif re.fullmatch(r"\d{3}\.\d+(\.\d+)?", text):
        branch, release = int(text.split(".")[0]), parse_version(text)
    else:
        raise BadPin(
            f"--driver {driver!r} is neither a branch nor a release",
            hint="use a branch (--driver 580) or a release (--driver 580.95.05)",
        )
    known = matrix.branch(branch)
    if known is None:
        raise BadPin(
            f"driver branch R{branch} is not in the catalogue",
            hint="catalogued branches: " + ", ".join(str(b.branch) for b in matrix.drivers),
        )
    if release is not None and known.release(release) is None:
        raise BadPin(
            f"driver {release} is not a catalogued R{branch} release",
            hint="newest catalogued: " + ", ".join(str(r.version) for r in known.releases[:4]),
        )
    return branch, release


def _cuda_pin(matrix: m.Matrix, given: str) -> str:
    cuda = given.strip()
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", cuda):
        raise BadPin(f"--cuda {given!r} is not a CUDA version", hint="use major.minor (12.4) or a release (12.4.1)")
    if not any(prefix_matches(cuda, c.version) for c in matrix.cuda):
        image = matrix.image(Version(cuda)) if cuda.count(".") == 2 else None
        if image is not None and image.carries != image.cuda:
            raise BadPin(
                f"CUDA {cuda} is an nvidia/cuda image set, not a toolkit release",
                hint=f"its images carry the CUDA {image.carries} toolkit: pin --cuda {image.carries} "
                f"(or {major_minor(image.cuda)}); plans then use the {cuda} tags",
            )
        raise BadPin(
            f"CUDA {cuda} is not in the catalogue",
            hint="catalogued: "
            + ", ".join(sorted({major_minor(c.version) for c in matrix.cuda}, key=Version, reverse=True)),
        )
    return cuda


def framework_named(matrix: m.Matrix, name: str) -> m.Framework | None:
    """The catalogued framework a --framework NAME means (its id, pip name or an alias in
    frameworks.yaml, any case), or None."""
    return next((fw for fw in matrix.frameworks if fw.named(name)), None)


def framework_pin(matrix: m.Matrix, given: str) -> tuple[m.Framework, m.FrameworkRelease | None]:
    """--framework NAME or NAME==VERSION: the framework and, when a version is given, its release."""
    text = given.strip()
    mt = re.fullmatch(r"([A-Za-z]+)(?:==(.+))?", text)
    if not mt:
        raise BadPin(f"--framework {text!r} is not NAME or NAME==VERSION", hint="e.g. --framework pytorch==2.5.1")
    framework = framework_named(matrix, mt[1])
    if framework is None:
        raise UnknownId(f"unknown framework {mt[1]!r}", hint=f"known: {', '.join(framework_ids(matrix))}")
    if mt[2] is None:
        return framework, None
    local = re.fullmatch(r"(\d+(?:\.\d+)*)\+cu(\d{2,3})", mt[2])
    if local:  # pytorch==2.5.1+cu121: the build is the CUDA pin's to choose
        cu = f"{local[2][:-1]}.{local[2][-1]}"
        raise BadPin(
            f"{mt[2]!r} names a {framework.name} build (+cu{local[2]}: its CUDA {cu} wheels), not a version",
            hint=f"pin the release and the CUDA apart: --framework {mt[1]}=={local[1]} --cuda {cu}",
        )
    if not re.fullmatch(r"\d+(\.\d+)*", mt[2]):
        raise BadPin(f"{mt[2]!r} is not a {framework.name} version", hint="e.g. --framework pytorch==2.5.1")
    fw_release = framework.release(parse_version(mt[2]))
    if fw_release is None:
        near = [str(r.version) for r in framework.releases if prefix_matches(".".join(mt[2].split(".")[:2]), r.version)]
        near = near or [str(r.version) for r in framework.releases[:4]]
        raise UnknownId(
            f"{framework.name} {mt[2]} is not in the catalogue",
            hint=f"catalogued {framework.name} releases include {', '.join(near)} (list: provision matrix frameworks)",
        )
    return framework, fw_release


# -- stack packages (compat/stacks.yaml): --framework onnxruntime|tensorrt, --with ---------------
_STACK_TEXT = re.compile(r"([A-Za-z][A-Za-z0-9_.-]*)(?:==(.+))?")


def _stack_framework(matrix: m.Matrix, given: str, *, refuse: bool = False) -> bool:
    """--framework names a stack package (onnxruntime, tensorrt) rather than a framework of
    frameworks.yaml: only then is the stacks catalogue read. ``refuse``: a package that goes with
    a framework (deepspeed) is refused, naming --with."""
    mt = _STACK_TEXT.fullmatch(given.strip())
    if mt is None or framework_named(matrix, mt[1]) is not None:
        return False
    package = stack_named(matrix, mt[1])
    if package is None:
        return False
    needs = needs_framework(matrix, package)
    if needs and refuse:
        names = [f.id for f in matrix.frameworks if f.package in needs]
        raise BadPin(
            f"{package.id} is added to a framework ({' or '.join(needs)}), not an image's framework itself",
            hint=f"plan it with --framework {names[0]} --with {given.strip()}",
        )
    return not needs


def stack_named(matrix: m.Matrix, name: str) -> m.StackPackage | None:
    """The stack package a NAME means: its id or its pip name (onnxruntime, onnxruntime-gpu), any
    case (only that package is built: Matrix.stack)."""
    low = name.lower()
    found = next((pid for pid, pip, _ in matrix.stack_names() if low in (pid, pip.lower())), None)
    return None if found is None else matrix.stack(found)


def needs_framework(matrix: m.Matrix, package: m.StackPackage) -> tuple[str, ...]:
    """The framework packages (frameworks.yaml pip names: torch) the package's builds require: a
    package that needs one goes with that framework (--with), never stands as an image's framework."""
    packages = {fw.package for fw in matrix.frameworks}
    return tuple(
        sorted({name for r in package.releases for b in r.builds for name, _ in b.requires if name in packages})
    )


def framework_ids(matrix: m.Matrix) -> tuple[str, ...]:
    """Every name --framework takes, as a hint lists them: the frameworks of frameworks.yaml, then
    the stack packages that stand as an inference image's framework (onnxruntime, tensorrt)."""
    return (*(f.id for f in matrix.frameworks), *(p.id for p in inference_frameworks(matrix)))


def inference_frameworks(matrix: m.Matrix) -> tuple[m.StackPackage, ...]:
    """The stack packages that stand as an image's framework (--framework): those with a CUDA of
    their own that need no framework (ONNX Runtime, TensorRT)."""
    return tuple(p for p in matrix.stacks if is_inference_framework(matrix, p))


def is_inference_framework(matrix: m.Matrix, package: m.StackPackage) -> bool:
    return package.uses_cuda and not needs_framework(matrix, package)


def stack_pin(matrix: m.Matrix, given: str, role: str) -> StackPin:
    """NAME or NAME==VERSION of a stack package (``role`` framework: --framework, with: --with).
    VERSION is a release or a prefix of one (--framework tensorrt==10.6: the 10.6 releases)."""
    flag = "--framework" if role == "framework" else "--with"
    text = given.strip()
    mt = _STACK_TEXT.fullmatch(text)
    if mt is None:
        raise BadPin(f"{flag} {text!r} is not NAME or NAME==VERSION", hint=f"e.g. {flag} onnxruntime==1.20.1")
    package = stack_named(matrix, mt[1])
    if package is None or (role == "framework" and not is_inference_framework(matrix, package)):
        known = [p.id for p in matrix.stacks] if role == "with" else list(framework_ids(matrix))
        raise UnknownId(
            f"unknown {'framework' if role == 'framework' else 'stack package'} {mt[1]!r}",
            hint=f"known: {', '.join(known)} (provision matrix stacks lists the stack packages' releases)",
        )
    if mt[2] is None:
        return StackPin(package, package.releases, role, text, pinned=False)
    version = mt[2].strip()
    if not re.fullmatch(r"\d+(\.\d+)*", version):
        raise BadPin(
            f"{version!r} is not a {package.name} version",
            hint=f"e.g. {flag} {package.id}=={package.releases[0].version}",
        )
    releases = tuple(r for r in package.releases if prefix_matches(version, r.version))
    if not releases:
        near = [str(r.version) for r in package.releases if prefix_matches(".".join(version.split(".")[:1]), r.version)]
        near = (near or [str(r.version) for r in package.releases])[:8]
        raise UnknownId(
            f"{package.name} {version} is not in the catalogue",
            hint=f"catalogued {package.id} releases include {', '.join(near)} (list: provision matrix stacks)",
        )
    return StackPin(package, releases, role, text, pinned=True)


def with_pins(
    matrix: m.Matrix, fw: m.Framework | None, stack: tuple[StackPin, ...], with_: tuple[str, ...]
) -> tuple[StackPin, ...]:
    """--with NAME[==VERSION], each read against the catalogue: refused without a framework, twice
    over, or beside a framework it cannot go with (torch-tensorrt, deepspeed: PyTorch)."""
    if fw is None and not stack:
        raise BadPin(
            "--with adds stack packages to a framework, and no --framework is given",
            hint="add --framework pytorch (or, for an inference image without PyTorch: "
            f"--framework {' or --framework '.join(p.id for p in inference_frameworks(matrix))})",
        )
    pins = list(stack)
    for text in with_:
        pin = stack_pin(matrix, text, "with")
        twice = next((p for p in pins if p.package.id == pin.package.id), None)
        if twice is not None:
            how = "--framework" if twice.role == "framework" else "--with"
            raise BadPin(
                f"{pin.package.id} is named twice ({how} {twice.given}, --with {pin.given})",
                hint=f"name {pin.package.id} once",
            )
        needs = needs_framework(matrix, pin.package)
        if needs and (fw is None or fw.package not in needs):
            names = [f.id for f in matrix.frameworks if f.package in needs]
            have = fw.id if fw is not None else stack[0].package.id
            raise BadPin(
                f"--with {pin.package.id} needs {' or '.join(needs)} (its builds require it), and the plan's "
                f"framework is {have}",
                hint=f"plan it with --framework {' or --framework '.join(names)}",
            )
        pins.append(pin)
    return tuple(pins)
