"""The generated pipelines work in any repository (issue 23): they install gpu-provision at the version
that generated them, hash-locked, from gpu-provision.lock written beside them, and name no file of
provision's own repository.

The tool lock is resolved from a local index serving the wheel `pip wheel .` builds of this checkout
and its dependencies (toolindex.py, on 127.0.0.1). The end-to-end test generates into a fresh
`git init` repository with no --out, passes actionlint, and runs the workflow's steps that need no
registry (the install step, then each job's render and context-digest) in a new virtual environment,
from the lock, against that index."""

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from toolindex import isolated_pip_env

from provision import __version__
from provision.images.pylock import parse_requirements

BIN = Path(sys.executable).parent
CUDA = "12.4.1"
INSTALL = "python -m pip install --require-hashes --no-deps --only-binary=:all: -r"

pytestmark = pytest.mark.usefixtures("on_tool_index")


def lint(*command: str) -> None:
    proc = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def repo(cli, tmp_path, monkeypatch, on_ci_catalogue):
    root = tmp_path / "infra"
    (root / "plans").mkdir(parents=True)
    monkeypatch.chdir(root)
    for name, gpu in (("h100", "h100-sxm"), ("a100", "a100-pcie-80gb")):
        args = ["--os", "ubuntu22.04", "--gpu", gpu, "--cuda", CUDA]
        assert cli("plan", *args, "--lock", f"plans/{name}.lock.json").code == 0
    return root


WORKFLOW = ".github/workflows/provision-images.yml"
TOOL_LOCK = ".github/workflows/gpu-provision.lock"


def github(cli, *args):
    return cli("ci", "github", "--plans", "plans", "--variant", "base", *args)


def test_the_default_folder_is_made_and_the_tool_lock_written_beside_the_workflow(cli, repo, tool_index):
    r = github(cli)
    assert r.code == 0, r
    assert r.err.splitlines() == [f"wrote {TOOL_LOCK}", f"wrote {WORKFLOW}"], "each file reported once"
    pins, index = parse_requirements((repo / TOOL_LOCK).read_text(), "lock", index_option=True)
    assert index == f"{tool_index.url}/simple", "the lock names the index it was resolved from"
    assert pins["gpu-provision"] == __version__
    served = {w.name.split("-")[0].lower().replace("_", "-") for w in (tool_index.root / "files").iterdir()}
    assert set(pins) == served, "gpu-provision and every package it needs"
    wheel = next((tool_index.root / "files").glob(f"gpu_provision-{__version__}-*.whl"))
    assert f"--hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}" in (repo / TOOL_LOCK).read_text()
    text = (repo / WORKFLOW).read_text()
    assert "requirements/provision.lock" not in text
    assert "pip install ." not in text
    assert "--no-build-isolation" not in text
    doc = yaml.safe_load(text)
    install = [s["run"] for s in doc["jobs"]["build"]["steps"] if "pip install" in s.get("run", "")]
    assert install == [f"{INSTALL} {TOOL_LOCK}"]


def test_regenerating_reuses_the_tool_lock_of_this_version(cli, repo):
    assert github(cli).code == 0
    first = (repo / TOOL_LOCK).read_bytes()
    r = github(cli, "--tool-index-url", "http://127.0.0.1:9/simple")
    assert r.code == 2, r
    assert "names another index than --tool-index-url" in r.err
    r = github(cli)  # the index is not asked: the lock is reused
    assert r.code == 0, r
    assert r.err == f"wrote {WORKFLOW}\n"
    assert (repo / TOOL_LOCK).read_bytes() == first


def test_a_lock_of_another_version_is_resolved_again(cli, repo):
    assert github(cli).code == 0
    lock = repo / TOOL_LOCK
    lock.write_text(lock.read_text().replace(f"gpu-provision=={__version__}", "gpu-provision==0.0.1"))
    r = github(cli)
    assert r.code == 0, r
    assert f"pinned gpu-provision 0.0.1; resolved again for {__version__}" in r.err
    assert f"gpu-provision=={__version__} " in lock.read_text()


SEPARATORS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ("--extra-index-url https://evil.example/simple\n", "it sets a pip option"),
        ("-r https://evil.example/r.txt\n", "it sets a pip option"),
        ("--index-url https://evil.example/simple\n", "a second --index-url"),
        *[(f"# reviewed{c}--no-binary :all:\n", f"control character U+{ord(c):04X}") for c in SEPARATORS],
    ],
)
def test_a_tampered_tool_lock_is_refused(cli, repo, payload, problem):
    assert github(cli).code == 0
    (repo / WORKFLOW).unlink()
    lock = repo / TOOL_LOCK
    lock.write_text(lock.read_text() + payload, newline="")
    r = github(cli)
    assert r.code == 2, r
    assert problem in r.err
    assert "evil.example" not in r.err
    assert not (repo / WORKFLOW).exists()


def test_an_index_without_this_gpu_provision_is_refused_at_generation(cli, repo, wheel_index):
    r = github(cli, "--tool-index-url", f"{wheel_index.url}/simple")
    assert r.code == 2, r
    assert f"error: gpu-provision=={__version__} cannot be resolved from {wheel_index.url}/simple" in r.err
    assert "pip wheel --no-deps ." in r.err
    assert "--tool-lock" in r.err
    assert not (repo / ".github").exists(), "nothing written"


def test_the_tool_lock_where_the_user_names_it(cli, repo):
    r = github(cli, "--tool-lock", "ci/tool.lock")
    assert r.code == 0, r
    doc = yaml.safe_load((repo / WORKFLOW).read_text())
    assert f"{INSTALL} ci/tool.lock" in [s.get("run") for s in doc["jobs"]["build"]["steps"]]
    assert "ci/tool.lock" in doc.get("on", doc.get(True))["push"]["paths"]
    assert (repo / "ci" / "tool.lock").is_file()
    r = github(cli, "--tool-lock", str(repo.parent / "tool.lock"))
    assert r.code == 2, r
    assert "is outside the repository" in r.err


def test_an_explicit_out_in_a_missing_folder_is_refused(cli, repo):
    """Only the default folder, .github/workflows, is made: any other missing folder is refused as
    every command refuses it (tests/unit/test_output_paths.py)."""
    r = github(cli, "--out", "ci/workflows/images.yml")
    assert r.code == 2, r
    assert "does not exist" in r.err
    assert not (repo / "ci").exists()


def test_gitlab_installs_from_the_lock_beside_it(cli, repo):
    r = cli("ci", "gitlab", "--plans", "plans", "--variant", "base")
    assert r.code == 0, r
    assert r.err.splitlines() == ["wrote gpu-provision.lock", "wrote .gitlab-ci.yml"]
    doc = yaml.safe_load((repo / ".gitlab-ci.yml").read_text())
    for job in (".render", ".lock"):
        assert doc[job]["script"][0] == f"{INSTALL} gpu-provision.lock"
    text = (repo / ".gitlab-ci.yml").read_text()
    assert "requirements/provision.lock" not in text
    assert "pip install ." not in text
    lint(str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.gitlab-ci", str(repo / ".gitlab-ci.yml"))


# -- end to end: a fresh repository ------------------------------------------------------------------
def run(script: str, cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{script}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
def test_a_fresh_repository_runs_the_generated_steps(cli, tmp_path, monkeypatch, tool_index):
    """`provision ci github` with no --out in a new repository exits 0; actionlint accepts the workflow;
    its install step installs gpu-provision from the lock into a new environment, and each job's
    render and context-digest steps then pass with the provision installed so."""
    root = tmp_path / "infra"
    root.mkdir()
    subprocess.run(["git", "init", "--quiet", str(root)], check=True, timeout=60)
    monkeypatch.chdir(root)
    (root / "plans").mkdir()
    for name, args in {
        "h100": ["--os", "ubuntu22.04", "--gpu", "h100-sxm"],
        "torch": ["--os", "ubuntu22.04", "--gpu", "a100-pcie-80gb", "--framework", "pytorch"],
    }.items():
        assert cli("plan", *args, "--lock", f"plans/{name}.lock.json").code == 0
    r = cli("ci", "github", "--plans", "plans")
    assert r.code == 0, r
    workflow = root / WORKFLOW
    lint(str(BIN / "actionlint"), str(workflow))
    lint(str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow))
    doc = yaml.safe_load(workflow.read_text())
    on = doc.get("on", doc.get(True))
    assert all((root / p).is_file() for p in on["push"]["paths"]), "every trigger path is a file of this repository"
    jobs = doc["jobs"]["build"]["strategy"]["matrix"]["include"]
    assert any(j["lock"] for j in jobs), "a framework image renders with its committed lock"

    venv = tmp_path / "runner"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    home = tmp_path / "home"
    home.mkdir()
    env = isolated_pip_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", HOME=str(home))
    env.pop("VIRTUAL_ENV", None)
    steps = doc["jobs"]["build"]["steps"]
    install = next(s for s in steps if s["name"].startswith("Install gpu-provision"))
    run(install["run"], root, env)
    version = run("provision --version", root, env).stdout
    assert __version__ in version
    site = next((venv / "lib").glob("python*/site-packages"))
    assert (site / "provision" / "_resources" / "compat").is_dir(), "the wheel, not this checkout"

    render = next(s for s in steps if s["name"].startswith("Render the build context"))
    for job in jobs:
        step_env = {
            k: re.sub(r"\$\{\{ matrix\.(\w+) \}\}", lambda m, job=job: job[m[1]], v) for k, v in render["env"].items()
        }
        run(render["run"], root, {**env, **step_env})
        assert (root / "build-context" / "Dockerfile").is_file()
        run("rm -rf build-context", root, env)

    # the GitLab pipeline of the same repository: its render job's script, in the same environment
    assert cli("ci", "gitlab", "--plans", "plans").code == 0
    lab = yaml.safe_load((root / ".gitlab-ci.yml").read_text())
    script = lab[".render"]["script"]
    assert script[0] == f"{INSTALL} gpu-provision.lock"
    run(script[0], root, env)
    for name, job in lab.items():
        if name.startswith("render:"):
            run("\n".join(script[1:]), root, {**env, **job["variables"]})
