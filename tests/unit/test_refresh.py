"""The framework refresh tool, offline: recorded wheel metadata in, the committed rows out."""

import io
import zipfile
from pathlib import Path

import pytest
import yaml
from support import COMPAT

from provision.matrix import refresh

METADATA = Path(__file__).resolve().parent.parent / "fixtures" / "wheel-metadata"


def recorded() -> dict[str, str]:
    files = sorted(METADATA.glob("*.METADATA"))
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
