"""NVIDIA's Xid catalogue (compat/xid.yaml): load, schema-check, look up.

Every Xid's severity comes from its *immediate-action* resolution bucket (``buckets:`` in the
data file); the fix joins the immediate bucket's sentence with the investigatory bucket's.
Broken data raises ``CompatDataError`` (exit 3) naming the file and the key path.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from typing import Any, NamedTuple

from provision.errors import CompatDataError

FILE = "xid.yaml"
UNSPECIFIED = "UNSPECIFIED"  # the bucket doctor uses where NVIDIA's cell is empty
_TOKEN = re.compile(r"[A-Z][A-Z0-9_]*(?:/[A-Z0-9_]+)?")


class Bucket(NamedTuple):
    name: str
    severity: str
    fix: str


class XidEntry(NamedTuple):
    code: int
    mnemonic: str
    description: str
    immediate: str | None  # NVIDIA's immediate-action bucket, None where the cell is empty
    investigatory: str | None  # the investigatory cell as NVIDIA wrote it


class XidCatalog(NamedTuple):
    title: str
    url: str
    retrieved: str
    entries: dict[int, XidEntry]
    buckets: dict[str, Bucket]

    def get(self, code: int) -> XidEntry | None:
        return self.entries.get(code)

    def severity(self, code: int) -> str:
        entry = self.entries.get(code)
        if entry is None:
            return "warning"
        return self.buckets[entry.immediate or UNSPECIFIED].severity

    def fix(self, code: int) -> str:
        entry = self.entries.get(code)
        if entry is None:
            return (
                f"Xid {code} is not in NVIDIA's catalogue ({self.url}); collect "
                "`sudo nvidia-bug-report.sh` and check the driver release notes."
            )
        first = self.buckets[entry.immediate or UNSPECIFIED]
        text = f"{first.fix} (NVIDIA: {first.name})"
        follow = (entry.investigatory or "").strip()
        if not follow or follow in (first.name, "IGNORE"):
            return text
        if follow in self.buckets:
            return f"{text} If it recurs: {self.buckets[follow].fix} (NVIDIA: {follow})"
        return f"{text} NVIDIA's follow-up: {follow}."


def bucket_references(text: str, buckets: dict[str, Any]) -> list[str]:
    """Bucket names mentioned in a catalogue cell ("Solo: RESTART_FM; Not Solo: IGNORE (...)").

    A token counts when it is a known bucket or looks like one (has an underscore); "N/A" and
    plain words do not.
    """
    out: list[str] = []
    for token in _TOKEN.findall(text):
        if (token in buckets or "_" in token) and token not in out:
            out.append(token)
    return out


def _fail(key_path: str, problem: str) -> CompatDataError:
    return CompatDataError(FILE, key_path, problem)


def load_xid_catalog(compat: str | os.PathLike[str] | None = None) -> XidCatalog:
    """Read compat/xid.yaml (cached per directory), schema-check it and check cross-references."""
    from provision.resources import compat_dir

    return _load(os.path.realpath(compat_dir(compat)))


@lru_cache(maxsize=4)
def _load(directory: str) -> XidCatalog:
    import jsonschema
    import yaml

    from provision.matrix.loader import key_path

    try:
        with open(os.path.join(directory, FILE), "rb") as handle:
            doc = yaml.safe_load(handle.read())
    except OSError as exc:
        raise _fail("", f"cannot read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise _fail(f"line {mark.line + 1}" if mark else "", "invalid YAML") from None
    schema_path = os.path.join(directory, "schema", "xid.schema.json")
    try:
        with open(schema_path, "rb") as handle:
            schema = json.loads(handle.read())
    except (OSError, ValueError) as exc:
        raise CompatDataError("schema/xid.schema.json", "", f"unreadable schema ({exc})") from None
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))
    )
    if errors:
        err = errors[0]
        where = key_path(doc, list(err.absolute_path))
        raise _fail(where, err.message.replace("Additional properties are not allowed", "unknown key"))

    buckets = {name: Bucket(name, b["severity"], b["fix"]) for name, b in doc["buckets"].items()}
    if UNSPECIFIED not in buckets:
        raise _fail("buckets", f"missing the {UNSPECIFIED} bucket (used where NVIDIA's cell is empty)")
    entries: dict[int, XidEntry] = {}
    for i, row in enumerate(doc["codes"]):
        where = f"codes[{i}]({row['code']})"
        if row["code"] in entries:
            raise _fail(where, "duplicate code")
        if row["immediate_action"] is not None and row["immediate_action"] not in buckets:
            raise _fail(f"{where}.immediate_action", f"unknown bucket {row['immediate_action']!r}")
        for ref in bucket_references(row["investigatory_action"] or "", buckets):
            if ref not in buckets:
                raise _fail(f"{where}.investigatory_action", f"unknown bucket {ref!r}")
        entries[row["code"]] = XidEntry(
            row["code"], row["mnemonic"], row["description"], row["immediate_action"], row["investigatory_action"]
        )
    src = doc["source"]
    return XidCatalog(src["title"], src["url"], src["retrieved"], entries, buckets)
