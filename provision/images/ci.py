"""CI workflow generation: one matrix job per plan, building with provision installed from the
checked-out repository under its own hash-locked requirements, actions pinned by commit."""

import glob
import json
import os
import re

from provision.errors import CompatDataError, InputError
from provision.plan.model import read_plan
from provision.resources import compat_dir

TOOL_LOCK = "requirements/provision.lock"
ACTIONS_FILE = "ci_actions.yaml"
OWNER_PLACEHOLDER = "${{ github.repository_owner }}"


def load_actions(directory: str | None = None) -> dict[str, dict[str, str]]:
    """compat/ci_actions.yaml, checked against its schema: name -> {uses, version, sha, ...}."""
    import jsonschema
    import yaml

    base = compat_dir(directory)
    try:
        with open(os.path.join(base, ACTIONS_FILE), encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)
        with open(os.path.join(base, "schema", "ci_actions.schema.json"), encoding="utf-8") as handle:
            schema = json.load(handle)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise CompatDataError(ACTIONS_FILE, "", f"unreadable ({exc})") from None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    if error is not None:
        where = ".".join(str(x) for x in error.absolute_path)
        raise CompatDataError(ACTIONS_FILE, where, error.message)
    return doc["actions"]


def github_workflow(
    plans: list[str],
    plans_dir: str | None,
    *,
    variant: str | None,
    repo: str,
    push: bool,
    out: str,
    default_branch: str = "main",
) -> str:
    import yaml

    files = list(plans)
    if plans_dir:
        found = sorted(glob.glob(os.path.join(plans_dir, "*.lock.json")))
        if not found:
            raise InputError(f"no *.lock.json plans in {plans_dir!r}", hint="write them with provision plan --lock")
        files += found
    if not files:
        raise InputError("no plans given", hint="--plan FILE (repeatable) or --plans DIR")
    workflow_dir = os.path.dirname(os.path.abspath(out))
    repo_root = (
        os.path.dirname(os.path.dirname(workflow_dir))
        if workflow_dir.endswith(os.path.join(".github", "workflows"))
        else os.getcwd()
    )
    include = []
    for path in files:
        plan = read_plan(path)  # refuses anything that is not a plan
        relative = os.path.relpath(os.path.abspath(path), repo_root)
        if relative == os.pardir or relative.startswith(os.pardir + os.sep):
            raise InputError(
                f"plan {path!r} is outside the repository ({repo_root})",
                hint="commit the plans inside the repository the workflow builds from",
            )
        chosen = variant or (plan.framework.name if plan.framework else "base")
        include.append(
            {"name": f"{chosen}-{plan.gpu.id}-{plan.os.id}-{plan.short_digest}", "plan": relative, "variant": chosen}
        )
    if len({i["name"] for i in include}) != len(include):
        raise InputError("two plans give the same job name", hint="give each plan once")
    actions = load_actions()

    def uses(name: str) -> str:
        action = actions[name]
        return f"{action['uses']}@{action['sha']}"

    lower_owner = OWNER_PLACEHOLDER in repo
    image_repo = repo.replace(OWNER_PLACEHOLDER, "${OWNER,,}") if lower_owner else repo
    if not re.fullmatch(r"[a-z0-9][a-z0-9._:/-]*", repo.replace(OWNER_PLACEHOLDER, "owner")):
        raise InputError(
            f"--repo {repo!r} is not an image repository",
            hint="lower-case registry/owner/name, e.g. ghcr.io/acme/gpu (the owner placeholder "
            f"{OWNER_PLACEHOLDER} is lower-cased in the job)",
        )
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*", default_branch):
        raise InputError(f"--default-branch {default_branch!r} is not a branch name", hint="e.g. main")
    steps: list[dict] = [
        {"name": "Check out", "uses": uses("checkout"), "with": {"persist-credentials": False}},
        {"name": "Set up Python", "uses": uses("setup-python"), "with": {"python-version": "3.11"}},
        {
            "name": "Install provision from this repository (hash-locked requirements)",
            "run": f"python -m pip install --require-hashes --no-deps -r {TOOL_LOCK}\n"
            "python -m pip install --no-deps --no-build-isolation .",
        },
        {
            "name": "Name the image repository",
            "env": {"OWNER": "${{ github.repository_owner }}"} if lower_owner else {},
            "run": f'echo "IMAGE_REPO={image_repo}" >> "$GITHUB_ENV"',
        },
    ]
    if not lower_owner:
        steps[-1].pop("env")
    publish = (
        "github.event_name != 'pull_request' && (github.ref == format('refs/heads/{0}', '"
        + default_branch
        + "') || startsWith(github.ref, 'refs/tags/'))"
    )
    if push:
        steps.append(
            {
                "name": "Log in to the registry",
                "if": publish,
                "uses": uses("login"),
                "with": {
                    "registry": repo.split("/", maxsplit=1)[0],
                    "username": "${{ github.actor }}",
                    "password": "${{ secrets.GITHUB_TOKEN }}",
                },
            }
        )
    build_env = {"PLAN": "${{ matrix.plan }}", "VARIANT": "${{ matrix.variant }}", "JOB": "${{ matrix.name }}"}
    build = (
        'provision build --plan "$PLAN" --variant "$VARIANT" --tag "$IMAGE_REPO" --image-lock "image-lock/$JOB.json"'
    )
    if push:
        build_env["PUBLISH"] = "${{ " + publish + " }}"
        build = 'push=""\nif [ "$PUBLISH" = "true" ]; then push="--push"; fi\n' + build + " $push"
    steps += [
        {
            "name": "Build the image" + (" (push only from the default branch and tags)" if push else ""),
            "env": build_env,
            "run": "mkdir -p image-lock\n" + build,
        },
        {
            "name": "Keep the image lock",
            "uses": uses("upload-artifact"),
            "with": {"name": "image-lock-${{ matrix.name }}", "path": "image-lock/${{ matrix.name }}.json"},
        },
    ]
    paths = [*sorted({i["plan"] for i in include}), TOOL_LOCK]
    doc = {
        "name": "provision images",
        "on": {
            "push": {"branches": [default_branch], "tags": ["v*"], "paths": paths},
            "pull_request": {"paths": paths},
            "workflow_dispatch": {},
        },
        "permissions": {"contents": "read"},
        "concurrency": {
            "group": "provision-images-${{ github.ref }}",
            "cancel-in-progress": "${{ github.event_name == 'pull_request' }}",
        },
        "jobs": {
            "build": {
                "name": "${{ matrix.name }}",
                "runs-on": "ubuntu-22.04",
                "permissions": {"contents": "read", "packages": "write" if push else "read"},
                "timeout-minutes": 120,
                "strategy": {"fail-fast": False, "matrix": {"include": include}},
                "steps": steps,
            }
        },
    }
    header = (
        f"# Generated by `provision ci github` (gpu-provision): builds {len(include)} plan image(s).\n"
        "# Regenerate instead of editing. Actions are pinned by commit (compat/ci_actions.yaml).\n"
    )

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):  # one copy of each list: no &id001 anchors
            return True

    def text_block(dumper, value):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text_block)
    text = yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=200)
    for action in actions.values():
        text = text.replace(
            f"uses: {action['uses']}@{action['sha']}\n",
            f"uses: {action['uses']}@{action['sha']}  # {action['version']}\n",
        )
    return header + text
