"""provision inventory scan over the test fleet: the converged hosts' facts are their plans'
(driver release, branch and flavour, Container Toolkit, Fabric Manager, held packages; Docker as
the host has it) and `provision diff` of each scan against its plan finds nothing; drift made
behind provision's back (another driver answering nvidia-smi, Fabric Manager stopped, a package
hold lifted) shows in the scan and in the diff; a host with no sshd on its port and a host whose
nvidia-smi hangs (ignoring SIGTERM) come back as such within the deadline, side by side."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jsonschema
import pytest

from provision.fleet.scan import SCHEMA_FILE, upstream, version_of
from provision.plan.model import write_plan

pytestmark = [pytest.mark.fleet]
HOSTS = ("gpu-a", "gpu-b", "gpu-c")


@pytest.fixture
def scan(cli):
    def run(inventory: Path, out: Path, *args: str) -> tuple[int, dict[str, dict], str]:
        result = cli("inventory", "scan", "-i", str(inventory), "--out", str(out), "--format", "json", *args)
        docs = json.loads(result.out)
        with open(SCHEMA_FILE, encoding="utf-8") as handle:
            schema = json.load(handle)
        for doc in docs:
            jsonschema.validate(doc, schema)
            assert json.loads((out / f"{doc['host']}.json").read_text()) == doc
        return result.code, {doc["host"]: doc for doc in docs}, result.err

    return run


def locks(env, folder: Path) -> dict[str, Path]:
    """Each group's plan as a lock file, for provision diff."""
    folder.mkdir(exist_ok=True)
    out = {}
    for group, plan in env.plans.items():
        out[group] = folder / f"{group}.lock.json"
        write_plan(plan, out[group])
    return out


def held_on(fleet, host: str) -> set[str]:
    out = fleet.exec(host, "dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package}\\n'")
    return {line.split()[1] for line in out.splitlines() if line.startswith("h")}


def test_a_converged_fleet_scans_as_its_plans(converged_fleet, scan, cli, tmp_path):
    fleet = converged_fleet.fleet
    started = time.monotonic()
    rc, docs, err = scan(converged_fleet.inventory(), tmp_path / "scans")
    assert rc == 0, err + json.dumps(docs, indent=1)[-3000:]
    assert time.monotonic() - started < 120
    assert set(docs) == set(HOSTS)
    plan_files = locks(converged_fleet, tmp_path / "plans")
    for host, doc in docs.items():
        group = fleet.host(host).group
        plan = converged_fleet.plans[group]
        assert doc["reachable"] is True
        assert doc["error"] is None
        assert doc["driver"] == {
            "version": plan.driver.version,
            "branch": plan.driver.branch,
            "kernel_module": plan.driver.kernel_module,
            "loaded": False,  # a container: the CI machine's kernel has no nvidia module
            "signed": None,
            "source": "nvidia-smi",
        }, host
        assert doc["container_toolkit"] == plan.container_toolkit.version
        assert doc["docker"] == version_of(upstream(converged_fleet.dpkg_version(host, "docker.io")))
        assert doc["os"]["catalogue_id"] == plan.os.id
        assert doc["kernel"] == os.uname().release
        assert [g["catalogue_id"] in plan.gpu.members for g in doc["gpus"]] == [True, True]
        if plan.fabric_manager is None:
            assert doc["fabric_manager"] is None
        else:
            assert doc["fabric_manager"] == {"version": plan.fabric_manager.version, "active": True}
        planned = [p.name for p in plan.driver.packages + plan.container_toolkit.packages]
        planned += [p.name for p in plan.fabric_manager.packages] if plan.fabric_manager else []
        assert set(planned) <= set(doc["held"]), (host, doc["held"])
        assert set(doc["held"]) == held_on(fleet, host)
        same = cli("diff", str(tmp_path / "scans" / f"{host}.json"), str(plan_files[group]))
        assert same.code == 0, (host, same)


def test_drift_shows_in_the_scan_and_in_the_diff(converged_fleet, scan, cli, real_matrix, tmp_path):
    fleet = converged_fleet.fleet
    plans = converged_fleet.plans
    a100, h100 = plans["a100"], plans["h100"]
    other = next(b for b in real_matrix.drivers if str(b.branch) != a100.driver.branch)
    drifted = str(other.releases[0].version)
    held_package = a100.driver.packages[0].name
    try:
        # gpu-a: another driver answers nvidia-smi; gpu-b: Fabric Manager stopped; gpu-c: a hold lifted
        fleet.exec(
            "gpu-a",
            f"cp -p /usr/lib/fakegpu/driver-version /run/driver-version.scan && echo {drifted} > /usr/lib/fakegpu/driver-version",
        )
        fleet.exec("gpu-b", "systemctl stop nvidia-fabricmanager")
        fleet.exec("gpu-c", f"apt-mark unhold {held_package} >/dev/null")
        rc, docs, err = scan(converged_fleet.inventory(), tmp_path / "scans")
        assert rc == 0, err
        assert docs["gpu-a"]["driver"]["version"] == drifted
        assert docs["gpu-a"]["driver"]["branch"] == str(other.branch)
        assert docs["gpu-b"]["fabric_manager"] == {"version": h100.fabric_manager.version, "active": False}
        assert held_package not in docs["gpu-c"]["held"]
        assert held_package in docs["gpu-a"]["held"]
        plan_files = locks(converged_fleet, tmp_path / "plans")
        branch = cli("diff", str(tmp_path / "scans" / "gpu-a.json"), str(plan_files["a100"]), "--format", "json")
        assert branch.code == 1
        assert "driver-branch" in branch.out
        fm = cli("diff", str(tmp_path / "scans" / "gpu-b.json"), str(plan_files["h100"]))
        assert fm.code == 1
        assert "fabric-manager" in fm.out
    finally:
        fleet.exec("gpu-a", "mv /run/driver-version.scan /usr/lib/fakegpu/driver-version", check=False)
        fleet.exec("gpu-b", "systemctl start nvidia-fabricmanager", check=False)
        fleet.exec("gpu-c", f"apt-mark hold {held_package} >/dev/null", check=False)
    assert held_package in held_on(fleet, "gpu-c")


HUNG_SMI = "#!/bin/sh\necho $$ >> /run/scan-hung-smi.pids\ntrap '' TERM\nsleep 3600\n"


def test_unreachable_and_hung_hosts_come_back_within_the_deadline(converged_fleet, scan, tmp_path):
    fleet = converged_fleet.fleet
    plan = converged_fleet.plans["a100"]
    fleet.exec("gpu-a", "cp -p /usr/bin/nvidia-smi /run/nvidia-smi.scan")
    fleet.exec("gpu-a", f"cat > /usr/bin/nvidia-smi <<'EOF'\n{HUNG_SMI}EOF\nchmod 755 /usr/bin/nvidia-smi")
    try:
        inventory = converged_fleet.inventory("hung.yml", hosts=("gpu-a", "gpu-c", "gpu-x"))
        started = time.monotonic()
        rc, docs, _ = scan(inventory, tmp_path / "scans", "--host-timeout", "30")
        wall = time.monotonic() - started
        assert rc == 1
        assert wall < 30 + 15, wall
        hung, gone, fine = docs["gpu-a"], docs["gpu-x"], docs["gpu-c"]
        assert hung["reachable"] is True
        assert "`nvidia-smi` did not answer within" in hung["error"]
        assert hung["gpus"] == []
        # the driver comes from its packages then, the flavour from the catalogue's package names
        assert hung["driver"]["source"] == "package"
        assert (hung["driver"]["version"], hung["driver"]["kernel_module"]) == (
            plan.driver.version,
            plan.driver.kernel_module,
        )
        assert gone["reachable"] is False
        assert gone["error"].startswith("unreachable: ")
        assert "Connection refused" in gone["error"]
        assert fine["error"] is None
        assert fine["driver"]["source"] == "nvidia-smi"
        still = fleet.exec(
            "gpu-a",
            "for p in $(cat /run/scan-hung-smi.pids); do [ -d /proc/$p ] && grep -q '^State:.*[RS]' /proc/$p/status "
            "&& echo $p; done; true",
        )
        assert not still.split(), f"hung nvidia-smi processes left on gpu-a: {still}"
    finally:
        fleet.exec("gpu-a", "mv /run/nvidia-smi.scan /usr/bin/nvidia-smi", check=False)
        fleet.exec(
            "gpu-a",
            "for p in $(cat /run/scan-hung-smi.pids 2>/dev/null); do kill -9 $p 2>/dev/null; done; "
            "rm -f /run/scan-hung-smi.pids",
            check=False,
        )
