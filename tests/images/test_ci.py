"""provision ci github|gitlab: pipelines that build each distinct image once, that actionlint and the
vendored GitHub-workflow and GitLab-CI schemas accept, and that GitHub's hardening guide would.

The plans here render the `base` variant (no Python requirements to resolve), so no test needs the
package index; the framework images' locks are covered in tests/images/test_pylock.py. The plans come
from the fixture catalogue (tests/fixtures/compat): a refresh of compat/ changes no expectation. The
workflows pin the actions of compat/ci_actions.yaml, checked for what must hold of any pin (a full
commit SHA)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision import __version__

BIN = Path(sys.executable).parent
CUDA = "12.4.1"  # pinned: the H100 and A100 plans share one base image
PLANS = {  # fixture catalogue ids
    "h100": ["--os", "ubuntu22.04", "--gpu", "h100-sxm", "--cuda", CUDA],
    "a100": ["--os", "ubuntu22.04", "--gpu", "a100-pcie-80gb", "--cuda", CUDA],
    "b200": ["--os", "rocky9", "--gpu", "b200"],
}


pytestmark = pytest.mark.usefixtures("on_tool_index", "on_ci_catalogue")


def lint(*command: str) -> None:
    proc = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def plan(cli):
    """`provision plan` on the fixture catalogue (on_ci_catalogue)."""
    return lambda *args: cli("plan", *args)


@pytest.fixture
def repo(plan, tmp_path):
    plans = tmp_path / "plans"
    plans.mkdir()
    for name, args in PLANS.items():
        r = plan(*args, "--lock", str(plans / f"{name}.lock.json"), "--format", "json")
        assert r.code == 0, r
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    return tmp_path


@pytest.fixture
def workflow(cli, repo):
    out = repo / ".github" / "workflows" / "images.yml"
    assert cli("ci", "github", "--plans", str(repo / "plans"), "--variant", "base", "--out", str(out)).code == 0
    return out


def matrix(doc):
    return doc["jobs"]["build"]["strategy"]["matrix"]["include"]


def test_each_distinct_image_is_built_once(workflow):
    """H100 and A100 plans of one CUDA render one base image: one job lists both plans."""
    doc = yaml.safe_load(workflow.read_text())
    jobs = matrix(doc)
    assert len(jobs) == 2
    shared = next(j for j in jobs if " " in j["plans"])
    assert sorted(shared["plans"].split()) == ["plans/a100.lock.json", "plans/h100.lock.json"]
    assert shared["plan"] in shared["plans"].split()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", shared["content"])
    assert shared["tags"].split() == [f"content-{shared['content'][7:19]}-base", f"base-cuda{CUDA}-ubuntu22.04"]
    every_tag = [t for j in jobs for t in j["tags"].split()]
    assert len(every_tag) == len(set(every_tag)), "no two jobs push one tag"
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert "workflow_dispatch" in on
    assert sorted(on["push"]["paths"]) == [  # each a file of this repository: plans, tool lock, the workflow
        ".github/workflows/gpu-provision.lock",
        ".github/workflows/images.yml",
        "plans/a100.lock.json",
        "plans/b200.lock.json",
        "plans/h100.lock.json",
    ]
    assert all((workflow.parents[2] / p).is_file() for p in on["push"]["paths"])


def test_the_build_runs_on_buildkit_with_cache_sbom_and_provenance(workflow):
    doc = yaml.safe_load(workflow.read_text())
    steps = {s["name"]: s for s in doc["jobs"]["build"]["steps"]}
    install = steps[f"Install gpu-provision {__version__} (hash-locked, .github/workflows/gpu-provision.lock)"]
    assert install["run"] == (
        "python -m pip install --require-hashes --no-deps --only-binary=:all: -r .github/workflows/gpu-provision.lock"
    )
    build = next(s for s in doc["jobs"]["build"]["steps"] if s.get("id") == "build")
    assert build["uses"].startswith("docker/build-push-action@")
    assert build["with"]["cache-from"] == "type=gha,scope=${{ matrix.name }}"
    assert build["with"]["cache-to"] == "type=gha,mode=max,scope=${{ matrix.name }}"
    assert build["with"]["sbom"] is True
    assert build["with"]["provenance"] == "mode=max"
    outputs = build["with"]["outputs"]
    assert outputs.startswith("type=image,push=${{ "), "always an image, for the lock's id and digest"
    assert "github.event_name != 'pull_request'" in outputs, "pushed only when publishing"
    assert "push" not in build["with"]
    assert any(s.get("uses", "").startswith("docker/setup-buildx-action@") for s in doc["jobs"]["build"]["steps"])
    render = next(s for s in doc["jobs"]["build"]["steps"] if s["name"].startswith("Render the build context"))
    assert 'provision ci context-digest build-context --expect "$CONTENT"' in render["run"]


def test_actionlint_and_the_workflow_schema_accept_it(workflow):
    lint(str(BIN / "actionlint"), str(workflow))
    lint(str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow))


def test_hardened(workflow):
    text = workflow.read_text()
    doc = yaml.safe_load(text)
    on = doc.get("on", doc.get(True))
    uses = re.findall(r"uses: ([^@\s]+)@(\S+)  # (v\S+)", text)
    assert len(uses) == len(re.findall(r"uses: ", text)) >= 6
    assert all(re.fullmatch(r"[0-9a-f]{40}", sha) for _, sha, _ in uses), "every action pinned by full commit SHA"
    for step in doc["jobs"]["build"]["steps"]:
        assert "${{" not in step.get("run", ""), f"an expression inside run: {step['name']}"
    assert on["push"]["branches"] == ["main"]
    assert on["push"]["tags"] == ["v*"]
    assert "pull_request" in on
    assert doc["permissions"] == {"contents": "read"}
    assert doc["jobs"]["build"]["permissions"] == {"contents": "read", "packages": "write"}
    assert "concurrency" in doc
    login = next(s for s in doc["jobs"]["build"]["steps"] if s["name"] == "Log in to the registry")
    assert "github.event_name != 'pull_request'" in login["if"]
    owner = next(s for s in doc["jobs"]["build"]["steps"] if s["name"] == "Name the image repository")
    assert "${OWNER,,}" in owner["run"], "the registry owner is lower-cased"
    assert "provision==" not in text, "never installs the unrelated 'provision' from the package index"


def test_no_push_builds_only(cli, repo):
    out = repo / ".github" / "workflows" / "one.yml"
    r = cli("ci", "github", "--plan", str(repo / "plans" / "b200.lock.json"), "--out", str(out), "--no-push")
    assert r.code == 0, r
    doc = yaml.safe_load(out.read_text())
    assert len(matrix(doc)) == 1
    assert not any("login" in s.get("uses", "") for s in doc["jobs"]["build"]["steps"])
    build = next(s for s in doc["jobs"]["build"]["steps"] if s.get("id") == "build")
    assert build["with"]["outputs"] == "type=image,push=false"
    assert doc["jobs"]["build"]["permissions"]["packages"] == "read"
    lint(str(BIN / "actionlint"), str(out))


def test_readable_tags_two_contents_would_share_are_left_off(monkeypatch, repo):
    """Different contents under one readable tag: each job keeps only its content tag."""
    from provision.images import ci, render

    real = render.render_image

    def render_by_gpu(plan, variant, **kw):
        rendered = real(plan, variant, **kw)
        files = {**rendered.files, "Dockerfile": rendered.files["Dockerfile"] + f"# {plan.gpu.id}\n"}
        return rendered._replace(files=files)

    monkeypatch.setattr(render, "render_image", render_by_gpu)
    plans = [str(repo / "plans" / f"{n}.lock.json") for n in ("h100", "a100")]
    jobs, _ = ci.plan_jobs(plans, str(repo), "base", matrix=ci.default_matrix())
    assert len(jobs) == 2
    assert [len(j.tags) for j in jobs] == [1, 1]
    assert all(j.tags[0].startswith("content-") for j in jobs)
    assert jobs[0].tags != jobs[1].tags


def test_context_digest_refuses_drifted_content(cli, repo, tmp_path):
    context = tmp_path / "ctx"
    assert cli("render", "--plan", str(repo / "plans" / "b200.lock.json"), "--out", str(context)).code == 0
    r = cli("ci", "context-digest", str(context))
    assert r.code == 0, r
    digest = r.out.strip()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    assert cli("ci", "context-digest", str(context), "--expect", digest).code == 0
    (context / "plan.lock.json").write_text("{}")  # beside the Dockerfile for people; not content
    assert cli("ci", "context-digest", str(context), "--expect", digest).code == 0
    with (context / "Dockerfile").open("a") as handle:
        handle.write("RUN echo drift\n")
    r = cli("ci", "context-digest", str(context), "--expect", digest)
    assert r.code == 1
    assert "regenerate the pipeline" in r.err


def test_ci_refuses_non_plans(cli, tmp_path):
    bad = tmp_path / "x.lock.json"
    bad.write_text("{}")
    out = tmp_path / ".github" / "workflows" / "w.yml"
    r = cli("ci", "github", "--plan", str(bad), "--out", str(out))
    assert r.code == 2
    assert "is not a provision plan" in r.err
    r = cli("ci", "github", "--plans", str(tmp_path / "empty"), "--out", str(out))
    assert r.code == 2
    assert not (tmp_path / ".github").exists(), "nothing half-done: the folder is made when the workflow is written"


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--repo", "ghcr.io/Acme/GPU"], "is not an image repository"),
        (["--repo", "ghcr.io/${{ github.event.issue.title }}/x"], "is not an image repository"),
        (["--default-branch", "main; rm -rf /"], "is not a branch name"),
    ],
)
def test_bad_options_are_refused(cli, repo, args, text):
    out = repo / ".github" / "workflows" / "w.yml"
    r = cli("ci", "github", "--plan", str(repo / "plans" / "b200.lock.json"), "--out", str(out), *args)
    assert r.code == 2, r
    assert text in r.err
    assert not out.exists()


def test_plans_outside_the_repository_are_refused(cli, repo, tmp_path):
    workflows = tmp_path / "other" / ".github" / "workflows"
    workflows.mkdir(parents=True)
    r = cli("ci", "github", "--plan", str(repo / "plans" / "b200.lock.json"), "--out", str(workflows / "w.yml"))
    assert r.code == 2, r
    assert "is outside the repository" in r.err
    assert not (workflows / "w.yml").exists()


# -- GitLab --------------------------------------------------------------------------------------
@pytest.fixture
def pipeline(cli, repo, monkeypatch):
    monkeypatch.chdir(repo)
    r = cli("ci", "gitlab", "--plans", "plans", "--variant", "base", "--out", ".gitlab-ci.yml")
    assert r.code == 0, r
    return repo / ".gitlab-ci.yml"


def test_gitlab_pipeline_passes_the_gitlab_ci_schema(pipeline):
    lint(str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.gitlab-ci", str(pipeline))


def test_gitlab_pipeline_builds_each_image_once_pinned_and_gated(pipeline):
    doc = yaml.safe_load(pipeline.read_text())
    builds = {k: v for k, v in doc.items() if k.startswith("build:")}
    assert len(builds) == 2, "one build job per distinct image"
    every_tag = [t for job in builds.values() for t in job["variables"]["TAGS"].split()]
    assert len(every_tag) == len(set(every_tag))
    for name in (".render", ".build", ".lock"):
        assert re.fullmatch(r"\S+:\S+@sha256:[0-9a-f]{64}", doc[name]["image"]), "job images pinned by digest"
    assert re.fullmatch(r"\S+@sha256:[0-9a-f]{64}", doc[".build"]["services"][0]["name"])
    script = "\n".join(doc[".build"]["script"])
    assert "--sbom=true --provenance=mode=max" in script
    assert "--cache-from" in script
    assert '--output "type=image,push=$PUBLISH"' in script, "always an image; pushed only when the rules say so"
    for job in builds.values():
        rule = job["rules"][0]
        assert rule["if"] == "$CI_COMMIT_TAG || $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH"
        assert rule["variables"] == {"PUBLISH": "true"}
        assert job["needs"] == [job["extends"].replace(".build", "render:") + job["variables"]["NAME"]]
    assert doc["variables"]["PUBLISH"] == "false", "merge requests build without pushing"
    assert doc["default"]["interruptible"] is True
    assert "merge_request_event" in doc["workflow"]["rules"][0]["if"]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--image", "docker=docker:29.8.0-dind"], "is not pinned by digest"),
        (["--image", "kaniko=gcr.io/kaniko:1@sha256:" + "a" * 64], "no such job image"),
        (["--image", "docker"], "is not NAME=REF"),
        (["--repo", "Registry.Example/GPU"], "is not an image repository"),
    ],
)
def test_gitlab_bad_options_are_refused(cli, repo, monkeypatch, args, text):
    monkeypatch.chdir(repo)
    r = cli("ci", "gitlab", "--plans", "plans", "--variant", "base", "--out", ".gitlab-ci.yml", *args)
    assert r.code == 2, r
    assert text in r.err
    assert not (repo / ".gitlab-ci.yml").exists()


# -- the step after the build --------------------------------------------------------------------
def test_image_lock_records_every_plan_of_the_image(cli, repo, monkeypatch):
    """What a job writes after BuildKit built its image: validated by the published schema."""
    import hashlib

    monkeypatch.chdir(repo)
    assert cli("render", "--plan", "plans/h100.lock.json", "--variant", "base", "--out", "ctx").code == 0
    image_id = "sha256:" + hashlib.sha256(b"config").hexdigest()
    digest = "sha256:" + hashlib.sha256(b"manifest").hexdigest()
    args = ["--context", "ctx", "--plans", "plans/h100.lock.json plans/a100.lock.json", "--variant", "base"]
    args += ["--repo", "ghcr.io/acme/gpu", "--tags", f"content-0123456789ab-base base-cuda{CUDA}-ubuntu22.04"]
    r = cli(
        "ci", "image-lock", *args, "--image-id", image_id, "--digest", digest, "--pushed", "true", "--out", "a.json"
    )
    assert r.code == 0, r
    doc = json.loads((repo / "a.json").read_text())
    assert [p["path"] for p in doc["plans"]] == ["plans/h100.lock.json", "plans/a100.lock.json"]
    assert doc["plan_digest"] == doc["plans"][0]["digest"]
    assert doc["image_id"] == image_id
    assert doc["repo_digests"] == [f"ghcr.io/acme/gpu@{digest}"]
    assert doc["tags"] == [
        "ghcr.io/acme/gpu:content-0123456789ab-base",
        f"ghcr.io/acme/gpu:base-cuda{CUDA}-ubuntu22.04",
    ]
    assert doc["base_image"] == f"nvidia/cuda:{CUDA}-base-ubuntu22.04"
    assert doc["build_base"] is None, "the base image has no sdist build stage"
    assert doc["content_digest"] == cli("ci", "context-digest", "ctx").out.strip()
    schema = Path(__file__).resolve().parents[2] / "provision" / "images" / "schema" / "image-lock.schema.json"
    lint(str(BIN / "check-jsonschema"), "--schemafile", str(schema), str(repo / "a.json"))
    # GitLab: from buildx's --metadata-file, not pushed
    (repo / "meta.json").write_text(
        json.dumps({"containerimage.config.digest": image_id, "containerimage.digest": digest})
    )
    r = cli("ci", "image-lock", *args, "--metadata", "meta.json", "--pushed", "false", "--out", "b.json")
    assert r.code == 0, r
    assert json.loads((repo / "b.json").read_text())["repo_digests"] == []


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"--image-id": "latest"}, "is not a sha256 digest"),
        ({"--plans": "../outside.lock.json"}, "cannot be used"),
        ({"--tags": "a;b"}, "are not image tags"),
        ({"--repo": "ghcr.io/Acme/gpu"}, "is not an image repository"),
    ],
)
def test_image_lock_refuses_bad_input(cli, repo, monkeypatch, change, text):
    monkeypatch.chdir(repo)
    assert cli("render", "--plan", "plans/b200.lock.json", "--out", "ctx").code == 0
    options = {
        "--context": "ctx",
        "--plans": "plans/b200.lock.json",
        "--variant": "base",
        "--repo": "ghcr.io/acme/gpu",
        "--tags": "content-0123456789ab-base",
        "--image-id": "sha256:" + "1" * 64,
        "--digest": "sha256:" + "2" * 64,
        "--pushed": "true",
        "--out": "lock.json",
    }
    options.update(change)
    r = cli("ci", "image-lock", *[x for kv in options.items() for x in kv])
    assert r.code == 2, r
    assert text in r.err
    assert not (repo / "lock.json").exists()


# -- framework images: committed locks -----------------------------------------------------------
def test_framework_images_render_with_committed_locks(cli, plan, repo, monkeypatch):
    """The job renders with the lock committed beside the workflow, so CI builds exactly the content
    the workflow was generated for; regenerating reuses the lock byte for byte."""
    monkeypatch.chdir(repo)
    for name, gpu in (("torch-h100", "h100-sxm"), ("torch-a100", "a100-pcie-80gb")):
        args = ["--os", "ubuntu22.04", "--gpu", gpu, "--framework", "torch==2.5.1"]
        assert plan(*args, "--lock", f"plans/{name}.lock.json", "--format", "json").code == 0
    out = ".github/workflows/images.yml"
    r = cli(
        "ci", "github", "--plan", "plans/torch-h100.lock.json", "--plan", "plans/torch-a100.lock.json", "--out", out
    )
    assert r.code == 0, r
    doc = json.loads((repo / "plans" / "torch-h100.lock.json").read_text())
    tag = f"pytorch{doc['framework']['version']}-cuda{doc['cuda']['version']}-ubuntu22.04"
    lock = f"image-locks/{tag}.requirements.lock"
    assert r.err.count(f"wrote {lock}\n") == 1, "reported once"
    assert r.out == ""
    written = (repo / lock).read_bytes()
    doc = yaml.safe_load((repo / out).read_text())
    (job,) = matrix(doc)
    assert job["lock"] == lock
    assert lock in doc.get("on", doc.get(True))["push"]["paths"]
    render = next(s for s in doc["jobs"]["build"]["steps"] if s["name"].startswith("Render the build context"))
    assert '${LOCK:+--lock-file "$LOCK"}' in render["run"]
    # what the job does in CI, by hand: render with the committed lock, check the content
    assert (
        cli("render", "--plan", job["plan"], "--variant", job["variant"], "--lock-file", lock, "--out", "ctx").code == 0
    )
    assert cli("ci", "context-digest", "ctx", "--expect", job["content"]).code == 0
    # regenerating reuses the committed lock: same bytes, same job
    r = cli(
        "ci", "github", "--plan", "plans/torch-h100.lock.json", "--plan", "plans/torch-a100.lock.json", "--out", out
    )
    assert r.code == 0, r
    assert r.err == f"wrote {out}\n", "the committed locks and the tool lock are reused, not written"
    assert (repo / lock).read_bytes() == written
    assert matrix(yaml.safe_load((repo / out).read_text())) == [job]
    lint(str(BIN / "actionlint"), str(repo / out))


def test_a_tampered_committed_lock_is_refused(cli, plan, repo, monkeypatch):
    monkeypatch.chdir(repo)
    args = ["--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "torch==2.5.1"]
    assert plan(*args, "--lock", "plans/torch.lock.json", "--format", "json").code == 0
    out = ".github/workflows/images.yml"
    assert cli("ci", "github", "--plan", "plans/torch.lock.json", "--out", out).code == 0
    doc = json.loads((repo / "plans" / "torch.lock.json").read_text())
    tag = f"pytorch{doc['framework']['version']}-cuda{doc['cuda']['version']}-ubuntu22.04"
    lock = repo / "image-locks" / f"{tag}.requirements.lock"
    assert lock.exists()
    lock.write_text(lock.read_text() + "--index-url http://example.invalid/simple\n")
    (repo / out).unlink()
    r = cli("ci", "github", "--plan", "plans/torch.lock.json", "--out", out)
    assert r.code == 2, r
    assert not (repo / out).exists()


def test_base_digests_make_every_job_build_from_a_digest(cli, repo, monkeypatch):
    """With pin-base's file, each job renders FROM nvidia/cuda:<tag>@sha256:…; a tag missing from
    the file is refused before anything is written."""
    from provision.images.pin import BasePin, write_pins

    monkeypatch.chdir(repo)
    tag = f"nvidia/cuda:{CUDA}-base-ubuntu22.04"
    digest = "sha256:" + "ab" * 32
    write_pins("bases.json", [BasePin(tag, f"{tag}@{digest}", digest, "", ("linux/amd64",), "2026-11-30T00:00:00Z")])
    out = ".github/workflows/images.yml"
    plans = ["--plan", "plans/h100.lock.json", "--plan", "plans/a100.lock.json", "--variant", "base"]
    r = cli("ci", "github", *plans, "--base-digests", "bases.json", "--out", out)
    assert r.code == 0, r
    (job,) = matrix(yaml.safe_load((repo / out).read_text()))
    assert job["base"] == f"{tag}@{digest}"
    assert "Bases are FROM their tags" not in (repo / out).read_text()
    r = cli("render", "--plan", job["plan"], "--variant", "base", "--base-image", job["base"], "--out", "ctx")
    assert r.code == 0, r
    assert f"FROM {tag}@{digest}\n" in (repo / "ctx" / "Dockerfile").read_text()
    assert cli("ci", "context-digest", "ctx", "--expect", job["content"]).code == 0
    (repo / out).unlink()
    r = cli("ci", "github", "--plan", "plans/b200.lock.json", "--base-digests", "bases.json", "--out", out)
    assert r.code == 2, r
    assert "has no digest for nvidia/cuda:" in r.err
    assert not (repo / out).exists()
