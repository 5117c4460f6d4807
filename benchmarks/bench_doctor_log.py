#!/usr/bin/env python3
"""Time and peak memory of `provision doctor --from-file` on large kernel logs.

    python benchmarks/bench_doctor_log.py [--sizes 20,200] [--keep DIR]

For each size (MB) a kernel log is generated (dmesg format: mostly lines doctor has no opinion
about, an NVRM line every 2,000 lines and an Xid every 50,000, as a busy host's log), then
`provision doctor --from-file LOG --format json` runs in a fresh process; its wall time and its
peak RSS (getrusage of the child) are printed as JSON with the machine's core count.

Goal (issue 12): memory flat with file size: the largest log's peak RSS within 1.5x the
smallest's (the baseline read the whole file: 32 s and 1.8 GB for 200 MB). Exit 1 if missed.

Recorded 2026-11-30, Python 3.11.7, 2 cores shared with other jobs (cpu_count 2):
  20 MB (197,068 lines):     3.2 s, peak RSS 28.5 MiB
  200 MB (1,965,757 lines): 19.9 s, peak RSS 28.7 MiB   (goal met; findings: xid-13, 39 events)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NOISE = (
    '[{t:12.6f}] audit: type=1400 audit({t:.3f}:{n}): apparmor="STATUS" operation="profile_load" pid={n}\n',
    "[{t:12.6f}] eth0: renamed from veth{n:x}; IPv6: ADDRCONF(NETDEV_CHANGE): link becomes ready\n",
    "[{t:12.6f}] EXT4-fs (nvme0n1p{p}): mounted filesystem with ordered data mode. Quota mode: none.\n",
    "[{t:12.6f}] systemd-journald[{n}]: Data hash table of /var/log/journal/system.journal has a fill level\n",
)
NVRM = "[{t:12.6f}] NVRM: GPU at PCI:0000:{b:02x}:00: GPU-1b2c3d4e-{n:04x}-4fa1-9c00-00001b2c3d4e\n"
XID = "[{t:12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 13, pid={n}, name=python3, Graphics Exception: ESR 0x5041b0\n"


def generate(path: Path, megabytes: int) -> int:
    """Write a dmesg-format log of about `megabytes` MB; returns the number of lines."""
    target = megabytes * 1_000_000
    written = lines = 0
    with path.open("w", encoding="utf-8") as out:
        chunk: list[str] = []
        while written < target:
            t = lines * 0.0137
            if lines % 50_000 == 49_999:
                line = XID.format(t=t, b=0x17 + (lines // 50_000 % 4) * 0x20, n=lines % 65536)
            elif lines % 2_000 == 1_999:
                line = NVRM.format(t=t, b=0x17 + (lines // 2_000 % 4) * 0x20, n=lines % 65536)
            else:
                line = NOISE[lines % len(NOISE)].format(t=t, n=lines % 65536, p=lines % 4)
            chunk.append(line)
            written += len(line)
            lines += 1
            if len(chunk) == 10_000:
                out.writelines(chunk)
                chunk.clear()
        out.writelines(chunk)
    return lines


def run_doctor(log: Path) -> dict:
    """Wall time, findings and what doctor says it read, for one `provision doctor --from-file`."""
    cmd = [sys.executable, "-m", "provision", "doctor", "--from-file", str(log), "--format", "json"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=1800)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"doctor failed (exit {proc.returncode}): {err.decode()[-2000:]}")
    doc = json.loads(out)
    return {
        "seconds": round(seconds, 2),
        "ids": sorted({f["id"] for f in doc["findings"]}),
        "read": doc["read"][0]["detail"] if doc["read"] else "",
    }


def peak_rss_mib(log: Path) -> tuple[float, dict]:
    """Run doctor in a child of a fresh interpreter, so RUSAGE_CHILDREN holds this run alone."""
    probe = (
        f"import json, resource, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_doctor_log as b; "
        f"r = b.run_doctor(b.Path({str(log)!r})); "
        "r['peak_rss_mib'] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1); "
        "print(json.dumps(r))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=1900, check=False)
    if proc.returncode != 0:
        sys.exit(proc.stderr[-2000:])
    doc = json.loads(proc.stdout)
    return doc.pop("peak_rss_mib"), doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20,200", help="log sizes in MB, comma-separated")
    parser.add_argument("--keep", help="write the logs here (kept) instead of a temporary directory")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    results = []
    with tempfile.TemporaryDirectory(prefix="provision-bench-doctor-") as tmp:
        where = Path(args.keep or tmp)
        where.mkdir(parents=True, exist_ok=True)
        for size in sizes:
            log = where / f"kern-{size}mb.log"
            lines = generate(log, size)
            rss, doc = peak_rss_mib(log)
            results.append({"megabytes": size, "lines": lines, "peak_rss_mib": rss, **doc})
    flat = results[-1]["peak_rss_mib"] <= 1.5 * results[0]["peak_rss_mib"]
    print(
        json.dumps(
            {
                "benchmark": "doctor --from-file on generated kernel logs",
                "cpu_count": os.cpu_count(),
                "python": sys.version.split()[0],
                "results": results,
                "goal": "peak RSS of the largest log <= 1.5x the smallest's",
                "met": flat,
            },
            indent=2,
        )
    )
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
