"""Stack images (issue 24, item 3): plans with --with and --framework onnxruntime|tensorrt rendered
into Dockerfiles whose lock covers sdists, with a devel build stage for them, the toolchain
torch.compile needs, DeepSpeed's devel base and the smoke test with the plan's promises.

Plans come from the live catalogue's stack rows through the resolver; the lock is resolved by uv
against a local index of stand-ins (tests/images/wheelhouse.py: the catalogue's framework wheels,
and for the stack packages a wheel or an sdist at the planned version, each as the real index
publishes it), so every expectation is read from the plan, never typed."""

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from wheelhouse import canonical, make_sdist, make_wheel, serve, write_simple_index

from provision.errors import InputError
from provision.images.pylock import (
    LEGACY_BUILD_REQUIRES,
    PackageIndex,
    check_against_plan,
    lock_target,
    parse_lock,
    split_lock,
)
from provision.images.render import render_image
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

HADOLINT = Path(sys.executable).parent / "hadolint"
CONFIG = Path(__file__).resolve().parents[2] / ".hadolint.yaml"
HASH = "--hash=sha256:" + "b" * 64


@pytest.fixture(scope="module")
def training_plan(real_matrix):
    """PyTorch with DeepSpeed (an sdist whose ops compile with nvcc) and ONNX Runtime (a wheel)."""
    fw = real_matrix.framework("pytorch").releases
    for release in fw:  # the newest release the stack resolves with on an H100 host
        try:
            return resolve(
                real_matrix,
                PlanRequest(
                    os="ubuntu22.04",
                    gpu="h100-sxm",
                    framework=f"pytorch=={release.version}",
                    with_=("deepspeed", "onnxruntime"),
                ),
            )
        except InputError:
            continue
    pytest.fail("no PyTorch release of the catalogue plans with deepspeed and onnxruntime")


@pytest.fixture(scope="module")
def inference_plan(real_matrix):
    return resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="l4", framework="onnxruntime"))


def stand_ins(folder: Path, plans) -> list[Path]:
    """Each planned stack distribution at its planned version, as the real index has it (an sdist
    where the plan says sdist), plus what they and the sdists' builds need."""
    made: dict[str, Path] = {}
    for plan in plans:
        for pkg in plan.stack:
            for name, kind in pkg.distributions:
                if canonical(name) in made:
                    continue
                requires = ("packaging>=20",) + (("torch",) if pkg.needs_nvcc else ())
                maker = make_sdist if kind == "sdist" else make_wheel
                made[canonical(name)] = maker(folder, name, pkg.install, requires)
    made["packaging"] = make_wheel(folder, "packaging", "24.0")
    for requirement in LEGACY_BUILD_REQUIRES:  # setuptools>=40.8.0, wheel: stand-ins above the floors
        name = requirement.split(">")[0]
        made[name] = make_wheel(folder, name, "75.0.0")
    return list(made.values())


@pytest.fixture(scope="module")
def stack_index(tmp_path_factory, wheel_index, training_plan, inference_plan):
    root = tmp_path_factory.mktemp("stack-index")
    files = root / "files"
    files.mkdir()
    served = []
    for wheel in sorted((wheel_index.root / "files").iterdir()):
        (files / wheel.name).symlink_to(wheel)
        served.append(files / wheel.name)
    served += stand_ins(files, (training_plan, inference_plan))
    write_simple_index(root, served)
    with serve(root) as url:
        yield PackageIndex(url + "/simple"), files


def hashes(text: str, name: str) -> set[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"{name}==") or ln.startswith(f"{name} "))
    return set(line.split("--hash=sha256:")[1:]) if "--hash" in line else set()


def lint(tmp_path: Path, dockerfile: str) -> None:
    path = tmp_path / "Dockerfile"
    path.write_text(dockerfile)
    proc = subprocess.run(
        [str(HADOLINT), "--config", str(CONFIG), str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout == ""


def test_deepspeed_sdist_is_locked_by_hash_and_built_in_a_devel_stage(training_plan, stack_index, tmp_path):
    index, files = stack_index
    plan = training_plan
    ds = next(p for p in plan.stack if p.id == "deepspeed")
    ort = next(p for p in plan.stack if p.id == "onnxruntime")
    assert ds.needs_nvcc
    assert ("deepspeed", "sdist") in ds.distributions
    r = render_image(plan, "pytorch", index=index)
    lock = r.files["requirements.lock"]
    pins = parse_lock(lock, "lock")
    assert pins["deepspeed"] == ds.install
    assert pins[canonical(ort.pip)] == ort.install
    assert pins["torch"].split("+")[0] == plan.framework.version
    assert {"setuptools", "wheel"} <= set(pins), "the sdist's build requirements are locked too"
    sdist = files / f"deepspeed-{ds.install}.tar.gz"
    wheels, sdists, build = split_lock(lock, ("deepspeed",), ("setuptools", "wheel"))
    assert r.files["sdists.lock"] == sdists
    assert r.files["wheels.lock"] == wheels
    assert r.files["build.lock"] == build
    assert [ln.split("==")[0] for ln in build.splitlines()] == ["setuptools", "wheel"], "the build's only"
    assert not {"setuptools", "wheel"} & {ln.split("==")[0] for ln in wheels.splitlines()}, "not in the image"
    assert sdists == f"deepspeed=={ds.install} --hash=sha256:{hashlib.sha256(sdist.read_bytes()).hexdigest()}\n"
    assert "deepspeed" not in wheels
    assert f"torch=={pins['torch']} " in wheels
    assert "# sdists (hashes of the source archives, built in the image): deepspeed" in lock
    df = r.dockerfile
    devel = plan.images["devel"]
    assert plan.base_image == devel, "DeepSpeed's JIT ops: the resolver gives a devel base"
    assert r.from_ref == devel
    assert df.index(f"FROM {devel} AS build\n") < df.index(f"FROM {devel}\n")
    assert (
        "pip wheel --no-cache-dir --require-hashes --no-deps --no-build-isolation --no-binary=:all: "
        "--wheel-dir /tmp/wheels -r /tmp/lock/sdists.lock" in df
    )
    assert "COPY --from=build /tmp/wheels /tmp/wheels" in df
    assert "COPY wheels.lock build.lock sdists.lock hash_wheels.py /tmp/lock/" in df
    assert "-r /tmp/lock/wheels.lock -r /tmp/lock/build.lock" in df, "the build stage installs both"
    assert "--no-index --find-links /tmp/wheels -r /tmp/wheels/built.lock" in df
    runtime = df[df.index(f"FROM {devel}\n") :]
    assert "pip wheel" not in runtime, "nothing is built in the runtime stage"
    assert "build.lock" not in runtime, "the runtime installs the runtime closure only"
    assert "COPY wheels.lock /tmp/requirements.lock" in runtime
    assert "gcc g++ libc6-dev python3" in runtime, "torch.compile's compilers and the Python headers"
    assert r.labels["io.provision.stack"] == " ".join(p.requirement for p in plan.stack)
    assert "COPY smoke.py smoke.json /opt/provision/" in runtime
    promises = json.loads(r.files["smoke.json"])
    assert [(p["id"], p["version"]) for p in promises["packages"]] == [
        ("pytorch", pins["torch"]),
        ("deepspeed", ds.install),
        ("onnxruntime", ort.install),
    ]
    assert promises["torch"] == {"cudnn_major": int(plan.cudnn.version.split(".")[0])}
    assert promises["onnxruntime"] == {"providers": ["CUDAExecutionProvider"]}
    assert promises["deepspeed"]["ops"]
    assert r.files["smoke.py"] == (Path(__file__).parents[2] / "images" / "smoke" / "smoke.py").read_text()
    lint(tmp_path, df)


def test_an_nvcc_stack_on_a_base_that_is_not_devel_is_refused(training_plan):
    plan = training_plan._replace(base_image=training_plan.images["base"])
    with pytest.raises(InputError, match="compiles its ops with nvcc at run time") as info:
        render_image(plan, "pytorch", lock_file="/nonexistent")
    assert info.value.exit_code == 2
    assert info.value.hint
    from provision.images.pin import base_tag

    with pytest.raises(InputError, match="is not a devel image"):
        base_tag(plan, "pytorch")
    assert base_tag(training_plan, "pytorch") == training_plan.images["devel"]


def test_onnxruntime_image_has_no_torch_and_runs_its_smoke_test(inference_plan, stack_index, tmp_path):
    plan = inference_plan
    head = plan.stack[0]
    assert plan.framework is None
    assert (head.role, head.id) == ("framework", "onnxruntime")
    r = render_image(plan, "onnxruntime", index=stack_index[0])
    assert r.from_ref == plan.base_image
    pins = parse_lock(r.files["requirements.lock"], "lock")
    assert pins[canonical(head.pip)] == head.install
    assert "torch" not in pins
    assert "sdists.lock" not in r.files
    assert " AS build" not in r.dockerfile
    assert "gcc" not in r.dockerfile, "no PyTorch, no compiler"
    assert r.dockerfile.rstrip().endswith('CMD ["python", "/opt/provision/smoke.py"]')
    assert r.labels["io.provision.framework"] == head.requirement
    assert json.loads(r.files["smoke.json"])["onnxruntime"] == {"providers": ["CUDAExecutionProvider"]}
    lint(tmp_path, r.dockerfile)
    with pytest.raises(InputError, match="needs a plan with --framework pytorch==VERSION, got a onnxruntime plan"):
        render_image(plan, "pytorch")
    with pytest.raises(InputError, match="got a plan without a framework"):
        render_image(plan._replace(stack=()), "onnxruntime")


def test_every_pytorch_image_gets_compilers_and_python_headers(real_matrix):
    for os_id, packages in (("ubuntu22.04", "gcc g++ libc6-dev python3"), ("rocky9", "gcc gcc-c++ python3")):
        plan = resolve(real_matrix, PlanRequest(os=os_id, gpu="h100-sxm", framework="pytorch"))
        df = render_image(plan, "pytorch").dockerfile
        assert packages in df, os_id
        dev = "dev" if os_id.startswith("ubuntu") else "devel"
        assert re.search(rf" python3(\.\d+)?-{dev} \\\n", df), os_id


def tensorrt_lock(plan, folder: Path, *, index_line: str | None) -> str:
    """A committed lock that agrees with a TensorRT plan (hashes stand in for files)."""
    head = plan.stack[0]
    names = list(dict.fromkeys([head.pip, *(n for n, _ in head.distributions), "setuptools", "wheel"]))
    lines = ["# Resolved by uv for Python 3.11 on x86_64-manylinux_2_35.\n"]
    lines += [f"{index_line}\n"] if index_line else []
    lines += [f"{n}=={head.install if n not in ('setuptools', 'wheel') else '75.0.0'} {HASH}\n" for n in names]
    path = folder / "trt.lock"
    path.write_text("".join(lines))
    return str(path)


def test_tensorrt_takes_the_catalogues_library_index_and_no_other(real_matrix, tmp_path):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="l4", framework="tensorrt"))
    head = plan.stack[0]
    assert head.library_index, "the catalogue names NVIDIA's index for TensorRT's libraries"
    target = lock_target(None, python="3.11", platform="x86_64-manylinux_2_35", stack=plan.stack)
    assert target.library_index == head.library_index
    assert target.extra_indexes == (head.library_index,)
    libs = [canonical(n) for n, _ in head.distributions if n.endswith("-libs")]
    assert libs, "TensorRT's library stub"
    assert not set(libs) & set(target.sdists), "uv may take the -libs wheel from the library index"
    ok = tensorrt_lock(plan, tmp_path, index_line=f"# library index (the catalogue's): {head.library_index}")
    r = render_image(plan, "tensorrt", lock_file=ok)
    assert f"--extra-index-url {head.library_index}" in r.dockerfile
    built = r.files["sdists.lock"]
    assert all(canonical(n) in built for n, k in head.distributions if k == "sdist" and not n.endswith("-libs"))
    assert not any(f"{lib}==" in built for lib in libs), "the -libs stub comes from the library index as a wheel"
    lint(tmp_path, r.dockerfile)
    bad = tensorrt_lock(plan, tmp_path, index_line="# library index (the catalogue's): https://evil.example/simple")
    with pytest.raises(InputError, match="names a second index that is not the plan's"):
        render_image(plan, "tensorrt", lock_file=bad)


def test_a_lock_must_hold_every_planned_stack_pin(training_plan):
    plan = training_plan
    ds = next(p for p in plan.stack if p.id == "deepspeed")
    pins = {"torch": plan.framework.version, "deepspeed": ds.install}
    pins |= {canonical(p.pip): p.install for p in plan.stack}
    pins |= {"nvidia-cudnn-cu12": plan.framework.cudnn} if plan.framework.cudnn else {}
    stack = plan.stack
    with pytest.raises(InputError, match=r"it installs deepspeed==0\.0\.1, the plan deepspeed=="):
        check_against_plan({**pins, "deepspeed": "0.0.1"}, None, "lock", stack)
    missing = {k: v for k, v in pins.items() if k != "deepspeed"}
    with pytest.raises(InputError, match=r"it does not install deepspeed \(the plan's deepspeed\)"):
        check_against_plan(missing, None, "lock", stack)
    check_against_plan(pins, None, "lock", stack)  # the planned pins pass


def test_stack_requirements_are_checked_before_they_reach_uv(training_plan):
    ds = next(p for p in training_plan.stack if p.id == "deepspeed")
    for bad in ("deepspeed==0.1 --index-url http://x", "deepspeed @ https://evil/x.tar.gz", "deepspeed>=0"):
        with pytest.raises(InputError, match="is not `deepspeed"):
            lock_target(None, python="3.11", platform="x86_64-manylinux_2_35", stack=(ds._replace(requirement=bad),))
    target = lock_target(None, python="3.11", platform="x86_64-manylinux_2_35", stack=(ds,))
    assert target.sdists == ("deepspeed",)
    assert target.more == LEGACY_BUILD_REQUIRES, "no [build-system]: PEP 517's setuptools fallback"
    with pytest.raises(InputError, match="build requirement"):
        lock_target(
            None,
            python="3.11",
            platform="x86_64-manylinux_2_35",
            stack=(ds._replace(build_requires=("setuptools --index-url=http://x",)),),
        )
