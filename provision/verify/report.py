"""The result of `provision verify`: JSON (schema: provision/verify/schema/report.schema.json),
JUnit XML for CI and the rows of the table.

The JUnit file validates against the Jenkins xUnit plugin's junit-10.xsd (tests/data) as well as
our stricter provision/verify/schema/junit.xsd: counts only on <testsuite> where that schema
allows them (no `skipped` on <testsuites>), one <testsuite> per host. A testcase's classname is
`provision-verify.<host>` with the host's own dots written as `_`: Jenkins reads everything
before a classname's last dot as the package, so `provision.verify.gpu1.example.com` would show a
package `provision.verify.gpu1.example` holding a class `com`; this way every report shows the
package `provision-verify`, one class per host, one test per check.

Every text in a report may come from a host (evidence, a failure's detail, ssh's reason for an
unreachable host): `clean` writes its control characters as escapes (a report shown in a terminal
or a CI log cannot move the cursor, hide a line or reorder text) and bounds its length, and the
JUnit file escapes whatever XML 1.0 cannot hold, so it stays valid whatever a host printed.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from typing import Any, NamedTuple

# C0 but tab and newline, DEL, C1, the line/paragraph separators, bidirectional overrides and
# isolates, and what XML 1.0 forbids besides (U+FFFE, U+FFFF, lone surrogates)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
# what XML 1.0 cannot hold at all (its Char production), whatever the text
_NOT_XML = re.compile(r"[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: str, limit: int | None = None) -> str:
    """``text`` with its control characters written as escapes (\\x1b, \\u202e), at most
    ``limit`` characters (an ellipsis marks a cut)."""
    text = _CONTROL.sub(_escape, str(text))
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def xml_text(text: str) -> str:
    """``text`` as XML 1.0 can hold it: characters it forbids written as escapes."""
    return _NOT_XML.sub(_escape, str(text))


SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema")
REPORT_VERSION = 1


class CheckResult(NamedTuple):
    host: str
    check: str  # stable id: driver-version, packages-held, docker-runtime …
    title: str
    status: str  # pass | warn | fail | skip (warn passes, with something to act on)
    detail: str  # why it failed or was skipped
    evidence: tuple[str, ...]  # what was read on the host
    seconds: float


class HostRun(NamedTuple):
    """How a host's run went, apart from its checks."""

    error: str | None  # "host unreachable: <why>", "did not finish within 120 s ..."; None: it ran
    started: float = 0.0  # time.time() when its worker started
    seconds: float = 0.0  # how long it took


class VerifyReport(NamedTuple):
    hosts: list[str]
    results: list[CheckResult]
    errors: list[str]  # problems outside any check (collection, teardown)
    pytest_rc: int
    runs: dict[str, HostRun] = {}  # noqa: RUF012 - a NamedTuple default, never mutated

    @property
    def exit_code(self) -> int:
        if self.errors or self.host_errors() or any(r.status == "fail" for r in self.results):
            return 1
        if self.pytest_rc not in (0, 5) or not self.results:
            return 1
        return 0

    def host_errors(self) -> dict[str, str]:
        return {h: run.error for h, run in self.runs.items() if run.error}

    @staticmethod
    def classname(host: str) -> str:
        """JUnit classname: package `provision-verify`, the host as the class (see the module doc)."""
        return "provision-verify." + host.replace(".", "_")

    def by_host(self) -> dict[str, list[CheckResult]]:
        out: dict[str, list[CheckResult]] = {h: [] for h in self.hosts}
        for r in self.results:
            out.setdefault(r.host, []).append(r)
        return out

    def counts(self, results: list[CheckResult] | None = None) -> dict[str, int]:
        results = self.results if results is None else results
        return {s: sum(r.status == s for r in results) for s in ("pass", "warn", "fail", "skip")}

    def to_dict(self) -> dict[str, Any]:
        hosts = []
        for host, results in self.by_host().items():
            counts = self.counts(results)
            run = self.runs.get(host, HostRun(None))
            status = "error" if run.error else "fail" if counts["fail"] or not results else "pass"
            hosts.append(
                {
                    "host": host,
                    "status": status,
                    "error": run.error,
                    "started": _iso(run.started) if run.started else None,
                    "seconds": run.seconds,
                    "counts": counts,
                    "checks": [
                        {
                            "id": r.check,
                            "title": r.title,
                            "status": r.status,
                            "detail": r.detail,
                            "evidence": list(r.evidence),
                            "seconds": r.seconds,
                        }
                        for r in results
                    ],
                }
            )
        return {
            "version": REPORT_VERSION,
            "status": "pass" if self.exit_code == 0 else "fail",
            "counts": self.counts(),
            "hosts": hosts,
            "errors": list(self.errors),
        }

    def table_rows(self) -> list[list[str]]:
        """host, check, status, evidence / reason: a failed, warned or skipped check's reason whole
        (the fix it names, a path, a version is never cut), a passed check's evidence up to
        SHOWN_EVIDENCE characters, cut between words, never inside one."""
        rows = [[host, "-", "ERROR", " ".join(error.split())] for host, error in self.host_errors().items()]
        for r in self.results:
            shown = r.detail if r.status != "pass" else shorten("; ".join(r.evidence), SHOWN_EVIDENCE)
            status = r.status.upper() if r.status in ("fail", "warn") else r.status
            rows.append([r.host, r.check, status, " ".join(shown.split())])
        return rows

    def junit(self) -> str:
        """JUnit XML: one testsuite per host, one testcase per check (and one for a host error)."""
        from xml.etree import ElementTree as ET

        x = xml_text  # every text and attribute: what a host printed may hold what XML 1.0 cannot

        now = _iso(dt.datetime.now(dt.UTC).timestamp())
        root = ET.Element("testsuites", name="provision verify")
        host_errors = self.host_errors()
        total = self.counts()
        root.set("tests", str(len(self.results) + len(host_errors) + len(self.errors)))
        root.set("failures", str(total["fail"]))
        root.set("errors", str(len(host_errors) + len(self.errors)))
        root.set("time", f"{sum(r.seconds for r in self.results):.3f}")
        for host, results in self.by_host().items():
            counts = self.counts(results)
            run = self.runs.get(host, HostRun(None))
            suite = ET.SubElement(
                root,
                "testsuite",
                name=x(host),
                tests=str(len(results) + bool(run.error)),
                failures=str(counts["fail"]),
                errors=str(int(bool(run.error))),
                skipped=str(counts["skip"]),
                time=f"{run.seconds or sum(r.seconds for r in results):.3f}",
                timestamp=_iso(run.started) if run.started else now,
                hostname=x(host),
            )
            if run.error:
                case = ET.SubElement(suite, "testcase", name="host", classname=x(self.classname(host)), time="0.000")
                kind = "HostUnreachable" if run.error.startswith("host unreachable") else "HostError"
                ET.SubElement(case, "error", message=x(run.error[:500]), type=kind).text = x(run.error)
            for r in results:
                case = ET.SubElement(
                    suite, "testcase", name=x(r.check), classname=x(self.classname(host)), time=f"{r.seconds:.3f}"
                )
                if r.status == "fail":
                    ET.SubElement(case, "failure", message=x(r.detail[:500]), type="CheckFailed").text = x(r.detail)
                elif r.status == "skip":
                    ET.SubElement(case, "skipped", message=x(r.detail[:500]))
                warned = [f"warning: {r.detail}"] if r.status == "warn" else []
                if r.evidence or warned:
                    ET.SubElement(case, "system-out").text = x("\n".join(warned + list(r.evidence)))
        for error in self.errors:
            suite = ET.SubElement(
                root,
                "testsuite",
                name="provision",
                tests="1",
                failures="0",
                errors="1",
                skipped="0",
                time="0.000",
                timestamp=now,
                hostname="localhost",
            )
            case = ET.SubElement(suite, "testcase", name="run", classname="provision-verify.run", time="0.000")
            ET.SubElement(case, "error", message=x(error[:500]), type="RunError").text = x(error)
        ET.indent(root)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


SHOWN_EVIDENCE = 400
"""Characters of a passed check's evidence in the table and Markdown (all of it is in the JSON and JUnit)."""


def shorten(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, cut at a space (a word, path or version is never split)
    and followed by how much more there is; a single word longer than ``limit`` is kept whole."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit + 1)
    if cut <= 0:
        cut = text.find(" ", limit)
        if cut < 0:
            return text
    return f"{text[:cut]} … (+{len(text) - cut - 1} characters: --format json shows all)"


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat(timespec="milliseconds")
