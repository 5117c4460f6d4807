#!/usr/bin/env python3
"""Scale of a fleet run's preparation (issue 12: a 1,000-host inventory in 10 groups).

    python benchmarks/bench_scale.py [--hosts 1000] [--runs 3] [--provision PATH] [--keep DIR]

A simulated inventory (YAML, --hosts hosts spread over the 10 groups below, each with its own
address) and a fleet file mapping each group to a lock file. Measured, nothing run on any host
and no Ansible play started:
  * writing the 10 plans: `provision plan --lock` once per group, one after another (reported);
  * `provision inventory check -i hosts.yml --fleet fleet.yaml` (goal: < 5 s);
  * apply's preparation, provision.fleet.apply.prepare(): the inventory parsed and checked (host
    names, connection variables, safety switches), the plans read and held to the catalogue (loaded
    once per run, from the validated-data cache, as a new `provision apply` process loads it), their
    extra vars and the run folder written, exactly what `provision apply` does before it starts
    ansible-runner (goal: < 5 s).
Medians of --runs runs; printed with the machine's core count. Exit 1 if a goal is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

# group -> `provision plan` arguments: the OSes, GPU generations and a MIG layout a big site mixes.
GROUPS = {
    "hgx_b200": ["--os", "ubuntu24.04", "--gpu", "b200"],
    "hgx_h200": ["--os", "ubuntu22.04", "--gpu", "h200"],
    "hgx_h100_mig": ["--os", "ubuntu22.04", "--gpu", "h100-sxm", "--mig", "3g.40gb,2g.20gb,2x1g.10gb"],
    "h100_pcie": ["--os", "rocky9", "--gpu", "h100-pcie"],
    "a100_sxm": ["--os", "ubuntu22.04", "--gpu", "a100-sxm4-80gb"],
    "a100_pcie": ["--os", "rocky9", "--gpu", "a100-pcie-40gb"],
    "l40s": ["--os", "ubuntu24.04", "--gpu", "l40s"],
    "l4": ["--os", "rhel9", "--gpu", "l4"],
    "a10": ["--os", "rocky9", "--gpu", "a10"],
    "v100": ["--os", "ubuntu22.04", "--gpu", "v100-sxm2-32gb"],
}
GOAL_S = 5.0


def run(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"benchmark command failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return took


def write_fleet(work: Path, hosts: int) -> tuple[Path, Path]:
    """hosts.yml (every host in one group, its own address and the usual connection variables)
    and fleet.yaml (group -> plans/<group>.lock.json)."""
    names = list(GROUPS)
    children: dict[str, dict] = {g: {"hosts": {}} for g in names}
    for i in range(hosts):
        group = names[i % len(names)]
        children[group]["hosts"][f"gpu{i:04d}.{group}.example.net"] = {
            "ansible_host": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
            "ansible_user": "provision",
            "ansible_port": 22,
        }
    inventory = work / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": children}}, sort_keys=False), encoding="utf-8")
    fleet = work / "fleet.yaml"
    fleet.write_text(
        yaml.safe_dump({"groups": {g: {"lock": f"plans/{g}.lock.json"} for g in names}}, sort_keys=False),
        encoding="utf-8",
    )
    return inventory, fleet


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--provision",
        default=str(Path(sys.executable).with_name("provision")),
        help="the provision executable (default: next to this Python)",
    )
    parser.add_argument("--keep", metavar="DIR", help="write the inventory, plans and run folders here and keep them")
    args = parser.parse_args()
    if args.hosts < len(GROUPS) or args.runs < 1:
        parser.error(f"--hosts must be at least {len(GROUPS)} and --runs at least 1")

    if args.keep:
        return measure(args, Path(args.keep).resolve())
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        return measure(args, Path(tmp))


def measure(args: argparse.Namespace, work: Path) -> int:
    from provision.errors import ProvisionError
    from provision.fleet.apply import ApplyRequest, prepare
    from provision.matrix.loader import load_matrix
    from provision.resources import compat_dir, playbooks_dir

    (work / "plans").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PROVISION_CACHE_DIR"] = str(work / "cache")
    print(
        f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the start; work folder {work}{'' if args.keep else ' (removed at the end)'}"
    )

    run([args.provision, "plan", *GROUPS["l4"]], env)  # writes the validated-data cache, as after install
    per_plan = []
    for group, plan_args in GROUPS.items():
        per_plan.append(
            run([args.provision, "plan", *plan_args, "--lock", str(work / "plans" / f"{group}.lock.json")], env)
        )
    plans_total = sum(per_plan)

    inventory, fleet = write_fleet(work, args.hosts)
    check = [args.provision, "inventory", "check", "-i", str(inventory), "--fleet", str(fleet)]
    check_s = statistics.median(run(check, env) for _ in range(args.runs))

    os.environ["PROVISION_CACHE_DIR"] = env["PROVISION_CACHE_DIR"]
    playbooks = playbooks_dir()
    prepared = None
    samples = []
    for n in range(args.runs):
        request = ApplyRequest(inventory=str(inventory), fleet=str(fleet), run_dir=str(work / "runs" / f"run-{n}"))
        start = time.perf_counter()
        try:
            prepared = prepare(request, matrix_loader=lambda: load_matrix(compat_dir()), playbooks=playbooks)
        except ProvisionError as exc:
            sys.exit(f"prepare() refused the simulated fleet: {exc.message} ({exc.hint})")
        samples.append(time.perf_counter() - start)
    prepare_s = statistics.median(samples)

    written = sorted(p.name for p in Path(prepared.run_dir, "plans").iterdir())
    assert len(prepared.inventory.hosts) == args.hosts, len(prepared.inventory.hosts)
    assert prepared.extravars["provision_plan_groups"] == list(GROUPS), prepared.extravars["provision_plan_groups"]
    assert written == sorted([f"{g}.lock.json" for g in GROUPS] + [f"{g}.yml" for g in GROUPS]), written

    rows = [
        (f"{len(GROUPS)} x provision plan --lock (one after another)", plans_total),
        ("  one provision plan --lock (median)", statistics.median(per_plan)),
        (f"provision inventory check ({args.hosts} hosts, {len(GROUPS)} groups)", check_s),
        ("apply's preparation: prepare() (inventory, plans, extra vars, run folder)", prepare_s),
        ("all three, as a first run after a data change", plans_total + check_s + prepare_s),
    ]
    print(f"{'step':76} {'seconds':>8}")
    for name, secs in rows:
        print(f"{name:76} {secs:8.2f}")
    goals = [
        (f"inventory check over {args.hosts} hosts < {GOAL_S:g} s", check_s < GOAL_S),
        (f"apply's preparation over {args.hosts} hosts < {GOAL_S:g} s", prepare_s < GOAL_S),
    ]
    for name, ok in goals:
        print(f"goal: {name}: {'met' if ok else 'MISSED'}")
    return 0 if all(ok for _, ok in goals) else 1


if __name__ == "__main__":
    raise SystemExit(main())
