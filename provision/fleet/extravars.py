"""The Python <-> Ansible contract: a plan becomes the `provision_*` variables the roles read, and
the site's `-e` values join them; both reach Ansible as data, never as templates.

ansible-core templates a string that holds ``{{``, ``{%`` or ``{#``, and also one that starts with a
``#jinja2:`` header, which can set other delimiters (``[[ lookup('pipe', 'id') ]]``): no test of the
text is enough. So dump_unsafe_yaml tags every string ``!unsafe``, Ansible's marker for data never to
be templated. The only strings written without the tag are those YAML reads as another type when
unquoted (``'580'``, ``'true'``, ``'1.0'``, ``''``, ``'2024-01-01'``): ansible-core 2.19 resolves a
``!unsafe`` scalar's type as if unquoted (``!unsafe '580'`` loads as the integer 580, ``!unsafe ''``
as null), so they are written quoted, which keeps them strings; YAML's int, float, bool, null and
timestamp forms hold no brace and never start with ``#``, so none of them can be a template.
Non-strings are written as YAML integers, floats, booleans and null. Mapping keys are written
plainly: Ansible never templates a key. The tag is on each scalar, not on the document: ansible-core
2.16 to 2.18 copy a tagged mapping before PyYAML has filled its nested lists, which come out empty.

`-e KEY=VALUE` (site_vars) takes only the roles' own variables (ROLE_PREFIXES); provision_* are the
plan's and apply's, ansible_* are Ansible's connection settings, and the safety switches are set by
apply's named flags alone (provision.fleet.guards)."""

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from provision.errors import InputError
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
        # the image part: "" in a host-only plan (no role reads these three; they name the plan's images)
        "provision_cuda_version": plan.cuda.version if plan.cuda is not None else "",
        "provision_driver_floor": plan.driver_floor or "",
        "provision_base_image": plan.base_image or "",
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


class _Plain(str):
    """A string YAML would read as another type unquoted: written quoted, without the tag."""

    __slots__ = ()


_STR_TAG = "tag:yaml.org,2002:str"


@functools.lru_cache(maxsize=1)
def _resolver():
    import yaml

    return yaml.resolver.Resolver()


def _reads_as_string(value: str) -> bool:
    """Whether YAML reads ``value`` unquoted as a string (as ansible-core 2.19 reads a ``!unsafe`` scalar)."""
    import yaml

    return _resolver().resolve(yaml.ScalarNode, value, (True, False)) == _STR_TAG


def _mark(value: Any) -> Any:
    if isinstance(value, str):
        if _reads_as_string(value):
            return _Unsafe(value)
        if "{" in value or value.lstrip().startswith("#"):  # cannot happen: no YAML int/float/bool/null/date has these
            raise ValueError(f"{value!r} would be written without !unsafe")
        return _Plain(value)
    if isinstance(value, dict):
        return {str(k): _mark(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mark(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise TypeError(f"{type(value).__name__} is not a value Ansible variables hold")


def dump_unsafe_yaml(variables: dict[str, Any]) -> str:
    """Variables as the YAML Ansible reads with ``-e @FILE``, include_vars or group_vars: every string
    tagged ``!unsafe`` but those YAML would read as another type (quoted), the rest typed (module docstring)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(_Unsafe, lambda d, v: d.represent_scalar("!unsafe", str(v), style="'"))
    Dumper.add_representer(_Plain, lambda d, v: d.represent_scalar(_STR_TAG, str(v), style="'"))
    Dumper.add_representer(str, lambda d, v: d.represent_scalar(_STR_TAG, v, style="'"))  # mapping keys
    return yaml.dump(_mark(variables), Dumper=Dumper, sort_keys=True, default_flow_style=False, width=1000)


# -- the site's -e values ----------------------------------------------------------------------
# The roles' own variable prefixes (each role's defaults and argument_specs use only its own).
ROLE_PREFIXES = ("preflight_", "nvidia_driver_", "container_runtime_", "mig_")
_NAME = re.compile(r"[a-z][a-z0-9_]{0,127}\Z")
SITE_VARS_HINT = (
    "-e takes the roles' variables (preflight_*, nvidia_driver_*, container_runtime_*, mig_*) as KEY=VALUE; "
    "provision_* are the plan's and apply's flags', ansible_* belong in the inventory"
)


def site_vars(items: Iterable[str], playbooks: str | None = None) -> dict[str, str]:
    """``-e KEY=VALUE`` items as variables, each checked (check_site_vars)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"-e {item[:60]!r} is not KEY=VALUE", hint=SITE_VARS_HINT)
        if key in out:
            raise InputError(f"-e {key} is given twice", hint="give each variable once")
        out[key] = value
    check_site_vars(out, playbooks)
    return out


def check_site_vars(variables: Mapping[str, Any], playbooks: str | None = None) -> None:
    """Only the roles' variables, one line each, and no safety switch or bound broken (InputError)."""
    from provision.documents import control_character
    from provision.fleet.guards import load_safety, variable_problems

    safety = load_safety(playbooks)
    for key, value in variables.items():
        shown = key if _NAME.match(key) else repr(key[:60])
        if not _NAME.match(key) or not key.startswith(ROLE_PREFIXES):
            if key.startswith("provision_"):
                why = "is the plan's or apply's (set by its own flag)"
            elif key.startswith("ansible_"):
                why = "is Ansible's own (connection variables belong in the inventory)"
            else:
                why = "is not a variable of provision's roles"
            raise InputError(f"-e {shown} {why}", hint=SITE_VARS_HINT)
        if key in safety.switches:
            switch = safety.switches[key]
            raise InputError(
                f"-e {key} is a safety switch ({switch.guard})",
                hint=f"only provision apply {switch.flag} turns it off, and the run's summary records it",
            )
        if isinstance(value, str) and control_character(value):
            raise InputError(
                f"-e {key} holds the control character {control_character(value)}",
                hint="one line per value: control characters and line breaks are refused",
            )
    problems = variable_problems(variables, "-e", safety)
    if problems:
        raise InputError(problems[0], hint="give a value within its bounds; the roles' defaults are documented")
