"""Values the roles write into files that other programs read as code are refused unless they are
plain paths (issue 22): DKMS sources /etc/dkms/framework.conf as shell, systemd reads the
provision-mig unit. An unreadable Secure Boot variable is "unknown" and fails closed."""

import importlib.util
import json
import subprocess

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from paths import MODULES, ROLES
from roleeval import assert_result, named, role_tasks
from walker import Walk

spec = importlib.util.spec_from_file_location("host_state", MODULES / "host_state.py")
host_state = importlib.util.module_from_spec(spec)
spec.loader.exec_module(host_state)

SIGNING_CHECK = "Check the module signing key and certificate paths."
SIGNING_WRITE = "Sign the modules DKMS builds with the enrolled MOK."
MIG_CHECK = "Check the paths and the name the boot unit is written with."


# ---------------------------------------------------------------------------------- DKMS framework.conf

SHELL_PAYLOADS = [
    "$(touch {pwned})",
    "/root/mok.key; touch {pwned}",
    "/root/mok.key\ntouch {pwned}",
    "/root/mok.key`touch {pwned}`",
    '/root/mok.key"; touch {pwned}; "',
    "/root/mok.key\n",  # a trailing newline: Python's $ would let it through
    "/root/mok key.priv",
    "root/mok.key",  # relative
]


def written_line(value: str) -> str:
    """The framework.conf line the role writes for the signing key (rendered from the task itself)."""
    task = named("nvidia_driver", SIGNING_WRITE)
    line = task["ansible.builtin.lineinfile"]["line"]
    item = {"key": "mok_signing_key", "value": value}
    return Templar(loader=DataLoader(), variables={"item": item}).template(trust_as_template(line))


@pytest.mark.parametrize("payload", SHELL_PAYLOADS)
def test_signing_paths_that_a_shell_would_run_are_refused(tmp_path, payload):
    pwned = tmp_path / "pwned"
    value = payload.format(pwned=pwned)
    for key in ("nvidia_driver_module_signing_key", "nvidia_driver_module_signing_cert"):
        ok, msg = assert_result("nvidia_driver", SIGNING_CHECK, **{key: value, "nvidia_driver_module_signing_cert"
                                if key.endswith("key") else "nvidia_driver_module_signing_key": "/root/mok.der"})  # fmt: skip
        assert not ok, (key, value)
        assert json.dumps(value) in msg
        assert "DKMS reads /etc/dkms/framework.conf as shell" in msg


def test_the_payload_is_real_the_line_as_it_would_be_written_runs_in_a_shell(tmp_path):
    """What the check stops: DKMS sources framework.conf, and this line would run the command."""
    pwned = tmp_path / "pwned"
    conf = tmp_path / "framework.conf"
    conf.write_text(written_line(f"$(touch {pwned})") + "\n")
    subprocess.run(["bash", "-c", f". {conf}"], check=False, timeout=30)
    assert pwned.exists()


@pytest.mark.parametrize("path", ["/var/lib/shim-signed/mok/MOK.priv", "/root/mok.der", "/etc/pki/mok/key+v2.pem"])
def test_plain_paths_pass_and_read_back_as_themselves_in_a_shell(tmp_path, path):
    ok, _ = assert_result("nvidia_driver", SIGNING_CHECK, nvidia_driver_module_signing_key=path,
                          nvidia_driver_module_signing_cert=path)  # fmt: skip
    assert ok
    conf = tmp_path / "framework.conf"
    conf.write_text(written_line(path) + "\n")
    got = subprocess.run(["bash", "-c", f'. {conf}; printf %s "$mok_signing_key"'], capture_output=True, text=True,
                         check=True, timeout=30)  # fmt: skip
    assert got.stdout == path


def test_unset_signing_paths_pass():
    assert assert_result("nvidia_driver", SIGNING_CHECK)[0]


def test_the_check_comes_before_anything_is_written():
    names = [t["name"] for t in role_tasks("nvidia_driver")]
    assert names.index(SIGNING_CHECK) < names.index("Create DKMS's configuration directory.")
    assert names.index(SIGNING_CHECK) < names.index(SIGNING_WRITE)


# ---------------------------------------------------------------------------------- the MIG boot unit

UNIT_PAYLOADS = [
    {"mig_config_path": "/etc/provision/mig.json\nExecStartPre=/bin/touch /tmp/pwned"},
    {"mig_config_path": "/etc/provision/mig config.json"},
    {"mig_config_path": "/etc/provision/%n.json"},
    {"mig_config_path": "/etc/provision/${HOME}.json"},
    {"mig_config_path": "etc/provision/mig.json"},
    {"mig_script_path": '/usr/local/sbin/provision-mig" "--allow-reset'},
    {"mig_script_path": "/usr/local/sbin/provision-mig\\x20--allow-reset"},
    {"mig_script_path": "/usr/local/sbin/provision-mig;touch /tmp/pwned"},
    {"provision_mig_config_name": "b200-1g\nExecStartPre=/bin/touch /tmp/pwned"},
    {"provision_mig_config_name": "b200 1g"},
]
LAYOUT = {"provision_mig_config_name": "b200-1g", "provision_mig_layout": [{"profile": "1g.23gb"}]}


def unit(**values) -> str:
    walk = Walk("mig", "ubuntu22.04", {}, {**LAYOUT, "ansible_managed": "managed", **values})
    text = (ROLES / "mig" / "templates" / "provision-mig.service.j2").read_text()
    return walk.render(text)


@pytest.mark.parametrize("payload", UNIT_PAYLOADS, ids=lambda p: repr(p)[:50])
def test_unit_values_systemd_would_read_otherwise_are_refused(payload):
    ok, msg = assert_result("mig", MIG_CHECK, **{**LAYOUT, **payload})
    assert not ok
    assert json.dumps(next(iter(payload.values()))) in msg


def test_the_payload_is_real_it_adds_a_line_to_the_unit():
    text = unit(mig_config_path="/etc/provision/mig.json\nExecStartPre=/bin/touch /tmp/pwned")
    assert "\nExecStartPre=/bin/touch /tmp/pwned" in text


def test_the_default_unit_passes_and_reads_as_planned():
    assert assert_result("mig", MIG_CHECK, **LAYOUT)[0]
    lines = unit().splitlines()
    assert "ExecStart=/usr/local/sbin/provision-mig apply --config /etc/provision/mig.json" in lines
    assert "ConditionPathExists=/etc/provision/mig.json" in lines
    assert [line for line in lines if line.startswith("Exec")] == [
        "ExecStart=/usr/local/sbin/provision-mig apply --config /etc/provision/mig.json"
    ]


def test_the_mig_check_comes_before_anything_is_written():
    names = [t["name"] for t in role_tasks("mig")]
    first_write = names.index("Install the MIG layout script.")
    assert names.index(MIG_CHECK) < first_write


# ---------------------------------------------------------------------------------- Secure Boot


SB = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
OTHER = "BootOrder-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def efivars(tmp_path, entries: dict[str, bytes] | None):
    """The SecureBoot variable's path in an efivars folder holding these variables (None: no
    folder at all, a legacy BIOS boot)."""
    folder = tmp_path / "efivars"
    if entries is not None:
        folder.mkdir()
        for name, data in entries.items():
            (folder / name).write_bytes(data)
    return folder / SB


@pytest.mark.parametrize(
    ("entries", "state"),
    [
        ({SB: b"\x06\x00\x00\x00\x01"}, "enabled"),
        ({SB: b"\x06\x00\x00\x00\x00"}, "disabled"),
        (None, "unsupported"),  # legacy BIOS: no efivars at all
        ({OTHER: b"\x07\x00\x00\x00\x00\x00"}, "unsupported"),  # EFI firmware without Secure Boot
        ({}, "unknown"),  # efivarfs not mounted on an EFI boot: the kernel's folder is empty
        ({SB: b""}, "unknown"),  # cut short
        ({SB: b"\x06\x00\x00\x00"}, "unknown"),
        ({SB: b"\x06\x00\x00\x00\x07"}, "unknown"),
    ],
)
def test_secure_boot_state(tmp_path, entries, state):
    assert host_state.secure_boot_state(str(efivars(tmp_path, entries))) == state


def test_a_secure_boot_variable_that_cannot_be_read_is_unknown(tmp_path):
    """Before: any OSError read as "unsupported", and an unsigned module went on to a reboot."""
    var = efivars(tmp_path, {})
    var.mkdir()  # EISDIR: there, but not readable as the variable
    assert host_state.secure_boot_state(str(var)) == "unknown"


def preflight_signing(secure_boot: str, key: str = "", cert: str = "") -> tuple[bool, str]:
    return assert_result(
        "preflight",
        "Refuse unsigned DKMS modules under Secure Boot.",
        preflight_state={"secure_boot": secure_boot},
        nvidia_driver_module_signing_key=key,
        nvidia_driver_module_signing_cert=cert,
    )


def test_preflight_fails_closed_when_secure_boot_is_unknown():
    ok, msg = preflight_signing("unknown")
    assert not ok
    assert "the Secure Boot state is unknown" in msg
    assert preflight_signing("unknown", "/root/mok.priv", "/root/mok.der")[0]
    assert not preflight_signing("enabled")[0]
    assert preflight_signing("disabled")[0]
    assert preflight_signing("unsupported")[0]


def test_the_signing_files_are_looked_for_when_secure_boot_is_unknown():
    for name in ("Check that the module signing key and certificate exist.", "Fail when a signing file is missing."):
        walk = Walk("preflight", "ubuntu22.04", {}, {"preflight_state": {"secure_boot": "unknown"}})
        assert walk.condition(named("preflight", name)["when"])


def test_no_reboot_with_an_unsigned_module_when_secure_boot_is_unknown():
    module = {"path": "/lib/modules/k/updates/dkms/nvidia.ko", "version": "580.95.05", "flavour": "open", "signer": ""}
    why = host_state.boot_check("k", "unknown", module, ("580.95.05", "open"))
    assert why
    assert "Secure Boot is unknown" in why
    assert host_state.boot_check("k", "unknown", {**module, "signer": "provision MOK"}, ("580.95.05", "open")) is None
