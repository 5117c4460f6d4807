"""What `provision doctor --local` / `-i` reads on a host: one POSIX shell script that prints
each source as a section (`===== provision-doctor: <key> =====`), run locally or over SSH
through testinfra's backends (the inventory's connection settings, as apply uses them), `forks`
hosts at a time, each under the host's deadline (provision.hostpool): a host reached over plain
ssh is one ssh client running the script, any other connection a worker process.

The kernel log is read first: a GPU that fell off the bus can hang nvidia-smi, and whatever
stops a hung collector, the kernel log that names the cause is already out. It comes from the
first source that has entries: `journalctl -k` (this boot), the syslog files (/var/log/kern.log,
/var/log/messages: they also keep earlier boots), `dmesg`. Only lines that matter to a GPU are
kept (NVRM, Xid, nvidia, nouveau, NVSwitch, PCIe AER, the OOM killer), the newest 5000.

Every command runs under coreutils timeout with --kill-after (an nvidia-smi that ignores SIGTERM
is killed); nvidia-smi gets PROVISION_SMI_TIMEOUT seconds and, when stopped, the collector says
so in the nvidia-smi-stderr section ("nvidia-smi did not answer in N s") with its exit code.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import NamedTuple

from provision.hostpool import (
    DEFAULT_FORKS,
    DEFAULT_HOST_TIMEOUT,
    KILL_AFTER,
    Budget,
    Job,
    connection_error,
    remote_command,
    run_jobs,
    stop_group,
    timed_out_rc,
)

MARK = "===== provision-doctor: {} ====="

SCRIPT = r"""
export LC_ALL=C
T=${PROVISION_SMI_TIMEOUT:-60}
sec() { printf '\n===== provision-doctor: %s =====\n' "$1"; }
if command -v timeout >/dev/null 2>&1; then
  # timeout in the background, then SIGKILL to its group: also a grandchild that ignores SIGTERM
  lim() {
    s=$1; shift; timeout --kill-after=5 "$s" "$@" & p=$!
    wait $p; r=$?
    if [ $r -eq 124 ] || [ $r -eq 137 ]; then
      i=0; while kill -0 -$p 2>/dev/null && [ $i -lt 5 ]; do sleep 1; i=$((i+1)); done
      kill -KILL -$p 2>/dev/null
    fi
    return $r
  }
else
  lim() { shift; "$@"; }
fi
gpu_lines() { grep -aiE 'NVRM|Xid|nvidia|nouveau|nvswitch|fallen off the bus|AER|Out of memory|oom-kill' | tail -n 5000; }
src=""
k=$(lim 30 journalctl -k -b --no-pager -o short-iso 2>/dev/null | grep -v '^-- ' | gpu_lines)
if [ -n "$(lim 30 journalctl -k -b --no-pager -q -n 1 2>/dev/null)" ]; then src="journalctl -k -b"; fi
if [ -z "$src" ]; then
  for f in /var/log/kern.log /var/log/messages; do
    if [ -r "$f" ]; then k=$(lim 30 cat "$f" | gpu_lines); src="$f"; break; fi
  done
fi
if [ -z "$src" ]; then
  if d=$(lim 30 dmesg --time-format iso 2>/dev/null || lim 30 dmesg 2>/dev/null); then k=$(printf '%s\n' "$d" | gpu_lines); src="dmesg"; fi
fi
sec kernel-log-source; echo "${src:-none readable}"
sec kernel-log; printf '%s\n' "$k"
sec uname-r; uname -r
sec proc-driver-version; lim 10 cat /proc/driver/nvidia/version 2>/dev/null
sec modules; lim 10 cat /proc/modules 2>/dev/null
sec secure-boot
if command -v mokutil >/dev/null 2>&1; then lim 20 mokutil --sb-state 2>&1; fi
for f in /var/log/fabricmanager.log /var/log/nvidia-fabricmanager.log; do
  if [ -r "$f" ]; then sec fabricmanager-log; lim 20 tail -n 2000 "$f"; break; fi
done
if command -v nvidia-smi >/dev/null 2>&1; then
  out=$(lim "$T" nvidia-smi -q -x 2>&1); rc=$?
else
  out="nvidia-smi: command not found"; rc=127
fi
if [ "$rc" -eq 0 ]; then
  sec nvidia-smi-q-x; printf '%s\n' "$out"
  sec nvlink-s; lim "$T" nvidia-smi nvlink -s 2>&1 | head -n 4000
elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  sec nvidia-smi-stderr; printf '%s\n' "$out"; echo "provision-doctor: nvidia-smi did not answer in $T s (stopped by timeout)"
else
  sec nvidia-smi-stderr; printf '%s\n' "$out"
fi
sec nvidia-smi-rc; echo "$rc"
exit 0
"""


class Collected(NamedTuple):
    host: str
    text: str | None  # the collector's output; None when the host could not be reached
    problem: str | None  # why not


def smi_timeout(host_timeout: float) -> int:
    """nvidia-smi's share of a host's deadline (the rest of the collector needs seconds)."""
    return Budget(host_timeout).command_timeout()


def collect_local(host_timeout: float = DEFAULT_HOST_TIMEOUT) -> Collected:
    """The collector on this machine, ended with its process group at the deadline; what it
    printed by then (the kernel log first) is still diagnosed."""
    env = {**os.environ, "PROVISION_SMI_TIMEOUT": str(smi_timeout(host_timeout))}
    proc = subprocess.Popen(
        ["sh", "-c", SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=env,
    )
    try:
        out, _ = proc.communicate(timeout=host_timeout)
        problem = None
    except subprocess.TimeoutExpired:
        out = stop_group(proc)[0]
        problem = f"the collector did not finish within {host_timeout:g} s (--host-timeout); partial output"
    return Collected("local", out.decode("utf-8", "replace"), problem)


def remote_script(budget: Budget) -> str:
    """The collector as one command for a host: the whole script under timeout --kill-after, with
    nvidia-smi's own, shorter, limit inside it (its share of the host's budget)."""
    script = max(1, int(budget.remaining()) - KILL_AFTER)
    # nvidia-smi and its kill-after end inside the script's own limit, with a few seconds for
    # the sections printed after it: the script's timeout cannot reach nvidia-smi's process
    # group (timeout makes one of its own), so nvidia-smi must never outlive the script
    smi = max(1, min(budget.command_timeout(), script - KILL_AFTER - 3))
    inner = f"PROVISION_SMI_TIMEOUT={smi} sh -c {shlex.quote(SCRIPT)}"
    # a host without coreutils timeout runs the script as it is (the worker's deadline still holds)
    plain = f"PROVISION_SMI_TIMEOUT={smi} exec sh -c {shlex.quote(SCRIPT)}"
    return f"command -v timeout >/dev/null 2>&1 || {plain}\n" + remote_command(inner, script)


def collect_remote(
    hosts: list[str],
    inventory: str,
    *,
    sudo: bool = False,
    forks: int = DEFAULT_FORKS,
    host_timeout: float = DEFAULT_HOST_TIMEOUT,
    hostvars: dict[str, dict] | None = None,
) -> list[Collected]:
    """Run the collector on inventory hosts, `forks` at a time, each in a worker process
    (``python -m provision.doctor.collect``) under the host's deadline. hostvars: the hosts'
    variables as ansible-inventory printed them (the CLI has read the inventory): the workers
    hand them to testinfra instead of each running ansible-inventory again."""
    import json

    from provision.tools import tool_path

    argv = [sys.executable, "-m", "provision.doctor.collect", inventory, str(host_timeout)]
    direct = _ssh_commands(hosts, inventory, sudo=sudo, host_timeout=host_timeout, hostvars=hostvars)
    jobs = [
        Job(name, direct[name])
        if name in direct
        else Job(
            name,
            [*argv, name, "--sudo" if sudo else "--no-sudo"],
            json.dumps(hostvars[name]).encode() if hostvars and name in hostvars else b"",
        )
        for name in hosts
    ]
    env = {**os.environ, "PATH": tool_path()}
    out = []
    for outcome in run_jobs(jobs, forks=forks, timeout=host_timeout, env=env):
        text = outcome.stdout if "===== provision-doctor:" in outcome.stdout else None
        if outcome.name in direct and not outcome.timed_out:
            # the collector ran over ssh itself: 255 is ssh's own failure, timeout's codes a partial run
            if text is None or outcome.rc == 255:
                lines = [ln.strip() for ln in outcome.stderr.splitlines() if ln.strip()]
                out.append(Collected(outcome.name, None, lines[-1] if lines else f"exit {outcome.rc}"))
            elif timed_out_rc(outcome.rc):
                why = f"the collector did not finish within its {host_timeout:g} s on the host; partial output"
                out.append(Collected(outcome.name, text, why))
            else:
                out.append(Collected(outcome.name, text, None))
        elif outcome.timed_out:
            why = f"no answer within {host_timeout:g} s (--host-timeout)"
            out.append(Collected(outcome.name, text, why))
        elif outcome.rc in (0, PARTIAL) and text is not None:
            why = [ln.strip() for ln in outcome.stderr.splitlines() if ln.strip()]
            out.append(Collected(outcome.name, text, why[-1] if outcome.rc == PARTIAL and why else None))
        else:
            lines = [ln.strip() for ln in outcome.stderr.splitlines() if ln.strip()]
            out.append(Collected(outcome.name, None, lines[-1] if lines else f"exit {outcome.rc}"))
    return out


def _ssh_commands(
    hosts: list[str], inventory: str, *, sudo: bool, host_timeout: float, hostvars: dict[str, dict] | None
) -> dict[str, list[str]]:
    """host -> the ssh command that runs the collector there, for the hosts Ansible reaches over
    plain ssh: run_jobs runs it as the host's job, so a host costs one ssh client, not a Python
    worker (the deadline still ends the job's process group). The others keep their worker."""
    if not hostvars:
        return {}
    from provision.hostpool import build_host, inventory_connection, ssh_argv

    # each host's connection checked before any is contacted (a bad name or ssh option: exit 2)
    connections = {
        name: inventory_connection(name, hostvars[name], inventory=inventory) for name in hosts if name in hostvars
    }
    out = {}
    for name, connection in connections.items():
        try:
            host = build_host(connection, sudo=sudo)
            argv = ssh_argv(host, remote_script(Budget(host_timeout)))
        except Exception:  # the worker reports what is wrong with this host
            argv = None
        if argv is not None:
            out[name] = argv
    return out


UNREACHABLE, PARTIAL = 3, 4  # the worker's exit codes besides 0


def _worker(argv: list[str]) -> int:
    """One host: print the collector's output; exit 3 with the reason on stderr when it is unreachable."""
    inventory, host_timeout, name, sudo = argv[0], float(argv[1]), argv[2], argv[3] == "--sudo"
    budget = Budget(host_timeout)  # the parent's deadline started with this process
    import json

    from provision.hostpool import build_host, inventory_connection, inventory_hostvars

    given = sys.stdin.read()  # this host's inventory variables, as JSON (collect_remote)
    try:
        hostvars = json.loads(given) if given.strip() else inventory_hostvars(inventory, name)
        # the collector prints more than a verify command (a 5000-line kernel log, nvidia-smi -q -x):
        # read up to 64 MiB of it, not build_host's 1 MiB
        host = build_host(inventory_connection(name, hostvars, inventory=inventory), sudo=sudo, output_limit=64 << 20)
        res = host.run(remote_script(budget))
    except Exception as exc:
        sys.stderr.write(connection_error(exc) + "\n")
        return UNREACHABLE
    if "===== provision-doctor:" not in res.stdout:
        lines = (res.stderr or "").strip().splitlines()
        sys.stderr.write((lines[-1].strip() if lines else f"exit {res.rc}") + "\n")
        return UNREACHABLE
    sys.stdout.write(res.stdout)
    if timed_out_rc(res.rc):
        sys.stderr.write(f"the collector did not finish within its {host_timeout:g} s on the host; partial output\n")
        return PARTIAL
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
