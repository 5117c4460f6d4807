"""verify's image-runs check: each image a host's fleet group lists runs on the driver and GPU the
host reports (nvidia-smi), as provision.matrix.runs_on.decide says: the check against the rule on
every catalogued driver release, its findings (image, reason, fix; warnings with the limits), the
images read on the controller and held to the catalogue, and the catalogue reaching the workers
(forked, and started on their own)."""

from __future__ import annotations

import copy
import json
import os

import pytest
from support import COMPAT

from provision.errors import InputError
from provision.hostpool import Connection
from provision.matrix import runs_on as rule
from provision.matrix.detect import catalogue_gpu
from provision.plan.model import Plan, PlanRequest, _load, read_plan, write_plan
from provision.plan.resolve import resolve
from provision.plan.runs import image_needs
from provision.verify import Catalogue, Target, catalogue
from provision.verify.checks.check_images import check_image_runs
from provision.verify.facts import SMI_QUERY, HostFacts, planned_commands
from provision.verify.images import assigned_images
from provision.versions import DottedVersion as Version

SSH = Connection("ssh", "h")
A100, RTX_4090, UNKNOWN = "0x20B510DE", "0x268410DE", "0xFFFF10DE"


class Res:
    def __init__(self, rc=0, stdout="", stderr=""):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr


class FakeHost:
    def __init__(self, script):
        self.script, self.ran = script, []

    def run(self, command):
        self.ran.append(command)
        for prefix, res in self.script.items():
            if command.startswith(prefix):
                return res
        return Res(127, "", f"sh: {command.split()[0]}: not found")


@pytest.fixture(scope="module")
def plans(real_matrix):
    def plan(**pins):
        return resolve(real_matrix, PlanRequest("debian12", "a100-pcie", **pins))

    return {
        "r575": plan(driver="575"),  # CUDA 12.9.1
        "default": plan(),  # R620, CUDA 13.2.1
        "r535": plan(driver="535"),
        "cuda128": plan(cuda="12.8"),
        "torch": resolve(real_matrix, PlanRequest("ubuntu22.04", "h100-sxm", framework="pytorch")),  # SASS list
    }


@pytest.fixture(scope="module")
def needs(plans):
    return {
        "cuda13": image_needs(plans["default"], "images/cuda13.lock.json"),
        "cuda128": image_needs(plans["cuda128"], "images/cuda128.lock.json"),
        "torch": image_needs(plans["torch"], "images/torch.lock.json"),
    }


def smi(driver, device=A100):
    return {"nvidia-smi --query-gpu": Res(0, f"0, NVIDIA GPU, {device}, {driver}, Enabled, Disabled, Disabled\n")}


def run(matrix, plan, images, script, group="a100"):
    """(status, detail, evidence, warnings) of the check on a host answering `script`."""
    facts = HostFacts(FakeHost(script), Target("h", SSH, plan, images=images, group=group))
    evidence: list[str] = []
    warnings: list[str] = []
    try:
        check_image_runs(
            facts=facts, target=facts.target, catalogue=matrix, evidence=evidence.append, warning=warnings.append
        )
    except pytest.fail.Exception as exc:
        return "fail", str(exc), evidence, warnings
    except pytest.skip.Exception as exc:
        return "skip", str(exc), evidence, warnings
    return ("warn" if warnings else "pass"), "", evidence, warnings


# -- the check is the rule ---------------------------------------------------------------------
def test_the_check_agrees_with_the_rule_on_every_catalogued_driver_release(real_matrix, plans, needs):
    """Every catalogued driver release x three images x a data-center and a workstation GPU: fail
    exactly when the rule says no (its reason in the finding), warn for minor-version and
    forward-compat (the rule's limits), pass when it runs natively."""
    seen = set()
    releases = [r.version for b in real_matrix.drivers for r in b.releases]
    assert len(releases) > 50
    for release in releases:
        for device in (A100, RTX_4090):
            gpu = catalogue_gpu(real_matrix, device)
            for name, image in needs.items():
                verdict = rule.decide(real_matrix, image, release, gpu)
                status, detail, evidence, warnings = run(real_matrix, plans["r575"], (image,), smi(release, device))
                seen.add(verdict.mode)
                assert any(verdict.reason in e for e in evidence), (release, name)
                if verdict.mode == rule.NO:
                    assert status == "fail", (release, device, name, detail)
                    assert verdict.reason in detail
                elif verdict.mode == rule.NATIVE:
                    assert status == "pass", (release, device, name, warnings)
                else:
                    assert status == "warn", (release, device, name)
                    assert warnings == [
                        f"{image.label} runs on driver {release} on {gpu.id} in {verdict.mode} mode: "
                        + "; ".join(verdict.limits)
                    ]
    assert seen == set(rule.MODES)


def test_a_failure_names_the_image_the_reason_and_the_fix(real_matrix, plans, needs):
    older = plans["r575"].driver.version
    image = needs["cuda13"]
    verdict = rule.decide(real_matrix, image, Version(older), real_matrix.gpu("a100-pcie-80gb"))
    # the host runs its plan's driver: another driver, or another image
    status, detail, _, _ = run(real_matrix, plans["r575"], (image, needs["cuda128"]), smi(older))
    assert status == "fail"
    assert detail == (
        f"images/cuda13.lock.json cannot run on driver {older} on a100-pcie-80gb (mode no): {verdict.reason}; "
        f"the host runs its plan's driver {older}; fix: plan the group with a driver at or above "
        f"{image.min_driver}, CUDA {image.cuda}'s minimum (the group's driver: pin, or provision plan --driver), "
        f"or assign it an image this driver runs (provision runs-on --driver {older} --gpu a100-pcie-80gb)"
    )
    assert "cuda128" not in detail  # an image that runs is not a finding
    # the host is not at its plan, whose driver runs it: apply
    status, detail, _, _ = run(real_matrix, plans["default"], (image,), smi(older))
    assert detail.endswith(
        f"fix: apply the plan (provision apply): its driver {plans['default'].driver.version} runs it natively"
    )
    status, detail, _, _ = run(real_matrix, plans["r535"], (image,), smi(older))
    assert detail.endswith(f"its driver {plans['r535'].driver.version} runs it in forward-compat mode"), detail
    # no driver runs an image without code for the GPU
    a100_only = image._replace(sass=("8.0",), ptx=None, label="a100-only")
    status, detail, _, _ = run(real_matrix, plans["default"], (a100_only,), smi("620.70.06", "0x233010DE"))
    assert status == "fail"
    assert "the image carries no code for sm_90 (h100-sxm)" in detail
    assert detail.endswith("no driver runs it on this GPU; fix: assign it to a group whose GPUs it carries code for")


def test_minor_version_and_forward_compat_warn_with_their_limits(real_matrix, plans, needs):
    status, _, _, warnings = run(real_matrix, plans["r575"], (needs["cuda128"],), smi("550.163.01"))
    assert status == "warn"
    assert warnings == [
        "images/cuda128.lock.json runs on driver 550.163.01 on a100-pcie-80gb in minor-version mode: "
        + "; ".join(rule.MINOR_LIMITS)
    ]
    status, _, _, warnings = run(real_matrix, plans["r575"], (needs["cuda13"],), smi("535.309.01"))
    assert status == "warn"
    assert "in forward-compat mode: the image must carry cuda-compat-13-2" in warnings[0]
    # not on a GeForce card: forward compatibility is for data-center GPUs
    status, detail, _, _ = run(real_matrix, plans["r575"], (needs["cuda13"],), smi("535.309.01", RTX_4090))
    assert status == "fail"
    assert "runs only on data-center GPUs, not on rtx-4090" in detail


def test_an_uncatalogued_gpu_is_said_so(real_matrix, plans, needs):
    status, _, evidence, warnings = run(real_matrix, plans["default"], (needs["cuda13"],), smi("620.70.06", UNKNOWN))
    assert status == "warn"
    assert evidence[0] == "nvidia-smi: driver 620.70.06; GPU 0xffff (not in the catalogue)"
    assert warnings == [
        "GPU 0xffff is not in the catalogue: whether images/cuda13.lock.json carries code for it, and forward "
        "compatibility, were not checked"
    ]


def test_it_skips_without_images_or_nvidia_smi_and_refuses_an_odd_driver(real_matrix, plans, needs):
    plan, image = plans["default"], (needs["cuda13"],)
    status, detail, _, _ = run(real_matrix, plan, None, smi("620.70.06"), group=None)
    assert status == "skip"
    assert "no fleet group assigns this host images" in detail
    status, detail, _, _ = run(real_matrix, plan, (), smi("620.70.06"), group="h100")
    assert (status, detail) == ("skip", "fleet group 'h100' lists no images (images: in the fleet file)")
    failing = {"nvidia-smi --query-gpu": Res(9, "NVIDIA-SMI has failed because it couldn't communicate\n")}
    status, detail, _, _ = run(real_matrix, plan, image, failing)
    assert status == "skip"
    assert detail.startswith("nvidia-smi fails (see the nvidia-smi check)")
    status, detail, _, _ = run(real_matrix, plan, image, smi("[N/A]"))
    assert status == "fail"
    assert "nvidia-smi reports driver '[N/A]', not a driver release" in detail


def test_nvidia_smi_is_read_for_the_check_only_when_the_group_lists_images(plans, needs):
    plan = plans["default"]
    assert SMI_QUERY in planned_commands(Target("h", SSH, plan, images=(needs["cuda13"],)), {"image-runs"})
    assert SMI_QUERY not in planned_commands(Target("h", SSH, plan, images=()), {"image-runs"})
    assert SMI_QUERY not in planned_commands(Target("h", SSH, plan), {"image-runs"})


# -- the images, read on the controller -----------------------------------------------------------
def redigest(doc: dict) -> dict:
    body = {k: v for k, v in doc.items() if k != "digest"}
    doc["digest"] = _load(Plan, body).digest()
    return doc


def test_a_groups_images_are_read_as_its_list_names_them(real_matrix, plans, tmp_path):
    (tmp_path / "images").mkdir()
    write_plan(plans["default"], tmp_path / "images" / "a.lock.json")
    write_plan(plans["cuda128"], tmp_path / "plans.lock.json")
    lock = {
        "schema": 2,
        "plan_digest": plans["cuda128"].digest(),
        "variant": "base",
        "base_image": plans["cuda128"].base_image,
        "base_digest": None,
        "image_id": "sha256:" + "a" * 64,
        "requirements": None,
        "tags": ["reg.example/gpu:base"],
        "repo_digests": [],
        "plans": [{"path": "plans.lock.json", "digest": plans["cuda128"].digest()}],
    }
    (tmp_path / "image.lock.json").write_text(json.dumps(lock))
    fleet = str(tmp_path / "fleet.yaml")
    got = assigned_images(
        real_matrix, "a100", [str(tmp_path / "image.lock.json"), str(tmp_path / "images" / "a.lock.json")], fleet
    )
    assert [n.label for n in got] == ["image.lock.json", "images/a.lock.json"]
    assert got[0] == image_needs(plans["cuda128"], "image.lock.json")  # through the image lock's plan
    assert got[1] == image_needs(plans["default"], "images/a.lock.json")


def test_an_image_lock_edited_to_look_runnable_is_refused_against_the_catalogue(real_matrix, plans, tmp_path):
    """A CUDA 13 lock whose minimum driver was lowered to R575's and the digest recomputed: read as
    it says, the rule would let it run on R575 hosts; held to the catalogue, it is refused."""
    doc = copy.deepcopy(plans["default"].to_dict())
    doc["cuda"]["min_driver"] = plans["r575"].driver.version
    path = tmp_path / "cuda13.lock.json"
    path.write_text(json.dumps(redigest(doc)))
    with pytest.raises(InputError) as info:
        assigned_images(real_matrix, "a100", [str(path)])
    assert info.value.message.startswith("fleet group 'a100': images: ")
    assert "cuda.min_driver" in info.value.message
    host_only = resolve(real_matrix, PlanRequest("debian12", "a100-pcie", host_only=True))
    write_plan(host_only, tmp_path / "host.lock.json")
    with pytest.raises(InputError, match="no image part"):
        assigned_images(real_matrix, "a100", [str(tmp_path / "host.lock.json")])


# -- the catalogue in the workers ------------------------------------------------------------------
def test_a_worker_started_on_its_own_loads_the_controllers_catalogue_or_refuses(real_matrix):
    ref = Catalogue(str(COMPAT), tuple(real_matrix.files))
    assert catalogue(ref).files == real_matrix.files
    other = Catalogue(str(COMPAT), (("cuda.yaml", "0" * 64),))
    with pytest.raises(RuntimeError, match="changed while verify ran"):
        catalogue(other)


@pytest.fixture
def two_groups(tmp_path, monkeypatch, plans):
    """Two hosts of this machine (local connection) in fleet groups of different plans, an
    nvidia-smi on PATH that reports an A100 at R575, and the inventory read as ansible-inventory
    would print it."""
    import provision.fleet.inventory as inventory_module
    from provision.fleet.inventory import Inventory

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    line = f"0, NVIDIA A100 80GB PCIe, {A100}, {plans['r575'].driver.version}, Enabled, Disabled, Disabled"
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\necho '{line}'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    (tmp_path / "images").mkdir()
    write_plan(plans["default"], tmp_path / "images" / "cuda13.lock.json")
    write_plan(plans["cuda128"], tmp_path / "images" / "cuda128.lock.json")
    write_plan(plans["r575"], tmp_path / "r575.lock.json")
    write_plan(plans["default"], tmp_path / "default.lock.json")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "groups:\n"
        "  r575: {lock: r575.lock.json, images: [images/cuda13.lock.json, images/cuda128.lock.json]}\n"
        "  r620: {lock: default.lock.json, images: [images/cuda128.lock.json]}\n"
    )
    hosts = {"local-a": {"ansible_connection": "local"}, "local-b": {"ansible_connection": "local"}}
    groups = {"r575": {"local-a"}, "r620": {"local-b"}, "all": set(hosts)}
    inventory = Inventory(str(tmp_path / "hosts.yml"), hosts, groups)
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    monkeypatch.setattr(inventory_module, "load_inventory", lambda _path: inventory)
    return tmp_path


def verify_json(cli, folder, *more):
    res = cli(
        "verify", "-i", str(folder / "hosts.yml"), "--fleet", str(folder / "fleet.yaml"), "--format", "json", *more
    )
    doc = json.loads(res.out)
    return res.code, {h["host"]: {c["id"]: c for c in h["checks"]} for h in doc["hosts"]}


def test_verify_runs_the_check_on_forked_and_started_workers(cli, two_groups, plans, monkeypatch):
    """Two hosts: the workers are forked and share the controller's catalogue (none loads one);
    one host (--limit): its worker is started on its own and loads the same catalogue from the cache."""
    from provision.matrix import cache

    loads = two_groups / "loads"
    real = cache.load_cached

    def counted(compat):
        with open(loads, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        return real(compat)

    monkeypatch.setattr(cache, "load_cached", counted)
    older = plans["r575"].driver.version
    code, checks = verify_json(cli, two_groups, "--only", "image-runs")
    assert loads.read_text().split() == [str(os.getpid())], "only the controller loaded the catalogue"
    assert code == 1
    a, b = checks["local-a"]["image-runs"], checks["local-b"]["image-runs"]
    assert a["status"] == "fail"
    assert a["detail"].startswith(f"images/cuda13.lock.json cannot run on driver {older} on a100-pcie-80gb (mode no)")
    assert "the host runs its plan's driver" in a["detail"]
    # local-b's plan is R620 but the host reports R575: CUDA 12.8 runs there natively (the driver it has)
    assert b["status"] == "pass", b
    assert any(f"images/cuda128.lock.json: native on driver {older}" in e for e in b["evidence"])
    code, checks = verify_json(cli, two_groups, "--only", "image-runs", "--limit", "local-a")
    assert code == 1
    assert checks["local-a"]["image-runs"]["detail"] == a["detail"]
    code, checks = verify_json(cli, two_groups, "--only", "image-runs", "--limit", "local-b")
    assert code == 0
    assert checks["local-b"]["image-runs"]["status"] == "pass"


def test_verify_with_one_plan_has_no_images_and_holds_the_plan_to_the_catalogue(cli, two_groups, plans):
    folder = two_groups
    res = cli(
        "verify", "-i", str(folder / "hosts.yml"), "--plan", str(folder / "r575.lock.json"), "--only", "image-runs",
        "--format", "json",
    )  # fmt: skip
    assert res.code == 0, res
    for host in json.loads(res.out)["hosts"]:
        assert host["checks"][0]["status"] == "skip"
        assert "--plan, --local and --host give none" in host["checks"][0]["detail"]
    # a re-digested edit that the lock's own schema and rules accept (read_plan), the catalogue does not
    doc = copy.deepcopy(plans["r575"].to_dict())
    doc["require_cuda"] = "driver>=100"
    (folder / "edited.lock.json").write_text(json.dumps(redigest(doc)))
    read_plan(folder / "edited.lock.json")
    res = cli("verify", "-i", str(folder / "hosts.yml"), "--plan", str(folder / "edited.lock.json"))
    assert res.code == 2, res
    assert "edited.lock.json': require_cuda: " in res.err
    assert "hint:" in res.err
    assert res.out == ""


def test_a_host_printing_a_flood_of_gpus_costs_one_decision_per_gpu_it_reports(real_matrix, plans, needs):
    """What a host prints is data: nvidia-smi lines each with another driver and PCI id (1 MiB of
    them) give at most one decision per GPU line read (facts.MAX_GPU_LINES), never drivers x GPUs."""
    import time

    from provision.verify.facts import MAX_GPU_LINES

    lines = "".join(
        f"{i}, NVIDIA GPU, 0x{i % 0xFFFF:04X}10DE, {500 + i % 100}.{i // 100 % 100}.01, Enabled, Disabled, Disabled\n"
        for i in range(20000)
    )
    assert len(lines) > 1 << 20
    script = {"nvidia-smi --query-gpu": Res(0, lines)}
    t0 = time.monotonic()
    status, _, evidence, _ = run(real_matrix, plans["default"], tuple(needs.values()), script)
    assert time.monotonic() - t0 < 10
    assert status == "fail"
    assert len(evidence) == 1 + len(needs) * MAX_GPU_LINES
