"""The Python <-> Ansible contract: a plan becomes the `provision_*` variables the roles read.

Every string from a plan, a fleet file or the command line that could hold a template (any ``{``)
reaches Ansible tagged ``!unsafe`` (dump_unsafe_yaml), so Ansible never templates it: a value such
as ``{{ lookup('pipe', 'id') }}`` stays that text, wherever a role uses it. Strings without a
brace cannot be templated and stay plain quoted strings: ansible-core 2.19 resolves a ``!unsafe``
scalar's type as if unquoted (``!unsafe '12'`` loads as the integer 12)."""

from typing import Any

from provision.matrix.model import DEB_ARCHES
from provision.plan.model import Plan


def to_extravars(plan: Plan) -> dict[str, Any]:
    """Plan-owned variables. Every role reads these names; nothing else sets them."""
    plan.check()
    fm = plan.fabric_manager
    return {
        "provision_plan_digest": plan.digest(),
        "provision_os_id": plan.os.id,
        "provision_os_family": plan.os.family,
        "provision_os_distribution": plan.os.distribution,
        "provision_os_version": plan.os.version,
        "provision_pkg_manager": plan.os.pkg_manager,
        "provision_nvidia_repo": plan.os.nvidia_repo,
        "provision_arch": plan.os.arch,  # the host CPU architecture (Ansible's architecture fact)
        "provision_nvidia_repo_arch": plan.os.repo_arch,  # repos/<nvidia_repo>/<this>/: x86_64, sbsa
        "provision_deb_arch": DEB_ARCHES[plan.os.arch],  # the toolkit's deb/<this> directory
        "provision_kernel_headers": list(plan.os.kernel_headers),
        "provision_gpu_id": plan.gpu.id,
        "provision_gpu_name": plan.gpu.name,
        "provision_gpu_pci_device_ids": [p.lower() for p in plan.gpu.pci_device_ids],
        "provision_gpu_nvswitch": plan.gpu.nvswitch,
        "provision_driver_branch": plan.driver.branch,
        "provision_driver_version": plan.driver.version,
        "provision_driver_kernel_module": plan.driver.kernel_module,
        "provision_driver_install_method": plan.driver.install_method,
        "provision_driver_module_stream": plan.driver.module_stream or "",
        "provision_driver_packages": [p.name for p in plan.driver.packages],
        "provision_driver_module_options": [
            {"module": o.module, "option": o.option, "value": o.value} for o in plan.driver.module_options
        ],
        "provision_fabric_manager_packages": [p.name for p in fm.packages] if fm else [],
        "provision_fabric_manager_version": fm.version if fm else "",
        "provision_subnet_manager_packages": list(plan.subnet_manager.packages) if plan.subnet_manager else [],
        "provision_subnet_manager_requires": list(plan.subnet_manager.requires) if plan.subnet_manager else [],
        "provision_subnet_manager_kernel_modules": (
            list(plan.subnet_manager.kernel_modules) if plan.subnet_manager else []
        ),
        "provision_container_toolkit_version": plan.container_toolkit.version,
        "provision_container_toolkit_packages": [p.name for p in plan.container_toolkit.packages],
        "provision_cuda_version": plan.cuda.version,
        "provision_driver_floor": plan.driver_floor,
        "provision_base_image": plan.base_image,
        **mig_vars(plan),
    }


def mig_vars(plan: Plan) -> dict[str, Any]:
    """The mig role's inputs; provision_mig_enabled false when the plan has no MIG layout."""
    mig = plan.mig
    if mig is None:
        return {"provision_mig_enabled": False}
    from provision.mig.parted import parted_config

    return {
        "provision_mig_enabled": True,
        "provision_mig_config_name": mig.config_name,
        "provision_mig_profile_set": mig.profile_set,
        "provision_mig_placements_confirmed": mig.placements_confirmed,
        "provision_mig_devices": dict(mig.devices),
        "provision_mig_layout": [i._asdict() for i in mig.instances],
        "provision_mig_cgi": mig.cgi,
        "provision_mig_config": parted_config(mig.config_name, mig.devices),
    }


class _Unsafe(str):
    __slots__ = ()


def _mark(value: Any) -> Any:
    if isinstance(value, str):
        return _Unsafe(value) if "{" in value else value
    if isinstance(value, dict):
        return {str(k): _mark(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mark(v) for v in value]
    return value


def dump_unsafe_yaml(variables: dict[str, Any]) -> str:
    """Variables as the YAML Ansible reads with ``-e @FILE`` or include_vars: every string that holds
    a brace tagged ``!unsafe`` (Ansible's marker for data never to be templated), the rest quoted."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(_Unsafe, lambda d, v: d.represent_scalar("!unsafe", str(v), style="'"))
    Dumper.add_representer(str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="'"))
    return yaml.dump(_mark(variables), Dumper=Dumper, sort_keys=True, default_flow_style=False, width=1000)
