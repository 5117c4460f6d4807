"""A lock file is consistent with itself and with the catalogue it names, not only well-formed.

The plan schema holds each field to its form; a lock's digest only detects an accidental edit (anyone
can recompute it over an edited lock). So a lock is also held to what the resolver would have
written: the rules between its fields, always (``check_consistency``, from ``Plan.from_dict``), and,
where a command has the catalogue at hand (apply, inventory check, verify, render, build, ci), every
field a role or a template reads against the catalogue's rows (``check_against_catalogue``): the OS
facts; the GPU; the server (a platform's row as it carries the GPU, and a GPU it takes); the driver
release, which must be a release of its branch in the OS's repository, its packages at that version;
Fabric Manager and the Subnet Manager (from the server's interconnect where the lock has a server,
else from the GPU's row); the Container Toolkit; and the
image part: a catalogued CUDA release run in the mode provision.matrix.runs_on gives the driver, the
image OS and every image a published nvidia/cuda tag of that release, the cuDNN, the framework build
(package, index, extra, requirement) and NVIDIA_REQUIRE_CUDA as the catalogue has them. Each refusal
is one line naming the field and what it must be.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provision.errors import InputError, UnknownId
from provision.matrix import model as m
from provision.versions import DottedVersion

if TYPE_CHECKING:
    from provision.plan.model import Plan

# The NVIDIA repository directory of each host architecture when no catalogue is at hand (os.yaml
# arches maps every OS this way; tests/data/test_plan_vocabulary.py holds the catalogue to it).
REPO_ARCHES = {"x86_64": "x86_64", "aarch64": "sbsa"}

_HINT = "plans are resolved, not edited: re-create it with provision plan --lock"


def _refuse(origin: str, field: str, text: str, hint: str = _HINT) -> InputError:
    text = " ".join(text.split())  # one line, whatever a value held
    return InputError(f"{origin}: {field}: {text}", hint=hint)


def check_consistency(plan: Plan, origin: str = "plan") -> None:
    """The rules between a lock's fields, which need no catalogue: the host architecture fixes the
    repository directory and the image platform; Fabric Manager and the Subnet Manager go with an
    NVSwitch baseboard, at the driver's version; a server (--platform) goes with its request, and its
    interconnect is what gpu.nvswitch and Fabric Manager say."""
    arch = plan.os.arch
    if plan.os.repo_arch != REPO_ARCHES[arch]:
        raise _refuse(
            origin,
            "os.repo_arch",
            f"{plan.os.repo_arch!r} is not the NVIDIA repository directory of {arch} hosts ({REPO_ARCHES[arch]!r})",
        )
    if plan.platform != m.PLATFORMS[arch]:
        raise _refuse(
            origin, "platform", f"{plan.platform!r} is not the image platform of {arch} hosts ({m.PLATFORMS[arch]!r})"
        )
    fm = plan.fabric_manager
    if plan.gpu.nvswitch != (fm is not None):
        raise _refuse(
            origin,
            "gpu.nvswitch",
            f"{plan.gpu.nvswitch} contradicts fabric_manager "
            f"({'none' if fm is None else fm.package}): Fabric Manager is planned exactly for NVSwitch baseboards",
        )
    if plan.subnet_manager is not None and not plan.gpu.nvswitch:
        raise _refuse(
            origin, "subnet_manager", "planned for a GPU without NVSwitch (it runs beside Fabric Manager only)"
        )
    _check_server(plan, origin)
    if plan.stack or plan.request.with_:
        _check_stack(plan, origin)
    if fm is not None:
        for i, pkg in enumerate(fm.packages):
            if pkg.version != plan.driver.version:
                raise _refuse(
                    origin,
                    f"fabric_manager.packages.{i}.version",
                    f"{pkg.version!r} is not the driver's version {plan.driver.version!r} (Fabric Manager must match it)",
                )
        if fm.version != plan.driver.version or fm.package != (fm.packages[0].name if fm.packages else None):
            raise _refuse(
                origin,
                "fabric_manager.package",
                f"{fm.package} {fm.version} is not the first of fabric_manager.packages at the driver's version "
                f"{plan.driver.version}",
            )


def _check_stack(plan: Plan, origin: str) -> None:
    """A stack goes with an image part and its request (one package per --with, the framework's
    role only without a framework of frameworks.yaml); every CUDA-using package on the plan's one
    CUDA major; cuDNN majors and floors that agree with the plan's cuDNN; a package that compiles
    with nvcc at run time on the devel image."""
    stack = plan.stack
    if stack and plan.cuda is None:
        raise _refuse(origin, "stack", "stack packages in a plan without an image part")
    roles = [s.role for s in stack]
    if roles.count("with") != len(plan.request.with_):
        raise _refuse(
            origin, "stack", f"{roles.count('with')} --with packages, but the request names {len(plan.request.with_)}"
        )
    wants_framework = plan.framework is None and bool(stack)
    if roles.count("framework") != int(wants_framework) or (wants_framework and roles[0] != "framework"):
        raise _refuse(origin, "stack", "the stack's framework role does not match the plan's framework")
    if len({s.id for s in stack}) != len(stack):
        raise _refuse(origin, "stack", "a package is listed twice")
    for i, s in enumerate(stack):
        # a package another brought in names it, and that one is listed before it; no other names one
        if (s.role == "requires") != (s.required_by is not None):
            raise _refuse(origin, f"stack.{i}.required_by", f"{s.required_by!r} does not go with role {s.role!r}")
        if s.required_by is not None and s.required_by not in {t.id for t in stack[:i]}:
            raise _refuse(
                origin, f"stack.{i}.required_by", f"{s.required_by!r} is not a stack package listed before {s.id}"
            )
    major = int(plan.cuda.version.split(".")[0]) if plan.cuda is not None else None
    for i, s in enumerate(stack):
        if s.cuda_major is not None and s.cuda_major != major:
            raise _refuse(origin, f"stack.{i}.cuda_major", f"{s.cuda_major} is not the plan's CUDA major {major}")
        if s.install != s.version and not s.install.startswith(s.version + ".post"):
            raise _refuse(origin, f"stack.{i}.install", f"{s.install!r} is not {s.version} or a post release of it")
        if s.cudnn_major is not None or s.cudnn_min is not None:
            if plan.cudnn is None:
                raise _refuse(origin, f"stack.{i}.cudnn_major", f"{s.id} uses cuDNN, and the plan records none")
            have = DottedVersion(plan.cudnn.version)
            if s.cudnn_major is not None and have.release[0] != s.cudnn_major:
                raise _refuse(origin, f"stack.{i}.cudnn_major", f"{s.cudnn_major} is not the plan's cuDNN {have}")
            if s.cudnn_min is not None and have < DottedVersion(s.cudnn_min):
                raise _refuse(origin, f"stack.{i}.cudnn_min", f"{s.cudnn_min} is above the plan's cuDNN {have}")
        if s.needs_nvcc and plan.base_image not in {plan.images.get(f) for f in m.DEVEL_FLAVOURS} - {None}:
            raise _refuse(
                origin, f"stack.{i}.needs_nvcc", f"{s.id} compiles with nvcc, and the base image is not devel"
            )


def _check_server(plan: Plan, origin: str) -> None:
    """A server goes with a platform request, and says what gpu.nvswitch and Fabric Manager say."""
    server = plan.server
    if (server is None) != (plan.request.platform is None):
        field, text = (
            ("server", "absent, but the request names a platform")
            if server is None
            else ("request.platform", "absent, but the plan records a server")
        )
        raise _refuse(origin, field, text)
    if server is None:
        if plan.request.gpu is None:
            raise _refuse(origin, "request.gpu", "null without a platform to imply the GPU")
        return
    if server.fabric_manager != plan.gpu.nvswitch:
        raise _refuse(
            origin,
            "server.fabric_manager",
            f"{server.fabric_manager} contradicts gpu.nvswitch {plan.gpu.nvswitch}: the server's interconnect decides both",
        )
    if server.interconnect is not None and server.fabric_manager != (server.interconnect == "nvswitch"):
        raise _refuse(
            origin,
            "server.fabric_manager",
            f"{server.fabric_manager} on a {server.interconnect} interconnect: Fabric Manager serves NVSwitch systems only",
        )
    if not server.fabric_manager and (server.nvswitch_generation is not None or server.nvswitch_count is not None):
        raise _refuse(origin, "server.nvswitch_generation", "NVSwitch facts on a server without NVSwitch")


def check_against_catalogue(plan: Plan, matrix: m.Matrix, origin: str = "plan") -> None:
    """Every OS fact, package, module and service of the lock that the roles act on, against the
    catalogue's rows for the lock's OS, GPU and driver branch (InputError on the first difference)."""
    hint = _HINT
    if plan.data.digest != _data_digest(matrix):
        hint += " (the lock was resolved from other catalogue data: if that is why, re-create it)"
    rows = _Rows(origin, hint)
    os_rel = rows.os(plan, matrix)
    gpus = rows.gpus(plan, matrix)
    link = rows.server(plan, matrix, gpus)
    rows.release(plan, matrix, os_rel)
    packaging = rows.driver(plan, matrix, os_rel, gpus)
    generation = link.nvswitch_generation if link is not None else gpus[0].nvswitch_generation
    rows.managers(
        plan, matrix, packaging, generation, f"for R{plan.driver.branch} {plan.driver.kernel_module} on {os_rel.id}"
    )
    toolkit = next((t for t in matrix.toolkit if str(t.version) == plan.container_toolkit.version), None)
    if toolkit is None:
        raise rows.refuse(
            "container_toolkit.version",
            f"{plan.container_toolkit.version!r} is not a catalogued NVIDIA Container Toolkit release",
        )
    rows.differs(
        "container_toolkit.packages",
        [p.name for p in plan.container_toolkit.packages],
        toolkit.packages,
        f"for Container Toolkit {toolkit.version}",
    )
    if plan.cuda is not None:
        rows.image(plan, matrix, gpus[0])
    drafts = [rows.stack(plan, matrix, i, part) for i, part in enumerate(plan.stack)]
    if drafts:
        rows.stack_pairs(matrix, plan, drafts)


class _Rows:
    """The comparisons of one lock with the catalogue, each refusal naming the field and the row."""

    def __init__(self, origin: str, hint: str) -> None:
        self.origin, self.hint = origin, hint

    def refuse(self, field: str, text: str) -> InputError:
        return _refuse(self.origin, field, text, self.hint)

    def differs(self, field: str, got: Any, want: Any, what: str) -> None:
        if _plain(got) != _plain(want):
            raise self.refuse(field, f"{_plain(got)!r}, but the catalogue says {_plain(want)!r} {what}")

    def os(self, plan: Plan, matrix: m.Matrix) -> m.OsRelease:
        try:
            os_rel = matrix.os(plan.os.id)
        except UnknownId:
            raise self.refuse("os.id", f"{plan.os.id!r} is not a catalogued OS") from None
        for key in (
            "family",
            "distribution",
            "version",
            "pkg_manager",
            "nvidia_repo",
            "kernel_headers",
            "cuda_image_os",
        ):
            self.differs(f"os.{key}", getattr(plan.os, key), getattr(os_rel, key), f"for {os_rel.id}")
        repo_arch = os_rel.repo_arch(plan.os.arch)
        if repo_arch is None:
            served = ", ".join(a for a, _ in os_rel.arches)
            raise self.refuse("os.arch", f"{plan.os.arch!r}, but the catalogue serves {os_rel.id} on {served} only")
        self.differs("os.repo_arch", plan.os.repo_arch, repo_arch, f"for {os_rel.id} on {plan.os.arch}")
        return os_rel

    def gpus(self, plan: Plan, matrix: m.Matrix) -> list[m.Gpu]:
        gpus = []
        for member in plan.gpu.members:
            try:
                gpus.append(matrix.gpu(member))
            except UnknownId:
                raise self.refuse("gpu.members", f"{member!r} is not a catalogued GPU") from None
        for gpu in gpus:
            if plan.os.arch not in gpu.host_arches:
                raise self.refuse(
                    "os.arch",
                    f"{plan.os.arch!r}, but the catalogue says {gpu.id} is built into {'/'.join(gpu.host_arches)} hosts",
                )
        where = f"for {plan.gpu.id}"
        try:
            matrix.gpu_members(plan.gpu.id)
        except UnknownId:
            raise self.refuse("gpu.id", f"{plan.gpu.id!r} is not a catalogued GPU") from None
        self.differs("gpu.compute_capability", plan.gpu.compute_capability, gpus[0].compute_capability, where)
        self.differs("gpu.architecture", plan.gpu.architecture, gpus[0].architecture, where)
        if plan.server is None:  # with a server, its interconnect decides (server())
            self.differs("gpu.nvswitch", plan.gpu.nvswitch, gpus[0].nvswitch, where)
        self.differs(
            "gpu.pci_device_ids", plan.gpu.pci_device_ids, sorted({p for g in gpus for p in g.pci_device_ids}), where
        )
        return gpus

    def server(self, plan: Plan, matrix: m.Matrix, gpus: list[m.Gpu]) -> m.PlatformLink | None:
        """The server: a catalogued platform (the one the request names), taking the lock's GPUs,
        every field as its row gives it for that GPU; gpu.nvswitch its interconnect's."""
        from provision.plan.resolve import gpu_ident, platform_refusal, server_part

        server = plan.server
        if server is None:
            return None
        try:
            platform = matrix.platform(server.id)
        except UnknownId:
            raise self.refuse("server.id", f"{server.id!r} is not a catalogued platform") from None
        if platform.id != server.id:
            raise self.refuse("server.id", f"{server.id!r} is an alias: the plan records the id {platform.id!r}")
        try:
            asked = matrix.platform(plan.request.platform)
        except UnknownId:
            raise self.refuse("request.platform", f"{plan.request.platform!r} is not a catalogued platform") from None
        if asked.id != platform.id:
            raise self.refuse(
                "request.platform", f"{plan.request.platform!r} is {asked.id}, not the server {server.id}"
            )
        refusal = platform_refusal(matrix, platform, tuple(gpus))
        if refusal is not None:
            raise self.refuse("gpu.members", refusal[0])
        if plan.request.gpu is None:
            try:
                implied = gpu_ident(matrix, plan.request, platform)
            except InputError as exc:
                raise self.refuse("request.gpu", f"null, but {exc.message}") from None
            if matrix.gpu_members(implied)[0] != plan.gpu.id:
                raise self.refuse("gpu.id", f"{plan.gpu.id!r}, but {platform.id} implies {implied!r}")
        want = server_part(platform, gpus[0])
        for field in type(want)._fields:
            self.differs(f"server.{field}", getattr(server, field), getattr(want, field), f"for {platform.id}")
        link = platform.link(gpus[0])
        self.differs("gpu.nvswitch", plan.gpu.nvswitch, link.nvswitch, f"for {plan.gpu.id} on {platform.id}")
        return link

    def release(self, plan: Plan, matrix: m.Matrix, os_rel: m.OsRelease) -> None:
        """The driver release is one of its branch's, in the OS's repository; its packages at it."""
        from provision.versions import DottedVersion

        drv = plan.driver
        branch = matrix.branch(int(drv.branch))
        if branch is None:
            raise self.refuse("driver.branch", f"R{drv.branch} is not a catalogued driver branch")
        release = branch.release(DottedVersion(drv.version))
        if release is None:
            raise self.refuse("driver.version", f"{drv.version!r} is not a catalogued R{drv.branch} release")
        if os_rel.id not in release.os:
            raise self.refuse("driver.version", f"{drv.version} is not in the {os_rel.nvidia_repo} repository")
        self.differs("driver.branch_type", drv.branch_type, branch.type, f"for R{drv.branch}")
        self.differs("driver.eol", drv.eol, branch.eol, f"for R{drv.branch}")
        for i, pkg in enumerate(drv.packages):
            if pkg.version != drv.version:
                raise self.refuse(
                    f"driver.packages.{i}.version", f"{pkg.version!r} is not the driver's {drv.version!r}"
                )

    def image(self, plan: Plan, matrix: m.Matrix, gpu: m.Gpu) -> None:
        """The image part: CUDA, its mode on the driver, the image OS and tags, cuDNN, the framework
        build and NVIDIA_REQUIRE_CUDA, each as the catalogue (and the rule) has it."""
        from provision.matrix import runs_on
        from provision.versions import DottedVersion, major_minor

        cuda = next((c for c in matrix.cuda if str(c.version) == plan.cuda.version), None)
        if cuda is None:
            raise self.refuse("cuda.version", f"{plan.cuda.version!r} is not a catalogued CUDA release")
        self.differs("cuda.min_driver", plan.cuda.min_driver, str(cuda.min_driver), "(release notes, Table 3)")
        self.differs("cuda.label", plan.cuda.label, cuda.label, f"for CUDA {cuda.version}")
        published = {o for i in matrix.images for o in i.os}
        if plan.image_os not in published:
            raise self.refuse("image_os", f"{plan.image_os!r} is not an OS nvidia/cuda images are catalogued for")
        image = matrix.image_of(cuda.version, plan.base_image or "")
        if image is None or plan.image_os not in image.os:
            raise self.refuse(
                "base_image", f"{plan.base_image!r} is not a catalogued nvidia/cuda tag of CUDA {cuda.version}"
            )
        tags = {
            f: f"{matrix.image_repository}:{image.tag(f, plan.image_os)}" for f in image.flavours_for(plan.image_os)
        }
        self.differs("images", dict(sorted(plan.images.items())), dict(sorted(tags.items())), f"for {image.cuda}")
        if plan.base_image not in tags.values():
            raise self.refuse("base_image", f"{plan.base_image!r} is not one of the plan's own images")
        fw = plan.framework
        build = None
        if fw is not None:
            build = self.framework(plan, matrix)
        sass, ptx = (None, None)
        if build is not None:
            sass, ptx, _ = build.sms_for(plan.os.arch)
        needs = runs_on.ImageNeeds(
            cuda.version,
            cuda.min_driver,
            tuple(sass) if sass else None,
            ptx,
            runs_on.cuda_targets(matrix, cuda.version),
        )
        verdict = runs_on.decide(matrix, needs, DottedVersion(plan.driver.version), gpu)
        modes = {"toolkit-driver": runs_on.NATIVE, "minor-version": runs_on.MINOR, "forward-compat": runs_on.FORWARD}
        if modes.get(plan.cuda.compatibility) != verdict.mode:
            raise self.refuse(
                "cuda.compatibility",
                f"{plan.cuda.compatibility!r}, but driver {plan.driver.version} runs CUDA {cuda.version} "
                f"{verdict.mode} ({verdict.reason})",
            )
        if plan.require_cuda is not None:
            self.differs("require_cuda", plan.require_cuda, runs_on.require_cuda(matrix, needs), "(runs_on's rule)")
        if plan.cudnn is not None:
            if plan.cudnn.origin == "image":
                self.differs("cudnn.version", plan.cudnn.version, image.cudnn_version, f"in the {image.cuda} images")
            elif build is None or not build.cudnn_allows(plan.cudnn.version):
                raise self.refuse("cudnn.version", f"{plan.cudnn.version!r} is not what the framework build takes")
        if fw is not None and major_minor(cuda.version) != fw.cuda:
            raise self.refuse("framework.cuda", f"{fw.cuda!r} is not the plan's CUDA line {major_minor(cuda.version)}")

    def framework(self, plan: Plan, matrix: m.Matrix) -> m.FrameworkBuild:
        from provision.versions import DottedVersion

        fw = plan.framework
        try:
            known = matrix.framework(fw.name)
        except UnknownId:
            raise self.refuse("framework.name", f"{fw.name!r} is not a catalogued framework") from None
        release = known.release(DottedVersion(fw.version))
        build = None if release is None else next((b for b in release.builds if b.variant == fw.variant), None)
        if build is None:
            raise self.refuse("framework.version", f"{fw.name} {fw.version} ({fw.variant}) is not a catalogued build")
        where = f"for {fw.name} {fw.version} ({fw.variant})"
        self.differs("framework.package", fw.package, known.package, where)
        self.differs("framework.index_url", fw.index_url, build.index_url, where)
        self.differs("framework.extra", fw.extra, build.extra, where)
        self.differs("framework.cuda", fw.cuda, build.cuda, where)
        self.differs("framework.cuda_runtime", fw.cuda_runtime, build.cuda_runtime, where)
        self.differs("framework.libraries", fw.libraries, build.libraries, where)
        self.differs(
            "framework.requirement",
            fw.requirement,
            f"{known.package}{build.requirement_extra}=={release.version}",
            where,
        )
        return build

    def stack(self, plan: Plan, matrix: m.Matrix, i: int, part):
        """One stack package: its catalogued release and build, every field as the resolver
        writes it from that row (a forged version, library index or CUDA major refused); the
        draft it passes the rules as (stack_pairs reads it)."""
        from provision.plan.assemble import package_part
        from provision.plan.rules import PackageDraft

        field = f"stack.{i}"
        try:
            package = matrix.stack(part.id)
        except UnknownId:
            raise self.refuse(f"{field}.id", f"{part.id!r} is not a catalogued stack package") from None
        release = package.release(DottedVersion(part.version))
        build = None if release is None else release.build(part.flavour)
        if build is None:
            raise self.refuse(
                f"{field}.version",
                f"{part.id} {part.version} ({part.flavour or 'its only build'}) is not a catalogued build",
            )
        fw = matrix.framework(plan.framework.name) if plan.framework is not None else None
        on = (plan.os.arch, plan.gpu.compute_capability, False)
        draft = PackageDraft(package, release, build, part.role, required_by=part.required_by)
        want, _ = package_part(matrix, draft, on, None, DottedVersion(plan.cuda.version), fw)
        where = f"for {part.id} {part.version} ({part.flavour or 'its only build'})"
        for name in want._fields:
            self.differs(f"{field}.{name}", getattr(part, name), getattr(want, name), where)
        # and the row fits the plan as the resolver's rules have it (SM floor, CUDA, cuDNN, pins)
        from provision.plan.rules import PACKAGE_RULES, package_question, run

        fw_key = None
        if plan.framework is not None:
            fw_key = (fw.id, DottedVersion(plan.framework.version), plan.framework.variant)
        on = (plan.os.arch, plan.gpu.compute_capability, plan.image_os)
        cudnn = plan.cudnn.version if plan.cudnn is not None else None
        q = package_question(matrix, on, fw_key, DottedVersion(plan.cuda.version), cudnn)
        done = run(PACKAGE_RULES, q, draft._replace(pythons=q.pythons))
        if not isinstance(done, PackageDraft):
            raise self.refuse(field, f"{done.candidate}: {done.why}")
        return done

    def stack_pairs(self, matrix: m.Matrix, plan: Plan, drafts: list) -> None:
        """Every two stack packages as the resolver's pair rules hold them (declared requirements,
        the sonames of the libraries both load), and each package the plan says another required:
        that one's build declares a requirement on it (torch-tensorrt: tensorrt)."""
        from provision.plan.rules import pair_clash, requires_packages

        for i, draft in enumerate(drafts):
            for other in drafts[:i]:
                clash = pair_clash(other, draft)
                if clash is not None:
                    raise self.refuse(f"stack.{i}", clash[1])
            part = plan.stack[i]
            if part.required_by is not None:
                requirer = next(d for d in drafts[:i] if d.package.id == part.required_by)
                if not any(p.id == part.id for p, _, _ in requires_packages(matrix, requirer)):
                    raise self.refuse(f"stack.{i}.required_by", f"{requirer.name} declares no requirement on {part.id}")

    def driver(self, plan: Plan, matrix: m.Matrix, os_rel: m.OsRelease, gpus: list[m.Gpu]) -> m.DriverPackaging:
        drv = plan.driver
        branch = int(drv.branch)
        packaging = matrix.packaging_for(os_rel.id, branch, drv.kernel_module)
        if packaging is None:
            raise self.refuse(
                "driver.kernel_module",
                f"the catalogue has no {os_rel.id} packaging of R{branch} with {drv.kernel_module} kernel modules",
            )
        row = f"for R{branch} {drv.kernel_module} on {os_rel.id}"
        self.differs("driver.install_method", drv.install_method, packaging.method, row)
        stream = packaging.module_stream.format(branch=branch) if packaging.module_stream else None
        self.differs("driver.module_stream", drv.module_stream, stream, row)
        names = [n.format(branch=branch) for n in packaging.packages]
        self.differs("driver.packages", [p.name for p in drv.packages], names, row)
        options: dict[tuple[str, str], str] = {}
        for gpu in gpus:
            for o in gpu.module_options:
                if branch >= o.min_branch:
                    options.setdefault((o.module, o.option), o.value)
        self.differs(
            "driver.module_options",
            sorted((o.module, o.option, o.value) for o in drv.module_options),
            sorted((mod, opt, value) for (mod, opt), value in options.items()),
            f"for {plan.gpu.id} on R{branch}",
        )
        return packaging

    def managers(
        self, plan: Plan, matrix: m.Matrix, packaging: m.DriverPackaging, generation: int | None, row: str
    ) -> None:
        """Fabric Manager's packages, and the Subnet Manager's packages, modules and service
        (``generation``: the NVSwitch generation of the lock's GPU on its server, else its row's)."""
        branch = int(plan.driver.branch)
        if plan.fabric_manager is not None:
            fm_names = [n.format(branch=branch) for n in packaging.fabric_manager]
            self.differs("fabric_manager.packages", [p.name for p in plan.fabric_manager.packages], fm_names, row)
        sm, got = matrix.subnet_manager, plan.subnet_manager
        wanted = sm is not None and sm.needed_at(generation) and packaging.subnet_manager is not None
        if got is None or not wanted:
            if (got is None) == wanted:
                what = "a Subnet Manager" if wanted else "no Subnet Manager"
                state = "absent" if got is None else "present"
                raise self.refuse("subnet_manager", f"{state}, but the catalogue plans {what} for {plan.gpu.id} {row}")
            return
        block = "(drivers.yaml subnet_manager)"
        self.differs("subnet_manager.service", got.service, sm.service, block)
        self.differs("subnet_manager.process", got.process, sm.process, block)
        self.differs("subnet_manager.kernel_modules", got.kernel_modules, sm.kernel_modules, block)
        self.differs("subnet_manager.packages", got.packages, packaging.subnet_manager.packages, row)
        self.differs("subnet_manager.requires", got.requires, packaging.subnet_manager.requires, row)


def _plain(value: Any) -> Any:
    """Tuples as lists, so that a lock's value and a catalogue row compare and print alike."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _data_digest(matrix: m.Matrix) -> str:
    from provision.plan.resolve import _data_digest as digest

    return digest(matrix)


def check_run_plans(plans: dict[str, Plan], matrix_loader: Any, lock: str | None) -> None:
    """apply's and inventory check's plans against the catalogue they run with: ``{"all": plan}``
    read from the lock file ``lock``, or a fleet file's plans by group."""
    matrix = matrix_loader()
    for group, plan in plans.items():
        check_against_catalogue(plan, matrix, repr(lock) if lock and group == "all" else f"fleet group {group!r}")
