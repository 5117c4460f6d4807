#!/usr/bin/python
"""The health gate a host passes after its change, before it returns to service."""

from __future__ import annotations

DOCUMENTATION = r"""
module: health
short_description: Check that a provisioned GPU host is fit to take jobs again
description:
  - >-
    Runs after the roles changed a host and before it is undrained. Every check has a deadline.
    The host fails (and the rollout stops) when nvidia-smi does not answer, reports another driver
    than the plan's or fewer GPUs than the host had before the change, the loaded kernel module is
    not the planned version or flavour (open or proprietary, as /proc/driver/nvidia/version names
    it), a required service is not active, or Docker has not loaded the nvidia runtime.
  - Read-only; it never changes the host.
options:
  planned_version:
    type: str
    required: true
    description: The driver version of the plan.
  planned_flavour:
    type: str
    choices: [open, proprietary]
    description: The plan's kernel-module flavour; the loaded module must be it (omitted, not compared).
  check_loaded:
    type: bool
    default: true
    description: >-
      Require the loaded kernel module at the planned version and flavour (false where modules are
      not managed).
  gpus:
    type: int
    default: 0
    description: GPUs the host had before the change (0 skips the count).
  services:
    type: list
    elements: str
    default: []
    description: systemd units that must be active.
  docker_runtime:
    type: bool
    default: false
    description: Require Docker to list the nvidia runtime (docker info).
  nvidia_smi:
    type: str
    default: nvidia-smi
    description: The nvidia-smi executable.
  driver_version_path:
    type: path
    default: /proc/driver/nvidia/version
    description: The loaded driver's version file.
  timeout:
    type: int
    default: 60
    description: Seconds each command may take.
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the host's health before it returns to service.
  provision.gpu.health:
    planned_version: "{{ provision_driver_version }}"
    planned_flavour: "{{ provision_driver_kernel_module }}"
    gpus: 8
    services: [nvidia-persistenced, nvidia-fabricmanager, docker]
    docker_runtime: true
"""

RETURN = r"""
checks:
  description: Every check as {name, ok, detail}.
  type: list
  elements: dict
  returned: always
"""

import re
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule

_VERSION = re.compile(r"Kernel Module(?: for [^ ]+)?\s+(\d+\.\d+(?:\.\d+)?)")


def _run(argv, timeout):
    """(rc, output); rc None when the command is missing or ran past its deadline."""
    if shutil.which(argv[0]) is None:
        return None, "%s is not installed" % argv[0]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, "%s did not answer in %d s" % (argv[0], timeout)
    except OSError as exc:
        return None, str(exc)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def smi_checks(nvidia_smi, planned, gpus, timeout):
    rc, out = _run([nvidia_smi, "--query-gpu=index,driver_version", "--format=csv,noheader"], timeout)
    if rc != 0:
        first = out.splitlines()[0] if out else "no output"
        return [{"name": "nvidia-smi", "ok": False, "detail": "nvidia-smi does not answer: %s" % first}]
    rows = [[f.strip() for f in line.split(",")] for line in out.splitlines() if line.strip()]
    versions = sorted({r[1] for r in rows if len(r) > 1})
    checks = [
        {"name": "nvidia-smi", "ok": True, "detail": "%d GPU(s) answer" % len(rows)},
        {
            "name": "driver",
            "ok": versions == [planned],
            "detail": "nvidia-smi reports driver %s, planned %s" % (", ".join(versions) or "none", planned),
        },
    ]
    if gpus:
        checks.append(
            {
                "name": "gpu-count",
                "ok": len(rows) >= gpus,
                "detail": "%d GPU(s) answer, %d before the change" % (len(rows), gpus),
            }
        )
    return checks


def loaded_check(path, planned, planned_flavour=None):
    """The loaded module against the plan: its version and, when planned_flavour is given, its flavour."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        text = ""
    line = next((x for x in text.splitlines() if x.startswith("NVRM version:")), "")
    m = _VERSION.search(line)
    loaded = m.group(1) if m else None
    flavour = ("open" if "Open Kernel Module" in line else "proprietary") if m else None
    if planned_flavour:
        ok = loaded == planned and flavour == planned_flavour
        detail = "loaded kernel module %s, planned %s %s" % (
            "%s %s" % (loaded, flavour) if loaded else "none", planned, planned_flavour)
    else:
        ok = loaded == planned
        detail = "loaded kernel module %s, planned %s" % (loaded or "none", planned)
    return {"name": "loaded-module", "ok": ok, "detail": detail}


def service_checks(services, timeout):
    out = []
    for unit in services:
        rc, text = _run(["systemctl", "is-active", unit], timeout)
        state = text.splitlines()[-1] if text else "unknown"
        out.append({"name": "service:" + unit, "ok": rc == 0, "detail": "%s is %s" % (unit, state)})
    return out


def docker_check(timeout):
    rc, out = _run(["docker", "info", "--format", "{{json .Runtimes}}"], timeout)
    ok = rc == 0 and '"nvidia"' in out
    detail = "Docker lists the nvidia runtime" if ok else "Docker has not loaded the nvidia runtime: %s" % out[:200]
    return {"name": "docker-runtime", "ok": ok, "detail": detail}


def main():
    module = AnsibleModule(
        argument_spec={
            "planned_version": {"type": "str", "required": True},
            "planned_flavour": {"type": "str", "choices": ["open", "proprietary"]},
            "check_loaded": {"type": "bool", "default": True},
            "gpus": {"type": "int", "default": 0},
            "services": {"type": "list", "elements": "str", "default": []},
            "docker_runtime": {"type": "bool", "default": False},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "driver_version_path": {"type": "path", "default": "/proc/driver/nvidia/version"},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    p = module.params
    checks = smi_checks(p["nvidia_smi"], p["planned_version"], p["gpus"], p["timeout"])
    if p["check_loaded"]:
        checks.append(loaded_check(p["driver_version_path"], p["planned_version"], p["planned_flavour"]))
    checks += service_checks(p["services"], p["timeout"])
    if p["docker_runtime"]:
        checks.append(docker_check(p["timeout"]))
    bad = [c for c in checks if not c["ok"]]
    if bad:
        module.fail_json(msg="health gate failed: " + "; ".join(c["detail"] for c in bad), checks=checks)
    module.exit_json(changed=False, checks=checks)


if __name__ == "__main__":
    main()
