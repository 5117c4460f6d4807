"""Hostile input, round two (issue 22), on the controller: nothing a file, an inventory or `-e` says
runs here. Each attack uses the issue's payload and is refused with exit 2 before anything runs,
or reaches Ansible as inert data (checked with ansible-playbook itself where it templates).

Plans come from the fixture catalogue (tests/fixtures/compat); Ansible is faked at ansible-runner's
edge (ansible_runner.run) unless a test runs ansible-playbook on localhost itself."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from support import ROOT

from provision.errors import InputError
from provision.fleet.extravars import dump_unsafe_yaml, to_extravars
from provision.fleet.inventory import load_fleet, load_inventory

pytestmark = pytest.mark.usefixtures("on_fixture_catalogue")

GPU = "a100-pcie-80gb"  # a fixture catalogue id
HOSTS = {
    "n1": {"ansible_host": "127.0.0.1", "ansible_port": 2201},
    "n2": {"ansible_host": "127.0.0.1", "ansible_port": 2202},
}
SITE_VARS = ROOT / "playbooks/collections/ansible_collections/provision/gpu/playbooks/vars/converged_state.yml"


def jinja2_header(marker: Path) -> str:
    """The issue's -e payload: a #jinja2: header that sets new delimiters, then a lookup in them."""
    return f"#jinja2:variable_start_string:'[[', variable_end_string:']]'\n[[ lookup(\"pipe\", \"touch {marker}\") ]]"


def inventory(tmp_path: Path, hosts: dict | None = None, group_vars: dict | None = None, name="inv.yml") -> str:
    group = {"hosts": hosts if hosts is not None else json.loads(json.dumps(HOSTS))}
    if group_vars:
        group["vars"] = group_vars
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"all": {"children": {"a100": group}}}))
    return str(path)


def fleet(tmp_path: Path, text: str | None = None, name="fleet.yaml") -> str:
    path = tmp_path / name
    path.write_text(text if text is not None else f"groups:\n  a100: {{os: rocky9, gpu: {GPU}}}\n")
    return str(path)


@pytest.fixture
def ansible(monkeypatch):
    """ansible_runner.run faked: records each call; `result` sets what the run reports."""
    import ansible_runner

    state = SimpleNamespace(calls=[], status="successful", rc=0, stats={"ok": {"n1": 3, "n2": 3}})

    def run(**kwargs):
        state.calls.append(kwargs)
        return SimpleNamespace(
            status=state.status, rc=state.rc, stats=state.stats, config=SimpleNamespace(ident="fake")
        )

    monkeypatch.setattr(ansible_runner, "run", run)
    return state


def apply(cli, tmp_path, *args, inv=None, fleet_file=None, run="run"):
    return cli(
        "apply",
        "-i",
        inv or inventory(tmp_path),
        "--fleet",
        fleet_file or fleet(tmp_path),
        "--run-dir",
        str(tmp_path / run),
        *args,
    )


def refused(r, text: str) -> None:
    assert r.code == 2, r
    assert text in r.err, r
    lines = r.err.strip().splitlines()
    assert [line.split(": ")[0] for line in lines] == ["error", "hint"], r.err
    assert "Traceback" not in r.err


def ansible_playbook(tmp_path: Path, play: str, vars_file: Path) -> subprocess.CompletedProcess:
    (tmp_path / "play.yml").write_text(play)
    exe = Path(sys.executable).with_name("ansible-playbook")
    return subprocess.run(
        [str(exe), "-i", "localhost,", str(tmp_path / "play.yml"), "-e", f"@{vars_file}"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "False"},
        cwd=tmp_path,
    )


# -- 1. -e: every string is data; only the roles' variables ------------------------------------------
def test_a_jinja2_header_in_e_is_refused_before_anything_runs(cli, tmp_path, ansible):
    marker = tmp_path / "MARKER"
    r = apply(cli, tmp_path, "--check", "-e", f"preflight_min_free_mb={jinja2_header(marker)}")
    refused(r, "-e preflight_min_free_mb holds the control character U+000A")
    assert ansible.calls == []
    assert not marker.exists()
    assert not (tmp_path / "run").exists()


def test_a_jinja2_header_reaches_ansible_as_text(tmp_path):
    """The real consumer: the check play's inputs digest templates every role variable on the
    controller before any host is contacted (how the issue's payload ran). Written by
    dump_unsafe_yaml, the header is text: nothing runs, and the value comes back as written."""
    marker = tmp_path / "MARKER"
    payload = jinja2_header(marker)
    vars_file = tmp_path / "extravars"
    vars_file.write_text(dump_unsafe_yaml({"provision_roles_digest": "0" * 64, "preflight_min_free_mb": payload}))
    out = tmp_path / "value.txt"
    play = (
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n"
        f"  vars: {{ansible_python_interpreter: {sys.executable}}}\n"
        f"  vars_files: [{SITE_VARS}]\n  tasks:\n"
        "    - ansible.builtin.set_fact:\n        digest: '{{ provision_inputs_digest }}'\n"
        f"    - ansible.builtin.copy:\n        dest: {out}\n        content: '{{{{ preflight_min_free_mb }}}}'\n"
    )
    proc = ansible_playbook(tmp_path, play, vars_file)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not marker.exists(), "the lookup ran on the controller"
    assert out.read_text() == payload, "the value is the text as written"


STRINGS = {
    # strings YAML would read as something else unquoted: they must stay these strings
    "number": "580",
    "float": "12.4",
    "version": "9.10",
    "empty": "",
    "bool": "true",
    "yes": "yes",
    "null": "null",
    "tilde": "~",
    "date": "2024-01-16",
    "sexagesimal": "12:30:00",
    "hex": "0x1F",
    "merge": "<<",
    # strings that are templates to Ansible
    "braces": "{{ lookup('pipe', 'id') }}",
    "header": "#jinja2:variable_start_string:'[[', variable_end_string:']]'\n[[ lookup('pipe', 'id') ]]",
    "block": "{% for x in [1] %}{{ x }}{% endfor %}",
    "plain": "nvidia-open",
}
TYPED = {"int": 580, "zero": 0, "true": True, "false": False, "none": None, "float": 1.5, "list": [1, "1.0", True]}


def test_every_string_is_untrusted_and_every_value_keeps_its_type():
    from ansible.parsing.yaml.loader import AnsibleLoader
    from ansible.template import is_trusted_as_template

    variables = {**{f"s_{k}": v for k, v in STRINGS.items()}, **TYPED, "nested": {"k": list(STRINGS.values())}}
    text = dump_unsafe_yaml(variables)
    loaded = AnsibleLoader(text).get_single_data()
    assert loaded == variables
    for key, value in TYPED.items():  # typed, not strings
        assert isinstance(loaded[key], type(value)), key
        assert isinstance(loaded[key], bool) == isinstance(value, bool), key
    strings = [loaded[f"s_{k}"] for k in STRINGS] + loaded["nested"]["k"] + [loaded["list"][1]]
    assert all(isinstance(s, str) for s in strings), "number-like strings stay strings"
    templates = {STRINGS["braces"], STRINGS["header"], STRINGS["block"], STRINGS["plain"]}
    for s in strings:
        if s in templates:  # a string that can be a template is always tagged
            assert not is_trusted_as_template(s), s
        else:  # written quoted without the tag (YAML would type it): nothing a template needs
            assert "{" not in s, s
            assert not s.startswith("#"), s
    tagged = [line for line in text.splitlines() if "!unsafe" in line]
    assert len(tagged) == 8, text  # the four template-able strings, at the top and in the nested list


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("ansible_ssh_common_args=-o ProxyCommand=touch MARKER", "-e ansible_ssh_common_args is Ansible's own"),
        ("ansible_connection=local", "-e ansible_connection is Ansible's own"),
        ("ansible_python_interpreter=/tmp/x", "-e ansible_python_interpreter is Ansible's own"),
        ("provision_health_gate=false", "-e provision_health_gate is the plan's or apply's"),
        ("provision_drain_command=touch MARKER", "-e provision_drain_command is the plan's or apply's"),
        ("provision_serial=0", "-e provision_serial is the plan's or apply's"),
        ("site_value=1", "-e site_value is not a variable of provision's roles"),
        ("Preflight_x=1", "is not a variable of provision's roles"),
        ("preflight_check_gpu_processes=false", "-e preflight_check_gpu_processes is a safety switch"),
        ("mig_allow_reset=true", "-e mig_allow_reset is a safety switch"),
        ("nvidia_driver_reboot_timeout=0", "nvidia_driver_reboot_timeout is 0: it must be from"),
        ("preflight_min_free_mb=lots", "preflight_min_free_mb is 'lots', not a whole number"),
        ("nvidia_driver_hold=maybe", "-e sets nvidia_driver_hold: 'maybe', which Ansible does not read as a boolean"),
        ("@vars.yml", "is not KEY=VALUE"),
    ],
)
def test_e_takes_only_the_roles_variables(cli, tmp_path, ansible, item, says):
    r = apply(cli, tmp_path, "-e", item)
    refused(r, says)
    assert ansible.calls == []
    assert not (tmp_path / "MARKER").exists()


def test_e_role_variables_reach_ansible_as_data(cli, tmp_path, ansible):
    from ansible.parsing.yaml.loader import AnsibleLoader
    from ansible.template import is_trusted_as_template

    url = "http://127.0.0.1:8080/{{ lookup('pipe', 'id') }}"
    r = apply(cli, tmp_path, "-e", f"nvidia_driver_repo_url={url}", "-e", "preflight_min_free_mb=4096")
    assert r.code == 0, r
    extravars = tmp_path / "run" / "env" / "extravars"
    loaded = AnsibleLoader(extravars.read_text()).get_single_data()
    assert loaded["nvidia_driver_repo_url"] == url
    assert not is_trusted_as_template(loaded["nvidia_driver_repo_url"])
    assert loaded["preflight_min_free_mb"] == "4096", "a string, as ansible-playbook's own -e KEY=VALUE gives"


# -- 2. inventories are data only ------------------------------------------------------------------
def test_an_executable_inventory_is_refused_unrun(cli, tmp_path, ansible):
    marker = tmp_path / "MARKER"
    script = tmp_path / "inventory.sh"
    script.write_text(f'#!/bin/sh\ntouch {marker}\necho \'{{"a100": {{"hosts": ["n1"]}}}}\'\n')
    script.chmod(0o755)
    for args in (("inventory", "check", "-i", str(script)), ("apply", "-i", str(script), "--fleet", fleet(tmp_path))):
        r = cli(*args)
        refused(r, f"inventory file {str(script)!r} is executable")
    with pytest.raises(InputError, match="is executable"):
        load_inventory(str(script))  # verify and doctor read inventories through it
    assert not marker.exists()
    assert ansible.calls == []


def test_an_inventory_directory_with_an_executable_or_a_plugin_is_refused(cli, tmp_path):
    marker = tmp_path / "MARKER"
    folder = tmp_path / "inventory"
    (folder / "group_vars").mkdir(parents=True)
    (folder / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"a100": {"hosts": HOSTS}}}}))
    (folder / "group_vars" / "all.yml").write_text("nvidia_driver_hold: true\n")
    assert cli("inventory", "check", "-i", str(folder)).code == 0
    generator = folder / "more.yml"  # an inventory plugin configuration: its templates run here
    generator.write_text(
        "plugin: ansible.builtin.generator\n"
        f"hosts:\n  name: \"{{{{ lookup('pipe', 'touch {marker}') }}}}x{{{{ operation }}}}\"\n"
        "layers:\n  operation: [build]\n"
    )
    refused(cli("inventory", "check", "-i", str(folder)), "is an inventory plugin configuration")
    generator.unlink()
    script = folder / "cloud.py"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o700)
    refused(cli("inventory", "check", "-i", str(folder)), f"inventory file {str(script)!r} is executable")
    assert not marker.exists()


HOSTILE_NAMES = ["--selector=nvidia.com/gpu.present=true", "gpu2?ssh_config=FILE", "a b"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_host_names_are_host_names_in_every_command(cli, tmp_path, ansible, name):
    inv = inventory(tmp_path, {name: {"ansible_host": "127.0.0.1"}})
    with pytest.raises(InputError, match="the host name") as info:
        load_inventory(inv)  # apply, verify and doctor read inventories through it
    assert "\n" not in info.value.message
    refused(apply(cli, tmp_path, inv=inv), "the host name")
    refused(cli("doctor", "-i", inv), "the host name")
    refused(cli("verify", "-i", inv, "--fleet", fleet(tmp_path)), "the host name")
    check = cli("inventory", "check", "-i", inv)
    assert check.code == 2, check
    assert "  FAIL  host names: 1 problem(s)" in check.out
    assert ansible.calls == []


CONNECTION_ATTACKS = [
    # (variable, value, what the refusal says)
    ("ansible_ssh_common_args", "-o ProxyCommand=touch MARKER", "ProxyCommand, which runs a program on this machine"),
    ("ansible_ssh_common_args", "-oLocalCommand=touch MARKER -oPermitLocalCommand=yes", "LocalCommand"),
    ("ansible_ssh_extra_args", "-o PermitLocalCommand=yes", "PermitLocalCommand"),
    ("ansible_ssh_args", "-o KnownHostsCommand=/tmp/x", "KnownHostsCommand"),
    ("ansible_ssh_extra_args", "-o StrictHostKeyChecking=no; touch MARKER", "holds ';'"),
    ("ansible_ssh_common_args", "-F /tmp/attacker_ssh_config", "sets -F"),
    ("ansible_host", "127.0.0.1 -oProxyCommand=x", "ansible_host '127.0.0.1 -oProxyCommand=x' holds ' '"),
    ("ansible_user", "$(touch MARKER)", "is not a user name"),
    ("ansible_port", "22;touch MARKER", "is not a TCP port"),
    ("ansible_python_interpreter", "/usr/bin/python3;touch MARKER", "holds ';'"),
    ("ansible_become_exe", "sudo `touch MARKER`", "holds '`'"),
    ("ansible_ssh_executable", "/tmp/evil", "is not ssh"),
    ("ansible_scp_extra_args", "-S /tmp/evil", "-S"),  # scp's -S names the program it runs as ssh
    ("ansible_host", "{{ lookup('pipe', 'touch MARKER') }}", "ansible_host"),
]


@pytest.mark.parametrize(("variable", "value", "says"), CONNECTION_ATTACKS)
def test_connection_variables_are_data(cli, tmp_path, ansible, variable, value, says):
    hosts = json.loads(json.dumps(HOSTS))
    hosts["n2"][variable] = value
    inv = inventory(tmp_path, hosts)
    r = apply(cli, tmp_path, inv=inv)
    refused(r, says)
    assert "n2: " in r.err
    refused(cli("doctor", "-i", inv), says)
    check = cli("inventory", "check", "-i", inv)
    assert "  FAIL  connection variables: 1 problem(s)" in check.out, check
    assert ansible.calls == []
    assert not (tmp_path / "MARKER").exists()


def test_the_fleet_harness_inventory_passes(cli, tmp_path):
    """What the test fleet (and a typical site) sets is accepted."""
    inv = inventory(
        tmp_path,
        group_vars={
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(tmp_path / "key"),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_extra_args": "-o ProxyJump=bastion.example.net -J admin@bastion2",
            "ansible_become_password": "p4$$w0rd;`x`",  # a secret is data, never a command here
            "provision_drain_timeout": 1800,
            "preflight_check_gpu_processes": True,
            "mig_allow_reset": "no",
        },
    )
    (tmp_path / "key").write_text("")
    assert len(load_inventory(inv).hosts) == 2
    r = cli("inventory", "check", "-i", inv, "--fleet", fleet(tmp_path))
    assert r.code == 0, r


# -- 3. the safety switches: only apply's named flags --------------------------------------------------
SWITCH_ATTACKS = [
    ({"preflight_check_gpu_processes": False}, "preflight_check_gpu_processes: false, which turns a guard off"),
    ({"provision_health_gate": False}, "provision_health_gate: false, which turns a guard off"),
    ({"mig_allow_reset": True}, "mig_allow_reset: true, which turns a guard off"),
    ({"provision_allow_disruption": "yes"}, "provision_allow_disruption: true, which turns a guard off"),
    ({"provision_health_gate": "{{ false }}"}, "which Ansible does not read as a boolean"),
    ({"provision_health_gate": "y"}, "provision_health_gate: 'y', which Ansible does not read as a boolean"),
    ({"provision_task_timeout": 0}, "provision_task_timeout is 0: it must be from 30 to 86400 seconds"),
    ({"provision_drain_timeout": 0}, "provision_drain_timeout is 0"),
    ({"nvidia_driver_reboot_timeout": "0"}, "nvidia_driver_reboot_timeout is 0"),
    ({"provision_lock_ttl": 0}, "provision_lock_ttl is 0"),
    ({"provision_serial": 0}, "provision_serial: 0: each batch is a positive number"),
    ({"provision_drain_command": "touch MARKER"}, "a command for the controller comes only from"),
]


@pytest.mark.parametrize(("group_vars", "says"), SWITCH_ATTACKS)
def test_an_inventory_cannot_turn_a_guard_off(cli, tmp_path, ansible, group_vars, says):
    inv = inventory(tmp_path, group_vars=group_vars)
    r = apply(cli, tmp_path, inv=inv)
    refused(r, says)
    assert "(and 1 more)" in r.err, "both hosts inherit the group's value"
    refused(cli("doctor", "-i", inv), says)
    check = cli("inventory", "check", "-i", inv, "--fleet", fleet(tmp_path))
    assert check.code == 2
    assert "  FAIL  safety switches: 2 problem(s)" in check.out
    assert " ".join(check.err.split()).count(says) == 1, "one problem for the hosts sharing it (wrapped to COLUMNS)"
    assert "error: n1, n2: the inventory" in check.err
    assert ansible.calls == []


def test_apply_refuses_a_role_boolean_ansible_would_not_read(cli, tmp_path, ansible):
    """Any boolean the roles read (safety.yml's provision_boolean_variables), not only the switches:
    apply and inventory check refuse what the check play would refuse on every host."""
    inv = inventory(tmp_path, group_vars={"nvidia_driver_hold": "maybe"})
    says = "nvidia_driver_hold: 'maybe', which Ansible does not read as a boolean"
    refused(apply(cli, tmp_path, inv=inv), says)
    check = cli("inventory", "check", "-i", inv, "--fleet", fleet(tmp_path))
    assert "  FAIL  safety switches: 2 problem(s)" in check.out
    assert says in " ".join(check.err.split())  # wrapped to COLUMNS
    assert ansible.calls == []


def test_ini_booleans_are_read_as_ansible_reads_them(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_text("[a100]\nn1 ansible_host=127.0.0.1\n[a100:vars]\nprovision_health_gate=False\n")
    with pytest.raises(InputError, match="provision_health_gate: false, which turns a guard off"):
        load_inventory(str(path))
    path.write_text("[a100]\nn1 ansible_host=127.0.0.1\n[a100:vars]\nprovision_health_gate=True\n")
    assert load_inventory(str(path)).hosts["n1"]["provision_health_gate"] in (True, "True")


def test_the_flags_turn_guards_off_and_the_summary_says_which(cli, tmp_path, ansible):
    r = apply(cli, tmp_path, "--no-health-gate", "--no-gpu-process-check", "--allow-mig-reset")
    assert r.code == 0, r
    extravars = ansible.calls[0]["private_data_dir"] + "/env/extravars"
    loaded = yaml.safe_load(Path(extravars).read_text().replace("!unsafe", ""))
    assert loaded["provision_health_gate"] is False
    assert loaded["preflight_check_gpu_processes"] is False
    assert loaded["mig_allow_reset"] is True
    assert loaded["provision_allow_disruption"] is False
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [(g["flag"], g["variable"], g["value"]) for g in summary["guards_off"]] == [
        ("--no-health-gate", "provision_health_gate", False),
        ("--no-gpu-process-check", "preflight_check_gpu_processes", False),
        ("--allow-mig-reset", "mig_allow_reset", True),
    ]
    assert "guard off by --no-health-gate: a changed host returns to service" in r.out
    assert "guard off by --allow-mig-reset:" in r.out
    plain = apply(cli, tmp_path, run="plain")
    assert plain.code == 0
    assert json.loads((tmp_path / "plain" / "summary.json").read_text())["guards_off"] == []
    assert "guard off" not in plain.out
    assert "provision_health_gate" not in Path(ansible.calls[1]["private_data_dir"], "env/extravars").read_text()
    for flag in ("--no-health-gate", "--no-gpu-process-check", "--allow-mig-reset"):
        assert flag in cli("apply", "--help").out


# -- 4. inventory check says what it checked ------------------------------------------------------------
def test_inventory_check_lists_its_checks(cli, tmp_path):
    r = cli("inventory", "check", "-i", inventory(tmp_path), "--fleet", fleet(tmp_path))
    assert r.code == 0, r
    assert "sane" not in r.out
    assert "no host was contacted" in r.out
    for line in (
        "  pass  inventory data: read as YAML/INI only",
        "  pass  host names: 2 inventory host name(s)",
        "  pass  connection variables:",
        "  pass  safety switches:",
        "  pass  groups: every host in exactly one planned group",
        "  pass  plans: 1 group plan(s) resolve",
    ):
        assert line in r.out, r.out
    bare = cli("inventory", "check", "-i", inventory(tmp_path))
    assert bare.code == 0
    assert "  skip  plans: not checked" in bare.out
    assert "planned groups not checked" in bare.out


# -- 5. the run folder ------------------------------------------------------------------------------------
def test_the_run_folder_is_private_and_its_summary_says_the_exit_code(cli, tmp_path, ansible):
    ansible.status, ansible.rc, ansible.stats = "failed", 4, {"ok": {"n1": 3}, "dark": {"n2": 1}}
    r = apply(cli, tmp_path, "-e", "nvidia_driver_repo_url=http://127.0.0.1:8080/secret-token")
    assert r.code == 1, r
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rc"] == 1
    assert summary["ansible_rc"] == 4
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    files = [p for p in run.rglob("*") if p.is_file()]
    assert {p.relative_to(run).as_posix() for p in files} >= {
        "summary.json",
        "env/extravars",
        "plans/a100.lock.json",
        "plans/a100.yml",
    }
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {"0o600"}
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in run.rglob("*") if p.is_dir()} == {"0o700"}
    assert ansible.calls[0]["envvars"]["ANSIBLE_INVENTORY_ENABLED"] == "ansible.builtin.yaml,ansible.builtin.ini"


def test_a_run_folder_that_is_a_link_or_not_empty_is_refused(cli, tmp_path, ansible):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere)
    refused(apply(cli, tmp_path, run="link"), "is not a folder (a symbolic link is not followed)")
    (elsewhere / "old.txt").write_text("x")
    refused(apply(cli, tmp_path, run="elsewhere"), "exists and is not empty")
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o755)
    assert apply(cli, tmp_path, run="empty").code == 0
    assert stat.S_IMODE(empty.stat().st_mode) == 0o700
    assert len(ansible.calls) == 1


# -- 6. --serial 0 stays refused ---------------------------------------------------------------------------
@pytest.mark.parametrize("serial", ["0", "0%", "-1", "00", "101%", "1,2", " 1"])
def test_serial_zero_is_refused(cli, tmp_path, ansible, serial):
    """Ansible reads serial 0 as every host at once."""
    refused(apply(cli, tmp_path, f"--serial={serial}"), f"--serial {serial!r} is not a host count or percentage")
    assert ansible.calls == []
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("serial", ["1", "10", "100%", "5%"])
def test_positive_serials_reach_ansible(cli, tmp_path, ansible, serial):
    assert apply(cli, tmp_path, "--serial", serial).code == 0
    text = Path(ansible.calls[0]["private_data_dir"], "env/extravars").read_text()
    tag = "" if serial.isdigit() else "!unsafe "  # '10' unquoted is an integer to YAML: quoted, not tagged
    assert f"'provision_serial': {tag}'{serial}'\n" in text


# -- 7. fleet files --------------------------------------------------------------------------------------
def test_an_unquoted_version_is_refused_naming_key_and_line(cli, tmp_path, ansible):
    path = fleet(tmp_path, f"groups:\n  a100:\n    os: rocky9\n    gpu: {GPU}\n    cudnn: 9.10\n")
    for args in (("inventory", "check", "-i", inventory(tmp_path), "--fleet", path),):
        refused(cli(*args), "line 5: cudnn: 9.10 is read by YAML as a float, not a version")
    r = apply(cli, tmp_path, fleet_file=path)
    refused(r, "line 5: cudnn: 9.10 is read by YAML as a float")
    assert 'hint: quote it: cudnn: "9.10"' in r.err
    assert ansible.calls == []
    path = fleet(tmp_path, f"groups:\n  a100: {{os: rocky9, gpu: {GPU}, driver: 580}}\n")
    refused(apply(cli, tmp_path, fleet_file=path), "driver: 580 is read by YAML as a int, not a version")


ALIAS_BOMB = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
    "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
    "i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
    "groups: {a100: {os: rocky9, gpu: *i}}\n"
)


def test_an_alias_bomb_fleet_file_is_refused_at_once(cli, tmp_path, ansible):
    assert len(ALIAS_BOMB) < 620
    start = time.monotonic()
    refused(apply(cli, tmp_path, fleet_file=fleet(tmp_path, ALIAS_BOMB)), "anchors and aliases")
    assert time.monotonic() - start < 10
    assert ansible.calls == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (f"groups:\n  a100: {{os: rocky9, gpu: {GPU}}}\n  a100: {{os: rocky9, gpu: {GPU}}}\n", "'a100' appears twice"),
        (f"groups:\n  a100: {{os: rocky9, gpu: {GPU}, os: ubuntu22.04}}\n", "the key 'os' appears twice"),
        ("groups: " + "[" * 40 + "]" * 40 + "\n", "nests deeper than"),
        (f"groups:\n  a100: {{os: rocky9, gpu: {GPU}, colour: red}}\n", "unknown keys ['colour']"),
        (f"group:\n  a100: {{os: rocky9, gpu: {GPU}}}\n", "has no groups"),
        (f"groups:\n  a100: {{os: rocky9, gpu: {GPU}}}\nextra: 1\n", "unknown top-level keys ['extra']"),
        (f"groups:\n  a100: {{os: rocky9, gpu: {GPU}, host_only: 'yes'}}\n", "host_only must be true or false"),
        (f"groups:\n  a100: {{os: rocky9, gpu: {GPU}, host_only: 1}}\n", "host_only must be true or false"),
        (f"groups:\n  a100: {{os: rocky9, gpu: {GPU}, images: []}}\n", "images must be a list of image lock files"),
        (f"groups:\n  a100: {{os: rocky9, gpu: {GPU}, images: x.json}}\n", "images must be a list"),
        (
            f'groups:\n  a100: {{os: rocky9, gpu: {GPU}, images: ["a\\nb.json"]}}\n',
            "images entry 1 must be a file path",
        ),
        (f'groups:\n  a100: {{os: rocky9, gpu: {GPU}, images: ["a\\u0000.json"]}}\n', "images entry 1 must be a file"),
        (f"groups:\n  a100: {{os: rocky9, gpu: {GPU}, images: [a.json, a.json]}}\n", "lists an image twice"),
        (f"groups:\n  a100: {{os: rocky9, gpu: {GPU}, image_os: 22.04}}\n", "image_os must be a string"),
        ("groups:\n  a100: {lock: a.json, cuda: '12.4'}\n", "mixes lock with request fields (cuda)"),
    ],
)
def test_bad_fleet_files_are_refused(tmp_path, text, says):
    with pytest.raises(InputError) as info:
        load_fleet(fleet(tmp_path, text))
    assert says in info.value.message
    assert info.value.hint
    assert "\n" not in info.value.message


def test_a_fleet_file_that_is_a_link_is_not_followed(tmp_path):
    target = Path(fleet(tmp_path, name="real.yaml"))
    (tmp_path / "fleet.yaml").symlink_to(target)
    with pytest.raises(InputError, match="is a symbolic link"):
        load_fleet(str(tmp_path / "fleet.yaml"))


def test_the_new_fleet_keys(tmp_path):
    sub = tmp_path / "fleets"
    sub.mkdir()
    path = fleet(
        sub,
        "groups:\n"
        f"  t4: {{os: rocky9, gpu: {GPU}, image_os: ubuntu22.04, cudnn: '9.10', images: [train.lock.json, ../serve/image.lock.json]}}\n"
        f"  hosts: {{os: rocky9, gpu: {GPU}, host_only: true}}\n"
        "  pinned: {lock: pinned.lock.json, images: [/abs/image.lock.json]}\n"
        f"  plain: {{os: rocky9, gpu: {GPU}, host_only: false}}\n",
    )
    t4, hosts, pinned, plain = load_fleet(path)
    assert t4.request == {"os": "rocky9", "gpu": GPU, "image_os": "ubuntu22.04", "cudnn": "9.10"}
    assert t4.images == (str(sub / "train.lock.json"), str(sub / "../serve/image.lock.json"))
    assert hosts.request == {"os": "rocky9", "gpu": GPU, "host_only": True}
    assert hosts.images == ()
    assert pinned.lock == str(sub / "pinned.lock.json")
    assert pinned.images == ("/abs/image.lock.json",)
    assert plain.request == {"os": "rocky9", "gpu": GPU}


# -- 8. host-only plans through apply ------------------------------------------------------------------------
def test_a_host_only_group_flows_through_apply(cli, tmp_path, ansible, fixture_matrix):
    from ansible.parsing.yaml.loader import AnsibleLoader

    path = fleet(tmp_path, f"groups:\n  a100: {{os: rocky9, gpu: {GPU}, host_only: true}}\n")
    check = cli("inventory", "check", "-i", inventory(tmp_path), "--fleet", path)
    assert check.code == 0, check
    assert f"plan a100: {GPU} on rocky9, driver " in check.out
    assert "host only (no image part)" in check.out
    r = apply(cli, tmp_path, fleet_file=path)
    assert r.code == 0, r
    group_vars = AnsibleLoader((tmp_path / "run" / "plans" / "a100.yml").read_text()).get_single_data()
    assert group_vars["provision_cuda_version"] == ""
    assert group_vars["provision_base_image"] == ""
    assert group_vars["provision_driver_floor"] == ""
    assert group_vars["provision_driver_version"], "the host part is all there"
    lock = json.loads((tmp_path / "run" / "plans" / "a100.lock.json").read_text())
    assert lock["cuda"] is None
    assert lock["request"]["host_only"] is True


def test_host_only_extravars(fixture_matrix):
    from provision.plan.model import PlanRequest
    from provision.plan.resolve import resolve

    full = to_extravars(resolve(fixture_matrix, PlanRequest("rocky9", GPU)))
    host = to_extravars(resolve(fixture_matrix, PlanRequest("rocky9", GPU, host_only=True)))
    assert set(host) == set(full), "the same variables: the roles read none of the image part"
    image_part = {"provision_cuda_version", "provision_driver_floor", "provision_base_image"}
    assert {k: host[k] for k in image_part} == dict.fromkeys(image_part, "")
    assert all(full[k] for k in image_part)
    assert {k: v for k, v in host.items() if k not in image_part | {"provision_plan_digest"}} == {
        k: v for k, v in full.items() if k not in image_part | {"provision_plan_digest"}
    }


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ansible_paramiko_proxy_command", "ssh -W %h:%p bastion; touch /tmp/pwned"),
        ("ansible_netconf_ssh_config", "/tmp/evil_ssh_config"),
    ],
)
def test_connection_variables_that_name_a_local_command_are_refused(variable, value):
    from provision.fleet.inventory import connection_problems

    (problem,) = connection_problems({variable: value})
    assert problem.startswith(f"{variable} is set")
