"""The host variables verify reads, read exactly as the roles read them.

An inventory written in INI hands ansible-inventory strings: `nvidia_driver_hold=no` arrives as
"no", which Python calls true and the roles (`| bool`, argument specs of type bool) call false.
Every boolean a check reads goes through `flag`, which is Ansible's own conversion
(ansible.module_utils' check_type_bool, what a role's argument spec applies): "no", "False",
"0", "off" are false, "yes", "on", "1", "true" true, and what Ansible refuses ("maybe", 2, a list,
null) is refused. `checked_hostvars` applies it, and the checks of the other variables verify reads,
to an inventory host before any host is contacted, so a bad value is a one-line error (exit 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provision.errors import InputError
from provision.hostpool import ansible_boolean

# host variable -> the roles' default (playbooks/.../roles/*/defaults/main.yml)
BOOLEANS = {
    "nvidia_driver_blacklist_nouveau": True,
    "nvidia_driver_hold": True,
    "nvidia_driver_hold_kernel": True,
    "nvidia_driver_persistenced": True,
    "nvidia_driver_subnet_manager": True,
    "nvidia_driver_fabric_manager_start": True,
    "container_runtime_hold": True,
    "container_runtime_default_runtime": False,
    "provision_mig_enabled": False,
}
ENGINES = ("docker", "containerd")  # container_runtime_engine's choices (the role's argument spec)
PATHS = ("container_runtime_daemon_json", "preflight_secure_boot_efivar", "verify_dmi_dir")
HINT = "write true or false (Ansible also reads yes/no, on/off, 1/0)"


def flag(hostvars: Mapping[str, Any] | None, name: str, *, host: str | None = None) -> bool:
    """The boolean host variable ``name`` as the roles read it (their default when unset)."""
    where = f"host {host!r}: {name}" if host else name
    if not hostvars or name not in hostvars:
        return BOOLEANS[name]
    value = hostvars[name]
    if value is None:
        raise InputError(f"{where} is empty (null), which the roles would read as false", hint=HINT)
    return ansible_boolean(value, where)


def engine(hostvars: Mapping[str, Any] | None) -> str:
    return str((hostvars or {}).get("container_runtime_engine", "docker"))


def checked_hostvars(host: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an inventory host's variables with each boolean verify reads made a bool as the
    roles read it; InputError (naming host and variable) for a value the roles would refuse or
    read differently from what it says."""
    out = dict(hostvars)
    for name in BOOLEANS:
        if name in out:
            out[name] = flag(out, name, host=host)
    value = out.get("container_runtime_engine")
    if value is not None and value not in ENGINES:
        raise InputError(
            f"host {host!r}: container_runtime_engine is {str(value)[:40]!r}",
            hint=f"one of {', '.join(ENGINES)} (the container_runtime role's choices)",
        )
    for name in PATHS:
        value = out.get(name)
        if value is not None and (
            not isinstance(value, str) or not value.startswith("/") or any(ord(c) < 32 or ord(c) == 127 for c in value)
        ):
            raise InputError(f"host {host!r}: {name} is not an absolute path", hint=f"{name}: /an/absolute/path")
    if "provision_gpu_count" in out:
        out["provision_gpu_count"] = gpu_count(out["provision_gpu_count"], f"host {host!r}: provision_gpu_count")
    layout = out.get("provision_mig_layout")
    if layout is not None and not (
        isinstance(layout, list)
        and all(
            isinstance(i, Mapping)
            and isinstance(i.get("profile"), str)
            and isinstance(i.get("placement"), int)
            and not isinstance(i.get("placement"), bool)
            for i in layout
        )
    ):
        raise InputError(
            f"host {host!r}: provision_mig_layout is not a list of {{profile, placement}}",
            hint="write it with provision mig plan --out-vars FILE",
        )
    return out


def gpu_count(value: Any, where: str) -> int:
    """A GPU count: a whole number of at least 1 (an int, or its digits as a string)."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not text.isascii() or not text.isdigit() or int(text) < 1:
        raise InputError(f"{where} is {str(value)[:40]!r}, not a GPU count", hint="a whole number of at least 1")
    return int(text)
