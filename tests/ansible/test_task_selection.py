"""Which tasks run, with which arguments, on Ubuntu 22.04, Debian 12 and Rocky 9 (and RHEL 9).

Rocky cannot run here, so its task selection and variables are checked this way; Debian 12 also
runs for real in the test fleet.
"""

import pytest
from walker import Walk

from provision.fleet.extravars import to_extravars
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve


@pytest.fixture(scope="module", params=["ubuntu22.04", "debian12", "rocky9", "rhel9"])
def os_id(request):
    return request.param


def plan_vars(real_matrix, os_id, gpu="h100-sxm", **pins):
    return to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu, **pins)))


def test_driver_role_follows_the_os_family(real_matrix, os_id):
    extravars = plan_vars(real_matrix, os_id)
    walk = Walk("nvidia_driver", os_id, extravars).run()
    version = extravars["provision_driver_version"]
    if os_id in ("ubuntu22.04", "debian12"):
        assert "setup-Debian.yml" in {t["args"] for t in walk.selected if t["module"].endswith("include_tasks")}
        assert "ansible.builtin.dnf" not in walk.modules()
        names = walk.args("Install the driver, Fabric Manager and kernel headers")["name"]
        assert f"nvidia-fabricmanager={version}-*" in names
        assert any(n.startswith("linux-headers-6.8.0-1-generic") for n in names)
        line = walk.args("Add the repository (signed-by")["content"]
        repo = {"ubuntu22.04": "ubuntu2204", "debian12": "debian12"}[os_id]
        assert f"/compute/cuda/repos/{repo}/x86_64/ /" in line
        assert "signed-by=/etc/apt/keyrings/" in line
        assert (
            walk.render(walk.vars["nvidia_driver_repo_key_fingerprint"]) == "EB693B3035CD5710E231E123A4B469963BF863CC"
        )
        prefs = walk.args("Pin the driver packages")["content"]
        assert f"Pin: version {version}-*" in prefs
        assert "Pin-Priority: 1001" in prefs
    else:
        assert "setup-RedHat.yml" in {t["args"] for t in walk.selected if t["module"].endswith("include_tasks")}
        assert "ansible.builtin.apt" not in walk.modules()
        stream = walk.args("Enable the planned nvidia-driver module stream")["argv"]
        assert stream[:4] == ["dnf", "-y", "module", "switch-to"]
        assert stream[4] == f"nvidia-driver:{extravars['provision_driver_branch']}-open"
        names = walk.args("Install the driver, Fabric Manager and kernel headers")["name"]
        assert f"nvidia-open-{version}" in names
        assert f"nvidia-fabricmanager-{version}" in names
        assert "kernel-devel-6.8.0-1-generic" in names
        crb = walk.args("Enable CRB")["argv"]
        if os_id == "rocky9":
            assert crb == ["dnf", "config-manager", "--set-enabled", "crb"]
        else:
            assert crb == ["subscription-manager", "repos", "--enable", "codeready-builder-for-rhel-9-x86_64-rpms"]
        repo = walk.args("Add the repository with signature checks")
        assert repo["baseurl"].endswith("/compute/cuda/repos/rhel9/x86_64")
        assert repo["gpgcheck"] is True
        assert "Lock the driver and Fabric Manager packages at the planned version." in walk.names()
        assert "Lock the kernel packages so the kernel cannot move ahead of the driver build." in walk.names()


def test_driver_role_skips_fabric_manager_without_nvswitch(real_matrix):
    walk = Walk("nvidia_driver", "rocky9", plan_vars(real_matrix, "rocky9", gpu="a100-pcie")).run()
    assert "Enable and start nvidia-fabricmanager (NVSwitch systems)." not in walk.names()
    walk = Walk("nvidia_driver", "rocky9", plan_vars(real_matrix, "rocky9", gpu="h100-sxm")).run()
    assert "Enable and start nvidia-fabricmanager (NVSwitch systems)." in walk.names()


def test_volta_gets_the_proprietary_stream(real_matrix):
    extravars = plan_vars(real_matrix, "rocky9", gpu="v100")
    walk = Walk("nvidia_driver", "rocky9", extravars).run()
    assert walk.args("Enable the planned nvidia-driver module stream")["argv"][4] == "nvidia-driver:580-dkms"
    assert (
        "kmod-nvidia-latest-dkms-" + extravars["provision_driver_version"]
        in walk.args("Install the driver, Fabric Manager")["name"]
    )


def test_container_runtime_follows_the_os_family(real_matrix, os_id):
    extravars = plan_vars(real_matrix, os_id)
    toolkit = extravars["provision_container_toolkit_version"]
    walk = Walk("container_runtime", os_id, extravars).run()
    install = walk.args("Install the NVIDIA Container Toolkit at the planned version")["name"]
    if os_id in ("ubuntu22.04", "debian12"):
        assert install == [f"{p}={toolkit}-*" for p in extravars["provision_container_toolkit_packages"]]
        assert walk.render(walk.vars["container_runtime_toolkit_repo_url"]).endswith("/stable/deb/amd64")
    else:
        assert install == [f"{p}-{toolkit}" for p in extravars["provision_container_toolkit_packages"]]
        assert walk.render(walk.vars["container_runtime_toolkit_repo_url"]).endswith("/stable/rpm/x86_64")
    assert "Merge the NVIDIA runtime into the Docker daemon configuration." in walk.names()


def test_containerd_option_selects_the_drop_in(real_matrix):
    walk = Walk(
        "container_runtime",
        "ubuntu22.04",
        plan_vars(real_matrix, "ubuntu22.04"),
        {"container_runtime_engine": "containerd"},
    ).run()
    assert "Add the nvidia runtime as a containerd drop-in." in walk.names()
    assert "Merge the NVIDIA runtime into the Docker daemon configuration." not in walk.names()


def test_preflight_checks_headers_with_the_os_package_manager(real_matrix, os_id):
    walk = Walk("preflight", os_id, plan_vars(real_matrix, os_id)).run()
    apt = "Check for headers of the running kernel (apt)." in walk.names()
    dnf = "Check for headers of the running kernel (dnf)." in walk.names()
    assert (apt, dnf) == ((True, False) if os_id in ("ubuntu22.04", "debian12") else (False, True))


def test_supported_os_condition(real_matrix):
    """The preflight assert of the supported OSes accepts each of them and refuses another."""
    for os_id in ("ubuntu22.04", "debian12", "rocky9", "rhel9"):
        walk = Walk("preflight", os_id, plan_vars(real_matrix, os_id))
        that = (
            walk.vars
            and next(
                t
                for t in __import__("yaml").safe_load((walk.dir / "tasks" / "main.yml").read_text())
                if t["name"] == "Check that the OS is supported."
            )["ansible.builtin.assert"]["that"]
        )
        assert walk.condition(that), os_id
    walk = Walk("preflight", "ubuntu22.04", plan_vars(real_matrix, "ubuntu22.04"))
    walk.vars["ansible_facts"] = {
        **walk.vars["ansible_facts"],
        "distribution_version": "20.04",
        "distribution_major_version": "20",
    }
    assert not walk.condition(that)


def test_mig_role_runs_only_with_a_planned_layout(real_matrix, os_id):
    import yaml
    from paths import SITE

    site = yaml.safe_load(SITE.read_text())[-1]  # the rolling play, which runs the roles
    entry = next(r for r in site["roles"] if isinstance(r, dict) and r.get("role") == "provision.gpu.mig")
    without = plan_vars(real_matrix, os_id)
    with_mig = plan_vars(real_matrix, os_id, mig="3g.40gb,2g.20gb,2x1g.10gb")
    assert Walk("mig", os_id, without).condition(entry["when"]) is False
    assert Walk("mig", os_id, with_mig).condition(entry["when"]) is True
    walk = Walk("mig", os_id, with_mig, {"ansible_check_mode": False, "provision_allow_disruption": True}).run()
    argv = walk.args("Bring the GPUs to the planned layout")["argv"]
    assert argv == ["/usr/local/sbin/provision-mig", "apply", "--config", "/etc/provision/mig.json", "--allow-reset"]
    written = walk.args("Write the planned layout")["content"]
    assert '"placement": 4' in written
    assert '"profile": "3g.40gb"' in written
    quiet = Walk("mig", os_id, with_mig, {"ansible_check_mode": True}).run()
    assert quiet.args("Bring the GPUs to the planned layout")["argv"][-1] == "--check"
    assert "Enable the boot unit." not in quiet.names()
