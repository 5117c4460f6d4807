"""The stand-in stack packages (stackhouse.py) behave as the real ones do where the images depend on
it: the ONNX Runtime wheel installs with its extras and reports its version and providers, the
DeepSpeed sdist builds only with build isolation off and torch installed, and its op builders hold
nvcc to torch's CUDA. Offline: pip installs from the folder of archives, nothing else."""

import hashlib
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from stackhouse import DS_OPS as ALL_OPS_NAMES
from stackhouse import SETUPTOOLS, build_stack_index, stack_rows
from toolindex import isolated_pip_env


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    root = tmp_path_factory.mktemp("stackhouse")
    archives = build_stack_index(root)
    return root, archives


def newest(rows, ident):
    """The newest release of a row whose default build has an x86_64 CPython 3.11 wheel or an sdist."""
    for release in rows[ident]["releases"]:
        build = next(b for b in release["builds"] if b["default"])
        if build["python"] is None or "x86_64" in build["arches"]:
            return release, build
    raise AssertionError(f"no {ident} release for x86_64")


def torch_build():
    """The newest torch release of the catalogue and its default (package-index) build."""
    import yaml
    from support import COMPAT

    doc = yaml.safe_load((COMPAT / "frameworks.yaml").read_text())
    torch = next(f for f in doc["frameworks"] if f["package"] == "torch")
    release = torch["releases"][0]
    return release, next(b for b in release["builds"] if b["index_url"] is None)


def pip(venv: Path, *args, check=True):
    """The test environment's pip, installing into `venv` (a venv without pip of its own)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=isolated_pip_env(),
    )
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def run(venv: Path, code: str, env=None):
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture
def venv(tmp_path):
    path = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return path


def test_archives_are_the_same_on_every_build(house, tmp_path):
    _, archives = house
    again = build_stack_index(tmp_path / "again")
    digest = {a.name: hashlib.sha256(a.read_bytes()).hexdigest() for a in archives}
    assert {a.name: hashlib.sha256(a.read_bytes()).hexdigest() for a in again} == digest
    root, _ = house
    deepspeed = (root / "simple" / "deepspeed" / "index.html").read_text()
    rows = stack_rows()
    for release in rows["deepspeed"]["releases"]:
        name = f"deepspeed-{release['version']}.tar.gz"
        assert f"{name}#sha256={digest[name]}" in deepspeed


def test_onnxruntime_wheel_installs_with_its_extras_and_reports_its_providers(house, venv):
    root, _ = house
    rows = stack_rows()
    release, build = newest(rows, "onnxruntime")
    extras = sorted(release["extras"])
    assert extras, "the newest release has its [cuda] and [cudnn] extras"
    requirement = f"onnxruntime-gpu[{','.join(extras)}]=={release['version']}"
    pip(venv, "install", "--no-index", "--find-links", str(root / "files"), requirement)
    out = run(venv, "import onnxruntime as o; print(o.__version__); print(','.join(o.get_available_providers()))")
    version, providers = out.split()
    assert version == release["version"]
    assert providers.split(",") == ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    listed = pip(venv, "list", "--format", "freeze").stdout
    for extra in extras:  # every requirement of each extra came along, at a version it admits
        for req in release["extras"][extra]:
            name = req.split("~=")[0].split(">=")[0].split("==")[0]
            assert f"\n{name}==" in "\n" + listed, (name, listed)
    metadata = next(
        zipfile.ZipFile(w).read(f"onnxruntime_gpu-{release['version']}.dist-info/METADATA").decode()
        for w in (root / "files").glob(f"onnxruntime_gpu-{release['version']}-cp311-*x86_64.whl")
    )
    assert f"Requires-Python: {build['python']}" in metadata
    assert f'Requires-Dist: {build["cudnn_requirement"]}; extra == "cudnn"' in metadata


def test_an_old_release_without_a_tensorrt_provider_library_lists_none(house):
    """The providers follow the row's provider libraries, not a list typed once."""
    root, _ = house
    rows = stack_rows()
    for release in rows["onnxruntime"]["releases"]:
        build = next(b for b in release["builds"] if b["default"])
        wheel = next((root / "files").glob(f"onnxruntime_gpu-{release['version']}-*x86_64.whl"))
        module = zipfile.ZipFile(wheel).read("onnxruntime/__init__.py").decode()
        assert ("TensorrtExecutionProvider" in module) == ("tensorrt-provider" in (build["sonames"] or {}))
        assert ("CUDAExecutionProvider" in module) == ("cuda-provider" in (build["sonames"] or {}))


def test_deepspeed_sdist_is_shaped_like_the_real_one(house):
    root, _ = house
    rows = stack_rows()
    release, build = newest(rows, "deepspeed")
    sdist = root / "files" / f"deepspeed-{release['version']}.tar.gz"
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        pkg_info = archive.extractfile(f"deepspeed-{release['version']}/PKG-INFO").read().decode()
    assert f"deepspeed-{release['version']}/setup.py" in names
    assert not any(n.endswith("pyproject.toml") for n in names), "setup.py only: the default setuptools backend"
    for name, spec in build["requires"].items():
        assert f"Requires-Dist: {name}{spec}" in pkg_info
    assert "Dynamic: requires-dist" in pkg_info, "as the recorded PKG-INFO says: resolvers must build it"


def test_deepspeed_builds_with_isolation_off_against_torch_and_not_otherwise(house, venv, tmp_path):
    root, _ = house
    rows = stack_rows()
    release, _ = newest(rows, "deepspeed")
    torch_release, torch_build_row = torch_build()
    links = ["--no-index", "--find-links", str(root / "files")]
    requirement = f"deepspeed=={release['version']}"
    pip(venv, "install", *links, "--no-deps", f"setuptools=={SETUPTOOLS}")

    # torch not installed: the build fails on setup.py's import, isolation off or on
    out = tmp_path / "wheels"
    failed = pip(venv, "wheel", *links, "--no-deps", "--no-build-isolation", "-w", str(out), requirement, check=False)
    assert failed.returncode != 0
    assert "No module named 'torch'" in failed.stdout + failed.stderr

    pip(venv, "install", *links, "--no-deps", f"torch=={torch_release['version']}")
    isolated = pip(venv, "wheel", *links, "--no-deps", "-w", str(out), requirement, check=False)
    assert isolated.returncode != 0, "an isolated build has no torch"
    assert "No module named 'torch'" in isolated.stdout + isolated.stderr
    assert not list(out.glob("deepspeed-*.whl"))

    # pip before 23.1 (Debian 12's 23.0.1, Ubuntu 22.04's 22.0.2) runs setup.py's own commands
    # where setuptools is installed and no pyproject.toml names a backend: egg_info, then bdist_wheel
    source = tmp_path / "source"
    with tarfile.open(root / "files" / f"deepspeed-{release['version']}.tar.gz") as archive:
        archive.extractall(source, filter="data")
    top = source / f"deepspeed-{release['version']}"
    for command in (["egg_info", "--egg-base", str(tmp_path / "egg")], ["bdist_wheel", "-d", str(tmp_path / "legacy")]):
        (tmp_path / "egg").mkdir(exist_ok=True)
        proc = subprocess.run(
            [str(venv / "bin" / "python"), "setup.py", *command],
            check=False,
            cwd=top,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    requires = (tmp_path / "egg" / "deepspeed.egg-info" / "requires.txt").read_text().split()
    assert requires == [f"{n}{s}" for n, s in release["builds"][0]["requires"].items()]
    assert [p.name for p in (tmp_path / "legacy").iterdir()] == [f"deepspeed-{release['version']}-py3-none-any.whl"]

    pip(venv, "wheel", *links, "--no-deps", "--no-build-isolation", "-w", str(out), requirement)
    (wheel,) = out.glob("deepspeed-*.whl")
    assert wheel.name == f"deepspeed-{release['version']}-py3-none-any.whl"
    pip(venv, "install", "--no-deps", str(wheel))
    code = (
        "import deepspeed; from deepspeed.ops.op_builder.all_ops import ALL_OPS; "
        "print(deepspeed.__version__, deepspeed.torch_info['version'], deepspeed.torch_info['cuda_version']); "
        "print(all(b.is_compatible() for b in ALL_OPS.values())); "
        "print(next(iter(ALL_OPS.values())).error_log)"
    )
    bare = run(venv, code, env={"PATH": "/usr/bin:/bin"}).splitlines()
    torch_minor = ".".join(torch_release["version"].split(".")[:2])
    assert bare[0].split() == [release["version"], torch_minor, torch_build_row["cuda"]]
    assert bare[1] == "False", "no nvcc, no JIT build"

    # an nvcc of torch's CUDA makes the ops compatible; another minor does not (CUDA 13: exact)
    major, minor = torch_build_row["cuda"].split(".")
    for nvcc_release, compatible in ((torch_build_row["cuda"], "True"), (f"{major}.{int(minor) + 1}", "False")):
        cuda = tmp_path / f"cuda-{nvcc_release}"
        (cuda / "bin").mkdir(parents=True)
        nvcc = cuda / "bin" / "nvcc"
        nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {nvcc_release}, V{nvcc_release}.1'\n")
        nvcc.chmod(0o755)
        lines = run(venv, code, env={"PATH": "/usr/bin:/bin", "CUDA_HOME": str(cuda)}).splitlines()
        assert lines[1] == compatible, lines
        if compatible == "False":
            assert f"Installed CUDA version {nvcc_release} does not match" in lines[2]
    report = subprocess.run(
        [str(venv / "bin" / "ds_report")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "CUDA_HOME": str(tmp_path / f"cuda-{torch_build_row['cuda']}")},
    )
    assert report.returncode == 0, report.stderr
    assert report.stdout.count("[OKAY]") == len(ALL_OPS_NAMES), report.stdout
    assert "[WARNING]" not in report.stdout


def test_torch_reports_its_build_and_the_installed_cudnn(house, venv):
    root, _ = house
    release, build = torch_build()
    pip(venv, "install", "--no-index", "--find-links", str(root / "files"), f"torch=={release['version']}")
    out = run(
        venv,
        "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), "
        "torch.backends.cudnn.version())",
    ).split()
    major, minor, patch = (int(p) for p in build["cudnn"].split(".")[:3])
    assert out == [
        f"{release['version']}+{build['variant']}",
        build["cuda"],
        "False",
        str(major * 10000 + minor * 100 + patch),
    ]
