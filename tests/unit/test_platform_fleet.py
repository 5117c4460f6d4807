"""Fleet files take `platform:` (issue 25): a group's plan is resolved with PlanRequest.platform, so
the platform implies the GPU or checks the group's gpu:, and Fabric Manager follows the platform's
interconnect. `provision inventory check`, `provision apply` and `provision check` read it; an
unknown platform or a GPU the platform does not take is refused in one line (exit 2). The real
catalogue (compat/platforms.yaml)."""

import pytest
import yaml
from support import COMPAT

from provision.errors import InputError
from provision.fleet.apply import load_plans
from provision.fleet.inventory import load_fleet

INVENTORY = {
    "all": {
        "children": {
            "dgx": {"hosts": {"n1": {"ansible_host": "127.0.0.1", "ansible_port": 2201}}},
            "hgx4": {"hosts": {"n2": {"ansible_host": "127.0.0.1", "ansible_port": 2202}}},
        }
    }
}
FLEET = {
    "dgx": {"os": "ubuntu22.04", "platform": "dgx-h100"},
    "hgx4": {"os": "ubuntu22.04", "platform": "hgx-h100-4gpu", "gpu": "h100-sxm"},
}


@pytest.fixture(autouse=True)
def _real_catalogue(monkeypatch):
    monkeypatch.setenv("PROVISION_COMPAT_DIR", str(COMPAT))


def write(tmp_path, groups, name="fleet.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"groups": groups}))
    return str(path)


def inventory(tmp_path):
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump(INVENTORY))
    return str(path)


# -- load_fleet: the key ---------------------------------------------------------------------
def test_a_group_may_name_a_platform_instead_of_a_gpu(tmp_path):
    dgx, hgx4 = load_fleet(write(tmp_path, FLEET))
    assert dgx.request == {"os": "ubuntu22.04", "platform": "dgx-h100", "gpu": None}
    assert hgx4.request == {"os": "ubuntu22.04", "platform": "hgx-h100-4gpu", "gpu": "h100-sxm"}


@pytest.mark.parametrize(
    ("group", "text"),
    [
        ({"os": "ubuntu22.04"}, "needs os and gpu (or a platform that implies the GPU)"),
        ({"os": "ubuntu22.04", "platform": None}, "needs os and gpu (or a platform that implies the GPU)"),
        ({"os": None, "platform": "dgx-h100"}, "needs os and gpu (or a platform that implies the GPU)"),
        ({"platform": "dgx-h100"}, "needs os and gpu (or a platform that implies the GPU)"),
        ({"os": "ubuntu22.04", "platform": 9680}, "platform must be a string of one line, not 9680"),
        ({"os": "ubuntu22.04", "platform": "dgx-h100\nx"}, "platform must be a string of one line"),
        ({"os": "ubuntu22.04", "platform": ["dgx-h100"]}, "platform must be a string of one line"),
        ({"lock": "a.lock.json", "platform": "dgx-h100"}, "mixes lock with request fields (platform)"),
    ],
    ids=["no-gpu-no-platform", "platform-null", "os-null", "no-os", "number", "two-lines", "list", "with-lock"],
)
def test_bad_platform_keys_are_refused_when_the_file_is_read(tmp_path, group, text):
    with pytest.raises(InputError) as caught:
        load_fleet(write(tmp_path, {"g": group}))
    assert text in caught.value.message
    assert caught.value.hint


# -- the group's plan -------------------------------------------------------------------------
def test_the_groups_plans_follow_their_platforms(tmp_path, real_matrix):
    plans, groups = load_plans(None, write(tmp_path, FLEET), lambda: real_matrix)
    assert groups == ["dgx", "hgx4"]
    dgx, hgx4 = plans["dgx"], plans["hgx4"]
    assert dgx.request.platform == "dgx-h100"
    assert dgx.gpu.id == "h100-sxm"  # implied by the platform
    assert dgx.server.id == "dgx-h100"
    assert dgx.server.gpu_count == 8
    assert dgx.fabric_manager is not None
    # the same GPU on a 4-GPU board: NVLink without NVSwitch, so no Fabric Manager
    assert hgx4.gpu.id == "h100-sxm"
    assert hgx4.server.id == "hgx-h100-4gpu"
    assert hgx4.server.gpu_count == 4
    assert hgx4.fabric_manager is None
    assert hgx4.subnet_manager is None
    assert not hgx4.gpu.nvswitch


def test_an_alias_resolves_to_the_platform(tmp_path, real_matrix):
    plans, _ = load_plans(None, write(tmp_path, {"g": {"os": "rocky9", "platform": "dgxh100"}}), lambda: real_matrix)
    assert plans["g"].server.id == "dgx-h100"


# -- the commands ----------------------------------------------------------------------------
def test_inventory_check_and_check_read_platforms(cli, tmp_path):
    fleet = write(tmp_path, FLEET)
    r = cli("inventory", "check", "-i", inventory(tmp_path), "--fleet", fleet)
    assert r.code == 0, r
    assert "plan dgx: h100-sxm in dgx-h100 (x8) on ubuntu22.04" in r.out
    assert "plan hgx4: h100-sxm in hgx-h100-4gpu (x4) on ubuntu22.04" in r.out
    assert "pass  plans: 2 group plan(s) resolve" in r.out
    image = tmp_path / "img.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--lock", str(image), "--format", "json").code == 0
    r = cli("check", "--fleet", fleet, "--images", str(image))
    assert r.code == 0, r
    assert "2 of 2 assigned pairs run" in r.out


REFUSED = [
    (
        {**FLEET, "dgx": {"os": "ubuntu22.04", "platform": "dgx-h10"}},
        "error: fleet group 'dgx': unknown platform 'dgx-h10'",
        "hint: did you mean dgx-h100? (list: provision matrix platforms)",
    ),
    (
        {**FLEET, "hgx4": {"os": "ubuntu22.04", "platform": "r750xa", "gpu": "a100-sxm4-80gb"}},
        "error: fleet group 'hgx4': platform r750xa (Dell PowerEdge R750xa) takes PCIe cards; "
        "a100-sxm4-80gb is an SXM4 module",
        "a100-pcie-80gb",
    ),
    (
        {**FLEET, "hgx4": {"os": "ubuntu22.04", "platform": "dgx-a100", "gpu": "h100-sxm"}},
        "error: fleet group 'hgx4': platform dgx-a100 (NVIDIA DGX A100) takes SXM4 modules; h100-sxm is an SXM5 module",
        "a100-sxm4-80gb",
    ),
    (
        {**FLEET, "hgx4": {"os": "ubuntu22.04", "platform": "xe9680"}},  # no catalogued group of its 3 models
        "error: fleet group 'hgx4': platform xe9680 (Dell PowerEdge XE9680) takes 3 GPU models: --gpu must say which",
        "h200",
    ),
]


@pytest.mark.parametrize(("groups", "error", "hint"), REFUSED, ids=["unknown", "pcie-server", "sxm4-board", "two-gpus"])
def test_inventory_check_apply_and_check_refuse_a_bad_platform_alike(cli, tmp_path, groups, error, hint):
    fleet, inv = write(tmp_path, groups), inventory(tmp_path)
    image = tmp_path / "img.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--lock", str(image), "--format", "json").code == 0
    run_dir = tmp_path / "run"
    for args in (
        ("inventory", "check", "-i", inv, "--fleet", fleet),
        ("apply", "-i", inv, "--fleet", fleet, "--run-dir", str(run_dir)),
        ("check", "--fleet", fleet, "--images", str(image)),
    ):
        r = cli(*args)
        assert r.code == 2, (args, r)
        lines = r.err.splitlines()
        assert error in lines, (args, r)  # one line, as written
        assert any(line.startswith("hint: ") and hint in line for line in lines), (args, r)
        assert "Traceback" not in r.err
        assert "ok:" not in r.out
    assert not run_dir.exists(), "apply ran nothing"
