"""The TensorRT image against a local stand-in of its two indexes (issue 24 item 3).

On pypi.org TensorRT's `tensorrt` (the selector), `tensorrt-cuNN` (the meta package) and
`tensorrt-cuNN-libs` are sdists and only `-bindings` are wheels; the -libs sdist is a stub whose
build backend (wheel_stub) downloads the real wheel from NVIDIA's index (pypi.nvidia.com, the
catalogue's library_index), which a build must not do unhashed. So the lock takes the -libs wheel
from the library index (its hash, the header naming what came from there), the selector and meta
sdists are locked by their hashes and built in the build stage with no nested pip
(NVIDIA_TENSORRT_DISABLE_INTERNAL_PIP=1: their setup.py then declares -libs and -bindings as
requirements, installed from the lock), and the runtime stage installs only wheels.

The stand-ins, on 127.0.0.1: a "pypi" index with the sdists and the bindings wheel as pypi.org has
them (tests/fixtures/refresh/stacks records them: the -libs sdist's pyproject names wheel_stub) and
an "nvidia" index with the -libs wheel. The plan comes from the live catalogue through the resolver;
its library index, pypi.nvidia.com (out of reach here), is answered by the stand-in (nvidia_at).
Every pin of the rendered lock is then fetched as the Dockerfile fetches it: pip download with the
image's flags for the wheels, and the sdists checked against the files the indexes serve."""

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from wheelhouse import canonical, make_sdist, make_wheel, serve, write_simple_index

from provision.images.pylock import PackageIndex, parse_lock, source_builds, split_lock
from provision.images.render import render_image
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

HADOLINT = Path(sys.executable).parent / "hadolint"
CONFIG = Path(__file__).resolve().parents[2] / ".hadolint.yaml"
NVIDIA = "https://pypi.nvidia.com/"


def tensorrt_plan(matrix, cuda: str | None):
    """The live plan of --framework tensorrt (on CUDA `cuda`): the default build's requirement is
    the selector `tensorrt==V`, an sdist on pypi.org, and the plan lists it among what the build
    installs (tensorrt-cuNN, -libs, -bindings), so the lock pins and the build stage builds it."""
    plan = resolve(matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="tensorrt", cuda=cuda))
    head = plan.stack[0]
    assert head.library_index == NVIDIA, "the catalogue names NVIDIA's index"
    names = [canonical(n) for n, _ in head.distributions]
    selector = canonical(head.requirement.split("==")[0].split("[")[0])
    assert selector in names, "the plan lists the distribution its requirement names"
    return plan


@pytest.fixture
def nvidia_at(monkeypatch):
    """The catalogue's library index (pypi.nvidia.com, an https URL the plan schema holds it to)
    answered by a stand-in: what the lock and the Dockerfile name is the stand-in's address."""

    def redirect(url: str) -> None:
        from provision.images import pylock, render

        def stand_in(stack):
            found = pylock.stack_library_index.__wrapped__(stack)
            return url if found == NVIDIA else found

        stand_in.__wrapped__ = pylock.stack_library_index
        monkeypatch.setattr(pylock, "stack_library_index", stand_in)
        monkeypatch.setattr(render, "stack_library_index", stand_in)

    return redirect


def index_pair(root: Path, head) -> tuple[Path, Path]:
    """pypi: the selector and meta sdists, the -libs stub sdist, the bindings wheel, the build's
    setuptools and wheel; nvidia: the -libs wheel. Each stand-in at the planned version."""
    pypi, nvidia = root / "pypi", root / "nvidia"
    for where in (pypi, nvidia):
        (where / "files").mkdir(parents=True)
    version = head.install
    by_role = {canonical(n): kind for n, kind in head.distributions}
    meta = next(n for n in by_role if re.fullmatch(r"tensorrt-cu\d+", n))
    libs, bindings = f"{meta}-libs", f"{meta}-bindings"
    served = []
    if "tensorrt" in by_role:  # the selector: a metapackage naming the meta package
        served.append(make_sdist(pypi / "files", "tensorrt", version, [f"{meta}=={version}"]))
    served.append(make_sdist(pypi / "files", meta, version, [f"{libs}=={version}", f"{bindings}=={version}"]))
    # the stub, as pypi.org has it: its build backend would download the wheel (never built here)
    served.append(make_sdist(pypi / "files", libs, version, build_requires=("wheel-stub",)))
    served.append(make_wheel(pypi / "files", bindings, version))
    served += [make_wheel(pypi / "files", n, "75.0.0") for n in ("setuptools", "wheel")]
    write_simple_index(pypi, served)
    write_simple_index(nvidia, [make_wheel(nvidia / "files", libs, version)])
    return pypi, nvidia


def hashes(lock_text: str) -> dict[str, set[str]]:
    """name -> sha256 hashes of a lock, read through split_lock (pip's logical lines, one a pin)."""
    out: dict[str, set[str]] = {}
    for line in split_lock(lock_text, ())[0].splitlines():
        if re.match(r"^[A-Za-z0-9]", line):
            name = canonical(line.split("==")[0])
            out[name] = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
    return out


@pytest.mark.parametrize("cuda", [None, "12.9"], ids=["default-build-cu13", "cu12-line"])
def test_the_tensorrt_image_locks_the_libs_wheel_and_builds_the_meta_sdists(real_matrix, tmp_path, cuda, nvidia_at):
    root = tmp_path / "indexes"
    with serve(root.parent) as url:
        nvidia_url = f"{url}/indexes/nvidia/simple/"
        nvidia_at(nvidia_url)
        plan = tensorrt_plan(real_matrix, cuda)
        head = plan.stack[0]
        pypi, nvidia = index_pair(root, head)
        r = render_image(plan, "tensorrt", index=PackageIndex(f"{url}/indexes/pypi/simple"))
        lock = r.files["requirements.lock"]
        pins = parse_lock(lock, "lock")
        sdists = source_builds(plan.stack)
        meta = next(n for n in sdists if re.fullmatch(r"tensorrt-cu\d+", n))
        libs = f"{meta}-libs"
        # what is locked, from which index
        assert pins[libs] == head.install
        assert f"# library index (the catalogue's): {nvidia_url}\n" in lock
        assert f"# from the library index: {libs}\n" in lock, "the header names what came from NVIDIA's index"
        assert libs not in sdists, "the stub is never built"
        nvidia_wheel = next((nvidia / "files").iterdir())
        assert hashes(lock)[libs] == {hashlib.sha256(nvidia_wheel.read_bytes()).hexdigest()}
        expected = {meta} | ({"tensorrt"} if cuda is None else set())
        assert set(sdists) == expected, "the selector (default build) and meta sdists are built"
        for name in expected:
            archive = next(p for p in (pypi / "files").iterdir() if canonical(p.name.split("-")[0]) == name)
            assert hashes(r.files["sdists.lock"])[name] == {hashlib.sha256(archive.read_bytes()).hexdigest()}
        assert {"setuptools", "wheel"} <= set(pins), "what building them with isolation off needs"
        # the Dockerfile: the stage builds the sdists with no nested pip, the runtime builds nothing
        df = r.dockerfile
        build, runtime = df.split(f"\nFROM {r.from_ref}\n")
        assert f"FROM {plan.images['devel']} AS build\n" in build
        assert "\nENV NVIDIA_TENSORRT_DISABLE_INTERNAL_PIP=1\n" in build
        assert "NVIDIA_TENSORRT_DISABLE_INTERNAL_PIP" not in runtime
        assert f"--extra-index-url {nvidia_url}" in runtime
        assert "pip wheel" not in runtime
        lint = subprocess.run(
            [str(HADOLINT), "--config", str(CONFIG), "-"], input=df, capture_output=True, text=True, check=False
        )
        assert lint.returncode == 0, lint.stdout
        # every wheel of the lock comes by its hash from the index pair, as the runtime stage installs it
        (tmp_path / "wheels.lock").write_text(r.files["wheels.lock"])
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--require-hashes",
                "--no-deps",
                "--only-binary=:all:",
                "--index-url",
                f"{url}/indexes/pypi/simple",
                "--extra-index-url",
                nvidia_url,
                "--dest",
                str(tmp_path / "got"),
                "-r",
                str(tmp_path / "wheels.lock"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = sorted(p.name for p in (tmp_path / "got").iterdir())
        assert nvidia_wheel.name in got, "the -libs wheel, from NVIDIA's index"
        assert len(got) == r.files["wheels.lock"].count("==")


def test_without_the_library_index_the_libs_stub_cannot_be_locked(real_matrix, tmp_path, nvidia_at):
    """The pypi stand-in alone has only the -libs stub sdist: a wheels-only lock of it is refused
    (exit 2, uv's reason), never built with its download."""
    from provision.errors import InputError

    root = tmp_path / "indexes"
    with serve(root.parent) as url:
        nvidia_at(f"{url}/indexes/empty/simple/")
        plan = tensorrt_plan(real_matrix, "12.9")
        (root / "empty" / "simple").mkdir(parents=True)
        index_pair(root, plan.stack[0])
        with pytest.raises(InputError, match="cannot be installed") as info:
            render_image(plan, "tensorrt", index=PackageIndex(f"{url}/indexes/pypi/simple"))
        assert "libs" in info.value.message
