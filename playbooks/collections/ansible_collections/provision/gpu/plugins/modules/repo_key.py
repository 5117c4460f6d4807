#!/usr/bin/python
"""Install a repository signing key only when it holds exactly the expected keys."""

from __future__ import annotations

DOCUMENTATION = r"""
module: repo_key
short_description: Install a repository signing key pinned by its full fingerprints
description:
  - >-
    Downloads a key file, lists its primary keys with gpg in a throw-away home directory, and
    compares their full fingerprints with O(fingerprints) as a set. A file that lacks an expected
    key, or holds any other primary key, fails the task ("unexpected key"); nothing is written.
  - >-
    Writes to O(dest) only the expected keys, exported again by gpg (ASCII-armoured), so the
    keyring a repository is C(signed-by) (apt) or imported from (rpm) can hold nothing else.
  - In check mode, reports whether O(dest) would change and writes nothing.
options:
  url:
    type: str
    required: true
    description: Where the key file is (https, http on a mirror, or file).
  fingerprints:
    type: list
    elements: str
    required: true
    description: Full fingerprints of the primary keys the file must hold, and nothing else.
  dest:
    type: path
    required: true
    description: The keyring file to write (for example /etc/apt/keyrings/provision-cuda.asc).
  mode:
    type: str
    default: "0644"
    description: Permissions of O(dest).
  timeout:
    type: int
    default: 30
    description: Seconds the download, and each gpg call, may take.
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Install the CUDA repository key.
  provision.gpu.repo_key:
    url: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/3bf863cc.pub
    fingerprints: [EB693B3035CD5710E231E123A4B469963BF863CC]
    dest: /etc/apt/keyrings/provision-nvidia-cuda.asc
"""

RETURN = r"""
fingerprints:
  description: The primary key fingerprints found in the downloaded file.
  type: list
  elements: str
  returned: always
"""

import os
import re
import shutil
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url

_HEX = re.compile(r"^[0-9A-F]{40}$|^[0-9A-F]{64}$")


def _gpg(module, home, args, data=None):
    argv = ["gpg", "--homedir", home, "--batch", "--no-tty", "--quiet", *args]
    try:
        proc = subprocess.run(
            argv, input=data, capture_output=True, timeout=module.params["timeout"], check=False
        )
    except FileNotFoundError:
        module.fail_json(msg="gpg is not installed on the host (Debian: gnupg, EL: gnupg2)")
    except subprocess.TimeoutExpired:
        module.fail_json(msg="gpg did not answer in %d s" % module.params["timeout"])
    if proc.returncode != 0:
        module.fail_json(msg="gpg %s failed: %s" % (args[0], proc.stderr.decode(errors="replace").strip()))
    return proc.stdout


def primary_fingerprints(colons):
    """Fingerprints of the primary keys (the fpr record right after each pub record)."""
    found = []
    expect_primary = False
    for line in colons.splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            expect_primary = True
        elif fields[0] == "fpr" and expect_primary:
            found.append(fields[9].upper())
            expect_primary = False
        elif fields[0] in ("sub", "ssb"):
            expect_primary = False
    return found


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "fingerprints": {"type": "list", "elements": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "mode": {"type": "str", "default": "0644"},
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    url, dest = module.params["url"], module.params["dest"]
    expected = sorted({f.replace(" ", "").upper() for f in module.params["fingerprints"] if f})
    if not expected:
        module.fail_json(msg="no fingerprint given for %s: a key is never trusted unchecked" % url)
    bad = [f for f in expected if not _HEX.match(f)]
    if bad:
        module.fail_json(msg="not a full key fingerprint: %s" % ", ".join(bad))

    response, info = fetch_url(module, url, timeout=module.params["timeout"])
    if response is None or info.get("status") not in (200, None):
        module.fail_json(msg="cannot download %s: %s" % (url, info.get("msg", "no response")))
    data = response.read()

    home = tempfile.mkdtemp(prefix="provision-key-")
    try:
        listing = _gpg(module, home, ["--with-colons", "--import-options", "show-only", "--import"], data)
        found = primary_fingerprints(listing.decode(errors="replace"))
        unexpected = sorted(set(found) - set(expected))
        missing = sorted(set(expected) - set(found))
        if unexpected or missing:
            parts = []
            if unexpected:
                parts.append("unexpected key(s) %s" % ", ".join(unexpected))
            if missing:
                parts.append("expected key(s) %s missing" % ", ".join(missing))
            module.fail_json(
                msg="%s: %s; refusing to trust it" % (url, "; ".join(parts)), fingerprints=found
            )
        _gpg(module, home, ["--import"], data)
        exported = _gpg(module, home, ["--armor", "--export", *expected])
    finally:
        shutil.rmtree(home, ignore_errors=True)

    current = None
    if os.path.exists(dest):
        with open(dest, "rb") as handle:
            current = handle.read()
    changed = current != exported
    if changed and not module.check_mode:
        directory = os.path.dirname(dest) or "."
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".provision-key-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(exported)
        os.chmod(tmp, int(module.params["mode"], 8))
        module.atomic_move(tmp, dest)
    module.exit_json(changed=changed, fingerprints=found, dest=dest)


if __name__ == "__main__":
    main()
