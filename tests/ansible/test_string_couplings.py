"""Names the Python side and the playbook share, checked against each other instead of kept in step
by hand: the files provision.gpu.site records as a host's converged state are the files the roles
write; `apply --tags` offers the playbook's tags; a reboot is found by the module that ran."""

import fnmatch
import sys
from typing import Any

import pytest
import yaml
from paths import PLAYBOOKS, ROLES, SITE, SITE_VARS
from walker import Walk

from provision.fleet.apply import SITE_PLAYBOOK, check_tags, site_tags
from provision.fleet.extravars import to_extravars
from provision.fleet.runner import is_reboot
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

OSES = ["ubuntu22.04", "debian12", "rocky9", "rhel9"]

# Files a role writes by running a tool rather than with a file module: (role, path, the tool).
WRITTEN_BY_COMMANDS = {
    ("nvidia_driver", "/etc/dnf/plugins/versionlock.list"): "dnf versionlock add (RedHat family)",
    ("container_runtime", "/etc/dnf/plugins/versionlock.list"): "dnf versionlock add (RedHat family)",
}


def managed_files() -> list[str]:
    return yaml.safe_load(SITE_VARS.read_text())["provision_managed_files"]


def written_paths(walk: Walk) -> set[str]:
    """Every file path a walked role writes with a file-writing module, rendered for this OS with
    loops expanded. Only the arguments that name the file are rendered (the others may use results
    registered at run time)."""
    out: set[str] = set()
    for task in walk.selected:
        module = task["module"].rsplit(".", 1)[-1]
        keys = PATH_ARGS.get(module)
        if not keys or not isinstance(task["args"], dict):
            continue
        saved = dict(walk.vars)
        walk.vars.update(task.get("vars", {}))
        try:
            for item in walk.render(task["loop"]) if task.get("loop") else [None]:
                walk.vars["item"] = item
                out.add(_path_of(module, {k: walk.render(task["args"][k]) for k in keys if k in task["args"]}))
        finally:
            walk.vars = saved
    return out


# module -> the arguments that name the file it writes
PATH_ARGS = {
    "copy": ("dest",),
    "template": ("dest",),
    "repo_key": ("dest",),
    "get_url": ("dest",),
    "lineinfile": ("path", "dest"),
    "blockinfile": ("path", "dest"),
    "ini_file": ("path", "dest"),
    "yum_repository": ("file", "name"),
    "apt_repository": ("filename",),
    "deb822_repository": ("name",),
}


def _path_of(module: str, args: dict[str, Any]) -> str:
    if module == "yum_repository":
        return f"/etc/yum.repos.d/{args.get('file') or args['name']}.repo"
    if module == "apt_repository":
        return f"/etc/apt/sources.list.d/{args['filename']}.list"
    if module == "deb822_repository":
        return f"/etc/apt/sources.list.d/{args['name']}.sources"
    return args.get("dest") or args["path"]


@pytest.fixture(scope="module")
def written(real_matrix) -> dict[str, set[str]]:
    """role -> files it writes, over every OS and the branches that write more files (Secure Boot
    signing key, containerd instead of Docker, a MIG layout)."""
    out: dict[str, set[str]] = {}
    for os_id in OSES:
        plan = to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu="h100-sxm")))
        mig = to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu="a100-sxm4-80gb", mig="7x1g.10gb")))
        nvlsm = to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu="b200")))  # NVLink Subnet Manager
        # kernel-module options (GH200 from R580); no aarch64 plan for Debian 12: the H100's plan stands in
        gh200 = to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu="gh200"))) if os_id != "debian12" else plan
        runs = [
            ("preflight", plan, {}),
            ("nvidia_driver", plan, {}),
            ("nvidia_driver", plan, {"nvidia_driver_module_signing_key": "/k.priv", "nvidia_driver_module_signing_cert": "/k.der"}),
            ("nvidia_driver", nvlsm, {}),
            ("nvidia_driver", gh200, {}),
            # Docker not yet installed (`command -v dockerd` failed): its repository is added too
            ("container_runtime", plan, {"container_runtime_engine": "docker", "container_runtime_dockerd": {"rc": 1}}),
            ("container_runtime", plan, {"container_runtime_engine": "containerd"}),
            ("mig", mig, {"provision_allow_disruption": True}),
        ]  # fmt: skip
        for role, extravars, overrides in runs:
            walk = Walk(role, os_id, extravars, {"ansible_check_mode": False, **overrides}).run()
            out.setdefault(role, set()).update(written_paths(walk))
    return out


def test_every_file_a_role_writes_is_in_the_managed_list(written):
    patterns = managed_files()
    missing = {
        (role, path)
        for role, paths in written.items()
        for path in paths
        if not any(fnmatch.fnmatch(path, p) for p in patterns)
    }
    assert not missing, f"written by the roles but not in site.yml's provision_managed_files: {sorted(missing)}"


def test_every_managed_pattern_matches_a_file_a_role_writes(written):
    everything = set().union(*written.values()) | {path for _, path in WRITTEN_BY_COMMANDS}
    stale = [p for p in managed_files() if not any(fnmatch.fnmatch(path, p) for path in everything)]
    assert not stale, f"site.yml's provision_managed_files names files no role writes: {stale}"


def test_the_walk_finds_the_files_it_should(written):
    """The comparison above is only as good as the walk: files known to be written are found."""
    assert "/etc/docker/daemon.json" in written["container_runtime"]
    assert "/etc/containerd/conf.d/99-nvidia.toml" in written["container_runtime"]
    assert "/etc/dkms/framework.conf" in written["nvidia_driver"]
    assert "/etc/yum.repos.d/provision-nvidia-container-toolkit.repo" in written["container_runtime"]
    assert "/etc/systemd/system/provision-mig.service" in written["mig"]


# ----------------------------------------------------------------------------------------- tags


def test_tags_are_the_roles_of_the_site_playbook():
    plays = yaml.safe_load(SITE.read_text())
    play = plays[-1]  # the rolling play: the check play before it has no roles
    role_tags = {r["role"].rsplit(".", 1)[-1]: set(r["tags"]) for r in play["roles"]}
    assert role_tags == {
        "preflight": {"preflight", "always"},
        "nvidia_driver": {"driver"},
        "container_runtime": {"container_runtime"},
        "mig": {"mig"},
    }
    # every task outside the roles runs whatever --tags says (check, drain, lock, health gate, record)
    for each in plays:
        for section in ("pre_tasks", "tasks", "post_tasks"):
            for task in each.get(section, []):
                assert "always" in task.get("tags", []), f"{section}: {task['name']} is not tagged always"
    assert site_tags(str(PLAYBOOKS)) == {"preflight", "driver", "container_runtime", "mig"}
    assert (PLAYBOOKS / SITE_PLAYBOOK).resolve() == SITE.resolve()


def test_a_run_limited_by_tags_records_no_converged_state():
    play = yaml.safe_load(SITE.read_text())[-1]
    (record,) = [t for t in play["post_tasks"] if t.get("provision.gpu.applied_state", {}).get("mode") == "record"]
    assert "ansible_run_tags | list == ['all']" in [c.split("  #")[0] for c in record["when"]]
    assert "ansible_skip_tags | length == 0" in record["when"]


def test_apply_refuses_a_tag_the_playbook_lacks():
    from provision.errors import InputError

    check_tags("driver,mig", str(PLAYBOOKS))
    check_tags("all", str(PLAYBOOKS))
    with pytest.raises(InputError) as err:
        check_tags("driver,toolkit", str(PLAYBOOKS))
    assert "'toolkit'" in err.value.message
    assert err.value.hint == "tags: container_runtime, driver, mig, preflight"
    with pytest.raises(InputError):
        check_tags("driver,", str(PLAYBOOKS))
    check_tags("anything", "/nonexistent")  # another playbooks layout: Ansible gets --tags unchecked


def test_apply_help_names_the_playbook_tags(cli):
    out = cli("apply", "--help").out
    text = " ".join(out.split())
    for tag in site_tags(str(PLAYBOOKS)) - {"preflight"}:
        assert tag in text, tag


# -------------------------------------------------------------------------------------- reboots


def test_reboot_found_by_module_not_by_task_name():
    handlers = yaml.safe_load((ROLES / "nvidia_driver" / "handlers" / "main.yml").read_text())
    reboots = [h for h in handlers if "ansible.builtin.reboot" in h]
    assert len(reboots) == 1, "the driver role reboots in exactly one handler"
    event = {"task": "whatever it is called", "resolved_action": "ansible.builtin.reboot", "res": {"rebooted": True}}
    assert is_reboot(event)
    assert is_reboot({**event, "resolved_action": None, "task_action": "ansible.builtin.reboot"})
    assert not is_reboot({**event, "res": {"rebooted": False}})
    assert not is_reboot({**event, "resolved_action": "ansible.builtin.command"})
    assert not is_reboot({"task": reboots[0]["name"], "res": {}})


@pytest.mark.parametrize(("tags", "recorded"), [(None, True), ("driver", False), ("driver,mig", False)])
def test_record_conditions_as_provision_apply_runs_them(tmp_path, tags, recorded):
    """The record step's conditions, evaluated by Ansible under ansible-runner as `provision apply`
    runs it (where ansible_run_tags is a tuple, not a list): a full run records, a --tags run does not."""
    from provision.fleet.runner import run_playbook

    play = yaml.safe_load(SITE.read_text())[-1]
    (record,) = [t for t in play["post_tasks"] if t.get("provision.gpu.applied_state", {}).get("mode") == "record"]
    project = tmp_path / "project"
    project.mkdir()
    task = {
        "name": "Record",
        "ansible.builtin.debug": {"msg": "recorded"},
        "tags": record["tags"],
        "when": record["when"],
    }
    probe = [{"name": "Probe", "hosts": "all", "gather_facts": False, "tasks": [task]}]
    (project / "probe.yml").write_text(yaml.safe_dump(probe))
    inventory = tmp_path / "hosts"
    inventory.write_text(f"probe ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    events = []
    result = run_playbook(
        run_dir=str(tmp_path / "run"),
        playbooks=str(project),
        inventory=str(inventory),
        extravars={"provision_run_inputs_digest": "abc"},
        tags=tags,
        playbook="probe.yml",
        on_event=events.append,
    )
    assert result.rc == 0, result
    ran = [e.kind for e in events if e.task == "Record" and e.kind in ("ok", "skipped")]
    assert ran == (["ok"] if recorded else ["skipped"])
