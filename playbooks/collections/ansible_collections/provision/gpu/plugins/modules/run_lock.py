#!/usr/bin/python
"""One provision apply at a time on a host: a lock file naming the run that holds it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: run_lock
short_description: Hold a host for one provision run at a time
description:
  - >-
    C(acquired) takes the lock, naming the run, the controller and when the lock expires. When
    another run holds an unexpired lock, the task fails and names that run; the same run takes its
    own lock again (a reboot in the middle of a run keeps it, the file is not on tmpfs). An expired
    lock (a run that died) is taken over, and the result says so.
  - >-
    Taking, taking over and giving back are atomic: each reads and changes the lock under an
    exclusive C(flock) of the lock's directory, so of two runs that race for a free or an expired
    lock exactly one gets it. The record is written to a temporary file first and linked (a free
    lock) or renamed (an expired one) into place, so the lock file is never seen empty.
  - >-
    A lock file that cannot be read (not JSON, a symlink, cut short) is held by an unknown run until
    its modification time plus I(ttl) has passed; it is never taken for free.
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
    description: Seconds after which a lock left by a dead run may be taken over (at least 60).
  path:
    type: path
    default: /var/lib/provision/apply.lock
    description: The lock file.
  wait:
    type: int
    default: 30
    description: Seconds to wait for another run's read or change of the lock to finish.
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
  description: The run id of an expired lock this run took over (C(unknown) for an unreadable lock file).
  type: str
  returned: when an expired lock was taken over
"""

import datetime as dt
import errno
import fcntl
import json
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

MIN_TTL = 60  # a lock that expires within a minute lets another run take the host while this one works


class Busy(Exception):
    """Another run kept the lock's directory locked past the wait."""


def _read(path):
    """The lock's record: None when there is no lock, {} when a lock file is there but unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        return {}  # a symlink (ELOOP), a folder, no permission: a lock, of an unknown run
    try:
        with os.fdopen(fd, "rb") as handle:
            doc = json.loads(handle.read(65536).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _expiry(path, held, ttl):
    """When a held lock expires: its record's `expires`, else (unreadable) its mtime plus ttl."""
    try:
        expires = dt.datetime.fromisoformat(held.get("expires", ""))
        if expires.tzinfo is not None:
            return expires
    except (TypeError, ValueError):
        pass
    try:
        mtime = os.lstat(path).st_mtime
    except OSError:
        mtime = time.time()
    return dt.datetime.fromtimestamp(mtime, dt.timezone.utc) + dt.timedelta(seconds=ttl)


class _Guard:
    """An exclusive flock of the lock's directory: every read-and-change of the lock happens under it."""

    def __init__(self, directory, wait):
        self.directory, self.wait, self.fd = directory, wait, None

    def __enter__(self):
        self.fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        end = time.monotonic() + self.wait
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
            if time.monotonic() >= end:
                os.close(self.fd)
                raise Busy(self.directory)
            time.sleep(0.05)

    def __exit__(self, *exc):
        os.close(self.fd)  # closing the descriptor gives the flock back
        return False


def _place(path, record, replace):
    """Put the record at path in one step: linked when no lock is there, renamed over an expired one."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".apply.lock.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        if replace:
            os.rename(tmp, path)
        else:
            os.link(tmp, path)  # EEXIST when a lock appeared meanwhile: never overwritten
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)  # the lock survives a reboot in the middle of the run
    finally:
        os.close(dfd)


def acquire(path, run_id, controller, ttl, wait, check_mode=False):
    """(result, failure message or None) of taking the lock for run_id."""
    now = dt.datetime.now(dt.timezone.utc)
    directory = os.path.dirname(path)
    if check_mode and not os.path.isdir(directory):
        return {"changed": True, "holder": None}, None
    if not check_mode:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    record = {
        "run_id": run_id,
        "controller": controller,
        "since": now.isoformat(timespec="seconds"),
        "expires": (now + dt.timedelta(seconds=ttl)).isoformat(timespec="seconds"),
    }
    with _Guard(directory, wait):
        held = _read(path)
        if held is not None and held.get("run_id") == run_id:
            return {"changed": False, "holder": held}, None
        took_over = None
        if held is not None:
            expires = _expiry(path, held, ttl)
            if expires > now:
                who = held.get("run_id") or "an unknown run (the lock file is unreadable)"
                return {"changed": False, "holder": held}, (
                    "another provision apply holds this host: run %s from %s since %s (until %s); wait for it, "
                    "or remove %s if that run is dead"
                    % (who, held.get("controller") or "?", held.get("since") or "?",
                       expires.isoformat(timespec="seconds"), path)
                )
            took_over = held.get("run_id") or "unknown"
        if check_mode:
            return {"changed": True, "holder": held}, None
        try:
            _place(path, record, replace=held is not None)
        except FileExistsError:
            return {"changed": False, "holder": _read(path)}, "another provision apply took this host's lock a moment ago"
    result = {"changed": True, "holder": record}
    if took_over is not None:
        result["took_over"] = took_over
        result["expired"] = expires.isoformat(timespec="seconds")
    return result, None


def release(path, run_id, wait, check_mode=False):
    """The result of giving back run_id's lock (another run's lock is left alone)."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        return {"changed": False, "holder": None}
    with _Guard(directory, wait):
        held = _read(path)
        mine = held is not None and held.get("run_id") == run_id
        if mine and not check_mode:
            os.unlink(path)
    return {"changed": mine, "holder": None if mine else held}


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["acquired", "released"], "required": True},
            "run_id": {"type": "str", "required": True},
            "controller": {"type": "str", "default": ""},
            "ttl": {"type": "int", "default": 14400},
            "path": {"type": "path", "default": "/var/lib/provision/apply.lock"},
            "wait": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["ttl"] < MIN_TTL:
        module.fail_json(msg="ttl must be at least %d seconds, not %d: a lock that expires that soon lets another "
                             "run take this host while this one changes it (provision_lock_ttl)" % (MIN_TTL, p["ttl"]))
    if not p["run_id"].strip():
        module.fail_json(msg="run_id is empty")
    try:
        if p["state"] == "released":
            module.exit_json(**release(p["path"], p["run_id"], p["wait"], module.check_mode))
        result, failure = acquire(p["path"], p["run_id"], p["controller"], p["ttl"], p["wait"], module.check_mode)
    except Busy:
        module.fail_json(msg="another provision apply kept %s locked for over %d s while reading or changing its "
                             "lock; try again" % (os.path.dirname(p["path"]), p["wait"]))
    if failure:
        module.fail_json(msg=failure, **result)
    if "took_over" in result:
        module.warn("took over the lock of run %s, expired on %s" % (result["took_over"], result.pop("expired")))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
