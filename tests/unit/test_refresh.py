"""The framework refresh tool, offline: recorded wheel metadata in, the committed rows out."""

import io
import zipfile
from pathlib import Path

import pytest
import yaml
from support import COMPAT

from provision.matrix import refresh
from provision.versions import DottedVersion as DVersion

METADATA = Path(__file__).resolve().parent.parent / "fixtures" / "wheel-metadata"
# more recorded wheel metadata, with its SOURCE.txt (tensorflow 2.21.0: read by range requests)
MORE_METADATA = Path(__file__).resolve().parent.parent / "fixtures" / "refresh" / "frameworks"


def recorded() -> dict[str, str]:
    files = sorted([*METADATA.glob("*.METADATA"), *MORE_METADATA.glob("*.METADATA")])
    assert files, "no recorded metadata"
    return {p.name.removesuffix(".METADATA"): p.read_text() for p in files}


def test_cuda_pins_from_metadata():
    rec = recorded()
    torch = refresh.cuda_pins(rec["torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl"], None)
    assert torch["cuda_runtime"] == "12.4.127"
    assert torch["cudnn"] == "9.1.0.70"
    new = refresh.cuda_pins(rec["torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"], None)
    assert new["cuda_runtime"] == "13.0.3"  # cuda-toolkit[cudart]==13.0.3
    tf = refresh.cuda_pins(
        rec["tensorflow-2.20.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"], "and-cuda"
    )
    assert tf["cuda_runtime"] == "<13.0,>=12.5.82"
    assert refresh.cuda_of(tf["cuda_runtime"]) == "12.5"
    none = refresh.cuda_pins(rec["tensorflow-2.20.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"], None)
    assert none["cuda_runtime"] is None, "the and-cuda pins apply only with the extra"


def fake_index(rec: dict[str, str]):
    """A package index serving exactly the recorded wheels (PEP 691 JSON + PEP 658 metadata)."""
    import json

    def fetch(url: str, headers: dict) -> bytes:
        for package in ("torch", "tensorflow"):
            if url == f"https://pypi.org/simple/{package}/":
                files = [
                    {"filename": n, "url": f"https://files.example/{n}"} for n in rec if n.startswith(package + "-")
                ]
                return json.dumps({"files": files}).encode()
        if url.startswith("https://files.example/") and url.endswith(".metadata"):
            return rec[url.removeprefix("https://files.example/").removesuffix(".metadata")].encode()
        if "download.pytorch.org" in url:
            raise OSError("unreachable in this test")
        raise AssertionError(f"unexpected fetch {url}")

    return fetch


def test_refresh_reproduces_the_committed_rows(tmp_path):
    rec = recorded()
    doc = refresh.refresh(COMPAT, fetch=fake_index(rec), ranged=None, log=lambda m: None)
    committed = yaml.safe_load((COMPAT / "frameworks.yaml").read_text())

    def rows(d):
        return {(fw["id"], r["version"]): r["builds"] for fw in d["frameworks"] for r in fw["releases"]}

    new, old = rows(doc), rows(committed)
    assert len(new) == len([name for name in rec if "x86_64" in name])  # one release per x86_64 wheel
    for key, builds in new.items():
        for b in builds:
            match = next(o for o in old[key] if o["variant"] == b["variant"])
            drop = ("evidence",)
            assert {k: v for k, v in b.items() if k not in drop} == {k: v for k, v in match.items() if k not in drop}, (
                key
            )


def test_metadata_read_from_the_zip_by_ranges():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("torch/__init__.py", "x" * 5000)
        zf.writestr("torch-9.9.dist-info/METADATA", "Metadata-Version: 2.1\nName: torch\n")
    blob = buf.getvalue()

    def ranged(url, start, end):
        if start is None:
            return blob[-end:]
        return blob[start : end + 1]

    assert refresh.metadata_from_zip("https://x/torch.whl", ranged).startswith("Metadata-Version: 2.1")


def test_dump_quotes_versions():
    text = refresh.dump({"frameworks": [{"version": "2.10"}]})
    assert '"2.10"' in text
    assert yaml.safe_load(text)["frameworks"][0]["version"] == "2.10"


def test_bad_input_file(tmp_path):
    from support import make_compat

    compat = make_compat(tmp_path / "c", COMPAT)
    (compat / "framework_variants.yaml").write_text("frameworks: [{id: x}]\n")
    with pytest.raises(refresh.RefreshError, match=r"framework_variants\.yaml"):
        refresh.refresh(compat, fetch=lambda u, h: b"", ranged=None, log=lambda m: None)


# -- issue 23: a cuDNN range stays a range; per-architecture SM sets -----------------------------
def _requires(metadata: str, name: str) -> str:
    """The specifier of one Requires-Dist line, as the wheel writes it (marker dropped)."""
    from packaging.requirements import Requirement

    for line in metadata.splitlines():
        if line.startswith("Requires-Dist: ") and Requirement(line.split(": ", 1)[1]).name == name:
            return str(Requirement(line.split(": ", 1)[1]).specifier)
    raise AssertionError(f"no {name}")


@pytest.mark.parametrize("version", ["2.20.0", "2.21.0"])
def test_tensorflow_cudnn_range_is_kept_as_a_range(real_matrix, version):
    rec = recorded()
    (name,) = [n for n in rec if n.startswith(f"tensorflow-{version}-")]
    declared = _requires(rec[name], "nvidia-cudnn-cu12")
    assert not declared.startswith("==")  # the wheel's own words: a range
    pins = refresh.cuda_pins(rec[name], "and-cuda")
    row = refresh._build_from_metadata(
        {"package": "tensorflow"}, version, pins, where="w", documented={"and-cuda": {}}, line=None, default=True
    )
    assert row["cudnn_spec"] == declared
    assert row["cudnn"] == refresh._floor(declared)
    build = next(b for b in real_matrix.framework("tensorflow").release(DVersion(version)).builds)
    from provision.versions import parse_specifier

    assert (build.cudnn_spec, build.cudnn) == (parse_specifier(declared), row["cudnn"])
    assert not build.cudnn_pinned
    lower = build.cudnn
    assert build.cudnn_allows(lower)
    above = next(c.version for c in real_matrix.cudnn if c.version.release[0] == int(lower.split(".")[0]))
    assert build.cudnn_allows(above)  # the newest catalogued cuDNN 9 is inside the range
    assert not build.cudnn_allows("10.0.0")


def test_an_exact_pin_stays_exact(real_matrix):
    rec = recorded()
    pins = refresh.cuda_pins(rec["torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"], None)
    assert _requires(rec["torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"], "nvidia-cudnn-cu13").startswith("==")
    row = refresh._build_from_metadata(
        {"package": "torch"}, "2.14.1", pins, where="w", documented={}, line=None, default=True
    )
    assert "cudnn_spec" not in row
    build = next(b for b in real_matrix.framework("pytorch").release(DVersion("2.14.1")).builds if b.default)
    assert build.cudnn_pinned
    assert build.cudnn == pins["cudnn"]
    assert build.cudnn_allows(pins["cudnn"])
    assert not build.cudnn_allows("9.24.0.44")


def test_aarch64_sms_are_not_the_x86_64_table(real_matrix):
    """PyTorch's release notes give the x86_64 (and Windows) SM table that framework_variants.yaml
    carries; aarch64 has its own table, not recorded here: the aarch64 wheels' SMs are unknown."""
    variants = yaml.safe_load((COMPAT / "framework_variants.yaml").read_text())
    torch = next(f for f in variants["frameworks"] if f["id"] == "pytorch")
    for rel in real_matrix.framework("pytorch").releases:
        line = next((ln for ln in torch["lines"] if ln["line"] == ".".join(str(rel.version).split(".")[:2])), None)
        for b in rel.builds:
            documented = next((d for d in (line or {}).get("builds", []) if d["variant"] == b.variant), {})
            want = documented.get("arch_sms", {})
            for arch in b.arches:
                ccs, ptx, _src = b.sms_for(arch)
                if arch in want:
                    assert (list(ccs) if ccs else None, ptx) == (
                        want[arch]["compute_capabilities"],
                        want[arch]["ptx"],
                    ), (rel.version, b.variant)
                else:
                    assert (ccs, ptx) == (b.compute_capabilities, b.ptx)
    affected = [
        str(r.version)
        for r in real_matrix.framework("pytorch").releases
        for b in r.builds
        if b.sms_for("aarch64")[:2] == (None, None) and "aarch64" in b.arches and b.compute_capabilities
    ]
    assert affected == ["2.14.1", "2.14.0", "2.13.0", "2.12.1", "2.12.0"]
