"""A Rocky-Linux-9-shaped host beside a Debian 12 host: the roles' RedHat task files run for real
(EPEL, CRB, the pinned repository keys imported into rpm, NVIDIA's EL9 repository with signed
metadata, the nvidia-driver module stream, dnf versionlock, Docker CE's repository), through
`provision apply` with a fleet file, idempotently, and `provision verify` passes on both."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness.fleet import run_apply

pytestmark = [pytest.mark.fleet]
HOSTS = {"deb-a", "rocky-a"}


def task_results(run_dir: Path, host: str, task: str) -> list[dict]:
    """The results ansible-runner recorded for a task on a host."""
    out = []
    for path in (run_dir / "artifacts").glob("*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if (
            event["event"] in ("runner_on_ok", "runner_on_failed")
            and data.get("host") == host
            and data.get("task") == task
        ):
            out.append(data["res"])
    return out


def changed_tasks(run_dir: Path, host: str) -> list[tuple[str, str]]:
    """(role, task) of each task that reported a change on the host; role "" for the play's own."""
    out = []
    for path in (run_dir / "artifacts").glob("*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event["event"] == "runner_on_ok" and data.get("host") == host and data.get("res", {}).get("changed"):
            out.append((data.get("role") or "", data.get("task", "")))
    return out


def facts(env, host: str) -> dict:
    """Ansible's facts about the host, as the roles see them (ad-hoc setup over SSH)."""
    inventory = env.inventory("facts.yml", hosts=tuple(sorted(HOSTS)))
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            host,
            "-i",
            str(inventory),
            "-m",
            "ansible.builtin.setup",
            "-a",
            "gather_subset=!all,!min,distribution,pkg_mgr",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.split("=>", 1)[1])["ansible_facts"]


def test_rocky_host_is_rocky_9_to_ansible(rocky_env):
    got = facts(rocky_env, "rocky-a")
    assert got["ansible_os_family"] == "RedHat", got
    assert got["ansible_distribution"] == "Rocky", got
    assert got["ansible_distribution_major_version"] == "9", got
    assert got["ansible_pkg_mgr"] == "dnf", got
    deb = facts(rocky_env, "deb-a")
    assert (deb["ansible_os_family"], deb["ansible_pkg_mgr"]) == ("Debian", "apt"), deb


def test_rocky_and_debian_converge_side_by_side(rocky_env, tmp_path):
    env = rocky_env
    inventory = env.inventory("rocky.yml", hosts=("deb-a", "rocky-a"))
    fleet_file = env.fleet_file("rocky-fleet.yaml")
    rc, out, summary = run_apply("-i", str(inventory), "--fleet", str(fleet_file), run_dir=tmp_path / "run1")
    assert rc == 0, out
    assert set(summary["hosts"]) == HOSTS
    assert all(h["failed"] == 0 and h["changed"] > 0 for h in summary["hosts"].values()), summary

    assert_debian_converged(env)
    assert_rocky_converged(env, tmp_path / "run1")


def test_second_apply_changes_nothing_on_either(rocky_env, tmp_path):
    env = rocky_env
    inventory = env.inventory("rocky.yml", hosts=("deb-a", "rocky-a"))
    fleet_file = env.fleet_file("rocky-fleet.yaml")
    # again, every task: nothing changes on either host
    rc, out, summary = run_apply("-i", str(inventory), "--fleet", str(fleet_file), "--full", run_dir=tmp_path / "full")
    assert rc == 0, out
    for host in HOSTS:
        assert changed_tasks(tmp_path / "full", host) == [], (host, out)
    assert {h: v["changed"] for h, v in summary["hosts"].items()} == {"deb-a": 0, "rocky-a": 0}, out
    # a plain re-run ends each host after one check
    rc, out, summary = run_apply("-i", str(inventory), "--fleet", str(fleet_file), run_dir=tmp_path / "quick")
    assert rc == 0, out
    assert {h: v["changed"] for h, v in summary["hosts"].items()} == {"deb-a": 0, "rocky-a": 0}, out
    assert all(v["ok"] < 5 for v in summary["hosts"].values()), summary


def assert_debian_converged(env):
    """deb-a as the Debian fleet's hosts."""
    deb = env.plans["a100"]
    for pkg in deb.driver.packages:
        assert env.dpkg_version("deb-a", pkg.name) == f"{deb.driver.version}-1"
    assert {p.name for p in deb.driver.packages} <= set(env.fleet.exec("deb-a", "apt-mark showhold").split())


def assert_rocky_converged(env, run_dir: Path):
    """rocky-a through the RedHat task files: packages, locks, module stream, repositories, keys."""
    # Rocky: the plan's packages at NVIDIA's EL9 epoch and release, versionlocked
    rocky = env.plans["rocky_a100"]
    assert rocky.driver.module_stream
    for pkg in rocky.driver.packages:
        assert env.rpm_version("rocky-a", pkg.name) == f"3:{rocky.driver.version}-1.el9", pkg.name
    for pkg in rocky.container_toolkit.packages:
        assert env.rpm_version("rocky-a", pkg.name) == f"{rocky.container_toolkit.version}-1", pkg.name
    locks = env.fleet.exec("rocky-a", "dnf -q versionlock list")
    for pkg in [*rocky.driver.packages, *rocky.container_toolkit.packages]:
        assert any(line.startswith(f"{pkg.name}-") for line in locks.splitlines()), (pkg.name, locks)
    assert any(line.startswith("kernel-core-") for line in locks.splitlines()), locks
    stream = rocky.driver.module_stream.split(":")[1]
    modules = env.fleet.exec("rocky-a", "dnf -q module list --enabled nvidia-driver")
    assert any(line.split()[:2] == ["nvidia-driver", stream] and "[e]" in line for line in modules.splitlines()), (
        modules
    )
    # the stream query reads the new repository without a prompt (its pinned key imported, -y)
    queries = task_results(run_dir, "rocky-a", "Show the enabled nvidia-driver module stream.")
    assert queries, "the module stream query ran"
    assert all("Is this ok" not in r.get("stdout", "") + r.get("stderr", "") for r in queries), queries
    # EPEL (dkms comes from it), CRB enabled, the repositories with their checks
    assert env.rpm_version("rocky-a", "epel-release")
    assert env.rpm_version("rocky-a", "dkms")
    repolist = env.fleet.exec("rocky-a", "dnf -q repolist --enabled")
    assert any(line.split()[:1] == ["crb"] for line in repolist.splitlines()), repolist
    cuda_repo = env.fleet.exec("rocky-a", "cat /etc/yum.repos.d/provision-nvidia-cuda.repo")
    assert "\ngpgcheck = 1" in cuda_repo, cuda_repo
    assert "repo_gpgcheck = 1" in cuda_repo, cuda_repo
    toolkit_repo = env.fleet.exec("rocky-a", "cat /etc/yum.repos.d/provision-nvidia-container-toolkit.repo")
    assert "repo_gpgcheck = 1" in toolkit_repo, toolkit_repo
    # the pinned keys checked (repo_key) and imported into rpm
    imported = env.fleet.exec("rocky-a", "rpm -q gpg-pubkey --qf '%{VERSION}\\n'").split()
    for key in ("cuda-rhel", "toolkit", "docker"):
        assert env.kit.key(key).fingerprint[-8:].lower() in imported, (key, imported)
    for name in ("nvidia-cuda", "nvidia-container-toolkit", "docker-ce"):
        env.fleet.exec("rocky-a", f"test -s /etc/pki/rpm-gpg/RPM-GPG-KEY-provision-{name}")
    # Docker CE's packages from its repository; the runtime merged into daemon.json
    assert env.rpm_version("rocky-a", "docker-ce")
    for host in HOSTS:
        daemon = json.loads(env.fleet.exec(host, "cat /etc/docker/daemon.json"))
        assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
        assert daemon["storage-driver"] == "vfs"
        assert "nvidia" in json.loads(env.fleet.exec(host, "docker info --format '{{json .Runtimes}}'"))
        assert env.fleet.exec(host, "systemctl is-active nvidia-persistenced").strip() == "active"
        assert "nvidia.com/gpu" in env.fleet.exec(host, "cat /var/run/cdi/nvidia.yaml")
    # the RPMs came from the loopback mirrors, through the proxy where the roles set one
    served = [path for _, path, _ in env.kit.server.requests]
    assert any(p.endswith(".rpm") and "/rhel9/" in p for p in served)
    assert any(p.endswith("repomd.xml.asc") for p in served)
    assert any("/compute/cuda/repos/rhel9/x86_64/" in url for _, url in env.proxy.seen)


def test_verify_passes_on_both(rocky_env, tmp_path):
    env = rocky_env
    inventory = env.inventory("rocky.yml", hosts=("deb-a", "rocky-a"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "verify",
            "-i",
            str(inventory),
            "--fleet",
            str(env.fleet_file("rocky-fleet.yaml")),
            "--gpu-count",
            "2",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, json.dumps(doc, indent=1)[-4000:] + proc.stderr
    checks = {h["host"]: {c["id"]: c for c in h["checks"]} for h in doc["hosts"]}
    assert set(checks) == HOSTS
    for host, by_id in checks.items():
        assert all(c["status"] in ("pass", "skip") for c in by_id.values()), (host, by_id)
        for check in ("os", "nvidia-smi", "driver-packages", "container-toolkit", "docker-runtime", "persistence"):
            assert by_id[check]["status"] == "pass", (host, check, by_id[check])
    assert any("ID=rocky VERSION_ID=9." in e for e in checks["rocky-a"]["os"]["evidence"])
    assert any("versionlocked" in e or "(held)" in e for e in checks["rocky-a"]["driver-packages"]["evidence"])
