"""provision verify over the test fleet: every check passes on converged hosts, checked side by
side, and drift (a package downgraded, the runtime removed from daemon.json, persistenced
stopped) fails the check that owns it, by name; a hung nvidia-smi (it ignores SIGTERM) is a
finding within the host's deadline; an unreachable host is one error. JSON and JUnit reports are
validated against their schemas (JUnit also against Jenkins xUnit's junit-10.xsd)."""

import datetime as dt
import json
import subprocess
import sys
import time

import jsonschema
import pytest
import xmlschema
from harness.fleet import run_apply
from support import ROOT

from provision.verify.report import SCHEMA_DIR

pytestmark = [pytest.mark.fleet]
HOSTS = ("gpu-a", "gpu-b", "gpu-c")
JUNIT_10 = ROOT / "tests" / "data" / "junit-10.xsd"


def verify(*args, junit=None):
    cmd = [sys.executable, "-m", "provision", "verify", *args, "--format", "json"]
    if junit:
        cmd += ["--junit", str(junit)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(
            f"verify printed no JSON (exit {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
        ) from None
    with open(f"{SCHEMA_DIR}/report.schema.json") as handle:
        jsonschema.validate(doc, json.load(handle))
    if junit:
        xmlschema.XMLSchema(f"{SCHEMA_DIR}/junit.xsd").validate(str(junit))
        xmlschema.XMLSchema(str(JUNIT_10)).validate(str(junit))
    return proc.returncode, doc, proc.stderr


def statuses(doc):
    return {h["host"]: {c["id"]: c["status"] for c in h["checks"]} for h in doc["hosts"]}


def test_verify_passes_on_a_converged_fleet(converged_fleet, tmp_path):
    rc, doc, err = verify(
        "-i",
        str(converged_fleet.inventory()),
        "--fleet",
        str(converged_fleet.fleet_file()),
        "--gpu-count",
        "2",
        junit=tmp_path / "verify.xml",
    )
    assert rc == 0, json.dumps(doc, indent=1)[-3000:] + err
    got = statuses(doc)
    assert set(got) == set(HOSTS)
    for host, checks in got.items():
        assert all(s in ("pass", "skip") for s in checks.values()), (host, checks)
        for check in (
            "reachable",
            "os",
            "nvidia-smi",
            "gpus",
            "persistence",
            "driver-packages",
            "fabric-manager",
            "container-toolkit",
            "docker-runtime",
            "nouveau-blacklisted",
            "secure-boot",
        ):
            assert checks[check] == "pass", (host, check, checks)
    by_host = {h["host"]: {c["id"]: c for c in h["checks"]} for h in doc["hosts"]}
    # what the checks read is in the report: the planned driver, the fabric manager on the SXM host
    a100, h100 = converged_fleet.plans["a100"], converged_fleet.plans["h100"]
    assert any(a100.driver.version in e for e in by_host["gpu-a"]["nvidia-smi"]["evidence"])
    assert any("nvidia-fabricmanager: active" in e for e in by_host["gpu-b"]["fabric-manager"]["evidence"])
    assert any(h100.driver.version in e for e in by_host["gpu-b"]["fabric-manager"]["evidence"])
    # the kernel is the CI machine's: those checks say why they did not run
    assert "container" in by_host["gpu-a"]["kernel-module"]["detail"]
    junit = (tmp_path / "verify.xml").read_text()
    assert junit.count("<testcase ") == sum(len(h["checks"]) for h in doc["hosts"])
    assert junit.count("<testsuite ") == len(HOSTS)
    # side by side (--forks 5 by default): every host's run overlaps every other's
    spans = {h["host"]: (dt.datetime.fromisoformat(h["started"]).timestamp(), h["seconds"]) for h in doc["hosts"]}
    latest_start = max(start for start, _ in spans.values())
    assert all(start + seconds > latest_start for start, seconds in spans.values()), spans


def test_verify_names_each_kind_of_drift(converged_fleet, tmp_path):
    fleet = converged_fleet.fleet
    old = "1.19.1"
    toolkit = [p.name for p in converged_fleet.plans["a100"].container_toolkit.packages]
    # gpu-a: the toolkit downgraded behind provision's back (holds overridden)
    fleet.exec(
        "gpu-a",
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades "
        "--allow-change-held-packages " + " ".join(f"{p}={old}-1" for p in toolkit) + " >/dev/null 2>&1",
    )
    assert converged_fleet.dpkg_version("gpu-a", "nvidia-container-toolkit") == f"{old}-1"
    # gpu-b: the nvidia runtime removed from daemon.json
    fleet.exec(
        "gpu-b",
        "python3 -c \"import json; p='/etc/docker/daemon.json'; d=json.load(open(p)); "
        "d.pop('runtimes', None); json.dump(d, open(p, 'w'))\"",
    )
    # gpu-c: nvidia-persistenced stopped
    fleet.exec("gpu-c", "systemctl stop nvidia-persistenced")

    rc, doc, err = verify(
        "-i",
        str(converged_fleet.inventory()),
        "--fleet",
        str(converged_fleet.fleet_file()),
        junit=tmp_path / "drift.xml",
    )
    assert rc == 1, err
    got = statuses(doc)
    failed = {h: sorted(c for c, s in checks.items() if s == "fail") for h, checks in got.items()}
    assert failed == {"gpu-a": ["container-toolkit"], "gpu-b": ["docker-runtime"], "gpu-c": ["persistence"]}, failed
    details = {h["host"]: {c["id"]: c["detail"] for c in h["checks"]} for h in doc["hosts"]}
    assert (
        f"plan pins {converged_fleet.plans['a100'].container_toolkit.version}" in details["gpu-a"]["container-toolkit"]
    )
    assert "no nvidia runtime" in details["gpu-b"]["docker-runtime"]
    assert "nvidia-persistenced is inactive" in details["gpu-c"]["persistence"]
    assert 'name="container-toolkit"' in (tmp_path / "drift.xml").read_text()

    # the table names them too, and the next apply repairs all three
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "verify",
            "-i",
            str(converged_fleet.inventory()),
            "--fleet",
            str(converged_fleet.fleet_file()),
            "--limit",
            "gpu-b",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 1
    assert "docker-runtime" in proc.stdout
    assert "FAIL" in proc.stdout
    rc, out, _ = run_apply(
        "-i",
        str(converged_fleet.inventory()),
        "--fleet",
        str(converged_fleet.fleet_file()),
        run_dir=tmp_path / "repair",
    )
    assert rc == 0, out
    rc, doc, err = verify("-i", str(converged_fleet.inventory()), "--fleet", str(converged_fleet.fleet_file()))
    assert rc == 0, json.dumps(statuses(doc))


def test_verify_reports_an_unreachable_host(fleet_env, tmp_path):
    inventory = fleet_env.inventory("unreachable.yml", hosts=("gpu-x",))
    rc, doc, _ = verify("-i", str(inventory), "--fleet", str(fleet_env.fleet_file()), junit=tmp_path / "x.xml")
    assert rc == 1
    (host,) = doc["hosts"]
    assert host["status"] == "error"
    assert host["error"].startswith("host unreachable: "), host["error"]
    assert "CommandResult" not in host["error"]
    assert host["checks"] == []
    assert 'type="HostUnreachable"' in (tmp_path / "x.xml").read_text()


HUNG_SMI = "#!/bin/sh\necho $$ >> /run/hung-smi.pids\ntrap '' TERM\nsleep 3600\n"
XID_79 = (
    "Nov 30 02:11:07 gpu-a kernel: [ 8412.441061] NVRM: Xid (PCI:0000:17:00): 79, pid=0, "
    "name=python3, GPU has fallen off the bus."
)


def hang_nvidia_smi(fleet, host):
    """nvidia-smi on `host` hangs and ignores SIGTERM (a GPU fallen off the bus); the kernel log says so."""
    fleet.exec(host, "cp -p /usr/bin/nvidia-smi /usr/bin/nvidia-smi.fakegpu")
    fleet.exec(host, f"cat > /usr/bin/nvidia-smi <<'EOF'\n{HUNG_SMI}EOF\nchmod 755 /usr/bin/nvidia-smi")
    fleet.exec(host, f"printf '%s\\n' '{XID_79}' >> /var/log/kern.log")


def restore_nvidia_smi(fleet, host):
    fleet.exec(host, "mv /usr/bin/nvidia-smi.fakegpu /usr/bin/nvidia-smi", check=False)
    fleet.exec(host, "sed -i '/NVRM: Xid/d' /var/log/kern.log", check=False)
    # the hung nvidia-smi processes this test started, by their pid
    left = fleet.exec(
        host,
        "for p in $(cat /run/hung-smi.pids 2>/dev/null); do "
        "if [ -d /proc/$p ] && grep -q '^State:.*[RS]' /proc/$p/status; then echo $p; kill -9 $p; fi; done; "
        "rm -f /run/hung-smi.pids",
        check=False,
    )
    return left.split()


def test_a_hung_nvidia_smi_is_a_finding_within_the_host_deadline(converged_fleet, tmp_path):
    fleet = converged_fleet.fleet
    hang_nvidia_smi(fleet, "gpu-a")
    try:
        t0 = time.monotonic()
        rc, doc, err = verify(
            "-i",
            str(converged_fleet.inventory()),
            "--fleet",
            str(converged_fleet.fleet_file()),
            "--host-timeout",
            "40",
            junit=tmp_path / "hung.xml",
        )
        wall = time.monotonic() - t0
        assert rc == 1, err
        by_host = {h["host"]: h for h in doc["hosts"]}
        checks = {c["id"]: c for c in by_host["gpu-a"]["checks"]}
        smi = checks["nvidia-smi"]
        assert smi["status"] == "fail"
        assert smi["detail"].startswith("nvidia-smi did not answer in "), smi["detail"]
        assert "the GPU may have fallen off the bus" in smi["detail"]
        assert any("Xid (PCI:0000:17:00): 79" in e for e in smi["evidence"]), smi["evidence"]
        assert checks["gpus"]["status"] == "skip"
        # the host ended within its deadline, and the others were not held up by it
        assert by_host["gpu-a"]["seconds"] <= 40 + 1, by_host["gpu-a"]["seconds"]
        assert wall < 40 + 20, wall
        assert {h: by_host[h]["status"] for h in ("gpu-b", "gpu-c")} == {"gpu-b": "pass", "gpu-c": "pass"}
        # the host's deadline killed the hung nvidia-smi with its whole process group
        still = fleet.exec(
            "gpu-a",
            "for p in $(cat /run/hung-smi.pids); do [ -d /proc/$p ] && grep -q '^State:.*[RS]' /proc/$p/status "
            "&& echo $p; done; true",
        )
        assert not still.split(), f"hung nvidia-smi processes left on gpu-a: {still}"
    finally:
        assert restore_nvidia_smi(fleet, "gpu-a") == []


def test_verify_reads_the_inventory_as_the_roles_do_and_runs_nothing_it_says(converged_fleet, tmp_path):
    """Over ssh to the fleet: booleans written as an INI inventory hands them over ("no", "off")
    turn checks off as they turn the roles' tasks off; a ProxyCommand or a `;` in the inventory's
    ssh arguments is refused (exit 2) before any host is contacted, and nothing of it runs here."""
    fleet_file = str(converged_fleet.fleet_file())
    strings = converged_fleet.inventory(
        "strings.yml", nvidia_driver_persistenced="no", nvidia_driver_blacklist_nouveau="off"
    )
    rc, doc, err = verify(
        "-i", str(strings), "--fleet", fleet_file, "--only", "reachable,persistence,nouveau-blacklisted"
    )
    assert rc == 0, err
    for host, checks in statuses(doc).items():
        assert checks == {"reachable": "pass", "persistence": "skip", "nouveau-blacklisted": "skip"}, (host, checks)
    marker = tmp_path / "pwned"
    for name, args in (
        ("proxy.yml", f"-o ProxyCommand='touch {marker}'"),
        ("semicolon.yml", f"-o ConnectTimeout=5; touch {marker} #"),
    ):
        bad = converged_fleet.inventory(name, ansible_ssh_extra_args=args)
        proc = subprocess.run(
            [sys.executable, "-m", "provision", "verify", "-i", str(bad), "--fleet", fleet_file],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "ansible_ssh_extra_args" in proc.stderr
        assert proc.stdout == ""
        assert not marker.exists(), f"{name}: the inventory's ssh arguments ran a command on the controller"
