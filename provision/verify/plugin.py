"""The pytest plugin a verify worker loads: fixtures the checks use (`target`, `plan`, `facts`,
`evidence`) and a collector that turns pytest's reports into CheckResults, each passed on to the
parent process as it is known."""

from __future__ import annotations

from typing import Any

import pytest

from provision.hostpool import share_connection
from provision.verify.facts import HostFacts
from provision.verify.report import CheckResult

MODULE_ORDER = ("check_system", "check_driver", "check_containers")


class VerifyPlugin:
    def __init__(
        self,
        targets: list,
        only: list[str] | None = None,
        *,
        budget=None,
        have_timeout=True,
        emit=None,
        control_path=None,
    ):
        self.targets = list(targets)
        self.only = set(only or [])
        self.budget = budget  # provision.hostpool.Budget: the host's deadline (None: no deadline)
        self.have_timeout = have_timeout  # coreutils timeout on the host
        self.emit = emit  # called with each event for the parent process (provision.verify.worker)
        self.control_path = control_path  # SSH control socket the host's commands share (hostpool.SharedSsh)
        self.late = 0  # checks not run because the deadline had passed
        self.results: list[CheckResult] = []
        self.errors: list[str] = []
        self._facts: dict[str, HostFacts] = {}
        self._by_id: dict[str, Any] = {}
        self.selected: set[str] | None = None  # the ids of the checks collected (None: before collection)

    # -- which target an item runs on ------------------------------------------------------
    def _target_for(self, host) -> Any:
        pid = host.backend.get_pytest_id()
        if pid not in self._by_id:
            for target in self.targets:
                if _spec_matches(target.spec, pid):
                    self._by_id[pid] = target
                    break
            else:
                raise LookupError(f"no target for testinfra host {pid}")
        return self._by_id[pid]

    @pytest.fixture
    def target(self, host):
        return self._target_for(host)

    @pytest.fixture
    def plan(self, target):
        return target.plan

    @pytest.fixture
    def facts_raw(self, host, target) -> HostFacts:
        if target.name not in self._facts:
            share_connection(host, self.control_path)  # ssh:// hosts: pytest's host is not the worker's probe's
            facts = HostFacts(host, target, budget=self.budget, have_timeout=self.have_timeout)
            facts.prefetch(self.selected)  # every command the selected checks send, in one round trip
            self._facts[target.name] = facts
        return self._facts[target.name]

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
        # host by host (one connection each), the machine first, containers last
        order = {name: n for n, name in enumerate(MODULE_ORDER)}
        position = {id(item): n for n, item in enumerate(items)}

        def key(item):
            host = getattr(getattr(item, "callspec", None), "id", "")
            module = item.module.__name__.rsplit(".", 1)[-1] if getattr(item, "module", None) else ""
            return host, order.get(module, len(order)), position[id(item)]

        items.sort(key=key)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        report.provision_check = _check_id(item)
        report.provision_title = getattr(getattr(item, "function", None), "provision_title", item.name)
        params = getattr(getattr(item, "callspec", None), "params", {})
        host = params.get("_testinfra_host")
        report.provision_target = None
        if host is not None:
            try:
                report.provision_target = self._target_for(host).name
            except LookupError:
                report.provision_target = host.backend.get_pytest_id()

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
                detail,
                tuple(evidence),
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


def _spec_matches(spec: str, pytest_id: str) -> bool:
    """testinfra names a host <connection>://<hostname>; the spec may carry user, port, query."""
    if spec.startswith("local://") or spec == "local":
        return pytest_id == "local"
    scheme, _, rest = spec.partition("://")
    host = rest.split("?", 1)[0]
    host_only = host.rsplit("@", 1)[-1]
    bare = host_only.rsplit(":", 1)[0] if host_only.count(":") == 1 else host_only
    return pytest_id in {f"{scheme}://{host}", f"{scheme}://{host_only}", f"{scheme}://{bare}"} or (
        scheme == "ansible" and pytest_id.endswith("://" + host)
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
