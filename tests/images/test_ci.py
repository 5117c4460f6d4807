"""provision ci github: a workflow that builds exactly the plans given, that actionlint and GitHub's
workflow schema accept, and that GitHub's hardening guide would."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

BIN = Path(sys.executable).parent


def test_workflow_covers_exactly_the_plans(cli, tmp_path):
    plans = tmp_path / "plans"
    plans.mkdir()
    for name, args in (
        ("a", ["--os", "rocky9", "--gpu", "a100-pcie", "--framework", "pytorch==2.5.1"]),
        ("b", ["--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "tensorflow==2.15.0"]),
        ("c", ["--os", "ubuntu22.04", "--gpu", "l4"]),
    ):
        assert cli("plan", *args, "--lock", str(plans / f"{name}.lock.json"), "--format", "json").code == 0
    out = tmp_path / ".github" / "workflows" / "images.yml"
    out.parent.mkdir(parents=True)
    r = cli("ci", "github", "--plans", str(plans), "--out", str(out))
    assert r.code == 0, r
    doc = yaml.safe_load(out.read_text())
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert "workflow_dispatch" in on
    job = doc["jobs"]["build"]
    include = job["strategy"]["matrix"]["include"]
    assert sorted(i["plan"] for i in include) == ["plans/a.lock.json", "plans/b.lock.json", "plans/c.lock.json"]
    assert {i["variant"] for i in include} == {"pytorch", "tensorflow", "base"}
    steps = {s["name"]: s for s in job["steps"]}
    install = steps["Install provision from this repository (hash-locked requirements)"]["run"]
    assert "--require-hashes --no-deps -r requirements/provision.lock" in install
    assert "pip install --no-deps --no-build-isolation ." in install
    build = steps["Build the image (push only from the default branch and tags)"]
    assert 'provision build --plan "$PLAN" --variant "$VARIANT"' in build["run"]
    assert build["env"]["PLAN"] == "${{ matrix.plan }}"
    # one plan only
    r = cli(
        "ci",
        "github",
        "--plan",
        str(plans / "a.lock.json"),
        "--out",
        str(tmp_path / ".github" / "workflows" / "one.yml"),
        "--no-push",
    )
    one = yaml.safe_load((tmp_path / ".github" / "workflows" / "one.yml").read_text())
    assert len(one["jobs"]["build"]["strategy"]["matrix"]["include"]) == 1
    assert "--push" not in yaml.safe_dump(one)


def test_ci_refuses_non_plans(cli, tmp_path):
    bad = tmp_path / "x.lock.json"
    bad.write_text("{}")
    r = cli("ci", "github", "--plan", str(bad), "--out", str(tmp_path / "w.yml"))
    assert r.code == 2
    assert "is not a provision plan" in r.err
    r = cli("ci", "github", "--plans", str(tmp_path / "empty"), "--out", str(tmp_path / "w.yml"))
    assert r.code == 2


@pytest.fixture
def workflow(cli, tmp_path):
    plans = tmp_path / "plans"
    plans.mkdir()
    for name, args in (
        ("a", ["--os", "rocky9", "--gpu", "a100-pcie", "--framework", "pytorch==2.5.1"]),
        ("b", ["--os", "ubuntu22.04", "--gpu", "l4"]),
    ):
        assert cli("plan", *args, "--lock", str(plans / f"{name}.lock.json"), "--format", "json").code == 0
    out = tmp_path / ".github" / "workflows" / "images.yml"
    out.parent.mkdir(parents=True)
    assert cli("ci", "github", "--plans", str(plans), "--out", str(out)).code == 0
    return out


def test_actionlint_and_the_workflow_schema_accept_it(workflow):
    lint = subprocess.run(
        [str(BIN / "actionlint"), str(workflow)], check=False, capture_output=True, text=True, timeout=120
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    schema = subprocess.run(
        [str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert schema.returncode == 0, schema.stdout + schema.stderr


def test_hardened(workflow):
    text = workflow.read_text()
    doc = yaml.safe_load(text)
    on = doc.get("on", doc.get(True))
    uses = re.findall(r"uses: ([^@\s]+)@(\S+)  # (v\S+)", text)
    assert len(uses) == len(re.findall(r"uses: ", text)) >= 4
    assert all(re.fullmatch(r"[0-9a-f]{40}", sha) for _, sha, _ in uses), "every action pinned by full commit SHA"
    for step in doc["jobs"]["build"]["steps"]:
        assert "${{" not in step.get("run", ""), f"an expression inside run: {step['name']}"
    assert on["push"]["branches"] == ["main"]
    assert on["push"]["tags"] == ["v*"]
    assert "pull_request" in on
    assert doc["permissions"] == {"contents": "read"}
    assert "concurrency" in doc
    login = next(s for s in doc["jobs"]["build"]["steps"] if s["name"] == "Log in to the registry")
    assert "github.event_name != 'pull_request'" in login["if"]
    owner = next(s for s in doc["jobs"]["build"]["steps"] if s["name"] == "Name the image repository")
    assert "${OWNER,,}" in owner["run"], "the registry owner is lower-cased"
    assert "provision==" not in text, "never installs the unrelated 'provision' from the package index"


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--repo", "ghcr.io/Acme/GPU"], "is not an image repository"),
        (["--repo", "ghcr.io/${{ github.event.issue.title }}/x"], "is not an image repository"),
        (["--default-branch", "main; rm -rf /"], "is not a branch name"),
    ],
)
def test_bad_options_are_refused(cli, tmp_path, args, text):
    plan = tmp_path / "a.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", "l4", "--lock", str(plan), "--format", "json").code == 0
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    r = cli("ci", "github", "--plan", str(plan), "--out", str(tmp_path / ".github" / "workflows" / "w.yml"), *args)
    assert r.code == 2, r
    assert text in r.err


def test_plans_outside_the_repository_are_refused(cli, tmp_path):
    outside = tmp_path / "outside.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", "l4", "--lock", str(outside), "--format", "json").code == 0
    workflows = tmp_path / "repo" / ".github" / "workflows"
    workflows.mkdir(parents=True)
    r = cli("ci", "github", "--plan", str(outside), "--out", str(workflows / "w.yml"))
    assert r.code == 2, r
    assert "is outside the repository" in r.err
    assert not (workflows / "w.yml").exists()
