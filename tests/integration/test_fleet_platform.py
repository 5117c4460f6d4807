"""The server around the GPUs on the test fleet (issue 25). verify holds the hosts to their platform
(item 3): the a100 group planned on a
Dell PowerEdge R750xa (up to 4 PCIe GPUs, PCIe Gen4 x16), the h100 group on an HGX H100 4-GPU board
(exactly 4). The kit's nvidia-smi answers the PCIe query from real captures and fakegpu-dmi gives the
hosts a real Dell DMI capture (gpu.json "pcie", "dmi"); gpu-c's second GPU reads the capture of a card
at x8. verify passes gpu-a, fails gpu-c on server-pcie (naming a riser at x8) and gpu-b on server-gpus
(2 of the 4 GPUs: a GPU off the bus). doctor reads the BMC (item 4): the kit's ipmitool, installed on
gpu-a from the site's Debian mirror, prints the real `sdr elist` of an HP ProLiant whose Power Supply 1
failed (gpu.json "bmc": "psu-failed"), and `doctor -i` names the power supply, having sent only
ipmitool's read-only commands. Fleet cost besides the converged_fleet re-run: one verify of three hosts,
one doctor of one host, an apt install and removal of one package, and a docker exec per gpu.json
change and restore."""

import json
import subprocess
import sys

import pytest
from harness import fakegpu

from provision.verify.report import SCHEMA_DIR

pytestmark = [pytest.mark.fleet]
DELL = "dmidecode-t1__dell-poweredge-t-xe8545.txt"  # Manufacturer "Dell Inc." (tests/fixtures/platforms)
IDLE = "pcie__l40s-8gpu-idle.txt"  # Gen1 now, Gen4 at most, x16
X8 = "pcie__rtx5060ti-x8-idle.txt"  # x8 now, x16 at most
SERVER = ("server-dmi", "server-gpus", "server-pcie", "server-nvlink", "server-topology")
APT = "DEBIAN_FRONTEND=noninteractive timeout 300 apt-get"


def verify(*args):
    import jsonschema

    cmd = [sys.executable, "-m", "provision", "verify", *args, "--format", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(
            f"verify printed no JSON (exit {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
        ) from None
    with open(f"{SCHEMA_DIR}/report.schema.json") as handle:
        jsonschema.validate(doc, json.load(handle))
    return proc.returncode, {h["host"]: {c["id"]: c for c in h["checks"]} for h in doc["hosts"]}, proc.stderr


@pytest.fixture
def platform_hosts(converged_fleet, gpu_json):
    """gpu-a/c as R750xa hosts (Dell DMI; gpu-c's GPU 1 at x8), gpu-b as an HGX H100 4-GPU host (its
    topology the 4x H100 NV6 capture); gpu_json puts their gpu.json back afterwards."""
    gpu_json("gpu-a", dmi=DELL, pcie=IDLE)
    gpu_json("gpu-c", dmi=DELL, pcie=[IDLE, X8])
    gpu_json("gpu-b", topology="topo-m__4x-h100__nv6.txt")
    return converged_fleet


def test_verify_holds_each_host_to_its_platform(platform_hosts):
    env = platform_hosts
    fleet_file = env.fleet_file("platform-fleet.yaml", a100={"platform": "r750xa"}, h100={"platform": "hgx-h100-4gpu"})
    inventory = env.inventory("platform-inventory.yml", verify_dmi_dir=fakegpu.DMI_DIR)
    rc, hosts, err = verify("-i", str(inventory), "--fleet", str(fleet_file))
    assert rc == 1, err
    a, b, c = hosts["gpu-a"], hosts["gpu-b"], hosts["gpu-c"]
    # gpu-a matches its platform: every check passes (or skips, saying why)
    assert all(check["status"] in ("pass", "skip") for check in a.values()), {k: v["detail"] for k, v in a.items()}
    assert a["server-dmi"]["status"] == "pass"
    assert a["server-dmi"]["evidence"] == [
        f"{fakegpu.DMI_DIR}: sys_vendor='Dell Inc.', product_name='PowerEdge T-XE8545', board_name unreadable"
    ]
    assert a["server-pcie"]["evidence"] == [
        "GPU 0: Gen1 now, Gen4 at most; x16 now, x16 at most",
        "GPU 1: Gen1 now, Gen4 at most; x16 now, x16 at most",
    ]
    assert a["server-gpus"]["evidence"] == ["2 GPU(s) visible; Dell PowerEdge R750xa holds up to 4"]
    assert a["server-nvlink"]["status"] == "pass"  # no bridge: optional on an R750xa
    assert a["server-topology"]["detail"] == "compat/platforms.yaml gives no topo -m relation for r750xa"
    # gpu-c: its second GPU at x8
    assert c["server-pcie"]["status"] == "fail"
    assert c["server-pcie"]["detail"] == (
        "GPU 1 runs at x8 (x8 now, x16 at most); Dell PowerEdge R750xa gives x16: a riser or slot at x8, "
        "or a card not fully seated"
    )
    assert [k for k, v in c.items() if v["status"] == "fail"] == ["server-pcie"]
    # gpu-b: 2 GPUs on a 4-GPU board
    assert b["server-gpus"]["status"] == "fail"
    assert b["server-gpus"]["detail"].startswith(
        "2 of the 4 GPUs NVIDIA HGX H100 4-GPU holds are visible: a GPU fell off the bus or is not seated"
    )
    assert b["server-topology"]["status"] == "pass"  # GPU0-GPU1 NV6, as the board's
    # the board has no NVSwitch: the Fabric Manager apply started for the plain H100 plan is named
    assert b["fabric-manager"]["status"] == "fail"
    assert b["fabric-manager"]["detail"].startswith(
        "nvidia-fabricmanager runs, but NVIDIA HGX H100 4-GPU has no NVSwitch"
    )
    assert b["server-dmi"]["status"] == "skip"  # a baseboard: DMI names the OEM server
    # the checks' commands went in the host's one batch: no server check was late or unanswered
    assert all(set(SERVER) <= set(h) for h in hosts.values())


def doctor(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "provision", "doctor", *args, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        return proc.returncode, json.loads(proc.stdout), proc.stderr
    except ValueError:
        raise AssertionError(
            f"doctor printed no JSON (exit {proc.returncode}): {proc.stdout[-1500:]} {proc.stderr[-1500:]}"
        ) from None


@pytest.fixture
def fake_ipmitool(converged_fleet):
    """The kit's ipmitool on gpu-a (from the site's Debian mirror), removed after the test."""
    env = converged_fleet
    env.kit.add(fakegpu.DEBIAN_REPO, [fakegpu.ipmitool_package()], "debian")
    env.kit.publish(fakegpu.DEBIAN_REPO, "debian")
    try:
        env.fleet.exec(
            "gpu-a", f"{APT} update -qq && {APT} install -y -qq ipmitool && rm -f /var/lib/fakegpu/commands.log"
        )
        yield env
    finally:
        env.fleet.exec("gpu-a", f"{APT} remove -y -qq ipmitool", check=False)


def test_doctor_names_the_failed_power_supply_from_the_bmc(fake_ipmitool, gpu_json):
    env = fake_ipmitool
    gpu_json("gpu-a", bmc="psu-failed")
    _, doc, err = doctor("-i", str(env.inventory()), "--limit", "gpu-a")
    (host,) = doc["hosts"]
    psu = [f for f in host["findings"] if f["id"].startswith("bmc-psu")]
    assert psu, json.dumps(host["findings"], indent=1)[-3000:] + err
    text = json.dumps(psu)
    assert "Power Supplies" in text
    assert "Non-Redundant: Sufficient from Redundant" in text
    # in-band and read-only: the three commands the collector sends, nothing that writes
    sent = env.fleet.exec("gpu-a", "grep '^ipmitool' /var/lib/fakegpu/commands.log").split("\n")
    assert sorted(line for line in sent if line) == ["ipmitool sdr elist", "ipmitool sel elist", "ipmitool sensor"]
    # without a BMC (no scenario) the same collection reads nothing and names no bmc- finding
    gpu_json("gpu-a", bmc=None)
    rc, doc, err = doctor("-i", str(env.inventory()), "--limit", "gpu-a")
    (host,) = doc["hosts"]
    assert not [f for f in host["findings"] if f["id"].startswith(("bmc-psu", "bmc-fan", "bmc-temp"))], err
    assert rc == 0, json.dumps(host["findings"], indent=1)[-3000:] + err
