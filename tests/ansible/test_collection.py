"""The provision.gpu collection as Ansible users get it: `ansible-galaxy collection build` makes a
tarball that installs; its playbooks load with plain ansible-playbook; ansible-doc renders every
module and role; `ansible-test sanity` passes (the collection's tests/sanity/README.md says which
tests run); execution-environment.yml is an ansible-builder version 3 definition that installs it."""

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import jsonschema
import pytest
import yaml
from paths import COLLECTION, MODULES, ROLES
from support import ROOT

BIN = Path(sys.executable).parent
MODULE_NAMES = sorted(p.stem for p in MODULES.glob("*.py"))
ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "tasks" / "main.yml").is_file())
GALAXY = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())


def tool(name: str, *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 300):
    proc = subprocess.run(
        [str(BIN / name), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1", **(env or {})},
    )
    assert proc.returncode == 0, f"{name} {' '.join(args)}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The collection built into a tarball and installed from it into a fresh collections path."""
    root = tmp_path_factory.mktemp("collection")
    tool("ansible-galaxy", "collection", "build", "--output-path", str(root), str(COLLECTION), cwd=root)
    tarball = root / f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"
    assert tarball.is_file(), sorted(p.name for p in root.iterdir())
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    assert not any(n.startswith("tests/output") for n in names), "ansible-test's output was packed"
    tool("ansible-galaxy", "collection", "install", "-p", str(root / "path"), str(tarball), cwd=root)
    return root / "path"


def test_tarball_holds_the_roles_modules_and_playbooks(installed):
    got = installed / "ansible_collections" / "provision" / "gpu"
    assert sorted(p.stem for p in (got / "plugins" / "modules").glob("*.py")) == MODULE_NAMES
    assert sorted(p.name for p in (got / "roles").iterdir()) == ROLE_NAMES
    assert {"preflight", "nvidia_driver", "container_runtime", "mig"} <= set(ROLE_NAMES)
    assert {p.name for p in (got / "playbooks").iterdir()} == {"site.yml", "release_lock.yml", "vars"}
    assert sorted(p.name for p in (got / "playbooks" / "vars").iterdir()) == ["converged_state.yml", "safety.yml"]
    manifest = json.loads((got / "MANIFEST.json").read_text())["collection_info"]
    assert (manifest["namespace"], manifest["name"]) == ("provision", "gpu")


@pytest.mark.parametrize("playbook", ["provision.gpu.site", "provision.gpu.release_lock"])
def test_installed_playbook_loads_with_plain_ansible_playbook(installed, tmp_path, playbook):
    """From a directory with no ansible.cfg and no roles: only the installed collection."""
    proc = tool(
        "ansible-playbook",
        "--syntax-check",
        "-i",
        "localhost,",
        playbook,
        cwd=tmp_path,
        env={"ANSIBLE_COLLECTIONS_PATH": str(installed), "ANSIBLE_ROLES_PATH": str(tmp_path)},
    )
    assert f"playbook: {installed}/ansible_collections/provision/gpu/playbooks/" in proc.stdout


def test_ansible_doc_renders_every_module(installed, tmp_path):
    names = [f"provision.gpu.{m}" for m in MODULE_NAMES]
    env = {"ANSIBLE_COLLECTIONS_PATH": str(installed)}
    docs = json.loads(tool("ansible-doc", "-t", "module", "--json", *names, cwd=tmp_path, env=env).stdout)
    assert sorted(docs) == names
    for name, doc in docs.items():
        assert doc["doc"]["short_description"], name
        assert doc["doc"]["options"], name
        assert name in (doc["examples"] or ""), f"{name} has no example using it"
        assert doc["return"], name
    text = tool("ansible-doc", "-t", "module", *names, cwd=tmp_path, env=env).stdout
    assert all(f"> MODULE {n}" in text for n in names), text[:2000]


def test_ansible_doc_renders_every_role(installed, tmp_path):
    names = [f"provision.gpu.{r}" for r in ROLE_NAMES]
    env = {"ANSIBLE_COLLECTIONS_PATH": str(installed)}
    docs = json.loads(tool("ansible-doc", "-t", "role", "--json", *names, cwd=tmp_path, env=env).stdout)
    assert sorted(docs) == names
    for name, doc in docs.items():
        main = doc["entry_points"]["main"]
        assert main["short_description"], name
        assert main["options"], f"{name} documents no options"
    text = tool("ansible-doc", "-t", "role", *names, cwd=tmp_path, env=env).stdout
    shown = re.findall(r"^> ROLE: \W*([\w.]+)\W* \(", text, re.M)
    assert sorted(shown) == names, text[:2000]


# ---------------------------------------------------------------------------------- ansible-test


def _pip_bootstrap_version() -> str:
    """The pip version ansible-test bootstraps into each sanity virtual environment."""
    import ansible_test

    source = Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
    found = re.search(r"pip='([0-9.]+)'", source.read_text())
    assert found, f"ansible-test's pip version not found in {source}: update _pip_bootstrap_version"
    return found.group(1)


@pytest.mark.slow
@pytest.mark.network
def test_ansible_test_sanity_passes(tmp_path):
    """Every sanity test of the installed ansible-test, on Python 3.11, without containers. The first
    run builds ansible-test's per-test virtual environments from PyPI (about 2 minutes); later runs
    reuse them from ~/.ansible/test/venv (about 30 s)."""
    from ansible.release import __version__ as core_version

    major_minor = ".".join(core_version.split(".")[:2])
    ignore = COLLECTION / "tests" / "sanity" / f"ignore-{major_minor}.txt"
    assert ignore.is_file(), f"no {ignore.name} for ansible-core {core_version}: copy the newest one and re-check it"
    # ansible-test puts pip into its virtual environments with get-pip.py fetched from a host only
    # ansible's CI reaches; pip_bootstrap.py does the same from PyPI (it is not replaced when present).
    cache = Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{_pip_bootstrap_version().replace('.', '_')}.py"
    if not cache.is_file():
        cache.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(__file__).with_name("pip_bootstrap.py"), cache)
    # A copy, so that tests/output never lands in the checkout (nor in the wheel built from it).
    copy = tmp_path / "ansible_collections" / "provision" / "gpu"
    shutil.copytree(COLLECTION, copy, ignore=shutil.ignore_patterns("output", "__pycache__", "*.tar.gz"))
    proc = subprocess.run(
        [str(BIN / "ansible-test"), "sanity", "--python", "3.11", "--local", "--color", "no"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    ran = re.findall(r'^Running sanity test "([^"]+)"', out, re.M)
    documented = (COLLECTION / "tests" / "sanity" / "README.md").read_text()
    for name in ran:
        assert f"`{name}`" in documented, f"sanity test {name} runs but tests/sanity/README.md does not list it"
    assert {"ansible-doc", "validate-modules", "pylint", "pep8", "compile", "import", "yamllint", "shebang"} <= set(ran)


# ---------------------------------------------------------------------------- execution environment

# ansible-builder 3.x's definition schema for `version: 3` (its documented top-level sections and
# their keys; ansible_builder/ee_schema.py), restated so this test runs without ansible-builder.
_STRINGS = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
_PIP = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"package_pip": {"type": "string"}},
    "required": ["package_pip"],
}
EE_V3_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["version"],
    "properties": {
        "version": {"const": 3},
        "build_arg_defaults": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                k: {"type": "string"}
                for k in ("ANSIBLE_GALAXY_CLI_COLLECTION_OPTS", "ANSIBLE_GALAXY_CLI_ROLE_OPTS", "PKGMGR_PRESERVE_CACHE")
            },
        },
        "dependencies": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "python": _STRINGS,
                "galaxy": {"anyOf": [{"type": "object"}, *_STRINGS["anyOf"]]},
                "system": _STRINGS,
                "python_interpreter": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"package_system": {"type": "string"}, "python_path": {"type": "string"}},
                },
                "ansible_core": _PIP,
                "ansible_runner": _PIP,
                "exclude": {"type": "object"},
            },
        },
        "images": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "base_image": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "signature_original_name": {"type": "string"}},
                }
            },
        },
        "additional_build_steps": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                f"{when}_{stage}": _STRINGS
                for when in ("prepend", "append")
                for stage in ("base", "galaxy", "builder", "final")
            },
        },
        "additional_build_files": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"src": {"type": "string"}, "dest": {"type": "string"}},
                "required": ["src", "dest"],
            },
        },
        "options": {"type": "object"},
    },
}


def _locked(name: str) -> str:
    found = re.search(rf"^{re.escape(name)}==(\S+)", (ROOT / "requirements" / "provision.lock").read_text(), re.M)
    assert found, name
    return found.group(1)


def test_execution_environment_is_a_v3_definition_with_the_collection():
    path = ROOT / "execution-environment.yml"
    ee = yaml.safe_load(path.read_text())
    jsonschema.validate(ee, EE_V3_SCHEMA)
    deps = ee["dependencies"]
    # the controller runs the versions provision is tested with
    assert deps["ansible_core"]["package_pip"] == f"ansible-core=={_locked('ansible-core')}"
    assert deps["ansible_runner"]["package_pip"] == f"ansible-runner=={_locked('ansible-runner')}"
    assert ee["images"]["base_image"]["name"]
    # the collection directory goes into the build context (_build/<dest>, which is /build/<dest>
    # in the galaxy stage) and ansible-galaxy installs it from there
    (files,) = [f for f in ee["additional_build_files"] if (path.parent / f["src"]).resolve() == COLLECTION.resolve()]
    assert not Path(files["dest"]).is_absolute()
    assert ".." not in Path(files["dest"]).parts
    (entry,) = deps["galaxy"]["collections"]
    assert entry == {"name": f"/build/{files['dest']}", "type": "dir"}
    # nothing else to install: the roles use ansible.builtin and provision.gpu only
    used = set()
    for task_file in COLLECTION.glob("**/*.yml"):
        used |= set(re.findall(r"^\s*-?\s*([a-z_]+\.[a-z_]+)\.[a-z_]+:", task_file.read_text(), re.M))
    assert used <= {"ansible.builtin", "provision.gpu"}, used
    assert GALAXY.get("dependencies") in (None, {})
