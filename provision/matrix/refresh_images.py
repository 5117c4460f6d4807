"""The ``images`` refresh source: compat/images.yaml against NVIDIA's container-images repository.

NVIDIA's ``doc/supported-tags.md`` lists every supported ``nvidia/cuda`` tag under ``### <os>`` /
``#### CUDA <version>`` headings, ``doc/unsupported-tags.md`` lists the end-of-life ones, and each
cudnn flavour's ``dist/<cuda>/<os>/runtime/<marker>/Dockerfile`` sets ``NV_CUDNN_VERSION``. From
these the source rebuilds, for every release of a CUDA line the catalogue knows (cuda.yaml), the
fields of its images.yaml row: ``os`` (the OS suffixes os.yaml plans for), ``flavours``, ``cudnn``
(version, marker and the OSes with cudnn tags) and whether it is end of life.

A new image set whose number is not a cuda.yaml release (a cuBLAS rebuild such as 12.9.2) also
gets ``toolkit`` (toolkit_of): its runtime Dockerfile's ``NV_LIBCUBLAS_VERSION``, and the older
release of its line whose image set installs the same ``NV_CUDA_CUDART_VERSION``.

Which rows it owns: every release upstream lists, and every catalogue row that cites one of
``owned_keys`` (a recorded copy: its own source key; the live repository: every ``cuda-images*``
key). A row from another source that upstream does not list (a newer release than a recorded
copy) is not compared. ``eol`` is compared one way: a release upstream lists as end of life must
carry ``eol``; a supported listing does not clear an ``eol`` that records a newer update found
elsewhere (NVIDIA's doc can lag its own dist/ tree).

A recorded copy without ``doc/supported-tags.md`` may list its image sets by their Dockerfiles
instead: ``TREE.txt`` beside its SOURCE.txt names ``dist/<cuda>/<os dir>/<flavour>[/<marker>]/Dockerfile``
paths, one a line (parse_tree); a path under ``dist/end-of-life/`` lists an end-of-life tag.

``platforms`` is compared and written only for the releases whose ``dist/<cuda>/cuda-platforms.json``
the source holds: the architectures it lists for every OS of the row, narrowed, for a row with
cudnn tags, by ``cudnn-platforms.json`` or, without one, by the ``base-<arch>`` stages of the cudnn
Dockerfiles the row's cuDNN is read from. Only amd64: no ``platforms`` (the images.yaml default).
"""

from __future__ import annotations

import json
import os
import re
import stat
import urllib.error
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provision.errors import CompatDataError, InputError

UPSTREAM = "https://gitlab.com/nvidia/container-images/cuda/-/raw/master/"
LIVE_KEYS = "cuda-images*"
FLAVOURS = ("base", "runtime", "devel", "cudnn-runtime", "cudnn-devel")

Get = Callable[[str], str | None]  # repository-relative path -> text, None when absent

_TAG = re.compile(
    r"^(?P<cuda>\d+\.\d+\.\d+)-(?:(?P<marker>cudnn\d*)-)?(?P<flavour>base|runtime|devel)-(?P<os>[a-z]+[0-9][0-9.]*)$"
)
# Both Dockerfile forms: "ENV NV_CUDNN_VERSION=9.10.2.21-1" (12.4 on) and "ENV NV_CUDNN_VERSION 8.9.6.50".
_CUDNN = re.compile(r"^ENV NV_CUDNN_VERSION[= ]\s*(?P<v>\d+(?:\.\d+)+)(?:-\S+)?\s*$", re.M)


class ImagesRefreshError(InputError):
    """What NVIDIA's repository (or a recorded copy of it) says cannot be read into rows (exit 2)."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(
            f"images: {message}",
            hint=hint or "check the recorded copy (--from) or the upstream repository; compat/ is unchanged",
        )


MAX_RECORDED_BYTES = 8 * 1024 * 1024  # a recorded file larger than this is not one of NVIDIA's docs


def read_recorded(root: Path, path: str, error: type[InputError]) -> str | None:
    """The UTF-8 text of ``path`` inside the recorded copy ``root``; None when it is absent.
    Refused (``error``): a path that is or passes through a symlink, resolves outside ``root``,
    is not a regular file, is over MAX_RECORDED_BYTES, or is not UTF-8."""
    if not _SAFE.match(path) or ".." in path.split("/"):
        raise error(f"unsafe path {path!r}")
    base = root.resolve()
    where = base
    for part in path.split("/"):
        where = where / part
        try:
            info = os.lstat(where)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise error(f"{where}: cannot read ({exc.strerror or exc})") from None
        if stat.S_ISLNK(info.st_mode):
            raise error(f"{where}: a symlink (a recorded copy holds plain files only)")
    if not where.resolve().is_relative_to(base):
        raise error(f"{where}: outside the recorded copy {base}")
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{where}: not a regular file")
    if info.st_size > MAX_RECORDED_BYTES:
        raise error(f"{where}: {info.st_size} bytes, over the {MAX_RECORDED_BYTES}-byte cap for a recorded file")
    try:
        with open(where, "rb") as handle:
            data = handle.read(MAX_RECORDED_BYTES + 1)
    except OSError as exc:
        raise error(f"{where}: cannot read ({exc.strerror or exc})") from None
    return decode_capped(data, str(where), error)


def decode_capped(data: bytes, where: str, error: type[InputError]) -> str:
    """``data`` as UTF-8 text, refused (``error``) over MAX_RECORDED_BYTES or when not UTF-8."""
    if len(data) > MAX_RECORDED_BYTES:
        raise error(f"{where}: over the {MAX_RECORDED_BYTES}-byte cap for a recorded file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{where}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


@dataclass
class Listed:
    """What one doc says of one release: OS -> flavours, and the cudnn marker."""

    os: dict[str, set[str]] = field(default_factory=dict)
    marker: str | None = None


def parse_tags(text: str) -> dict[str, Listed]:
    """Tags of a supported-tags.md or unsupported-tags.md: {cuda: Listed}. A tag is read from
    each list item's first backquoted word (both docs write it so); the ``### <os>`` heading
    must agree with the tag's suffix."""
    out: dict[str, Listed] = {}
    section = None
    for line in text.splitlines():
        if line.startswith("### "):
            section = line[4:].strip()
            continue
        if not line.startswith("- "):
            continue
        m = re.search(r"`([^`]+)`", line)
        tag = m and _TAG.match(m.group(1))
        if not tag:
            continue
        if section is not None and tag["os"] != section:
            raise ImagesRefreshError(f"tag {m.group(1)} listed under ### {section}")
        listed = out.setdefault(tag["cuda"], Listed())
        flavour = f"cudnn-{tag['flavour']}" if tag["marker"] else tag["flavour"]
        if flavour == "cudnn-base":
            continue
        listed.os.setdefault(tag["os"], set()).add(flavour)
        if tag["marker"]:
            if listed.marker not in (None, tag["marker"]):
                raise ImagesRefreshError(f"CUDA {tag['cuda']}: cudnn markers {listed.marker} and {tag['marker']}")
            listed.marker = tag["marker"]
    return out


TREE = "TREE.txt"
_TREE_PATH = re.compile(
    r"^dist/(?P<eol>end-of-life/)?(?P<cuda>\d+\.\d+\.\d+)/(?P<os>[a-z]+[0-9][0-9.]*)/"
    r"(?P<flavour>base|runtime|devel)(?:/(?P<marker>cudnn\d*))?/Dockerfile$"
)


def os_suffix(directory: str) -> str:
    """A dist/ OS directory's tag suffix: ubuntu2204 -> ubuntu22.04 (os_dir's inverse)."""
    m = re.match(r"^ubuntu(\d\d)(\d\d)$", directory)
    return f"ubuntu{m[1]}.{m[2]}" if m else directory


def parse_tree(text: str) -> tuple[dict[str, Listed], dict[str, Listed]]:
    """(supported, end of life) tags of a TREE.txt: each ``dist/[end-of-life/]<cuda>/<os dir>/<flavour>
    [/<marker>]/Dockerfile`` line is the tag ``<cuda>-[<marker>-]<flavour>-<os>``; ``#`` lines and
    blank lines are skipped, any other line is refused."""
    supported: dict[str, Listed] = {}
    ended: dict[str, Listed] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _TREE_PATH.match(line)
        if not m:
            raise ImagesRefreshError(
                f"{TREE} line {number}: not a dist/<cuda>/<os>/<flavour>[/<marker>]/Dockerfile path"
            )
        listed = (ended if m["eol"] else supported).setdefault(m["cuda"], Listed())
        flavour = f"cudnn-{m['flavour']}" if m["marker"] else m["flavour"]
        if flavour == "cudnn-base":
            continue
        listed.os.setdefault(os_suffix(m["os"]), set()).add(flavour)
        if m["marker"]:
            if listed.marker not in (None, m["marker"]):
                raise ImagesRefreshError(f"CUDA {m['cuda']}: cudnn markers {listed.marker} and {m['marker']}")
            listed.marker = m["marker"]
    return supported, ended


_ARCH = {"x86_64": "linux/amd64", "amd64": "linux/amd64", "arm64": "linux/arm64"}
_STAGE = re.compile(r"^FROM\s+\S+\s+AS\s+base-(?P<arch>amd64|arm64)\s*$", re.M | re.I)


def parse_platforms(text: str, where: str) -> dict[str, set[str]]:
    """{os suffix: {linux/amd64, linux/arm64, ...}} of a cuda-platforms.json or cudnn-platforms.json."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ImagesRefreshError(f"{where}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(a in _ARCH for a in v) for k, v in doc.items()
    ):
        raise ImagesRefreshError(f"{where}: expected {{os: [x86_64|arm64, ...]}}")
    return {k: {_ARCH[a] for a in v} for k, v in doc.items()}


def dockerfile_arches(dockerfile: str) -> set[str]:
    """The platforms a multi-arch Dockerfile builds: its ``FROM ... AS base-<arch>`` stages
    (a single-arch Dockerfile has none: linux/amd64)."""
    return {_ARCH[m["arch"].lower()] for m in _STAGE.finditer(dockerfile)} or {"linux/amd64"}


def _platforms(
    get: Get, base: str, oses: list[str], cudnn_oses: list[str], cudnn_files: dict[str, str]
) -> list[str] | bool | None:
    """A row's ``platforms`` values from ``base``/cuda-platforms.json (False: the source holds no such
    file, nothing to say); None when only linux/amd64."""
    text = get(f"{base}/cuda-platforms.json")
    if text is None:
        return False
    listed = parse_platforms(text, f"{base}/cuda-platforms.json")
    arches = set.intersection(*(listed.get(o, set()) for o in oses)) if oses else set()
    if cudnn_oses:
        cudnn_text = get(f"{base}/cudnn-platforms.json")
        if cudnn_text is not None:
            cudnn = parse_platforms(cudnn_text, f"{base}/cudnn-platforms.json")
            arches &= set.intersection(*(cudnn.get(o, set()) for o in cudnn_oses))
        else:
            arches &= set.intersection(*(dockerfile_arches(cudnn_files[o]) for o in cudnn_oses))
    if "linux/amd64" not in arches:
        raise ImagesRefreshError(f"{base}/cuda-platforms.json: not every OS of the row is built for x86_64")
    values = [p for p in ("linux/amd64", "linux/arm64") if p in arches]
    return values if len(values) > 1 else None


def parse_cudnn(dockerfile: str) -> str:
    """``NV_CUDNN_VERSION`` of a cudnn Dockerfile, without the package release: "9.14.0.64"."""
    found = {m["v"] for m in _CUDNN.finditer(dockerfile)}
    if len(found) != 1:
        raise ImagesRefreshError(f"expected one NV_CUDNN_VERSION, found {sorted(found) or 'none'}")
    return found.pop()


def _mm(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def os_dir(os_suffix: str) -> str:
    """dist/ directory of an OS suffix: ubuntu22.04 -> ubuntu2204 (NVIDIA's layout since 2024)."""
    return os_suffix.replace(".", "")


def upstream_rows(
    get: Get, oses: Iterable[str], lines: set[str], listed_eol: set[str] | None = None
) -> dict[str, dict[str, Any]]:
    """{cuda: row} for every release of a catalogued CUDA line on the given OSes. End-of-life
    releases only where ``listed_eol`` (the catalogue's releases) names them, when given: the
    catalogue keeps few of them, and each costs its Dockerfiles."""
    oses = list(oses)
    supported_text = get("doc/supported-tags.md")
    tree = get(TREE) if supported_text is None else None
    if tree is not None:
        supported, ended = parse_tree(tree)
        if not supported:
            raise ImagesRefreshError(f"{TREE} lists no supported image set")
    else:
        if supported_text is None:
            raise ImagesRefreshError("doc/supported-tags.md is missing")
        supported = parse_tags(supported_text)
        if not supported:
            raise ImagesRefreshError("doc/supported-tags.md lists no nvidia/cuda tags (an empty or truncated copy?)")
        ended = parse_tags(get("doc/unsupported-tags.md") or "")
    rows: dict[str, dict[str, Any]] = {}
    for eol, listing in ((True, ended), (False, supported)):  # supported wins over a stale EOL entry
        for cuda, listed in listing.items():
            present = [o for o in oses if o in listed.os]
            if _mm(cuda) not in lines or not present:
                continue
            if eol and listed_eol is not None and cuda not in listed_eol and cuda not in supported:
                continue
            flavours = set().union(*(listed.os[o] for o in present))
            with_cudnn = [o for o in present if "cudnn-runtime" in listed.os[o] or "cudnn-devel" in listed.os[o]]
            cudnn = None
            base = f"dist/end-of-life/{cuda}" if eol else f"dist/{cuda}"
            cudnn_files: dict[str, str] = {}
            if with_cudnn:
                versions = set()
                for o in with_cudnn:
                    path = f"{base}/{os_dir(o)}/runtime/{listed.marker}/Dockerfile"
                    text = get(path)
                    if text is None:
                        raise ImagesRefreshError(f"{path} is missing (listed: {cuda}-{listed.marker}-runtime-{o})")
                    cudnn_files[o] = text
                    versions.add(parse_cudnn(text))
                if len(versions) != 1:
                    raise ImagesRefreshError(f"CUDA {cuda}: different cuDNN builds per OS: {sorted(versions)}")
                cudnn = {"version": versions.pop(), "marker": listed.marker}
                if len(with_cudnn) < len(present):
                    cudnn["os"] = with_cudnn
            rows[cuda] = {
                "cuda": cuda,
                "os": present,
                "flavours": [f for f in FLAVOURS if f in flavours],
                "cudnn": cudnn,
                "eol": eol,
            }
            platforms = _platforms(get, base, present, with_cudnn, cudnn_files)
            if platforms is not False:
                rows[cuda]["platforms"] = platforms
    return rows


def catalogue_rows(images: dict[str, Any]) -> dict[str, tuple[dict[str, Any], str]]:
    """{cuda: (row in the refresh's shape, its source key)} from images.yaml."""
    out = {}
    for r in images["releases"]:
        cudnn = r.get("cudnn")
        if cudnn is not None:
            cudnn = {k: cudnn[k] for k in ("version", "marker", "os") if k in cudnn}
        row = {
            "cuda": r["cuda"],
            "os": list(r["os"]),
            "flavours": [f for f in FLAVOURS if f in r["flavours"]],
            "cudnn": cudnn,
            "eol": r.get("eol") is not None,
            "platforms": list(r["platforms"]["values"]) if r.get("platforms") else None,
        }
        out[r["cuda"]] = (row, r["source"])
    return out


def _owned(key: str, owned_keys: str | set[str]) -> bool:
    if isinstance(owned_keys, str):
        return key.startswith(owned_keys.rstrip("*")) if owned_keys.endswith("*") else key == owned_keys
    return key in owned_keys


def compare(
    upstream: dict[str, dict[str, Any]], committed: dict[str, tuple[dict[str, Any], str]], owned_keys: str | set[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the owned committed rows, what upstream says of them), newest first, aligned for a diff."""
    old, new = [], []
    versions = set(upstream) | {c for c, (_, key) in committed.items() if _owned(key, owned_keys)}
    for cuda in sorted(versions, key=_key, reverse=True):
        mine = committed.get(cuda, (None, None))[0]
        theirs = upstream.get(cuda)
        if theirs is not None and theirs["eol"] and mine is None:
            continue  # end-of-life releases the catalogue does not list: nothing to plan with
        if theirs is not None and mine is not None and mine["eol"] and not theirs["eol"]:
            theirs = dict(theirs, eol=True)  # a supersession recorded from a newer source stands
        if mine is not None and (theirs is None or "platforms" not in theirs):
            mine = {k: v for k, v in mine.items() if k != "platforms"}  # the source says nothing of them
        if mine is not None:
            old.append(mine)
        if theirs is not None:
            new.append(theirs)
    return old, new


def render(rows: list[dict[str, Any]]) -> list[str]:
    return [format_value(r) + "\n" for r in rows]


def check(compat: Path, get: Get, owned_keys: str | set[str]) -> list[str]:
    """Unified-diff lines between the owned images.yaml rows and upstream; empty when equal."""
    import difflib

    images = yaml.safe_load((compat / "images.yaml").read_text())
    oses_yaml = yaml.safe_load((compat / "os.yaml").read_text())
    cuda_yaml = yaml.safe_load((compat / "cuda.yaml").read_text())
    oses = list(dict.fromkeys(o["cuda_image_os"] for o in oses_yaml["os"]))
    lines = {_mm(r["version"]) for r in cuda_yaml["releases"]}
    committed = catalogue_rows(images)
    old, new = compare(upstream_rows(get, oses, lines, set(committed)), committed, owned_keys)
    return list(difflib.unified_diff(render(old), render(new), "compat/images.yaml", "upstream"))


# -- where the documents come from ---------------------------------------------------------------
def live_get(fetch: Callable[[str, dict[str, str]], bytes]) -> Get:
    def get(path: str) -> str | None:
        try:
            body = fetch(UPSTREAM + path, {})
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        return decode_capped(body, UPSTREAM + path, ImagesRefreshError)

    return get


_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")


def recorded_get(root: Path) -> Get:
    """Documents from a recorded copy laid out as the repository (read_recorded: paths validated,
    no ``..``, no symlinks, size-capped, UTF-8)."""
    return lambda path: read_recorded(root, path, ImagesRefreshError)


def recorded_key(root: Path, error: type[InputError] = ImagesRefreshError) -> str:
    """The compat/sources.yaml key a recorded copy is (``key:`` line of its SOURCE.txt)."""
    text = read_recorded(root, "SOURCE.txt", error)
    if text is None:
        raise error(f"{root}: not a recorded copy (no SOURCE.txt)", hint="point --from at a recorded copy")
    m = re.search(r"^key:\s*([a-z0-9][a-z0-9.-]*)\s*$", text, re.M)
    if not m:
        raise error(f"{root / 'SOURCE.txt'}: no 'key:' line", hint="add the copy's compat/sources.yaml key to it")
    return m.group(1)


# -- writing the rows back -----------------------------------------------------------------------
_ROW = re.compile(r'^  - \{cuda: "(?P<cuda>\d+(?:\.\d+)+)",')


def format_value(value: Any) -> str:
    """images.yaml's one-line style: versions and dates quoted, names bare, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    text = str(value)
    return f'"{text}"' if re.match(r"^\d", text) else text


def format_row(row: dict[str, Any]) -> str:
    return "  - " + format_value(row) + "\n"


_ENV = r"^ENV {name}[= ]\s*(?P<v>\d+(?:\.\d+)+)(?:-\d+)?\s*$"


def dockerfile_env(dockerfile: str, name: str, where: str) -> str | None:
    """The one value of ``ENV name=`` (or ``ENV name value``) in a Dockerfile, less its package
    release (``-1``); the amd64 and arm64 stages must agree. None when it is not set."""
    found = {m["v"] for m in re.finditer(_ENV.format(name=name), dockerfile, re.M)}
    if len(found) > 1:
        raise ImagesRefreshError(f"{where}: different {name} values {sorted(found)}")
    return found.pop() if found else None


def _cudart(get: Get, cuda: str, os_suffix: str, eol: bool) -> tuple[str, str] | None:
    """(cudart version, the file it came from) of an image set on one OS: NV_CUDA_CUDART_VERSION of
    its runtime Dockerfile, else of its base Dockerfile (where NVIDIA sets it); None when the copy
    holds neither file. ``eol``: look under dist/end-of-life first (then dist/), else the other way."""
    bases = [f"dist/end-of-life/{cuda}", f"dist/{cuda}"]
    for base in bases if eol else bases[::-1]:
        for flavour in ("runtime", "base"):
            path = f"{base}/{os_dir(os_suffix)}/{flavour}/Dockerfile"
            text = get(path)
            if text is not None and (found := dockerfile_env(text, "NV_CUDA_CUDART_VERSION", path)) is not None:
                return found, path
    return None


def toolkit_of(get: Get, up: dict[str, Any], releases: list[str], ended: set[str], key: str) -> dict[str, Any]:
    """images.yaml ``toolkit`` of an image set whose number is not a cuda.yaml release (a cuBLAS
    patch rebuild such as 12.9.2): cuBLAS from NV_LIBCUBLAS_VERSION of its runtime Dockerfile, and
    the older cuda.yaml release of the same line whose image set installs the same cudart
    (NV_CUDA_CUDART_VERSION). ``ended``: the releases whose Dockerfiles are under dist/end-of-life.
    Refused when the copy does not hold what that takes."""
    cuda = up["cuda"]
    by_hand = f"add its toolkit row by hand: CUDA {cuda} is not a cuda.yaml toolkit release"
    hint = "add `toolkit: {version, cublas, source}` to its images.yaml row (compat/images.yaml header)"
    older = sorted((r for r in releases if _mm(r) == _mm(cuda) and _key(r) < _key(cuda)), key=_key, reverse=True)
    for os_suffix in up["os"]:
        path = f"{'dist/end-of-life' if up['eol'] else 'dist'}/{cuda}/{os_dir(os_suffix)}/runtime/Dockerfile"
        runtime = get(path)
        mine = _cudart(get, cuda, os_suffix, up["eol"])
        if runtime is None or mine is None:
            continue
        cublas = dockerfile_env(runtime, "NV_LIBCUBLAS_VERSION", path)
        if cublas is None:
            raise ImagesRefreshError(f"{by_hand} and {path} sets no NV_LIBCUBLAS_VERSION", hint=hint)
        for release in older:
            theirs = _cudart(get, release, os_suffix, release in ended)
            if theirs is not None and theirs[0] == mine[0]:
                return {"version": release, "cublas": cublas, "source": key}
        raise ImagesRefreshError(
            f"{by_hand}, and no older {_mm(cuda)} release's image set in the copy carries its cudart {mine[0]} "
            f"({mine[1]})",
            hint=hint,
        )
    raise ImagesRefreshError(
        f"{by_hand}, and the copy holds no dist/{cuda}/<os>/runtime/Dockerfile with NV_LIBCUBLAS_VERSION "
        f"and NV_CUDA_CUDART_VERSION (runtime or base) to read its toolkit from",
        hint=hint,
    )


def write(compat: Path, get: Get, owned_keys: str | set[str], key: str) -> tuple[str | None, list[str]]:
    """Bring the owned images.yaml rows to what upstream says: changed and new rows cite ``key``
    (a compat/sources.yaml key); a row newly listed end of life gets ``eol`` (undated, superseded
    by the newest update of its line); a new image set whose number is not a cuda.yaml release
    gets ``toolkit`` (toolkit_of). Rows upstream no longer lists are reported, not deleted.
    Returns (the new images.yaml text, None when nothing changed; notes). Writes nothing: the
    caller checks the whole catalogue with the new text before replacing the file."""
    path = compat / "images.yaml"
    text = path.read_text(encoding="utf-8")
    images = yaml.safe_load(text)
    oses = list(dict.fromkeys(o["cuda_image_os"] for o in yaml.safe_load((compat / "os.yaml").read_text())["os"]))
    releases = [r["version"] for r in yaml.safe_load((compat / "cuda.yaml").read_text())["releases"]]
    lines_known = {_mm(r) for r in releases}
    committed = catalogue_rows(images)
    upstream = upstream_rows(get, oses, lines_known, set(committed))
    old, new = compare(upstream, committed, owned_keys)
    notes: list[str] = []
    by_cuda = {r["cuda"]: r for r in images["releases"]}
    theirs = {r["cuda"]: r for r in new}
    for r in old:
        if r["cuda"] not in theirs:
            notes.append(f"CUDA {r['cuda']}: upstream no longer lists it; the row is kept (remove it by hand)")
    replaced: dict[str, dict[str, Any]] = {}
    for cuda, up in theirs.items():
        mine = committed.get(cuda, (None, None))[0]
        if mine is not None and "platforms" not in up:
            mine = {k: v for k, v in mine.items() if k != "platforms"}
        if mine == up:
            continue
        existing = by_cuda.get(cuda, {})
        eol = existing.get("eol")
        if up["eol"] and eol is None:
            newer = [c for c in set(upstream) | set(committed) if _mm(c) == _mm(cuda) and _key(c) > _key(cuda)]
            newer = [c for c in newer if not upstream.get(c, {}).get("eol", False)]
            eol = {"date": None, "superseded_by": max(newer, key=_key) if newer else None, "source": key}
        # the fields this source owns are replaced; others (platforms, ...) are kept in place
        row: dict[str, Any] = {"cuda": cuda, "os": up["os"], "flavours": up["flavours"], "cudnn": up["cudnn"]}
        if up.get("platforms"):  # kept with its own source while the values stand
            same = (existing.get("platforms") or {}).get("values") == up["platforms"]
            row["platforms"] = existing["platforms"] if same else {"values": up["platforms"], "source": key}
        skip = ("eol", "source", "platforms") if "platforms" in up else ("eol", "source")
        row.update({k: v for k, v in existing.items() if k not in (*row, *skip)})
        if "toolkit" not in row and cuda not in releases:
            ended = {c for c, up_row in upstream.items() if up_row["eol"]}
            ended |= {c for c, (mine_row, _) in committed.items() if mine_row["eol"]}
            row["toolkit"] = toolkit_of(get, up, releases, ended, key)
        if eol is not None:
            row["eol"] = eol
        row.update({k: v for k, v in existing.items() if k not in (*row, *skip)})
        row["source"] = key
        replaced[cuda] = row
    if not replaced:
        return None, notes
    for cuda in sorted(replaced, key=_key, reverse=True):
        notes.append(f"CUDA {cuda}: {'updated' if cuda in by_cuda else 'added'} (source {key})")
    return _splice(text, replaced, by_cuda), notes


def _splice(text: str, replaced: dict[str, dict[str, Any]], by_cuda: dict[str, Any]) -> str:
    """images.yaml ``text`` with the ``replaced`` rows rewritten in place and new ones inserted
    newest first among the one-line rows."""
    out: list[str] = []
    pending = sorted((c for c in replaced if c not in by_cuda), key=_key, reverse=True)
    after_last_row = None
    for line in text.splitlines(keepends=True):
        m = _ROW.match(line)
        if m:
            while pending and _key(pending[0]) > _key(m["cuda"]):
                out.append(format_row(replaced[pending.pop(0)]))
        out.append(format_row(replaced[m["cuda"]]) if m and m["cuda"] in replaced else line)
        if m:
            after_last_row = len(out)
    if pending:  # older than every row: after the last one
        if after_last_row is None:
            raise CompatDataError(
                "images.yaml", "releases", f"no one-line rows to place CUDA {', '.join(pending)} among"
            )
        out[after_last_row:after_last_row] = [format_row(replaced[c]) for c in pending]
    return "".join(out)
