"""Issue 11, item 2: the host architecture as a first-class fact (x86_64, aarch64), and the GH200.

The sources are not in this repository, so the parts of them each row rests on are quoted here
verbatim (open-gpu-kernel-modules README rows and the first tags listing them, pci.ids lines,
mig-parted's device filters, NVIDIA's driver-container and image-repository files, the package
index's aarch64 wheel metadata recorded in tests/fixtures) and parsed; the rest are the invariants
that make a GH200 plan aarch64 end to end.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from support import COMPAT

from provision.matrix import refresh
from provision.matrix.invariants import check_invariants
from provision.matrix.loader import build, read_raw
from provision.matrix.model import DEB_ARCHES
from provision.versions import DottedVersion as Version

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# -- NVIDIA/open-gpu-kernel-modules README "Compatible GPUs" rows (tag 595.45.04), verbatim ----------
OGKM_ROWS = """\
| NVIDIA GH200 120GB                                      | 2342 10DE 16EB |
| NVIDIA GH200 120GB                                      | 2342 10DE 1805 |
| NVIDIA GH200 480GB                                      | 2342 10DE 1809 |
| NVIDIA GH200 144G HBM3e                                 | 2348 10DE 18D2 |
"""
# how many README rows name 0x2342 per tag: the 535.43.x side releases list it, the production
# releases up to 535.113.01 do not; 535.129.03 is the first production release that does
OGKM_2342_ROWS_BY_TAG = {
    "535.43.19": 2,
    "535.43.28": 3,
    "535.54.03": 0,
    "535.86.10": 0,
    "535.104.05": 0,
    "535.113.01": 0,
    "535.129.03": 2,
    "535.146.02": 2,
    "550.54.14": 3,
}
# -- pci.ids as vendored by mig-parted @bd7160f4 (go-nvlib default_pci.ids), verbatim --------------
PCI_IDS = "\t2342  GH100 [GH200 120GB / 480GB]\n\t2348  GH100 [GH200 144G HBM3e]\n"
# -- mig-parted config-default.yaml @bd7160f4: the GH200 shares the H100-96GB profiles -------------
MIG_PARTED = """\
    # H100-96GB, PG506-96GB, GH200, H20
    - device-filter: ["0x234210DE", "0x233D10DE", "0x20B610DE", "0x232910DE"]
"""
# -- NVIDIA/gpu-driver-container @06a208ca {ubuntu22.04,ubuntu24.04,rhel9}/install.sh, verbatim ------
DRIVER_CONTAINER = "    OS_ARCH=${TARGETARCH/amd64/x86_64} && OS_ARCH=${OS_ARCH/arm64/sbsa};"
DRIVER_CONTAINER_OSES = ("ubuntu22.04", "ubuntu24.04", "rhel9")
# -- nvidia/container-images/cuda dist/<cuda>/cuda-platforms.json (12.9.1), the catalogue's OSes ----
CUDA_PLATFORMS_1291 = (
    '{"rockylinux8": ["arm64", "x86_64"], "rockylinux9": ["arm64", "x86_64"], "ubi8": ["arm64", "x86_64"], '
    '"ubi9": ["arm64", "x86_64"], "ubuntu22.04": ["arm64", "x86_64"], "ubuntu24.04": ["arm64", "x86_64"]}'
)


@pytest.fixture(scope="module")
def raw():
    return read_raw(COMPAT)


@pytest.fixture(scope="module")
def gh200(real_matrix):
    return real_matrix.gpu("gh200")


def test_gh200_row_reads_as_its_sources(real_matrix, gh200):
    rows = [re.match(r"\| (NVIDIA [^|]+?)\s+\| (\w{4}) 10DE \w{4} \|", ln).groups() for ln in OGKM_ROWS.splitlines()]
    names_2342 = {name for name, dev in rows if dev == "2342"}
    assert names_2342 == {"NVIDIA GH200 120GB", "NVIDIA GH200 480GB"}
    assert gh200.pci_device_ids == ("0x2342",)
    assert {"gh200-120gb", "gh200-480gb"} <= set(gh200.aliases)
    # pci.ids names the die (GH100: Hopper's, whose only compute capability is 9.0) and the product
    # of each catalogued id; the catalogue's row, aliases and notes say the same
    pci = {f"0x{dev}": (die, name) for dev, die, name in re.findall(r"\t(\w{4})  (\w+) \[([^]]+)\]", PCI_IDS)}
    for dev in gh200.pci_device_ids:
        die, product = pci[dev]
        assert f"{die} [{product}]" in gh200_notes(real_matrix), dev
        assert all(f"gh200-{size.split()[-1].lower()}" in gh200.aliases for size in product.split(" / ")), product
        assert die.startswith("GH1"), die  # G<architecture letter>1xx: H, Hopper
        assert gh200.architecture == "hopper"
    assert real_matrix.architecture("hopper").compute_capabilities == ("9.0",)
    assert gh200.compute_capability == "9.0"
    # the minimum driver: the first production README listing the id, as for the H100 NVL
    first = next(tag for tag, n in OGKM_2342_ROWS_BY_TAG.items() if n and not tag.startswith("535.43."))
    assert gh200.min_driver == Version(first) == Version("535.129.03")
    assert not any(OGKM_2342_ROWS_BY_TAG[t] for t in ("535.54.03", "535.86.10", "535.104.05", "535.113.01"))
    # the README's other GH200 ids (the 144GB HBM3e variant) are left out of the catalogue, as its
    # notes say, and no other catalogued GPU claims them
    left_out = {f"0x{dev}" for name, dev in rows if "GH200" in name} - set(gh200.pci_device_ids)
    assert left_out == {dev for dev, (_, product) in pci.items() if product.startswith("GH200 144G")}
    for dev in left_out:
        assert dev not in {p for g in real_matrix.gpus for p in g.pci_device_ids}
        assert f"({dev}," in gh200_notes(real_matrix)
        assert "is not catalogued" in gh200_notes(real_matrix)
    # MIG: mig-parted's device filter (pci device id + 10DE vendor) covers the catalogued id, and the
    # profile set it selects is the catalogue's (its profiles read in tests/data/test_gh200_mig.py)
    (filters,) = re.findall(r"device-filter: \[([^]]+)\]", MIG_PARTED)
    served = {"0x" + dev for dev in re.findall(r'"0x(\w{4})10DE"', filters)}
    assert set(gh200.pci_device_ids) <= served
    assert gh200.mig is not None
    note = real_matrix.mig_set(gh200.mig).note
    assert all(dev in note for dev in gh200.pci_device_ids)
    assert MIG_PARTED.split("# ")[1].split(",", maxsplit=1)[0].replace("-", " ") in note  # "H100 96GB"
    assert "1g.12gb" in gh200_notes(real_matrix)


def gh200_notes(real_matrix) -> str:
    doc = yaml.safe_load((COMPAT / "gpus.yaml").read_text())
    return next(g for g in doc["gpus"] if g["id"] == "gh200")["notes"]


def test_gh200_is_an_open_module_aarch64_superchip(real_matrix, gh200):
    assert gh200.host_arches == ("aarch64",)
    assert gh200.kernel_modules == ("open",)  # GPU Operator: GH200 systems require the open modules
    assert gh200.form_factor == "superchip"
    assert gh200.nvlink_generation is None
    assert not gh200.nvswitch
    assert (gh200.memory_gb, gh200.memory_type, gh200.memory_bandwidth_gbs) == (96, "HBM3", 4000)
    # every other GPU keeps the x86_64 default
    assert {g.id for g in real_matrix.gpus if g.host_arches != ("x86_64",)} == {"gh200"}


def test_gh200_sources_are_known_and_versions_rest_on_primary_ones(real_matrix, gh200):
    kinds = {key: real_matrix.sources[key].kind for key in gh200.sources}
    assert kinds["ogkm"] == "primary"  # pci id and minimum driver
    assert kinds["mig-parted"] == "primary"
    assert kinds["gpu-operator-docs"] == "primary"  # open kernel modules
    assert kinds["gh200-specs"] == "secondary"  # memory, bandwidth, module power: tier list only
    notes = gh200_notes(real_matrix)
    assert "tensor_tflops: not confirmed for GH200" in notes


def test_sbsa_directories_read_as_nvidias_driver_container(real_matrix):
    # TARGETARCH (Docker's amd64/arm64: the catalogue's DEB_ARCHES names) -> the repository directory
    mapping = dict(re.findall(r"(\w+)/(\w+)\}", DRIVER_CONTAINER))
    assert set(mapping) == set(DEB_ARCHES.values())
    for os_rel in real_matrix.os_releases:
        arches = dict(os_rel.arches)
        assert arches["x86_64"] == mapping[DEB_ARCHES["x86_64"]], os_rel.id
        if os_rel.id == "debian12":
            assert "aarch64" not in arches  # no catalogued source confirms debian12/sbsa
            continue
        assert arches["aarch64"] == mapping[DEB_ARCHES["aarch64"]], os_rel.id
        # the driver container's install.sh for this OS (or its EL8/EL10 sibling) is the source
        assert {"gpu-driver-container-arch", "gpu-driver-container-el"} & set(os_rel.sources), os_rel.id
    served = {o.nvidia_repo for o in real_matrix.os_releases if o.repo_arch("aarch64")}
    assert {o.replace(".", "") for o in DRIVER_CONTAINER_OSES} - {"rhel9"} <= served


def test_image_platforms_read_as_cuda_platforms_json(real_matrix, raw):
    platforms = json.loads(CUDA_PLATFORMS_1291)
    rel = real_matrix.image(Version("12.9.1"))
    assert set(rel.os) <= set(platforms)
    assert all("arm64" in platforms[o] for o in rel.os)
    assert rel.platforms == ("linux/amd64", "linux/arm64")
    for i, img in enumerate(real_matrix.images):
        doc = raw["images"]["releases"][i]
        if "linux/arm64" in img.platforms:
            if img.cuda == Version("13.0.3"):  # no platforms json copy: its Dockerfiles' base-arm64 stages
                assert doc["platforms"]["source"] == "cuda-images-2026-platforms"
                continue
            if doc["platforms"]["source"] == "cuda-images-2026":  # 12.8.2, 13.1.2: the recorded json
                recorded = FIXTURES / "refresh" / "cuda-images-2026" / "dist" / str(img.cuda) / "cuda-platforms.json"
                listed = json.loads(recorded.read_text())
                assert all({"arm64", "x86_64"} <= set(listed[o]) for o in img.os), img.cuda
                continue
            assert doc["platforms"]["source"] == "cuda-images-platforms", img.cuda
            assert Version("12.4.1") <= img.cuda <= Version("13.0.2"), img.cuda
        else:
            assert img.platforms == ("linux/amd64",), img.cuda  # arm64 not confirmed: amd64 only


def test_aarch64_wheels_read_from_the_recorded_metadata():
    """torch >= 2.11 declares its CUDA wheels for every Linux machine; torch <= 2.10 only for x86_64."""
    recorded = {p.name.removesuffix(".METADATA"): p.read_text() for p in (FIXTURES / "wheel-metadata").glob("*")}
    for version, cuda in (("2.11.0", True), ("2.14.1", True), ("2.5.1", False), ("2.0.1", False)):
        (name,) = [n for n in recorded if n.startswith(f"torch-{version}-") and "aarch64" in n]
        (x86,) = [n for n in recorded if n.startswith(f"torch-{version}-") and "x86_64" in n]
        arm = refresh.cuda_pins(recorded[name], None, machine="aarch64")
        intel = refresh.cuda_pins(recorded[x86], None)
        if cuda:
            assert (arm["cudnn"], arm["cuda_runtime"]) == (intel["cudnn"], intel["cuda_runtime"]), version
        else:
            assert (arm["cudnn"], arm["cuda_runtime"]) == (None, None), version
            assert intel["cudnn"] is not None  # the same wheel metadata, read for x86_64


def test_catalogued_framework_arches_follow_the_wheels(real_matrix):
    torch, tf = real_matrix.framework("pytorch"), real_matrix.framework("tensorflow")
    for rel in torch.releases:
        default = next(b for b in rel.builds if b.default)
        arm = rel.version >= Version("2.11.0")
        assert ("aarch64" in default.arches) == arm, rel.version
        assert (rel.python_aarch64 is not None) == arm, rel.version
        assert all(b.arches == ("x86_64",) for b in rel.builds if not b.default)  # variant indexes: not read
    assert all(b.arches == ("x86_64",) and r.python_aarch64 is None for r in tf.releases for b in r.builds)


@pytest.mark.parametrize("version", ["2.11.0", "2.14.1"])
def test_aarch64_python_range_from_the_recorded_listing(real_matrix, version):
    listing = json.loads((FIXTURES / "package-index" / "torch.json").read_text())
    names = [f["filename"] for f in listing["files"] if f["filename"].split("-")[1] == version]
    assert any("cp314t" in n and "aarch64" in n for n in names)  # free-threaded: does not count
    got = refresh.python_range(names, ">=3.10", "aarch64")
    assert got == real_matrix.framework("pytorch").release(Version(version)).python_aarch64 == ">=3.10,<3.15"


def test_refresh_writes_the_aarch64_fields_from_recorded_wheels():
    """The refresh, offline on the recorded wheels (x86_64 and aarch64), writes the committed fields."""
    recorded = {p.name.removesuffix(".METADATA"): p.read_text() for p in (FIXTURES / "wheel-metadata").glob("*")}
    listing = {
        pkg: json.loads((FIXTURES / "package-index" / f"{pkg}.json").read_text()) for pkg in ("torch", "tensorflow")
    }

    def fetch(url: str, headers: dict) -> bytes:
        """PyPI as recorded: each package's file list (the recorded wheels' releases), PEP 658 metadata."""
        for pkg, doc in listing.items():
            if url == f"https://pypi.org/simple/{pkg}/":
                files = [
                    {"filename": f["filename"], "url": f"https://files.example/{f['filename']}"}
                    for f in doc["files"]
                    if any(n.startswith(f"{pkg}-{f['filename'].split('-')[1]}-") for n in recorded)
                ]
                return json.dumps({"files": files}).encode()
        if url.startswith("https://files.example/") and url.endswith(".metadata"):
            return recorded[url.removeprefix("https://files.example/").removesuffix(".metadata")].encode()
        raise OSError(f"not recorded: {url}")  # download.pytorch.org: unreachable, as in the real refresh

    doc = refresh.refresh(COMPAT, fetch=fetch, ranged=None, log=lambda m: None)
    committed = yaml.safe_load((COMPAT / "frameworks.yaml").read_text())
    rows = {(f["id"], r["version"]): r for f in committed["frameworks"] for r in f["releases"]}
    seen = 0
    for fw in doc["frameworks"]:
        for rel in fw["releases"]:
            old = rows[(fw["id"], rel["version"])]
            assert rel["python_aarch64"] == old["python_aarch64"], rel["version"]
            default = next(b for b in rel["builds"] if b["default"])
            assert default["arches"] == next(b for b in old["builds"] if b["default"])["arches"]
            seen += "aarch64" in default["arches"]
    assert seen == 2  # torch 2.11.0 and 2.14.1


def test_matrix_check_proves_every_gpu_arch_is_served(raw):
    matrix = build(raw)
    assert check_invariants(matrix, raw) == []
    amd64_only = matrix._replace(images=tuple(i._replace(platforms=("linux/amd64",)) for i in matrix.images))
    problems = [str(p) for p in check_invariants(amd64_only, raw)]
    assert len(problems) == 1
    assert (
        "(gh200).host_arches: aarch64 host: no nvidia/cuda release in images.yaml is published for linux/arm64"
        in (problems[0])
    )
    no_os = matrix._replace(os_releases=tuple(o._replace(arches=(("x86_64", "x86_64"),)) for o in matrix.os_releases))
    assert any("no OS in os.yaml has a repository directory" in str(p) for p in check_invariants(no_os, raw))
    no_wheels = matrix._replace(
        frameworks=tuple(
            fw._replace(
                releases=tuple(
                    r._replace(builds=tuple(b._replace(arches=("x86_64",)) for b in r.builds)) for r in fw.releases
                )
            )
            for fw in matrix.frameworks
        )
    )
    assert any("publishes wheels for it" in str(p) for p in check_invariants(no_wheels, raw))
