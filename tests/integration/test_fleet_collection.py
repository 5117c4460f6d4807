"""The collection is the product for Ansible users: `ansible-galaxy collection build`, install into
a temporary path, and plain `ansible-playbook provision.gpu.site` (no provision, no ansible-runner,
no project ansible.cfg) converges a fresh fleet host from a plan's variables."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from support import COMPAT, ROOT

from provision.fleet.apply import ApplyRequest, prepare
from provision.fleet.extravars import dump_unsafe_yaml
from provision.matrix.loader import load_matrix
from provision.plan.model import write_plan
from provision.tools import tool_path

pytestmark = [pytest.mark.fleet]
COLLECTION = ROOT / "playbooks" / "collections" / "ansible_collections" / "provision" / "gpu"


def run(*cmd: str, cwd: Path, env: dict[str, str], timeout: int = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def test_the_installed_collection_converges_a_host_with_plain_ansible_playbook(fleet_env, tmp_path):
    env = {**os.environ, "PATH": tool_path(), "ANSIBLE_NOCOLOR": "1"}
    env.pop("ANSIBLE_CONFIG", None)
    dist = tmp_path / "dist"
    built = run(
        "ansible-galaxy", "collection", "build", str(COLLECTION), "--output-path", str(dist), cwd=tmp_path, env=env
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (tarball,) = dist.glob("provision-gpu-*.tar.gz")
    installed = tmp_path / "collections"
    done = run("ansible-galaxy", "collection", "install", "-p", str(installed), str(tarball), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (installed / "ansible_collections" / "provision" / "gpu" / "playbooks" / "site.yml").is_file()

    # what an operator's ansible.cfg says; the project's is not used
    (tmp_path / "ansible.cfg").write_text(
        f"[defaults]\ncollections_path = {installed}\nhost_key_checking = True\ninterpreter_python = auto_silent\n"
        "[ssh_connection]\npipelining = True\n"
    )
    plan = fleet_env.plans["a100"]
    lock = tmp_path / "a100.lock.json"
    write_plan(plan, lock)
    inventory = fleet_env.inventory("collection-inventory.yml", hosts=("gpu-f",))
    prepared = prepare(
        ApplyRequest(inventory=str(inventory), plan=str(lock), run_dir=str(tmp_path / "run")),
        matrix_loader=lambda: load_matrix(COMPAT),
        playbooks=str(ROOT / "playbooks"),
    )
    extravars = tmp_path / "plan-vars.yml"
    extravars.write_text(dump_unsafe_yaml(prepared.extravars))
    env["ANSIBLE_CONFIG"] = str(tmp_path / "ansible.cfg")
    play = run(
        "ansible-playbook", "-i", str(inventory), "-e", f"@{extravars}", "provision.gpu.site", cwd=tmp_path, env=env
    )
    assert play.returncode == 0, play.stdout[-4000:] + play.stderr[-2000:]
    recap = play.stdout[play.stdout.index("PLAY RECAP") :]
    assert "gpu-f" in recap
    assert "failed=0" in recap
    assert "unreachable=0" in recap
    for pkg in plan.driver.packages:
        assert fleet_env.dpkg_version("gpu-f", pkg.name) == f"{plan.driver.version}-1"
    daemon = json.loads(fleet_env.fleet.exec("gpu-f", "cat /etc/docker/daemon.json"))
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert fleet_env.fleet.exec("gpu-f", "systemctl is-active nvidia-persistenced").strip() == "active"
