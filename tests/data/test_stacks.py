"""compat/stacks.yaml against the files it was read from (the recorded copy,
tests/fixtures/refresh/stacks) and against the rest of the catalogue: every catalogued build's CUDA
and cuDNN majors as its own recorded files say them, and every catalogued combination of a stack
build with the builds it pins (torch, TensorRT) or links (ONNX Runtime's TensorRT provider)."""

import email.parser
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from provision.matrix import refresh_stacks as rs
from provision.matrix.invariants import stack_problems
from provision.versions import DottedVersion as DV

COPY = Path(__file__).resolve().parent.parent / "fixtures" / "refresh" / "stacks"
SONAME = re.compile(r"^(lib[A-Za-z0-9_]+?)(?:_[a-z_]+)?\.so\.(\d+)")


def builds(matrix):
    for package in matrix.stacks:
        for rel in package.releases:
            for build in rel.builds:
                yield package, rel, build


def ids(matrix):
    return [f"{p.id}-{r.version}-{b.flavour or 'only'}" for p, r, b in builds(matrix)]


def recorded(build) -> dict[str, list[Path]]:
    """The recorded files of the build's evidence: {kind: paths} (needed, assign, METADATA, PKG-INFO)."""
    found: dict[str, list[Path]] = {"needed": [], "assign": [], "METADATA": [], "PKG-INFO": [], "pyproject.toml": []}
    for url in build.evidence:
        name = url.rsplit("/", 1)[1]
        for folder in (COPY / "wheels" / name, COPY / "sdists" / name):
            if folder.is_dir():
                for path in folder.iterdir():
                    found[path.suffix.lstrip(".") if path.suffix in (".needed", ".assign") else path.name].append(path)
    return found


def needed_majors(paths: list[Path], library: str) -> set[int]:
    majors = set()
    for path in paths:
        lines = path.read_text().splitlines()
        assert lines[0].startswith("how: "), path
        for line in lines[1:]:
            m = SONAME.match(line)
            if m and m[1] == library:
                majors.add(int(m[2]))
    return majors


def runtime_majors(paths: list[Path]) -> set[int]:
    """The CUDA major every CUDA-runtime requirement in the recorded metadata names (any extra)."""
    majors = set()
    for path in paths:
        for line in email.parser.Parser().parsestr(path.read_text()).get_all("Requires-Dist") or []:
            req = Requirement(line)
            name = canonicalize_name(req.name)
            if not (
                re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", name)
                or (name == "cuda-toolkit" and "cudart" in req.extras)
            ):
                continue
            bounds = [Version(s.version).release[0] for s in req.specifier if s.operator in ("~=", "==", ">=")]
            bounds = [b for b in bounds if b > 0] or [int(m[1]) for m in [re.search(r"-cu(\d+)$", name)] if m]
            majors.update(bounds)
    return majors


@pytest.fixture(scope="module")
def catalogue(real_matrix):
    return real_matrix


def test_the_catalogue_is_the_recorded_copy_read_again(real_matrix):
    """What the tests below compare against: compat/stacks.yaml is what the refresh reads out of the
    recorded copy (tests/unit/test_refresh_stacks.py holds the same for --check)."""
    import yaml
    from support import COMPAT

    committed = yaml.safe_load((COMPAT / "stacks.yaml").read_text())
    assert rs.check(committed, rs.refresh(committed, rs.Recorded(COPY), generated="x", log=lambda m: None)) == []
    assert stack_problems(real_matrix) == []


def test_every_build_has_its_cuda_and_cudnn_majors_from_its_own_recorded_files(real_matrix):
    checked = {"soname": 0, "requires-dist": 0, "documented": 0, "torch": 0}
    for package, rel, build in builds(real_matrix):
        where = f"{package.id} {rel.version} {build.flavour}"
        files = recorded(build)
        assert files["METADATA"] or files["PKG-INFO"], f"{where}: no recorded metadata for {build.evidence}"
        cudart = needed_majors(files["needed"], "libcudart")
        runtime = runtime_majors(files["METADATA"] + files["PKG-INFO"])
        info = {
            int(m[1])
            for path in files["assign"]
            for m in [re.search(r"cuda_version = '(\d+)\.\d+'", path.read_text())]
            if m
        }
        said = cudart | runtime | info
        if build.cuda_major is None:
            assert not said, f"{where}: its files name CUDA {said}, the row none"
            assert not package.uses_cuda
            checked["torch"] += 1
            continue
        if build.cuda_from == "documented":
            assert not said, f"{where}: documented although its files say CUDA {said}"
            flavour = next(f for f in package.flavours if f.name == build.flavour)
            assert build.cuda_major == flavour.cuda_major
            assert build.cuda_source == flavour.source
        else:
            assert said == {build.cuda_major}, f"{where}: files say {said}, the row {build.cuda_major}"
        checked[build.cuda_from] = checked.get(build.cuda_from, 0) + 1
        cudnn = needed_majors(files["needed"], "libcudnn")
        floors = {
            int(m[1])
            for path in files["assign"]
            for m in [re.search(r"MIN_CUDNN_VERSION = \((\d+),", path.read_text())]
            if m
        }
        if cudnn | floors or build.cudnn_requirement:
            assert cudnn | floors <= {build.cudnn_major}, (
                f"{where}: cuDNN {cudnn | floors}, the row {build.cudnn_major}"
            )
        else:
            assert build.cudnn_major is None, where
    assert all(checked.values()), checked  # every way of reading a CUDA major occurs in the catalogue


def test_a_build_the_files_disagree_with_their_own_flavour_name_is_kept_as_the_files_say(real_matrix):
    """The CUDA major is never read from a name: where a cuNN-named build links another CUDA
    (Transformer Engine's transformer-engine-cu12 2.6.0 wheel links libcudart.so.13; its
    2.6.0.post1 does not), the row says what the files say."""
    odd = [
        (p.id, str(r.version), b.flavour, b.cuda_major)
        for p, r, b in builds(real_matrix)
        if b.flavour and b.cuda_from == "soname" and b.flavour != f"cu{b.cuda_major}"
    ]
    for pid, version, flavour, major in odd:
        build = next(
            b for p, r, b in builds(real_matrix) if p.id == pid and str(r.version) == version and b.flavour == flavour
        )
        assert needed_majors(recorded(build)["needed"], "libcudart") == {major}
    assert odd, "the catalogue has such a build (transformer-engine 2.6.0 cu12): the test checks it"


def test_every_torch_tensorrt_release_has_a_torch_build_of_its_cuda_major(real_matrix):
    """torch-tensorrt X.Y pins torch X.Y: some catalogued torch build inside the pin has the CUDA
    major torch-tensorrt links (2.9 and 2.10 link CUDA 13 while torch's default wheels there are
    CUDA 12: only the cu130 builds on torch's own index pair with them)."""
    torch = real_matrix.framework("pytorch")
    for rel in real_matrix.stack("torch-tensorrt").releases:
        (build,) = rel.builds
        spec = SpecifierSet(build.requirement("torch"))
        assert spec.contains(f"{rel.version.release[0]}.{rel.version.release[1]}.0") or any(
            spec.contains(str(r.version)) for r in torch.releases if r.version.release[:2] == rel.version.release[:2]
        ), f"torch-tensorrt {rel.version} pins torch {spec}, not its own X.Y"
        pairs = [
            (str(t.version), tb.variant)
            for t in torch.releases
            if spec.contains(str(t.version))
            for tb in t.builds
            if int(tb.cuda.split(".")[0]) == build.cuda_major
        ]
        assert pairs, f"torch-tensorrt {rel.version} (CUDA {build.cuda_major}): no torch build in {spec}"


def test_torch_tensorrt_pins_tensorrt_builds_of_its_cuda_and_tensorrt_majors(real_matrix):
    """Every TensorRT build a torch-tensorrt release's flavoured pins admit (tensorrt-cuNN, its post
    releases included) has torch-tensorrt's CUDA major and the libnvinfer major its runtime links."""
    trt = real_matrix.stack("tensorrt")
    walked = 0
    for rel in real_matrix.stack("torch-tensorrt").releases:
        (build,) = rel.builds
        nvinfer = build.soname_majors("libnvinfer")
        for name, text in build.requires:
            m = re.fullmatch(r"tensorrt-(cu\d+)", name)
            if not m:
                continue
            spec = SpecifierSet(text)
            admitted = [
                b
                for r in trt.releases
                for b in r.builds
                if b.flavour == m[1] and list(spec.filter([b.pin or str(r.version), *r.post]))
            ]
            assert admitted, f"torch-tensorrt {rel.version}: no catalogued {name} in {text}"
            for b in admitted:
                walked += 1
                assert b.cuda_major == build.cuda_major, (str(rel.version), name)
                assert b.soname_majors("libnvinfer") == nvinfer, (str(rel.version), name)
    assert walked


def test_onnxruntime_tensorrt_provider_meets_a_tensorrt_of_its_cuda_major(real_matrix):
    """ONNX Runtime's TensorRT provider links one libnvinfer major: every release whose major the
    catalogue's TensorRT has pairs with a TensorRT build of its own CUDA major."""
    trt_builds = [b for r in real_matrix.stack("tensorrt").releases for b in r.builds]
    catalogued = {m for b in trt_builds for m in b.soname_majors("libnvinfer")}
    for rel in real_matrix.stack("onnxruntime").releases:
        (build,) = rel.builds
        majors = set(build.soname_majors("libnvinfer"))
        assert len(majors) == 1, rel.version
        if majors <= catalogued:
            partners = [
                b
                for b in trt_builds
                if b.cuda_major == build.cuda_major and set(b.soname_majors("libnvinfer")) == majors
            ]
            assert partners, f"onnxruntime {rel.version}: no TensorRT of CUDA {build.cuda_major} with {majors}"


def test_every_cudnn_using_build_against_every_torch_build(real_matrix):
    """Each stack build that links cuDNN, with each catalogued torch build: they share a process
    only if CUDA and cuDNN majors agree (torch's wheels bring their cuDNN). The walk finds pairs
    of both kinds (ONNX Runtime 1.18.1's cuDNN 8 against torch 2.5.1's cuDNN 9 among them)."""
    torch = real_matrix.framework("pytorch")
    agree = clash = 0
    for package, rel, build in builds(real_matrix):
        if build.cudnn_major is None:
            continue
        for t in torch.releases:
            for tb in t.builds:
                if tb.cudnn is None:
                    continue
                same = (
                    int(tb.cuda.split(".")[0]) == build.cuda_major and int(tb.cudnn.split(".")[0]) == build.cudnn_major
                )
                agree += same
                clash += not same
                if build.cudnn_spec is not None and same:
                    assert build.cudnn_allows(tb.cudnn) or not build.cudnn_spec.contains(tb.cudnn), (
                        package.id,
                        str(rel.version),
                    )
    ort = real_matrix.stack("onnxruntime").release(DV("1.18.1")).builds[0]
    t251 = next(b for b in torch.release(DV("2.5.1")).builds if b.default)
    assert ort.cudnn_major != int(t251.cudnn.split(".")[0])
    assert agree
    assert clash


def test_transformer_engine_fp8_and_cudnn_floor(real_matrix):
    te = real_matrix.stack("transformer-engine")
    for rel in te.releases:
        fp8 = te.feature("fp8", rel.version)
        assert fp8 is not None, rel.version
        assert fp8.available("9.0", DV("12.0"))
        assert fp8.available("8.9", DV("12.1"))
        assert not fp8.available("8.9", DV("12.0"))
        assert not fp8.available("8.6", DV("13.0"))
        for build in rel.builds:
            if build.cudnn_min is not None:
                below = f"{build.cudnn_min.release[0]}.{build.cudnn_min.release[1] - 1}.0"
                assert not build.cudnn_allows(below)
                assert build.cudnn_allows(build.cudnn_min)


def test_tensorrt_sm_floor_and_library_index(real_matrix):
    trt = real_matrix.stack("tensorrt")
    for rel in trt.releases:
        rule = next(r for r in trt.documented if r.releases.contains(rel.version))
        for build in rel.builds:
            assert build.sm_floor == rule.sm_floor
            assert build.sm_allows(rule.sm_floor)
            assert not build.sm_allows("6.1")
            assert build.library_index is not None
            assert build.library_index.startswith("https://pypi.nvidia.com")
            assert build.sdists, "the libs are an sdist stub"
    assert any(not b.sm_allows("7.0") for r in trt.releases for b in r.builds)
    assert any(b.sm_allows("7.0") for r in trt.releases for b in r.builds)


# -- what the loader refuses (the invariants), on edited copies of compat/ ---------------------------
ORT_1311 = 'cuda_major: 13\n      cuda: "13.0"'


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (ORT_1311, 'cuda_major: 12\n      cuda: "13.0"', "cuda: says CUDA 13, the build's cuda_major is 12"),
        ('cudnn_spec: ">=9.0,<10"', 'cudnn_spec: ">=10.0,<11"', "admits no cuDNN 9"),
        (
            'sm_floor: "7.5"\n      sm_source: "tensorrt-10.5-release-notes"',
            'sm_floor: "7.0"\n      sm_source: "tensorrt-10.5-release-notes"',
            "the documented rule gives 7.5",
        ),
        (
            'library_index: "https://pypi.nvidia.com/"\n      library_index_source: "pypi-stack-files"',
            "library_index: null\n      library_index_source: null",
            "downloads from the library index: none read",
        ),
        ('torch: "<2.15.0,>=2.14.0"', 'torch: "==9.9.9"', "no catalogued torch release meets ==9.9.9"),
        ('- id: "deepspeed"', '- id: "pytorch"', "'pytorch' is also a framework id"),
        ('pin: "10.14.1.48.post1"', 'pin: "10.14.1.48.post7"', "10.14.1.48.post7 is not a post release of 10.14.1.48"),
        (
            'sm_source: "tensorrt-10.5-release-notes"',
            'sm_source: "a-page-nobody-read"',
            "cites unknown source 'a-page-nobody-read'",
        ),
        (
            '{pip: "onnxruntime-gpu", artefact: "wheel"}',
            '{pip: "onnxruntime-gpu", artefact: "sdist"}',
            "is an sdist here, the description says wheel",
        ),
        ('version: "1.31.0"', 'version: "1.31.9"', "releases must be listed newest first"),
    ],
)
def test_the_loader_refuses_a_stack_row_that_breaks_an_invariant(tmp_path, old, new, message):
    from support import edited_compat

    from provision.errors import CompatDataError
    from provision.matrix.loader import load_matrix

    compat = edited_compat(tmp_path, "stacks.yaml", old, new)
    with pytest.raises(CompatDataError) as caught:
        load_matrix(compat)
    assert message in caught.value.message
    assert caught.value.file == "stacks.yaml"


def test_the_schema_refuses_a_cuda_major_written_as_text(tmp_path):
    from support import edited_compat

    from provision.errors import CompatDataError
    from provision.matrix.loader import load_matrix

    compat = edited_compat(tmp_path, "stacks.yaml", ORT_1311, 'cuda_major: "13"\n      cuda: "13.0"')
    with pytest.raises(
        CompatDataError, match=r"packages\[0\]\(onnxruntime\)\.releases\[0\]\(1\.31\.1\)\.builds\[0\]\.cuda_major"
    ):
        load_matrix(compat)


# -- the model ---------------------------------------------------------------------------------------
def test_a_stack_is_found_by_id_or_pip_name_and_an_unknown_one_suggests(real_matrix):
    from provision.errors import UnknownId

    assert real_matrix.stack("onnxruntime") is real_matrix.stack("onnxruntime-gpu")
    with pytest.raises(UnknownId) as caught:
        real_matrix.stack("onnxruntim")
    assert "onnxruntime" in (caught.value.hint or "")


def test_builds_of_one_cuda_major_and_the_ones_that_follow_torch(real_matrix):
    te = real_matrix.stack("transformer-engine").releases[0]
    assert {b.flavour for b in te.builds_for(13)} == {"cu13"}
    assert te.default_build.flavour == "cu12"
    ds = real_matrix.stack("deepspeed").releases[0]
    assert ds.builds_for(12) == ds.builds_for(13) == ds.builds, "no CUDA of its own: it follows torch's"
    assert ds.builds[0].sdists == ("deepspeed",)
    needs = real_matrix.stack("deepspeed").distribution("source").build
    assert (needs.image, needs.nvcc, needs.isolation, needs.needs) == ("devel", "framework", False, ("torch",))


# -- the validated-data cache keeps the stacks apart and builds them on first use -------------------
def test_a_cached_catalogue_builds_its_stacks_only_when_asked(tmp_path, monkeypatch):
    from support import COMPAT

    from provision.matrix import cache
    from provision.matrix.loader import load_checked
    from provision.matrix.model import LazyStacks

    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "cache"))
    cache.load_cached(COMPAT)  # a miss: checked, then stored
    files = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert [f.split("-")[0] for f in files] == ["matrix", "stacks"]
    built = []
    build_stack = cache.build_stack
    monkeypatch.setattr(cache, "build_stack", lambda item, i: built.append(i) or build_stack(item, i))
    matrix = cache.load_cached(COMPAT)
    assert isinstance(matrix.stacks, LazyStacks)
    assert built == [], "a plan that names no stack never builds them"
    assert matrix.stack("deepspeed").id == "deepspeed"
    assert len(built) == 1, "naming one package builds that one only"
    assert matrix.stacks == load_checked(COMPAT)[0].stacks
    assert sorted(built) == list(range(len(matrix.stacks)))
    (tmp_path / "cache" / files[1]).write_text("{broken")
    again = cache.load_cached(COMPAT)
    assert len(again.stacks) == len(matrix.stacks), "a broken stacks file is checked anew"
    assert cache.cached_raw(COMPAT)["stacks"]["packages"][0]["id"] == "onnxruntime"


# -- provision matrix stacks -----------------------------------------------------------------------
def test_matrix_stacks_lists_every_catalogued_build(cli, real_matrix):
    import json

    from support import COMPAT

    result = cli("matrix", "stacks", "--format", "json", "--compat-dir", str(COMPAT))
    assert result.code == 0, result
    records = json.loads(result.out)
    assert len(records) == sum(1 for _ in builds(real_matrix))
    trt = next(r for r in records if r["package"] == "tensorrt" and r["default"])
    libs = next(d for d in trt["distributions"] if d["pip"].endswith("-libs"))
    assert libs["artefact"] == "sdist"
    assert libs["build"]["fetches"] == "library_index"
    assert trt["library_index"] == "https://pypi.nvidia.com/"
    table = cli("matrix", "stacks", "--compat-dir", str(COMPAT))
    assert table.code == 0
    assert "deepspeed" in table.out
    assert "torch's" in table.out
