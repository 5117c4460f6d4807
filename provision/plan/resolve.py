"""Resolve a plan request (OS, GPU, optional pins) against the compatibility matrix.

Order of preference, first consistent stack wins:

1. Driver branch. A ``--driver`` pin names the branch (or the release). Otherwise the policy:
   ``lts`` (default) tries Long Term Support and Production branches that are not past their
   end of life on the data's date, newest first; ``latest`` tries every branch not past end of
   life, New Feature Branches included, newest first. End-of-life branches are used only when
   pinned. A branch must support the GPU's architecture (Volta ends with R580, Blackwell starts
   with R570) and be at or above the GPU's own minimum driver (HGX B200: 570.133.20).
2. Release: the newest release of the branch that the OS's NVIDIA repository carries.
3. Kernel modules: the branch's default flavour (open from R560) when the architecture runs it,
   otherwise the flavour it needs (Volta: proprietary; Blackwell: open).
4. Framework build, when one is asked for: the package index default first, then the other
   CUDA builds newest first. The build must carry the GPU's SM (as SASS of the same major, or
   as PTX it can JIT from).
5. CUDA: the newest release matching the pin (or the framework build's major.minor) that
   builds for the GPU's SM and has published nvidia/cuda images for the host's image OS, and
   whose minimum driver (release notes, Table 3) the chosen release meets. Minor-version
   compatibility (same CUDA major, driver above the family floor) is used only when no stack
   meets the toolkit minimum, i.e. when a pin forces an older driver, and the plan says so.
6. cuDNN: the framework build's own pin, or the cuDNN of the nvidia/cuda cudnn images for that
   CUDA; it must support the CUDA release and the SM (catalogued support matrix, or the
   catalogued matrices on either side for a release without one).
7. Fabric Manager exactly when the GPU sits on an NVSwitch baseboard, at the driver's version;
   the NVLink Subnet Manager beside it from the NVSwitch generation drivers.yaml names (HGX B200:
   fourth), with driver branches below its floor eliminated. With a platform (``--platform``,
   compat/platforms.yaml) the platform's interconnect decides both, not the GPU's form factor: an
   HGX A100 or H100 4-GPU board connects its SXM GPUs by NVLink without NVSwitch, so no Fabric
   Manager. Without a platform, the GPU's own row (gpus.yaml nvswitch) decides.
8. Container Toolkit: the newest catalogued release.

A platform also gives the GPU when ``--gpu`` is left out (its one GPU model, or the catalogued
group of its models), and refuses a GPU it does not take: a system or baseboard takes the GPUs it
lists, a server any GPU of its form factors (``--platform r750xa --gpu a100-sxm4-80gb``: the
R750xa takes PCIe cards). The plan records the server (``Plan.server``) for verify.

A refusal lists every candidate tried with the reason it was eliminated, and the pin changes
that would resolve.
"""

import re
from collections import Counter
from collections.abc import Iterator
from typing import NamedTuple

from provision.errors import BadPin, InputError, NoCompatibleStack, UnknownId
from provision.matrix import model as m
from provision.matrix import runs_on
from provision.plan.model import (
    Package,
    Plan,
    PlanCuda,
    PlanCudnn,
    PlanData,
    PlanDriver,
    PlanFabricManager,
    PlanFramework,
    PlanGpu,
    PlanModuleOption,
    PlanOs,
    PlanRequest,
    PlanServer,
    PlanSubnetManager,
    PlanToolkit,
    Reason,
)
from provision.versions import DottedVersion as Version
from provision.versions import major_minor, parse_version, prefix_matches

POLICIES = ("lts", "latest")
BRANCH_TYPES = {
    "ltsb": "long-term support branch",
    "pb": "production branch",
    "nfb": "new feature branch",
    "unknown": "branch (designation not published)",
}
_FRAMEWORK_NAMES = {"pytorch": "pytorch", "torch": "pytorch", "tensorflow": "tensorflow", "tf": "tensorflow"}


class Pins(NamedTuple):
    driver_branch: int | None
    driver_release: Version | None
    cuda: str | None
    cudnn: str | None
    framework: m.Framework | None
    framework_release: m.FrameworkRelease | None


class Context:
    """One resolution: the request's facts, and what was eliminated on the way."""

    __slots__ = (
        "arch",
        "cc",
        "eliminated",
        "gpu_id",
        "gpu_modules",
        "gpu_name",
        "gpus",
        "host",
        "img_os",
        "kinds",
        "link",
        "matrix",
        "memo",
        "min_driver",
        "nvswitch",
        "os",
        "pins",
        "platform",
        "repo_arch",
        "request",
        "rule_of",
        "skipped",
        "subnet_manager",
    )

    def __init__(
        self,
        *,
        matrix: m.Matrix,
        request: PlanRequest,
        os: m.OsRelease,
        gpu_id: str,
        gpu_name: str,
        gpus: tuple[m.Gpu, ...],
        arch: m.Architecture,
        cc: str,
        nvswitch: bool,
        min_driver: Version | None,
        pins: Pins,
        subnet_manager: m.SubnetManager | None = None,
        host: str = m.DEFAULT_ARCH,
        gpu_modules: tuple[str, ...] | None = None,
        memo: dict | None = None,
        platform: m.Platform | None = None,
        link: m.PlatformLink | None = None,
    ) -> None:
        self.matrix, self.request, self.os, self.pins = matrix, request, os, pins
        self.memo = memo  # resolve()'s memo: what the catalogue gives the same inputs, worked out once
        self.subnet_manager = subnet_manager  # the catalogue's, when this GPU's NVSwitch needs it
        self.gpu_id, self.gpu_name, self.gpus, self.arch = gpu_id, gpu_name, gpus, arch
        self.cc, self.nvswitch, self.min_driver = cc, nvswitch, min_driver
        # the host CPU architecture (the GPU's: GH200 is an aarch64 superchip) and the OS
        # repository's directory for it (x86_64, sbsa); GPU-level kernel-module limits (GH200: open)
        self.host, self.repo_arch = host, os.repo_arch(host) or host
        self.gpu_modules = gpu_modules
        # the platform asked for (--platform) and what it gives the GPU (interconnect, topology, PCIe)
        self.platform, self.link = platform, link
        # the OS of the plan's images (nvidia/cuda tag suffix): --image-os, else the host OS's own
        self.img_os = image_os_of(matrix, os, request.image_os)
        self.eliminated: list[tuple[str, str]] = []
        self.rule_of: dict[tuple[str, str], str] = {}  # elimination -> the rule (kind) behind it
        self.kinds: set[str] = set()  # which rules eliminated candidates
        self.skipped: list[tuple[m.DriverBranch, str]] = []  # branches the policy or end of life left out, why

    def drop(self, candidate: str, why: str, kind: str) -> None:
        self.kinds.add(kind)
        if (candidate, why) not in self.rule_of:  # the keys of rule_of are the eliminations
            self.eliminated.append((candidate, why))
            self.rule_of[(candidate, why)] = kind


def _kept(ctx: Context, key: tuple, make, *args):
    """make(*args), kept in the resolution's memo under ``key``, which must name everything make
    reads (the catalogue aside: a memo serves one matrix); made anew where there is no memo."""
    memo = ctx.memo
    if memo is None:
        return make(*args)
    try:
        return memo[key]
    except KeyError:
        value = memo[key] = make(*args)
        return value


class DriverChoice(NamedTuple):
    branch: m.DriverBranch
    release: m.DriverRelease
    module: str
    packaging: m.DriverPackaging
    reasons: tuple[Reason, ...]


class Candidate(NamedTuple):
    """One stack the search tries: a driver, a framework build (or none), a CUDA release and its images."""

    drv: DriverChoice
    fw_release: m.FrameworkRelease | None
    build: m.FrameworkBuild | None
    cuda: m.CudaRelease
    image: m.ImageRelease


class CudaLink(NamedTuple):
    """How the driver runs the CUDA release, as provision.matrix.runs_on decided it."""

    compat: str  # "toolkit-driver" | "minor-version" | "forward-compat" (PlanCuda.compatibility)
    floor: m.MinorCompat | None
    verdict: runs_on.Verdict


# runs_on's modes in the order the search accepts them, and how a plan records each
TIERS = (runs_on.NATIVE, runs_on.MINOR, runs_on.FORWARD)
PLAN_COMPAT = {runs_on.NATIVE: "toolkit-driver", runs_on.MINOR: "minor-version", runs_on.FORWARD: "forward-compat"}


class CudnnChoice(NamedTuple):
    version: str | None
    origin: str  # "framework" | "image"
    reason: str | None


# -- entry point ---------------------------------------------------------------------------
def resolve(matrix: m.Matrix, request: PlanRequest, *, suggest: bool = True, memo: dict | None = None) -> Plan:
    """Resolve a request; NoCompatibleStack says what was tried and which pins would work.

    ``memo``: a dict that requests resolved against the same matrix share (``provision matrix
    check`` passes one), so that what the catalogue gives the same inputs (an OS and GPU's facts,
    driver candidates, framework builds, each CUDA release's images, parts of a plan) is worked
    out once; the plans and refusals are the same as without it, eliminations in the same order.
    """
    mig = _mig(matrix, request) if request.mig else None
    ctx = context(matrix, request, memo)
    plan = _search(ctx)
    if plan is not None:
        if mig is not None:
            plan = plan._replace(mig=mig[0], reasons=(*plan.reasons, mig[1]))
        return plan
    eliminations = list(ctx.eliminated)
    if ctx.skipped:
        eliminations.append(("not tried", _not_tried(ctx)))
    error = NoCompatibleStack(
        f"no compatible stack for os={ctx.os.id} gpu={ctx.gpu_id}{_pin_text(request)}",
        eliminations=eliminations,
        hint=_suggest(matrix, request, frozenset(ctx.kinds)) if suggest else None,
    )
    error.kinds = frozenset(ctx.kinds)
    error.summary = summarise(ctx, eliminations)
    raise error


def _mig(matrix: m.Matrix, request: PlanRequest):
    """The MIG layout of the request, placed by provision.mig (refusals explain themselves)."""
    from provision.mig import planner as migplan
    from provision.mig.parted import cgi_args
    from provision.plan.model import PlanMig, PlanMigInstance

    gpu_id, profile_set, members = migplan.gpu_profile_set(matrix, gpu_ident(matrix, request))
    placed = migplan.plan_layout(
        profile_set,
        request.mig,
        gpu=gpu_id,
        pci_device_ids=tuple(p for g in members for p in g.pci_device_ids),
        flags=migplan.Flags(layout="--mig", fill=None),  # hints name provision plan's flag
    )
    instances = tuple(
        PlanMigInstance(i.profile.name, i.profile.id, i.start, i.profile.memory_slices, i.profile.compute_slices)
        for i in placed.instances
    )
    text = (
        f"MIG layout {', '.join(i.label for i in placed.instances)} (profile@start slot) on the "
        f"{profile_set.id} profile set: every instance at a start `nvidia-smi mig -lgipp` allows, none overlapping, "
        f"{placed.compute_used}/{profile_set.compute_slices} compute slices"
    )
    if not profile_set.placements_confirmed:
        text += f"; placements of the same die family ({profile_set.note})"
    mig = PlanMig(
        placed.name, profile_set.id, profile_set.placements_confirmed, instances, placed.devices(), cgi_args(placed)
    )
    return mig, Reason("mig", text, profile_set.sources[0] if profile_set.sources else None)


def context(matrix: m.Matrix, request: PlanRequest, memo: dict | None = None) -> Context:
    """The request's facts and pins; with a memo, each (OS, GPU, policy)'s facts and each set of
    pins are worked out once (refusals are not kept: they are raised anew each time)."""
    if memo is None:
        facts = _facts(matrix, request)  # first: its refusals come before a bad pin's
        return Context(matrix=matrix, request=request, pins=parse_pins(matrix, request), **facts)
    key = ("facts", request.os, request.gpu, request.policy, request.platform)
    facts = memo.get(key)
    if facts is None:
        facts = memo[key] = _facts(matrix, request)
    pins_key = ("pins", request.driver, request.cuda, request.cudnn, request.framework)
    pins = memo.get(pins_key)
    if pins is None:
        pins = memo[pins_key] = parse_pins(matrix, request)
    return Context(matrix=matrix, request=request, pins=pins, memo=memo, **facts)


def _facts(matrix: m.Matrix, request: PlanRequest) -> dict:
    """What Context takes from the request's OS, GPU, platform and policy (every refusal of those)."""
    os_rel = matrix.os(request.os)
    platform = matrix.platform(request.platform) if request.platform is not None else None
    gpu_id, gpus = matrix.gpu_members(gpu_ident(matrix, request, platform))
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
    if request.policy not in POLICIES:
        raise BadPin(f"unknown policy {request.policy!r}", hint=f"use one of: {', '.join(POLICIES)}")
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
    return {
        "os": os_rel,
        "gpu_id": gpu_id,
        "gpu_name": group.name if group else first.name,
        "gpus": gpus,
        "arch": matrix.architecture(first.architecture),
        "cc": first.compute_capability,
        "nvswitch": link.nvswitch if link is not None else first.nvswitch,
        "min_driver": max(mins) if mins else None,
        "subnet_manager": sm if (sm := matrix.subnet_manager) is not None and sm.needed_at(generation) else None,
        "host": host,
        "gpu_modules": tuple(k for k in limits[0] if all(k in lim for lim in limits)) if limits else None,
        "platform": platform,
        "link": link,
    }


# -- platforms -----------------------------------------------------------------------------------
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


def gpu_ident(matrix: m.Matrix, request: PlanRequest, platform: m.Platform | None = None) -> str:
    """The GPU a request names, or the one its platform implies: the platform's one GPU model, or
    the catalogued group of exactly its models."""
    if request.gpu is not None:
        return request.gpu
    if platform is None and request.platform is not None:
        platform = matrix.platform(request.platform)
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


_KINDS = {
    "system": "an NVIDIA DGX system",
    "baseboard": "an NVIDIA HGX baseboard, built into OEM servers",
    "oem-server": "an OEM server",
    "generic": "any PCIe GPU server",
}


def _interconnect_text(platform: m.Platform, link: m.PlatformLink) -> str:
    kind = platform.interconnect
    if link.nvswitch:
        count = f"{link.nvswitch_count} " if link.nvswitch_count else ""
        return f"an NVSwitch baseboard ({count}NVSwitches, generation {link.nvswitch_generation})"
    if kind == "nvlink":
        return "NVLink between the GPUs on the board, no NVSwitch"
    if kind == "nvlink-bridge":
        return "NVLink bridges between GPU pairs" + (" (optional)" if platform.interconnect_optional else "")
    if kind == "none":
        return "PCIe only, no NVLink"
    return "an interconnect the catalogue has no source for"


def _interconnect_source(platform: m.Platform, gpu: m.Gpu) -> str | None:
    """The source of what the platform's interconnect gives ``gpu``: its variant's, else the row's."""
    variant = platform.variant(gpu.id)
    found = (variant.sources if variant else ()) or platform.sources_of("interconnect")
    return (found or platform.sources_of("fabric_manager") or (None,))[0]


def server_part(platform: m.Platform, gpu: m.Gpu) -> PlanServer:
    """The plan's server: the platform as it carries ``gpu`` (a variant's facts over its own)."""
    link = platform.link(gpu)
    return PlanServer(
        platform.id,
        platform.name,
        platform.kind,
        platform.gpu_count,
        platform.gpu_count_is,
        platform.form_factors,
        platform.interconnect,
        platform.interconnect_optional,
        link.nvswitch_generation,
        link.nvswitch_count,
        link.nvswitch,
        link.topology,
        link.pcie_generation,
        link.pcie_width,
        platform.dmi_vendor,
        platform.dmi_product,
        platform.unconfirmed,
    )


def _server_reason(ctx: "Context") -> Reason:
    platform, link = ctx.platform, ctx.link
    count = ""
    if platform.gpu_count is not None:
        count = f"{'up to ' if platform.gpu_count_is == 'up-to' else ''}{platform.gpu_count} x "
    parts = [
        f"{count}{ctx.gpu_id} ({ctx.gpus[0].form_factor})",
        _interconnect_text(platform, link),
    ]
    if link.topology:
        parts.append(f"nvidia-smi topo -m {'/'.join(link.topology)} between GPU pairs")
    if link.pcie_generation is not None:
        parts.append(f"PCIe Gen{link.pcie_generation} x{link.pcie_width}")
    if platform.unconfirmed:
        parts.append(f"unconfirmed: {', '.join(platform.unconfirmed)} (compat/platforms.yaml doubts)")
    variant = platform.variant(ctx.gpus[0].id)
    source = ((variant.sources if variant else ()) or platform.sources_of("gpus") or platform.sources)[0]
    return Reason("server", f"{platform.name} ({_KINDS[platform.kind]}): {'; '.join(parts)}", source)


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


def image_os_of(matrix: m.Matrix, os_rel: m.OsRelease, requested: str | None) -> str:
    """The OS of a plan's images: ``requested`` (an nvidia/cuda tag suffix the catalogue publishes
    images for, or a host OS id or alias, meaning that OS's own images), else the host OS's own."""
    if requested is None:
        return os_rel.cuda_image_os
    text = requested.strip()
    published = _published_image_oses(matrix)
    if text in published:
        return text
    for rel in matrix.os_releases:
        if text in (rel.id, *rel.aliases):
            return rel.cuda_image_os
    raise UnknownId(
        f"--image-os {requested!r} is not an OS nvidia/cuda images are catalogued for",
        hint=f"one of: {', '.join(published)} (or a host OS id: its own images)",
    )


def _published_image_oses(matrix: m.Matrix) -> list[str]:
    """Every nvidia/cuda tag suffix the catalogue lists images for, hosts' own first (os.yaml order)."""
    listed = {o for i in matrix.images for o in i.os}
    ordered = [o.cuda_image_os for o in matrix.os_releases] + sorted(listed)
    return [o for o in dict.fromkeys(ordered) if o in listed]


def _host_only_pins(request: PlanRequest) -> None:
    """A --host-only request with a cuDNN or framework pin: refused, since nothing would honour
    them. --cuda (and --image-os) say which images the host must run: the driver is chosen so
    that it runs them (_host_cuda), and no image is planned."""
    given = [f"--{k}" for k in ("cudnn", "framework") if getattr(request, k)]
    if request.host_only and given:
        raise BadPin(
            f"--host-only plans no image, so {' and '.join(given)} cannot apply",
            hint=f"drop {' and '.join(given)} (--cuda alone names the CUDA images the host must run), or drop "
            "--host-only to plan an image too",
        )
    if request.host_only and request.image_os and not request.cuda:
        raise BadPin(
            "--host-only plans no image, so --image-os alone cannot apply (a host runs images of any OS)",
            hint="drop --image-os, or add --cuda X.Y to name the CUDA images the host must run",
        )


def _framework_pin(matrix: m.Matrix, request: PlanRequest) -> tuple[m.Framework | None, m.FrameworkRelease | None]:
    """--framework NAME[==VERSION] as (framework, release); (None, None) without one."""
    framework = fw_release = None
    if request.framework is None:
        return framework, fw_release
    text = request.framework.strip()
    mt = re.fullmatch(r"([A-Za-z]+)(?:==(.+))?", text)
    if not mt:
        raise BadPin(f"--framework {text!r} is not NAME or NAME==VERSION", hint="e.g. --framework pytorch==2.5.1")
    name = _FRAMEWORK_NAMES.get(mt[1].lower())
    if name is None:
        raise UnknownId(f"unknown framework {mt[1]!r}", hint="known: pytorch, tensorflow")
    framework = matrix.framework(name)
    if mt[2] is not None:
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
            near = [
                str(r.version) for r in framework.releases if prefix_matches(".".join(mt[2].split(".")[:2]), r.version)
            ]
            near = near or [str(r.version) for r in framework.releases[:4]]
            raise UnknownId(
                f"{framework.name} {mt[2]} is not in the catalogue",
                hint=f"catalogued {framework.name} releases include {', '.join(near)} (list: provision matrix frameworks)",
            )
    return framework, fw_release


def parse_pins(matrix: m.Matrix, request: PlanRequest) -> Pins:
    _host_only_pins(request)
    branch = release = None
    if request.driver is not None:
        text = request.driver.strip().lstrip("Rr")
        if re.fullmatch(r"\d{3}", text):
            branch = int(text)
        elif re.fullmatch(r"\d{3}\.\d+(\.\d+)?", text):
            branch, release = int(text.split(".")[0]), parse_version(text)
        else:
            raise BadPin(
                f"--driver {request.driver!r} is neither a branch nor a release",
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
    cuda = None
    if request.cuda is not None:
        cuda = request.cuda.strip()
        if not re.fullmatch(r"\d+\.\d+(\.\d+)?", cuda):
            raise BadPin(
                f"--cuda {request.cuda!r} is not a CUDA version", hint="use major.minor (12.4) or a release (12.4.1)"
            )
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
    cudnn = None
    if request.cudnn is not None:
        cudnn = request.cudnn.strip()
        if not re.fullmatch(r"\d+(\.\d+){0,3}", cudnn):
            raise BadPin(
                f"--cudnn {request.cudnn!r} is not a cuDNN version",
                hint="use a major (9), major.minor (9.1) or a build (9.1.0.70)",
            )
    framework, fw_release = _framework_pin(matrix, request)
    return Pins(branch, release, cuda, cudnn, framework, fw_release)


# -- search ----------------------------------------------------------------------------------
def _search(ctx: Context) -> Plan | None:
    """The first candidate stack that passes every rule, in the order of the module docstring.

    Whether the driver runs a CUDA release is provision.matrix.runs_on's answer: native, then
    minor-version, then forward compatibility (the images' cuda-compat package, data-center GPUs
    and the branches NVIDIA lists). A framework build is taken newest first if the driver runs it
    at all, each build natively if it can (a driver pinned to R535 gets the newest PyTorch build it
    runs, not an older native one); without a framework, a mode is used only when no CUDA release
    runs in a preferred mode on any candidate driver."""
    drivers = list(_driver_candidates(ctx)) if ctx.memo is None else _memo_drivers(ctx, ctx.memo)
    if not drivers:
        return None
    if ctx.request.host_only:
        if ctx.pins.cuda is None:
            return _host_plan(ctx, drivers[0])
        return _host_cuda(ctx, drivers)
    builds = _framework_candidates(ctx)
    if ctx.pins.framework is not None and not builds:
        return None
    tiers = range(len(TIERS))
    if builds:
        order = ((drv, fw, tier) for drv in drivers for fw in builds for tier in tiers)
    else:
        order = ((drv, (None, None), tier) for tier in tiers for drv in drivers)
    for drv, (fw_release, build), tier in order:
        for cuda, image in _cuda_candidates(ctx, build):
            plan = _try(ctx, Candidate(drv, fw_release, build, cuda, image), tier=tier)
            if plan is not None:
                return plan
    return None


def _memo_drivers(ctx: Context, memo: dict) -> list[DriverChoice]:
    """list(_driver_candidates(ctx)), worked out once per request that differs only in the pins it
    never reads (CUDA, cuDNN, framework, MIG), then replayed: the same choices, eliminations (in
    order, with their rules) and skipped branches."""
    key = (
        "drivers",
        ctx.request._replace(cuda=None, cudnn=None, framework=None, mig=None, image_os=None, host_only=False),
    )
    known = memo.get(key)
    if known is None:
        if ctx.eliminated or ctx.kinds or ctx.skipped:  # only a fresh context records cleanly
            return list(_driver_candidates(ctx))
        drivers = list(_driver_candidates(ctx))
        drops = [(c, why, ctx.rule_of[(c, why)]) for c, why in ctx.eliminated]
        memo[key] = (drivers, drops, frozenset(ctx.kinds), list(ctx.skipped))
        return list(drivers)
    drivers, drops, kinds, skipped = known
    for candidate, why, kind in drops:
        ctx.drop(candidate, why, kind)
    ctx.kinds.update(kinds)
    ctx.skipped.extend(skipped)
    return list(drivers)


def _driver_candidates(ctx: Context) -> Iterator[DriverChoice]:
    matrix, pins, as_of = ctx.matrix, ctx.pins, ctx.matrix.as_of
    if pins.driver_branch is not None:
        branches = [matrix.branch(pins.driver_branch)]
    else:
        branches = []
        for b in matrix.drivers:
            if b.past_eol(as_of):
                ctx.skipped.append((b, f"end of life {b.eol or 'listed'}"))
            elif ctx.request.policy == "lts" and b.type not in ("ltsb", "pb"):
                ctx.skipped.append((b, BRANCH_TYPES[b.type]))
            else:
                branches.append(b)
    for b in branches:
        assert b is not None
        label = b.label
        arch = ctx.arch
        if arch.last_driver_branch is not None and b.branch > arch.last_driver_branch:
            ctx.drop(
                label,
                f"does not support {arch.name} (R{arch.last_driver_branch} is the last branch for it)",
                "driver-architecture",
            )
            continue
        if arch.first_driver_branch is not None and b.branch < arch.first_driver_branch:
            ctx.drop(
                label, f"predates {arch.name} support (first branch R{arch.first_driver_branch})", "driver-architecture"
            )
            continue
        module = _kernel_module(ctx, b)
        if module is None:
            continue
        packaging = ctx.matrix.packaging_for(ctx.os.id, b.branch, module)
        if packaging is None:
            ctx.drop(label, f"no catalogued {ctx.os.id} packages for its {module} kernel modules", "os-packages")
            continue
        refusal = _subnet_manager_refusal(ctx, b.branch, packaging)
        if refusal is not None:
            ctx.drop(label, *refusal)
            continue
        releases = [r for r in b.releases if ctx.os.id in r.os]
        if pins.driver_release is not None:
            releases = [r for r in releases if r.version == pins.driver_release]
            if not releases:
                ctx.drop(
                    str(pins.driver_release),
                    f"not in the {ctx.os.nvidia_repo} repository (released before it existed)",
                    "os-packages",
                )
                continue
        if not releases:
            ctx.drop(label, f"no release in the {ctx.os.nvidia_repo} repository", "os-packages")
            continue
        if ctx.min_driver is not None:
            fit = [r for r in releases if r.version >= ctx.min_driver]
            if not fit:
                ctx.drop(
                    label if pins.driver_release is None else str(pins.driver_release),
                    f"older than {ctx.min_driver}, the first driver confirmed for {ctx.gpu_id}",
                    "gpu-min-driver",
                )
                continue
            releases = fit
        release = releases[0]
        yield DriverChoice(b, release, module, packaging, _driver_reasons(ctx, b, release, module))


def _kernel_module(ctx: Context, b: m.DriverBranch) -> str | None:
    """The branch's kernel-module flavour for this GPU: its default where the GPU runs it (the
    architecture's flavours, narrowed by the GPU's own: GH200 open only); None (dropped) if none."""
    runs = [mod for mod in ctx.arch.kernel_modules if ctx.gpu_modules is None or mod in ctx.gpu_modules]
    usable = [mod for mod in b.kernel_modules if mod in runs]
    if not usable:
        who = ctx.arch.name if ctx.gpu_modules is None else ctx.gpu_id
        ctx.drop(
            b.label,
            f"ships {'/'.join(b.kernel_modules)} kernel modules only; {who} needs {'/'.join(runs)}",
            "kernel-module",
        )
        return None
    return b.default_module if b.default_module in usable else usable[0]


def _subnet_manager_refusal(ctx: Context, branch: int, packaging: m.DriverPackaging) -> tuple[str, str] | None:
    """(why, rule) a branch cannot serve a GPU that needs the NVLink Subnet Manager; None: it can."""
    sm = ctx.subnet_manager
    if sm is None:
        return None
    if branch < sm.min_branch:
        why = f"predates NVLink Subnet Manager systems (NVSwitch generation {sm.nvswitch_generation}: R{sm.min_branch} first)"
        return why, "subnet-manager"
    if packaging.subnet_manager is None:
        return f"no catalogued {ctx.os.id} NVLink Subnet Manager packages", "os-packages"
    return None


def _framework_candidates(ctx: Context) -> list[tuple[m.FrameworkRelease, m.FrameworkBuild]]:
    """The framework builds to try, in order, each refused one eliminated; with a memo, worked
    out once per framework pin, CUDA pin, host and compute capability (all that is read here)."""
    if ctx.pins.framework is None:
        return []
    key = ("frameworks", ctx.request.framework, ctx.pins.cuda, ctx.host, ctx.cc)
    known = None if ctx.memo is None else ctx.memo.get(key)
    if known is None:
        known = _framework_builds(ctx)
        if ctx.memo is not None:
            ctx.memo[key] = known
    drops, builds = known
    for drop in drops:
        ctx.drop(*drop)
    return list(builds)


def _framework_builds(ctx: Context) -> tuple[tuple[tuple[str, str, str], ...], tuple]:
    """(eliminations (candidate, why, rule) in order, the (release, build) pairs that pass)."""
    fw = ctx.pins.framework
    releases = [ctx.pins.framework_release] if ctx.pins.framework_release else list(fw.releases)
    drops, builds = [], []
    for rel in releases:
        assert rel is not None
        for build in sorted(rel.builds, key=lambda b: (not b.default, [-x for x in b.cuda_version.release])):
            name = f"{fw.package}=={rel.version} ({build.variant})"
            if ctx.host not in build.arches:
                drops.append(
                    (
                        name,
                        f"no {ctx.host} CUDA wheels (the build's wheels are for {'/'.join(build.arches)})",
                        "framework-arch",
                    )
                )
                continue
            if ctx.pins.cuda is not None and ".".join(ctx.pins.cuda.split(".")[:2]) != build.cuda:
                drops.append((name, f"built for CUDA {build.cuda}, not --cuda {ctx.pins.cuda}", "framework-cuda"))
                continue
            ok, how = carries_sm(ctx.matrix, build, ctx.cc, ctx.host)
            if not ok:
                drops.append((name, how, "framework-sm"))
                continue
            builds.append((rel, build))
    return tuple(drops), tuple(builds)


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


def _cuda_candidates(ctx: Context, build: m.FrameworkBuild | None) -> Iterator[tuple[m.CudaRelease, m.ImageRelease]]:
    """CUDA releases newest first whose images fit; image sets past NVIDIA's end of life come after
    every supported one (NVIDIA deletes their tags six months later), so they are chosen only when
    nothing supported fits, or when pinned."""
    past_eol = []
    as_of = ctx.matrix.as_of
    for cuda, image in _cuda_images(ctx, build):
        if image.past_eol(as_of):
            past_eol.append((cuda, image))
        else:
            yield cuda, image
    yield from past_eol


def _cuda_images(ctx: Context, build: m.FrameworkBuild | None) -> Iterator[tuple[m.CudaRelease, m.ImageRelease]]:
    """Each CUDA release the pin and the build allow, newest first, with its images that fit; the
    eliminations are made as the search reaches each release (a refusal lists them in that order)."""
    flavour = _base_flavour(build)
    indices, catalogued = _cuda_lines(ctx, build)
    for index in indices:
        for event in _cuda_release(ctx, index, flavour):
            if len(event) == 2:
                yield event
            else:
                ctx.drop(*event)
    if not catalogued:
        ctx.drop(
            f"cuda {build.cuda}",
            f"not in the catalogue (oldest catalogued: {ctx.matrix.cuda[-1].version})",
            "cuda-uncatalogued",
        )


def _cuda_lines(ctx: Context, build: m.FrameworkBuild | None) -> tuple[tuple[int, ...], bool]:
    """(indices into matrix.cuda of the releases matching the CUDA pin and the build's CUDA line,
    whether the build's line is catalogued at all); with a memo, once per pin and line."""
    pin, line = ctx.pins.cuda, None if build is None else build.cuda
    key = ("cuda-lines", pin, line)
    known = None if ctx.memo is None else ctx.memo.get(key)
    if known is None:
        cudas = ctx.matrix.cuda
        known = (
            tuple(
                i
                for i, cuda in enumerate(cudas)
                if (pin is None or prefix_matches(pin, cuda.version))
                and (line is None or major_minor(cuda.version) == line)
            ),
            line is None or any(major_minor(c.version) == line for c in cudas),
        )
        if ctx.memo is not None:
            ctx.memo[key] = known
    return known


def _cuda_release(ctx: Context, index: int, flavour: str) -> tuple[tuple, ...]:
    """What matrix.cuda[index] gives a request: (cuda, image) for each image set that fits, and
    (candidate, why, rule) for each elimination, in order. It reads the GPU's compute capability
    and architecture, the OS's image suffix, the host and the base image flavour, and nothing else
    of the request: with a memo, it is worked out once for each of those."""
    key = ("cuda-release", index, ctx.cc, ctx.arch.name, ctx.img_os, ctx.host, flavour)
    known = None if ctx.memo is None else ctx.memo.get(key)
    if known is not None:
        return known
    cuda = ctx.matrix.cuda[index]
    name = f"cuda {cuda.version}"
    events: list[tuple] = []
    img_os = ctx.img_os
    if not ctx.matrix.cuda_supports_cc(cuda.version, ctx.cc):
        events.append((name, f"cannot build for sm_{ctx.cc.replace('.', '')} ({ctx.arch.name})", "cuda-sm"))
    else:
        # every image set that carries the toolkit: its own, and those numbered past it (12.9.2
        # carries 12.9.1 with a newer cuBLAS); _cuda_candidates puts sets past end of life last
        images = [i for i in ctx.matrix.images_for(cuda.version) if flavour in i.flavours_for(img_os)]
        if not images:
            published = [
                str(i.cuda)
                for i in ctx.matrix.images
                if img_os in i.os and major_minor(i.cuda) == major_minor(cuda.version)
            ]
            also = f" (published for {major_minor(cuda.version)}: {', '.join(published)})" if published else ""
            events.append((name, f"no nvidia/cuda {flavour} image for {img_os}{also}", "image"))
        platform = m.PLATFORMS[ctx.host]
        for image in images:
            if platform not in image.platforms:
                sets = f"nvidia/cuda {image.cuda} images" if image.cuda != cuda.version else "its nvidia/cuda images"
                events.append(
                    (
                        name,
                        f"{sets} are confirmed for {'/'.join(image.platforms)} only, not {platform}",
                        "image-platform",
                    )
                )
                continue
            events.append((cuda, image))
    known = tuple(events)
    if ctx.memo is not None:
        ctx.memo[key] = known
    return known


def _base_flavour(build: m.FrameworkBuild | None) -> str:
    if build is None:
        return "runtime"
    return "base" if build.libraries == "wheels" else "cudnn-runtime"


def _try(ctx: Context, cand: Candidate, *, tier: int) -> Plan | None:
    drv, _, build, cuda, image = cand
    version = drv.release.version
    major = cuda.version.release[0]
    floor = _kept(ctx, ("minor-compat", major), ctx.matrix.minor_compat_floor, major)
    needs = _kept(ctx, ("image-needs", cuda.version, build, ctx.host), _image_needs, ctx.matrix, cuda, build, ctx.host)
    verdict = _kept(
        ctx, ("runs-on", needs, version, ctx.gpu_id), runs_on.decide, ctx.matrix, needs, version, ctx.gpus[0]
    )
    if verdict.mode == runs_on.NO or TIERS.index(verdict.mode) > tier:
        extra = ""
        if verdict.mode != runs_on.NO:
            extra = f"; {verdict.mode} compatibility ({verdict.short}) is kept for when no stack meets it"
        elif version >= cuda.min_driver or (floor is not None and version >= floor.min_driver):
            extra = f" ({verdict.reason})"  # the driver would do, but not for the GPU's code
        ctx.drop(
            _combo(ctx, cand),
            f"CUDA {cuda.version} needs driver >= {cuda.min_driver} (release notes, Table 3){extra}",
            "cuda-driver",
        )
        return None
    compat = PLAN_COMPAT[verdict.mode]
    cudnn_version, origin = _cudnn_for(ctx, build, image, cuda.version)
    if ctx.pins.cudnn is not None:
        if cudnn_version is None:
            ctx.drop(
                _combo(ctx, cand),
                f"the cuDNN build in the nvidia/cuda {image.cuda} images is not catalogued, so --cudnn {ctx.pins.cudnn} cannot be checked",
                "cudnn-pin",
            )
            return None
        if not prefix_matches(ctx.pins.cudnn, Version(cudnn_version)):
            ctx.drop(
                _combo(ctx, cand),
                f"cuDNN {cudnn_version} ({origin}) does not match --cudnn {ctx.pins.cudnn}",
                "cudnn-pin",
            )
            return None
    cudnn_reason = None
    if cudnn_version is not None:
        # cuDNN is part of the stack when asked for (--cudnn) or when the framework uses it; a
        # plain CUDA plan only reports the image's cuDNN, and leaves it out when unconfirmed.
        required = ctx.pins.cudnn is not None or build is not None
        said = "framework-range" if origin == "framework" and build.cudnn_spec is not None else origin
        ok, why, min_driver = _kept(
            ctx,
            ("cudnn-supports", cudnn_version, cuda.version, ctx.cc, said),
            _cudnn_supports,
            ctx.matrix,
            cudnn_version,
            cuda.version,
            ctx.cc,
            said,
        )
        if ok and min_driver is not None and version < min_driver:
            ok, why = False, f"needs driver >= {min_driver}"
        if not ok and required:
            ctx.drop(_combo(ctx, cand), f"cuDNN {cudnn_version}: {why}", "cudnn-support")
            return None
        if not ok:
            cudnn_version, cudnn_reason = None, f"the images' cuDNN {image.cudnn_version} is left out: {why}"
        else:
            cudnn_reason = why
    return _build_plan(ctx, cand, CudaLink(compat, floor, verdict), CudnnChoice(cudnn_version, origin, cudnn_reason))


def _image_needs(
    matrix: m.Matrix, cuda: m.CudaRelease, build: m.FrameworkBuild | None, host: str
) -> runs_on.ImageNeeds:
    """What a candidate's image asks of the driver: its CUDA release and the SMs its framework
    build's wheels for the host architecture carry (without a framework: what the CUDA builds for)."""
    if build is None:
        return runs_on.needs_for_cuda(matrix, cuda)
    sass, ptx, _ = build.sms_for(host)
    return runs_on.ImageNeeds(
        cuda.version, cuda.min_driver, tuple(sass) if sass else None, ptx, runs_on.cuda_targets(matrix, cuda.version)
    )


def _combo(ctx: Context, cand: Candidate) -> str:
    """A candidate stack as an elimination names it."""
    drv, fw_release, build, cuda, _ = cand
    combo = f"{drv.branch.label} {drv.release.version} + cuda {cuda.version}"
    if build is not None:
        combo += f" + {ctx.pins.framework.package}=={fw_release.version} ({build.variant})"
    return combo


def _cudnn_supports(matrix: m.Matrix, cudnn: str, cuda: Version, cc: str, origin: str) -> tuple:
    return cudnn_supports(matrix, Version(cudnn), cuda, cc, origin)


def _cudnn_for(
    ctx: Context, build: m.FrameworkBuild | None, image: m.ImageRelease, cuda: Version
) -> tuple[str | None, str]:
    """The cuDNN of a candidate: the framework wheel's pin; for a wheel that accepts a range
    (TensorFlow 2.20 [and-cuda]: >=9.3.0.75,<10.0), the newest catalogued cuDNN build inside it
    that supports the CUDA release and the GPU's SM (cuDNN 9.17 dropped sm_70), which the lock then
    pins; else the image's."""
    if build is not None and build.libraries == "wheels" and build.cudnn is not None:
        if build.cudnn_spec is None:
            return build.cudnn, "framework"
        major = build.cuda_version.release[0]
        for version in _kept(ctx, ("cudnn-builds", major), _cudnn_builds, ctx.matrix, major):
            if build.cudnn_allows(version):
                ok, _, _ = _kept(
                    ctx,
                    ("cudnn-supports", str(version), cuda, ctx.cc, "framework-range"),
                    _cudnn_supports,
                    ctx.matrix,
                    str(version),
                    cuda,
                    ctx.cc,
                    "framework-range",
                )
                if ok:
                    return str(version), "framework"
        return build.cudnn, "framework"
    return image.cudnn_version, "image"


def _cudnn_builds(matrix: m.Matrix, cuda_major: int) -> tuple[Version, ...]:
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


# -- the plan and its reasons ---------------------------------------------------------------
def _driver_reasons(ctx: Context, b: m.DriverBranch, release: m.DriverRelease, module: str) -> tuple[Reason, ...]:
    src = b.sources[0]
    if ctx.pins.driver_branch is not None:
        why = f"pinned by --driver {ctx.request.driver}"
        if b.past_eol(ctx.matrix.as_of):
            why += f"; warning: past end of life ({b.eol or 'listed as EOL'})"
    else:
        kinds = "long-term support or production" if ctx.request.policy == "lts" else "any"
        why = f"newest {kinds} branch not past end of life on {ctx.matrix.as_of} (policy {ctx.request.policy}) that supports {ctx.arch.name}"
    eol = f", end of life {b.eol}" if b.eol else ""
    if not b.eol_known:
        eol = ", end of life unknown"
        why += (
            f"; warning: NVIDIA publishes no end of life for {b.label}, so whether it still gets fixes is unknown "
            "(a branch with a published end of life, such as a long-term support branch, is the safer pin)"
        )
    reasons = [Reason("driver", f"{b.label}, {BRANCH_TYPES[b.type]}{eol}: {why}", src)]
    rel_why = (
        "pinned" if ctx.pins.driver_release else f"newest {b.label} release in the {ctx.os.nvidia_repo} repository"
    )
    if ctx.min_driver is not None:
        rel_why += f"; {ctx.gpu_id} needs >= {ctx.min_driver}"
    reasons.append(Reason("driver", f"{release.version} ({release.date}): {rel_why}", release.source))
    who = ctx.arch.name if ctx.gpu_modules is None else ctx.gpu_id
    if module == b.default_module:
        mod_why = f"{module} kernel modules: {b.label}'s default, and {who} runs them"
    else:
        mod_why = f"{module} kernel modules: {who} needs them ({b.label} defaults to {b.default_module})"
    reasons.append(Reason("kernel-module", mod_why, "kernel-modules-guide"))
    return tuple(reasons)


def _build_plan(ctx: Context, cand: Candidate, link: CudaLink, cudnn: CudnnChoice) -> Plan:
    """The Plan of a candidate that passed every rule, one part (and its reasons) at a time. With
    a memo, parts that other requests share (the host, the driver and what hangs on it, the image,
    the framework build) are built once, keyed by all they read."""
    drv, build = cand.drv, cand.build
    request = ctx.request
    platform_id = ctx.platform.id if ctx.platform is not None else None
    plan_os, plan_gpu, server, os_why, gpu_why, server_why = _kept(
        ctx, ("host-part", ctx.os.id, ctx.gpu_id, platform_id), _host_part, ctx
    )
    driver_key = (
        "driver-part",
        ctx.os.id,
        ctx.gpu_id,
        platform_id,
        request.driver,
        request.policy,
        drv.branch.branch,
        drv.release.version,
        drv.module,
    )
    driver, driver_reasons, fabric, subnet_manager, hardware_reasons = _kept(ctx, driver_key, _driver_parts, ctx, drv)
    reasons = list(driver_reasons)
    cuda, driver_floor, why = _cuda_part(ctx, cand, link)
    reasons.append(why)
    image_key = ("image-part", cand.image, cand.cuda.version, ctx.os.id, ctx.img_os, _base_flavour(build))
    base_image, images, why = _kept(ctx, image_key, _image_part, ctx, cand)
    reasons.append(why)
    plan_cudnn, why = _cudnn_part(cand, cudnn)
    reasons.append(why)
    framework = None
    if build is not None:
        fw_key = ("framework-part", ctx.pins.framework.id, cand.fw_release.version, build, ctx.host, ctx.cc)
        framework, why = _kept(ctx, fw_key, _framework_part, ctx, cand)
        reasons.append(_short_pin_note(ctx, cand.fw_release, why))
    reasons += hardware_reasons
    toolkit, why = _kept(ctx, ("toolkit-part",), _toolkit_part, ctx.matrix)
    reasons.append(why)
    return Plan(
        request=request,
        os=plan_os,
        gpu=plan_gpu,
        driver=driver,
        cuda=cuda,
        cudnn=plan_cudnn,
        framework=framework,
        fabric_manager=fabric,
        container_toolkit=toolkit,
        base_image=base_image,
        images=dict(images),
        driver_floor=driver_floor,
        platform=m.PLATFORMS[ctx.host],
        reasons=(os_why, gpu_why, *server_why, *reasons),
        data=_kept(ctx, ("plan-data",), _plan_data, ctx.matrix),
        subnet_manager=subnet_manager,
        image_os=ctx.img_os,
        require_cuda=_kept(ctx, ("require-cuda", cand.cuda.version, build, ctx.host), _require, ctx, cand),
        server=server,
    )


def _require(ctx: Context, cand: Candidate) -> str:
    """The images' NVIDIA_REQUIRE_CUDA: the rule's accepted hosts, as the Container Toolkit reads them."""
    needs = _kept(
        ctx,
        ("image-needs", cand.cuda.version, cand.build, ctx.host),
        _image_needs,
        ctx.matrix,
        cand.cuda,
        cand.build,
        ctx.host,
    )
    return runs_on.require_cuda(ctx.matrix, needs)


def _host_cuda(ctx: Context, drivers: list[DriverChoice]) -> Plan:
    """--host-only --cuda X: the first driver candidate that runs every catalogued CUDA X release's
    nvidia/cuda images on the GPU (provision.matrix.runs_on's rule: native, then minor-version,
    then forward compatibility), with no image part; BadPin naming the closest refusal when none does."""
    pin = ctx.pins.cuda
    releases = [c for c in ctx.matrix.cuda if prefix_matches(pin, c.version)]
    if not releases:
        raise BadPin(
            f"--cuda {pin} is not a catalogued CUDA release",
            hint=f"provision matrix cuda lists them (newest: {ctx.matrix.cuda[0].version})",
        )
    needs = [runs_on.needs_for_cuda(ctx.matrix, c, f"CUDA {c.version} images") for c in releases]
    verdicts = [
        (drv, [runs_on.decide(ctx.matrix, n, drv.release.version, ctx.gpus[0]) for n in needs]) for drv in drivers
    ]
    for tier in range(len(TIERS)):  # native on any candidate before minor-version before forward-compat
        for drv, found in verdicts:
            if all(v.runs for v in found) and max(TIERS.index(v.mode) for v in found) <= tier:
                worst = max(found, key=lambda v: TIERS.index(v.mode))
                why = Reason(
                    "image",
                    f"none planned (--host-only); the driver runs the CUDA {pin} images the host must run: "
                    f"{worst.mode} ({worst.reason})"
                    + (f"; limits: {'; '.join(worst.limits)}" if worst.limits else "")
                    + (
                        f"; any image OS ({ctx.request.image_os} asked): a host runs images of any OS"
                        if ctx.request.image_os
                        else ""
                    ),
                    None,
                )
                return _host_plan(ctx, drv, why)
    drv, found = verdicts[0]
    refused = next(v for v in found if not v.runs)
    raise BadPin(
        f"--host-only --cuda {pin}: no candidate driver runs CUDA {pin} images on {ctx.gpu_id} "
        f"(R{drv.branch.branch}: {refused.reason})",
        hint=f"provision runs-on --gpu {ctx.gpu_id} --driver RELEASE says what a driver runs; or drop --cuda",
    )


def _host_plan(ctx: Context, drv: DriverChoice, image_why: Reason | None = None) -> Plan:
    """A --host-only plan: the host part of the policy's (or the pin's) first driver candidate,
    with no image part; nothing about an image can refuse it."""
    platform_id = ctx.platform.id if ctx.platform is not None else None
    plan_os, plan_gpu, server, os_why, gpu_why, server_why = _kept(
        ctx, ("host-part", ctx.os.id, ctx.gpu_id, platform_id), _host_part, ctx
    )
    driver, driver_reasons, fabric, subnet_manager, hardware_reasons = _driver_parts(ctx, drv)
    toolkit, toolkit_why = _kept(ctx, ("toolkit-part",), _toolkit_part, ctx.matrix)
    none = image_why or Reason(
        "image",
        "none: --host-only plans the host alone (driver, kernel modules, Fabric Manager, Container Toolkit); "
        f"which images run on it: provision runs-on --driver {driver.version} --gpu {ctx.gpu_id}",
        None,
    )
    return Plan(
        request=ctx.request,
        os=plan_os,
        gpu=plan_gpu,
        driver=driver,
        cuda=None,
        cudnn=None,
        framework=None,
        fabric_manager=fabric,
        container_toolkit=toolkit,
        base_image=None,
        images={},
        driver_floor=None,
        platform=m.PLATFORMS[ctx.host],
        reasons=(os_why, gpu_why, *server_why, *driver_reasons, none, *hardware_reasons, toolkit_why),
        data=_kept(ctx, ("plan-data",), _plan_data, ctx.matrix),
        subnet_manager=subnet_manager,
        image_os=None,
        server=server,
    )


def _host_part(ctx: Context) -> tuple:
    """The plan's OS, GPU and server, and their reasons (the server's: () without a platform):
    what the request's OS, GPU and platform alone decide."""
    os_rel = ctx.os
    plan_os = PlanOs(
        os_rel.id,
        os_rel.name,
        os_rel.family,
        os_rel.distribution,
        os_rel.version,
        os_rel.pkg_manager,
        os_rel.nvidia_repo,
        os_rel.kernel_headers,
        os_rel.cuda_image_os,
        ctx.host,
        ctx.repo_arch,
    )
    plan_gpu = PlanGpu(
        ctx.gpu_id,
        ctx.gpu_name,
        ctx.cc,
        ctx.arch.id,
        tuple(g.id for g in ctx.gpus),
        ctx.nvswitch,
        all(g.mig is not None for g in ctx.gpus),
        tuple(sorted({p for g in ctx.gpus for p in g.pci_device_ids})),
    )
    server = server_part(ctx.platform, ctx.gpus[0]) if ctx.platform is not None else None
    return (
        plan_os,
        plan_gpu,
        server,
        Reason("os", _os_text(ctx), os_rel.sources[0]),
        Reason("gpu", _gpu_text(ctx), ctx.gpus[0].sources[0]),
        (_server_reason(ctx),) if ctx.platform is not None else (),
    )


def _driver_parts(ctx: Context, drv: DriverChoice) -> tuple:
    """(driver, its reasons, Fabric Manager, NVLink Subnet Manager, their reasons): what the
    driver choice decides with the OS, the GPU, the driver pin and the policy (its reasons)."""
    driver, reasons = _driver_part(ctx, drv)
    hardware: list[Reason] = []
    fabric = _fabric_part(ctx, driver, drv.packaging, hardware)
    subnet_manager = _subnet_manager_part(ctx, drv.packaging, hardware)
    return driver, tuple(reasons), fabric, subnet_manager, tuple(hardware)


def _toolkit_part(matrix: m.Matrix) -> tuple[PlanToolkit, Reason]:
    toolkit = matrix.toolkit[0]
    why = Reason(
        "container-toolkit",
        f"NVIDIA Container Toolkit {toolkit.version}: newest catalogued release ({toolkit.date})",
        toolkit.source,
    )
    return PlanToolkit(str(toolkit.version), tuple(Package(p, str(toolkit.version)) for p in toolkit.packages)), why


def _plan_data(matrix: m.Matrix) -> PlanData:
    return PlanData(str(matrix.as_of), _data_digest(matrix))


def _driver_part(ctx: Context, drv: DriverChoice) -> tuple[PlanDriver, list[Reason]]:
    version = str(drv.release.version)
    branch = str(drv.branch.branch)
    names = [n.format(branch=branch) for n in drv.packaging.packages]
    stream = drv.packaging.module_stream.format(branch=branch) if drv.packaging.module_stream else None
    install = f"dnf module stream {stream}" if stream else "apt"
    reasons = [
        *drv.reasons,
        Reason(
            "driver",
            f"packages {', '.join(names)} at {version} ({install}; held/locked at that version)",
            drv.packaging.sources[0],
        ),
    ]
    options = _module_options(ctx, drv.branch.branch)
    reasons += [
        Reason(
            "driver",
            f"{o.module} module option {o.option}={o.value} for {ctx.gpu_id} (driver branch >= {o.min_branch}; "
            "written to the role's modprobe.d file)",
            o.sources[0],
        )
        for o in options
    ]
    driver = PlanDriver(
        branch,
        version,
        drv.module,
        drv.branch.type,
        drv.branch.eol,
        drv.packaging.method,
        stream,
        tuple(Package(n, version) for n in names),
        tuple(PlanModuleOption(o.module, o.option, o.value, o.sources[0]) for o in options),
    )
    return driver, reasons


def _module_options(ctx: Context, branch: int) -> list[m.ModuleOption]:
    """The GPUs' kernel-module options whose branch floor the plan's driver branch meets, once each."""
    found: dict[tuple[str, str], m.ModuleOption] = {}
    for gpu in ctx.gpus:
        for option in gpu.module_options:
            if branch >= option.min_branch:
                found.setdefault((option.module, option.option), option)
    return list(found.values())


def _cuda_part(ctx: Context, cand: Candidate, link: CudaLink) -> tuple[PlanCuda, str, Reason]:
    cuda, version = cand.cuda, cand.drv.release.version
    if link.compat == "toolkit-driver":
        cuda_why = f"needs driver >= {cuda.min_driver} (release notes, Table 3); {version} meets it"
        driver_floor = str(cuda.min_driver)
    elif link.compat == "minor-version":
        cuda_why = (
            f"needs driver >= {cuda.min_driver} for the full toolkit; {version} relies on CUDA minor-version "
            f"compatibility (CUDA {cuda.version.release[0]}.x runs on >= {link.floor.min_driver}, "
            "without PTX JIT of newer PTX)"
        )
        driver_floor = str(link.floor.min_driver)
    else:
        cuda_why = (
            f"needs driver >= {cuda.min_driver} for the full toolkit; {version} runs it through forward "
            f"compatibility: {link.verdict.reason}; {'; '.join(link.verdict.limits)}"
        )
        driver_floor = _forward_floor(ctx.matrix, cuda)
    pick = "pinned" if ctx.pins.cuda else ("the framework build's CUDA" if cand.build else "newest release")
    if not ctx.pins.cuda and not cand.image.past_eol(ctx.matrix.as_of):
        pick += " with image sets not past end of life"
    why = Reason(
        "cuda",
        f"CUDA {cuda.version} ({cuda.label}): {pick} that builds for sm_{ctx.cc.replace('.', '')} "
        f"and has {ctx.img_os} images; {cuda_why}",
        cuda.source,
    )
    targets = _kept(ctx, ("cuda-targets", cuda.version), _cuda_targets, ctx.matrix, cuda.version)
    part = PlanCuda(str(cuda.version), cuda.label, str(cuda.min_driver), link.compat, targets or None)
    return part, driver_floor, why


def _forward_floor(matrix: m.Matrix, cuda: m.CudaRelease) -> str:
    """The oldest catalogued driver a forward-compat image runs on: the first release of the oldest
    base branch its cuda-compat package supports (on a data-center GPU)."""
    row = next(f for f in matrix.forward_compat if f.cuda == major_minor(cuda.version))
    releases = [r.version for b in matrix.drivers if b.branch in row.branches for r in b.releases]
    return str(min(releases))


def _cuda_targets(matrix: m.Matrix, version: Version) -> tuple[str, ...]:
    """The compute capabilities a CUDA release builds for, oldest first."""
    return tuple(
        sorted(
            {s.compute_capability for s in matrix.compute_support if s.cuda.contains(version)},
            key=lambda cc: tuple(int(x) for x in cc.split(".")),
        )
    )


def _image_part(ctx: Context, cand: Candidate) -> tuple[str, dict[str, str], Reason]:
    image, os_rel = cand.image, ctx.os
    flavour = _base_flavour(cand.build)
    img_os = ctx.img_os
    images = {f: f"{ctx.matrix.image_repository}:{image.tag(f, img_os)}" for f in image.flavours_for(img_os)}
    base_image = images[flavour]
    img_why = {
        "runtime": "runtime flavour: CUDA math libraries, no framework asked for",
        "base": "base flavour: the framework's wheels bring their own CUDA libraries",
        "cudnn-runtime": "cudnn-runtime flavour: the framework build uses the image's CUDA and cuDNN",
    }[flavour]
    if img_os != os_rel.cuda_image_os:
        note = f"; {img_os} images on a {os_rel.id} host (--image-os: the container's OS is independent of the host's)"
    else:
        note = f"; {os_rel.cuda_image_note}" if os_rel.cuda_image_note else ""
    if image.cuda != cand.cuda.version:
        cublas = f" with cuBLAS {image.cublas}" if image.cublas else ""
        note += f"; nvidia/cuda {image.cuda} images (CUDA {image.carries} toolkit{cublas})"
    if image.past_eol(ctx.matrix.as_of):
        why = f"superseded by {image.superseded_by}" if image.superseded_by else f"end of life {image.eol_date}"
        note += (
            f"; past NVIDIA's end of life ({why}): no supported image set fits, and NVIDIA deletes these tags "
            "six months on (pin the digest: provision pin-base)"
        )
    return base_image, images, Reason("image", f"{base_image}: {img_why}{note}", image.eol_source or image.source)


def _cudnn_part(cand: Candidate, cudnn: CudnnChoice) -> tuple[PlanCudnn | None, Reason]:
    cuda = cand.image.cuda  # the image set's number: 12.9.2 for the 12.9.1 toolkit's newest images
    if cudnn.version is not None:
        if cudnn.origin == "image":
            where = f"in the nvidia/cuda {cuda} cudnn images"
        elif cand.build is not None and cand.build.cudnn_spec is not None:
            where = f"the newest catalogued cuDNN inside the framework wheel's range {cand.build.cudnn_spec}"
        else:
            where = "the framework build's pin"
        why = Reason("cudnn", f"cuDNN {cudnn.version} ({where}): {cudnn.reason}", None)
        return PlanCudnn(cudnn.version, cudnn.origin), why
    unknown = cudnn.reason or f"the cuDNN build in the nvidia/cuda {cuda} cudnn images is not catalogued"
    why = Reason(
        "cudnn", f"none: {unknown} (pin --cudnn to choose a CUDA release with a confirmed cuDNN)", cand.image.source
    )
    return None, why


def _short_pin_note(ctx: Context, fw_release: m.FrameworkRelease, why: Reason) -> Reason:
    """``why`` with a note when --framework NAME==X.Y was read as X.Y.0 (pip's ``==``) while a newer
    X.Y.z is catalogued: --cuda 12.4 means the newest 12.4.x, a framework pin does not."""
    asked = re.fullmatch(r"\s*[A-Za-z]+==(\d+(?:\.\d+)*)\s*", ctx.request.framework or "")
    if asked is None or len(asked[1].split(".")) >= len(fw_release.version.release):
        return why
    newer = [
        r.version
        for r in ctx.pins.framework.releases
        if prefix_matches(asked[1], r.version) and r.version > fw_release.version
    ]
    if not newer:
        return why
    name = ctx.pins.framework.id
    note = (
        f"; note: =={asked[1]} reads as {fw_release.version}, as pip reads it; {max(newer)} is catalogued too"
        f" (--framework {name}=={max(newer)})"
    )
    return why._replace(text=why.text + note)


def _framework_part(ctx: Context, cand: Candidate) -> tuple[PlanFramework, Reason]:
    build, fw_release = cand.build, cand.fw_release
    fw = ctx.pins.framework
    requirement = f"{fw.package}{build.requirement_extra}=={fw_release.version}"
    index = build.index_url or "the package index default (pypi.org)"
    _, how = carries_sm(ctx.matrix, build, ctx.cc, ctx.host)
    pins = f"CUDA runtime {build.cuda_runtime}" if build.cuda_runtime else f"CUDA {build.cuda}"
    cudnn = f"cuDNN {build.cudnn_spec}" if build.cudnn_spec is not None else f"cuDNN {build.cudnn}"
    sass, ptx, _ = build.sms_for(ctx.host)
    why = Reason(
        "framework",
        f"{requirement} from {index}: {build.variant} build ({pins}, {cudnn}); {how}",
        build.source,
    )
    return PlanFramework(
        name=fw.id,
        package=fw.package,
        version=str(fw_release.version),
        variant=build.variant,
        cuda=build.cuda,
        cuda_runtime=build.cuda_runtime,
        cudnn=build.cudnn,
        index_url=build.index_url,
        extra=build.extra,
        libraries=build.libraries,
        requirement=requirement,
        requires_python=fw_release.python_for(ctx.host),
        compute_capabilities=tuple(sass) if sass else None,
        ptx=ptx,
    ), why


def _fabric_part(
    ctx: Context, driver: PlanDriver, packaging: m.DriverPackaging, reasons: list[Reason]
) -> PlanFabricManager | None:
    platform = ctx.platform
    if not ctx.nvswitch:
        if platform is not None and platform.interconnect is not None:
            why = (
                f"none: {platform.name} has {_interconnect_text(platform, ctx.link)}; Fabric Manager serves "
                "NVSwitch systems only (without one it exits NV_WARN_NOTHING_TO_DO and its unit fails)"
            )
            reasons.append(Reason("fabric-manager", why, _interconnect_source(platform, ctx.gpus[0])))
        else:
            reasons.append(Reason("fabric-manager", f"none: {ctx.gpu_id} has no NVSwitch", None))
        return None
    fm_names = [n.format(branch=driver.branch) for n in packaging.fabric_manager]
    if platform is not None and platform.interconnect is not None:
        where = f"{platform.name} puts {ctx.gpu_id} on {_interconnect_text(platform, ctx.link)}"
        source = _interconnect_source(platform, ctx.gpus[0])
    else:
        where, source = f"{ctx.gpu_id} sits on an NVSwitch baseboard", "fabric-manager-guide"
    reasons.append(
        Reason(
            "fabric-manager",
            f"{fm_names[0]} {driver.version}: {where}; Fabric Manager must match the driver version exactly",
            source,
        )
    )
    return PlanFabricManager(fm_names[0], driver.version, tuple(Package(n, driver.version) for n in fm_names))


def _subnet_manager_part(ctx: Context, packaging: m.DriverPackaging, reasons: list[Reason]) -> PlanSubnetManager | None:
    sm = ctx.subnet_manager
    generation = ctx.link.nvswitch_generation if ctx.link is not None else ctx.gpus[0].nvswitch_generation
    if sm is None or packaging.subnet_manager is None:
        if ctx.nvswitch and ctx.matrix.subnet_manager is not None:
            first = ctx.matrix.subnet_manager.nvswitch_generation
            reasons.append(
                Reason(
                    "subnet-manager",
                    f"none: {ctx.gpu_id}'s NVSwitch is generation {generation}; "
                    f"Fabric Manager alone configures it (NVLink Subnet Manager from generation {first})",
                    ctx.matrix.subnet_manager.sources[0],
                )
            )
        return None
    pkgs = packaging.subnet_manager
    modules = f"; {', '.join(sm.kernel_modules)} loaded at boot" if sm.kernel_modules else ""
    reasons.append(
        Reason(
            "subnet-manager",
            f"{', '.join(pkgs.packages)} (NVLink Subnet Manager, held where installed) with "
            f"{', '.join(pkgs.requires) or 'no other packages'}{modules}: {ctx.gpu_id} sits on a generation "
            f"{generation} NVSwitch baseboard, whose routing NVLSM programs beside Fabric Manager; "
            f"{sm.service} starts both",
            sm.sources[0],
        )
    )
    return PlanSubnetManager(sm.service, sm.process, pkgs.packages, pkgs.requires, sm.kernel_modules)


def _os_text(ctx: Context) -> str:
    os_rel = ctx.os
    text = f"{os_rel.name}: {os_rel.pkg_manager}, NVIDIA repository {os_rel.nvidia_repo}"
    if ctx.host == m.DEFAULT_ARCH:
        return text
    return (
        f"{text}/{ctx.repo_arch} ({ctx.host} host: {ctx.gpu_id} is built into {ctx.host} servers; "
        f"images for {m.PLATFORMS[ctx.host]}, {ctx.host} wheels)"
    )


def _gpu_text(ctx: Context) -> str:
    covers = f"covers {', '.join(g.id for g in ctx.gpus)}; " if len(ctx.gpus) > 1 else ""
    fm = "NVSwitch baseboard" if ctx.nvswitch else "no NVSwitch"
    if ctx.platform is not None:
        fm += f" (on {ctx.platform.name})"
    host = f", {ctx.host} host" if ctx.host != m.DEFAULT_ARCH else ""
    return f"{ctx.gpu_name}: {covers}{ctx.arch.name}, compute capability {ctx.cc}, {fm}{host}"


def _data_digest(matrix: m.Matrix) -> str:
    import hashlib

    h = hashlib.sha256()
    for name, digest in matrix.files:
        h.update(f"{name}:{digest}\n".encode())
    return "sha256:" + h.hexdigest()


# -- refusals ----------------------------------------------------------------------------------
def _pin_text(request: PlanRequest) -> str:
    pins = [
        f"{k}={getattr(request, k)}"
        for k in ("platform", "driver", "cuda", "cudnn", "framework", "image_os")
        if getattr(request, k)
    ]
    if request.policy != "lts":
        pins.append(f"policy={request.policy}")
    if request.host_only:
        pins.append("host-only")
    return f" pins=[{', '.join(pins)}]" if pins else ""


# The rules in the order a line about them is most useful: the stages nearest to a plan first.
_RULE_ORDER = (
    "cudnn-pin",
    "cudnn-support",
    "cuda-driver",
    "framework-cuda",
    "framework-arch",
    "framework-sm",
    "cuda-uncatalogued",
    "image-platform",
    "image",
    "cuda-sm",
    "gpu-min-driver",
    "subnet-manager",
    "os-packages",
    "kernel-module",
    "driver-architecture",
)


def _rule_text(ctx: Context, rule: str, n: int) -> str:
    """What ``n`` candidates eliminated by ``rule`` have in common, in words."""
    sm, pins = f"sm_{ctx.cc.replace('.', '')}", ctx.request
    s = "" if n == 1 else "s"
    texts = {
        "cudnn-pin": f"stack{s} whose cuDNN does not match --cudnn {pins.cudnn}",
        "cudnn-support": f"stack{s} whose cuDNN does not support the CUDA release, the GPU or the driver",
        "cuda-driver": f"stack{s} whose driver is older than the CUDA release needs",
        "framework-cuda": f"framework build{s} for another CUDA than --cuda {pins.cuda}",
        "framework-sm": f"framework build{s} without code for {sm}",
        "framework-arch": f"framework build{s} without {ctx.host} CUDA wheels",
        "image-platform": f"CUDA release{s} whose nvidia/cuda images are not confirmed for {m.PLATFORMS[ctx.host]}",
        "cuda-uncatalogued": f"framework CUDA version{s} not in the catalogue",
        "image": f"CUDA release{s} without a matching nvidia/cuda image for {ctx.img_os}",
        "cuda-sm": f"CUDA release{s} that cannot build for {sm} ({ctx.arch.name})",
        "gpu-min-driver": f"driver{s} older than {ctx.min_driver}, the first driver for {ctx.gpu_id}",
        "subnet-manager": f"driver branch{'es' if n > 1 else ''} older than the NVLink Subnet Manager floor",
        "os-packages": f"driver{s} not packaged in the {ctx.os.nvidia_repo} repository",
        "kernel-module": f"driver branch{'es' if n > 1 else ''} without kernel modules {ctx.arch.name} runs",
        "driver-architecture": f"driver branch{'es' if n > 1 else ''} without {ctx.arch.name} support",
    }
    return texts.get(rule, f"candidate{s} eliminated by rule {rule}")


def _span(items: list[str], limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def summarise(ctx: Context, eliminations: list[tuple[str, str]]) -> list[str]:
    """A refusal in a few lines: one per rule that eliminated candidates (how many, one example),
    what a pin could have matched, and the branches the policy left out. The full list stays in
    the error's eliminations (provision plan --explain prints it)."""
    by_rule: dict[str, list[tuple[str, str]]] = {}
    for cand, why in ctx.eliminated:
        by_rule.setdefault(ctx.rule_of.get((cand, why), "other"), []).append((cand, why))
    lines = _pin_facts(ctx)
    order = {rule: i for i, rule in enumerate(_RULE_ORDER)}
    for rule in sorted(by_rule, key=lambda r: order.get(r, len(order))):
        items = by_rule[rule]
        if len({why for _, why in items}) == 1:
            lines.append(f"{_span([cand for cand, _ in items])}: {items[0][1]}")
        else:  # the example: a candidate with the most common reason (versions aside)
            shapes = Counter(re.sub(r"\d+(\.\d+)*", "#", why) for _, why in items)
            cand, why = next(c for c in items if re.sub(r"\d+(\.\d+)*", "#", c[1]) == shapes.most_common(1)[0][0])
            lines.append(f"{len(items)} {_rule_text(ctx, rule, len(items))}, e.g. {cand}: {why}")
    if ctx.skipped:
        lines.append(_not_tried(ctx, short=True))
    if any(len(items) > 3 or len({why for _, why in items}) > 1 for items in by_rule.values()):
        lines.append(f"({len(ctx.eliminated)} candidates in all: provision plan … --explain lists each)")
    return lines


def _not_tried(ctx: Context, *, short: bool = False) -> str:
    """The branches the policy or end of life left out: supported ones first (the policy's choice,
    which --policy latest widens), then those past end of life (only a --driver pin takes one)."""
    key = ("not-tried", short, ctx.request.policy, tuple((b.branch, why) for b, why in ctx.skipped))
    return _kept(ctx, key, _not_tried_text, ctx, short)


def _not_tried_text(ctx: Context, short: bool) -> str:
    as_of, policy = ctx.matrix.as_of, ctx.request.policy
    supported = [(b, why) for b, why in ctx.skipped if not b.past_eol(as_of)]
    ended = [(b, why) for b, why in ctx.skipped if b.past_eol(as_of)]
    takes = "long-term support and production branches" if policy == "lts" else "branches"
    if not short:
        listed = ", ".join(f"{b.label} ({why})" for b, why in supported + ended)
        widen = "; --policy latest adds new feature branches" if supported else ""
        return (
            f"{listed}: policy {policy} takes {takes} not past end of life{widen}; "
            "a --driver pin takes any branch (end-of-life branches get no fixes)"
        )
    parts = []
    if supported:
        kinds = sorted({why for _, why in supported})
        parts.append(
            f"{_span([b.label for b, _ in supported], 4)} ({', '.join(kinds)}: policy {policy} leaves "
            f"{'it' if len(supported) == 1 else 'them'} out, --policy latest takes "
            f"{'it' if len(supported) == 1 else 'them'})"
        )
    if ended:
        parts.append(
            f"{len(ended)} branch{'es' if len(ended) > 1 else ''} past end of life "
            f"({_span([b.label for b, _ in ended], 4)}: only a --driver pin takes one)"
        )
    return "not tried: " + "; ".join(parts)


def _pin_facts(ctx: Context) -> list[str]:
    """For a cuDNN pin that no image for the OS carries: what they carry, and what the catalogue knows."""
    pin = ctx.pins.cudnn
    if not pin or "cudnn-pin" not in ctx.kinds:
        return []
    img_os = ctx.img_os
    carried = sorted(
        {Version(i.cudnn_version) for i in ctx.matrix.images if i.cudnn_version and img_os in i.os}, reverse=True
    )
    if any(prefix_matches(pin, v) for v in carried):
        return []  # some image carries it: the rules below say what else eliminated those stacks
    catalogued = sorted({c.version for c in ctx.matrix.cudnn}, reverse=True)
    matrices = [str(v) for v in catalogued if prefix_matches(pin, v)]
    known = (
        f"the catalogue's support matrices list {', '.join(matrices)}"
        if matrices
        else f"no catalogued support matrix matches either ({_range(catalogued)})"
    )
    return [
        f"--cudnn {pin}: no nvidia/cuda image for {img_os} with a catalogued cuDNN carries it "
        f"(they carry {_range(carried)}); {known}"
    ]


def _range(versions: list) -> str:
    if not versions:
        return "none"
    return str(versions[0]) if len(versions) == 1 else f"{versions[-1]} … {versions[0]}"


def _quiet(matrix: m.Matrix, request: PlanRequest) -> Plan | None:
    try:
        return _search(context(matrix, request))
    except InputError:
        return None


def _suggest(matrix: m.Matrix, request: PlanRequest, kinds: frozenset[str] = frozenset(), limit: int = 3) -> str:
    """Pin changes that resolve, cheapest first. Driver branches are offered as the resolver's
    ``lts`` policy would take them (``_driver_order``): supported long-term support and production
    branches, newest first, with the long-term support branch that works always among them; new
    feature branches after those; end-of-life branches only when no supported branch resolves."""

    def replace(req: PlanRequest, **changes) -> PlanRequest:
        return req._replace(**changes)

    found: list[str] = []

    def attempt(label: str, req: PlanRequest) -> None:
        if len(found) >= limit:
            return
        plan = _quiet(matrix, req)
        if plan is not None:
            found.append(f"{label} ({_gives(plan)})")

    if kinds & {"image", "image-platform"} and not request.host_only:
        # the container's OS is independent of the host's: other images first, then the host alone
        own = image_os_of(matrix, matrix.os(request.os), request.image_os)
        for img_os in _published_image_oses(matrix):
            if img_os != own and len(found) < 2:
                attempt(f"--image-os {img_os}", replace(request, image_os=img_os))
    if request.cuda:
        for mm in sorted({major_minor(c.version) for c in matrix.cuda}, key=Version, reverse=True):
            if mm != request.cuda and len(found) < 2:
                attempt(f"--cuda {mm}", replace(request, cuda=mm))
    if request.driver:
        found.extend(_driver_suggestions(matrix, request, limit - len(found)))
    if request.framework and "==" in request.framework:
        name, _, ver = request.framework.partition("==")
        fw = matrix.framework(_FRAMEWORK_NAMES.get(name.lower(), name))
        for rel in fw.releases:
            if str(rel.version) != ver and len(found) < limit:
                attempt(f"--framework {name}=={rel.version}", replace(request, framework=f"{name}=={rel.version}"))
                if found and found[-1].startswith("--framework"):
                    break
    if request.cudnn:
        carried = {Version(i.cudnn_version).release[0] for i in matrix.images if i.cudnn_version}
        for major in sorted(carried, reverse=True):
            if str(major) != request.cudnn.strip().split(".")[0] and len(found) < 2:
                attempt(f"--cudnn {major}", replace(request, cudnn=str(major)))
        attempt("drop --cudnn", replace(request, cudnn=None))
    for key in ("cuda", "driver", "framework"):
        if getattr(request, key):
            attempt(f"drop --{key}", replace(request, **{key: None}))
    if request.policy == "lts":
        attempt("--policy latest", replace(request, policy="latest"))
    if request.image_os:
        attempt("drop --image-os", replace(request, image_os=None))
    if kinds & {"image", "image-platform"} and not request.host_only and len(found) < limit:
        bare = replace(request, cuda=None, cudnn=None, framework=None, image_os=None, host_only=True)
        attempt("--host-only without image pins", bare)
    if not found:
        for os_rel in matrix.os_releases:
            if os_rel.id != request.os:
                attempt(f"--os {os_rel.id}", replace(request, os=os_rel.id))
    if not found:
        return "no single pin change resolves; see the reasons above and provision matrix check"
    return "try " + "; or ".join(found)


def _gives(plan: Plan) -> str:
    if plan.cuda is None:
        return f"gives driver {plan.driver.version}, no image"
    image = f" on {plan.image_os} images" if plan.image_os != plan.os.cuda_image_os else ""
    return f"gives driver {plan.driver.version}, cuda {plan.cuda.version}{image}"


def _driver_order(matrix: m.Matrix) -> list[m.DriverBranch]:
    """Branches in the order a hint offers them: not past end of life on the catalogue's date
    first; among those long-term support and production branches before new feature branches
    (and branches without a published designation); newest first within each."""
    as_of = matrix.as_of
    return sorted(matrix.drivers, key=lambda b: (b.past_eol(as_of), b.type not in ("ltsb", "pb"), -b.branch))


def _driver_text(matrix: m.Matrix, branch: m.DriverBranch, plan: Plan) -> str:
    kind = BRANCH_TYPES[branch.type]
    if branch.past_eol(matrix.as_of):
        kind += f", past end of life {branch.eol or '(listed)'}"
    elif branch.eol:
        kind += f" until {branch.eol}"
    return f"--driver {branch.branch} ({branch.label} {kind}; {_gives(plan)})"


def _driver_suggestions(matrix: m.Matrix, request: PlanRequest, room: int) -> list[str]:
    """Up to ``room`` --driver changes that resolve, in ``_driver_order``; a supported long-term
    support branch that resolves is always among them (it takes the last place if newer branches
    filled the others), and end-of-life branches are offered only when no supported one resolves."""
    if room <= 0 or request.driver is None:
        return []
    pinned = request.driver.strip().lstrip("Rr").split(".")[0]
    as_of = matrix.as_of
    working: list[tuple[m.DriverBranch, Plan]] = []
    for b in _driver_order(matrix):
        if str(b.branch) == pinned:
            continue
        if b.past_eol(as_of) and any(not w.past_eol(as_of) for w, _ in working):
            break  # a supported branch resolves: end-of-life ones are not offered
        if len(working) >= room:
            if any(w.type == "ltsb" for w, _ in working) or b.past_eol(as_of):
                break
            if b.type != "ltsb":
                continue  # the places are taken: only a supported long-term support branch may still join
        plan = _quiet(matrix, request._replace(driver=str(b.branch)))
        if plan is not None:
            working.append((b, plan))
    chosen = working[:room]
    if len(working) > room and not any(b.type == "ltsb" for b, _ in chosen):
        chosen[-1] = working[-1]  # the long-term support branch found past the places
    return [_driver_text(matrix, b, plan) for b, plan in chosen]
