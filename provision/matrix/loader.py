"""compat/*.yaml -> JSON Schema check -> model objects -> invariant check -> Matrix.

Every problem is a ``CompatDataError`` naming the file and the key path (exit code 3).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

from provision.errors import CompatDataError
from provision.matrix import model as m
from provision.versions import parse_specifier, parse_version

FILES = (
    "sources",
    "os",
    "gpus",
    "drivers",
    "cuda",
    "cudnn",
    "frameworks",
    "images",
    "container_toolkit",
    "mig",
    "unsupported",
    "stacks",
    "platforms",
)


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def read_raw(compat: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and schema-check every data file; returns {name: parsed document}."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    raw: dict[str, Any] = {}
    for name in FILES:
        path = os.path.join(compat, f"{name}.yaml")
        try:
            text = _read_bytes(path)
        except OSError as exc:
            raise CompatDataError(f"{name}.yaml", "", f"cannot read ({exc.strerror or exc})") from None
        try:
            doc = yaml.load(text, Loader=loader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise CompatDataError(f"{name}.yaml", where, f"invalid YAML: {problem}") from None
        _validate(compat, name, doc)
        raw[name] = doc
    return raw


def _validate(compat: str | os.PathLike[str], name: str, doc: Any) -> None:
    import jsonschema

    schema_path = os.path.join(compat, "schema", f"{name}.schema.json")
    try:
        schema = json.loads(_read_bytes(schema_path))
    except (OSError, ValueError) as exc:
        raise CompatDataError(f"schema/{name}.schema.json", "", f"unreadable schema ({exc})") from None
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        err = errors[0]
        raise CompatDataError(f"{name}.yaml", key_path(doc, list(err.absolute_path)), _short(err))


def _short(err: Any) -> str:
    if err.validator == "type" and err.validator_value == "string":
        return f"{err.instance!r} must be a quoted string (YAML reads unquoted 12.10 as 12.1)"
    if err.validator == "additionalProperties":
        return err.message.replace("Additional properties are not allowed", "unknown key")
    return err.message


def key_path(doc: Any, path: list[Any]) -> str:
    """``gpus[3](a100-pcie).memory``: list indexes annotated with the item's id when it has one."""
    out = ""
    node = doc
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            ident = None
            if isinstance(node, dict):
                ident = node.get("id") or node.get("version") or node.get("branch")
            if ident is not None:
                out += f"({ident})"
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out


def load_matrix(compat: str | os.PathLike[str]) -> m.Matrix:
    """Load compat/ into a Matrix; raise CompatDataError on the first problem found."""
    return load_checked(compat)[0]


def load_checked(compat: str | os.PathLike[str]) -> tuple[m.Matrix, dict[str, Any]]:
    """(matrix, raw documents) after schema and invariant checks."""
    from provision.matrix.invariants import check_invariants

    raw = read_raw(compat)
    matrix = build(raw)
    problems = check_invariants(matrix, raw)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more; run provision matrix check)" if len(problems) > 1 else ""
        raise CompatDataError(first.file, first.key_path, first.problem + more)
    matrix = attach_hashes(matrix, {f"{n}.yaml": _read_bytes(os.path.join(compat, f"{n}.yaml")) for n in FILES})
    return matrix, raw


def attach_hashes(matrix: m.Matrix, contents: dict[str, bytes]) -> m.Matrix:
    hashes = tuple((name, hashlib.sha256(data).hexdigest()) for name, data in sorted(contents.items()))
    return matrix._replace(files=hashes)


def _v(file: str, path: str, text: str):
    try:
        return parse_version(text)
    except ValueError as exc:
        raise CompatDataError(file, path, str(exc)) from None


def _spec(file: str, path: str, text: str):
    try:
        return parse_specifier(text)
    except ValueError as exc:
        raise CompatDataError(file, path, str(exc)) from None


# From a YAML item to a model record --------------------------------------------------------
#
# A record is declared as its NamedTuple plus how the fields that are not plain copies of the
# same-named key are made. A field converter is called as ``convert(item, key, file, at)``:
# ``item`` the YAML mapping, ``key`` the model field's name, ``file`` and ``at`` (the item's key
# path, ``releases[3]``) name the place in a CompatDataError.

Item = dict[str, Any]
Convert = Callable[[Item, str, str, str], Any]
Record = Callable[[Item, str, str], Any]  # (item, file, key path of the item) -> model record


def _record(cls: type[Any], **converters: Convert) -> Record:
    """How to make ``cls`` from one YAML item: fields not named here copy ``item[field]``.

    Fields are made in the model's order, so the first bad value in an item is the one reported.
    """
    unknown = set(converters) - set(cls._fields)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
    fields = tuple((name, converters.get(name)) for name in cls._fields)
    new = tuple.__new__  # every field is given, in order: what the NamedTuple's own __new__ does

    def make(item: Item, file: str, at: str) -> Any:
        return new(cls, [item[key] if convert is None else convert(item, key, file, at) for key, convert in fields])

    return make


def _rows(record: Record, file: str, key: str, items: list[Item]) -> tuple[Any, ...]:
    """Every item of the top-level list ``key``, in file order."""
    return tuple(record(item, file, f"{key}[{i}]") for i, item in enumerate(items))


# Field converters: the conversions every file repeats.


def _tuple(item: Item, key: str, file: str, at: str) -> tuple[Any, ...]:
    return tuple(item[key])


def _tuple_or_none(item: Item, key: str, file: str, at: str) -> tuple[Any, ...] | None:
    return tuple(item[key]) if item[key] else None


def _optional(item: Item, key: str, file: str, at: str) -> Any:
    """A key the schema lets a file leave out."""
    return item.get(key)


def _int(item: Item, key: str, file: str, at: str) -> int:
    return int(item[key])


def _version(item: Item, key: str, file: str, at: str):
    return _v(file, f"{at}.{key}", item[key])


def _version_or_none(item: Item, key: str, file: str, at: str):
    return _v(file, f"{at}.{key}", item[key]) if item[key] else None


def _specifier(item: Item, key: str, file: str, at: str):
    return _spec(file, f"{at}.{key}", item[key])


def _in(block: str, key: str) -> Convert:
    """``item[block][key]``: a field kept in a nested mapping (gpus' ``memory.size_gb``)."""
    return lambda item, _name, _file, _at: item[block][key]


def _in_nullable(block: str, key: str, *, block_optional: bool = False) -> Convert:
    """``item[block][key]`` or None where the block is null (or, with block_optional, left out)."""
    if block_optional:
        return lambda item, _name, _file, _at: (item.get(block) or {}).get(key)
    return lambda item, _name, _file, _at: (item[block] or {}).get(key)


def _rows_in(record: Record) -> Convert:
    """A nested list of records (a driver branch's releases): key paths ``at.key[j]``."""

    def convert(item: Item, key: str, file: str, at: str) -> tuple[Any, ...]:
        return tuple(record(sub, file, f"{at}.{key}[{j}]") for j, sub in enumerate(item[key]))

    return convert


def _rows_in_optional(record: Record) -> Convert:
    """A nested list of records the file may leave out (a GPU's module_options): () where absent."""
    rows = _rows_in(record)
    return lambda item, key, file, at: rows(item, key, file, at) if item.get(key) else ()


def _nested_optional(record: Record) -> Convert:
    """A nested mapping made into a record (key path ``at.key``), None where the file leaves it out."""

    def convert(item: Item, key: str, file: str, at: str) -> Any:
        return record(item[key], file, f"{at}.{key}") if item.get(key) is not None else None

    return convert


def _arch_map(item: Item, key: str, file: str, at: str) -> tuple[tuple[str, str], ...]:
    """os.yaml ``arches`` (host architecture -> repository directory); absent: x86_64 only."""
    found = item.get(key)
    return tuple(found.items()) if found else ((m.DEFAULT_ARCH, m.DEFAULT_ARCH),)


def _arches(item: Item, key: str, file: str, at: str) -> tuple[str, ...]:
    """A list of host architectures; absent: x86_64 only."""
    return tuple(item[key]) if item.get(key) else (m.DEFAULT_ARCH,)


def _names_optional(item: Item, key: str, file: str, at: str) -> tuple[str, ...]:
    """A list of names the schema lets a file leave out: () when absent."""
    return tuple(item.get(key) or ())


def _tuple_optional(item: Item, key: str, file: str, at: str) -> tuple[Any, ...] | None:
    return tuple(item[key]) if item.get(key) else None


def _file_wide(doc: Item, convert: Callable[[Any], Any] | None = None) -> Convert:
    """A value the file states once for all its items (container_toolkit's packages)."""
    if convert is None:
        return lambda _item, key, _file, _at: doc[key]
    return lambda _item, key, _file, _at: convert(doc[key])


def _image_cudnn_os(item: Item, key: str, file: str, at: str) -> tuple[str, ...] | None:
    cudnn = item["cudnn"]
    return tuple(cudnn["os"]) if cudnn and "os" in cudnn else None


def _image_superseded_by(item: Item, key: str, file: str, at: str):
    eol = item.get("eol")
    return _v(file, f"{at}.eol.superseded_by", eol["superseded_by"]) if eol and eol["superseded_by"] else None


def _image_toolkit(item: Item, key: str, file: str, at: str):
    """The toolkit release an image set carries: `toolkit.version`, or absent: its own number."""
    toolkit = item.get("toolkit")
    if toolkit is None:
        return _v(file, f"{at}.cuda", item["cuda"])
    return _v(file, f"{at}.toolkit.version", toolkit["version"])


# What each record is made of -----------------------------------------------------------------

_OS_RELEASE = _record(
    m.OsRelease, aliases=_tuple, kernel_headers=_tuple, cuda_image_note=_optional, sources=_tuple, arches=_arch_map
)
_ARCHITECTURE = _record(m.Architecture, compute_capabilities=_tuple, kernel_modules=_tuple, sources=_tuple)
_MODULE_OPTION = _record(m.ModuleOption, min_branch=_int, sources=_tuple)
_GPU = _record(
    m.Gpu,
    aliases=_tuple,
    memory_gb=_in("memory", "size_gb"),
    memory_type=_in("memory", "type"),
    memory_bandwidth_gbs=_in("memory", "bandwidth_gbs"),
    fp16_tflops=_in("tensor_tflops", "fp16"),
    bf16_tflops=_in("tensor_tflops", "bf16"),
    fp8_tflops=_in("tensor_tflops", "fp8"),
    nvlink_generation=_in_nullable("nvlink", "generation"),
    nvlink_bandwidth_gbs=_in_nullable("nvlink", "bandwidth_gbs"),
    pci_device_ids=_tuple,
    min_driver=_version_or_none,
    sources=_tuple,
    pcie_generation=_in_nullable("pcie", "generation", block_optional=True),
    pcie_bandwidth_gbs=_in_nullable("pcie", "bandwidth_gbs", block_optional=True),
    nvswitch_generation=_optional,
    host_arches=_arches,
    kernel_modules=_tuple_optional,
    module_options=_rows_in_optional(_MODULE_OPTION),
)
_GPU_GROUP = _record(m.GpuGroup, members=_tuple)
_DRIVER_RELEASE = _record(m.DriverRelease, version=_version, date=_optional, os=_tuple)
_DRIVER_BRANCH = _record(
    m.DriverBranch, branch=_int, kernel_modules=_tuple, releases=_rows_in(_DRIVER_RELEASE), sources=_tuple
)
_SUBNET_MANAGER_PACKAGES = _record(m.SubnetManagerPackages, packages=_tuple, requires=_tuple)
_DRIVER_PACKAGING = _record(
    m.DriverPackaging,
    os=_tuple,
    branches=_specifier,
    packages=_tuple,
    fabric_manager=_tuple,
    sources=_tuple,
    subnet_manager=_nested_optional(_SUBNET_MANAGER_PACKAGES),
)
_SUBNET_MANAGER = _record(m.SubnetManager, kernel_modules=_tuple, sources=_tuple)
_CUDA_RELEASE = _record(m.CudaRelease, version=_version, min_driver=_version, os=_tuple)
_COMPUTE_SUPPORT = _record(m.ComputeSupport, cuda=_specifier)
_MINOR_COMPAT = _record(m.MinorCompat, min_driver=_version)
_FORWARD_COMPAT = _record(m.ForwardCompat, branches=_tuple)
_CUDNN_BUILD = _record(m.CudnnBuild, cuda=_specifier, min_driver=_version, compute_capabilities=_tuple)
_CUDNN_RELEASE = _record(m.CudnnRelease, version=_version, builds=_rows_in(_CUDNN_BUILD))


def _specifier_optional(item: Item, key: str, file: str, at: str):
    """A specifier the file may leave out or set null: None there."""
    return _spec(file, f"{at}.{key}", item[key]) if item.get(key) else None


def _arch_sms(item: Item, key: str, file: str, at: str) -> tuple[Any, ...]:
    """frameworks.yaml ``arch_sms`` ({aarch64: {compute_capabilities, ptx, arch_source}}) as
    (arch, compute_capabilities, ptx, arch_source) rows; () where absent."""
    return tuple(
        (
            arch,
            tuple(sms["compute_capabilities"]) if sms["compute_capabilities"] else None,
            sms["ptx"],
            sms["arch_source"],
        )
        for arch, sms in (item.get(key) or {}).items()
    )


_FRAMEWORK_BUILD = _record(
    m.FrameworkBuild,
    compute_capabilities=_tuple_or_none,
    arches=_arches,
    cudnn_spec=_specifier_optional,
    arch_sms=_arch_sms,
)
_FRAMEWORK_RELEASE = _record(
    m.FrameworkRelease, version=_version, builds=_rows_in(_FRAMEWORK_BUILD), python_aarch64=_optional
)
_FRAMEWORK = _record(m.Framework, releases=_rows_in(_FRAMEWORK_RELEASE), aliases=_names_optional)
_IMAGE_RELEASE = _record(
    m.ImageRelease,
    cuda=_version,
    os=_tuple,
    flavours=_tuple,
    cudnn_version=_in_nullable("cudnn", "version"),
    cudnn_marker=_in_nullable("cudnn", "marker"),
    cudnn_os=_image_cudnn_os,
    eol_date=_in_nullable("eol", "date", block_optional=True),
    superseded_by=_image_superseded_by,
    eol_source=_in_nullable("eol", "source", block_optional=True),
    platforms=lambda item, _key, _file, _at: (
        tuple(item["platforms"]["values"]) if item.get("platforms") else (m.PLATFORMS[m.DEFAULT_ARCH],)
    ),
    platforms_source=_in_nullable("platforms", "source", block_optional=True),
    toolkit=_image_toolkit,
    cublas=_in_nullable("toolkit", "cublas", block_optional=True),
    toolkit_source=_in_nullable("toolkit", "source", block_optional=True),
)
_MIG_PROFILE = _record(m.MigProfile, placements=_tuple)
_MIG_PROFILE_SET = _record(m.MigProfileSet, profiles=_rows_in(_MIG_PROFILE), sources=_tuple)
_EXCLUSION = _record(m.Exclusion)


def _pairs(item: Item, key: str, file: str, at: str) -> tuple[tuple[str, Any], ...]:
    """A mapping as (key, value) pairs, in file order (value lists as tuples)."""
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in item[key].items())


def _nvcc_minor_table(item: Item, key: str, file: str, at: str) -> tuple[tuple[int, tuple[str, ...]], ...] | None:
    table = item[key]
    return None if table is None else tuple((int(major), tuple(minors)) for major, minors in table.items())


def _feature_alternatives(item: Item, key: str, file: str, at: str) -> tuple[tuple[str, Any], ...]:
    return tuple(
        (alt["sm"], _v(file, f"{at}.{key}[{i}].cuda", alt["cuda"]) if alt["cuda"] else None)
        for i, alt in enumerate(item[key])
    )


_SDIST_NEEDS = _record(m.SdistNeeds, needs=_tuple, note=_optional, sources=_tuple)
_STACK_RUNTIME = _record(m.StackRuntime, note=_optional, sources=_tuple)
_STACK_DISTRIBUTION = _record(m.StackDistribution, build=_nested_optional(_SDIST_NEEDS))
_STACK_FLAVOUR = _record(m.StackFlavour)
_STACK_RULE = _record(m.StackRule, releases=_specifier, sm_floor=_optional, note=_optional)
_STACK_FEATURE = _record(m.StackFeature, releases=_specifier, any_of=_feature_alternatives)
_STACK_BUILD = _record(
    m.StackBuild,
    distributions=lambda item, _key, _file, _at: tuple((d["pip"], d["artefact"]) for d in item["distributions"]),
    arches=_tuple,
    manylinux=_pairs,
    cudnn_spec=_specifier_optional,
    cudnn_min=_version_or_none,
    sonames=_pairs,
    requires=_pairs,
    build_requires=lambda item, key, _file, _at: tuple(item[key]) if item[key] is not None else None,
    nvcc_minor_mismatch_ok=_nvcc_minor_table,
    evidence=_tuple,
)
_STACK_RELEASE = _record(m.StackRelease, version=_version, post=_tuple, extras=_pairs, builds=_rows_in(_STACK_BUILD))
_STACK_PACKAGE = _record(
    m.StackPackage,
    first_release=_version,
    distributions=_rows_in(_STACK_DISTRIBUTION),
    flavours=_rows_in(_STACK_FLAVOUR),
    runtime=_nested_optional(_STACK_RUNTIME),
    documented=_rows_in(_STACK_RULE),
    features=_rows_in(_STACK_FEATURE),
    releases=_rows_in(_STACK_RELEASE),
)


def _topology(item: Item, key: str, file: str, at: str) -> tuple[str, ...]:
    """``topology: {gpu_pairs: [...]}`` as the relations; () where the row has none."""
    return tuple((item.get("topology") or {}).get("gpu_pairs") or ())


def _dmi(block: str, field: str) -> Convert:
    return lambda item, _key, _file, _at: tuple((item.get(block) or {}).get(field) or ())


def _pairs_of_lists(item: Item, key: str, file: str, at: str) -> tuple[tuple[str, Any], ...]:
    """A mapping the row may leave out, as (key, value) pairs in file order (lists as tuples)."""
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in (item.get(key) or {}).items())


_PLATFORM_VARIANT = _record(
    m.PlatformVariant,
    gpus=_tuple,
    nvswitch_generation=_optional,
    nvswitch_count=_optional,
    topology=_topology,
    pcie_generation=_in_nullable("pcie", "generation", block_optional=True),
    pcie_width=_in_nullable("pcie", "width", block_optional=True),
    sources=_tuple,
)
_PLATFORM_DOUBT = _record(m.PlatformDoubt, fields=_tuple)
_PLATFORM = _record(
    m.Platform,
    aliases=_tuple,
    gpus=lambda item, _key, _file, _at: tuple(item["gpus"]["ids"]),
    gpu_count=_in_nullable("gpus", "count"),
    gpu_count_is=_in_nullable("gpus", "count_is"),
    form_factors=lambda item, _key, _file, _at: tuple(item["gpus"]["form_factor"]),
    interconnect=_in_nullable("interconnect", "kind", block_optional=True),
    interconnect_optional=lambda item, _key, _file, _at: bool((item.get("interconnect") or {}).get("optional")),
    nvswitch_generation=_in_nullable("interconnect", "nvswitch_generation", block_optional=True),
    nvswitch_count=_in_nullable("interconnect", "nvswitch_count", block_optional=True),
    variants=_rows_in_optional(_PLATFORM_VARIANT),
    topology=_topology,
    pcie_generation=_in_nullable("pcie", "generation", block_optional=True),
    pcie_width=_in_nullable("pcie", "width", block_optional=True),
    psu_count=_in_nullable("psus", "count", block_optional=True),
    psu_redundancy=_in_nullable("psus", "redundancy", block_optional=True),
    inlet_min_c=_in_nullable("inlet_c", "min", block_optional=True),
    inlet_max_c=_in_nullable("inlet_c", "max", block_optional=True),
    dmi_vendor=_dmi("dmi", "vendor"),
    dmi_product=_dmi("dmi", "product"),
    dmi_family=_dmi("dmi", "family"),
    dmi_unverified=lambda item, _key, file, at: _pairs_of_lists(item, "dmi_unverified", file, at),
    evidence=_pairs_of_lists,
    doubts=_rows_in_optional(_PLATFORM_DOUBT),
    left_out=_pairs_of_lists,
    sources=_tuple,
)


def _toolkit_release(doc: Item) -> Record:
    """container_toolkit.yaml names its packages and repository revision once, for every release."""
    return _record(m.ToolkitRelease, version=_version, packages=_file_wide(doc, tuple), revision=_file_wide(doc))


def build_stacks(doc: dict[str, Any]) -> tuple[m.StackPackage, ...]:
    """stacks.yaml's package kinds (the validated-data cache builds them only when asked: LazyStacks)."""
    return _rows(_STACK_PACKAGE, "stacks.yaml", "packages", doc["packages"])


def build_stack(item: dict[str, Any], i: int) -> m.StackPackage:
    """One package kind of stacks.yaml (``packages[i]``), as build_stacks makes it."""
    return _STACK_PACKAGE(item, "stacks.yaml", f"packages[{i}]")


def build(raw: dict[str, Any], *, stacks: m.LazyStacks | None = None) -> m.Matrix:
    """Turn schema-valid documents into the model (versions parsed here, once).

    Read as a table: each Matrix field, the file and list it comes from, the record it is made of.
    ``stacks``: the stack packages made elsewhere (the cache's LazyStacks); by default built from
    ``raw["stacks"]``.
    """

    def rows(name: str, key: str, record: Record) -> tuple[Any, ...]:
        return _rows(record, f"{name}.yaml", key, raw[name][key])

    return m.Matrix(
        sources={
            key: m.Source(key, s["title"], s["url"], s["retrieved"], s["kind"])
            for key, s in raw["sources"]["sources"].items()
        },
        os_releases=rows("os", "os", _OS_RELEASE),
        architectures=rows("gpus", "architectures", _ARCHITECTURE),
        gpus=rows("gpus", "gpus", _GPU),
        gpu_groups=rows("gpus", "groups", _GPU_GROUP),
        drivers=rows("drivers", "branches", _DRIVER_BRANCH),
        driver_packaging=rows("drivers", "packaging", _DRIVER_PACKAGING),
        cuda=rows("cuda", "releases", _CUDA_RELEASE),
        compute_support=rows("cuda", "compute_capabilities", _COMPUTE_SUPPORT),
        minor_compat=rows("cuda", "minor_version_compatibility", _MINOR_COMPAT),
        forward_compat=rows("cuda", "forward_compatibility", _FORWARD_COMPAT),
        cudnn=rows("cudnn", "releases", _CUDNN_RELEASE),
        frameworks=rows("frameworks", "frameworks", _FRAMEWORK),
        images=rows("images", "releases", _IMAGE_RELEASE),
        toolkit=rows("container_toolkit", "releases", _toolkit_release(raw["container_toolkit"])),
        mig=rows("mig", "profile_sets", _MIG_PROFILE_SET),
        exclusions=rows("unsupported", "unsupported", _EXCLUSION),
        image_repository=raw["images"]["repository"],
        as_of=dt.date.fromisoformat(_full_date(raw["drivers"]["as_of"])),
        subnet_manager=_SUBNET_MANAGER(raw["drivers"]["subnet_manager"], "drivers.yaml", "subnet_manager")
        if raw["drivers"].get("subnet_manager")
        else None,
        stacks=stacks if stacks is not None else build_stacks(raw["stacks"]),
        platforms=rows("platforms", "platforms", _PLATFORM),
    )


def _full_date(text: str) -> str:
    return text if len(text) == 10 else f"{text}-01"
