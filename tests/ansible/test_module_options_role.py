"""The nvidia_driver role writes the plan's kernel-module options (GH200 from R580:
NVreg_CoherentGPUMemoryMode=driver) to a modprobe.d file it manages, and removes that file when the
plan carries none (H100), on the Debian and the RedHat family."""

import pytest
import yaml
from paths import ROLES
from walker import Walk

from provision.fleet.extravars import to_extravars
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

WRITE = "Write the plan's kernel-module options."
REMOVE = "Remove kernel-module options the plan no longer carries."
INSTALL = "Install the driver from the OS family's repository."
CONF = "/etc/modprobe.d/provision-nvidia.conf"


def walk(real_matrix, os_id, gpu, **pins):
    extravars = to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu, **pins)))
    return extravars, Walk("nvidia_driver", os_id, extravars).run()


@pytest.mark.parametrize("os_id", ["ubuntu22.04", "rocky9", "rhel9"])
def test_gh200_gets_the_coherent_memory_option_before_the_driver(real_matrix, os_id):
    extravars, w = walk(real_matrix, os_id, "gh200")
    assert extravars["provision_driver_module_options"] == [
        {"module": "nvidia", "option": "NVreg_CoherentGPUMemoryMode", "value": "driver"}
    ]
    assert REMOVE not in w.names()
    args = w.args(WRITE)
    assert args["dest"] == CONF
    content = w.render(args["content"])
    assert "options nvidia NVreg_CoherentGPUMemoryMode=driver\n" in content
    assert [ln for ln in content.splitlines() if ln.startswith("options ")] == [
        "options nvidia NVreg_CoherentGPUMemoryMode=driver"
    ]
    raw = {t["name"]: t for t in yaml.safe_load((ROLES / "nvidia_driver" / "tasks" / "main.yml").read_text())}
    assert raw[WRITE]["notify"] == raw[REMOVE]["notify"] == "Rebuild the initramfs."  # the initramfs carries modprobe.d
    names = w.names()
    assert names.index(WRITE) < names.index(INSTALL)  # the driver's first load reads it


@pytest.mark.parametrize("os_id", ["ubuntu22.04", "rocky9"])
def test_h100_writes_no_options_and_removes_a_stale_file(real_matrix, os_id):
    extravars, w = walk(real_matrix, os_id, "h100-sxm")
    assert extravars["provision_driver_module_options"] == []
    assert WRITE not in w.names()
    assert w.args(REMOVE) == {"path": CONF, "state": "absent"}


def test_gh200_below_the_branch_floor_gets_no_option(real_matrix):
    extravars, w = walk(real_matrix, "ubuntu22.04", "gh200", driver="570")
    assert extravars["provision_driver_branch"] == "570"
    assert extravars["provision_driver_module_options"] == []
    assert WRITE not in w.names()
    assert REMOVE in w.names()
