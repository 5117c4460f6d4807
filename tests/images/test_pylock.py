"""requirements.lock: resolved by uv for the image's Python and platform against a local index of
test wheels (conftest.py), held to the plan's CUDA and cuDNN wheels, checked line by line when
given with --lock-file. One test resolves against pypi.org (marked `network`)."""

import hashlib
import json
import re
import subprocess
import sys

import pytest
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


def plan_for(matrix, os_id, gpu, **pins):
    return resolve(matrix, PlanRequest(os=os_id, gpu=gpu, **pins))


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


def test_every_package_is_pinned_with_the_served_files_hashes(real_matrix, wheel_index):
    plan = plan_for(real_matrix, "rocky9", "a100-pcie", framework="pytorch==2.5.1")
    text = render_image(plan, "pytorch").files["requirements.lock"]
    assert parse_lock(text, "lock") == {
        "torch": "2.5.1",
        "nvidia-cudnn-cu12": "9.1.0.70",
        "nvidia-cuda-runtime-cu12": "12.4.127",
    }
    served = {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in (wheel_index.root / "files").iterdir()}
    for name, hashes in hashes_by_pin(text).items():
        version = parse_lock(text, "lock")[name]
        assert hashes == {served[f"{name.replace('-', '_')}-{version}-py3-none-any.whl"]}, name
    assert text.startswith("# requirements.lock for torch==2.5.1: every package pinned with its hashes.\n")
    assert f"# index: {wheel_index.url}/simple\n" in text
    assert (
        "# constraints (the plan's CUDA wheels): nvidia-cudnn-cu12==9.1.0.70 nvidia-cuda-runtime-cu12==12.4.127\n"
        in text
    )
    assert "# install: pip install --require-hashes --no-deps --only-binary=:all: -r requirements.lock\n" in text


@pytest.mark.parametrize(
    ("framework", "gpu", "cudnn", "runtime"),
    [
        # [and-cuda] sets floors (cuDNN >=9.3.0.75,<10); the index offers 9.99.0.1, the plan says 9.3.0.75
        ("tensorflow==2.18.0", "h100-sxm", "9.3.0.75", "12.5.82"),
        # the runtime is a range too (>=12.5.82,<13.0; 12.9.1 on offer): held to the plan's CUDA 12.5
        ("tensorflow==2.21.0", "a100-pcie", "9.3.0.75", "12.5.82"),
    ],
)
def test_the_plans_cuda_wheels_win_over_the_newest(real_matrix, framework, gpu, cudnn, runtime):
    plan = plan_for(real_matrix, "ubuntu22.04", gpu, framework=framework)
    assert plan.framework.cudnn == cudnn
    pins = parse_lock(render_image(plan, "tensorflow").files["requirements.lock"], "lock")
    assert pins["nvidia-cudnn-cu12"] == cudnn == plan.framework.cudnn
    assert pins["nvidia-cuda-runtime-cu12"] == runtime


def test_cuda_13_runtime_comes_through_cuda_toolkit(real_matrix):
    plan = plan_for(real_matrix, "ubuntu22.04", "h100-sxm", framework="pytorch==2.15.0")
    pins = parse_lock(render_image(plan, "pytorch").files["requirements.lock"], "lock")
    assert pins["cuda-toolkit"] == plan.framework.cuda_runtime
    assert pins["nvidia-cudnn-cu13"] == plan.framework.cudnn


def test_python_and_platform_of_the_image(real_matrix):
    plan = plan_for(real_matrix, "ubuntu22.04", "h100-sxm", framework="pytorch==2.5.1")
    amd = render_image(plan, "pytorch").files["requirements.lock"]
    arm = render_image(plan, "pytorch", platform="linux/arm64").files["requirements.lock"]
    assert "for Python 3.10 on x86_64-manylinux_2_35." in amd
    assert "for Python 3.10 on aarch64-manylinux_2_35." in arm
    with pytest.raises(InputError, match="--platform 'linux/s390x' is not supported") as info:
        render_image(plan, "pytorch", platform="linux/s390x")
    assert info.value.exit_code == 2


def test_an_unresolvable_pin_takes_its_post_release(real_matrix, cli, tmp_path):
    """tensorflow[and-cuda]==2.15.0 needs tensorrt-libs 8.6.1, which no index has; 2.15.0.post1 is the
    same release without it, and its CUDA wheels are the plan's, so the lock takes it and says why."""
    out = tmp_path / "ctx"
    r = cli(
        "render", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "tensorflow==2.15.0", "--out", str(out)
    )
    assert r.code == 0, r
    text = (out / "requirements.lock").read_text()
    pins = parse_lock(text, "lock")
    assert pins["tensorflow"] == "2.15.0.post1"
    assert pins["nvidia-cudnn-cu12"] == "8.9.4.25"
    assert r.err.startswith("note: tensorflow[and-cuda]==2.15.0 cannot be installed (")
    assert "tensorrt-libs" in r.err
    assert "locked its post-release tensorflow==2.15.0.post1" in text
    dockerfile = (out / "Dockerfile").read_text()
    assert 'io.provision.framework="tensorflow[and-cuda]==2.15.0.post1"' in dockerfile, "labels say what is installed"
    assert 'org.opencontainers.image.version="2.15.0.post1"' in dockerfile


def test_an_unresolvable_pin_without_a_post_release_is_refused(real_matrix, tmp_path):
    root = tmp_path / "index"
    (root / "files").mkdir(parents=True)
    wheels = [make_wheel(root / "files", "torch", "2.5.1", ["tensorrt-libs==8.6.1"])]
    write_simple_index(root, wheels)
    fw = plan_for(real_matrix, "rocky9", "a100-pcie", framework="pytorch==2.5.1").framework
    with serve(root) as url, pytest.raises(InputError) as info:
        resolve_lock(lock_target(fw, python="3.9", platform="x86_64-manylinux_2_34"), PackageIndex(url + "/simple"), fw)
    err = info.value
    assert err.exit_code == 2
    assert err.message.startswith("torch==2.5.1 cannot be installed on Python 3.9 (x86_64-manylinux_2_34): ")
    assert "tensorrt-libs==8.6.1" in err.message, "uv's reason"
    assert "none of its post-releases resolves either" in err.hint


def test_the_plans_extra_index_is_searched_first(real_matrix, wheel_index, tmp_path):
    """A PyTorch variant build: torch from the plan's index (a local build), the rest from the main one."""
    root = tmp_path / "variant"
    (root / "files").mkdir(parents=True)
    wheel = make_wheel(root / "files", "torch", "2.5.1+cu121", ["nvidia-cudnn-cu12==9.1.0.70"])
    write_simple_index(root, [wheel], prefix="whl/cu121")
    fw = plan_for(real_matrix, "rocky9", "a100-pcie", framework="pytorch==2.5.1").framework
    with serve(root) as url:
        fw = fw._replace(index_url=f"{url}/whl/cu121", cuda_runtime=None)
        target = lock_target(fw, python="3.9", platform="x86_64-manylinux_2_34")
        lock = resolve_lock(target, PackageIndex(wheel_index.url + "/simple"), fw)
    assert lock.pins == {"torch": "2.5.1+cu121", "nvidia-cudnn-cu12": "9.1.0.70"}
    assert f"# extra index (searched first): {url}/whl/cu121\n" in lock.text
    assert hashes_by_pin(lock.text)["torch"] == {hashlib.sha256(wheel.read_bytes()).hexdigest()}


def test_an_index_that_does_not_answer_exits_4(real_matrix, monkeypatch):
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    plan = plan_for(real_matrix, "rocky9", "a100-pcie", framework="pytorch==2.5.1")
    with pytest.raises(ToolingError, match="the package index did not answer") as info:
        render_image(plan, "pytorch", index=PackageIndex("http://127.0.0.1:9/simple"))
    assert info.value.exit_code == 4
    assert "--lock-file" in info.value.hint


def test_pip_installs_the_lock_and_refuses_a_file_it_does_not_match(real_matrix, wheel_index, tmp_path):
    """What the image runs, run here against the local index: the rendered lock installs with
    --require-hashes; with one hash changed, pip refuses the file (exit non-zero, nothing installed)."""
    plan = plan_for(real_matrix, "ubuntu22.04", "h100-sxm", framework="pytorch==2.5.1")
    text = render_image(plan, "pytorch").files["requirements.lock"]
    served = hashlib.sha256((wheel_index.root / "files" / "torch-2.5.1-py3-none-any.whl").read_bytes()).hexdigest()
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
                "nvidia_cuda_runtime_cu12-12.4.127.dist-info",
                "nvidia_cudnn_cu12-9.1.0.70.dist-info",
                "torch-2.5.1.dist-info",
            ]
        else:
            assert "DO NOT MATCH THE HASHES" in proc.stderr
            assert not target.exists() or not any(target.glob("torch-*.dist-info"))


# -- locks as inputs --------------------------------------------------------------------------
def test_a_committed_lock_is_reused_byte_for_byte(cli, tmp_path):
    plan = tmp_path / "plan.json"
    assert (
        cli("plan", "--os", "rocky9", "--gpu", "a100-pcie", "--framework", "pytorch==2.5.1", "--lock", str(plan)).code
        == 0
    )
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
            lambda t: t.replace("nvidia-cudnn-cu12==9.1.0.70", "nvidia-cudnn-cu12==9.28.0.1"),
            "contradicts the plan: it installs nvidia-cudnn-cu12==9.28.0.1, the plan cuDNN 9.1.0.70",
        ),
        "runtime": (
            lambda t: t.replace("nvidia-cuda-runtime-cu12==12.4.127", "nvidia-cuda-runtime-cu12==12.9.1"),
            "outside the plan's CUDA 12.4",
        ),
        "torch": (
            lambda t: t.replace("torch==2.5.1", "torch==2.6.0"),
            "it installs torch==2.6.0, the plan torch==2.5.1",
        ),
        "index": (
            lambda t: "--index-url https://evil.example/simple\n" + t,
            "line 1 is not a `name==version --hash=sha256:…` line",
        ),
        "url": (lambda t: t + "evil @ https://evil.example/evil-1.0.whl\n", "is not a `name==version"),
        "unhashed": (lambda t: t + "six==1.16.0\n", "six carries no --hash=sha256:"),
        "crlf": (lambda t: t.replace("\n", "\r\n"), "carriage returns"),
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
        (f"torch==2.5.1 \\\n\n    {HASH}\n", "line 2 is not"),
        (f"torch==2.5.1 {HASH}\nTorch==2.5.1 {HASH}\n", "pinned twice"),
        (f"torch==1..2 {HASH}\n", "is not a version"),
        ("# only a comment\n", "no requirements"),
        (f"torch==2.5.1 {HASH} # via nothing\n", "line 1 is not"),
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


@pytest.mark.parametrize(
    ("framework", "pins", "problem"),
    [
        (
            "pytorch==2.5.1",
            {"torch": "2.5.1.post2", "nvidia-cudnn-cu12": "9.1.0.70", "nvidia-cuda-runtime-cu12": "12.4.127"},
            None,
        ),
        (
            "pytorch==2.5.1",
            {"torch": "2.5.1+cu124", "nvidia-cudnn-cu12": "9.1.0.70", "nvidia-cuda-runtime-cu12": "12.4.127"},
            None,
        ),
        (
            "pytorch==2.5.1",
            {"torch": "2.5.1rc1", "nvidia-cudnn-cu12": "9.1.0.70", "nvidia-cuda-runtime-cu12": "12.4.127"},
            "torch==2.5.1rc1",
        ),
        (
            "pytorch==2.5.1",
            {"torch": "2.5.1", "nvidia-cuda-runtime-cu12": "12.4.127"},
            "the lock has no nvidia-cudnn wheel",
        ),
        (
            "pytorch==2.5.1",
            {"torch": "2.5.1", "nvidia-cudnn-cu12": "9.1.0.70"},
            "the plan's CUDA runtime 12.4.127 comes from wheels",
        ),
        (
            "pytorch==2.5.1",
            {"torch": "2.5.1", "nvidia-cudnn-cu12": "9.1.0.70", "nvidia-cuda-runtime-cu12": "12.4.99"},
            "the plan CUDA runtime 12.4.127",
        ),
        ("pytorch==2.5.1", {"nvidia-cudnn-cu12": "9.1.0.70"}, "it does not install torch"),
        # TensorFlow 2.12 uses the image's CUDA and cuDNN: a cuDNN wheel would be a second one
        (
            "tensorflow==2.12.0",
            {"tensorflow": "2.12.0", "nvidia-cudnn-cu11": "8.6.0.163"},
            "uses the image's CUDA and cuDNN",
        ),
        ("tensorflow==2.12.0", {"tensorflow": "2.12.0", "numpy": "1.26.4"}, None),
    ],
)
def test_a_lock_that_contradicts_the_plan_is_refused(real_matrix, framework, pins, problem):
    fw = plan_for(real_matrix, "ubuntu22.04", "l4", framework=framework).framework
    if problem is None:
        check_against_plan(pins, fw, "lock")
        return
    with pytest.raises(InputError, match=re.escape(problem)) as info:
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
def test_a_requirement_with_options_or_urls_is_refused(real_matrix, requirement):
    fw = plan_for(real_matrix, "rocky9", "a100-pcie", framework="pytorch==2.5.1").framework._replace(
        requirement=requirement
    )
    with pytest.raises(InputError, match="is not `torch\\[extra\\]==VERSION`") as info:
        lock_target(fw, python="3.9", platform="x86_64-manylinux_2_34")
    assert info.value.exit_code == 2


def test_index_urls_carry_no_credentials_or_spaces(cli, tmp_path):
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
            "a100-pcie",
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
    tf = plan_for(real_matrix, "ubuntu22.04", "a100-pcie", framework="tensorflow==2.21.0").framework
    target = lock_target(tf, python="3.10", platform="x86_64-manylinux_2_35")
    assert target == LockTarget(
        "tensorflow[and-cuda]==2.21.0",
        "3.10",
        "x86_64-manylinux_2_35",
        None,
        (f"nvidia-cudnn-cu12=={tf.cudnn}", f"nvidia-cuda-runtime-cu12{tf.cuda_runtime},=={tf.cuda}.*"),
    )
    system = plan_for(real_matrix, "ubuntu22.04", "l4", framework="tensorflow==2.12.0").framework
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
    assert "\nnvidia-cudnn-cu12==9.1.0.70 \\\n" in text
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
