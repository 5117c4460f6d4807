"""Rendering Dockerfiles from plans: content, reproducibility, bad input, and the hadolint sweep."""

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from provision.errors import InputError
from provision.images.pylock import plan_constraints
from provision.images.render import content_digest, image_tags, render_image, variants, write_context
from provision.plan.model import PlanRequest, nvidia_require_cuda
from provision.plan.resolve import resolve

HADOLINT = Path(sys.executable).parent / "hadolint"
CONFIG = Path(__file__).resolve().parents[2] / ".hadolint.yaml"


def plan_for(matrix, os_id, gpu, **pins):
    return resolve(matrix, PlanRequest(os=os_id, gpu=gpu, **pins))


def test_pytorch_on_rocky(real_matrix):
    plan = plan_for(real_matrix, "rocky9", "a100-pcie", framework="pytorch==2.5.1")
    r = render_image(plan, "pytorch")
    assert r.from_ref == plan.images["base"] == "nvidia/cuda:12.4.1-base-rockylinux9"
    df = r.dockerfile
    assert df.count("FROM ") == 1
    assert f"FROM {r.from_ref}\n" in df
    assert "dnf install -y" in df
    assert "dnf clean all" in df
    assert "apt-get" not in df
    assert "--no-cache-dir" in df
    assert 'ENV NVIDIA_REQUIRE_CUDA="cuda>=12.4"' in df
    assert "plan-digest" not in df, "no plan id: plans share images"
    assert "io.provision.gpu" not in df, "no GPU id: plans share images"
    assert 'io.provision.sm="sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"' in df, "the torch build's SASS"
    assert 'io.provision.framework="torch==2.5.1"' in df
    assert f'io.provision.driver-floor="{plan.driver_floor}"' in df
    assert "USER 10001:10001" in df
    assert "created" not in df
    lock = r.files["requirements.lock"]
    assert "\ntorch==2.5.1 \\\n" in lock
    assert "\nnvidia-cudnn-cu12==9.1.0.70 \\\n" in lock, "the plan's cuDNN"
    assert "for Python 3.9 on x86_64-manylinux_2_34." in lock, "EL9's python3 and glibc"
    assert "pip install --no-cache-dir --require-hashes --no-deps --only-binary=:all: -r /tmp/requirements.lock" in df
    assert r.tags == ("pytorch2.5.1-cuda12.4.1-rockylinux9", f"content-{content_digest(r.files)[7:19]}-pytorch")


def test_tensorflow_on_ubuntu(real_matrix):
    plan = plan_for(real_matrix, "ubuntu22.04", "h100-sxm", framework="tensorflow==2.15.0")
    r = render_image(plan, "tensorflow")
    assert r.from_ref == "nvidia/cuda:12.2.2-base-ubuntu22.04"
    assert "rm -rf /var/lib/apt/lists/*" in r.dockerfile
    assert "dnf" not in r.dockerfile
    lock = r.files["requirements.lock"]
    assert "\ntensorflow==2.15.0.post1 \\\n" in lock, "2.15.0's [and-cuda] cannot be installed; its post-release can"
    assert "# note: tensorflow[and-cuda]==2.15.0 cannot be installed (" in lock
    assert "tensorrt-libs" in lock, "uv's reason, kept in the header"
    assert f"\nnvidia-cudnn-cu12=={plan.framework.cudnn} \\\n" in lock, "the plan's cuDNN, not the newest"
    assert "\nnvidia-cuda-runtime-cu12==12.2.140 \\\n" in lock


def test_index_url_for_a_variant_build(real_matrix, tmp_path):
    """The plan's index goes to pip as an extra index; the lock (committed here) names no index."""
    plan = plan_for(real_matrix, "ubuntu22.04", "v100", framework="pytorch==2.14.0")
    assert plan.framework.index_url == "https://download.pytorch.org/whl/cu126"
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        "# a lock resolved against https://download.pytorch.org/whl/cu126\n"
        f"torch==2.14.0+cu126 --hash=sha256:{'1' * 64}\n"
        f"nvidia-cudnn-cu12=={plan.framework.cudnn} \\\n    --hash=sha256:{'2' * 64}\n"
    )
    r = render_image(plan, "pytorch", lock_file=str(lock))
    assert r.files["requirements.lock"] == lock.read_text()
    assert (
        "--only-binary=:all: --extra-index-url https://download.pytorch.org/whl/cu126 -r /tmp/requirements.lock"
        in r.dockerfile
    )


def test_system_cuda_tensorflow_uses_the_cudnn_image(real_matrix):
    plan = plan_for(real_matrix, "ubuntu22.04", "l4", framework="tensorflow==2.12.0")
    assert render_image(plan, "tensorflow").from_ref == "nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04"


def test_python_satisfies_requires_python(real_matrix):
    plan = plan_for(real_matrix, "rocky9", "h100-sxm", framework="pytorch==2.11.0")
    r = render_image(plan, "pytorch")
    assert "python3.11 -m venv" in r.dockerfile, "EL9's python3 is 3.9; torch 2.11 needs >= 3.10"


def test_minor_version_plan_admits_its_driver_branch(real_matrix):
    plan = plan_for(real_matrix, "ubuntu22.04", "a100-pcie", driver="535", cuda="12.4")
    assert nvidia_require_cuda(plan).startswith("cuda>=12.4 brand=tesla,driver>=535,driver<536")


def test_base_image_override_and_devel(real_matrix):
    plan = plan_for(real_matrix, "rocky9", "b200")
    r = render_image(plan, "devel", base_image="registry.local/nvidia/cuda@sha256:" + "a" * 64)
    assert r.from_ref.startswith("registry.local/")
    assert "FROM registry.local/nvidia/cuda@sha256:" in r.dockerfile
    assert render_image(plan, "devel").from_ref == plan.images["cudnn-devel"]


def test_renders_are_reproducible(real_matrix, tmp_path):
    plan = plan_for(real_matrix, "ubuntu22.04", "h100-sxm", framework="pytorch==2.9.1")
    a = write_context(render_image(plan, "pytorch"), plan, tmp_path / "a")
    b = write_context(render_image(plan, "pytorch"), plan, tmp_path / "b")
    for name in ("Dockerfile", "requirements.lock", "plan.lock.json"):
        assert (Path(a) / name).read_bytes() == (Path(b) / name).read_bytes()


def test_user_templates_extend_ours(real_matrix, tmp_path):
    (tmp_path / "variants.yaml").write_text(
        "variants:\n  tools:\n    template: tools/Dockerfile.j2\n    flavour: runtime\n    framework: null\n"
        "    description: with jq\n"
    )
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "Dockerfile.j2").write_text(
        '{% extends "provision/base/Dockerfile.j2" %}\n{% block software %}\n{{ macros.install_packages(["jq"]) }}\n{% endblock %}\n'
    )
    plan = plan_for(real_matrix, "ubuntu22.04", "l4")
    r = render_image(plan, "tools", templates=str(tmp_path))
    assert "apt-get install -y --no-install-recommends jq" in r.dockerfile
    assert r.from_ref == plan.images["runtime"]
    assert "tools" in variants(str(tmp_path))
    assert "base" in variants(str(tmp_path))


@pytest.mark.parametrize(
    ("variant", "pins", "text"),
    [
        ("gpu-burn", {}, "unknown variant 'gpu-burn'"),
        ("pytorch", {}, "needs a plan with --framework pytorch"),
        ("tensorflow", {"framework": "pytorch==2.5.1"}, "got a pytorch plan"),
    ],
)
def test_bad_variants(real_matrix, variant, pins, text):
    plan = plan_for(real_matrix, "rocky9", "a100-pcie", **pins)
    with pytest.raises(InputError, match=text) as info:
        render_image(plan, variant)
    assert info.value.exit_code == 2
    assert info.value.hint


def test_strict_undefined_in_user_templates(real_matrix, tmp_path):
    (tmp_path / "variants.yaml").write_text(
        "variants:\n  bad:\n    template: bad.j2\n    flavour: base\n    framework: null\n    description: x\n"
    )
    (tmp_path / "bad.j2").write_text("FROM {{ image.no_such_thing }}\n")
    with pytest.raises(InputError, match="failed to render"):
        render_image(plan_for(real_matrix, "rocky9", "t4"), "bad", templates=str(tmp_path))


def test_render_cli_and_its_errors(cli, tmp_path):
    out = tmp_path / "ctx"
    r = cli("render", "--os", "rocky9", "--gpu", "a100-pcie", "--framework", "pytorch==2.5.1", "--out", str(out))
    assert r.code == 0
    assert r.out.strip() == str(out)
    assert sorted(p.name for p in out.iterdir()) == ["Dockerfile", "plan.lock.json", "requirements.lock"]
    lock = out / "plan.lock.json"
    r = cli("render", "--plan", str(lock), "--variant", "base", "--out", str(tmp_path / "again"))
    assert r.code == 0
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    cases = [
        (["--plan", str(lock), "--out", str(out)], "exists and is not an empty directory"),
        (["--plan", str(lock), "--out", str(blocker / "ctx")], "cannot write"),
        (["--plan", str(blocker), "--out", str(tmp_path / "n1")], "is not a plan"),
        (["--plan", str(lock), "--variant", "nope", "--out", str(tmp_path / "n2")], "unknown variant"),
        (["--out", str(tmp_path / "n3")], "no plan: give --plan FILE or --os OS --gpu GPU"),
    ]
    doc = json.loads(lock.read_text())
    doc["schema"] = 7
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    cases.append((["--plan", str(other), "--out", str(tmp_path / "n4")], "plan schema 7"))
    for args, text in cases:
        r = cli("render", *args)
        assert r.code == 2, (args, r)
        assert text in r.err, (args, r.err)
        assert "hint:" in r.err, (args, r.err)
        assert "Traceback" not in r.err, (args, r.err)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".provision-render")]
    assert leftovers == []
    assert not (tmp_path / "n1").exists()
    assert not (tmp_path / "n2").exists()


REPRESENTATIVE_GPUS = ("a100-pcie", "h100-sxm", "l4", "v100", "b200")


def sweep(matrix):
    """Every supported (os, gpu, variant, framework version) combination."""
    for os_rel in matrix.os_releases:
        for gpu in REPRESENTATIVE_GPUS:
            base = resolve(matrix, PlanRequest(os_rel.id, gpu), suggest=False)
            yield f"{os_rel.id}-{gpu}-base", base, "base"
            yield f"{os_rel.id}-{gpu}-devel", base, "devel"
            for fw in matrix.frameworks:
                for rel in fw.releases:
                    try:
                        plan = resolve(
                            matrix, PlanRequest(os_rel.id, gpu, framework=f"{fw.id}=={rel.version}"), suggest=False
                        )
                    except InputError:
                        continue  # refused combinations are not supported ones
                    yield f"{os_rel.id}-{gpu}-{fw.id}-{rel.version}", plan, fw.id


def agreeing_lock(fw, folder: Path) -> str:
    """A committed lock that agrees with the plan: the framework and the plan's CUDA wheels (the
    hashes stand in for files; pip checks them at build time, this test lints Dockerfiles)."""
    path = folder / f"{fw.package}-{fw.version}-{fw.variant}.lock"
    if not path.exists():
        pins = [f"{fw.package}=={fw.version}"]
        for constraint in plan_constraints(fw):  # "name==X", or "name>=X,<Y,==A.B.*": take X
            name, spec = re.match(r"([a-z0-9-]+)(.*)", constraint).groups()
            pins.append(f"{name}=={next(s.version for s in SpecifierSet(spec) if s.operator in ('==', '>='))}")
        path.write_text("".join(f"{p} \\\n    --hash=sha256:{hashlib.sha256(p.encode()).hexdigest()}\n" for p in pins))
    return str(path)


def test_sweep_renders_and_lints_every_supported_combination(real_matrix, tmp_path):
    """Every framework plan renders with a committed lock (resolving hundreds would be slow; the
    resolver has its own tests), which also puts the lock check through every catalogued build."""
    files = []
    locks = tmp_path / "locks"
    locks.mkdir()
    for name, plan, variant in sweep(real_matrix):
        lock = agreeing_lock(plan.framework, locks) if plan.framework else None
        try:
            rendered = render_image(plan, variant, lock_file=lock)
        except InputError as exc:
            assert "Requires-Python" in exc.message, (name, exc.message)  # no interpreter on that OS: refused, said so
            continue
        path = tmp_path / f"{name}.Dockerfile"
        path.write_text(rendered.dockerfile)
        files.append(path)
    assert len(files) > 500, len(files)
    for i in range(0, len(files), 200):
        proc = subprocess.run(
            [str(HADOLINT), "--config", str(CONFIG), *map(str, files[i : i + 200])],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[:3000]
        assert proc.stdout == "", proc.stdout[:3000]
    print(f"rendered and linted {len(files)} Dockerfiles")


def test_image_tags(real_matrix):
    plan = plan_for(real_matrix, "ubuntu22.04", "h100-sxm", framework="tensorflow==2.15.0")
    files = {"Dockerfile": "FROM x\n"}
    assert image_tags(plan, "tensorflow", files)[0] == "tensorflow2.15.0-cuda12.2.2-ubuntu22.04"
    assert image_tags(plan, "base", files)[0] == "base-cuda12.2.2-ubuntu22.04"
    assert image_tags(plan, "base", files)[1] == f"content-{content_digest(files)[7:19]}-base"
    assert content_digest({"Dockerfile": "FROM x\n", "a": "b"}) != content_digest({"Dockerfile": "FROM x\na", "": "b"})


def test_plans_for_different_gpus_share_one_image(real_matrix):
    """H100 and A100 plans of one framework build render one build context: one image, one content tag."""
    one = render_image(plan_for(real_matrix, "ubuntu22.04", "h100-sxm", framework="torch==2.5.1"), "pytorch")
    two = render_image(plan_for(real_matrix, "ubuntu22.04", "a100-pcie", framework="torch==2.5.1"), "pytorch")
    assert one.files == two.files
    assert one.tags == two.tags
    plan = plan_for(real_matrix, "ubuntu22.04", "h100-sxm")
    base = render_image(plan, "base")
    sms = base.labels["io.provision.sm"].split()
    assert "sm_90" in sms, "a base image serves what its CUDA builds for"
    assert sms == [f"sm_{cc.replace('.', '')}" for cc in plan.cuda.compute_capabilities]
