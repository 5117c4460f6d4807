"""A validated-data cache, so `provision plan` skips YAML parsing and schema checks.

The key is a hash of provision's version and the bytes of every data and schema file: any
change to compat/ (or a different --compat-dir) misses the cache and is fully validated again.
Set PROVISION_NO_CACHE=1 to bypass it; PROVISION_CACHE_DIR moves it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from provision import __version__
from provision.matrix.loader import FILES, attach_hashes, build, load_checked
from provision.matrix.model import Matrix


def cache_dir() -> Path:
    explicit = os.environ.get("PROVISION_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "provision"


def load_cached(compat: Path) -> Matrix:
    if os.environ.get("PROVISION_NO_CACHE"):
        return load_checked(compat)[0]
    contents: dict[str, bytes] = {}
    digest = hashlib.sha256(__version__.encode())
    try:
        for name in FILES:
            data = (compat / f"{name}.yaml").read_bytes()
            contents[f"{name}.yaml"] = data
            digest.update(name.encode() + b"\0" + data + b"\0")
        for schema in sorted((compat / "schema").glob("*.json")):
            digest.update(schema.name.encode() + b"\0" + schema.read_bytes() + b"\0")
    except OSError:
        return load_checked(compat)[0]  # reports the unreadable file with its name
    path = cache_dir() / f"matrix-{digest.hexdigest()[:32]}.json"
    try:
        raw = json.loads(path.read_text())
        matrix = build(raw)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        matrix, raw = load_checked(compat)
        _store(path, raw)
        return matrix
    attach_hashes(matrix, contents)
    return matrix


def _store(path: Path, raw: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".matrix-", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            json.dump(raw, handle)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home only costs speed
