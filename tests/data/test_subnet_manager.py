"""Issue 11, item 5: fourth-generation NVSwitch hosts (HGX B200) run the NVLink Subnet Manager beside
Fabric Manager. Each test reads the catalogue rows (gpus.yaml nvswitch_generation, drivers.yaml
subnet_manager) and the sources they cite, then the plans they make."""

import re

import pytest
from support import edited_compat

from provision.errors import CompatDataError, NoCompatibleStack
from provision.fleet.extravars import to_extravars
from provision.matrix.loader import load_matrix
from provision.plan.model import Plan, PlanRequest
from provision.plan.resolve import resolve

OSES = ["ubuntu22.04", "ubuntu24.04", "debian12", "rocky9", "rhel9"]


# -- gpus.yaml: the NVSwitch generation of each NVSwitch baseboard --------------------------------
@pytest.mark.parametrize(
    ("gpu", "generation"),
    [
        ("b200", 4),  # HGX B200: fourth-generation NVSwitch (NVLink 5)
        ("h200", 3),
        ("h100-sxm", 3),
        ("a100-sxm4-80gb", 2),
        ("a100-sxm4-40gb", 2),
    ],
)
def test_nvswitch_generation_of_each_baseboard(real_matrix, gpu, generation):
    row = real_matrix.gpu(gpu)
    assert row.nvswitch
    assert row.nvswitch_generation == generation
    assert "fabric-manager-guide-nvlsm" in row.sources


def test_gpus_without_nvswitch_have_no_generation(real_matrix):
    # V100 SXM2 links its GPUs directly (hybrid cube mesh), PCIe cards by bridge or not at all
    for gpu in real_matrix.gpus:
        assert (gpu.nvswitch_generation is not None) == gpu.nvswitch, gpu.id
    assert real_matrix.gpu("v100-sxm2-32gb").nvswitch_generation is None


ORDINALS = {"second": 2, "third": 3, "fourth": 4}


def test_the_guide_names_the_generations_it_is_cited_for(real_matrix):
    """The rows' NVSwitch generations and the subnet manager's floors read as the cited guide says."""
    title = real_matrix.sources["fabric-manager-guide-nvlsm"].title
    generation_of = {
        model: ORDINALS[word]
        for models, word in re.findall(r"HGX ([A-Z0-9/]+): (second|third|fourth)-", title)
        for model in models.split("/")
    }
    assert set(generation_of.values()) == {2, 3, 4}
    compared = []
    for gpu in real_matrix.gpus:
        model = gpu.id.split("-")[0].upper()  # b200 -> B200, a100-sxm4-80gb -> A100
        if gpu.nvswitch and model in generation_of:
            assert gpu.nvswitch_generation == generation_of[model], gpu.id
            assert "fabric-manager-guide-nvlsm" in gpu.sources, gpu.id
            compared.append(gpu.id)
    assert {"a100-sxm4-80gb", "h100-sxm", "h200", "b200"} <= set(compared)
    sm = real_matrix.subnet_manager
    # the system whose unit starts FM and NVLSM sets the subnet manager's generation and service,
    # and the guide's minimum driver for it the branch floor
    (model, service) = re.findall(r"on HGX (\w+) the ([\w-]+) unit starts FM and NVLSM", title)[0]
    assert sm.nvswitch_generation == generation_of[model]
    assert sm.service == service
    (floor,) = re.findall(r"Version' \(HGX [A-Z0-9/]+: ([0-9]+)\.xx\)", title)
    assert sm.min_branch == int(floor)


# -- drivers.yaml: the subnet manager and how each OS installs it ---------------------------------
def test_subnet_manager_block(real_matrix):
    sm = real_matrix.subnet_manager
    assert sm is not None
    assert sm.nvswitch_generation == 4
    assert sm.min_branch == 570  # Fabric Manager guide: HGX B200/B300/B100 need 570.xx
    assert sm.service == "nvidia-fabricmanager"  # its unit starts FM and NVLSM; NVLSM has none of its own
    assert sm.process == "nvlsm"
    assert sm.kernel_modules == ("ib_umad",)  # the driver container waits for it before starting FM
    assert set(sm.sources) == {"fabric-manager-guide-nvlsm", "gpu-driver-container-nvlink5"}
    for key in sm.sources:
        assert key in real_matrix.sources


def test_every_packaging_row_names_the_subnet_manager_packages(real_matrix):
    for row in real_matrix.driver_packaging:
        sm = row.subnet_manager
        assert sm is not None, row.os
        assert sm.packages == ("nvlsm",)
        assert "infiniband-diags" in sm.requires  # ibstat: the FM start script calls it
        debian_family = row.method == "apt"
        assert ("libibumad3" in sm.requires) == debian_family, row.os
        assert "gpu-driver-container-nvlink5" in row.sources
        if any(o.startswith("ubuntu") for o in row.os):
            assert "fabric-manager-guide-nvlsm" in row.sources  # libibumad3 + infiniband-diags on Ubuntu
        if "debian12" in row.os:
            assert "debian-infiniband-packages" in row.sources


def test_the_floor_admits_every_gpu_that_needs_it(real_matrix):
    sm = real_matrix.subnet_manager
    needing = [g for g in real_matrix.gpus if sm.needed_by(g)]
    assert [g.id for g in needing] == ["b300", "b200"]
    for gpu in needing:
        assert gpu.min_driver is not None
        assert gpu.min_driver.release[0] >= sm.min_branch


@pytest.mark.parametrize(
    ("file", "old", "new", "what"),
    [
        ("gpus.yaml", "    nvswitch_generation: 4\n", "", "'nvswitch_generation' is a required property"),
        (
            "gpus.yaml",
            "    nvswitch: false\n",
            "    nvswitch: false\n    nvswitch_generation: 3\n",
            "should not be valid",
        ),
        ("drivers.yaml", "  min_branch: 570\n", "", "'min_branch' is a required property"),
        (
            "drivers.yaml",
            'subnet_manager: {packages: ["nvlsm"]',
            "subnet_manager: {packages: []",
            "should be non-empty",
        ),
        (
            "drivers.yaml",
            "  sources: [fabric-manager-guide-nvlsm, gpu-driver-container-nvlink5]",
            "  sources: [nvlsm-guide-that-is-not-there]",
            "cites unknown source 'nvlsm-guide-that-is-not-there'",
        ),
    ],
)
def test_the_schema_and_invariants_hold_the_rows(tmp_path, file, old, new, what):
    with pytest.raises(CompatDataError) as info:
        load_matrix(edited_compat(tmp_path, file, old, new))
    assert what in str(info.value)


# -- plans -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("os_id", OSES)
def test_a_b200_plan_carries_the_subnet_manager(real_matrix, os_id):
    plan = resolve(real_matrix, PlanRequest(os=os_id, gpu="b200"))
    row = real_matrix.packaging_for(os_id, int(plan.driver.branch), plan.driver.kernel_module)
    sm = plan.subnet_manager
    assert sm is not None
    assert sm.service == "nvidia-fabricmanager"
    assert sm.process == "nvlsm"
    assert sm.packages == row.subnet_manager.packages
    assert sm.requires == row.subnet_manager.requires
    assert sm.kernel_modules == ("ib_umad",)
    assert plan.fabric_manager is not None  # beside Fabric Manager, not instead of it
    (why,) = [r for r in plan.reasons if r.component == "subnet-manager"]
    assert why.source == "fabric-manager-guide-nvlsm"
    assert why.text.startswith("nvlsm (NVLink Subnet Manager")
    assert "generation 4 NVSwitch" in why.text
    assert why.text.endswith("nvidia-fabricmanager starts both")
    components = [r.component for r in plan.reasons]
    assert components.index("subnet-manager") == components.index("fabric-manager") + 1


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200", "a100-sxm4-80gb"])
@pytest.mark.parametrize("os_id", ["ubuntu22.04", "rocky9"])
def test_earlier_nvswitch_generations_have_fabric_manager_alone(real_matrix, os_id, gpu):
    plan = resolve(real_matrix, PlanRequest(os=os_id, gpu=gpu))
    assert plan.fabric_manager is not None
    assert plan.subnet_manager is None
    (why,) = [r for r in plan.reasons if r.component == "subnet-manager"]
    assert why.text.startswith("none:")
    assert "Fabric Manager alone" in why.text


def test_gpus_without_nvswitch_say_nothing_of_a_subnet_manager(real_matrix):
    plan = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="l40s"))
    assert plan.subnet_manager is None
    assert plan.fabric_manager is None
    assert "subnet-manager" not in {r.component for r in plan.reasons}


def test_the_lock_file_round_trips_and_earlier_locks_keep_their_digest(real_matrix):
    b200 = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="b200"))
    doc = b200.to_dict()
    assert doc["subnet_manager"] == {
        "service": "nvidia-fabricmanager",
        "process": "nvlsm",
        "packages": ["nvlsm"],
        "requires": ["infiniband-diags", "libibumad3"],
        "kernel_modules": ["ib_umad"],
    }
    assert Plan.from_dict(doc) == b200
    h100 = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="h100-sxm")).to_dict()
    written_before = {k: v for k, v in h100.items() if k != "subnet_manager"}  # a lock from before the field
    assert Plan.from_dict(written_before).digest() == h100["digest"]


def test_an_edited_subnet_manager_is_refused(real_matrix):
    from provision.errors import InputError

    doc = resolve(real_matrix, PlanRequest(os="ubuntu22.04", gpu="b200")).to_dict()
    doc["subnet_manager"]["packages"] = ["nvlsm; curl evil"]
    with pytest.raises(InputError, match=r"subnet_manager\.packages\.0"):
        Plan.from_dict(doc)


def test_a_branch_below_the_floor_is_eliminated(real_matrix):
    sm = real_matrix.subnet_manager
    raised = real_matrix._replace(subnet_manager=sm._replace(min_branch=600))
    with pytest.raises(NoCompatibleStack) as info:
        resolve(raised, PlanRequest(os="ubuntu22.04", gpu="b200", driver="595"))
    assert "subnet-manager" in info.value.kinds
    assert any("R600 first" in why for _, why in info.value.eliminations)
    assert resolve(raised, PlanRequest(os="ubuntu22.04", gpu="b200")).driver.branch == "620"
    # the floor binds only GPUs that need the subnet manager
    assert resolve(raised, PlanRequest(os="ubuntu22.04", gpu="h100-sxm", driver="595")).driver.branch == "595"


def test_an_os_without_subnet_manager_packages_cannot_serve_a_b200(real_matrix):
    stripped = real_matrix._replace(
        driver_packaging=tuple(
            p._replace(subnet_manager=None) if "rocky9" in p.os else p for p in real_matrix.driver_packaging
        )
    )
    with pytest.raises(NoCompatibleStack) as info:
        resolve(stripped, PlanRequest(os="rocky9", gpu="b200"))
    assert any("no catalogued rocky9 NVLink Subnet Manager packages" in why for _, why in info.value.eliminations)
    assert resolve(stripped, PlanRequest(os="rocky9", gpu="h100-sxm")).subnet_manager is None


def test_extravars_carry_the_subnet_manager_to_the_role(real_matrix):
    b200 = to_extravars(resolve(real_matrix, PlanRequest(os="rocky9", gpu="b200")))
    assert b200["provision_subnet_manager_packages"] == ["nvlsm"]
    assert b200["provision_subnet_manager_requires"] == ["infiniband-diags"]
    assert b200["provision_subnet_manager_kernel_modules"] == ["ib_umad"]
    h100 = to_extravars(resolve(real_matrix, PlanRequest(os="rocky9", gpu="h100-sxm")))
    assert h100["provision_subnet_manager_packages"] == []
    assert h100["provision_subnet_manager_kernel_modules"] == []


def test_plan_table_names_it(cli):
    res = cli("plan", "--os", "ubuntu22.04", "--gpu", "b200")
    assert res.code == 0
    assert "subnet manager     nvlsm (run by nvidia-fabricmanager)" in res.out
    assert "[subnet-manager] nvlsm" in res.out
    res = cli("plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm")
    assert "subnet manager     " not in res.out
