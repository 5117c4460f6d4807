"""The test fleet (tests marked fleet): a Docker engine started by the harness, three Debian 12
hosts standing in for GPU servers, and the fake-GPU package repositories on loopback."""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from support import COMPAT

from provision.matrix.loader import load_matrix
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve

FLEET = {"a100": ("debian12", "a100-pcie"), "h100": ("debian12", "h100-sxm")}
# What each fake host reports, in nvidia-smi's words, for the GPU it stands in for.
GPUS = {
    "a100": {
        "model": "NVIDIA A100 80GB PCIe",
        "count": 2,
        "device_id": "20B5",
        "memory_mib": 81920,
        "power_limit_w": 300,
        "compute_capability": "8.0",
        "mig_capable": True,
        "mig_set": "a100-80gb",
    },
    "h100": {
        "model": "NVIDIA H100 80GB HBM3",
        "count": 2,
        "device_id": "2330",
        "memory_mib": 81559,
        "power_limit_w": 700,
        "compute_capability": "9.0",
        "mig_capable": True,
        "mig_set": "h100-sxm5-80gb",
    },
}
OLDER_TOOLKIT = "1.19.1"
# nvidia-smi's default compute-instance profile id for a GPU instance of N compute slices (NVML)
DEFAULT_CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


def mig_profiles(matrix, set_id: str) -> dict:
    """The fake GPU's `nvidia-smi mig -lgipp` table: the catalogue's profiles for that GPU."""
    profile_set = next(s for s in matrix.mig if s.id == set_id)
    return {
        str(p.id): {
            "name": p.name,
            "size": p.memory_slices,
            "placements": list(p.placements),
            "compute": p.compute_slices,
            "max": p.max_instances,
            "memory_gib": p.memory_gib,
            "ci_profile": DEFAULT_CI_PROFILE[p.compute_slices],
        }
        for p in profile_set.profiles
        if p.id is not None
    }


class FleetEnv:
    def __init__(self, client, kit, proxy, fleet, plans, workdir: Path):
        self.client, self.kit, self.proxy, self.fleet, self.plans, self.workdir = (
            client,
            kit,
            proxy,
            fleet,
            plans,
            workdir,
        )

    def group_vars(self, **overrides) -> dict:
        url = self.kit.server.url
        proxy = {"http_proxy": self.proxy.url}
        return {
            "nvidia_driver_repo_url": url + "/compute/cuda/repos/{{ provision_nvidia_repo }}/x86_64",
            "nvidia_driver_repo_key_fingerprint": self.kit.key("cuda").fingerprint,
            "container_runtime_toolkit_repo_url": url + "/libnvidia-container/stable/deb/amd64",
            "container_runtime_toolkit_repo_key_url": url + "/libnvidia-container/gpgkey",
            "container_runtime_toolkit_repo_key_fingerprint": self.kit.key("toolkit").fingerprint,
            "container_runtime_docker_install": "keep",
            "nvidia_driver_manage_kernel_modules": False,
            "nvidia_driver_proxy_env": proxy,
            "container_runtime_proxy_env": proxy,
            "preflight_pci_devices_path": "/opt/fakegpu/pci",
            "preflight_secure_boot_efivar": "/opt/fakegpu/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
            **overrides,
        }

    def inventory(self, name: str = "inventory.yml", hosts=("gpu-a", "gpu-b", "gpu-c"), **overrides) -> Path:
        chosen = [self.fleet.host(h) for h in hosts]
        return self.fleet.inventory(self.workdir / name, self.group_vars(**overrides), hosts=chosen)

    def fleet_file(self, name: str = "fleet.yaml", **extra: dict) -> Path:
        """The fleet file; extra: group -> more plan request keys (gpu, mig)."""
        path = self.workdir / name
        groups = {g: {"os": os_id, "gpu": gpu, **extra.get(g, {})} for g, (os_id, gpu) in FLEET.items()}
        path.write_text(yaml.safe_dump({"groups": groups}))
        return path

    def dpkg_version(self, host: str, package: str) -> str:
        return self.fleet.exec(host, f"dpkg-query -W -f='${{Version}}' {package} 2>/dev/null", check=False).strip()


@pytest.fixture(scope="session")
def fleet_env(tmp_path_factory):
    from harness import engine, fakegpu
    from harness.fleet import Fleet, Host

    client = engine.ensure_engine()
    matrix = load_matrix(COMPAT)
    plans = {g: resolve(matrix, PlanRequest(os=os_id, gpu=gpu)) for g, (os_id, gpu) in FLEET.items()}
    workdir = Path(tempfile.mkdtemp(prefix="provision-fleet-"))
    kit = fakegpu.Kit(workdir / "repo")
    proxy = fakegpu.RecordingProxy()
    fleet = None
    try:
        drivers, fabric = {}, {}
        for plan in plans.values():
            drivers[(tuple(p.name for p in plan.driver.packages), plan.driver.version)] = True
            if plan.fabric_manager:
                fabric[(tuple(p.name for p in plan.fabric_manager.packages), plan.fabric_manager.version)] = True
        cuda_packages = []
        for names, version in drivers:
            cuda_packages += fakegpu.driver_packages(list(names), version)
        for names, version in fabric:
            cuda_packages += fakegpu.fabric_manager_packages(list(names), version)
        repo = fakegpu.CUDA_REPO.format(repo=plans["a100"].os.nvidia_repo)
        kit.add(repo, cuda_packages, "cuda")
        kit.publish(repo, "cuda", key_file=f"{repo}/3bf863cc.pub")
        toolkit = plans["a100"].container_toolkit.version
        kit.add(
            fakegpu.TOOLKIT_REPO, fakegpu.toolkit_packages(toolkit) + fakegpu.toolkit_packages(OLDER_TOOLKIT), "toolkit"
        )
        kit.publish(fakegpu.TOOLKIT_REPO, "toolkit", key_file="libnvidia-container/gpgkey")
        kit.add(
            fakegpu.DEBIAN_REPO,
            [
                fakegpu.Package(
                    f"linux-headers-{platform.release()}",
                    "1.0-1",
                    description="fakegpu stand-in for the running kernel's headers",
                )
            ],
            "debian",
        )
        kit.publish(fakegpu.DEBIAN_REPO, "debian")
        kit.serve()
        cuda_version = max(
            c.version
            for c in matrix.cuda
            if c.min_driver <= matrix.branch(int(plans["a100"].driver.branch)).releases[0].version
        )
        hosts = []
        # gpu-a/b/c: the converging fleet; gpu-d: a host whose driver package fails to install;
        # gpu-e: a fresh host for the partial-failure run; gpu-x: in the inventory, never reachable.
        for name, group, extra in (
            ("gpu-a", "a100", {}),
            ("gpu-b", "h100", {}),
            ("gpu-c", "a100", {}),
            ("gpu-d", "a100", {"fail_install": True}),
            ("gpu-e", "h100", {}),
            ("gpu-x", "a100", {"unreachable": True}),
        ):
            gpu = {k: v for k, v in GPUS[group].items() if k != "mig_set"}
            gpu.update(
                cuda_version=".".join(str(cuda_version).split(".")[:2]),
                mig_profiles=mig_profiles(matrix, GPUS[group]["mig_set"]),
            )
            hosts.append(Host(name, group, gpu, **extra))
        fleet = Fleet(client, kit, workdir, hosts)
        fleet.start()
        yield FleetEnv(client, kit, proxy, fleet, plans, workdir)
    finally:
        if fleet is not None:
            fleet.stop()
        proxy.close()
        kit.close()
        if not os.environ.get("PROVISION_TEST_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def converged_fleet(fleet_env, tmp_path_factory):
    """gpu-a/b/c at the fleet file's plans, for a module's tests (quick when they already are)."""
    from harness.fleet import run_apply

    rc, out, _ = run_apply(
        "-i",
        str(fleet_env.inventory()),
        "--fleet",
        str(fleet_env.fleet_file()),
        run_dir=tmp_path_factory.mktemp("converge"),
    )
    assert rc == 0, out
    return fleet_env
