"""A validated-data cache, so `provision plan` skips YAML parsing and schema checks.

The key is a hash of provision's version and the bytes of every data and schema file: any
change to compat/ (or a different --compat-dir) misses the cache and is fully validated again.
Set PROVISION_NO_CACHE=1 to bypass it; PROVISION_CACHE_DIR moves it.

The stack packages' document (stacks.yaml, more than half of the catalogue's bytes) is cached in
a file of its own, ``stacks-<key>.jsonl``, read only when a command asks for the stacks
(Matrix.stacks is a LazyStacks), and each package built only when asked for (Matrix.stack): start-up
of a plan without them does not pay for them, and a plan with some builds those alone. Its first
line is the document without its packages and their index (ids, pip names: model.stack_index),
each further line one package, parsed only when that package is built: a plan with two stack
packages parses their two lines, not the whole document (a third of the time the whole took).
"""

from __future__ import annotations

import hashlib
import json
import os

from provision import __version__
from provision.matrix.loader import FILES, attach_hashes, build, build_stack, load_checked
from provision.matrix.model import LazyStacks, Matrix, stack_index

LAZY = ("stacks",)  # documents cached apart (one line per package) and built on first use


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
        stacks = _StackFile(compat, path)
        matrix = build(raw, stacks=LazyStacks(stacks.items, stacks.make, stacks.index))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        matrix, raw = load_checked(compat)
        _store(path, raw)
        return matrix
    return attach_hashes(matrix, contents)


def _lazy_path(path: str, name: str) -> str:
    """The cache file of a lazily built document: ``stacks-<key>.jsonl`` beside ``matrix-<key>.json``."""
    head, tail = os.path.split(path)
    return os.path.join(head, name + tail.removeprefix("matrix") + "l")


def _lines(doc: dict) -> str:
    """A lazily built document as its cache file holds it: a first line with the document, its
    packages left out (null), and their index; then each package on a line of its own."""
    packages = doc["packages"]
    head = {"document": {**doc, "packages": None}, "index": stack_index(packages)}
    return "".join(json.dumps(item) + "\n" for item in (head, *packages))  # JSON escapes every newline


def _unlines(data: bytes) -> tuple[dict, tuple, list[bytes]]:
    """(the document without its packages, their index, each package's line) of a cache file;
    ValueError (or KeyError, TypeError) where it is not one that _lines wrote."""
    first, *lines = data.split(b"\n")
    head = json.loads(first)
    index = tuple((str(ident), str(pip), tuple(str(d) for d in dists)) for ident, pip, dists in head["index"])
    if lines[-1:] != [b""] or len(lines) - 1 != len(index) or not isinstance(head["document"], dict):
        raise ValueError("not a stacks cache file")
    return head["document"], index, lines[:-1]


class _StackFile:
    """The stack packages' cache file, read when a command first asks for the stacks (LazyStacks'
    items, make and index): each package's line is parsed when it is built. A missing or broken
    file, or a package line that does not build as the package the index names there (a cache
    file edited by hand), is checked anew from compat/ (and the cache rewritten)."""

    def __init__(self, compat: str, path: str) -> None:
        self.compat, self.path = compat, path
        self._index: tuple | None = None
        self._items: list | None = None

    def _read(self) -> None:
        if self._items is not None:
            return
        try:
            _, self._index, self._items = _unlines(_read(_lazy_path(self.path, "stacks")))
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        packages = self._anew()
        self._index, self._items = stack_index(packages), list(packages)

    def _anew(self) -> list:
        _, raw = load_checked(self.compat)
        _store(self.path, raw)
        return raw["stacks"]["packages"]

    def items(self) -> list:
        self._read()
        return self._items

    def index(self) -> tuple:
        self._read()
        return self._index

    def make(self, item, i: int):
        try:
            package = build_stack(json.loads(item) if isinstance(item, bytes) else item, i)
            if package.id != self.index()[i][0]:
                raise ValueError(f"line {i + 2} holds {package.id}, the index names {self.index()[i][0]}")
            return package
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return build_stack(self._anew()[i], i)


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
            document, _, lines = _unlines(_read(_lazy_path(entry[0], name)))
            raw[name] = {**document, "packages": [json.loads(line) for line in lines]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
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
                if target == path:
                    json.dump(doc, handle)
                else:
                    handle.write(_lines(doc))
            os.replace(tmp, target)
    except (OSError, KeyError):
        pass  # a read-only home only costs speed
