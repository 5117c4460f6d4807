"""What doctor reports: findings, what it read, and the exit code they imply."""

from __future__ import annotations

from typing import Any, NamedTuple

SEVERITIES = ("error", "warning", "info")
_RANK = {s: i for i, s in enumerate(SEVERITIES)}


class Finding(NamedTuple):
    """One thing doctor noticed. ``id`` is stable kebab-case (``xid-79``, ``persistence-off``)."""

    id: str
    severity: str  # error | warning | info
    title: str  # one line
    evidence: str  # the line(s) or values read, with the GPU's bus id where known
    fix: str  # what to do, with concrete commands

    def to_dict(self) -> dict[str, str]:
        return {
            "id": self.id,
            "severity": self.severity,
            "title": self.title,
            "evidence": self.evidence,
            "fix": self.fix,
        }


class Read(NamedTuple):
    """One input doctor looked at: a file or a collector section, what it was, what came of it."""

    source: str  # file name, "section <key>", or "file:section"
    kind: str  # nvidia-smi-q-x, kernel-log, ... (see classify.KINDS)
    detail: str  # "8 GPUs", "1204 lines", "skipped: nvidia-smi -h help text"
    analysed: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "detail": self.detail, "analysed": self.analysed}


class Report(NamedTuple):
    findings: tuple[Finding, ...]
    read: tuple[Read, ...]

    @property
    def exit_code(self) -> int:
        """1 when any finding is an error, else 0 (bad input never gets this far: exit 2)."""
        return 1 if any(f.severity == "error" for f in self.findings) else 0

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for f in self.findings if f.severity == s) for s in SEVERITIES}

    def ids(self) -> set[str]:
        return {f.id for f in self.findings}

    def to_dict(self) -> dict[str, Any]:
        return {
            "findings": [f.to_dict() for f in self.findings],
            "counts": self.counts(),
            "read": [r.to_dict() for r in self.read],
            "exit_code": self.exit_code,
        }


def sort_findings(findings: list[Finding]) -> tuple[Finding, ...]:
    """Errors first, then warnings, then info; stable within a severity (input order)."""
    return tuple(sorted(findings, key=lambda f: _RANK.get(f.severity, len(SEVERITIES))))


def worse(a: str, b: str) -> str:
    return a if _RANK[a] <= _RANK[b] else b
