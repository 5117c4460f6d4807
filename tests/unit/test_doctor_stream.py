"""doctor --from-file on large logs: read line by line, the same findings as reading the whole
text, memory flat with the file's size (benchmarks/bench_doctor_log.py measures 20 and 200 MB)."""

from __future__ import annotations

import tracemalloc

import pytest
from support import ROOT

from provision.doctor import classify, diagnose
from provision.doctor.parse_log import parse_kernel_lines, parse_kernel_log, worth_a_look

FIX = ROOT / "tests" / "fixtures" / "doctor"


def kernel_fixtures():
    found = sorted(p for p in FIX.glob("*.log") if classify(p.read_text(errors="replace"), p.name) == "kernel-log")
    assert found, "no kernel-log fixtures"
    return found


@pytest.mark.parametrize("path", kernel_fixtures(), ids=lambda p: p.name)
def test_streaming_finds_what_reading_whole_finds(path, monkeypatch):
    whole = diagnose.diagnose_files([path])
    monkeypatch.setattr(diagnose, "STREAM_FROM", 0)
    streamed = diagnose.diagnose_files([path])
    assert streamed.findings == whole.findings
    assert streamed.read[0].detail == whole.read[0].detail + " (read as a stream)"


def test_the_keyword_filter_lets_every_pattern_through():
    """Each kernel-log pattern's sample line passes worth_a_look: the filter only skips lines no
    pattern can match."""
    samples = [
        "NVRM: Xid (PCI:0000:17:00): 79, pid=0, GPU has fallen off the bus.",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32",
        "NVRM: GPU at PCI:0000:9b:00: GPU-1b2c3d4e-0000-4fa1-9c00-00001b2c3d4e",
        "NVRM: The NVIDIA probe routine failed for 1 device(s).",
        "NVRM: RmInitAdapter failed! (0x26:0xffff:1286)",
        "NVRM: API mismatch: the client has the version 550.54.14, but",
        "Loading of unsigned module is rejected",
        "Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7",
        "nouveau 0000:01:00.0: DRM: VRAM: 8192 MiB",
        "modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.8.0-45-generic",
        "pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0",
        "Out of memory: Killed process 4242 (python3) total-vm:123kB",
        "NVRM: infoROM is corrupted at gpu 0000:17:00.0",
    ]
    assert all(worth_a_look(s) for s in samples)
    assert not worth_a_look("[ 12.3] EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode.")


def test_continuations_and_context_survive_streaming():
    text = (
        "[ 1.0] NVRM: The NVIDIA GPU 0000:3b:00.0\n"
        "[ 1.1] NVRM: (PCI ID: 10de:20b5) installed in this system has\n"
        "[ 1.2] NVRM: fallen off the bus and is not responding to commands.\n"
        "[ 2.0] audit: something long\n"
        "    continued here with nvidia in it\n"
    )
    log = parse_kernel_lines(iter(text.splitlines()))
    assert log == parse_kernel_log(text)
    (event,) = [e for e in log.events if e.kind == "fallen-off-bus"]
    assert event.bus == "0000:3b:00.0"
    assert log.lines == 4


def generated_log(path, lines: int) -> None:
    noise = "[{n:10d}.000000] audit: type=1400 apparmor=STATUS operation=profile_load pid={n}\n"
    xid = "[{n:10d}.000000] NVRM: Xid (PCI:0000:17:00): 13, pid={n}, name=python3, Graphics Exception\n"
    with path.open("w") as out:
        for start in range(0, lines, 1000):
            out.writelines(
                (xid if n % 20_000 == 19_999 else noise).format(n=n) for n in range(start, min(lines, start + 1000))
            )


def test_memory_stays_flat_with_the_file_size(tmp_path, monkeypatch):
    """Python's allocations while diagnosing a 4x larger log stay about the same (the old reader
    held the file, its lines and a record per line: memory grew with the file)."""
    monkeypatch.setattr(diagnose, "STREAM_FROM", 0)
    peaks = {}
    for lines in (20_000, 80_000):
        log = tmp_path / f"kern-{lines}.log"
        generated_log(log, lines)
        tracemalloc.start()
        report = diagnose.diagnose_files([log])
        peaks[lines] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert report.read[0].detail.startswith(f"{lines} lines, {lines // 20_000} Xid event(s)")
    assert peaks[80_000] < 1.3 * peaks[20_000] + 256 * 1024, peaks
    assert peaks[80_000] < log.stat().st_size, "less memory than the file holds"


def test_a_small_file_costs_its_size_not_the_limit(tmp_path):
    """read_text once read(MAX_BYTES + 1): 256 MiB allocated for a 2 KB capture."""
    path = tmp_path / "dmesg.log"
    generated_log(path, 100)
    tracemalloc.start()
    text = diagnose.read_text(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert text.count("\n") == 100
    assert peak < 16 * 1024 * 1024, peak
