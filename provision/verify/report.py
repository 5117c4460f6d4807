"""The result of `provision verify`: JSON (schema: provision/verify/schema/report.schema.json),
JUnit XML for CI (schema: provision/verify/schema/junit.xsd) and the rows of the table."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any, NamedTuple

from provision.text import clip

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


class VerifyReport(NamedTuple):
    hosts: list[str]
    results: list[CheckResult]
    errors: list[str]  # problems outside any check (collection, teardown)
    pytest_rc: int

    @property
    def exit_code(self) -> int:
        if self.errors or any(r.status == "fail" for r in self.results):
            return 1
        if self.pytest_rc not in (0, 5) or not self.results:
            return 1
        return 0

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
            hosts.append(
                {
                    "host": host,
                    "status": "fail" if counts["fail"] or not results else "pass",
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
        rows = []
        for r in self.results:
            shown = r.detail if r.status != "pass" else "; ".join(r.evidence)
            rows.append([r.host, r.check, r.status.upper() if r.status in ("fail", "warn") else r.status, clip(shown)])
        return rows

    def junit(self) -> str:
        """JUnit XML: one testsuite per host, one testcase per check."""
        from xml.etree import ElementTree as ET

        now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
        root = ET.Element("testsuites", name="provision verify")
        total = self.counts()
        root.set("tests", str(len(self.results)))
        root.set("failures", str(total["fail"]))
        root.set("errors", str(len(self.errors)))
        root.set("skipped", str(total["skip"]))
        for host, results in self.by_host().items():
            counts = self.counts(results)
            suite = ET.SubElement(
                root,
                "testsuite",
                name=host,
                tests=str(len(results)),
                failures=str(counts["fail"]),
                errors="0",
                skipped=str(counts["skip"]),
                time=f"{sum(r.seconds for r in results):.3f}",
                timestamp=now,
                hostname=host,
            )
            for r in results:
                case = ET.SubElement(
                    suite, "testcase", name=r.check, classname=f"provision.verify.{host}", time=f"{r.seconds:.3f}"
                )
                if r.status == "fail":
                    ET.SubElement(case, "failure", message=r.detail[:500], type="CheckFailed").text = r.detail
                elif r.status == "skip":
                    ET.SubElement(case, "skipped", message=r.detail[:500])
                warned = [f"warning: {r.detail}"] if r.status == "warn" else []
                if r.evidence or warned:
                    ET.SubElement(case, "system-out").text = "\n".join(warned + list(r.evidence))
        for error in self.errors:
            suite = ET.SubElement(
                root,
                "testsuite",
                name="provision",
                tests="1",
                failures="0",
                errors="1",
                skipped="0",
                time="0",
                timestamp=now,
                hostname="localhost",
            )
            case = ET.SubElement(suite, "testcase", name="run", classname="provision.verify", time="0")
            ET.SubElement(case, "error", message=error[:500], type="RunError").text = error
        ET.indent(root)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
