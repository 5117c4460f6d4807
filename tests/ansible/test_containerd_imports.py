"""The container_runtime role's containerd step, run by Ansible on this machine against a scratch
config.toml: the site's imports stay, ours is added once, a multi-line array is refused."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import COLLECTIONS


def run_containerd_step(tmp_path: Path, config: str | None) -> subprocess.CompletedProcess:
    path = tmp_path / "config.toml"
    if config is not None:
        path.write_text(config)
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.import_role:\n        name: provision.gpu.container_runtime\n        tasks_from: containerd\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", str(play),
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", f"__container_runtime_containerd_config={path}",
         "-e", f"container_runtime_containerd_dropin={tmp_path / 'conf.d' / '99-nvidia.toml'}",
         "-e", "container_runtime_restart=false"],
        capture_output=True, text=True, timeout=180, check=False, env=env,
    )  # fmt: skip


def test_existing_imports_are_kept_and_ours_added_once(tmp_path):
    config = 'version = 2\nimports = ["/etc/containerd/site.toml"]\n\n[plugins]\n'
    first = run_containerd_step(tmp_path, config)
    assert first.returncode == 0, first.stdout + first.stderr
    ours = f"{tmp_path / 'conf.d'}/*.toml"
    lines = (tmp_path / "config.toml").read_text().splitlines()
    assert lines[1] == f'imports = ["/etc/containerd/site.toml", "{ours}"]'
    assert lines[0] == "version = 2"
    again = run_containerd_step(tmp_path, None)
    assert again.returncode == 0, again.stdout
    assert "changed=0" in again.stdout
    assert (tmp_path / "config.toml").read_text().splitlines() == lines


def test_no_imports_line_gets_ours(tmp_path):
    proc = run_containerd_step(tmp_path, "version = 2\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "config.toml").read_text().splitlines()[0] == f'imports = ["{tmp_path / "conf.d"}/*.toml"]'


def test_a_multi_line_imports_array_is_refused_and_left_alone(tmp_path):
    config = 'version = 2\nimports = [\n  "/etc/containerd/site.toml",\n]\n'
    proc = run_containerd_step(tmp_path, config)
    assert proc.returncode != 0
    assert "multi-line imports array" in proc.stdout
    assert (tmp_path / "config.toml").read_text() == config


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
