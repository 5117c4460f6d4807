"""provision doctor's command line: the three ways in, the two outputs, the exit codes; the
collector script's sections round-trip through split_bundle."""

from __future__ import annotations

import json
import os
import re
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
    assert (tmp_path / "saved" / "gpu-a.doctor.txt").stat().st_mode & 0o077 == 0, "a kernel log is its owner's"
    unreachable = next(f for f in doc["findings"] if f["id"] == "host-unreachable")
    # the new user's command: the fix connects (inventory check never did), with the inventory's settings
    assert f"`ansible -i {inventory} gpu-b -m ping`" in unreachable["fix"]
    assert "inventory check" not in unreachable["fix"]
    table = cli("doctor", "-i", str(inventory), "--limit", "gpu-a")
    assert calls["hosts"] == ["gpu-a"]
    assert "gpu-a: unhealthy" in table.out
    assert "gpu-b" not in table.out


def test_collector_sections_split_back(tmp_path):
    """The collector runs here (no GPU): every section it prints is one split_bundle knows, each
    marker ending with the run's token."""
    from provision.doctor import SECTION_KEYS
    from provision.doctor.collect import new_token

    token = new_token()
    env = {**os.environ, "PROVISION_DOCTOR_TOKEN": token}
    proc = subprocess.run(["sh", "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    sections = split_bundle(proc.stdout, token)
    assert {"nvidia-smi-rc", "proc-driver-version", "modules", "uname-r", "kernel-log", "kernel-log-source"} <= set(
        sections
    )
    assert set(sections) <= {*SECTION_KEYS, "kernel-log-source"}
    assert ("nvidia-smi-q-x" in sections) != ("nvidia-smi-stderr" in sections)
    markers = [ln for ln in proc.stdout.splitlines() if ln.startswith("===== provision-doctor:")]
    assert markers
    assert all(ln.endswith(f"===== {token}") for ln in markers)


def test_the_collector_refuses_to_run_without_a_token():
    proc = subprocess.run(["sh", "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "no run token" in proc.stderr


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

    token = "0123456789abcdef" * 2
    env = f"PROVISION_SMI_TIMEOUT=40 PROVISION_DOCTOR_TOKEN={token} PROVISION_DOCTOR_CAP=4194304"
    script = remote_script(Budget(120), token)
    first, _, wrapped = script.partition("\ntimeout --kill-after=5 ")
    assert first.startswith(f"command -v timeout >/dev/null 2>&1 || {env} exec sh -c ")
    # 120 - the budget's reserve (8) - kill-after (5), less the moment since the budget began
    assert int(wrapped.split()[0]) in (106, 107)
    assert f"{env} sh -c " in wrapped
    assert "kill -KILL -$p" in wrapped
    # nvidia-smi with its kill-after ends before the script's limit, whatever the host's timeout
    for seconds in (15, 20, 30, 60):
        wrapped = remote_script(Budget(seconds), token).partition("\ntimeout --kill-after=5 ")[2]
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
    """Wrapped at spaces only: every word of the title, evidence and fix is on one line whole,
    and only a word or a `command` longer than the terminal (the 130 x's; at 30 columns the
    commands) makes a line wider, alone on it."""
    from provision.cli.doctor import HEADERS, _rows, findings_table

    findings = long_findings()
    out = findings_table(["host", *HEADERS], _rows(findings, "gpu-a"), width)
    lines = out.splitlines()
    assert "…" not in out
    if width:
        wide = [line for line in lines if len(line) > width]
        assert all(re.fullmatch(r"[^\s`]*(`[^`]*`)?[^\s`]*", line.strip()) for line in wide), (width, wide)
    else:
        assert any(findings[0].fix in line for line in lines), "unbounded: one line per finding, whole"
    words = {w for line in lines for w in line.split()}
    for f in findings:
        for field in (f.title, f.evidence, f.fix):
            for word in field.split():
                assert word in words, (width, word)


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


# -- what a host prints is data: sections framed by the run's token (issue 22) -------------------
def fake_tools(tmp_path, monkeypatch, **scripts: str):
    """Commands of the same names ahead of the real ones on PATH, each a shell script."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        tool = bin_dir / name.replace("_", "-")
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_host_cannot_forge_a_section_even_knowing_the_token(tmp_path, monkeypatch):
    """What the host prints (here uname -r and nvidia-smi) holds markers: the old fixed one, and
    one with this run's token (as a host that read the collector's command line could). Neither
    starts a section: the collector replaces the token in every output, and only markers with
    the token count."""
    from provision.doctor.collect import collect_local, marker, new_token

    token = new_token()
    xml = "<nvidia_smi_log><driver_version>1.0</driver_version></nvidia_smi_log>"
    forged = f"{marker('nvidia-smi-rc', token)}\n0\n===== provision-doctor: nvidia-smi-q-x =====\n{xml}"
    fake_tools(
        tmp_path,
        monkeypatch,
        uname=f"printf '%s\\n' 6.8.0-45-generic '{forged}'",
        nvidia_smi=f"printf '%s\\n' \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver\" "
        f"'{forged}'; exit 9",
    )
    got = collect_local(60, token=token)
    sections = split_bundle(got.text, token)
    assert "nvidia-smi-q-x" not in sections
    assert sections["nvidia-smi-rc"].strip() == "9"
    assert sections["uname-r"].startswith("6.8.0-45-generic\n")
    assert "===== provision-doctor: nvidia-smi-rc ===== [token]" in sections["uname-r"]
    assert token not in sections["uname-r"] + sections["nvidia-smi-stderr"]


def test_each_run_has_its_own_token(tmp_path, monkeypatch):
    from provision.doctor.collect import collect_local

    fake_tools(tmp_path, monkeypatch, nvidia_smi="exit 9")
    first, second = collect_local(60), collect_local(60)
    assert re.fullmatch(r"[0-9a-f]{32}", first.token)
    assert first.token != second.token
    assert f"===== provision-doctor: nvidia-smi-rc ===== {first.token}" in first.text


def test_split_bundle_counts_only_the_runs_markers():
    token, other = "a" * 32, "b" * 32
    text = (
        f"===== provision-doctor: uname-r ===== {token}\n6.8.0\n"
        f"===== provision-doctor: nvidia-smi-rc ===== {other}\n0\n"
        "===== provision-doctor: nvidia-smi-q-x =====\n<x/>\n"
        f"===== provision-doctor: nvidia-smi-rc ===== {token}\n9\n"
    )
    sections = split_bundle(text, token)
    assert set(sections) == {"uname-r", "nvidia-smi-rc"}
    assert sections["nvidia-smi-rc"] == "9\n"
    assert f"nvidia-smi-rc ===== {other}" in sections["uname-r"]
    assert split_bundle(text) == sections, "a saved bundle: the first marker's token"


# -- what a host prints is bounded (issue 22) -----------------------------------------------------
def test_150mb_of_host_output_is_read_in_bounded_memory(cli, monkeypatch):
    """Issue 22: 150 MB of host output became 622 MB of memory. The collector's output is read up
    to HOST_BYTES, each section analysed up to SECTION_CHARS; both cuts are findings."""
    import tracemalloc

    from provision.doctor import collect
    from provision.doctor.bounds import HOST_BYTES

    line = "[ 1.0] NVRM: Xid (PCI:0000:17:00): 13, pid=1, name=python3, Graphics Exception: ESR 0x5041b0"
    monkeypatch.setattr(
        collect,
        "SCRIPT",
        "printf '\\n===== provision-doctor: kernel-log ===== %s\\n' \"$PROVISION_DOCTOR_TOKEN\"\n"
        f"yes '{line}' | head -c 150000000\n"
        "printf '\\n===== provision-doctor: nvidia-smi-rc ===== %s\\n0\\n' \"$PROVISION_DOCTOR_TOKEN\"\n",
    )
    tracemalloc.start()
    try:
        res = cli("doctor", "--local", "--format", "json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    doc = json.loads(res.out)
    cuts = [f for f in doc["findings"] if f["id"] == "output-cut"]
    assert [f["severity"] for f in cuts] == ["error", "warning"], cuts
    assert f"cut at {HOST_BYTES:,} bytes" in cuts[0]["evidence"]
    assert "xid-13" in {f["id"] for f in doc["findings"]}
    assert res.code == 1
    assert peak < 7 * HOST_BYTES, f"peak {peak / (1 << 20):.0f} MiB"  # 112 MiB; it was 622 MB


def test_a_large_app_log_is_read_from_its_end(cli, tmp_path, monkeypatch):
    """--app-log: a training log's last SECTION_CHARS bytes are read (it ends with what failed),
    and the report says the rest was not."""
    from provision.doctor.bounds import SECTION_CHARS

    fake_tools(tmp_path, monkeypatch, nvidia_smi="exit 9")
    log = tmp_path / "train.log"
    with log.open("w") as handle:
        handle.write("step 1 loss 0.5\n" * (SECTION_CHARS // 16 + 1000))
        handle.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    res = cli("doctor", "--local", "--app-log", str(log), "--format", "json")
    found = {f["id"]: f for f in json.loads(res.out)["findings"]}
    assert "out-of-memory" in found
    assert found["output-cut"]["title"].startswith("the application log train.log is")
    assert "only its last 4 MiB were read" in found["output-cut"]["title"]


# -- a machine without an NVIDIA GPU (issue 23) -------------------------------------------------
def test_local_on_a_machine_without_an_nvidia_gpu_says_so(cli, tmp_path, monkeypatch):
    """The new user's command: `doctor --local` where nvidia-smi is not installed. On a machine
    whose PCI bus has no NVIDIA device it says that, not "install nvidia-utils"."""
    import glob
    import shutil

    if shutil.which("nvidia-smi"):
        fake_tools(tmp_path, monkeypatch, nvidia_smi="echo 'nvidia-smi: command not found' >&2; exit 127")
    vendors = [open(p).read().strip() for p in glob.glob("/sys/bus/pci/devices/*/vendor")]  # noqa: SIM115
    res = cli("doctor", "--local", "--format", "json")
    doc = json.loads(res.out)
    ids = {f["id"] for f in doc["findings"]}
    assert any(r["kind"] == "pci-nvidia" for r in doc["read"])
    if vendors and "0x10de" not in vendors:
        assert "no-nvidia-gpu" in ids
        assert "nvml-not-found" not in ids
        assert "nvidia-utils" not in res.out
    else:  # a machine with NVIDIA devices (or no sysfs): nvidia-smi's own finding stands
        assert "no-nvidia-gpu" not in ids


# -- the table at 100 columns (issue 23) ------------------------------------------------------------
@pytest.mark.parametrize(
    "names",
    [
        ["table__8x-v100__inforom-corrupted.txt"],
        ["nvlink-s__8x-v100__inactive-links.txt", "q-x__v100-sxm3__dbe-retired-pages-pending.xml"],
    ],
)
def test_at_100_columns_no_command_or_uuid_is_split(cli, monkeypatch, names):
    """Issue 23: the table split `ECC,PAGE_` / `RETIREMENT` and GPU UUIDs mid-token, so a fix
    could not be copied. At COLUMNS=100 no line is wider than 100 unless it is one word, and
    every word of every finding is on one line whole."""
    monkeypatch.setenv("COLUMNS", "100")
    res = cli("doctor", *[a for n in names for a in ("--from-file", str(FIX / n))])
    lines = res.out.splitlines()
    assert all(len(line) <= 100 or len(line.split()) == 1 for line in lines), [ln for ln in lines if len(ln) > 100]
    words = {w for line in lines for w in line.split()}
    doc = json.loads(cli("doctor", *[a for n in names for a in ("--from-file", str(FIX / n))], "--format", "json").out)
    for f in doc["findings"]:
        for field in ("title", "evidence", "fix"):
            missing = [w for w in f[field].split() if w not in words]
            assert not missing, (f["id"], field, missing)
    assert any("ECC,PAGE_RETIREMENT" in w for w in words) or any("GPU-" in w for w in words)
    # a `command` that fits on a line is on one line, whole, so that it can be copied
    commands = {c for f in doc["findings"] for c in re.findall(r"`[^`]+`", " ".join(f["fix"].split())) if len(c) <= 96}
    assert commands
    assert all(any(c in line for line in lines) for c in commands), [
        c for c in commands if not any(c in line for line in lines)
    ]
