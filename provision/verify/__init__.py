"""`provision verify`: testinfra checks that a host still matches its plan.

The checks are ordinary pytest test functions shipped in provision/verify/checks/, run on a
testinfra host.
`run_verify` checks the hosts side by side: one worker process per host
(provision/verify/worker.py), at most `forks` at once, each under the host's deadline
(provision.hostpool; with more than one host the workers are forked from this process after it
imported pytest and testinfra once, `worker.PRELOAD`). A worker makes sure its host runs a
command at all, then runs the checks with pytest.main through testinfra's backends (local, ssh,
ansible). What the selected checks
read is gathered first in one round trip (provision/verify/batch.py: one script, each command in
it under coreutils timeout, the host's deadline kept); a command outside it runs on its own,
also under timeout. All go over one SSH connection per host (ControlMaster, its socket in a
private directory that run_verify removes with the connections). The workers'
results become one VerifyReport: per host, per check, pass / fail / skip with the evidence
read, and per host an error when it could not be reached or did not finish in time.

The image-runs check asks provision.matrix.runs_on.decide, which reads the catalogue. The
controller's catalogue reaches the workers without a copy: `run_verify` keeps it in `_CATALOGUES`
before the workers are forked (they share the parent's memory), and a worker started on its own
(one host) loads the same compat folder through the validated-data cache (`catalogue`), refusing a
catalogue whose files are not the controller's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from provision.hostpool import DEFAULT_FORKS, DEFAULT_HOST_TIMEOUT, Connection
from provision.matrix.model import Matrix
from provision.matrix.runs_on import ImageNeeds
from provision.plan.model import Plan


class Target(NamedTuple):
    """One host to verify: how it is reached and what it must match."""

    name: str  # what the report calls it: the inventory hostname, "local", user@host
    connection: Connection  # checked parts, never a URL (provision.hostpool.inventory_connection, url_connection)
    plan: Plan
    gpu_count: int | None = None  # GPUs the host must show (None: at least one)
    mig: dict[str, Any] | None = None  # planned MIG layout (ansible vars of provision mig plan)
    hostvars: Mapping[str, Any] = MappingProxyType({})  # inventory variables (paths the roles were told to use)
    # what each image its fleet group's images: list names needs (provision.verify.images); None:
    # no fleet group (--plan, --local, --host), () a group that lists none
    images: tuple[ImageNeeds, ...] | None = None
    group: str | None = None  # the fleet group whose plan it is (None without a fleet file)


class Catalogue(NamedTuple):
    """Which catalogue the controller read: its compat folder and its files' sha256 (Matrix.files)."""

    compat_dir: str
    files: tuple[tuple[str, str], ...]


# The catalogue run_verify was handed, for the workers it forks (they inherit this process's memory).
_CATALOGUES: dict[Catalogue, Matrix] = {}


def catalogue(ref: Catalogue) -> Matrix:
    """The controller's catalogue in a worker: the one it handed `run_verify` (a forked worker), else
    loaded from the same folder through the validated-data cache (a worker started on its own)."""
    matrix = _CATALOGUES.get(ref)
    if matrix is None:
        from provision.matrix.cache import load_cached

        matrix = load_cached(ref.compat_dir)
        if tuple(matrix.files) != ref.files:
            raise RuntimeError(f"the catalogue in {ref.compat_dir} changed while verify ran: run it again")
        _CATALOGUES[ref] = matrix
    return matrix


CHECKS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checks")
_NO_AUTOLOAD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"  # pytest >= 8.4 also has --disable-plugin-autoload
# pytest's own plugins a verify run has no use for, not loaded (each host's worker imports and runs
# pytest anew: these cost CPU on every host, unraisableexception two full garbage collections).
# The checks assert nothing, so no assertion rewriting either.
UNUSED_PYTEST_PLUGINS = (
    "cacheprovider",
    "terminal",
    "logging",
    "assertion",
    "debugging",
    "doctest",
    "faulthandler",
    "junitxml",
    "legacypath",
    "monkeypatch",
    "pastebin",
    "recwarn",
    "setuponly",
    "setupplan",
    "stepwise",
    "subtests",
    "threadexception",
    "tmpdir",
    "unittest",
    "unraisableexception",
    "warnings",
    "randomly",
    "xdist",
)


def run_verify(
    targets: list[Target],
    *,
    sudo: bool = False,
    ssh_identity_file: str | None = None,
    ssh_config: str | None = None,
    only: list[str] | None = None,
    forks: int = DEFAULT_FORKS,
    host_timeout: float = DEFAULT_HOST_TIMEOUT,
    matrix: Matrix | None = None,
    compat_dir: str | None = None,
):
    """Run every check on every target, `forks` hosts at a time, each for at most `host_timeout`
    seconds; returns a VerifyReport. Touches nothing on the hosts. ``matrix``, read from
    ``compat_dir``: the catalogue the image-runs check asks the rule with (needed when a target
    has images)."""
    import pickle
    import sys

    from provision.hostpool import Job, SharedSsh, run_jobs
    from provision.tools import tool_path
    from provision.verify.worker import PRELOAD, Request

    ref = None
    if any(t.images for t in targets):
        if matrix is None or compat_dir is None:
            raise ValueError("targets with images need the catalogue (matrix and compat_dir)")
        ref = Catalogue(os.path.abspath(compat_dir), tuple(matrix.files))
        _CATALOGUES[ref] = matrix
    shared = SharedSsh()
    try:
        jobs = []
        for index, target in enumerate(targets):
            request = Request(
                target._replace(hostvars=dict(target.hostvars or {})),
                sudo,
                ssh_identity_file,
                ssh_config,
                only,
                host_timeout,
                control_path=shared.path(index),
                catalogue=ref,
            )
            argv = [sys.executable, "-m", "provision.verify.worker"]
            jobs.append(Job(target.name, argv, pickle.dumps(request), entry="provision.verify.worker:serve"))
        env = {**os.environ, "PATH": tool_path()}
        outcomes = run_jobs(jobs, forks=forks, timeout=host_timeout, env=env, preload=PRELOAD)
    finally:
        shared.close()
    return collect_report([t.name for t in targets], outcomes, host_timeout=host_timeout)


def collect_report(names: list[str], outcomes, *, host_timeout: float):
    """The VerifyReport of the workers' JSON lines (see provision/verify/worker.py)."""
    import json

    from provision.verify.report import CheckResult, HostRun, VerifyReport, clean

    results: list[CheckResult] = []
    errors: list[str] = []
    runs: dict[str, HostRun] = {}
    worst_rc = 0
    for outcome in outcomes:
        done: int | None = None
        unreachable: str | None = None
        late: list[str] = []
        count = 0
        for line in outcome.stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if "result" in event:
                host, check, title, status, detail, evidence, seconds = event["result"]
                results.append(CheckResult(host, check, title, status, detail, tuple(evidence), seconds))
                count += 1
            elif "unreachable" in event:
                unreachable = clean(event["unreachable"], 500)  # ssh's stderr: what the host said, maybe
            elif "error" in event:
                errors.append(clean(event["error"], 2000))
            elif "late" in event:
                late.append(clean(event["late"], 500))
            elif "done" in event:
                done = int(event["done"])
        if unreachable is not None:
            error = f"host unreachable: {unreachable}"
        elif outcome.timed_out and count == 0:
            error = f"host unreachable: no answer within {host_timeout:g} s (--host-timeout)"
        elif outcome.timed_out:
            error = (
                f"did not finish within {host_timeout:g} s (--host-timeout): stopped after {count} check(s); "
                "a command on the host hangs (provision doctor reads the kernel log)"
            )
        elif done is None:
            why = [ln for ln in outcome.stderr.splitlines() if ln.strip()]
            error = f"the checks stopped (exit {outcome.rc}): {clean(why[-1].strip(), 500) if why else 'no output'}"
        elif late:
            error = late[0]
        else:
            error = None
        if done is not None and done not in (0, 1, 5):
            worst_rc = max(worst_rc, done)
        runs[outcome.name] = HostRun(error, outcome.started, outcome.seconds)
    return VerifyReport(names, results, errors, worst_rc, runs)


def run_checks(
    target: Target,
    host,
    *,
    only: list[str] | None = None,
    budget=None,
    have_timeout: bool = True,
    emit=None,
    catalogue: Catalogue | None = None,
) -> int:
    """The checks on one target, in this process (the worker's part), on ``host`` (the testinfra
    Host provision.hostpool.build_host made for it); pytest's exit code. Each result goes to
    `emit` as it is known."""
    import pytest

    from provision.verify.plugin import VerifyPlugin

    plugin = VerifyPlugin(
        target, host, only=only, budget=budget, have_timeout=have_timeout, emit=emit, catalogue=catalogue
    )
    args = [
        CHECKS_DIR,
        "-c",
        os.path.join(CHECKS_DIR, "pytest.ini"),
        "--rootdir",
        CHECKS_DIR,
        # no plugin but ours: it hands the checks the host (testinfra's would build one from a URL),
        # and the others installed beside it (hypothesis's costs a quarter of a second of CPU per
        # host to import) have nothing to do here
        *(arg for name in UNUSED_PYTEST_PLUGINS for arg in ("-p", f"no:{name}")),
        "-s",
    ]
    autoload = os.environ.get(_NO_AUTOLOAD)
    os.environ[_NO_AUTOLOAD] = "1"
    try:
        rc = int(pytest.main(args, plugins=[plugin]))
    finally:
        if autoload is None:
            os.environ.pop(_NO_AUTOLOAD, None)
        else:
            os.environ[_NO_AUTOLOAD] = autoload
    plugin.finish()
    return rc
