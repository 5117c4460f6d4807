"""provision ci reads no repository file through a symbolic link and writes none through one (issue 22).

Plans, committed locks, base-digest files, the tool lock, build contexts and buildx metadata are
read with provision.documents (a link refused, content never echoed: a CI log would show a linked
secret's first line); the pipeline, the locks and image.lock.json replace a link planted at their
path, and nothing is written through a linked folder inside the repository."""

import hashlib
import json

import pytest

SECRET = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
CUDA = "12.4.1"

pytestmark = pytest.mark.usefixtures("on_tool_index", "on_ci_catalogue")


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "outside" / "credentials"
    path.parent.mkdir()
    path.write_text(SECRET + "\n")
    return path


@pytest.fixture
def repo(cli, tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "plans").mkdir(parents=True)
    (root / ".github" / "workflows").mkdir(parents=True)
    monkeypatch.chdir(root)
    for name, gpu in (("h100", "h100-sxm"), ("a100", "a100-pcie-80gb")):
        args = ["plan", "--os", "ubuntu22.04", "--gpu", gpu, "--cuda", CUDA]
        args += ["--lock", f"plans/{name}.lock.json"]
        assert cli(*args).code == 0
    return root


OUT = ".github/workflows/images.yml"


def github(cli, *args):
    return cli("ci", "github", "--variant", "base", "--out", OUT, *args)


def refused(r, what="is a symbolic link"):
    assert r.code == 2, r
    assert what in r.err, r.err
    assert "wJalrXUtnFEMI" not in r.out + r.err, "the linked file's content is not echoed"
    assert "Traceback" not in r.err


def test_a_plan_that_is_a_link_is_refused(cli, repo, secret):
    (repo / "plans" / "evil.lock.json").symlink_to(secret)
    refused(github(cli, "--plans", "plans"))
    assert not (repo / OUT).exists()


def test_a_plans_folder_that_is_a_link_is_refused(cli, repo):
    (repo / "linked").symlink_to(repo / "plans")
    refused(github(cli, "--plans", "linked"))
    refused(github(cli, "--plans", "linked/"))


def test_a_committed_lock_that_is_a_link_is_refused(cli, plan_torch, repo, secret):
    (repo / "image-locks").mkdir()
    (repo / "image-locks" / plan_torch).symlink_to(secret)
    refused(cli("ci", "github", "--plan", "plans/torch.lock.json", "--out", OUT))
    assert not (repo / OUT).exists()


@pytest.fixture
def plan_torch(cli, repo):
    """A PyTorch plan; returns the name of its committed lock in image-locks/."""
    args = ["--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "torch==2.5.1"]
    assert cli("plan", *args, "--lock", "plans/torch.lock.json").code == 0
    doc = json.loads((repo / "plans" / "torch.lock.json").read_text())
    return f"pytorch{doc['framework']['version']}-cuda{doc['cuda']['version']}-ubuntu22.04.requirements.lock"


def test_a_locks_folder_that_is_a_link_is_refused(cli, plan_torch, repo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo / "image-locks").symlink_to(elsewhere)
    refused(cli("ci", "github", "--plan", "plans/torch.lock.json", "--out", OUT), "image-locks is a symbolic link")
    assert list(elsewhere.iterdir()) == [], "nothing written through the link"


def test_base_digests_that_are_a_link_are_refused(cli, repo, secret):
    (repo / "bases.json").symlink_to(secret)
    refused(github(cli, "--plans", "plans", "--base-digests", "bases.json"))


def test_a_tool_lock_that_is_a_link_is_refused(cli, repo, secret):
    (repo / ".github" / "workflows" / "gpu-provision.lock").symlink_to(secret)
    refused(github(cli, "--plans", "plans"))
    assert not (repo / OUT).exists()


def test_a_github_folder_that_is_a_link_is_refused(cli, repo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows").rmdir()
    (repo / ".github").rmdir()
    (repo / ".github").symlink_to(elsewhere)
    refused(github(cli, "--plans", "plans"), ".github is a symbolic link")
    assert list((elsewhere / "workflows").iterdir()) == []


def test_outputs_replace_a_planted_link(cli, repo, secret):
    (repo / OUT).symlink_to(secret)
    r = github(cli, "--plans", "plans")
    assert r.code == 0, r
    assert not (repo / OUT).is_symlink()
    assert "provision images" in (repo / OUT).read_text()
    assert secret.read_text() == SECRET + "\n"


@pytest.fixture
def context(cli, repo):
    assert cli("render", "--plan", "plans/h100.lock.json", "--variant", "base", "--out", "ctx").code == 0
    return repo / "ctx"


def image_lock(cli, **change):
    options = {
        "--context": "ctx",
        "--plans": "plans/h100.lock.json",
        "--variant": "base",
        "--repo": "ghcr.io/acme/gpu",
        "--tags": "content-0123456789ab-base",
        "--image-id": "sha256:" + hashlib.sha256(b"config").hexdigest(),
        "--digest": "sha256:" + hashlib.sha256(b"manifest").hexdigest(),
        "--pushed": "false",
        "--out": "lock.json",
    }
    options.update(change)
    return cli("ci", "image-lock", *[x for kv in options.items() if kv[1] is not None for x in kv])


def test_image_lock_reads_no_link(cli, repo, context, secret):
    (repo / "meta.json").symlink_to(secret)
    refused(image_lock(cli, **{"--metadata": "meta.json", "--image-id": None, "--digest": None}))
    (context / "Dockerfile").unlink()
    (context / "Dockerfile").symlink_to(secret)
    refused(image_lock(cli))
    assert not (repo / "lock.json").exists()


def test_image_lock_replaces_a_planted_link(cli, repo, context, secret):
    (repo / "lock.json").symlink_to(secret)
    r = image_lock(cli)
    assert r.code == 0, r
    assert not (repo / "lock.json").is_symlink()
    assert json.loads((repo / "lock.json").read_text())["variant"] == "base"
    assert secret.read_text() == SECRET + "\n"


def test_context_digest_reads_no_link(cli, repo, context, secret):
    (repo / "linked-ctx").symlink_to(context)
    refused(cli("ci", "context-digest", "linked-ctx"))


# -- a reviewed-looking plan is held to the catalogue (issue 22) --------------------------------------
def redigested(path, change) -> None:
    """What an attacker does after editing a lock: recompute its digest."""
    from provision.plan.model import Plan, _load

    doc = json.loads(path.read_text())
    change(doc)
    body = {k: v for k, v in doc.items() if k != "digest"}
    doc["digest"] = _load(Plan, body).digest()
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(base_image="attacker.example/cuda:12.4.1-base-ubuntu22.04"), "base_image"),
        (lambda d: d["images"].update(base="attacker.example/cuda:12.4.1-base-ubuntu22.04"), "images"),
        (lambda d: d["cuda"].update(version="12.7.0", label="12.7 GA"), "cuda.version"),
        (
            lambda d: (
                [d["driver"].update(version="450.36.06")]
                + [p.update(version="450.36.06") for p in d["driver"]["packages"]]
            ),
            "driver.version",
        ),
    ],
    ids=["base image", "image flavour", "invented CUDA", "driver of another branch"],
)
def test_ci_refuses_a_redigested_plan_off_the_catalogue(cli, repo, change, field):
    redigested(repo / "plans" / "h100.lock.json", change)
    for command in (["github", "--out", OUT], ["gitlab", "--out", ".gitlab-ci.yml"]):
        r = cli("ci", *command, "--plans", "plans", "--variant", "base")
        assert r.code == 2, r
        assert "plans/h100.lock.json" in r.err
        assert field.split(".")[0] in r.err
    assert not (repo / OUT).exists()
    assert not (repo / ".gitlab-ci.yml").exists()


def test_image_lock_refuses_a_redigested_plan(cli, repo, context):
    redigested(repo / "plans" / "h100.lock.json", lambda d: d["cuda"].update(version="12.7.0", label="12.7 GA"))
    r = image_lock(cli)
    assert r.code == 2, r
    assert "cuda" in r.err
    assert not (repo / "lock.json").exists()
