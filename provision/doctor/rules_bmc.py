"""Findings from the server's BMC: fans, temperatures, power supplies, power draw, and the event log.

Finding ids start ``bmc-``: ``bmc-fan-…``, ``bmc-temperature-…``, ``bmc-psu-…``, ``bmc-power-…``,
``bmc-event-…``. A sensor with thresholds is judged by its reading against them, never by the
status column beside it: OpenBMC prints ``ok`` beside a reading over its upper critical limit and
old HP iLOs print ``cr`` beside a power meter under its only limit. Thresholds that are out of
order (lower limits above upper ones, as some BMCs report for fans) are not trusted; a sensor
without usable thresholds (``sdr list``, ``sdr elist``) is judged by its status. Fans are judged on
their lower side only, temperatures and power on their upper side. Discrete states are decoded
(``sdr get -v``'s "States Asserted", elist's text, FreeIPMI's event column, ``ipmitool sensor``'s
state bits): a PSU redundancy sensor reading ``0x00 | ok`` in ``sdr list`` may have [Redundancy
Lost] asserted, which only those show.

Event-log entries are grouped per finding and sensor (count, first and last time); one whose
latest entry is a deassertion is reported as cleared, a warning. Severities follow ``rules``: a
failed fan or PSU, lost AC or redundancy, a temperature or power past its critical threshold are
errors (the GPUs lose airflow or power next: on a GPU server a PSU loss asserts the GPUs' power
brake); non-critical thresholds, degraded redundancy, chassis intrusion and other events worth a
human are warnings.

``link`` ties a GPU slowdown to its server-side cause in one diagnosis: HW Power Brake to a PSU or
power finding, thermal slowdown to a fan or temperature finding ("caused by …").
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from provision.doctor.facts import Add, Facts
from provision.doctor.model import Finding
from provision.doctor.parse_bmc import BmcCapture, Event, Sensor

KEYS = ("bmc-sensor", "bmc-sdr", "bmc-sel")

_FIX = {
    "fan": (
        "Replace or reseat the failed fan (check its cable and that nothing blocks it), then confirm every fan "
        "reads inside its thresholds: `ipmitool sdr type Fan` and `ipmitool sensor`. GPUs lose airflow first: keep "
        "the node drained until the fans are back."
    ),
    "fan-redundancy": (
        "A fan has failed or was removed, so the chassis runs without spare cooling: find it with "
        "`ipmitool sdr type Fan` and replace it; one more fan failure would throttle or stop the GPUs."
    ),
    "temperature": (
        "Check the inlet air and the airflow: the server's documented inlet range, blanking panels, blocked vents, "
        "failed fans, hot-aisle air recirculating to the front. Compare readings and thresholds with "
        "`ipmitool sdr type Temperature` and `ipmitool sensor`, and keep the GPUs out of service until the "
        "temperature is back under its limit."
    ),
    "psu": (
        "Reseat or replace the failed power supply and check its power cord, PDU outlet and breaker; confirm with "
        "`ipmitool sdr type 'Power Supply'` and `ipmitool sel elist`. Until it is fixed the server runs without PSU "
        "redundancy, and GPU servers that lose a supply assert the GPUs' power brake (HW Power Brake Slowdown): "
        "drain the node."
    ),
    "psu-ac": (
        "A power supply lost its input: check its power cord, the PDU outlet, the breaker and the feed (A/B) it is "
        "on; confirm with `ipmitool sdr type 'Power Supply'`. GPU servers that lose a supply's input assert the "
        "GPUs' power brake: drain the node until every supply has input again."
    ),
    "psu-redundancy": (
        "The power supplies are no longer redundant: a supply failed, lost its input or was pulled. Find which with "
        "`ipmitool sdr type 'Power Supply'` and `ipmitool sel elist`, restore it, and check the BMC's redundancy "
        "policy matches the installed supplies. One more supply loss takes the server down, and GPU servers brake "
        "the GPUs' power on the first."
    ),
    "psu-degraded": (
        "Power redundancy is degraded: check every supply has input and reads OK (`ipmitool sdr type 'Power Supply'`) "
        "and that the BMC's redundancy policy matches the installed supplies."
    ),
    "psu-predictive": (
        "A power supply predicts its own failure: plan its replacement (`ipmitool sdr type 'Power Supply'` names it) "
        "before it fails under GPU load."
    ),
    "psu-config": (
        "A power supply reports a configuration error (mismatched models or wattages, or one the platform does not "
        "support): install matching supplies the server's guide lists."
    ),
    "power": (
        "A power or current sensor is past its critical threshold: check what the server draws against its supplies "
        "and circuit (`ipmitool sensor`, `nvidia-smi -q -d POWER` for the GPUs' share), lower the GPUs' power limits "
        "(`sudo nvidia-smi -pl WATTS`) or move load until the feed is sized for it."
    ),
    "intrusion": (
        "The chassis was opened, or its intrusion switch is faulty: check with whoever has physical access; once "
        "explained, save the event log (`ipmitool sel save FILE`) before clearing it on the BMC."
    ),
    "event": (
        "Read the event in the BMC's log (`ipmitool sel elist`) and follow the server vendor's guidance for it; the "
        "component it names (memory, processor, PCIe device, drive) may need replacing."
    ),
}

_TITLE = {
    "bmc-fan-failed": "Fan failed or below its lower critical threshold",
    "bmc-fan-low": "Fan below its lower non-critical threshold",
    "bmc-fan-redundancy-lost": "Fan redundancy lost",
    "bmc-temperature-critical": "Temperature at or above its upper critical threshold",
    "bmc-temperature-high": "Temperature at or above its upper non-critical threshold",
    "bmc-psu-failed": "Power supply failed",
    "bmc-psu-ac-lost": "Power supply lost its AC input",
    "bmc-psu-redundancy-lost": "Power supply redundancy lost",
    "bmc-psu-redundancy-degraded": "Power supply redundancy degraded",
    "bmc-psu-predictive-failure": "Power supply predicts its failure",
    "bmc-psu-config-error": "Power supply configuration error",
    "bmc-power-critical": "Power or current at or above its upper critical threshold",
    "bmc-power-high": "Power or current at or above its upper non-critical threshold",
    "bmc-event-intrusion": "Chassis intrusion",
    "bmc-event-critical": "BMC event worth a look",
}
_SEVERITY = {
    "bmc-fan-failed": "error",
    "bmc-temperature-critical": "error",
    "bmc-psu-failed": "error",
    "bmc-psu-ac-lost": "error",
    "bmc-psu-redundancy-lost": "error",
    "bmc-power-critical": "error",
}
_FIX_OF = {
    "bmc-fan-failed": "fan",
    "bmc-fan-low": "fan",
    "bmc-fan-redundancy-lost": "fan-redundancy",
    "bmc-temperature-critical": "temperature",
    "bmc-temperature-high": "temperature",
    "bmc-psu-failed": "psu",
    "bmc-psu-ac-lost": "psu-ac",
    "bmc-psu-redundancy-lost": "psu-redundancy",
    "bmc-psu-redundancy-degraded": "psu-degraded",
    "bmc-psu-predictive-failure": "psu-predictive",
    "bmc-psu-config-error": "psu-config",
    "bmc-power-critical": "power",
    "bmc-power-high": "power",
    "bmc-event-intrusion": "intrusion",
    "bmc-event-critical": "event",
}

# A discrete state's text (lowercased) -> what it means; the first match wins.
_STATE_MEANS = (
    ("redundancy lost", "redundancy-lost"),
    ("insufficient resources", "redundancy-lost"),
    ("redundancy degraded", "redundancy-degraded"),
    ("non-redundant", "redundancy-degraded"),
    ("predictive failure", "predictive-failure"),
    ("ac lost", "ac-lost"),
    ("input lost", "ac-lost"),
    ("out-of-range", "ac-lost"),
    ("failure detected", "failed"),
    ("config error", "config-error"),
    ("configuration error", "config-error"),
    ("intrusion", "intrusion"),
)
# Event-log entries worth a human beyond fans, temperatures, power and intrusion (text, lowercased).
_WORTH_A_HUMAN = (
    "uncorrectable ecc",
    "ierr",
    "thermal trip",
    "machine check",
    "pci perr",
    "pci serr",
    "bus fatal error",
    "bus uncorrectable error",
    "fatal nmi",
    "drive fault",
    "critical overtemperature",
)


def _family(name: str, stype: str, unit: str = "") -> str:
    """fan, temperature, power, psu or "" for a sensor, from its type, unit and name."""
    low, t, u = name.lower(), stype.lower(), unit.lower()
    if t == "fan" or u == "rpm" or (u in ("percent", "%") and "fan" in low):
        return "fan"
    if t == "temperature" or u.startswith("degrees") or u == "c":
        return "temperature"
    if t in ("power supply", "power unit"):
        return "psu"
    if t == "current" or u in ("watts", "w", "amps", "a"):
        return "power"
    if "fan" in low:
        return "fan-named"
    if any(w in low for w in ("psu", "power supply", "pwr unit", "power unit", "ps redundancy")) or low.startswith(
        "ps"
    ):
        return "psu"
    return ""


def _ordered(thresholds: dict[str, float]) -> bool:
    values = [thresholds[k] for k in ("lnr", "lcr", "lnc", "unc", "ucr", "unr") if k in thresholds]
    return all(a <= b for a, b in itertools.pairwise(values))


_NAMES = {
    "lnr": "lower non-recoverable",
    "lcr": "lower critical",
    "lnc": "lower non-critical",
    "unc": "upper non-critical",
    "ucr": "upper critical",
    "unr": "upper non-recoverable",
}


def _crossed(s: Sensor, upper: bool) -> tuple[str, str] | None:
    """(critical|warning, why) when the reading is at or past a threshold on its side; by the status
    when the sensor has no usable thresholds; None when inside them."""
    t = s.thresholds if _ordered(s.thresholds) else {}
    if s.reading is not None and t:
        order = (("unr", "ucr"), ("unc",)) if upper else (("lnr", "lcr"), ("lnc",))
        for level, keys in zip(("critical", "warning"), order, strict=True):
            for key in keys:
                if key in t and (s.reading >= t[key] if upper else s.reading <= t[key]):
                    status = f"; the status column says '{s.status}'" if s.status else ""
                    return level, f"reads {s.reading:g} {s.unit}, {_NAMES[key]} threshold {t[key]:g}{status}"
        return None
    status = s.status
    side_ok = status in ("cr", "nr", "nc", "critical", "warning") or status.startswith("u" if upper else "l")
    if not side_ok:
        return None
    reading = f"{s.reading:g} {s.unit}".strip() if s.reading is not None else "no reading"
    if status in ("cr", "nr", "lcr", "lnr", "ucr", "unr", "critical"):
        return "critical", f"reads {reading}, status '{status}'"
    if status in ("nc", "lnc", "unc", "warning"):
        return "warning", f"reads {reading}, status '{status}'"
    return None


def _add(add: Add, ident: str, cause: str, evidence: str, key: str, *, severity: str | None = None) -> None:
    add(
        Finding(
            ident,
            severity or _SEVERITY.get(ident, "warning"),
            f"{_TITLE[ident]}: {cause}",
            evidence,
            _FIX[_FIX_OF[ident]],
        ),
        key,
    )


def _state_ident(meaning: str, family: str) -> str | None:
    if meaning == "intrusion":
        return "bmc-event-intrusion"
    if family in ("fan", "fan-named"):
        return "bmc-fan-redundancy-lost" if meaning == "redundancy-lost" else None
    if family == "psu" or meaning in ("ac-lost", "redundancy-lost", "redundancy-degraded"):
        return f"bmc-psu-{meaning}"
    return None


def _means(text: str) -> str | None:
    low = text.lower()
    return next((means for words, means in _STATE_MEANS if words in low), None)


def _sensor_rules(src: str, s: Sensor, add: Add) -> None:
    family = _family(s.name, s.stype, s.unit)
    where = f"[{src}] {s.line}"
    if s.reading is not None or s.thresholds or family in ("fan", "temperature", "power"):
        if family == "fan":
            hit = _crossed(s, upper=False)
            if hit:
                ident = "bmc-fan-failed" if hit[0] == "critical" else "bmc-fan-low"
                _add(add, ident, f"{s.name} {hit[1].split(',')[0]}", f"{s.name} {hit[1]} {where}", s.name)
        elif family == "temperature":
            hit = _crossed(s, upper=True)
            if hit:
                ident = "bmc-temperature-critical" if hit[0] == "critical" else "bmc-temperature-high"
                _add(add, ident, f"{s.name} {hit[1].split(',')[0]}", f"{s.name} {hit[1]} {where}", s.name)
        elif family == "power":
            hit = _crossed(s, upper=True)
            if hit:
                ident = "bmc-power-critical" if hit[0] == "critical" else "bmc-power-high"
                _add(add, ident, f"{s.name} {hit[1].split(',')[0]}", f"{s.name} {hit[1]} {where}", s.name)
    # a state belongs to what the sensor is named for: "Power Supply 1 | 0 Watts, Failure detected" is a PSU
    named = "psu" if _family(s.name, s.stype) == "psu" else family
    for state in s.states:
        meaning = _means(state)
        ident = _state_ident(meaning, named) if meaning else None
        if ident:
            _add(add, ident, f"{s.name} reports {state}", f"{s.name}: state [{state}] asserted {where}", s.name)


def _event_ident(e: Event) -> str | None:
    family = _family(e.sensor, e.stype)
    low = e.event.lower().replace(" - ", " ")
    meaning = _means(e.event)
    if meaning:
        ident = _state_ident(meaning, family)
        if ident:
            return ident
    lower = "lower" in low and "going low" in low
    upper = "upper" in low and "going high" in low
    critical = "critical" in low.replace("non-critical", "") or "non-recoverable" in low
    if family in ("fan", "fan-named") and lower:
        return "bmc-fan-failed" if critical else "bmc-fan-low"
    if family == "temperature" and upper:
        return "bmc-temperature-critical" if critical else "bmc-temperature-high"
    if family == "power" and upper:
        return "bmc-power-critical" if critical else "bmc-power-high"
    if any(words in low for words in _WORTH_A_HUMAN) or e.severity == "critical":
        return "bmc-event-critical"
    return None


def _event_rules(events: Iterable[tuple[str, Event]], add: Add) -> None:
    groups: dict[tuple[str, str], list[tuple[str, Event]]] = {}
    for src, e in events:
        ident = _event_ident(e)
        if ident:
            groups.setdefault((ident, e.sensor), []).append((src, e))
    for (ident, sensor), hits in groups.items():
        asserted = [(src, e) for src, e in hits if e.asserted]
        if not asserted:
            continue  # only deassertions kept (the log's start was cut): nothing to report
        src, first = asserted[0]
        last = asserted[-1][1]
        cleared = not hits[-1][1].asserted
        n = len(asserted)
        when = f"at {last.when}" if last.when else "in the event log"
        cause = f"{sensor}: {last.event} {when}"
        evidence = f"event log: {n} assertion(s) of {first.event!r} on {sensor}, first {first.when or '?'}"
        if n > 1:
            evidence += f", last {last.when or '?'}"
        if cleared:
            evidence += f"; cleared (deasserted) at {hits[-1][1].when or '?'}"
        evidence += f" [{src}] {first.line}"
        severity = "warning" if cleared else None
        _add(add, ident, cause + (" (since cleared)" if cleared else ""), evidence, sensor, severity=severity)


MAX_SENSORS = 16  # sensors named per finding id; more are counted in the last one's evidence


def bmc_rules(facts: Facts, add: Add) -> None:
    """The findings of every BMC capture read (sections or files of the ``KEYS`` inputs); at most
    MAX_SENSORS per finding id, the rest counted (a BMC that lists 10,000 failed fans is one fault)."""
    kept: dict[str, dict[str, Finding]] = {}
    more: dict[str, set[str]] = {}

    def bounded(finding: Finding, key: str) -> None:
        same = kept.setdefault(finding.id, {})
        if key in same or len(same) < MAX_SENSORS:
            old = same.get(key)
            if old is None or (old.severity != "error" and finding.severity == "error"):
                same[key] = finding
        else:
            more.setdefault(finding.id, set()).add(key)

    _bmc_rules(facts, bounded)
    for ident, same in kept.items():
        extra = len(more.get(ident, ()))
        for n, (key, finding) in enumerate(same.items(), 1):
            last = extra and n == len(same)
            add(
                finding._replace(evidence=f"{finding.evidence}; and {extra} more sensor(s) like it")
                if last
                else finding,
                key,
            )


def _bmc_rules(facts: Facts, add: Add) -> None:
    events: list[tuple[str, Event]] = []
    captures = [(src, capture) for key in KEYS for src, capture in facts.inputs(key)]
    for src, capture in captures:
        assert isinstance(capture, BmcCapture)
        for s in capture.sensors:
            _sensor_rules(src, s, add)
        events.extend((src, e) for e in capture.events)
    _event_rules(events, add)
    if captures and not any(capture.rows() for _, capture in captures):
        src, capture = captures[0]
        why = capture.note or "no sensor or event in its output"
        title = why if why.endswith("BMC not read") else f"The BMC was not read: {why}"
        add(Finding("bmc-not-read", "info", title, f"[{src}] {why}", _NOT_READ), "")


_NOT_READ = (
    "To have doctor read the server's fans, temperatures and power supplies, install ipmitool "
    "(`sudo apt-get install ipmitool` or `sudo dnf install ipmitool`) and load the in-band IPMI drivers "
    "(`sudo modprobe ipmi_devintf ipmi_si`); /dev/ipmi0 needs root (doctor -i --sudo). A virtual machine or a "
    "machine without a BMC has none to read."
)


# -- a GPU slowdown and its cause on the server -----------------------------------------------------
_CAUSES = {
    "clocks-power-brake": ("bmc-psu", "bmc-power"),
    "clocks-hw-thermal-slowdown": ("bmc-fan", "bmc-temperature"),
    "clocks-sw-thermal-slowdown": ("bmc-fan", "bmc-temperature"),
    "clocks-hw-slowdown": ("bmc-psu", "bmc-power", "bmc-fan", "bmc-temperature"),
}


def link(findings: list[Finding]) -> list[Finding]:
    """GPU slowdown findings with their likely cause among the BMC's findings (and the BMC finding
    with the slowdown it explains), errors first; the rest unchanged."""
    bmc = sorted((f for f in findings if f.id.startswith("bmc-")), key=lambda f: f.severity != "error")
    gpu_ids = {f.id for f in findings if f.id in _CAUSES}
    if not bmc or not gpu_ids:
        return findings
    out = []
    explained: dict[str, list[str]] = {}
    for f in findings:
        prefixes = _CAUSES.get(f.id)
        cause = next((b for b in bmc if b.id.startswith(prefixes)), None) if prefixes else None
        if cause is None:
            out.append(f)
            continue
        what = cause.title.split(": ", 1)[-1]
        explained.setdefault(cause.id + "\0" + cause.title, []).append(f"{f.title} ({f.id})")
        out.append(
            f._replace(
                title=f"{f.title}, caused by {what}",
                evidence=f"{f.evidence}; the BMC: {cause.title} ({cause.id})",
                fix=f"The server is the likely cause ({cause.id}): act on that finding first. {f.fix}",
            )
        )
    final = []
    for f in out:
        shown = explained.get(f.id + "\0" + f.title)
        if shown:
            more = f" and {len(shown) - 1} more GPU finding(s)" if len(shown) > 1 else ""
            f = f._replace(evidence=f"{f.evidence}; the GPUs show it: {shown[0]}{more}")  # noqa: PLW2901
        final.append(f)
    return final


__all__ = ["KEYS", "bmc_rules", "link"]
