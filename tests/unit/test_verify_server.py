"""verify checks the server around the GPUs (issue 25 item 3): each server check, and the fabric
manager check as it follows the plan's platform, on real captures (tests/fakegpu/captures,
tests/fixtures/platforms) printed by the fake-GPU kit's own nvidia-smi and fakegpu-dmi, so the
kit the fleet installs and the checks are tested together."""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import io
import json
import sys
from pathlib import Path

import pytest
import testinfra

from provision.hostpool import Connection
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.verify import Target
from provision.verify.checks import check_driver, check_server
from provision.verify.facts import (
    KERNEL_LOG,
    NVLINK_STATUS,
    PCIE_QUERY,
    SMI_QUERY,
    TOPOLOGY,
    HostFacts,
    dmi_command,
    planned_commands,
)

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = ROOT / "tests" / "fakegpu" / "payload"
KIT_CAPTURES = ROOT / "tests" / "fakegpu" / "captures"
PLATFORM_CAPTURES = ROOT / "tests" / "fixtures" / "platforms"
SSH = Connection("ssh", "h")
LOCAL = testinfra.get_host("local://")
XID_79 = "[ 8412.4] NVRM: Xid (PCI:0000:17:00): 79, pid=0, GPU has fallen off the bus."


class Res:
    def __init__(self, rc=0, stdout="", stderr=""):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr


class ScriptHost:
    """Answers each command from a script (exact command first, then the first key it starts with)."""

    def __init__(self, script):
        self.script, self.ran = script, []

    def run(self, command):
        self.ran.append(command)
        if command in self.script:
            return self.script[command]
        for prefix, res in self.script.items():
            if command.startswith(prefix):
                return res
        return Res(127, "", f"sh: 1: {command.split()[0]}: not found\n")


@pytest.fixture(scope="module")
def plans(real_matrix):
    def plan(platform, gpu=None, os_id="debian12"):
        return resolve(real_matrix, PlanRequest(os_id, gpu, platform=platform))

    return {
        "none": resolve(real_matrix, PlanRequest("debian12", "a100-pcie")),
        "dgx-a100": plan("dgx-a100", "a100-sxm4-80gb"),
        "hgx-a100-4gpu": plan("hgx-a100-4gpu", "a100-sxm4-80gb"),
        "dgx-h100": plan("dgx-h100"),
        "hgx-h100-4gpu": plan("hgx-h100-4gpu"),
        "r750xa": plan("r750xa", "a100-pcie"),
        "pcie-server": plan("pcie-server", "a100-pcie"),
    }


# -- the kit's nvidia-smi, run in this process on a gpu.json -------------------------------------------
@pytest.fixture(scope="module")
def kit_smi():
    sys.path.insert(0, str(PAYLOAD))  # fakegpu_mig, which the kit installs beside it
    loader = importlib.machinery.SourceFileLoader("fakegpu_nvidia_smi", str(PAYLOAD / "nvidia-smi"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.path.remove(str(PAYLOAD))
    return module


def smi_answers(kit_smi, monkeypatch, tmp_path, gpu: dict) -> dict[str, Res]:
    """What the kit's nvidia-smi answers to the server checks' commands for this gpu.json (the captures
    read from the repository, where the package installs them from)."""
    conf = tmp_path / "gpu.json"
    conf.write_text(json.dumps({"model": "NVIDIA A100-SXM4-80GB", "device_id": "20B2", "memory_mib": 81920,
                                "power_limit_w": 400, "cuda_version": "13.0", **gpu}))  # fmt: skip
    captures = tmp_path / "captures"
    captures.mkdir(exist_ok=True)
    for source in (*KIT_CAPTURES.glob("*.txt"), *PLATFORM_CAPTURES.glob("*.txt")):
        (captures / source.name).write_text(source.read_text())
    monkeypatch.setattr(kit_smi, "CONF", str(conf))
    monkeypatch.setattr(kit_smi, "CAPTURES", str(captures))
    monkeypatch.setattr(kit_smi, "STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(kit_smi, "COMMAND_LOG", str(tmp_path / "state" / "commands.log"))
    monkeypatch.setattr(kit_smi, "persistence_enabled", lambda: True)

    def load():  # the installed driver package's version file, without the package
        gpu = json.loads(conf.read_text())
        return {"count": 1, "fault": None, **gpu, "driver_version": "580.95.05"}

    monkeypatch.setattr(kit_smi, "load", load)
    answers = {}
    for command in (PCIE_QUERY, NVLINK_STATUS, TOPOLOGY, SMI_QUERY):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = kit_smi.main(command.split()[1:])
        answers[command] = Res(rc, out.getvalue(), err.getvalue())
    return answers


def facts(plan, script, **target):
    return HostFacts(ScriptHost(script), Target("h", SSH, plan, **target))


def host(plan, kit_answers, **extra):
    """A host of `plan` whose nvidia-smi is the kit's (its GPUs: the kit's query table)."""
    script = {KERNEL_LOG: Res(0, ""), **kit_answers, **extra}
    return facts(plan, script)


def run(check, facts_, plan=None, target=None):
    evidence, warnings = [], []
    kwargs = {"facts": facts_, "plan": plan or facts_.target.plan, "target": target or facts_.target,
              "evidence": evidence.append, "warning": warnings.append}  # fmt: skip
    wanted = check.__code__.co_varnames[: check.__code__.co_argcount]
    try:
        check(**{k: v for k, v in kwargs.items() if k in wanted})
    except pytest.fail.Exception as exc:
        return "fail", str(exc), evidence
    except pytest.skip.Exception as exc:
        return "skip", str(exc), evidence
    return ("warn", warnings[0], evidence) if warnings else ("pass", "", evidence)


SERVER_CHECKS = [check_server.check_server_dmi, check_server.check_server_gpus, check_server.check_server_pcie,
                 check_server.check_server_nvlink, check_server.check_server_topology]  # fmt: skip


# -- without a platform ---------------------------------------------------------------------------
def test_without_a_platform_every_server_check_skips_saying_why(plans):
    plain = facts(plans["none"], {})
    for check in SERVER_CHECKS:
        status, detail, _ = run(check, plain)
        assert status == "skip", check.provision_check
        assert "no platform in the plan" in detail
    assert not any(c in planned_commands(plain.target) for c in (PCIE_QUERY, NVLINK_STATUS, TOPOLOGY))
    assert plain.host.ran == []


# -- the parsers on the real captures -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("capture", "gpus", "relation"),
    [
        ("topo-m__dgx-a100__nv12.txt", 8, "NV12"),
        ("topo-m__hgx-h100-8gpu__nv18.txt", 8, "NV18"),
        ("topo-m__4x-h100__nv6.txt", 4, "NV6"),
        ("topo-m__4x-a100__polaris-nv4.txt", 4, "NV4"),
    ],
)
def test_topology_captures_parse_to_every_pair(capture, gpus, relation):
    columns, matrix = check_server.parse_topology((PLATFORM_CAPTURES / capture).read_text())
    assert columns == [f"GPU{i}" for i in range(gpus)]
    pairs = {(a, b): r for (a, b), r in matrix.items() if a != b}
    assert len(pairs) == gpus * (gpus - 1)
    assert set(pairs.values()) == {relation}
    assert all(matrix[(f"GPU{i}", f"GPU{i}")] == "X" for i in range(gpus))


def test_nvlink_captures_parse():
    healthy = check_server.parse_nvlink((KIT_CAPTURES / "nvlink-s__a100-sxm4-80gb-x2.txt").read_text())
    assert sorted(healthy) == ["0", "1"]
    assert all(len(links) == 12 and set(links.values()) == {"25 GB/s"} for links in healthy.values())
    partial = check_server.parse_nvlink((KIT_CAPTURES / "nvlink-s__v100-sxm2-links-inactive.txt").read_text())
    assert partial == {"3": {"0": "25.781 GB/s", "1": "25.781 GB/s", "2": "25.781 GB/s", "3": "inactive",
                             "4": "25.781 GB/s", "5": "inactive"}}  # fmt: skip
    down = check_server.parse_nvlink((KIT_CAPTURES / "nvlink-s__b200-all-inactive.txt").read_text())
    assert down == {"2": None}


def test_pcie_capture_parses_only_its_rows():
    rows = check_server.parse_pcie((KIT_CAPTURES / "pcie__l40s-8gpu-idle.txt").read_text())
    assert rows == {str(i): ("1", "4", "16", "16") for i in range(8)}  # the command and header lines skipped


def test_the_parsers_are_bounded_on_hostile_output():
    """A host printing a megabyte on one line, or a million lines: parsed in bounded time, no crash."""
    import time

    floods = ["GPU0 " * 200_000, "GPU 0: x\n" + "\t Link 1: <inactive>\n" * 1_000_000, ("0, 1, 4, 16, 16\n" * 500_000),
              "+" * 1_000_000]  # fmt: skip
    t0 = time.process_time()
    for text in floods:
        check_server.parse_topology(text)
        check_server.parse_nvlink(text)
        check_server.parse_pcie(text)
        check_server.parse_dmi(text)
    assert time.process_time() - t0 < 5


# -- server-gpus ------------------------------------------------------------------------------------
def test_gpu_count_below_an_exact_platform_fails_naming_a_gpu_off_the_bus(plans, kit_smi, monkeypatch, tmp_path):
    plan = plans["dgx-a100"]
    full = host(plan, smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 8}))
    assert run(check_server.check_server_gpus, full)[:2] == ("pass", "")
    seven = host(plan, smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 7}), **{KERNEL_LOG: Res(0, XID_79)})
    status, detail, evidence = run(check_server.check_server_gpus, seven)
    assert status == "fail"
    assert detail.startswith(
        "7 of the 8 GPUs NVIDIA DGX A100 holds are visible: a GPU fell off the bus or is not seated"
    )
    assert XID_79 in detail
    assert f"kernel log: {XID_79}" in evidence


def test_gpu_count_of_an_up_to_platform(plans, kit_smi, monkeypatch, tmp_path):
    plan = plans["r750xa"]  # up to 4 PCIe GPUs; that 4 is the most rests on a doubted source
    two = host(plan, smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 2}))
    assert run(check_server.check_server_gpus, two)[0] == "pass"
    five = host(plan, smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 5}))
    status, detail, _ = run(check_server.check_server_gpus, five)
    assert status == "warn"
    assert "5 GPUs visible; Dell PowerEdge R750xa holds at most 4" in detail
    assert "marks gpus.count of r750xa unconfirmed" in detail


def test_a_doubt_on_the_gpu_models_does_not_soften_the_count(plans, kit_smi, monkeypatch, tmp_path):
    plan = plans["hgx-h100-4gpu"]  # gpus.ids doubted, gpus.count not
    assert "gpus.ids" in plan.server.unconfirmed
    two = host(plan, smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 2}))
    assert run(check_server.check_server_gpus, two)[:2][0] == "fail"


# -- server-pcie ------------------------------------------------------------------------------------
def test_an_idle_gen1_link_passes_on_its_max_generation(plans, kit_smi, monkeypatch, tmp_path):
    """The L40S capture reads Gen1 now (idle) and Gen4 at most: at the R750xa's Gen4 x16."""
    plan = plans["r750xa"]
    idle = host(plan, smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 2, "pcie": "pcie__l40s-8gpu-idle.txt"}))
    status, _, evidence = run(check_server.check_server_pcie, idle)
    assert status == "pass"
    assert evidence == ["GPU 0: Gen1 now, Gen4 at most; x16 now, x16 at most",
                        "GPU 1: Gen1 now, Gen4 at most; x16 now, x16 at most"]  # fmt: skip


@pytest.mark.parametrize("capture", ["pcie__rtx5060ti-x8-idle.txt", "pcie__rtx5060ti-x8-load.txt"])
def test_a_gpu_at_x8_fails_naming_the_riser(plans, kit_smi, monkeypatch, tmp_path, capture):
    """GPU 1 on the x8 capture: x8 now, x16 at most (width.max is the card's, not the slot's)."""
    plan = plans["r750xa"]
    gpu = {"count": 2, "pcie": ["pcie__l40s-8gpu-idle.txt", capture]}
    status, detail, _ = run(
        check_server.check_server_pcie, host(plan, smi_answers(kit_smi, monkeypatch, tmp_path, gpu))
    )
    assert status == "fail"
    assert detail == (
        "GPU 1 runs at x8 (x8 now, x16 at most); Dell PowerEdge R750xa gives x16: a riser or slot at x8, "
        "or a card not fully seated"
    )


def test_a_link_below_the_platform_generation_fails(plans, kit_smi, monkeypatch, tmp_path):
    plan = plans["dgx-h100"]  # PCIe Gen5 x16
    gen4 = host(plan, smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 8, "pcie": "pcie__l40s-8gpu-idle.txt"}))
    status, detail, _ = run(check_server.check_server_pcie, gen4)
    assert status == "fail"
    assert detail.startswith("GPU 0 links at PCIe Gen4 at most; NVIDIA DGX H100 gives Gen5: the slot, a riser")
    assert detail.endswith("and 2 more")  # 8 GPUs: six named, the rest counted


def test_an_unreadable_link_warns_and_a_platform_without_one_skips(plans):
    plan = plans["r750xa"]
    na = facts(plan, {KERNEL_LOG: Res(0, ""), SMI_QUERY: Res(0, "0, A, 0x20B510DE, 580.95.05, Enabled, [N/A], [N/A]\n"),
                      PCIE_QUERY: Res(0, "0, [N/A], [N/A], [N/A], [N/A]\n")})  # fmt: skip
    assert run(check_server.check_server_pcie, na)[:2] == (
        "warn",
        "nvidia-smi does not report the PCIe link of GPU 0: not checked",
    )
    assert run(check_server.check_server_pcie, facts(plans["pcie-server"], {}))[1] == (
        "compat/platforms.yaml gives no PCIe link for pcie-server"
    )


# -- server-nvlink ----------------------------------------------------------------------------------
def test_nvlink_up_on_an_nvswitch_platform(plans, kit_smi, monkeypatch, tmp_path):
    gpu = {"count": 2, "nvlink": "nvlink-s__a100-sxm4-80gb-x2.txt"}
    status, _, evidence = run(
        check_server.check_server_nvlink, host(plans["dgx-a100"], smi_answers(kit_smi, monkeypatch, tmp_path, gpu))
    )
    assert status == "pass"
    assert evidence == ["GPU 0: 12 NVLink(s) up", "GPU 1: 12 NVLink(s) up"]


def test_nvlink_down_fails_naming_the_links_and_the_cause(plans):
    plan = plans["dgx-a100"]
    smi = "3, NVIDIA A100-SXM4-80GB, 0x20B210DE, 580.95.05, Enabled, Disabled, Disabled\n"
    partial = (KIT_CAPTURES / "nvlink-s__v100-sxm2-links-inactive.txt").read_text()
    status, detail, _ = run(
        check_server.check_server_nvlink,
        facts(plan, {KERNEL_LOG: Res(0, ""), SMI_QUERY: Res(0, smi), NVLINK_STATUS: Res(0, partial)}),
    )
    assert status == "fail"
    assert detail.startswith(
        "GPU 3: NVLink 3, 5 down of 6: an NVLink to the NVSwitch baseboard is down (Fabric Manager"
    )
    down = (KIT_CAPTURES / "nvlink-s__b200-all-inactive.txt").read_text()
    smi2 = smi.replace("3,", "2,", 1)
    status, detail, _ = run(
        check_server.check_server_nvlink,
        facts(plan, {KERNEL_LOG: Res(0, ""), SMI_QUERY: Res(0, smi2), NVLINK_STATUS: Res(0, down)}),
    )
    assert (status, detail.split(":")[0]) == ("fail", "GPU 2 has no NVLink up")


def test_pcie_cards_on_an_nvlink_board_fail_and_optional_bridges_pass_without(plans, kit_smi, monkeypatch, tmp_path):
    no_nvlink = smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 2})  # the kit prints nothing: no NVLink
    assert no_nvlink[NVLINK_STATUS].stdout == ""
    assert run(check_server.check_server_nvlink, host(plans["dgx-a100"], no_nvlink))[0] == "fail"
    status, _, evidence = run(check_server.check_server_nvlink, host(plans["r750xa"], no_nvlink))
    assert status == "pass"
    assert evidence[-1] == "no NVLink bridge fitted (optional on Dell PowerEdge R750xa)"
    # the 4-GPU board's interconnect is doubted: links down there warn
    assert run(check_server.check_server_nvlink, host(plans["hgx-h100-4gpu"], no_nvlink))[0] == "warn"
    assert run(check_server.check_server_nvlink, facts(plans["pcie-server"], {}))[1] == (
        "Generic PCIe GPU server has no NVLink (interconnect none)"
    )


# -- server-topology ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("platform", "capture", "count"),
    [
        ("dgx-a100", "topo-m__dgx-a100__nv12.txt", 8),
        ("hgx-a100-4gpu", "topo-m__4x-a100__polaris-nv4.txt", 4),
        ("hgx-h100-4gpu", "topo-m__4x-h100__nv6.txt", 4),
        ("dgx-h100", "topo-m__hgx-h100-8gpu__nv18.txt", 8),
    ],
)
def test_topology_of_the_platform_passes(plans, kit_smi, monkeypatch, tmp_path, platform, capture, count):
    answers = smi_answers(kit_smi, monkeypatch, tmp_path, {"count": count, "topology": capture})
    status, _, evidence = run(check_server.check_server_topology, host(plans[platform], answers))
    assert status == "pass"
    pairs = count * (count - 1) // 2
    assert evidence == [f"nvidia-smi topo -m between GPU pairs: {plans[platform].server.topology[0]} x{pairs}"]


def test_fewer_nvlinks_than_the_board_has_fail(plans, kit_smi, monkeypatch, tmp_path):
    """A DGX A100 plan on a host whose GPUs read NV4 (the Polaris capture): links down."""
    answers = smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 4, "topology": "topo-m__4x-a100__polaris-nv4.txt"})
    status, detail, _ = run(check_server.check_server_topology, host(plans["dgx-a100"], answers))
    assert status == "fail"
    assert detail.startswith("GPU0-GPU1 is NV4, NVIDIA DGX A100 gives NV12: 4 of the 12 NVLinks up between them")


def test_a_bridge_on_a_pcie_only_platform_fails_and_a_missing_gpu_is_named(plans, kit_smi, monkeypatch, tmp_path):
    answers = smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 4, "topology": "topo-m__4x-a100__polaris-nv4.txt"})
    status, detail, _ = run(check_server.check_server_topology, host(plans["pcie-server"], answers))
    assert status == "fail"
    assert "an NVLink bridge Generic PCIe GPU server does not expect" in detail
    five = smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 5, "topology": "topo-m__4x-a100__polaris-nv4.txt"})
    detail = run(check_server.check_server_topology, host(plans["pcie-server"], five))[1]
    assert detail.startswith("nvidia-smi topo -m lists no GPU4: a GPU fell off the bus?")
    missing = smi_answers(kit_smi, monkeypatch, tmp_path, {"count": 4})
    assert run(check_server.check_server_topology, host(plans["dgx-a100"], missing))[1] == (
        f'nvidia-smi topo -m fails: fakegpu: no topo -m capture named in {tmp_path / "gpu.json"} ("topology")'
    )


# -- server-dmi: the kit's fakegpu-dmi writes the files, this machine's sh reads them -------------------
@pytest.fixture(scope="module")
def kit_dmi():
    loader = importlib.machinery.SourceFileLoader("fakegpu_dmi", str(PAYLOAD / "fakegpu-dmi"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def dmi_host(plan, kit_dmi, monkeypatch, tmp_path, capture):
    conf = tmp_path / "gpu.json"
    conf.write_text(json.dumps({"dmi": capture} if capture else {}))
    monkeypatch.setattr(kit_dmi, "CONF", str(conf))
    monkeypatch.setattr(kit_dmi, "CAPTURES", str(PLATFORM_CAPTURES))
    monkeypatch.setattr(kit_dmi, "DMI", str(tmp_path / "dmi"))
    assert kit_dmi.main() == 0
    return HostFacts(LOCAL, Target("h", Connection("local"), plan, hostvars={"verify_dmi_dir": str(tmp_path / "dmi")}))


def test_dmi_of_the_platform_passes(plans, kit_dmi, monkeypatch, tmp_path):
    status, _, evidence = run(
        check_server.check_server_dmi,
        dmi_host(plans["dgx-a100"], kit_dmi, monkeypatch, tmp_path, "dmidecode-t1__dgx-a100.txt"),
    )
    assert status == "pass"
    assert evidence == [
        f"{tmp_path}/dmi: sys_vendor='NVIDIA', product_name='DGXA100 920-23687-2531-001', board_name unreadable"
    ]


def test_dmi_of_another_server_fails_or_warns_where_doubted(plans, kit_dmi, monkeypatch, tmp_path):
    dell = "dmidecode-t1__dell-poweredge-t-xe8545.txt"
    status, detail, _ = run(
        check_server.check_server_dmi, dmi_host(plans["dgx-a100"], kit_dmi, monkeypatch, tmp_path, dell)
    )
    assert status == "fail"
    assert detail.startswith(
        "DMI vendor 'Dell Inc.'; NVIDIA DGX A100 reports 'NVIDIA': this is not the plan's platform"
    )
    assert "DMI product 'PowerEdge T-XE8545' (board None); NVIDIA DGX A100 reports 'DGXA100'" in detail
    # the R750xa's vendor string is captured on another PowerEdge: its DMI is doubted
    status, detail, _ = run(
        check_server.check_server_dmi,
        dmi_host(plans["r750xa"], kit_dmi, monkeypatch, tmp_path, "dmidecode-t1__dgx-a100.txt"),
    )
    assert status == "warn"
    assert "marks dmi of r750xa unconfirmed" in detail
    assert (
        run(check_server.check_server_dmi, dmi_host(plans["r750xa"], kit_dmi, monkeypatch, tmp_path, dell))[0] == "pass"
    )


def test_no_dmi_warns_a_bad_folder_fails_and_a_baseboard_skips(plans, kit_dmi, monkeypatch, tmp_path):
    bare = dmi_host(plans["dgx-a100"], kit_dmi, monkeypatch, tmp_path, None)  # gpu.json names none: no folder
    status, detail, _ = run(check_server.check_server_dmi, bare)
    assert status == "warn"
    assert detail.startswith(f"no DMI file readable in {tmp_path}/dmi (a VM or a container without DMI)")
    for bad in ("../etc", "/opt/../etc", "/opt/dmi\n", 7):
        target = Target("h", Connection("local"), plans["dgx-a100"], hostvars={"verify_dmi_dir": bad})
        status, detail, _ = run(check_server.check_server_dmi, HostFacts(LOCAL, target))
        assert status == "fail"
        assert "verify_dmi_dir is" in detail
        assert "not an absolute path" in detail
        assert all("for f in sys_vendor" not in c for c in planned_commands(target))
    assert run(check_server.check_server_dmi, facts(plans["hgx-h100-4gpu"], {}))[1].startswith(
        "compat/platforms.yaml has no DMI strings for hgx-h100-4gpu (a baseboard"
    )


def test_a_dmi_value_cannot_forge_another_line(plans, tmp_path):
    """Firmware writes the DMI strings: a newline and '+' inside one stay in it."""
    folder = tmp_path / "dmi"
    folder.mkdir()
    (folder / "sys_vendor").write_text("Evil\n+NVIDIA\n")
    (folder / "product_name").write_text("x" * 5000)
    res = LOCAL.run(dmi_command(str(folder)))
    assert res.stdout == "+Evil+NVIDIA\n+" + "x" * 256 + "\n-\n"
    assert check_server.parse_dmi(res.stdout)["board_name"] is None


# -- fabric manager, as the platform's interconnect says ---------------------------------------------
FM_ACTIVE = {"systemctl is-active nvidia-fabricmanager": Res(0, "active\nenabled\n")}
FM_DOWN = {"systemctl is-active nvidia-fabricmanager": Res(3, "failed\nenabled\n")}


def test_fabric_manager_follows_the_platform(plans):
    four = plans["hgx-h100-4gpu"]
    assert four.fabric_manager is None
    status, detail, _ = run(check_driver.check_fabric_manager, facts(four, FM_ACTIVE))
    assert status == "fail"
    assert detail.startswith(
        "nvidia-fabricmanager runs, but NVIDIA HGX H100 4-GPU has no NVSwitch (NVLink between the GPUs on the board): "
        "the plan has no fabric manager (compat/platforms.yaml marks the interconnect of hgx-h100-4gpu unconfirmed"
    )
    assert run(check_driver.check_fabric_manager, facts(four, FM_DOWN))[0] == "pass"
    dgx = plans["dgx-a100"]
    status, detail, _ = run(check_driver.check_fabric_manager, facts(dgx, FM_DOWN))
    assert status == "fail"
    assert detail.startswith(
        "nvidia-fabricmanager is failed/enabled: Fabric Manager down, the GPUs on NVIDIA DGX A100's NVSwitch "
        "baseboard stay unusable for CUDA"
    )
    version = {"nv-fabricmanager --version": Res(0, f"Fabric Manager version is : {dgx.driver.version}\n")}
    assert run(check_driver.check_fabric_manager, facts(dgx, {**FM_ACTIVE, **version}))[0] == "pass"


def test_fabric_manager_left_stopped_by_the_role_variable(plans):
    dgx = plans["dgx-a100"]
    off = facts(dgx, FM_DOWN, hostvars={"nvidia_driver_fabric_manager_start": "no"})
    status, detail, _ = run(check_driver.check_fabric_manager, off)
    assert (status, detail.split(":")[0]) == ("skip", "nvidia_driver_fabric_manager_start is false for this host")
    bad = facts(dgx, FM_DOWN, hostvars={"nvidia_driver_fabric_manager_start": "maybe"})
    status, detail, _ = run(check_driver.check_fabric_manager, bad)
    assert status == "fail"
    assert "nvidia_driver_fabric_manager_start" in detail


# -- one round trip ---------------------------------------------------------------------------------------
def test_the_server_checks_send_their_commands_in_the_batch(plans):
    dgx = plans["dgx-a100"]
    commands = planned_commands(Target("h", SSH, dgx))
    assert {PCIE_QUERY, NVLINK_STATUS, TOPOLOGY, dmi_command("/sys/class/dmi/id")} <= set(commands)
    # nvidia-smi's table (and the kernel log before it) come before the commands that can hang on a lost GPU
    assert commands.index(KERNEL_LOG) < commands.index(SMI_QUERY) < commands.index(PCIE_QUERY)
    assert commands.index(dmi_command("/sys/class/dmi/id")) < commands.index(KERNEL_LOG)
    only = planned_commands(Target("h", SSH, dgx), {"server-pcie"})
    assert only[-3:] == [KERNEL_LOG, SMI_QUERY, PCIE_QUERY]
    # a platform without the facts sends nothing for them
    generic = planned_commands(Target("h", SSH, plans["pcie-server"]))
    assert PCIE_QUERY not in generic
    assert NVLINK_STATUS not in generic
    assert TOPOLOGY in generic


# -- the kit's ipmitool (tests/fakegpu/payload/ipmitool): real BMC captures, read-only ----------------
def test_the_kits_ipmitool_prints_the_scenarios_captures(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tests"))
    from harness import fakegpu

    sys.path.remove(str(ROOT / "tests"))
    loader = importlib.machinery.SourceFileLoader("fakegpu_ipmitool", str(PAYLOAD / "ipmitool"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    ipmitool = importlib.util.module_from_spec(spec)
    loader.exec_module(ipmitool)
    bmc = tmp_path / "bmc"
    bmc.mkdir()
    (bmc / "scenarios.json").write_text(json.dumps(fakegpu.BMC_SCENARIOS))
    for scenario in fakegpu.BMC_SCENARIOS.values():
        for name in scenario.values():  # every capture a scenario names is a kept one, with its source note
            assert fakegpu.bmc_capture(name).with_name(f"{name}.source.txt").is_file(), name
            (bmc / name).write_text(fakegpu.bmc_capture(name).read_text())
    conf = tmp_path / "gpu.json"
    monkeypatch.setattr(ipmitool, "CONF", str(conf))
    monkeypatch.setattr(ipmitool, "BMC", str(bmc))
    monkeypatch.setattr(ipmitool, "LOG", str(tmp_path / "commands.log"))

    def call(*argv, bmc_scenario=None):
        conf.write_text(json.dumps({"bmc": bmc_scenario} if bmc_scenario else {}))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = ipmitool.main(list(argv))
        return rc, out.getvalue(), err.getvalue()

    # what doctor -i runs, on the host whose Power Supply 1 failed
    rc, out, _ = call("sdr", "elist", bmc_scenario="psu-failed")
    assert rc == 0
    assert "Power Supply 1   | 06h | ok  | 10.1 | 0 Watts, Presence detected, Failure detected" in out
    assert call("sel", "elist", bmc_scenario="psu-failed")[:2] == (0, "SEL has no entries\n")
    redundancy = "intel-naming__ipmitool-sdr-get-v__pwr-unit-redund-redundancy-lost-asserted.txt"
    rc, out, _ = call("-I", "open", "-v", "sdr", "elist", bmc_scenario="psu-redundancy-lost")
    assert (rc, out) == (0, (fakegpu.BMC_CAPTURES / redundancy).read_text())
    assert call("sdr", bmc_scenario="psu-redundancy-lost")[1].startswith("Pwr Unit Status  | 0x00              | ok")
    rc, _, err = call("sensor", bmc_scenario="psu-failed")  # no capture of it on that host
    assert (rc, err) == (1, "fakegpu ipmitool: scenario 'psu-failed' has no capture of `ipmitool sensor`\n")
    assert call("sdr", "elist")[:2] == (1, "")  # no BMC scenario: no device, as ipmitool says
    assert call("sdr", "elist")[2].startswith("Could not open device at /dev/ipmi0")
    for writes in (("sel", "clear"), ("chassis", "power", "off"), ("raw", "0x06", "0x01")):
        rc, out, err = call(*writes, bmc_scenario="psu-failed")
        assert (rc, out) == (1, "")
        assert err.startswith("fakegpu ipmitool: scenario 'psu-failed' has no capture of")
    assert "ipmitool sel clear" in (tmp_path / "commands.log").read_text()
