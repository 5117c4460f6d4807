"""Paths and helpers shared by tests and conftest files (import as `support`)."""

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "compat"
FIXTURE_COMPAT = Path(__file__).resolve().parent / "fixtures" / "compat"
SHARED_FIXTURES = ROOT.parent / "shared" / "reference" / "fixtures"
# `nvidia-smi mig -lgipp` on a GPU of 7 compute slices, as NVIDIA's MIG user guide prints it for
# the A100-SXM4-40GB and the H100 SXM5 (the same placements; compat/mig.yaml cites them).
SEVEN_SLICE_LGIPP = """\
GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 15 Placements: {0,2,4,6}:2
GPU  0 Profile ID 14 Placements: {0,2,4}:2
GPU  0 Profile ID  9 Placements: {0,4}:4
GPU  0 Profile ID  5 Placement : {0}:4
GPU  0 Profile ID  0 Placement : {0}:8
"""


def make_compat(dest: Path, source: Path = FIXTURE_COMPAT) -> Path:
    """A writable copy of a data directory, with the real schemas."""
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("schema"))
    shutil.copytree(COMPAT / "schema", dest / "schema")
    return dest


def edited_compat(tmp_path: Path, file: str, old: str, new: str, source: Path = COMPAT) -> Path:
    """A copy of a data directory (the live catalogue unless told) whose `file` has its first
    `old` replaced by `new`; fails when `old` is gone, so a data refresh cannot empty the test."""
    compat = make_compat(tmp_path / "compat", source)
    path = compat / file
    text = path.read_text()
    assert old in text, f"{source} changed: {old!r} not in {file}"
    path.write_text(text.replace(old, new, 1))
    return compat


BUILD_KINDS = {
    # a TensorFlow-style [and-cuda] build whose CUDA runtime wheel is a range
    "range": lambda b: bool(b.extra and b.cuda_runtime and b.cuda_runtime[0] in "<>=!~"),
    # an [and-cuda] build with an exact CUDA 12 runtime pin
    "exact-extra": lambda b: bool(
        b.extra and b.cuda_runtime and b.cuda_runtime[0].isdigit() and int(b.cuda.split(".")[0]) < 13
    ),
    # CUDA 13 wheels: the runtime comes through the cuda-toolkit metapackage
    "cuda13": lambda b: bool(b.libraries == "wheels" and b.cuda_runtime and int(b.cuda.split(".")[0]) >= 13),
    # CUDA and cuDNN from the image, not from wheels
    "system": lambda b: b.libraries == "system",
}


def plan_by_build_kind(matrix, kind: str, os_id: str = "ubuntu22.04"):
    """The newest release (catalogue order) whose default build is of this kind, planned with that
    build on the first GPU it resolves for: (plan, build), or None. Live-data tests pick their
    subject this way, so a refresh that adds or drops releases changes no expectation."""
    from provision.errors import InputError
    from provision.plan.model import PlanRequest
    from provision.plan.resolve import resolve

    for fw in matrix.frameworks:
        for release in fw.releases:
            build = next((b for b in release.builds if b.default), None)
            if build is None or not BUILD_KINDS[kind](build):
                continue
            for gpu in matrix.gpus:
                try:
                    plan = resolve(matrix, PlanRequest(os_id, gpu.id, framework=f"{fw.id}=={release.version}"))
                except InputError:
                    continue
                if plan.framework.variant == build.variant:
                    return plan, build
    return None


def one_error_line(args: list[str], capsys) -> tuple[int, str]:
    """``python -m provision.matrix.refresh ARGS``, in-process, expected to fail with one error
    line and a hint (never a traceback): its exit code and that line."""
    from provision.matrix import refresh

    rc = refresh.main(args)
    err = capsys.readouterr().err
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert "(hint: " in err
    return rc, err


# The test fleets (tests/integration/conftest.py): the session's shared fleet, whose tests are one
# serial chain on the same hosts, and the Rocky/Debian module fleet. tests/run runs their tests
# (--part fleet) beside all the others (--part rest) in a second pytest process, as they leave the
# CPU idle about 40% of the time (waiting on hosts). A module marked fresh_fleet starts from fresh
# hosts and leaves them as it found them: the rest part runs it on a session fleet of its own.
FLEET_FIXTURES = ("fleet_env", "rocky_env")
OWN_FLEET_MARK = "fresh_fleet"
PARTS = ("fleet", "rest")


def in_fleet_part(item) -> bool:
    """Whether the test belongs to --part fleet: it uses a test fleet, and is not marked fresh_fleet."""
    if not set(FLEET_FIXTURES) & set(getattr(item, "fixturenames", ())):
        return False
    marker = getattr(item, "get_closest_marker", lambda name: None)(OWN_FLEET_MARK)
    return marker is None


def split_part(items: list, part: str) -> tuple[list, list]:
    """(kept, deselected) for --part: the items of the fleet part, or all the others. The two parts of
    one collection are disjoint and together are the whole of it."""
    if part not in PARTS:
        raise ValueError(f"--part {part!r}: one of {', '.join(PARTS)}")
    keep, drop = [], []
    for item in items:
        (keep if in_fleet_part(item) == (part == "fleet") else drop).append(item)
    return keep, drop
