"""Issue 11, item 6: the host OSes added to the catalogue (Rocky/RHEL 8 and 10), each row read
against its source.

The sources are not in this repository, so the parts each row rests on are quoted here verbatim
(NVIDIA's driver installation guide tables, NVIDIA/gpu-driver-container's CI matrix and
Dockerfiles, the nvidia/cuda dist/ tree of NVIDIA's container-images repository at e3c1b680) and
parsed; the catalogue rows must say what the quotes say, no more.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from provision.errors import NoCompatibleStack
from provision.matrix import refresh_images as ri
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
NEW_OS = ("rocky8", "rhel8", "rocky10", "rhel10")

# -- driver-install-guide-os-table: Introduction, Linux System Requirements (610 edition) --------
OS_TABLE = """\
Red Hat Enterprise Linux 10 | rhel10 | x86_64
Red Hat Enterprise Linux 9 | rhel9 | x86_64
Red Hat Enterprise Linux 8 | rhel8 | x86_64
Rocky Linux 10 | rhel10 | x86_64
Rocky Linux 9 | rhel9 | x86_64
Rocky Linux 8 | rhel8 | x86_64
Ubuntu 26.04 LTS | ubuntu2604 | amd64
Debian 13 | debian13 | amd64
"""
TABLE_NAME = {"rocky8": "Rocky Linux 8", "rhel8": "Red Hat Enterprise Linux 8",
              "rocky10": "Rocky Linux 10", "rhel10": "Red Hat Enterprise Linux 10"}  # fmt: skip

# -- gpu-driver-container-el: .common-ci.yml at 06a208ca ------------------------------------------
CI = """\
.driver-versions:
  parallel:
    matrix:
      - DRIVER_VERSION: [580.178.04, 595.91.07, 610.57.04]
.driver-versions-rhel10:
  parallel:
    matrix:
      - DRIVER_VERSION: [580.178.04, 595.91.07, 610.57.04]
.dist-rhel8:
  variables:
    DIST: rhel8
.dist-rhel10:
  variables:
    DIST: rhel10
.dist-rocky8:
  variables:
    DIST: rocky8
.dist-rocky10:
  variables:
    DIST: rocky10
"""
# rhel8/install.sh and rhel10/install.sh (same commit), the lines naming the repository and streams
INSTALL_SH = {
    "rhel8": """\
      dnf module enable -y nvidia-driver:${DRIVER_BRANCH}-dkms
    OS_ARCH=${TARGETARCH/amd64/x86_64} && OS_ARCH=${OS_ARCH/arm64/sbsa};
    dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/repos/rhel8/${OS_ARCH}/cuda-rhel8.repo
""",
    "rhel10": """\
    dnf config-manager --set-enabled crb
    dnf config-manager --set-enabled codeready-builder-for-rhel-10-${DRIVER_ARCH}-rpms || true
    OS_ARCH=${TARGETARCH/amd64/x86_64} && OS_ARCH=${OS_ARCH/arm64/sbsa};
    dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/repos/rhel10/${OS_ARCH}/cuda-rhel10.repo
""",
}

# -- kernel-modules-guide-el10 (620 edition, Table 5) and driver-install-advanced-el10 (595) ------
TABLE5 = {
    "el8": "# dnf module enable nvidia-driver:580-open\n# dnf install nvidia-open",
    "el10": "# dnf install nvidia-open\n# dnf versionlock \\*nvidia\\*580\\*\n# dnf install nvidia-open",
}
ADVANCED_EL10 = """\
Red Hat Enterprise Linux 10, AlmaLinux 10, Rocky Linux 10, Fedora 43
To switch from proprietary to open:
# dnf install --allowerasing nvidia-open
To switch from open to proprietary:
# dnf install --allowerasing cuda-drivers
"""

# -- cuda-images-el-repos: `git ls-tree` of dist/ at NVIDIA's e3c1b680 (base/Dockerfile dirs) ----
EL_IMAGE_DIRS = """\
dist/11.8.0/rockylinux8 dist/12.0.1/rockylinux8 dist/12.1.1/rockylinux8 dist/12.2.2/rockylinux8
dist/12.3.2/rockylinux8 dist/12.4.1/rockylinux8 dist/12.5.1/rockylinux8 dist/12.6.3/rockylinux8
dist/12.8.1/rockylinux8 dist/12.9.1/rockylinux8 dist/13.0.2/rockylinux8 dist/13.1.0/rockylinux10
dist/13.1.0/rockylinux8 dist/end-of-life/12.0.0/rockylinux8 dist/end-of-life/12.1.0/rockylinux8
dist/end-of-life/12.2.0/rockylinux8 dist/end-of-life/12.3.0/rockylinux8 dist/end-of-life/12.3.1/rockylinux8
dist/end-of-life/12.4.0/rockylinux8 dist/end-of-life/12.5.0/rockylinux8 dist/end-of-life/12.6.0/rockylinux8
dist/end-of-life/12.6.1/rockylinux8 dist/end-of-life/12.6.2/rockylinux8 dist/end-of-life/12.8.0/rockylinux8
dist/end-of-life/12.9.0/rockylinux8 dist/end-of-life/13.0.0/rockylinux10 dist/end-of-life/13.0.0/rockylinux8
dist/end-of-life/13.0.1/rockylinux10 dist/end-of-life/13.0.1/rockylinux8
dist/13.2.1/rockylinux10 dist/13.2.1/rockylinux8
"""  # the last line: pranavmishra90/nvidia-container-images-cuda f070c948, dist/13.2.1/rockylinux10/base/Dockerfile;
# f577282f, dist/13.2.1/rockylinux8/base/Dockerfile (cuda-cudart-13-2-13.2.75-1 from repos/rhel8/${NVARCH})
# dist/13.1.0/rockylinux10/base/cuda.repo-x86_64 and cuda.repo-arm64 (baseurl lines); rockylinux8: rhel8
REPO_FILES = {
    "x86_64": "baseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel10/x86_64",
    "aarch64": "baseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel10/sbsa",
}


def _os(matrix, os_id):
    return matrix.os(os_id)


@pytest.mark.parametrize("os_id", NEW_OS)
def test_repository_directory_is_the_guides_codename(real_matrix, os_id):
    rows = dict(line.split(" | ")[:2] for line in OS_TABLE.splitlines())
    o = _os(real_matrix, os_id)
    assert o.nvidia_repo == rows[TABLE_NAME[os_id]]
    assert o.family == "RedHat"
    assert o.pkg_manager == "dnf"
    assert o.version == re.search(r"\d+$", TABLE_NAME[os_id]).group(0)
    assert o.distribution == ("Rocky" if os_id.startswith("rocky") else "RedHat")
    assert o.kernel_headers == ("kernel-devel-{kernel}", "kernel-headers-{kernel}")
    assert set(o.sources) <= set(real_matrix.sources)


@pytest.mark.parametrize("os_id", NEW_OS)
def test_arches_are_the_driver_containers_os_arch_mapping(real_matrix, os_id):
    o = _os(real_matrix, os_id)
    script = INSTALL_SH[o.nvidia_repo]
    # OS_ARCH=${TARGETARCH/amd64/x86_64} && OS_ARCH=${OS_ARCH/arm64/sbsa}: amd64 -> x86_64, arm64 -> sbsa
    mapping = dict(re.findall(r"\$\{\w+/(amd64|arm64)/(\w+)\}", script))
    assert dict(o.arches) == {"x86_64": mapping["amd64"], "aarch64": mapping["arm64"]}
    assert f"/compute/cuda/repos/{o.nvidia_repo}/${{OS_ARCH}}/" in script
    if o.nvidia_repo == "rhel10":
        assert REPO_FILES["x86_64"].endswith(f"/{o.nvidia_repo}/{dict(o.arches)['x86_64']}")
        assert REPO_FILES["aarch64"].endswith(f"/{o.nvidia_repo}/{dict(o.arches)['aarch64']}")


def test_driver_releases_are_the_ones_the_driver_container_builds(real_matrix):
    versions = set(re.search(r"\.driver-versions:\n.*?DRIVER_VERSION: \[([^\]]+)\]", CI, re.S).group(1).split(", "))
    rhel10 = set(
        re.search(r"\.driver-versions-rhel10:\n.*?DRIVER_VERSION: \[([^\]]+)\]", CI, re.S).group(1).split(", ")
    )
    dists = set(re.findall(r"DIST: (\w+)", CI))
    assert {"rhel8", "rocky8", "rhel10", "rocky10"} <= dists
    for os_id, expected in (("rocky8", versions), ("rhel8", versions), ("rocky10", rhel10), ("rhel10", rhel10)):
        listed = {str(r.version) for b in real_matrix.drivers for r in b.releases if os_id in r.os}
        assert listed == expected, os_id


def test_el8_packaging_uses_the_module_streams(real_matrix):
    assert "dnf module enable nvidia-driver:580-open" in TABLE5["el8"]
    assert "nvidia-driver:${DRIVER_BRANCH}-dkms" in INSTALL_SH["rhel8"]
    for os_id in ("rocky8", "rhel8"):
        for branch in (580, 595, 610):
            opened = real_matrix.packaging_for(os_id, branch, "open")
            assert opened.method == "dnf-module"
            assert opened.module_stream.format(branch=branch) == f"nvidia-driver:{branch}-open"
            assert "nvidia-open" in opened.packages
            prop = real_matrix.packaging_for(os_id, branch, "proprietary")
            assert prop.module_stream.format(branch=branch) == f"nvidia-driver:{branch}-dkms"


def test_el10_packaging_has_no_module_stream(real_matrix):
    assert "module" not in TABLE5["el10"]
    assert "module" not in INSTALL_SH["rhel10"]
    open_pkg = re.search(r"# dnf install (\S+)$", TABLE5["el10"]).group(1)
    to_open = re.search(r"proprietary to open:\n# dnf install --allowerasing (\S+)", ADVANCED_EL10).group(1)
    to_prop = re.search(r"open to proprietary:\n# dnf install --allowerasing (\S+)", ADVANCED_EL10).group(1)
    assert open_pkg == to_open == "nvidia-open"
    for os_id in ("rocky10", "rhel10"):
        for branch in (580, 595, 610):
            opened = real_matrix.packaging_for(os_id, branch, "open")
            prop = real_matrix.packaging_for(os_id, branch, "proprietary")
            assert (opened.method, opened.module_stream, opened.packages) == ("dnf", None, (open_pkg,))
            assert (prop.method, prop.module_stream, prop.packages) == ("dnf", None, (to_prop,))
            assert opened.fabric_manager == ("nvidia-fabricmanager", "libnvidia-nscq")
        assert real_matrix.packaging_for(os_id, 570, "open") is None  # no rhel10 release before R580 here


def test_cuda_releases_are_those_with_el_images(real_matrix):
    dirs = EL_IMAGE_DIRS.split()
    by_os = {"rockylinux8": set(), "rockylinux10": set()}
    for d in dirs:
        version, os_dir = d.split("/")[-2:]
        by_os[os_dir].add(version)
    for os_id, image_os in (("rocky8", "rockylinux8"), ("rhel8", "rockylinux8"),
                            ("rocky10", "rockylinux10"), ("rhel10", "rockylinux10")):  # fmt: skip
        carried = {str(c.version) for c in real_matrix.cuda if os_id in c.os}
        assert carried == by_os[image_os] & {str(c.version) for c in real_matrix.cuda}, os_id
    assert "13.0.2" not in by_os["rockylinux10"]  # NVIDIA built no rockylinux10 13.0.2 images


def test_image_rows_are_the_recorded_refresh():
    fixture = ROOT / "tests" / "fixtures" / "refresh" / "cuda-images"
    assert ri.check(ROOT / "compat", ri.recorded_get(fixture), ri.recorded_key(fixture)) == []
    supported = ri.parse_tags((fixture / "doc" / "supported-tags.md").read_text())
    for image_os in ("rockylinux10", "ubi10"):
        assert {c for c, listed in supported.items() if image_os in listed.os} == {"13.1.0"}


@pytest.mark.parametrize("os_id", NEW_OS)
@pytest.mark.parametrize("gpu", ["h100-sxm", "l4"])
def test_plans_resolve(real_matrix, os_id, gpu):
    plan = resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu))
    o = _os(real_matrix, os_id)
    assert plan.os.nvidia_repo == o.nvidia_repo
    assert plan.base_image.endswith(f"-{o.cuda_image_os}")
    assert os_id in next(c for c in real_matrix.cuda if str(c.version) == plan.cuda.version).os
    if o.nvidia_repo == "rhel10":
        assert plan.driver.install_method == "dnf"
        assert plan.driver.module_stream is None
        assert plan.cuda.version.startswith("13.")
    else:
        assert plan.driver.module_stream == f"nvidia-driver:{plan.driver.branch}-open"


@pytest.mark.parametrize("os_id", ["rocky10", "rhel10"])
def test_volta_on_el10_is_declared_unsupported(real_matrix, os_id):
    declared = {(x.os, x.gpu) for x in real_matrix.exclusions}
    volta = [g.id for g in real_matrix.gpus if g.architecture == "volta"]
    assert volta
    assert all((os_id, g) in declared for g in volta)
    with pytest.raises(NoCompatibleStack):
        resolve(real_matrix, PlanRequest(os=os_id, gpu="v100"))
    # Volta still resolves on EL8, where CUDA 12.x is carried.
    assert resolve(real_matrix, PlanRequest(os="rocky8", gpu="v100")).cuda.version.startswith("12.")


@pytest.mark.parametrize(
    ("os_release", "expected"),
    [
        ('ID="rocky"\nVERSION_ID="8.10"\n', "rocky8"),
        ('ID="rhel"\nVERSION_ID="8.10"\n', "rhel8"),
        ('ID="rocky"\nVERSION_ID="10.0"\n', "rocky10"),
        ('ID="rhel"\nVERSION_ID="10.1"\n', "rhel10"),
        ('ID="rocky"\nVERSION_ID="11.0"\n', None),
    ],
)
def test_host_detection_maps_el_majors(real_matrix, os_release, expected):
    from provision.matrix.detect import os_id

    assert os_id(real_matrix, os_release) == expected


# -- cuda-images-2026: NVIDIA's 13.2.1 EL8/EL10 runtime and runtime cudnn Dockerfiles, recorded ---
IMAGES_2026 = ROOT / "tests" / "fixtures" / "refresh" / "cuda-images-2026" / "dist" / "13.2.1"


@pytest.mark.parametrize("image_os", ["rockylinux8", "ubi8", "rockylinux10", "ubi10"])
def test_13_2_1_el8_el10_tags_are_nvidias_recorded_dockerfiles(real_matrix, image_os):
    runtime = (IMAGES_2026 / image_os / "runtime" / "Dockerfile").read_text()
    cudnn = (IMAGES_2026 / image_os / "runtime" / "cudnn" / "Dockerfile").read_text()
    assert f"FROM ${{IMAGE_NAME}}:13.2.1-base-{image_os} AS base" in runtime
    assert re.findall(r"^ENV NV_CUDA_LIB_VERSION=(\S+)$", runtime, re.M) == ["13.2.1-1"]
    assert f"FROM ${{IMAGE_NAME}}:13.2.1-runtime-{image_os} AS base" in cudnn
    row = next(i for i in real_matrix.images if str(i.cuda) == "13.2.1")
    assert image_os in row.os
    assert row.cudnn_version == ri.parse_cudnn(cudnn)
    assert row.source == ri.recorded_key(IMAGES_2026.parents[1])
