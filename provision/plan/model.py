"""The plan: what a host and its images must run. Everything after ``provision plan`` reads this.

``Plan.to_dict()`` is the only serialiser and ``Plan.from_dict()`` its exact inverse; the JSON
document they exchange is the contract in docs/plans.md (``"schema": 2``; schema 1 locks are still
read and their digests verified).

A plan has a host part (``HOST_PART``: os, gpu, driver, Fabric Manager, subnet manager, Container
Toolkit, MIG) and an image part (``IMAGE_PART``: the image's OS, CUDA, cuDNN, framework, base
images, driver floor). A ``--host-only`` plan has no image part: its CUDA, base image, driver floor
and image OS are null. The image's OS is its own choice (``--image-os``): by default the host OS's
own ``nvidia/cuda`` images.
"""

import functools
import hashlib
import json
import os
import types
import typing
from typing import Any, NamedTuple

from provision.errors import InputError

SCHEMA_VERSION = 2
READ_SCHEMAS = (1, 2)  # schema 1: image_os absent (the host OS's images), never host-only
SCHEMA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema", "plan.schema.json")


class PlanRequest(NamedTuple):
    os: str
    gpu: str | None  # None only with a platform that implies it (its one GPU model, or a group of them)
    driver: str | None = None  # "535" (a branch) or "535.183.06" (a release)
    cuda: str | None = None  # "12.4" or "12.4.1"
    cudnn: str | None = None  # "9", "9.1" or "9.1.0.70"
    framework: str | None = None  # "pytorch==2.5.1"
    policy: str = "lts"  # lts | latest
    mig: str | None = None  # MIG layout "3g.40gb,2g.20gb,2x1g.10gb" (provision mig plan checks it)
    image_os: str | None = None  # the images' OS (nvidia/cuda suffix or a host OS id); None: the host OS's own
    host_only: bool = False  # no image part: driver, modules, Fabric Manager, toolkit only
    platform: str | None = None  # the server or baseboard (compat/platforms.yaml id or alias)
    # --with NAME[==VERSION], repeatable: stack packages (compat/stacks.yaml ids) added to the
    # framework, in the order given; () when none (absent from the digest, as platform is)
    with_: tuple[str, ...] = ()


class Reason(NamedTuple):
    component: str  # os, gpu, driver, kernel-module, cuda, cudnn, framework, image, fabric-manager, ...
    text: str
    source: str | None = None  # a key of compat/sources.yaml


class PlanOs(NamedTuple):
    id: str
    name: str
    family: str
    distribution: str
    version: str
    pkg_manager: str
    nvidia_repo: str
    kernel_headers: tuple[str, ...]
    cuda_image_os: str
    arch: str = "x86_64"  # the host CPU architecture (Ansible's ansible_architecture)
    repo_arch: str = "x86_64"  # NVIDIA's repository directory for it: repos/<nvidia_repo>/<repo_arch>/ (sbsa)


class PlanGpu(NamedTuple):
    id: str
    name: str
    compute_capability: str
    architecture: str
    members: tuple[str, ...]
    nvswitch: bool
    mig: bool
    pci_device_ids: tuple[str, ...]


class Package(NamedTuple):
    name: str
    version: str  # full package version, revision included ("580.95.05-1")


class PlanModuleOption(NamedTuple):
    """A kernel-module option the driver role writes to its modprobe.d file (module option=value)."""

    module: str
    option: str
    value: str
    source: str  # the sources.yaml key it rests on


class PlanDriver(NamedTuple):
    branch: str
    version: str
    kernel_module: str  # open | proprietary
    branch_type: str
    eol: str | None
    install_method: str  # apt | dnf-module
    module_stream: str | None
    packages: tuple[Package, ...]
    module_options: tuple[PlanModuleOption, ...] = ()  # the GPU's, from their branch floor on


class PlanCuda(NamedTuple):
    version: str
    label: str
    min_driver: str
    compatibility: str  # "toolkit-driver" or "minor-version"
    # the compute capabilities this CUDA can build for (cuda.yaml): what a base or devel image serves
    compute_capabilities: tuple[str, ...] | None = None


class PlanCudnn(NamedTuple):
    version: str
    origin: str  # framework | image


class PlanFramework(NamedTuple):
    name: str
    package: str
    version: str
    variant: str
    cuda: str
    cuda_runtime: str | None
    cudnn: str | None
    index_url: str | None
    extra: str | None
    libraries: str
    requirement: str  # what pip takes: "torch==2.5.1"
    requires_python: str | None = None  # the wheel's Requires-Python
    compute_capabilities: tuple[str, ...] | None = None  # SASS in the build, where published
    ptx: str | None = None  # PTX embedded too: GPUs at or above it JIT-compile from it


class PlanStackPackage(NamedTuple):
    """One package of an image's stack (compat/stacks.yaml): ONNX Runtime, TensorRT, Torch-TensorRT,
    DeepSpeed, Megatron-Core, Transformer Engine, with the build the resolver chose and why it fits.

    ``role`` is "framework" for the image's own framework (``--framework onnxruntime|tensorrt``: the
    plan's ``framework`` is then None), "with" for one added by ``--with``, and "requires" for one
    another stack package of the plan declares a requirement on (torch-tensorrt: tensorrt), whose id
    ``required_by`` names. Every fact is the catalogue's (its generated rows: the packages' own
    files), never the user's."""

    id: str  # compat/stacks.yaml package id: onnxruntime, tensorrt, torch-tensorrt, deepspeed, ...
    pip: str  # the distribution users name (onnxruntime-gpu, tensorrt)
    version: str  # the release ("1.20.1")
    install: str  # the version pip installs: the release, or the post release the catalogue pins
    flavour: str | None  # the build line ("cu12"); None: the release's only one
    role: str  # framework | with | requires
    requirement: str  # what pip takes: "onnxruntime-gpu==1.20.1", extras included ("...[cuda,cudnn]==1.22.0")
    distributions: tuple[tuple[str, str], ...]  # (pip name, wheel | sdist): what installing the build installs
    cuda_major: int | None  # from the package's files; None: it follows the framework's (DeepSpeed)
    cuda: str | None  # the CUDA major.minor the build records, where it does
    cudnn_major: int | None
    cudnn_spec: str | None  # the declared cuDNN range (">=9.0,<10"); a range stays a range
    cudnn_min: str | None  # the package's own floor (Transformer Engine's MIN_CUDNN_VERSION)
    sm_floor: str | None  # the oldest compute capability the release supports, where documented
    library_index: str | None  # the second index the catalogue names for its libraries (NVIDIA's); never user input
    needs_nvcc: bool  # its ops compile at run time with nvcc (DeepSpeed): a devel image whose CUDA is torch's
    build_requires: tuple[str, ...]  # an sdist's [build-system] requires (built with isolation off)
    source: str  # the sources.yaml key of the build row
    # added by the resolver (issue 24): the build's declared CPython range for the plan's host
    # architecture (None: none declared); the image's Python must satisfy every package's
    requires_python: str | None = None
    # role requires: the id of the stack package whose declared requirement brought it (absent otherwise)
    required_by: str | None = None


class PlanFabricManager(NamedTuple):
    package: str
    version: str
    packages: tuple[Package, ...]


class PlanSubnetManager(NamedTuple):
    """The NVLink Subnet Manager of a fourth-generation NVSwitch host, run by Fabric Manager's unit."""

    service: str  # the systemd unit that starts it (nvidia-fabricmanager)
    process: str  # nvlsm
    packages: tuple[str, ...]  # NVIDIA's, versioned on their own: installed from the repository, then held
    requires: tuple[str, ...]  # the distribution's InfiniBand userspace
    kernel_modules: tuple[str, ...]  # loaded at boot (ib_umad: its management transport)


class PlanServer(NamedTuple):
    """The server or baseboard a plan is for (compat/platforms.yaml), as it carries the plan's GPU:
    what verify holds a host to. None / () where the catalogue has no source for a fact."""

    id: str
    name: str
    kind: str  # system | baseboard | oem-server | generic
    gpu_count: int | None
    gpu_count_is: str | None  # exact | up-to (a host may hold fewer)
    form_factors: tuple[str, ...]
    interconnect: str | None  # nvswitch | nvlink | nvlink-bridge | none; None: not catalogued
    interconnect_optional: bool  # a host may have none of it (NVLink bridges)
    nvswitch_generation: int | None
    nvswitch_count: int | None
    fabric_manager: bool  # the interconnect needs Fabric Manager (an NVSwitch baseboard)
    topology: tuple[str, ...]  # nvidia-smi topo -m relations accepted between every GPU pair
    pcie_generation: int | None
    pcie_width: int | None
    dmi_vendor: tuple[str, ...]  # substrings of sys_vendor / product_name (captured on the model)
    dmi_product: tuple[str, ...]
    unconfirmed: tuple[str, ...]  # facts a doubt names (gpus, interconnect, topology, pcie, dmi ...)


class PlanToolkit(NamedTuple):
    version: str
    packages: tuple[Package, ...]


class PlanMigInstance(NamedTuple):
    profile: str  # 3g.40gb
    profile_id: int | None  # nvidia-smi mig -lgip id
    placement: int  # start memory slot (nvidia-smi mig -lgipp)
    memory_slices: int
    compute_slices: int


class PlanMig(NamedTuple):
    config_name: str  # the mig-parted config name
    profile_set: str  # compat/mig.yaml id
    placements_confirmed: bool
    instances: tuple[PlanMigInstance, ...]  # creation order: larger first
    devices: dict[str, int]  # profile -> count (mig-parted's mig-devices)
    cgi: str  # nvidia-smi mig -cgi argument: <profile id>:<start>,...


HOST_PART = ("os", "gpu", "server", "driver", "fabric_manager", "subnet_manager", "container_toolkit", "mig")
IMAGE_PART = (
    "image_os",
    "cuda",
    "cudnn",
    "framework",
    "stack",
    "base_image",
    "images",
    "driver_floor",
    "require_cuda",
    "platform",
)


class PlanData(NamedTuple):
    as_of: str
    digest: str  # sha256 over the compat/ files the plan was resolved from


class Plan(NamedTuple):
    request: PlanRequest
    os: PlanOs
    gpu: PlanGpu
    driver: PlanDriver
    cuda: PlanCuda | None  # None in a host-only plan
    cudnn: PlanCudnn | None
    framework: PlanFramework | None
    fabric_manager: PlanFabricManager | None
    container_toolkit: PlanToolkit
    base_image: str | None  # None in a host-only plan
    images: dict[str, str]  # flavour -> nvidia/cuda:<tag> for the plan's CUDA and image OS ({} host-only)
    driver_floor: str | None  # oldest driver the plan's images need (NVIDIA_REQUIRE_CUDA); None host-only
    reasons: tuple[Reason, ...]
    data: PlanData
    mig: PlanMig | None = None
    subnet_manager: PlanSubnetManager | None = None
    platform: str = "linux/amd64"  # the container platform of the plan's images (linux/arm64 on aarch64 hosts)
    image_os: str | None = None  # the images' OS (nvidia/cuda tag suffix); None only in a host-only plan
    # NVIDIA_REQUIRE_CUDA of the plan's images: provision.matrix.runs_on's rule in the Container
    # Toolkit's grammar (schema 2); None in a host-only plan and in schema 1 plans (nvidia_require_cuda)
    require_cuda: str | None = None
    server: PlanServer | None = None  # --platform: the server around the GPUs (None: not given)
    # the image's stack packages (--framework onnxruntime|tensorrt, --with): () when none, and then
    # absent from the document and the digest (a lock without a stack is the one it always was)
    stack: tuple[PlanStackPackage, ...] = ()
    schema: int = SCHEMA_VERSION

    @property
    def host_only(self) -> bool:
        """No image part: nothing to render, build or run a container of."""
        return self.cuda is None

    # -- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        body = _dump(self)
        body = {"schema": body.pop("schema"), **body}
        body["digest"] = self.digest()
        return body

    @classmethod
    def from_dict(cls, doc: Any, *, origin: str = "plan") -> "Plan":
        if not isinstance(doc, dict) or "driver" not in doc or "request" not in doc:
            raise InputError(
                f"{origin} is not a provision plan",
                hint="write one with: provision plan --os OS --gpu GPU --lock plan.lock.json",
            )
        if doc.get("schema") not in READ_SCHEMAS or isinstance(doc.get("schema"), bool):
            raise InputError(
                f"{origin} has plan schema {doc.get('schema')!r}; this provision reads schemas "
                f"{', '.join(map(str, READ_SCHEMAS))}",
                hint="re-create the lock file with this version of provision plan --lock",
            )
        if "digest" not in doc:
            raise InputError(
                f"{origin} has no digest: a plan without one cannot be checked for edits",
                hint="re-create it with provision plan --lock",
            )
        check_document(doc, origin)
        body = {k: v for k, v in doc.items() if k != "digest"}
        if body["schema"] == 1:
            if "image_os" in body and body["image_os"] != (body.get("os") or {}).get("cuda_image_os"):
                raise InputError(
                    f"{origin}: image_os: a schema 1 plan's images are its host OS's own",
                    hint="re-create it with provision plan --lock (schema 2 records image_os)",
                )
            body["image_os"] = (body.get("os") or {}).get("cuda_image_os")
        try:
            plan = _load(cls, body)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(
                f"{origin} is not a valid plan ({exc})", hint="re-create it with provision plan --lock"
            ) from None
        if doc["digest"] != plan.digest():
            raise InputError(
                f"{origin} was edited after it was written (digest mismatch)",
                hint="plans are resolved, not edited: change the pins and run provision plan --lock again",
            )
        # a digest is no signature (anyone can recompute it): the fields must also agree with each other
        from provision.plan.lockcheck import check_consistency

        check_consistency(plan, origin)
        return plan

    def digest(self) -> str:
        """sha256 over what the plan pins (request, choices, images), not over its prose."""
        body = _dump(self)
        for key in ("reasons", "data"):
            body.pop(key)
        # added after schema 1 shipped: absent from the digest unless used, so earlier locks still verify
        for key in ("mig", "subnet_manager"):
            if body.get(key) is None:
                body.pop(key, None)
        if body["request"].get("mig") is None:
            body["request"].pop("mig", None)
        # schema 2's request keys, absent from the digest unless used (as mig above)
        if body["request"].get("image_os") is None:
            body["request"].pop("image_os", None)
        if not body["request"].get("host_only"):
            body["request"].pop("host_only", None)
        # the platform (request.platform, server): _dump leaves them out unless used (_ABSENT_WHEN_NONE)
        # a schema 1 plan records no image_os (it reads as the host OS's own images)
        if self.schema == 1:
            body.pop("image_os", None)
        if body.get("require_cuda") is None:
            body.pop("require_cuda", None)
        # the driver's module options, added later the same way: a plan without any digests as before
        if not body["driver"].get("module_options"):
            body["driver"].pop("module_options", None)
        # the host architecture, added later the same way: an x86_64 plan digests as it always did
        if body.get("platform") == "linux/amd64":
            body.pop("platform")
        for key in ("arch", "repo_arch"):
            if body["os"].get(key) == "x86_64":
                body["os"].pop(key)
        for part, key in (
            ("cuda", "compute_capabilities"),
            ("framework", "compute_capabilities"),
            ("framework", "ptx"),
        ):
            if body.get(part) is not None and body[part].get(key) is None:
                body[part].pop(key, None)
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()

    def check(self, origin: str = "plan") -> "Plan":
        """The plan itself, once its document passes the plan schema (InputError naming the field if not).

        Plans resolved in this process pass it by construction; the consumers that hand plan strings to
        a template or a host (render, ci, apply, verify) call it all the same, so that no path skips it."""
        check_document(self.to_dict(), origin)
        return self

    @property
    def short_digest(self) -> str:
        return self.digest().removeprefix("sha256:")[:12]


@functools.cache
def _validator() -> Any:
    import jsonschema

    with open(SCHEMA_FILE, encoding="utf-8") as handle:
        return jsonschema.Draft202012Validator(json.load(handle))


@functools.cache
def _fast_validator() -> Any:
    """The same schema with its local $refs written out in place: a valid document is known valid
    in half the time (the referencing library's lookups were half of it); a refusal is still
    reported by _validator, whose errors name the schema's own definitions."""
    import jsonschema

    schema = _validator().schema
    defs = schema["$defs"]

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = inline(defs[ref.removeprefix("#/$defs/")])
                rest = {k: inline(v) for k, v in node.items() if k != "$ref"}
                return {"allOf": [target, rest]} if rest else target
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return jsonschema.Draft202012Validator(inline({k: v for k, v in schema.items() if k != "$defs"}))


def check_document(doc: Any, origin: str = "plan") -> None:
    """Hold a plan document to the plan schema: unknown keys refused, every string to its pattern.

    One error, naming the field and what it must be: ``driver.version: '{{ x }}' is not a version``."""
    import jsonschema

    if _fast_validator().is_valid(doc):
        return
    error = jsonschema.exceptions.best_match(_validator().iter_errors(doc))
    if error is None:
        return
    field = ".".join(str(p) for p in error.absolute_path) or "the document"
    if error.validator == "pattern":
        value = error.instance if len(error.instance) <= 80 else error.instance[:77] + "..."
        what = f"{value!r} is not {error.schema.get('description', 'of the expected form')}"
    elif error.validator in ("additionalProperties", "required", "enum", "const", "type"):
        what = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    else:
        what = f"{error.message[:160]} ({error.validator})"
    raise InputError(
        f"{origin}: {field}: {what}",
        hint="plans are untrusted input and are not edited: re-create it with provision plan --lock",
    )


def check_image_ref(ref: str, what: str = "image") -> str:
    """An image reference held to the plan schema's pattern (repository[:tag][@sha256:digest])."""
    import re

    pattern = _validator().schema["$defs"]["image"]["pattern"]
    if not isinstance(ref, str) or not re.fullmatch(pattern, ref):
        raise InputError(
            f"{what} {ref!r} is not an image reference",
            hint="repository[:tag][@sha256:digest], e.g. nvidia/cuda:12.4.1-base-ubuntu22.04",
        )
    return ref


def nvidia_require_cuda(plan: Plan) -> str:
    """NVIDIA_REQUIRE_CUDA for the plan's images: the Container Toolkit starts them exactly on the
    hosts provision.matrix.runs_on's rule accepts (``plan.require_cuda``, written when the plan was
    resolved). A schema 1 plan, resolved before the rule, keeps what it always rendered: cuda>= its
    CUDA, and its own driver branch when it relied on minor-version compatibility."""
    if plan.require_cuda is not None:
        return plan.require_cuda
    if plan.cuda is None:
        raise InputError("the plan has no image part (--host-only)", hint="plan without --host-only to render an image")
    cuda = plan.framework.cuda if plan.framework else ".".join(plan.cuda.version.split(".")[:2])
    value = f"cuda>={cuda}"
    if plan.cuda.compatibility == "minor-version":
        branch = int(plan.driver.branch)
        value += "".join(f" brand={b},driver>={branch},driver<{branch + 1}" for b in ("tesla", "nvidia", "unknown"))
    return value


def read_plan(path: str | os.PathLike[str], *, given_as: str = "the --plan path") -> Plan:
    """A lock file, checked; ``given_as`` says where the path came from (for the hint).

    Read as untrusted (provision.documents): not through a symbolic link, bounded, one JSON document
    without duplicate keys."""
    from provision.documents import load_json, read_text

    p = os.fspath(path)
    try:
        text = read_text(p, "plan")
    except InputError as exc:
        raise InputError(exc.message, hint=f"check {given_as}") from None
    try:
        doc = load_json(text, repr(p))
    except InputError as exc:
        if "is not JSON" not in exc.message:
            raise
        raise InputError(
            f"{p!r} is not a plan: {exc.message.removeprefix(repr(p) + ' is ')}",
            hint="write one with: provision plan --os OS --gpu GPU --lock plan.lock.json",
        ) from None
    return Plan.from_dict(doc, origin=repr(p))


def write_plan(plan: Plan, path: str | os.PathLike[str]) -> None:
    from provision.documents import write_text

    p = os.fspath(path)
    try:
        write_text(p, json.dumps(plan.to_dict(), indent=2) + "\n")
    except OSError as exc:
        raise InputError(f"cannot write {p!r}: {exc.strerror or exc}", hint="choose a writable --lock path") from None


# -- generic record <-> JSON ----------------------------------------------------------------
def _is_record(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


# Fields added after schema 2 shipped, written only when used: a lock without them is the document
# (and digest) it always was, and a provision that predates them still reads it.
# (None, or an empty list: with_ and stack, added with the stacks of issue 24).
_ABSENT_WHEN_NONE: dict[type, frozenset[str]] = {
    PlanRequest: frozenset({"platform", "with_"}),
    Plan: frozenset({"server", "stack"}),
    PlanStackPackage: frozenset({"required_by"}),
}
# record fields whose document key differs (``with`` is a Python keyword)
_KEY = {"with_": "with"}


def _dump(obj: Any) -> Any:
    if _is_record(obj):
        absent = _ABSENT_WHEN_NONE.get(type(obj), frozenset())
        return {
            _KEY.get(name, name): _dump(value)
            for name, value in zip(obj._fields, obj, strict=True)
            if (value is not None and value != ()) or name not in absent
        }
    if isinstance(obj, (list, tuple)):
        return [_dump(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _dump(v) for k, v in obj.items()}
    return obj


@functools.cache
def _hints(tp: type) -> dict[str, Any]:
    """A record's field types, worked out once per record type (a lock loads thousands of records)."""
    return typing.get_type_hints(tp)


def _load(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _load(args[0], value)
    if isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields"):
        if not isinstance(value, dict):
            raise TypeError(f"{tp.__name__} must be an object")
        hints = _hints(tp)
        kwargs = {}
        for name in tp._fields:
            key = _KEY.get(name, name)
            if key in value:
                kwargs[name] = _load(hints[name], value[key])
            elif name not in tp._field_defaults:
                raise KeyError(f"missing {tp.__name__.lower()} key {name!r}")
        return tp(**kwargs)
    if origin is tuple:
        (item,) = typing.get_args(tp)[:1]
        if not isinstance(value, list):
            raise TypeError("expected a list")
        return tuple(_load(item, v) for v in value)
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError("expected an object")
        return dict(value)
    if tp in (str, int, bool) and not isinstance(value, tp):
        raise TypeError(f"expected {tp.__name__}, got {type(value).__name__}")
    return value
