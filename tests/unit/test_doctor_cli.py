"""provision doctor's command line: the three ways in, the two outputs, the exit codes; the
collector script's sections round-trip through split_bundle."""

from __future__ import annotations

import json
import subprocess

import pytest
from support import ROOT

from provision.doctor import split_bundle
from provision.doctor.collect import SCRIPT, Collected

FIX = ROOT / "tests" / "fixtures" / "doctor"


def fixture(pattern: str):
    found = sorted(FIX.glob(pattern))
    assert found, pattern
    return str(found[0])


def test_from_file_json_and_exit_codes(cli):
    res = cli("doctor", "--from-file", fixture("dmesg-iso__xid-48-63-94.log"), "--format", "json")
    doc = json.loads(res.out)
    assert res.code == 1 == doc["exit_code"]
    assert {"id", "severity", "title", "evidence", "fix"} <= set(doc["findings"][0])
    assert "xid-48" in {f["id"] for f in doc["findings"]}
    healthy = cli("doctor", "--from-file", fixture("table__h100__r550-healthy.txt"))
    assert healthy.code == 0
    assert "healthy" in healthy.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "exactly one of --local, -i INVENTORY and --from-file"),
        (["--local", "--from-file", "x"], "exactly one of"),
        (["--from-file", "x.log", "--app-log", "y.log"], "--app-log goes with --local"),
        (["--from-file", "x.log", "--limit", "gpu-a"], "--limit needs -i"),
        (["--from-file", "/nonexistent/dmesg.log"], "cannot read"),
        (["-i", "/nonexistent/hosts.yml"], "does not exist"),
    ],
)
def test_bad_input_is_refused(cli, args, message):
    res = cli("doctor", *args)
    assert res.code == 2, res
    assert message in res.err
    assert "hint:" in res.err
    assert "Traceback" not in res.err


def test_foreign_file_is_refused_by_name(cli, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("shopping list: eggs, milk\n")
    res = cli("doctor", "--from-file", str(path))
    assert res.code == 2
    assert "notes.txt" in res.err


def test_inventory_hosts_report_per_host(cli, monkeypatch, tmp_path):
    """-i: each host's collector output is diagnosed on its own; an unreachable host is an error."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    gpu-a: {ansible_host: 127.0.0.1}\n    gpu-b: {ansible_host: 127.0.0.1}\n")
    mismatch = (
        "===== provision-doctor: nvidia-smi-stderr =====\nFailed to initialize NVML: Driver/library version mismatch\n"
        "NVML library version: 580.95\n===== provision-doctor: nvidia-smi-rc =====\n18\n"
    )
    calls = {}

    def fake_collect(hosts, inventory_path, *, sudo=False, workers=8):
        calls["hosts"], calls["sudo"] = hosts, sudo
        results = {
            "gpu-a": Collected("gpu-a", mismatch, None),
            "gpu-b": Collected("gpu-b", None, "ssh: connect to host 127.0.0.1 port 22: refused"),
        }
        return [results[h] for h in hosts]

    monkeypatch.setattr("provision.doctor.collect.collect_remote", fake_collect)
    res = cli("doctor", "-i", str(inventory), "--sudo", "--format", "json", "--save-dir", str(tmp_path / "saved"))
    doc = json.loads(res.out)
    assert res.code == 1
    assert calls == {"hosts": ["gpu-a", "gpu-b"], "sudo": True}
    assert {(f["host"], f["id"]) for f in doc["findings"]} >= {
        ("gpu-a", "driver-library-mismatch"),
        ("gpu-b", "host-unreachable"),
    }
    assert (tmp_path / "saved" / "gpu-a.doctor.txt").read_text() == mismatch
    table = cli("doctor", "-i", str(inventory), "--limit", "gpu-a")
    assert calls["hosts"] == ["gpu-a"]
    assert "gpu-a: unhealthy" in table.out
    assert "gpu-b" not in table.out


def test_collector_sections_split_back(tmp_path):
    """The collector runs here (no GPU): every section it prints is one split_bundle knows."""
    proc = subprocess.run(["sh", "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    sections = split_bundle(proc.stdout)
    assert {"nvidia-smi-rc", "proc-driver-version", "modules", "uname-r", "kernel-log", "kernel-log-source"} <= set(
        sections
    )
    assert ("nvidia-smi-q-x" in sections) != ("nvidia-smi-stderr" in sections)
