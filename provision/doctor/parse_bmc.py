"""What a server's BMC says: sensor readings with their thresholds, discrete states, and the event log.

One parser, ``parse_bmc(text)``, reads every dialect line by line (a capture may hold several):

* ``ipmitool sensor`` / ``sensor list`` (and ``-c``): name | reading | unit | status | lnr | lcr | lnc |
  unc | ucr | unr; a discrete sensor's status is its state bits, ``0x<data2><data3>``;
* ``ipmitool sdr`` / ``sdr list [full]`` (and ``-c``): name | reading | status;
* ``ipmitool sdr elist`` / ``sdr type …`` (and ``-c``): name | id | status | entity | reading or states;
* ``ipmitool sdr get -v`` / ``sdr list -v`` / ``sensor get``: "Sensor ID : …" blocks, whose
  "States Asserted" are the discrete states a one-line listing hides (``0x00 | ok`` beside
  [Redundancy Lost]);
* ``ipmitool sel elist`` / ``sel list`` (and ``-c``): id | date | time | sensor | event | Asserted;
* FreeIPMI ``ipmi-sensors`` and ``ipmi-sel``, by their header line (any of their column sets), or
  without it in their default columns;
* a BMC web interface's SEL CSV export: id,date time,sensor,type,event - Assertion.

Lines of none of these shapes are skipped. Every line is split once (``str.split``), read up to
``bounds.MAX_LINE`` characters, and no pattern here backtracks: the time is linear in the input.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from provision.doctor import bounds

THRESHOLDS = ("lnr", "lcr", "lnc", "unc", "ucr", "unr")
# ipmitool's status column (sdr list, sensor); FreeIPMI's State column, lowercased
STATUSES = frozenset({"ok", "cr", "nc", "nr", "ns", "na", "lnr", "lcr", "lnc", "unc", "ucr", "unr"})
_FREEIPMI_STATES = frozenset({"nominal", "warning", "critical", "n/a"})
_DIRECTIONS = {"asserted": True, "deasserted": False}

# IPMI 2.0 table 42-2/42-3: the discrete states ipmitool prints as state bits (`ipmitool sensor`),
# for the sensors whose name says what they are (the listing carries no sensor type).
_REDUNDANCY_BITS = (
    "Fully Redundant",
    "Redundancy Lost",
    "Redundancy Degraded",
    "Non-Redundant: Sufficient from Redundant",
    "Non-Redundant: Sufficient from Insufficient",
    "Non-Redundant: Insufficient Resources",
    "Redundancy Degraded from Fully Redundant",
    "Redundancy Degraded from Non-Redundant",
)
_PSU_BITS = (
    "Presence detected",
    "Power Supply Failure detected",
    "Predictive Failure",
    "Power Supply AC lost",
    "AC lost or out-of-range",
    "AC out-of-range, but present",
    "Config Error",
)
_INTRUSION_BITS = (
    "General Chassis intrusion",
    "Drive Bay intrusion",
    "I/O Card area intrusion",
    "Processor area intrusion",
    "LAN Leash Lost",
    "Unauthorized dock",
    "FAN area intrusion",
)
_PSU_NAME = re.compile(r"(?i)\b(?:PS|PSU|Power Supply) ?\d{1,3}(?: Status)?\Z|\APS\d{1,3}[ _]Status\Z")
_ELIST_ID = re.compile(r"[0-9A-Fa-f]{1,4}h\Z")
_HEX = re.compile(r"0x[0-9A-Fa-f]{1,8}\Z")
_SEL_CSV_WHEN = re.compile(r"\d{4}[/-]\d{2}[/-]\d{2} \d{2}:\d{2}:\d{2}\Z")

# ipmitool's sensor type names (ipmitool sel elist prints "<type> <sensor name>"), longest first
SENSOR_TYPES = tuple(
    sorted(
        (
            "Temperature",
            "Voltage",
            "Current",
            "Fan",
            "Physical Security",
            "Platform Security",
            "Processor",
            "Power Supply",
            "Power Unit",
            "Cooling Device",
            "Other",
            "Memory",
            "Drive Slot / Bay",
            "Drive Slot",
            "System Firmware Progress",
            "System Firmware Error",
            "Event Logging Disabled",
            "Watchdog1",
            "Watchdog2",
            "System Event",
            "Critical Interrupt",
            "Button",
            "Module / Board",
            "Microcontroller",
            "Add-in Card",
            "Chassis",
            "Chip Set",
            "Other FRU",
            "Cable / Interconnect",
            "System Boot Initiated",
            "Boot Error",
            "OS Boot",
            "OS Critical Stop",
            "Slot / Connector",
            "System ACPI Power State",
            "Platform Alert",
            "Entity Presence",
            "Management Subsys Health",
            "Battery",
            "Session Audit",
            "Version Change",
            "FRU State",
            "Other Units-based Sensor",
        ),
        key=len,
        reverse=True,
    )
)


class Sensor(NamedTuple):
    """A sensor as the BMC reads it now."""

    name: str
    reading: float | None  # None: no reading, or a discrete sensor
    unit: str  # "RPM", "degrees C", "Watts", "discrete", "" ...
    status: str  # ipmitool's status (ok, cr, nc, nr, ...) or FreeIPMI's state, lowercased; "" unknown
    thresholds: dict[str, float]  # lnr..unr, the finite ones printed
    states: tuple[str, ...]  # asserted discrete states, as text
    stype: str  # sensor type where printed (sdr get -v, FreeIPMI), else ""
    line: str  # the line it came from (cut)


class Event(NamedTuple):
    """One entry of the system event log."""

    when: str  # "Dec-09-2024 21:12:29", "11/15/2019 18:50:40", "PostInit"
    sensor: str  # the sensor's name, with its type where the dialect prints them together
    stype: str  # the sensor type where printed or recognised, else ""
    event: str  # "Power Supply Failure detected", "Lower Critical going low"
    asserted: bool  # False: a deassertion
    severity: str  # FreeIPMI's State (critical, warning, nominal), lowercased; "" unknown
    line: str


class BmcCapture(NamedTuple):
    sensors: list[Sensor]
    events: list[Event]
    dialects: dict[str, int]  # dialect -> rows read
    lines: int  # lines read
    note: str = ""  # the first line, when no row was read (ipmitool's error, the collector's note)

    def rows(self) -> int:
        return sum(self.dialects.values())

    def summary(self) -> str:
        parts = []
        if self.sensors:
            parts.append(f"{len(self.sensors)} sensor(s)")
        if self.events:
            parts.append(f"{len(self.events)} event(s)")
        how = ", ".join(sorted(self.dialects))
        return (", ".join(parts) + f" ({how})") if parts else "no BMC readings"


def _number(field: str) -> float | None:
    """A reading or threshold: a finite number, else None (na, N/A, inf, disabled)."""
    try:
        value = float(field)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _cut(line: str) -> str:
    return line if len(line) <= 240 else line[:237] + "..."


def _thresholds(fields: list[str]) -> dict[str, float]:
    out = {}
    for key, field in zip(THRESHOLDS, fields, strict=False):
        value = _number(field)
        if value is not None:
            out[key] = value
    return out


def state_bits(name: str, status: str) -> tuple[str, ...]:
    """The asserted states of a discrete sensor in ``ipmitool sensor`` (status ``0x<data2><data3>``),
    for the sensors whose name says their type (redundancy, power supply, chassis intrusion)."""
    if not _HEX.match(status):
        return ()
    value = int(status, 16)
    bits = (value >> 8) & 0xFF | (value & 0x7F) << 8  # data2: offsets 0-7, data3: 8-14
    low = name.lower()
    if "redund" in low:
        table = _REDUNDANCY_BITS
    elif "intru" in low:
        table = _INTRUSION_BITS
    elif _PSU_NAME.search(name):
        table = _PSU_BITS
    else:
        return ()
    return tuple(text for offset, text in enumerate(table) if bits >> offset & 1)


def _reading(field: str) -> tuple[float | None, str]:
    """ "7560 RPM" -> (7560.0, "RPM"); "0x00" / "no reading" / "Disabled" -> (None, "")."""
    head, _, unit = field.partition(" ")
    value = _number(head)
    return (value, unit.strip()) if value is not None else (None, "")


def _states(field: str) -> tuple[str, ...]:
    """elist's description of a discrete sensor: "Presence detected, Power Supply AC lost"."""
    low = field.lower()
    if not field or low in ("disabled", "no reading", "ns", "na", "n/a", "state deasserted", "not readable"):
        return ()
    return tuple(s.strip() for s in field.split(",") if s.strip())


def _quoted(field: str) -> tuple[str, ...]:
    """FreeIPMI's event column: "'Presence detected' 'Power Supply Failure detected'" -> both; 'OK' -> ()."""
    parts = field.split("'")
    found = tuple(p.strip() for p in parts[1::2] if p.strip()) if len(parts) > 2 else (field.strip(),)
    return tuple(p for p in found if p and p.upper() not in ("OK", "N/A"))


def _when(date: str, time: str) -> str:
    """ "Dec-09-2024" + "21:12:29"; FreeIPMI prints "PostInit" in both before the clock is set."""
    return date if date == time else f"{date} {time}".strip()


def _sel_type(sensor: str) -> str:
    return next((t for t in SENSOR_TYPES if sensor.startswith(t + " ") or sensor == t), "")


class _Parser:
    def __init__(self) -> None:
        self.sensors: list[Sensor] = []
        self.events: list[Event] = []
        self.dialects: dict[str, int] = {}
        self.header: list[str] | None = None  # FreeIPMI's column names, lowercased
        self.block: dict[str, str] | None = None  # an "sdr get -v" block being read
        self.block_states: list[str] = []
        self.block_key = ""
        self.block_line = ""
        self.lines = 0
        self.recognised = 0  # lines of a dialect: rows, headers, the lines of a -v block

    def _count(self, dialect: str) -> None:
        self.dialects[dialect] = self.dialects.get(dialect, 0) + 1
        self.recognised += 1

    def feed(self, raw: str) -> None:
        self.lines += 1
        line = raw[: bounds.MAX_LINE].strip()
        if not line:
            return
        if self.block is not None and self._block_line(line):
            self.recognised += 1
            return
        if line.startswith("Sensor ID") and ":" in line:
            self._end_block()
            self.block, self.block_states, self.block_key = {}, [], ""
            self.block_line = line
            self._block_line(line)
            return
        if "|" in line:
            self._bars([f.strip() for f in line.split("|")], line)
        elif "," in line:
            self._csv([f.strip() for f in line.split(",")], line)

    # -- "Sensor ID : ..." blocks --------------------------------------------------------------
    def _block_line(self, line: str) -> bool:
        assert self.block is not None
        if line.startswith("[") and line.endswith("]"):
            if self.block_key == "states asserted":
                self.block_states.append(line[1:-1].strip())
            return True
        key, colon, value = line.partition(":")
        if not colon or len(key) > 48 or "|" in line:
            self._end_block()
            return False
        key = " ".join(key.split()).lower()
        if key == "sensor id" and "sensor id" in self.block:
            self._end_block()
            return False
        self.block_key = key
        self.block.setdefault(key, value.strip())
        return True

    def _end_block(self) -> None:
        block, self.block = self.block, None
        if not block or "sensor id" not in block:
            return
        name = block["sensor id"]
        if name.endswith(")") and " (" in name:
            name = name.rpartition(" (")[0]
        stype = next((v for k, v in block.items() if k.startswith("sensor type")), "")
        if stype.endswith(")") and " (" in stype:
            stype = stype.rpartition(" (")[0]
        raw = block.get("sensor reading", "")
        head = raw.split(" ", 1)[0]
        value = _number(head)
        unit = raw.split(")", 1)[1].strip() if value is not None and ")" in raw else ""
        thresholds = {}
        for key, short in (
            ("lower non-recoverable", "lnr"),
            ("lower critical", "lcr"),
            ("lower non-critical", "lnc"),
            ("upper non-critical", "unc"),
            ("upper critical", "ucr"),
            ("upper non-recoverable", "unr"),
        ):
            number = _number(block.get(key, ""))
            if number is not None:
                thresholds[short] = number
        states = tuple(s for s in self.block_states if s)
        self.sensors.append(
            Sensor(name, value, unit, block.get("status", "").lower(), thresholds, states, stype, _cut(self.block_line))
        )
        self._count("sdr get -v")

    # -- '|' separated -------------------------------------------------------------------------
    def _bars(self, f: list[str], line: str) -> None:
        if f[0] == "ID" and len(f) >= 4 and "Name" in f:
            self.header = [c.lower() for c in f]
            self.recognised += 1
            return
        if self.header and len(f) == len(self.header) and f[0].isdigit():
            self._freeipmi(dict(zip(self.header, f, strict=True)), line)
            return
        if not f[0] or f[0].startswith("#"):
            return
        n = len(f)
        if n >= 6 and f[5].lower() in _DIRECTIONS and f[0].isdigit():
            sensor = f[3]
            self.events.append(
                Event(_when(f[1], f[2]), sensor, _sel_type(sensor), f[4], _DIRECTIONS[f[5].lower()], "", _cut(line))
            )
            self._count("ipmitool sel")
        elif n == 10 and (f[3].lower() in STATUSES or not f[3] or _HEX.match(f[3])):
            self._sensor_row(f, line, "ipmitool sensor")
        elif n == 5 and _ELIST_ID.match(f[1]):
            self._elist(f, line)
        elif n == 3 and f[2].lower() in STATUSES:
            value, unit = _reading(f[1])
            self.sensors.append(Sensor(f[0], value, unit, f[2].lower(), {}, (), "", _cut(line)))
            self._count("ipmitool sdr")
        elif n == 6 and f[0].isdigit():  # FreeIPMI's default columns, without the header
            if f[2][:2].isdigit() or f[2] in ("PostInit", "N/A"):
                keys = ("id", "date", "time", "name", "type", "event")
            else:
                keys = ("id", "name", "type", "reading", "units", "event")
            self._freeipmi(dict(zip(keys, f, strict=True)), line)

    def _sensor_row(self, f: list[str], line: str, dialect: str) -> None:
        name, status = f[0], f[3]
        if _HEX.match(status) or f[2] == "discrete":
            self.sensors.append(Sensor(name, None, "discrete", "", {}, state_bits(name, status), "", _cut(line)))
        else:
            self.sensors.append(
                Sensor(name, _number(f[1]), f[2], status.lower(), _thresholds(f[4:]), (), "", _cut(line))
            )
        self._count(dialect)

    def _elist(self, f: list[str], line: str) -> None:
        # a reading may carry states after it: "0 Watts, Presence detected, Failure detected" (HP iLO)
        reading, _, rest = f[4].partition(",")
        value, unit = _reading(reading)
        states = _states(rest) if value is not None else _states(f[4])
        self.sensors.append(Sensor(f[0], value, unit, f[2].lower(), {}, states, "", _cut(line)))
        self._count("ipmitool sdr elist")

    def _freeipmi(self, row: dict[str, str], line: str) -> None:
        state = row.get("state", "").lower()
        state = state if state in _FREEIPMI_STATES else ""
        if "date" in row:
            event = row.get("event", "")
            direction = row.get("event direction", "").lower()
            asserted = "deassert" not in direction
            self.events.append(
                Event(
                    _when(row.get("date", ""), row.get("time", "")),
                    row.get("name", ""),
                    row.get("type", ""),
                    event,
                    asserted,
                    state,
                    _cut(line),
                )
            )
            self._count("ipmi-sel")
            return
        reading = row.get("reading", "")
        value = _number(reading)
        thresholds = {}
        for key, short in (
            ("lower nr", "lnr"),
            ("lower c", "lcr"),
            ("lower nc", "lnc"),
            ("upper nc", "unc"),
            ("upper c", "ucr"),
            ("upper nr", "unr"),
        ):
            number = _number(row.get(key, ""))
            if number is not None:
                thresholds[short] = number
        states = _quoted(row.get("event", "")) if value is None else ()
        unit = row.get("units", "")
        unit = "" if unit == "N/A" else unit
        self.sensors.append(
            Sensor(row.get("name", ""), value, unit, state, thresholds, states, row.get("type", ""), _cut(line))
        )
        self._count("ipmi-sensors")

    # -- ',' separated -------------------------------------------------------------------------
    def _csv(self, f: list[str], line: str) -> None:
        n = len(f)
        if not f[0]:
            return
        if n >= 6 and f[5].lower() in _DIRECTIONS and f[0].isdigit():
            self.events.append(
                Event(_when(f[1], f[2]), f[3], _sel_type(f[3]), f[4], _DIRECTIONS[f[5].lower()], "", _cut(line))
            )
            self._count("ipmitool -c sel")
        elif n == 10 and (f[3].lower() in STATUSES or _HEX.match(f[3])):
            self._sensor_row(f, line, "ipmitool -c sensor")
        elif n == 5 and _ELIST_ID.match(f[1]):
            self._elist(f, line)
        elif n == 5 and f[0].isdigit() and _SEL_CSV_WHEN.match(f[1]) and f[4].endswith("ssertion"):
            event, _, direction = f[4].rpartition(" - ")
            self.events.append(Event(f[1], f[2], f[3], event, direction == "Assertion", "", _cut(line)))
            self._count("SEL CSV export")
        elif n == 4 and f[3].lower() in STATUSES:
            value = _number(f[1])
            self.sensors.append(
                Sensor(f[0], value, f[2] if value is not None else "", f[3].lower(), {}, (), "", _cut(line))
            )
            self._count("ipmitool -c sdr")

    def finish(self, note: str = "") -> BmcCapture:
        self._end_block()
        return BmcCapture(self.sensors, self.events, self.dialects, self.lines, "" if self.dialects else note)


def parse_bmc(text: str) -> BmcCapture:
    """Every sensor and event in ``text``, in any of the dialects above; lines of no dialect are skipped."""
    parser = _Parser()
    first = ""
    for line in bounds.lines(text):
        if not first and line.strip():
            first = _cut(line[: bounds.MAX_LINE].strip())
        parser.feed(line)
    return parser.finish(first)


def bmc_kind(text: str, max_lines: int = 10_000) -> str | None:
    """``bmc-sensor``, ``bmc-sdr`` or ``bmc-sel`` when BMC rows are at least a quarter of the first
    ``max_lines`` non-blank lines, else None."""
    parser = _Parser()
    seen = 0
    for line in bounds.lines(text):
        if line and not line.isspace():
            seen += 1
            if seen > max_lines:
                break
        parser.feed(line)
    got = parser.finish()
    rows = got.rows()
    if not rows or parser.recognised * 4 < seen:
        return None
    d = got.dialects
    sel = sum(v for k, v in d.items() if "sel" in k.lower())
    sensor = d.get("ipmitool sensor", 0) + d.get("ipmitool -c sensor", 0) + d.get("ipmi-sensors", 0)
    if sel * 2 >= rows:
        return "bmc-sel"
    return "bmc-sensor" if sensor * 2 >= rows else "bmc-sdr"
