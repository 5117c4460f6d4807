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
  * `provision matrix check` over the whole matrix < 2 s (the median of five runs, --check-runs;
    it reads the catalogue from the validated-data cache the first plan run writes). Its line shows
    the process's wall and cpu time, and the check's own time (its "seconds", without start-up);
  * `provision check` of 50 host groups (lock files) x 50 image plan locks < 1 s (the median of
    five runs; the locks are resolved once, before the clock starts);
  * `provision plan --host-only` and `provision runs-on --driver 535.183.01 --gpu t4` are reported;
  * stacks (issue 24): `provision plan --os ubuntu22.04 --gpu h100-sxm --framework pytorch --with
    deepspeed --with onnxruntime` <= 5x `python -c pass` (warm cache), and `provision plan --os
    ubuntu22.04 --gpu l4 --framework onnxruntime` is reported beside it (`matrix check` walks the
    stacks too, and its < 2 s goal stands).

Bytecode is compiled first, as `pip install` does, and PYTHONDONTWRITEBYTECODE is dropped
from the environment so the runs measure an installed tool. Exit 1 if a goal is missed.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


class Timed:
    """One command to time: its samples, taken in turn with every other command's (see timed_all)."""

    def __init__(
        self, cmd: list[str], runs: int, *, fresh_cache: bool = False, ok_codes: tuple[int, ...] = (0,)
    ) -> None:
        self.cmd, self.runs, self.fresh_cache, self.ok_codes = cmd, runs, fresh_cache, ok_codes
        self.samples: list[float] = []
        self.cpu: list[float] = []  # user + system seconds of the process: what the run queue's length does not add

    def run_once(self, env: dict[str, str]) -> None:
        run_env = dict(env)
        if self.fresh_cache:
            run_env["PROVISION_CACHE_DIR"] = tempfile.mkdtemp(prefix="provision-bench-")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(self.cmd, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        self.samples.append(time.perf_counter() - start)
        self.cpu.append(_cpu_since(before))
        if proc.returncode not in self.ok_codes:
            sys.exit(f"benchmark command failed: {' '.join(self.cmd)}\n{proc.stderr.decode()}")

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def _cpu_since(before: resource.struct_rusage) -> float:
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def timed_all(commands: list[Timed], env: dict[str, str]) -> None:
    """Round-robin: one run of each command in turn, so that a change in the machine's other load
    shifts every command alike and the ratios to `python -c pass` stay comparable."""
    for turn in range(max(c.runs for c in commands)):
        for command in commands:
            if turn < command.runs:
                command.run_once(env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--check-runs", type=int, default=5, help="runs of provision matrix check (median)")
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

    load = os.getloadavg()[0]
    subprocess.run(plan, env=env, stdout=subprocess.DEVNULL, check=True)  # writes the warm cache
    capture = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "doctor" / "q-x__2x-l4__v12.xml"
    commands = [
        Timed([python, "-c", "pass"], args.runs),
        Timed(plan, args.runs),
        Timed([*plan, "--format", "json"], args.runs),
        Timed(plan, max(5, args.runs // 3), fresh_cache=True),
        Timed([args.provision, "--help"], args.runs),
        Timed([args.provision, "gpus"], args.runs),
        Timed([args.provision, "doctor", "--from-file", str(capture)], args.runs, ok_codes=(0, 1)),
    ]
    fleet_dir = fleet_of(50, 50)
    check_cmd = [
        args.provision,
        "check",
        "--fleet",
        str(fleet_dir / "fleet.yaml"),
        "--images",
        str(fleet_dir / "images"),
    ]
    stack_plan = [
        args.provision,
        "plan",
        "--os",
        "ubuntu22.04",
        "--gpu",
        "h100-sxm",
        "--framework",
        "pytorch",
        "--with",
        "deepspeed",
        "--with",
        "onnxruntime",
    ]
    inference_plan = [args.provision, "plan", "--os", "ubuntu22.04", "--gpu", "l4", "--framework", "onnxruntime"]
    commands += [
        Timed([*plan, "--host-only"], args.runs),
        Timed([args.provision, "runs-on", "--driver", "535.183.01", "--gpu", "t4"], args.runs),
        Timed([*check_cmd, "--format", "json"], 5, ok_codes=(0, 1)),
        Timed(stack_plan, args.runs),
        Timed(inference_plan, args.runs),
    ]
    timed_all(commands, env)
    base, warm, warm_json, cold, helptext, gpus, doctor, host_only, runs_on, check_50, stack, inference = (
        c.median for c in commands
    )
    base_cpu = statistics.median(commands[0].cpu)
    cpu = [statistics.median(c.cpu) for c in commands]

    check_walls, check_cpu, check_own = [], [], []
    for _ in range(max(1, args.check_runs)):  # the median: one run is at the mercy of the machine's other load
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        out = subprocess.run(
            [args.provision, "matrix", "check", "--format", "json"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        check_walls.append(time.perf_counter() - start)
        check_cpu.append(_cpu_since(before))
        if out.returncode not in (0, 1):
            sys.exit(f"benchmark command failed: provision matrix check\n{out.stderr}")
        report = json.loads(out.stdout)
        check_own.append(report["seconds"])
    check_wall = statistics.median(check_walls)
    resolved = {k: v["resolved"] for k, v in report["requests"].items()}

    names = [
        "python -c pass",
        "provision plan (table, warm cache)",
        "provision plan --format json (warm cache)",
        "provision plan (no cache: YAML + schema check)",
        "provision --help",
        "provision gpus",
        "provision doctor --from-file (one capture)",
        "provision plan --host-only (warm cache)",
        "provision runs-on --driver 535.183.01 --gpu t4",
        "provision check: 50 groups x 50 images",
        "provision plan pytorch --with deepspeed,onnxruntime",
        "provision plan --framework onnxruntime (l4)",
    ]
    walls = [base, warm, warm_json, cold, helptext, gpus, doctor, host_only, runs_on, check_50, stack, inference]
    print(f"{os.cpu_count()} cores; load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print("(cpu: the process's user + system time, which a busy machine inflates less than the wall time)")
    print(f"{'command':50} {'median':>9} {'ratio':>7} {'cpu':>9} {'ratio':>7}")
    for name, secs, used in zip(names, walls, cpu, strict=True):
        print(f"{name:50} {secs * 1000:7.1f}ms {secs / base:6.2f}x {used * 1000:7.1f}ms {used / base_cpu:6.2f}x")
    check_used = statistics.median(check_cpu)
    print(
        f"{'provision matrix check':50} {check_wall * 1000:7.1f}ms {'':>7} {check_used * 1000:7.1f}ms"
        f"   (median of {len(check_walls)}; the check itself {statistics.median(check_own) * 1000:.1f}ms)"
        f"   resolved: {resolved}"
    )
    goals = [
        ("plan <= 5x python -c pass (warm cache)", warm / base <= 5.0),
        ("plan with a stack <= 5x python -c pass (warm cache)", stack / base <= 5.0),
        ("--help <= 5x python -c pass", helptext / base <= 5.0),
        ("doctor --from-file <= 10x python -c pass", doctor / base <= 10.0),
        ("matrix check < 2 s", check_wall < 2.0 and report["ok"]),
        ("check of 50 groups x 50 images < 1 s", check_50 < 1.0),
    ]
    for name, ok in goals:
        print(f"goal: {name}: {'met' if ok else 'MISSED'}")
    return 0 if all(ok for _, ok in goals) else 1


def fleet_of(groups: int, images: int) -> Path:
    """A fleet file of ``groups`` host groups (host-only plan locks on driver branches from R535 on)
    and ``images`` image plan locks (GPUs x frameworks x CUDA pins), resolved in this process."""
    import itertools

    import yaml

    from provision.errors import InputError
    from provision.matrix.loader import load_matrix
    from provision.plan.model import PlanRequest, write_plan
    from provision.plan.resolve import resolve
    from provision.resources import compat_dir

    matrix = load_matrix(compat_dir(None))
    folder = Path(tempfile.mkdtemp(prefix="provision-bench-check-"))
    (folder / "images").mkdir()
    (folder / "hosts").mkdir()
    gpus = ["t4", "l4", "a100-pcie", "h100-sxm", "l40s", "a10", "rtx-4090", "v100"]

    def plans(requests):
        for request in requests:
            try:
                yield resolve(matrix, request)
            except InputError:
                continue

    made = plans(
        PlanRequest("ubuntu22.04", g, framework=fw, cuda=cuda)
        for g, fw, cuda in itertools.product(
            gpus, [None, "pytorch", "tensorflow"], [None, "12.4", "12.8", "13.0", "11.8"]
        )
    )
    for n, plan in zip(range(images), made, strict=False):
        write_plan(plan, folder / "images" / f"i{n:02d}.lock.json")
    hosts = plans(
        PlanRequest(o, g, driver=d, host_only=True)
        for g, d, o in itertools.product(gpus, ["535", "570", "580", "595", "620", None], ["ubuntu22.04", "rocky9"])
    )
    entries = {}
    for n, plan in zip(range(groups), hosts, strict=False):
        write_plan(plan, folder / "hosts" / f"h{n:02d}.lock.json")
        entries[f"g{n:02d}"] = {"lock": f"hosts/h{n:02d}.lock.json"}
    (folder / "fleet.yaml").write_text(yaml.safe_dump({"groups": entries}))
    return folder


if __name__ == "__main__":
    raise SystemExit(main())
