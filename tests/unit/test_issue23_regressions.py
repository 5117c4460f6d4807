"""Issue 23's misleading answers and data errors that had no test of their own, each with the new
user's command or read against the source's recorded copy (the others: see the audit in the
issue's thread; tests/unit/test_new_user_answers.py, test_doctor_rules.py, tests/data/...)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support import COMPAT

from provision.matrix import refresh, refresh_images
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.versions import prefix_matches

COPY_2026 = Path(__file__).resolve().parent.parent / "fixtures" / "refresh" / "cuda-images-2026"
SETS = ("12.8.2", "12.9.2", "13.0.3", "13.1.2")


# -- --framework pytorch==2.5 and pytorch==2.5.1+cu121 ------------------------------------------------
def test_a_short_framework_pin_says_the_newer_catalogued_patch(cli, real_matrix):
    """`--framework pytorch==2.5` gives 2.5.0 (pip's ==) and now says that 2.5.1 is catalogued,
    as `--cuda 12.4` would have taken the newest 12.4.x."""
    torch = real_matrix.framework("pytorch")
    newest = max(r.version for r in torch.releases if prefix_matches("2.5", r.version))
    assert str(newest) != "2.5.0", "the catalogue has a 2.5.x past 2.5.0"
    result = cli("plan", "--os", "ubuntu22.04", "--gpu", "a100-pcie", "--framework", "pytorch==2.5")
    assert result.code == 0, result
    text = " ".join(result.out.split())  # reasons wrap at spaces
    line = text[text.index("[framework] ") :].split(" [", 1)[0]
    assert "torch==2.5.0" in line
    assert f"{newest} is catalogued too (--framework pytorch=={newest})" in line


def test_a_full_framework_pin_has_no_note(cli):
    result = cli("plan", "--os", "ubuntu22.04", "--gpu", "a100-pcie", "--framework", "pytorch==2.5.0")
    assert result.code == 0, result
    assert "catalogued too" not in result.out


@pytest.mark.parametrize(
    ("pin", "cuda", "release"), [("pytorch==2.5.1+cu121", "12.1", "2.5.1"), ("pytorch==2.0.1+cu118", "11.8", "2.0.1")]
)
def test_a_local_version_pin_names_the_cuda_pin(cli, pin, cuda, release):
    """`pytorch==2.5.1+cu121` was refused as 'not a PyTorch version' with no word of --cuda 12.1."""
    result = cli("plan", "--os", "ubuntu22.04", "--gpu", "a100-pcie", "--framework", pin)
    assert result.code == 2, result
    assert "Traceback" not in result.err
    error, hint = result.err.splitlines()
    assert error.startswith("error: ")
    assert f"CUDA {cuda} wheels" in error
    assert hint == f"hint: pin the release and the CUDA apart: --framework pytorch=={release} --cuda {cuda}"
    plan = cli(
        "plan", "--os", "ubuntu22.04", "--gpu", "a100-pcie", "--framework", f"pytorch=={release}", "--cuda", cuda
    )
    assert plan.code == 0, "the hint's command plans"


# -- a broken fleet file names its line ----------------------------------------------------------------
def test_a_broken_yaml_fleet_file_names_its_line(cli, tmp_path):
    (tmp_path / "inv.ini").write_text("[a100]\nn1 ansible_host=127.0.0.1\n")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("groups:\n  a100:\n    os: ubuntu22.04\n    gpu: [a100-pcie\n")
    result = cli("apply", "-i", str(tmp_path / "inv.ini"), "--fleet", str(fleet), "--run-dir", str(tmp_path / "run"))
    assert result.code == 2, result
    error = result.err.splitlines()[0]
    assert error.startswith("error: "), error
    assert "line 5: not valid YAML" in error, error
    assert not (tmp_path / "run").exists()


# -- images 12.8.2, 12.9.2, 13.0.3, 13.1.2: rockylinux8/ubi8 and linux/arm64 ---------------------------
def rows() -> dict[str, dict]:
    return {r["cuda"]: r for r in yaml.safe_load((COMPAT / "images.yaml").read_text())["releases"]}


def test_the_2026_rows_are_what_the_recorded_copy_gives(capsys):
    """`refresh --source images --check --from` the 2026 copy: the five cuda-images-2026 rows are
    regenerated from NVIDIA's tree, cudnn Dockerfiles and cuda-platforms.json (it refused the copy
    before: no doc/supported-tags.md)."""
    assert refresh.main(["--source", "images", "--check", "--from", str(COPY_2026)]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("cuda", SETS)
def test_each_set_lists_rockylinux8_and_ubi8_as_nvidias_tree_does(cuda):
    tree = (COPY_2026 / "TREE.txt").read_text().splitlines()
    row = rows()[cuda]
    assert row["source"] == refresh_images.recorded_key(COPY_2026)
    for os_dir in ("rockylinux8", "ubi8"):
        assert f"dist/{cuda}/{os_dir}/runtime/Dockerfile" in tree
        assert os_dir in row["os"]
        if row["cudnn"] is not None:  # 12.8.2 has no cudnn tags
            dockerfile = (COPY_2026 / "dist" / cuda / os_dir / "runtime" / "cudnn" / "Dockerfile").read_text()
            assert f"FROM ${{IMAGE_NAME}}:{cuda}-runtime-{os_dir} AS base" in dockerfile
            assert refresh_images.parse_cudnn(dockerfile) == row["cudnn"]["version"]


@pytest.mark.parametrize("cuda", ["12.8.2", "13.1.2"])
def test_arm64_is_read_from_the_sets_cuda_platforms_json(cuda, real_matrix):
    listed = json.loads((COPY_2026 / "dist" / cuda / "cuda-platforms.json").read_text())
    image = real_matrix.image(next(i.cuda for i in real_matrix.images if str(i.cuda) == cuda))
    assert all({"arm64", "x86_64"} <= set(listed[o]) for o in image.os)
    assert image.platforms == ("linux/amd64", "linux/arm64")
    assert rows()[cuda]["platforms"]["source"] == "cuda-images-2026"


@pytest.mark.parametrize(("cuda", "tag"), [("12.9", "12.9.2"), ("13.0", "13.0.3"), ("13.1", "13.1.2")])
def test_a_rocky8_plan_takes_the_supported_set(real_matrix, cuda, tag):
    """Rocky 8 plans used the superseded 12.9.1 / 13.0.2 tags or had no 13.1 image at all."""
    plan = resolve(real_matrix, PlanRequest(os="rocky8", gpu="a100-pcie", cuda=cuda))
    assert plan.base_image == f"nvidia/cuda:{tag}-runtime-rockylinux8"
    assert plan.cudnn is not None
    assert plan.cudnn.version == rows()[tag]["cudnn"]["version"]


def test_an_arm64_rocky8_plan_takes_the_13_1_2_images(real_matrix):
    gh200 = next(g for g in real_matrix.gpus if g.id.startswith("gh200"))
    plan = resolve(real_matrix, PlanRequest(os="rocky8", gpu=gh200.id, cuda="13.1"))
    assert plan.base_image == "nvidia/cuda:13.1.2-runtime-rockylinux8"
