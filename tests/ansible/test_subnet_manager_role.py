"""The nvidia_driver role installs, holds and loads the NVLink Subnet Manager exactly when the plan
lists it (fourth-generation NVSwitch: HGX B200), on the Debian and the RedHat family."""

import pytest
from walker import Walk

from provision.fleet.extravars import to_extravars
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

INSTALL = "Install the NVLink Subnet Manager and the InfiniBand userspace it needs."
HOLD = "Hold the NVLink Subnet Manager where it was installed."
LOCK = "Lock the NVLink Subnet Manager where it was installed."
AT_BOOT = "Load the NVLink Subnet Manager's kernel modules at boot."
NOW = "Load the NVLink Subnet Manager's kernel modules now."
ALL = (INSTALL, HOLD, LOCK, AT_BOOT, NOW)


def plan_vars(real_matrix, os_id, gpu):
    return to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu)))


def walk(real_matrix, os_id, gpu="b200", **overrides):
    return Walk("nvidia_driver", os_id, plan_vars(real_matrix, os_id, gpu), overrides).run()


@pytest.mark.parametrize("os_id", ["ubuntu22.04", "debian12"])
def test_debian_family_installs_and_holds_nvlsm(real_matrix, os_id):
    w = walk(real_matrix, os_id)
    assert w.args(INSTALL)["name"] == ["nvlsm", "infiniband-diags", "libibumad3"]
    assert "=" not in "".join(w.args(INSTALL)["name"])  # versioned on its own: the repository's
    hold = w.task(HOLD)
    assert w.render(hold["loop"]) == ["nvlsm"]
    assert hold["args"] == {"name": "{{ item }}", "selection": "hold"}
    assert LOCK not in w.names()
    # installed after the driver and Fabric Manager, which the same file pins
    names = w.names()
    assert names.index(INSTALL) > names.index(
        "Install the driver, Fabric Manager and kernel headers at the planned versions."
    )


@pytest.mark.parametrize("os_id", ["rocky9", "rhel9"])
def test_redhat_family_installs_and_versionlocks_nvlsm(real_matrix, os_id):
    locked = "nvidia-open-0:620.70.06-1.el9.*\nnvidia-fabricmanager-0:620.70.06-1.el9.*"
    w = walk(real_matrix, os_id, nvidia_driver_locks={"stdout": locked})
    assert w.args(INSTALL)["name"] == ["nvlsm", "infiniband-diags"]
    assert w.args(LOCK)["argv"] == ["dnf", "versionlock", "add", "nvlsm"]
    assert HOLD not in w.names()
    # already locked (at whatever version it was installed): no second lock
    again = walk(real_matrix, os_id, nvidia_driver_locks={"stdout": locked + "\nnvlsm-0:2025.10.14-1.*"})
    assert LOCK not in again.names()
    assert INSTALL in again.names()


@pytest.mark.parametrize("os_id", ["ubuntu22.04", "rocky9"])
def test_ib_umad_is_loaded_at_boot_and_now(real_matrix, os_id):
    w = walk(real_matrix, os_id, nvidia_driver_sm_modules={"results": [{"item": "ib_umad", "stat": {"exists": False}}]})
    boot = w.args(AT_BOOT)
    assert boot["dest"] == "/etc/modules-load.d/provision-nvlsm.conf"
    assert boot["content"].splitlines()[1:] == ["ib_umad"]
    assert w.args(NOW)["argv"] == ["modprobe", "-a", "ib_umad"]
    names = w.names()
    assert names.index(NOW) < names.index("Enable and start nvidia-fabricmanager (NVSwitch systems).")
    loaded = walk(
        real_matrix, os_id, nvidia_driver_sm_modules={"results": [{"item": "ib_umad", "stat": {"exists": True}}]}
    )
    assert NOW not in loaded.names()
    container = walk(real_matrix, os_id, nvidia_driver_manage_kernel_modules=False)
    assert NOW not in container.names()
    assert AT_BOOT in container.names()  # a file, written for the host the image will boot on


@pytest.mark.parametrize("os_id", ["ubuntu22.04", "debian12", "rocky9", "rhel9"])
@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-pcie"])
def test_earlier_nvswitch_and_pcie_hosts_get_none_of_it(real_matrix, os_id, gpu):
    names = walk(real_matrix, os_id, gpu).names()
    assert not set(ALL) & set(names)


def test_the_site_can_switch_it_off(real_matrix):
    w = walk(real_matrix, "ubuntu22.04", nvidia_driver_subnet_manager=False)
    assert not set(ALL) & set(w.names())
    assert "Enable and start nvidia-fabricmanager (NVSwitch systems)." in w.names()
