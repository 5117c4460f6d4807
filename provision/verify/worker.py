"""One host's checks in a process of its own: ``python -m provision.verify.worker``.

`run_verify` starts one per host through provision.hostpool (a bounded pool, a deadline per
host). The worker reads a pickled `Request` on stdin (forked from the CLI's process, it is handed
the same bytes: `serve`), first makes sure the host runs a command at all, then runs the checks
with pytest.main, printing one JSON line per event as it happens, so that a host stopped at its
deadline still reports the checks it finished:

    {"result": [host, check, title, status, detail, [evidence...], seconds]}
    {"unreachable": "ssh: connect to host 10.0.0.7 port 22: Connection refused"}
    {"error": "collecting checks failed: ..."}
    {"done": <pytest exit code>}

The JSON lines go to the worker's original stdout; anything else the libraries print is sent
to stderr, so it cannot be mistaken for a result.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import sys
from typing import Any, NamedTuple, TextIO

from provision.hostpool import Budget, build_host, connection_error, remote_command, share_connection


class Request(NamedTuple):
    target: Any  # provision.verify.Target (its checked Connection), hostvars as a plain dict
    sudo: bool
    ssh_identity_file: str | None
    ssh_config: str | None
    only: list[str] | None
    host_timeout: float
    control_path: str | None = None  # the host's SSH control socket (hostpool.SharedSsh)
    catalogue: Any = None  # provision.verify.Catalogue: the controller's, for the image-runs check


def probe(host, budget: Budget) -> tuple[str | None, bool]:
    """(why the host runs no command, or None; whether it has coreutils timeout), in one round trip.
    The wrapper itself must work there (POSIX sh, kill -0 -PGID); if not, commands run bare and
    only the local deadline bounds them. The answer is a random token (a host's login shell
    printing a fixed word cannot fake it)."""
    from provision.verify.batch import new_token

    token = new_token()
    wrapped = remote_command("true", budget.command_timeout())
    command = f"if command -v timeout >/dev/null 2>&1; then ( {wrapped} ) >/dev/null 2>&1 && echo {token}; fi; true"
    try:
        res = host.run(command)
    except Exception as exc:
        return connection_error(exc), False
    if res.rc != 0:
        lines = (res.stderr or res.stdout or "").strip().splitlines()
        return (lines[-1].strip() if lines else f"exit {res.rc}"), False
    return None, token in (res.stdout or "").split()


def run(request: Request, out: TextIO) -> int:
    from provision.tools import tools_on_path
    from provision.verify import run_checks

    def emit(doc: dict[str, Any]) -> None:
        out.write(json.dumps(doc) + "\n")
        out.flush()

    budget = Budget(request.host_timeout)
    with tools_on_path():
        try:
            host = build_host(
                request.target.connection,
                sudo=request.sudo,
                ssh_identity_file=request.ssh_identity_file,
                ssh_config=request.ssh_config,
            )
            share_connection(host, request.control_path)
        except Exception as exc:
            emit({"unreachable": connection_error(exc)})
            return 0
        why, have_timeout = probe(host, budget)
        if why is not None:
            emit({"unreachable": why})
            return 0
        rc = run_checks(
            request.target,
            host,
            only=request.only,
            budget=budget,
            have_timeout=have_timeout,
            emit=emit,
            catalogue=request.catalogue,
        )
    emit({"done": rc})
    return 0


# What a worker imports: with more than one host, hostpool.run_jobs imports these once in the
# CLI's process and forks every worker from it (preload); a started worker imports them itself.
PRELOAD = (
    "pytest",
    "testinfra",
    "testinfra.host",
    "testinfra.backend.ssh",
    "testinfra.backend.local",
    "testinfra.backend.docker",
    "testinfra.backend.podman",
    "provision.verify",
    "provision.verify.plugin",
    "provision.verify.worker",
)


def serve(stdin: bytes) -> int:
    """One host's checks for the pickled Request in ``stdin`` (hostpool.Job.entry): the JSON lines
    go to stdout, whatever else prints to stderr."""
    # a worker lives for one host's checks: its few cycles can wait for the exit, the collector's
    # passes over everything pytest and testinfra import cannot
    gc.disable()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # whatever else prints goes to stderr
    sys.stdout = sys.stderr
    request = pickle.loads(stdin)  # written by run_verify in the parent process
    return run(request, out)


def main() -> int:
    return serve(sys.stdin.buffer.read())


if __name__ == "__main__":
    sys.exit(main())
