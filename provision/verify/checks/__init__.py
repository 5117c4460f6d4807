"""The checks `provision verify` runs: testinfra test functions, one per property of a host.

Each is marked with @check(id, title). The id is stable (reports, --only, CI dashboards use it);
a check fails with `fail(...)`, skips with `pytest.skip(...)` and records what it read with the
`evidence` fixture, so a report says what was seen on the host whatever the outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from provision.verify.facts import LINE_LIMIT

IDS: list[str] = []


def check(check_id: str, title: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def mark(function: Callable[..., Any]) -> Callable[..., Any]:
        function.provision_check = check_id  # type: ignore[attr-defined]
        function.provision_title = title  # type: ignore[attr-defined]
        IDS.append(check_id)
        return function

    return mark


def fail(message: str) -> None:
    pytest.fail(message, pytrace=False)


def first_line(text: str) -> str:
    """The first line of what a command printed, at most LINE_LIMIT characters."""
    return text.split("\n", 1)[0][:LINE_LIMIT].strip()


def need_smi(facts):
    """The GPUs nvidia-smi lists; the check skips (the nvidia-smi check fails) when it does not answer."""
    res, gpus = facts.smi
    if res.timed_out is not None:
        pytest.skip(f"nvidia-smi did not answer in {res.timed_out} s (see the nvidia-smi check)")
    if res.rc != 0:
        pytest.skip(f"nvidia-smi fails (see the nvidia-smi check): {first_line(res.text) or res.rc}")
    return gpus


def kernel_check(facts) -> None:
    """Kernel state belongs to the machine: a container shares its host's kernel."""
    if facts.container:
        pytest.skip(f"runs in a container ({facts.container}): the kernel and its modules are the container host's")


def assert_packages(facts, packages, hold: bool, evidence) -> None:
    """Each planned package installed at its planned version and, with hold, held/versionlocked."""
    if not packages:
        return
    found = facts.installed([p.name for p in packages])
    for p in packages:
        got = found[p.name]
        evidence(f"{p.name} {got.raw or 'absent'}{' (held)' if got.held else ''}")
    for p in packages:
        got = found[p.name]
        if got.version is None:
            fail(f"{p.name} is not installed; the plan pins {p.version}")
        if got.version != p.version:
            fail(f"{p.name} is {got.raw}; the plan pins {p.version}")
    if hold:
        loose = [p.name for p in packages if not found[p.name].held]
        if loose:
            what = "held (apt-mark hold)" if facts.target.plan.os.pkg_manager == "apt" else "versionlocked"
            fail(f"{', '.join(loose)} not {what}: an upgrade can replace the planned version")
