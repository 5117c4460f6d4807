"""provision doctor's command line: the three ways in, the two outputs, the exit codes; the
collector script's sections round-trip through split_bundle."""

from __future__ import annotations

import json
import os
import subprocess
import time

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

    def fake_collect(hosts, inventory_path, *, sudo=False, forks=5, host_timeout=120, hostvars=None):
        calls["hosts"], calls["sudo"], calls["forks"], calls["host_timeout"] = hosts, sudo, forks, host_timeout
        assert hostvars["gpu-a"]["ansible_host"] == "127.0.0.1"  # the inventory as the CLI read it
        results = {
            "gpu-a": Collected("gpu-a", mismatch, None),
            "gpu-b": Collected("gpu-b", None, "ssh: connect to host 127.0.0.1 port 22: refused"),
        }
        return [results[h] for h in hosts]

    monkeypatch.setattr("provision.doctor.collect.collect_remote", fake_collect)
    res = cli(
        "doctor",
        "-i",
        str(inventory),
        "--sudo",
        "--forks",
        "2",
        "--host-timeout",
        "30",
        "--format",
        "json",
        "--save-dir",
        str(tmp_path / "saved"),
    )
    doc = json.loads(res.out)
    assert res.code == 1
    assert calls == {"hosts": ["gpu-a", "gpu-b"], "sudo": True, "forks": 2, "host_timeout": 30}
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


# -- deadlines: the kernel log first, a hung nvidia-smi is a finding --------------------------
def hung_smi(tmp_path, monkeypatch):
    """An nvidia-smi that ignores SIGTERM, as one stuck on a GPU that fell off the bus."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "smi.pids"
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho $$ >> {pids}\ntrap '' TERM\nsleep 3600\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return pids


def gone(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] == "Z"
    except FileNotFoundError:
        return True


def test_local_with_a_hung_nvidia_smi_is_a_finding_not_a_traceback(cli, tmp_path, monkeypatch):
    pids = hung_smi(tmp_path, monkeypatch)
    t0 = time.monotonic()
    res = cli("doctor", "--local", "--host-timeout", "15", "--format", "json")
    wall = time.monotonic() - t0
    assert "Traceback" not in res.err
    assert "this is a bug" not in res.err
    doc = json.loads(res.out)
    assert res.code == 1
    hung = next(f for f in doc["findings"] if f["id"] == "nvidia-smi-hung")
    # Budget(15): nvidia-smi's share is what is left after the reserve and its own kill-after
    assert hung["title"].startswith("nvidia-smi did not answer in 2 s: the GPU may have fallen off the bus")
    assert "killed: it ignored SIGTERM" in hung["evidence"] or "stopped by SIGTERM" in hung["evidence"]
    assert doc["findings"][0]["id"] == "nvidia-smi-hung", "the report leads with it"
    kinds = [r["kind"] for r in doc["read"]]
    assert kinds.index("kernel-log") < kinds.index("nvidia-smi-rc"), "the kernel log is read first"
    assert wall < 15
    assert all(gone(pid) for pid in pids.read_text().split()), "the hung nvidia-smi outlived the collector"


def test_local_collector_past_its_deadline_keeps_what_it_read(monkeypatch):
    """The whole collector hangs (and ignores SIGTERM): its group is killed at the deadline and
    the kernel log it printed first is still there."""
    from provision.doctor import collect

    xid = "NVRM: Xid (PCI:0000:17:00): 79, pid=0, name=python3, GPU has fallen off the bus."
    monkeypatch.setattr(
        collect,
        "SCRIPT",
        f"printf '%s\\n' '===== provision-doctor: kernel-log =====' '{xid}'; trap '' TERM; sleep 60 & wait",
    )
    t0 = time.monotonic()
    got = collect.collect_local(host_timeout=1)
    assert time.monotonic() - t0 < 1 + 2 * 2 + 2
    assert got.problem.startswith("the collector did not finish within 1 s")
    assert xid in split_bundle(got.text)["kernel-log"]


def test_remote_collector_command_kills_its_group():
    """What -i sends: the script under timeout, nvidia-smi's limit a third of the host's."""
    from provision.doctor.collect import remote_script
    from provision.hostpool import Budget

    script = remote_script(Budget(120))
    first, _, wrapped = script.partition("\ntimeout --kill-after=5 ")
    assert first.startswith("command -v timeout >/dev/null 2>&1 || PROVISION_SMI_TIMEOUT=40 exec sh -c ")
    # 120 - the budget's reserve (8) - kill-after (5), less the moment since the budget began
    assert int(wrapped.split()[0]) in (106, 107)
    assert "PROVISION_SMI_TIMEOUT=40 sh -c " in wrapped
    assert "kill -KILL -$p" in wrapped
    # nvidia-smi with its kill-after ends before the script's limit, whatever the host's timeout
    for seconds in (15, 20, 30, 60):
        wrapped = remote_script(Budget(seconds)).partition("\ntimeout --kill-after=5 ")[2]
        limit = int(wrapped.split()[0])
        smi = int(wrapped.split("PROVISION_SMI_TIMEOUT=")[1].split()[0])
        assert smi + 5 < limit or smi == 1, (seconds, smi, limit)


# -- the table: wrapped, never cut ---------------------------------------------------------------
def long_findings():
    from provision.doctor import Finding

    return [
        Finding(
            "nvidia-smi-hung",
            "error",
            "nvidia-smi did not answer in 40 s: the GPU may have fallen off the bus; see the kernel log below",
            "nvidia-smi exit code 137 (killed: it ignored SIGTERM); provision-doctor: nvidia-smi did not answer "
            "in 40 s (stopped by timeout) [section nvidia-smi-stderr]",
            "The driver is stuck on a GPU: look for Xid 119/120 (GSP timeouts), Xid 79 or 'fallen off the bus' "
            "in the kernel log (`sudo dmesg | grep -i xid`); a GPU reset (`sudo nvidia-smi -r -i 0000:17:00.0`) "
            "or a reboot usually recovers it.",
        ),
        Finding("persistence-off", "warning", "Persistence mode is off", "GPU 0000:17:00.0: Disabled", "x" * 130),
    ]


@pytest.mark.parametrize("width", [0, 30, 60, 80, 100, 120, 160, 250])
def test_table_wraps_fix_and_evidence_at_any_width(width):
    from provision.cli.doctor import HEADERS, _rows, findings_table

    findings = long_findings()
    out = findings_table(["host", *HEADERS], _rows(findings, "gpu-a"), width)
    lines = out.splitlines()
    assert "…" not in out
    if width:
        assert max(len(line) for line in lines) <= width, (width, max(lines, key=len))
    else:
        assert any(findings[0].fix in line for line in lines), "unbounded: one line per finding, whole"
    # every word of the title, evidence and fix is printed (a word longer than its column is
    # split over lines, so compare without whitespace for those)
    text = "".join(out.split())
    for f in findings:
        for field in (f.title, f.evidence, f.fix):
            for word in field.split():
                assert word in out or word in text, (width, word)


def test_table_follows_columns_and_keeps_the_whole_fix(cli, monkeypatch, tmp_path):
    bundle = tmp_path / "bundle.txt"
    bundle.write_text(
        "===== provision-doctor: nvidia-smi-stderr =====\n"
        "provision-doctor: nvidia-smi did not answer in 40 s (stopped by timeout)\n"
        "===== provision-doctor: nvidia-smi-rc =====\n137\n"
    )
    for columns in ("250", "100", "40"):
        monkeypatch.setenv("COLUMNS", columns)
        res = cli("doctor", "--from-file", str(bundle))
        assert res.code == 1
        table = res.out.split("unhealthy:")[0]
        assert max(len(line) for line in table.splitlines()) <= int(columns)
        assert "…" not in res.out
        flat = " ".join(res.out.split())
        assert "reboot usually recovers it." in flat
        assert "did not answer in 40 s" in flat
