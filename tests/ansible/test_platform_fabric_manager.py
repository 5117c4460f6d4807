"""The roles, the health gate and the converged state agree with a platform's plan on Fabric Manager
(issue 25): an HGX A100 or H100 4-GPU board connects its SXM GPUs by NVLink without NVSwitch, so a
`--platform hgx-*-4gpu` plan lists no Fabric Manager, and then nvidia_driver installs, holds, locks
and starts none, the health gate does not require nvidia-fabricmanager and the converged state does
not record it; a DGX (NVSwitch) plan gets all of it. nvidia_driver_fabric_manager_start: false
installs it but neither starts it nor has the gate require it."""

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from paths import SITE, SITE_VARS
from walker import Walk, trust

from provision.fleet.extravars import dump_unsafe_yaml, to_extravars
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

FM = "nvidia-fabricmanager"
START = "Enable and start nvidia-fabricmanager (NVSwitch systems)."
INSTALL = "Install the driver, Fabric Manager and kernel headers at the planned versions."
HOLD = "Hold the driver and Fabric Manager packages."
LOCK = "Lock the driver and Fabric Manager packages at the planned version."
GATE = "Check the host's health before it returns to service."

FOUR_GPU = [
    ("hgx-h100-4gpu", None),
    ("hgx-a100-4gpu", None),  # the a100-sxm4 group, as `provision plan --platform hgx-a100-4gpu` implies it
    ("hgx-a100-4gpu", "a100-sxm4-80gb"),
    ("hgx-a100-4gpu", "a100-sxm4-40gb"),
]
NVSWITCH = [("dgx-h100", None), ("dgx-a100", None), ("dgx-a100", "a100-sxm4-80gb"), ("hgx-a100-8gpu", "a100-sxm4-40gb")]


def plan_vars(real_matrix, os_id: str, platform: str, gpu: str | None) -> dict:
    """The plan's variables as `provision plan --format ansible` writes them and Ansible reads them."""
    extravars = to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu, platform=platform)))
    return yaml.load(dump_unsafe_yaml(extravars), Loader=_UnsafeLoader)  # !unsafe: the strings as they are


class _UnsafeLoader(yaml.SafeLoader):
    pass


_UnsafeLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def gate_services(variables: dict, **site) -> list[str]:
    """The units site.yml's health gate requires, rendered with the plan's and the site's variables."""
    (task,) = [t for t in yaml.safe_load(SITE.read_text())[-1]["post_tasks"] if t["name"] == GATE]
    templar = Templar(loader=DataLoader(), variables={**variables, **site})
    return templar.template(trust(task["provision.gpu.health"]["services"]))


def managed_services(variables: dict, **site) -> list[str]:
    shared = trust(yaml.safe_load(SITE_VARS.read_text()))
    templar = Templar(loader=DataLoader(), variables={**variables, **site, **shared})
    return templar.template(shared["provision_managed_services"])


def walk(variables: dict, os_id: str, **site) -> Walk:
    return Walk("nvidia_driver", os_id, variables, site).run()


def installed(w: Walk) -> list[str]:
    return [name for name in w.args(INSTALL)["name"] if not name.startswith("linux-headers")]


@pytest.mark.parametrize("os_id", ["ubuntu22.04", "rocky9"])
@pytest.mark.parametrize(("platform", "gpu"), FOUR_GPU)
def test_a_four_gpu_board_gets_no_fabric_manager_anywhere(real_matrix, os_id, platform, gpu):
    variables = plan_vars(real_matrix, os_id, platform, gpu)
    assert variables["provision_fabric_manager_packages"] == []
    assert variables["provision_fabric_manager_version"] == ""
    assert variables["provision_subnet_manager_packages"] == []
    assert variables["provision_gpu_nvswitch"] is False
    w = walk(variables, os_id, nvidia_driver_locks={"stdout": ""})
    assert not any(FM in name for name in installed(w)), installed(w)  # not installed
    assert START not in w.names()  # not started
    if os_id == "ubuntu22.04":
        assert FM not in w.render(w.task(HOLD)["loop"])
    else:
        assert FM not in " ".join(w.args(LOCK)["argv"])
    assert FM not in gate_services(variables)  # not required by the health gate
    assert gate_services(variables) == ["nvidia-persistenced", "docker"]
    assert FM not in managed_services(variables)  # not recorded as converged state


@pytest.mark.parametrize("os_id", ["ubuntu22.04", "rocky9"])
@pytest.mark.parametrize(("platform", "gpu"), NVSWITCH)
def test_an_nvswitch_platform_gets_fabric_manager_everywhere(real_matrix, os_id, platform, gpu):
    variables = plan_vars(real_matrix, os_id, platform, gpu)
    assert variables["provision_fabric_manager_packages"]
    assert variables["provision_gpu_nvswitch"] is True
    w = walk(variables, os_id, nvidia_driver_locks={"stdout": ""})
    assert any(FM in name for name in installed(w)), installed(w)
    assert START in w.names()
    assert FM in gate_services(variables)
    assert FM in managed_services(variables)


@pytest.mark.parametrize("os_id", ["ubuntu22.04", "rocky9"])
def test_the_same_gpu_without_a_platform_still_plans_fabric_manager(real_matrix, os_id):
    """The platform decides: h100-sxm alone is read as the 8-GPU NVSwitch board (gpus.yaml nvswitch)."""
    alone = to_extravars(resolve(real_matrix, PlanRequest(os=os_id, gpu="h100-sxm")))
    assert alone["provision_fabric_manager_packages"]
    assert FM in gate_services(alone)


def test_fabric_manager_start_false_installs_it_but_neither_starts_nor_requires_it(real_matrix):
    variables = plan_vars(real_matrix, "ubuntu22.04", "dgx-h100", None)
    w = walk(variables, "ubuntu22.04", nvidia_driver_fabric_manager_start=False)
    assert any(FM in name for name in installed(w))
    assert START not in w.names()
    assert FM not in gate_services(variables, nvidia_driver_fabric_manager_start=False)


def test_the_start_switch_is_documented_in_the_role_and_the_collection():
    from paths import COLLECTION, ROLES

    spec = yaml.safe_load((ROLES / "nvidia_driver" / "meta" / "argument_specs.yml").read_text())
    option = spec["argument_specs"]["main"]["options"]["nvidia_driver_fabric_manager_start"]
    assert option["type"] == "bool"
    assert option["default"] is True
    text = " ".join(option["description"].split())
    assert "health gate" in text
    assert "4-GPU" in text
    readme = " ".join((COLLECTION / "README.md").read_text().split())
    assert "nvidia_driver_fabric_manager_start" in readme
