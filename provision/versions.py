"""The only place versions and version constraints are parsed.

Driver, CUDA, cuDNN and framework versions are all dotted numbers that PEP 440 orders the way
NVIDIA and the frameworks do ("570.26" < "570.124.06" < "580.65.06"), so ``packaging`` does the
work. Package revisions ("-1", "-0ubuntu1") are kept apart from upstream versions, because PEP 440
would read "12.4.127-1" as a post-release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

_DOTTED = re.compile(r"^\d+(\.\d+)*$")


class DottedVersion(Version):
    """A PEP 440 version that prints as it was written: NVIDIA's "580.95.05", not "580.95.5"."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._text = text

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"<DottedVersion({self._text!r})>"

    def __reduce__(self):  # pickling keeps the spelling
        return (DottedVersion, (self._text,))


def parse_version(text: str) -> DottedVersion:
    """Parse a dotted numeric version; raise ValueError for anything else."""
    if not isinstance(text, str) or not _DOTTED.match(text):
        raise ValueError(f"not a dotted numeric version: {text!r}")
    try:
        return DottedVersion(text)
    except InvalidVersion as exc:  # pragma: no cover - the regex already rules this out
        raise ValueError(str(exc)) from exc


def is_version(text: object) -> bool:
    return isinstance(text, str) and bool(_DOTTED.match(text))


def parse_specifier(text: str) -> SpecifierSet:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise ValueError(f"not a version specifier: {text!r}") from exc


def major(version: Version) -> int:
    return version.release[0]


def major_minor(version: Version) -> str:
    rel = version.release + (0,)
    return f"{rel[0]}.{rel[1]}"


def prefix_matches(prefix: str, version: Version) -> bool:
    """True when ``version`` starts with the dotted ``prefix`` ("12.4" matches 12.4.1)."""
    parts = tuple(int(p) for p in prefix.split("."))
    return version.release[: len(parts)] == parts


@dataclass(frozen=True, slots=True)
class PackageVersion:
    """An upstream version plus the distribution's package revision."""

    version: str
    release: str

    def full(self) -> str:
        return f"{self.version}-{self.release}" if self.release else self.version

    def pin(self, name: str, pkg_manager: str) -> str:
        """The spelling a package manager takes for this exact version."""
        if pkg_manager == "apt":
            return f"{name}={self.full()}"
        if pkg_manager == "dnf":
            return f"{name}-{self.full()}"
        raise ValueError(f"unknown package manager {pkg_manager!r}")
