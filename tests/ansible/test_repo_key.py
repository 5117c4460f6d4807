"""provision.gpu.repo_key, run by Ansible on this machine: a key file must hold exactly the pinned
keys, and only they reach the keyring; --check writes nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness.fakegpu import Key, RecordingServer
from paths import COLLECTIONS


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    real = Key.generate(root / "real", "cudatools (test) <real@example.invalid>")
    extra = Key.generate(root / "extra", "attacker (test) <extra@example.invalid>")
    served = root / "www"
    served.mkdir()
    (served / "real.pub").write_text(real.armored)
    (served / "both.pub").write_text(real.armored + extra.armored)
    (served / "other.pub").write_text(extra.armored)
    server = RecordingServer(served)
    yield real, extra, server.url
    server.close()
    real.close()
    extra.close()


def run_module(args: dict, *, check: bool = False) -> dict:
    """Run the module in a play on localhost; the registered result, as Ansible saw it."""
    work = Path(args["dest"]).parent / ".play"
    work.mkdir(exist_ok=True)
    (work / "args.json").write_text(json.dumps(args))
    out = work / "result.json"
    (work / "play.yml").write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - provision.gpu.repo_key: \"{{ lookup('file', 'args.json') | from_json }}\"\n"
        "      register: result\n      ignore_errors: true\n"
        f"    - ansible.builtin.copy: {{content: '{{{{ result | to_json }}}}', dest: '{out}'}}\n"
        "      check_mode: false\n"
    )
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", str(work / "play.yml"),
            "-e", f"ansible_python_interpreter={sys.executable}"] + (["--check"] if check else [])  # fmt: skip
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env, cwd=work)
    assert out.exists(), proc.stdout + proc.stderr
    return json.loads(out.read_text())


def fingerprints_in(path: Path) -> list[str]:
    home = path.parent / ".gnupg-check"
    home.mkdir(mode=0o700, exist_ok=True)
    colons = subprocess.run(
        ["gpg", "--batch", "--with-colons", "--import-options", "show-only", "--import", str(path)],
        capture_output=True, text=True, check=True, timeout=60,
        env={**os.environ, "GNUPGHOME": str(home)},
    ).stdout  # fmt: skip
    lines = colons.splitlines()
    return [lines[i + 1].split(":")[9] for i, line in enumerate(lines) if line.startswith("pub:")]


def test_the_pinned_key_is_installed_alone_and_idempotently(tmp_path, keys):
    real, _, url = keys
    dest = tmp_path / "keyrings" / "provision-cuda.asc"
    dest.parent.mkdir()
    args = {"url": f"{url}/real.pub", "fingerprints": [real.fingerprint], "dest": str(dest)}
    first = run_module(args)
    assert first.get("failed") is not True, first
    assert first["changed"] is True
    assert fingerprints_in(dest) == [real.fingerprint]
    again = run_module(args)
    assert again["changed"] is False, "a second run changes nothing"


def test_a_key_file_with_an_extra_key_is_refused(tmp_path, keys):
    real, extra, url = keys
    dest = tmp_path / "provision-cuda.asc"
    res = run_module({"url": f"{url}/both.pub", "fingerprints": [real.fingerprint], "dest": str(dest)})
    assert res["failed"] is True
    assert "unexpected key(s) " + extra.fingerprint.upper() in res["msg"]
    assert not dest.exists()


def test_a_different_key_is_refused(tmp_path, keys):
    real, _, url = keys
    dest = tmp_path / "provision-cuda.asc"
    res = run_module({"url": f"{url}/other.pub", "fingerprints": [real.fingerprint], "dest": str(dest)})
    assert res["failed"] is True
    assert f"expected key(s) {real.fingerprint.upper()} missing" in res["msg"]
    assert not dest.exists()


def test_an_empty_pin_is_refused(tmp_path, keys):
    _, _, url = keys
    res = run_module({"url": f"{url}/real.pub", "fingerprints": [""], "dest": str(tmp_path / "k.asc")})
    assert res["failed"] is True
    assert "never trusted unchecked" in res["msg"]


def test_check_mode_writes_nothing(tmp_path, keys):
    real, _, url = keys
    dest = tmp_path / "provision-cuda.asc"
    res = run_module({"url": f"{url}/real.pub", "fingerprints": [real.fingerprint], "dest": str(dest)}, check=True)
    assert res["changed"] is True
    assert not dest.exists()
