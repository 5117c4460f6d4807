"""Paths and helpers shared by tests and conftest files (import as `support`)."""

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "compat"
FIXTURE_COMPAT = Path(__file__).resolve().parent / "fixtures" / "compat"
SHARED_FIXTURES = ROOT.parent / "shared" / "reference" / "fixtures"


def make_compat(dest: Path, source: Path = FIXTURE_COMPAT) -> Path:
    """A writable copy of a data directory, with the real schemas."""
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("schema"))
    shutil.copytree(COMPAT / "schema", dest / "schema")
    return dest
