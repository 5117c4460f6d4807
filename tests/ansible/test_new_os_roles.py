"""Task selection on the EL8 and EL10 hosts (Rocky/RHEL 8 and 10): which tasks run, with which
arguments, for the facts Ansible reports there. EL8 installs from dnf module streams like EL9;
EL10 has none (plain packages pinned by version and versionlock), its own CRB name and its own
repository key."""

import pytest
import walker
from walker import Walk

from provision.fleet.extravars import to_extravars
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

NEW_FACTS = {
    "rocky8": {
        "os_family": "RedHat",
        "distribution": "Rocky",
        "distribution_version": "8.10",
        "distribution_major_version": "8",
        "distribution_release": "Green Obsidian",
    },
    "rhel8": {
        "os_family": "RedHat",
        "distribution": "RedHat",
        "distribution_version": "8.10",
        "distribution_major_version": "8",
        "distribution_release": "Ootpa",
    },
    "rocky10": {
        "os_family": "RedHat",
        "distribution": "Rocky",
        "distribution_version": "10.0",
        "distribution_major_version": "10",
        "distribution_release": "Red Quartz",
    },
    "rhel10": {
        "os_family": "RedHat",
        "distribution": "RedHat",
        "distribution_version": "10.0",
        "distribution_major_version": "10",
        "distribution_release": "Coughlan",
    },
}
for _os, _facts in NEW_FACTS.items():
    walker.FACTS.setdefault(_os, _facts)

EL10_FINGERPRINT = {"nvidia_driver_repo_key_fingerprint": "0123456789ABCDEF0123456789ABCDEF01234567"}


@pytest.fixture(scope="module", params=sorted(NEW_FACTS))
def os_id(request):
    return request.param


def plan_vars(real_matrix, os_id, gpu="h100-sxm", **pins):
    return to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu, **pins)))


def major(os_id: str) -> str:
    return NEW_FACTS[os_id]["distribution_major_version"]


def test_driver_role_on_el8_and_el10(real_matrix, os_id):
    extravars = plan_vars(real_matrix, os_id)
    walk = Walk("nvidia_driver", os_id, extravars, EL10_FINGERPRINT if major(os_id) == "10" else None).run()
    version, branch = extravars["provision_driver_version"], extravars["provision_driver_branch"]
    assert "setup-RedHat.yml" in {t["args"] for t in walk.selected if t["module"].endswith("include_tasks")}
    assert "ansible.builtin.apt" not in walk.modules()
    repo = walk.args("Add the repository with signature checks")
    assert repo["baseurl"].endswith(f"/compute/cuda/repos/rhel{major(os_id)}/x86_64")
    assert repo["gpgcheck"] is True
    assert repo["repo_gpgcheck"] is True
    names = walk.args("Install the driver, Fabric Manager and kernel headers")["name"]
    assert f"nvidia-open-{version}" in names
    assert f"nvidia-fabricmanager-{version}" in names
    assert "kernel-devel-6.8.0-1-generic" in names
    assert "kernel-headers-6.8.0-1-generic" in names
    assert "Lock the driver and Fabric Manager packages at the planned version." in walk.names()
    if major(os_id) == "8":
        assert extravars["provision_driver_install_method"] == "dnf-module"
        argv = walk.args("Enable the planned nvidia-driver module stream")["argv"]
        assert argv[:4] == ["dnf", "-y", "module", "switch-to"]
        assert argv[4] == f"nvidia-driver:{branch}-open"
        assert "kmod-nvidia-open-dkms-" + version in names
    else:
        # EL10: no module streams; nvidia-open alone, at the planned version.
        assert extravars["provision_driver_install_method"] == "dnf"
        assert extravars["provision_driver_module_stream"] == ""
        assert "Show the enabled nvidia-driver module stream." not in walk.names()
        assert "Enable the planned nvidia-driver module stream." not in walk.names()
        assert extravars["provision_driver_packages"] == ["nvidia-open"]


def test_crb_name_follows_distribution_and_major_version(real_matrix, os_id):
    walk = Walk("nvidia_driver", os_id, plan_vars(real_matrix, os_id), EL10_FINGERPRINT).run()
    crb = walk.args("Enable CRB")["argv"]
    expected = {
        "rocky8": ["dnf", "config-manager", "--set-enabled", "powertools"],
        "rocky10": ["dnf", "config-manager", "--set-enabled", "crb"],
        "rhel8": ["subscription-manager", "repos", "--enable", "codeready-builder-for-rhel-8-x86_64-rpms"],
        "rhel10": ["subscription-manager", "repos", "--enable", "codeready-builder-for-rhel-10-x86_64-rpms"],
    }[os_id]
    assert crb == expected
    # A repository already listed under any of these names is not enabled again.
    when = walk.task("Enable CRB")
    for listed in ("powertools", "crb", "codeready-builder-for-rhel-10-x86_64-rpms"):
        assert (
            walk.condition(when_of(walk, "Enable CRB"), {"nvidia_driver_repolist": {"stdout": f"{listed}  x\n"}})
            is False
        )
    assert walk.condition(when_of(walk, "Enable CRB"), {"nvidia_driver_repolist": {"stdout": "baseos  x\n"}}) is True
    assert when["module"] == "ansible.builtin.command"


def when_of(walk: Walk, name_part: str):
    import yaml

    tasks = yaml.safe_load((walk.dir / "tasks" / "setup-RedHat.yml").read_text())
    return next(t["when"] for t in tasks if name_part in (t.get("name") or ""))


def test_repository_key_per_el_major(real_matrix, os_id):
    walk = Walk("nvidia_driver", os_id, plan_vars(real_matrix, os_id))
    url = walk.render(walk.vars["nvidia_driver_repo_key_url"])
    fingerprint = walk.render(walk.vars["nvidia_driver_repo_key_fingerprint"])
    check = "[nvidia_driver_repo_key_fingerprint] | flatten | select | list | length > 0"
    if major(os_id) == "8":
        assert url.endswith("/repos/rhel8/x86_64/D42D0685.pub")
        assert fingerprint == "610C7B14E068A878070DA4E99CD0A493D42D0685"
        assert walk.condition(check) is True
    else:
        # rhel10 is signed with CDF6BA43; its fingerprint is not catalogued: the run stops until
        # the site sets it, and then goes on with that key.
        assert url.endswith("/repos/rhel10/x86_64/CDF6BA43.pub")
        assert fingerprint == ""
        assert walk.condition(check) is False
        walk = Walk("nvidia_driver", os_id, plan_vars(real_matrix, os_id), EL10_FINGERPRINT)
        assert walk.condition(check) is True
        ran = walk.run()
        assert ran.args("Install the repository's signing key")["fingerprints"] == [
            EL10_FINGERPRINT["nvidia_driver_repo_key_fingerprint"]
        ]


def test_kernel_lock_names_exist_on_each_major(real_matrix, os_id):
    walk = Walk("nvidia_driver", os_id, plan_vars(real_matrix, os_id), EL10_FINGERPRINT).run()
    argv = walk.args("Lock the kernel packages")["argv"]
    assert argv[:3] == ["dnf", "versionlock", "add"]
    assert {"kernel", "kernel-core", "kernel-modules", "kernel-devel", "kernel-headers"} <= set(argv[3:])
    assert ("kernel-modules-core" in argv) is (major(os_id) != "8")


def test_container_runtime_on_el8_and_el10(real_matrix, os_id):
    extravars = plan_vars(real_matrix, os_id)
    toolkit = extravars["provision_container_toolkit_version"]
    walk = Walk("container_runtime", os_id, extravars).run()
    install = walk.args("Install the NVIDIA Container Toolkit at the planned version")["name"]
    assert install == [f"{p}-{toolkit}" for p in extravars["provision_container_toolkit_packages"]]
    assert walk.render(walk.vars["container_runtime_toolkit_repo_url"]).endswith("/stable/rpm/x86_64")
    assert "ansible.builtin.apt" not in walk.modules()


def test_preflight_accepts_el8_and_el10(real_matrix, os_id):
    import yaml

    walk = Walk("preflight", os_id, plan_vars(real_matrix, os_id))
    tasks = yaml.safe_load((walk.dir / "tasks" / "main.yml").read_text())
    (supported,) = [t for t in tasks if t["name"] == "Check that the OS is supported."]
    that = supported["ansible.builtin.assert"]["that"]
    assert walk.condition(that)
    ran = walk.run()
    assert "Check for headers of the running kernel (dnf)." in ran.names()
    assert "Check for headers of the running kernel (apt)." not in ran.names()
    # A major version the roles do not know is refused.
    walk.vars["ansible_facts"] = {
        **walk.vars["ansible_facts"],
        "distribution_version": "11.0",
        "distribution_major_version": "11",
    }
    assert not walk.condition(that)
