"""What `provision doctor --local` / `-i` reads on a host: one POSIX shell script that prints
each source as a section (`===== provision-doctor: <key> ===== <token>`), run locally or over SSH
through testinfra's backends (the inventory's connection settings, as apply uses them), `forks`
hosts at a time, each under the host's deadline (provision.hostpool): a host reached over plain
ssh is one ssh client running the script, any other connection a worker process.

The kernel log is read first: a GPU that fell off the bus can hang nvidia-smi, and whatever
stops a hung collector, the kernel log that names the cause is already out. It comes from the
first source that has entries: `journalctl -k` (this boot), the syslog files (/var/log/kern.log,
/var/log/messages: they also keep earlier boots), `dmesg`. Only lines that matter to a GPU are
kept (NVRM, Xid, nvidia, nouveau, NVSwitch, PCIe AER, the OOM killer), the newest 5000.

The BMC is read last, in-band with ipmitool where it is installed (`ipmitool sensor`, `sdr elist`,
`sel elist`: read-only commands through the local interface, no credentials, each under a third
of nvidia-smi's deadline, the event log keeping its newest part); where it is not, the bmc-sensor
section says so ("ipmitool not installed: BMC not read").

Every command runs under coreutils timeout with --kill-after (an nvidia-smi that ignores SIGTERM
is killed); nvidia-smi gets PROVISION_SMI_TIMEOUT seconds and, when stopped, the collector says
so in the nvidia-smi-stderr section ("nvidia-smi did not answer in N s") with its exit code.

What a host prints is data, never framing: each run (each host) gets a random token
(``new_token``) that ends every section marker, and the script passes every command's output
through ``sed`` that replaces the token, so no line a host prints (a kernel log, a GPU name, a log
file) can start a section, and the parser (``classify.split_bundle``) counts only markers with the
token. Each command's output is cut on the host to bounds.SECTION_CHARS bytes (a log keeps its
end), and the controller reads at most bounds.HOST_BYTES of a host's output (``Collected.cut``).
"""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
import sys
from typing import NamedTuple

from provision.doctor.bounds import HOST_BYTES, SECTION_CHARS
from provision.hostpool import (
    DEFAULT_FORKS,
    DEFAULT_HOST_TIMEOUT,
    KILL_AFTER,
    Budget,
    Job,
    connection_error,
    remote_command,
    run_jobs,
    timed_out_rc,
)

TOKEN_BYTES = 16  # a token is 32 hex digits (classify.COLLECTOR_MARKER)


def new_token() -> str:
    """A run's section token: random, so that no host can know it before the run."""
    return secrets.token_hex(TOKEN_BYTES)


def marker(key: str, token: str) -> str:
    """The line that starts section ``key`` of the run with ``token``."""
    return f"===== provision-doctor: {key} ===== {token}"


def answered(text: str, token: str) -> bool:
    """Whether ``text`` holds a section of the run with ``token`` (the collector ran)."""
    return f" ===== {token}" in text


SCRIPT = r"""
export LC_ALL=C
T=${PROVISION_SMI_TIMEOUT:-60}
K=${PROVISION_DOCTOR_TOKEN:-}
C=${PROVISION_DOCTOR_CAP:-4194304}
case $K in ''|*[!0-9a-f]*) echo "provision-doctor: no run token given" >&2; exit 2;; esac
sec() { printf '\n===== provision-doctor: %s ===== %s\n' "$1" "$K"; }
# every command's output passes here: at most C+1 bytes (the controller says when a section was
# cut; a log keeps its end) and never the run's token, so nothing a host prints starts a section
put() { head -c $((C + 1)) | sed "s/$K/[token]/g"; }
putt() { tail -c $((C + 1)) | sed "s/$K/[token]/g"; }
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
sec kernel-log; printf '%s\n' "$k" | putt
sec uname-r; uname -r | put
sec pci-nvidia
if [ -d /sys/bus/pci/devices ]; then
  { n=0
    for d in /sys/bus/pci/devices/*; do
      [ -r "$d/vendor" ] || continue
      n=$((n + 1)); v=; read -r v < "$d/vendor"
      if [ "$v" = 0x10de ]; then c=; i=; read -r c < "$d/class"; read -r i < "$d/device"; echo "${d##*/} $i $c"; fi
    done
    echo "devices scanned: $n"; } 2>/dev/null | put
fi
sec proc-driver-version; lim 10 cat /proc/driver/nvidia/version 2>/dev/null | put
sec modules; lim 10 cat /proc/modules 2>/dev/null | put
sec secure-boot
if command -v mokutil >/dev/null 2>&1; then lim 20 mokutil --sb-state 2>&1 | put; fi
for f in /var/log/fabricmanager.log /var/log/nvidia-fabricmanager.log; do
  if [ -r "$f" ]; then sec fabricmanager-log; lim 20 tail -n 2000 "$f" | putt; break; fi
done
if command -v nvidia-smi >/dev/null 2>&1; then
  out=$(lim "$T" nvidia-smi -q -x 2>&1); rc=$?
else
  out="nvidia-smi: command not found"; rc=127
fi
if [ "$rc" -eq 0 ]; then
  sec nvidia-smi-q-x; printf '%s\n' "$out" | put
  sec nvlink-s; lim "$T" nvidia-smi nvlink -s 2>&1 | head -n 4000 | put
elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  sec nvidia-smi-stderr; printf '%s\n' "$out" | put; echo "provision-doctor: nvidia-smi did not answer in $T s (stopped by timeout)"
else
  sec nvidia-smi-stderr; printf '%s\n' "$out" | put
fi
sec nvidia-smi-rc; echo "$rc"
# the BMC, in-band, read-only: sensors with thresholds, the sensor records' states, the event log
# (its newest part); each under a third of nvidia-smi's share, no credentials (the local interface)
if command -v ipmitool >/dev/null 2>&1; then
  B=$((T / 3)); [ "$B" -ge 5 ] || B=5
  sec bmc-sensor; lim "$B" ipmitool sensor 2>&1 | put
  sec bmc-sdr; lim "$B" ipmitool sdr elist 2>&1 | put
  sec bmc-sel; lim "$B" ipmitool sel elist 2>&1 | putt
else
  sec bmc-sensor; echo "ipmitool not installed: BMC not read"
fi
exit 0
"""


class Collected(NamedTuple):
    host: str
    text: str | None  # the collector's output; None when the host could not be reached
    problem: str | None  # why not
    token: str = ""  # the run's token: only markers that carry it start a section (split_bundle)
    cut: bool = False  # the host printed more than HOST_BYTES: the first HOST_BYTES are in text


def _environment(smi: int, token: str) -> str:
    """The collector's settings as shell assignments (every value digits or hex: nothing to quote)."""
    if len(token) != 2 * TOKEN_BYTES or token.strip("0123456789abcdef"):
        raise ValueError("a collector token is 32 hex digits (new_token)")
    return f"PROVISION_SMI_TIMEOUT={smi} PROVISION_DOCTOR_TOKEN={token} PROVISION_DOCTOR_CAP={SECTION_CHARS}"


def smi_timeout(host_timeout: float) -> int:
    """nvidia-smi's share of a host's deadline (the rest of the collector needs seconds)."""
    return Budget(host_timeout).command_timeout()


def collect_local(host_timeout: float = DEFAULT_HOST_TIMEOUT, *, token: str | None = None) -> Collected:
    """The collector on this machine, ended with its process group at the deadline; what it
    printed by then (the kernel log first) is still diagnosed. At most HOST_BYTES of its output
    are kept (the rest is read and dropped); the token (new_token) is handed over in the
    environment, which other users cannot read."""
    from provision.hostpool import _communicate_bounded

    token = token or new_token()
    env = {
        **os.environ,
        "PROVISION_SMI_TIMEOUT": str(smi_timeout(host_timeout)),
        "PROVISION_DOCTOR_TOKEN": token,
        "PROVISION_DOCTOR_CAP": str(SECTION_CHARS),
    }
    proc = subprocess.Popen(
        ["sh", "-c", SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=env,
    )
    rc, out, _err, cut = _communicate_bounded(proc, b"", host_timeout, HOST_BYTES)
    problem = None
    if rc is None:
        problem = f"the collector did not finish within {host_timeout:g} s (--host-timeout); partial output"
    return Collected("local", out.decode("utf-8", "replace"), problem, token, cut and len(out) >= HOST_BYTES)


def remote_script(budget: Budget, token: str) -> str:
    """The collector as one command for a host: the whole script under timeout --kill-after, with
    nvidia-smi's own, shorter, limit inside it (its share of the host's budget)."""
    script = max(1, int(budget.remaining()) - KILL_AFTER)
    # nvidia-smi and its kill-after end inside the script's own limit, with a few seconds for
    # the sections printed after it: the script's timeout cannot reach nvidia-smi's process
    # group (timeout makes one of its own), so nvidia-smi must never outlive the script
    smi = max(1, min(budget.command_timeout(), script - KILL_AFTER - 3))
    inner = f"{_environment(smi, token)} sh -c {shlex.quote(SCRIPT)}"
    # a host without coreutils timeout runs the script as it is (the worker's deadline still holds)
    plain = f"{_environment(smi, token)} exec sh -c {shlex.quote(SCRIPT)}"
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
    tokens = {name: new_token() for name in hosts}  # one per host: a host never sees another's
    direct = _ssh_commands(hosts, inventory, sudo=sudo, host_timeout=host_timeout, hostvars=hostvars, tokens=tokens)
    jobs = [
        Job(name, direct[name])
        if name in direct
        else Job(
            name,
            [*argv, name, "--sudo" if sudo else "--no-sudo", tokens[name]],
            json.dumps(hostvars[name]).encode() if hostvars and name in hostvars else b"",
        )
        for name in hosts
    ]
    env = {**os.environ, "PATH": tool_path()}
    out = []
    for outcome in run_jobs(jobs, forks=forks, timeout=host_timeout, env=env, limit=HOST_BYTES):
        token = tokens[outcome.name]
        text = outcome.stdout if answered(outcome.stdout, token) else None
        cut = bool(outcome.cut) and len(outcome.stdout.encode("utf-8", "replace")) >= HOST_BYTES - 4
        got = Collected(outcome.name, text, None, token, cut)
        if outcome.name in direct and not outcome.timed_out:
            # the collector ran over ssh itself: 255 is ssh's own failure, timeout's codes a partial run
            if text is None or outcome.rc == 255:
                out.append(got._replace(text=None, problem=_last_line(outcome.stderr, outcome.rc)))
            elif timed_out_rc(outcome.rc):
                why = f"the collector did not finish within its {host_timeout:g} s on the host; partial output"
                out.append(got._replace(problem=why))
            else:
                out.append(got)
        elif outcome.timed_out:
            out.append(got._replace(problem=f"no answer within {host_timeout:g} s (--host-timeout)"))
        elif outcome.rc in (0, PARTIAL) and text is not None:
            why = _last_line(outcome.stderr, outcome.rc) if outcome.rc == PARTIAL else None
            out.append(got._replace(problem=why))
        else:
            out.append(got._replace(text=None, problem=_last_line(outcome.stderr, outcome.rc)))
    return out


def _last_line(stderr: str, rc: int | None) -> str:
    """Why a host gave no output: the last line it printed on stderr, cut to one line's worth."""
    lines = [ln.strip() for ln in stderr[-65536:].splitlines() if ln.strip()]
    return lines[-1][:500] if lines else f"exit {rc}"


def _ssh_commands(
    hosts: list[str],
    inventory: str,
    *,
    sudo: bool,
    host_timeout: float,
    hostvars: dict[str, dict] | None,
    tokens: dict[str, str],
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
            argv = ssh_argv(host, remote_script(Budget(host_timeout), tokens[name]))
        except Exception:  # the worker reports what is wrong with this host
            argv = None
        if argv is not None:
            out[name] = argv
    return out


UNREACHABLE, PARTIAL = 3, 4  # the worker's exit codes besides 0


def _worker(argv: list[str]) -> int:
    """One host: print the collector's output; exit 3 with the reason on stderr when it is unreachable."""
    inventory, host_timeout, name, sudo, token = argv[0], float(argv[1]), argv[2], argv[3] == "--sudo", argv[4]
    budget = Budget(host_timeout)  # the parent's deadline started with this process
    import json

    from provision.hostpool import build_host, inventory_connection, inventory_hostvars

    given = sys.stdin.read()  # this host's inventory variables, as JSON (collect_remote)
    try:
        hostvars = json.loads(given) if given.strip() else inventory_hostvars(inventory, name)
        # the collector prints more than a verify command (a 5000-line kernel log, nvidia-smi -q -x):
        # read up to 64 MiB of it, not build_host's 1 MiB
        host = build_host(inventory_connection(name, hostvars, inventory=inventory), sudo=sudo, output_limit=64 << 20)
        res = host.run(remote_script(budget, token))
    except Exception as exc:
        sys.stderr.write(connection_error(exc) + "\n")
        return UNREACHABLE
    if not answered(res.stdout, token):
        sys.stderr.write(_last_line(res.stderr or "", res.rc) + "\n")
        return UNREACHABLE
    sys.stdout.write(res.stdout)
    if timed_out_rc(res.rc):
        sys.stderr.write(f"the collector did not finish within its {host_timeout:g} s on the host; partial output\n")
        return PARTIAL
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
