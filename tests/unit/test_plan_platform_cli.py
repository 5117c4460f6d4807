"""`provision plan --platform` (issue 25 item 2), as a user types it: the platform implies the GPU,
decides Fabric Manager from its interconnect, records the server, and refuses a GPU it does not take."""

from __future__ import annotations

import json

import pytest


def plan_json(cli, *args):
    r = cli("plan", "--os", "ubuntu22.04", *args, "--format", "json")
    assert r.code == 0, r
    return json.loads(r.out)


def test_dgx_a100_implies_a100_sxm4_x8_with_fabric_manager(cli, real_matrix):
    doc = plan_json(cli, "--platform", "dgx-a100")
    platform = real_matrix.platform("dgx-a100")
    assert doc["gpu"]["id"] == "a100-sxm4"  # the catalogued group of exactly the GPUs DGX A100 takes
    assert {m for g in real_matrix.gpu_groups if g.id == "a100-sxm4" for m in g.members} == set(platform.gpus)
    assert doc["request"]["platform"] == "dgx-a100"
    assert doc["server"]["gpu_count"] == 8
    assert doc["server"]["interconnect"] == "nvswitch"
    assert doc["fabric_manager"]["package"].startswith("nvidia-fabricmanager")
    assert doc["fabric_manager"]["version"] == doc["driver"]["version"]


@pytest.mark.parametrize("platform", ["hgx-a100-4gpu", "hgx-h100-4gpu"])
def test_a_4_gpu_nvlink_board_gets_no_fabric_manager(cli, platform):
    doc = plan_json(cli, "--platform", platform)
    assert doc["server"]["interconnect"] == "nvlink"
    assert doc["fabric_manager"] is None
    table = cli("plan", "--os", "ubuntu22.04", "--platform", platform)
    assert table.code == 0
    text = " ".join(table.out.split())
    assert "fabric manager not needed" in text
    assert f"({platform}): 4 GPUs" in text


def test_the_same_gpu_without_the_platform_gets_fabric_manager(cli):
    assert plan_json(cli, "--gpu", "h100-sxm")["fabric_manager"] is not None  # the form factor's default


def test_a_gpu_the_platform_does_not_take_is_refused_naming_its_form_factor(cli):
    r = cli("plan", "--os", "ubuntu22.04", "--platform", "r750xa", "--gpu", "a100-sxm4-80gb")
    assert r.code == 2
    assert r.err.splitlines()[0] == (
        "error: platform r750xa (Dell PowerEdge R750xa) takes PCIe cards; a100-sxm4-80gb is an SXM4 module"
    )
    assert r.err.splitlines()[1].startswith("hint: ")
    assert "--gpu a100-pcie-80gb" in r.err
    assert "Traceback" not in r.err


def test_a_platform_checks_a_gpu_it_takes(cli):
    doc = plan_json(cli, "--platform", "r750xa", "--gpu", "a100-pcie")
    assert doc["gpu"]["id"] == "a100-pcie"
    assert doc["server"]["id"] == "r750xa"
    assert doc["fabric_manager"] is None


def test_neither_gpu_nor_platform_is_one_line_and_exit_2(cli):
    r = cli("plan", "--os", "ubuntu22.04")
    assert r.code == 2
    assert r.err.splitlines() == [
        "error: give --gpu, or --platform to imply it",
        "hint: provision matrix gpus lists the GPUs, provision matrix platforms the servers and baseboards",
    ]


def test_an_unknown_platform_gets_did_you_mean(cli):
    r = cli("plan", "--os", "ubuntu22.04", "--platform", "dgx-a10")
    assert r.code == 2
    assert "unknown platform 'dgx-a10'" in r.err.splitlines()[0]
    assert "dgx-a100" in r.err


def test_help_names_the_option(cli):
    r = cli("plan", "--help")
    assert r.code == 0
    assert "--platform PLATFORM" in r.out
