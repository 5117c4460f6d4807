"""The ``images`` refresh source: compat/images.yaml against NVIDIA's container-images repository.

NVIDIA's ``doc/supported-tags.md`` lists every supported ``nvidia/cuda`` tag under ``### <os>`` /
``#### CUDA <version>`` headings, ``doc/unsupported-tags.md`` lists the end-of-life ones, and each
cudnn flavour's ``dist/<cuda>/<os>/runtime/<marker>/Dockerfile`` sets ``NV_CUDNN_VERSION``. From
these the source rebuilds, for every release of a CUDA line the catalogue knows (cuda.yaml), the
fields of its images.yaml row: ``os`` (the OS suffixes os.yaml plans for), ``flavours``, ``cudnn``
(version, marker and the OSes with cudnn tags) and whether it is end of life.

Which rows it owns: every release upstream lists, and every catalogue row that cites one of
``owned_keys`` (a recorded copy: its own source key; the live repository: every ``cuda-images*``
key). A row from another source that upstream does not list (a newer release than a recorded
copy) is not compared. ``eol`` is compared one way: a release upstream lists as end of life must
carry ``eol``; a supported listing does not clear an ``eol`` that records a newer update found
elsewhere (NVIDIA's doc can lag its own dist/ tree).
"""

from __future__ import annotations

import re
import urllib.error
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

UPSTREAM = "https://gitlab.com/nvidia/container-images/cuda/-/raw/master/"
LIVE_KEYS = "cuda-images*"
FLAVOURS = ("base", "runtime", "devel", "cudnn-runtime", "cudnn-devel")

Get = Callable[[str], str | None]  # repository-relative path -> text, None when absent

_TAG = re.compile(
    r"^(?P<cuda>\d+\.\d+\.\d+)-(?:(?P<marker>cudnn\d*)-)?(?P<flavour>base|runtime|devel)-(?P<os>[a-z]+[0-9][0-9.]*)$"
)
# Both Dockerfile forms: "ENV NV_CUDNN_VERSION=9.10.2.21-1" (12.4 on) and "ENV NV_CUDNN_VERSION 8.9.6.50".
_CUDNN = re.compile(r"^ENV NV_CUDNN_VERSION[= ]\s*(?P<v>\d+(?:\.\d+)+)(?:-\S+)?\s*$", re.M)


class ImagesRefreshError(Exception):
    pass


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
    if supported_text is None:
        raise ImagesRefreshError("doc/supported-tags.md is missing")
    supported = parse_tags(supported_text)
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
            if with_cudnn:
                versions = set()
                for o in with_cudnn:
                    base = f"dist/end-of-life/{cuda}" if eol else f"dist/{cuda}"
                    path = f"{base}/{os_dir(o)}/runtime/{listed.marker}/Dockerfile"
                    text = get(path)
                    if text is None:
                        raise ImagesRefreshError(f"{path} is missing (listed: {cuda}-{listed.marker}-runtime-{o})")
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
            return fetch(UPSTREAM + path, {}).decode("utf-8")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    return get


_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")


def recorded_get(root: Path) -> Get:
    """Documents from a recorded copy laid out as the repository (paths validated, no ``..``)."""
    root = root.resolve()

    def get(path: str) -> str | None:
        if not _SAFE.match(path) or ".." in path.split("/"):
            raise ImagesRefreshError(f"unsafe path {path!r}")
        p = root / path
        return p.read_text() if p.is_file() else None

    return get


def recorded_key(root: Path) -> str:
    """The compat/sources.yaml key a recorded copy is (``key:`` line of its SOURCE.txt)."""
    text = (root / "SOURCE.txt").read_text()
    m = re.search(r"^key:\s*([a-z0-9][a-z0-9.-]*)\s*$", text, re.M)
    if not m:
        raise ImagesRefreshError(f"{root / 'SOURCE.txt'}: no 'key:' line")
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


def write(compat: Path, get: Get, owned_keys: str | set[str], key: str) -> tuple[bool, list[str]]:
    """Bring the owned images.yaml rows to what upstream says: changed and new rows cite ``key``
    (a compat/sources.yaml key); a row newly listed end of life gets ``eol`` (undated, superseded
    by the newest update of its line). Rows upstream no longer lists are reported, not deleted.
    Returns (changed, notes)."""
    path = compat / "images.yaml"
    text = path.read_text()
    images = yaml.safe_load(text)
    oses = list(dict.fromkeys(o["cuda_image_os"] for o in yaml.safe_load((compat / "os.yaml").read_text())["os"]))
    lines_known = {_mm(r["version"]) for r in yaml.safe_load((compat / "cuda.yaml").read_text())["releases"]}
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
        row.update({k: v for k, v in existing.items() if k not in (*row, "eol", "source")})
        if eol is not None:
            row["eol"] = eol
        row.update({k: v for k, v in existing.items() if k not in (*row, "source")})
        row["source"] = key
        replaced[cuda] = row
    if not replaced:
        return False, notes
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
            raise ImagesRefreshError(f"{path}: no release rows to place CUDA {', '.join(pending)} among")
        out[after_last_row:after_last_row] = [format_row(replaced[c]) for c in pending]
    path.write_text("".join(out))
    for cuda in sorted(replaced, key=_key, reverse=True):
        notes.append(f"CUDA {cuda}: {'updated' if cuda in by_cuda else 'added'} (source {key})")
    return True, notes
