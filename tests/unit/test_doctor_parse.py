"""Parsers and classification for provision doctor, over the committed trimmed captures in
tests/fixtures/doctor/ (each with a .source.txt naming its origin) and small inline texts."""

from pathlib import Path

import pytest

from provision.doctor import classify, split_bundle
from provision.doctor.classify import split_capture_bundle
from provision.doctor.parse_log import (
    parse_fabric_manager,
    parse_kernel_log,
    parse_modules,
    parse_proc_version,
    parse_secure_boot,
    scan_messages,
    strip_prefix,
)
from provision.doctor.parse_smi import (
    ParseFailure,
    parse_csv,
    parse_nvlink,
    parse_q_text,
    parse_table,
    parse_xml,
)
from provision.doctor.state import normalize_bus, same_gpu

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "doctor"


def text(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def test_every_fixture_names_its_origin():
    captures = sorted(p for p in FIX.iterdir() if p.is_file() and not p.name.endswith(".source.txt"))
    assert captures, "no doctor fixtures found"
    for p in captures:
        assert (FIX / f"{p.name}.source.txt").is_file(), f"{p.name} has no .source.txt sidecar"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("PCI:0000:3b:00", "0000:3b:00"),
        ("00001580:00:00.0", "1580:00:00.0"),
        ("0001:00:00.0", "0001:00:00.0"),
        ("GPU 00000000:19:00.0", "0000:19:00.0"),
        ("not a bus", None),
        (None, None),
    ],
)
def test_normalize_bus(raw, expected):
    assert normalize_bus(raw) == expected


def test_same_gpu_ignores_a_missing_function():
    assert same_gpu("0000:3b:00.0", "0000:3b:00")
    assert not same_gpu("0000:3b:00.0", "0000:3c:00")
    assert not same_gpu(None, "0000:3b:00")


# -- -q -x XML ---------------------------------------------------------------------------------
def test_xml_v10_ecc_and_retired_pages():
    r = parse_xml(text("q-x__v100-sxm3__dbe-retired-pages-pending.xml"), "f")
    (g,) = r.gpus
    assert (r.driver_version, r.cuda_version, r.attached) == ("410.104", "10.0", 16)
    assert g.bus_id == "0000:34:00.0"
    assert g.name == "Tesla V100-SXM3-32GB"
    assert g.datacenter
    assert (g.ecc_volatile_unc, g.ecc_aggregate_unc, g.ecc_volatile_corr, g.ecc_aggregate_corr) == (1, 7627, 1, 291)
    assert (g.retired_sbe, g.retired_dbe, g.retired_pending) == (0, 2, True)
    assert g.clocks_label == "Clocks Throttle Reasons"
    assert g.clocks["gpu_idle"] is True


def test_xml_v13_clocks_event_reasons():
    (g,) = parse_xml(text("q-x__rtx-3090-v13__sw-power-cap-idle.xml"), "f").gpus
    assert g.clocks_label == "Clocks Event Reasons"
    assert g.clocks["sw_power_cap"] is True
    assert g.clocks["hw_slowdown"] is False
    assert g.pstate == "P8"
    assert not g.datacenter
    assert g.persistence is True


def test_xml_without_doctype_and_windows_driver_model():
    (g,) = parse_xml(text("q-x__gtx-1050__no-doctype.xml"), "f").gpus
    assert g.name == "NVIDIA GeForce GTX 1050"
    assert (g.pcie_width, g.pcie_width_max) == (8, 16)
    (w,) = parse_xml(text("q-x__rtx-2080__windows-wddm.xml"), "f").gpus
    assert w.windows
    assert w.persistence is None


def test_xml_v12_sram_dram_ecc_and_tlimit():
    r = parse_xml(text("q-x__2x-l4__v12.xml"), "f")
    assert [g.bus_id for g in r.gpus] == ["0000:01:00.0", "0000:c1:00.0"]
    g = r.gpus[0]
    assert (g.ecc_volatile_unc, g.ecc_aggregate_unc) == (0, 0)
    assert g.temp_slowdown is None
    assert g.tlimit == 39
    assert g.tlimit_slowdown == -2
    assert (g.remap_pending, g.remap_failure) == (False, False)


def test_xml_domain_is_kept_and_gpus_keep_file_order():
    r = parse_xml(text("q-x__2x-k80__ecc-aggregate-dbe.xml"), "f")
    assert [g.bus_id for g in r.gpus] == ["1580:00:00.0", "2df7:00:00.0"]
    assert [g.ecc_aggregate_unc for g in r.gpus] == [7, 4]


def test_xml_text_after_the_document_is_kept_as_messages():
    xml = text("q-x__gtx-1050__no-doctype.xml") + "WARNING: infoROM is corrupted at gpu 0000:01:00.0\n"
    r = parse_xml(xml, "f")
    assert r.messages == ["WARNING: infoROM is corrupted at gpu 0000:01:00.0"]


@pytest.mark.parametrize(
    ("xml", "why"),
    [
        ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><nvidia_smi_log>&a;</nvidia_smi_log>', "entities"),
        ("<nvidia_smi_log><gpu><product_name>x", "truncated"),
        ("<nvidia_smi_log><gpu></nvidia_smi_log>", "malformed"),
        ("<?xml version='1.0'?><html><body/></html>", "root is <html>"),
        ("no xml here", "no XML document"),
    ],
)
def test_xml_failures_say_why(xml, why):
    with pytest.raises(ParseFailure, match=why):
        parse_xml(xml, "f")


def test_xml_truncated_real_capture_is_reported_as_truncated():
    xml = text("q-x__v100-sxm3__dbe-retired-pages-pending.xml")
    with pytest.raises(ParseFailure, match="truncated"):
        parse_xml(xml[: len(xml) // 2], "f")


# -- -q text ----------------------------------------------------------------------------------
def test_q_text_event_reasons_with_nested_hw_slowdown():
    r = parse_q_text(text("q__2x-h100__hw-slowdown-power-brake.txt"), "f")
    assert r.driver_version == "535.161.08"
    assert r.attached == 8
    assert len(r.gpus) == 2
    g = r.gpus[0]
    assert g.bus_id == "0000:19:00.0"
    assert g.clocks_label == "Clocks Event Reasons"
    assert g.clocks["hw_slowdown"]
    assert g.clocks["hw_power_brake_slowdown"]
    assert not g.clocks["hw_thermal_slowdown"]
    assert (g.fabric_state, g.fabric_status) == ("Completed", "Success")
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) == (5, 5, 16, 16)


def test_q_text_old_layout_throttle_reasons_and_bit_ecc():
    r = parse_q_text(text("q__2x-v100__old-ecc-layout.txt"), "f")
    g = r.gpus[0]
    assert g.clocks_label == "Clocks Throttle Reasons"
    assert g.persistence is False
    assert (g.ecc_volatile_unc, g.ecc_aggregate_unc, g.retired_pending) == (0, 0, False)
    assert (g.temp, g.temp_slowdown, g.temp_shutdown) == (32, 87, 90)


def test_q_text_remapped_rows():
    (g,) = parse_q_text(text("q__a10__remapped-rows-pending.txt"), "f").gpus
    assert (g.remap_unc, g.remap_pending, g.remap_failure) == (4, True, False)


def test_q_text_mig_device_sections_do_not_leak_into_the_gpu():
    (g,) = parse_q_text(text("q__h100__mig-load-drv590.txt"), "f").gpus
    assert (g.mig_current, g.mig_pending) == ("Enabled", "Enabled")
    assert g.ecc_volatile_unc == 0
    assert g.name == "NVIDIA H100 80GB HBM3"


def test_q_d_subset_after_a_shell_prompt():
    r = parse_q_text(text("q-d-memory-performance__prompt-line.txt"), "f")
    assert r.driver_version == "580.105.06"
    assert r.cuda_version is None
    (g,) = r.gpus
    assert g.pstate == "P8"
    assert g.name is None
    assert g.clocks["sw_power_cap"] is False


def test_q_text_r610_deprecated_version_fields():
    q = (
        "\n==============NVSMI LOG==============\n\n"
        "Driver Version                     : 610.57.04 [Deprecated; will be removed in CUDA 14.0. "
        "Use KMD Version instead]\n"
        "CUDA Version                       : 13.3 [Deprecated; will be removed in CUDA 14.0. "
        "Use CUDA UMD Version instead]\n"
        "KMD Version                        : 610.57.04\n"
        "CUDA UMD Version                   : 13.3\n\nAttached GPUs                      : 0\n"
    )
    r = parse_q_text(q, "f")
    assert (r.driver_version, r.cuda_version, r.gpus) == ("610.57.04", "13.3", [])


def test_q_text_without_header_fails():
    with pytest.raises(ParseFailure, match="NVSMI LOG"):
        parse_q_text("GPU 00000000:01:00.0\n    Product Name : x\n", "f")


# -- default table ----------------------------------------------------------------------------
def test_table_r550():
    r = parse_table(text("table__h100__r550-healthy.txt"), "f")
    assert (r.driver_version, r.cuda_version) == ("550.90.07", "12.4")
    assert [(g.index, g.bus_id, g.persistence, g.pstate, g.temp) for g in r.gpus] == [
        (0, "0000:19:00.0", True, "P0", 27),
        (1, "0000:3b:00.0", True, "P0", 24),
    ]
    assert r.gpus[0].mig_current == "Disabled"
    assert r.gpus[0].ecc_volatile_unc == 0


def test_table_fan_err_and_trailing_warning():
    (g,) = parse_table(text("table__rtx-4090__fan-err.txt"), "f").gpus
    assert g.fan == "ERR!"
    assert g.temp == 38
    assert g.pstate == "P5"
    r = parse_table(text("table__8x-v100__inforom-corrupted.txt"), "f")
    assert len(r.gpus) == 8
    assert r.gpus[0].persistence is False
    assert "WARNING: infoROM is corrupted at gpu 0008:00:00.0" in r.messages


def test_table_windows_driver_model_column():
    # The two GPU rows of the RTX 2080 SUPER Windows capture (gpu-exporter bundle, driver 610.62).
    table = (
        "| NVIDIA-SMI 610.62                 KMD Version: 610.62        CUDA UMD Version: 13.3     |\n"
        "|=========================================+========================+======================|\n"
        "|   0  NVIDIA GeForce RTX 2080 ...  WDDM  |   00000000:0C:00.0  On |                  N/A |\n"
        "| 38%   39C    P8             37W /  250W |     797MiB /   8192MiB |      0%      Default |\n"
        "|                                         |                        |                  N/A |\n"
    )
    r = parse_table(table, "f")
    (g,) = r.gpus
    assert r.driver_version == "610.62"
    assert g.windows
    assert g.persistence is None
    assert g.fan == "38%"


# -- --query-gpu CSV --------------------------------------------------------------------------
def test_csv_with_units_in_header():
    (g,) = parse_csv(text("query-gpu__p100.csv"), "f").gpus
    assert g.name == "Tesla P100-PCIE-16GB"
    assert g.pstate == "P0"
    assert g.temp == 37
    assert g.power_draw == 28.16


def test_csv_event_reasons_and_ecc():
    csv = (
        "index, pci.bus_id, persistence_mode, clocks_event_reasons.hw_slowdown, "
        "ecc.errors.uncorrected.volatile.total\n"
        "0, 00000000:19:00.0, Enabled, Active, 3\n"
    )
    (g,) = parse_csv(csv, "f").gpus
    assert g.clocks == {"hw_slowdown": True}
    assert g.ecc_volatile_unc == 3
    assert g.persistence is True


@pytest.mark.parametrize(
    ("csv", "why"),
    [
        (text("query-gpu__noheader.txt"), "header"),
        ("name, pci.bus_id\nA100, 0000:01:00.0, extra\n", "values for 2 columns"),
        ("name, pci.bus_id\n", "no rows"),
    ],
)
def test_csv_failures(csv, why):
    with pytest.raises(ParseFailure, match=why):
        parse_csv(csv, "f")


# -- nvlink -s ----------------------------------------------------------------------------------
def test_nvlink_inactive_links():
    gpus = parse_nvlink(text("nvlink-s__8x-v100__inactive-links.txt"))
    assert len(gpus) == 7  # the published capture lists GPUs 0-6
    assert {n for n, v in gpus[3].links.items() if v == "<inactive>"} == {3, 5}


def test_nvlink_notes_for_mig_and_missing_nvlink():
    (g,) = parse_nvlink(text("nvlink-s__h100__mig-unsupported.txt"))
    assert g.links == {}
    assert "MIG mode" in g.note
    (l40s,) = parse_nvlink(
        "GPU 0: NVIDIA L40S (UUID: GPU-00000000-0000-0000-0000-000000000000)\nDevice does not have or support Nvlink\n"
    )
    assert l40s.note == "Device does not have or support Nvlink"


# -- kernel log ---------------------------------------------------------------------------------
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


@pytest.mark.parametrize(
    "line",
    [
        f"[ 1843.308145] {XID79}",
        f"[Fri Aug 30 11:43:09 2024] {XID79}",
        f"2024-11-15T12:02:03,470068+00:00 {XID79}",
        f"kern  :warn  : 2025-01-21T02:21:33,498559+00:00 {XID79}",
        f"Oct 15 12:40:10 gpu-node-3 kernel: {XID79}",
        f"2024-11-15T12:02:03+0000 gpu-node-3 kernel: {XID79}",
        f"Oct 15 12:40:10 gpu-node-3 kernel: [ 1843.308145] {XID79}",
        XID79,
    ],
)
def test_kernel_prefixes_are_stripped_and_xid_read(line):
    assert strip_prefix(line) == XID79
    (x,) = parse_kernel_log(line + "\n").xids
    assert (x.code, x.bus) == (79, "0000:3b:00")


@pytest.mark.parametrize(
    ("line", "code", "bus"),
    [
        ("NVRM: Xid (PCI:0000:01:00): 31, Ch 0000003a, intr 10000000. MMU Fault: ENGINE GRAPHICS", 31, "0000:01:00"),
        ("NVRM: Xid (0000:02:00): 62, 0cb5(2d50) 00000000 00000000", 62, "0000:02:00"),
        (
            "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception",
            13,
            "0000:cb:00",
        ),
        ("NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s", 119, "0000:9b:00"),
    ],
)
def test_xid_line_variants(line, code, bus):
    (x,) = parse_kernel_log(line).xids
    assert (x.code, x.bus) == (code, bus)


def test_kernel_log_joins_indented_continuations():
    log = parse_kernel_log(text("dmesg__fallen-off-bus-multiline.log"))
    kinds = [(e.kind, e.bus) for e in log.events]
    assert ("fallen-off-bus", "0000:b3:00.0") in kinds
    assert ("probe-failed", None) in kinds
    assert ("kernel-module", None) in kinds
    assert log.lines == 3


def test_kernel_log_maps_bus_to_uuid_and_counts_xids():
    log = parse_kernel_log(text("dmesg-ctime__xid-119.log"))
    assert log.uuids == {"0000:9b:00": "GPU-509665ad-b600-ac93-3616-d754b23d636d"}
    assert [x.code for x in log.xids] == [119] * 5


def test_kernel_log_events():
    log = parse_kernel_log(
        "[   12.3] Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7\n"
        "[   12.4] nouveau 0000:01:00.0: DRM: VRAM: 8192 MiB\n"
        "[   12.5] NVRM: API mismatch: the client has the version 550.127.05, but\n"
        "[   12.6] NVRM: RmInitAdapter failed! (0x22:0x56:667)\n"
        "[   12.7] nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 61 egress non-posted PRIV error\n"
    )
    assert [(e.kind, e.detail) for e in log.events] == [
        ("secure-boot", ""),
        ("nouveau", ""),
        ("api-mismatch", "550.127.05"),
        ("init-failed", ""),
        ("sxid", "12028 Non-fatal, Link 61 egress non-posted PRIV error"),
    ]


def test_fabric_manager_log():
    events, count = parse_fabric_manager(text("fabricmanager__nvswitch-nonfatal.log"))
    (e,) = events
    assert count == 5
    assert (e.kind, e.code, e.bus) == ("nvswitch-nonfatal", "12028", "0000:86:00.0")


# -- messages and host facts --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "ident"),
    [
        ("Failed to initialize NVML: Driver/library version mismatch", "driver-library-mismatch"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "driver-not-loaded"),
        ("No devices were found", "no-devices"),
        ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.", "nvml-not-found"),
        ("Failed to initialize NVML: Unknown Error", "nvml-unknown-error"),
        ("Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error", "gpu-lost"),
        ("WARNING: infoROM is corrupted at gpu 0000:3b:00.0", "inforom-corrupted"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "out-of-memory"),
        ("ResourceExhaustedError: OOM when allocating tensor with shape[1024]", "out-of-memory"),
        ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "out-of-memory"),
        ("cudaErrorMemoryAllocation: out of memory", "out-of-memory"),
        ("XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.2GiB", "out-of-memory"),
        ("-> CUDA driver version is insufficient for CUDA runtime version", "cuda-driver-insufficient"),
        (
            "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver",
            "cuda-driver-insufficient",
        ),
        ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "cuda-no-kernel-image"),
        ("CUDA error: system not yet initialized", "fabric-not-ready"),
        ("cudaErrorNoDevice: no CUDA-capable device is detected", "no-cuda-device"),
    ],
)
def test_scan_messages(line, ident):
    assert [m.id for m in scan_messages(f"noise before\n{line}\nnoise after\n")] == [ident]


def test_scan_messages_keeps_the_captured_detail():
    (m,) = scan_messages("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please")
    assert m.detail == "12.4"
    assert scan_messages("    Reset Required                    : No\n") == []


def test_host_facts():
    assert (
        parse_proc_version(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  (dvs-builder@U22)\n"
        )
        == "570.158.01"
    )
    assert parse_modules(
        "nvidia_uvm 1523712 0 - Live 0x0000000000000000 (POE)\nnvidia 56389632 2 nvidia_uvm, Live 0x0\n"
    ) == {"nvidia_uvm", "nvidia"}
    assert parse_modules("Module                  Size  Used by\nnouveau              2355200  2\n") == {"nouveau"}
    assert parse_secure_boot("SecureBoot enabled\n") is True
    assert parse_secure_boot("EFI variables are not supported on this system\n") is False
    assert parse_secure_boot("what") is None


# -- classification -----------------------------------------------------------------------------
KIND_BY_PREFIX = {
    "q-x__": "nvidia-smi-q-x",
    "q__": "nvidia-smi-q",
    "q-d-": "nvidia-smi-q",
    "table__": "nvidia-smi",
    "query-gpu__p100": "query-gpu-csv",
    "query-gpu__noheader": "query-csv-noheader",
    "nvlink-s__": "nvlink-s",
    "dmesg": "kernel-log",
    "journal-k": "kernel-log",
    "fabricmanager": "fabricmanager-log",
    "error__": "nvidia-smi-stderr",
    "app__": "app-log",
    "capture-bundle": "capture-bundle",
    "topo-m": "topo",
    "mig-lgip": "mig-list",
    "pmon": "pmon",
    "help-query": "nvidia-smi-help",
    "list__": "nvidia-smi-L",
}


@pytest.mark.parametrize(
    "path", sorted(p for p in FIX.iterdir() if p.is_file() and not p.name.endswith(".source.txt")), ids=lambda p: p.name
)
def test_classify_own_fixtures_by_content(path):
    expected = next(kind for prefix, kind in KIND_BY_PREFIX.items() if path.name.startswith(prefix))
    # The name must not matter: classify without it.
    assert classify(path.read_text(encoding="utf-8"), "") == expected


@pytest.mark.parametrize(
    ("content", "name", "kind"),
    [
        ("", "x", "empty"),
        ("  \n\n", "x", "empty"),
        ("\x00\x01\x02binary", "x", "binary"),
        ('{"gpus": [1, 2]}', "x", "json"),
        ("gpus:\n  - a100\nkind: plan\n", "x", "yaml"),
        ("<!DOCTYPE html><html><body>502 Bad Gateway</body></html>", "x", "html"),
        ("<?xml version='1.0'?><project/>", "x", "xml-other"),
        ("hello world\n", "notes.txt", "text"),
        ("hello world\n", "dmesg.log", "kernel-log"),
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 2024\n", "", "proc-driver-version"),
        ("Module                  Size  Used by\nnvidia              56389632  2\n", "", "modules"),
        ("SecureBoot disabled\n", "", "secure-boot"),
        ("===== provision-doctor: uname-r =====\n6.8.0-45-generic\n", "", "collector-bundle"),
    ],
)
def test_classify_inline(content, name, kind):
    assert classify(content, name) == kind


# -- bundles ------------------------------------------------------------------------------------
def test_split_bundle():
    bundle = (
        "preamble the collector printed\n"
        "===== provision-doctor: nvidia-smi-rc =====\n9\n"
        "===== provision-doctor: kernel-log =====\n[ 1.0] a\n"
        "==== provision-doctor: not-a-marker ====\n"
        "===== provision-doctor: kernel-log =====  \n[ 2.0] b\n"
        "[ 2.1] no trailing newline===== provision-doctor: uname-r =====\n"
    )
    assert split_bundle(bundle) == {
        "nvidia-smi-rc": "9\n",
        "kernel-log": "[ 1.0] a\n==== provision-doctor: not-a-marker ====\n\n[ 2.0] b\n[ 2.1] no trailing newline",
        "uname-r": "",
    }
    assert split_bundle("no markers at all") == {}


def test_split_capture_bundle_maps_commands_to_sections():
    blocks = split_capture_bundle(text("capture-bundle__h100-mig__mini.txt"))
    assert [(title, key) for title, key, _ in blocks] == [
        ("capabilities :: version", None),
        ("capabilities :: list (-L)", None),
        ("capabilities :: nvlink -s", "nvlink-s"),
        ("load :: nvidia-smi (default table)", "nvidia-smi"),
        ("load :: query (-q)", "nvidia-smi-q"),
        ("load :: pmon (per-process monitor)", None),
    ]
