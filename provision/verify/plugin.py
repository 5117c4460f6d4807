"""The pytest plugin a verify worker loads: fixtures the checks use (`host`, `target`, `plan`,
`facts`, `evidence`, `warning`, `catalogue`) and a collector that turns pytest's reports into
CheckResults, each passed on to the parent process as it is known.

The host is the one the worker built from the target's checked Connection (testinfra's own
plugin would build another from a URL). What a check reports comes from the host, so it is data:
control characters are written as escapes and each text is bounded (`clean`), and a check that
read an output the host printed past provision.hostpool.OUTPUT_LIMIT says so."""

from __future__ import annotations

import pytest

from provision.hostpool import OUTPUT_LIMIT
from provision.verify.facts import HostFacts
from provision.verify.report import CheckResult, clean

MODULE_ORDER = ("check_system", "check_driver", "check_server", "check_containers", "check_images")
DETAIL_LIMIT = 2000  # characters of a check's detail kept in the report
EVIDENCE_LIMIT = 1000  # characters of one line of evidence
MAX_EVIDENCE = 64  # lines of evidence kept per check


class VerifyPlugin:
    def __init__(
        self,
        target,
        host,
        only: list[str] | None = None,
        *,
        budget=None,
        have_timeout=True,
        emit=None,
        catalogue=None,
    ):
        self._target = target
        self._catalogue = catalogue  # provision.verify.Catalogue: the controller's (None: not handed one)
        self._host = host  # testinfra Host (provision.hostpool.build_host)
        self.only = set(only or [])
        self.budget = budget  # provision.hostpool.Budget: the host's deadline (None: no deadline)
        self.have_timeout = have_timeout  # coreutils timeout on the host
        self.emit = emit  # called with each event for the parent process (provision.verify.worker)
        self.late = 0  # checks not run because the deadline had passed
        self.results: list[CheckResult] = []
        self.errors: list[str] = []
        self._facts: HostFacts | None = None
        self.selected: set[str] | None = None  # the ids of the checks collected (None: before collection)

    @pytest.fixture
    def host(self):
        return self._host

    @pytest.fixture
    def target(self):
        return self._target

    @pytest.fixture
    def plan(self, target):
        return target.plan

    @pytest.fixture
    def catalogue(self):
        """The controller's catalogue (provision.matrix.model.Matrix), loaded on first use; None when
        run_verify was handed none (no target has images)."""
        from provision.verify import catalogue

        return catalogue(self._catalogue) if self._catalogue is not None else None

    @pytest.fixture
    def facts_raw(self, host, target, request) -> HostFacts:
        if self._facts is None:
            self._facts = HostFacts(host, target, budget=self.budget, have_timeout=self.have_timeout)
            self._facts.prefetch(self.selected)  # every command the selected checks send, in one round trip
        request.node.provision_cut_from = len(self._facts.cut)  # outputs cut before this check
        return self._facts

    @pytest.fixture
    def facts(self, facts_raw, request) -> HostFacts:
        if facts_raw.unreachable:
            pytest.skip(f"host unreachable ({facts_raw.unreachable})")
        # past the deadline a check still runs on what the host's batch answered in time
        late = self.budget is not None and self.budget.command_timeout() <= 0
        if late and not facts_raw.answers(_check_id(request.node)):
            self.late += 1
            pytest.skip(f"not run: the host's {self.budget.seconds:g} s deadline (--host-timeout) had passed")
        return facts_raw

    @pytest.fixture
    def warning(self, request):
        """warning("text"): the check passes, but the report says "warn" with this text."""

        def add(text: str) -> None:
            request.node.user_properties.append(("warning", str(text)))

        return add

    @pytest.fixture
    def evidence(self, request):
        """evidence("text"): what the check read, kept for the report whatever the outcome."""

        def add(text: str) -> None:
            request.node.user_properties.append(("evidence", str(text)))

        return add

    # -- selection and results ---------------------------------------------------------------
    def pytest_collection_modifyitems(self, config, items):
        if self.only:
            keep = [i for i in items if _check_id(i) in self.only]
            config.hook.pytest_deselected(items=[i for i in items if i not in keep])
            items[:] = keep
        self.selected = {_check_id(i) for i in items}
        # the machine first, containers last
        order = {name: n for n, name in enumerate(MODULE_ORDER)}
        position = {id(item): n for n, item in enumerate(items)}

        def key(item):
            module = item.module.__name__.rsplit(".", 1)[-1] if getattr(item, "module", None) else ""
            return order.get(module, len(order)), position[id(item)]

        items.sort(key=key)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        report.provision_check = _check_id(item)
        report.provision_title = getattr(getattr(item, "function", None), "provision_title", item.name)
        report.provision_target = self._target.name
        start = getattr(item, "provision_cut_from", None)
        if report.when == "call" and start is not None and self._facts is not None:
            for command in dict.fromkeys(self._facts.cut[start:]):
                note = (
                    f"the host printed more than {OUTPUT_LIMIT // 1024} KiB for `{command[:60]}`: "
                    "the check read only that much (cut)"
                )
                report.user_properties.append(("warning" if report.passed else "evidence", note))

    def pytest_runtest_logreport(self, report):
        check = getattr(report, "provision_check", None)
        if check is None:
            return
        evidence = [v for k, v in report.user_properties if k == "evidence"]
        if report.when == "call" or (report.when == "setup" and not report.passed):
            warnings = [v for k, v in report.user_properties if k == "warning"]
            if report.passed and warnings:
                status, detail = "warn", "; ".join(warnings)
            elif report.passed:
                status, detail = "pass", ""
            elif report.skipped:
                status, detail = "skip", _skip_reason(report)
            else:
                status, detail = "fail", _failure_text(report)
                if report.when == "setup":
                    detail = "could not run: " + detail
            result = CheckResult(
                report.provision_target or "?",
                check,
                report.provision_title,
                status,
                clean(detail, DETAIL_LIMIT),
                tuple(clean(e, EVIDENCE_LIMIT) for e in evidence[:MAX_EVIDENCE]),
                round(report.duration, 3),
            )
            self.results.append(result)
            self._emit({"result": list(result)})
        elif report.when == "teardown" and report.failed:
            self._error(f"{report.provision_target}: {check}: teardown failed: {_failure_text(report)}")

    def pytest_collectreport(self, report):
        if report.failed:
            self._error(f"collecting checks failed: {_failure_text(report)}")

    def _error(self, text: str) -> None:
        text = clean(text, DETAIL_LIMIT)
        self.errors.append(text)
        self._emit({"error": text})

    def _emit(self, event: dict) -> None:
        if self.emit is not None:
            self.emit(event)

    def finish(self) -> None:
        """After the run: say so when the deadline left checks unrun."""
        if self.late and self.budget is not None:
            self._emit(
                {
                    "late": f"did not finish within {self.budget.seconds:g} s (--host-timeout): {self.late} check(s) "
                    "not run; a command on the host hangs (provision doctor reads the kernel log)"
                }
            )


def _check_id(item) -> str:
    check = getattr(getattr(item, "function", None), "provision_check", None)
    return check or getattr(item, "originalname", item.name)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _failure_text(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    text = text.removeprefix("Failed: ")
    lines = [line for line in text.splitlines() if line.strip()]
    return " / ".join(lines[:4]) if lines else "failed"
