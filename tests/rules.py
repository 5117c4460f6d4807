"""An independent checker of the resolver's rules, used as the oracle in property tests.

It re-derives each rule from the catalogue directly (not through provision.matrix.resolve), so
a plan the resolver produces must pass it.
"""

from __future__ import annotations

from provision.matrix.model import Matrix
from provision.plan.model import Plan
from provision.versions import DottedVersion as V
from provision.versions import major_minor, parse_version, prefix_matches


def violations(matrix: Matrix, plan: Plan) -> list[str]:  # noqa: PLR0915 - one rule a paragraph
    out: list[str] = []
    req = plan.request
    os_rel = matrix.os(req.os)
    platform = matrix.platform(req.platform) if req.platform is not None else None
    if req.gpu is None:
        # the platform implies the GPU: its one model, or the catalogued group of exactly its models
        gpus = tuple(matrix.gpu(m) for m in plan.gpu.members)
        if platform is None or set(plan.gpu.members) != set(platform.gpus):
            out.append(f"GPUs {list(plan.gpu.members)} planned without --gpu are not the platform's")
    else:
        _, gpus = matrix.gpu_members(req.gpu)
    gpu = gpus[0]
    arch = matrix.architecture(gpu.architecture)
    cc = gpu.compute_capability
    out += _platform_rules(matrix, plan, platform, gpus)

    # MIG: every planned instance at an allowed start of its profile, none overlapping
    if plan.mig is not None:
        sets = {g.mig for g in gpus}
        if len(sets) != 1 or None in sets:
            out.append(f"MIG layout planned for {req.gpu}, whose GPUs do not share one MIG profile set")
        else:
            set_id = sets.pop()
            pset = next(s for s in matrix.mig if s.id == set_id)
            taken: set[int] = set()
            for inst in plan.mig.instances:
                prof = next((p for p in pset.profiles if p.name == inst.profile), None)
                if prof is None or inst.placement not in prof.placements:
                    out.append(f"MIG {inst.profile}@{inst.placement} is not an allowed placement")
                    continue
                slots = set(range(inst.placement, inst.placement + prof.memory_slices))
                if slots & taken:
                    out.append(f"MIG {inst.profile}@{inst.placement} overlaps another instance")
                taken |= slots
            if sum(i.compute_slices for i in plan.mig.instances) > pset.compute_slices:
                out.append("MIG layout uses more compute slices than the GPU has")

    # driver: branch, release on this OS, architecture window, module, GPU minimum
    branch = matrix.branch(int(plan.driver.branch))
    if branch is None:
        return [f"unknown branch {plan.driver.branch}"]
    release = branch.release(V(plan.driver.version))
    if release is None:
        out.append(f"{plan.driver.version} is not an R{branch.branch} release")
    elif os_rel.id not in release.os:
        out.append(f"{plan.driver.version} is not in the {os_rel.id} repository")
    if arch.last_driver_branch is not None and branch.branch > arch.last_driver_branch:
        out.append(f"R{branch.branch} is past {arch.id}'s last branch")
    if arch.first_driver_branch is not None and branch.branch < arch.first_driver_branch:
        out.append(f"R{branch.branch} predates {arch.id}")
    if plan.driver.kernel_module not in arch.kernel_modules or plan.driver.kernel_module not in branch.kernel_modules:
        out.append(f"{plan.driver.kernel_module} modules cannot drive {arch.id} on R{branch.branch}")
    for g in gpus:
        if g.min_driver is not None and V(plan.driver.version) < g.min_driver:
            out.append(f"{plan.driver.version} is below {g.id}'s minimum {g.min_driver}")
    if req.driver is None:
        if branch.past_eol(matrix.as_of):
            out.append(f"unpinned plan uses end-of-life R{branch.branch}")
        if req.policy == "lts" and branch.type not in ("ltsb", "pb"):
            out.append(f"policy lts took a {branch.type} branch")

    # host-only: no image part at all, and the driver the policy (or the pin) takes first
    if req.host_only:
        if any(x is not None for x in (plan.cuda, plan.cudnn, plan.framework, plan.base_image, plan.driver_floor)):
            out.append("a --host-only plan with an image part")
        if plan.images or plan.image_os is not None:
            out.append("a --host-only plan with images")
        if req.cuda is not None:  # the CUDA images the host must run: every catalogued release of the pin
            from provision.matrix.runs_on import decide, needs_for_cuda

            for c in (c for c in matrix.cuda if prefix_matches(req.cuda, c.version)):
                if not decide(matrix, needs_for_cuda(matrix, c), parse_version(plan.driver.version), gpu).runs:
                    out.append(
                        f"--host-only --cuda {req.cuda}: driver {plan.driver.version} does not run CUDA {c.version}"
                    )
        return out + _host_rules(matrix, plan, gpu)

    # the images' OS: the one asked for (a host OS id means its own images), else the host's own
    wanted = req.image_os or os_rel.cuda_image_os
    if any(wanted in (o.id, *o.aliases) for o in matrix.os_releases) and not any(
        wanted == i for im in matrix.images for i in im.os
    ):
        wanted = matrix.os(wanted).cuda_image_os
    if plan.image_os != wanted:
        out.append(f"image OS {plan.image_os} is not the one asked for ({wanted})")
    img_os = plan.image_os

    # CUDA: SM, driver minimum (or minor-version floor), image
    cuda = next((c for c in matrix.cuda if str(c.version) == plan.cuda.version), None)
    if cuda is None:
        return [*out, f"unknown CUDA {plan.cuda.version}"]
    if not any(s.compute_capability == cc and s.cuda.contains(cuda.version) for s in matrix.compute_support):
        out.append(f"CUDA {cuda.version} cannot build for {cc}")
    drv = V(plan.driver.version)
    if plan.cuda.compatibility == "toolkit-driver":
        if drv < cuda.min_driver:
            out.append(f"driver {drv} < CUDA {cuda.version} minimum {cuda.min_driver}")
    elif plan.cuda.compatibility == "forward-compat":
        # the forward compatibility table: a listed base branch, data-center GPUs only
        row = next((f for f in matrix.forward_compat if f.cuda == major_minor(cuda.version)), None)
        if row is None or int(plan.driver.branch) not in row.branches:
            out.append(f"R{plan.driver.branch} is no base branch of cuda-compat for CUDA {cuda.version}")
        if any(g.segment != "data-center" for g in gpus):
            out.append(f"forward compatibility planned for {req.gpu}, not a data-center GPU")
    else:
        floor = next(f for f in matrix.minor_compat if f.cuda_major == cuda.version.release[0])
        if drv < floor.min_driver:
            out.append(f"driver {drv} below the CUDA {floor.cuda_major}.x minor-version floor")
    # every image set that carries the toolkit (12.9.2's images carry 12.9.1: images.yaml toolkit)
    images = [i for i in matrix.images if i.carries == cuda.version and img_os in i.os]
    if not images:
        out.append(f"no nvidia/cuda {cuda.version} image for {img_os}")
    elif plan.base_image not in {
        f"{matrix.image_repository}:{image.tag(f, img_os)}" for image in images for f in image.flavours
    }:
        out.append(f"base image {plan.base_image} is not a published tag")
    if req.cuda and not plan.cuda.version.startswith(req.cuda):
        out.append(f"CUDA {plan.cuda.version} ignores the pin {req.cuda}")

    # cuDNN: catalogued matrix must cover CUDA and SM
    if plan.cudnn is not None:
        rel = next((c for c in matrix.cudnn if V(plan.cudnn.version).release[:3] == c.version.release[:3]), None)
        if rel is not None and not any(
            b.cuda.contains(cuda.version) and cc in b.compute_capabilities for b in rel.builds
        ):
            out.append(f"cuDNN {plan.cudnn.version} matrix does not cover CUDA {cuda.version} on {cc}")
        if req.cudnn and not plan.cudnn.version.startswith(req.cudnn):
            out.append(f"cuDNN {plan.cudnn.version} ignores the pin {req.cudnn}")
    elif req.cudnn:
        out.append("a --cudnn pin produced a plan without cuDNN")

    # framework: build exists, same CUDA line, carries the SM
    if plan.framework is not None:
        fw = matrix.framework(plan.framework.name)
        rel = fw.release(V(plan.framework.version))
        build = next((b for b in rel.builds if b.variant == plan.framework.variant), None) if rel else None
        if build is None:
            out.append(f"{plan.framework.requirement} {plan.framework.variant} is not catalogued")
        else:
            if build.cuda != major_minor(cuda.version):
                out.append(f"framework CUDA {build.cuda} != plan CUDA {cuda.version}")
            gmaj, gmin = (int(x) for x in cc.split("."))
            sass = any(
                int(a.split(".")[0]) == gmaj and int(a.split(".")[1]) <= gmin for a in build.compute_capabilities or ()
            )
            ptx = build.ptx is not None and V(build.ptx) <= V(cc)
            unpublished = build.compute_capabilities is None and build.ptx is None
            if not (sass or ptx or unpublished):
                out.append(f"{plan.framework.requirement} ({build.variant}) does not carry sm {cc}")

    return out + _host_rules(matrix, plan, gpu)


def _platform_rules(matrix: Matrix, plan: Plan, platform, gpus) -> list[str]:
    """A platform takes the plan's GPUs (a system or baseboard: the ones it lists; a server: any of
    its form factors), and the plan records it as the server."""
    out = []
    if platform is None:
        if plan.server is not None:
            out.append("a server recorded for a request without a platform")
        return out
    for g in gpus:
        listed = g.id in platform.gpus
        if platform.kind in ("system", "baseboard") and not listed:
            out.append(f"{platform.id} ({platform.kind}) does not list {g.id}")
        if g.form_factor not in platform.form_factors:
            out.append(f"{platform.id} takes {platform.form_factors}, not {g.id}'s {g.form_factor}")
    server = plan.server
    if server is None:
        return [*out, f"no server recorded for platform {platform.id}"]
    if (server.id, server.gpu_count, server.interconnect) != (platform.id, platform.gpu_count, platform.interconnect):
        out.append(f"server {server.id} does not record {platform.id}'s GPU count and interconnect")
    if tuple(server.dmi_vendor) != platform.dmi_vendor or tuple(server.dmi_product) != platform.dmi_product:
        out.append(f"server {server.id} does not record {platform.id}'s DMI strings")
    return out


def _nvswitch_host(plan: Plan, platform, gpu) -> bool:
    """The planned host's GPUs sit on an NVSwitch baseboard: the platform's interconnect says so
    where it has one, else the GPU's own row."""
    if platform is not None and platform.interconnect is not None:
        return platform.interconnect == "nvswitch"
    return gpu.nvswitch


def _host_rules(matrix: Matrix, plan: Plan, gpu) -> list[str]:
    """What every plan's host part obeys, with or without an image part."""
    out = []
    req = plan.request
    platform = matrix.platform(req.platform) if req.platform is not None else None
    nvswitch = _nvswitch_host(plan, platform, gpu)
    # fabric manager exactly on NVSwitch systems, at the driver's version
    if nvswitch != (plan.fabric_manager is not None):
        out.append("fabric manager planned for a GPU without NVSwitch, or missing on one with it")
    if plan.gpu.nvswitch != nvswitch:
        out.append(
            f"gpu.nvswitch {plan.gpu.nvswitch}, but the host's GPUs {'do' if nvswitch else 'do not'} sit on NVSwitch"
        )
    # the NVLink Subnet Manager only beside Fabric Manager, from the generation drivers.yaml names
    sm = matrix.subnet_manager
    if plan.subnet_manager is not None:
        generation = None
        if platform is not None and nvswitch:
            variant = next((v for v in platform.variants if gpu.id in v.gpus), None)
            generation = (variant and variant.nvswitch_generation) or platform.nvswitch_generation
        generation = generation or (gpu.nvswitch_generation if nvswitch else None)
        if not nvswitch or sm is None or generation is None or generation < sm.nvswitch_generation:
            out.append(f"NVLink Subnet Manager planned for an NVSwitch generation {generation} host")
    if plan.fabric_manager is not None and plan.fabric_manager.version != plan.driver.version:
        out.append("fabric manager version differs from the driver")
    if plan.container_toolkit.version != str(matrix.toolkit[0].version):
        out.append("container toolkit is not the newest catalogued")
    if not plan.reasons:
        out.append("a plan without reasons")
    return out
