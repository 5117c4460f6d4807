"""Refresh catalogue rows from their upstreams (default: compat/frameworks.yaml from wheel metadata).

    python -m provision.matrix.refresh [--compat-dir compat]
                                       [--source frameworks|images|container-toolkit|cuda-redist|stacks|all]
                                       [--check] [--from RECORDED_COPY] [--source-key KEY]

``--source images`` (provision.matrix.refresh_images) and ``--source container-toolkit``
(provision.matrix.refresh_toolkit) compare compat/images.yaml and compat/container_toolkit.yaml
with NVIDIA's container-images repository and the toolkit's release tags; ``--source cuda-redist``
(provision.matrix.refresh_redist) compares compat/cuda.yaml's min_driver with the driver NVIDIA's
CUDA redistrib manifests bundle (up to 13.3; it reports new releases, never adds them: a row also
needs its repository OS list). ``--source stacks`` (provision.matrix.refresh_stacks) reads
compat/stacks.yaml's release rows from the stack packages' own files on the package index (ONNX
Runtime, TensorRT, Torch-TensorRT, DeepSpeed, Megatron-Core, Transformer Engine). ``--check`` prints a unified diff of the rows and exits 1 when
upstream moved; ``--from`` reads a recorded copy (tests/fixtures/refresh/<source>) instead of the
network. The rest of this text is the frameworks source.

For every release of each framework in compat/framework_variants.yaml it picks the Linux
x86_64 wheel on the package index (and, for PyTorch, on download.pytorch.org/whl/<variant>),
reads the wheel's METADATA (the PEP 658 ``.metadata`` file, or, where the index has none, the
METADATA member read out of the wheel with HTTP range requests) and records the exact CUDA
runtime and cuDNN pins it declares. A release's ``python`` range comes from the same index
listing: the CPython versions that have manylinux x86_64 wheels of the release (their ``cpXY``
tags), within the wheel's Requires-Python, written ``">=lowest,<highest+1"`` (Requires-Python
alone says nothing of the newest Python and can claim versions with no wheel). ``--check`` exits
1 when the committed file differs from what the indexes say now. Plans and tests never run
this: they read the committed output.
"""

from __future__ import annotations

import argparse
import datetime as dt
import email.parser
import http.client
import io
import json
import re
import struct
import sys
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from provision.errors import CompatDataError, InputError, ProvisionError, ToolingError

PYPI_SIMPLE = "https://pypi.org/simple"
PYTHON_TAGS = ("cp311", "cp312", "cp310", "cp313", "cp39", "cp38")
TIMEOUT = 60

Fetch = Callable[[str, dict[str, str]], bytes]


class RefreshError(InputError):
    """What a package index serves cannot be read into frameworks.yaml rows (exit 2)."""


class RefreshDataError(RefreshError):
    """framework_variants.yaml, the frameworks source's input, is unreadable or breaks its schema."""

    exit_code = 3


def http_fetch(url: str, headers: dict[str, str]) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": "provision-refresh/1", **headers})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
        return resp.read()


# -- index listing -------------------------------------------------------------------------
@dataclass(frozen=True)
class WheelFile:
    filename: str
    url: str
    version: str  # the public version, without the local "+cu124" part
    local: str | None


# name-version[-build]-python-abi-platform.whl (the wheel spec: no field holds a "-")
_WHEEL = re.compile(
    r"^(?P<name>[^-]+)-(?P<ver>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)


def list_wheels(index_url: str, package: str, fetch: Fetch, arch: str = "x86_64") -> list[WheelFile]:
    """Linux wheels of ``package`` for one CPU architecture (x86_64, aarch64) on a PEP 691 (JSON) or
    PEP 503 (HTML) index."""
    url = index_url.rstrip("/") + f"/{package}/"
    body = fetch(url, {"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.5"})
    files: list[tuple[str, str]] = []
    text = body.decode("utf-8", "replace")
    if text.lstrip().startswith("{"):
        doc = json.loads(text)
        files = [(f["filename"], f["url"]) for f in doc.get("files", [])]
    else:
        for href, name in re.findall(r'<a[^>]+href="([^"]+)"[^>]*>([^<]+)</a>', text):
            files.append((name.strip(), urllib.parse.urljoin(url, href.split("#")[0])))
    out = []
    for filename, file_url in files:
        m = _WHEEL.match(filename)
        if not m or arch not in m["plat"] or "linux" not in m["plat"]:
            continue
        ver, _, local = m["ver"].partition("+")
        out.append(WheelFile(filename, urllib.parse.urljoin(url, file_url), ver, local or None))
    return out


_CPYTHON = re.compile(r"cp(\d)(\d+)")


def python_range(filenames: list[str], requires_python: str | None, arch: str = "x86_64") -> str | None:
    """``">=3.X,<3.Y+1"`` over the CPython versions with a manylinux ``arch`` wheel among ``filenames``
    (one release's files on the index), keeping those ``requires_python`` admits. Free-threaded
    builds (ABI ``cp313t``) do not count: they do not install on the default interpreter. An
    ``abi3`` wheel serves its version and every later one: the range then has no upper bound.
    ``requires_python`` as is when no file names a CPython version."""
    allowed = SpecifierSet(requires_python or "")
    versions: set[tuple[int, int]] = set()
    open_ended = False
    for filename in filenames:
        m = _WHEEL.match(filename)
        if not m or "manylinux" not in m["plat"] or arch not in m["plat"] or m["abi"].endswith("t"):
            continue
        for tag in m["py"].split("."):
            cp = _CPYTHON.fullmatch(tag)
            if cp and allowed.contains(f"{cp[1]}.{cp[2]}"):
                versions.add((int(cp[1]), int(cp[2])))
                open_ended |= m["abi"] == "abi3"
    if not versions:
        return requires_python
    (lo_major, lo_minor), (hi_major, hi_minor) = min(versions), max(versions)
    if open_ended:
        return f">={lo_major}.{lo_minor}"
    return f">={lo_major}.{lo_minor},<{hi_major}.{hi_minor + 1}"


def pick_wheel(wheels: list[WheelFile], version: str, local: str | None) -> WheelFile | None:
    candidates = [w for w in wheels if w.version == version and w.local == local]
    for tag in PYTHON_TAGS:
        for w in candidates:
            if f"-{tag}-" in w.filename:
                return w
    return candidates[0] if candidates else None


# -- metadata --------------------------------------------------------------------------------
def wheel_metadata(
    wheel_url: str, fetch: Fetch, ranged: Callable[[str, int | None, int | None], bytes] | None
) -> tuple[str, str]:
    """(METADATA text, where it was read): PEP 658 first, then the wheel's zip by range."""
    try:
        return fetch(wheel_url + ".metadata", {}).decode("utf-8"), wheel_url + ".metadata"
    except urllib.error.HTTPError as exc:
        if exc.code != 404 or ranged is None:
            raise
    return metadata_from_zip(wheel_url, ranged), wheel_url


def http_range(url: str, start: int | None, end: int | None) -> bytes:
    spec = f"bytes=-{end}" if start is None else f"bytes={start}-{end}"
    return http_fetch(url, {"Range": spec})


def metadata_from_zip(url: str, ranged: Callable[[str, int | None, int | None], bytes]) -> str:
    """Read ``*.dist-info/METADATA`` from a remote zip with three range requests."""
    for entry in zip_entries(url, ranged):
        if re.fullmatch(r"[^/]+\.dist-info/METADATA", entry.name):
            return zip_member(url, ranged, entry, label="METADATA").decode("utf-8")
    raise RefreshError(f"{url}: no .dist-info/METADATA member")


@dataclass(frozen=True)
class ZipEntry:
    """One member of a remote zip, as its central directory lists it."""

    name: str
    method: int  # 0 stored, 8 deflated
    compressed_size: int
    size: int  # uncompressed
    header_offset: int  # where its local file header starts


def zip_entries(url: str, ranged: Callable[[str, int | None, int | None], bytes]) -> list[ZipEntry]:
    """The central directory of a remote zip, read with two range requests (the last 64 KiB, then
    the directory itself)."""
    tail = ranged(url, None, 65536)
    eocd = tail.rfind(b"PK\x05\x06")
    if eocd < 0:
        raise RefreshError(f"{url}: no zip end-of-central-directory record in the last 64 KiB")
    cd_size, cd_offset = struct.unpack("<II", tail[eocd + 12 : eocd + 20])
    cd = ranged(url, cd_offset, cd_offset + cd_size - 1)
    entries = []
    pos = 0
    while pos < len(cd) and cd[pos : pos + 4] == b"PK\x01\x02":
        (method,) = struct.unpack("<H", cd[pos + 10 : pos + 12])
        csize, usize = struct.unpack("<II", cd[pos + 20 : pos + 28])
        nlen, elen, clen = struct.unpack("<HHH", cd[pos + 28 : pos + 34])
        (local_off,) = struct.unpack("<I", cd[pos + 42 : pos + 46])
        name = cd[pos + 46 : pos + 46 + nlen].decode()
        pos += 46 + nlen + elen + clen
        entries.append(ZipEntry(name, method, csize, usize, local_off))
    return entries


def zip_data_offset(url: str, ranged: Callable[[str, int | None, int | None], bytes], entry: ZipEntry) -> int:
    """Where ``entry``'s (compressed) data starts: after its local header, whose name and extra
    field lengths may differ from the central directory's (one range request)."""
    head = ranged(url, entry.header_offset, entry.header_offset + 30 + 65535 - 1)
    lnlen, lelen = struct.unpack("<HH", head[26:30])
    return entry.header_offset + 30 + lnlen + lelen


def zip_member(
    url: str, ranged: Callable[[str, int | None, int | None], bytes], entry: ZipEntry, *, label: str | None = None
) -> bytes:
    """The uncompressed bytes of one member (two range requests: its local header, its data)."""
    start = zip_data_offset(url, ranged, entry)
    data = ranged(url, start, start + entry.compressed_size - 1)
    if entry.method == 8:
        return zlib.decompress(data, -15)
    if entry.method != 0:
        raise RefreshError(f"{url}: {label or entry.name} uses zip method {entry.method}")
    return data


_LINUX = {
    **default_environment(),
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
}


def cuda_pins(metadata: str, extra: str | None, machine: str = "x86_64") -> dict[str, str | None]:
    """CUDA runtime and cuDNN pins a wheel declares for Linux on ``machine`` (optionally under an extra)."""
    msg = email.parser.Parser().parsestr(metadata)
    env = dict(_LINUX, extra=extra or "", platform_machine=machine)
    runtime = cudnn = toolkit = None
    for line in msg.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        spec = str(req.specifier)
        exact = spec[2:] if spec.startswith("==") and "," not in spec else None
        name = req.name.lower()
        if re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", name):
            runtime = exact or spec
        elif re.fullmatch(r"nvidia-cudnn(-cu\d+)?", name):
            cudnn = exact or spec
        elif name == "cuda-toolkit" and "cudart" in req.extras:
            toolkit = exact or spec
    return {"cuda_runtime": runtime or toolkit, "cudnn": cudnn, "python": msg.get("Requires-Python")}


def _floor(pin: str) -> str | None:
    """The version a pin names: "9.1.0.70" itself, or the lower bound of ">=9.3.0.75,<10.0"."""
    if re.fullmatch(r"\d+(\.\d+)*", pin):
        return pin
    for spec in SpecifierSet(pin):
        if spec.operator in ("==", ">=", "~=", "==="):
            return spec.version.rstrip(".*")
    return None


def cuda_of(runtime: str) -> str:
    """Major.minor of a runtime pin: "12.4.127" -> "12.4"; ">=12.5.82,<13.0" -> "12.5"."""
    floor = _floor(runtime)
    m = re.match(r"(\d+)\.(\d+)", floor or "")
    if not m:
        raise RefreshError(f"cannot read a CUDA version from {runtime!r}")
    return f"{m[1]}.{m[2]}"


def variant_of(cuda: str) -> str:
    return "cu" + cuda.replace(".", "")


# -- the refresh -----------------------------------------------------------------------------
def refresh(compat: str | Path, fetch: Fetch = http_fetch, ranged=http_range, log=print) -> dict[str, Any]:
    compat = Path(compat)
    spec = _read_variants(compat)
    frameworks = []
    for fw in spec["frameworks"]:
        package = fw["package"]
        pypi = list_wheels(PYPI_SIMPLE, package, fetch)
        # the other host architectures whose wheels are read (framework_variants.yaml `arches`)
        other_arches = {a: list_wheels(PYPI_SIMPLE, package, fetch, a) for a in fw.get("arches", ["x86_64"])}
        other_arches.pop("x86_64", None)
        versions = sorted(
            {w.version for w in pypi if _final(w.version) and Version(w.version) >= Version(fw["first_release"])},
            key=Version,
            reverse=True,
        )
        variant_wheels: dict[str, list[WheelFile] | None] = {}
        releases = []
        for version in versions:
            line = _line_for(fw, version)
            documented = {b["variant"]: b for b in (line["builds"] if line else [])}
            builds: list[dict[str, Any]] = []
            default = pick_wheel(pypi, version, None)
            if default is not None:
                text, where = wheel_metadata(default.url, fetch, ranged)
                extra = "and-cuda" if "and-cuda" in documented else None
                pins = cuda_pins(text, extra)
                builds.append(
                    _build_from_metadata(fw, version, pins, where=where, documented=documented, line=line, default=True)
                )
                python = python_range(
                    [w.filename for w in pypi if w.version == version and w.local is None], pins["python"]
                )
                arch_python = _other_arches(
                    other_arches, version, builds[-1], extra=extra, fetch=fetch, ranged=ranged, log=log
                )
                _attach_arch_sms(builds[-1], documented, line)
            else:
                python, arch_python = None, {}
            for variant, doc in documented.items():
                if any(b["variant"] == variant for b in builds) or not fw.get("variant_index"):
                    continue
                index = fw["variant_index"].format(variant=variant)
                if variant not in variant_wheels:
                    try:
                        variant_wheels[variant] = list_wheels(index, package, fetch)
                    except (urllib.error.URLError, OSError) as exc:
                        log(f"  {index}: unreachable ({getattr(exc, 'reason', exc)}); keeping the documented build")
                        variant_wheels[variant] = None
                wheels = variant_wheels[variant]
                wheel = pick_wheel(wheels, version, variant) if wheels else None
                if wheel is not None:
                    text, where = wheel_metadata(wheel.url, fetch, ranged)
                    pins = cuda_pins(text, None)
                    row = _build_from_metadata(
                        fw, version, pins, where=where, documented=documented, line=line, default=False
                    )
                    row["index_url"] = index
                    builds.append(row)
                else:
                    builds.append(_documented_build(fw, variant, doc, line, index))
            if not builds:
                continue
            builds.sort(key=lambda b: (not b["default"], [-int(x) for x in b["cuda"].split(".")]))
            releases.append(
                {"version": version, "python": python, "python_aarch64": arch_python.get("aarch64"), "builds": builds}
            )
            log(f"{package} {version}: " + ", ".join(f"{b['variant']}{'*' if b['default'] else ''}" for b in builds))
        aliases = {"aliases": fw["aliases"]} if fw.get("aliases") else {}
        frameworks.append({"id": fw["id"], "name": fw["name"], "package": package, **aliases, "releases": releases})
    return {
        "generated_by": "python -m provision.matrix.refresh",
        "generated": dt.date.today().isoformat(),
        "frameworks": frameworks,
    }


def _other_arches(
    wheels: dict[str, list[WheelFile]], version: str, build: dict[str, Any], *, extra: str | None, fetch, ranged, log
) -> dict[str, str | None]:
    """The default build's other host architectures: one whose wheel, read for that machine, declares
    the same CUDA runtime line and cuDNN as the x86_64 wheel is the same CUDA build there (its arch is
    added to ``build["arches"]``); a wheel without them is a CPU build (torch <= 2.10 on aarch64).
    Returns each such architecture's Python range, from its own files on the index."""
    found: dict[str, str | None] = {}
    for arch, listed in wheels.items():
        wheel = pick_wheel(listed, version, None)
        if wheel is None:
            continue
        text, _ = wheel_metadata(wheel.url, fetch, ranged)
        there = cuda_pins(text, extra, machine=arch)
        same_cuda = there["cuda_runtime"] is not None and cuda_of(there["cuda_runtime"]) == build["cuda"]
        if not same_cuda or there["cudnn"] is None or _floor(there["cudnn"]) != build["cudnn"]:
            log(f"  {wheel.filename}: no CUDA {build['cuda']} build for {arch} (its metadata: {there})")
            continue
        build["arches"] = [*build["arches"], arch]
        found[arch] = python_range([w.filename for w in listed if w.version == version], there["python"], arch)
    return found


def _final(version: str) -> bool:
    try:
        v = Version(version)
    except InvalidVersion:
        return False
    return not (v.is_prerelease or v.is_devrelease or v.is_postrelease or v.local)


def _line_for(fw: dict[str, Any], version: str) -> dict[str, Any] | None:
    mm = ".".join(version.split(".")[:2])
    return next((ln for ln in fw["lines"] if ln["line"] == mm), None)


def _build_from_metadata(fw, version, pins, *, where, documented, line, default: bool) -> dict[str, Any]:
    runtime = pins["cuda_runtime"]
    if runtime is None:
        # No CUDA wheels declared (TensorFlow 2.12/2.13): the documented system-CUDA build.
        doc = next(iter(documented.values()), None)
        if doc is None or "cuda" not in doc:
            raise RefreshError(
                f"{fw['package']} {version}: metadata declares no CUDA runtime and no build is documented"
            )
        return {
            "variant": doc["variant"],
            "index_url": None,
            "default": default,
            "arches": ["x86_64"],
            "cuda": doc["cuda"],
            "cuda_runtime": None,
            "cudnn": doc["cudnn"],
            "libraries": "system",
            "extra": None,
            "compute_capabilities": doc["compute_capabilities"],
            "ptx": doc["ptx"],
            "arch_source": _arch_source(doc, line),
            "source": line["source"],
            "evidence": where,
        }
    cuda = cuda_of(runtime)
    variant = "and-cuda" if "and-cuda" in documented else variant_of(cuda)
    doc = documented.get(variant, {})
    row = {
        "variant": variant,
        "index_url": None,
        "default": default,
        "arches": ["x86_64"],
        "cuda": cuda,
        "cuda_runtime": runtime,
        "cudnn": _floor(pins["cudnn"]) if pins["cudnn"] else doc.get("cudnn"),
        "libraries": "wheels",
        "extra": "and-cuda" if variant == "and-cuda" else None,
        "compute_capabilities": doc.get("compute_capabilities"),
        "ptx": doc.get("ptx"),
        "arch_source": _arch_source(doc, line),
        "source": "pypi-wheel-metadata",
        "evidence": where,
    }
    if pins["cudnn"] and not _exact(pins["cudnn"]):
        # a range (TensorFlow 2.20: <10.0,>=9.3.0.75) stays a range: pip takes the newest cuDNN in it,
        # and `cudnn` is only its lower bound
        row["cudnn_spec"] = pins["cudnn"]
    return row


def _exact(pin: str) -> bool:
    """A pin that names one version: "9.1.0.70" (cuda_pins strips a lone ==), not a range."""
    return re.fullmatch(r"\d+(\.\d+)*", pin) is not None


def _attach_arch_sms(build: dict[str, Any], documented: dict[str, Any], line: dict[str, Any] | None) -> None:
    """The documented per-architecture SM sets (framework_variants.yaml ``arch_sms``) of the
    architectures the build's wheels were found for."""
    doc = documented.get(build["variant"], {})
    sms = {
        arch: {**entry, "arch_source": line["source"] if line and entry["compute_capabilities"] else None}
        for arch, entry in (doc.get("arch_sms") or {}).items()
        if arch in build["arches"]
    }
    if sms:
        build["arch_sms"] = sms


def _documented_build(fw, variant, doc, line, index) -> dict[str, Any]:
    cuda = doc.get("cuda") or f"{variant[2:-1]}.{variant[-1]}"
    return {
        "variant": variant,
        "index_url": index,
        "default": False,
        "arches": ["x86_64"],
        "cuda": cuda,
        "cuda_runtime": None,
        "cudnn": doc["cudnn"],
        "libraries": "wheels",
        "extra": None,
        "compute_capabilities": doc["compute_capabilities"],
        "ptx": doc["ptx"],
        "arch_source": _arch_source(doc, line),
        "source": line["source"],
        "evidence": None,
    }


def _arch_source(doc: dict[str, Any], line: dict[str, Any] | None) -> str | None:
    """Where the compiled-architecture list comes from (the documented line), when there is one."""
    if not doc or (doc.get("compute_capabilities") is None and doc.get("ptx") is None):
        return None
    return line["source"] if line else None


def _read_variants(compat: Path) -> Any:
    """compat/framework_variants.yaml, schema-checked (RefreshDataError, exit 3, when broken)."""
    try:
        spec = yaml.safe_load((compat / "framework_variants.yaml").read_bytes())
    except (OSError, yaml.YAMLError) as exc:
        raise RefreshDataError(f"framework_variants.yaml: cannot read ({_first_line(exc)})") from None
    _validate_input(compat, spec)
    return spec


def _validate_input(compat: str | Path, spec: Any) -> None:
    compat = Path(compat)
    import jsonschema

    try:
        schema = json.loads((compat / "schema" / "framework_variants.schema.json").read_bytes())
    except (OSError, ValueError) as exc:
        raise RefreshDataError(f"schema/framework_variants.schema.json: cannot read ({_first_line(exc)})") from None
    try:
        jsonschema.validate(spec, schema)
    except jsonschema.ValidationError as exc:
        path = ".".join(map(str, exc.absolute_path))
        raise RefreshDataError(f"framework_variants.yaml: {path}: {exc.message}") from None


def _first_line(exc: BaseException) -> str:
    return (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__).splitlines()[0]


def dump(doc: dict[str, Any]) -> str:
    header = (
        "# GENERATED by `python -m provision.matrix.refresh` from the wheels' own metadata\n"
        "# (compat/framework_variants.yaml lists what is queried). Do not edit by hand.\n"
        "# A build with source pypi-wheel-metadata carries the exact pins of the wheel named in\n"
        "# `evidence`; a build with another source could not be read and keeps the documented cuDNN.\n"
        "# python: the CPython versions that have manylinux x86_64 wheels of the release on the package\n"
        "# index (its file list, pypi-wheel-metadata), within the wheel's Requires-Python: lowest to\n"
        "# highest + 1 (torch 2.5 declares >=3.8.0 but has no cp38 wheel; torch <= 2.4 has no cp313).\n"
        "# arches: the host architectures the build's CUDA wheels are published for: aarch64 where the\n"
        "# release's aarch64 wheel, read for Linux aarch64, declares the same CUDA runtime and cuDNN\n"
        "# (pypi-wheel-metadata); python_aarch64: the CPython range of those aarch64 wheels.\n"
        "# cudnn_spec: the cuDNN requirement where the wheel declares a range (cudnn is then its lower\n"
        "# bound: pip installs the newest cuDNN inside it); absent: cudnn is the exact pin.\n"
        "# arch_sms: an architecture whose wheels carry another SM set than compute_capabilities/ptx\n"
        "# (framework_variants.yaml); null: not published for it.\n"
        "# aliases: other names --framework takes for the framework (framework_variants.yaml).\n"
    )
    out = io.StringIO()
    yaml.dump(doc, out, Dumper=_QuotedDumper, sort_keys=False, width=200, default_flow_style=None)
    return header + out.getvalue()


class _QuotedDumper(yaml.SafeDumper):
    """Every string double-quoted (versions stay strings: "12.10" is not 12.1); no anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.MappingNode:
    items = [
        (yaml.ScalarNode("tag:yaml.org,2002:str", key), dumper.represent_data(value)) for key, value in data.items()
    ]
    flow = all(not isinstance(v, (dict, list)) for v in data.values()) and len(data) <= 4
    return yaml.MappingNode("tag:yaml.org,2002:map", items, flow_style=flow)


_QuotedDumper.add_representer(
    str, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
)
_QuotedDumper.add_representer(dict, _represent_dict)
_QuotedDumper.add_representer(
    list,
    lambda dumper, value: dumper.represent_sequence(
        "tag:yaml.org,2002:seq", value, flow_style=all(isinstance(v, str) for v in value)
    ),
)


SOURCES = ("frameworks", "images", "container-toolkit", "cuda-redist", "stacks")
# what reading an upstream over the network raises when it cannot be reached (exit 4)
_UNREACHABLE = (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException)


def _unreachable(source: str, exc: BaseException) -> ToolingError:
    return ToolingError(
        f"{source}: upstream unreachable ({getattr(exc, 'reason', None) or _first_line(exc)})",
        hint="check the network, or read a recorded copy with --from",
    )


def _catalogue(compat: Path) -> dict[str, Any]:
    """The raw documents of compat/ after the loader's schema and invariant checks
    (CompatDataError, exit 3, when it does not load): a refresh starts from a catalogue that loads."""
    from provision.matrix.loader import load_checked

    return load_checked(compat)[1]


def _check_key(raw: dict[str, Any], key: str, where: str) -> None:
    if key not in raw["sources"]["sources"]:
        raise InputError(
            f"{where} {key}: not a key of compat/sources.yaml",
            hint="add the source to compat/sources.yaml, or name one with --source-key",
        )


def replace_checked(compat: Path, name: str, text: str) -> None:
    """Replace compat/<name> with ``text`` only if the whole catalogue, with it, loads and passes
    its invariants (checked in a temporary copy of compat/); the file is swapped atomically.
    Otherwise CompatDataError (exit 3) and the file is left as it was."""
    import os
    import shutil
    import stat
    import tempfile

    from provision.matrix.loader import load_checked

    target = compat / name
    with tempfile.TemporaryDirectory(prefix="provision-refresh-") as tmp:
        trial = Path(tmp) / "compat"
        shutil.copytree(compat, trial)
        (trial / name).write_text(text, encoding="utf-8")
        try:
            load_checked(trial)
        except CompatDataError as exc:
            raise CompatDataError(
                name,
                "",
                f"not written: with the refreshed rows the catalogue would not load: {exc.message}",
                hint="the upstream change needs a hand edit (compat/README.md); compat/ is unchanged",
            ) from None
    fd, staged = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=compat)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(staged, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(staged, target)
    except OSError as exc:
        Path(staged).unlink(missing_ok=True)
        raise InputError(f"cannot write {target}: {exc.strerror or exc}", hint="make compat/ writable") from None


def _checked(diff: list[str], out, err, *, file: str, upstream: str, drift: bool | None = None) -> int:
    """--check's answer: no drift (by default: no diff) is 0; drift prints the diff to ``out``,
    names it on ``err``, and is 1."""
    if not (bool(diff) if drift is None else drift):
        return 0
    out.writelines(diff)
    print(f"compat/{file} differs from {upstream}", file=err)
    return 1


def _frameworks(compat: Path, args: argparse.Namespace, out, err) -> int:
    try:
        doc = refresh(compat, log=lambda m: print(m, file=err))
    except _UNREACHABLE as exc:
        raise _unreachable("frameworks", exc) from None
    except (ValueError, zlib.error, struct.error) as exc:  # an index page or a wheel that does not parse
        raise RefreshError(f"frameworks: unreadable index page or wheel metadata ({_first_line(exc)})") from None
    target = compat / "frameworks.yaml"
    if args.check:
        import difflib

        try:
            old = yaml.safe_load(target.read_bytes())
        except (OSError, yaml.YAMLError) as exc:
            raise CompatDataError("frameworks.yaml", "", f"cannot read ({_first_line(exc)})") from None
        if not isinstance(old, dict):
            raise CompatDataError("frameworks.yaml", "", "not a mapping")
        old.pop("generated", None)
        new = dict(doc)
        new.pop("generated", None)
        strip = lambda d: [ln for ln in dump(d).splitlines(keepends=True) if not ln.startswith("#")]  # noqa: E731
        diff = (
            []
            if old == new
            else list(difflib.unified_diff(strip(old), strip(new), "compat/frameworks.yaml", "upstream"))
        )
        upstream = "the wheel metadata on the package indexes: run python -m provision.matrix.refresh"
        return _checked(diff, out, err, file="frameworks.yaml", upstream=upstream, drift=old != new)
    try:
        target.write_text(dump(doc))
    except OSError as exc:
        raise InputError(f"cannot write {target}: {exc.strerror or exc}", hint="make compat/ writable") from None
    print(f"wrote {target}", file=err)
    return 0


def _images(compat: Path, args: argparse.Namespace, out, err) -> int:
    from provision.matrix import refresh_images as ri

    raw = _catalogue(compat)
    if args.recorded is not None:
        get, owned = ri.recorded_get(args.recorded), ri.recorded_key(args.recorded)
    else:
        get, owned = ri.live_get(http_fetch), ri.LIVE_KEYS
    try:
        if args.check:
            upstream = "NVIDIA's container-images repository"
            return _checked(ri.check(compat, get, owned), out, err, file="images.yaml", upstream=upstream)
        if args.source_key is None and args.recorded is None:
            raise InputError(
                "images: name the compat/sources.yaml key of what you read",
                hint="pass --source-key KEY (a key of compat/sources.yaml)",
            )
        key = args.source_key or owned
        _check_key(raw, key, "--source-key" if args.source_key else f"{args.recorded / 'SOURCE.txt'}: key")
        text, notes = ri.write(compat, get, owned, key)
    except _UNREACHABLE as exc:
        raise _unreachable("images", exc) from None
    if text is not None:
        replace_checked(compat, "images.yaml", text)
    for note in notes:
        print(f"  {note}", file=err)
    print(f"{'wrote' if text is not None else 'unchanged:'} {compat / 'images.yaml'}", file=err)
    return 0


def _toolkit(compat: Path, args: argparse.Namespace, out, err) -> int:
    from provision.matrix import refresh_toolkit as rt

    raw = _catalogue(compat)
    listing = rt.recorded_listing(args.recorded) if args.recorded is not None else rt.live_listing()
    if args.check:
        upstream = "the toolkit's release tags"
        return _checked(rt.check(compat, listing), out, err, file="container_toolkit.yaml", upstream=upstream)
    key = args.source_key or "nvidia-container-toolkit"
    _check_key(raw, key, "--source-key" if args.source_key else "source key")
    text = rt.write(compat, listing, key)
    if text is not None:
        replace_checked(compat, "container_toolkit.yaml", text)
    print(f"{'wrote' if text is not None else 'unchanged:'} {compat / 'container_toolkit.yaml'}", file=err)
    return 0


def _redist(compat: Path, args: argparse.Namespace, out, err) -> int:
    from provision.matrix import refresh_redist as rr

    raw = _catalogue(compat)
    try:
        upstream = rr.recorded(args.recorded) if args.recorded is not None else rr.live(http_fetch)
        report = rr.compare(raw["cuda"], rr.read_manifests(upstream, rr.oldest(raw["cuda"])))
    except _UNREACHABLE as exc:
        raise _unreachable("cuda-redist", exc) from None
    key = args.source_key or rr.DEFAULT_KEY
    if report.changed and not args.check:
        _check_key(raw, key, "--source-key" if args.source_key else "source key")
    for note in report.notes:
        print(f"  {note}", file=err)
    if args.check:
        upstream = "NVIDIA's CUDA redistrib manifests"
        return _checked(report.diff, out, err, file="cuda.yaml", upstream=upstream, drift=report.drift)
    text = None
    if report.changed:
        out.writelines(report.diff)  # what is rewritten is shown, never silent
        text = rr.write(compat, report, key)
        replace_checked(compat, "cuda.yaml", text)
    print(f"{'wrote' if text is not None else 'unchanged:'} {compat / 'cuda.yaml'}", file=err)
    return 0


def _stacks(compat: Path, args: argparse.Namespace, out, err) -> int:
    from provision.matrix import refresh_stacks as rs

    raw = _catalogue(compat)
    if args.recorded is not None:
        upstream, generated = rs.Recorded(args.recorded), rs.recorded_date(args.recorded)
    else:
        upstream, generated = rs.Live(), dt.date.today().isoformat()
    notes: list[str] = []  # printed once the run succeeded: a failed one prints its one error line only
    try:
        doc = rs.refresh(raw["stacks"], upstream, generated=generated, log=notes.append)
    except _UNREACHABLE as exc:
        raise _unreachable("stacks", exc) from None
    diff = rs.check(raw["stacks"], doc)
    if args.check:
        err.writelines(f"{note}\n" for note in notes)
        upstream_text = "the stack packages' files on the package index" + (
            f" (recorded copy {args.recorded})" if args.recorded is not None else ""
        )
        return _checked(diff, out, err, file=rs.FILE, upstream=upstream_text)
    stale = diff or not (compat / rs.FILE).read_text(encoding="utf-8").startswith(rs.HEADER)
    if stale:  # new rows, or the header that describes them
        replace_checked(compat, rs.FILE, rs.dump(doc))
    err.writelines(f"{note}\n" for note in notes)
    print(f"{'wrote' if stale else 'unchanged:'} {compat / rs.FILE}", file=err)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Exit 0 done (or no drift), 1 ``--check`` found drift, 2 bad input (arguments, a recorded
    copy, what upstream serves), 3 a broken catalogue, 4 upstream unreachable. Every error is one
    ``error: … (hint: …)`` line on stderr."""
    parser = argparse.ArgumentParser(prog="python -m provision.matrix.refresh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--compat-dir", default=None, help="compat/ directory (default: the project's)")
    parser.add_argument(
        "--source",
        choices=(*SOURCES, "all"),
        default="frameworks",
        help="which upstream: frameworks (wheel metadata -> frameworks.yaml, the default), images "
        "(NVIDIA's container-images repository -> images.yaml), container-toolkit (its release tags -> "
        "container_toolkit.yaml), cuda-redist (NVIDIA's CUDA redistrib manifests -> cuda.yaml min_driver), stacks "
        "(the stack packages' files on the package index -> stacks.yaml releases), or all",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing: print a unified diff of the rows upstream would change and exit 1, or exit 0",
    )
    parser.add_argument(
        "--from",
        dest="recorded",
        type=Path,
        default=None,
        metavar="DIR",
        help="read a recorded copy of the upstream (tests/fixtures/refresh/<source>) instead of the network "
        "(images, container-toolkit, cuda-redist, stacks)",
    )
    parser.add_argument(
        "--source-key",
        default=None,
        help="compat/sources.yaml key that changed rows cite (images from the network: required)",
    )
    parser.epilog = (
        "exit status: 0 done, 1 --check found drift, 2 bad input (arguments, a recorded copy, what "
        "upstream serves), 3 a broken catalogue (nothing written), 4 upstream unreachable"
    )
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except ProvisionError as exc:
        return _report(exc)


def _report(exc: ProvisionError) -> int:
    """One ``error: … (hint: …)`` line on stderr; the error's exit code."""
    hint = f" (hint: {exc.hint})" if exc.hint else ""
    print(" ".join(f"error: {exc.message}{hint}".split()), file=sys.stderr)
    return exc.exit_code


def _run(args: argparse.Namespace) -> int:
    from provision.resources import compat_dir

    compat = Path(compat_dir(args.compat_dir))
    sources = SOURCES if args.source == "all" else (args.source,)
    if args.recorded is not None:
        if len(sources) != 1 or sources[0] == "frameworks":
            raise InputError(
                "--from reads one recorded copy",
                hint="use it with --source images, container-toolkit, cuda-redist or stacks",
            )
        if not (args.recorded / "SOURCE.txt").is_file():
            raise InputError(
                f"--from {args.recorded}: not a recorded copy (no SOURCE.txt)",
                hint="point --from at a directory like tests/fixtures/refresh/<source>",
            )
    if args.source_key is not None:
        _check_key(_sources(compat), args.source_key, "--source-key")
    run = {
        "frameworks": _frameworks,
        "images": _images,
        "container-toolkit": _toolkit,
        "cuda-redist": _redist,
        "stacks": _stacks,
    }
    worst = 0
    for name in sources:
        try:
            code = run[name](compat, args, sys.stdout, sys.stderr)
        except ProvisionError as exc:
            if len(sources) == 1:
                raise
            code = _report(exc)  # --source all: report it and go on with the next source
        worst = max(worst, code)
    return worst


def _sources(compat: Path) -> dict[str, Any]:
    """{"sources": compat/sources.yaml} as the loader reads and schema-checks it (exit 3 if broken)."""
    from provision.matrix.loader import _read_bytes, _validate

    try:
        doc = yaml.load(_read_bytes(str(compat / "sources.yaml")), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError) as exc:
        raise CompatDataError("sources.yaml", "", f"cannot read ({_first_line(exc)})") from None
    _validate(compat, "sources", doc)
    return {"sources": doc}


if __name__ == "__main__":
    raise SystemExit(main())
