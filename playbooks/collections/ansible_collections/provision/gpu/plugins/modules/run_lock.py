#!/usr/bin/python
"""One provision apply at a time on a host: a lock file naming the run that holds it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: run_lock
short_description: Hold a host for one provision run at a time
description:
  - >-
    C(acquired) creates the lock file atomically, naming the run, the controller and when the lock
    expires. When another run holds an unexpired lock, the task fails and names that run; the same
    run takes its own lock again (a reboot in the middle of a run keeps it, the file is not on tmpfs).
    An expired lock (a run that died) is taken over, and the result says so.
  - C(released) removes the lock when this run holds it, and leaves another run's lock alone.
  - In check mode nothing is written; a lock held by another run still fails the task.
options:
  state:
    type: str
    choices: [acquired, released]
    required: true
    description: Take or give back the lock.
  run_id:
    type: str
    required: true
    description: The run (provision apply's run folder name).
  controller:
    type: str
    default: ""
    description: The controller's name, recorded for whoever finds the lock.
  ttl:
    type: int
    default: 14400
    description: Seconds after which a lock left by a dead run may be taken over.
  path:
    type: path
    default: /var/lib/provision/apply.lock
    description: The lock file.
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Take this host's run lock (refused while another run holds it).
  provision.gpu.run_lock:
    state: acquired
    run_id: 20260101T000000Z-abc123
    controller: "{{ lookup('ansible.builtin.pipe', 'hostname') }}"

- name: Give back this host's run lock.
  provision.gpu.run_lock:
    state: released
    run_id: 20260101T000000Z-abc123
"""

RETURN = r"""
holder:
  description: The lock's record after the task ({run_id, controller, since, expires}), or null.
  type: dict
  returned: always
took_over:
  description: The run id of an expired lock this run took over.
  type: str
  returned: when an expired lock was taken over
"""

import datetime as dt
import json
import os

from ansible.module_utils.basic import AnsibleModule


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
        return doc if isinstance(doc, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def _create(path, record):
    """Create the lock file atomically; False when it already exists."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    return True


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["acquired", "released"], "required": True},
            "run_id": {"type": "str", "required": True},
            "controller": {"type": "str", "default": ""},
            "ttl": {"type": "int", "default": 14400},
            "path": {"type": "path", "default": "/var/lib/provision/apply.lock"},
        },
        supports_check_mode=True,
    )
    p = module.params
    now = dt.datetime.now(dt.timezone.utc)
    held = _read(p["path"])
    mine = held is not None and held.get("run_id") == p["run_id"]

    if p["state"] == "released":
        if mine and not module.check_mode:
            os.unlink(p["path"])
        module.exit_json(changed=mine, holder=None if mine else held)

    record = {
        "run_id": p["run_id"],
        "controller": p["controller"],
        "since": now.isoformat(timespec="seconds"),
        "expires": (now + dt.timedelta(seconds=p["ttl"])).isoformat(timespec="seconds"),
    }
    if mine:
        module.exit_json(changed=False, holder=held)
    took_over = None
    if held is not None:
        try:
            expired = dt.datetime.fromisoformat(held.get("expires", "")) <= now
        except (TypeError, ValueError):
            expired = True  # unreadable: left by a broken run, not a live one
        if not expired:
            module.fail_json(
                msg="another provision apply holds this host: run %s from %s since %s (until %s); wait for it, "
                "or remove %s if that run is dead"
                % (held.get("run_id"), held.get("controller") or "?", held.get("since"), held.get("expires"), p["path"]),
                holder=held,
            )
        took_over = held.get("run_id") or "unknown"
    if module.check_mode:
        module.exit_json(changed=True, holder=held)
    if took_over is not None:
        os.unlink(p["path"])
    if not _create(p["path"], record):
        module.fail_json(msg="another provision apply took this host's lock a moment ago: %s" % _read(p["path"]))
    result = {"changed": True, "holder": record}
    if took_over is not None:
        result["took_over"] = took_over
        module.warn("took over the lock of run %s, expired on %s" % (took_over, held.get("expires")))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
