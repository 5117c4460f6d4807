"""gpu-provision.lock: what a generated pipeline installs the tool from, in any repository.

A pipeline re-renders each build context and stops unless it is the content it was generated for
(`provision ci context-digest`), so it must run the provision that generated it: `gpu-provision` at
exactly this version, with every package it needs, pinned with their hashes. `provision ci github` and
`ci gitlab` write that lock beside the pipeline (or where `--tool-lock` says) and the pipeline's
install step is

    python -m pip install --require-hashes --no-deps --only-binary=:all: -r <the lock>

The lock is resolved by uv against a package index (`--tool-index-url`, PROVISION_TOOL_INDEX_URL,
else pypi.org) that serves gpu-provision at this version (a site publishes the wheel that
`pip wheel --no-deps .` builds to an index it controls), for the pipeline's Python on x86_64 Linux,
and names that index on an `--index-url` line, so pip installs from where the hashes were read. A
lock that exists already is reused byte for byte when it pins this version (read as untrusted, as
pip reads it: pins with hashes, comments and the one `--index-url` line only); one that pins
another version is resolved again; one that is not such a lock is refused.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from provision import __version__
from provision.errors import InputError, OperationFailed, ToolingError
from provision.images.pylock import PYPI, LockTarget, PackageIndex, check_index_url, parse_requirements

DIST = "gpu-provision"
LOCK_NAME = "gpu-provision.lock"
PYTHON = "3.11"  # the pipelines' Python: setup-python on GitHub, the python job image on GitLab
# GitHub's ubuntu-22.04 runner has glibc 2.35, GitLab's python:3.11 bookworm image 2.36: wheels for both
PLATFORM = "x86_64-manylinux_2_35"
INSTALL = "python -m pip install --require-hashes --no-deps --only-binary=:all: -r"
MAX_BYTES = 1024 * 1024


class ToolLock(NamedTuple):
    path: str  # where it is written, repository-relative
    text: str
    index: str
    written: bool  # False: an existing lock of this version, reused byte for byte
    replaced: str | None  # the version an existing lock pinned, when it was resolved again


def tool_index(url: str | None) -> str:
    """--tool-index-url, else PROVISION_TOOL_INDEX_URL, else pypi.org; a URL without credentials."""
    return check_index_url(url or os.environ.get("PROVISION_TOOL_INDEX_URL") or PYPI, "--tool-index-url")


def read_tool_lock(path: str, origin: str) -> tuple[str, dict[str, str], str]:
    """text, pins and index of an existing lock (InputError unless it is one this module would write)."""
    from provision.documents import read_text

    text = read_text(path, origin, max_bytes=MAX_BYTES)
    pins, index = parse_requirements(text, origin, index_option=True)
    if DIST not in pins:
        raise InputError(f"{origin} does not install {DIST}", hint=_HINT)
    return text, pins, index or PYPI


_HINT = "it is written by provision ci github|gitlab: delete it and regenerate, or name another with --tool-lock"


def resolve(index: str, timeout_s: int | None = None) -> str:
    """The lock's text: uv's resolution of gpu-provision==<this version> with hashes, under a header."""
    from provision.images import pylock

    target = LockTarget(f"{DIST}=={__version__}", PYTHON, PLATFORM, None, ())
    package_index = PackageIndex(index) if timeout_s is None else PackageIndex(index, timeout_s)
    hint = (
        f"the pipeline installs {DIST} {__version__}, this provision: publish its wheel (pip wheel --no-deps . "
        "in its source) to a package index you control and pass --tool-index-url URL, or name a lock you "
        "wrote with --tool-lock PATH"
    )
    try:
        body = pylock.compile_lock(target, target.requirement, package_index)
    except pylock._Unresolvable as exc:
        raise InputError(f"{target.requirement} cannot be resolved from {index}: {exc.reason}", hint=hint) from None
    except (ToolingError, OperationFailed) as exc:
        raise type(exc)(exc.message, hint=f"check {index}; {hint}") from None
    header = [
        f"# {LOCK_NAME}: {DIST}=={__version__} and every package it needs, pinned with their hashes, for the",
        f"# pipeline's Python {PYTHON} on x86_64 Linux ({PLATFORM}). Written by provision ci (resolved by",
        f"# {pylock.uv_version()}); the pipeline installs it with {INSTALL} <this file>.",
        "# Regenerate the pipeline (with the provision to run) instead of editing it.",
        f"--index-url {index}",
    ]
    text = "\n".join(header) + "\n" + body
    pins, found = parse_requirements(text, "the resolved tool lock", index_option=True)
    if pins.get(DIST) != __version__ or found != index:
        raise OperationFailed(
            f"the resolved tool lock pins {DIST} {pins.get(DIST)}, not {__version__}",
            hint="this is a bug in provision; rerun with --debug and report it",
        )
    return text


def tool_lock(root: str, relative: str, index_url: str | None) -> ToolLock:
    """The lock at `relative` (inside `root`): reused when it pins this version, else resolved."""
    index = tool_index(index_url)
    path = os.path.join(root, relative)
    replaced = None
    if os.path.lexists(path):
        text, pins, existing_index = read_tool_lock(path, f"--tool-lock {relative}")
        if pins[DIST] == __version__:
            if index_url is not None and existing_index != index:
                raise InputError(
                    f"--tool-lock {relative} names another index than --tool-index-url {index}",
                    hint="delete the lock to resolve it from the new index, or drop --tool-index-url",
                )
            return ToolLock(relative, text, existing_index, False, None)
        replaced = pins[DIST]
    return ToolLock(relative, resolve(index), index, True, replaced)
