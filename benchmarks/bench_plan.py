#!/usr/bin/env python3
"""Speed goals of the compatibility matrix (issue: the matrix and `provision plan`).

    python benchmarks/bench_plan.py [--runs 21] [--provision PATH]

Goals (start-up, as a user types each command: a fresh process every run):
  * `provision plan --os rocky9 --gpu a100-pcie` <= 5x `python -c pass` ("warm" reuses the
    validated-data cache that the first run writes; "no cache" validates compat/ from scratch and
    is reported, not held to a goal);
  * `provision --help` <= 5x `python -c pass`;
  * `provision doctor --from-file` on one capture <= 10x `python -c pass`;
  * `provision gpus` (the tier table) is reported;
  * `provision matrix check` over the whole matrix < 2 s.

Bytecode is compiled first, as `pip install` does, and PYTHONDONTWRITEBYTECODE is dropped
from the environment so the runs measure an installed tool. Exit 1 if a goal is missed.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(
    cmd: list[str], env: dict[str, str], runs: int, fresh_cache: bool = False, ok_codes: tuple[int, ...] = (0,)
) -> float:
    samples = []
    for _ in range(runs):
        run_env = dict(env)
        if fresh_cache:
            run_env["PROVISION_CACHE_DIR"] = tempfile.mkdtemp(prefix="provision-bench-")
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        samples.append(time.perf_counter() - start)
        if proc.returncode not in ok_codes:
            sys.exit(f"benchmark command failed: {' '.join(cmd)}\n{proc.stderr.decode()}")
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument(
        "--provision",
        default=str(Path(sys.executable).with_name("provision")),
        help="the provision executable (default: next to this Python)",
    )
    args = parser.parse_args()
    python = str(Path(args.provision).with_name("python"))
    if not Path(python).exists():
        python = sys.executable

    import provision

    compileall.compile_dir(os.path.dirname(provision.__file__), quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PROVISION_CACHE_DIR"] = tempfile.mkdtemp(prefix="provision-bench-warm-")
    plan = [args.provision, "plan", "--os", "rocky9", "--gpu", "a100-pcie"]

    subprocess.run(plan, env=env, stdout=subprocess.DEVNULL, check=True)  # writes the warm cache
    base = timed([python, "-c", "pass"], env, args.runs)
    warm = timed(plan, env, args.runs)
    warm_json = timed([*plan, "--format", "json"], env, args.runs)
    cold = timed(plan, env, max(5, args.runs // 3), fresh_cache=True)
    helptext = timed([args.provision, "--help"], env, args.runs)
    gpus = timed([args.provision, "gpus"], env, args.runs)
    capture = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "doctor" / "q-x__2x-l4__v12.xml"
    doctor = timed([args.provision, "doctor", "--from-file", str(capture)], env, args.runs, ok_codes=(0, 1))

    start = time.perf_counter()
    out = subprocess.run(
        [args.provision, "matrix", "check", "--format", "json"], env=env, capture_output=True, text=True, check=False
    )
    check_wall = time.perf_counter() - start
    report = json.loads(out.stdout)
    resolved = {k: v["resolved"] for k, v in report["requests"].items()}

    rows = [
        ("python -c pass", base, 1.0),
        ("provision plan (table, warm cache)", warm, warm / base),
        ("provision plan --format json (warm cache)", warm_json, warm_json / base),
        ("provision plan (no cache: YAML + schema check)", cold, cold / base),
        ("provision --help", helptext, helptext / base),
        ("provision gpus", gpus, gpus / base),
        ("provision doctor --from-file (one capture)", doctor, doctor / base),
    ]
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the start")
    print(f"{'command':50} {'median':>9} {'ratio':>7}")
    for name, secs, ratio in rows:
        print(f"{name:50} {secs * 1000:7.1f}ms {ratio:6.2f}x")
    print(f"{'provision matrix check (wall)':50} {check_wall * 1000:7.1f}ms   resolved: {resolved}")
    goals = [
        ("plan <= 5x python -c pass (warm cache)", warm / base <= 5.0),
        ("--help <= 5x python -c pass", helptext / base <= 5.0),
        ("doctor --from-file <= 10x python -c pass", doctor / base <= 10.0),
        ("matrix check < 2 s", check_wall < 2.0 and report["ok"]),
    ]
    for name, ok in goals:
        print(f"goal: {name}: {'met' if ok else 'MISSED'}")
    return 0 if all(ok for _, ok in goals) else 1


if __name__ == "__main__":
    raise SystemExit(main())
