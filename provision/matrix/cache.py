"""A validated-data cache, so `provision plan` skips YAML parsing and schema checks.

The key is a hash of provision's version and the bytes of every data and schema file: any
change to compat/ (or a different --compat-dir) misses the cache and is fully validated again.
Set PROVISION_NO_CACHE=1 to bypass it; PROVISION_CACHE_DIR moves it.

The stack packages' document (stacks.yaml, more than half of the catalogue's bytes) is cached in
a file of its own, ``stacks-<key>.json``, read only when a command asks for the stacks
(Matrix.stacks is a LazyStacks), and each package built only when asked for (Matrix.stack): start-up
of a plan without them does not pay for them, and a plan with some builds those alone.
"""

from __future__ import annotations

import hashlib
import json
import os

from provision import __version__
from provision.matrix.loader import FILES, attach_hashes, build, build_stack, load_checked
from provision.matrix.model import LazyStacks, Matrix

LAZY = ("stacks",)  # documents cached apart and built on first use


def cache_dir() -> str:
    explicit = os.environ.get("PROVISION_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "provision")


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def load_cached(compat: str | os.PathLike[str]) -> Matrix:
    compat = os.fspath(compat)
    entry = None if os.environ.get("PROVISION_NO_CACHE") else _entry(compat)
    if entry is None:
        return load_checked(compat)[0]  # also reports an unreadable file with its name
    path, contents = entry
    try:
        raw = json.loads(_read(path))
        matrix = build(raw, stacks=LazyStacks(lambda: _cached_stacks(compat, path), _stack_maker(compat, path)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        matrix, raw = load_checked(compat)
        _store(path, raw)
        return matrix
    return attach_hashes(matrix, contents)


def _lazy_path(path: str, name: str) -> str:
    """The cache file of a lazily built document: ``stacks-<key>.json`` beside ``matrix-<key>.json``."""
    head, tail = os.path.split(path)
    return os.path.join(head, name + tail.removeprefix("matrix"))


def _cached_stacks(compat: str, path: str) -> list:
    """The stack packages' mappings from their cache file (LazyStacks builds each when asked); a
    missing or broken one is checked anew (and rewritten)."""
    try:
        packages = json.loads(_read(_lazy_path(path, "stacks")))["packages"]
        if isinstance(packages, list) and all(isinstance(p, dict) for p in packages):
            return packages
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    _, raw = load_checked(compat)
    _store(path, raw)
    return raw["stacks"]["packages"]


def _stack_maker(compat: str, path: str):
    """LazyStacks' builder of one package: from its cached mapping; one that does not build (a
    cache file edited by hand) is checked anew from compat/ (and the cache rewritten)."""

    def make(item, i: int):
        try:
            return build_stack(item, i)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            _, raw = load_checked(compat)
            _store(path, raw)
            return build_stack(raw["stacks"]["packages"][i], i)

    return make


def cached_raw(compat: str | os.PathLike[str]) -> dict | None:
    """The documents of compat/ as cached after they passed the schema and invariant checks,
    when its data and schema files are byte for byte those; None otherwise (or PROVISION_NO_CACHE)."""
    entry = None if os.environ.get("PROVISION_NO_CACHE") else _entry(os.fspath(compat))
    if entry is None:
        return None
    try:
        raw = json.loads(_read(entry[0]))
        if not isinstance(raw, dict):
            return None
        for name in LAZY:
            raw[name] = json.loads(_read(_lazy_path(entry[0], name)))
    except (OSError, ValueError):
        return None
    return raw


def store_raw(compat: str | os.PathLike[str], raw: dict) -> None:
    """Cache documents that passed the schema and invariant checks (provision matrix check)."""
    entry = None if os.environ.get("PROVISION_NO_CACHE") else _entry(os.fspath(compat))
    if entry is not None:
        _store(entry[0], raw)


def _entry(compat: str) -> tuple[str, dict[str, bytes]] | None:
    """(cache file, data file bytes) for compat/; None when a data or schema file cannot be read."""
    contents: dict[str, bytes] = {}
    digest = hashlib.sha256(__version__.encode())
    try:
        for name in FILES:
            data = _read(os.path.join(compat, f"{name}.yaml"))
            contents[f"{name}.yaml"] = data
            digest.update(name.encode() + b"\0" + data + b"\0")
        schemas = os.path.join(compat, "schema")
        for schema in sorted(f for f in os.listdir(schemas) if f.endswith(".json")):
            digest.update(schema.encode() + b"\0" + _read(os.path.join(schemas, schema)) + b"\0")
    except OSError:
        return None
    return os.path.join(cache_dir(), f"matrix-{digest.hexdigest()[:32]}.json"), contents


def _store(path: str, raw: dict) -> None:
    """The lazily built documents first, each in its own file, then the rest: a main file on disk
    means its lazy files were written before it."""
    import tempfile

    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        main = {k: v for k, v in raw.items() if k not in LAZY}
        for target, doc in [*((_lazy_path(path, n), raw[n]) for n in LAZY), (path, main)]:
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".matrix-", suffix=".tmp")
            with os.fdopen(fd, "w") as handle:
                json.dump(doc, handle)
            os.replace(tmp, target)
    except (OSError, KeyError):
        pass  # a read-only home only costs speed
