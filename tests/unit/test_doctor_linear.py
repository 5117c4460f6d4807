"""doctor's time is linear in what it reads, whatever a host prints (issue 22).

Every regular expression in provision/doctor is found by reading the source: each `re.compile`,
`re.search`, `re.match`, ... call (a pattern that is not a literal fails
test_every_pattern_is_a_literal, so none escapes the sweep). Every parser is found by its
signature: a public function of the doctor's modules whose first parameter is `text`, `line` or
`stream`. A new pattern or parser is covered without touching this file.

Each regex is fed 1 MB lines without a newline, built from the pattern itself (`adversarial`): at
every place where one of its repeats starts, the pattern's own text up to there followed
by a run of what that repeat takes (or of spaces), and that prefix repeated to 1 MB, besides runs
of spaces, digits, colons, letters and newlines; each must be searched, matched and scanned in
under 2 s of CPU. Each parser, and
doctor on each collector section, gets generic 1 MB lines, a line of every pattern's prefixes,
a flood of continuation lines and of over-long lines, likewise under 2 s. Time from 256 KB to
1 MB grows about fourfold (linear), not sixteenfold (quadratic).

benchmarks/bench_doctor_log.py --hostile prints these times per rule.
"""

from __future__ import annotations

import ast
import inspect
import re
import time
from pathlib import Path

import pytest
from support import ROOT

try:  # Python 3.11+
    from re import _constants as sre_constants
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

DOCTOR = ROOT / "provision" / "doctor"
MB = 1 << 20
LIMIT_S = 2.0
_RE_CALLS = {"compile": 1, "search": 2, "match": 2, "fullmatch": 2, "findall": 2, "finditer": 2, "split": 3}
_RE_CALLS |= {"sub": 4, "subn": 4}


# -- every pattern, read from the source -----------------------------------------------------------
def _flags(node: ast.AST | None) -> int:
    if node is None:
        return 0
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "re":
        return int(getattr(re, node.attr))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _flags(node.left) | _flags(node.right)
    raise AssertionError(f"flags not read: {ast.dump(node)}")


def re_calls(directory: Path = DOCTOR) -> list[tuple[str, str | None, int]]:
    """(file:line, pattern or None when it is not a literal, flags) for every re.* call in doctor."""
    out = []
    for path in sorted(directory.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "re"
                and node.func.attr in _RE_CALLS
            ):
                continue
            where = f"{path.name}:{node.lineno}"
            first = node.args[0] if node.args else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                out.append((where, None, 0))
                continue
            flag_node = next((k.value for k in node.keywords if k.arg == "flags"), None)
            if len(node.args) > _RE_CALLS[node.func.attr]:
                flag_node = node.args[_RE_CALLS[node.func.attr]]
            out.append((where, first.value, _flags(flag_node)))
    return out


PATTERNS = [(where, pattern, flags) for where, pattern, flags in re_calls() if pattern is not None]


def test_every_pattern_is_a_literal():
    """A pattern built at run time would escape this sweep: doctor has none."""
    assert [where for where, pattern, _ in re_calls() if pattern is None] == []
    assert len(PATTERNS) >= 90, "the sweep found fewer patterns than doctor has"


# -- adversarial lines, built from a pattern ---------------------------------------------------------
_C = sre_constants
_CATEGORY = {
    _C.CATEGORY_DIGIT: "7",
    _C.CATEGORY_SPACE: " ",
    _C.CATEGORY_WORD: "a",
    _C.CATEGORY_NOT_DIGIT: "a",
    _C.CATEGORY_NOT_SPACE: "a",
    _C.CATEGORY_NOT_WORD: " ",
}
_REPEATS = {_C.MAX_REPEAT, _C.MIN_REPEAT, getattr(_C, "POSSESSIVE_REPEAT", _C.MAX_REPEAT)}
_SKIP = {_C.AT, _C.ASSERT, _C.ASSERT_NOT, _C.GROUPREF}
FILLS = (" ", "7", ":", "a", "\n")
BRANCHES = 8  # witnesses kept per pattern (a branch each)


def _one_char(items: list) -> str:
    if any(op == _C.NEGATE for op, _ in items):
        refused = {chr(av) for op, av in items if op == _C.LITERAL}
        return next(ch for ch in "a7 :xz" if ch not in refused)
    op, av = items[0]
    if op == _C.LITERAL:
        return chr(av)
    if op == _C.RANGE:
        return chr(av[0])
    if op == _C.CATEGORY:
        return _CATEGORY.get(av, "a")
    return "a"


def witnesses(seq) -> list[tuple[str, list[tuple[int, str]]]]:
    """Strings the parsed pattern matches, one per branch choice (at most BRANCHES), each with the
    places where a repeat starts in it and a character that repeat takes (where one ends, the
    next element starts: the whole witness is the last place)."""
    outs: list[tuple[str, list[tuple[int, str]]]] = [("", [])]

    def extend(parts: list[tuple[str, list[tuple[int, str]]]]) -> None:
        nonlocal outs
        outs = [(o + s, oc + [(len(o) + k, ch) for k, ch in sc]) for o, oc in outs for s, sc in parts][:BRANCHES]

    for op, av in seq:
        if op == _C.LITERAL:
            extend([(chr(av), [])])
        elif op == _C.NOT_LITERAL:
            extend([("a" if chr(av) != "a" else "b", [])])
        elif op == _C.ANY:
            extend([("a", [])])
        elif op == _C.IN:
            extend([(_one_char(av), [])])
        elif op in _REPEATS:
            low, _high, sub = av
            parts = []
            for text, cuts in witnesses(sub):
                n = max(low, 1)
                ch = text[:1] or " "
                parts.append((text * n, [(0, ch), *cuts]))
            extend(parts)
        elif op == _C.SUBPATTERN:
            extend(witnesses(av[-1]))
        elif op == getattr(_C, "ATOMIC_GROUP", None):
            extend(witnesses(av))
        elif op == _C.BRANCH:
            extend([w for branch in av[1] for w in witnesses(branch)])
        elif op in _SKIP:
            continue
        else:
            raise AssertionError(f"no witness for {op}")
    return outs


def _repeat(text: str, size: int) -> str:
    return (text * (size // len(text) + 1))[:size]


def adversarial(pattern: str, flags: int, size: int) -> dict[str, str]:
    """Lines of ``size`` characters that make a backtracking pattern slow, by name: runs of
    spaces, digits, colons, letters and newlines; at each place a repeat starts or ends, the
    pattern's text up to there followed by a run of what the repeat takes, or of spaces; that
    prefix repeated."""
    cases = {f"run of {fill!r}": fill * size for fill in FILLS}
    for text, cuts in witnesses(sre_parse.parse(pattern, flags)):
        points = {*cuts, (len(text), "a")}
        for at, ch in sorted(points):
            prefix = text[:at]
            for fill in {ch, " "}:
                cases[f"{prefix!r} + run of {fill!r}"] = (prefix + fill * size)[:size]
            if prefix.strip():
                cases[f"{prefix!r} repeated"] = _repeat(prefix, size)
    return cases


def _exercise(rx: re.Pattern[str], text: str) -> None:
    for _ in rx.finditer(text):
        pass
    rx.match(text)
    rx.fullmatch(text)


def _timed(fn, *args) -> float:
    """CPU seconds of this process: what the rule costs, not what other jobs on the machine take."""
    t0 = time.process_time()
    fn(*args)
    return time.process_time() - t0


STAGES = (16 << 10, 128 << 10)  # smaller sizes first: a quadratic case fails there, not after an hour


def linear_seconds(fn, make) -> tuple[float, str]:
    """The slowest case's time at 1 MB, (seconds, case): ``make(size)`` gives the cases by name.
    Each case runs at 16 KB and 128 KB first; one whose time there, scaled linearly to 1 MB,
    passes the limit (the least of three runs, so a busy machine is not taken for a slow rule) is
    reported with that scaled time, without the 1 MB run a quadratic case would take hours for."""
    worst = (0.0, "")
    names = list(make(64))
    for size in (*STAGES, MB):
        cases = make(size)
        scale = MB / size
        for name in names:
            seconds = _timed(fn, cases[name])
            if seconds * scale > LIMIT_S / 2:
                seconds = min(seconds, *(_timed(fn, cases[name]) for _ in range(2)))
            if seconds * scale > LIMIT_S:
                return seconds * scale, f"{name} (at {size >> 10} KB: {seconds:.3f} s)"
            if size == MB:
                worst = max(worst, (seconds, name))
    return worst


def _slowest(rx: re.Pattern[str], pattern: str, flags: int) -> tuple[float, str]:
    return linear_seconds(lambda text: _exercise(rx, text), lambda size: adversarial(pattern, flags, size))


@pytest.mark.parametrize(("where", "pattern", "flags"), PATTERNS, ids=[w for w, _, _ in PATTERNS])
def test_every_regex_is_linear_on_1mb_lines(where, pattern, flags):
    seconds, case = _slowest(re.compile(pattern, flags), pattern, flags)
    assert seconds < LIMIT_S, f"{where} {pattern!r}: {seconds:.2f} s on {case[:160]}"


def test_the_generator_finds_the_quadratic_patterns_doctor_had():
    """The sweep would have caught what issue 22 found: on the slowest line the generator builds
    for each of these old patterns of doctor's, eight times the input takes over 24 times as long
    (512 bytes against 4 KB: linear is 8, quadratic 64; every pattern doctor has now is under 2 s at
    1 MB)."""
    old = [
        (r"NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", 0),
        (r"(?:CUDA runtime version|runtime version)\s*[:=]?\s*(\d{1,3}\.\d{1,3})", re.I),
        (r"^(?P<key>\S.*?)\s+:(?:\s(?P<value>.*))?$", 0),
        (r"[Oo]ut of memory: Killed process \d+ \(([^)]*)\)", 0),
        (r"\s*<br>\s*", 0),
    ]
    for pattern, flags in old:
        rx = re.compile(pattern, flags)
        small = adversarial(pattern, flags, 512)
        name = max(small, key=lambda n: _timed(_exercise, rx, small[n]))
        large = adversarial(pattern, flags, 4 << 10)[name]
        ratio = min(_timed(_exercise, rx, large) for _ in range(2)) / min(
            _timed(_exercise, rx, small[name]) for _ in range(5)
        )
        assert ratio > 24, (pattern, name, ratio)


# -- every parser -----------------------------------------------------------------------------------
def parsers() -> list[tuple[str, object]]:
    """Public functions of doctor's reading modules (every parse_*.py among them) whose first
    parameter is the text they read."""
    import importlib

    out = []
    readers = {"bounds", "classify", "state", "diagnose", "inputs", *(p.stem for p in DOCTOR.glob("parse_*.py"))}
    for module_name in sorted(readers):
        module = importlib.import_module(f"provision.doctor.{module_name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("_") or fn.__module__ != module.__name__:
                continue
            params = list(inspect.signature(fn).parameters.values())
            if params and params[0].name in ("text", "line", "stream"):
                out.append((f"{module.__name__.rsplit('.', 1)[1]}.{name}", fn))
    return out


PARSERS = parsers()


def _call(fn, text: str):
    params = list(inspect.signature(fn).parameters.values())
    first = params[0].name
    arg = [text] if first == "stream" else text
    required = [p for p in params[1:] if p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD]
    from provision.doctor.parse_smi import ParseFailure

    try:
        return fn(arg, *["x" for _ in required])
    except ParseFailure:
        return None


def hostile_inputs(size: int) -> dict[str, str]:
    """Lines a hostile host prints at a parser: generic runs, every pattern's prefixes in one
    line, a flood of continuation lines, of over-long lines, of markers, of table rows."""
    prefixes = sorted(
        {w[:n] for _, p, f in PATTERNS for w, _ in witnesses(sre_parse.parse(p, f)) for n in (len(w) // 2, len(w))}
    )
    mixed = "".join(p for p in prefixes if "\n" not in p)
    cases = {f"run of {fill!r}": fill * size for fill in (" ", "7", ":", "a", "\t", "|", "\n", " \n")}
    cases["every pattern's prefix, one line"] = _repeat(mixed, size)
    cases["every pattern's prefix, a line each"] = _repeat("\n".join(prefixes) + "\n", size)
    cases["continuation lines"] = "[ 1.0] NVRM: Xid (PCI:0000:17:00): 79, x\n" + _repeat("  NVRM: continued\n", size)
    cases["over-long lines"] = _repeat("[ 1.0] NVRM: " + "a" * 8000 + "\n", size)
    cases["forged markers"] = _repeat("===== provision-doctor: kernel-log ===== " + "0" * 32 + "\n", size)
    cases["table rows"] = "| NVIDIA-SMI 1  Driver Version: 1  CUDA Version: 1 |\n" + _repeat(
        "|   0  A" + " " * 200 + "On  |   00000000:17:00.0 Off |" + " " * 200 + "|\n", size
    )
    cases["nvidia-smi -q lines"] = "==============NVSMI LOG==============\nGPU 00000000:17:00.0\n" + _repeat(
        "    Product Name" + " " * 100 + ": x\n", size
    )
    # the BMC's dialects (issue 25): a row of each, a -v block's continuation lines, a FreeIPMI header
    # over rows, and rows that each name another failed sensor (each a finding, were it not bounded)
    cases["BMC sensor rows"] = _repeat("Fan1 | 0.000 | RPM | ok | na | 500 | 600 | na | na | na\n", size)
    cases["BMC sdr -v continuation"] = "Sensor ID : PSU (0x1)\n States Asserted : Power Unit\n" + _repeat(
        "  [Redundancy Lost]" + " " * 100 + "\n", size
    )
    cases["BMC FreeIPMI rows"] = "ID | Name | Type | State | Reading | Units | Event\n" + _repeat(
        "1 | PS1 | Power Supply | Critical | N/A | N/A | " + "'Power Supply Failure detected' " * 20 + "\n", size
    )
    cases["BMC failed sensors, each another"] = "".join(
        f"{i} | 01/01/2024 | 00:00:{i % 60:02} | Fan FAN{i} | Lower Critical going low | Asserted\n"
        f"Fan{i} | 0 RPM | cr\n{i},2024/01/01 00:00:00,PS{i},Power Supply,Failure detected - Assertion\n"
        for i in range(size // 120)
    )
    cases["BMC fields"] = _repeat("a" + " |" * 2000 + "\n" + "a" + ", " * 2000 + "\n", size)
    return cases


@pytest.mark.parametrize(("name", "fn"), PARSERS, ids=[n for n, _ in PARSERS])
def test_every_parser_is_linear_on_1mb_inputs(name, fn):
    seconds, case = linear_seconds(lambda text: _call(fn, text), hostile_inputs)
    assert seconds < LIMIT_S, f"{name}: {seconds:.2f} s on {case}"


def test_the_parsers_were_found():
    names = {n for n, _ in PARSERS}
    assert {
        "parse_log.parse_kernel_log",
        "parse_smi.parse_table",
        "classify.classify",
        "classify.split_bundle",
    } <= names
    assert {"parse_log.scan_messages", "parse_smi.parse_xml", "parse_log.parse_pci"} <= names
    assert {"parse_bmc.parse_bmc", "parse_bmc.bmc_kind"} <= names


def _section_keys() -> list[str]:
    from provision.doctor import SECTION_KEYS

    return list(SECTION_KEYS)


@pytest.mark.parametrize("key", _section_keys())
def test_doctor_on_each_section_is_linear_on_1mb_inputs(key):
    from provision.doctor import diagnose_texts

    seconds, case = linear_seconds(lambda text: diagnose_texts({key: text}), hostile_inputs)
    assert seconds < LIMIT_S, f"section {key}: {seconds:.2f} s on {case}"


def test_time_grows_linearly_from_256kb_to_1mb():
    """Four times the input takes about four times as long (a quadratic rule takes sixteen):
    doctor over every collector section at once, each given another hostile input."""
    from provision.doctor import SECTION_KEYS, diagnose_texts

    def run(size: int) -> float:
        inputs = list(hostile_inputs(size).values())
        sections = {key: inputs[i % len(inputs)] for i, key in enumerate(SECTION_KEYS)}
        return min(_timed(diagnose_texts, sections) for _ in range(3))

    small, large = run(256 << 10), run(MB)
    assert large < 7 * small, f"256 KB: {small:.3f} s, 1 MB: {large:.3f} s (linear: 4x, quadratic: 16x)"


# -- the payloads ----------------------------------------------------------------------------
def test_a_40kb_application_line_is_read_in_linear_time():
    """Issue 22: a 40 KB application line took ~30 s (CUDA_RUNTIME's two \\s* around an optional
    colon tried every split of a run of spaces)."""
    from provision.doctor import diagnose_texts

    app = "CUDA driver version is insufficient for CUDA runtime version\n" + "runtime version" + " " * 40_000 + "x\n"
    t0 = time.process_time()
    report = diagnose_texts({"app-log": app * 25})  # 1 MB
    assert time.process_time() - t0 < LIMIT_S
    assert "cuda-driver-insufficient" in report.ids()


def test_a_1mb_nvrm_version_line_is_read_in_linear_time():
    """Issue 22: a 1 MB `NVRM version:` line took ~40 s (".*" after each of 80,000 starts)."""
    from provision.doctor import classify, diagnose_named_texts, diagnose_texts

    line = _repeat("NVRM version:", MB)
    t0 = time.process_time()
    classify(line)
    diagnose_texts({"proc-driver-version": line, "kernel-log": line})
    diagnose_named_texts([("version.txt", line + "\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01\n")])
    assert time.process_time() - t0 < LIMIT_S


def test_continuation_lines_are_joined_up_to_a_bound():
    """Issue 22: continuation lines were joined without limit (each join copied the line so far).
    A line takes MAX_JOINED of them; the evidence says the rest were not read."""
    from provision.doctor import diagnose_texts
    from provision.doctor.bounds import MAX_JOINED

    log = "[ 1.0] NVRM: Xid (PCI:0000:17:00): 79, pid=0, GPU has fallen off the bus.\n" + "  more\n" * 200_000
    t0 = time.process_time()
    report = diagnose_texts({"kernel-log": log})
    assert time.process_time() - t0 < LIMIT_S
    (xid,) = [f for f in report.findings if f.id == "xid-79"]
    assert f"continuation lines past the first {MAX_JOINED} not read" in xid.evidence


def test_a_long_line_is_read_in_part_and_the_evidence_says_so():
    """A line longer than MAX_LINE is not skipped (a host could hide a fault behind padding): its
    first MAX_LINE characters are matched and the evidence names its length."""
    from provision.doctor import diagnose_texts
    from provision.doctor.bounds import MAX_LINE

    line = "NVRM: Xid (PCI:0000:17:00): 79, pid=0, GPU has fallen off the bus. " + "x" * (2 * MAX_LINE)
    report = diagnose_texts({"kernel-log": line + "\n", "app-log": "CUDA out of memory. " + "y" * MAX_LINE})
    xid = next(f for f in report.findings if f.id == "xid-79")
    assert f"a line of {len(line):,} characters: its first {MAX_LINE:,} read" in xid.evidence
    oom = next(f for f in report.findings if f.id == "out-of-memory")
    assert f"its first {MAX_LINE:,} read" in oom.evidence
    assert "line(s) over" in next(r.detail for r in report.read if r.kind == "kernel-log")


def test_a_flood_of_events_keeps_memory_bounded_and_counts_them_all():
    """51,200 Xid lines on 64 GPUs keep at most KEEP+1 events per GPU and code, and each finding
    counts every one of its GPU's."""
    from provision.doctor import diagnose_texts
    from provision.doctor.parse_log import KEEP, parse_kernel_log

    log = "".join(
        f"[ 1.0] NVRM: Xid (PCI:0000:{i % 64:02x}:00): 13, pid={i}, Graphics Exception\n" for i in range(51_200)
    )
    parsed = parse_kernel_log(log)
    assert len(parsed.xids) == 64 * (KEEP + 1)
    assert sum(x.count for x in parsed.xids) == 51_200
    report = diagnose_texts({"kernel-log": log})
    findings = [f for f in report.findings if f.id == "xid-13"]
    assert len(findings) == 64
    assert all(", 800 times" in f.title for f in findings)
    assert all(f.evidence.startswith("800 event(s)") for f in findings)
    assert "51200 Xid event(s)" in next(r.detail for r in report.read)
