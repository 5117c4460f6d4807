"""The ``container-toolkit`` refresh source: compat/container_toolkit.yaml against the release tags
of NVIDIA/nvidia-container-toolkit.

A release is a final ``vX.Y.Z`` tag (no ``-rc``); its date is the tag's creator date (the tagger
date of an annotated tag, the commit date of a lightweight one), as ``git for-each-ref`` prints
it. The source owns every release from the oldest one the catalogue lists on: a newer tag the
catalogue lacks, a catalogued release with no tag, or a different date is a difference.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from provision.errors import CompatDataError, InputError, ToolingError

UPSTREAM = "https://github.com/NVIDIA/nvidia-container-toolkit"
LISTING = ["for-each-ref", "refs/tags", "--sort=-creatordate", "--format=%(refname:short) %(creatordate:short)"]
GIT_TIMEOUT = 300

_LINE = re.compile(r"^v(?P<v>\d+\.\d+\.\d+)\s+(?P<date>\d{4}-\d{2}-\d{2})$")


class ToolkitRefreshError(InputError):
    """The toolkit's tag listing (or a recorded copy of it) cannot be read into rows (exit 2)."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(
            f"container-toolkit: {message}",
            hint=hint or "check the recorded copy (--from) or the upstream repository; compat/ is unchanged",
        )


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def parse_tags(text: str) -> dict[str, str]:
    """{version: date} of the final releases in a ``git for-each-ref`` listing (``LISTING``)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        m = _LINE.match(raw.strip())
        if m:
            out[m["v"]] = m["date"]
    if not out:
        raise ToolkitRefreshError("no vX.Y.Z release tag in the listing")
    return out


def live_listing() -> str:
    """The tag listing of the upstream repository: a bare clone of its commits only (no trees)."""
    with tempfile.TemporaryDirectory(prefix="provision-ctk-") as tmp:
        git = ["git", "-c", "advice.detachedHead=false"]
        try:
            subprocess.run(
                [*git, "clone", "--quiet", "--bare", "--filter=tree:0", UPSTREAM, tmp],
                check=True,
                capture_output=True,
                timeout=GIT_TIMEOUT,
            )
            out = subprocess.run(
                [*git, "-C", tmp, *LISTING], check=True, capture_output=True, text=True, timeout=GIT_TIMEOUT
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            detail = getattr(exc, "stderr", None) or exc
            raise ToolingError(
                f"container-toolkit: git clone {UPSTREAM}: {str(detail).strip()[:200]}",
                hint="check git and the network, or read a recorded copy with --from",
            ) from None
        return out.stdout


def recorded_listing(root: Path) -> str:
    """tags.txt of a recorded copy (read_recorded: no symlinks, size-capped, UTF-8); refused when
    absent or when it lists no final release."""
    from provision.matrix.refresh_images import read_recorded

    text = read_recorded(root, "tags.txt", ToolkitRefreshError)
    if text is None:
        raise ToolkitRefreshError(f"{root}: no tags.txt", hint="point --from at a recorded container-toolkit copy")
    parse_tags(text)
    return text


def rows(listing: str, floor: str) -> list[dict[str, str]]:
    """Final releases from ``floor`` on, newest first."""
    tags = parse_tags(listing)
    keep = [v for v in tags if _key(v) >= _key(floor)]
    return [{"version": v, "date": tags[v]} for v in sorted(keep, key=_key, reverse=True)]


def committed(doc: dict[str, Any]) -> list[dict[str, str]]:
    return [{"version": r["version"], "date": r["date"]} for r in doc["releases"]]


def render(rows_: list[dict[str, str]]) -> list[str]:
    return [f'{{version: "{r["version"]}", date: "{r["date"]}"}}\n' for r in rows_]


def check(compat: Path, listing: str) -> list[str]:
    import difflib

    doc = yaml.safe_load((compat / "container_toolkit.yaml").read_text())
    mine = committed(doc)
    floor = min((r["version"] for r in mine), key=_key)
    theirs = rows(listing, floor)
    return list(difflib.unified_diff(render(mine), render(theirs), "compat/container_toolkit.yaml", "upstream"))


def write(compat: Path, listing: str, key: str) -> str | None:
    """The file with its ``releases:`` rows rewritten (rows that did not change keep their line and
    source), or None when nothing changed. Writes nothing: the caller checks the catalogue first."""
    path = compat / "container_toolkit.yaml"
    text = path.read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    mine = committed(doc)
    floor = min((r["version"] for r in mine), key=_key)
    theirs = rows(listing, floor)
    if theirs == mine:
        return None
    head, sep, tail = text.partition("\nreleases:\n")
    if not sep:
        raise CompatDataError("container_toolkit.yaml", "releases", "no 'releases:' block the refresh can rewrite")
    row_lines = _row_lines(tail)
    if len(row_lines) != len(doc["releases"]):
        raise CompatDataError("container_toolkit.yaml", "releases", "the block's lines and its rows do not pair up")
    old_lines = {r["version"]: line for r, line in zip(doc["releases"], row_lines, strict=True)}
    kept = {r["version"]: r for r in doc["releases"]}
    out = []
    for r in theirs:
        same = kept.get(r["version"])
        if same is not None and same["date"] == r["date"]:
            out.append(old_lines[r["version"]])
        else:
            out.append(f'  - {{version: "{r["version"]}", date: "{r["date"]}", source: {key}}}\n')
    return head + sep + "".join(out)


def _row_lines(block: str) -> list[str]:
    """The one-line rows of the ``releases:`` block (the file's last key); anything else in it is
    refused rather than dropped."""
    lines = block.splitlines()
    if any(not ln.startswith("  - {") for ln in lines if ln.strip()):
        raise CompatDataError("container_toolkit.yaml", "releases", "the block holds more than one-line rows")
    return [ln + "\n" for ln in lines if ln.strip()]
