"""The compatibility model: immutable records built once from compat/ by the loader.

Records are ``typing.NamedTuple`` classes rather than frozen dataclasses: Python creates them
about four times faster, and class creation was most of `provision plan`'s start-up time.

Versions are parsed at the loader boundary (``provision.versions``); these objects hold
``Version`` and ``SpecifierSet`` values, never version strings to compare.
"""

import datetime as dt
from typing import NamedTuple

from provision.errors import UnknownId
from provision.versions import DottedVersion as Version
from provision.versions import VersionSpec as SpecifierSet
from provision.versions import prefix_matches

# Host CPU architectures (Ansible's ansible_architecture names) and their names elsewhere: the
# container platform of images built for such a host, and the distribution's package architecture.
HOST_ARCHES = ("x86_64", "aarch64")
DEFAULT_ARCH = "x86_64"
PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}

# The nvidia/cuda flavour an image starts FROM, by where its framework build takes the CUDA
# libraries from (frameworks.yaml `libraries`): its wheels bring them (base), or the image must
# (cudnn-runtime: CUDA and cuDNN, TensorFlow 2.12/2.13); no framework: the CUDA math libraries.
# The one rule: the resolver's base image, and `render`/`pin-base` for a framework variant.
FRAMEWORK_FLAVOURS = {"wheels": "base", "system": "cudnn-runtime"}
NO_FRAMEWORK_FLAVOUR = "runtime"
# the nvidia/cuda flavours with nvcc and the CUDA headers: what a stack package that compiles at run
# time (DeepSpeed's JIT ops) needs its image to start from (the resolver, lockcheck and render ask it)
DEVEL_FLAVOURS = ("devel", "cudnn-devel")


def base_flavour(libraries: str | None) -> str:
    """The base image flavour of a plan whose framework build has ``libraries`` (None: no framework)."""
    if libraries is None:
        return NO_FRAMEWORK_FLAVOUR
    return FRAMEWORK_FLAVOURS.get(libraries, "cudnn-runtime")


DEB_ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}


class Source(NamedTuple):
    key: str
    title: str
    url: str
    retrieved: str
    kind: str


class OsRelease(NamedTuple):
    id: str
    name: str
    aliases: tuple[str, ...]
    family: str  # Ansible's os_family: Debian | RedHat
    distribution: str  # Ansible's distribution: Ubuntu | Rocky | Debian
    version: str  # Ansible's distribution_version (major only on EL)
    pkg_manager: str  # apt | dnf
    nvidia_repo: str  # path segment under developer.download.nvidia.com/compute/cuda/repos/
    kernel_headers: tuple[str, ...]  # package names, "{kernel}" = uname -r
    cuda_image_os: str  # nvidia/cuda tag suffix for containers planned for this host
    cuda_image_note: str | None
    sources: tuple[str, ...]
    # host architecture -> NVIDIA's repository directory under repos/<nvidia_repo>/ (x86_64, sbsa)
    arches: tuple[tuple[str, str], ...] = ((DEFAULT_ARCH, DEFAULT_ARCH),)

    def repo_arch(self, host_arch: str) -> str | None:
        """The repository directory for a host architecture; None: this OS's repository has none."""
        return dict(self.arches).get(host_arch)


class Architecture(NamedTuple):
    id: str
    name: str
    compute_capabilities: tuple[str, ...]
    kernel_modules: tuple[str, ...]  # flavours that drive this architecture: open, proprietary
    first_driver_branch: int | None
    last_driver_branch: int | None
    sources: tuple[str, ...]


class ModuleOption(NamedTuple):
    """A kernel-module option a GPU needs from a driver branch on (GH200: NVreg_CoherentGPUMemoryMode=driver)."""

    module: str  # nvidia, nvidia-uvm, ...
    option: str  # NVreg_...
    value: str
    min_branch: int  # first driver branch that has the option
    sources: tuple[str, ...]


class Gpu(NamedTuple):
    id: str
    name: str
    aliases: tuple[str, ...]
    architecture: str
    compute_capability: str
    memory_gb: float
    memory_type: str
    memory_bandwidth_gbs: float
    fp16_tflops: float  # dense tensor-core FP16 (no sparsity)
    bf16_tflops: float | None
    fp8_tflops: float | None
    tdp_w: float
    form_factor: str
    segment: str  # data-center | workstation-consumer (NVIDIA's CUDA GPUs page); forward compatibility: data-center
    nvlink_generation: int | None
    nvlink_bandwidth_gbs: float | None
    nvswitch: bool  # NVSwitch baseboard: needs nvidia-fabricmanager
    pci_device_ids: tuple[str, ...]
    mig: str | None  # a profile-set id in mig.yaml
    min_driver: Version | None
    sources: tuple[str, ...]
    pcie_generation: int | None = None  # host interface; None: not recorded
    pcie_bandwidth_gbs: float | None = None  # x16, both directions
    nvswitch_generation: int | None = None  # the baseboard's NVSwitch generation; None: no NVSwitch
    host_arches: tuple[str, ...] = (DEFAULT_ARCH,)  # host CPU architectures (GH200: aarch64 only)
    kernel_modules: tuple[str, ...] | None = None  # narrower than the architecture's (GH200: open); None: its
    module_options: tuple[ModuleOption, ...] = ()  # kernel-module options the driver role writes


class GpuGroup(NamedTuple):
    """An id that stands for several catalogued GPUs ("a100-pcie" = 40 GB and 80 GB)."""

    id: str
    name: str
    members: tuple[str, ...]


# A driver branch's end of life on a date (DriverBranch.eol_state) and an image set's status
# (ImageRelease.status).
EOL_PAST = "past"
EOL_SUPPORTED = "supported"
EOL_UNKNOWN = "unknown"


class DriverRelease(NamedTuple):
    version: Version
    date: str | None
    os: tuple[str, ...]  # OS ids whose NVIDIA repository carries this release
    source: str


class DriverBranch(NamedTuple):
    branch: int
    type: str  # ltsb | pb | nfb | unknown
    eol: str | None  # "YYYY-MM" from NVIDIA's support page
    eol_listed: str | None  # date of the support page that lists the branch as end of life
    kernel_modules: tuple[str, ...]
    default_module: str
    releases: tuple[DriverRelease, ...]  # newest first
    sources: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"R{self.branch}"

    def past_eol(self, as_of: dt.date) -> bool:
        """True once NVIDIA's end of life has passed; False also where it is unknown (eol_known)."""
        return self.eol_state(as_of) == EOL_PAST

    @property
    def eol_known(self) -> bool:
        """NVIDIA has published an end of life for the branch (a month, or a page listing it as ended)."""
        return self.eol is not None or self.eol_listed is not None

    def eol_state(self, as_of: dt.date) -> str:
        """EOL_PAST, EOL_SUPPORTED (the end is later than ``as_of``) or EOL_UNKNOWN (no end of life
        published: R590, a new feature branch whose end NVIDIA's support page does not give yet)."""
        if self.eol_listed is not None and dt.date.fromisoformat(self.eol_listed) <= as_of:
            return EOL_PAST
        if self.eol is None:
            return EOL_SUPPORTED if self.eol_listed is not None else EOL_UNKNOWN
        year, month = (int(p) for p in self.eol.split("-")[:2])
        return EOL_PAST if (as_of.year, as_of.month) > (year, month) else EOL_SUPPORTED

    def release(self, version: Version) -> DriverRelease | None:
        return next((r for r in self.releases if r.version == version), None)


class DriverPackaging(NamedTuple):
    """How one OS's NVIDIA repository spells the driver of a range of branches."""

    os: tuple[str, ...]
    branches: SpecifierSet
    kernel_module: str
    method: str  # apt | dnf-module
    module_stream: str | None  # "nvidia-driver:{branch}-open"
    packages: tuple[str, ...]  # names; "{branch}" stands for the branch number
    fabric_manager: tuple[str, ...]
    sources: tuple[str, ...]
    subnet_manager: "SubnetManagerPackages | None" = None  # None: none catalogued for these rows

    def covers(self, os_id: str, branch: int, kernel_module: str) -> bool:
        return os_id in self.os and self.kernel_module == kernel_module and self.branches.contains(str(branch))


class SubnetManagerPackages(NamedTuple):
    """What one OS installs for the NVLink Subnet Manager (a packaging row's subnet_manager)."""

    packages: tuple[str, ...]  # NVIDIA's, versioned on their own: installed unversioned, then held
    requires: tuple[str, ...]  # the distribution's InfiniBand userspace (not held)


class SubnetManager(NamedTuple):
    """The NVLink Subnet Manager that fourth-generation NVSwitch hosts run beside Fabric Manager."""

    nvswitch_generation: int  # GPUs whose baseboard NVSwitch is of this generation or newer need it
    min_branch: int  # the oldest driver branch NVIDIA supports those systems with
    service: str  # the systemd unit that starts it (Fabric Manager's: it has none of its own)
    process: str
    kernel_modules: tuple[str, ...]  # modules it needs loaded (its management transport)
    sources: tuple[str, ...]

    def needed_by(self, gpu: "Gpu") -> bool:
        return self.needed_at(gpu.nvswitch_generation)

    def needed_at(self, nvswitch_generation: int | None) -> bool:
        """A baseboard whose NVSwitch is of this generation needs it (None: no NVSwitch)."""
        return nvswitch_generation is not None and nvswitch_generation >= self.nvswitch_generation


class CudaRelease(NamedTuple):
    version: Version
    label: str
    min_driver: Version
    os: tuple[str, ...]
    source: str


class ComputeSupport(NamedTuple):
    """Which CUDA releases can build for a compute capability."""

    compute_capability: str
    cuda: SpecifierSet
    source: str


class MinorCompat(NamedTuple):
    """Minor-version compatibility floor for a CUDA major (release notes, Table 2)."""

    cuda_major: int
    min_driver: Version
    source: str


class ForwardCompat(NamedTuple):
    """A cuda-compat-<major>-<minor> package and the driver branches it runs that CUDA line on."""

    cuda: str  # "12.8"
    branches: tuple[int, ...]
    source: str


class CudnnBuild(NamedTuple):
    cuda: SpecifierSet
    min_driver: Version
    compute_capabilities: tuple[str, ...]


class CudnnRelease(NamedTuple):
    version: Version  # the release the support matrix names (9.10.2)
    builds: tuple[CudnnBuild, ...]
    source: str

    def covers(self, full_version: Version) -> bool:
        return prefix_matches(str(self.version), full_version)


class FrameworkBuild(NamedTuple):
    variant: str  # cu124, and-cuda, system-cuda
    index_url: str | None  # None: the package index default (pypi.org)
    default: bool  # what a plain `pip install <pkg>==<ver>` gets on Linux x86_64
    cuda: str  # major.minor the build targets
    cuda_runtime: str | None  # exact nvidia-cuda-runtime pin, or a specifier (TensorFlow)
    cudnn: str | None  # exact nvidia-cudnn pin / version built against; with cudnn_spec: its lower bound
    libraries: str  # wheels: CUDA libraries come as pip dependencies; system: from the image
    extra: str | None  # pip extra that pulls the CUDA wheels ("and-cuda")
    compute_capabilities: tuple[str, ...] | None  # SASS compiled in, where published
    ptx: str | None  # PTX target embedded too: GPUs at or above it JIT-compile from it
    arch_source: str | None  # where compute_capabilities/ptx come from
    source: str
    evidence: str | None  # the wheel (metadata) the pins were read from
    arches: tuple[str, ...] = (DEFAULT_ARCH,)  # host architectures the build's CUDA wheels are published for
    # the cuDNN requirement the wheel declares when it is a range ("<10.0,>=9.3.0.75", TensorFlow
    # 2.20/2.21 [and-cuda]): pip installs the newest cuDNN inside it, not `cudnn` (its lower bound).
    # None: `cudnn` is an exact pin (nvidia-cudnn-cuXX==cudnn) or the documented build.
    cudnn_spec: SpecifierSet | None = None
    # (arch, compute_capabilities, ptx, arch_source) for a host architecture whose wheels carry
    # another SM set than compute_capabilities/ptx (PyTorch publishes an aarch64 table of its
    # own); None lists: not published for that architecture. Read through sms_for().
    arch_sms: tuple[tuple[str, tuple[str, ...] | None, str | None, str | None], ...] = ()

    @property
    def cuda_version(self) -> Version:
        return Version(self.cuda)

    @property
    def cudnn_pinned(self) -> bool:
        """The wheel pins one cuDNN (`cudnn`); False: it accepts any in cudnn_spec."""
        return self.cudnn_spec is None

    def cudnn_allows(self, version: Version | str) -> bool:
        """A cuDNN release the build's wheel accepts: inside cudnn_spec, or the pin itself."""
        if self.cudnn_spec is not None:
            return self.cudnn_spec.contains(version)
        return self.cudnn is not None and Version(str(version)) == Version(self.cudnn)

    def sms_for(self, arch: str) -> tuple[tuple[str, ...] | None, str | None, str | None]:
        """(compute_capabilities, ptx, arch_source) of the build's wheels for one host architecture:
        its own entry in arch_sms where the source gives that architecture another set, else the
        build's. (None, None, ...): not published for that architecture."""
        for name, ccs, ptx, source in self.arch_sms:
            if name == arch:
                return ccs, ptx, source
        return self.compute_capabilities, self.ptx, self.arch_source

    @property
    def requirement_extra(self) -> str:
        return f"[{self.extra}]" if self.extra else ""


class FrameworkRelease(NamedTuple):
    version: Version
    python: str | None  # CPython range of the release's manylinux x86_64 wheels
    builds: tuple[FrameworkBuild, ...]
    python_aarch64: str | None = None  # the same for its aarch64 wheels; None: no aarch64 CUDA build

    def python_for(self, arch: str) -> str | None:
        return self.python_aarch64 if arch == "aarch64" else self.python


class Framework(NamedTuple):
    id: str
    name: str
    package: str
    releases: tuple[FrameworkRelease, ...]  # newest first
    aliases: tuple[str, ...] = ()  # other names --framework takes (frameworks.yaml aliases: tf)

    def named(self, text: str) -> bool:
        """Whether a --framework NAME means this framework: its id, pip name or an alias, any case."""
        return text.lower() in (self.id, self.package, *self.aliases)

    def release(self, version: Version) -> FrameworkRelease | None:
        return next((r for r in self.releases if r.version == version), None)


class ImageRelease(NamedTuple):
    """The nvidia/cuda tags published for one CUDA version."""

    cuda: Version
    os: tuple[str, ...]  # tag OS suffixes: ubuntu22.04, rockylinux9
    flavours: tuple[str, ...]
    cudnn_version: str | None
    cudnn_marker: str | None  # "cudnn8", "cudnn9", "cudnn": what sits before -runtime/-devel
    source: str
    cudnn_os: tuple[str, ...] | None = None  # OSes with the cudnn flavours; None: all of `os`
    eol_date: str | None = None  # "YYYY-MM-DD" NVIDIA moved the tags to end of life
    superseded_by: Version | None = None  # the newer update that replaced it
    eol_source: str | None = None  # None: a supported image set
    platforms: tuple[str, ...] = (PLATFORMS[DEFAULT_ARCH],)  # every tag's platforms (linux/arm64 where confirmed)
    platforms_source: str | None = None
    # the cuda.yaml toolkit release the set installs: its own number (the loader fills it in) but
    # for image sets numbered past the toolkit (12.9.2 carries 12.9.1 with a newer cuBLAS)
    toolkit: Version | None = None
    cublas: str | None = None  # the newer cuBLAS of such a set; None: the toolkit's own
    toolkit_source: str | None = None  # None: a toolkit release's own image set

    @property
    def carries(self) -> Version:
        """The toolkit release the set installs."""
        return self.toolkit if self.toolkit is not None else self.cuda

    def flavours_for(self, os_suffix: str) -> tuple[str, ...]:
        """The flavours published for one OS suffix (12.5.1 has no cudnn tags on ubuntu24.04)."""
        if os_suffix not in self.os:
            return ()
        if self.cudnn_os is None or os_suffix in self.cudnn_os:
            return self.flavours
        return tuple(f for f in self.flavours if not f.startswith("cudnn-"))

    def past_eol(self, as_of: dt.date) -> bool:
        """End of life on `as_of`: superseded by a newer update, or moved to end of life by then."""
        if self.eol_source is None:
            return False
        return self.eol_date is None or dt.date.fromisoformat(self.eol_date) <= as_of

    def status(self, as_of: dt.date) -> tuple[str, str]:
        """(state, words) for a listing: ("supported", "supported"); ("superseded", "superseded by
        13.0.3"), tags NVIDIA still serves but no longer updates; ("end-of-life", "end of life
        2025-09-10, superseded by 13.0.3"), moved to end of life by ``as_of``."""
        newer = f"superseded by {self.superseded_by}" if self.superseded_by is not None else None
        if self.eol_source is None:
            return "supported", "supported"
        if self.eol_date is not None and dt.date.fromisoformat(self.eol_date) <= as_of:
            return "end-of-life", ", ".join(w for w in (f"end of life {self.eol_date}", newer) if w)
        if newer is None:  # an eol row names a date or a newer update (images schema)
            return "end-of-life", "end of life"
        dated = f" (end of life {self.eol_date})" if self.eol_date is not None else ""
        return "superseded", newer + dated

    def tags(self) -> tuple[tuple[str, str, str], ...]:
        """(flavour, OS suffix, tag) of every tag the set has: each OS with its own flavours
        (flavours_for), so no cudnn tag is named on an OS that has none (12.5.1 on ubuntu24.04)."""
        return tuple((f, o, self.tag(f, o)) for o in self.os for f in self.flavours_for(o))

    def tag(self, flavour: str, os_suffix: str) -> str:
        if flavour.startswith("cudnn-"):
            return f"{self.cuda}-{self.cudnn_marker}-{flavour.removeprefix('cudnn-')}-{os_suffix}"
        return f"{self.cuda}-{flavour}-{os_suffix}"


class ToolkitRelease(NamedTuple):
    version: Version
    date: str
    packages: tuple[str, ...]
    revision: str
    source: str


class MigProfile(NamedTuple):
    name: str  # 3g.40gb
    id: int | None  # nvidia-smi mig -lgip profile id (None: not captured)
    compute_slices: int
    memory_slices: int  # placement size in memory slices (lgipp ":N")
    placements: tuple[int, ...]  # allowed start slots (lgipp "{...}")
    max_instances: int
    memory_gib: float | None
    sms: int | None
    media: bool  # +me profiles: at most one on a GPU


class MigProfileSet(NamedTuple):
    id: str
    name: str
    memory_slices: int
    compute_slices: int
    placements_confirmed: bool  # an -lgipp capture of this exact GPU backs the placements
    note: str
    profiles: tuple[MigProfile, ...]
    sources: tuple[str, ...]

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


class Exclusion(NamedTuple):
    os: str | None
    gpu: str | None
    reason: str
    source: str | None


class SdistNeeds(NamedTuple):
    """What building one sdist of a stack package needs (compat/stacks.yaml `build`)."""

    image: str | None  # "devel": an nvidia/cuda devel base (nvcc, CUDA headers); None: any base
    nvcc: str | None  # "framework": nvcc of the framework build's CUDA (major.minor); None: no compiler
    isolation: bool  # False: pip --no-build-isolation, against the locked packages in `needs`
    needs: tuple[str, ...]  # packages installed before the build (torch)
    fetches: str | None  # "library_index": the build downloads its wheel from the build's library_index
    note: str | None
    sources: tuple[str, ...]


class StackRuntime(NamedTuple):
    """What a stack package needs at run time beyond its wheels (DeepSpeed's JIT ops: nvcc)."""

    image: str | None  # "devel"
    nvcc: str | None  # "framework"
    note: str | None
    sources: tuple[str, ...]


class StackDistribution(NamedTuple):
    """One distribution of a stack package kind; `pip` may hold "{flavour}" (tensorrt-{flavour}-libs)."""

    pip: str
    artefact: str  # wheel | sdist (what the index has for every catalogued release)
    role: str  # binary, selector, meta, libraries, bindings, source, core, extension
    build: SdistNeeds | None  # an sdist's build needs; None for wheels

    def name(self, flavour: str | None) -> str:
        return self.pip.replace("{flavour}", flavour or "")


class StackFlavour(NamedTuple):
    """A build line of a kind published under its own pip names (TensorRT cu12, cu13)."""

    name: str
    cuda_major: int | None  # the CUDA major NVIDIA documents for it; None: its files always say
    source: str | None


class StackRule(NamedTuple):
    """A fact no file of the package says, for a range of its releases (TensorRT >= 10.5: SM 7.5)."""

    releases: SpecifierSet
    sm_floor: str | None
    note: str | None
    source: str


class StackFeature(NamedTuple):
    """A feature with its own hardware floor (Transformer Engine FP8): any one alternative suffices."""

    name: str
    releases: SpecifierSet
    any_of: tuple[tuple[str, Version | None], ...]  # (minimum compute capability, minimum CUDA or None)
    source: str

    def available(self, compute_capability: str, cuda: Version) -> bool:
        cc = Version(compute_capability)
        return any(cc >= Version(sm) and (floor is None or cuda >= floor) for sm, floor in self.any_of)


class StackBuild(NamedTuple):
    """One way to install a stack release: one CUDA build line (compat/stacks.yaml, generated rows).

    CUDA and cuDNN majors come from the package's own files (`cuda_from`, `cudnn_from`), never from a
    package name; None: the build has no CUDA of its own (DeepSpeed, Megatron-Core: torch's)."""

    flavour: str | None  # "cu12"; None: the release's only build line
    default: bool  # what `pip install <pip>==<version>` installs
    pin: str | None  # the post release to install where the release's own files are incomplete; None: the release
    distributions: tuple[tuple[str, str], ...]  # (pip name, wheel | sdist): what installing the build installs
    arches: tuple[str, ...]  # host architectures with Linux binaries (all, for an sdist-only build)
    python: str | None  # CPython range of the x86_64 wheels (within Requires-Python); None: not declared
    python_aarch64: str | None
    manylinux: tuple[tuple[str, str], ...]  # (arch, glibc floor "2.28") of the build's wheels
    cuda_major: int | None
    cuda: str | None  # major.minor the package records (ONNX Runtime's build info)
    cuda_requirement: str | None  # the CUDA runtime requirement as declared ("nvidia-cuda-runtime-cu12~=12.0")
    cuda_from: str | None  # requires-dist | build-info | soname | documented
    cuda_source: str | None  # the flavour's source where cuda_from is documented
    cudnn_major: int | None
    cudnn_spec: SpecifierSet | None  # the declared cuDNN range (">=9.0,<10"); None: none declared
    cudnn_requirement: str | None
    cudnn_min: Version | None  # the package's own floor (Transformer Engine MIN_CUDNN_VERSION)
    cudnn_from: str | None  # requires-dist | soname | code
    sonames: tuple[tuple[str, tuple[str, ...] | None], ...]  # (shared object, CUDA sonames it needs; None: unread)
    requires: tuple[tuple[str, str], ...]  # (package, PEP 440 specifier as declared): torch, tensorrt*, ...
    build_requires: tuple[str, ...] | None  # an sdist's [build-system] requires
    nvcc_minor_mismatch_ok: tuple[tuple[int, tuple[str, ...]], ...] | None  # DeepSpeed: majors whose minors mix
    library_index: str | None  # the index the build's libraries come from (NVIDIA's); data, never user input
    library_index_source: str | None
    sm_floor: str | None  # the oldest compute capability the release supports, where documented
    sm_source: str | None
    source: str
    evidence: tuple[str, ...]

    @property
    def pip_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.distributions)

    @property
    def sdists(self) -> tuple[str, ...]:
        """The distributions built from source (a devel build stage, hashes of sdists in the lock)."""
        return tuple(name for name, kind in self.distributions if kind == "sdist")

    def needs_soname(self, library: str) -> tuple[str, ...]:
        """Every soname of `library` (libnvinfer, libcudnn) any read shared object of the build needs."""
        prefix = library + ".so."
        return tuple(sorted({n for _, names in self.sonames for n in names or () if n.startswith(prefix)}))

    def soname_majors(self, library: str) -> tuple[int, ...]:
        return tuple(sorted({int(n.split(".so.", 1)[1].split(".")[0]) for n in self.needs_soname(library)}))

    def python_for(self, arch: str) -> str | None:
        return self.python_aarch64 if arch == "aarch64" else self.python

    def glibc_for(self, arch: str) -> Version | None:
        found = dict(self.manylinux).get(arch)
        return Version(found) if found else None

    def requirement(self, name: str) -> str | None:
        """The PEP 440 specifier the build declares on `name` (None: no pin)."""
        return dict(self.requires).get(name)

    def cudnn_allows(self, version: Version | str) -> bool:
        """A cuDNN the build accepts: its major, inside the declared range and at or above its floor."""
        v = version if isinstance(version, Version) else Version(version)
        if self.cudnn_major is not None and v.release[0] != self.cudnn_major:
            return False
        if self.cudnn_spec is not None and not self.cudnn_spec.contains(v):
            return False
        return self.cudnn_min is None or v >= self.cudnn_min

    def sm_allows(self, compute_capability: str) -> bool:
        return self.sm_floor is None or Version(compute_capability) >= Version(self.sm_floor)


class StackRelease(NamedTuple):
    version: Version
    post: tuple[str, ...]  # post releases of the same version (10.7.0.post1), newest first
    extras: tuple[tuple[str, tuple[str, ...]], ...]  # (extra, its requirements): [cuda], [cudnn], [te]
    builds: tuple[StackBuild, ...]

    def build(self, flavour: str | None) -> StackBuild | None:
        return next((b for b in self.builds if b.flavour == flavour), None)

    @property
    def default_build(self) -> StackBuild | None:
        return next((b for b in self.builds if b.default), None)

    def builds_for(self, cuda_major: int) -> tuple[StackBuild, ...]:
        """The builds of one CUDA major, plus those with no CUDA of their own (they follow torch's)."""
        return tuple(b for b in self.builds if b.cuda_major in (cuda_major, None))

    def extra(self, name: str) -> tuple[str, ...] | None:
        return dict(self.extras).get(name)


class StackPackage(NamedTuple):
    """A package kind of compat/stacks.yaml: its description and its releases (newest first)."""

    id: str
    name: str
    pip: str  # the distribution users name (onnxruntime-gpu, tensorrt)
    uses_cuda: bool  # its builds carry a CUDA of their own (False: DeepSpeed, Megatron-Core follow torch)
    first_release: Version
    distributions: tuple[StackDistribution, ...]
    flavours: tuple[StackFlavour, ...]
    runtime: StackRuntime | None
    documented: tuple[StackRule, ...]
    features: tuple[StackFeature, ...]
    source: str
    releases: tuple[StackRelease, ...]

    def release(self, version: Version) -> StackRelease | None:
        return next((r for r in self.releases if r.version == version), None)

    def distribution(self, role: str) -> StackDistribution | None:
        return next((d for d in self.distributions if d.role == role), None)

    def feature(self, name: str, version: Version) -> StackFeature | None:
        return next((f for f in self.features if f.name == name and f.releases.contains(version)), None)

    @property
    def sdist_builds(self) -> tuple[StackDistribution, ...]:
        return tuple(d for d in self.distributions if d.build is not None)


class LazyStacks:
    """The stack packages as a read-only sequence, each package built on first use: a plan that
    names no stack package never builds one (the validated-data cache keeps their document apart,
    so start-up does not even parse it), and a plan that names some builds only those and the
    ones their builds require (``named``; ``names`` reads the ids and pip names without building).

    ``load`` returns the document's package items (the schema-checked mappings, or what ``make``
    reads them from: the cache's one JSON line per package, parsed when built); ``make(item, i)``
    builds package ``i``; ``index``, where given, returns what ``names`` gives without reading the
    items (the cache file's first line). Iterating builds every package, in the document's order."""

    __slots__ = ("_built", "_index", "_items", "_load", "_make", "_names")

    def __init__(self, load, make, index=None) -> None:
        self._load, self._make, self._index = load, make, index
        self._items: list | None = None
        self._built: dict[int, StackPackage] = {}
        self._names: tuple[tuple[str, str, tuple[str, ...]], ...] | None = None

    def _raw(self) -> list:
        if self._items is None:
            self._items = list(self._load())
        return self._items

    def _one(self, i: int) -> StackPackage:
        found = self._built.get(i)
        if found is None:
            found = self._built[i] = self._make(self._raw()[i], i)
        return found

    def _get(self) -> tuple[StackPackage, ...]:
        return tuple(self._one(i) for i in range(len(self._raw())))

    def names(self) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        """(id, pip, the pip names of its distributions, "{flavour}" kept) of each package, unbuilt."""
        if self._names is None:
            self._names = self._index() if self._index is not None else stack_index(self._raw())
        return self._names

    def named(self, ident: str) -> StackPackage | None:
        """The package whose id or pip name is ``ident``, built alone."""
        i = next((i for i, (pid, pip, _) in enumerate(self.names()) if ident in (pid, pip)), None)
        return None if i is None else self._one(i)

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._raw())

    def __getitem__(self, index):
        return self._get()[index]

    def __bool__(self) -> bool:
        return bool(self._raw())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (LazyStacks, tuple)):
            return self._get() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._get())

    def __repr__(self) -> str:
        return f"LazyStacks({len(self._built)} built)"

    def __reduce__(self):
        return (tuple, (self._get(),))


def stack_index(packages) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(id, pip, the pip names of its distributions) of each of stacks.yaml's package mappings:
    what LazyStacks.names gives, and what the validated-data cache keeps on its stacks file's first line."""
    return tuple((str(p["id"]), str(p["pip"]), tuple(str(d["pip"]) for d in p["distributions"])) for p in packages)


# -- platforms (compat/platforms.yaml): the server or GPU baseboard around the GPUs ---------------
PLATFORM_FACTS = (
    "gpus",
    "interconnect",
    "fabric_manager",
    "topology",
    "pcie",
    "psus",
    "inlet_c",
    "dmi",
    "dmi_unverified",
)
# what a doubt may name: a fact, or one part of the GPUs (their models, their count)
PLATFORM_DOUBTS = ("gpus", "gpus.ids", "gpus.count", *PLATFORM_FACTS[1:])
PLATFORM_STRICT = ("system", "baseboard")  # kinds that take only the GPUs they list


class PlatformVariant(NamedTuple):
    """Facts of a platform that differ with the GPUs it carries (XE9680: HGX A100 or HGX H100/H200)."""

    gpus: tuple[str, ...]
    nvswitch_generation: int | None
    nvswitch_count: int | None
    topology: tuple[str, ...]  # nvidia-smi topo -m relations accepted between every GPU pair; (): not sourced
    pcie_generation: int | None
    pcie_width: int | None
    sources: tuple[str, ...]


class PlatformDoubt(NamedTuple):
    fields: tuple[str, ...]  # PLATFORM_DOUBTS it concerns
    text: str


class PlatformLink(NamedTuple):
    """What a platform gives one GPU it carries: its variant's facts over the platform's own."""

    nvswitch: bool  # the GPUs sit on an NVSwitch baseboard: Fabric Manager
    nvswitch_generation: int | None
    nvswitch_count: int | None
    topology: tuple[str, ...]
    pcie_generation: int | None
    pcie_width: int | None


class Platform(NamedTuple):
    """A server or GPU baseboard: the GPUs it takes, how they are connected, what the host reports."""

    id: str
    name: str
    aliases: tuple[str, ...]
    kind: str  # system | baseboard | oem-server | generic
    gpus: tuple[str, ...]  # catalogue GPU ids a source shows in it (a system or baseboard takes only these)
    gpu_count: int | None
    gpu_count_is: str | None  # exact | up-to
    form_factors: tuple[str, ...]  # gpus.yaml form factors it takes
    interconnect: str | None  # nvswitch | nvlink | nvlink-bridge | none; None: no source gives it
    interconnect_optional: bool  # a host may have none of it (NVLink bridges)
    nvswitch_generation: int | None
    nvswitch_count: int | None
    variants: tuple[PlatformVariant, ...]
    topology: tuple[str, ...]
    pcie_generation: int | None
    pcie_width: int | None
    psu_count: int | None
    psu_redundancy: str | None  # "4+2", as the vendor writes it
    inlet_min_c: float | None
    inlet_max_c: float | None
    dmi_vendor: tuple[str, ...]  # substrings of sys_vendor / product_name / product_family
    dmi_product: tuple[str, ...]
    dmi_family: tuple[str, ...]
    dmi_unverified: tuple[tuple[str, tuple[str, ...]], ...]  # (field, substrings) no capture of the model shows
    evidence: tuple[tuple[str, tuple[str, ...]], ...]  # (fact, its sources)
    doubts: tuple[PlatformDoubt, ...]
    left_out: tuple[tuple[str, str], ...]  # (fact, why no source gives it)
    sources: tuple[str, ...]

    @property
    def strict(self) -> bool:
        """A system or baseboard takes only the GPUs it lists; a server, any GPU of its form factors."""
        return self.kind in PLATFORM_STRICT

    def takes(self, gpu: "Gpu") -> bool:
        return gpu.id in self.gpus if self.strict else gpu.form_factor in self.form_factors

    def variant(self, gpu_id: str) -> PlatformVariant | None:
        return next((v for v in self.variants if gpu_id in v.gpus), None)

    def link(self, gpu: "Gpu") -> PlatformLink:
        """The interconnect, topology and PCIe link the platform gives ``gpu``. Without an
        interconnect in the catalogue, NVSwitch is the GPU's own (gpus.yaml nvswitch)."""
        var = self.variant(gpu.id)
        nvswitch = gpu.nvswitch if self.interconnect is None else self.interconnect == "nvswitch"
        generation = count = None
        if nvswitch:
            generation = next(
                (g for g in (var and var.nvswitch_generation, self.nvswitch_generation, gpu.nvswitch_generation) if g),
                None,
            )
            count = (var and var.nvswitch_count) or self.nvswitch_count
        pcie = (var.pcie_generation, var.pcie_width) if var and var.pcie_generation else None
        return PlatformLink(
            nvswitch,
            generation,
            count,
            (var.topology if var and var.topology else self.topology),
            *(pcie or (self.pcie_generation, self.pcie_width)),
        )

    def sources_of(self, fact: str) -> tuple[str, ...]:
        return dict(self.evidence).get(fact, ())

    @property
    def unconfirmed(self) -> tuple[str, ...]:
        """The facts a doubt names (a secondary source, an inference, another machine's capture), in
        PLATFORM_DOUBTS order: "gpus.count" doubts the count only, not the GPU models or form factor."""
        named = {f for d in self.doubts for f in d.fields}
        return tuple(f for f in PLATFORM_DOUBTS if f in named)


class Matrix(NamedTuple):
    as_of: dt.date
    sources: dict[str, Source]
    os_releases: tuple[OsRelease, ...]
    architectures: tuple[Architecture, ...]
    gpus: tuple[Gpu, ...]
    gpu_groups: tuple[GpuGroup, ...]
    drivers: tuple[DriverBranch, ...]  # newest branch first
    driver_packaging: tuple[DriverPackaging, ...]
    cuda: tuple[CudaRelease, ...]  # newest first
    compute_support: tuple[ComputeSupport, ...]
    minor_compat: tuple[MinorCompat, ...]
    cudnn: tuple[CudnnRelease, ...]
    frameworks: tuple[Framework, ...]
    images: tuple[ImageRelease, ...]
    image_repository: str
    toolkit: tuple[ToolkitRelease, ...]
    mig: tuple[MigProfileSet, ...]
    exclusions: tuple[Exclusion, ...]
    files: tuple[tuple[str, str], ...] = ()  # (data file, sha256), set by the loader
    subnet_manager: SubnetManager | None = None  # drivers.yaml subnet_manager; None: not catalogued
    forward_compat: tuple[ForwardCompat, ...] = ()  # cuda.yaml forward_compatibility
    # stacks.yaml: the inference and training stack packages (a LazyStacks from the validated-data cache)
    stacks: tuple[StackPackage, ...] | LazyStacks = ()
    platforms: tuple[Platform, ...] = ()  # platforms.yaml: servers and GPU baseboards

    # -- lookups ------------------------------------------------------------------------
    def os(self, ident: str) -> OsRelease:
        for rel in self.os_releases:
            if ident == rel.id or ident in rel.aliases:
                return rel
        names = {name: o.id for o in self.os_releases for name in (o.id, *o.aliases)}
        raise _unknown("OS", ident, names, "provision matrix os")

    def os_ids(self) -> list[str]:
        return [o.id for o in self.os_releases]

    def gpu_ids(self) -> list[str]:
        return [g.id for g in self.gpus] + [g.id for g in self.gpu_groups]

    def gpu_members(self, ident: str) -> tuple[str, tuple[Gpu, ...]]:
        """Resolve a GPU id, alias or group to its canonical id and the GPUs it covers."""
        for gpu in self.gpus:
            if ident == gpu.id or ident in gpu.aliases:
                return gpu.id, (gpu,)
        for group in self.gpu_groups:
            if ident == group.id:
                return group.id, tuple(self.gpu(m) for m in group.members)
        names = {name: g.id for g in self.gpus for name in (g.id, *g.aliases)}
        names.update({g.id: g.id for g in self.gpu_groups})
        raise _unknown("GPU", ident, names, "provision matrix gpus")

    def gpu(self, ident: str) -> Gpu:
        for gpu in self.gpus:
            if ident == gpu.id or ident in gpu.aliases:
                return gpu
        names = {name: g.id for g in self.gpus for name in (g.id, *g.aliases)}
        raise _unknown("GPU", ident, names, "provision matrix gpus")

    def group(self, ident: str) -> GpuGroup | None:
        return next((g for g in self.gpu_groups if g.id == ident), None)

    def platform(self, ident: str) -> Platform:
        """A platform by its id or an alias (did-you-mean over the listed ids)."""
        for platform in self.platforms:
            if ident == platform.id or ident in platform.aliases:
                return platform
        names = {name: p.id for p in self.platforms for name in (p.id, *p.aliases)}
        raise _unknown("platform", ident, names, "provision matrix platforms")

    def platform_ids(self) -> list[str]:
        return [p.id for p in self.platforms]

    def architecture(self, ident: str) -> Architecture:
        for arch in self.architectures:
            if arch.id == ident:
                return arch
        raise KeyError(f"unknown architecture {ident!r}")

    def framework(self, ident: str) -> Framework:
        for fw in self.frameworks:
            if ident in (fw.id, fw.package, *fw.aliases):
                return fw
        raise _unknown("framework", ident, [f.id for f in self.frameworks], "provision matrix frameworks")

    def stack(self, ident: str) -> StackPackage:
        """A stack package kind by its id or its pip name (onnxruntime, onnxruntime-gpu); from a
        LazyStacks, that package alone is built."""
        if isinstance(self.stacks, LazyStacks):
            found = self.stacks.named(ident)
            if found is not None:
                return found
        else:
            for package in self.stacks:
                if ident in (package.id, package.pip):
                    return package
        names = {name: pid for pid, pip, _ in self.stack_names() for name in (pid, pip)}
        raise _unknown("stack package", ident, names, "provision matrix stacks")

    def stack_names(self) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        """(id, pip, the pip names of its distributions, "{flavour}" kept) of each stack package,
        in the catalogue's order, without building the packages of a LazyStacks."""
        if isinstance(self.stacks, LazyStacks):
            return self.stacks.names()
        return tuple((p.id, p.pip, tuple(d.pip for d in p.distributions)) for p in self.stacks)

    def mig_set(self, ident: str) -> MigProfileSet:
        for profile_set in self.mig:
            if profile_set.id == ident:
                return profile_set
        raise KeyError(f"unknown MIG profile set {ident!r}")

    def branch(self, number: int) -> DriverBranch | None:
        return next((b for b in self.drivers if b.branch == number), None)

    def cuda_supports_cc(self, cuda: Version, cc: str) -> bool:
        return any(s.compute_capability == cc and s.cuda.contains(cuda) for s in self.compute_support)

    def minor_compat_floor(self, cuda_major: int) -> MinorCompat | None:
        return next((m for m in self.minor_compat if m.cuda_major == cuda_major), None)

    def cudnn_release(self, full_version: Version) -> CudnnRelease | None:
        return next((c for c in self.cudnn if c.covers(full_version)), None)

    def image(self, cuda: Version) -> ImageRelease | None:
        """The image set numbered `cuda` (its tags' version), whatever toolkit it carries."""
        return next((i for i in self.images if i.cuda == cuda), None)

    def images_for(self, toolkit: Version) -> tuple[ImageRelease, ...]:
        """Every image set that carries a toolkit release, newest set first (file order): its own
        and those numbered past it (images.yaml `toolkit`)."""
        return tuple(i for i in self.images if i.carries == toolkit)

    def image_of(self, toolkit: Version, ref: str) -> ImageRelease | None:
        """The image set carrying `toolkit` that an image reference (repository:tag[@digest]) is a tag of."""
        tag = ref.split("@", 1)[0].rpartition(":")[2]
        return next((i for i in self.images_for(toolkit) if tag.startswith(f"{i.cuda}-")), None)

    def packaging_for(self, os_id: str, branch: int, module: str) -> DriverPackaging | None:
        return next((p for p in self.driver_packaging if p.covers(os_id, branch, module)), None)


def _unknown(kind: str, ident: str, known: dict[str, str] | list[str], listing: str) -> UnknownId:
    """``known``: every accepted name -> the id ``listing`` shows (only listed ids are suggested)."""
    from provision.matrix.suggest import did_you_mean

    return UnknownId(f"unknown {kind} {ident!r}", hint=did_you_mean(ident, known, listing))
