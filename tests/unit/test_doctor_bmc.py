"""doctor reads the BMC (issue 25 item 4): ipmitool sensor / sdr / sel, FreeIPMI ipmi-sensors / ipmi-sel,
SEL CSV; bmc- findings with fixes; a GPU slowdown linked to its cause on the server; the collector
reads the BMC in-band, read-only, under a deadline, and says so where ipmitool is missing.

The captures are real, from public sources: tests/fixtures/doctor/bmc/ (each with its .source.txt,
INDEX.md lists them)."""

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from provision.doctor import classify, diagnose_files, diagnose_named_texts, diagnose_texts, split_bundle
from provision.doctor.classify import KINDS, SECTION_KEYS
from provision.doctor.inputs import BY_KEY, INPUTS
from provision.doctor.parse_bmc import parse_bmc, state_bits

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "doctor"
BMC = FIX / "bmc"

# Every capture and the bmc- findings it must give (and nothing else).
EXPECTED = {
    # faults
    "dell-idrac7__ipmitool-sdr-list-full__r320-fan3b-fan4b-0rpm-cr.txt": {
        ("bmc-fan-failed", "error", "Fan3B"),
        ("bmc-fan-failed", "error", "Fan4B"),
    },
    "intel-naming__ipmitool-sdr-get-v__pwr-unit-redund-redundancy-lost-asserted.txt": {
        ("bmc-psu-redundancy-lost", "error", "Pwr Unit Redund"),
    },
    "supermicro__freeipmi-ipmi-sel__chassis-intrusion-ps2-failure-detected.txt": {
        ("bmc-psu-failed", "error", "Power Supply 2 PS2 Status"),
        ("bmc-event-intrusion", "warning", "System Chassis Chassis Intru"),
    },
    "supermicro__freeipmi-ipmi-sensors__chassis-intru-general-chassis-intrusion.txt": {
        ("bmc-event-intrusion", "warning", "Chassis Intru"),
    },
    "supermicro-x9scm__freeipmi-ipmi-sel__ps2-failure-detected-os-stop.txt": {
        ("bmc-psu-failed", "error", "Power Supply PS2 Status"),
    },
    "openbmc__ipmitool-sensor-list__ambient-temp-46c-over-ucr-40-reads-ok.txt": {
        ("bmc-temperature-critical", "error", "Ambient_Temp"),
    },
    "supermicro__sel-csv-export__fana-lower-critical-going-low-partial.txt": {
        ("bmc-fan-failed", "error", "FANA"),
    },
    # a reading with states after it ("0 Watts, Presence detected, Failure detected"), every status `ok`
    "hpe-ilo2__ipmitool-sdr-elist-full__dl360-psu1-failure-detected-0-watts.txt": {
        ("bmc-psu-failed", "error", "Power Supply 1"),
        ("bmc-psu-redundancy-degraded", "warning", "Power Supplies"),
    },
    # a fault the file cannot show: nothing may be invented
    "intel-naming__ipmitool-sdr__pwr-unit-redund-0x00-ok.txt": set(),
    "hpe-ilo5__freeipmi-ipmi-sensors__dl360-gen10-failing-psu-reads-na.txt": set(),
    # healthy
    "supermicro__freeipmi-ipmi-sensors__thresholds-temps-healthy-partial.txt": set(),
    "supermicro__freeipmi-ipmi-sensors__chassis-intru-reset-ok.txt": set(),
    "hpe-ilo4__ipmitool-sensor__dl360p-g8-healthy-partial.txt": set(),
    "hpe-ilo3__ipmitool-sdr__dl380-g7-healthy-partial.txt": set(),
    "ami-megarac-sp__ipmitool-sensor__healthy-partial.txt": set(),
    "intel-s2600wttr__ipmitool-sensor__discrete-pwr-unit-redund-healthy-partial.txt": set(),
    "dell-idrac__ipmitool-sdr-elist-all__healthy-partial.txt": set(),
    "dell-idrac6__ipmitool-sdr-type-temperature__r510-healthy.txt": set(),
    "intel-naming__ipmitool-sel-elist__pwr-unit-power-off-partial.txt": set(),
    "dell-style__ipmitool-c-sdr-elist__ps-redundancy-fully-redundant.txt": set(),
    # quirks: a power meter flagged cr under its only (lower) limit, fans with inverted thresholds
    # saying ok, fan blocks in unstated units flagged nc: none is a fault the readings show
    "hpe-g5-g7__ipmitool-sensor__munin-testdata-power-meter-cr-fan-block-nc.txt": set(),
}
KIND = {
    "ipmitool-sensor": "bmc-sensor",
    "ipmitool-sensor-list": "bmc-sensor",
    "freeipmi-ipmi-sensors": "bmc-sensor",
    "ipmitool-sdr": "bmc-sdr",
    "ipmitool-sdr-list-full": "bmc-sdr",
    "ipmitool-sdr-elist-all": "bmc-sdr",
    "ipmitool-sdr-elist-full": "bmc-sdr",
    "ipmitool-sdr-type-temperature": "bmc-sdr",
    "ipmitool-sdr-get-v": "bmc-sdr",
    "ipmitool-c-sdr-elist": "bmc-sdr",
    "ipmitool-sel-elist": "bmc-sel",
    "freeipmi-ipmi-sel": "bmc-sel",
    "sel-csv-export": "bmc-sel",
}


def captures() -> list[Path]:
    return sorted(p for p in BMC.iterdir() if p.suffix == ".txt" and not p.name.endswith(".source.txt"))


def bmc_found(report) -> set[tuple[str, str, str]]:
    """(id, severity, the sensor the title names) of each bmc- finding."""
    out = set()
    for f in report.findings:
        if f.id.startswith("bmc-"):
            sensor = f.title.split(": ", 1)[1].split(" reads ")[0].split(" reports ")[0].split(": ")[0]
            out.add((f.id, f.severity, sensor))
    return out


def test_every_capture_has_its_source_and_an_expectation():
    names = {p.name for p in captures()}
    assert names == set(EXPECTED)
    for name in names:
        note = (BMC / f"{name}.source.txt").read_text()
        assert re.search(r"https://github\.com/\S+", note), name


def test_the_captures_meet_the_issue_bar():
    """>= 12 real captures, >= 6 with a fault, from >= 3 BMC vendors (the file name's first part)."""
    faulty = {name for name, found in EXPECTED.items() if found}
    vendors = {name.split("__")[0].split("-")[0] for name in faulty}
    assert len(EXPECTED) >= 12
    assert len(faulty) >= 6
    assert len(vendors) >= 3, vendors  # dell, intel, openbmc, supermicro


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_capture_gives_exactly_its_findings(name):
    report = diagnose_files([BMC / name])
    assert bmc_found(report) == EXPECTED[name]
    assert {f.id for f in report.findings} == {i for i, _, _ in EXPECTED[name]}, "no other finding either"
    assert report.exit_code == (1 if any(s == "error" for _, s, _ in EXPECTED[name]) else 0)
    for f in report.findings:
        assert f.fix
        assert f.evidence
        assert name in f.evidence


@pytest.mark.parametrize("path", captures(), ids=lambda p: p.name)
def test_each_capture_is_recognised_by_its_content(path):
    tool = path.name.split("__")[1]
    assert classify(path.read_text(), "") == KIND[tool]


def test_healthy_and_faulty_captures_read_together_keep_their_findings_apart():
    report = diagnose_files(captures())
    assert bmc_found(report) == set().union(*EXPECTED.values())
    assert [r.kind for r in report.read] == [classify(p.read_text()) for p in captures()]


# -- thresholds over status, discrete states over "0x00 ok" ------------------------------------------
def test_a_reading_over_its_limit_is_found_whatever_the_status_column_says():
    f = diagnose_files([BMC / "openbmc__ipmitool-sensor-list__ambient-temp-46c-over-ucr-40-reads-ok.txt"]).findings[0]
    assert "46 degrees C" in f.evidence
    assert "upper critical threshold 40" in f.evidence
    assert "the status column says 'ok'" in f.evidence


def test_a_status_without_a_reading_past_a_limit_is_not_a_fault():
    """HP's Power Meter says cr at 214 W with its only threshold (384) a lower one."""
    report = diagnose_files([BMC / "hpe-g5-g7__ipmitool-sensor__munin-testdata-power-meter-cr-fan-block-nc.txt"])
    capture = parse_bmc(
        (BMC / "hpe-g5-g7__ipmitool-sensor__munin-testdata-power-meter-cr-fan-block-nc.txt").read_text()
    )
    meter = next(s for s in capture.sensors if s.name == "Power Meter")
    assert (meter.status, meter.reading, meter.thresholds) == ("cr", 214.0, {"lnc": 384.0})
    assert not any(f.id.startswith("bmc-power") for f in report.findings)


def test_0x00_ok_hides_redundancy_lost_which_the_verbose_record_shows():
    """ipmitool issue 176: the same sensor of the same host, listed (0x00 ok) and verbose ([Redundancy Lost])."""
    plain = BMC / "intel-naming__ipmitool-sdr__pwr-unit-redund-0x00-ok.txt"
    verbose = BMC / "intel-naming__ipmitool-sdr-get-v__pwr-unit-redund-redundancy-lost-asserted.txt"
    assert not diagnose_files([plain]).findings
    both = diagnose_files([plain, verbose])
    assert bmc_found(both) == {("bmc-psu-redundancy-lost", "error", "Pwr Unit Redund")}
    # the states listed as enabled are not asserted: only [Redundancy Lost] is
    (sensor,) = parse_bmc(verbose.read_text()).sensors
    assert sensor.states == ("Redundancy Lost",)
    assert sensor.stype == "Power Unit"


def test_ipmitool_sensor_state_bits_are_decoded():
    """`ipmitool sensor` prints a discrete sensor's states as 0x<data2><data3> (offsets 0-7, 8-14)."""
    line = (BMC / "intel-s2600wttr__ipmitool-sensor__discrete-pwr-unit-redund-healthy-partial.txt").read_text()
    redund = next(s for s in parse_bmc(line).sensors if s.name == "Pwr Unit Redund")
    assert redund.states == ("Fully Redundant",)  # 0x0100: offset 0
    assert state_bits("Pwr Unit Redund", "0x0200") == ("Redundancy Lost",)  # offset 1
    assert state_bits("PS2 Status", "0x0b00") == (
        "Presence detected",
        "Power Supply Failure detected",
        "Power Supply AC lost",
    )
    assert state_bits("Physical Scrty", "0x0100") == ()  # the name does not say the type: not decoded
    assert state_bits("Chassis Intru", "0x0100") == ("General Chassis intrusion",)
    assert state_bits("SEL State", "0x1080") == ()  # reserved bit 15 and an unnamed type: nothing
    # the same line with offset 1 set is a lost redundancy
    lost = line.replace("| 0x0100|", "| 0x0200|", 1)
    report = diagnose_named_texts([("s2600-redundancy-lost.txt", lost)])
    assert bmc_found(report) == {("bmc-psu-redundancy-lost", "error", "Pwr Unit Redund")}


def test_thresholds_out_of_order_are_not_trusted():
    """The ML110 G5's fans: lower thresholds of ~5000 RPM above an upper one of 937, reading 1434 RPM, ok."""
    capture = parse_bmc(
        (BMC / "hpe-g5-g7__ipmitool-sensor__munin-testdata-power-meter-cr-fan-block-nc.txt").read_text()
    )
    fan = next(s for s in capture.sensors if s.name == "CPU FAN")
    assert fan.thresholds["lcr"] > fan.thresholds["ucr"]
    report = diagnose_files([BMC / "hpe-g5-g7__ipmitool-sensor__munin-testdata-power-meter-cr-fan-block-nc.txt"])
    assert not report.findings


def test_a_fan_under_its_lower_critical_threshold_with_ok_beside_it():
    """The OpenBMC issue's fan form: a reading under lcr that the BMC still calls ok."""
    text = (BMC / "openbmc__ipmitool-sensor-list__ambient-temp-46c-over-ucr-40-reads-ok.txt").read_text()
    fan = text.replace("Ambient_Temp    ", "Fan0            ").replace(
        "46.000     | degrees C ", "4.000      | RPM       "
    )
    assert "Fan0             | 4.000      | RPM        | ok" in fan
    assert bmc_found(diagnose_named_texts([("fan.txt", fan)])) == {("bmc-fan-failed", "error", "Fan0")}


# -- the event log ------------------------------------------------------------------------------------
def test_events_are_grouped_with_count_first_and_last():
    f = next(
        f
        for f in diagnose_files(
            [BMC / "supermicro-x9scm__freeipmi-ipmi-sel__ps2-failure-detected-os-stop.txt"]
        ).findings
        if f.id == "bmc-psu-failed"
    )
    assert "4 assertion(s)" in f.evidence
    assert "first PostInit" in f.evidence
    assert "last Jul-20-2017 10:30:02" in f.evidence
    assert f.title.endswith("Power Supply PS2 Status: Power Supply Failure detected at Jul-20-2017 10:30:02")


def test_an_event_whose_last_entry_is_a_deassertion_is_reported_cleared():
    """The Supermicro FANA log up to entry 14 (Lower Critical deasserted last) is a cleared fault."""
    lines = (BMC / "supermicro__sel-csv-export__fana-lower-critical-going-low-partial.txt").read_text().splitlines()
    report = diagnose_named_texts([("sel-to-14.csv", "\n".join(lines[:14]) + "\n")])
    (f,) = report.findings
    assert (f.id, f.severity) == ("bmc-fan-failed", "warning")
    assert "since cleared" in f.title
    assert "cleared (deasserted) at 2024/07/04 07:09:16" in f.evidence
    whole = diagnose_files([BMC / "supermicro__sel-csv-export__fana-lower-critical-going-low-partial.txt"])
    assert whole.findings[0].severity == "error"


def test_power_off_and_graceful_shutdown_are_not_faults():
    report = diagnose_files(
        [
            BMC / "intel-naming__ipmitool-sel-elist__pwr-unit-power-off-partial.txt",
            BMC / "supermicro-x9scm__freeipmi-ipmi-sel__ps2-failure-detected-os-stop.txt",
        ]
    )
    assert {f.id for f in report.findings} == {"bmc-psu-failed"}


# -- a GPU slowdown and its cause on the server ---------------------------------------------------------
def test_power_brake_is_linked_to_the_failed_psu():
    report = diagnose_files(
        [
            FIX / "q__2x-h100__hw-slowdown-power-brake.txt",
            BMC / "supermicro__freeipmi-ipmi-sel__chassis-intrusion-ps2-failure-detected.txt",
        ]
    )
    brakes = [f for f in report.findings if f.id == "clocks-power-brake"]
    assert len(brakes) == 2
    for f in brakes:
        assert f.title.endswith(
            ", caused by Power Supply 2 PS2 Status: Power Supply Failure detected at Dec-09-2024 21:12:29"
        )
        assert "(bmc-psu-failed)" in f.evidence
        assert f.fix.startswith("The server is the likely cause (bmc-psu-failed): act on that finding first. ")
    psu = next(f for f in report.findings if f.id == "bmc-psu-failed")
    assert "the GPUs show it: HW Power Brake Slowdown is active on GPU 0000:19:00.0" in psu.evidence
    assert psu.evidence.endswith("(clocks-power-brake) and 3 more GPU finding(s)")  # two GPUs, two ids each
    intrusion = next(f for f in report.findings if f.id == "bmc-event-intrusion")
    assert "GPUs show it" not in intrusion.evidence, "only the causes are linked"


def test_thermal_slowdown_is_linked_to_the_hot_inlet_and_power_brake_is_not():
    from provision.doctor.model import Finding
    from provision.doctor.rules_bmc import link

    temp = diagnose_files([BMC / "openbmc__ipmitool-sensor-list__ambient-temp-46c-over-ucr-40-reads-ok.txt"]).findings
    gpu = [
        Finding("clocks-hw-thermal-slowdown", "error", "HW Thermal Slowdown is active on GPU 0", "e", "f"),
        Finding("clocks-power-brake", "error", "HW Power Brake Slowdown is active on GPU 0", "e", "f"),
    ]
    linked = {f.id: f for f in link([*gpu, *temp])}
    assert linked["clocks-hw-thermal-slowdown"].title.endswith("caused by Ambient_Temp reads 46 degrees C")
    assert linked["clocks-power-brake"] == gpu[1]
    assert link(gpu) == gpu


def test_without_a_bmc_finding_a_slowdown_stays_as_it_was():
    alone = diagnose_files([FIX / "q__2x-h100__hw-slowdown-power-brake.txt"])
    healthy = diagnose_files(
        [
            FIX / "q__2x-h100__hw-slowdown-power-brake.txt",
            BMC / "hpe-ilo4__ipmitool-sensor__dl360p-g8-healthy-partial.txt",
        ]
    )
    assert alone.findings == healthy.findings


# -- the inputs table and the collector's sections --------------------------------------------------------
def test_the_bmc_inputs_are_rows_of_the_table():
    keys = [row.key for row in INPUTS]
    assert keys[-3:] == ["bmc-sensor", "bmc-sdr", "bmc-sel"]
    assert set(keys[-3:]) <= set(SECTION_KEYS)
    for key in keys[-3:]:
        assert BY_KEY[key].recognise is not None
        assert BY_KEY[key].rules is not None
        assert KINDS[key].startswith(("BMC", "the BMC"))


def test_collector_sections_are_diagnosed_whatever_dialect_they_hold():
    sections = {
        "bmc-sensor": (BMC / "openbmc__ipmitool-sensor-list__ambient-temp-46c-over-ucr-40-reads-ok.txt").read_text(),
        "bmc-sdr": (BMC / "dell-idrac7__ipmitool-sdr-list-full__r320-fan3b-fan4b-0rpm-cr.txt").read_text(),
        "bmc-sel": (BMC / "supermicro__freeipmi-ipmi-sel__chassis-intrusion-ps2-failure-detected.txt").read_text(),
    }
    report = diagnose_texts(sections)
    assert {f.id for f in report.findings} == {
        "bmc-temperature-critical",
        "bmc-fan-failed",
        "bmc-psu-failed",
        "bmc-event-intrusion",
    }
    assert [r.detail for r in report.read] == [
        "1 sensor(s) (ipmitool sensor)",
        "17 sensor(s) (ipmitool sdr)",
        "3 event(s) (ipmi-sel)",
    ]


def test_a_section_without_readings_says_the_bmc_was_not_read():
    report = diagnose_texts({"bmc-sensor": "ipmitool not installed: BMC not read\n"})
    (f,) = report.findings
    assert (f.id, f.severity, f.title) == ("bmc-not-read", "info", "ipmitool not installed: BMC not read")
    assert "sudo apt-get install ipmitool" in f.fix
    error = "Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory"
    report = diagnose_texts({"bmc-sensor": error + "\n", "bmc-sdr": error + "\n", "bmc-sel": error + "\n"})
    assert [(f.id, f.title) for f in report.findings] == [("bmc-not-read", f"The BMC was not read: {error}")]
    assert report.read[0].detail == f"no BMC readings ({error})"
    # one section read is enough: no note
    report = diagnose_texts(
        {"bmc-sensor": error, "bmc-sdr": (BMC / "hpe-ilo3__ipmitool-sdr__dl380-g7-healthy-partial.txt").read_text()}
    )
    assert not report.findings


def fake_tools(tmp_path: Path, monkeypatch, **scripts: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        tool = bin_dir / name.replace("_", "-")
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return bin_dir


def test_the_collector_reads_the_bmc_read_only_without_credentials():
    from provision.doctor.collect import SCRIPT

    calls = [
        ln.split(" ipmitool ", 1)[1].split("2>&1")[0].strip()
        for ln in SCRIPT.splitlines()
        if "lim" in ln and " ipmitool " in ln
    ]
    assert calls == ["sensor", "sdr elist", "sel elist"]
    for word in ("-U", "-P", "-H", "-E", "-f", "lanplus", "clear", "set", "raw", "chassis", "power", "reset"):
        assert not any(word in call.split() for call in calls), word
    assert re.search(r'lim "\$B" ipmitool sensor', SCRIPT), "under a deadline"


def test_collect_local_reads_the_bmc_with_ipmitool(tmp_path, monkeypatch):
    from provision.doctor.collect import collect_local

    sensor = BMC / "openbmc__ipmitool-sensor-list__ambient-temp-46c-over-ucr-40-reads-ok.txt"
    sdr = BMC / "intel-naming__ipmitool-sdr-get-v__pwr-unit-redund-redundancy-lost-asserted.txt"
    sel = BMC / "supermicro__freeipmi-ipmi-sel__chassis-intrusion-ps2-failure-detected.txt"
    fake_tools(
        tmp_path,
        monkeypatch,
        nvidia_smi="exit 9",
        ipmitool=(
            f'echo "$@" >> {tmp_path}/calls\n'
            f'case "$*" in sensor) cat {sensor};; "sdr elist") cat {sdr};; "sel elist") cat {sel};; *) exit 1;; esac'
        ),
    )
    got = collect_local(60)
    sections = split_bundle(got.text, got.token)
    assert (tmp_path / "calls").read_text().splitlines() == ["sensor", "sdr elist", "sel elist"]
    report = diagnose_texts({k: v for k, v in sections.items() if k.startswith("bmc-")})
    assert {f.id for f in report.findings} == {
        "bmc-temperature-critical",
        "bmc-psu-redundancy-lost",
        "bmc-psu-failed",
        "bmc-event-intrusion",
    }


def test_a_hung_ipmitool_is_stopped_and_the_rest_still_read(tmp_path, monkeypatch):
    from provision.doctor.collect import collect_local

    sel = BMC / "supermicro-x9scm__freeipmi-ipmi-sel__ps2-failure-detected-os-stop.txt"
    fake_tools(
        tmp_path,
        monkeypatch,
        nvidia_smi="exit 9",
        ipmitool=f'case "$*" in "sel elist") cat {sel};; *) trap "" TERM; sleep 60;; esac',
    )
    t0 = time.monotonic()
    got = collect_local(30)
    assert time.monotonic() - t0 < 30
    assert got.problem is None
    sections = split_bundle(got.text, got.token)
    report = diagnose_texts({k: v for k, v in sections.items() if k.startswith("bmc-")})
    assert "bmc-psu-failed" in {f.id for f in report.findings}


@pytest.mark.skipif(shutil.which("ipmitool") is not None, reason="ipmitool is installed here")
def test_collect_local_says_when_ipmitool_is_not_installed(tmp_path, monkeypatch):
    from provision.doctor.collect import collect_local

    fake_tools(tmp_path, monkeypatch, nvidia_smi="exit 9")
    got = collect_local(60)
    sections = split_bundle(got.text, got.token)
    assert sections["bmc-sensor"].strip() == "ipmitool not installed: BMC not read"
    assert "bmc-sdr" not in sections
    report = diagnose_texts(sections)
    assert "bmc-not-read" in {f.id for f in report.findings}


def test_a_flood_of_failed_sensors_is_bounded_and_counted():
    """The Dell R320's failed-fan line, repeated under 5,000 names: 16 findings, the rest counted."""
    line = next(
        ln
        for ln in (BMC / "dell-idrac7__ipmitool-sdr-list-full__r320-fan3b-fan4b-0rpm-cr.txt").read_text().splitlines()
        if ln.startswith("Fan3B")
    )
    text = "".join(line.replace("Fan3B", f"F{i:<4}") + "\n" for i in range(5000))
    t0 = time.process_time()
    report = diagnose_texts({"bmc-sdr": text})
    assert time.process_time() - t0 < 2
    fans = [f for f in report.findings if f.id == "bmc-fan-failed"]
    assert len(fans) == 16
    assert fans[-1].evidence.endswith("; and 4984 more sensor(s) like it")


def test_ipmitool_csv_forms_read_as_their_tables():
    """`ipmitool -c sensor` and `ipmitool -c sel elist` print the same fields with commas: the real
    OpenBMC and Intel lines, re-joined with commas, give the same readings and findings."""
    table = (BMC / "openbmc__ipmitool-sensor-list__ambient-temp-46c-over-ucr-40-reads-ok.txt").read_text()
    row = table.splitlines()[1]
    csv = ",".join(f.strip() for f in row.split("|"))
    assert csv == "Ambient_Temp,46.000,degrees C,ok,na,5.000,7.000,37.000,40.000,na"
    assert parse_bmc(csv).sensors[0][:6] == parse_bmc(row).sensors[0][:6]
    assert bmc_found(diagnose_named_texts([("c-sensor.csv", csv + "\n")])) == {
        ("bmc-temperature-critical", "error", "Ambient_Temp")
    }
    sel = (BMC / "intel-naming__ipmitool-sel-elist__pwr-unit-power-off-partial.txt").read_text().splitlines()[2:]
    rows = [",".join(f.strip() for f in ln.split("|")) for ln in sel]
    assert rows[0] == "30,11/15/2019,18:50:40,Power Unit Pwr Unit Status,Power off/down,Asserted"
    assert [e[:5] for e in parse_bmc("\n".join(rows)).events] == [e[:5] for e in parse_bmc("\n".join(sel)).events]
    assert classify("\n".join(rows), "") == "bmc-sel"
