"""A host's fact commands in one round trip: one shell script, sent as one command.

Sent one by one, each of the ~20 commands the checks read costs an SSH session (an ssh client
here, a session and a login shell there); sent as one script they cost one. The script runs the
commands in order, each as `provision.hostpool.remote_command` would: under coreutils
``timeout --kill-after``, its whole process group SIGKILLed once that expires (a stuck
nvidia-smi ignores SIGTERM), for at most `share` seconds and never past the host's deadline,
which the script counts down on the host's own clock (/proc/uptime, or ``date +%s``). A command whose turn comes
after the deadline is not run, and says so.

Each command's stdout goes to the script's stdout and its stderr to the script's stderr, each
between two marker lines::

    <token> <i> b
    ...the command's output...
    <token> <i> e <exit status> <seconds it had>

The token is random per batch (`new_token`). What a host prints is untrusted: a command whose
output holds the token (a log line, a file that copies it) makes the whole batch void
(`parse` returns None) rather than feed the checks forged results; the caller then sends the
commands one by one, where ssh itself keeps their outputs apart.
"""

from __future__ import annotations

import re
import secrets
import shlex
from typing import NamedTuple

from provision.hostpool import KILL_AFTER, group_kill

NOT_RUN = "not run: the host's deadline has passed"


class Section(NamedTuple):
    out: str
    err: str
    rc: int | None  # None: not run (the deadline had passed when its turn came)
    seconds: int  # the timeout it ran under


def new_token() -> str:
    return "provision-" + secrets.token_hex(16)


# t(): seconds since boot, from /proc/uptime without a process (date +%s where that is unreadable).
# r(): $1 the command's number, $2 the command; s: its timeout, the host's deadline E permitting;
# the command runs under hostpool.group_kill, as remote_command runs one.
_FUNCTION = (
    "t() {{ if read n _ 2>/dev/null </proc/uptime; then n=${{n%.*}}; else n=$(date +%s); fi; }}\n"
    "r() {{\n"
    "  t; s=$((E - n - {after})); [ $s -gt {share} ] && s={share}\n"
    '  printf \'%s %s b\\n\' "$T" "$1"; printf \'%s %s b\\n\' "$T" "$1" >&2\n'
    "  if [ $s -gt 0 ]; then\n"
    "{run}"
    "  else c=-; s=0; fi\n"
    '  printf \'\\n%s %s e %s %s\\n\' "$T" "$1" "$c" "$s"; printf \'\\n%s %s e %s %s\\n\' "$T" "$1" "$c" "$s" >&2\n'
    "}}\n"
)


def script(commands: list[str], token: str, *, left: float, share: int, kill_after: int = KILL_AFTER) -> str:
    """The POSIX sh script that runs `commands` in order; `left`: seconds to the host's deadline
    (each command is stopped `kill_after` seconds before it), `share`: the most one command gets."""
    if not re.fullmatch(r"[A-Za-z0-9-]{16,}", token):
        raise ValueError("a batch token is letters, digits and dashes, 16 at least")
    run = "".join(
        f"    {line}\n" for line in group_kill("$s", '"$2" </dev/null', rc="c", after=int(kill_after)).splitlines()
    )
    head = f"T={token}\n" + _FUNCTION.format(after=int(kill_after), share=max(1, int(share)), run=run)
    body = "".join(f"r {i} {shlex.quote(command)}\n" for i, command in enumerate(commands))
    return head + f"t; E=$((n + {max(0, int(left))}))\n" + body + "exit 0"


_END = re.compile(r"(-|\d+) (\d+)(?:\n|\Z)")  # \Z: a backend that strips the last newline (Ansible's)


def _sections(stream: str, token: str, count: int) -> list[tuple[str, int | None, int]] | None:
    """(text, rc, seconds) of each complete section in order; None when the token shows up
    anywhere but in the script's own markers."""
    found: list[tuple[str, int | None, int]] = []
    pos = 0
    for i in range(count):
        begin = f"{token} {i} b\n"
        start = stream.find(begin, pos)
        if start < 0:
            break  # not reached: the batch was cut short
        if token in stream[pos:start]:
            return None
        start += len(begin)
        end_mark = f"\n{token} {i} e "
        end = stream.find(end_mark, start)
        if end < 0:
            pos = start
            break
        text = stream[start:end]
        tail = _END.match(stream, end + len(end_mark))
        if token in text or tail is None:
            return None
        rc = None if tail.group(1) == "-" else int(tail.group(1))
        found.append((text, rc, int(tail.group(2))))
        pos = tail.end()
    if token in stream[pos:].replace(f"{token} {len(found)} b\n", "", 1):
        return None
    return found


def parse(out: str, err: str, token: str, count: int) -> list[Section] | None:
    """The sections of the commands that ran, in order (fewer than `count` when the batch was
    cut short); None when the output does not have the script's shape or a command printed the
    token."""
    outs = _sections(out, token, count)
    errs = _sections(err, token, count)
    if outs is None or errs is None:
        return None
    sections = []
    for n, (text, rc, seconds) in enumerate(outs):
        if n < len(errs) and errs[n][1:] != (rc, seconds):
            return None
        sections.append(Section(text, errs[n][0] if n < len(errs) else "", rc, seconds))
    return sections
