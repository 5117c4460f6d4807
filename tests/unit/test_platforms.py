"""Platforms (compat/platforms.yaml, issue 25): the catalogue's schema and invariants, plans with a
platform (the GPU it implies or takes, Fabric Manager and the NVLink Subnet Manager from its
interconnect, the server the plan records) and locks that carry a server, on the fixture catalogue
and the real one."""

from __future__ import annotations

import copy
import json
import re

import pytest
from support import COMPAT, FIXTURE_COMPAT, edited_compat

from provision.errors import CompatDataError, InputError, UnknownId
from provision.fleet.extravars import to_extravars
from provision.matrix.loader import load_matrix
from provision.plan.diff import changes, plan_state
from provision.plan.lockcheck import check_against_catalogue
from provision.plan.model import Plan, PlanRequest, _load, read_plan
from provision.plan.resolve import resolve

OS = "ubuntu22.04"


def plan_for(matrix, gpu, platform, **pins) -> Plan:
    return resolve(matrix, PlanRequest(OS, gpu, platform=platform, **pins))


def refusal(matrix, gpu, platform) -> InputError:
    with pytest.raises(InputError) as info:
        plan_for(matrix, gpu, platform)
    return info.value


def reason(plan: Plan, component: str):
    return next(r for r in plan.reasons if r.component == component)


# -- the catalogue ---------------------------------------------------------------------------------
def test_platforms_load_with_aliases_and_did_you_mean(fixture_matrix):
    assert [p.id for p in fixture_matrix.platforms] == ["fx-hgx-8", "fx-hgx-4", "fx-b200", "fx-server", "fx-pcie"]
    assert fixture_matrix.platform("fx-hgx").id == "fx-hgx-8"  # an alias
    with pytest.raises(UnknownId) as info:
        fixture_matrix.platform("fx-hgx-9")
    assert info.value.exit_code == 2
    assert "fx-hgx-8" in info.value.hint
    assert "provision matrix platforms" in info.value.hint


def test_the_real_catalogue_has_the_issues_platforms(real_matrix):
    wanted = {"dgx-a100", "hgx-a100-8gpu", "hgx-a100-4gpu", "dgx-h100", "dgx-h200", "hgx-h100-4gpu"}
    wanted |= {"r750xa", "xe9680", "esc8000a-e11", "pcie-server"}
    assert wanted <= set(real_matrix.platform_ids())
    dgx = real_matrix.platform("dgx-a100")
    assert (dgx.gpu_count, dgx.gpu_count_is, dgx.form_factors) == (8, "exact", ("sxm4",))
    assert (dgx.interconnect, dgx.nvswitch_generation, dgx.nvswitch_count, dgx.topology) == (
        "nvswitch",
        2,
        6,
        ("NV12",),
    )
    assert (dgx.psu_count, dgx.psu_redundancy, dgx.inlet_min_c, dgx.inlet_max_c) == (6, "3+3", 5, 30)
    # facts from a secondary quotation stay marked
    assert {"psus", "inlet_c"} <= set(dgx.unconfirmed)
    four = real_matrix.platform("hgx-a100-4gpu")
    assert (four.interconnect, four.nvswitch_generation, four.topology) == ("nvlink", None, ("NV4",))
    assert "dmi" in dict(four.left_out)  # a baseboard: DMI names the OEM server


def test_facts_no_source_gives_stay_out(real_matrix):
    """The ESC8000A-E11's interconnect, DMI, PCIe, PSUs and inlet range: no source read gives them."""
    esc = real_matrix.platform("esc8000a-e11")
    assert esc.interconnect is None
    assert esc.pcie_generation is None
    assert esc.psu_count is None
    assert not (esc.dmi_vendor)
    assert not (esc.dmi_product)
    assert not (esc.dmi_unverified)
    assert {"interconnect", "dmi", "pcie", "psus", "inlet_c"} <= set(dict(esc.left_out))
    # the XE9680's PSU redundancy conflicts between sources: count only
    xe = real_matrix.platform("xe9680")
    assert (xe.psu_count, xe.psu_redundancy) == (6, None)
    assert "psus.redundancy" in dict(xe.left_out)


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        ("gpu_pairs: [NV18]}", "gpu_pairs: [NV18X]}", "does not match"),
        ("count: 8, count_is: exact, form_factor: [sxm5]", "count: 8, form_factor: [sxm5]", "count_is"),
        (
            "kind: baseboard,\n     gpus: {ids: [h100-sxm], count: 8",
            "kind: rack,\n     gpus: {ids: [h100-sxm], count: 8",
            "rack",
        ),
        ('dmi: {vendor: ["Fixture Inc."]', "dmi: {vendor: [\"{{ lookup('pipe', 'id') }}\"]", "does not match"),
    ],
)
def test_schema_refuses(tmp_path, old, new, what):
    compat = edited_compat(tmp_path, "platforms.yaml", old, new, FIXTURE_COMPAT)
    with pytest.raises(CompatDataError) as info:
        load_matrix(compat)
    assert info.value.exit_code == 3
    assert info.value.file == "platforms.yaml"
    assert what in info.value.message


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        ("gpus: {ids: [h100-sxm], count: 8", "gpus: {ids: [h300-sxm], count: 8", "unknown GPU 'h300-sxm'"),
        ("gpus: {ids: [b200]", "gpus: {ids: [h100-sxm]", "h100-sxm is a sxm5 GPU; the platform takes sxm"),
        ("nvswitch_generation: 3, nvswitch_count: 4}", "nvswitch_generation: 2, nvswitch_count: 4}", "whose gpus.yaml"),
        (
            "interconnect: {kind: nvlink}",
            "interconnect: {kind: nvlink, nvswitch_count: 2}",
            "NVSwitch facts on a nvlink",
        ),
        (
            "evidence: {gpus: [fixture], interconnect: [fixture], dmi: [fixture]}",
            "evidence: {gpus: [fixture], interconnect: [fixture]}",
            "dmi cites no source",
        ),
        (
            "evidence: {gpus: [fixture]}, left_out",
            "evidence: {gpus: [nowhere]}, left_out",
            "nowhere is cited in evidence",
        ),
        ("fields: [interconnect]", "fields: [psus]", "doubts an absent psus"),
        ("fields: [interconnect]", "fields: [gpus.models]", "'gpus.models' is not valid"),
        (
            'left_out: {interconnect: "not in the fixture"}',
            'left_out: {gpus: "not in the fixture"}',
            "left out, but the row gives gpus",
        ),
        ("aliases: [fx-hgx]", "aliases: [fx-hgx-4]", "also used by"),
        ("sources: [fixture]}\n  - {id: fx-hgx-4", "sources: [fixture, unused]}\n  - {id: fx-hgx-4", "backs no fact"),
    ],
)
def test_invariants_refuse(tmp_path, old, new, what):
    compat = edited_compat(tmp_path, "platforms.yaml", old, new, FIXTURE_COMPAT)
    if "unused" in new:  # a key the row lists: it must exist to reach the evidence rule
        src = compat / "sources.yaml"
        src.write_text(
            src.read_text()
            + '  unused:\n    title: "x y z"\n    url: https://example.invalid/u\n    retrieved: "2026-11-30"\n    kind: primary\n'
        )
    with pytest.raises(CompatDataError) as info:
        load_matrix(compat)
    assert info.value.file in ("platforms.yaml",)
    assert what in info.value.message


# -- plans with a platform -------------------------------------------------------------------------
def test_an_nvswitch_baseboard_gets_fabric_manager(fixture_matrix):
    plan = plan_for(fixture_matrix, "h100-sxm", "fx-hgx-8")
    assert plan.fabric_manager is not None
    assert plan.gpu.nvswitch
    assert plan.server.id == "fx-hgx-8"
    assert plan.server.fabric_manager
    assert (plan.server.gpu_count, plan.server.topology, plan.server.nvswitch_generation) == (8, ("NV18",), 3)
    assert plan.subnet_manager is None  # generation 3: Fabric Manager alone


def test_a_four_gpu_board_gets_no_fabric_manager_though_the_gpu_is_sxm(fixture_matrix):
    """Without a platform the H100 SXM's own row plans Fabric Manager; on a board without NVSwitch
    the platform's interconnect decides: none, and the plan says why, citing the platform's source."""
    assert resolve(fixture_matrix, PlanRequest(OS, "h100-sxm")).fabric_manager is not None
    plan = plan_for(fixture_matrix, "h100-sxm", "fx-hgx-4")
    assert plan.fabric_manager is None
    assert plan.subnet_manager is None
    assert not plan.gpu.nvswitch
    assert not plan.server.fabric_manager
    why = reason(plan, "fabric-manager")
    assert why.text.startswith("none: Fixture HGX 4-GPU has NVLink between the GPUs")
    assert why.source == "fixture"
    assert plan.server.unconfirmed == ("interconnect",)  # the row doubts it
    assert (plan.server.pcie_generation, plan.server.pcie_width) == (5, 16)


def test_the_platform_implies_its_one_gpu(fixture_matrix):
    plan = resolve(fixture_matrix, PlanRequest(OS, None, platform="fx-hgx-4"))
    assert plan.gpu.id == "h100-sxm"
    assert plan.request.gpu is None
    assert plan.fabric_manager is None
    assert "gpu" in plan.to_dict()["request"]
    assert plan.to_dict()["request"]["gpu"] is None


def test_the_dmi_strings_go_into_the_plan(fixture_matrix):
    plan = plan_for(fixture_matrix, "b200", "fx-b200")
    assert plan.server.dmi_vendor == ("Fixture Inc.",)
    assert plan.server.dmi_product == ("FX-B200",)


@pytest.mark.parametrize(("interconnect", "managers"), [("nvswitch, nvswitch_generation: 4", True), ("nvlink", False)])
def test_the_subnet_manager_follows_the_platforms_interconnect(tmp_path, interconnect, managers):
    """The B200's own row plans Fabric Manager and NVLSM (fourth-generation NVSwitch); on a platform
    both follow the platform's interconnect (test rows added to a copy of the real catalogue)."""
    row = (
        "  - {id: test-b200, name: Test B200 board, aliases: [], kind: baseboard,\n"
        "     gpus: {ids: [b200], count: 8, count_is: exact, form_factor: [sxm]},\n"
        f"     interconnect: {{kind: {interconnect}}},\n"
        "     evidence: {gpus: [aie-nvswitch], interconnect: [aie-nvswitch]}, sources: [aie-nvswitch]}\n"
    )
    compat = edited_compat(tmp_path, "platforms.yaml", "platforms:\n", "platforms:\n" + row)
    matrix = load_matrix(compat)
    plain = resolve(matrix, PlanRequest(OS, "b200"))
    assert plain.fabric_manager is not None
    assert plain.subnet_manager is not None
    plan = resolve(matrix, PlanRequest(OS, None, platform="test-b200"))
    assert (plan.fabric_manager is not None, plan.subnet_manager is not None) == (managers, managers)
    check_against_catalogue(plan, matrix)


def test_a_server_without_a_catalogued_interconnect_follows_the_gpu(fixture_matrix):
    plan = plan_for(fixture_matrix, "a100-pcie-80gb", "fx-server")
    assert plan.fabric_manager is None
    assert plan.server.interconnect is None
    assert not plan.server.fabric_manager
    assert reason(plan, "fabric-manager").text == "none: a100-pcie-80gb has no NVSwitch"
    # an OEM server takes any GPU of its form factor, listed or not
    assert plan_for(fixture_matrix, "v100-pcie", "fx-server").server.id == "fx-server"


@pytest.mark.parametrize(
    ("gpu", "platform", "message", "hint"),
    [
        (
            "h100-sxm",
            "fx-server",
            "platform fx-server (Fixture PCIe server) takes PCIe cards; h100-sxm is an SXM5 module",
            "--gpu a100-pcie-80gb (it takes any PCIe card)",
        ),
        ("b200", "fx-hgx-8", "takes SXM5 modules; b200 is an SXM module", "the GPUs fx-hgx-8 takes: --gpu h100-sxm"),
        (None, "fx-pcie", "takes any PCIe card: --gpu must say which", "--gpu a100-pcie-80gb, v100-pcie"),
        ("mixed", "fx-server", "takes PCIe cards; h100-sxm is an SXM5 module", "--gpu a100-pcie-80gb"),
    ],
)
def test_pairings_the_platform_does_not_take_are_refused(fixture_matrix, gpu, platform, message, hint):
    err = refusal(fixture_matrix, gpu, platform)
    assert err.exit_code == 2
    assert message in err.message
    assert hint in err.hint


def test_no_gpu_and_no_platform_is_refused(fixture_matrix):
    err = refusal(fixture_matrix, None, None)
    assert (err.message, err.exit_code) == ("no GPU given", 2)
    assert "--gpu" in err.hint
    assert "--platform" in err.hint


def test_real_dgx_a100_plans_a100_sxm4_x8_with_fabric_manager(real_matrix):
    plan = plan_for(real_matrix, "a100-sxm4-80gb", "dgx-a100")
    assert plan.gpu.id == "a100-sxm4-80gb"
    assert plan.gpu.architecture == "ampere"
    assert (plan.server.gpu_count, plan.server.gpu_count_is) == (8, "exact")
    assert plan.fabric_manager is not None
    assert plan.fabric_manager.version == plan.driver.version
    assert reason(plan, "fabric-manager").source == "fabric-manager-guide"
    assert plan.server.dmi_product == ("DGXA100",)
    # the 40 GB model rests on a secondary source: the models are doubted, the count of 8 is not
    assert plan.server.unconfirmed == ("gpus.ids", "psus", "inlet_c")


@pytest.mark.parametrize(
    ("platform", "gpu", "source"),
    [("hgx-a100-4gpu", "a100-sxm4-80gb", "hgx-a100-blog"), ("hgx-h100-4gpu", "h100-sxm", "mlperf-dell-xe9640-h100")],
)
def test_real_four_gpu_boards_get_no_fabric_manager(real_matrix, platform, gpu, source):
    plan = plan_for(real_matrix, gpu, platform)
    assert plan.fabric_manager is None
    assert plan.subnet_manager is None
    assert not plan.gpu.nvswitch
    assert reason(plan, "fabric-manager").source == source
    assert plan.server.gpu_count == 4
    # what the roles and the health gate read: no Fabric Manager package, so nothing to install or start
    extra = to_extravars(plan)
    assert extra["provision_fabric_manager_packages"] == []
    assert extra["provision_gpu_nvswitch"] is False


def test_real_hgx_h100_4gpu_implies_its_gpu(real_matrix):
    plan = resolve(real_matrix, PlanRequest(OS, None, platform="hgx-h100-4gpu"))
    assert plan.gpu.id == "h100-sxm"
    assert plan.fabric_manager is None


def test_real_r750xa_refuses_an_sxm4_gpu_naming_its_form_factor(real_matrix):
    err = refusal(real_matrix, "a100-sxm4-80gb", "r750xa")
    assert err.exit_code == 2
    assert err.message == ("platform r750xa (Dell PowerEdge R750xa) takes PCIe cards; a100-sxm4-80gb is an SXM4 module")
    assert "--gpu a100-pcie-80gb or --gpu h100-pcie" in err.hint


def test_real_dgx_a100_names_both_models_until_a_group_covers_them(real_matrix, tmp_path):
    """Two GPU models and no group of exactly them: --gpu must say which. With a group in gpus.yaml
    (an a100-sxm4 group of both SXM4 sizes), the platform implies the group."""
    if real_matrix.group("a100-sxm4") is None:
        err = refusal(real_matrix, None, "dgx-a100")
        assert "takes 2 GPU models" in err.message
        assert "--gpu a100-sxm4-40gb or --gpu a100-sxm4-80gb" in err.hint
    compat = edited_compat(
        tmp_path,
        "gpus.yaml",
        "groups:\n",
        'groups:\n  - id: a100-sxm4-fixture\n    name: "NVIDIA A100 SXM4 (40GB or 80GB)"\n'
        "    members: [a100-sxm4-40gb, a100-sxm4-80gb]\n",
    )
    plan = resolve(load_matrix(compat), PlanRequest(OS, None, platform="dgx-a100"))
    assert plan.gpu.id == "a100-sxm4-fixture"
    assert set(plan.gpu.members) == {"a100-sxm4-40gb", "a100-sxm4-80gb"}
    assert plan.fabric_manager is not None
    assert plan.server.gpu_count == 8


def test_xe9680_takes_its_facts_from_the_variant_of_the_gpu(real_matrix):
    a100 = plan_for(real_matrix, "a100-sxm4-80gb", "xe9680").server
    h200 = plan_for(real_matrix, "h200", "xe9680").server
    assert (a100.nvswitch_generation, a100.topology, a100.pcie_generation) == (2, ("NV12",), None)
    assert (h200.nvswitch_generation, h200.topology, h200.pcie_generation) == (3, ("NV18",), 5)


# -- locks with a server ---------------------------------------------------------------------------
def redigest(doc: dict) -> dict:
    body = {k: v for k, v in doc.items() if k != "digest"}
    doc["digest"] = _load(Plan, body).digest()
    return doc


def test_a_plan_without_a_platform_writes_and_digests_as_before(fixture_matrix):
    plan = resolve(fixture_matrix, PlanRequest(OS, "h100-sxm"))
    doc = plan.to_dict()
    assert "server" not in doc
    assert "platform" not in doc["request"]
    assert plan.digest() == plan._replace(request=plan.request._replace(platform=None), server=None).digest()


def test_a_lock_with_a_server_round_trips_and_passes_the_catalogue(real_matrix, tmp_path):
    plan = plan_for(real_matrix, "h100-sxm", "hgx-h100-4gpu")
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(plan.to_dict()))
    again = read_plan(path)
    assert again == plan
    check_against_catalogue(again, real_matrix, "lock.json")


ATTACKS = {
    # Fabric Manager skipped on a DGX by claiming the 4-GPU board's interconnect, consistently
    "server.interconnect": lambda d: (
        d["server"].update(interconnect="nvlink", fabric_manager=False, nvswitch_generation=None, nvswitch_count=None)
        or d["gpu"].update(nvswitch=False)
        or d.update(fabric_manager=None)
    ),
    "server.pcie_width": lambda d: d["server"].update(pcie_width=8),
    "server.topology": lambda d: d["server"].update(topology=["NV4"]),
    "server.gpu_count": lambda d: d["server"].update(gpu_count=4),
    "server.id": lambda d: d["server"].update(id="dgx-a101"),
    "request.platform": lambda d: d["request"].update(platform="hgx-a100-4gpu"),
}


@pytest.mark.parametrize("field", sorted(ATTACKS))
def test_a_redigested_server_edit_is_refused(real_matrix, tmp_path, field):
    plan = plan_for(real_matrix, "a100-sxm4-80gb", "dgx-a100")
    doc = copy.deepcopy(plan.to_dict())
    ATTACKS[field](doc)
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(redigest(doc)))
    with pytest.raises(InputError) as info:
        check_against_catalogue(read_plan(path), real_matrix, "lock.json")
    assert info.value.message.startswith(f"lock.json: {field}:")
    assert "\n" not in info.value.message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("server"), "server"),
        (lambda d: d["request"].pop("platform"), "request.platform"),
        # Fabric Manager dropped from a DGX plan, the rest left as it was
        (lambda d: d.update(fabric_manager=None) or d["gpu"].update(nvswitch=False), "server.fabric_manager"),
        (lambda d: d["server"].update(fabric_manager=False), "server.fabric_manager"),
    ],
)
def test_a_server_that_contradicts_the_plan_is_refused_without_a_catalogue(real_matrix, tmp_path, change, field):
    doc = copy.deepcopy(plan_for(real_matrix, "a100-sxm4-80gb", "dgx-a100").to_dict())
    change(doc)
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(redigest(doc)))
    with pytest.raises(InputError) as info:
        read_plan(path)
    assert re.search(rf": {re.escape(field)}: ", info.value.message), info.value.message


def test_a_gpu_the_server_does_not_take_is_refused_against_the_catalogue(real_matrix, tmp_path):
    """A PCIe plan relabelled as a DGX A100's (server copied from a real DGX lock): the DGX takes
    only its A100 SXM4 GPUs."""
    dgx = plan_for(real_matrix, "a100-sxm4-80gb", "dgx-a100").to_dict()
    doc = copy.deepcopy(resolve(real_matrix, PlanRequest(OS, "a100-pcie-80gb")).to_dict())
    doc["server"] = dgx["server"] | {
        "fabric_manager": False,
        "interconnect": "nvlink",
        "nvswitch_generation": None,
        "nvswitch_count": None,
    }
    doc["request"]["platform"] = "dgx-a100"
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(redigest(doc)))
    with pytest.raises(InputError) as info:
        check_against_catalogue(read_plan(path), real_matrix, "lock.json")
    assert info.value.message.startswith("lock.json: gpu.members: platform dgx-a100")


def test_plan_diff_names_a_server_change(real_matrix):
    dgx = plan_for(real_matrix, "a100-sxm4-80gb", "dgx-a100")
    four = plan_for(real_matrix, "a100-sxm4-80gb", "hgx-a100-4gpu")
    keys = [c.key for c in changes(plan_state(dgx), plan_state(four))]
    assert keys[0] == "server"
    assert "fabric-manager" in keys


def test_matrix_check_resolves_every_platform(real_matrix):
    from provision.matrix.loader import read_raw
    from provision.plan.check import check

    result = check(real_matrix, read_raw(COMPAT))
    counts = result.groups["os+platform"]
    # every listed GPU on every platform resolves on every OS; a request without --gpu resolves
    # where the platform implies one (one model, or a group of exactly its models)
    implied = sum(
        1
        for p in real_matrix.platforms
        if len(p.gpus) == 1 or any(p.gpus and set(g.members) == set(p.gpus) for g in real_matrix.gpu_groups)
    )
    n_os = len(real_matrix.os_releases)
    assert counts == {
        "resolved": n_os * (sum(len(p.gpus) for p in real_matrix.platforms) + implied),
        "refused": 0,
        "not applicable": n_os * (len(real_matrix.platforms) - implied),
    }
