#!/usr/bin/env python3
"""Speed goals of fleet provisioning (issue: Ansible roles and provision apply).

    python benchmarks/bench_apply.py [--runs 3]

On the local test fleet (tests/harness: systemd containers with sshd on 127.0.0.1, the fake-GPU
repositories on loopback), after a first converging apply:
  * an idempotent re-run of `provision apply` on one provisioned host, against one
    `ansible -m setup` on it: goal <= 3x;
  * the same re-run on 3 hosts against 1 host (Ansible works on hosts in parallel).
Reported without a goal: a --full re-run (every task, no converged-state shortcut) on one host,
`provision verify` and `provision doctor` over the three hosts.
Needs root (it starts dockerd when none runs). Exit 1 if a goal is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def timed(cmd: list[str], runs: int, env: dict[str, str]) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        samples.append(time.perf_counter() - start)
        if proc.returncode != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    # Build the same environment the fleet tests use, outside pytest.
    import tempfile

    from integration import conftest as fleetconf

    gen = fleetconf.fleet_env.__wrapped__(_Factory(Path(tempfile.mkdtemp(prefix="bench-apply-"))))
    env_obj = next(gen)
    try:
        work = env_obj.workdir
        venv_bin = Path(sys.executable).parent
        env = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}", "ANSIBLE_HOST_KEY_CHECKING": "False"}
        inv3 = env_obj.inventory("bench3.yml")
        fleet = env_obj.fleet_file()
        apply = [sys.executable, "-m", "provision", "apply", "-i", str(inv3), "--fleet", str(fleet)]
        subprocess.run([*apply, "--run-dir", str(work / "converge")], check=True, capture_output=True, env=env)
        setup = timed(
            [str(venv_bin / "ansible"), "-i", str(inv3), "gpu-a", "-m", "ansible.builtin.setup"], args.runs, env
        )
        one = timed([*apply, "--limit", "gpu-a", "--run-dir", str(work / "one")], args.runs, env)
        three = timed([*apply, "--run-dir", str(work / "three")], args.runs, env)
        summary = json.loads((work / "three" / "summary.json").read_text())
        full = timed([*apply, "--limit", "gpu-a", "--full", "--run-dir", str(work / "full")], 1, env)
        verify = timed(
            [sys.executable, "-m", "provision", "verify", "-i", str(inv3), "--fleet", str(fleet), "--format", "json"],
            args.runs,
            env,
        )
        doctor = timed(
            [sys.executable, "-m", "provision", "doctor", "-i", str(inv3), "--format", "json"], args.runs, env
        )
        changed = {h: v["changed"] for h, v in summary["hosts"].items()}
    finally:
        with contextlib.suppress(StopIteration):
            next(gen)
    print(f"{'measurement':55} {'median':>8}")
    print(f"{'ansible -m setup, one host':55} {setup:7.2f}s")
    print(f"{'provision apply re-run, one provisioned host':55} {one:7.2f}s  ({one / setup:.2f}x setup)")
    print(f"{'provision apply re-run, three provisioned hosts':55} {three:7.2f}s  ({three / one:.2f}x one host)")
    print(f"{'provision apply --full re-run, one host (every task)':55} {full:7.2f}s  ({full / setup:.2f}x setup)")
    print(f"{'provision verify, three hosts (15 checks each)':55} {verify:7.2f}s")
    print(f"{'provision doctor -i, three hosts':55} {doctor:7.2f}s")
    print(f"changed on the three-host re-run: {changed}")
    goals = [
        ("idempotent re-run <= 3x ansible -m setup", one / setup <= 3.0),
        ("re-run changes nothing", all(v == 0 for v in changed.values())),
    ]
    for name, ok in goals:
        print(f"goal: {name}: {'met' if ok else 'MISSED'}")
    return 0 if all(ok for _, ok in goals) else 1


class _Factory:
    """Stands in for pytest's tmp_path_factory."""

    def __init__(self, base: Path):
        self.base = base

    def mktemp(self, name: str) -> Path:
        path = self.base / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def getbasetemp(self) -> Path:
        return self.base


if __name__ == "__main__":
    raise SystemExit(main())
