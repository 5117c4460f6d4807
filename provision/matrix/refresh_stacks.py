"""The ``stacks`` refresh source: compat/stacks.yaml's release rows from the stack packages' own
files on the package index (ONNX Runtime GPU, TensorRT, Torch-TensorRT, DeepSpeed, Megatron-Core,
Transformer Engine).

compat/stacks.yaml holds one description per package kind (written by hand: its pip names, what
each distribution is and what building an sdist of it needs, the facts NVIDIA's documents give
and no file of the package says, with their sources) and, under each, ``releases`` (written
here). For every final release from the kind's ``first_release`` on, one reader per kind reads:

- the package index's PEP 691 file list (which files exist: wheels or sdists, CPython tags, the
  manylinux levels, the host architectures);
- each wheel's ``*.dist-info/METADATA`` (Requires-Dist, Requires-Python, extras: the PEP 658
  ``.metadata`` file where the index serves one, else the member read out of the wheel with HTTP
  range requests), and from sdists their ``PKG-INFO`` and ``pyproject.toml``;
- a few small members for one assignment each (ONNX Runtime's ``build_and_package_info.py``
  ``cuda_version``; Transformer Engine's ``MIN_CUDNN_VERSION``; DeepSpeed's
  ``cuda_minor_mismatch_ok``), read as Python literals, never run;
- the CUDA libraries a shared object needs (its ``DT_NEEDED`` sonames, read from the ELF dynamic
  section when the object is small enough to inflate whole, else the soname strings of its first,
  read-only loadable segment, which holds the dynamic string table; only the first bytes of the
  member are inflated).

A build's CUDA major comes from what its files declare (the CUDA runtime requirement, the
runtime version ONNX Runtime records, the ``libcudart.so.N`` it links) and, where none does (the
TensorRT 10.15+ sdists), from the kind's documented ``flavours``; never from a package name. All
the evidences of one build must agree, or the refresh stops. Only final releases are catalogued
(a post release is listed under its release's ``post``).

``--check`` compares the rows with what the index serves now (or a recorded copy, ``--from``);
``python -m provision.matrix.refresh_stacks --record DIR`` reads the index and writes the copy
that the refresh read (tests/fixtures/refresh/stacks): the filtered index pages, the METADATA and
PKG-INFO headers (the long description after them is left out), the assignments and the soname
lists. Everything read from the index is untrusted: capped in size, parsed, never executed.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import email.parser
import io
import json
import re
import struct
import sys
import tarfile
import urllib.error
import urllib.parse
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from provision.matrix.refresh import (
    PYPI_SIMPLE,
    RefreshError,
    WheelFile,
    ZipEntry,
    _QuotedDumper,
    http_fetch,
    http_range,
    pick_wheel,
    python_range,
    zip_data_offset,
    zip_entries,
    zip_member,
)
from provision.matrix.refresh_images import read_recorded

FILE = "stacks.yaml"
SOURCE_KEY = "pypi-stack-files"
HOST_ARCHES = ("x86_64", "aarch64")
MAX_PAGE_BYTES = 8 * 1024 * 1024  # the largest PEP 691 page read (megatron-core) is about 1 MB
MAX_MEMBER_BYTES = 4 * 1024 * 1024  # a METADATA or a small .py member
MAX_SDIST_BYTES = 32 * 1024 * 1024  # DeepSpeed's sdist is about 2 MB
WHOLE_ELF_BYTES = 16 * 1024 * 1024  # shared objects up to this are inflated whole (exact DT_NEEDED)
FIRST_SEGMENT_BYTES = 8 * 1024 * 1024  # a larger one: at most this much of its first segment
CHUNK = 256 * 1024  # range request size while inflating the head of a member

# The CUDA-library sonames a row records (what decides compatibility: the CUDA major of cudart and
# the math libraries, cuDNN's major, TensorRT's, NCCL's); libc and the like are left out.
_CUDA_SONAME = re.compile(
    r"^lib(cudart|cublas|cublasLt|cudnn(?:_[a-z_]+)?|cufft|curand|cusparse|cusolver|nvrtc|nvJitLink"
    r"|nvinfer(?:_[a-z_]+)?|nvonnxparser|nccl)\.so(\.\d+)+$"
)
# The default index of NVIDIA's stub build backends that name none in pyproject.toml: nvidia-stub
# (TensorRT's libs sdists up to 10.6.0) reads NVIDIA_PIP_INDEX_URL, default https://pypi.nvidia.com.
STUB_BACKEND_INDEX = {"nvidia_stub.buildapi": ("https://pypi.nvidia.com/", "nvidia-stub-backend")}

_FILENAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_WHEEL = re.compile(
    r"^(?P<name>[^-]+)-(?P<ver>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)
_SDIST = re.compile(r"^(?P<name>.+)-(?P<ver>[^-]+)\.(?:tar\.gz|zip)$")
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(?P<arch>[a-z0-9_]+)$")
_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


class StacksRefreshError(RefreshError):
    """What the index serves (or a recorded copy of it) cannot be read into stacks.yaml rows (exit 2)."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(
            f"stacks: {message}",
            hint=hint or "check the recorded copy (--from) or the package index; compat/ is unchanged",
        )


# -- the index listing --------------------------------------------------------------------------
@dataclass(frozen=True)
class IndexFile:
    """One file of a project's PEP 691 listing that a reader may use."""

    project: str  # the listing it is on (canonical name)
    filename: str
    url: str
    version: str  # PEP 440 text, as the file name has it
    kind: str  # wheel | sdist
    py: str | None  # wheel python tag(s)
    abi: str | None
    plat: str | None  # wheel platform tag(s): "manylinux_2_28_x86_64", "any"
    requires_python: str | None
    core_metadata: bool  # the index serves PEP 658 <url>.metadata
    size: int | None = None  # bytes, as the index lists them

    def arch(self) -> str | None:
        """The host architecture of a Linux wheel; None for sdists and pure wheels."""
        if self.plat is None:
            return None
        return next((a for a in HOST_ARCHES if a in self.plat), None)

    @property
    def wheel(self) -> WheelFile:
        return WheelFile(self.filename, self.url, self.version, None)


def _released(version: str, first: Version) -> Version | None:
    """The final release a file belongs to (10.7.0 for 10.7.0.post1), or None: a pre or dev
    release, a local version, or one older than ``first``."""
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    if v.is_prerelease or v.is_devrelease or v.local is not None or v.epoch:
        return None
    base = Version(v.base_version)
    return base if base >= first else None


def parse_listing(project: str, body: bytes, first: Version, where: str) -> tuple[dict[str, Any], list[IndexFile]]:
    """(the page reduced to what the readers use, the files): a PEP 691 JSON page of ``project``.
    Kept: files that are not yanked, of a final release (or its post release) from ``first`` on,
    that are sdists, pure wheels or Linux wheels. Every kept entry is the index's, unchanged."""
    if len(body) > MAX_PAGE_BYTES:
        raise StacksRefreshError(f"{where}: over the {MAX_PAGE_BYTES}-byte cap for an index page")
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise StacksRefreshError(f"{where}: not a PEP 691 JSON page ({_first_line(exc)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise StacksRefreshError(f"{where}: not a PEP 691 JSON page (no files list)")
    kept, files = [], []
    for entry in doc["files"]:
        found = _index_file(project, entry, first, where)
        if found is not None:
            kept.append(entry)
            files.append(found)
    page = {"meta": doc.get("meta"), "name": doc.get("name"), "files": kept}
    return page, files


def _index_file(project: str, entry: Any, first: Version, where: str) -> IndexFile | None:
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("filename"), str)
        or not isinstance(entry.get("url"), str)
    ):
        raise StacksRefreshError(f"{where}: a file entry without filename and url")
    filename, url = entry["filename"], urllib.parse.urljoin(where, entry["url"])
    if entry.get("yanked"):
        return None
    if not _FILENAME.match(filename):
        raise StacksRefreshError(f"{where}: file name {filename!r} is not a plain file name")
    if not url.startswith("https://"):
        raise StacksRefreshError(f"{where}: {filename}: not an https URL")
    wheel, sdist = _WHEEL.match(filename), _SDIST.match(filename)
    if wheel:
        plat = wheel["plat"]
        if plat != "any" and "linux" not in plat:
            return None
        version, kind, py, abi = wheel["ver"], "wheel", wheel["py"], wheel["abi"]
    elif sdist:
        version, kind, py, abi, plat = sdist["ver"], "sdist", None, None, None
    else:
        return None
    if _released(version, first) is None:
        return None
    requires_python = entry.get("requires-python")
    if requires_python is not None and not isinstance(requires_python, str):
        raise StacksRefreshError(f"{where}: {filename}: requires-python is not a string")
    size = entry.get("size")
    return IndexFile(
        canonicalize_name(project),
        filename,
        url,
        version,
        kind,
        py,
        abi,
        plat,
        requires_python or None,
        bool(entry.get("core-metadata") or entry.get("data-dist-info-metadata")),
        size if isinstance(size, int) else None,
    )


def releases(files: list[IndexFile], first: Version) -> list[str]:
    """The final releases with files, newest first."""
    found = {str(v) for f in files if (v := _released(f.version, first)) is not None and Version(f.version) == v}
    return sorted(found, key=Version, reverse=True)


def of_release(files: list[IndexFile], version: str) -> list[IndexFile]:
    """The files of exactly ``version`` (its post releases are other versions)."""
    return [f for f in files if Version(f.version) == Version(version)]


def post_releases(files: list[IndexFile], version: str) -> list[str]:
    posts = {
        f.version for f in files if Version(f.version).is_postrelease and Version(f.version).base_version == version
    }
    return sorted(posts, key=Version, reverse=True)


def glibc_floor(files: list[IndexFile], arch: str) -> str | None:
    """The glibc every manylinux ``arch`` wheel among ``files`` installs on: per wheel the oldest of
    its platform tags (pip takes a wheel if any tag fits), the newest of those over the wheels."""
    floors = []
    for f in files:
        if f.kind != "wheel" or f.arch() != arch:
            continue
        mine = []
        for tag in f.plat.split("."):
            m = _MANYLINUX.match(tag)
            if m and m["arch"] == arch:
                mine.append((int(m[1]), int(m[2])))
            elif tag.removesuffix(f"_{arch}") in _LEGACY_MANYLINUX:
                mine.append(_LEGACY_MANYLINUX[tag.removesuffix(f"_{arch}")])
        if mine:
            floors.append(min(mine))
    if not floors:
        return None
    major, minor = max(floors)
    return f"{major}.{minor}"


# -- what is read from the files -----------------------------------------------------------------
def headers_only(text: str) -> str:
    """A METADATA or PKG-INFO text up to its first blank line: the core metadata fields, without the
    long description that follows them."""
    lines = []
    for line in text.split("\n"):
        if line in (
            "",
            "\r",
        ):  # an empty line ends the fields (a line of blanks continues one: torch-tensorrt's License)
            break
        lines.append(line)
    return "\n".join(lines) + "\n"


def assignments_text(source: str, names: tuple[str, ...], where: str) -> str:
    """The source lines of the top-level assignments to ``names`` in a Python file (nothing else)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError) as exc:
        raise StacksRefreshError(f"{where}: not Python source ({_first_line(exc)})") from None
    parts = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in names for t in targets):
                parts.append(ast.get_source_segment(source, node) or "")
    return "\n".join(parts) + ("\n" if parts else "")


def literal_assignments(source: str, where: str) -> dict[str, Any]:
    """{name: value} of the literal top-level assignments in ``source`` (ast.literal_eval: never run)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError) as exc:
        raise StacksRefreshError(f"{where}: not Python source ({_first_line(exc)})") from None
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            try:
                value = ast.literal_eval(node.value)  # reviewed: literals only, never evaluated code
            except (ValueError, TypeError, SyntaxError, RecursionError):
                continue
            for t in targets:
                if isinstance(t, ast.Name):
                    found[t.id] = value
    return found


# ELF: the CUDA libraries a shared object needs
_PT_LOAD, _PT_DYNAMIC, _PF_R = 1, 2, 4
_DT_NULL, _DT_NEEDED, _DT_STRTAB = 0, 1, 5
_SONAME_STRING = re.compile(rb"(?<=\x00)(lib[A-Za-z0-9_+-]+\.so(?:\.\d+)+)(?=\x00)")


def elf_needed(read: Callable[[int], bytes], size: int, where: str) -> tuple[str, tuple[str, ...]]:
    """(how, sonames) of a 64-bit little-endian ELF shared object, ``read(n)`` giving its first n
    bytes and ``size`` its length. ``dynamic``: the DT_NEEDED entries of its dynamic section (an
    object up to WHOLE_ELF_BYTES, read whole); ``first-segment``: the soname strings of its first
    loadable segment where that is read-only and starts the file (the linker's -z separate-code
    layout: ELF and program headers, the dynamic symbol and string tables, version and
    relocation tables; no code, no read-only data): the needed libraries and the object's own
    soname; ``unread``: neither applies (no sonames)."""
    head = read(64)
    if len(head) < 64 or head[:4] != b"\x7fELF":
        raise StacksRefreshError(f"{where}: not an ELF object")
    if head[4] != 2 or head[5] != 1:
        raise StacksRefreshError(f"{where}: not a 64-bit little-endian ELF object")
    (phoff,) = struct.unpack_from("<Q", head, 32)
    phentsize, phnum = struct.unpack_from("<HH", head, 54)
    if phentsize != 56 or not 0 < phnum <= 256 or phoff > 1024 * 1024:
        raise StacksRefreshError(f"{where}: unreadable program header table")
    table = read(phoff + phnum * 56)
    if len(table) < phoff + phnum * 56:
        raise StacksRefreshError(f"{where}: truncated program header table")
    phdrs = [struct.unpack_from("<IIQQQQQQ", table, phoff + i * 56) for i in range(phnum)]
    if size <= WHOLE_ELF_BYTES:
        return "dynamic", _dt_needed(read(size), phdrs, where)
    loads = sorted((p for p in phdrs if p[0] == _PT_LOAD), key=lambda p: p[2])
    if not loads or loads[0][2] != 0 or loads[0][1] != _PF_R or loads[0][5] > FIRST_SEGMENT_BYTES:
        return "unread", ()
    segment = read(loads[0][5])
    return "first-segment", tuple(sorted({m.decode() for m in _SONAME_STRING.findall(segment)}))


def _dt_needed(data: bytes, phdrs: list[tuple[int, ...]], where: str) -> tuple[str, ...]:
    dynamic = [p for p in phdrs if p[0] == _PT_DYNAMIC]
    if len(dynamic) != 1:
        raise StacksRefreshError(f"{where}: {len(dynamic)} dynamic segments (a shared object has one)")
    _, _, offset, _, _, filesz, _, _ = dynamic[0]
    if offset + filesz > len(data):
        raise StacksRefreshError(f"{where}: the dynamic segment runs past the file")
    entries = []
    for pos in range(offset, offset + filesz - 15, 16):
        tag, value = struct.unpack_from("<qQ", data, pos)
        if tag == _DT_NULL:
            break
        entries.append((tag, value))
    strtab = [v for t, v in entries if t == _DT_STRTAB]
    if len(strtab) != 1:
        raise StacksRefreshError(f"{where}: no dynamic string table")
    base = next((strtab[0] - p[3] + p[2] for p in phdrs if p[0] == _PT_LOAD and p[3] <= strtab[0] < p[3] + p[5]), None)
    if base is None:
        raise StacksRefreshError(f"{where}: the dynamic string table is in no loadable segment")
    names = []
    for tag, value in entries:
        if tag == _DT_NEEDED:
            start = base + value
            end = data.find(b"\x00", start)
            if start >= len(data) or end < 0:
                raise StacksRefreshError(f"{where}: a DT_NEEDED name runs past the file")
            names.append(data[start:end].decode("ascii", "replace"))
    return tuple(names)


def cuda_sonames(names: tuple[str, ...]) -> list[str]:
    return sorted({n for n in names if _CUDA_SONAME.match(n)})


# -- where the files come from: the index, a recorded copy, or the index while recording -----------
class Live:
    """The package index over the network (``fetch`` for pages and whole sdists, ``ranged`` for
    range requests into wheels)."""

    def __init__(self, fetch: Callable[[str, dict[str, str]], bytes] = http_fetch, ranged=http_range):
        self._fetch, self._ranged = fetch, ranged
        self._sdists: dict[str, dict[str, bytes]] = {}
        self._entries: dict[str, list[ZipEntry]] = {}

    def page(self, project: str) -> tuple[bytes, str]:
        url = f"{PYPI_SIMPLE}/{project}/"
        return self._fetch(url, {"Accept": "application/vnd.pypi.simple.v1+json"}), url

    def metadata(self, f: IndexFile) -> str:
        if f.core_metadata:
            try:
                data = self._fetch(f.url + ".metadata", {})
                if len(data) > MAX_MEMBER_BYTES:
                    raise StacksRefreshError(f"{f.url}.metadata: over the {MAX_MEMBER_BYTES}-byte cap")
                return _text(data, f.url + ".metadata")
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
        entry = next((e for e in self._zip(f) if re.fullmatch(r"[^/]+\.dist-info/METADATA", e.name)), None)
        if entry is None:
            raise StacksRefreshError(f"{f.url}: no .dist-info/METADATA member")
        return _text(self._member(f, entry), f"{f.url}!{entry.name}")

    def wheel_text(self, f: IndexFile, member: str) -> str | None:
        entry = next((e for e in self._zip(f) if e.name == member), None)
        return None if entry is None else _text(self._member(f, entry), f"{f.url}!{member}")

    def needed(self, f: IndexFile, member: str) -> tuple[str, tuple[str, ...]] | None:
        entry = next((e for e in self._zip(f) if e.name == member), None)
        if entry is None:
            return None
        return elf_needed(_Inflater(f.url, self._ranged, entry).read, entry.size, f"{f.url}!{member}")

    def sdist_text(self, f: IndexFile, member: str) -> str | None:
        members = self._sdists.get(f.url)
        if members is None:
            if f.size is not None and f.size > MAX_SDIST_BYTES:  # refused before it is downloaded
                raise StacksRefreshError(f"{f.url}: {f.size} bytes, over the {MAX_SDIST_BYTES}-byte cap for an sdist")
            members = self._sdists[f.url] = _sdist_members(self._fetch(f.url, {}), f.url)
        data = members.get(member)
        return None if data is None else _text(data, f"{f.url}!{member}")

    def _zip(self, f: IndexFile) -> list[ZipEntry]:
        if f.url not in self._entries:
            self._entries[f.url] = zip_entries(f.url, self._ranged)
        return self._entries[f.url]

    def _member(self, f: IndexFile, entry: ZipEntry) -> bytes:
        if entry.size > MAX_MEMBER_BYTES:
            raise StacksRefreshError(f"{f.url}!{entry.name}: over the {MAX_MEMBER_BYTES}-byte cap for a member read")
        return zip_member(f.url, self._ranged, entry)


class _Inflater:
    """The first bytes of one member of a remote zip, inflated only as far as asked."""

    def __init__(self, url: str, ranged, entry: ZipEntry):
        self._url, self._ranged, self._entry = url, ranged, entry
        self._pos = zip_data_offset(url, ranged, entry)
        self._end = self._pos + entry.compressed_size
        self._out = bytearray()
        self._inflate = zlib.decompressobj(-15) if entry.method == 8 else None
        if entry.method not in (0, 8):
            raise StacksRefreshError(f"{url}: {entry.name} uses zip method {entry.method}")

    def read(self, n: int) -> bytes:
        while len(self._out) < n and self._pos < self._end:
            chunk = self._ranged(self._url, self._pos, min(self._pos + CHUNK, self._end) - 1)
            if not chunk:
                break
            self._pos += len(chunk)
            self._out += self._inflate.decompress(chunk) if self._inflate else chunk
        return bytes(self._out[:n])


def _sdist_members(data: bytes, where: str) -> dict[str, bytes]:
    """The small text members of an sdist, by their path below its top directory."""
    if len(data) > MAX_SDIST_BYTES:
        raise StacksRefreshError(f"{where}: over the {MAX_SDIST_BYTES}-byte cap for an sdist")
    members: dict[str, bytes] = {}
    try:
        if where.endswith(".zip"):
            import zipfile

            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                for info in zf.infolist():
                    if not info.is_dir() and info.file_size <= MAX_MEMBER_BYTES:
                        members[_below_top(info.filename)] = zf.read(info)
        else:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
                for info in tf.getmembers():
                    if info.isfile() and info.size <= MAX_MEMBER_BYTES:
                        handle = tf.extractfile(info)
                        if handle is not None:
                            members[_below_top(info.name)] = handle.read()
    except (tarfile.TarError, OSError, EOFError, zlib.error, ValueError) as exc:
        raise StacksRefreshError(f"{where}: not a readable sdist ({_first_line(exc)})") from None
    return members


def _below_top(name: str) -> str:
    """``pkg-1.0/PKG-INFO`` -> ``PKG-INFO`` (some sdists, TensorRT's libs, have no top directory)."""
    head, sep, rest = name.lstrip("./").partition("/")
    return rest if sep and "-" in head else name.lstrip("./")


def _text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StacksRefreshError(f"{where}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


class Recorded:
    """A recorded copy (tests/fixtures/refresh/stacks): what ``Recorder`` wrote, read as plain files."""

    def __init__(self, root: Path):
        self._root = root

    def _read(self, path: str) -> str | None:
        return read_recorded(self._root, path, StacksRefreshError)

    def page(self, project: str) -> tuple[bytes, str]:
        text = self._read(f"index/{_safe(project)}.json")
        if text is None:
            raise StacksRefreshError(f"{self._root}: no recorded index page for {project}")
        return text.encode(), f"{PYPI_SIMPLE}/{project}/"

    def metadata(self, f: IndexFile) -> str:
        text = self._read(f"wheels/{_safe(f.filename)}/METADATA")
        if text is None:
            raise StacksRefreshError(f"{self._root}: no recorded METADATA of {f.filename}")
        return text

    def wheel_text(self, f: IndexFile, member: str) -> str | None:
        return self._read(f"wheels/{_safe(f.filename)}/{_safe_member(member)}.assign")

    def needed(self, f: IndexFile, member: str) -> tuple[str, tuple[str, ...]] | None:
        text = self._read(f"wheels/{_safe(f.filename)}/{_safe_member(member)}.needed")
        if text is None:
            return None
        lines = text.splitlines()
        if not lines or not lines[0].startswith("how: "):
            raise StacksRefreshError(f"{self._root}: {f.filename}!{member}.needed: no 'how:' line")
        return lines[0].removeprefix("how: "), tuple(ln for ln in lines[1:] if ln)

    def sdist_text(self, f: IndexFile, member: str) -> str | None:
        suffix = ".assign" if member.endswith(".py") else ""
        return self._read(f"sdists/{_safe(f.filename)}/{_safe_member(member)}{suffix}")


class Recorder:
    """The index (``upstream``), writing what each read returned under ``root`` in Recorded's layout:
    index pages reduced to the files kept, METADATA and PKG-INFO headers, the assignments read from
    .py members, the CUDA sonames of shared objects."""

    def __init__(self, upstream: Live, root: Path, first: dict[str, Version]):
        self._up, self._root, self._first = upstream, root, first

    def _write(self, path: str, text: str) -> None:
        target = self._root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    def page(self, project: str) -> tuple[bytes, str]:
        body, url = self._up.page(project)
        page, _ = parse_listing(project, body, self._first[canonicalize_name(project)], url)
        self._write(f"index/{_safe(project)}.json", _page_json(page))
        return body, url

    def metadata(self, f: IndexFile) -> str:
        text = headers_only(self._up.metadata(f))
        self._write(f"wheels/{_safe(f.filename)}/METADATA", text)
        return text

    def wheel_text(self, f: IndexFile, member: str) -> str | None:
        text = self._up.wheel_text(f, member)
        if text is not None:
            text = assignments_text(text, _ASSIGNMENTS[member.rsplit("/", 1)[-1]], f"{f.url}!{member}")
            self._write(f"wheels/{_safe(f.filename)}/{_safe_member(member)}.assign", text)
        return text

    def needed(self, f: IndexFile, member: str) -> tuple[str, tuple[str, ...]] | None:
        found = self._up.needed(f, member)
        if found is not None:
            how, names = found
            found = how, tuple(cuda_sonames(names))
            self._write(
                f"wheels/{_safe(f.filename)}/{_safe_member(member)}.needed",
                f"how: {how}\n" + "".join(f"{n}\n" for n in found[1]),
            )
        return found

    def sdist_text(self, f: IndexFile, member: str) -> str | None:
        text = self._up.sdist_text(f, member)
        if text is not None:
            if member == "PKG-INFO":
                text = headers_only(text)
                suffix = ""
            elif member.endswith(".py"):
                text = assignments_text(text, _ASSIGNMENTS[member.rsplit("/", 1)[-1]], f"{f.url}!{member}")
                suffix = ".assign"
            else:
                suffix = ""
            self._write(f"sdists/{_safe(f.filename)}/{_safe_member(member)}{suffix}", text)
        return text


def _page_json(page: dict[str, Any]) -> str:
    """A reduced page as JSON, one file entry a line."""
    entries = ",\n".join(json.dumps(f, sort_keys=True) for f in page["files"])
    head = json.dumps({"meta": page["meta"], "name": page["name"]}, sort_keys=True)[:-1]
    return f'{head}, "files": [\n{entries}\n]}}\n'


# what is read out of each small .py member (and all a recording keeps of it)
_ASSIGNMENTS = {
    "build_and_package_info.py": ("cuda_version",),
    "__init__.py": ("MIN_CUDNN_VERSION",),
    "builder.py": ("cuda_minor_mismatch_ok",),
}


def _safe(name: str) -> str:
    if not _FILENAME.match(name):
        raise StacksRefreshError(f"unsafe file name {name!r}")
    return name


_MEMBER_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


def _safe_member(member: str) -> str:
    """A member path as one recorded file name: its parts joined by dots
    (``transformer_engine/common/__init__.py`` -> ``transformer_engine.common.__init__.py``)."""
    parts = member.split("/")
    if any(not _MEMBER_PART.match(p) or p in (".", "..") for p in parts) or not _FILENAME.match(parts[0]):
        raise StacksRefreshError(f"unsafe member path {member!r}")
    return ".".join(parts)


# -- reading one package kind ----------------------------------------------------------------------
class Reader:
    """What the readers share: the listings of a kind's projects and the rows' common fields."""

    def __init__(self, upstream, package: dict[str, Any], log: Callable[[str], None]):
        self.up, self.package, self.log = upstream, package, log
        self.first = Version(package["first_release"])
        self._listings: dict[str, list[IndexFile]] = {}

    def files(self, project: str) -> list[IndexFile]:
        if project not in self._listings:
            body, url = self.up.page(project)
            self._listings[project] = parse_listing(project, body, self.first, url)[1]
        return self._listings[project]

    def pip(self, role: str, flavour: str | None = None) -> str:
        for dist in self.package["distributions"]:
            if dist["role"] == role:
                return dist["pip"].format(flavour=flavour or "")
        raise StacksRefreshError(f"{self.package['id']}: no distribution with role {role!r} in stacks.yaml")

    def wheel(self, files: list[IndexFile], arch: str) -> IndexFile | None:
        """The wheel whose metadata stands for the release on ``arch``: refresh.pick_wheel's choice
        (cp311 first) among the wheels the file's own Requires-Python admits."""
        linux = [f for f in files if f.kind == "wheel" and f.arch() == arch]
        usable = [f for f in linux if _admits(f)] or linux
        picked = pick_wheel([f.wheel for f in usable], usable[0].version, None) if usable else None
        return next((f for f in usable if picked is not None and f.filename == picked.filename), None)

    def sdist(self, files: list[IndexFile]) -> IndexFile | None:
        return next((f for f in files if f.kind == "sdist"), None)

    def documented(self, version: str, key: str) -> tuple[Any, str | None]:
        """The first documented rule of the kind that covers ``version`` and states ``key``."""
        from provision.versions import parse_specifier

        for rule in self.package.get("documented") or ():
            if key in rule and parse_specifier(rule["releases"]).contains(version):
                return rule[key], rule["source"]
        return None, None

    def flavour_major(self, flavour: str | None) -> tuple[int | None, str | None]:
        for f in self.package.get("flavours") or ():
            if f["name"] == flavour:
                return f["cuda_major"], f["source"]
        return None, None


def _admits(f: IndexFile) -> bool:
    """The wheel's CPython version is inside its Requires-Python (megatron-core 0.17 ships cp311
    wheels but requires >=3.12)."""
    m = re.fullmatch(r"cp(\d)(\d+)", (f.py or "").split(".")[0])
    if m is None or f.requires_python is None:
        return True
    try:
        return SpecifierSet(f.requires_python).contains(f"{m[1]}.{m[2]}")
    except InvalidSpecifier:
        return True


def _requirements(metadata: str, *, extra: str | None = None, machine: str = "x86_64") -> list[Requirement]:
    """The Requires-Dist entries that apply on Linux ``machine`` (with ``extra``, only that extra's)."""
    msg = email.parser.Parser().parsestr(metadata)
    env = {
        **default_environment(),
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": machine,
        "platform_release": "",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "python_version": "3.12",
        "python_full_version": "3.12.3",
    }
    out = []
    for line in msg.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        marker = str(req.marker) if req.marker else ""
        if extra is None and "extra" in marker:
            continue
        if extra is not None and "extra" not in marker:
            continue
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra or ""}):
            continue
        out.append(req)
    return out


def _requires_python(metadata: str) -> str | None:
    return email.parser.Parser().parsestr(metadata).get("Requires-Python") or None


def _extras(metadata: str, names: tuple[str, ...]) -> dict[str, list[str]]:
    """{extra: its requirements on Linux x86_64, without their markers} for the extras in ``names``
    the metadata provides."""
    msg = email.parser.Parser().parsestr(metadata)
    provided = [canonicalize_name(e) for e in msg.get_all("Provides-Extra") or []]
    out = {}
    for name in names:
        if name in provided:
            out[name] = sorted(_plain(r) for r in _requirements(metadata, extra=name))
    return out


def _plain(req: Requirement) -> str:
    """A requirement as ``name[extras]specifier``, its marker dropped (canonical name)."""
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return f"{canonicalize_name(req.name)}{extras}{req.specifier}"


def _pins(reqs: list[Requirement], pattern: str) -> dict[str, str]:
    """{canonical name: specifier} of the requirements whose name matches ``pattern`` (the pins to
    other catalogued packages: torch, tensorrt*, transformer-engine*)."""
    out: dict[str, str] = {}
    for req in reqs:
        name = canonicalize_name(req.name)
        if re.fullmatch(pattern, name):
            out[name] = str(req.specifier)
    return dict(sorted(out.items()))


def _cuda_requirement(reqs: list[Requirement]) -> Requirement | None:
    return next(
        (
            r
            for r in reqs
            if re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", canonicalize_name(r.name))
            or (canonicalize_name(r.name) == "cuda-toolkit" and "cudart" in r.extras)
        ),
        None,
    )


def _cudnn_requirement(reqs: list[Requirement]) -> Requirement | None:
    return next((r for r in reqs if re.fullmatch(r"nvidia-cudnn(-cu\d+)?", canonicalize_name(r.name))), None)


def _major_of(req: Requirement, where: str) -> int:
    """The CUDA (or cuDNN) major a runtime requirement names: its specifier's lower bound or pin
    ("~=13.0", ">=12,<13", "==12.4.127"), or, for a bare ``nvidia-cuda-runtime-cu12`` (the
    NVIDIA package of the CUDA 12 runtime) or one pinned to a placeholder (``==0.0.0a0``), that
    package's major."""
    floors = [s.version for s in req.specifier if s.operator in ("==", "~=", ">=", "===")]
    if floors:
        try:
            major = Version(floors[0].rstrip(".*")).release[0]
        except InvalidVersion:
            raise StacksRefreshError(f"{where}: cannot read a major from {req}") from None
        if major > 0:  # nvidia-cuda-runtime-cu13==0.0.0a0 (torch-tensorrt 2.10.0) names no CUDA version
            return major
    m = re.fullmatch(r"nvidia-cuda(?:-runtime|nn)?-cu(\d+)|nvidia-cudnn-cu(\d+)", canonicalize_name(req.name))
    if m:
        return int(m[1] or m[2])
    raise StacksRefreshError(f"{where}: {req} names no version")


def _soname_major(sonames: dict[str, list[str] | None], library: str) -> int | None:
    """The major of ``library`` (``libcudart``, ``libcudnn``, ``libnvinfer``) every read object links
    (``libcudart.so.11.0`` -> 11); None where none links it; an error where two disagree."""
    majors = {
        int(m[1])
        for names in sonames.values()
        for n in names or ()
        if (m := re.fullmatch(re.escape(library) + r"\.so\.(\d+)(?:\.\d+)*", n))
    }
    if len(majors) > 1:
        raise StacksRefreshError(f"{library}: the shared objects link majors {sorted(majors)}")
    return majors.pop() if majors else None


def dotted_spec(spec: SpecifierSet) -> str | None:
    """A PEP 440 specifier in the catalogue's grammar (comparisons of dotted numbers, comma-joined,
    all of which must hold): "~=9.0" -> ">=9.0,<10", "<10.0,>=9.3.0.75" as is; None when it
    cannot be said so (a pre or post release bound, a wildcard other than ==X.*)."""
    out = []
    for s in sorted(spec, key=str):
        op, ver = s.operator, s.version
        if op == "~=":
            parts = ver.split(".")
            if len(parts) < 2 or not all(p.isdigit() for p in parts):
                return None
            upper = [*parts[:-2], str(int(parts[-2]) + 1)]
            out += [f">={ver}", f"<{'.'.join(upper)}"]
        elif op == "==" and ver.endswith(".*"):
            parts = ver[:-2].split(".")
            if not all(p.isdigit() for p in parts):
                return None
            out += [f">={'.'.join(parts)}", f"<{'.'.join([*parts[:-1], str(int(parts[-1]) + 1)])}"]
        elif op in ("==", "!=", ">=", "<=", ">", "<") and re.fullmatch(r"\d+(\.\d+)*", ver):
            out.append(f"{op}{ver}")
        else:
            return None
    return ",".join(out) or None


def _agree(found: dict[str, int | None], where: str) -> tuple[int | None, str | None]:
    """The one value every evidence gives (and the first evidence that gave it); an error otherwise."""
    given = {k: v for k, v in found.items() if v is not None}
    if len(set(given.values())) > 1:
        raise StacksRefreshError(f"{where}: the CUDA or cuDNN majors disagree: {given}")
    for how, value in given.items():
        return value, how
    return None, None


def build_row(
    reader: Reader,
    version: str,
    *,
    flavour: str | None,
    default: bool,
    distributions: list[tuple[str, str]],
    pin: str | None = None,
    binaries: list[IndexFile],
    python_of: dict[str, str | None],
    sonames: dict[str, list[str] | None],
    reqs: list[Requirement],
    cuda_info: str | None = None,
    cudnn_min: str | None = None,
    requires: dict[str, str] | None = None,
    build_requires: list[str] | None = None,
    nvcc_minor_mismatch_ok: dict[str, list[str]] | None = None,
    library_index: tuple[str, str] | None = None,
    evidence: list[str],
    arches: list[str] | None = None,
) -> dict[str, Any]:
    """One build's row: the CUDA and cuDNN majors from every evidence its files give (which must
    agree), the glibc floors and host architectures of its binaries, the documented facts."""
    where = f"{reader.package['id']} {version}" + (f" {flavour}" if flavour else "")
    cuda_req, cudnn_req = _cuda_requirement(reqs), _cudnn_requirement(reqs)
    cuda_major, cuda_from = _agree(
        {
            "requires-dist": _major_of(cuda_req, where) if cuda_req is not None else None,
            "build-info": Version(cuda_info).release[0] if cuda_info else None,
            "soname": _soname_major(sonames, "libcudart"),
        },
        where,
    )
    cuda_source = None
    if cuda_major is None and reader.package.get("uses_cuda"):
        cuda_major, cuda_source = reader.flavour_major(flavour)
        cuda_from = "documented" if cuda_major is not None else None
    cudnn_major, cudnn_from = _agree(
        {
            "requires-dist": _major_of(cudnn_req, where) if cudnn_req is not None else None,
            "soname": _soname_major(sonames, "libcudnn"),
            "code": Version(cudnn_min).release[0] if cudnn_min else None,
        },
        where,
    )
    sm_floor, sm_source = reader.documented(version, "sm_floor")
    arches = arches if arches is not None else [a for a in HOST_ARCHES if any(f.arch() == a for f in binaries)]
    return {
        "flavour": flavour,
        "default": default,
        "pin": pin if pin != version else None,
        "distributions": [{"pip": pip, "artefact": kind} for pip, kind in distributions],
        "arches": arches,
        "python": python_of.get("x86_64"),
        "python_aarch64": python_of.get("aarch64") if "aarch64" in arches else None,
        "manylinux": {a: g for a in arches if (g := glibc_floor(binaries, a)) is not None},
        "cuda_major": cuda_major,
        "cuda": cuda_info,
        "cuda_requirement": _plain(cuda_req) if cuda_req is not None else None,
        "cuda_from": cuda_from,
        "cuda_source": cuda_source,
        "cudnn_major": cudnn_major,
        "cudnn_spec": dotted_spec(cudnn_req.specifier) if cudnn_req is not None else None,
        "cudnn_requirement": _plain(cudnn_req) if cudnn_req is not None else None,
        "cudnn_min": cudnn_min,
        "cudnn_from": cudnn_from,
        "sonames": sonames,
        "requires": requires or {},
        "build_requires": build_requires,
        "nvcc_minor_mismatch_ok": nvcc_minor_mismatch_ok,
        "library_index": library_index[0] if library_index else None,
        "library_index_source": library_index[1] if library_index else None,
        "sm_floor": sm_floor,
        "sm_source": sm_source,
        "source": SOURCE_KEY,
        "evidence": evidence,
    }


def _python_ranges(files: list[IndexFile], requires_python: str | None, arches: tuple[str, ...] = HOST_ARCHES):
    return {a: python_range([f.filename for f in files], requires_python, a) for a in arches}


def _sonames(reader: Reader, wheel: IndexFile, members: dict[str, str]) -> dict[str, list[str] | None]:
    """{label: CUDA sonames} of the shared objects ``members`` (label -> path) in ``wheel``; null: the
    object is in the wheel but its layout could not be read; absent objects are left out."""
    out: dict[str, list[str] | None] = {}
    for label, member in members.items():
        found = reader.up.needed(wheel, member)
        if found is None:
            continue
        how, names = found
        out[label] = None if how == "unread" else cuda_sonames(names)
    return out


# ONNX Runtime (onnxruntime-gpu): one wheel per release; the CUDA build is in its provider libraries
def read_onnxruntime(reader: Reader) -> list[dict[str, Any]]:
    project = reader.pip("binary")
    files = reader.files(project)
    rows = []
    for version in releases(files, reader.first):
        mine = of_release(files, version)
        wheel = reader.wheel(mine, "x86_64")
        if wheel is None:
            reader.log(f"  {project} {version}: no Linux x86_64 wheel; left out")
            continue
        metadata = reader.up.metadata(wheel)
        info = _cuda_version(reader, wheel)
        sonames = _sonames(
            reader,
            wheel,
            {
                "cuda-provider": "onnxruntime/capi/libonnxruntime_providers_cuda.so",
                "tensorrt-provider": "onnxruntime/capi/libonnxruntime_providers_tensorrt.so",
            },
        )
        reqs = _requirements(metadata, extra="cuda") + _requirements(metadata, extra="cudnn")
        evidence = [wheel.url]
        arches = ["x86_64"]
        arm = reader.wheel(mine, "aarch64")
        if arm is not None:
            arm_meta = reader.up.metadata(arm)
            arm_reqs = _requirements(arm_meta, extra="cuda", machine="aarch64")
            same = [_plain(r) for r in _requirements(metadata, extra="cuda")] == [_plain(r) for r in arm_reqs]
            if same and _cuda_version(reader, arm) == info:
                arches.append("aarch64")
                evidence.append(arm.url)
            else:
                reader.log(f"  {arm.filename}: not the x86_64 wheel's CUDA build; aarch64 left out")
        row = build_row(
            reader,
            version,
            flavour=None,
            default=True,
            distributions=[(project, "wheel")],
            binaries=mine,
            python_of=_python_ranges(mine, _requires_python(metadata)),
            sonames=sonames,
            reqs=reqs,
            cuda_info=info,
            evidence=evidence,
            arches=arches,
        )
        rows.append(_release(version, files, [row], extras=_extras(metadata, ("cuda", "cudnn"))))
    return rows


def _cuda_version(reader: Reader, wheel: IndexFile) -> str | None:
    member = "onnxruntime/capi/build_and_package_info.py"
    text = reader.up.wheel_text(wheel, member)
    if text is None:
        return None
    value = literal_assignments(text, f"{wheel.url}!{member}").get("cuda_version")
    if value is not None and not (isinstance(value, str) and re.fullmatch(r"\d+\.\d+", value)):
        raise StacksRefreshError(f"{wheel.url}!{member}: cuda_version {value!r} is not X.Y")
    return value


def _release(
    version: str, files: list[IndexFile], builds: list[dict[str, Any]], *, extras: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    return {"version": version, "post": post_releases(files, version), "extras": extras or {}, "builds": builds}


# TensorRT: `tensorrt` (an sdist) selects a default build; each build is tensorrt-cuNN (an sdist
# requiring the two below), tensorrt-cuNN-libs (an sdist stub whose build downloads the real wheel
# from NVIDIA's index) and tensorrt-cuNN-bindings (wheels)
def read_tensorrt(reader: Reader) -> list[dict[str, Any]]:
    project = reader.pip("selector")
    files = reader.files(project)
    rows = []
    for version in releases(files, reader.first):
        selector = reader.sdist(of_release(files, version))
        if selector is None:
            reader.log(f"  {project} {version}: no sdist; left out")
            continue
        info = reader.up.sdist_text(selector, "PKG-INFO") or ""
        picks = [
            canonicalize_name(r.name) for r in _requirements(info) if canonicalize_name(r.name).startswith("tensorrt")
        ]
        builds = []
        for flavour in [f["name"] for f in reader.package["flavours"]]:
            row = _tensorrt_build(reader, version, flavour, picks)
            if row is not None:
                builds.append(row)
        if not builds:
            reader.log(f"  {project} {version}: no build found; left out")
            continue
        rows.append(_release(version, files, builds))
    return rows


def _tensorrt_build(reader: Reader, version: str, flavour: str, picks: list[str]) -> dict[str, Any] | None:
    """The flavour's build of ``version``: its three distributions at the release, or, where one of
    them has files only under a post release (10.14.1.48's bindings: 10.14.1.48.post1 only), at the
    newest post release that has all three (the build's ``pin``)."""
    names = {role: reader.pip(role, flavour) for role in ("meta", "libraries", "bindings")}
    for pin in [version, *post_releases(reader.files(names["meta"]), version)]:
        meta = reader.sdist(of_release(reader.files(names["meta"]), pin))
        libs = reader.sdist(of_release(reader.files(names["libraries"]), pin))
        bindings = of_release(reader.files(names["bindings"]), pin)
        if meta is not None and libs is not None and bindings:
            break
    else:
        return None
    meta_info = reader.up.sdist_text(meta, "PKG-INFO") or ""
    libs_info = reader.up.sdist_text(libs, "PKG-INFO") or ""
    pyproject = reader.up.sdist_text(libs, "pyproject.toml") or ""
    wheel = reader.wheel(bindings, "x86_64")
    if wheel is None:
        return None
    sonames = _sonames(reader, wheel, {"bindings": "tensorrt_bindings/tensorrt.so"})
    bindings_meta = reader.up.metadata(wheel)
    requires = _pins(_requirements(meta_info), r"tensorrt.*")
    return build_row(
        reader,
        version,
        flavour=flavour,
        pin=pin,
        default=canonicalize_name(names["meta"]) in picks,
        distributions=[(names["meta"], "sdist"), (names["libraries"], "sdist"), (names["bindings"], "wheel")],
        binaries=bindings,
        python_of=_python_ranges(bindings, _requires_python(bindings_meta) or _requires_python(meta_info)),
        sonames=sonames,
        reqs=_requirements(libs_info),
        requires=requires,
        library_index=_library_index(pyproject, libs.url),
        evidence=[meta.url, libs.url, wheel.url],
    )


def _library_index(pyproject: str, where: str) -> tuple[str, str] | None:
    """(index URL, source key) a stub sdist's build downloads its wheel from: pyproject.toml's
    ``[tool.wheel_stub] index_url``, or the default of a stub backend that names none."""
    import tomllib

    try:
        doc = tomllib.loads(pyproject)
    except tomllib.TOMLDecodeError as exc:
        raise StacksRefreshError(f"{where}!pyproject.toml: not TOML ({_first_line(exc)})") from None
    named = (doc.get("tool") or {}).get("wheel_stub", {}).get("index_url")
    if named is not None:
        if not isinstance(named, str) or not re.fullmatch(r"https://[A-Za-z0-9.-]+(/[A-Za-z0-9._/-]*)?", named):
            raise StacksRefreshError(f"{where}!pyproject.toml: index_url {named!r} is not an https URL")
        return named.rstrip("/") + "/", SOURCE_KEY
    backend = (doc.get("build-system") or {}).get("build-backend")
    return STUB_BACKEND_INDEX.get(backend)


# Torch-TensorRT: one wheel per release, pinning torch and TensorRT
def read_torch_tensorrt(reader: Reader) -> list[dict[str, Any]]:
    project = reader.pip("binary")
    files = reader.files(project)
    rows = []
    for version in releases(files, reader.first):
        mine = of_release(files, version)
        wheel = reader.wheel(mine, "x86_64")
        if wheel is None:
            reader.log(f"  {project} {version}: no Linux x86_64 wheel; left out")
            continue
        metadata = reader.up.metadata(wheel)
        requires = _pins(_requirements(metadata), r"torch|tensorrt.*")
        arches, evidence = ["x86_64"], [wheel.url]
        arm = reader.wheel(mine, "aarch64")
        if arm is not None:
            if _pins(_requirements(reader.up.metadata(arm), machine="aarch64"), r"torch|tensorrt.*") == requires:
                arches.append("aarch64")
                evidence.append(arm.url)
            else:
                reader.log(f"  {arm.filename}: other pins than the x86_64 wheel's; aarch64 left out")
        row = build_row(
            reader,
            version,
            flavour=None,
            default=True,
            distributions=[(project, "wheel")],
            binaries=mine,
            python_of=_python_ranges(mine, _requires_python(metadata)),
            sonames=_sonames(reader, wheel, {"runtime": "torch_tensorrt/lib/libtorchtrt_runtime.so"}),
            reqs=_requirements(metadata),
            requires=requires,
            evidence=evidence,
            arches=arches,
        )
        rows.append(_release(version, files, [row]))
    return rows


# DeepSpeed: an sdist whose ops compile with nvcc against the installed torch
def read_deepspeed(reader: Reader) -> list[dict[str, Any]]:
    project = reader.pip("source")
    files = reader.files(project)
    rows = []
    for version in releases(files, reader.first):
        sdist = reader.sdist(of_release(files, version))
        if sdist is None:
            reader.log(f"  {project} {version}: no sdist; left out")
            continue
        info = reader.up.sdist_text(sdist, "PKG-INFO")
        if info is None:
            raise StacksRefreshError(f"{sdist.url}: no PKG-INFO")
        builder = reader.up.sdist_text(sdist, "op_builder/builder.py")
        table = literal_assignments(builder, f"{sdist.url}!op_builder/builder.py") if builder else {}
        row = build_row(
            reader,
            version,
            flavour=None,
            default=True,
            distributions=[(project, "sdist")],
            binaries=[],
            python_of={"x86_64": _requires_python(info)},
            sonames={},
            reqs=_requirements(info),
            requires=_pins(_requirements(info), r"torch"),
            nvcc_minor_mismatch_ok=_mismatch_table(table.get("cuda_minor_mismatch_ok"), sdist.url),
            evidence=[sdist.url],
            arches=list(HOST_ARCHES),
        )
        rows.append(_release(version, files, [row]))
    return rows


def _mismatch_table(value: Any, where: str) -> dict[str, list[str]] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, int)
        and isinstance(v, list)
        and all(isinstance(x, str) and re.fullmatch(r"\d+\.\d+", x) for x in v)
        for k, v in value.items()
    ):
        raise StacksRefreshError(f"{where}: cuda_minor_mismatch_ok is not {{major: ['X.Y', ...]}}")
    return {str(k): list(v) for k, v in sorted(value.items(), reverse=True)}


# Megatron-Core: wheels (a CPU helper only: the GPU stack is torch's, Transformer Engine's with [te])
def read_megatron(reader: Reader) -> list[dict[str, Any]]:
    project = reader.pip("binary")
    files = reader.files(project)
    rows = []
    for version in releases(files, reader.first):
        mine = of_release(files, version)
        wheel = reader.wheel(mine, "x86_64")
        if wheel is None:
            reader.log(f"  {project} {version}: no Linux x86_64 wheel; left out")
            continue
        metadata = reader.up.metadata(wheel)
        row = build_row(
            reader,
            version,
            flavour=None,
            default=True,
            distributions=[(project, "wheel")],
            binaries=mine,
            python_of=_python_ranges(mine, _requires_python(metadata)),
            sonames={},
            reqs=[],
            requires=_pins(_requirements(metadata), r"torch|transformer-engine.*"),
            evidence=[wheel.url],
        )
        rows.append(_release(version, files, [row], extras=_extras(metadata, ("te",))))
    return rows


# Transformer Engine: `transformer-engine` (a pure wheel) with extras for the core of each CUDA
# major (transformer-engine-cuNN, binary wheels) and for the PyTorch part (transformer-engine-torch,
# an sdist built against the installed torch)
def read_transformer_engine(reader: Reader) -> list[dict[str, Any]]:
    project = reader.pip("meta")
    files = reader.files(project)
    torch_project = reader.pip("extension")
    rows = []
    for version in releases(files, reader.first):
        meta = next((f for f in of_release(files, version) if f.kind == "wheel"), None)
        if meta is None:
            reader.log(f"  {project} {version}: no wheel; left out")
            continue
        metadata = reader.up.metadata(meta)
        hard = [canonicalize_name(r.name) for r in _requirements(metadata)]
        core = [canonicalize_name(r.name) for r in _requirements(metadata, extra="core")]
        default = next((n for n in hard if n.startswith("transformer-engine-cu")), None) or next(
            (n for n in core if n.startswith("transformer-engine-cu")), None
        )
        torch_sdist = reader.sdist(of_release(reader.files(torch_project), version))
        torch_info = reader.up.sdist_text(torch_sdist, "PKG-INFO") if torch_sdist else None
        torch_pyproject = reader.up.sdist_text(torch_sdist, "pyproject.toml") if torch_sdist else None
        builds = []
        for flavour in [f["name"] for f in reader.package["flavours"]]:
            core_project = reader.pip("core", flavour)
            core_files = of_release(reader.files(core_project), version)
            wheel = reader.wheel(core_files, "x86_64")
            if wheel is None:
                continue
            core_meta = reader.up.metadata(wheel)
            init = reader.up.wheel_text(wheel, "transformer_engine/common/__init__.py")
            floor = literal_assignments(init, wheel.url).get("MIN_CUDNN_VERSION") if init else None
            distributions = [(project, "wheel"), (core_project, "wheel")]
            evidence = [meta.url, wheel.url]
            if torch_sdist is not None:
                distributions.append((torch_project, "sdist"))
                evidence.append(torch_sdist.url)
            builds.append(
                build_row(
                    reader,
                    version,
                    flavour=flavour,
                    default=canonicalize_name(core_project) == default,
                    distributions=distributions,
                    binaries=core_files,
                    python_of=_python_ranges(core_files, _requires_python(core_meta)),
                    sonames=_sonames(reader, wheel, {"core": "transformer_engine/wheel_lib/libtransformer_engine.so"}),
                    reqs=[],
                    cudnn_min=_cudnn_floor(floor, wheel.url),
                    requires=_pins(_requirements(torch_info), r"torch") if torch_info else {},
                    build_requires=_build_requires(torch_pyproject, torch_sdist.url) if torch_pyproject else None,
                    evidence=evidence,
                )
            )
        if builds:
            extras = _extras(metadata, ("core", "core-cu12", "core-cu13", "pytorch"))
            rows.append(_release(version, files, builds, extras=extras))
    return rows


def _cudnn_floor(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not (isinstance(value, tuple) and len(value) == 3 and all(isinstance(x, int) for x in value)):
        raise StacksRefreshError(f"{where}: MIN_CUDNN_VERSION {value!r} is not (major, minor, patch)")
    return ".".join(map(str, value))


def _build_requires(pyproject: str, where: str) -> list[str]:
    import tomllib

    try:
        requires = tomllib.loads(pyproject).get("build-system", {}).get("requires", [])
    except tomllib.TOMLDecodeError as exc:
        raise StacksRefreshError(f"{where}!pyproject.toml: not TOML ({_first_line(exc)})") from None
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise StacksRefreshError(f"{where}!pyproject.toml: build-system.requires is not a list of strings")
    return requires


READERS: dict[str, Callable[[Reader], list[dict[str, Any]]]] = {
    "onnxruntime": read_onnxruntime,
    "tensorrt": read_tensorrt,
    "torch-tensorrt": read_torch_tensorrt,
    "deepspeed": read_deepspeed,
    "megatron-core": read_megatron,
    "transformer-engine": read_transformer_engine,
}
"""One refresh source per package kind of compat/stacks.yaml (its `id`)."""


# -- the refresh ------------------------------------------------------------------------------------
def refresh(stacks: dict[str, Any], upstream, *, generated: str, log: Callable[[str], None] = print) -> dict[str, Any]:
    """compat/stacks.yaml with every kind's releases read anew (its descriptions kept as they are)."""
    packages = []
    for package in stacks["packages"]:
        reader_of = READERS.get(package["id"])
        if reader_of is None:
            raise StacksRefreshError(
                f"no refresh source for package kind {package['id']!r}",
                hint=f"the kinds with one: {', '.join(READERS)}",
            )
        log(f"{package['id']}: reading {package['pip']} from {package['first_release']} on")
        try:
            rows = reader_of(Reader(upstream, package, log))
        except (ValueError, struct.error, zlib.error, InvalidSpecifier) as exc:  # an unreadable file
            raise StacksRefreshError(f"{package['id']}: unreadable file ({_first_line(exc)})") from None
        packages.append({**package, "releases": rows})
    return {"generated_by": GENERATED_BY, "generated": generated, "packages": packages}


GENERATED_BY = "python -m provision.matrix.refresh --source stacks"
HEADER = """\
# compat/stacks.yaml: the inference and training stacks (ONNX Runtime, TensorRT, Torch-TensorRT,
# DeepSpeed, Megatron-Core, Transformer Engine).
# Each package kind is described by hand: its pip names, what each distribution is (wheel or sdist)
# and what building an sdist needs (build) or running it needs (runtime), `flavours` (the build
# lines published under their own names, with the CUDA major NVIDIA documents where it does),
# `documented` facts no file of the package says (SM floors), `features` (FP8); all cite a source.
# `releases` are GENERATED by `python -m provision.matrix.refresh --source stacks` from the
# packages' own files on the package index (provision/matrix/refresh_stacks.py): do not edit them
# by hand. Only final releases are listed (post: the post releases of the same version; pin: the
# one to install where the release's own files are incomplete: TensorRT 10.14.1.48's bindings
# exist only as 10.14.1.48.post1). default: what `pip install <pip>==<version>` installs.
# Per build: cuda_major from the files (cuda_from: requires-dist, the CUDA runtime requirement;
# build-info, ONNX Runtime's recorded cuda_version, which is `cuda`; soname, the libcudart.so.N a
# shared object links; documented, the flavour NVIDIA documents where no file says it: TensorRT
# 10.15 on), never from a package name: Transformer Engine 2.6.0's transformer-engine-cu12 wheel
# links libcudart.so.13 (2.6.0.post1's links .so.12) and its row says CUDA 13. cudnn_major
# likewise (code: Transformer Engine's MIN_CUDNN_VERSION, which is `cudnn_min`); cudnn_spec: the
# declared cuDNN range in the catalogue's grammar (a range stays a range; cudnn_requirement is
# the requirement as declared). sonames: the CUDA libraries each named shared object needs (null:
# not readable without inflating most of it: ONNX Runtime 1.17.0-1.18.0's CUDA provider).
# python / python_aarch64: CPython versions with manylinux wheels within Requires-Python;
# manylinux: the newest of the wheels' glibc floors; arches: aarch64 where its wheel is the same
# build (Torch-TensorRT's aarch64 wheels from 2.9 pin other TensorRT distributions: x86_64 only).
# requires: pins to torch and the other stack packages (PEP 440, as declared).
# Left out (not readable here): the wheels of TensorRT's libs on NVIDIA's index (pypi.nvidia.com
# was not reachable from the machine that read this), so no TensorRT row carries a cuDNN or a CUDA
# minor; Transformer Engine's cuDNN floor before 2.20.2 (its files before carry no
# MIN_CUDNN_VERSION); builds published only on download.pytorch.org or Azure feeds
# (Torch-TensorRT's CUDA 12 builds from 2.9, ONNX Runtime's CUDA 12 builds of 1.17-1.18 and CUDA 11
# builds from 1.19); DeepSpeed's Python range (its sdists declare none).
"""


def dump(doc: dict[str, Any]) -> str:
    out = io.StringIO()
    yaml.dump(doc, out, Dumper=_QuotedDumper, sort_keys=False, width=200, default_flow_style=None)
    return HEADER + out.getvalue()


def check(committed: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """A unified diff (``-`` committed, ``+`` upstream) of everything but ``generated``; [] when equal."""
    import difflib

    old = {k: v for k, v in committed.items() if k != "generated"}
    new = {k: v for k, v in fresh.items() if k != "generated"}
    if old == new:
        return []
    body = lambda d: [ln for ln in dump(d).splitlines(keepends=True) if not ln.startswith("#")]  # noqa: E731
    return list(difflib.unified_diff(body(old), body(new), f"compat/{FILE}", "upstream"))


def recorded_date(root: Path) -> str:
    """The ``retrieved:`` date of a recorded copy's SOURCE.txt."""
    text = read_recorded(root, "SOURCE.txt", StacksRefreshError) or ""
    m = re.search(r"^retrieved: (\d{4}-\d{2}-\d{2})$", text, re.M)
    if not m:
        raise StacksRefreshError(f"{root}/SOURCE.txt: no 'retrieved: YYYY-MM-DD' line")
    return m[1]


def _first_line(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0]


# -- recording a copy ---------------------------------------------------------------------------------
SOURCE_TXT = """\
key: {key}
upstream: {simple}/<project>/ (PEP 691 JSON) for the projects {projects},
  and the files those pages list (https://files.pythonhosted.org/...), as the rows' `evidence` names them
retrieved: {date}
how: written by `python -m provision.matrix.refresh_stacks --record DIR`, the refresh's own readers:
  index/<project>.json: the page's meta and name, and its file entries that a reader may use (not
  yanked; a final release from the kind's first_release on, or its post release; an sdist, a pure
  wheel or a Linux wheel), each entry as the index serves it;
  wheels/<file>/METADATA and sdists/<file>/PKG-INFO: the core metadata fields, up to the first blank
  line (the long description after them is left out); METADATA read from PEP 658 .metadata where
  the index serves it, else out of the wheel with HTTP range requests;
  wheels/<file>/<member>.assign and sdists/<file>/<member>.assign: only the top-level assignments
  the refresh reads from that .py member (cuda_version, MIN_CUDNN_VERSION, cuda_minor_mismatch_ok),
  as their source lines;
  wheels/<file>/<member>.needed: how the shared object was read (dynamic: its DT_NEEDED entries,
  the object inflated whole; first-segment: the soname strings of its first, read-only loadable
  segment; unread) and the CUDA-library sonames found, one a line;
  sdists/<file>/pyproject.toml: verbatim.
why: `python -m provision.matrix.refresh --source stacks --check --from tests/fixtures/refresh/stacks`
  reproduces compat/stacks.yaml's releases from this copy (tests/unit/test_refresh_stacks.py).
"""


def record(compat: Path, root: Path, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Read the index (network) and write what was read under ``root``; returns the refreshed doc."""
    from provision.matrix.refresh import _catalogue

    raw = _catalogue(compat)
    stacks = raw["stacks"]
    first = {}
    projects = []
    for package in stacks["packages"]:
        flavours = [f["name"] for f in package.get("flavours") or ()] or [None]
        for dist in package["distributions"]:
            for flavour in flavours:
                name = canonicalize_name(dist["pip"].format(flavour=flavour or ""))
                first[name] = Version(package["first_release"])
                if name not in projects:
                    projects.append(name)
    root.mkdir(parents=True, exist_ok=True)
    date = dt.date.today().isoformat()
    doc = refresh(stacks, Recorder(Live(), root, first), generated=date, log=log)
    (root / "SOURCE.txt").write_text(
        SOURCE_TXT.format(key=SOURCE_KEY, simple=PYPI_SIMPLE, projects=", ".join(projects), date=date)
    )
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m provision.matrix.refresh_stacks",
        description="Record the package-index files the stacks refresh reads (the network), for --from.",
    )
    parser.add_argument("--record", type=Path, required=True, metavar="DIR", help="write the recorded copy here")
    parser.add_argument("--compat-dir", default=None, help="compat/ directory (default: the project's)")
    args = parser.parse_args(argv)
    from provision.errors import ProvisionError
    from provision.matrix.refresh import _report
    from provision.resources import compat_dir

    try:
        record(Path(compat_dir(args.compat_dir)), args.record, log=lambda m: print(m, file=sys.stderr))
    except ProvisionError as exc:
        return _report(exc)
    print(f"recorded {args.record}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
