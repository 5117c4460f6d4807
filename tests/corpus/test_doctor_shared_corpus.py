"""provision doctor over every real capture in the shared reference set
(../shared/reference/fixtures: captures published in other projects, which this repository
does not copy). tests/run runs this folder with --shared-corpus when the set is there; run by
hand with `pytest --shared-corpus tests/corpus`. Without the set, these tests fail rather than
skip. The suite's own captures (tests/fixtures/doctor) cover every finding id checked here.

Expectations come from the file names, which say what each capture shows:
a fault keyword maps to the finding ids it must produce, and a file without one is a healthy
capture that must produce no error finding.

Not-diagnosable captures: outputs that carry no health data (``nvidia-smi -L``, ``topo -m`` /
``-p2p``, ``pmon``, ``mig -lgip`` / ``-lgi``, ``--help-query-gpu`` reference text) and a CSV
written with ``--format=csv,noheader`` (its columns cannot be known) are *rejected* with an
``InputError`` that names the file and says what it looks like: a clean exit 0 would claim a
healthy host from no evidence. Inside a capture bundle the same outputs are skipped and
listed under ``read`` as not analysed.
"""

import re
from pathlib import Path

import pytest
import yaml
from support import COMPAT, ROOT

from provision.doctor import classify, diagnose_files
from provision.doctor.classify import DIAGNOSABLE
from provision.doctor.xid_refresh import parse_catalog, render
from provision.errors import InputError

SHARED = ROOT.parent / "shared" / "reference" / "fixtures"
SKIP = {"SOURCES.md"}


def captures() -> list[Path]:
    if not SHARED.is_dir():
        return []
    return sorted(
        p
        for p in SHARED.iterdir()
        if p.is_file()
        and p.name not in SKIP
        and not p.name.endswith(".source.txt")
        and not p.name.startswith("xid-catalog")
    )


# filename keyword -> finding ids the capture must produce
FAULTS = {
    "fallen-off-bus": {"gpu-fallen-off-bus", "driver-probe-failed"},
    "cuda-driver-insufficient": {"cuda-driver-insufficient"},
    "driver-library-version-mismatch": {"driver-library-mismatch"},
    "nvswitch-nonfatal-error": {"nvswitch-error"},
    "infoROM-corrupted": {"inforom-corrupted"},
    "fan-ERR": {"fan-error"},
    "inactive-links": {"nvlink-inactive"},
    "ecc-sbe-dbe-retired-pages": {"ecc-uncorrectable", "retired-pages"},
    "ecc-sbe-aggregate": {"ecc-correctable"},
    "DBE-retired-pages-pending": {"ecc-uncorrectable", "retired-pages-pending"},
    "hw-slowdown-power-brake-active": {"clocks-hw-slowdown", "clocks-power-brake"},
    "swpowercap": {"clocks-sw-power-cap"},
    "sw-power-cap": {"clocks-sw-power-cap"},
    "swthermal": {"clocks-sw-thermal-slowdown"},
    "powerbrake": {"clocks-power-brake"},
    "remapped-rows-pending": {"remapped-rows-pending"},
}
XID_KEYWORD = re.compile(r"xid-(\d+(?:-\d+)*)")
# kinds that are recognised but rejected, and the file-name prefixes that hold them
REJECTED = {
    "nvidia-smi-L__": "nvidia-smi-L",
    "nvidia-smi-help-": "nvidia-smi-help",
    "nvidia-smi-topo-": "topo",
    "nvidia-smi-pmon__": "pmon",
    "nvidia-smi-mig-": "mig-list",
    "nvidia-smi-query-gpu-csv__mig-mode__": "query-csv-noheader",
}
# the kind each diagnosable file-name prefix must be classified as (by content)
KIND = {
    "nvidia-smi-q-x__": "nvidia-smi-q-x",
    "nvidia-smi-q__": "nvidia-smi-q",
    "nvidia-smi-q-d-": "nvidia-smi-q",
    "nvidia-smi-default__": "nvidia-smi",
    "nvidia-smi-query-gpu-csv__": "query-gpu-csv",
    "nvidia-smi-nvlink-s__": "nvlink-s",
    "nvidia-smi-capture-bundle__": "capture-bundle",
    "dmesg__": "kernel-log",
    "fabricmanager-log__": "fabricmanager-log",
    "error__nvml": "nvidia-smi-stderr",
    "error__cuda": "app-log",
}


def expected_ids(name: str) -> set[str]:
    ids = set().union(*(ids for key, ids in FAULTS.items() if key in name))
    for m in XID_KEYWORD.finditer(name):
        ids |= {f"xid-{code}" for code in m[1].split("-")}
    return ids


def rejected_kind(name: str) -> str | None:
    return next((kind for prefix, kind in REJECTED.items() if name.startswith(prefix)), None)


def test_the_shared_set_is_there():
    assert SHARED.is_dir(), f"{SHARED} is absent: the corpus run needs the shared reference set"
    assert len(captures()) >= 100


@pytest.mark.parametrize("path", captures(), ids=lambda p: p.name)
def test_shared_capture(path):
    name = path.name
    kind = classify(path.read_text(encoding="utf-8", errors="replace"), "")
    rejected = rejected_kind(name)
    if rejected:
        assert kind == rejected
        with pytest.raises(InputError) as info:
            diagnose_files([path])
        assert name in info.value.message
        assert "nothing doctor can diagnose" in info.value.message
        return
    assert kind in DIAGNOSABLE | {"capture-bundle"}
    assert kind == next(k for prefix, k in KIND.items() if name.startswith(prefix))
    report = diagnose_files([path])
    expected = expected_ids(name)
    assert expected <= report.ids(), f"missing {expected - report.ids()}"
    if not expected:  # healthy capture
        errors = [f for f in report.findings if f.severity == "error"]
        assert not errors, errors
        assert report.exit_code == 0
    for f in report.findings:
        assert f.severity in ("error", "warning", "info")
        assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", f.id)


def test_fault_keywords_all_match_some_file():
    names = " ".join(p.name for p in captures())
    assert all(key in names for key in FAULTS)


def test_fault_severities():
    by_name = {p.name: p for p in captures()}

    def severity(fragment: str, ident: str) -> str:
        path = next(p for n, p in by_name.items() if fragment in n)
        return {f.id: f.severity for f in diagnose_files([path]).findings}[ident]

    assert severity("hw-slowdown-power-brake-active", "clocks-power-brake") == "error"
    assert severity("hw-slowdown-power-brake-active", "clocks-hw-slowdown") == "warning"
    assert severity("DBE-retired-pages-pending", "retired-pages-pending") == "error"
    assert severity("remapped-rows-pending", "remapped-rows-pending") == "error"
    assert severity("xid-48-63-94", "xid-48") == "error"
    assert severity("xid-13-43", "xid-13") == "warning"
    assert severity("rtx-3090-drv590-v13-swpowercap", "clocks-sw-power-cap") == "info"  # idle, P8
    assert severity("ecc-sbe-dbe-retired-pages", "ecc-uncorrectable") == "warning"  # aggregate only


def test_all_captures_of_one_host_merge(tmp_path):
    """A -q -x, a kernel log and an nvlink capture read together give one report with all findings."""
    paths = [
        next(p for p in captures() if key in p.name)
        for key in ("DBE-retired-pages-pending", "xid-48-63-94", "inactive-links")
    ]
    report = diagnose_files(paths)
    assert {"retired-pages-pending", "xid-48", "nvlink-inactive"} <= report.ids()
    assert report.exit_code == 1
    assert len(report.read) == 3


def test_every_capture_names_its_source():
    """Each capture in the reference set carries the sidecar that says where it was published."""
    missing = [p.name for p in captures() if not (SHARED / f"{p.name}.source.txt").is_file()]
    assert not missing, missing
    assert (SHARED / "SOURCES.md").is_file()


def test_committed_xid_catalogue_matches_the_shared_transcription():
    """compat/xid.yaml is what the Xid refresh makes of the transcription of NVIDIA's Xid table."""
    source = SHARED / "xid-catalog__nvidia-docs__via-gpud-mirror.md"
    existing = yaml.safe_load((COMPAT / "xid.yaml").read_text())
    assert render(existing, parse_catalog(source.read_text())) == (COMPAT / "xid.yaml").read_text()
