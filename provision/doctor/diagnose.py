"""Entry points: collector sections or capture files in, a ``Report`` out.

Bad input (a file that cannot be read, is empty, binary, foreign, truncated beyond parsing, or
an NVIDIA output with nothing to diagnose) raises ``InputError`` naming the file and what it
looks like; nothing here lets any other exception out for any input text. Sections of a
collection (``diagnose_texts``, and the sections of a bundle file) are read leniently: one that
cannot be parsed is reported as a ``section-unreadable`` warning and the rest is still analysed.
A section longer than ``bounds.SECTION_CHARS`` is cut (a log keeps its newest part) and reported as
an ``output-cut`` warning.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterable, Mapping
from typing import Any

from provision.doctor import bounds, parse_log
from provision.doctor.classify import (
    DIAGNOSABLE,
    INFO_KEYS,
    KINDS,
    SECTION_KEYS,
    classify,
    split_bundle,
    split_capture_bundle,
)
from provision.doctor.facts import Facts
from provision.doctor.inputs import BY_KEY, run_rules
from provision.doctor.model import Finding, Read, Report, sort_findings, worse
from provision.doctor.parse_smi import ParseFailure
from provision.doctor.rules import gpu_rules, nvlink_rules, persistence_rule
from provision.doctor.rules_bmc import link
from provision.doctor.rules_host import host_rules, smi_hung_rule
from provision.doctor.rules_log import (
    cut_rules,
    fabric_rules,
    kernel_rules,
    unreadable_rules,
    xid_rules,
)
from provision.errors import InputError

MAX_BYTES = 256 * 1024 * 1024
HINT = (
    "doctor reads nvidia-smi -q -x, -q (also -q -d ...), the default table, --query-gpu CSV with its header, "
    "nvlink -s, nvidia-smi/NVML error output, kernel logs (dmesg, journalctl -k), the fabric manager log, "
    "application logs with CUDA/framework errors, /proc/driver/nvidia/version, lsmod or /proc/modules, "
    "mokutil --sb-state, the BMC (ipmitool sensor, sdr, sel; FreeIPMI ipmi-sensors, ipmi-sel), "
    "and collector or nvidia-smi capture bundles"
)


class _Collector:
    """Findings de-duplicated by (id, key); a repeat keeps the first evidence and the worse severity."""

    def __init__(self) -> None:
        self.found: dict[tuple[str, str], Finding] = {}

    def add(self, finding: Finding, key: str) -> None:
        slot = (finding.id, key)
        old = self.found.get(slot)
        if old is None or worse(finding.severity, old.severity) != old.severity:
            self.found[slot] = finding


def _lenient(key: str, text: str, source: str, facts: Facts, reads: list[Read]) -> None:
    """``_analyse`` for one section of a collection: a section that cannot be read is listed and
    reported (``section-unreadable``, a warning) instead of failing the whole diagnosis."""
    try:
        _analyse(key, text, source, facts, reads)
    except ParseFailure as exc:
        facts.unreadable.append((source, key, str(exc), _first_line(text)))
        reads.append(Read(source, key, f"could not be read: {exc}", analysed=False))


def _first_line(text: str) -> str:
    return next((ln.strip()[: bounds.MAX_LINE] for ln in bounds.lines(text) if ln and not ln.isspace()), "")


# Sections whose newest part matters when one is cut: logs, which end with what happened last.
_LOGS = frozenset({"kernel-log", "fabricmanager-log", "app-log", "bmc-sel"})


def _capped(key: str, text: str, source: str, facts: Facts) -> str:
    """At most SECTION_CHARS of a section: a log's last (from a line start), anything else's first."""
    if len(text) <= bounds.SECTION_CHARS:
        return text
    if key in _LOGS:
        kept = text[-bounds.SECTION_CHARS :]
        start = kept.find("\n", 0, bounds.MAX_LINE)  # drop the line the cut went through
        kept, part = (kept[start + 1 :] if start >= 0 else kept), "last"
    else:
        kept, part = text[: bounds.SECTION_CHARS], "first"
    facts.cut.append((source, key, len(text), part))
    return kept


def _analyse(key: str, text: str, source: str, facts: Facts, reads: list[Read]) -> None:
    """Parse one section into ``facts``; ParseFailure when a structured section cannot be read."""
    if not text.strip():
        reads.append(Read(source, key, "empty: not analysed", analysed=False))
        return
    row = BY_KEY.get(key)
    if row is None:
        shown = _first_line(text)[:80] if key in INFO_KEYS else "unknown section"
        reads.append(Read(source, key, f"{shown}: not analysed", analysed=False))
        return
    if not row.structured:
        reads.append(Read(source, key, row.read(text, source, facts)))
        return
    try:
        reads.append(Read(source, key, row.read(text, source, facts)))
    except ParseFailure:
        messages = parse_log.scan_messages(text)
        if not messages:
            raise
        facts.messages.extend((source, m) for m in messages)
        reads.append(Read(source, "nvidia-smi-stderr", f"error output instead of {KINDS[key]}"))


def _report(facts: Facts, reads: list[Read], matrix: Any) -> Report:
    out = _Collector()
    smi_hung_rule(facts, out.add)
    for g in facts.gpus:
        gpu_rules(g, out.add)
    persistence_rule(facts.gpus, out.add)
    for source, gpus in facts.nvlink:
        nvlink_rules(gpus, source, out.add)
    if any(log.xids for _, log in facts.kernel):
        from provision.doctor.xid import load_xid_catalog

        xid_rules(facts, load_xid_catalog(), out.add)
    kernel_rules(facts, out.add)
    fabric_rules(facts, out.add)
    unreadable_rules(facts, out.add)
    cut_rules(facts, out.add)
    host_rules(facts, matrix, out.add)
    run_rules(facts, out.add)  # the inputs table's own rules (the BMC's)
    return Report(sort_findings(link(list(out.found.values()))), tuple(reads))


def diagnose_texts(sections: Mapping[str, str], *, matrix: Any = None) -> Report:
    """Analyse the collector's sections (keys: ``SECTION_KEYS``; a missing key is not analysed).

    A structured section (XML, -q, table, nvlink) that holds an nvidia-smi error message instead
    of its output is analysed as error output. A section that cannot be read at all (truncated
    XML from a killed nvidia-smi, an unsupported subcommand's usage message) does not stop the
    diagnosis: it is listed under ``read`` and reported as a ``section-unreadable`` warning.
    Unknown keys are listed and not analysed.
    """
    facts = Facts()
    reads: list[Read] = []
    for key, raw in sections.items():
        if not isinstance(raw, str):
            raise InputError(f"section {key}: expected text, got {type(raw).__name__}")
        text = raw.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
        _section(key, text, f"section {key}", facts, reads)
    return _report(facts, reads, matrix)


def _section(key: str, text: str, source: str, facts: Facts, reads: list[Read]) -> None:
    if key in SECTION_KEYS or key in INFO_KEYS:
        _lenient(key, _capped(key, text, source, facts), source, facts, reads)
    else:
        reads.append(Read(source, key, "unknown section key: not analysed", analysed=False))


def decode_bytes(data: bytes) -> str:
    """Text of a capture: UTF-16 with a BOM (PowerShell redirects), else UTF-8; newlines normalised."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = data.decode("utf-16", errors="replace")
    elif data.startswith(codecs.BOM_UTF8):
        text = data[3:].decode("utf-8", errors="replace")
    else:
        text = data.decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_text(path: str | os.PathLike[str]) -> str:
    """A capture file's text (UTF-8, UTF-16 with BOM); InputError when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            # read(MAX_BYTES + 1) would allocate the whole limit up front, whatever the file's
            # size: read in blocks instead, stopping once past the limit (pipes have no size)
            blocks: list[bytes] = []
            total = 0
            while total <= MAX_BYTES and (block := handle.read(4 * 1024 * 1024)):
                blocks.append(block)
                total += len(block)
            data = b"".join(blocks)
            del blocks
    except OSError as exc:
        raise InputError(
            f"{os.fspath(path)}: cannot read ({exc.strerror or exc})", hint="check the path and its permissions"
        ) from None
    if len(data) > MAX_BYTES:
        raise InputError(
            f"{os.fspath(path)}: larger than {MAX_BYTES // (1024 * 1024)} MiB",
            hint="cut the log to the time window of interest (journalctl -k --since ...)",
        )
    return decode_bytes(data)


def _file(path: str, text: str, facts: Facts, reads: list[Read]) -> None:
    name = os.path.basename(path) or path
    kind = classify(text, name)
    try:
        if kind == "collector-bundle":
            for key, body in split_bundle(text).items():
                _section(key, body, f"{name}:{key}", facts, reads)
        elif kind == "capture-bundle":
            blocks = split_capture_bundle(text)
            for title, key, body in blocks:
                source = f"{name}:{title}"
                if key:
                    _lenient(key, body, source, facts, reads)
                else:
                    reads.append(Read(source, "capture-section", "no health data: not analysed", analysed=False))
            if not any(key for _, key, _ in blocks):
                raise ParseFailure("a capture bundle without any nvidia-smi -q / table / nvlink section")
        elif kind in DIAGNOSABLE:
            _analyse(kind, text, name, facts, reads)
        else:
            rerun = "rerun nvidia-smi with --format=csv (with the header); " if kind == "query-csv-noheader" else ""
            raise InputError(f"{path}: looks like {KINDS[kind]}; nothing doctor can diagnose", hint=rerun + HINT)
    except ParseFailure as exc:
        raise InputError(f"{path}: looks like {KINDS.get(kind, kind)} but cannot be read: {exc}", hint=HINT) from None


def diagnose_files(paths: Iterable[str | os.PathLike[str]], *, matrix: Any = None) -> Report:
    """Read, classify and analyse each file; all of them go into one report. A large kernel or
    fabric manager log is read line by line (`_stream_file`): memory stays flat with its size."""
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise InputError("no files to diagnose", hint=HINT)
    facts = Facts()
    reads: list[Read] = []
    for path in paths:
        if not _stream_file(path, facts, reads):
            _file(path, read_text(path), facts, reads)
    return _report(facts, reads, matrix)


STREAM_FROM = 8 * 1024 * 1024  # files at least this large are classified by their head, then streamed
HEAD_BYTES = 1024 * 1024
LINE_BYTES = 64 * 1024
_STREAMED = frozenset({"kernel-log", "fabricmanager-log"})


def _stream_file(path: str, facts: Facts, reads: list[Read]) -> bool:
    """Analyse a large line-oriented log without holding it: classify its first MiB and, for a
    kernel or fabric manager log, parse it one line at a time. False: read it whole instead."""
    try:
        size = os.path.getsize(path)
        if size < STREAM_FROM:
            return False
        with open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
            if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                return False  # UTF-16 has no newline bytes to split on: read whole (size-limited)
            name = os.path.basename(path) or path
            # the head's last line may be cut: classify whole lines only
            kind = classify(decode_bytes(head[: head.rfind(b"\n") + 1] or head), name)
            if kind not in _STREAMED:
                return False
            handle.seek(0)
            # readline's limit bounds memory for a file without newlines too (each piece a line)
            chunks = iter(lambda: handle.readline(LINE_BYTES), b"")
            lines = (part for raw in chunks for part in _decode_line(raw).split("\n"))
            if kind == "kernel-log":
                log = parse_log.parse_kernel_lines(lines)
                facts.kernel.append((name, log))
                reads.append(Read(name, kind, f"{log.summary()} (read as a stream)"))
            else:
                events, count = parse_log.parse_fabric_manager_lines(lines)
                facts.fabric.append((name, events))
                reads.append(Read(name, kind, f"{count} log lines, {len(events)} error(s) (read as a stream)"))
    except OSError as exc:
        raise InputError(
            f"{path}: cannot read ({exc.strerror or exc})", hint="check the path and its permissions"
        ) from None
    return True


def _decode_line(raw: bytes) -> str:
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[3:]
    return raw.decode("utf-8", errors="replace").rstrip("\r\n").replace("\r", "\n")


def diagnose_named_texts(items: Iterable[tuple[str, str]], *, matrix: Any = None) -> Report:
    """``diagnose_files`` for texts already in memory: (name, text) pairs, classified by content."""
    facts = Facts()
    reads: list[Read] = []
    seen = 0
    for name, text in items:
        seen += 1
        _file(name, text.encode("utf-8", "replace").decode("utf-8"), facts, reads)
    if not seen:
        raise InputError("no files to diagnose", hint=HINT)
    return _report(facts, reads, matrix)


__all__ = ["HINT", "decode_bytes", "diagnose_files", "diagnose_named_texts", "diagnose_texts", "read_text"]
