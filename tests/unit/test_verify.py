"""provision verify without a fleet: each check's logic against scripted command output, the
parsers, the reports and their schemas, and the command line's refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest
import xmlschema
from support import ROOT

from provision.hostpool import Connection
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.verify import Target
from provision.verify.checks import check_containers, check_driver, check_system
from provision.verify.facts import HostFacts, secure_boot_command, upstream_version
from provision.verify.report import SCHEMA_DIR, CheckResult, VerifyReport

SSH = Connection("ssh", "h")
SECURE_BOOT = secure_boot_command({})
Failed = pytest.fail.Exception
Skipped = pytest.skip.Exception


class Res:
    def __init__(self, rc=0, stdout="", stderr=""):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr


class FakeHost:
    """testinfra's Host, reduced to what the checks call: run() answers from a script."""

    def __init__(self, script: dict[str, Res]):
        self.script, self.ran = script, []

    def run(self, command):
        self.ran.append(command)
        for prefix, res in self.script.items():
            if command.startswith(prefix):
                return res
        return Res(127, "", f"/bin/sh: {command.split()[0]}: not found")


@pytest.fixture(scope="module")
def plans(real_matrix):
    return {
        "debian": resolve(real_matrix, PlanRequest("debian12", "a100-pcie")),
        "rocky": resolve(real_matrix, PlanRequest("rocky9", "h100-sxm")),
    }


def smi_line(plan, index=0, device="0x20B510DE", persistence="Enabled", mig=("Disabled", "Disabled")):
    return f"{index}, NVIDIA A100 80GB PCIe, {device}, {plan.driver.version}, {persistence}, {mig[0]}, {mig[1]}\n"


def facts_for(plan, script, **target):
    return HostFacts(FakeHost(script), Target("h", SSH, plan, **target))


def outcome(check, **kwargs):
    evidence: list[str] = []
    try:
        check(evidence=evidence.append, **kwargs)
    except Failed as exc:
        return "fail", str(exc), evidence
    except Skipped as exc:
        return "skip", str(exc), evidence
    return "pass", "", evidence


# -- parsing ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "upstream"),
    [
        ("595.91.07-1", "595.91.07"),
        ("3:595.91.07-1ubuntu1", "595.91.07"),
        ("1.20.0-1", "1.20.0"),
        ("595.91.07", "595.91.07"),
        ("595.91.07-1.el9", "595.91.07"),
    ],
)
def test_upstream_version(raw, upstream):
    assert upstream_version(raw) == upstream


def test_smi_parse_splits_device_and_vendor(plans):
    plan = plans["debian"]
    facts = facts_for(plan, {"nvidia-smi --query-gpu": Res(0, smi_line(plan) + smi_line(plan, 1))})
    _res, gpus = facts.smi
    assert [g.device_id for g in gpus] == ["0x20b5", "0x20b5"]
    assert gpus[1].index == "1"
    assert gpus[0].driver == plan.driver.version


def test_dpkg_versions_and_holds(plans):
    plan = plans["debian"]
    # db:Status-Abbrev: "hi" held and installed (apt-mark hold, Ansible's dpkg_selections), "ii" installed,
    # "hn"/"rc" not installed (a hold on a removed package, a removed one's leftover configuration)
    script = {
        "dpkg-query": Res(
            0, "nvidia-open\t595.91.07-1\thi \nlibfoo\t1.0-1\tii \nheld-gone\t2.0-1\thn \nrm\t1.0\trc \n"
        ),
    }
    facts = facts_for(plan, script)
    got = facts.installed(["nvidia-open", "libfoo", "absent", "held-gone", "rm"])
    assert got["nvidia-open"] == ("nvidia-open", "595.91.07", "595.91.07-1", True)
    assert got["libfoo"] == ("libfoo", "1.0", "1.0-1", False)
    assert got["absent"] == ("absent", None, None, False)
    assert got["held-gone"].version is None
    assert got["rm"].version is None
    # read once per host: a second check's packages come from the same query when it named them
    assert facts.installed(["libfoo"])["libfoo"].raw == "1.0-1"
    assert len(facts.host.ran) == 1


def test_rpm_versions_and_versionlocks(plans):
    plan = plans["rocky"]
    script = {
        "rpm -q": Res(0, "nvidia-driver\t595.91.07\t1.el9\npackage nvidia-open is not installed\n"),
        "dnf -q versionlock": Res(0, "nvidia-driver-3:595.91.07-1.el9.*\nnvidia-driver-cuda-595.91.07-1.el9.*\n"),
    }
    got = facts_for(plan, script).installed(["nvidia-driver", "nvidia-open", "nvidia-driver-cuda"])
    assert got["nvidia-driver"].version == "595.91.07"
    assert got["nvidia-driver"].held
    assert got["nvidia-open"].version is None
    # a lock on nvidia-driver-cuda is not a lock on nvidia-driver (and the other way round)
    assert got["nvidia-driver-cuda"].held


def test_container_detection(plans):
    plan = plans["debian"]
    assert facts_for(plan, {"systemd-detect-virt": Res(0, "docker\n")}).container == "docker"
    assert facts_for(plan, {"systemd-detect-virt": Res(1, "none\n")}).container is None
    podman = {"systemd-detect-virt": Res(1, "none\n"), "for f in /.dockerenv": Res(0, "/run/.containerenv\n")}
    assert facts_for(plan, podman).container == "podman"
    docker = {"systemd-detect-virt": Res(127, ""), "for f in /.dockerenv": Res(0, "/.dockerenv\n")}
    assert facts_for(plan, docker).container == "docker"
    assert facts_for(plan, {"systemd-detect-virt": Res(1, "none\n"), "for f in": Res(0, "")}).container is None


# -- checks ----------------------------------------------------------------------------------
def test_os_check(plans):
    plan = plans["rocky"]
    good = facts_for(plan, {"cat /etc/os-release": Res(0, 'ID="rocky"\nVERSION_ID="9.4"\n')})
    assert outcome(check_system.check_os, facts=good, plan=plan)[0] == "pass"
    bad = facts_for(plan, {"cat /etc/os-release": Res(0, 'ID=ubuntu\nVERSION_ID="22.04"\n')})
    status, detail, _ = outcome(check_system.check_os, facts=bad, plan=plan)
    assert status == "fail"
    assert "ubuntu 22.04" in detail


def test_kernel_module_check(plans):
    plan = plans["debian"]
    line = f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {plan.driver.version}  Release Build  (dvs-builder@U16)\n"
    ok = facts_for(plan, {"systemd-detect-virt": Res(1, "none"), "cat /proc/driver/nvidia/version": Res(0, line)})
    assert outcome(check_system.check_kernel_module, facts=ok, plan=plan)[0] == "pass"
    old = facts_for(
        plan,
        {
            "systemd-detect-virt": Res(1, "none"),
            "cat /proc/driver/nvidia/version": Res(0, line.replace(plan.driver.version, "570.86.15")),
        },
    )
    status, detail, _ = outcome(check_system.check_kernel_module, facts=old, plan=plan)
    assert status == "fail"
    assert "570.86.15 is loaded" in detail
    proprietary = facts_for(
        plan,
        {
            "systemd-detect-virt": Res(1, "none"),
            "cat /proc/driver/nvidia/version": Res(0, line.replace("Open Kernel", "Kernel")),
        },
    )
    assert (
        "proprietary kernel module is loaded"
        in outcome(check_system.check_kernel_module, facts=proprietary, plan=plan)[1]
    )
    missing = facts_for(plan, {"systemd-detect-virt": Res(1, "none"), "cat /proc/driver/nvidia/version": Res(1)})
    assert "not loaded" in outcome(check_system.check_kernel_module, facts=missing, plan=plan)[1]
    container = facts_for(plan, {"systemd-detect-virt": Res(0, "docker")})
    assert outcome(check_system.check_kernel_module, facts=container, plan=plan)[0] == "skip"


def test_secure_boot_check(plans):
    plan = plans["debian"]
    target = Target("h", SSH, plan)
    host = {
        SECURE_BOOT: Res(0, "   6   0   0   0   1\n"),
        "systemd-detect-virt": Res(1, "none"),
        "modinfo -F signer nvidia": Res(0, "\n"),
    }
    status, detail, _ = outcome(check_system.check_secure_boot, facts=facts_for(plan, host), target=target)
    assert status == "fail"
    assert "not signed" in detail
    host["modinfo -F signer nvidia"] = Res(0, "provision module signing key\n")
    assert outcome(check_system.check_secure_boot, facts=facts_for(plan, host), target=target)[0] == "pass"
    disabled = {SECURE_BOOT: Res(0, "   6   0   0   0   0\n")}
    assert outcome(check_system.check_secure_boot, facts=facts_for(plan, disabled), target=target)[0] == "pass"


def test_secure_boot_path_from_the_inventory_is_quoted():
    """The EFI variable may come from the inventory (untrusted): it reaches the shell as one word."""
    import subprocess

    from provision.verify.facts import secure_boot_command

    hostile = "/nonexistent; echo INJECTED"
    command = secure_boot_command({"preflight_secure_boot_efivar": hostile})
    assert "'/nonexistent; echo INJECTED'" in command
    out = subprocess.run(["sh", "-c", command], check=False, capture_output=True, text=True, timeout=10)
    assert out.returncode == 3  # absent: nothing of the path ran
    assert "INJECTED" not in out.stdout + out.stderr
    assert "od -An -t u1 /sys/firmware/efi/efivars/SecureBoot-" in secure_boot_command({})


def test_nvidia_smi_check(plans):
    plan = plans["debian"]
    ok = facts_for(plan, {"nvidia-smi --query-gpu": Res(0, smi_line(plan))})
    assert outcome(check_driver.check_nvidia_smi, facts=ok, plan=plan)[0] == "pass"
    mismatch = facts_for(
        plan, {"nvidia-smi --query-gpu": Res(18, "Failed to initialize NVML: Driver/library version mismatch\n")}
    )
    status, detail, evidence = outcome(check_driver.check_nvidia_smi, facts=mismatch, plan=plan)
    assert status == "fail"
    assert "Driver/library version mismatch" in detail
    assert "exit 18" in evidence[0]
    other = facts_for(
        plan, {"nvidia-smi --query-gpu": Res(0, smi_line(plan).replace(plan.driver.version, "580.95.05"))}
    )
    assert "reports driver 580.95.05" in outcome(check_driver.check_nvidia_smi, facts=other, plan=plan)[1]


def test_gpus_check(plans):
    plan = plans["debian"]
    target = Target("h", SSH, plan, gpu_count=2)
    two = facts_for(plan, {"nvidia-smi --query-gpu": Res(0, smi_line(plan) + smi_line(plan, 1))})
    assert outcome(check_driver.check_gpus, facts=two, plan=plan, target=target)[0] == "pass"
    one = facts_for(plan, {"nvidia-smi --query-gpu": Res(0, smi_line(plan))})
    assert "1 GPU(s) visible; 2 expected" in outcome(check_driver.check_gpus, facts=one, plan=plan, target=target)[1]
    t4 = facts_for(plan, {"nvidia-smi --query-gpu": Res(0, smi_line(plan, device="0x1EB810DE"))})
    assert "0x1eb8" in outcome(check_driver.check_gpus, facts=t4, plan=plan, target=target)[1]
    broken = facts_for(plan, {"nvidia-smi --query-gpu": Res(9, "couldn't communicate with the NVIDIA driver")})
    assert outcome(check_driver.check_gpus, facts=broken, plan=plan, target=target)[0] == "skip"


def test_persistence_check(plans):
    plan = plans["debian"]
    target = Target("h", SSH, plan)
    script = {
        "systemctl is-active nvidia-persistenced": Res(0, "active\nenabled\n"),
        "nvidia-smi --query-gpu": Res(0, smi_line(plan)),
    }
    assert outcome(check_driver.check_persistence, facts=facts_for(plan, script), target=target)[0] == "pass"
    script["nvidia-smi --query-gpu"] = Res(0, smi_line(plan, persistence="Disabled"))
    assert "off on GPU 0" in outcome(check_driver.check_persistence, facts=facts_for(plan, script), target=target)[1]
    script["systemctl is-active nvidia-persistenced"] = Res(3, "inactive\nenabled\n")
    assert "is inactive" in outcome(check_driver.check_persistence, facts=facts_for(plan, script), target=target)[1]
    off = Target("h", SSH, plan, hostvars={"nvidia_driver_persistenced": False})
    assert outcome(check_driver.check_persistence, facts=facts_for(plan, script), target=off)[0] == "skip"


def test_driver_packages_check(plans):
    plan = plans["rocky"]
    names = [p.name for p in plan.driver.packages] + [p.name for p in plan.fabric_manager.packages]
    rpm = "".join(f"{n}\t{plan.driver.version}\t1.el9\n" for n in names)
    locks = "".join(f"{n}-3:{plan.driver.version}-1.el9.*\n" for n in names)
    target = Target("h", SSH, plan)
    good = facts_for(plan, {"rpm -q": Res(0, rpm), "dnf -q versionlock": Res(0, locks)})
    assert outcome(check_driver.check_driver_packages, facts=good, plan=plan, target=target)[0] == "pass"
    unlocked = facts_for(plan, {"rpm -q": Res(0, rpm), "dnf -q versionlock": Res(0, "")})
    assert (
        "not versionlocked" in outcome(check_driver.check_driver_packages, facts=unlocked, plan=plan, target=target)[1]
    )
    older = facts_for(
        plan, {"rpm -q": Res(0, rpm.replace(plan.driver.version, "570.195.03", 1)), "dnf -q versionlock": Res(0, locks)}
    )
    status, detail, _ = outcome(check_driver.check_driver_packages, facts=older, plan=plan, target=target)
    assert status == "fail"
    assert "570.195.03" in detail
    assert f"plan pins {plan.driver.version}" in detail


def test_fabric_manager_check(plans):
    sxm, pcie = plans["rocky"], plans["debian"]
    running = {
        "systemctl is-active nvidia-fabricmanager": Res(0, "active\nenabled\n"),
        "nv-fabricmanager --version": Res(0, f"Fabric Manager version is : {sxm.driver.version}\n"),
    }
    assert outcome(check_driver.check_fabric_manager, facts=facts_for(sxm, running), plan=sxm)[0] == "pass"
    stale = dict(running, **{"nv-fabricmanager --version": Res(0, "Fabric Manager version is : 570.86.15\n")})
    assert (
        "must equal the driver" in outcome(check_driver.check_fabric_manager, facts=facts_for(sxm, stale), plan=sxm)[1]
    )
    assert (
        "without NVSwitch" in outcome(check_driver.check_fabric_manager, facts=facts_for(pcie, running), plan=pcie)[1]
    )
    absent = {"systemctl is-active nvidia-fabricmanager": Res(3, "inactive\nnot-found\n")}
    assert outcome(check_driver.check_fabric_manager, facts=facts_for(pcie, absent), plan=pcie)[0] == "pass"


LGI = """+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 3g.40gb          9        2          4:4     |
+-------------------------------------------------------+
|   0  MIG 4g.40gb          5        1          0:4     |
+-------------------------------------------------------+
"""


def test_mig_check(plans):
    plan = plans["debian"]
    layout = {
        "provision_mig_enabled": True,
        "provision_mig_layout": [{"profile": "4g.40gb", "placement": 0}, {"profile": "3g.40gb", "placement": 4}],
    }
    target = Target("h", SSH, plan, mig=layout)
    script = {
        "nvidia-smi --query-gpu": Res(0, smi_line(plan, mig=("Enabled", "Enabled"))),
        "nvidia-smi mig -lgi": Res(0, LGI),
    }
    assert outcome(check_driver.check_mig, facts=facts_for(plan, script), target=target)[0] == "pass"
    other = Target("h", SSH, plan, mig=dict(layout, provision_mig_layout=[{"profile": "7g.80gb", "placement": 0}]))
    assert "planned 7g.80gb@0" in outcome(check_driver.check_mig, facts=facts_for(plan, script), target=other)[1]
    pending = dict(script, **{"nvidia-smi --query-gpu": Res(0, smi_line(plan, mig=("Disabled", "Enabled")))})
    assert "pending" in outcome(check_driver.check_mig, facts=facts_for(plan, pending), target=target)[1]
    assert outcome(check_driver.check_mig, facts=facts_for(plan, script), target=Target("h", SSH, plan))[0] == "skip"


def test_docker_runtime_check(plans):
    plan = plans["debian"]
    target = Target("h", SSH, plan)
    good = {
        "cat /etc/docker/daemon.json": Res(
            0, json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}})
        )
    }
    assert outcome(check_containers.check_docker_runtime, facts=facts_for(plan, good), target=target)[0] == "pass"
    gone = {"cat /etc/docker/daemon.json": Res(0, '{"storage-driver": "overlay2"}')}
    assert (
        "no nvidia runtime"
        in outcome(check_containers.check_docker_runtime, facts=facts_for(plan, gone), target=target)[1]
    )
    broken = {"cat /etc/docker/daemon.json": Res(0, '{"runtimes": ')}
    assert (
        "not valid JSON"
        in outcome(check_containers.check_docker_runtime, facts=facts_for(plan, broken), target=target)[1]
    )
    default = Target("h", SSH, plan, hostvars={"container_runtime_default_runtime": True})
    assert (
        "default-runtime"
        in outcome(check_containers.check_docker_runtime, facts=facts_for(plan, good), target=default)[1]
    )
    containerd = Target("h", SSH, plan, hostvars={"container_runtime_engine": "containerd"})
    assert outcome(check_containers.check_docker_runtime, facts=facts_for(plan, good), target=containerd)[0] == "skip"


def test_gpu_container_check(plans):
    plan = plans["debian"]
    target = Target("h", SSH, plan)
    absent = {"docker image inspect": Res(1, "", "No such image")}
    assert (
        "not on the host"
        in outcome(check_containers.check_gpu_container, facts=facts_for(plan, absent), plan=plan, target=target)[1]
    )
    runs = {
        "docker image inspect": Res(0, "sha256:0123456789abcdef0123\n"),
        "docker run --rm --gpus all": Res(0, "GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-1)\n"),
    }
    host = facts_for(plan, runs)
    assert outcome(check_containers.check_gpu_container, facts=host, plan=plan, target=target)[0] == "pass"
    assert (
        f"docker run --rm --gpus all '{plan.base_image}' nvidia-smi -L" in host.host.ran
        or f"docker run --rm --gpus all {plan.base_image} nvidia-smi -L" in host.host.ran
    )
    fails = dict(
        runs,
        **{
            "docker run --rm --gpus all": Res(125, "", 'could not select device driver "" with capabilities: [[gpu]]\n')
        },
    )
    assert (
        "could not select device driver"
        in outcome(check_containers.check_gpu_container, facts=facts_for(plan, fails), plan=plan, target=target)[1]
    )


def test_container_toolkit_check(plans):
    plan = plans["debian"]
    target = Target("h", SSH, plan)
    v = plan.container_toolkit.version
    dpkg = "".join(f"{p.name}\t{v}-1\thi \n" for p in plan.container_toolkit.packages)
    script = {
        "dpkg-query": Res(0, dpkg),
        "nvidia-ctk --version": Res(0, f"NVIDIA Container Toolkit CLI version {v}\ncommit: x\n"),
    }
    assert (
        outcome(check_containers.check_container_toolkit, facts=facts_for(plan, script), plan=plan, target=target)[0]
        == "pass"
    )
    script["nvidia-ctk --version"] = Res(0, "NVIDIA Container Toolkit CLI version 1.19.1\n")
    assert (
        "reports 1.19.1"
        in outcome(check_containers.check_container_toolkit, facts=facts_for(plan, script), plan=plan, target=target)[1]
    )


# -- reports ---------------------------------------------------------------------------------
def sample_report():
    results = [
        CheckResult("gpu-a", "nvidia-smi", "t", "pass", "", ("driver 595.91.07",), 0.1),
        CheckResult("gpu-a", "mig", "t", "skip", "no MIG layout planned", (), 0.0),
        CheckResult("gpu-a", "kernel-hold", "t", "warn", "the kernel hold keeps back security updates", (), 0.0),
        CheckResult("gpu-b", "docker-runtime", "t", "fail", "no nvidia runtime <&>", ("daemon.json: {}",), 0.2),
    ]
    return VerifyReport(["gpu-a", "gpu-b"], results, [], 1)


def test_report_json_matches_its_schema():
    doc = sample_report().to_dict()
    with open(f"{SCHEMA_DIR}/report.schema.json") as handle:
        jsonschema.validate(doc, json.load(handle))
    assert doc["status"] == "fail"
    assert doc["counts"] == {"pass": 1, "warn": 1, "fail": 1, "skip": 1}
    assert [h["status"] for h in doc["hosts"]] == ["pass", "fail"]


def test_report_junit_matches_its_schema(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(sample_report().junit())
    schema = xmlschema.XMLSchema(f"{SCHEMA_DIR}/junit.xsd")
    schema.validate(str(path))
    assert "no nvidia runtime &lt;&amp;&gt;" in path.read_text()
    assert "<system-out>warning: the kernel hold keeps back security updates</system-out>" in path.read_text()
    errored = VerifyReport(["h"], [], ["collecting checks failed: boom"], 2)
    path.write_text(errored.junit())
    schema.validate(str(path))
    assert errored.exit_code == 1


def test_report_exit_codes():
    ok = VerifyReport(["h"], [CheckResult("h", "os", "t", "pass", "", (), 0)], [], 0)
    assert ok.exit_code == 0
    assert VerifyReport(["h"], [], [], 5).exit_code == 1, "no check ran is not a pass"
    assert sample_report().exit_code == 1


# -- the command -----------------------------------------------------------------------------
def test_verify_local_end_to_end(cli, tmp_path):
    """The real pytest + testinfra run on this machine: whatever it finds, the reports are valid."""
    junit = tmp_path / "v.xml"
    res = cli("verify", "--local", "--os", "debian12", "--gpu", "a100-pcie", "--format", "json", "--junit", str(junit))
    doc = json.loads(res.out)
    with open(f"{SCHEMA_DIR}/report.schema.json") as handle:
        jsonschema.validate(doc, json.load(handle))
    xmlschema.XMLSchema(f"{SCHEMA_DIR}/junit.xsd").validate(str(junit))
    checks = {c["id"]: c for c in doc["hosts"][0]["checks"]}
    assert checks["reachable"]["status"] == "pass"
    listed = cli("verify", "--list").out.splitlines()[2:]  # a row's first line names its check, wrapped ones do not
    assert len(checks) == len([line for line in listed if line and not line[0].isspace()])
    assert set(checks) == {c["id"] for c in json.loads(cli("verify", "--list", "--format", "json").out)}
    assert res.code == (1 if any(c["status"] == "fail" for c in checks.values()) else 0)
    only = json.loads(
        cli(
            "verify", "--local", "--os", "debian12", "--gpu", "a100-pcie", "--only", "os,reachable", "--format", "json"
        ).out
    )
    assert sorted(c["id"] for c in only["hosts"][0]["checks"]) == ["os", "reachable"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "exactly one of -i INVENTORY, --local and --host"),
        (["--local", "--host", "ssh://x"], "exactly one of"),
        (["--local"], "no plan"),
        (["--local", "--os", "debian12", "--gpu", "a100-pcie", "--only", "nope"], "unknown check 'nope'"),
        (["--host", "ftp://x", "--os", "debian12", "--gpu", "a100-pcie"], "unknown connection 'ftp'"),
        (["-i", "/nonexistent/hosts.yml", "--plan", "p.json"], "does not exist"),
        (["-i", "hosts.yml", "--os", "debian12", "--gpu", "t4"], "not --os/--gpu"),
        (["--local", "--fleet", "fleet.yaml", "--os", "debian12", "--gpu", "t4"], "need -i"),
        (["--local", "--os", "debian12", "--gpu", "t4", "--mig-vars", "/nonexistent.yml"], "cannot read"),
    ],
)
def test_verify_refuses_bad_input(cli, args, message):
    res = cli("verify", *args)
    assert res.code == 2, res
    assert message in res.err
    assert "hint:" in res.err
    assert "Traceback" not in res.err


# -- kernel holds ----------------------------------------------------------------------------------
POLICY_SECURITY = """linux-image-generic:
  Installed: 5.15.0.91.88
  Candidate: 5.15.0.125.123
  Version table:
     5.15.0.125.123 500
        500 http://127.0.0.1/ubuntu jammy-updates/main amd64 Packages
        500 http://127.0.0.1/ubuntu jammy-security/main amd64 Packages
 *** 5.15.0.91.88 100
        100 /var/lib/dpkg/status
"""
POLICY_UPDATES_ONLY = POLICY_SECURITY.replace(
    "        500 http://127.0.0.1/ubuntu jammy-security/main amd64 Packages\n", ""
)
POLICY_CURRENT = POLICY_SECURITY.replace("Candidate: 5.15.0.125.123", "Candidate: 5.15.0.91.88")


# dpkg-query's hold list: selection and state, then the package (held: a selection of h)
HELD = "hi linux-image-generic\nii linux-headers-generic\nhi nvidia-open\nii libc6:amd64\n"


def kernel_outcome(plan, script, **target):
    warnings: list[str] = []
    facts = facts_for(plan, script, **target)
    try:
        result = outcome(check_system.check_kernel_hold, facts=facts, plan=plan, target=facts.target,
                         warning=warnings.append)  # fmt: skip
    except Failed as exc:  # pragma: no cover - outcome() catches these
        raise AssertionError(exc) from exc
    return result[0], warnings


@pytest.mark.parametrize(
    ("policy", "status", "warned"),
    [(POLICY_SECURITY, "pass", True), (POLICY_UPDATES_ONLY, "pass", False), (POLICY_CURRENT, "pass", False)],
)
def test_kernel_hold_warns_only_for_a_security_update(plans, policy, status, warned):
    script = {"dpkg-query -W -f='${db:Status-Abbrev} ": Res(0, HELD), "apt-cache policy": Res(0, policy)}
    got, warnings = kernel_outcome(plans["debian"], script)
    assert got == status
    assert bool(warnings) == warned
    if warned:
        assert "linux-image-generic 5.15.0.91.88 -> 5.15.0.125.123" in warnings[0]
        assert "linux-headers" not in warnings[0], "an installed, unheld kernel package is no hold"


def test_kernel_hold_skips_without_a_hold(plans):
    held = "hi nvidia-open\nii linux-image-generic\n"  # the kernel installed, not held
    got, _ = kernel_outcome(plans["debian"], {"dpkg-query -W -f='${db:Status-Abbrev} ": Res(0, held)})
    assert got == "skip"
    got, _ = kernel_outcome(plans["debian"], {}, hostvars={"nvidia_driver_hold_kernel": False})
    assert got == "skip"


def test_kernel_hold_on_el_reads_security_advisories(plans):
    advisories = "RLSA-2026:1234 Important/Sec. kernel-5.14.0-570.60.1.el9_6.x86_64\n"
    got, warnings = kernel_outcome(plans["rocky"], {"dnf -q updateinfo": Res(0, advisories)})
    assert got == "pass"
    assert "kernel-5.14.0-570.60.1.el9_6.x86_64" in warnings[0]


# -- hosts side by side, deadlines, unreachable hosts, JUnit for Jenkins -----------------------
JUNIT_10 = str(ROOT / "tests" / "data" / "junit-10.xsd")


def outcome_of(name, *events, rc=0, stderr="", started=1_700_000_000.0, seconds=1.0):
    from provision.hostpool import Outcome

    stdout = "".join(json.dumps(e) + "\n" for e in events)
    return Outcome(name, rc, stdout, stderr, seconds, started)


def result_event(host, check, status="pass", detail=""):
    return {"result": [host, check, "t", status, detail, [f"{check} read"], 0.25]}


def test_worker_events_become_the_report():
    from provision.verify import collect_report

    report = collect_report(
        ["gpu-a", "gpu-b", "gpu-c", "gpu-d"],
        [
            outcome_of(
                "gpu-a", result_event("gpu-a", "os"), result_event("gpu-a", "gpus", "fail", "2 GPUs"), {"done": 1}
            ),
            outcome_of("gpu-b", {"unreachable": "ssh: connect to host 127.0.0.7 port 22: Connection refused"}),
            outcome_of("gpu-c", result_event("gpu-c", "os"), rc=None, seconds=30.0),  # stopped at its deadline
            outcome_of("gpu-d", rc=1, stderr="Traceback ...\nImportError: no module named testinfra\n"),
        ],
        host_timeout=30,
    )
    assert report.host_errors() == {
        "gpu-b": "host unreachable: ssh: connect to host 127.0.0.7 port 22: Connection refused",
        "gpu-c": "did not finish within 30 s (--host-timeout): stopped after 1 check(s); a command on the host "
        "hangs (provision doctor reads the kernel log)",
        "gpu-d": "the checks stopped (exit 1): ImportError: no module named testinfra",
    }
    assert [(r.host, r.check, r.status) for r in report.results] == [
        ("gpu-a", "os", "pass"),
        ("gpu-a", "gpus", "fail"),
        ("gpu-c", "os", "pass"),
    ]
    assert report.exit_code == 1
    doc = report.to_dict()
    with open(f"{SCHEMA_DIR}/report.schema.json") as handle:
        jsonschema.validate(doc, json.load(handle))
    status = {h["host"]: (h["status"], h["error"]) for h in doc["hosts"]}
    assert status["gpu-a"] == ("fail", None)
    assert status["gpu-b"][0] == "error"
    assert "CommandResult" not in json.dumps(doc)


def test_a_host_stopped_before_any_check_is_unreachable():
    from provision.verify import collect_report

    report = collect_report(["gpu-x"], [outcome_of("gpu-x", rc=None, seconds=20.0)], host_timeout=20)
    assert report.host_errors() == {"gpu-x": "host unreachable: no answer within 20 s (--host-timeout)"}


def test_junit_is_valid_for_jenkins_one_suite_per_host(tmp_path):
    """junit-10.xsd (Jenkins xUnit) and our schema: no skipped on <testsuites>, a <testsuite> per
    host, a host error as an <error>, classnames whose only dot splits package from class."""
    from xml.etree import ElementTree as ET

    from provision.verify.report import HostRun

    results = [
        *sample_report().results,
        CheckResult("gpu1.example.com", "os", "t", "pass", "", (), 0.1),
        CheckResult("127.0.0.5", "os", "t", "skip", "no plan", (), 0.0),
    ]
    runs = {"gpu-x": HostRun("host unreachable: ssh: connect to host gpu-x port 22: No route to host", 1e9, 3.0)}
    report = VerifyReport(["gpu-a", "gpu-b", "gpu1.example.com", "127.0.0.5", "gpu-x"], results, [], 1, runs)
    path = tmp_path / "junit.xml"
    path.write_text(report.junit())
    xmlschema.XMLSchema(JUNIT_10).validate(str(path))
    xmlschema.XMLSchema(f"{SCHEMA_DIR}/junit.xsd").validate(str(path))
    root = ET.parse(path).getroot()
    assert "skipped" not in root.attrib
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["gpu-a", "gpu-b", "gpu1.example.com", "127.0.0.5", "gpu-x"]
    for host, suite in suites.items():
        for case in suite.findall("testcase"):
            package, _, cls = case.get("classname").rpartition(".")
            assert (package, cls) == ("provision-verify", host.replace(".", "_")), case.get("classname")
    (unreachable,) = suites["gpu-x"].findall("testcase")
    assert unreachable.find("error").get("message").startswith("host unreachable: ssh: connect")
    assert suites["gpu-x"].get("errors") == "1"
    assert root.get("errors") == "1"
    assert int(root.get("tests")) == len(results) + 1


def test_facts_under_a_budget_run_each_command_under_timeout(plans):
    from provision.hostpool import Budget

    host = FakeHost({"timeout --kill-after=5 ": Res(0, "ok")})
    facts = HostFacts(host, Target("h", SSH, plans["debian"]), budget=Budget(60), have_timeout=True)
    assert facts.run("cat /etc/os-release").out == "ok"
    (ran,) = host.ran
    assert ran.startswith("timeout --kill-after=5 20 sh -c 'cat /etc/os-release' & p=$!\n")
    assert "kill -KILL -$p" in ran
    hung = HostFacts(FakeHost({"timeout ": Res(137)}), Target("h", SSH, plans["debian"]), budget=Budget(60))
    assert hung.run("nvidia-smi").timed_out == 20


def test_a_hung_nvidia_smi_is_a_finding_with_the_kernel_log(plans):
    from provision.verify.facts import Result

    plan = plans["debian"]
    facts = facts_for(plan, {})
    facts.__dict__["kernel_log"] = ["[ 8412.4] NVRM: Xid (PCI:0000:17:00): 79, pid=0, GPU has fallen off the bus."]
    facts.__dict__["smi"] = (Result(137, "", "", 13), [])
    status, detail, evidence = outcome(check_driver.check_nvidia_smi, facts=facts, plan=plan)
    assert status == "fail"
    assert detail.startswith("nvidia-smi did not answer in 13 s: the GPU may have fallen off the bus")
    assert "Xid (PCI:0000:17:00): 79" in detail
    assert evidence == [f"kernel log: {facts.kernel_log[0]}"]
    status, detail, _ = outcome(check_driver.check_gpus, facts=facts, plan=plan, target=facts.target)
    assert (status, detail) == ("skip", "nvidia-smi did not answer in 13 s (see the nvidia-smi check)")


def test_unreachable_host_is_one_error_line(cli, tmp_path):
    """Nothing listens on port 1: one error for the host with ssh's reason, no check results,
    no CommandResult repr; the JUnit file says the same and is valid for Jenkins."""
    junit = tmp_path / "v.xml"
    args = ("verify", "--host", "ssh://root@127.0.0.1:1", "--os", "debian12", "--gpu", "a100-pcie")
    res = cli(*args, "--format", "json", "--junit", str(junit))
    doc = json.loads(res.out)
    assert res.code == 1
    (host,) = doc["hosts"]
    assert host["status"] == "error"
    assert host["error"].startswith("host unreachable: ssh: connect to host 127.0.0.1 port 1:")
    assert host["checks"] == []
    xmlschema.XMLSchema(JUNIT_10).validate(str(junit))
    table = cli(*args)
    assert "CommandResult" not in table.out + table.err
    flat = " ".join(table.out.split())
    assert "root@127.0.0.1:1 - ERROR host unreachable: ssh: connect to host 127.0.0.1 port 1" in flat
    assert flat.count("host unreachable") == 1, "the error is printed once (issue 23)"
    assert "root@127.0.0.1:1: ERROR, not verified" in flat


def test_hung_nvidia_smi_on_this_machine_ends_within_the_deadline(cli, tmp_path, monkeypatch):
    """An nvidia-smi that ignores SIGTERM (a GPU off the bus): the check fails naming the wait,
    the host's run ends inside --host-timeout, the process group is gone."""
    import time

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "pids"
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho $$ >> {pids}\ntrap '' TERM\nsleep 3600\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    t0 = time.monotonic()
    res = cli("verify", "--local", "--os", "debian12", "--gpu", "a100-pcie", "--host-timeout", "20", "--format", "json")
    wall = time.monotonic() - t0
    doc = json.loads(res.out)
    checks = {c["id"]: c for c in doc["hosts"][0]["checks"]}
    assert checks["nvidia-smi"]["status"] == "fail"
    assert "nvidia-smi did not answer in" in checks["nvidia-smi"]["detail"]
    assert "fallen off the bus" in checks["nvidia-smi"]["detail"]
    assert wall < 20 + 5, wall
    for pid in pids.read_text().split():
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().split(") ")[1][0] == "Z", f"nvidia-smi {pid} still runs"
