"""The resolver's assembly: a Plan, and every reason in it, from the search's Choice. The parts
other requests share (the host, the driver and what hangs on it, the image, the framework build,
the Container Toolkit) are kept per catalogue, keyed by all they read (provision.matrix.memo).
"""

from __future__ import annotations

import re

from provision.matrix import model as m
from provision.matrix import runs_on
from provision.matrix.memo import per_matrix
from provision.plan.context import Context, Facts, PinText, Subject, parse_pins, request_facts
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
    PlanServer,
    PlanStackPackage,
    PlanSubnetManager,
    PlanToolkit,
    Reason,
)
from provision.plan.rules import carries_sm, image_flavour, image_needs, requires_packages, sm_floor
from provision.plan.search import BRANCH_TYPES, Choice, DriverChoice, driver_search
from provision.versions import DottedVersion as Version
from provision.versions import major_minor, prefix_matches


def assemble(ctx: Context, choice: Choice) -> Plan:
    """The Plan of a choice that passed every rule, one part (and its reasons) at a time."""
    matrix, request = ctx.matrix, ctx.request
    host, drivers, (toolkit, toolkit_why), data = host_parts(
        matrix, ctx.subject, request.driver, choice.driver.branch.branch
    )
    plan_os, plan_gpu, server, os_why, gpu_why, server_why = host
    driver, driver_reasons, fabric, subnet_manager, hardware_reasons = drivers
    common = {
        "request": request,
        "os": plan_os,
        "gpu": plan_gpu,
        "driver": driver,
        "fabric_manager": fabric,
        "container_toolkit": toolkit,
        "platform": m.PLATFORMS[ctx.host],
        "data": data,
        "subnet_manager": subnet_manager,
        "server": server,
    }
    if choice.host_only:
        none = (
            _host_cuda_reason(ctx, choice)
            if choice.host_runs is not None
            else Reason(
                "image",
                "none: --host-only plans the host alone (driver, kernel modules, Fabric Manager, Container Toolkit); "
                f"which images run on it: provision runs-on --driver {driver.version} --gpu {ctx.gpu_id}",
                None,
            )
        )
        return Plan(
            cuda=None,
            cudnn=None,
            framework=None,
            base_image=None,
            images={},
            driver_floor=None,
            reasons=(os_why, gpu_why, *server_why, *driver_reasons, none, *hardware_reasons, toolkit_why),
            image_os=None,
            **common,
        )
    build = choice.build
    reasons = list(driver_reasons)
    cuda, driver_floor, why = _cuda_part(ctx, choice)
    reasons.append(why)
    flavour = image_flavour(matrix, build, ctx.pins.stack)
    where = (ctx.os.id, ctx.img_os, flavour)
    if ctx.pins.stack:
        where = (*where, _stack_flavour_why(flavour, choice))
    base_image, images, why = image_part(matrix, choice.image, choice.cuda.version, where)
    reasons.append(why)
    plan_cudnn, why = _cudnn_part(choice)
    reasons.append(why)
    framework = None
    if build is not None:
        framework, why = framework_part(
            matrix, ctx.pins.framework.id, choice.fw_release.version, build, (ctx.host, ctx.cc)
        )
        reasons.append(_short_pin_note(ctx, choice.fw_release, why))
    stack = ()
    if choice.packages:
        stack, why = stack_part(ctx, choice)
        reasons += why
    reasons += hardware_reasons
    reasons.append(toolkit_why)
    return Plan(
        cuda=cuda,
        cudnn=plan_cudnn,
        framework=framework,
        base_image=base_image,
        images=dict(images),
        driver_floor=driver_floor,
        reasons=(os_why, gpu_why, *server_why, *reasons),
        image_os=ctx.img_os,
        require_cuda=require_cuda(matrix, choice.cuda, build, ctx.host),
        stack=stack,
        **common,
    )


@per_matrix
def host_parts(matrix: m.Matrix, subject: Subject, driver_pin: str | None, branch: int) -> tuple:
    """(host_part, driver_parts, toolkit_part, plan_data): what every plan of a request's subject,
    driver pin and chosen branch holds, image or not."""
    return (
        host_part(matrix, subject),
        driver_parts(matrix, subject, driver_pin, branch),
        toolkit_part(matrix),
        plan_data(matrix),
    )


def _host_cuda_reason(ctx: Context, choice: Choice) -> Reason:
    """A --host-only --cuda X plan's image reason: none planned, and how the driver runs the X images."""
    worst = choice.host_runs
    return Reason(
        "image",
        f"none planned (--host-only); the driver runs the CUDA {ctx.pins.cuda} images the host must run: "
        f"{worst.mode} ({worst.reason})"
        + (f"; limits: {'; '.join(worst.limits)}" if worst.limits else "")
        + (
            f"; any image OS ({ctx.request.image_os} asked): a host runs images of any OS"
            if ctx.request.image_os
            else ""
        ),
        None,
    )


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


@per_matrix
def require_cuda(matrix: m.Matrix, cuda: m.CudaRelease, build: m.FrameworkBuild | None, host: str) -> str:
    """The images' NVIDIA_REQUIRE_CUDA: the rule's accepted hosts, as the Container Toolkit reads them."""
    return runs_on.require_cuda(matrix, image_needs(matrix, cuda, build, host))


# -- the host: OS, GPU, server ---------------------------------------------------------------------
@per_matrix
def host_part(matrix: m.Matrix, subject: Subject) -> tuple:
    """The plan's OS, GPU and server, and their reasons (the server's: () without a platform):
    what the request's OS, GPU and platform alone decide."""
    f = request_facts(matrix, subject)
    os_rel = f.os
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
        f.host,
        f.repo_arch,
    )
    plan_gpu = PlanGpu(
        f.gpu_id,
        f.gpu_name,
        f.cc,
        f.arch.id,
        tuple(g.id for g in f.gpus),
        f.nvswitch,
        all(g.mig is not None for g in f.gpus),
        tuple(sorted({p for g in f.gpus for p in g.pci_device_ids})),
    )
    server = server_part(f.platform, f.gpus[0]) if f.platform is not None else None
    return (
        plan_os,
        plan_gpu,
        server,
        Reason("os", _os_text(f), os_rel.sources[0]),
        Reason("gpu", _gpu_text(f), f.gpus[0].sources[0]),
        (_server_reason(f),) if f.platform is not None else (),
    )


def _os_text(f: Facts) -> str:
    os_rel = f.os
    text = f"{os_rel.name}: {os_rel.pkg_manager}, NVIDIA repository {os_rel.nvidia_repo}"
    if f.host == m.DEFAULT_ARCH:
        return text
    return (
        f"{text}/{f.repo_arch} ({f.host} host: {f.gpu_id} is built into {f.host} servers; "
        f"images for {m.PLATFORMS[f.host]}, {f.host} wheels)"
    )


def _gpu_text(f: Facts) -> str:
    covers = f"covers {', '.join(g.id for g in f.gpus)}; " if len(f.gpus) > 1 else ""
    fm = "NVSwitch baseboard" if f.nvswitch else "no NVSwitch"
    if f.platform is not None:
        fm += f" (on {f.platform.name})"
    host = f", {f.host} host" if f.host != m.DEFAULT_ARCH else ""
    return f"{f.gpu_name}: {covers}{f.arch.name}, compute capability {f.cc}, {fm}{host}"


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


def _server_reason(f: Facts) -> Reason:
    platform, link = f.platform, f.link
    count = ""
    if platform.gpu_count is not None:
        count = f"{'up to ' if platform.gpu_count_is == 'up-to' else ''}{platform.gpu_count} x "
    parts = [f"{count}{f.gpu_id} ({f.gpus[0].form_factor})", _interconnect_text(platform, link)]
    if link.topology:
        parts.append(f"nvidia-smi topo -m {'/'.join(link.topology)} between GPU pairs")
    if link.pcie_generation is not None:
        parts.append(f"PCIe Gen{link.pcie_generation} x{link.pcie_width}")
    if platform.unconfirmed:
        parts.append(f"unconfirmed: {', '.join(platform.unconfirmed)} (compat/platforms.yaml doubts)")
    variant = platform.variant(f.gpus[0].id)
    source = ((variant.sources if variant else ()) or platform.sources_of("gpus") or platform.sources)[0]
    return Reason("server", f"{platform.name} ({_KINDS[platform.kind]}): {'; '.join(parts)}", source)


# -- the driver and what hangs on it ---------------------------------------------------------------
@per_matrix
def driver_parts(matrix: m.Matrix, subject: Subject, driver_pin: str | None, branch: int) -> tuple:
    """(driver, its reasons, Fabric Manager, NVLink Subnet Manager, their reasons) of the request's
    driver candidate on ``branch``: what the driver choice decides with the OS, the GPU, the
    platform, the driver pin and the policy (its reasons)."""
    f = request_facts(matrix, subject)
    drv = next(d for d in driver_search(matrix, subject, driver_pin).choices if d.branch.branch == branch)
    reasons = [*_driver_reasons(matrix, f, subject.policy, driver_pin, drv)]
    driver = _driver_part(f, drv, reasons)
    hardware: list[Reason] = []
    fabric = _fabric_part(f, driver, drv.packaging, hardware)
    subnet_manager = _subnet_manager_part(matrix, f, drv.packaging, hardware)
    return driver, tuple(reasons), fabric, subnet_manager, tuple(hardware)


def _driver_reasons(matrix: m.Matrix, f: Facts, policy: str, driver_pin: str | None, drv: DriverChoice) -> list[Reason]:
    b, release, module = drv.branch, drv.release, drv.module
    pins = parse_pins(matrix, PinText(driver_pin))
    if pins.driver_branch is not None:
        why = f"pinned by --driver {driver_pin}"
        if b.past_eol(matrix.as_of):
            why += f"; warning: past end of life ({b.eol or 'listed as EOL'})"
    else:
        kinds = "long-term support or production" if policy == "lts" else "any"
        why = f"newest {kinds} branch not past end of life on {matrix.as_of} (policy {policy}) that supports {f.arch.name}"
    eol = f", end of life {b.eol}" if b.eol else ""
    if not b.eol_known:
        eol = ", end of life unknown"
        why += (
            f"; warning: NVIDIA publishes no end of life for {b.label}, so whether it still gets fixes is unknown "
            "(a branch with a published end of life, such as a long-term support branch, is the safer pin)"
        )
    reasons = [Reason("driver", f"{b.label}, {BRANCH_TYPES[b.type]}{eol}: {why}", b.sources[0])]
    rel_why = "pinned" if pins.driver_release else f"newest {b.label} release in the {f.os.nvidia_repo} repository"
    if f.min_driver is not None:
        rel_why += f"; {f.gpu_id} needs >= {f.min_driver}"
    reasons.append(Reason("driver", f"{release.version} ({release.date}): {rel_why}", release.source))
    who = f.arch.name if f.gpu_modules is None else f.gpu_id
    if module == b.default_module:
        mod_why = f"{module} kernel modules: {b.label}'s default, and {who} runs them"
    else:
        mod_why = f"{module} kernel modules: {who} needs them ({b.label} defaults to {b.default_module})"
    reasons.append(Reason("kernel-module", mod_why, "kernel-modules-guide"))
    return reasons


def _driver_part(f: Facts, drv: DriverChoice, reasons: list[Reason]) -> PlanDriver:
    version = str(drv.release.version)
    branch = str(drv.branch.branch)
    names = [n.format(branch=branch) for n in drv.packaging.packages]
    stream = drv.packaging.module_stream.format(branch=branch) if drv.packaging.module_stream else None
    install = f"dnf module stream {stream}" if stream else "apt"
    reasons.append(
        Reason(
            "driver",
            f"packages {', '.join(names)} at {version} ({install}; held/locked at that version)",
            drv.packaging.sources[0],
        )
    )
    options = _module_options(f, drv.branch.branch)
    reasons += [
        Reason(
            "driver",
            f"{o.module} module option {o.option}={o.value} for {f.gpu_id} (driver branch >= {o.min_branch}; "
            "written to the role's modprobe.d file)",
            o.sources[0],
        )
        for o in options
    ]
    return PlanDriver(
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


def _module_options(f: Facts, branch: int) -> list[m.ModuleOption]:
    """The GPUs' kernel-module options whose branch floor the plan's driver branch meets, once each."""
    found: dict[tuple[str, str], m.ModuleOption] = {}
    for gpu in f.gpus:
        for option in gpu.module_options:
            if branch >= option.min_branch:
                found.setdefault((option.module, option.option), option)
    return list(found.values())


def _fabric_part(
    f: Facts, driver: PlanDriver, packaging: m.DriverPackaging, reasons: list[Reason]
) -> PlanFabricManager | None:
    platform = f.platform
    if not f.nvswitch:
        if platform is not None and platform.interconnect is not None:
            why = (
                f"none: {platform.name} has {_interconnect_text(platform, f.link)}; Fabric Manager serves "
                "NVSwitch systems only (without one it exits NV_WARN_NOTHING_TO_DO and its unit fails)"
            )
            reasons.append(Reason("fabric-manager", why, _interconnect_source(platform, f.gpus[0])))
        else:
            reasons.append(Reason("fabric-manager", f"none: {f.gpu_id} has no NVSwitch", None))
        return None
    fm_names = [n.format(branch=driver.branch) for n in packaging.fabric_manager]
    if platform is not None and platform.interconnect is not None:
        where = f"{platform.name} puts {f.gpu_id} on {_interconnect_text(platform, f.link)}"
        source = _interconnect_source(platform, f.gpus[0])
    else:
        where, source = f"{f.gpu_id} sits on an NVSwitch baseboard", "fabric-manager-guide"
    reasons.append(
        Reason(
            "fabric-manager",
            f"{fm_names[0]} {driver.version}: {where}; Fabric Manager must match the driver version exactly",
            source,
        )
    )
    return PlanFabricManager(fm_names[0], driver.version, tuple(Package(n, driver.version) for n in fm_names))


def _subnet_manager_part(
    matrix: m.Matrix, f: Facts, packaging: m.DriverPackaging, reasons: list[Reason]
) -> PlanSubnetManager | None:
    sm = f.subnet_manager
    generation = f.link.nvswitch_generation if f.link is not None else f.gpus[0].nvswitch_generation
    if sm is None or packaging.subnet_manager is None:
        if f.nvswitch and matrix.subnet_manager is not None:
            first = matrix.subnet_manager.nvswitch_generation
            reasons.append(
                Reason(
                    "subnet-manager",
                    f"none: {f.gpu_id}'s NVSwitch is generation {generation}; "
                    f"Fabric Manager alone configures it (NVLink Subnet Manager from generation {first})",
                    matrix.subnet_manager.sources[0],
                )
            )
        return None
    pkgs = packaging.subnet_manager
    modules = f"; {', '.join(sm.kernel_modules)} loaded at boot" if sm.kernel_modules else ""
    reasons.append(
        Reason(
            "subnet-manager",
            f"{', '.join(pkgs.packages)} (NVLink Subnet Manager, held where installed) with "
            f"{', '.join(pkgs.requires) or 'no other packages'}{modules}: {f.gpu_id} sits on a generation "
            f"{generation} NVSwitch baseboard, whose routing NVLSM programs beside Fabric Manager; "
            f"{sm.service} starts both",
            sm.sources[0],
        )
    )
    return PlanSubnetManager(sm.service, sm.process, pkgs.packages, pkgs.requires, sm.kernel_modules)


@per_matrix
def toolkit_part(matrix: m.Matrix) -> tuple[PlanToolkit, Reason]:
    toolkit = matrix.toolkit[0]
    why = Reason(
        "container-toolkit",
        f"NVIDIA Container Toolkit {toolkit.version}: newest catalogued release ({toolkit.date})",
        toolkit.source,
    )
    return PlanToolkit(str(toolkit.version), tuple(Package(p, str(toolkit.version)) for p in toolkit.packages)), why


@per_matrix
def plan_data(matrix: m.Matrix) -> PlanData:
    return PlanData(str(matrix.as_of), data_digest(matrix))


def data_digest(matrix: m.Matrix) -> str:
    import hashlib

    h = hashlib.sha256()
    for name, digest in matrix.files:
        h.update(f"{name}:{digest}\n".encode())
    return "sha256:" + h.hexdigest()


# -- CUDA, the image, cuDNN, the framework -----------------------------------------------------------
def _cuda_part(ctx: Context, choice: Choice) -> tuple[PlanCuda, str, Reason]:
    cuda, version, link = choice.cuda, choice.driver.release.version, choice.link
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
    pick = "pinned" if ctx.pins.cuda else ("the framework build's CUDA" if choice.build else "newest release")
    if not ctx.pins.cuda and not choice.image.past_eol(ctx.matrix.as_of):
        pick += " with image sets not past end of life"
    why = Reason(
        "cuda",
        f"CUDA {cuda.version} ({cuda.label}): {pick} that builds for sm_{ctx.cc.replace('.', '')} "
        f"and has {ctx.img_os} images; {cuda_why}",
        cuda.source,
    )
    targets = cuda_targets(ctx.matrix, cuda.version)
    part = PlanCuda(str(cuda.version), cuda.label, str(cuda.min_driver), link.compat, targets or None)
    return part, driver_floor, why


def _forward_floor(matrix: m.Matrix, cuda: m.CudaRelease) -> str:
    """The oldest catalogued driver a forward-compat image runs on: the first release of the oldest
    base branch its cuda-compat package supports (on a data-center GPU)."""
    row = next(f for f in matrix.forward_compat if f.cuda == major_minor(cuda.version))
    releases = [r.version for b in matrix.drivers if b.branch in row.branches for r in b.releases]
    return str(min(releases))


@per_matrix
def cuda_targets(matrix: m.Matrix, version: Version) -> tuple[str, ...]:
    """The compute capabilities a CUDA release builds for, oldest first."""
    return tuple(
        sorted(
            {s.compute_capability for s in matrix.compute_support if s.cuda.contains(version)},
            key=lambda cc: tuple(int(x) for x in cc.split(".")),
        )
    )


_FLAVOUR_WHY = {
    "runtime": "runtime flavour: CUDA math libraries, no framework asked for",
    "base": "base flavour: the framework's wheels bring their own CUDA libraries",
    "cudnn-runtime": "cudnn-runtime flavour: the framework build uses the image's CUDA and cuDNN",
}


@per_matrix
def image_part(
    matrix: m.Matrix, image: m.ImageRelease, cuda: Version, where: tuple[str, str, str]
) -> tuple[str, dict[str, str], Reason]:
    """The base image (in ``flavour``), every flavour's tag, and the reason, of an image set that
    carries CUDA ``cuda``; ``where``: (the host OS id, the images' OS, the flavour[, why that
    flavour, for a stack])."""
    os_id, img_os, flavour = where[:3]
    os_rel = matrix.os(os_id)
    images = {f: f"{matrix.image_repository}:{image.tag(f, img_os)}" for f in image.flavours_for(img_os)}
    base_image = images[flavour]
    if img_os != os_rel.cuda_image_os:
        note = f"; {img_os} images on a {os_rel.id} host (--image-os: the container's OS is independent of the host's)"
    else:
        note = f"; {os_rel.cuda_image_note}" if os_rel.cuda_image_note else ""
    if image.cuda != cuda:
        cublas = f" with cuBLAS {image.cublas}" if image.cublas else ""
        note += f"; nvidia/cuda {image.cuda} images (CUDA {image.carries} toolkit{cublas})"
    if image.past_eol(matrix.as_of):
        why = f"superseded by {image.superseded_by}" if image.superseded_by else f"end of life {image.eol_date}"
        note += (
            f"; past NVIDIA's end of life ({why}): no supported image set fits, and NVIDIA deletes these tags "
            "six months on (pin the digest: provision pin-base)"
        )
    text = f"{base_image}: {where[3] if len(where) > 3 else _FLAVOUR_WHY[flavour]}{note}"
    return base_image, images, Reason("image", text, image.eol_source or image.source)


def _cudnn_part(choice: Choice) -> tuple[PlanCudnn | None, Reason]:
    cudnn = choice.cudnn
    cuda = choice.image.cuda  # the image set's number: 12.9.2 for the 12.9.1 toolkit's newest images
    if cudnn.version is not None:
        if cudnn.origin == "image":
            where = f"in the nvidia/cuda {cuda} cudnn images"
        elif choice.build is not None and choice.build.cudnn_spec is not None:
            where = f"the newest catalogued cuDNN inside the framework wheel's range {choice.build.cudnn_spec}"
        else:
            where = "the framework build's pin"
        why = Reason("cudnn", f"cuDNN {cudnn.version} ({where}): {cudnn.reason}", None)
        return PlanCudnn(cudnn.version, cudnn.origin), why
    unknown = cudnn.reason or f"the cuDNN build in the nvidia/cuda {cuda} cudnn images is not catalogued"
    why = Reason(
        "cudnn", f"none: {unknown} (pin --cudnn to choose a CUDA release with a confirmed cuDNN)", choice.image.source
    )
    return None, why


@per_matrix
def framework_part(
    matrix: m.Matrix, framework: str, version: Version, build: m.FrameworkBuild, on: tuple[str, str]
) -> tuple[PlanFramework, Reason]:
    """The plan's framework: ``build`` of release ``version`` of ``framework`` (an id) on a host of
    architecture and a GPU of compute capability ``on`` names: (host, cc)."""
    host, cc = on
    fw = matrix.framework(framework)
    fw_release = fw.release(version)
    requirement = f"{fw.package}{build.requirement_extra}=={fw_release.version}"
    index = build.index_url or "the package index default (pypi.org)"
    _, how = carries_sm(matrix, build, cc, host)
    pins = f"CUDA runtime {build.cuda_runtime}" if build.cuda_runtime else f"CUDA {build.cuda}"
    cudnn = f"cuDNN {build.cudnn_spec}" if build.cudnn_spec is not None else f"cuDNN {build.cudnn}"
    sass, ptx, _ = build.sms_for(host)
    why = Reason(
        "framework", f"{requirement} from {index}: {build.variant} build ({pins}, {cudnn}); {how}", build.source
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
        requires_python=fw_release.python_for(host),
        compute_capabilities=tuple(sass) if sass else None,
        ptx=ptx,
    ), why


# -- the stack packages ----------------------------------------------------------------------------
def _stack_flavour_why(flavour: str, choice: Choice) -> str:
    """Why a stack's image starts from ``flavour`` (provision.plan.rules.image_flavour)."""
    if flavour == "devel":
        needs = [d.package.name for d in choice.packages if d.package.runtime and d.package.runtime.image == "devel"]
        notes = "; ".join(
            f"{d.package.name}: {d.package.runtime.note}"
            for d in choice.packages
            if d.package.runtime and d.package.runtime.image == "devel"
        )
        cuda = f"CUDA {major_minor(choice.cuda.version)}"
        if choice.build is not None:
            cuda += f", the {choice.build.variant} build's CUDA"
        # DeepSpeed needs them; DeepSpeed and Transformer Engine need them
        verb = "needs" if len(needs) == 1 else "need"
        return f"devel flavour (nvcc and the CUDA headers, {cuda}): {' and '.join(needs)} {verb} them at run time ({notes})"
    if choice.build is None:
        lead = choice.packages[0].package.name
        if flavour == "cudnn-runtime":
            return f"cudnn-runtime flavour: {lead} uses the image's CUDA and cuDNN libraries"
        return f"runtime flavour: {lead} uses the image's CUDA libraries"
    return _FLAVOUR_WHY[flavour]


def stack_part(ctx: Context, choice: Choice) -> tuple[tuple[PlanStackPackage, ...], list[Reason]]:
    """The plan's stack packages (the search's choice, in the request's order) and their reasons:
    each package's build and why it fits, and a feature (FP8) the GPU lacks."""
    framework = None
    if choice.build is not None:
        framework = f"{ctx.pins.framework.package} {choice.fw_release.version} ({choice.build.variant})"
    parts, reasons = [], []
    pinned = {p.package.id: p.pinned for p in ctx.pins.stack}
    for draft in choice.packages:
        on = (ctx.host, ctx.cc, pinned.get(draft.package.id, False))
        part, why = package_part(
            ctx.matrix, draft, on, framework, choice.cuda.version, ctx.pins.framework, choice.packages
        )
        parts.append(part)
        reasons += why
    return tuple(parts), reasons


def _requirement(package: m.StackPackage, release: m.StackRelease, build: m.StackBuild, fw: m.Framework | None) -> str:
    """What pip takes: the package's own name for its default build, the build line's name
    otherwise (tensorrt-cu12); the extra named after the framework where the release has one
    (transformer-engine[pytorch]), and the build line's core extra for another line (core-cu13)."""
    install = build.pin or str(release.version)
    name = package.pip
    if not build.default and build.flavour is not None:
        meta = next((d for d in package.distributions if d.role == "meta" and "{flavour}" in d.pip), None)
        if meta is not None:
            name = meta.name(build.flavour)
    extras = []
    if fw is not None and release.extra(fw.id) is not None:
        extras.append(fw.id)
    if (
        name == package.pip
        and not build.default
        and build.flavour
        and release.extra(f"core-{build.flavour}") is not None
    ):
        extras.append(f"core-{build.flavour}")
    return f"{name}{'[' + ','.join(extras) + ']' if extras else ''}=={install}"


def _required_by(matrix: m.Matrix, draft, chosen: tuple) -> str | None:
    """Which package's declared requirement brought a role-requires package in, and the
    requirement as declared: "torch-tensorrt==2.14.0: tensorrt-cu13<11.2.0,>=11.1.0"."""
    requirer = next((c for c in chosen if c.package.id == draft.required_by), None)
    if requirer is None:
        return draft.required_by
    said = next((f"{n}{spec}" for p, n, spec in requires_packages(matrix, requirer) if p.id == draft.package.id), None)
    return f"{requirer.name}{': ' + said if said else ''}"


def package_part(  # noqa: PLR0917
    matrix: m.Matrix,
    draft,
    on: tuple[str, str, bool],
    framework: str | None,
    cuda: Version,
    fw: m.Framework | None,
    chosen: tuple = (),
) -> tuple[PlanStackPackage, list[Reason]]:
    """One stack package of the plan (``draft``: provision.plan.rules.PackageDraft) and its
    reasons; ``on``: (host architecture, compute capability, whether the request pins its version);
    ``chosen``: every package of the set (a role-requires package's reason names its requirer)."""
    host, cc, pinned = on
    package, release, build = draft.package, draft.release, draft.build
    floor, floor_source = sm_floor(package, release, build)
    requirement = _requirement(package, release, build, fw)
    needs_nvcc = package.runtime is not None and package.runtime.nvcc is not None
    # what pip installs for the requirement: the build's distributions, and the distribution the
    # requirement itself names where the build does not list it (TensorRT's default build is
    # installed through its `tensorrt` selector, an sdist on the package index)
    distributions = build.distributions
    named = requirement.split("[")[0].split("==")[0]
    if named not in {name for name, _ in distributions}:
        own = next((d for d in package.distributions if d.name(build.flavour) == named), None)
        if own is not None:
            distributions = ((named, own.artefact), *distributions)
    part = PlanStackPackage(
        id=package.id,
        pip=package.pip,
        version=str(release.version),
        install=build.pin or str(release.version),
        flavour=build.flavour,
        role=draft.role,
        requirement=requirement,
        distributions=distributions,
        cuda_major=build.cuda_major,
        cuda=build.cuda,
        cudnn_major=build.cudnn_major,
        cudnn_spec=str(build.cudnn_spec) if build.cudnn_spec is not None else None,
        cudnn_min=str(build.cudnn_min) if build.cudnn_min is not None else None,
        sm_floor=floor,
        library_index=build.library_index,
        needs_nvcc=needs_nvcc,
        build_requires=tuple(build.build_requires or ()),
        source=build.source,
        requires_python=build.python_for(host),
        required_by=draft.required_by,
    )
    facts = []
    if build.cuda_major is not None:
        facts.append(f"CUDA {build.cuda or build.cuda_major} ({build.cuda_from})")
    else:
        facts.append("no CUDA of its own (it runs on the framework's)")
    if build.cudnn_major is not None or build.cudnn_spec is not None:
        cudnn = f"cuDNN {build.cudnn_spec or build.cudnn_major}"
        if build.cudnn_min is not None:
            cudnn += f", at least {build.cudnn_min}"
        facts.append(cudnn)
    if floor is not None:
        facts.append(f"SM {floor}+ ({floor_source})")
    if build.sdists:
        facts.append(f"built from source: {', '.join(build.sdists)}")
    if build.library_index:
        facts.append(f"libraries from {build.library_index} ({build.library_index_source or build.source})")
    if draft.role == "framework":
        role = "the image's framework"
    elif draft.role == "requires":
        role = f"required by {requirer}" if (requirer := _required_by(matrix, draft, chosen)) else "required"
    else:
        role = f"with {framework or 'the framework'}"
    fits = ["the pinned release, a build that fits" if pinned else "the newest release that fits"]
    if framework is not None:
        fits.append(f"{framework}'s CUDA and cuDNN")
    else:
        fits.append(f"the CUDA {cuda} image")
    text = f"{requirement} ({role}): {'; '.join(facts)}; {' '.join(fits[:1])} {' and '.join(fits[1:])}"
    if draft.pythons:
        text += f"; Python {', '.join(draft.pythons)} of the image OS's"
    reasons = [Reason(package.id, text, build.source)]
    for feature in package.features:
        if feature.releases.contains(release.version) and not feature.available(cc, cuda):
            need = " or ".join(f"SM {sm}" + (f" with CUDA {c}+" if c is not None else "") for sm, c in feature.any_of)
            reasons.append(
                Reason(
                    package.id,
                    f"{feature.name.upper()} unavailable: {package.name} {release.version} needs {need}; the GPU is SM {cc} "
                    f"with CUDA {cuda} (the rest of {package.name} runs)",
                    feature.source,
                )
            )
    return part, reasons
