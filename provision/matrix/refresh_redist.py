"""The ``cuda-redist`` refresh source: compat/cuda.yaml's ``min_driver`` against NVIDIA's CUDA
redistrib manifests, ``https://developer.download.nvidia.com/compute/cuda/redist/redistrib_<X.Y.Z>.json``.

Up to CUDA 13.3 each manifest carries the Linux driver bundled with the release (its
``nvidia_driver`` component: ``version`` and one ``linux-<arch>`` archive per architecture). The
release notes' Table 3 ("CUDA Toolkit and Corresponding Driver Versions"), which cuda.yaml's
``min_driver`` cites, lists that driver for most releases. Table 3 gives a minimum, so a bundled
driver of the same branch that is newer than it agrees with the row: one note line, not drift
(12.2.1 bundles 535.86.10 over Table 3's 535.86.09, 12.8.0 bundles 570.86.10 over 570.26;
tests/fixtures/refresh/cuda-redist/SOURCES.md). A bundled driver of another branch, or one older
than the row's minimum, contradicts the row: drift, shown as a diff, which a rewrite prints too.
From 13.4 on the manifests carry no driver: that gives one finding line, and the row stays with
the release notes.

Which rows it owns: the cuda.yaml rows whose manifest it reads (``min_driver``; it checks that the
manifest's ``release_label`` is the row's version and that the row's ``label`` names the same X.Y).
A manifest newer than the newest row is a new upstream release: reported, never added, because a
row also needs ``os`` (which host repositories carry the toolkit), which no manifest gives. A
manifest for a version inside the catalogued range that cuda.yaml lacks (NVIDIA publishes some, such
as 12.9.2, for component updates that Table 3 does not list as toolkit releases) is a note. The
architectures the bundled driver ships for are reported (cuda.yaml records none per release); the
driver must ship for linux-x86_64, the architecture Table 3 is written for.

A manifest is untrusted input: size-capped, UTF-8, a JSON object without duplicate keys, versions
matching their patterns; anything else is one RedistRefreshError line (exit 2).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import urllib.error
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import CompatDataError, InputError

UPSTREAM = "https://developer.download.nvidia.com/compute/cuda/redist/"
DEFAULT_KEY = "cuda-redist-manifests"
MAX_MANIFEST_BYTES = 2 * 1024 * 1024  # NVIDIA's CUDA manifests are 40-60 KB
MAX_MANIFESTS = 400  # more redistrib files than NVIDIA has published is not its directory

_RELEASE = re.compile(r"^(?P<major>\d{1,3})\.(?P<minor>\d{1,3})\.(?P<patch>\d{1,3})$")
_FILE = re.compile(r"^redistrib_(?P<v>[^/]*)\.json$")
_DRIVER = re.compile(r"^\d{3,4}\.\d{1,3}(?:\.\d{1,3})?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_PLATFORM = re.compile(r"^linux-(?P<arch>[a-z0-9_]{1,16})$")
_INDEX = re.compile(r"""href=["'](?:\./)?redistrib_(\d{1,3}\.\d{1,3}\.\d{1,3})\.json["']""")


class RedistRefreshError(InputError):
    """A redistrib manifest (or a recorded copy of them) cannot be read into rows (exit 2)."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(
            f"cuda-redist: {message}",
            hint=hint or "check the recorded copy (--from) or NVIDIA's redist directory; compat/ is unchanged",
        )


@dataclass(frozen=True, slots=True)
class Manifest:
    """What one manifest says about its release: the bundled driver (None from 13.4 on) and the
    architectures that driver ships for (``x86_64``, ``sbsa``, ``ppc64le``)."""

    version: str
    date: str | None
    driver: str | None
    arches: tuple[str, ...]


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_manifest(data: bytes, version: str, where: str) -> Manifest:
    """The release facts of ``redistrib_<version>.json`` (``data``, read from ``where``)."""
    if not _RELEASE.match(version):
        raise RedistRefreshError(f"{where}: {version!r} is not an X.Y.Z release number")
    if len(data) > MAX_MANIFEST_BYTES:
        raise RedistRefreshError(f"{where}: over the {MAX_MANIFEST_BYTES}-byte cap for a manifest")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RedistRefreshError(f"{where}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    try:
        doc = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:
        raise RedistRefreshError(f"{where}: not JSON (nested too deeply)") from None
    except ValueError as exc:
        raise RedistRefreshError(f"{where}: not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise RedistRefreshError(f"{where}: not a JSON object")
    label = doc.get("release_label")  # absent in the 12.0 and 12.1 manifests
    if label is not None and label != version:
        raise RedistRefreshError(f"{where}: release_label {label!r} is not the file name's version {version}")
    product = doc.get("release_product")
    if product is not None and product != "cuda":
        raise RedistRefreshError(f"{where}: release_product {product!r} is not 'cuda'")
    date = doc.get("release_date")
    if date is not None and not (isinstance(date, str) and _DATE.match(date)):
        raise RedistRefreshError(f"{where}: release_date {date!r} is not YYYY-MM-DD")
    driver = doc.get("nvidia_driver")
    if driver is None:
        return Manifest(version, date, None, ())
    return Manifest(version, date, *_driver(driver, where))


def _driver(entry: Any, where: str) -> tuple[str, tuple[str, ...]]:
    """(version, architectures) of a manifest's ``nvidia_driver`` component."""
    if not isinstance(entry, dict):
        raise RedistRefreshError(f"{where}: nvidia_driver is not an object")
    version = entry.get("version")
    if not isinstance(version, str) or not _DRIVER.match(version):
        raise RedistRefreshError(f"{where}: nvidia_driver.version {version!r} is not a driver version")
    arches = []
    for key, archive in entry.items():
        m = _PLATFORM.match(key)
        if not key.startswith("linux-"):
            continue
        path = archive.get("relative_path") if isinstance(archive, dict) else None
        if m is None or not isinstance(path, str) or version not in path:
            raise RedistRefreshError(f"{where}: nvidia_driver[{key!r}] is not an archive of driver {version}")
        arches.append(m["arch"])
    if "x86_64" not in arches:
        raise RedistRefreshError(f"{where}: nvidia_driver {version} has no linux-x86_64 archive")
    return version, tuple(sorted(arches, key=lambda a: (a != "x86_64", a)))


# -- where manifests come from ------------------------------------------------------------------
@dataclass(frozen=True)
class Upstream:
    """The release numbers that have a manifest, and a reader of one manifest's bytes."""

    versions: tuple[str, ...]
    read: Callable[[str], bytes]
    where: Callable[[str], str]


def recorded(root: Path) -> Upstream:
    """A recorded copy: a directory of ``redistrib_<X.Y.Z>.json`` files as NVIDIA serves them
    (plain files only: read_recorded refuses symlinks, paths outside ``root`` and oversized files)."""
    from provision.matrix.refresh_images import read_recorded

    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        raise RedistRefreshError(f"{root}: cannot list ({exc.strerror or exc})") from None
    versions = []
    for entry in entries:
        m = _FILE.match(entry.name)
        if m is None:
            continue
        if not _RELEASE.match(m["v"]):
            raise RedistRefreshError(f"{root / entry.name}: not named redistrib_<X.Y.Z>.json")
        if not stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
            raise RedistRefreshError(f"{root / entry.name}: not a regular file (a recorded copy holds plain files)")
        versions.append(m["v"])
    if not versions:
        raise RedistRefreshError(
            f"{root}: no redistrib_<X.Y.Z>.json", hint="point --from at a recorded cuda-redist copy"
        )
    if len(versions) > MAX_MANIFESTS:
        raise RedistRefreshError(f"{root}: {len(versions)} manifests, over the {MAX_MANIFESTS} cap")

    def read(version: str) -> bytes:
        text = read_recorded(root, f"redistrib_{version}.json", RedistRefreshError)
        if text is None:
            raise RedistRefreshError(f"{root}: redistrib_{version}.json went away while reading")
        return text.encode("utf-8")

    return Upstream(tuple(versions), read, lambda v: str(root / f"redistrib_{v}.json"))


def live(fetch: Callable[[str, dict[str, str]], bytes]) -> Upstream:
    """NVIDIA's redist directory: its index page names the manifests; each is read on demand."""
    body = fetch(UPSTREAM, {})
    if len(body) > MAX_MANIFEST_BYTES:
        raise RedistRefreshError(f"{UPSTREAM}: index over the {MAX_MANIFEST_BYTES}-byte cap")
    versions = sorted(set(_INDEX.findall(body.decode("utf-8", "replace"))), key=_key)
    if not versions:
        raise RedistRefreshError(f"{UPSTREAM}: the index names no redistrib_<X.Y.Z>.json")
    if len(versions) > MAX_MANIFESTS:
        raise RedistRefreshError(f"{UPSTREAM}: {len(versions)} manifests, over the {MAX_MANIFESTS} cap")

    def read(version: str) -> bytes:
        return fetch(f"{UPSTREAM}redistrib_{version}.json", {})

    return Upstream(tuple(versions), read, lambda v: f"{UPSTREAM}redistrib_{v}.json")


def oldest(cuda_doc: dict[str, Any]) -> str:
    """The oldest release cuda.yaml lists: manifests older than it are not read."""
    return min((r["version"] for r in cuda_doc["releases"]), key=_key)


def read_manifests(upstream: Upstream, floor: str) -> dict[str, Manifest]:
    """{version: Manifest} of every manifest from ``floor`` (the oldest catalogued release) on."""
    out = {}
    for version in upstream.versions:
        if _key(version) < _key(floor):
            continue
        try:
            data = upstream.read(version)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # listed, then gone: not a release to compare
                continue
            raise
        out[version] = parse_manifest(data, version, upstream.where(version))
    return out


# -- comparing with cuda.yaml ---------------------------------------------------------------------
@dataclass
class Report:
    """What the manifests say against cuda.yaml: ``diff`` (unified, of the owned rows), the rows
    whose ``min_driver`` differs, new upstream releases, label mismatches, and finding lines."""

    diff: list[str] = field(default_factory=list)
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)
    new: list[Manifest] = field(default_factory=list)
    mislabelled: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def drift(self) -> bool:
        return bool(self.changed or self.new or self.mislabelled)


def _line(version: str, driver: str | None) -> str:
    if driver is None:
        return f'{{version: "{version}"}}  # no driver in the manifest\n'
    return f'{{version: "{version}", min_driver: "{driver}"}}\n'


def compare(cuda_doc: dict[str, Any], found: dict[str, Manifest]) -> Report:
    """``found`` (read_manifests) against cuda.yaml's ``releases`` rows."""
    rows = {r["version"]: r for r in cuda_doc["releases"]}
    newest = max(rows, key=_key)
    report = Report()
    mine: list[str] = []
    theirs: list[str] = []
    for version in sorted(found, key=_key, reverse=True):
        m = found[version]
        row = rows.get(version)
        if row is None:
            if _key(version) > _key(newest):
                report.new.append(m)
                theirs.append(_line(version, m.driver))
                report.notes.append(_new_release_note(m))
            else:
                bundled = f" (bundled driver {m.driver})" if m.driver else ""
                report.notes.append(
                    f"{version}{bundled}: a manifest for a release compat/cuda.yaml does not list inside its "
                    "range; not drift (cuda.yaml lists Table 3's toolkit releases)"
                )
            continue
        major, minor, _ = version.split(".")
        if not str(row["label"]).startswith(f"{major}.{minor} "):
            report.mislabelled.append(version)
            report.notes.append(
                f"{version}: cuda.yaml's label {row['label']!r} names another release than the manifest's {version}"
            )
        mine.append(_line(version, row["min_driver"]))
        if m.driver is None:
            report.notes.append(f"{version}: the manifest carries no driver; min_driver stays with the release notes")
            theirs.append(_line(version, row["min_driver"]))
            continue
        if above_in_branch(m.driver, row["min_driver"]):
            theirs.append(_line(version, row["min_driver"]))
            report.notes.append(
                f"{version}: the manifest bundles driver {m.driver}, newer in branch {m.driver.partition('.')[0]} than "
                f"cuda.yaml's minimum {row['min_driver']} (source {row['source']}); not drift: the minimum stays"
            )
            continue
        theirs.append(_line(version, m.driver))
        if m.driver != row["min_driver"]:
            report.changed[version] = (row["min_driver"], m.driver)
            report.notes.append(
                f"{version}: the manifest bundles driver {m.driver}; cuda.yaml's min_driver is {row['min_driver']} "
                f"(source {row['source']})"
            )
    report.diff = list(difflib.unified_diff(mine, theirs, "compat/cuda.yaml", "redistrib manifests"))
    report.notes.extend(arch_notes(found.values()))
    return report


def above_in_branch(bundled: str, minimum: str) -> bool:
    """Whether ``bundled`` is a later release of ``minimum``'s branch (570.86.10 over 570.26)."""
    return bundled.partition(".")[0] == minimum.partition(".")[0] and _key(bundled) > _key(minimum)


def _new_release_note(m: Manifest) -> str:
    if m.driver is None:
        return (
            f"{m.version}: new upstream release; the manifest carries no driver; min_driver stays with the "
            "release notes: add it with their minimum driver and its repository OS list"
        )
    return (
        f"{m.version} (bundled driver {m.driver}): new upstream release, add it with its repository OS list "
        "(cuda.yaml os: which host repositories carry the toolkit; a manifest does not say)"
    )


def arch_notes(manifests: Iterable[Manifest]) -> list[str]:
    """One line per set of architectures the bundled drivers ship for, naming the releases."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for m in sorted(manifests, key=lambda m: _key(m.version)):
        if m.driver is not None:
            groups.setdefault(m.arches, []).append(m.version)
    return [f"bundled driver ships for {', '.join(arches)}: {', '.join(vs)}" for arches, vs in groups.items()]


# -- writing cuda.yaml ----------------------------------------------------------------------------
_ROW = re.compile(r'^  - \{version: "(?P<v>[^"]+)", .*\}$')


def write(compat: Path, report: Report, key: str) -> str | None:
    """cuda.yaml with ``min_driver`` (and ``source: key``) of the changed rows replaced on their own
    lines, every other byte kept; None when no row changed. New upstream releases are never added.
    Writes nothing: the caller checks the whole catalogue first (replace_checked)."""
    import yaml

    if not report.changed:
        return None
    path = compat / "cuda.yaml"
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    todo = dict(report.changed)
    for i, line in enumerate(lines):
        m = _ROW.match(line.rstrip("\n"))
        if m is None or m["v"] not in todo:
            continue
        old, new = todo.pop(m["v"])
        edited, n_driver = re.subn(rf'\bmin_driver: "{re.escape(old)}"', f'min_driver: "{new}"', line)
        edited, n_source = re.subn(r"\bsource: [a-z0-9][a-z0-9.\-]*\}", f"source: {key}}}", edited)
        if (n_driver, n_source) != (1, 1):
            raise CompatDataError("cuda.yaml", f"releases {m['v']}", "not a one-line row the refresh can rewrite")
        lines[i] = edited
    if todo:
        raise CompatDataError("cuda.yaml", "releases", f"no one-line row for {', '.join(sorted(todo))}")
    out = "".join(lines)
    before, after = yaml.safe_load(text), yaml.safe_load(out)
    for row in before["releases"]:
        if row["version"] in report.changed:
            row["min_driver"], row["source"] = report.changed[row["version"]][1], key
    if before != after:  # the line edits touched something else
        raise CompatDataError("cuda.yaml", "releases", "the rewritten rows do not parse back as intended")
    return out
