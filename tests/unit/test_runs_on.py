"""The rule that decides whether an image runs on a host (provision.matrix.runs_on): one test per
mode and per boundary, taken from the catalogue's own rows, and the Container Toolkit expression
the rendered image carries held to the same answer on every catalogued driver, CUDA and GPU."""

from __future__ import annotations

import pytest

from provision.matrix.runs_on import (
    DATA_CENTER_BRANDS,
    FORWARD,
    MINOR,
    NATIVE,
    NO,
    HostFacts,
    ImageNeeds,
    decide,
    needs_for_cuda,
    require_cuda,
    toolkit_admits,
)
from provision.versions import DottedVersion as V


def cuda(matrix, version: str):
    return next(c for c in matrix.cuda if str(c.version) == version)


def releases(matrix):
    """Every catalogued driver release, oldest first."""
    return sorted({r.version for b in matrix.drivers for r in b.releases})


def below(matrix, version: V) -> V:
    """The newest catalogued driver release older than ``version``."""
    return max(r for r in releases(matrix) if r < version)


def gpu(matrix, ident: str):
    return matrix.gpu(ident)


# -- native -----------------------------------------------------------------------------------
def test_exactly_the_table3_minimum_is_native(real_matrix):
    for row in real_matrix.cuda:
        if row.min_driver in releases(real_matrix):
            verdict = decide(real_matrix, needs_for_cuda(real_matrix, row), row.min_driver)
            assert verdict.mode == NATIVE, (row.version, verdict)
            assert "Table 3" in verdict.reason


def test_a_newer_cuda_major_driver_runs_older_images_natively(real_matrix):
    r580 = max(r.version for r in real_matrix.branch(580).releases)
    verdict = decide(
        real_matrix, needs_for_cuda(real_matrix, cuda(real_matrix, "11.8.0")), r580, gpu(real_matrix, "t4")
    )
    assert verdict.mode == NATIVE


# -- minor-version ----------------------------------------------------------------------------
def test_one_release_below_the_minimum_is_minor_version_in_the_same_major(real_matrix):
    row = cuda(real_matrix, "12.8.1")  # 570.124.06
    driver = below(real_matrix, row.min_driver)
    assert driver.release[0] >= 525
    verdict = decide(real_matrix, needs_for_cuda(real_matrix, row), driver, gpu(real_matrix, "l4"))
    assert verdict.mode == MINOR
    assert "Table 2" in verdict.reason
    assert any("PTX" in limit for limit in verdict.limits)


def test_exactly_the_table2_floor_is_minor_version(real_matrix):
    for floor in real_matrix.minor_compat:
        newest = max((c for c in real_matrix.cuda if c.version.release[0] == floor.cuda_major), key=lambda c: c.version)
        if floor.min_driver >= newest.min_driver:
            continue  # the floor is the newest release's own minimum: native
        verdict = decide(real_matrix, needs_for_cuda(real_matrix, newest), floor.min_driver)
        assert verdict.mode == MINOR, (floor, verdict)


def test_just_below_the_table2_floor_is_refused(real_matrix):
    floor = real_matrix.minor_compat_floor(12)
    row = max((c for c in real_matrix.cuda if c.version.release[0] == 12), key=lambda c: c.version)
    driver = below(real_matrix, floor.min_driver)
    verdict = decide(real_matrix, needs_for_cuda(real_matrix, row), driver, gpu(real_matrix, "t4"))
    assert verdict.mode == NO
    assert str(row.min_driver) in verdict.reason


def test_minor_version_does_not_jit_newer_ptx(real_matrix):
    """A GPU the image serves only through PTX needs the native driver (or forward compatibility)."""
    row = cuda(real_matrix, "12.8.1")
    needs = ImageNeeds(row.version, row.min_driver, ("7.5",), "8.0", (), True, "torch")
    r535 = max(r.version for r in real_matrix.branch(535).releases)
    rtx = gpu(real_matrix, "rtx-4090")  # sm_89: PTX only, and no forward compatibility off the data center
    refused = decide(real_matrix, needs, r535, rtx)
    assert refused.mode == NO
    assert "PTX" in refused.reason
    assert decide(real_matrix, needs, r535, gpu(real_matrix, "t4")).mode == MINOR  # sm_75 SASS
    assert decide(real_matrix, needs, row.min_driver, rtx).mode == NATIVE  # the native driver JITs it
    assert decide(real_matrix, needs, r535, gpu(real_matrix, "l4")).mode == FORWARD  # cuda-compat-12-8 on R535


# -- across a CUDA major: forward compatibility, or no ----------------------------------------
def test_a_cuda13_image_on_r535_is_forward_compat_on_data_center_gpus_only(real_matrix):
    row = cuda(real_matrix, "13.0.2")
    r535 = max(r.version for r in real_matrix.branch(535).releases)
    needs = needs_for_cuda(real_matrix, row)
    assert decide(real_matrix, needs, r535, gpu(real_matrix, "l4")).mode == FORWARD
    consumer = decide(real_matrix, needs, r535, gpu(real_matrix, "rtx-4090"))
    assert consumer.mode == NO
    assert "data-center" in consumer.reason
    without = decide(real_matrix, needs._replace(compat_package=False), r535, gpu(real_matrix, "l4"))
    assert without.mode == NO


def test_forward_compat_only_on_the_branches_its_table_lists(real_matrix):
    row = cuda(real_matrix, "13.0.2")  # cuda-compat-13-0: R535 and R570
    listed = next(f for f in real_matrix.forward_compat if f.cuda == "13.0")
    for branch in real_matrix.drivers:
        newest = branch.releases[0].version
        if newest >= row.min_driver or branch.branch >= 580:
            continue
        verdict = decide(real_matrix, needs_for_cuda(real_matrix, row), newest, gpu(real_matrix, "h100-sxm"))
        assert (verdict.mode == FORWARD) == (branch.branch in listed.branches), (branch.branch, verdict)


def test_an_older_major_driver_without_forward_compat_is_refused_with_the_reason(real_matrix):
    row = cuda(real_matrix, "12.4.1")
    r470 = next((b for b in real_matrix.drivers if b.branch < 525), None)
    if r470 is None:
        pytest.skip("no pre-R525 branch catalogued")
    verdict = decide(real_matrix, needs_for_cuda(real_matrix, row), r470.releases[0].version, gpu(real_matrix, "t4"))
    assert verdict.mode == NO
    assert "older major" in verdict.reason or "floor" in verdict.reason


# -- the GPU's SM --------------------------------------------------------------------------------
def test_an_sm_the_image_does_not_carry_is_refused_on_any_driver(real_matrix):
    row = cuda(real_matrix, "13.0.2")  # CUDA 13 no longer builds for sm_70
    newest = max(releases(real_matrix))
    verdict = decide(real_matrix, needs_for_cuda(real_matrix, row), newest, gpu(real_matrix, "v100-pcie-32gb"))
    assert verdict.mode == NO
    assert "sm_70" in verdict.reason


# -- the Container Toolkit agrees --------------------------------------------------------------
def brands(g) -> tuple[str, ...]:
    return DATA_CENTER_BRANDS if g.segment == "data-center" else ("GeForce", "NVIDIA RTX")


def test_the_toolkit_expression_admits_exactly_what_the_rule_admits(real_matrix):
    """Every catalogued driver release x CUDA release x GPU (and its NVML brands)."""
    checked = 0
    drivers = releases(real_matrix)
    for row in real_matrix.cuda:
        needs = needs_for_cuda(real_matrix, row)
        expression = require_cuda(real_matrix, needs)
        for g in real_matrix.gpus:
            for driver in drivers:
                verdict = decide(real_matrix, needs, driver, g)
                for brand in brands(g):
                    host = HostFacts(str(driver), "0", g.compute_capability, brand)
                    assert toolkit_admits(expression, host) == verdict.runs, (
                        str(row.version),
                        g.id,
                        str(driver),
                        brand,
                        verdict,
                        expression,
                    )
                    checked += 1
    assert checked > 10_000


def test_toolkit_semantics_follow_libnvidia_container():
    host = HostFacts("535.183.01", "12.2", "8.0", "Tesla")
    assert toolkit_admits("cuda>=12.2", host)
    assert not toolkit_admits("cuda>=12.4", host)
    assert toolkit_admits("cuda>=12.4 brand=tesla,driver>=535,driver<536", host)  # any alternative
    assert not toolkit_admits("brand=tesla,driver>=550,driver<551", host)  # all of one
    assert toolkit_admits("driver>=535.183.01.0,arch>=8.0,arch<9", host)  # trailing zero fields ignored
    assert not toolkit_admits("arch>=8.6", host)
