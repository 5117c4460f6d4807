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
from pathlib import Path
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
    # "package.module:function": what argv runs, as a function of the stdin bytes that prints as
    # argv would and returns its exit status; run_jobs may call it in a forked child instead of
    # starting argv (see run_jobs, preload).
    entry: str | None = None


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
    preload: Sequence[str] = (),
) -> list[Outcome]:
    """Run the jobs, at most ``forks`` at once, each for at most ``timeout`` seconds; the outcomes
    come back in the jobs' order. An interrupt (Ctrl-C) ends every running job's group.

    With ``preload``, and more than one job, each with an ``entry``, the ``preload`` modules are
    imported here once and each job runs as a child forked from this process (_fork_jobs): a
    Python worker then costs a fork, not an interpreter start and its imports (pytest and
    testinfra: a third of a second of CPU per host). Each child leads a session of its own as a
    started worker does, so the deadline and Ctrl-C end its group the same way."""
    import signal
    import subprocess
    import threading

    if preload and len(jobs) > 1 and all(job.entry for job in jobs) and hasattr(os, "fork"):
        return _fork_jobs(jobs, forks=forks, timeout=timeout, env=env, on_done=on_done, preload=preload)
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
        result = _outcome(job, rc, (out, err), t0, started)
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
                _kill_group(proc.pid, signal.SIGKILL)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _outcome(job: Job, rc: int | None, output: tuple[bytes, bytes], t0: float, started: float) -> Outcome:
    out, err = (data.decode("utf-8", "replace") for data in output)
    return Outcome(job.name, rc, out, err, round(time.monotonic() - t0, 3), started)


# -- workers forked from this process, their modules imported once ---------------------------------
POLL = 0.02  # seconds between looks at the running children


class _Forked(NamedTuple):
    index: int
    pid: int
    t0: float
    started: float
    paths: tuple[str, str]  # the child's stdout and stderr


def _fork_jobs(
    jobs: Sequence[Job],
    *,
    forks: int,
    timeout: float,
    env: dict[str, str] | None,
    on_done: Callable[[Outcome], None] | None,
    preload: Sequence[str],
) -> list[Outcome]:
    """run_jobs for jobs with an ``entry``: ``preload`` imported here once, then each job a child
    forked from this thread (no other thread of run_jobs' runs, so none holds a lock the child
    would need), in a session of its own, its output in files of a private directory."""
    import importlib
    import shutil
    import signal
    import tempfile

    for module in preload:
        importlib.import_module(module)
    functions = [_entry_function(job.entry or "") for job in jobs]  # a bad entry fails here, before a fork
    results: list[Outcome | None] = [None] * len(jobs)
    queue = list(range(len(jobs)))
    running: dict[int, _Forked] = {}
    stopped: set[int] = set()  # pids past their deadline: SIGTERM sent to their group
    tmp = tempfile.mkdtemp(prefix="provision-jobs-")
    try:
        while queue or running:
            while queue and len(running) < max(1, forks):
                index = queue.pop(0)
                child = _fork_one(index, jobs[index], functions[index], tmp, env)
                running[child.pid] = child
            time.sleep(POLL)
            for pid, child in list(running.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                late = time.monotonic() - child.t0 >= timeout
                if done:
                    late_stop = pid in stopped
                    stopped.discard(pid)  # a later child may be given the same pid
                    if late_stop:  # what it left in its group that ignored SIGTERM
                        _kill_group(pid, signal.SIGKILL, reaped=True)
                    rc = None if late_stop else os.waitstatus_to_exitcode(status)
                    del running[pid]
                    output = tuple(Path(path).read_bytes() for path in child.paths)
                    results[child.index] = outcome = _outcome(jobs[child.index], rc, output, child.t0, child.started)
                    if on_done is not None:
                        on_done(outcome)
                elif late and pid not in stopped:
                    stopped.add(pid)
                    _kill_group(pid, signal.SIGTERM)
                elif late and time.monotonic() - child.t0 >= timeout + KILL_GRACE:
                    _kill_group(pid, signal.SIGKILL)
    except BaseException:
        for pid in running:
            _kill_group(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [r for r in results if r is not None]


def _entry_function(entry: str) -> Callable[[bytes], int]:
    import importlib

    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


def _fork_one(index: int, job: Job, function: Callable[[bytes], int], tmp: str, env) -> _Forked:
    paths = (os.path.join(tmp, f"{index}.out"), os.path.join(tmp, f"{index}.err"))
    fds = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600) for path in paths]
    started, t0 = time.time(), time.monotonic()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; run_jobs' tests see what it does
            _child(job, function, fds, env)
    finally:
        for fd in fds:
            os.close(fd)
    return _Forked(index, pid, t0, started, paths)


def _child(job: Job, function: Callable[[bytes], int], fds: list[int], env) -> None:
    """The forked worker: a session of its own (its group is what the deadline ends), stdin from
    /dev/null, stdout and stderr into its files (and sys.std* on them), the job's environment,
    default signal handling; then ``function(job.stdin)``, and os._exit, so nothing of the
    parent (atexit) runs here."""
    import contextlib
    import signal
    import sys
    import traceback

    rc: object = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        # new stream objects on those descriptors: the parent's may write elsewhere (a capture)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own
        sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)  # noqa: SIM115
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        rc = function(job.stdin)
    except SystemExit as exc:
        rc = exc.code
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(rc if isinstance(rc, int) else 1)


def _kill_group(pid: int, sig: int, *, reaped: bool = False) -> None:
    """``sig`` to the group a worker leads (it leads its session: its group id is its pid); a
    forked child that has not made its session yet is signalled alone. Once the worker is
    ``reaped`` only its group is: its pid alone may already name another process."""
    import contextlib

    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        if not reaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    except PermissionError:
        pass


def stop_group(proc: subprocess.Popen) -> tuple[bytes, bytes]:
    """SIGTERM the group, SIGKILL it KILL_GRACE seconds later; what it printed until then."""
    import signal
    import subprocess

    _kill_group(proc.pid, signal.SIGTERM)
    try:
        return proc.communicate(timeout=KILL_GRACE)
    except subprocess.TimeoutExpired:
        pass
    _kill_group(proc.pid, signal.SIGKILL)
    try:
        return proc.communicate(timeout=KILL_GRACE)
    except subprocess.TimeoutExpired as exc:
        # a grandchild that left the group still holds the pipes: keep what came, stop reading
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait(timeout=KILL_GRACE)
        return exc.stdout or b"", exc.stderr or b""
