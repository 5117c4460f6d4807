"""provision against this machine's real NVIDIA GPU (marked gpu; skipped with the reason without
one). Read-only: only nvidia-smi's listing and query commands, `provision verify --local` and
`provision doctor --local` run, and neither changes the host. What each test read is saved under
the `captures` folder (tests/gpu/capture.sh keeps it in tests/fixtures/gpu-captures/<gpu>/)."""

from __future__ import annotations

import json
import sys

import pytest
from livegpu import keep, run, save

from provision.doctor.parse_smi import parse_csv, parse_xml
from provision.matrix.detect import mig_differences, parse_lgip, parse_lgipp

pytestmark = pytest.mark.gpu

PROVISION = [sys.executable, "-m", "provision"]
BASIC = "index,name,pci.bus_id,driver_version,persistence_mode,mig.mode.current,mig.mode.pending"
# What doctor's findings say, in --query-gpu fields (tried after BASIC; older drivers lack some).
HEALTH = (
    "index,persistence_mode,mig.mode.current,mig.mode.pending,ecc.errors.uncorrected.volatile.total,"
    "ecc.errors.uncorrected.aggregate.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure"
)


def _query(smi, captures, fields: str, name: str):
    res = smi(f"--query-gpu={fields}", "--format=csv")
    keep(captures, name, res)
    return res


def _basic(smi, captures):
    res = _query(smi, captures, BASIC, "query-gpu.csv")
    assert res.rc == 0, f"nvidia-smi --query-gpu={BASIC}: {res.text}"
    return parse_csv(res.out, "query-gpu.csv")


def _live_profiles(smi, captures):
    lgip = smi("mig", "-lgip")
    lgipp = smi("mig", "-lgipp")
    keep(captures, "mig-lgip.txt", lgip)
    keep(captures, "mig-lgipp.txt", lgipp)
    return lgip, parse_lgip(lgip.out), parse_lgipp(lgipp.out)


def test_q_x_and_query_gpu_parse_alike(live, smi, captures):
    """doctor's -q -x and --query-gpu parsers read the same GPUs, driver and modes from the live GPU."""
    xml = smi("-q", "-x")
    keep(captures, "q-x.xml", xml)
    assert xml.rc == 0, f"nvidia-smi -q -x: {xml.text[:500]}"
    from_xml = parse_xml(xml.out, "q-x.xml")
    from_csv = _basic(smi, captures)
    listed = [line for line in live.listing.splitlines() if line.startswith("GPU ")]

    assert len(from_xml.gpus) == len(from_csv.gpus) == len(listed) == len(live.gpus)
    assert from_xml.attached == len(listed)
    assert from_xml.driver_version == from_csv.driver_version is not None
    by_bus = sorted(from_xml.gpus, key=lambda g: g.bus_id or ""), sorted(from_csv.gpus, key=lambda g: g.bus_id or "")
    for x, c in zip(*by_bus, strict=True):
        assert (x.bus_id, x.name, x.persistence, x.mig_current, x.mig_pending) == (
            c.bus_id,
            c.name,
            c.persistence,
            c.mig_current,
            c.mig_pending,
        )
    assert {g.name for g in from_csv.gpus} == {g.name for g in live.gpus}


def test_mig_profiles_and_placements_match_catalogue(real_matrix, live, smi, captures):
    """nvidia-smi mig -lgip / -lgipp: the profiles (names, ids, counts) and placements are the
    catalogue's for this GPU; a GPU the catalogue calls not MIG-capable reports no MIG mode."""
    gpu_id = live.gpus[0].catalogue_id
    if gpu_id is None:
        pytest.skip(f"{live.gpus[0].name} ({live.gpus[0].device_id}) is not in compat/gpus.yaml")
    gpu = real_matrix.gpu(gpu_id)
    modes = {g.mig_current for g in _basic(smi, captures).gpus}
    if gpu.mig is None:
        assert modes == {None}, f"compat/gpus.yaml says {gpu_id} has no MIG; nvidia-smi reports MIG mode {modes}"
        return
    lgip, rows, placements = _live_profiles(smi, captures)
    if not rows:
        pytest.skip(
            f"nvidia-smi mig -lgip lists no profiles ({lgip.first_line()}); MIG mode is {sorted(map(str, modes))} "
            "and these tests never change it"
        )
    assert placements, "nvidia-smi mig -lgip lists profiles but mig -lgipp no placements"
    profile_set = real_matrix.mig_set(gpu.mig)
    problems = [
        p for index in sorted({r.gpu for r in rows}) for p in mig_differences(profile_set, rows, placements, index)
    ]
    assert not problems, "\n".join(problems)


def test_gpus_lists_the_live_gpu(live):
    gpu_id = live.gpus[0].catalogue_id
    if gpu_id is None:
        pytest.skip(f"{live.gpus[0].name} ({live.gpus[0].device_id}) is not in compat/gpus.yaml")
    res = run([*PROVISION, "gpus", "--gpu", gpu_id, "--format", "json"], 120)
    assert res.rc == 0, res.text
    assert [row["id"] for row in json.loads(res.out)] == [gpu_id]


def test_mig_plan_for_the_live_gpu(real_matrix, live, smi, captures):
    """`provision mig plan --fill` for the live GPU: instances only at start slots the live GPU
    allows (when it lists them); a GPU without MIG is refused with exit 2."""
    gpu_id = live.gpus[0].catalogue_id
    if gpu_id is None:
        pytest.skip(f"{live.gpus[0].name} ({live.gpus[0].device_id}) is not in compat/gpus.yaml")
    gpu = real_matrix.gpu(gpu_id)
    if gpu.mig is None:
        res = run([*PROVISION, "mig", "plan", "--gpu", gpu_id, "--fill", "1g.10gb"], 120)
        assert res.rc == 2, res.text
        return
    profile_set = real_matrix.mig_set(gpu.mig)
    smallest = min((p for p in profile_set.profiles if not p.media), key=lambda p: (p.memory_slices, p.compute_slices))
    res = run([*PROVISION, "mig", "plan", "--gpu", gpu_id, "--fill", smallest.name, "--format", "json"], 120)
    assert res.rc == 0, res.text
    keep(captures, "mig-plan.json", res)
    instances = json.loads(res.out)["instances"]
    assert len(instances) == smallest.max_instances
    _, _, placements = _live_profiles(smi, captures)
    live_starts = {p.id: set(p.placements) for p in placements if p.gpu == 0}
    for inst in instances:
        assert inst["placement"] in smallest.placements
        if live_starts:
            assert inst["placement"] in live_starts[inst["profile_id"]], (inst, live_starts)


def test_verify_local_against_a_plan_for_this_gpu(live, target, smi, captures, tmp_path):
    """`provision verify --local` with a plan for the live GPU and OS: the host is reachable, runs
    the planned OS and GPU, and the nvidia-smi check passes exactly when the live driver is the
    planned one (the plan pins it when the catalogue has it)."""
    os_id, gpu_id = target
    driver = _basic(smi, captures).driver_version
    lock = tmp_path / "plan.lock.json"
    tried = []
    for pin in (driver, driver.split(".")[0], None):
        cmd = [*PROVISION, "plan", "--os", os_id, "--gpu", gpu_id, "--lock", str(lock)]
        res = run([*cmd, "--driver", pin] if pin else cmd, 120)
        if res.rc == 0:
            break
        tried.append(f"--driver {pin}: {res.err.strip().splitlines()[0] if res.err.strip() else res.rc}")
    else:
        pytest.skip(f"no plan for {os_id} + {gpu_id}: " + "; ".join(tried))
    save(captures, "plan.lock.json", lock.read_text(encoding="utf-8"))
    junit = captures / "verify.junit.xml"
    res = run(
        [*PROVISION, "verify", "--local", "--plan", str(lock), "--format", "json", "--junit", str(junit)],
        400,
    )
    keep(captures, "verify.json", res)
    assert res.rc in (0, 1), res.text
    report = json.loads(res.out)
    assert report["status"] == ("pass" if res.rc == 0 else "fail")
    host = report["hosts"][0]
    assert host["status"] != "error", host["error"]
    checks = {c["id"]: c for c in host["checks"]}
    for ident in ("reachable", "os", "gpus"):
        assert checks[ident]["status"] == "pass", checks[ident]
    planned = json.loads(lock.read_text(encoding="utf-8"))["driver"]["version"]
    smi_check = checks["nvidia-smi"]
    if planned == driver:
        assert smi_check["status"] == "pass", smi_check
    else:
        assert smi_check["status"] == "fail", smi_check
        assert driver in smi_check["detail"], smi_check


def test_doctor_local_matches_nvidia_smi(live, smi, captures):
    """`provision doctor --local` on the live host: healthy, or with findings that what nvidia-smi
    itself reports backs (and none that nvidia-smi's own answers rule out)."""
    res = run([*PROVISION, "doctor", "--local", "--format", "json", "--save-dir", str(captures / "doctor")], 400)
    keep(captures, "doctor.json", res)
    assert res.rc in (0, 1), res.text
    report = json.loads(res.out)
    assert report["exit_code"] == res.rc
    findings = {f["id"]: f for f in report["findings"]}
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert (res.rc == 1) == bool(errors), report["findings"]
    # nvidia-smi answered -L and --query-gpu: doctor must not say it failed, hung or has no driver.
    ruled_out = {"nvidia-smi-failed", "nvidia-smi-hung", "driver-not-loaded", "collector-stopped"}
    assert not ruled_out & findings.keys(), [findings[i] for i in ruled_out & findings.keys()]

    health = _query(smi, captures, HEALTH, "query-gpu-health.csv")
    gpus = parse_csv(health.out, "query-gpu-health.csv").gpus if health.rc == 0 else _basic(smi, captures).gpus
    pending_mig = any(g.mig_current and g.mig_pending and g.mig_current != g.mig_pending for g in gpus)
    assert ("mig-pending-reboot" in findings) == pending_mig
    if "persistence-off" in findings:
        assert any(g.persistence is False for g in gpus)
    if health.rc != 0:
        return
    both_ways = {
        "ecc-uncorrectable": any(g.ecc_volatile_unc or g.ecc_aggregate_unc for g in gpus),
        "retired-pages-pending": any(g.retired_pending for g in gpus),
        "remapped-rows-pending": any(g.remap_pending for g in gpus),
        "remapped-rows-failed": any(g.remap_failure for g in gpus),
    }
    for ident, smi_says in both_ways.items():
        assert (ident in findings) == smi_says, (ident, findings.get(ident), health.out)
