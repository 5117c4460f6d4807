#!/usr/bin/python
"""Run a host's drain or undrain command: an argument vector, a deadline, its process group ended at it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: drain_command
short_description: Run a host's drain or undrain command as an argument vector, with a deadline
description:
  - >-
    Splits I(command) into words as a POSIX shell would (quotes and backslashes; no shell runs it,
    so pipes, redirections, variables and globs are plain text), then replaces the placeholder
    C({{ inventory_hostname }}) inside each word with I(host). The host's name is substituted after
    the split: it becomes part of exactly one argument and can add none.
  - >-
    I(host) must be a host name (letters, digits, C(_) and C(-) in dot-separated labels that neither
    start nor end with C(-), 253 characters at most) or an IP address. Anything else fails the task
    before the command runs; above all a name starting with C(-), which the command would read as an
    option (a host named C(--selector=nvidia.com/gpu.present=true) would drain every GPU node).
  - >-
    The command runs in a process group of its own. At I(timeout) seconds the group is sent SIGTERM,
    and SIGKILL I(grace) seconds later if any of it is still running; the same happens to whatever
    the command left running in its group when it exited, and to the whole group when this module is
    interrupted (SIGTERM, SIGINT, SIGHUP). A process that leaves the group (setsid) is out of reach.
  - In check mode the command is split and checked but not run.
options:
  command:
    type: str
    required: true
    description: The command line, with C({{ inventory_hostname }}) where the host's name goes.
  host:
    type: str
    required: true
    description: The host's name (the inventory name).
  timeout:
    type: int
    required: true
    description: Seconds the command may run (at least 1).
  grace:
    type: int
    default: 10
    description: Seconds between SIGTERM and SIGKILL when the group is ended.
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
# provision_drain_command holds the placeholder itself, kept from templating, e.g. in a vars file:
#   provision_drain_command: !unsafe 'kubectl drain {{ inventory_hostname }} --ignore-daemonsets'
- name: Drain the host before changing it.
  provision.gpu.drain_command:
    command: "{{ provision_drain_command }}"
    host: "{{ inventory_hostname }}"
    timeout: 900
  delegate_to: localhost
"""

RETURN = r"""
argv:
  description: The argument vector that ran (or would run, in check mode).
  type: list
  elements: str
  returned: always
rc:
  description: The command's exit status; null when it ran past its deadline.
  type: int
  returned: when the command ran
timed_out:
  description: Whether the command ran past I(timeout).
  type: bool
  returned: when the command ran
ended_with:
  description: >-
    The signal that last went to the command's process group (C(SIGTERM) or C(SIGKILL)), or null
    when nothing of it was left running.
  type: str
  returned: when the command ran
stdout:
  description: The end of the command's standard output (64 KiB at most).
  type: str
  returned: when the command ran
stderr:
  description: The end of the command's standard error (64 KiB at most).
  type: str
  returned: when the command ran
"""

import ipaddress
import os
import re
import secrets
import shlex
import signal
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

PLACEHOLDER = re.compile(r"\{\{\s*inventory_hostname\s*\}\}")
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
HOST_NAME = re.compile(r"(?=.{1,253}\Z)%s(?:\.%s)*\Z" % (_LABEL, _LABEL))
KEEP = 65536  # bytes of each output stream kept


def host_problem(host):
    """None when host is a host name or an IP address; else why it cannot go into a command."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if HOST_NAME.match(host):
        return None
    if host.startswith("-"):
        return "the host name %r starts with '-': the command would read it as an option" % host
    return "the host name %r is not a host name or an IP address" % host


def substitute(command, host):
    """The command split into words (shell quoting, no shell), the placeholder replaced per word."""
    token = "PROVISIONHOST" + secrets.token_hex(8)
    while token in command:
        token = "PROVISIONHOST" + secrets.token_hex(8)
    words = shlex.split(PLACEHOLDER.sub(token, command), comments=False, posix=True)
    return [word.replace(token, host) for word in words]


def _group_alive(pgid):
    """Whether any process of the group is left that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no /proc (a macOS controller): the signal's answer is all there is
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


class Child:
    """A process this module started (os.posix_spawn), reaped once."""

    def __init__(self, pid):
        self.pid, self.rc = pid, None

    def poll(self):
        """Its exit status (-N when signal N ended it), None while it runs."""
        if self.rc is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.rc
            if pid:
                self.rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
        return self.rc

    def wait(self, timeout):
        """Its exit status, or None when it still runs after timeout seconds."""
        end = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() >= end:
                return None
            time.sleep(0.05)
        return self.rc


def end_group(pgid, grace, child):
    """SIGTERM the group, SIGKILL it after grace seconds if any of it still runs; the last signal sent, or None."""
    child.poll()
    if not _group_alive(pgid):
        return None
    sent = "SIGTERM"
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return None
    end = time.monotonic() + grace
    while time.monotonic() < end:
        child.poll()  # reap the leader: its zombie is no longer the group's
        if not _group_alive(pgid):
            return sent
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
        sent = "SIGKILL"
    except ProcessLookupError:
        pass
    end = time.monotonic() + 10  # SIGKILL cannot be refused; the kernel takes a moment to act on it
    while time.monotonic() < end:
        child.poll()
        if not _group_alive(pgid):
            break
        time.sleep(0.02)
    return sent


def _tail(handle):
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(max(0, size - KEEP))
    return handle.read().decode("utf-8", errors="replace")


def spawn(argv, out, err):
    """Start argv as the leader of a new session and process group (setsid), stdin from /dev/null."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        actions = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                   (os.POSIX_SPAWN_DUP2, err.fileno(), 2)]
        return Child(os.posix_spawnp(argv[0], argv, dict(os.environ), file_actions=actions, setsid=True))
    finally:
        os.close(devnull)


def run(argv, timeout, grace):
    """Run argv in a process group of its own: {rc, timed_out, ended_with, stdout, stderr}."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = spawn(argv, out, err)
        pgid = child.pid  # setsid: the command leads a new session and process group

        def interrupted(signum, frame):  # pylint: disable=unused-argument
            end_group(pgid, grace, child)
            raise SystemExit(128 + signum)

        caught = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        previous = {s: signal.signal(s, interrupted) for s in caught}
        try:
            rc = child.wait(timeout)
            timed_out = rc is None
            ended_with = end_group(pgid, grace, child)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        return {"rc": rc, "timed_out": timed_out, "ended_with": ended_with, "stdout": _tail(out), "stderr": _tail(err)}


def main():
    module = AnsibleModule(
        argument_spec={
            "command": {"type": "str", "required": True},
            "host": {"type": "str", "required": True},
            "timeout": {"type": "int", "required": True},
            "grace": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )
    p = module.params
    problem = host_problem(p["host"])
    if problem:
        module.fail_json(msg=problem + "; rename the host in the inventory (its address goes in ansible_host)", argv=[])
    if p["timeout"] < 1:
        module.fail_json(msg="timeout must be at least 1 second, not %d: without a deadline a hung command "
                             "holds the rollout (provision_drain_timeout)" % p["timeout"], argv=[])
    if p["grace"] < 0:
        module.fail_json(msg="grace must not be negative, not %d" % p["grace"], argv=[])
    try:
        argv = substitute(p["command"], p["host"])
    except ValueError as exc:
        module.fail_json(msg="cannot split the command into words: %s" % exc, argv=[])
    if not argv:
        module.fail_json(msg="the command is empty", argv=[])
    if module.check_mode:
        module.exit_json(changed=False, argv=argv, msg="check mode: not run")
    try:
        result = run(argv, p["timeout"], p["grace"])
    except OSError as exc:
        module.fail_json(msg="cannot run %s: %s" % (argv[0], exc.strerror or exc), argv=argv)
    if result["timed_out"]:
        module.fail_json(
            msg="%s ran past its deadline of %d s; its process group was ended (%s)"
            % (shlex.join(argv), p["timeout"], result["ended_with"] or "it had exited meanwhile"),
            argv=argv, **result
        )
    if result["ended_with"]:
        module.warn("%s left processes running in its group when it exited; they were ended (%s)"
                    % (argv[0], result["ended_with"]))
    if result["rc"] != 0:
        last = result["stderr"].strip().splitlines()[-1:] or result["stdout"].strip().splitlines()[-1:] or [""]
        module.fail_json(msg="%s exited %d: %s" % (shlex.join(argv), result["rc"], last[0][:500]), argv=argv, **result)
    module.exit_json(changed=True, argv=argv, **result)


if __name__ == "__main__":
    main()
