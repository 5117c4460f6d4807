"""The stacks refresh source, offline: the recorded copy (tests/fixtures/refresh/stacks) in,
compat/stacks.yaml's releases out; and its readers (index pages, wheel and sdist members, ELF
dynamic sections) on package-index files made here, served by a fake index."""

import io
import json
import shutil
import struct
import tarfile
import urllib.error
import zipfile
from pathlib import Path

import pytest
import yaml
from support import COMPAT, one_error_line

from provision.matrix import refresh
from provision.matrix import refresh_stacks as rs

COPY = Path(__file__).resolve().parent.parent / "fixtures" / "refresh" / "stacks"


def committed() -> dict:
    return yaml.safe_load((COMPAT / "stacks.yaml").read_text())


def compat_copy(tmp_path: Path) -> Path:
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    return compat


def copy_of_recording(tmp_path: Path) -> Path:
    root = tmp_path / "stacks"
    shutil.copytree(COPY, root)
    return root


# -- the recorded copy reproduces the committed rows ----------------------------------------------
def test_check_on_the_recorded_copy_finds_no_drift(capsys):
    assert refresh.main(["--source", "stacks", "--check", "--from", str(COPY)]) == 0
    assert capsys.readouterr().out == ""


def test_the_refresh_reads_the_committed_file_back_from_the_recorded_copy():
    doc = rs.refresh(committed(), rs.Recorded(COPY), generated="2026-12-01", log=lambda m: None)
    assert rs.check(committed(), doc) == []
    assert rs.dump(doc) == (COMPAT / "stacks.yaml").read_text()
    kinds = {p["id"]: len(p["releases"]) for p in doc["packages"]}
    assert set(kinds) == set(rs.READERS)
    assert all(kinds.values()), kinds


def test_drift_in_a_recorded_file_is_a_diff_and_exit_1(tmp_path, capsys):
    root = copy_of_recording(tmp_path)
    metadata = next((root / "wheels").glob("onnxruntime_gpu-1.31.1-*x86_64.whl")) / "METADATA"
    text = metadata.read_text()
    assert "nvidia-cudnn-cu13~=9.0" in text
    metadata.write_text(text.replace("nvidia-cudnn-cu13~=9.0", "nvidia-cudnn-cu13~=9.8"))
    assert refresh.main(["--source", "stacks", "--check", "--from", str(root)]) == 1
    captured = capsys.readouterr()
    assert '-      cudnn_spec: ">=9.0,<10"' in captured.out
    assert '+      cudnn_spec: ">=9.8,<10"' in captured.out
    assert "compat/stacks.yaml differs from the stack packages' files" in captured.err


def test_a_refresh_that_would_break_an_invariant_writes_nothing(tmp_path, capsys):
    """TensorRT 10.5.0's cu12 libs declaring the CUDA 13 runtime contradicts the flavour NVIDIA
    documents: the rewrite is refused (exit 3) and compat/stacks.yaml stays as it was."""
    root = copy_of_recording(tmp_path)
    compat = compat_copy(tmp_path)
    before = (compat / "stacks.yaml").read_text()
    info = root / "sdists" / "tensorrt_cu12_libs-10.5.0.tar.gz" / "PKG-INFO"
    if not info.exists():
        info = next((root / "sdists").glob("tensorrt*cu12*libs-10.5.0.tar.gz")) / "PKG-INFO"
    info.write_text(info.read_text().replace("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13"))
    rc, line = one_error_line(["--source", "stacks", "--from", str(root), "--compat-dir", str(compat)], capsys)
    assert rc == 3
    assert "CUDA 13, NVIDIA documents 12 for cu12" in line
    assert (compat / "stacks.yaml").read_text() == before


def test_a_recorded_copy_without_its_source_is_refused(tmp_path, capsys):
    root = copy_of_recording(tmp_path)
    (root / "SOURCE.txt").unlink()
    rc, line = one_error_line(["--source", "stacks", "--check", "--from", str(root)], capsys)
    assert rc == 2
    assert "not a recorded copy (no SOURCE.txt)" in line


def test_a_linked_file_in_the_recorded_copy_is_refused(tmp_path, capsys):
    root = copy_of_recording(tmp_path)
    metadata = next((root / "wheels").glob("megatron_core-0.19.2-*x86_64*.whl")) / "METADATA"
    metadata.unlink()
    metadata.symlink_to("/etc/hostname")
    rc, line = one_error_line(["--source", "stacks", "--check", "--from", str(root)], capsys)
    assert rc == 2
    assert "a symlink" in line


def test_a_file_name_that_climbs_out_of_the_copy_is_refused(tmp_path, capsys):
    root = copy_of_recording(tmp_path)
    page = root / "index" / "deepspeed.json"
    doc = json.loads(page.read_text())
    doc["files"][0]["filename"] = "../../../etc/passwd.tar.gz"
    page.write_text(json.dumps(doc))
    rc, line = one_error_line(["--source", "stacks", "--check", "--from", str(root)], capsys)
    assert rc == 2
    assert "is not a plain file name" in line


def test_an_unreachable_index_is_exit_4(monkeypatch, capsys):
    def unreachable(url, headers):
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr(rs, "Live", _live_with(unreachable))
    rc, line = one_error_line(["--source", "stacks", "--check"], capsys)
    assert rc == 4
    assert "stacks: upstream unreachable (no route to host)" in line


def _live_with(fetch, ranged=None):
    live = rs.Live

    def make():
        return live(fetch, ranged) if ranged else live(fetch)

    return make


def test_a_kind_without_a_reader_is_refused():
    doc = committed()
    doc["packages"][0] = {**doc["packages"][0], "id": "tensorflow-serving"}
    with pytest.raises(rs.StacksRefreshError, match="no refresh source for package kind 'tensorflow-serving'"):
        rs.refresh(doc, rs.Recorded(COPY), generated="2026-12-01", log=lambda m: None)


# -- ELF: the libraries a shared object needs ------------------------------------------------------
def elf(needed: list[str], *, first_flags: int = 4, pad: bytes = b"") -> bytes:
    """A 64-bit little-endian shared object: a read-only first segment (ELF and program headers,
    the dynamic string table), ``pad``, then a writable segment with the dynamic section, mapped
    0x1000 above its file offset (as linkers do)."""
    strtab = b"\x00" + b"".join(n.encode() + b"\x00" for n in needed)
    offsets, pos = [], 1
    for n in needed:
        offsets.append(pos)
        pos += len(n) + 1
    str_off = 256
    first_size = str_off + len(strtab)
    dyn_off = first_size + len(pad)
    dynamic = b"".join(struct.pack("<qQ", 1, o) for o in offsets) + struct.pack("<qQ", 5, str_off)
    dynamic += struct.pack("<qQ", 0, 0)
    phdrs = [
        struct.pack("<IIQQQQQQ", 1, first_flags, 0, 0, 0, first_size, first_size, 0x1000),
        struct.pack("<IIQQQQQQ", 1, 6, dyn_off, dyn_off + 0x1000, 0, len(dynamic), len(dynamic), 0x1000),
        struct.pack("<IIQQQQQQ", 2, 6, dyn_off, dyn_off + 0x1000, 0, len(dynamic), len(dynamic), 8),
    ]
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, 56, len(phdrs), 64, 0, 0)
    head = header + b"".join(phdrs)
    head += bytes(str_off - len(head))
    return head + strtab + pad + dynamic


def reader(blob: bytes):
    return lambda n: blob[:n]


def test_a_small_object_is_read_whole_its_dt_needed_in_order():
    blob = elf(["libnvinfer.so.10", "libcudart.so.12", "libc.so.6"])
    assert rs.elf_needed(reader(blob), len(blob), "x") == (
        "dynamic",
        ("libnvinfer.so.10", "libcudart.so.12", "libc.so.6"),
    )


def test_a_large_object_is_read_from_its_first_read_only_segment(monkeypatch):
    monkeypatch.setattr(rs, "WHOLE_ELF_BYTES", 1000)
    blob = elf(["libcudart.so.13", "libcudnn.so.9"], pad=bytes(5000))
    asked = []
    how, names = rs.elf_needed(lambda n: asked.append(n) or blob[:n], len(blob), "x")
    assert (how, names) == ("first-segment", ("libcudart.so.13", "libcudnn.so.9"))
    assert max(asked) < 1000, "only the headers and the first segment are read"


def test_a_large_object_whose_first_segment_holds_code_is_left_unread(monkeypatch):
    """ONNX Runtime 1.17's CUDA provider: its first segment is read-and-execute and half a gigabyte;
    strings in it are not only the dynamic string table's."""
    monkeypatch.setattr(rs, "WHOLE_ELF_BYTES", 1000)
    blob = elf(["libcudart.so.11.0"], first_flags=5, pad=bytes(5000))
    assert rs.elf_needed(reader(blob), len(blob), "x") == ("unread", ())


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"MZ" + bytes(100), "not an ELF object"),
        (b"\x7fELF" + bytes([1, 1]) + bytes(100), "not a 64-bit little-endian"),
        (elf(["libcudart.so.12"])[:200], "truncated program header table"),
        (elf(["libcudart.so.12"])[:-40], "the dynamic segment runs past the file"),
    ],
)
def test_a_broken_object_is_an_error(blob, message):
    with pytest.raises(rs.StacksRefreshError, match=message):
        rs.elf_needed(reader(blob), len(blob), "x")


# -- a fake index serving wheels made here ---------------------------------------------------------
ORT_METADATA = """\
Metadata-Version: 2.1
Name: onnxruntime-gpu
Version: 9.9.0
License: MIT
        Copyright (c) a line of blanks continues the field
{blanks}
        (the line above is eight blanks)
Requires-Python: >=3.11
Requires-Dist: numpy>=1.21.6
Provides-Extra: cuda
Requires-Dist: nvidia-cuda-runtime-cu12~=12.0; extra == "cuda"
Provides-Extra: cudnn
Requires-Dist: nvidia-cudnn-cu12~=9.0; extra == "cudnn"

A long description that the recording leaves out.
Requires-Dist: not-a-field
""".format(blanks=" " * 8)


def wheel(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def ort_wheel(cuda_version: str = "12.2", pad: bytes = b"") -> bytes:
    return wheel(
        {
            "onnxruntime/capi/build_and_package_info.py": f"package_name = 'onnxruntime-gpu'\ncuda_version = '{cuda_version}'\n".encode(),
            "onnxruntime/capi/libonnxruntime_providers_cuda.so": elf(
                ["libcudart.so.12", "libcudnn.so.9", "libc.so.6"], pad=pad
            ),
            "onnxruntime/capi/libonnxruntime_providers_tensorrt.so": elf(["libnvinfer.so.10", "libcudart.so.12"]),
            "onnxruntime_gpu-9.9.0.dist-info/METADATA": ORT_METADATA.encode(),
        }
    )


class FakeIndex:
    """pypi.org/simple/onnxruntime-gpu/ (PEP 691) and files.example: its wheels, by range."""

    def __init__(self, blob: bytes, core_metadata: bool = False):
        self.blob, self.core_metadata, self.served = blob, core_metadata, 0
        names = [
            "onnxruntime_gpu-9.9.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
            "onnxruntime_gpu-9.9.0-cp312-cp312-manylinux_2_28_x86_64.whl",
            "onnxruntime_gpu-9.9.0-cp312-cp312-win_amd64.whl",
            "onnxruntime_gpu-9.9.1rc1-cp311-cp311-manylinux_2_28_x86_64.whl",
            "onnxruntime_gpu-8.0.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        ]
        self.files = [
            {"filename": n, "url": f"https://files.example/{n}", "requires-python": ">=3.11", "yanked": False}
            for n in names
        ]
        self.files.append({**self.files[1], "filename": names[1].replace("cp312", "cp313"), "yanked": "broken"})
        if core_metadata:
            for f in self.files:
                f["core-metadata"] = {"sha256": "0" * 64}

    def fetch(self, url: str, headers: dict) -> bytes:
        if url == "https://pypi.org/simple/onnxruntime-gpu/":
            return json.dumps({"meta": {"api-version": "1.1"}, "name": "onnxruntime-gpu", "files": self.files}).encode()
        if self.core_metadata and url.endswith(".whl.metadata"):
            return ORT_METADATA.encode()
        raise AssertionError(f"unexpected fetch {url}")

    def ranged(self, url: str, start, end) -> bytes:
        assert url.startswith("https://files.example/onnxruntime_gpu-9.9.0-cp311"), url
        data = self.blob[-end:] if start is None else self.blob[start : end + 1]
        self.served += len(data)
        return data


def ort_kind() -> dict:
    package = next(p for p in committed()["packages"] if p["id"] == "onnxruntime")
    return {"packages": [{**package, "first_release": "9.0.0", "releases": []}]}


def test_a_wheel_read_by_ranges_records_what_it_read_and_reads_back_the_same(tmp_path):
    index = FakeIndex(ort_wheel())
    first = {"onnxruntime-gpu": rs.Version("9.0.0")}
    live = rs.Recorder(rs.Live(index.fetch, index.ranged), tmp_path, first)
    doc = rs.refresh(ort_kind(), live, generated="2026-12-01", log=lambda m: None)
    (rel,) = doc["packages"][0]["releases"]
    (build,) = rel["builds"]
    assert rel["version"] == "9.9.0"
    assert rel["post"] == []
    assert rel["extras"] == {"cuda": ["nvidia-cuda-runtime-cu12~=12.0"], "cudnn": ["nvidia-cudnn-cu12~=9.0"]}
    assert (build["cuda_major"], build["cuda"], build["cuda_from"]) == (12, "12.2", "requires-dist")
    assert (build["cudnn_major"], build["cudnn_spec"]) == (9, ">=9.0,<10")
    assert build["python"] == ">=3.11,<3.13", "cp311 and cp312, not the yanked cp313 or the release candidate"
    assert build["manylinux"] == {"x86_64": "2.28"}, "the newer of the two wheels' glibc floors"
    assert build["sonames"] == {
        "cuda-provider": ["libcudart.so.12", "libcudnn.so.9"],
        "tensorrt-provider": ["libcudart.so.12", "libnvinfer.so.10"],
    }
    # what was recorded: the page reduced to the usable files, headers only, the assignment only
    page = json.loads((tmp_path / "index" / "onnxruntime-gpu.json").read_text())
    assert [f["filename"] for f in page["files"]] == [f["filename"] for f in index.files[:2]]
    wheel_dir = tmp_path / "wheels" / index.files[0]["filename"]
    assert "long description" not in (wheel_dir / "METADATA").read_text()
    assert (wheel_dir / "onnxruntime.capi.build_and_package_info.py.assign").read_text() == "cuda_version = '12.2'\n"
    assert (wheel_dir / "onnxruntime.capi.libonnxruntime_providers_cuda.so.needed").read_text() == (
        "how: dynamic\nlibcudart.so.12\nlibcudnn.so.9\n"
    )
    (tmp_path / "SOURCE.txt").write_text("retrieved: 2026-12-01\n")
    again = rs.refresh(ort_kind(), rs.Recorded(tmp_path), generated=rs.recorded_date(tmp_path), log=lambda m: None)
    assert again == doc


def test_pep_658_metadata_is_read_where_the_index_serves_it(tmp_path):
    index = FakeIndex(ort_wheel(), core_metadata=True)
    doc = rs.refresh(ort_kind(), rs.Live(index.fetch, index.ranged), generated="x", log=lambda m: None)
    assert doc["packages"][0]["releases"][0]["extras"]["cudnn"] == ["nvidia-cudnn-cu12~=9.0"]


def test_a_large_provider_library_is_read_only_as_far_as_its_first_segment(monkeypatch):
    """A shared object past WHOLE_ELF_BYTES: its member is inflated only up to its first segment,
    so a few range requests of CHUNK bytes, not the whole (incompressible) object."""
    import os

    monkeypatch.setattr(rs, "WHOLE_ELF_BYTES", 64 * 1024)
    monkeypatch.setattr(rs, "CHUNK", 16 * 1024)
    index = FakeIndex(ort_wheel(pad=os.urandom(2 * 1024 * 1024)))
    doc = rs.refresh(ort_kind(), rs.Live(index.fetch, index.ranged), generated="x", log=lambda m: None)
    build = doc["packages"][0]["releases"][0]["builds"][0]
    assert build["sonames"]["cuda-provider"] == ["libcudart.so.12", "libcudnn.so.9"]
    assert index.served < 400 * 1024, f"{index.served} bytes read of a {len(index.blob)}-byte wheel"


def test_evidences_that_disagree_stop_the_refresh():
    index = FakeIndex(ort_wheel(cuda_version="13.0"))
    with pytest.raises(rs.StacksRefreshError, match=r"9\.9\.0: the CUDA or cuDNN majors disagree"):
        rs.refresh(ort_kind(), rs.Live(index.fetch, index.ranged), generated="x", log=lambda m: None)


def test_an_index_page_that_is_not_pep_691_json_is_refused():
    with pytest.raises(rs.StacksRefreshError, match="not a PEP 691 JSON page"):
        rs.parse_listing("x", b"<html>", rs.Version("1"), "https://pypi.org/simple/x/")
    bad = {"files": [{"filename": "x-1.0.tar.gz", "url": "http://insecure.example/x-1.0.tar.gz"}]}
    with pytest.raises(rs.StacksRefreshError, match="not an https URL"):
        rs.parse_listing("x", json.dumps(bad).encode(), rs.Version("1"), "https://pypi.org/simple/x/")


# -- sdists ---------------------------------------------------------------------------------------
def test_sdist_members_are_read_below_the_top_directory():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, text in {"pkg-1.0/PKG-INFO": b"Name: pkg\n", "pkg-1.0/op_builder/builder.py": b"x = 1\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tf.addfile(info, io.BytesIO(text))
    members = rs._sdist_members(buf.getvalue(), "https://files.example/pkg-1.0.tar.gz")
    assert members == {"PKG-INFO": b"Name: pkg\n", "op_builder/builder.py": b"x = 1\n"}
    with pytest.raises(rs.StacksRefreshError, match="not a readable sdist"):
        rs._sdist_members(b"not gzip", "https://files.example/pkg-1.0.tar.gz")


def test_an_assignment_is_read_as_a_literal_never_run():
    source = "import os\ncuda_minor_mismatch_ok = {12: ['12.0', '12.8']}\nboom = os.system('false')\n"
    assert rs.assignments_text(source, ("cuda_minor_mismatch_ok",), "x") == (
        "cuda_minor_mismatch_ok = {12: ['12.0', '12.8']}\n"
    )
    assert rs.literal_assignments(source, "x") == {"cuda_minor_mismatch_ok": {12: ["12.0", "12.8"]}}


# -- what a requirement says -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("requirement", "major"),
    [
        ("nvidia-cuda-runtime~=13.0", 13),
        ("nvidia-cuda-runtime-cu12~=12.0", 12),
        ("cuda-toolkit[cudart]<13,>=12", 12),
        ("nvidia-cuda-runtime-cu12", 12),  # TensorRT's libs up to 10.13.3.9: the CUDA 12 runtime package
        ("nvidia-cuda-runtime-cu13==0.0.0a0", 13),  # torch-tensorrt 2.10.0: a placeholder pin
        ("nvidia-cudnn-cu13~=9.0", 9),
    ],
)
def test_the_major_a_requirement_names(requirement, major):
    from packaging.requirements import Requirement

    from provision.matrix.invariants import declared_major

    assert rs._major_of(Requirement(requirement), "x") == major
    assert declared_major(requirement) == major, "the invariant reads it as the refresh does"


@pytest.mark.parametrize(
    ("spec", "dotted"),
    [
        ("~=9.0", ">=9.0,<10"),
        ("~=12.1.3", ">=12.1.3,<12.2"),
        ("==9.*", ">=9,<10"),
        ("<10.0,>=9.3.0.75", "<10.0,>=9.3.0.75"),
        (">=10.7.0.post1,<10.8.0", None),
        ("", None),
    ],
)
def test_a_specifier_in_the_catalogue_grammar(spec, dotted):
    from packaging.specifiers import SpecifierSet

    from provision.versions import parse_specifier

    assert rs.dotted_spec(SpecifierSet(spec)) == dotted
    if dotted:
        parse_specifier(dotted)


def test_glibc_floor_of_each_wheel_is_its_oldest_tag_and_the_release_takes_the_newest():
    files = [
        rs._index_file("p", {"filename": n, "url": f"https://f.example/{n}"}, rs.Version("1"), "https://i.example/")
        for n in (
            "p-1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
            "p-1.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
            "p-1.0-cp312-cp312-manylinux_2_34_aarch64.whl",
            "p-1.0.tar.gz",
        )
    ]
    assert rs.glibc_floor(files, "x86_64") == "2.27"
    assert rs.glibc_floor(files, "aarch64") == "2.34"
    assert rs.glibc_floor(files[3:], "x86_64") is None


def test_headers_only_keeps_a_field_continued_by_a_line_of_blanks():
    import email.parser

    text = rs.headers_only(ORT_METADATA)
    assert "long description" not in text
    parsed = email.parser.Parser().parsestr(text)
    assert parsed.get_all("Requires-Dist")[-1] == 'nvidia-cudnn-cu12~=9.0; extra == "cudnn"'


# -- refresh.py's zip helpers (used by metadata_from_zip and by the stacks readers) ----------------
def test_zip_entries_and_members_by_range():
    blob = wheel({"a/b.py": b"x = 1\n" * 100, "pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\n"})
    stored = io.BytesIO()
    with zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("c.txt", b"plain")
    for data, name, expected in ((blob, "a/b.py", b"x = 1\n" * 100), (stored.getvalue(), "c.txt", b"plain")):
        ranged = lambda url, start, end, data=data: data[-end:] if start is None else data[start : end + 1]  # noqa: E731
        entries = refresh.zip_entries("https://x/p.whl", ranged)
        entry = next(e for e in entries if e.name == name)
        assert entry.size == len(expected)
        assert refresh.zip_member("https://x/p.whl", ranged, entry) == expected
    with pytest.raises(refresh.RefreshError, match="no zip end-of-central-directory"):
        refresh.zip_entries("https://x/p.whl", lambda url, start, end: b"not a zip")


def test_an_sdist_listed_over_the_cap_is_refused_before_it_is_downloaded():
    fetched = []
    entry = {"filename": "deepspeed-9.9.0.tar.gz", "url": "https://files.example/deepspeed-9.9.0.tar.gz"}
    entry["size"] = rs.MAX_SDIST_BYTES + 1
    f = rs._index_file("deepspeed", entry, rs.Version("1"), "https://pypi.org/simple/deepspeed/")
    live = rs.Live(lambda url, headers: fetched.append(url) or b"")
    with pytest.raises(rs.StacksRefreshError, match=r"over the \d+-byte cap for an sdist"):
        live.sdist_text(f, "PKG-INFO")
    assert fetched == []
