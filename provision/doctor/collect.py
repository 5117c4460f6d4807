"""What `provision doctor --local` / `-i` reads on a host: one POSIX shell script that prints
each source as a section (`===== provision-doctor: <key> =====`), run locally or over SSH
through testinfra's backends (the inventory's connection settings, as apply uses them).

The kernel log comes from the first source that has entries: `journalctl -k` (this boot), the
syslog files (/var/log/kern.log, /var/log/messages: they also keep earlier boots), `dmesg`.
Only lines that matter to a GPU are kept (NVRM, Xid, nvidia, nouveau, NVSwitch, PCIe AER,
the OOM killer), the newest 5000.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
from typing import NamedTuple

MARK = "===== provision-doctor: {} ====="

SCRIPT = r"""
export LC_ALL=C
sec() { printf '\n===== provision-doctor: %s =====\n' "$1"; }
gpu_lines() { grep -aiE 'NVRM|Xid|nvidia|nouveau|nvswitch|fallen off the bus|AER|Out of memory|oom-kill' | tail -n 5000; }
if command -v nvidia-smi >/dev/null 2>&1; then
  out=$(timeout 60 nvidia-smi -q -x 2>&1); rc=$?
else
  out="nvidia-smi: command not found"; rc=127
fi
if [ "$rc" -eq 0 ]; then
  sec nvidia-smi-q-x; printf '%s\n' "$out"
  sec nvlink-s; timeout 30 nvidia-smi nvlink -s 2>&1 | head -n 4000
else
  sec nvidia-smi-stderr; printf '%s\n' "$out"
fi
sec nvidia-smi-rc; echo "$rc"
sec proc-driver-version; cat /proc/driver/nvidia/version 2>/dev/null
sec modules; cat /proc/modules 2>/dev/null
sec uname-r; uname -r
sec secure-boot
if command -v mokutil >/dev/null 2>&1; then mokutil --sb-state 2>&1; fi
src=""
k=$(journalctl -k -b --no-pager -o short-iso 2>/dev/null | grep -v '^-- ' | gpu_lines)
if [ -n "$(journalctl -k -b --no-pager -q -n 1 2>/dev/null)" ]; then src="journalctl -k -b"; fi
if [ -z "$src" ]; then
  for f in /var/log/kern.log /var/log/messages; do
    if [ -r "$f" ]; then k=$(gpu_lines < "$f"); src="$f"; break; fi
  done
fi
if [ -z "$src" ]; then
  if d=$(dmesg --time-format iso 2>/dev/null || dmesg 2>/dev/null); then k=$(printf '%s\n' "$d" | gpu_lines); src="dmesg"; fi
fi
sec kernel-log-source; echo "${src:-none readable}"
sec kernel-log; printf '%s\n' "$k"
for f in /var/log/fabricmanager.log /var/log/nvidia-fabricmanager.log; do
  if [ -r "$f" ]; then sec fabricmanager-log; tail -n 2000 "$f"; break; fi
done
exit 0
"""


class Collected(NamedTuple):
    host: str
    text: str | None  # the collector's output; None when the host could not be reached
    problem: str | None  # why not


def collect_local() -> Collected:
    proc = subprocess.run(
        ["sh", "-c", SCRIPT], capture_output=True, text=True, errors="replace", timeout=300, check=False
    )
    return Collected("local", proc.stdout, None)


def collect_remote(hosts: list[str], inventory: str, *, sudo: bool = False, workers: int = 8) -> list[Collected]:
    """Run the collector on inventory hosts (in parallel), through testinfra's ansible backend."""
    import testinfra

    from provision.tools import tools_on_path

    def one(name: str) -> Collected:
        try:
            host = testinfra.get_host(f"ansible://{name}", ansible_inventory=inventory, sudo=sudo)
            res = host.run(SCRIPT)
        except Exception as exc:
            return Collected(name, None, f"{type(exc).__name__}: {exc}")
        if res.rc != 0 or "===== provision-doctor:" not in res.stdout:
            why = (res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1]
            return Collected(name, None, why)
        return Collected(name, res.stdout, None)

    with tools_on_path(), concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts)))) as pool:
        return list(pool.map(one, hosts))
