"""Issue 22, the verify / doctor side: nothing an inventory or a host says runs on the controller.

Each attack is the issue's payload, run the way a user would run it (the CLI, the doctor's
collector, a verify worker's host), and each ends refused with exit 2 before anything is
contacted, or neutralised: a host named `gpu2?ssh_config=FILE` (FILE's ProxyCommand ran here),
`;` in ansible_ssh_extra_args (a local shell ran it), ProxyCommand and its kin in ssh options,
testinfra URL options in --host; control characters that broke the JUnit file; an unreadable
Secure Boot variable read as "unsupported"; INI booleans that verify read as Python truth; what a
host prints, unbounded and parsed by quadratic patterns."""

from __future__ import annotations

import configparser
import json
import time
from pathlib import Path

import pytest
import xmlschema
from support import ROOT

from provision.errors import InputError
from provision.fleet.inventory import Inventory
from provision.hostpool import (
    OUTPUT_LIMIT,
    Connection,
    build_host,
    inventory_connection,
    run_bounded,
    ssh_argv,
    url_connection,
)
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.verify import Target
from provision.verify.checks import check_containers, check_driver, check_system
from provision.verify.facts import HostFacts, Result, secure_boot_command
from provision.verify.report import SCHEMA_DIR, CheckResult, HostRun, VerifyReport, clean
from provision.verify.settings import checked_hostvars, flag

JUNIT_10 = ROOT / "tests" / "data" / "junit-10.xsd"
SSH = Connection("ssh", "h")
NO_CONFIG = configparser.ConfigParser()


def connect(name: str, hostvars: dict) -> Connection:
    return inventory_connection(name, hostvars, config=NO_CONFIG, environ={})


@pytest.fixture
def proxy_config(tmp_path) -> tuple[Path, Path]:
    """An ssh_config whose ProxyCommand leaves a marker: it must never run."""
    marker = tmp_path / "pwned"
    config = tmp_path / "evil_config"
    config.write_text(f"Host *\n  ProxyCommand touch {marker}\n")
    return config, marker


@pytest.fixture
def plan_lock(cli, tmp_path) -> Path:
    lock = tmp_path / "plan.lock.json"
    assert cli("plan", "--os", "debian12", "--gpu", "a100-pcie", "--lock", str(lock)).code == 0
    return lock


def fake_inventory(monkeypatch, tmp_path, hosts: dict[str, dict]) -> Path:
    """verify/doctor -i read these hosts as if ansible-inventory had printed them: the inventory
    loader (provision.fleet, which refuses such names itself) is bypassed, so this side's own
    checks are what stands."""
    import provision.fleet.inventory as inventory_module

    path = tmp_path / "hosts.yml"
    path.write_text("all: {}\n")
    inventory = Inventory(str(path), {n: dict(v) for n, v in hosts.items()}, {"all": set(hosts)})
    monkeypatch.setattr(inventory_module, "load_inventory", lambda _path: inventory)
    return path


# -- 1. host names are not testinfra URL options --------------------------------------------------
def test_a_host_named_with_url_options_is_refused_by_verify_before_anything_runs(
    cli, tmp_path, monkeypatch, proxy_config, plan_lock
):
    config, marker = proxy_config
    name = f"gpu2?ssh_config={config}"
    inventory = fake_inventory(monkeypatch, tmp_path, {name: {"ansible_host": "127.0.0.1", "ansible_port": 1}})
    res = cli("verify", "-i", str(inventory), "--plan", str(plan_lock), "--host-timeout", "20")
    assert res.code == 2, res
    assert res.err.startswith("error: inventory host name 'gpu2?ssh_config=/")
    assert "holds '?'" in res.err
    assert "hint:" in res.err
    assert not marker.exists(), "the ssh_config's ProxyCommand ran on the controller"


def test_a_host_named_with_url_options_is_refused_by_doctor_before_anything_runs(
    cli, tmp_path, monkeypatch, proxy_config
):
    config, marker = proxy_config
    name = f"gpu2?ssh_config={config}"
    inventory = fake_inventory(monkeypatch, tmp_path, {name: {"ansible_host": "127.0.0.1", "ansible_port": 1}})
    res = cli("doctor", "-i", str(inventory), "--host-timeout", "20")
    assert res.code == 2, res
    assert "holds '?'" in res.err
    assert not marker.exists(), "the ssh_config's ProxyCommand ran on the controller"


@pytest.mark.parametrize(
    "url",
    [
        "ssh://gpu2?ssh_config={config}",
        "gpu2?ssh_config={config}",
        "ssh://root@127.0.0.1:1?ssh_config={config}",
        "ssh://127.0.0.1:1?sudo=true&ssh_config={config}",
        "ssh://127.0.0.1:1#x",
        "ssh://127.0.0.1:1/path",
        "ansible://gpu2",
        "paramiko://127.0.0.1:1",
        "ssh://-oProxyCommand=x",
        "ssh://127.0.0.1:0",
        "ssh://root@127.0.0.1:1 -F {config}",
    ],
)
def test_host_urls_carry_no_testinfra_options(cli, url, proxy_config):
    config, marker = proxy_config
    url = url.format(config=config)
    res = cli("verify", "--host", url, "--os", "debian12", "--gpu", "a100-pcie", "--host-timeout", "20")
    assert res.code == 2, res
    assert "--host" in res.err
    assert "hint:" in res.err
    assert not marker.exists()


def test_a_bare_host_url_names_its_parts():
    assert url_connection("ssh://ops@gpu7.example.com:2222") == Connection(
        "ssh", "gpu7.example.com", user="ops", port=2222
    )
    assert url_connection("root@10.0.0.5").label == "root@10.0.0.5"
    assert url_connection("ssh://[fe80::1]:22").host == "fe80::1"
    assert url_connection("local://") == Connection("local")
    assert url_connection("docker://gpu-box") == Connection("docker", "gpu-box")


@pytest.mark.parametrize(
    ("hostvars", "message"),
    [
        ({"ansible_host": "127.0.0.1?ssh_config=/tmp/x"}, "host 'gpu2': ansible_host holds '?'"),
        ({"ansible_host": "-oProxyCommand=touch /tmp/x"}, "host 'gpu2': ansible_host holds"),
        ({"ansible_ssh_host": "a b"}, "host 'gpu2': ansible_ssh_host holds ' '"),
        ({"ansible_user": "root?ssh_config=/tmp/x"}, "host 'gpu2': ansible_user is not a user name"),
        ({"ansible_user": "-oProxyCommand=x"}, "ansible_user is not a user name"),
        ({"ansible_port": "22?ssh_config=/tmp/x"}, "ansible_port is not a port number"),
        ({"ansible_port": 0}, "ansible_port is not a port number"),
        ({"ansible_port": True}, "ansible_port is not a port number"),
        ({"ansible_become_user": "root; id"}, "ansible_become_user is not a user name"),
        ({"ansible_connection": "ssh; id"}, "ansible_connection is not a connection plugin name"),
        ({"ansible_ssh_private_key_file": "/k\n-oProxyCommand=x"}, "ansible_ssh_private_key_file is not a file path"),
    ],
)
def test_connection_variables_that_would_be_read_as_options_are_refused(hostvars, message):
    with pytest.raises(InputError, match=message.replace("?", r"\?").replace("(", r"\(")):
        connect("gpu2", hostvars)


def test_even_a_name_that_got_through_never_becomes_options():
    """Defence in depth: a Connection holding the payload (were a check ever skipped) is one
    argument to ssh after `--`, never a -F, never a shell word."""
    host = build_host(Connection("ssh", "gpu2?ssh_config=/tmp/evil_config", port=1))
    argv = ssh_argv(host, "true")
    assert "-F" not in argv
    assert argv[argv.index("--") + 1] == "gpu2?ssh_config=/tmp/evil_config"
    assert argv[0] == "ssh"  # no /bin/sh -c in between


# -- 2. ssh options never reach a local shell, and none runs a program here -------------------------
def test_a_semicolon_in_ssh_extra_args_is_refused_by_verify(cli, tmp_path, monkeypatch, plan_lock):
    marker = tmp_path / "pwned-extra"
    payload = f"-o ConnectTimeout=1; touch {marker} #"
    hostvars = {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_ssh_extra_args": payload}
    inventory = fake_inventory(monkeypatch, tmp_path, {"gpu3": hostvars})
    res = cli("verify", "-i", str(inventory), "--plan", str(plan_lock), "--host-timeout", "20")
    assert res.code == 2, res
    assert res.err.splitlines()[0] == (
        "error: host 'gpu3': ansible_ssh_extra_args holds ';' (a shell metacharacter or control character)"
    )
    assert not marker.exists(), "a local shell ran the inventory's ssh arguments"


def test_a_semicolon_in_ssh_extra_args_is_refused_by_doctor(tmp_path, monkeypatch):
    from provision.doctor.collect import collect_remote

    marker = tmp_path / "pwned-extra"
    hostvars = {
        "gpu3": {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_ssh_extra_args": f"-o A=b; touch {marker}"}
    }
    with pytest.raises(InputError, match="host 'gpu3': ansible_ssh_extra_args holds ';'"):
        collect_remote(["gpu3"], str(tmp_path / "hosts.yml"), hostvars=hostvars, host_timeout=20)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("-o ProxyCommand='touch /tmp/pwned'", "sets ProxyCommand"),
        ("-oProxyCommand=nc", "sets ProxyCommand"),
        ("-o proxycommand=nc", "sets proxycommand"),
        ("-vo ProxyCommand=nc", "sets ProxyCommand"),
        ("-o 'ProxyCommand nc %h %p'", "sets ProxyCommand"),
        ("""-o '"ProxyCommand" nc'""", "sets ProxyCommand"),
        ('-o Proxy"Command"=nc', "sets ProxyCommand"),
        ("-o LocalCommand=id -o PermitLocalCommand=yes", "sets LocalCommand"),
        ("-o PermitLocalCommand=yes", "sets PermitLocalCommand"),
        ("-o KnownHostsCommand=/bin/id", "sets KnownHostsCommand"),
        ("-o 'Match exec true'", "sets Match"),
        ("-o Include=/tmp/evil_config", "sets Include"),
        ("-o PKCS11Provider=/tmp/evil.so", "sets PKCS11Provider"),
        ("-o SecurityKeyProvider=/tmp/evil.so", "sets SecurityKeyProvider"),
        ("-o XAuthLocation=/tmp/evil -X", "sets XAuthLocation"),
        ("-F /tmp/evil_config", "sets -F"),
        ("-I /tmp/evil.so", "sets -I"),
        ("-o A=$(id)", "holds '$'"),
        ("-o A=`id`", "holds '`'"),
        ("-o A=b | id", "holds '|'"),
        ("-o A=b && id", "holds '&'"),
        ("-o A=b > /tmp/x", "holds '>'"),
        ("-o A=b\nid", "holds '\\n'"),
        ("-o A={{ lookup('pipe', 'id') }}", "holds '{'"),
        ("evil.example.com", "which is not an option of ssh"),
        ("-o", "ends with -o and no value"),
        ("-Z", "holds -Z, which is not an option of ssh"),
        ("-o 'unclosed", "does not split into arguments"),
    ],
)
@pytest.mark.parametrize("variable", ["ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args"])
def test_ssh_options_that_run_a_program_here_are_refused(variable, value, why):
    with pytest.raises(InputError) as caught:
        connect("gpu3", {variable: value})
    assert caught.value.message.startswith(f"host 'gpu3': {variable} ")
    assert why in caught.value.message
    assert "ProxyJump" in caught.value.hint
    assert "\n" not in caught.value.message


@pytest.mark.parametrize(
    ("program", "value", "why"),
    [
        ("scp", "-S /tmp/evil", "sets -S: a program run here in place of ssh"),
        ("scp", "-D /tmp/evil", "sets -D: an sftp server run here"),
        ("sftp", "-b /tmp/batch", "sets -b: a batch file"),
        ("sftp", "-S /tmp/evil", "sets -S"),
        ("sftp", "-o ProxyCommand=nc", "sets ProxyCommand"),
        ("scp", "-F /tmp/cfg", "sets -F"),
    ],
)
def test_scp_and_sftp_arguments_are_read_with_their_own_options(program, value, why):
    """ssh's -S is a socket path, scp's and sftp's a program run here: each client's own grammar."""
    from provision.hostpool import ssh_option_problem

    assert why in ssh_option_problem(value, program)
    assert ssh_option_problem("-l 100 -P 2222 -o StrictHostKeyChecking=no", program) is None


def test_the_environment_and_ansible_cfg_are_held_to_the_same_rule():
    with pytest.raises(InputError, match=r"host 'gpu3': ANSIBLE_SSH_COMMON_ARGS \(environment\) sets ProxyCommand"):
        inventory_connection("gpu3", {}, config=NO_CONFIG, environ={"ANSIBLE_SSH_COMMON_ARGS": "-o ProxyCommand=nc"})
    config = configparser.ConfigParser(interpolation=None)
    config.read_string("[ssh_connection]\nssh_args = -o ControlPath=/tmp/%C -o ProxyCommand=nc\n")
    with pytest.raises(InputError, match=r"\[ssh_connection\] ssh_args sets ProxyCommand"):
        inventory_connection("gpu3", {}, config=config, environ={})


def test_ordinary_ssh_options_pass_one_argument_each():
    options = "-o StrictHostKeyChecking=no -o 'UserKnownHostsFile /dev/null' -J ops@bastion:22 -C -o SendEnv=LC_*"
    connection = connect("gpu-a", {"ansible_host": "127.0.0.7", "ansible_ssh_common_args": options})
    assert connection.ssh_args == (
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile /dev/null",
        "-J",
        "ops@bastion:22",
        "-C",
        "-o",
        "SendEnv=LC_*",
    )
    argv = ssh_argv(build_host(connection), "true")
    assert argv[1:10] == list(connection.ssh_args)


FAKE_SSH = """#!/usr/bin/env python3
import json, sys
with open({log!r}, "a") as handle:
    handle.write(json.dumps(sys.argv[1:]) + "\\n")
print("ran")
"""


def test_a_host_reached_over_ssh_starts_no_local_shell(tmp_path, monkeypatch):
    """Were a metacharacter ever to get past the check, the ssh client would get it as an
    argument: it is an argv all the way, with no shell to act on `;`."""
    import os

    log = tmp_path / "argv.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH.format(log=str(log)))
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    marker = tmp_path / "pwned"
    payload = f"ConnectTimeout=1; touch {marker} #"
    host = build_host(Connection("ssh", "127.0.0.1", port=1, ssh_args=("-o", payload)))
    res = host.run("echo $HOME")
    assert (res.rc, res.stdout) == (0, "ran\n")
    argv = json.loads(log.read_text())
    assert argv[:2] == ["-o", payload]
    assert argv[-2:] == ["127.0.0.1", "echo $HOME"]
    assert not marker.exists()


# -- 3. JUnit stays valid whatever a host printed ------------------------------------------------------
HOSTILE_TEXT = "nvidia-smi: \x1b[31mERR\x1b[0m \x00 page\x0cbreak \x07 \x7f \x85 \u2028 \u202e reversed \ufffe end"


def hostile_report() -> VerifyReport:
    results = [
        CheckResult("gpu-a", "nvidia-smi", "t", "fail", HOSTILE_TEXT, (HOSTILE_TEXT, "plain"), 0.1),
        CheckResult("gpu-a", "os", "t", "skip", HOSTILE_TEXT, (), 0.0),
        CheckResult("gpu-a", "kernel-hold", "t", "warn", HOSTILE_TEXT, (HOSTILE_TEXT,), 0.0),
    ]
    runs = {"gpu-b": HostRun(f"host unreachable: {HOSTILE_TEXT}")}
    return VerifyReport(["gpu-a", "gpu-b"], results, [f"collecting checks failed: {HOSTILE_TEXT}"], 1, runs)


def test_junit_stays_valid_with_control_characters_in_host_output(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(hostile_report().junit())
    xmlschema.XMLSchema(str(JUNIT_10)).validate(str(path))
    xmlschema.XMLSchema(f"{SCHEMA_DIR}/junit.xsd").validate(str(path))
    text = path.read_text()
    for escape in ("\\x1b[31mERR", "\\x00", "\\x0c", "\\ufffe"):
        assert escape in text, escape


def test_what_a_check_reports_has_its_control_characters_escaped():
    assert clean(HOSTILE_TEXT) == (
        "nvidia-smi: \\x1b[31mERR\\x1b[0m \\x00 page\\x0cbreak \\x07 \\x7f \\x85 \\u2028 \\u202e reversed \\ufffe end"
    )
    assert clean("tab\there\nnewline") == "tab\there\nnewline"
    assert clean("x" * 50, 10) == "x" * 9 + "…"


# -- 4. an unreadable Secure Boot variable is unknown, and fails closed ----------------------------------
class Res:
    def __init__(self, rc=0, stdout="", stderr=""):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr


class FakeHost:
    def __init__(self, script):
        self.script = script

    def run(self, command):
        for prefix, res in self.script.items():
            if command.startswith(prefix):
                return res
        return Res(127, "", "not found")


@pytest.fixture(scope="module")
def plans(real_matrix):
    return {
        "debian": resolve(real_matrix, PlanRequest("debian12", "a100-pcie")),
        "b200": resolve(real_matrix, PlanRequest("ubuntu22.04", "b200")),
    }


def run_check(check, facts, **extra):
    import inspect

    evidence: list[str] = []
    available = {
        "facts": facts,
        "facts_raw": facts,
        "plan": facts.target.plan,
        "target": facts.target,
        "evidence": evidence.append,
        "warning": lambda text: evidence.append(f"warning: {text}"),
        **extra,
    }
    kwargs = {name: available[name] for name in inspect.signature(check).parameters}
    try:
        check(**kwargs)
    except pytest.fail.Exception as exc:
        return "fail", str(exc), evidence
    except pytest.skip.Exception as exc:
        return "skip", str(exc), evidence
    return "pass", "", evidence


SECURE_BOOT = secure_boot_command({})


@pytest.mark.parametrize(
    ("answer", "seen"),
    [
        (Res(1, "", "od: /sys/firmware/efi/efivars/SecureBoot-x: Permission denied\n"), "Permission denied"),
        (Res(1, "", "od: /sys/firmware/efi/efivars/SecureBoot-x: Input/output error\n"), "Input/output error"),
        (Res(1, "", "/sys/firmware/efi/efivars: permission denied\n"), "permission denied"),
        (Res(0, "   6   0   0   0\n"), "4 attribute bytes and 0 or 1 expected"),
        (Res(0, ""), "holds nothing"),
        (Res(0, "   6   0   0   0   7\n"), "4 attribute bytes and 0 or 1 expected"),
    ],
)
def test_an_unreadable_secure_boot_variable_fails_closed(plans, answer, seen):
    plan = plans["debian"]
    facts = HostFacts(FakeHost({SECURE_BOOT: answer, "systemd-detect-virt": Res(1, "none")}), Target("h", SSH, plan))
    status, detail, evidence = run_check(check_system.check_secure_boot, facts)
    assert status == "fail", (status, detail)
    assert detail.startswith("Secure Boot state unknown: /sys/firmware/efi/efivars/SecureBoot-")
    assert seen in detail
    assert any("unreadable" in e or "holds" in e for e in evidence)


def test_a_secure_boot_variable_not_read_in_time_fails_closed(plans):
    facts = HostFacts(FakeHost({}), Target("h", SSH, plans["debian"]))
    facts._fetched[SECURE_BOOT] = Result(124, "", "", 7)
    status, detail, _ = run_check(check_system.check_secure_boot, facts)
    assert (status, "not read within 7 s" in detail) == ("fail", True)


def test_only_an_absent_secure_boot_variable_counts_as_no_secure_boot(plans, tmp_path):
    """The command, run by this machine's sh: a path that is not there exits 3 (absent), one that
    is there is read; the check passes on absent and on a readable 'disabled'."""
    import subprocess

    absent = secure_boot_command({"preflight_secure_boot_efivar": str(tmp_path / "efivars" / "SecureBoot-x")})
    assert subprocess.run(["sh", "-c", absent], check=False, capture_output=True).returncode == 3
    var = tmp_path / "SecureBoot-x"
    var.write_bytes(bytes([6, 0, 0, 0, 1]))
    present = subprocess.run(
        ["sh", "-c", secure_boot_command({"preflight_secure_boot_efivar": str(var)})],
        check=False,
        capture_output=True,
        text=True,
    )
    assert (present.returncode, present.stdout.split()) == (0, ["6", "0", "0", "0", "1"])
    facts = HostFacts(FakeHost({SECURE_BOOT: Res(3)}), Target("h", SSH, plans["debian"]))
    assert run_check(check_system.check_secure_boot, facts)[0] == "pass"


# -- 5. booleans as Ansible reads them ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [("no", False), ("False", False), ("0", False), ("off", False), ("yes", True), ("On", True), (0, False), (1, True)],
)
def test_boolean_host_variables_read_as_ansible_reads_them(value, expected):
    assert flag({"nvidia_driver_persistenced": value}, "nvidia_driver_persistenced") is expected
    assert checked_hostvars("gpu-a", {"nvidia_driver_hold": value})["nvidia_driver_hold"] is expected


@pytest.mark.parametrize("value", ["maybe", "2", 2, "", None, ["yes"], "{{ hold }}"])
def test_a_boolean_ansible_refuses_is_refused(value):
    with pytest.raises(InputError, match="host 'gpu-a': nvidia_driver_hold is"):
        checked_hostvars("gpu-a", {"nvidia_driver_hold": value})


@pytest.mark.parametrize(
    ("variable", "check", "script_key"),
    [
        ("nvidia_driver_persistenced", check_driver.check_persistence, "systemctl is-active nvidia-persistenced"),
        ("nvidia_driver_blacklist_nouveau", check_system.check_nouveau_blacklisted, "grep -lsE"),
        ("nvidia_driver_hold_kernel", check_system.check_kernel_hold, "dpkg-query"),
    ],
)
def test_a_check_turned_off_with_an_ini_no_is_off(plans, variable, check, script_key):
    """`nvidia_driver_persistenced=no` in an INI inventory arrives as the string "no": the roles
    read it as false, and so does verify (Python would call it true)."""
    facts = HostFacts(FakeHost({script_key: Res(1, "")}), Target("h", SSH, plans["debian"], hostvars={variable: "no"}))
    status, detail, _ = run_check(check, facts)
    assert status == "skip", (status, detail)
    assert f"{variable} is false" in detail


def test_an_ini_inventory_reads_the_same_through_verify(cli, tmp_path, plan_lock):
    """End to end through ansible-inventory's INI parser and a verify run on this machine: "no"
    turns the persistence check off as it turns the role off; "maybe" is refused (exit 2)."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpus]\ngpu-local ansible_connection=local nvidia_driver_persistenced=no\n")
    res = cli("verify", "-i", str(inventory), "--plan", str(plan_lock), "--only", "persistence", "--format", "json")
    (host,) = json.loads(res.out)["hosts"]
    assert [(c["id"], c["status"]) for c in host["checks"]] == [("persistence", "skip")], host
    inventory.write_text("[gpus]\ngpu-local ansible_connection=local nvidia_driver_persistenced=maybe\n")
    res = cli("verify", "-i", str(inventory), "--plan", str(plan_lock), "--only", "persistence")
    assert res.code == 2
    # the inventory loader may refuse it first, in its own words; either way host, variable and value are named
    first = res.err.splitlines()[0]
    assert all(part in first for part in ("gpu-local", "nvidia_driver_persistenced", "'maybe'", "Ansible")), first


@pytest.mark.parametrize(("value", "ok"), [(2, 2), ("4", 4), (0, None), ("two", None), (True, None), (1.5, None)])
def test_the_gpu_count_is_a_whole_number(value, ok):
    if ok is None:
        with pytest.raises(InputError, match="provision_gpu_count is"):
            checked_hostvars("gpu-a", {"provision_gpu_count": value})
    else:
        assert checked_hostvars("gpu-a", {"provision_gpu_count": value})["provision_gpu_count"] == ok


# -- 6. the subnet manager check seen failing ------------------------------------------------------------
def nvlsm_host(plan, **override):
    sm = plan.subnet_manager
    names = [*sm.packages, *sm.requires]
    script = {
        "dpkg-query -W -f='${Package}": Res(0, "".join(f"{n}\t1.0-1\thi \n" for n in names)),
        "systemd-detect-virt": Res(1, "none\n"),
        "for f in /.dockerenv": Res(0, ""),
        "cat /proc/modules": Res(0, "ib_umad 40960 0 - Live 0x0\nnvidia 1 0 - Live 0x0\n"),
        "pgrep -x nvlsm": Res(0, "4242\n"),
    }
    script.update(override)
    return HostFacts(FakeHost(script), Target("h", SSH, plan))


def test_the_subnet_manager_check_passes_on_a_healthy_host(plans):
    assert run_check(check_driver.check_subnet_manager, nvlsm_host(plans["b200"]))[0] == "pass"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            {"dpkg-query -W -f='${Package}": Res(0, "infiniband-diags\t1.0-1\thi \nlibibumad3\t1.0-1\thi \n")},
            "nvlsm not installed: nvidia-fabricmanager cannot run the NVLink Subnet Manager",
        ),
        (
            {
                "dpkg-query -W -f='${Package}": Res(
                    0, "nvlsm\t1.0-1\tii \ninfiniband-diags\t1.0-1\thi \nlibibumad3\t1.0-1\thi \n"
                )
            },
            "nvlsm not held/versionlocked: an upgrade can replace it under Fabric Manager",
        ),
        (
            {"cat /proc/modules": Res(0, "nvidia 1 0 - Live 0x0\n")},
            "kernel module ib_umad not loaded: nvidia-fabricmanager will not start without it (modprobe it)",
        ),
        (
            {"pgrep -x nvlsm": Res(1, "")},
            "no nvlsm process: nvidia-fabricmanager runs without the NVLink Subnet Manager "
            "(journalctl -u nvidia-fabricmanager)",
        ),
    ],
)
def test_the_subnet_manager_check_fails_on_each_drift(plans, override, message):
    status, detail, _ = run_check(check_driver.check_subnet_manager, nvlsm_host(plans["b200"], **override))
    assert (status, detail) == ("fail", message)


# -- 8. what a host prints is bounded ----------------------------------------------------------------
def test_a_command_that_prints_without_end_is_cut_at_the_limit():
    t0 = time.monotonic()
    rc, out, _, cut = run_bounded(["sh", "-c", "yes provision"], limit=OUTPUT_LIMIT)
    assert cut
    assert len(out) == OUTPUT_LIMIT
    assert rc != 0  # stopped
    assert time.monotonic() - t0 < 10
    assert run_bounded(["sh", "-c", "printf ok; printf e >&2"], limit=OUTPUT_LIMIT) == (0, b"ok", b"e", False)


@pytest.mark.parametrize("batched", [True, False])
def test_an_output_past_the_limit_is_cut_and_the_check_says_so(plans, tmp_path, batched):
    """A daemon.json of 3 MiB on the host: verify reads 1 MiB of it, and the check that read it
    (docker-runtime) says the output was cut; through the batch and on its own."""
    from provision.hostpool import Budget

    big = tmp_path / "daemon.json"
    big.write_text('{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "x": "' + "A" * (3 << 20) + '"}')
    target = Target("local", Connection("local"), plans["debian"], hostvars={"container_runtime_daemon_json": str(big)})
    facts = HostFacts(build_host(Connection("local")), target, budget=Budget(60) if batched else None)
    if batched:
        assert facts.prefetch({"docker-runtime"}) > 0
    text = facts.read(str(big))
    assert len(text) == OUTPUT_LIMIT
    assert facts.cut == [f"cat {big}"]
    status, detail, _ = run_check(check_containers.check_docker_runtime, facts)
    assert status == "fail"
    assert "is not valid JSON" in detail


def test_the_report_names_an_output_that_was_cut(cli, tmp_path, plan_lock):
    big = tmp_path / "daemon.json"
    big.write_text("{" + " " * (2 << 20) + '"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}')
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"[gpus]\ngpu-local ansible_connection=local container_runtime_daemon_json={big}\n")
    res = cli("verify", "-i", str(inventory), "--plan", str(plan_lock), "--only", "docker-runtime", "--format", "json")
    (check,) = json.loads(res.out)["hosts"][0]["checks"]
    assert check["status"] == "fail"
    assert any("the host printed more than 1024 KiB for `cat " in e and "(cut)" in e for e in check["evidence"])


def test_a_login_shell_printing_the_old_marker_cannot_fake_coreutils_timeout():
    from provision.hostpool import Budget
    from provision.verify.worker import probe

    class Chatty:
        def run(self, command):
            return Res(0, "provision-timeout-works\n")  # printed by a .bashrc, whatever ran

    assert probe(Chatty(), Budget(60)) == (None, False)


ADVERSARIAL = {
    "digits": "1" * (1 << 20),
    "nvrm": "NVRM version:" * ((1 << 20) // 13),
    "newlines": "\n" * (1 << 20),
    "spaces": " " * (1 << 20),
    "pipes": "|   0  MIG " * ((1 << 20) // 11),
    "version": "version 1" * ((1 << 20) // 9),
}


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_every_check_parses_a_megabyte_of_hostile_output_in_linear_time(plans, kind):
    """1 MiB of each adversarial shape as every command's answer: every check finishes, all of them
    together in under 2 s (the quadratic patterns took hours: 20 KB of digits took 2.7 s)."""
    text = ADVERSARIAL[kind]
    plan = plans["b200"]

    class Everything:  # not a container, services up, a kernel held: every pattern gets to read
        def run(self, command):
            if command.startswith(("systemd-detect-virt", "for f in")):
                return Res(1, "")
            if command.startswith("systemctl"):
                return Res(0, "active\nenabled\n")
            if command.startswith("dpkg-query -W -f='${db:Status-Abbrev}"):
                return Res(0, "hi linux-image-generic\n")
            return Res(0, text, "")

    mig = {"provision_mig_enabled": True, "provision_mig_layout": [{"profile": "1g.23gb", "placement": 0}]}
    facts = HostFacts(Everything(), Target("h", SSH, plan, gpu_count=8, mig=mig))
    checks = [
        f
        for module in (check_system, check_driver, check_containers)
        for f in vars(module).values()
        if callable(f) and hasattr(f, "provision_check")
    ]
    t0 = time.monotonic()
    for check in checks:
        run_check(check, facts)
    assert time.monotonic() - t0 < 2, kind
