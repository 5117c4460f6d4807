"""Issue 11's catalogue corrections: each test reads the corrected row and the source it cites."""

import datetime as dt
import re

import pytest
from support import COMPAT, edited_compat

from provision.errors import CompatDataError
from provision.matrix.loader import load_matrix
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.tiers import interconnect_gbs
from provision.versions import DottedVersion as Version


def image(matrix, cuda):
    img = matrix.image(Version(cuda))
    assert img is not None, cuda
    return img


# -- images.yaml ------------------------------------------------------------------------------
def test_cuda_12_5_1_has_no_cudnn_tags_on_ubuntu_24_04(real_matrix):
    img = image(real_matrix, "12.5.1")
    assert img.source == "cuda-images-2512"  # dist/12.5.1/cudnn-platforms.json
    assert "cudnn-runtime" not in img.flavours_for("ubuntu24.04")
    assert "runtime" in img.flavours_for("ubuntu24.04")
    assert {"cudnn-runtime", "cudnn-devel"} <= set(img.flavours_for("ubuntu22.04"))
    assert set(img.flavours_for("rockylinux9")) == set(img.flavours)
    assert img.flavours_for("ubuntu20.04") == ()


def test_a_cudnn_plan_on_ubuntu_24_04_never_lands_on_12_5_1(real_matrix):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu24.04", gpu="l4", cuda="12.5"))
    assert not any(tag.endswith("12.5.1-cudnn-runtime-ubuntu24.04") for tag in plan.images.values())
    assert "cudnn-runtime" not in plan.images


def test_cuda_13_0_2_rocky_and_ubi_tags_and_their_cudnn(real_matrix):
    img = image(real_matrix, "13.0.2")
    assert img.source == "cuda-images-2512"
    assert {"rockylinux9", "ubi9"} <= set(img.os)
    # NV_CUDNN_VERSION of NVIDIA's cudnn Dockerfile, from the recorded copy (cuda-images-2512)
    dockerfile = COMPAT.parent / "tests/fixtures/refresh/cuda-images/dist/13.0.2/rockylinux9/runtime/cudnn/Dockerfile"
    assert img.cudnn_version == _env(dockerfile.read_text(), "NV_CUDNN_VERSION")
    assert img.tag("cudnn-runtime", "rockylinux9") == "13.0.2-cudnn-runtime-rockylinux9"


@pytest.mark.parametrize(
    ("cuda", "date", "newer", "source"),
    [
        ("13.0.0", "2025-09-10", "13.0.3", "cuda-images-2512"),  # moved to dist/end-of-life
        ("13.0.1", "2025-11-05", "13.0.3", "cuda-images-2512"),
        ("13.0.2", None, "13.0.3", "cog-docker-hub"),  # superseded: 13.0.3 is on Docker Hub
        ("13.1.1", None, "13.1.2", "cog-docker-hub"),
        ("13.2.0", None, "13.2.1", "cog-docker-hub"),
    ],
)
def test_superseded_image_sets_are_end_of_life(real_matrix, cuda, date, newer, source):
    img = image(real_matrix, cuda)
    assert (img.eol_date, str(img.superseded_by), img.eol_source) == (date, newer, source)
    assert img.past_eol(real_matrix.as_of)
    assert source in real_matrix.sources


def test_newest_updates_are_not_end_of_life(real_matrix):
    for cuda in ("13.2.1", "13.1.2", "13.0.3", "12.9.2", "12.8.2", "12.6.3"):
        assert not image(real_matrix, cuda).past_eol(real_matrix.as_of), cuda


def test_a_dated_end_of_life_counts_from_its_date():
    from provision.matrix.model import ImageRelease

    img = ImageRelease(Version("13.0.0"), ("ubuntu22.04",), ("base",), None, None, "x", None, "2025-09-10", None, "x")
    assert not img.past_eol(dt.date(2025, 9, 9))
    assert img.past_eol(dt.date(2025, 9, 10))


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        ('superseded_by: "13.2.1"', 'superseded_by: "13.3.0"', "not a listed newer update of CUDA 13.2"),
        ('superseded_by: "13.2.1"', 'superseded_by: "13.1.2"', "not a listed newer update of CUDA 13.2"),
        (
            "os: [ubuntu22.04, rockylinux9, ubi9, rockylinux8, ubi8]}",
            "os: [ubuntu22.04, rockylinux10]}",
            "names an OS the release",
        ),
    ],
)
def test_image_eol_and_cudnn_os_are_checked(tmp_path, old, new, what):
    with pytest.raises(CompatDataError) as info:
        load_matrix(edited_compat(tmp_path, "images.yaml", old, new))
    assert what in info.value.message


# -- frameworks.yaml --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fw", "version", "python"),
    [
        ("pytorch", "2.5.1", ">=3.9,<3.14"),  # Requires-Python >=3.8.0, but no cp38 wheel
        ("pytorch", "2.5.0", ">=3.9,<3.14"),
        ("pytorch", "2.4.1", ">=3.8,<3.13"),  # no cp313 wheel
        ("pytorch", "2.1.2", ">=3.8,<3.12"),  # no cp312 wheel
        ("tensorflow", "2.15.1", ">=3.9,<3.12"),
        ("tensorflow", "2.14.0", ">=3.9,<3.12"),
        ("tensorflow", "2.19.1", ">=3.9,<3.13"),
        ("tensorflow", "2.16.1", ">=3.9,<3.13"),
    ],
)
def test_python_ranges_come_from_the_wheels(real_matrix, fw, version, python):
    assert real_matrix.framework(fw).release(Version(version)).python == python


def test_every_framework_release_has_an_upper_python_bound(real_matrix):
    for fw in real_matrix.frameworks:
        for rel in fw.releases:
            assert re.fullmatch(r">=3\.\d+,<3\.\d+", rel.python or ""), (fw.id, str(rel.version), rel.python)


def test_torch_2_11_cu130_carries_the_wheels_cudnn_pin(real_matrix):
    from provision.matrix.refresh import cuda_pins

    build = next(b for b in real_matrix.framework("pytorch").release(Version("2.11.0")).builds if b.variant == "cu130")
    recorded = (
        COMPAT.parent / "tests/fixtures/wheel-metadata/torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl.METADATA"
    )
    pins = cuda_pins(recorded.read_text(), None)  # the wheel's own Requires-Dist, as recorded
    assert (build.cudnn, build.source) == (pins["cudnn"], "pypi-wheel-metadata")
    assert build.cudnn_pinned
    assert build.evidence.endswith("torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl.metadata")


# -- drivers.yaml -----------------------------------------------------------------------------
def test_r620_is_an_ltsb_with_its_first_release(real_matrix):
    r620 = real_matrix.branch(620)
    assert (r620.type, r620.eol) == ("ltsb", "2029-09")
    assert "driver-support-620" in r620.sources
    # its date: tests/data/test_driver_dates.py reads it from the recorded manifest
    assert r620.release(Version("620.70.06")).source == "driver-redist"


def test_a_plan_pinned_to_r595_takes_its_newest_release_where_the_os_has_it(real_matrix):
    assert str(resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", driver="595")).driver.version) == (
        "595.112.07"
    )
    # rocky8's repository is known to carry 595.91.07 (NVIDIA's driver container builds it there), not 595.112.07
    assert str(resolve(real_matrix, PlanRequest(os="rocky8", gpu="h100-sxm", driver="595")).driver.version) == (
        "595.91.07"
    )


@pytest.mark.parametrize(("branch", "kind"), [(470, "ltsb"), (550, "pb")])
def test_branch_designations_from_nvidias_eol_chart(real_matrix, branch, kind):
    b = real_matrix.branch(branch)
    assert b.type == kind
    assert "cuda-images-eol-chart" in b.sources


# -- cudnn.yaml -------------------------------------------------------------------------------
JETSON_ONLY = {"5.3", "6.2", "7.2", "8.7"}


def test_cudnn_matrices_carry_no_jetson_sms(real_matrix):
    for rel in real_matrix.cudnn:
        for build in rel.builds:
            assert not JETSON_ONLY & set(build.compute_capabilities), (str(rel.version), build)
            assert "10.3" not in build.compute_capabilities, str(rel.version)


def test_blackwell_is_listed_only_from_cuda_12_8(real_matrix):
    for rel in real_matrix.cudnn:
        for build in rel.builds:
            if {"10.0", "12.0"} & set(build.compute_capabilities):
                assert not build.cuda.contains(Version("12.6")), (str(rel.version), build)
    builds = real_matrix.cudnn_release(Version("9.17.0")).builds
    assert any(b.cuda.contains(Version("12.8")) and "10.0" in b.compute_capabilities for b in builds)
    assert any(b.cuda.contains(Version("12.6")) and "9.0" in b.compute_capabilities for b in builds)


# -- gpus.yaml --------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", ["t4", "v100-pcie-32gb"])
def test_gen3_boards_count_gen3_bandwidth(real_matrix, gpu):
    g = real_matrix.gpu(gpu)
    assert (g.pcie_generation, g.pcie_bandwidth_gbs) == (3, 32)
    assert interconnect_gbs(g) == 32


def test_unrecorded_pcie_boards_keep_gen4(real_matrix):
    assert interconnect_gbs(real_matrix.gpu("l4")) == 64


def test_a100_80gb_minimum_driver_from_the_450_release_notes(real_matrix):
    g = real_matrix.gpu("a100-sxm4-80gb")
    assert str(g.min_driver) == "450.216.04"
    assert "tesla-rn-450-216" in g.sources


# -- cuda.yaml --------------------------------------------------------------------------------
# Table 3 "CUDA Toolkit and Corresponding Driver Versions", Linux x86_64 column, as printed in the
# 13.2 Update 2 edition (https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/index.html),
# from CUDA 11.8 GA. It has no 12.8 Update 2, 12.9 Update 2, 13.0 Update 3 or 13.1 Update 2: the
# nvidia/cuda image sets with those numbers carry the runtime of the update before them.
RELEASE_NOTES_TABLE_3 = {
    "CUDA 13.2 Update 2": ">=595.71.05",
    "CUDA 13.2 Update 1": ">=595.58.03",
    "CUDA 13.2 GA": ">=595.45.04",
    "CUDA 13.1 Update 1": ">=590.48.01",
    "CUDA 13.1 GA": ">=590.44.01",
    "CUDA 13.0 Update 2": ">=580.95.05",
    "CUDA 13.0 Update 1": ">=580.82.07",
    "CUDA 13.0 GA": ">=580.65.06",
    "CUDA 12.9 Update 1": ">=575.57.08",
    "CUDA 12.9 GA": ">=575.51.03",
    "CUDA 12.8 Update 1": ">=570.124.06",
    "CUDA 12.8 GA": ">=570.26",
    "CUDA 12.6 Update 3": ">=560.35.05",
    "CUDA 12.6 Update 2": ">=560.35.03",
    "CUDA 12.6 Update 1": ">=560.35.03",
    "CUDA 12.6 GA": ">=560.28.03",
    "CUDA 12.5 Update 1": ">=555.42.06",
    "CUDA 12.5 GA": ">=555.42.02",
    "CUDA 12.4 Update 1": ">=550.54.15",
    "CUDA 12.4 GA": ">=550.54.14",
    "CUDA 12.3 Update 1": ">=545.23.08",
    "CUDA 12.3 GA": ">=545.23.06",
    "CUDA 12.2 Update 2": ">=535.104.05",
    "CUDA 12.2 Update 1": ">=535.86.09",
    "CUDA 12.2 GA": ">=535.54.03",
    "CUDA 12.1 Update 1": ">=530.30.02",
    "CUDA 12.1 GA": ">=530.30.02",
    "CUDA 12.0 Update 1": ">=525.85.12",
    "CUDA 12.0 GA": ">=525.60.13",
    "CUDA 11.8 GA": ">=520.61.05",
}


def _table_3_label(version):
    major, minor, update = version.release[:3]
    return f"CUDA {major}.{minor} " + (f"Update {update}" if update else "GA")


def test_cuda_rows_read_their_minimum_driver_from_release_notes_table_3(real_matrix):
    cited = [rel for rel in real_matrix.cuda if rel.source == "cuda-release-notes"]
    assert cited
    for rel in cited:
        label = _table_3_label(rel.version)
        assert f"CUDA {rel.label}" == label, (str(rel.version), rel.label)
        assert label in RELEASE_NOTES_TABLE_3, f"{rel.version}: no {label!r} row in Table 3"
        assert f">={rel.min_driver}" == RELEASE_NOTES_TABLE_3[label], str(rel.version)


def test_every_table_3_release_from_11_8_is_catalogued(real_matrix):
    catalogued = {_table_3_label(rel.version) for rel in real_matrix.cuda}
    assert set(RELEASE_NOTES_TABLE_3) <= catalogued


# -- image sets numbered past their toolkit (images.yaml `toolkit`) ---------------------------
IMAGES_2026 = COMPAT.parent / "tests" / "fixtures" / "refresh" / "cuda-images-2026" / "dist"
TOOLKIT_ROWS = {"13.1.2": "13.1.1", "13.0.3": "13.0.2", "12.9.2": "12.9.1", "12.8.2": "12.8.1"}


def _env(dockerfile: str, name: str) -> str:
    """The one value of ``ENV name=`` in a Dockerfile (amd64 and arm64 stages agree), less its ``-1`` release."""
    values = set(re.findall(rf"^ENV {name}=(\S+)$", dockerfile, re.M))
    assert len(values) == 1, (name, values)
    return values.pop().removesuffix("-1")


def _runtime_dockerfile(cuda: str, eol: bool = False) -> str:
    where = IMAGES_2026 / ("end-of-life" if eol else "") / cuda / "rockylinux9" / "runtime" / "Dockerfile"
    text = where.read_text()
    assert f"FROM ${{IMAGE_NAME}}:{cuda}-base-rockylinux9 AS base" in text
    return text


@pytest.mark.parametrize(("cuda", "toolkit"), sorted(TOOLKIT_ROWS.items()))
def test_image_sets_past_their_toolkit_name_it_and_their_cublas(real_matrix, cuda, toolkit):
    img = image(real_matrix, cuda)
    assert str(img.carries) == toolkit
    assert img.toolkit_source == "cuda-images-2026-toolkit"
    assert img.toolkit_source in real_matrix.sources
    # Table 3 lists the toolkit but no update numbered like the image set
    assert _table_3_label(Version(toolkit)) in RELEASE_NOTES_TABLE_3
    assert _table_3_label(Version(cuda)) not in RELEASE_NOTES_TABLE_3
    assert Version(cuda) not in {c.version for c in real_matrix.cuda}
    dockerfile = _runtime_dockerfile(cuda)
    assert _env(dockerfile, "NV_CUDA_LIB_VERSION") == cuda  # the cuda-libraries meta package takes the set's number
    assert img.cublas == _env(dockerfile, "NV_LIBCUBLAS_VERSION")
    assert Version(img.cublas) > Version(cuda)  # a cuBLAS patch release, newer than the set's own number


def test_12_9_2_carries_the_12_9_1_toolkit_but_its_cublas():
    """The recorded runtime Dockerfiles of 12.9.2 and of the superseded 12.9.1: the same toolkit
    components (nvtx, NPP, NCCL), a newer cuBLAS."""
    new, old = _runtime_dockerfile("12.9.2"), _runtime_dockerfile("12.9.1", eol=True)
    for component in ("NV_NVTX_VERSION", "NV_LIBNPP_VERSION", "NV_LIBNCCL_PACKAGE_VERSION"):
        assert _env(new, component) == _env(old, component), component
    assert (_env(old, "NV_LIBCUBLAS_VERSION"), _env(new, "NV_LIBCUBLAS_VERSION")) == ("12.9.1.4", "12.9.2.10")


def test_every_image_set_carries_a_catalogued_toolkit(real_matrix):
    toolkits = {c.version for c in real_matrix.cuda}
    for img in real_matrix.images:
        assert img.carries in toolkits, str(img.cuda)
        assert (img.toolkit_source is None) == (img.carries == img.cuda), str(img.cuda)


@pytest.mark.parametrize(
    ("os_id", "gpu", "framework", "cuda", "tag"),
    [
        ("ubuntu22.04", "v100", None, "12.9.1", "nvidia/cuda:12.9.2-runtime-ubuntu22.04"),
        ("rocky9", "v100", None, "12.9.1", "nvidia/cuda:12.9.2-runtime-rockylinux9"),
        ("ubuntu22.04", "gh200", "pytorch", "13.0.2", "nvidia/cuda:13.0.3-base-ubuntu22.04"),
        ("rocky9", "gh200", "pytorch", "13.0.2", "nvidia/cuda:13.0.3-base-rockylinux9"),
    ],
)
def test_plans_keep_the_toolkit_and_use_the_newer_image_set(real_matrix, os_id, gpu, framework, cuda, tag):
    plan = resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu, framework=framework))
    assert plan.cuda.version == cuda
    assert plan.cuda.min_driver == str(next(c.min_driver for c in real_matrix.cuda if str(c.version) == cuda))
    assert plan.base_image == tag
    img = real_matrix.image_of(Version(cuda), tag)
    assert not img.past_eol(real_matrix.as_of)
    why = next(r.text for r in plan.reasons if r.component == "image")
    assert f"nvidia/cuda {img.cuda} images (CUDA {cuda} toolkit with cuBLAS {img.cublas})" in why
    assert "past NVIDIA's end of life" not in why


def test_a_superseded_set_of_the_same_toolkit_is_still_a_candidate(real_matrix):
    """With the newer set taken away, the toolkit's own (superseded) set is what remains: chosen,
    and said to be past end of life."""
    matrix = real_matrix._replace(images=tuple(i for i in real_matrix.images if str(i.cuda) != "12.9.2"))
    plan = resolve(matrix, PlanRequest(os="ubuntu22.04", gpu="v100", cuda="12.9"))
    assert (plan.cuda.version, plan.base_image) == ("12.9.1", "nvidia/cuda:12.9.1-runtime-ubuntu22.04")
    assert "superseded by 12.9.2" in next(r.text for r in plan.reasons if r.component == "image")


def test_pinning_the_image_number_is_refused_with_the_toolkit_to_pin(real_matrix):
    from provision.errors import BadPin

    with pytest.raises(BadPin) as info:
        resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="v100", cuda="12.9.2"))
    assert "12.9.2 is an nvidia/cuda image set, not a toolkit release" in info.value.message
    assert "--cuda 12.9.1" in info.value.hint
    for pin in ("12.9", "12.9.1"):
        plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="v100", cuda=pin))
        assert plan.base_image == "nvidia/cuda:12.9.2-runtime-ubuntu22.04", pin


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        ('toolkit: {version: "12.9.1"', 'toolkit: {version: "12.8.1"', "not an older cuda.yaml release of CUDA 12.9"),
        ('toolkit: {version: "12.9.1"', 'toolkit: {version: "12.9.3"', "not an older cuda.yaml release of CUDA 12.9"),
        (
            ', toolkit: {version: "12.9.1", cublas: "12.9.2.10", source: cuda-images-2026-toolkit}',
            "",
            "CUDA 12.9.2 is not a cuda.yaml toolkit release",
        ),
    ],
)
def test_image_toolkits_are_checked(tmp_path, old, new, what):
    with pytest.raises(CompatDataError) as info:
        load_matrix(edited_compat(tmp_path, "images.yaml", old, new))
    assert what in str(info.value)
