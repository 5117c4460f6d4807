"""Rendering Dockerfiles from plans: content, reproducibility, bad input, and the hadolint sweep.

Plans come from the fixture catalogue (tests/fixtures/compat), and what a render must contain is read
from its rows; the tests about the live catalogue (TensorFlow's post-release, the system-CUDA build,
the sweep over every live combination) assert what holds for any of its rows, not today's tags."""

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from support import plan_by_build_kind

from provision.errors import InputError, NoCompatibleStack
from provision.images.pylock import plan_constraints
from provision.images.render import content_digest, image_tags, render_image, variants, write_context
from provision.plan.model import PlanRequest, nvidia_require_cuda
from provision.plan.resolve import resolve
from provision.versions import major_minor

HADOLINT = Path(sys.executable).parent / "hadolint"
CONFIG = Path(__file__).resolve().parents[2] / ".hadolint.yaml"


# fixture catalogue ids
A100, H100 = "a100-pcie-80gb", "h100-sxm"


def plan_for(matrix, os_id, gpu, **pins):
    return resolve(matrix, PlanRequest(os=os_id, gpu=gpu, **pins))


def default_build(matrix, framework, index=0):
    """A release of the catalogue (newest first) and its default build, from the rows."""
    release = matrix.framework(framework).releases[index]
    return release, next(b for b in release.builds if b.default)


def two_parts(version: str) -> str:
    return ".".join(version.split(".")[:2])


def image_row(matrix, cuda_mm, os_id):
    """The newest nvidia/cuda image release of a CUDA major.minor for the OS."""
    suffix = matrix.os(os_id).cuda_image_os
    return next(i for i in matrix.images if major_minor(i.cuda) == cuda_mm and suffix in i.os), suffix


def test_pytorch_on_rocky(fixture_matrix):
    release, build = default_build(fixture_matrix, "pytorch", -1)
    plan = plan_for(fixture_matrix, "rocky9", A100, framework=f"pytorch=={release.version}")
    image, suffix = image_row(fixture_matrix, build.cuda, "rocky9")
    r = render_image(plan, "pytorch")
    assert r.from_ref == plan.images["base"] == f"nvidia/cuda:{image.cuda}-base-{suffix}"
    df = r.dockerfile
    assert df.count("FROM ") == 1
    assert f"FROM {r.from_ref}\n" in df
    assert "dnf install -y" in df
    assert "dnf clean all" in df
    assert "apt-get" not in df
    assert "--no-cache-dir" in df
    assert f'ENV NVIDIA_REQUIRE_CUDA="{plan.require_cuda}"' in df  # the rule's hosts (provision.matrix.runs_on)
    assert "plan-digest" not in df, "no plan id: plans share images"
    assert "io.provision.gpu" not in df, "no GPU id: plans share images"
    sass = " ".join(f"sm_{cc.replace('.', '')}" for cc in build.compute_capabilities)
    assert f'io.provision.sm="{sass}"' in df, "the torch build's SASS"
    assert f'io.provision.framework="torch=={release.version}"' in df
    assert f'io.provision.driver-floor="{plan.driver_floor}"' in df
    assert "USER 10001:10001" in df
    assert "created" not in df
    lock = r.files["requirements.lock"]
    assert f"\ntorch=={release.version} \\\n" in lock
    assert f"\nnvidia-cudnn-cu12=={build.cudnn} \\\n" in lock, "the plan's cuDNN"
    assert "for Python 3.9 on x86_64-manylinux_2_34." in lock, "EL9's python3 and glibc"
    assert "pip install --no-cache-dir --require-hashes --no-deps --only-binary=:all: -r /tmp/requirements.lock" in df
    assert r.tags == (
        f"pytorch{release.version}-cuda{image.cuda}-{suffix}",
        f"content-{content_digest(r.files)[7:19]}-pytorch",
    )


def test_the_sm_label_is_the_framework_builds_sass(fixture_matrix):
    """A framework image serves what its build carries SASS for; a base image, what its CUDA builds for."""
    release, build = default_build(fixture_matrix, "pytorch")
    plan = plan_for(fixture_matrix, "ubuntu22.04", H100, framework=f"pytorch=={release.version}")
    assert set(build.compute_capabilities) != set(plan.cuda.compute_capabilities), "rows that tell them apart"
    sass = " ".join(f"sm_{cc.replace('.', '')}" for cc in build.compute_capabilities)
    assert render_image(plan, "pytorch").labels["io.provision.sm"] == sass
    cuda = " ".join(f"sm_{cc.replace('.', '')}" for cc in plan.cuda.compute_capabilities)
    assert render_image(plan, "base").labels["io.provision.sm"] == cuda


def test_tensorflow_on_ubuntu(real_matrix):
    """Live data: TensorFlow 2.15.0's [and-cuda] cannot be installed (the local index mirrors pypi.org)."""
    plan = plan_for(real_matrix, "ubuntu22.04", "h100-sxm", framework="tensorflow==2.15.0")
    r = render_image(plan, "tensorflow")
    image, suffix = image_row(real_matrix, two_parts(plan.cuda.version), "ubuntu22.04")
    assert str(image.cuda) == plan.cuda.version, "the newest image of the build's CUDA"
    assert "base" in image.flavours
    assert r.from_ref == plan.images["base"] == f"nvidia/cuda:{image.cuda}-base-{suffix}"
    assert "rm -rf /var/lib/apt/lists/*" in r.dockerfile
    assert "dnf" not in r.dockerfile
    lock = r.files["requirements.lock"]
    assert "\ntensorflow==2.15.0.post1 \\\n" in lock, "2.15.0's [and-cuda] cannot be installed; its post-release can"
    assert "# note: tensorflow[and-cuda]==2.15.0 cannot be installed (" in lock
    assert "tensorrt-libs" in lock, "uv's reason, kept in the header"
    assert f"\nnvidia-cudnn-cu12=={plan.framework.cudnn} \\\n" in lock, "the plan's cuDNN, not the newest"
    assert f"\nnvidia-cuda-runtime-cu12=={plan.framework.cuda_runtime} \\\n" in lock


def test_index_url_for_a_variant_build(fixture_matrix, tmp_path):
    """The plan's index goes to pip as an extra index; the lock (committed here) names no index."""
    release, default = default_build(fixture_matrix, "pytorch")
    old = next(g for g in fixture_matrix.gpus if g.compute_capability not in default.compute_capabilities)
    variant = next(b for b in release.builds if b.index_url and old.compute_capability in b.compute_capabilities)
    plan = plan_for(fixture_matrix, "ubuntu22.04", old.id, framework=f"pytorch=={release.version}")
    assert plan.framework.index_url == variant.index_url, "the default build lacks the GPU's SASS: the variant's index"
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        f"# a lock resolved against {variant.index_url}\n"
        f"torch=={release.version}+{variant.variant} --hash=sha256:{'1' * 64}\n"
        f"nvidia-cudnn-cu12=={plan.framework.cudnn} \\\n    --hash=sha256:{'2' * 64}\n"
    )
    r = render_image(plan, "pytorch", lock_file=str(lock))
    assert r.files["requirements.lock"] == lock.read_text()
    assert f"--only-binary=:all: --extra-index-url {variant.index_url} -r /tmp/requirements.lock" in r.dockerfile


def test_system_cuda_tensorflow_uses_the_cudnn_image(real_matrix):
    """Live data (the fixture's system-CUDA build has no cuDNN 8 support matrix to plan with): the
    newest system-CUDA build takes CUDA and cuDNN from the image's cudnn runtime flavour."""
    found = plan_by_build_kind(real_matrix, "system")
    assert found, "the live catalogue has a system-CUDA build that plans"
    plan, _ = found
    image, suffix = image_row(real_matrix, two_parts(plan.cuda.version), "ubuntu22.04")
    assert "cudnn-runtime" in image.flavours
    expected = f"nvidia/cuda:{plan.cuda.version}-{image.cudnn_marker}-runtime-{suffix}"
    assert render_image(plan, plan.framework.name).from_ref == expected


def test_python_satisfies_requires_python(fixture_matrix):
    release, _ = default_build(fixture_matrix, "pytorch")
    assert not SpecifierSet(release.python).contains("3.9"), "the release needs a newer Python than EL9's 3.9"
    plan = plan_for(fixture_matrix, "rocky9", H100, framework=f"pytorch=={release.version}")
    r = render_image(plan, "pytorch")
    assert "python3.11 -m venv" in r.dockerfile, "EL9's python3 is 3.9: the release needs another interpreter"


def test_minor_version_plan_admits_its_driver_branch(fixture_matrix):
    """The image's NVIDIA_REQUIRE_CUDA is the rule's (provision.matrix.runs_on): the Container Toolkit
    starts it on the plan's own driver (minor-version compatibility) and on nothing below the floor."""
    from provision.matrix.runs_on import HostFacts, toolkit_admits

    floor = next(mc for mc in fixture_matrix.minor_compat if mc.cuda_major == 12)
    branch = next(
        b for b in reversed(fixture_matrix.drivers) if b.releases[0].version >= floor.min_driver
    )  # the oldest branch minor-version compatibility admits
    cuda = next(
        c for c in fixture_matrix.cuda if c.version.release[0] == 12 and c.min_driver.release[0] > branch.branch
    )
    mm = major_minor(cuda.version)
    plan = plan_for(fixture_matrix, "ubuntu22.04", A100, driver=str(branch.branch), cuda=mm)
    assert plan.cuda.compatibility == "minor-version"
    required = nvidia_require_cuda(plan)
    assert required == plan.require_cuda
    cc = fixture_matrix.gpu(A100).compute_capability
    assert toolkit_admits(required, HostFacts(plan.driver.version, "0", cc, "GeForce"))
    assert not toolkit_admits(required, HostFacts("450.80.02", "0", cc, "GeForce"))
    r = render_image(plan, "base")
    assert f'ENV NVIDIA_REQUIRE_CUDA="{required}"' in r.dockerfile


def test_base_image_override_and_devel(fixture_matrix):
    plan = plan_for(fixture_matrix, "rocky9", "b200")
    r = render_image(plan, "devel", base_image="registry.local/nvidia/cuda@sha256:" + "a" * 64)
    assert r.from_ref.startswith("registry.local/")
    assert "FROM registry.local/nvidia/cuda@sha256:" in r.dockerfile
    assert render_image(plan, "devel").from_ref == plan.images["cudnn-devel"]


def test_renders_are_reproducible(fixture_matrix, tmp_path):
    release, _ = default_build(fixture_matrix, "pytorch")
    plan = plan_for(fixture_matrix, "ubuntu22.04", H100, framework=f"pytorch=={release.version}")
    a = write_context(render_image(plan, "pytorch"), plan, tmp_path / "a")
    b = write_context(render_image(plan, "pytorch"), plan, tmp_path / "b")
    for name in ("Dockerfile", "requirements.lock", "plan.lock.json"):
        assert (Path(a) / name).read_bytes() == (Path(b) / name).read_bytes()


def test_user_templates_extend_ours(fixture_matrix, tmp_path):
    (tmp_path / "variants.yaml").write_text(
        "variants:\n  tools:\n    template: tools/Dockerfile.j2\n    flavour: runtime\n    framework: null\n"
        "    description: with jq\n"
    )
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "Dockerfile.j2").write_text(
        '{% extends "provision/base/Dockerfile.j2" %}\n{% block software %}\n{{ macros.install_packages(["jq"]) }}\n{% endblock %}\n'
    )
    plan = plan_for(fixture_matrix, "ubuntu22.04", A100)
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
def test_bad_variants(fixture_matrix, variant, pins, text):
    plan = plan_for(fixture_matrix, "rocky9", A100, **pins)
    with pytest.raises(InputError, match=text) as info:
        render_image(plan, variant)
    assert info.value.exit_code == 2
    assert info.value.hint


def test_strict_undefined_in_user_templates(fixture_matrix, tmp_path):
    (tmp_path / "variants.yaml").write_text(
        "variants:\n  bad:\n    template: bad.j2\n    flavour: base\n    framework: null\n    description: x\n"
    )
    (tmp_path / "bad.j2").write_text("FROM {{ image.no_such_thing }}\n")
    with pytest.raises(InputError, match="failed to render"):
        render_image(plan_for(fixture_matrix, "rocky9", "v100-pcie"), "bad", templates=str(tmp_path))


def test_render_cli_and_its_errors(cli, on_fixture_catalogue, tmp_path):
    out = tmp_path / "ctx"
    r = cli("render", "--os", "rocky9", "--gpu", A100, "--framework", "pytorch==2.5.1", "--out", str(out))
    assert r.code == 0
    assert r.out.strip() == str(out)
    assert sorted(p.name for p in out.iterdir()) == [
        "Dockerfile",
        "plan.lock.json",
        "requirements.lock",
        "smoke.json",
        "smoke.py",
    ]
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


def representative_gpus(matrix):
    """One GPU of each architecture (the first the catalogue lists): what a render depends on."""
    return list({g.architecture: g.id for g in reversed(matrix.gpus)}.values())


# Container OSes whose image facts (Python, glibc) images/os.yaml does not carry yet: their plans
# resolve, but images are not rendered for them (compat/README.md "Left out").
NO_IMAGE_FACTS = {"rockylinux10", "ubi10"}


def sweep(matrix):
    """Every supported (os, gpu, variant, framework version) combination."""
    import yaml

    facts = yaml.safe_load((CONFIG.parent / "images" / "os.yaml").read_text())["image_os"]
    assert {o.cuda_image_os for o in matrix.os_releases} - set(facts) == NO_IMAGE_FACTS
    for os_rel in matrix.os_releases:
        if os_rel.cuda_image_os in NO_IMAGE_FACTS:
            continue
        for gpu in representative_gpus(matrix):
            try:
                base = resolve(matrix, PlanRequest(os_rel.id, gpu), suggest=False)
            except NoCompatibleStack as exc:
                if exc.kinds == {"declared-unsupported"}:  # unsupported.yaml (Volta on EL10)
                    continue
                raise
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
    rendered_count = 0
    distinct: dict[str, Path] = {}  # each distinct Dockerfile once: plans of one build render one context
    locks = tmp_path / "locks"
    locks.mkdir()
    combos = list(sweep(real_matrix))
    for name, plan, variant in combos:
        lock = agreeing_lock(plan.framework, locks) if plan.framework else None
        try:
            rendered = render_image(plan, variant, lock_file=lock)
        except InputError as exc:
            assert "Requires-Python" in exc.message, (name, exc.message)  # no interpreter on that OS: refused, said so
            assert plan.framework, "base and devel images always render"
            continue
        rendered_count += 1
        digest = hashlib.sha256(rendered.dockerfile.encode()).hexdigest()
        if digest not in distinct:
            distinct[digest] = tmp_path / f"{name}.Dockerfile"
            distinct[digest].write_text(rendered.dockerfile)
    # every (os, architecture) base and devel image, and the framework images too
    rendered_oses = [o for o in real_matrix.os_releases if o.cuda_image_os not in NO_IMAGE_FACTS]
    assert rendered_count > 2 * len(rendered_oses) * len(representative_gpus(real_matrix)), rendered_count
    assert len(distinct) > 2 * len(rendered_oses), len(distinct)
    assert any(plan.framework for _, plan, _ in combos)
    files = list(distinct.values())
    for i in range(0, len(files), 200):
        proc = subprocess.run(
            [str(HADOLINT), "--config", str(CONFIG), *map(str, files[i : i + 200])],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[:3000]
        assert proc.stdout == "", proc.stdout[:3000]
    print(f"rendered {rendered_count} Dockerfiles, linted the {len(files)} distinct ones")


def test_image_tags(fixture_matrix):
    release, build = default_build(fixture_matrix, "pytorch", -1)
    plan = plan_for(fixture_matrix, "ubuntu22.04", H100, framework=f"pytorch=={release.version}")
    image, suffix = image_row(fixture_matrix, build.cuda, "ubuntu22.04")
    files = {"Dockerfile": "FROM x\n"}
    assert image_tags(plan, "pytorch", files)[0] == f"pytorch{release.version}-cuda{image.cuda}-{suffix}"
    assert image_tags(plan, "base", files)[0] == f"base-cuda{image.cuda}-{suffix}"
    assert image_tags(plan, "base", files)[1] == f"content-{content_digest(files)[7:19]}-base"
    assert content_digest({"Dockerfile": "FROM x\n", "a": "b"}) != content_digest({"Dockerfile": "FROM x\na", "": "b"})


def test_plans_for_different_gpus_share_one_image(fixture_matrix):
    """H100 and A100 plans of one framework build render one build context: one image, one content tag."""
    one = render_image(plan_for(fixture_matrix, "ubuntu22.04", H100, framework="torch==2.5.1"), "pytorch")
    two = render_image(plan_for(fixture_matrix, "ubuntu22.04", A100, framework="torch==2.5.1"), "pytorch")
    assert one.files == two.files
    assert one.tags == two.tags
    plan = plan_for(fixture_matrix, "ubuntu22.04", H100)
    base = render_image(plan, "base")
    sms = base.labels["io.provision.sm"].split()
    assert "sm_90" in sms, "a base image serves what its CUDA builds for"
    assert sms == [f"sm_{cc.replace('.', '')}" for cc in plan.cuda.compute_capabilities]
