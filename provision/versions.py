"""The only place versions and version constraints are parsed.

Driver, CUDA, cuDNN and framework versions in compat/ are dotted numbers ("570.26",
"580.95.05", "12.4.1", "9.1.0.70"), ordered component by component as NVIDIA and the
frameworks order them ("570.26" < "570.124.06" < "580.65.06"), and printed exactly as written
("580.95.05", never "580.95.5"). Constraints are comma-separated comparisons, all of which
must hold: ">=12.0,<12.7". Trailing zeros do not matter ("12.4" == "12.4.0").

This is deliberately smaller than PEP 440 (the ``packaging`` library, which the framework
refresh tool uses for wheel metadata): the catalogue never needs pre-releases, epochs or local
versions, and keeping ``packaging`` out of ``provision plan`` keeps its start-up fast.
Package revisions ("-1", "-0ubuntu1") are kept apart from upstream versions.
"""

from __future__ import annotations

import operator
import re

_DOTTED = re.compile(r"^\d+(\.\d+)*$")
_CLAUSE = re.compile(r"^\s*(==|!=|>=|<=|>|<)\s*(\d+(?:\.\d+)*)\s*$")
_INTERNED: dict[str, DottedVersion] = {}  # text -> its version: each text is parsed once


class DottedVersion:
    """A dotted numeric version that compares numerically and prints as it was written.

    Instances are immutable and interned by their text: the catalogue names the same versions
    thousands of times over (`provision matrix check` resolves every request), so each text is
    parsed once per process.
    """

    __slots__ = ("_key", "_major_minor", "_text", "release")

    def __new__(cls, text: str) -> DottedVersion:
        known = _INTERNED.get(text) if isinstance(text, str) else None
        if known is not None:
            return known
        if not isinstance(text, str) or not _DOTTED.match(text):
            raise ValueError(f"not a dotted numeric version: {text!r}")
        self = object.__new__(cls)
        self._text = text
        self.release = release = tuple(int(p) for p in text.split("."))
        key = list(release)
        while len(key) > 1 and key[-1] == 0:
            key.pop()
        self._key = tuple(key)
        self._major_minor = f"{release[0]}.{release[1] if len(release) > 1 else 0}"
        _INTERNED[text] = self
        return self

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"DottedVersion({self._text!r})"

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is DottedVersion:  # the common case first: `matrix check` compares ~400,000 times
            return self._key == other._key
        if not isinstance(other, DottedVersion):
            return NotImplemented
        return self._key == other._key

    def __lt__(self, other: DottedVersion) -> bool:
        if not isinstance(other, DottedVersion):
            return NotImplemented
        return self._key < other._key

    def __le__(self, other: DottedVersion) -> bool:
        if not isinstance(other, DottedVersion):
            return NotImplemented
        return self._key <= other._key

    def __gt__(self, other: DottedVersion) -> bool:
        if not isinstance(other, DottedVersion):
            return NotImplemented
        return self._key > other._key

    def __ge__(self, other: DottedVersion) -> bool:
        if not isinstance(other, DottedVersion):
            return NotImplemented
        return self._key >= other._key

    def __reduce__(self):
        return (DottedVersion, (self._text,))


class VersionSpec:
    """Comma-separated version constraints, all of which must hold (">=12.0,<13")."""

    __slots__ = ("_checks", "_clauses", "_text")

    def __init__(self, text: str) -> None:
        clauses = []
        for part in text.split(","):
            m = _CLAUSE.match(part)
            if not m:
                raise ValueError(f"not a version constraint: {text!r} (use e.g. '>=12.0,<13')")
            clauses.append((m[1], DottedVersion(m[2])))
        self._text = text
        self._clauses = tuple(clauses)
        self._checks = tuple((_KEY_OPS[op], bound._key) for op, bound in clauses)

    def contains(self, version: DottedVersion | str) -> bool:
        key = (version if isinstance(version, DottedVersion) else DottedVersion(version))._key
        for compare, bound in self._checks:  # noqa: SIM110 - a loop: `matrix check` asks ~100,000 times
            if not compare(key, bound):
                return False
        return True

    def __contains__(self, version: DottedVersion | str) -> bool:
        return self.contains(version)

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"VersionSpec({self._text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VersionSpec) and self._clauses == other._clauses

    def __hash__(self) -> int:
        return hash(self._clauses)

    def __reduce__(self):
        return (VersionSpec, (self._text,))


# the comparisons of a clause, on the versions' keys (trailing zeros dropped), as DottedVersion compares
_KEY_OPS = {
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}


def parse_version(text: str) -> DottedVersion:
    """Parse a dotted numeric version; raise ValueError for anything else."""
    return DottedVersion(text)


def is_version(text: object) -> bool:
    return isinstance(text, str) and bool(_DOTTED.match(text))


def parse_specifier(text: str) -> VersionSpec:
    return VersionSpec(text)


def major_minor(version: DottedVersion) -> str:
    """The major.minor text of a version: "12.4" for 12.4.1, "12.0" for 12 (computed once per version)."""
    return version._major_minor


_PREFIXES: dict[str, tuple[int, ...]] = {}


def prefix_matches(prefix: str, version: DottedVersion) -> bool:
    """True when ``version`` starts with the dotted ``prefix`` ("12.4" matches 12.4.1)."""
    parts = _PREFIXES.get(prefix)
    if parts is None:
        parts = _PREFIXES[prefix] = tuple(int(p) for p in prefix.split("."))
    return version.release[: len(parts)] == parts


class PackageVersion:
    """An upstream version plus the distribution's package revision, spelled per package manager."""

    __slots__ = ("release", "version")

    def __init__(self, version: str, release: str = "") -> None:
        self.version = version
        self.release = release

    def full(self) -> str:
        return f"{self.version}-{self.release}" if self.release else self.version

    def pin(self, name: str, pkg_manager: str) -> str:
        """The spelling a package manager takes for this exact version.

        Without a known revision, apt gets a glob over revisions ("name=1.2.3-*") and dnf the
        version alone ("name-1.2.3"), which both match exactly that upstream version.
        """
        if pkg_manager == "apt":
            return f"{name}={self.full() if self.release else self.version + '-*'}"
        if pkg_manager == "dnf":
            return f"{name}-{self.full()}"
        raise ValueError(f"unknown package manager {pkg_manager!r}")
