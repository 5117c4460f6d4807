"""CLI behaviour: output formats, exit codes, one-line errors with hints, never a traceback.

The commands read the fixture catalogue (tests/fixtures/compat) and expect what its rows give, so a
refresh of compat/ changes nothing here; the tests about the live catalogue assert invariants."""

import json
import subprocess
import sys

import pytest

import provision

# fixture catalogue ids: the requests these tests make (what they expect is read from its rows)
OS, GPU = "rocky9", "a100-pcie-80gb"

pytestmark = pytest.mark.usefixtures("on_fixture_catalogue")


def lts_choice(matrix, os_id):
    """From the catalogue rows: the newest long-term support or production branch not past end of
    life, and its newest release for the OS (what policy lts plans for a GPU every branch drives)."""
    branch = next(b for b in matrix.drivers if b.type in ("ltsb", "pb") and not b.past_eol(matrix.as_of))
    return branch, next(r for r in branch.releases if os_id in r.os)


def test_plan_table(cli, fixture_matrix):
    branch, release = lts_choice(fixture_matrix, OS)
    r = cli("plan", "--os", OS, "--gpu", GPU)
    assert r.code == 0, r
    assert f"R{branch.branch} {release.version}" in r.out
    assert "why:" in r.out
    assert "[driver]" in r.out
    assert r.err == ""


def test_plan_json_contract_and_lock(cli, tmp_path, fixture_matrix):
    lock = tmp_path / "plan.lock.json"
    r = cli("plan", "--os", OS, "--gpu", GPU, "--format", "json", "--lock", str(lock))
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert doc == json.loads(lock.read_text())
    assert doc["schema"] == 2
    assert doc["os"]["id"] == OS
    assert doc["gpu"]["id"] == GPU
    _, release = lts_choice(fixture_matrix, OS)
    assert doc["driver"]["version"] == str(release.version)
    assert doc["driver"]["kernel_module"] in ("open", "proprietary")
    assert f"wrote {lock}" in r.err


def test_plan_yaml(cli, fixture_matrix):
    import yaml

    switched = fixture_matrix.gpu("h100-sxm")
    assert switched.nvswitch, "an NVSwitch GPU: its plan needs Fabric Manager"
    older = fixture_matrix.framework("pytorch").releases[-1].version  # not the newest: a real pin
    r = cli("plan", "--os", "ubuntu22.04", "--gpu", switched.id, "--framework", f"pytorch=={older}", "--format", "yaml")
    assert r.code == 0, r
    doc = yaml.safe_load(r.out)
    assert doc["framework"]["version"] == str(older)
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


def last_branch_hint(matrix):
    """A GPU past its architecture's last driver branch, pinned to a newer branch: the hint offers the last one."""
    arch = next(a for a in matrix.architectures if a.last_driver_branch)
    gpu = next(g for g in matrix.gpus if g.architecture == arch.id)
    newer = next(b.branch for b in matrix.drivers if b.branch > arch.last_driver_branch)
    return ["--gpu", gpu.id, "--driver", str(newer)], f"--driver {arch.last_driver_branch} "


@pytest.mark.parametrize(
    ("args", "code", "text", "hint"),
    [
        (["--gpu", GPU.replace("-", "")], 2, f"unknown GPU '{GPU.replace('-', '')}'", f"did you mean {GPU}"),
        (["--gpu", "a100-pice-80gb"], 2, "unknown GPU 'a100-pice-80gb'", f"did you mean {GPU}"),
        (["--os", "rocky8"], 2, "unknown OS 'rocky8'", f"did you mean {OS}"),
        (["--cuda", "banana"], 2, "--cuda 'banana' is not a CUDA version", "major.minor"),
        (["--driver", "9000"], 2, "neither a branch nor a release", "use a branch (--driver "),
        (
            ["--framework", "pytorch==1.13.0"],
            2,
            "PyTorch 1.13.0 is not in the catalogue",
            "provision matrix frameworks",
        ),
        (["--framework", "mxnet"], 2, "unknown framework 'mxnet'", "pytorch, tensorflow"),
        (["--cuda", "11.8"], 2, f"no compatible stack for os={OS} gpu={GPU} pins=[cuda=11.8]", "--cuda"),
        ("last-branch", 2, "no compatible stack", None),
        (["--policy", "newest"], 2, "Invalid value for '--policy'", "provision plan --help"),
    ],
)
def test_plan_bad_input(cli, fixture_matrix, args, code, text, hint):
    if args == "last-branch":
        args, hint = last_branch_hint(fixture_matrix)
    base = {"--os": OS, "--gpu": GPU}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = ["plan"] + [x for kv in base.items() for x in kv]
    assert_error(cli(*argv), code, text, hint)


def test_a_group_whose_members_need_different_stacks(cli, fixture_matrix):
    """The error names the members and what differs (Fabric Manager where only some have NVSwitch);
    the hint offers them one by one."""
    group = fixture_matrix.gpu_groups[0]
    members = [fixture_matrix.gpu(m) for m in group.members]
    assert len({g.nvswitch for g in members}) == 2, "one member on an NVSwitch baseboard, one not"
    r = cli("plan", "--os", OS, "--gpu", group.id)
    assert_error(
        r, 2, f"GPU '{group.id}' covers {', '.join(group.members)}, which differ in ", f"--gpu {members[0].id}"
    )
    assert "Fabric Manager" in r.err.splitlines()[0]


def test_refusal_lists_what_was_tried(cli, fixture_matrix):
    os_rel = fixture_matrix.os(OS)
    image = next(i for i in fixture_matrix.images if i.cuda.release[:2] == (11, 8))
    assert os_rel.cuda_image_os not in image.os, "the fixture has no 11.8 image for this OS"
    r = cli("plan", "--os", OS, "--gpu", GPU, "--cuda", "11.8")
    assert f"  cuda {image.cuda}: no nvidia/cuda runtime image for {os_rel.cuda_image_os}" in r.err
    assert r.out == ""


def test_missing_option_is_a_usage_error(cli):
    assert_error(cli("plan", "--gpu", GPU), 2, "Missing option '--os'", "provision plan --help")
    # --gpu may be left out for a --platform that implies it; neither is one line and exit 2
    assert_error(
        cli("plan", "--os", OS),
        2,
        "give --gpu, or --platform to imply it",
        "provision matrix gpus lists the GPUs, provision matrix platforms the servers and baseboards",
    )


def test_broken_compat_dir_exits_3(cli, tmp_path):
    from support import make_compat

    compat = make_compat(tmp_path / "compat")  # the fixture catalogue
    text = (compat / "cuda.yaml").read_text().replace('min_driver: "580.95.05"', "min_driver: 580.95", 1)
    (compat / "cuda.yaml").write_text(text)
    r = cli("plan", "--os", OS, "--gpu", GPU, "--compat-dir", str(compat))
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


@pytest.mark.parametrize("catalogue", ["fixture", "live"])
@pytest.mark.parametrize("topic", ["gpus", "os", "drivers", "cuda", "cudnn", "frameworks", "images"])
def test_matrix_listings(cli, topic, catalogue):
    """Well-formed listings of the fixture catalogue, and of the live one whatever a refresh adds."""
    from support import COMPAT

    where = ["--compat-dir", str(COMPAT)] if catalogue == "live" else []
    r = cli("matrix", topic, "--format", "json", *where)
    assert r.code == 0, r
    assert json.loads(r.out)
    md = cli("matrix", topic, "--format", "markdown", *where)
    assert md.code == 0
    table = [ln for ln in md.out.splitlines() if ln.startswith("|")]
    assert len(table) >= 3
    assert set(table[1]) <= set("|-")
    widths = {ln.count("|") - ln.count("\\|") for ln in table}
    assert len(widths) == 1, "every markdown row has the same number of cells"
    assert cli("matrix", topic, *where).code == 0


@pytest.mark.parametrize("catalogue", ["fixture", "live"])
def test_matrix_check_passes_and_counts_every_request(cli, request, catalogue):
    """Every invariant holds and every (os, gpu) pair resolves or is declared in unsupported.yaml: in
    the fixture catalogue, and in the live one whatever its counts are after a refresh."""
    from support import COMPAT

    matrix = request.getfixturevalue(f"{'real' if catalogue == 'live' else 'fixture'}_matrix")
    where = ["--compat-dir", str(COMPAT)] if catalogue == "live" else []
    r = cli("matrix", "check", "--format", "json", *where)
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert doc["ok"]
    assert doc["problems"] == []
    assert doc["unresolved_pairs"] == []
    pairs = doc["requests"]["os+gpu"]
    every = len(matrix.os_releases) * (len(matrix.gpus) + len(matrix.gpu_groups))
    assert sum(pairs.values()) == every, "every (os, gpu or group) pair is counted once"
    assert pairs["resolved"] > 0
    assert doc["requests"]["os+gpu+framework"]["resolved"] > 0
    refused = sum(v["refused"] for v in doc["requests"].values())
    rules = doc["refusals_by_rule"].values()  # a refusal counts under each rule that eliminated candidates
    assert max(rules, default=0) <= refused <= sum(rules)
    if catalogue == "fixture":  # its GPUs all plan on both OSes; some pins are refused
        assert pairs["resolved"] >= len(matrix.os_releases) * len(matrix.gpus)
        assert refused > 0


def test_matrix_check_fails_on_broken_invariant(cli, tmp_path):
    from support import make_compat

    compat = make_compat(tmp_path / "compat")  # the fixture catalogue, which passes (test above)
    gpus = (compat / "gpus.yaml").read_text()
    assert gpus.count("architecture: hopper") == 1
    (compat / "gpus.yaml").write_text(gpus.replace("architecture: hopper", "architecture: kepler"))
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
