"""doctor's CUDA-vs-driver answer is issue 21's rule: for every catalogued driver release and CUDA
release, doctor's mode equals provision.matrix.runs_on.decide's for a plain application (no
cuda-compat package, GPU unknown), and an old branch's minor-version answer is what the rule says."""

from __future__ import annotations

from provision.doctor.rules_host import cuda_mode
from provision.matrix.runs_on import MINOR, NATIVE, NO, decide, needs_for_cuda
from provision.versions import parse_version, prefix_matches


def test_doctor_asks_the_one_rule_for_every_driver_and_cuda(real_matrix):
    seen = set()
    releases = [r for b in real_matrix.drivers for r in b.releases]
    assert releases
    lines = sorted({f"{c.version.release[0]}.{c.version.release[1]}" for c in real_matrix.cuda})
    for line in lines:  # "12.6": what an application's error names
        oldest = [c for c in real_matrix.cuda if prefix_matches(line, c.version)][-1]  # doctor's choice
        needs = needs_for_cuda(real_matrix, oldest)._replace(compat_package=False)
        for release in releases:
            driver = parse_version(str(release.version))
            mode = cuda_mode(real_matrix, driver, line)
            assert mode == decide(real_matrix, needs, driver).mode, (line, str(driver))
            seen.add(mode)
    assert seen == {NATIVE, MINOR, NO}


def test_r535_runs_any_cuda_12_and_no_cuda_13(real_matrix):
    driver = parse_version("535.183.01")
    twelves = sorted(
        {f"{c.version.release[0]}.{c.version.release[1]}" for c in real_matrix.cuda if c.version.release[0] == 12}
    )
    assert all(cuda_mode(real_matrix, driver, v) in (NATIVE, MINOR) for v in twelves)
    assert cuda_mode(real_matrix, driver, "13.0") == NO
