"""`provision verify`: testinfra checks that a host still matches its plan.

The checks are ordinary pytest-testinfra test functions shipped in provision/verify/checks/.
`run_verify` runs them with pytest.main through testinfra's backends (local, ssh, ansible),
one parametrised run over every target, and turns pytest's reports into a VerifyReport:
per host, per check, pass / fail / skip with the evidence read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from provision.plan.model import Plan


class Target(NamedTuple):
    """One host to verify: how testinfra reaches it and what it must match."""

    name: str  # what the report calls it: the inventory hostname, "local", user@host
    spec: str  # testinfra host spec: local://, ssh://root@10.0.0.5:22, ansible://gpu-a
    plan: Plan
    gpu_count: int | None = None  # GPUs the host must show (None: at least one)
    mig: dict[str, Any] | None = None  # planned MIG layout (ansible vars of provision mig plan)
    hostvars: Mapping[str, Any] = MappingProxyType({})  # inventory variables (paths the roles were told to use)


CHECKS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checks")


def run_verify(
    targets: list[Target],
    *,
    inventory: str | None = None,
    sudo: bool = False,
    ssh_identity_file: str | None = None,
    ssh_config: str | None = None,
    only: list[str] | None = None,
):
    """Run every check on every target; returns a VerifyReport. Touches nothing on the hosts."""
    import pytest

    from provision.tools import tools_on_path
    from provision.verify.plugin import VerifyPlugin

    plugin = VerifyPlugin(targets, only=only)
    args = [
        CHECKS_DIR,
        "-c",
        os.path.join(CHECKS_DIR, "pytest.ini"),
        "--rootdir",
        CHECKS_DIR,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:terminal",
        "-p",
        "no:randomly",
        "-p",
        "no:xdist",
        "-p",
        "no:logging",
        "-s",
        "--hosts",
        ",".join(t.spec for t in targets),
    ]
    if inventory:
        args += ["--ansible-inventory", inventory]
    if sudo:
        args.append("--sudo")
    if ssh_identity_file:
        args += ["--ssh-identity-file", ssh_identity_file]
    if ssh_config:
        args += ["--ssh-config", ssh_config]
    with tools_on_path():
        rc = pytest.main(args, plugins=[plugin])
    return plugin.report(int(rc))
