"""One job per host, a bounded number at a time, each under a deadline that ends its whole
process group.

`verify` and `doctor -i` run each host's work in a child process (``python -m ...``) started in a
session of its own. A child still running at its deadline gets SIGTERM, then SIGKILL
``KILL_GRACE`` seconds later, sent to its process group, so the ssh clients it started go with
it; what it printed before then is kept (the workers print one JSON line per finished check, so
a host stopped at its deadline still reports what it did).

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
_GROUP_KILL = (
    "timeout --kill-after={after} {seconds} sh -c {command} & p=$!\n"
    "wait $p; rc=$?\n"
    "if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then\n"
    "  i=0; while kill -0 -$p 2>/dev/null && [ $i -lt {after} ]; do sleep 1; i=$((i+1)); done\n"
    "  kill -KILL -$p 2>/dev/null\n"
    "fi\n"
    "exit $rc"
)


def remote_command(command: str, seconds: int, *, have_timeout: bool = True) -> str:
    """``command`` for ``sh`` on a host, ended after ``seconds`` (SIGTERM, SIGKILL KILL_AFTER later)
    with every process it started, also those that ignore SIGTERM. Without coreutils timeout on
    the host it runs as it is (the local deadline still ends the connection)."""
    if not have_timeout:
        return command
    return _GROUP_KILL.format(after=KILL_AFTER, seconds=max(1, int(seconds)), command=shlex.quote(command))


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
