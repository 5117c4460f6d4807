"""requirements.lock: resolved by uv for the image's Python and platform against a local index of
test wheels (conftest.py), held to the plan's CUDA and cuDNN wheels, checked line by line when
given with --lock-file. One test resolves against pypi.org (marked `network`).

Plans come from the fixture catalogue (tests/fixtures/compat) where it has the kind of build a test
needs (PyTorch's exact CUDA wheel pins); TensorFlow's [and-cuda] ranges, CUDA 13's cuda-toolkit and
system-CUDA builds are taken from the live catalogue by kind (its newest such release), and the
lock is checked against that release's own row, so a refresh changes no expectation."""

import hashlib
import json
import re
import subprocess
import sys

import pytest
from packaging.specifiers import SpecifierSet
from support import plan_by_build_kind
from wheelhouse import make_wheel, serve, write_simple_index

from provision.errors import InputError, ToolingError
from provision.images.pylock import (
    LockTarget,
    PackageIndex,
    check_against_plan,
    lock_target,
    parse_lock,
    resolve_lock,
)
from provision.images.render import render_image
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

HASH = "--hash=sha256:" + "a" * 64


GPU = "a100-pcie-80gb"  # a fixture catalogue id


def plan_for(matrix, os_id, gpu, **pins):
    return resolve(matrix, PlanRequest(os=os_id, gpu=gpu, **pins))


@pytest.fixture(scope="module")
def torch_row(fixture_matrix):
    """The fixture's oldest PyTorch release (exact CUDA wheel pins) and its default build."""
    release = fixture_matrix.framework("pytorch").releases[-1]
    build = next(b for b in release.builds if b.default)
    assert build.libraries == "wheels"
    assert build.cuda_runtime[0].isdigit(), "an exact runtime pin"
    return release, build


def live_plan(matrix, kind):
    """The live catalogue's newest release whose default build is of this kind, planned: (plan, build)."""
    found = plan_by_build_kind(matrix, kind)
    if found is None:
        pytest.fail(f"the live catalogue has no {kind} framework build that plans")
    return found


def hashes_by_pin(text: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    name = None
    for line in text.splitlines():
        if m := re.match(r"^([A-Za-z0-9._-]+)==(\S+)", line):
            name = m[1]
            out[name] = set()
        if name:
            out[name].update(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
    return out


def test_every_package_is_pinned_with_the_served_files_hashes(fixture_matrix, torch_row, wheel_index):
    release, build = torch_row
    plan = plan_for(fixture_matrix, "rocky9", GPU, framework=f"pytorch=={release.version}")
    text = render_image(plan, "pytorch").files["requirements.lock"]
    assert parse_lock(text, "lock") == {
        "torch": str(release.version),
        "nvidia-cudnn-cu12": build.cudnn,
        "nvidia-cuda-runtime-cu12": build.cuda_runtime,
    }
    served = {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in (wheel_index.root / "files").iterdir()}
    for name, hashes in hashes_by_pin(text).items():
        version = parse_lock(text, "lock")[name]
        assert hashes == {served[f"{name.replace('-', '_')}-{version}-py3-none-any.whl"]}, name
    assert text.startswith(f"# requirements.lock for torch=={release.version}: every package pinned with its hashes.\n")
    assert f"# index: {wheel_index.url}/simple\n" in text
    constraints = f"nvidia-cudnn-cu12=={build.cudnn} nvidia-cuda-runtime-cu12=={build.cuda_runtime}"
    assert f"# constraints (the plan's CUDA wheels): {constraints}\n" in text
    assert "# install: pip install --require-hashes --no-deps --only-binary=:all: -r requirements.lock\n" in text


@pytest.mark.parametrize("kind", ["exact-extra", "range"])
def test_the_plans_cuda_wheels_win_over_the_newest(real_matrix, kind):
    """[and-cuda] sets floors (cuDNN >=X,<next major); the index offers a newer cuDNN (9.99.0.1),
    and for a runtime range a newer runtime too ({major}.9.1): the lock holds the plan's."""
    plan, build = live_plan(real_matrix, kind)
    major = build.cuda.split(".")[0]
    pins = parse_lock(render_image(plan, plan.framework.name).files["requirements.lock"], "lock")
    assert pins[f"nvidia-cudnn-cu{major}"] == build.cudnn == plan.framework.cudnn
    runtime = build.cuda_runtime
    if kind == "range":  # held to the plan's CUDA major.minor: the range's floor, not the newest on offer
        runtime = next(s.version for s in SpecifierSet(runtime) if s.operator == ">=")
        assert runtime.startswith(f"{build.cuda}.")
    assert pins[f"nvidia-cuda-runtime-cu{major}"] == runtime


def test_cuda_13_runtime_comes_through_cuda_toolkit(real_matrix):
    plan, build = live_plan(real_matrix, "cuda13")
    major = build.cuda.split(".")[0]
    pins = parse_lock(render_image(plan, plan.framework.name).files["requirements.lock"], "lock")
    assert pins["cuda-toolkit"] == plan.framework.cuda_runtime == build.cuda_runtime
    assert pins[f"nvidia-cudnn-cu{major}"] == plan.framework.cudnn == build.cudnn


def test_python_and_platform_of_the_image(fixture_matrix, torch_row):
    release, _ = torch_row
    plan = plan_for(fixture_matrix, "ubuntu22.04", "h100-sxm", framework=f"pytorch=={release.version}")
    amd = render_image(plan, "pytorch").files["requirements.lock"]
    assert "for Python 3.10 on x86_64-manylinux_2_35." in amd  # aarch64: tests/images/test_render_arch.py
    with pytest.raises(InputError, match="--platform 'linux/s390x' is not supported") as info:
        render_image(plan, "pytorch", platform="linux/s390x")
    assert info.value.exit_code == 2


def test_an_unresolvable_pin_takes_its_post_release(real_matrix, cli, tmp_path):
    """tensorflow[and-cuda]==2.15.0 needs tensorrt-libs 8.6.1, which no index has; 2.15.0.post1 is the
    same release without it, and its CUDA wheels are the plan's, so the lock takes it and says why.
    Live data: the release as compat/ catalogues it (the local index mirrors pypi.org for it)."""
    release = next(r for r in real_matrix.framework("tensorflow").releases if str(r.version) == "2.15.0")
    build = next(b for b in release.builds if b.default)
    out = tmp_path / "ctx"
    r = cli(
        "render", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "tensorflow==2.15.0", "--out", str(out)
    )
    assert r.code == 0, r
    text = (out / "requirements.lock").read_text()
    pins = parse_lock(text, "lock")
    assert pins["tensorflow"] == "2.15.0.post1"
    assert pins["nvidia-cudnn-cu12"] == build.cudnn
    assert r.err.startswith("note: tensorflow[and-cuda]==2.15.0 cannot be installed (")
    assert "tensorrt-libs" in r.err
    assert "locked its post-release tensorflow==2.15.0.post1" in text
    dockerfile = (out / "Dockerfile").read_text()
    assert 'io.provision.framework="tensorflow[and-cuda]==2.15.0.post1"' in dockerfile, "labels say what is installed"
    assert 'org.opencontainers.image.version="2.15.0.post1"' in dockerfile


def test_an_unresolvable_pin_without_a_post_release_is_refused(fixture_matrix, tmp_path):
    root = tmp_path / "index"
    (root / "files").mkdir(parents=True)
    wheels = [make_wheel(root / "files", "torch", "2.5.1", ["tensorrt-libs==8.6.1"])]
    write_simple_index(root, wheels)
    fw = plan_for(fixture_matrix, "rocky9", GPU, framework="pytorch==2.5.1").framework
    with serve(root) as url, pytest.raises(InputError) as info:
        resolve_lock(lock_target(fw, python="3.9", platform="x86_64-manylinux_2_34"), PackageIndex(url + "/simple"), fw)
    err = info.value
    assert err.exit_code == 2
    assert err.message.startswith("torch==2.5.1 cannot be installed on Python 3.9 (x86_64-manylinux_2_34): ")
    assert "tensorrt-libs==8.6.1" in err.message, "uv's reason"
    assert "none of its post-releases resolves either" in err.hint


def test_the_plans_extra_index_is_searched_first(fixture_matrix, torch_row, wheel_index, tmp_path):
    """A PyTorch variant build: torch from the plan's index (a local build), the rest from the main one."""
    release, build = torch_row
    root = tmp_path / "variant"
    (root / "files").mkdir(parents=True)
    wheel = make_wheel(root / "files", "torch", f"{release.version}+cu121", [f"nvidia-cudnn-cu12=={build.cudnn}"])
    write_simple_index(root, [wheel], prefix="whl/cu121")
    fw = plan_for(fixture_matrix, "rocky9", GPU, framework=f"pytorch=={release.version}").framework
    with serve(root) as url:
        fw = fw._replace(index_url=f"{url}/whl/cu121", cuda_runtime=None)
        target = lock_target(fw, python="3.9", platform="x86_64-manylinux_2_34")
        lock = resolve_lock(target, PackageIndex(wheel_index.url + "/simple"), fw)
    assert lock.pins == {"torch": f"{release.version}+cu121", "nvidia-cudnn-cu12": build.cudnn}
    assert f"# extra index (searched first): {url}/whl/cu121\n" in lock.text
    assert hashes_by_pin(lock.text)["torch"] == {hashlib.sha256(wheel.read_bytes()).hexdigest()}


def test_an_index_that_does_not_answer_exits_4(fixture_matrix, monkeypatch):
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    plan = plan_for(fixture_matrix, "rocky9", GPU, framework="pytorch==2.5.1")
    with pytest.raises(ToolingError, match="the package index did not answer") as info:
        render_image(plan, "pytorch", index=PackageIndex("http://127.0.0.1:9/simple"))
    assert info.value.exit_code == 4
    assert "--lock-file" in info.value.hint


def test_pip_installs_the_lock_and_refuses_a_file_it_does_not_match(fixture_matrix, torch_row, wheel_index, tmp_path):
    """What the image runs, run here against the local index: the rendered lock installs with
    --require-hashes; with one hash changed, pip refuses the file (exit non-zero, nothing installed)."""
    release, build = torch_row
    plan = plan_for(fixture_matrix, "ubuntu22.04", "h100-sxm", framework=f"pytorch=={release.version}")
    text = render_image(plan, "pytorch").files["requirements.lock"]
    wheel = wheel_index.root / "files" / f"torch-{release.version}-py3-none-any.whl"
    served = hashlib.sha256(wheel.read_bytes()).hexdigest()
    for name, lock_text, ok in (("good", text, True), ("tampered", text.replace(served, "0" * 64), False)):
        lock = tmp_path / f"{name}.lock"
        lock.write_text(lock_text)
        target = tmp_path / f"site-{name}"
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-cache-dir",
             "--require-hashes", "--no-deps", "--only-binary=:all:", "--index-url", f"{wheel_index.url}/simple",
             "--target", str(target), "-r", str(lock)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert (proc.returncode == 0) is ok, proc.stdout + proc.stderr
        if ok:
            installed = sorted(p.name for p in target.iterdir() if p.name.endswith(".dist-info"))
            assert installed == [
                f"nvidia_cuda_runtime_cu12-{build.cuda_runtime}.dist-info",
                f"nvidia_cudnn_cu12-{build.cudnn}.dist-info",
                f"torch-{release.version}.dist-info",
            ]
        else:
            assert "DO NOT MATCH THE HASHES" in proc.stderr
            assert not target.exists() or not any(target.glob("torch-*.dist-info"))


# -- locks as inputs --------------------------------------------------------------------------
def test_a_committed_lock_is_reused_byte_for_byte(cli, on_fixture_catalogue, torch_row, tmp_path):
    release, build = torch_row
    torch = f"torch=={release.version}"
    plan = tmp_path / "plan.json"
    assert cli("plan", "--os", "rocky9", "--gpu", GPU, "--framework", f"py{torch}", "--lock", str(plan)).code == 0
    assert cli("render", "--plan", str(plan), "--out", str(tmp_path / "a")).code == 0
    committed = tmp_path / "requirements.lock"
    committed.write_bytes((tmp_path / "a" / "requirements.lock").read_bytes() + b"# reviewed by a person\n")
    r = cli(
        "render",
        "--plan",
        str(plan),
        "--lock-file",
        str(committed),
        "--index-url",
        "http://127.0.0.1:9/simple",
        "--out",
        str(tmp_path / "b"),
    )
    assert r.code == 0, r  # no index asked: the lock is the input
    assert (tmp_path / "b" / "requirements.lock").read_bytes() == committed.read_bytes()

    cases = {
        "cudnn": (
            lambda t: t.replace(f"nvidia-cudnn-cu12=={build.cudnn}", "nvidia-cudnn-cu12==9.28.0.1"),
            f"contradicts the plan: it installs nvidia-cudnn-cu12==9.28.0.1, the plan cuDNN {build.cudnn}",
        ),
        "runtime": (
            lambda t: t.replace(f"nvidia-cuda-runtime-cu12=={build.cuda_runtime}", "nvidia-cuda-runtime-cu12==12.99.1"),
            f"outside the plan's CUDA {build.cuda}",
        ),
        "torch": (
            lambda t: t.replace(torch, "torch==1.0.0"),
            f"it installs torch==1.0.0, the plan {torch}",
        ),
        "index": (
            lambda t: "--index-url https://evil.example/simple\n" + t,
            "line 1 is not a `name==version --hash=sha256:…` line",
        ),
        "url": (lambda t: t + "evil @ https://evil.example/evil-1.0.whl\n", "is not a `name==version"),
        "unhashed": (lambda t: t + "six==1.16.0\n", "six carries no --hash=sha256:"),
        "crlf": (lambda t: t.replace("\n", "\r\n"), "line 1 holds the control character U+000D"),
    }
    for name, (change, text) in cases.items():
        bad = tmp_path / f"{name}.lock"
        bad.write_text(change(committed.read_text()), newline="")
        r = cli("render", "--plan", str(plan), "--lock-file", str(bad), "--out", str(tmp_path / f"out-{name}"))
        assert r.code == 2, (name, r)
        assert text in r.err, (name, r.err)
        assert "hint:" in r.err, (name, r.err)
        assert "Traceback" not in r.err, (name, r.err)
        assert not (tmp_path / f"out-{name}").exists(), "nothing written"
    r = cli(
        "render", "--plan", str(plan), "--variant", "base", "--lock-file", str(committed), "--out", str(tmp_path / "c")
    )
    assert r.code == 2
    assert "installs no Python packages" in r.err


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"torch==2.5.1 {HASH}\n-e .\n", "line 2 is not"),
        (f"--extra-index-url https://x.example/simple\ntorch==2.5.1 {HASH}\n", "line 1 is not"),
        (f"torch>=2.5.1 {HASH}\n", "line 1 is not"),
        (f"torch[cuda]==2.5.1 {HASH}\n", "line 1 is not"),
        (f"torch==2.5.1 ; python_version > '3' {HASH}\n", "line 1 is not"),
        (f"torch==2.5.1 --hash=sha256:{'a' * 63}\n", "line 1 is not"),
        (f"torch==2.5.1 --hash=md5:{'a' * 32}\n", "line 1 is not"),
        ("torch==2.5.1\n", "torch carries no --hash"),
        (f"torch==2.5.1 {HASH} \\\n", "ends with a continuation"),
        (f"torch==2.5.1 \\\n\n    {HASH}\n", "line 3 is not"),
        (f"torch==2.5.1 {HASH}\nTorch==2.5.1 {HASH}\n", "pinned twice"),
        (f"torch==1..2 {HASH}\n", "is not a version"),
        ("# only a comment\n", "no requirements"),
        (f"${{HOME}}==1 {HASH}\n", "line 1 is not"),
    ],
)
def test_lock_lines_are_hash_pinned_requirements_or_comments(text, problem):
    with pytest.raises(InputError, match=re.escape(problem)) as info:
        parse_lock(text, "lock")
    assert info.value.exit_code == 2
    assert info.value.hint


def test_lock_grammar_accepts_what_uv_writes():
    text = f"# header\nfoo==1.0 \\\n    {HASH} \\\n    {HASH}\n    # via bar\nbar==2.0.post1+cu121 {HASH}\n\n"
    assert parse_lock(text, "lock") == {"foo": "1.0", "bar": "2.0.post1+cu121"}


# {v}, {cudnn}, {runtime}, {cuda}: the fixture PyTorch row's version, cuDNN, CUDA runtime and CUDA
# line; the system-CUDA cases plan the live catalogue's newest system-CUDA release ({v} its version)
@pytest.mark.parametrize(
    ("kind", "pins", "problem"),
    [
        (
            "torch",
            {"torch": "{v}.post2", "nvidia-cudnn-cu12": "{cudnn}", "nvidia-cuda-runtime-cu12": "{runtime}"},
            None,
        ),
        (
            "torch",
            {"torch": "{v}+cu124", "nvidia-cudnn-cu12": "{cudnn}", "nvidia-cuda-runtime-cu12": "{runtime}"},
            None,
        ),
        (
            "torch",
            {"torch": "{v}rc1", "nvidia-cudnn-cu12": "{cudnn}", "nvidia-cuda-runtime-cu12": "{runtime}"},
            "torch=={v}rc1",
        ),
        ("torch", {"torch": "{v}", "nvidia-cuda-runtime-cu12": "{runtime}"}, "the lock has no nvidia-cudnn wheel"),
        (
            "torch",
            {"torch": "{v}", "nvidia-cudnn-cu12": "{cudnn}"},
            "the plan's CUDA runtime {runtime} comes from wheels",
        ),
        (
            "torch",
            {"torch": "{v}", "nvidia-cudnn-cu12": "{cudnn}", "nvidia-cuda-runtime-cu12": "{cuda}.99"},
            "the plan CUDA runtime {runtime}",
        ),
        ("torch", {"nvidia-cudnn-cu12": "{cudnn}"}, "it does not install torch"),
        # a system-CUDA build uses the image's CUDA and cuDNN: a cuDNN wheel would be a second one
        ("system", {"tensorflow": "{v}", "nvidia-cudnn-cu11": "8.6.0.163"}, "uses the image's CUDA and cuDNN"),
        ("system", {"tensorflow": "{v}", "numpy": "1.26.4"}, None),
    ],
)
def test_a_lock_that_contradicts_the_plan_is_refused(fixture_matrix, real_matrix, torch_row, kind, pins, problem):
    if kind == "torch":
        release, build = torch_row
        fw = plan_for(fixture_matrix, "ubuntu22.04", GPU, framework=f"pytorch=={release.version}").framework
        values = {"v": str(release.version), "cudnn": build.cudnn, "runtime": build.cuda_runtime, "cuda": build.cuda}
    else:
        fw = live_plan(real_matrix, "system")[0].framework
        assert fw.package == "tensorflow"
        values = {"v": fw.version}
    pins = {name: version.format(**values) for name, version in pins.items()}
    if problem is None:
        check_against_plan(pins, fw, "lock")
        return
    with pytest.raises(InputError, match=re.escape(problem.format(**values))) as info:
        check_against_plan(pins, fw, "lock")
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    "requirement",
    [
        "torch==2.5.1 --index-url https://evil.example/simple",
        "torch @ https://evil.example/torch-2.5.1.whl",
        "torch==2.5.1; python_version > '3'",
        "torch>=2.5.1",
        "numpy==1.26.4",
        "-e .",
    ],
)
def test_a_requirement_with_options_or_urls_is_refused(fixture_matrix, requirement):
    fw = plan_for(fixture_matrix, "rocky9", GPU, framework="pytorch==2.5.1").framework._replace(requirement=requirement)
    with pytest.raises(InputError, match="is not `torch\\[extra\\]==VERSION`") as info:
        lock_target(fw, python="3.9", platform="x86_64-manylinux_2_34")
    assert info.value.exit_code == 2


def test_index_urls_carry_no_credentials_or_spaces(cli, on_fixture_catalogue, tmp_path):
    for url in (
        "https://user:token@mirror.example/simple",
        "https://mirror.example/simple --trusted-host x",
        "file:///etc",
    ):
        r = cli(
            "render",
            "--os",
            "rocky9",
            "--gpu",
            GPU,
            "--framework",
            "pytorch==2.5.1",
            "--index-url",
            url,
            "--out",
            str(tmp_path / "o"),
        )
        assert r.code == 2, (url, r)
        assert "is not a package index URL" in r.err
    assert not (tmp_path / "o").exists()


def test_target_constraints_follow_the_plan(real_matrix):
    """Live rows by kind: an [and-cuda] build with a runtime range, and a system-CUDA build."""
    plan, build = live_plan(real_matrix, "range")
    tf = plan.framework
    major = build.cuda.split(".")[0]
    target = lock_target(tf, python="3.10", platform="x86_64-manylinux_2_35")
    assert target == LockTarget(
        f"{tf.package}[{build.extra}]=={tf.version}",
        "3.10",
        "x86_64-manylinux_2_35",
        None,
        (
            f"nvidia-cudnn-cu{major}=={build.cudnn}",
            f"nvidia-cuda-runtime-cu{major}{build.cuda_runtime},=={build.cuda}.*",
        ),
    )
    system = live_plan(real_matrix, "system")[0].framework
    assert lock_target(system, python="3.10", platform="x86_64-manylinux_2_35").constraints == ()


# -- the real package index -------------------------------------------------------------------
@pytest.mark.network
def test_real_index_torch_on_rocky_and_tensorflow_2_15(cli, tmp_path):
    """pypi.org: torch 2.5.1 for Rocky 9 (Python 3.9, manylinux_2_34) with the plan's cuDNN; TF 2.15.0's
    [and-cuda] cannot be installed there, and its post-release is locked with the plan's cuDNN."""
    plan = tmp_path / "torch.json"
    assert (
        cli("plan", "--os", "rocky9", "--gpu", "a100-pcie", "--framework", "pytorch==2.5.1", "--lock", str(plan)).code
        == 0
    )
    r = cli("render", "--plan", str(plan), "--out", str(tmp_path / "torch"))
    assert r.code == 0, r
    text = (tmp_path / "torch" / "requirements.lock").read_text()
    pins = parse_lock(text, "lock")  # every line a hash-pinned requirement or a comment
    assert "# index: https://pypi.org/simple\n" in text
    assert pins["torch"] == "2.5.1"
    assert f"\nnvidia-cudnn-cu12=={json.loads(plan.read_text())['framework']['cudnn']} \\\n" in text
    assert len(pins) > 15, "transitive dependencies pinned too"
    assert all(hashes_by_pin(text).values())

    plan = tmp_path / "tf.json"
    assert (
        cli(
            "plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "tensorflow==2.15.0", "--lock", str(plan)
        ).code
        == 0
    )
    r = cli("render", "--plan", str(plan), "--out", str(tmp_path / "tf"))
    assert r.code == 0, r
    assert "tensorflow[and-cuda]==2.15.0 cannot be installed" in r.err
    tf = parse_lock((tmp_path / "tf" / "requirements.lock").read_text(), "lock")
    assert tf["tensorflow"] == "2.15.0.post1"
    assert tf["nvidia-cudnn-cu12"] == json.loads(plan.read_text())["framework"]["cudnn"] == "8.9.4.25"
