"""The cuda-redist refresh source, offline: NVIDIA's CUDA redistrib manifests as recorded in
tests/fixtures/refresh/cuda-redist (verbatim copies, see SOURCES.md there) in, compat/cuda.yaml's
min_driver rows compared (and, when asked, rewritten) out."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from support import COMPAT, one_error_line

from provision.matrix import refresh, refresh_redist
from provision.matrix.loader import load_matrix

COPIES = Path(__file__).resolve().parent.parent / "fixtures" / "refresh" / "cuda-redist"
CATALOGUED = COPIES / "catalogued"
UPSTREAM = COPIES / "upstream-13.3"
# Where Table 3 (the release notes' minimum, which cuda.yaml cites) is below the driver the release
# bundles, in the same branch: the check agrees with the row and says so in a note.
TABLE3_BELOW_BUNDLED = {"12.2.1": ("535.86.09", "535.86.10"), "12.8.0": ("570.26", "570.86.10")}


def manifests(root: Path) -> dict[str, refresh_redist.Manifest]:
    return refresh_redist.read_manifests(refresh_redist.recorded(root), "0.0.0")


def cuda_rows() -> dict[str, dict]:
    return {r["version"]: r for r in yaml.safe_load((COMPAT / "cuda.yaml").read_text())["releases"]}


def compat_copy(tmp_path: Path) -> Path:
    compat = tmp_path / "compat"
    shutil.copytree(COMPAT, compat)
    return compat


def run(args: list[str], capsys) -> tuple[int, str, str]:
    rc = refresh.main(args)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


# -- the recorded copies ----------------------------------------------------------------------------
def test_recorded_manifests_are_the_releases_they_are_named_for():
    found = manifests(CATALOGUED)
    assert len(found) == 30  # every cuda.yaml release but 13.1.0
    assert found["13.0.0"] == refresh_redist.Manifest("13.0.0", "2025-08-04", "580.65.06", ("x86_64", "sbsa"))
    assert found["12.0.0"].date == "2022-12-08"  # 12.0 and 12.1 manifests carry no release_label
    assert found["12.4.1"].arches == ("x86_64", "ppc64le", "sbsa")
    upstream = manifests(UPSTREAM)
    assert upstream["13.3.0"] == refresh_redist.Manifest("13.3.0", "2026-05-26", "610.43.02", ("x86_64", "sbsa"))
    assert upstream["13.3.1"] == refresh_redist.Manifest("13.3.1", "2026-06-29", "610.43.02", ("x86_64", "sbsa"))


def test_every_recorded_copy_is_a_catalogued_release_and_reproduces_its_min_driver():
    rows = cuda_rows()
    found = manifests(CATALOGUED)
    assert set(found) <= set(rows)
    differs = {v: (rows[v]["min_driver"], m.driver) for v, m in found.items() if m.driver != rows[v]["min_driver"]}
    assert differs == TABLE3_BELOW_BUNDLED
    same = [v for v in found if v not in differs]
    assert len(same) == 28
    assert {v for v in found if rows[v]["source"] != "cuda-release-notes"} == {"12.3.2"}
    assert rows["12.3.2"]["source"] == refresh_redist.DEFAULT_KEY  # Table 3 has no 12.3 Update 2 row


def test_check_over_the_catalogued_copies_reports_no_drift_and_notes_the_two_table3_rows(capsys):
    rc, out, err = run(["--source", "cuda-redist", "--check", "--from", str(CATALOGUED)], capsys)
    assert (rc, out) == (0, ""), err
    for version, (minimum, bundled) in TABLE3_BELOW_BUNDLED.items():
        branch = minimum.split(".")[0]
        assert (
            f"{version}: the manifest bundles driver {bundled}, newer in branch {branch} than cuda.yaml's minimum "
            f"{minimum} (source cuda-release-notes); not drift: the minimum stays"
        ) in err
    assert "differs" not in err
    assert "bundled driver ships for x86_64, sbsa: 12.5.0, " in err
    assert "bundled driver ships for x86_64, ppc64le, sbsa: 11.8.0, 12.0.0, " in err
    assert err.rstrip().splitlines()[-1].endswith("13.1.1, 13.2.0, 13.2.1, 13.2.2")


def test_a_rewrite_from_the_catalogued_copies_leaves_cuda_yaml_byte_identical(tmp_path, capsys):
    compat = compat_copy(tmp_path)
    before = (compat / "cuda.yaml").read_bytes()
    rc, out, err = run(["--compat-dir", str(compat), "--source", "cuda-redist", "--from", str(CATALOGUED)], capsys)
    assert (rc, out) == (0, ""), err
    assert (compat / "cuda.yaml").read_bytes() == before
    assert f"unchanged: {compat / 'cuda.yaml'}" in err


@pytest.mark.parametrize(
    ("bundled", "minimum", "agrees"),
    [
        ("570.86.10", "570.26", True),  # a later release of the branch: Table 3's minimum holds
        ("535.86.10", "535.86.09", True),
        ("570.26", "570.26", False),  # equal is not "above": compare() handles it as a match
        ("570.25", "570.26", False),  # bundling less than the minimum contradicts the row
        ("575.51.03", "570.26", False),  # another branch is never the same minimum
        ("565.57.01", "570.26", False),
    ],
)
def test_above_in_branch(bundled, minimum, agrees):
    assert refresh_redist.above_in_branch(bundled, minimum) is agrees


# -- upstream moved ---------------------------------------------------------------------------------
def test_a_release_newer_than_the_catalogue_is_drift_named_with_its_driver(capsys):
    rc, out, err = run(["--source", "cuda-redist", "--check", "--from", str(UPSTREAM)], capsys)
    assert rc == 1
    assert '+{version: "13.3.0", min_driver: "610.43.02"}' in out
    assert '+{version: "13.3.1", min_driver: "610.43.02"}' in out
    assert "13.3.0 (bundled driver 610.43.02): new upstream release, add it with its repository OS list" in err


def test_refresh_never_adds_a_row_for_a_new_release(tmp_path, capsys):
    compat = compat_copy(tmp_path)
    before = (compat / "cuda.yaml").read_bytes()
    rc, out, err = run(["--compat-dir", str(compat), "--source", "cuda-redist", "--from", str(UPSTREAM)], capsys)
    assert (rc, out) == (0, ""), err  # no row changed, so no diff
    assert (compat / "cuda.yaml").read_bytes() == before
    assert "13.3.1 (bundled driver 610.43.02): new upstream release, add it with its repository OS list" in err
    assert f"unchanged: {compat / 'cuda.yaml'}" in err


def with_driver(tmp_path: Path, version: str, driver: str | None) -> Path:
    """A copy of the catalogued manifests where ``version``'s nvidia_driver says ``driver`` (None:
    the component removed, as in the 13.4 manifests)."""
    copy = tmp_path / "edited"
    shutil.copytree(CATALOGUED, copy)
    path = copy / f"redistrib_{version}.json"
    doc = json.loads(path.read_text())
    old = doc["nvidia_driver"]["version"]
    if driver is None:
        del doc["nvidia_driver"]
    else:
        doc["nvidia_driver"] = json.loads(json.dumps(doc["nvidia_driver"]).replace(old, driver))
    path.write_text(json.dumps(doc, indent=4))
    return copy


@pytest.mark.parametrize("driver", ["560.35.01", "565.57.01"])  # older than the minimum; another branch
def test_a_bundled_driver_that_contradicts_the_row_is_drift_with_a_diff(tmp_path, capsys, driver):
    copy = with_driver(tmp_path, "12.6.3", driver)
    rc, out, err = run(["--source", "cuda-redist", "--check", "--from", str(copy)], capsys)
    assert rc == 1
    minus = [ln for ln in out.splitlines() if ln.startswith("-{")]
    plus = [ln for ln in out.splitlines() if ln.startswith("+{")]
    assert (minus, plus) == (
        ['-{version: "12.6.3", min_driver: "560.35.05"}'],
        [f'+{{version: "12.6.3", min_driver: "{driver}"}}'],
    )
    assert "compat/cuda.yaml differs from NVIDIA's CUDA redistrib manifests" in err


def test_a_later_bundled_driver_of_the_same_branch_is_a_note(tmp_path, capsys):
    copy = with_driver(tmp_path, "12.6.3", "560.35.99")
    rc, out, err = run(["--source", "cuda-redist", "--check", "--from", str(copy)], capsys)
    assert (rc, out) == (0, ""), err
    assert (
        "12.6.3: the manifest bundles driver 560.35.99, newer in branch 560 than cuda.yaml's minimum 560.35.05" in err
    )


def test_refresh_rewrites_the_changed_row_shows_it_and_keeps_the_rest(tmp_path, capsys):
    compat = compat_copy(tmp_path)
    before = (compat / "cuda.yaml").read_text().splitlines()
    copy = with_driver(tmp_path, "12.6.3", "560.35.01")
    args = ["--compat-dir", str(compat), "--source", "cuda-redist", "--from", str(copy)]
    rc, out, err = run(args, capsys)
    assert rc == 0, err
    assert '+{version: "12.6.3", min_driver: "560.35.01"}' in out  # shown, not silent
    after = (compat / "cuda.yaml").read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 1  # the two Table 3 rows below their bundled driver stay
    assert 'version: "12.6.3"' in changed[0][1]
    assert 'min_driver: "560.35.01"' in changed[0][1]
    assert changed[0][1].endswith("source: cuda-redist-manifests}")
    assert str(next(c for c in load_matrix(compat).cuda if str(c.version) == "12.6.3").min_driver) == "560.35.01"
    assert run([*args, "--check"], capsys)[0] == 0


def test_the_manifests_source_key_is_in_the_catalogue_with_where_it_was_read():
    entry = yaml.safe_load((COMPAT / "sources.yaml").read_text())["sources"][refresh_redist.DEFAULT_KEY]
    assert entry["url"] == refresh_redist.UPSTREAM
    assert entry["kind"] == "primary-copy"  # the recorded copies came through nixpkgs / cuda-packages
    assert "SOURCES.md" in entry["note"]


def test_refresh_needs_its_source_key_before_it_writes(tmp_path, capsys):
    compat = compat_copy(tmp_path)
    before = (compat / "cuda.yaml").read_bytes()
    copy = with_driver(tmp_path, "12.6.3", "560.35.01")
    args = ["--compat-dir", str(compat), "--source", "cuda-redist", "--from", str(copy), "--source-key", "nowhere"]
    rc, err = one_error_line(args, capsys)
    assert (rc, "--source-key nowhere: not a key of compat/sources.yaml" in err) == (2, True), err
    assert (compat / "cuda.yaml").read_bytes() == before


# -- 13.4 on: no driver in the manifest -------------------------------------------------------------
def test_a_catalogued_release_whose_manifest_has_no_driver_is_a_finding_not_a_crash(tmp_path, capsys):
    copy = with_driver(tmp_path, "13.0.0", None)
    assert manifests(copy)["13.0.0"].driver is None
    rc, out, err = run(["--source", "cuda-redist", "--check", "--from", str(copy)], capsys)
    assert "13.0.0: the manifest carries no driver; min_driver stays with the release notes\n" in err
    assert (rc, out) == (0, ""), err  # the row stays: no diff, no drift


def test_a_new_release_without_a_driver_is_reported_never_invented(tmp_path, capsys):
    copy = tmp_path / "134"
    copy.mkdir()
    (copy / "SOURCE.txt").write_text("key: cuda-redist-manifests\n")
    doc = json.loads((UPSTREAM / "redistrib_13.3.1.json").read_text())
    del doc["nvidia_driver"]
    doc["release_label"], doc["release_date"] = "13.4.1", "2026-09-09"
    (copy / "redistrib_13.4.1.json").write_text(json.dumps(doc, indent=4))
    rc, out, err = run(["--source", "cuda-redist", "--check", "--from", str(copy)], capsys)
    assert rc == 1
    assert '+{version: "13.4.1"}  # no driver in the manifest' in out
    assert (
        "13.4.1: new upstream release; the manifest carries no driver; min_driver stays with the release notes" in err
    )


# -- untrusted input --------------------------------------------------------------------------------
GOOD = (CATALOGUED / "redistrib_13.0.0.json").read_bytes()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (GOOD[: len(GOOD) // 2], "not JSON"),
        (b"\xff" + GOOD, "not UTF-8 (byte 0xff at offset 0)"),
        (b"[1, 2]", "not a JSON object"),
        (GOOD.replace(b'"release_label": "13.0.0"', b'"release_label": "13.0.1"'), "release_label '13.0.1'"),
        (GOOD.replace(b'"release_product": "cuda"', b'"release_product": "cudnn"'), "release_product 'cudnn'"),
        (GOOD.replace(b'"release_date": "2025-08-04"', b'"release_date": "Aug 4"'), "release_date 'Aug 4'"),
        (GOOD.replace(b'"version": "580.65.06"', b'"version": "580.65.06; rm"'), "is not a driver version"),
        (GOOD.replace(b'"version": "580.65.06",', b""), "nvidia_driver.version None"),
        (
            GOOD.replace(
                b'"linux-x86_64": {\n            "relative_path": "nvidia_driver',
                b'"linux-amd64": {\n            "relative_path": "nvidia_driver',
            ),
            "has no linux-x86_64 archive",
        ),
        (
            GOOD.replace(b"nvidia_driver-linux-sbsa-580.65.06", b"nvidia_driver-linux-sbsa-580.65.07"),
            "nvidia_driver['linux-sbsa'] is not an archive of driver 580.65.06",
        ),
        (
            GOOD.replace(
                b'"linux-sbsa": {\n            "relative_path": "nvidia_driver',
                b'"linux-\\u001b[2J": {\n            "relative_path": "nvidia_driver',
            ),
            "nvidia_driver['linux-\\x1b[2J'] is not an archive",
        ),
        (b'{"release_label": "13.0.0", "release_label": "13.0.0"}', "duplicate key 'release_label'"),
        (b'{"release_date": NaN}', "NaN is not JSON"),
        (b"[" * 100000 + b"]" * 100000, "not JSON"),
    ],
    ids=[
        "truncated",
        "not-utf8",
        "array",
        "wrong-label",
        "wrong-product",
        "bad-date",
        "bad-driver",
        "driver-without-version",
        "no-x86_64",
        "archive-of-another-driver",
        "escape-in-platform-key",
        "duplicate-key",
        "nan",
        "deep",
    ],
)
def test_a_bad_manifest_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, data, says):
    with pytest.raises(refresh_redist.RedistRefreshError, match="cuda-redist: "):
        refresh_redist.parse_manifest(data, "13.0.0", "redistrib_13.0.0.json")
    compat = compat_copy(tmp_path)
    before = (compat / "cuda.yaml").read_bytes()
    copy = tmp_path / "bad"
    shutil.copytree(CATALOGUED, copy)
    (copy / "redistrib_13.0.0.json").write_bytes(data)
    for check in ([], ["--check"]):
        rc, err = one_error_line(
            ["--compat-dir", str(compat), "--source", "cuda-redist", "--from", str(copy), *check], capsys
        )
        assert (rc, says in err) == (2, True), err
    assert (compat / "cuda.yaml").read_bytes() == before


def test_an_oversized_manifest_is_refused(monkeypatch):
    monkeypatch.setattr(refresh_redist, "MAX_MANIFEST_BYTES", 1000)
    with pytest.raises(refresh_redist.RedistRefreshError, match="over the 1000-byte cap"):
        refresh_redist.parse_manifest(GOOD, "13.0.0", "redistrib_13.0.0.json")


@pytest.mark.parametrize(
    ("name", "says"),
    [("redistrib_13.x.json", "not named redistrib_<X.Y.Z>.json"), ("redistrib_13.0.json", "not named")],
)
def test_a_badly_named_manifest_is_refused(tmp_path, name, says):
    copy = tmp_path / "named"
    copy.mkdir()
    (copy / name).write_bytes(GOOD)
    with pytest.raises(refresh_redist.RedistRefreshError, match=says):
        refresh_redist.recorded(copy)


def test_a_symlinked_manifest_or_an_empty_copy_is_refused(tmp_path):
    copy = tmp_path / "links"
    copy.mkdir()
    with pytest.raises(refresh_redist.RedistRefreshError, match=r"no redistrib_<X\.Y\.Z>\.json"):
        refresh_redist.recorded(copy)
    (copy / "redistrib_13.0.0.json").symlink_to(CATALOGUED / "redistrib_13.0.0.json")
    with pytest.raises(refresh_redist.RedistRefreshError, match="not a regular file"):
        refresh_redist.recorded(copy)


def test_a_mislabelled_catalogue_row_is_drift(tmp_path, capsys):
    compat = compat_copy(tmp_path)
    path = compat / "cuda.yaml"
    path.write_text(path.read_text().replace('label: "13.0 GA"', 'label: "13.1 GA"', 1))
    copy = tmp_path / "one"
    copy.mkdir()
    (copy / "SOURCE.txt").write_text("key: cuda-redist-manifests\n")
    shutil.copy(CATALOGUED / "redistrib_13.0.0.json", copy)
    rc, _, err = run(["--compat-dir", str(compat), "--source", "cuda-redist", "--check", "--from", str(copy)], capsys)
    assert rc == 1
    assert "13.0.0: cuda.yaml's label '13.1 GA' names another release than the manifest's 13.0.0" in err


def test_a_broken_catalogue_exits_3(tmp_path, capsys):
    compat = compat_copy(tmp_path)
    (compat / "cuda.yaml").write_text("releases: [\n")
    rc, err = one_error_line(
        ["--compat-dir", str(compat), "--source", "cuda-redist", "--check", "--from", str(CATALOGUED)], capsys
    )
    assert (rc, "cuda.yaml: line 2: invalid YAML" in err) == (3, True), err


def test_an_unreachable_upstream_exits_4(monkeypatch, capsys):
    import urllib.error

    def down(url, headers):
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr(refresh, "http_fetch", down)
    rc, err = one_error_line(["--source", "cuda-redist", "--check"], capsys)
    assert (rc, "cuda-redist: upstream unreachable (no route to host)" in err) == (4, True), err


def test_the_live_index_lists_manifests_and_reads_only_the_catalogued_range(capsys, monkeypatch):
    """NVIDIA's directory page in, manifests read through the same fetch (a fake, no network)."""
    pages = {
        refresh_redist.UPSTREAM: (
            b'<a href="redistrib_11.0.3.json">redistrib_11.0.3.json</a>\n'
            b'<a href="redistrib_13.0.0.json">redistrib_13.0.0.json</a>\n'
            b"<a href='./redistrib_13.3.0.json'>redistrib_13.3.0.json</a>\n"
        ),
        refresh_redist.UPSTREAM + "redistrib_13.0.0.json": GOOD,
        refresh_redist.UPSTREAM + "redistrib_13.3.0.json": (UPSTREAM / "redistrib_13.3.0.json").read_bytes(),
    }
    asked = []

    def fetch(url, headers):
        asked.append(url)
        return pages[url]

    monkeypatch.setattr(refresh, "http_fetch", fetch)
    rc, out, err = run(["--source", "cuda-redist", "--check"], capsys)
    assert rc == 1
    assert "redistrib_11.0.3.json" not in " ".join(asked)  # older than the oldest catalogued release
    assert '+{version: "13.3.0", min_driver: "610.43.02"}' in out
    assert "13.3.0 (bundled driver 610.43.02): new upstream release" in err
