#!/usr/bin/python
"""Record what a provisioning run left on a host, and tell the next run whether it still holds."""

from __future__ import annotations

DOCUMENTATION = r"""
module: applied_state
short_description: Record and compare the state a provision run converged to
description:
  - >-
    In C(record) mode, writes the digest of everything the roles manage (their files, the planned
    packages with their versions and hold state, the services, the running kernel) together with
    the digest of the run's inputs (roles and variables).
  - >-
    In C(check) mode, recomputes both and reports C(converged) when they match what was recorded,
    so the next run has nothing to change and provision apply ends that host early. Any drift, such
    as a file edited, a package changed or unheld, a service stopped, another kernel or new inputs,
    makes C(converged) false and the full run repairs it.
options:
  mode:
    type: str
    choices: [check, record]
    required: true
    description: Compare with the recorded state, or record the current one.
  inputs_digest:
    type: str
    required: true
    description: Digest of the run's inputs (roles and variables); empty disables the comparison.
  packages:
    type: list
    elements: str
    default: []
    description: Packages whose version and hold state belong to the state.
  services:
    type: list
    elements: str
    default: []
    description: systemd units whose enabled and active states belong to the state.
  files:
    type: list
    elements: str
    default: []
    description: Glob patterns of files the roles manage.
  state_file:
    type: path
    default: /var/lib/provision/applied.json
    description: Where the record is kept.
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Compare the host with the state recorded by the last run.
  provision.gpu.applied_state:
    mode: check
    inputs_digest: "{{ provision_run_inputs_digest }}"
    packages: [nvidia-open, nvidia-container-toolkit]
    services: [nvidia-persistenced, docker]
    files: [/etc/docker/daemon.json, /etc/apt/sources.list.d/provision-*.list]
  register: provision_applied

- name: Record the converged state for the next run.
  provision.gpu.applied_state:
    mode: record
    inputs_digest: "{{ provision_run_inputs_digest }}"
    packages: [nvidia-open, nvidia-container-toolkit]
    services: [nvidia-persistenced, docker]
    files: [/etc/docker/daemon.json, /etc/apt/sources.list.d/provision-*.list]
"""

RETURN = r"""
converged:
  description: The recorded state matches (check mode).
  type: bool
  returned: always
reason:
  description: Why the host is or is not converged.
  type: str
  returned: always
"""

import glob
import hashlib
import json
import os
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule


def _run(argv):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""  # an unreadable state never matches the record: the host gets the full run
    return proc.stdout


def package_state(packages):
    if not packages:
        return []
    if shutil.which("dpkg-query"):
        out = _run(["dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\n", *packages])
    elif shutil.which("rpm"):
        out = _run(["rpm", "-q", "--qf", "%{NAME} %{EPOCH}:%{VERSION}-%{RELEASE}\n", *packages])
    else:
        out = ""
    lines = sorted(line.strip() for line in out.splitlines() if line.strip())
    seen = {line.split()[0] for line in lines}
    return lines + [f"{p} absent" for p in sorted(set(packages) - seen)]


def service_state(services):
    if not services or not shutil.which("systemctl"):
        return []
    out = _run(["systemctl", "show", "--property=Id,UnitFileState,ActiveState", *[s + ".service" for s in services]])
    return sorted(" ".join(block.split()) for block in out.strip().split("\n\n") if block.strip())


def file_state(patterns):
    out = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            out.append(f"{pattern} absent")
        for path in matches:
            try:
                with open(path, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
            except OSError:
                digest = "unreadable"
            out.append(f"{path} {digest}")
    return out


def state_digest(packages, services, files):
    doc = {"kernel": os.uname().release, "packages": package_state(packages), "services": service_state(services),
           "files": file_state(files)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest(), doc


def main():
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["check", "record"], "required": True},
            "inputs_digest": {"type": "str", "required": True},
            "packages": {"type": "list", "elements": "str", "default": []},
            "services": {"type": "list", "elements": "str", "default": []},
            "files": {"type": "list", "elements": "str", "default": []},
            "state_file": {"type": "path", "default": "/var/lib/provision/applied.json"},
        },
        supports_check_mode=True,
    )
    p = module.params
    digest = state_digest(p["packages"], p["services"], p["files"])[0]
    record = {"inputs_digest": p["inputs_digest"], "state_digest": digest}
    try:
        with open(p["state_file"], encoding="utf-8") as handle:
            previous = json.load(handle)
    except (OSError, ValueError):
        previous = None
    if p["mode"] == "check":
        if not p["inputs_digest"]:
            module.exit_json(changed=False, converged=False, reason="no inputs digest: full run")
        if previous is None:
            module.exit_json(changed=False, converged=False, reason="no record of an earlier run")
        if previous.get("inputs_digest") != p["inputs_digest"]:
            module.exit_json(changed=False, converged=False, reason="the plan, roles or variables changed")
        if previous.get("state_digest") != digest:
            module.exit_json(changed=False, converged=False, reason="the host drifted from the recorded state")
        module.exit_json(changed=False, converged=True, reason="the host still holds the state recorded for these inputs")
    changed = previous != record
    if changed and not module.check_mode:
        os.makedirs(os.path.dirname(p["state_file"]), mode=0o700, exist_ok=True)
        tmp = p["state_file"] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.chmod(tmp, 0o600)
        os.replace(tmp, p["state_file"])
    module.exit_json(changed=changed, converged=True, reason="recorded")


if __name__ == "__main__":
    main()
