"""One job per host, a bounded number at a time, each under a deadline that ends its whole
process group.

`verify` and `doctor -i` run each host's work in a child process (``python -m ...``) started in a
session of its own. A child still running at its deadline gets SIGTERM, then SIGKILL
``KILL_GRACE`` seconds later, sent to its process group, so the ssh clients it started go with
it; what it printed before then is kept (the workers print one JSON line per finished check, so
a host stopped at its deadline still reports what it did).

What a host costs is kept small, so that hosts side by side cost little more than one: a worker
is given the inventory variables the CLI has read (`seed_ansible_inventory`: no ansible-inventory
run per host), a host's commands share one SSH connection (`SharedSsh`, `share_connection`), and
a job that is one remote command runs as the ssh client itself (`ssh_argv`), with no Python
worker in between.

This is the local half of a host's deadline. The remote half is `remote_command`: the command
runs on the host under coreutils ``timeout --kill-after``, which signals the whole remote
process group, also a child that ignores SIGTERM (an nvidia-smi stuck on a GPU that fell off
the bus does).
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import subprocess

# subprocess, signal and threading are imported where they are used: the CLI imports this
# module for its defaults, and `doctor --from-file` starts no process.

KILL_AFTER = 5  # seconds between SIGTERM and SIGKILL on the host (timeout --kill-after)
KILL_GRACE = 2  # seconds between SIGTERM and SIGKILL for a local worker
DEFAULT_FORKS = 5  # Ansible's default for forks
DEFAULT_HOST_TIMEOUT = 120  # seconds per host
MIN_HOST_TIMEOUT = 15  # room for a command's share, its kill-after and the connection


class Job(NamedTuple):
    name: str  # the host
    argv: Sequence[str]
    stdin: bytes = b""


class Outcome(NamedTuple):
    name: str
    rc: int | None  # None: stopped at the deadline
    stdout: str
    stderr: str
    seconds: float
    started: float  # time.time() when the worker started (reports show hosts ran side by side)

    @property
    def timed_out(self) -> bool:
        return self.rc is None


class Budget:
    """The time a host has left. The worker makes one from the host's timeout when it starts;
    every command it runs gets a share (`command_timeout`) that ends before the deadline."""

    def __init__(self, seconds: float, *, reserve: float = KILL_AFTER + KILL_GRACE + 1, clock=time.monotonic):
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds - reserve

    def remaining(self) -> float:
        return self._end - self._clock()

    def command_timeout(self) -> int:
        """Seconds the next command may run before SIGTERM: a third of the host's timeout (one
        hung command leaves time for the others), never past the deadline; 0 when none is left."""
        left = self.remaining() - KILL_AFTER
        share = max(5.0, self.seconds / 3)
        return max(0, round(min(share, left)))  # a rounded-up half second comes out of the reserve


# coreutils timeout signals its whole process group at the limit, but its SIGKILL only follows
# while its direct child lives: `sh -c` dies of SIGTERM at once and timeout returns, leaving a
# grandchild that ignores SIGTERM (a stuck nvidia-smi) running. So timeout runs in the
# background; once it returns 124/137 the shell gives its group (pgid = timeout's pid) the rest
# of KILL_AFTER, then SIGKILLs whatever is left in it. POSIX sh (dash, bash): no `kill --`.
def group_kill(seconds: str, command: str, *, rc: str = "rc", after: int = KILL_AFTER) -> str:
    """sh lines that run ``sh -c COMMAND`` (``command``: already a shell word) under coreutils
    timeout for ``seconds`` (a number or a shell expansion), then SIGKILL its whole process group
    once ``after`` more seconds pass, so that children ignoring SIGTERM end too; its exit status
    is left in ``$rc``."""
    return (
        f"timeout --kill-after={after} {seconds} sh -c {command} & p=$!\n"
        f"wait $p; {rc}=$?\n"
        f"if [ ${rc} -eq 124 ] || [ ${rc} -eq 137 ]; then\n"
        f"  i=0; while kill -0 -$p 2>/dev/null && [ $i -lt {after} ]; do sleep 1; i=$((i+1)); done\n"
        "  kill -KILL -$p 2>/dev/null\n"
        "fi\n"
    )


def remote_command(command: str, seconds: int, *, have_timeout: bool = True) -> str:
    """``command`` for ``sh`` on a host, ended after ``seconds`` (SIGTERM, SIGKILL KILL_AFTER later)
    with every process it started, also those that ignore SIGTERM. Without coreutils timeout on
    the host it runs as it is (the local deadline still ends the connection)."""
    if not have_timeout:
        return command
    return group_kill(str(max(1, int(seconds))), shlex.quote(command)) + "exit $rc"


def connection_error(exc: BaseException) -> str:
    """Why a host could not be reached, in one line. testinfra raises RuntimeError(CommandResult)
    when ssh exits 255 (its repr is no message): ssh's own stderr says why."""
    result = exc.args[0] if exc.args else None
    stderr = getattr(result, "stderr", None)
    if isinstance(stderr, str) and stderr.strip():
        return stderr.strip().splitlines()[-1].strip()
    if getattr(result, "rc", None) is not None and not isinstance(result, str):
        return f"the connection failed (exit {result.rc})"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class SharedSsh:
    """One SSH connection per host for all the commands a worker sends it (OpenSSH ControlMaster).

    Without it every command pays a whole SSH handshake (a quarter of a second and a key exchange
    on both ends); with it a command is a session on the open connection. The sockets live in a
    private directory (mode 0700) this object makes; `close` ends every master still running
    (a worker stopped at its deadline leaves its master behind: ControlPersist detaches it from
    the worker's process group) and removes the directory. The connection settings a host
    already has (an inventory's ControlPath or ControlMaster) are left as they are."""

    def __init__(self) -> None:
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="provision-ssh-")

    def path(self, index: int) -> str | None:
        """The control socket of the index-th host; None where the path would not work."""
        path = os.path.join(self.dir, str(index))
        # sun_path holds 108 bytes; testinfra formats the ssh command line with %
        return path if len(path.encode()) < 100 and "%" not in path else None

    def close(self, timeout: float = 5) -> None:
        import contextlib
        import shutil
        import subprocess

        try:
            sockets = [os.path.join(self.dir, n) for n in os.listdir(self.dir)]
        except OSError:
            sockets = []
        for sock in sockets:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(
                    ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "provision-shared-connection"],
                    capture_output=True,
                    timeout=timeout,
                    check=False,
                )
        shutil.rmtree(self.dir, ignore_errors=True)


def ssh_backend(host):
    """The testinfra ssh backend `host` sends its commands through: its own (ssh://, safe-ssh://)
    or, for ansible://, the one testinfra builds from the inventory; None for other connections."""
    backend = getattr(host, "backend", None)
    if getattr(backend, "NAME", None) == "ansible" and not getattr(backend, "force_ansible", True):
        inner = backend.ansible_runner.get_host(
            backend.host, ssh_config=backend.ssh_config, ssh_identity_file=backend.ssh_identity_file
        )
        backend = getattr(inner, "backend", None)
    return backend if getattr(backend, "NAME", None) in ("ssh", "safe-ssh") else None


def share_connection(host, control_path: str | None) -> bool:
    """Make the host's commands share one SSH connection through control_path (testinfra's ssh
    backend adds ControlMaster=auto and ControlPersist, which need a ControlPath to take effect).
    False where it cannot: not ssh, ControlPersist off, or the inventory sets its own."""
    backend = ssh_backend(host) if control_path else None
    if backend is None or not getattr(backend, "controlpersist", 0):
        return False
    extra = (getattr(backend, "ssh_extra_args", None) or "").lower()
    if backend.controlpath or "controlpath" in extra or "controlmaster" in extra:
        return False
    backend.controlpath = control_path
    return True


def ssh_argv(host, command: str) -> list[str] | None:
    """The local command that runs ``command`` on ``host`` as testinfra's ssh backend does (the
    inventory's user, port, key and ssh arguments; sudo where asked), for `run_jobs` to run
    without a Python worker in between; None for other connections (local, docker, paramiko,
    safe-ssh), or if testinfra no longer builds its ssh command the way this expects."""
    backend = ssh_backend(host)
    build = getattr(backend, "_build_ssh_command", None)
    if backend is None or backend.NAME != "ssh" or build is None:
        return None
    command = host.backend.get_command(command)  # sudo asked of the ansible:// host (--sudo)
    if backend is not host.backend:
        command = backend.get_command(command)  # the inventory's become
    cmd, args = build(command)
    return ["/bin/sh", "-c", backend.quote(" ".join(cmd), *args)]  # testinfra runs it with shell=True


def seed_ansible_inventory(inventory: str, hostvars: dict[str, dict]) -> None:
    """Hand testinfra the hosts' variables that the parent process read with ansible-inventory,
    so that a worker's ansible:// host needs no ansible-inventory run of its own (half a second of
    CPU per host). testinfra keeps one AnsibleRunner per inventory path, with the inventory in a
    cached property; if that ever changes, the worker reads the inventory itself, as before."""
    import functools

    from testinfra.utils.ansible_runner import AnsibleRunner

    if not isinstance(AnsibleRunner.__dict__.get("inventory"), functools.cached_property):
        return
    runner = AnsibleRunner.get_runner(inventory)
    runner.__dict__["inventory"] = {
        "_meta": {"hostvars": {name: dict(values) for name, values in hostvars.items()}},
        "all": {"hosts": sorted(hostvars)},
    }


def timed_out_rc(rc: int) -> bool:
    """timeout's exit status for a command it stopped: 124 (SIGTERM worked), 137 (SIGKILL)."""
    return rc in (124, 137)


def run_jobs(
    jobs: Sequence[Job],
    *,
    forks: int = DEFAULT_FORKS,
    timeout: float,
    env: dict[str, str] | None = None,
    on_done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Run the jobs, at most ``forks`` at once, each for at most ``timeout`` seconds; the outcomes
    come back in the jobs' order. An interrupt (Ctrl-C) ends every running job's group."""
    import signal
    import subprocess
    import threading

    live: dict[int, subprocess.Popen] = {}
    lock = threading.Lock()

    def one(job: Job) -> Outcome:
        started, t0 = time.time(), time.monotonic()
        proc = subprocess.Popen(
            list(job.argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
        with lock:
            live[proc.pid] = proc
        try:
            try:
                out, err = proc.communicate(job.stdin, timeout=timeout)
                rc: int | None = proc.returncode
            except subprocess.TimeoutExpired:
                out, err = stop_group(proc)
                rc = None
        finally:
            with lock:
                live.pop(proc.pid, None)
        result = Outcome(
            job.name,
            rc,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            round(time.monotonic() - t0, 3),
            started,
        )
        if on_done is not None:
            on_done(result)
        return result

    import concurrent.futures

    if not jobs:
        return []
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(forks, len(jobs))))
    futures: list = []
    try:
        futures += [pool.submit(one, job) for job in jobs]
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        with lock:
            for proc in list(live.values()):
                _signal_group(proc, signal.SIGKILL)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    import contextlib

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # the worker leads its session: its group id is its pid


def stop_group(proc: subprocess.Popen) -> tuple[bytes, bytes]:
    """SIGTERM the group, SIGKILL it KILL_GRACE seconds later; what it printed until then."""
    import signal
    import subprocess

    _signal_group(proc, signal.SIGTERM)
    try:
        return proc.communicate(timeout=KILL_GRACE)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)
    try:
        return proc.communicate(timeout=KILL_GRACE)
    except subprocess.TimeoutExpired as exc:
        # a grandchild that left the group still holds the pipes: keep what came, stop reading
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait(timeout=KILL_GRACE)
        return exc.stdout or b"", exc.stderr or b""
