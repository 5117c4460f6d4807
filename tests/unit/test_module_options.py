"""Kernel-module options a GPU needs (GH200 from R580: NVreg_CoherentGPUMemoryMode=driver): the catalogue
fact, the plan that carries it (digest, lock round trip, schema), and the verify check that reads it back.

Sources, quoted verbatim: NVIDIA/gpu-driver-container @06a208ca ubuntu22.04/nvidia-driver (added in b8f5eaa,
"enable CDMM by default for drivers R580 & greater") and open-gpu-kernel-modules kernel-open/nvidia/nv-reg.h,
nv-procfs.c (first in tag 580.65.06, absent from 575.64.05)."""

from __future__ import annotations

import json

import pytest

from provision.errors import InputError
from provision.plan.model import Plan, PlanRequest
from provision.plan.resolve import resolve
from provision.verify import Target
from provision.verify.checks import check_driver
from provision.verify.facts import HostFacts

DRIVER_CONTAINER = """\
    # Starting from R580, we need to enable the CDMM (Coherent Driver Memory Management) module parameter.
    # This prevents the GPU memory for coherent systems (GH200, GB200 etc) from being exposed as a NUMA node
    # and thereby preventing over-reporting of a Kubernetes node's memory. This is needed for Kubernetes use-cases
    NVIDIA_MODULE_PARAMS+=("NVreg_CoherentGPUMemoryMode=driver")
"""
NV_REG_H = ' *  "driver" : disable onlining coherent memory to the OS as a NUMA node. The driver\n'
NV_PROCFS = 'seq_printf(s, "CoherentGPUMemoryMode: \\"%s\\"\\n",'
OGKM_TAGS_WITH_OPTION = {"575.64.05": False, "580.65.06": True, "580.76.05": True}

Failed = pytest.fail.Exception
Skipped = pytest.skip.Exception


def test_the_catalogue_row_is_the_driver_containers_parameter(real_matrix):
    (opt,) = real_matrix.gpu("gh200").module_options
    module_param = DRIVER_CONTAINER.split('NVIDIA_MODULE_PARAMS+=("')[1].split('")', maxsplit=1)[0]
    assert f"{opt.option}={opt.value}" == module_param
    assert opt.module == "nvidia"  # NVIDIA_MODULE_PARAMS: the nvidia module's
    assert "Starting from R580" in DRIVER_CONTAINER
    assert opt.min_branch == 580
    first = min(int(t.split(".")[0]) for t, has in OGKM_TAGS_WITH_OPTION.items() if has)
    assert first == opt.min_branch
    assert '"driver"' in NV_REG_H
    assert opt.value == "driver"
    assert {real_matrix.sources[s].kind for s in opt.sources} == {"primary"}
    assert "GH200" in DRIVER_CONTAINER
    # only the coherent (Grace) GPUs carry it
    assert {g.id for g in real_matrix.gpus if g.module_options} == {"gh200"}


@pytest.mark.parametrize("os_id", ["ubuntu22.04", "rocky9"])
def test_a_gh200_plan_carries_it_from_r580(real_matrix, os_id):
    plan = resolve(real_matrix, PlanRequest(os=os_id, gpu="gh200"))
    assert int(plan.driver.branch) >= 580
    (opt,) = plan.driver.module_options
    assert (opt.module, opt.option, opt.value, opt.source) == (
        "nvidia",
        "NVreg_CoherentGPUMemoryMode",
        "driver",
        "gpu-driver-container-cdmm",
    )
    assert any("NVreg_CoherentGPUMemoryMode=driver" in r.text for r in plan.reasons)
    doc = plan.to_dict()
    assert doc["driver"]["module_options"] == [opt._asdict()]
    again = Plan.from_dict(json.loads(json.dumps(doc)))
    assert again == plan
    # part of what the digest pins
    assert plan._replace(driver=plan.driver._replace(module_options=())).digest() != plan.digest()


def test_below_the_floor_and_on_other_gpus_there_is_none(real_matrix):
    old = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="gh200", driver="570"))
    assert old.driver.branch == "570"
    assert old.driver.module_options == ()
    h100 = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm"))
    assert h100.driver.module_options == ()
    assert "module_options" in h100.to_dict()["driver"]


def test_a_lock_without_the_field_still_verifies(real_matrix):
    """Locks written before plans carried module options load with none and keep their digest."""
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm"))
    doc = plan.to_dict()
    doc["driver"].pop("module_options")
    loaded = Plan.from_dict(doc, origin="old.lock.json")
    assert loaded.driver.module_options == ()
    assert loaded.digest() == doc["digest"] == plan.digest()


@pytest.mark.parametrize(
    ("field", "value"),
    [("option", "NVreg_X; rm -rf /"), ("value", "driver\noptions nvidia NVreg_Evil=1"), ("module", "ext4")],
)
def test_the_schema_refuses_a_tampered_option(real_matrix, field, value):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="gh200"))
    doc = plan.to_dict()
    doc["driver"]["module_options"][0][field] = value
    with pytest.raises(InputError, match="module_options"):
        Plan.from_dict(doc, origin="edited.lock.json")


# -- verify -------------------------------------------------------------------------------------
class Res:
    def __init__(self, rc=0, stdout="", stderr=""):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr


class FakeHost:
    def __init__(self, files: dict[str, str]):
        self.files = files

    def run(self, command):
        if command.startswith("systemd-detect-virt"):
            return Res(1, "none\n")
        for path, content in self.files.items():
            if path in command and "cat " in command:
                return Res(0, content)
        return Res(1, "", "No such file or directory")

    def file(self, path):
        return type("F", (), {"exists": False})()


def outcome(plan, files):
    evidence: list[str] = []
    facts = HostFacts(FakeHost(files), Target("h", "ssh://h", plan))
    try:
        check_driver.check_module_options(facts=facts, plan=plan, evidence=evidence.append)
    except Failed as exc:
        return "fail", str(exc), evidence
    except Skipped as exc:
        return "skip", str(exc), evidence
    return "pass", "", evidence


CONF = "# Managed by provision: kernel-module options the plan carries for gh200.\n"
CONF += "options nvidia NVreg_CoherentGPUMemoryMode=driver\n"
PARAMS = 'ResmanDebugLevel: 4294967295\nCoherentGPUMemoryMode: "driver"\nRegistryDwords: ""\n'


def test_verify_passes_when_configured_and_loaded(real_matrix):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="gh200"))
    files = {"/etc/modprobe.d/provision-nvidia.conf": CONF, "/proc/driver/nvidia/params": PARAMS}
    assert 'CoherentGPUMemoryMode: \\"' in NV_PROCFS  # the line PARAMS imitates
    state, _, evidence = outcome(plan, files)
    assert state == "pass", evidence
    assert "loaded 'driver'" in evidence[0]


def test_verify_fails_until_the_module_is_reloaded(real_matrix):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="gh200"))
    unset = PARAMS.replace('"driver"', '""')
    state, message, _ = outcome(
        plan, {"/etc/modprobe.d/provision-nvidia.conf": CONF, "/proc/driver/nvidia/params": unset}
    )
    assert state == "fail"
    assert "NVreg_CoherentGPUMemoryMode=unset, planned driver" in message
    assert "reboot" in message
    state, message, _ = outcome(plan, {"/proc/driver/nvidia/params": PARAMS})
    assert state == "fail"
    assert "lacks 'options nvidia NVreg_CoherentGPUMemoryMode=driver'" in message


def test_verify_skips_without_planned_options(real_matrix):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm"))
    state, message, _ = outcome(plan, {})
    assert state == "skip"
    assert "no kernel-module options" in message
