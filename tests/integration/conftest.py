"""The test fleet (tests marked fleet): a Docker engine started by the harness, three Debian 12
hosts standing in for GPU servers, and the fake-GPU package repositories on loopback. A second,
smaller fleet (rocky_env) puts a Rocky-9-shaped host beside a Debian one."""

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


# The session's fleet (fleet_env) is shared: test_fleet_apply converges gpu-a/b/c from fresh and
# asserts that every host changed, so it runs first whatever order the files are named in
# (`pytest tests/integration/test_fleet_verify.py tests/integration/test_fleet_apply.py`). The
# modules that start from the converged fleet (converged_fleet) and leave it so come next, while its
# hosts are still at the fleet file's plans: their converge is then the quick re-run. The rest (which
# change the plans: MIG, the guards' faults) follow in the order pytest collected them, and so do
# the tests outside this folder.
FIRST_MODULES = (
    "test_fleet_apply.py",
    "test_fleet_doctor.py",
    "test_fleet_verify.py",
    "test_fleet_images_check.py",
)


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    slots = [i for i, item in enumerate(items) if item.path.parent == here]  # this folder's tests, in place
    mine = [items[i] for i in slots]
    rank = {name: n for n, name in enumerate(FIRST_MODULES)}
    ordered = sorted(mine, key=lambda t: rank.get(t.path.name, len(FIRST_MODULES)))  # stable: in place otherwise
    for i, item in zip(slots, ordered, strict=True):
        items[i] = item


# The mixed fleet: the same GPU on Debian 12 and on Rocky Linux 9.
ROCKY_FLEET = {"a100": ("debian12", "a100-pcie"), "rocky_a100": ("rocky9", "a100-pcie")}
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
    },
    "h100": {
        "model": "NVIDIA H100 80GB HBM3",
        "count": 2,
        "device_id": "2330",
        "memory_mib": 81559,
        "power_limit_w": 700,
        "compute_capability": "9.0",
        "mig_capable": True,
    },
}
OLDER_TOOLKIT = "1.19.1"
# A driver branch older than the fleet file's default, published beside it for debian12 hosts:
# test_fleet_images_check pins the a100 group to it. R575 serves CUDA 12.9 and is none of the
# cuda-compat-13-x packages' base branches (compat/cuda.yaml forward_compatibility), so a CUDA 13
# image cannot run on it even on a data-center GPU; its kernel modules are the open flavour, as
# the default branch's are (the same package, nvidia-open, at another version).
OLDER_BRANCH = "575"


class FleetEnv:
    # the pinned a100 plan whose packages the kit serves besides the plans' (fleet_env only)
    older_plan = None

    def __init__(self, client, kit, proxy, fleet, plans, workdir: Path, groups=None, groups_vars=None):
        self.client, self.kit, self.proxy, self.fleet, self.plans, self.workdir = (
            client,
            kit,
            proxy,
            fleet,
            plans,
            workdir,
        )
        self.groups = groups or FLEET
        self.groups_vars = groups_vars or {}

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
        return self.fleet.inventory(
            self.workdir / name, self.group_vars(**overrides), hosts=chosen, groups_vars=self.groups_vars
        )

    def fleet_file(self, name: str = "fleet.yaml", **extra: dict) -> Path:
        """The fleet file; extra: group -> more plan request keys (gpu, mig)."""
        path = self.workdir / name
        groups = {g: {"os": os_id, "gpu": gpu, **extra.get(g, {})} for g, (os_id, gpu) in self.groups.items()}
        path.write_text(yaml.safe_dump({"groups": groups}))
        return path

    def dpkg_version(self, host: str, package: str) -> str:
        return self.fleet.exec(host, f"dpkg-query -W -f='${{Version}}' {package} 2>/dev/null", check=False).strip()

    def rpm_version(self, host: str, package: str) -> str:
        """[EPOCH:]VERSION-RELEASE as rpm has it installed; empty when not installed."""
        out = self.fleet.exec(
            host, f"rpm -q --qf '%{{EPOCHNUM}}:%{{VERSION}}-%{{RELEASE}}' {package} 2>/dev/null", check=False
        ).strip()
        if "not installed" in out or not out:
            return ""
        return out[2:] if out.startswith("0:") else out


def rocky_group_vars(kit) -> dict:
    """The Rocky hosts' own mirrors and keys (over FleetEnv.group_vars, which both kinds of host get)."""
    from harness import fakegpu

    url = kit.server.url
    return {
        # NVIDIA signs its EL repository with another key than its Debian one (D42D0685)
        "nvidia_driver_repo_key_fingerprint": kit.key("cuda-rhel").fingerprint,
        "container_runtime_toolkit_repo_url": f"{url}/{fakegpu.TOOLKIT_RPM_REPO}",
        # Docker CE's RedHat path (its key pinned, its repository at $releasever/$basearch, the
        # packages installed, the service enabled): the site's mirror of download.docker.com/linux/centos.
        # The RPMs are stand-ins; the engine's binaries are in the host image (Debian's docker.io).
        "container_runtime_docker_install": "repo",
        "container_runtime_docker_repo_url": f"{url}/{fakegpu.DOCKER_CE_URL}",
        "container_runtime_docker_repo_key_fingerprint": kit.key("docker").fingerprint,
    }


def cuda_version_of(matrix, plan) -> str:
    """The CUDA version nvidia-smi prints for the plan's driver branch."""
    cuda = max(
        c.version for c in matrix.cuda if c.min_driver <= matrix.branch(int(plan.driver.branch)).releases[0].version
    )
    return ".".join(str(cuda).split(".")[:2])


def host_gpu(kind: str, cuda_version: str) -> dict:
    """/etc/fakegpu/gpu.json for a host with GPUS[kind]: its MIG table from real captures of that
    GPU (tests/fakegpu/captures), never from the catalogue."""
    from harness import fakegpu

    gpu = dict(GPUS[kind])
    gpu.update(cuda_version=cuda_version, mig_profiles=fakegpu.mig_profiles_from_captures(kind))
    return gpu


def publish_debian_repos(kit, plans: dict) -> None:
    """The apt repositories the Debian hosts' plans install from (CUDA, toolkit, the site's Debian)."""
    from harness import fakegpu

    by_repo: dict[str, dict] = {}
    for plan in plans.values():
        packages = by_repo.setdefault(fakegpu.CUDA_REPO.format(repo=plan.os.nvidia_repo), {})
        packages[("driver", tuple(p.name for p in plan.driver.packages), plan.driver.version)] = True
        if plan.fabric_manager:
            names = tuple(p.name for p in plan.fabric_manager.packages)
            packages[("fabric", names, plan.fabric_manager.version)] = True
    for repo, wanted in by_repo.items():
        cuda_packages = []
        for kind, names, version in wanted:
            if kind == "driver":
                cuda_packages += fakegpu.driver_packages(list(names), version)
        for kind, names, version in wanted:
            if kind == "fabric":
                cuda_packages += fakegpu.fabric_manager_packages(list(names), version)
        kit.add(repo, cuda_packages, "cuda")
        kit.publish(repo, "cuda", key_file=f"{repo}/3bf863cc.pub")
    toolkit = next(iter(plans.values())).container_toolkit.version
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


def publish_rocky_repos(kit, plans: dict) -> None:
    """The dnf repositories the Rocky hosts' plans install from, at their vendors' paths: NVIDIA's EL9
    CUDA repository (signed RPMs and metadata, the nvidia-driver module streams), the toolkit's
    (signed metadata only, as NVIDIA's), Rocky's BaseOS, extras and CRB, EPEL, Docker CE (signed
    RPMs). The kit must serve already: epel-release names the mirror's URL."""
    from harness import fakegpu

    by_repo: dict[str, dict] = {}
    for plan in plans.values():
        entry = by_repo.setdefault(fakegpu.CUDA_REPO.format(repo=plan.os.nvidia_repo), {"streams": {}, "fabric": {}})
        entry["streams"][plan.driver.module_stream] = ([p.name for p in plan.driver.packages], plan.driver.version)
        if plan.fabric_manager:
            names = tuple(p.name for p in plan.fabric_manager.packages)
            entry["fabric"][(names, plan.fabric_manager.version)] = True
    for repo, entry in by_repo.items():
        built: dict[tuple[str, str], fakegpu.Package] = {}
        modules = []
        for stream, (names, version) in entry["streams"].items():
            packages = fakegpu.rpm_driver_packages(names, version)
            for pkg in packages:
                built.setdefault((pkg.name, pkg.version), pkg)
            modules.append(fakegpu.driver_module(stream, packages))
        rpms = [(pkg, fakegpu.CUDA_RPM_RELEASE) for pkg in built.values()]
        for names, version in entry["fabric"]:
            rpms += [(pkg, "1") for pkg in fakegpu.fabric_manager_packages(list(names), version)]
        kit.add_rpms(repo, rpms)
        kit.publish_rpm(repo, "cuda-rhel", modules=modules, key_file=f"{repo}/D42D0685.pub")
    plan = next(iter(plans.values()))
    toolkit = fakegpu.toolkit_packages(plan.container_toolkit.version) + fakegpu.toolkit_packages(OLDER_TOOLKIT)
    kit.add_rpms(fakegpu.TOOLKIT_RPM_REPO, [(pkg, fakegpu.TOOLKIT_RPM_RELEASE) for pkg in toolkit])
    kit.publish_rpm(fakegpu.TOOLKIT_RPM_REPO, "toolkit", sign_packages=False, key_file="libnvidia-container/gpgkey")
    headers = [h.replace("{kernel}", platform.release()) for h in plan.os.kernel_headers]
    kit.add_rpms(fakegpu.ROCKY_BASEOS_REPO, fakegpu.rocky_base_packages(headers))
    kit.publish_rpm(fakegpu.ROCKY_BASEOS_REPO, "rocky")
    kit.add_rpms(fakegpu.ROCKY_EXTRAS_REPO, [(fakegpu.epel_release_package(kit.server.url, kit.key("epel")), "9")])
    kit.publish_rpm(fakegpu.ROCKY_EXTRAS_REPO, "rocky")
    kit.publish_rpm(fakegpu.ROCKY_CRB_REPO, "rocky")
    kit.add_rpms(
        fakegpu.EPEL_REPO, [(fakegpu.Package("dkms", "3.2.1-1", description="fakegpu stand-in for dkms"), "1.el9")]
    )
    kit.publish_rpm(fakegpu.EPEL_REPO, "epel")
    kit.add_rpms(fakegpu.DOCKER_CE_REPO, fakegpu.docker_ce_packages())
    kit.publish_rpm(fakegpu.DOCKER_CE_REPO, "docker", key_file=f"{fakegpu.DOCKER_CE_URL}/gpg")


@pytest.fixture(scope="session")
def fleet_env(tmp_path_factory):
    from harness import engine, fakegpu
    from harness.fleet import Fleet, Host

    client = engine.ensure_engine()
    matrix = load_matrix(COMPAT)
    plans = {g: resolve(matrix, PlanRequest(os=os_id, gpu=gpu)) for g, (os_id, gpu) in FLEET.items()}
    older = resolve(matrix, PlanRequest(os=FLEET["a100"][0], gpu=FLEET["a100"][1], driver=OLDER_BRANCH))
    workdir = Path(tempfile.mkdtemp(prefix="provision-fleet-"))
    kit = fakegpu.Kit(workdir / "repo")
    proxy = fakegpu.RecordingProxy()
    fleet = None
    try:
        publish_debian_repos(kit, {**plans, "older": older})
        kit.serve()
        cuda_version = cuda_version_of(matrix, plans["a100"])
        hosts = []
        # gpu-a/b/c: the converging fleet; gpu-d: a host whose driver package fails to install;
        # gpu-e: a fresh host for the partial-failure run; gpu-x: in the inventory, never reachable;
        # gpu-f: a fresh host that the built and installed collection converges without provision.
        for name, group, extra in (
            ("gpu-a", "a100", {}),
            ("gpu-b", "h100", {}),
            ("gpu-c", "a100", {}),
            ("gpu-d", "a100", {"fail_install": True}),
            ("gpu-e", "h100", {}),
            ("gpu-x", "a100", {"unreachable": True}),
            ("gpu-f", "a100", {}),  # fresh, for the installed collection run by plain ansible-playbook
        ):
            hosts.append(Host(name, group, host_gpu(group, cuda_version), **extra))
        fleet = Fleet(client, kit, workdir, hosts)
        fleet.start()
        env = FleetEnv(client, kit, proxy, fleet, plans, workdir)
        env.older_plan = older
        yield env
    finally:
        if fleet is not None:
            fleet.stop()
        proxy.close()
        kit.close()
        if not os.environ.get("PROVISION_TEST_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def rocky_env():
    """deb-a (Debian 12) and rocky-a (Rocky-9-shaped), both A100 hosts, with their own kit: the apt
    repositories of the Debian fleet and the dnf repositories of publish_rocky_repos."""
    from harness import engine, fakegpu
    from harness.fleet import Fleet, Host

    client = engine.ensure_engine()
    matrix = load_matrix(COMPAT)
    plans = {g: resolve(matrix, PlanRequest(os=os_id, gpu=gpu)) for g, (os_id, gpu) in ROCKY_FLEET.items()}
    workdir = Path(tempfile.mkdtemp(prefix="provision-rocky-"))
    kit = fakegpu.Kit(workdir / "repo")
    proxy = fakegpu.RecordingProxy()
    fleet = None
    try:
        kit.serve()
        publish_debian_repos(kit, {g: p for g, p in plans.items() if p.os.pkg_manager == "apt"})
        publish_rocky_repos(kit, {g: p for g, p in plans.items() if p.os.pkg_manager == "dnf"})
        gpu = host_gpu("a100", cuda_version_of(matrix, plans["a100"]))
        hosts = [Host("deb-a", "a100", gpu), Host("rocky-a", "rocky_a100", dict(gpu), os="rocky9")]
        fleet = Fleet(client, kit, workdir, hosts)
        fleet.start()
        yield FleetEnv(
            client,
            kit,
            proxy,
            fleet,
            plans,
            workdir,
            groups=ROCKY_FLEET,
            groups_vars={"rocky_a100": rocky_group_vars(kit)},
        )
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


def _write_host_gpu(env: FleetEnv, host: str, gpu: dict) -> None:
    import json
    import shlex

    text = json.dumps(gpu, indent=2) + "\n"
    env.fleet.exec(host, f"printf %s {shlex.quote(text)} > /etc/fakegpu/gpu.json && /usr/lib/fakegpu/fakegpu-dmi")


@pytest.fixture
def gpu_json(fleet_env):
    """change(host, **keys): rewrite a fleet host's /etc/fakegpu/gpu.json with these keys (None removes
    one) and refresh the kit's DMI stand-in from it (fakegpu-dmi, installed with the driver package);
    every host changed gets its gpu.json back after the test. One `docker exec` a call (~0.2 s)."""
    import json

    saved: dict[str, dict] = {}

    def change(host: str, **keys) -> dict:
        before = json.loads(fleet_env.fleet.exec(host, "cat /etc/fakegpu/gpu.json"))
        saved.setdefault(host, before)
        after = {k: v for k, v in {**before, **keys}.items() if v is not None}
        _write_host_gpu(fleet_env, host, after)
        return after

    yield change
    for host, gpu in saved.items():
        _write_host_gpu(fleet_env, host, gpu)
