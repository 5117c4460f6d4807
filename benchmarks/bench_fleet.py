#!/usr/bin/env python3
"""Fleet scale of verify, doctor, inventory scan and apply (issue 12, "Fleet scale"; issue 21 for scan).

    python benchmarks/bench_fleet.py [--hosts 8] [--sizes 1,3,8] [--runs 3]

Starts a fleet of --hosts hosts as the fleet tests do (tests/harness: systemd containers with sshd
on 127.0.0.1 ports, the fake-GPU repositories on loopback), converges them once with
`provision apply`, then times (median of --runs):
  * `provision verify -i` over 1, 3 and 8 hosts      goal: the largest size <= 1.5x one host;
  * `provision doctor -i` over 1, 3 and 8 hosts      goal: the largest size <= 1.5x one host;
  * `provision inventory scan` over 1, 3 and 8 hosts  goal: the largest size <= 2x one host;
  * `provision apply` quick re-run over 1 and 8 hosts  goal: the largest size <= 2x one host.
The table gives each figure's ratio to one host, the machine's core count and load average.
Needs root (it starts dockerd when none runs). Exit 1 if a goal is missed. The fleet's containers
are removed on exit, also on Ctrl-C, SIGTERM or a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

GOALS = {"verify": 1.5, "doctor": 1.5, "scan": 2.0, "apply": 2.0}  # largest size / one host


def _terminate(signum, _frame):
    raise SystemExit(128 + signum)  # unwinds through the finally that removes the fleet


class Sample(NamedTuple):
    wall: float  # seconds
    controller: float  # CPU seconds of the command and every process it waited for
    machine: float  # CPU seconds the whole machine spent meanwhile (/proc/stat; 0 where absent)

    @property
    def hosts(self) -> float:
        """CPU of everything else: here, the fleet's containers (sshd, the commands they ran)."""
        return max(0.0, self.machine - self.controller)


def machine_cpu() -> float:
    """CPU seconds the machine has spent busy since boot (user, nice, system, irq, softirq)."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [int(x) for x in handle.readline().split()[1:8]]
    except (OSError, ValueError):
        return 0.0
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def timed(cmd: list[str], env: dict[str, str], ok=(0,)) -> Sample:
    before, busy, start = resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=1800)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in ok:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    controller = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sample(wall, controller, machine_cpu() - busy)


def start_fleet(count: int, workdir: Path):
    """(FleetEnv, Fleet) of `count` Debian 12 hosts gpu-01.., alternately A100 and H100 hosts."""
    from harness import engine, fakegpu
    from harness.fleet import Fleet, Host
    from integration import conftest as fc

    from provision.matrix.loader import load_matrix
    from provision.plan.model import PlanRequest
    from provision.plan.resolve import resolve

    client = engine.ensure_engine()
    matrix = load_matrix(fc.COMPAT)
    plans = {g: resolve(matrix, PlanRequest(os=os_id, gpu=gpu)) for g, (os_id, gpu) in fc.FLEET.items()}
    kit = fakegpu.Kit(workdir / "repo")
    proxy = fakegpu.RecordingProxy()
    fc.publish_debian_repos(kit, plans)
    kit.serve()
    cuda = fc.cuda_version_of(matrix, plans["a100"])
    groups = sorted(fc.FLEET)
    hosts = [
        Host(f"gpu-{i + 1:02d}", groups[i % len(groups)], fc.host_gpu(matrix, groups[i % len(groups)], cuda))
        for i in range(count)
    ]
    fleet = Fleet(client, kit, workdir, hosts)
    env = fc.FleetEnv(client, kit, proxy, fleet, plans, workdir)
    return env, fleet, kit, proxy


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=8, help="fleet size (default 8)")
    parser.add_argument("--sizes", default="", help="comma-separated host counts to time (default 1,3,HOSTS)")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure; the median is reported")
    parser.add_argument("--only", default="verify,doctor,scan,apply", help="what to time (verify,doctor,scan,apply)")
    parser.add_argument("--forks", type=int, help="pass --forks N to verify, doctor and scan (default: theirs)")
    parser.add_argument(
        "--hold", action="store_true", help="after converging, print the inventory and wait for Ctrl-C (profiling)"
    )
    args = parser.parse_args()
    if args.hosts < 1 or args.runs < 1:
        parser.error("--hosts and --runs must be at least 1")
    try:
        args.sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()} or {1, min(3, args.hosts), args.hosts})
    except ValueError:
        parser.error("--sizes takes comma-separated numbers")
    if args.sizes[0] < 1 or args.sizes[-1] > args.hosts or 1 not in args.sizes:
        parser.error(f"--sizes must lie within 1..{args.hosts} and include 1")
    args.only = {w.strip() for w in args.only.split(",") if w.strip()}
    if not args.only or args.only - set(GOALS):
        parser.error("--only takes verify, doctor, scan and apply")
    return args


def main() -> int:
    args = parse_args()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`cmd &`)
    workdir = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    fleet = kit = proxy = None
    try:
        fenv, fleet, kit, proxy = start_fleet(args.hosts, workdir)
        rows = measure(args, fenv, fleet, workdir)
    except KeyboardInterrupt:
        print("interrupted: removing the fleet", file=sys.stderr)
        return 130
    except (RuntimeError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", None)
        detail = detail.decode(errors="replace") if isinstance(detail, bytes) else detail or ""
        print(f"benchmark failed: {exc}\n{detail[-3000:]}", file=sys.stderr)
        return 1
    finally:
        if fleet is not None:
            fleet.stop()
        if proxy is not None:
            proxy.close()
        if kit is not None:
            kit.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return report(rows, args)


def measure(args, fenv, fleet, workdir: Path) -> list[tuple[str, int, float, list[float]]]:
    t0 = time.perf_counter()
    fleet.start()
    started = time.perf_counter() - t0
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}", "ANSIBLE_HOST_KEY_CHECKING": "False"}
    names = [h.name for h in fleet.hosts]
    inventory = str(fenv.inventory("inventory.yml", hosts=names))
    fleet_file = str(fenv.fleet_file())
    cli = [sys.executable, "-m", "provision"]
    forks = ["--forks", str(args.forks)] if args.forks else []
    t0 = time.perf_counter()
    subprocess.run(
        [*cli, "apply", "--fleet", fleet_file, "-i", inventory, "--run-dir", str(workdir / "converge")],
        check=True,
        capture_output=True,
        env=env,
        timeout=3600,
    )
    converged = time.perf_counter() - t0
    print(f"fleet of {args.hosts} started in {started:.0f} s, converged in {converged:.0f} s", file=sys.stderr)
    if args.hold:
        print(f"inventory: {inventory}\nfleet file: {fleet_file}\nCtrl-C to remove the fleet", flush=True)
        while True:
            time.sleep(3600)
    commands: dict[tuple[str, int], list[str]] = {}
    for n in args.sizes:
        limit = ["--limit", ",".join(names[:n])]  # the first n hosts of the one inventory
        if "verify" in args.only:
            commands["verify", n] = [*cli, "verify", "-i", inventory, *limit, "--fleet", fleet_file, "--format", "json"]
            commands["verify", n] += forks
        if "doctor" in args.only:
            commands["doctor", n] = [*cli, "doctor", "-i", inventory, *limit, "--format", "json", *forks]
        if "scan" in args.only:
            commands["scan", n] = [*cli, "inventory", "scan", "-i", inventory, *limit, "--format", "json", *forks]
        if "apply" in args.only and n in (1, args.hosts):
            run_dir = str(workdir / f"apply-{n}")
            commands["apply", n] = [*cli, "apply", "--fleet", fleet_file, "-i", inventory, *limit, "--run-dir", run_dir]
    samples: dict[tuple[str, int], list[Sample]] = {key: [] for key in commands}
    for _ in range(args.runs):  # round by round: a change in the machine's load reaches every size alike
        for key, cmd in commands.items():
            samples[key].append(timed(cmd, env))
            if key[0] == "apply":
                summary = json.loads((workdir / f"apply-{key[1]}" / "summary.json").read_text())
                changed = {h: v["changed"] for h, v in summary["hosts"].items() if v["changed"]}
                if changed:  # not a quick re-run then (the roles changed under it?): said, and a goal missed
                    CHANGED.setdefault(key[1], []).append(changed)
    return [(what, n, statistics.median(x.wall for x in s), s) for (what, n), s in samples.items()]


CHANGED: dict[int, list[dict]] = {}  # host count -> what apply re-runs changed


def report(rows, args) -> int:
    one = {what: median for what, n, median, _ in rows if n == 1}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"nproc {cores}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min), "
        f"verify/doctor/scan --forks {args.forks or 'default'}, {args.runs} run(s) each"
    )
    # CPU: the command's own process tree ("controller") and the rest of the machine, which here is
    # the fleet's containers: on a real fleet that work runs on the hosts, side by side; here it
    # shares the controller's cores, so it bounds the wall-clock ratio on a small machine.
    print(f"{'command':8} {'hosts':>5} {'median':>8} {'vs 1 host':>9} {'ctl CPU':>8} {'host CPU':>8}  samples")
    for what, n, median, samples in rows:
        ratio = f"{median / one[what]:.2f}x" if what in one else "-"
        controller = statistics.median(x.controller for x in samples)
        hosts = statistics.median(x.hosts for x in samples)
        walls = ", ".join(f"{x.wall:.2f}" for x in samples)
        print(f"{what:8} {n:5d} {median:7.2f}s {ratio:>9} {controller:7.2f}s {hosts:7.2f}s  {walls}")
    missed = 0
    largest = max(args.sizes)
    for what, limit in GOALS.items():
        top = [m for w, n, m, _ in rows if w == what and n == largest]
        if what not in one or not top or largest == 1:
            continue
        ratio = top[0] / one[what]
        ok = ratio <= limit
        missed += not ok
        print(f"goal: {what} over {largest} hosts <= {limit}x one host: {ratio:.2f}x {'met' if ok else 'MISSED'}")
        cpu = {n: statistics.median(x.controller for x in s) for w, n, _, s in rows if w == what}
        print(
            f"      controller CPU over {largest} hosts: {cpu[largest] / cpu[1]:.2f}x one host's "
            f"({cpu[largest]:.2f} s vs {cpu[1]:.2f} s); the hosts' own CPU shares this machine's {cores} cores"
        )
    for n, runs in sorted(CHANGED.items()):
        missed += 1
        print(f"goal: apply re-runs over {n} host(s) change nothing: MISSED, changed {runs}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
