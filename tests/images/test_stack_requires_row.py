"""A stack package another one requires (role "requires", 2b40561): TensorRT, which Torch-TensorRT's
wheel declares (tensorrt-cuNN), joins the plan after the pins. The image treats it as every stack
row: pinned in the lock at the version the plan installs with each of its distributions, its
catalogue's library index (NVIDIA's, for the -libs wheel) the one second index, recorded in the
lock's header and named in both stages' pip commands, its meta sdists built in the devel stage with
no nested pip, and its import promised by the smoke test.

The plan is the live catalogue's `provision plan --os ubuntu22.04 --gpu h100-sxm --framework pytorch
--with torch-tensorrt`; the lock is resolved by uv against stand-ins on 127.0.0.1 (the framework
wheels of wheelhouse, a Torch-TensorRT wheel requiring the TensorRT meta package as the real one
does, TensorRT's sdists and bindings wheel as pypi.org has them, its -libs wheel on a stand-in of
NVIDIA's index: test_stack_tensorrt.index_pair)."""

import json
import re
from pathlib import Path

import pytest
from stack_locks import agreeing_stack_lock
from test_stack_tensorrt import NVIDIA, index_pair, nvidia_at  # noqa: F401 (a fixture)
from wheelhouse import canonical, make_wheel, serve, write_simple_index

from provision.errors import InputError
from provision.images.pylock import PackageIndex, check_against_plan, lock_target, parse_lock, source_builds
from provision.images.render import render_image
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

TARGET = {"python": "3.11", "platform": "x86_64-manylinux_2_35"}


@pytest.fixture(scope="module")
def trt_plan(real_matrix):
    return resolve(
        real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", framework="pytorch", with_=("torch-tensorrt",))
    )


def rows(plan):
    return next(p for p in plan.stack if p.id == "torch-tensorrt"), next(p for p in plan.stack if p.id == "tensorrt")


def test_the_requires_row_is_locked_with_its_library_index(trt_plan):
    tt, trt = rows(trt_plan)
    assert (trt.role, trt.required_by) == ("requires", "torch-tensorrt")
    assert trt.library_index == NVIDIA
    target = lock_target(trt_plan.framework, stack=trt_plan.stack, **TARGET)
    assert tt.requirement in target.more
    assert trt.requirement in target.more, "the required package is pinned like a --with one"
    assert target.library_index == NVIDIA, "its row's library index, never user input"
    built = source_builds(trt_plan.stack)
    meta = [canonical(n) for n, k in trt.distributions if k == "sdist" and not n.endswith("-libs")]
    assert meta
    assert set(meta) <= set(built)
    assert not any(n.endswith("-libs") for n in built), "the -libs stub is a wheel from the library index"


def test_the_requires_row_in_the_dockerfile_and_smoke_test(trt_plan, tmp_path):
    tt, trt = rows(trt_plan)
    header = f"# library index (the catalogue's): {NVIDIA}\n"
    lock = agreeing_stack_lock(trt_plan, trt_plan.stack, tmp_path, header=header)
    r = render_image(trt_plan, "pytorch", lock_file=lock)
    pins = parse_lock(r.files["requirements.lock"], "lock")
    assert pins["tensorrt"] == trt.install
    for name, _ in trt.distributions:
        assert pins[canonical(name)] == trt.install
    df = r.dockerfile
    build, runtime = df.split(f"\nFROM {r.from_ref}\n")
    assert f"FROM {trt_plan.images['devel']} AS build\n" in build, "TensorRT's meta sdists, built in devel"
    assert "\nENV NVIDIA_TENSORRT_DISABLE_INTERNAL_PIP=1\n" in build
    assert f"--extra-index-url {NVIDIA}" in build
    assert f"--extra-index-url {NVIDIA}" in runtime, "the -libs wheel comes from the library index"
    assert r.labels["io.provision.stack"] == f"{tt.requirement} {trt.requirement}"
    promises = json.loads(r.files["smoke.json"])
    assert [(p["id"], p["module"], p["version"]) for p in promises["packages"]] == [
        ("pytorch", "torch", trt_plan.framework.version),
        ("torch-tensorrt", "torch_tensorrt", tt.install),
        ("tensorrt", "tensorrt", trt.install),
    ]


def test_a_lock_without_the_required_package_is_refused(trt_plan, tmp_path):
    _, trt = rows(trt_plan)
    header = f"# library index (the catalogue's): {NVIDIA}\n"
    text = Path(agreeing_stack_lock(trt_plan, trt_plan.stack, tmp_path, header=header)).read_text()
    pins = parse_lock(text, "lock")
    with pytest.raises(InputError, match=r"it does not install tensorrt \(the plan's tensorrt\)"):
        check_against_plan({k: v for k, v in pins.items() if k != "tensorrt"}, None, "lock", trt_plan.stack)
    bindings = next(canonical(n) for n, _ in trt.distributions if n.endswith("-bindings"))
    with pytest.raises(InputError, match=rf"it does not pin {bindings}, a wheel of the plan's tensorrt"):
        check_against_plan({k: v for k, v in pins.items() if k != bindings}, None, "lock", trt_plan.stack)
    # pip installs the lock --no-deps: a distribution at another release than the plan's is refused,
    # a post release of the planned one is taken (TensorRT 10.14.1.48's bindings exist only as .post1)
    with pytest.raises(InputError, match=rf"it installs {bindings}==10\.0\.1, a wheel of the plan's tensorrt"):
        check_against_plan({**pins, bindings: "10.0.1"}, None, "lock", trt_plan.stack)
    check_against_plan({**pins, bindings: f"{trt.version}.post1"}, None, "lock", trt_plan.stack)
    bad = tmp_path / "bad.lock"
    bad.write_text(text.replace(NVIDIA, "https://evil.example/simple/"))
    with pytest.raises(InputError, match="names a second index that is not the plan's"):
        render_image(trt_plan, "pytorch", lock_file=str(bad))


def with_selector(plan):
    """The requires row's requirement is TensorRT's selector `tensorrt==V`, an sdist on pypi.org,
    and the row lists it among its distributions (as --framework tensorrt's default build does)."""
    _, trt = rows(plan)
    assert ("tensorrt", "sdist") in trt.distributions, "the plan lists the distribution its requirement names"
    return plan


def test_uv_resolves_the_requires_row_from_the_index_pair(trt_plan, wheel_index, tmp_path, nvidia_at):  # noqa: F811
    trt_plan = with_selector(trt_plan)
    tt, trt = rows(trt_plan)
    root = tmp_path / "indexes"
    with serve(root.parent) as url:
        nvidia_url = f"{url}/indexes/nvidia/simple/"
        nvidia_at(nvidia_url)
        pypi, _ = index_pair(root, trt)
        meta = next(canonical(n) for n, _ in trt.distributions if re.fullmatch(r"tensorrt-cu\d+", canonical(n)))
        served = sorted((pypi / "files").iterdir())
        for wheel in sorted((wheel_index.root / "files").iterdir()):
            (pypi / "files" / wheel.name).symlink_to(wheel)
            served.append(pypi / "files" / wheel.name)
        # Torch-TensorRT's wheel requires the TensorRT meta package of its release line and torch
        requires = (f"{meta}>={trt.install},<{int(trt.install.split('.')[0])}.{int(trt.install.split('.')[1]) + 1}",)
        served.append(make_wheel(pypi / "files", "torch-tensorrt", tt.install, (*requires, "torch")))
        write_simple_index(pypi, served)
        r = render_image(trt_plan, "pytorch", index=PackageIndex(f"{url}/indexes/pypi/simple"))
    lock = r.files["requirements.lock"]
    pins = parse_lock(lock, "lock")
    assert pins["tensorrt"] == trt.install
    assert pins["torch-tensorrt"] == tt.install
    assert f"# library index (the catalogue's): {nvidia_url}\n" in lock
    assert f"# from the library index: {meta}-libs\n" in lock
    built = [ln.split("==")[0] for ln in r.files["sdists.lock"].splitlines()]
    assert built == sorted(["tensorrt", meta]), "the selector and meta sdists, built in the stage"
    assert f"{meta}-libs==" in r.files["wheels.lock"], "the -libs wheel, from the library index"
    assert [ln.split("==")[0] for ln in r.files["build.lock"].splitlines()] == ["setuptools", "wheel"]
    assert f"--extra-index-url {nvidia_url}" in r.dockerfile
