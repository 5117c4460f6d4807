"""CLI behaviour: output formats, exit codes, one-line errors with hints, never a traceback."""

import json
import subprocess
import sys

import pytest

import provision


def test_plan_table(cli):
    r = cli("plan", "--os", "rocky9", "--gpu", "a100-pcie")
    assert r.code == 0, r
    assert "R620 620.70.06" in r.out
    assert "why:" in r.out
    assert "[driver]" in r.out
    assert r.err == ""


def test_plan_json_contract_and_lock(cli, tmp_path):
    lock = tmp_path / "plan.lock.json"
    r = cli("plan", "--os", "rocky9", "--gpu", "a100-pcie", "--format", "json", "--lock", str(lock))
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert doc == json.loads(lock.read_text())
    assert doc["schema"] == 1
    assert doc["os"]["id"] == "rocky9"
    assert doc["gpu"]["id"] == "a100-pcie"
    assert doc["driver"]["kernel_module"] in ("open", "proprietary")
    assert f"wrote {lock}" in r.err


def test_plan_yaml(cli):
    import yaml

    r = cli("plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "pytorch==2.5.1", "--format", "yaml")
    assert r.code == 0
    doc = yaml.safe_load(r.out)
    assert doc["framework"]["version"] == "2.5.1"
    assert doc["fabric_manager"]["version"] == doc["driver"]["version"]


def assert_error(r, code, text, hint=None):
    assert r.code == code, r
    lines = r.err.splitlines()
    assert lines[0].startswith("error: "), r.err
    assert text in lines[0], r.err
    assert lines[-1].startswith("hint: "), r.err
    if hint:
        assert hint in lines[-1]
    assert "Traceback" not in r.err + r.out


@pytest.mark.parametrize(
    ("args", "code", "text", "hint"),
    [
        (["--gpu", "a100pcie"], 2, "unknown GPU 'a100pcie'", "did you mean a100-pcie"),
        (["--gpu", "a100-pice"], 2, "unknown GPU 'a100-pice'", "did you mean a100-pcie"),
        (["--os", "rocky8"], 2, "unknown OS 'rocky8'", "did you mean rocky9"),
        (["--cuda", "banana"], 2, "--cuda 'banana' is not a CUDA version", "major.minor"),
        (["--driver", "9000"], 2, "neither a branch nor a release", "--driver 580"),
        (
            ["--framework", "pytorch==1.13.0"],
            2,
            "PyTorch 1.13.0 is not in the catalogue",
            "provision matrix frameworks",
        ),
        (["--framework", "mxnet"], 2, "unknown framework 'mxnet'", "pytorch, tensorflow"),
        (["--cuda", "11.8"], 2, "no compatible stack for os=rocky9 gpu=a100-pcie pins=[cuda=11.8]", "--cuda"),
        (["--gpu", "v100", "--driver", "595"], 2, "no compatible stack", "--driver 580"),
        (["--gpu", "a100-80gb"], 2, "differ in Fabric Manager", "--gpu a100-pcie-80gb"),
        (["--policy", "newest"], 2, "Invalid value for '--policy'", "provision plan --help"),
    ],
)
def test_plan_bad_input(cli, args, code, text, hint):
    base = {"--os": "rocky9", "--gpu": "a100-pcie"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = ["plan"] + [x for kv in base.items() for x in kv]
    assert_error(cli(*argv), code, text, hint)


def test_refusal_lists_what_was_tried(cli):
    r = cli("plan", "--os", "rocky9", "--gpu", "a100-pcie", "--cuda", "11.8")
    assert "  cuda 11.8.0: no nvidia/cuda runtime image for rockylinux9" in r.err
    assert r.out == ""


def test_missing_option_is_a_usage_error(cli):
    assert_error(cli("plan", "--os", "rocky9"), 2, "Missing option '--gpu'", "provision plan --help")


def test_broken_compat_dir_exits_3(cli, tmp_path):
    from support import make_compat

    compat = make_compat(tmp_path / "compat")
    text = (compat / "cuda.yaml").read_text().replace('min_driver: "580.95.05"', "min_driver: 580.95", 1)
    (compat / "cuda.yaml").write_text(text)
    r = cli("plan", "--os", "rocky9", "--gpu", "a100-pcie-80gb", "--compat-dir", str(compat))
    assert_error(r, 3, "cuda.yaml: releases[0](13.0.2).min_driver", "--compat-dir")


def test_missing_compat_dir(cli, tmp_path):
    r = cli("--compat-dir", str(tmp_path / "nope"), "plan", "--os", "rocky9", "--gpu", "b200")
    assert_error(r, 2, "does not exist", "--compat-dir")


def test_version_and_help(cli):
    r = cli("--version")
    assert r.code == 0
    assert provision.__version__ in r.out
    for argv in (
        ["--help"],
        ["plan", "--help"],
        ["matrix", "--help"],
        ["matrix", "check", "--help"],
        ["matrix", "gpus", "--help"],
    ):
        r = cli(*argv)
        assert r.code == 0, argv
        assert "Usage:" in r.out, argv


@pytest.mark.parametrize("topic", ["gpus", "os", "drivers", "cuda", "cudnn", "frameworks", "images"])
def test_matrix_listings(cli, topic):
    r = cli("matrix", topic, "--format", "json")
    assert r.code == 0
    assert json.loads(r.out)
    md = cli("matrix", topic, "--format", "markdown")
    assert md.code == 0
    table = [ln for ln in md.out.splitlines() if ln.startswith("|")]
    assert len(table) >= 3
    assert set(table[1]) <= set("|-")
    widths = {ln.count("|") - ln.count("\\|") for ln in table}
    assert len(widths) == 1, "every markdown row has the same number of cells"
    assert cli("matrix", topic).code == 0


def test_matrix_check_passes_and_counts(cli):
    r = cli("matrix", "check", "--format", "json")
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert doc["ok"]
    assert doc["problems"] == []
    assert doc["unresolved_pairs"] == []
    assert doc["requests"]["os+gpu"]["resolved"] >= 70
    assert doc["requests"]["os+gpu+framework"]["resolved"] > 1000
    assert doc["refusals_by_rule"]


def test_matrix_check_fails_on_broken_invariant(cli, tmp_path):
    from support import COMPAT, make_compat

    compat = make_compat(tmp_path / "compat", COMPAT)
    gpus = (compat / "gpus.yaml").read_text().replace("architecture: hopper", "architecture: kepler", 1)
    (compat / "gpus.yaml").write_text(gpus)
    r = cli("matrix", "check", "--compat-dir", str(compat))
    assert r.code == 1
    assert "unknown architecture 'kepler'" in r.out
    assert "FAILED" in r.out


def test_no_traceback_in_a_real_process(tmp_path):
    """The installed entry point, in a separate process, on a broken data directory."""
    compat = tmp_path / "compat"
    compat.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "provision", "plan", "--os", "rocky9", "--gpu", "b200", "--compat-dir", str(compat)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 3
    assert proc.stderr.startswith("error: sources.yaml: cannot read")
    assert "Traceback" not in proc.stderr
