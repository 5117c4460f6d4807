"""The inputs doctor diagnoses, as one ordered table: what each is, how it is recognised, read, and judged.

A row (``Input``) is one kind of capture and, where ``section`` is true, one collector section key:

* ``key`` / ``what``: the kind (``classify.KINDS``) and what it is, in words;
* ``read(text, source, facts)``: parse the text into ``facts`` (``provision.doctor.facts``) and
  return what was read, for ``Report.read``; ``ParseFailure`` when it cannot be read;
* ``recognise(probe)``: whether a text is this input, by its content. Rows are tried in the table's
  order, after classify's checks for the NVIDIA outputs (whose order is its own: a kernel log may
  hold nvidia-smi's error lines); ``None``: classify's own checks name it;
* ``rules(facts, add)``: the findings that need this input alone (run once per function, in the
  table's order, after the rules that read several inputs); ``None``: those in ``diagnose._report``;
* ``structured``: an nvidia-smi output that may hold nvidia-smi's error lines instead.

A new input is its parser module plus one row here; its facts go to ``facts.parsed[key]`` unless
``Facts`` has a field for them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from provision.doctor import bounds, parse_bmc, parse_log, parse_smi
from provision.doctor.facts import Add, Facts
from provision.doctor.parse_smi import ParseFailure
from provision.doctor.rules_bmc import bmc_rules
from provision.doctor.rules_host import KERNEL_RELEASE


class Probe:
    """A text being classified, with what the recognisers ask of it computed once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._bmc: str | bool | None = False

    def bmc_kind(self) -> str | None:
        if self._bmc is False:
            self._bmc = parse_bmc.bmc_kind(self.text)
        return self._bmc  # type: ignore[return-value]


class Input(NamedTuple):
    key: str
    what: str
    read: Callable[[str, str, Facts], str]
    recognise: Callable[[Probe], bool] | None = None
    rules: Callable[[Facts, Add], None] | None = None
    section: bool = True  # a key of the collector's sections
    structured: bool = False


# -- nvidia-smi ----------------------------------------------------------------------------------
def _smi(parser: Callable[[str, str], parse_smi.SmiResult], key: str) -> Callable[[str, str, Facts], str]:
    def read(text: str, source: str, facts: Facts) -> str:
        result = parser(text, source)
        facts.gpus.extend(result.gpus)
        if result.driver_version:
            facts.driver_versions.append((result.driver_version, source))
        if result.cuda_version:
            facts.cuda_versions.append((result.cuda_version, source))
        scan = "\n".join(result.messages) if key == "nvidia-smi-q-x" else text
        facts.messages.extend((source, m) for m in parse_log.scan_messages(scan))
        driver = f", driver {result.driver_version}" if result.driver_version else ""
        return f"{len(result.gpus)} GPU(s){driver}"

    return read


def _nvlink(text: str, source: str, facts: Facts) -> str:
    gpus = parse_smi.parse_nvlink(text)
    facts.nvlink.append((source, gpus))
    return f"{len(gpus)} GPU(s), {sum(len(g.links) for g in gpus)} links"


# -- logs and host state ---------------------------------------------------------------------------
def _kernel_log(text: str, source: str, facts: Facts) -> str:
    log = parse_log.parse_kernel_log(text)
    facts.kernel.append((source, log))
    return log.summary()


def _fabric_log(text: str, source: str, facts: Facts) -> str:
    events, count = parse_log.parse_fabric_manager(text)
    facts.fabric.append((source, events))
    return f"{count} log lines, {len(events)} error(s)"


def _messages(text: str, source: str, facts: Facts) -> str:
    messages = parse_log.scan_messages(text)
    facts.messages.extend((source, m) for m in messages)
    return f"{len(messages)} known message line(s)"


def _app_log(text: str, source: str, facts: Facts) -> str:
    facts.app_texts.append(text)
    return _messages(text, source, facts)


_EXIT_CODE = re.compile(r"-?\b\d{1,5}\b")


def _smi_rc(text: str, source: str, facts: Facts) -> str:
    m = _EXIT_CODE.search(text[: bounds.MAX_LINE])
    if not m:
        raise ParseFailure("not an exit code")
    facts.smi_rc = int(m[0])
    return f"exit code {facts.smi_rc}"


def _proc_version(text: str, source: str, facts: Facts) -> str:
    version = parse_log.parse_proc_version(text)
    if version:
        facts.module_version = (version, source)
    return f"kernel module {version}" if version else "no 'NVRM version' line"


def _modules(text: str, source: str, facts: Facts) -> str:
    names = parse_log.parse_modules(text)
    facts.modules = (facts.modules or set()) | names
    nv = sorted(n for n in names if n.startswith(("nvidia", "nouveau")))
    return f"{len(names)} modules ({', '.join(nv) or 'no nvidia/nouveau'})"


def _secure_boot(text: str, source: str, facts: Facts) -> str:
    facts.secure_boot = parse_log.parse_secure_boot(text)
    return "Secure Boot " + {True: "enabled", False: "disabled", None: "unknown"}[facts.secure_boot]


def _uname(text: str, source: str, facts: Facts) -> str:
    release = text[: bounds.MAX_LINE].split(maxsplit=1)[0]
    if not KERNEL_RELEASE.fullmatch(release):  # it goes into the commands a fix names
        raise ParseFailure("not a kernel release")
    facts.uname = release
    return release


def _pci(text: str, source: str, facts: Facts) -> str:
    scan = parse_log.parse_pci(text)
    facts.pci = scan
    if scan is None:
        return "PCI devices not readable"
    gpus = scan.gpus()
    return f"{scan.scanned} PCI devices, {len(gpus)} NVIDIA GPU(s)" + (
        f" and {len(scan.nvidia) - len(gpus)} other NVIDIA function(s)" if len(scan.nvidia) > len(gpus) else ""
    )


# -- the BMC -----------------------------------------------------------------------------------------
def _bmc(key: str) -> Callable[[str, str, Facts], str]:
    def read(text: str, source: str, facts: Facts) -> str:
        capture = parse_bmc.parse_bmc(text)
        facts.parsed.setdefault(key, []).append((source, capture))
        return f"{capture.summary()} ({capture.note[:120]})" if capture.note else capture.summary()

    return read


def _is(key: str) -> Callable[[Probe], bool]:
    return lambda probe: probe.bmc_kind() == key


INPUTS: tuple[Input, ...] = (
    Input("nvidia-smi-q-x", "nvidia-smi -q -x XML", _smi(parse_smi.parse_xml, "nvidia-smi-q-x"), structured=True),
    Input("nvidia-smi-q", "nvidia-smi -q text", _smi(parse_smi.parse_q_text, "nvidia-smi-q"), structured=True),
    Input("nvidia-smi", "the default nvidia-smi table", _smi(parse_smi.parse_table, "nvidia-smi"), structured=True),
    Input("nvidia-smi-stderr", "nvidia-smi / NVML error output", _messages),
    Input("nvidia-smi-rc", "nvidia-smi's exit code", _smi_rc),
    Input("nvlink-s", "nvidia-smi nvlink -s", _nvlink, structured=True),
    Input("kernel-log", "a kernel log (dmesg / journalctl -k)", _kernel_log),
    Input("proc-driver-version", "/proc/driver/nvidia/version", _proc_version),
    Input("modules", "loaded kernel modules (/proc/modules or lsmod)", _modules),
    Input("fabricmanager-log", "an NVIDIA fabric manager log", _fabric_log),
    Input("app-log", "application output with CUDA / framework errors", _app_log),
    Input("secure-boot", "mokutil --sb-state output", _secure_boot),
    Input("uname-r", "the running kernel release (uname -r)", _uname),
    Input("pci-nvidia", "the NVIDIA devices on the PCI bus (sysfs)", _pci),
    Input(
        "query-gpu-csv",
        "nvidia-smi --query-gpu CSV",
        _smi(parse_smi.parse_csv, "query-gpu-csv"),
        section=False,
        structured=True,
    ),
    Input(
        "bmc-sensor",
        "BMC sensor readings with thresholds (ipmitool sensor, FreeIPMI ipmi-sensors)",
        _bmc("bmc-sensor"),
        _is("bmc-sensor"),
        bmc_rules,
    ),
    Input(
        "bmc-sdr",
        "BMC sensor records (ipmitool sdr list / elist / type / get -v)",
        _bmc("bmc-sdr"),
        _is("bmc-sdr"),
        bmc_rules,
    ),
    Input(
        "bmc-sel",
        "the BMC's system event log (ipmitool sel elist / list, FreeIPMI ipmi-sel, SEL CSV)",
        _bmc("bmc-sel"),
        _is("bmc-sel"),
        bmc_rules,
    ),
)
BY_KEY = {row.key: row for row in INPUTS}


def recognise(text: str) -> str | None:
    """The key of the first row whose recogniser takes ``text``, else None."""
    probe = Probe(text)
    return next((row.key for row in INPUTS if row.recognise is not None and row.recognise(probe)), None)


def run_rules(facts: Facts, add: Add) -> None:
    """Each row's rules, once per function, in the table's order."""
    done: list[Callable[[Facts, Add], None]] = []
    for row in INPUTS:
        if row.rules is not None and row.rules not in done:
            done.append(row.rules)
            row.rules(facts, add)
