"""One job per host, a bounded number at a time, each under a deadline that ends its whole
process group.

`verify` and `doctor -i` run each host's work in a child process (``python -m ...``) started in a
session of its own. A child still running at its deadline gets SIGTERM, then SIGKILL
``KILL_GRACE`` seconds later, sent to its process group, so the ssh clients it started go with
it; what it printed before then is kept (the workers print one JSON line per finished check, so
a host stopped at its deadline still reports what it did).

What a host costs is kept small, so that hosts side by side cost little more than one: a worker
is given the host's Connection, read from the inventory variables the CLI has read (no
ansible-inventory run per host), a host's commands share one SSH connection (`SharedSsh`,
`share_connection`), and a job that is one remote command runs as the ssh client itself
(`ssh_argv`), with no Python worker in between.

How a host is reached is data checked before use (`inventory_connection`, `url_connection`):
host names and addresses are host names or IP addresses, ssh arguments are ssh options that run
nothing on this machine, and testinfra's backends are built from those parts with explicit
arguments (`build_host`), never from a URL; every local command they start is an argument vector
(no shell), and each command's output is read up to OUTPUT_LIMIT bytes.

This is the local half of a host's deadline. The remote half is `remote_command`: the command
runs on the host under coreutils ``timeout --kill-after``, which signals the whole remote
process group, also a child that ignores SIGTERM (an nvidia-smi stuck on a GPU that fell off
the bus does).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shlex
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from provision.errors import InputError

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
    cut: bool = False  # with run_jobs(limit=N): a stream held more than N bytes; the first N are kept

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
    if isinstance(exc, InputError):  # the host's connection variables were refused (inventory_connection)
        return exc.message
    result = exc.args[0] if exc.args else None
    stderr = getattr(result, "stderr", None)
    if isinstance(stderr, str) and stderr.strip():
        return stderr.strip().splitlines()[-1].strip()
    if getattr(result, "rc", None) is not None and not isinstance(result, str):
        return f"the connection failed (exit {result.rc})"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- how a host is reached: explicit fields, never a URL or a command line ------------------------------
#
# testinfra builds a host from a URL (`ansible://NAME`, `ssh://USER@HOST:PORT?option=value`) and
# runs ssh through a shell with the inventory's ssh arguments pasted in: a host named
# `gpu2?ssh_config=FILE` became URL options (FILE's ProxyCommand then ran here), and a `;` in
# ansible_ssh_extra_args ran a local command. So the product reads an inventory host's connection
# variables itself, checks each (`inventory_connection`), keeps them in a Connection, and builds
# testinfra's backend objects from it with explicit arguments (`build_host`); every local command
# they start is an argument vector (no shell), and what a command prints is read up to a limit.

OUTPUT_LIMIT = 1024 * 1024  # bytes of one command's stdout (and of its stderr) read from a host

# RFC 1123 labels (underscores too: inventories use them), dot-separated; never a leading dash
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\$?")
# what a shell would act on; a template brace, which Ansible would evaluate and we do not
SHELL_METACHARACTERS = frozenset(";&|`$<>(){}\\\n\r")
# ssh options whose value runs a program, or loads one, on this machine (ssh_config(5)), and the
# flags that do the same or bring a config file that can (-F)
COMMAND_OPTIONS = frozenset(
    {
        "proxycommand",
        "localcommand",
        "permitlocalcommand",
        "knownhostscommand",
        "match",
        "include",
        "pkcs11provider",
        "securitykeyprovider",
        "xauthlocation",
    }
)
# per client: the options that take a value, the flags, and the options refused (they run or load a
# program here, or bring a config file that can): ssh(1), scp(1), sftp(1) (Ansible hands
# ansible_scp_extra_args and ansible_sftp_extra_args to those two)
_CONFIG_FILE = "a config file (it can hold ProxyCommand)"
_GRAMMARS = {
    "ssh": (
        frozenset("BbcDEeFIiJLlmOoPpQRSWw"),
        frozenset("46AaCfGgKkMNnqsTtVvXxYy"),
        {"F": _CONFIG_FILE, "I": "a PKCS#11 library loaded into ssh"},
    ),
    "scp": (
        frozenset("cDFiJloPSX"),
        frozenset("346ABCOpqRrsTv"),
        {"F": _CONFIG_FILE, "S": "a program run here in place of ssh", "D": "an sftp server run here"},
    ),
    "sftp": (
        frozenset("BbcDFiJloPRSsX"),
        frozenset("46AaCfNpqrv"),
        {
            "F": _CONFIG_FILE,
            "S": "a program run here in place of ssh",
            "D": "an sftp server run here",
            "b": "a batch file (its !commands run in a shell here)",
        },
    ),
}
SSH_HINT = (
    "connection variables hold ssh options only (-o Name=value, as Ansible splits them); nothing in them may "
    "run a program here: reach a host behind a bastion with -o ProxyJump=bastion (or -J bastion)"
)


class Connection(NamedTuple):
    """How to reach one host, each part checked (`inventory_connection`, `url_connection`)."""

    kind: str  # local | ssh | safe-ssh | docker | podman | ansible (Ansible itself runs each command)
    host: str = ""  # host name, IP address or container name
    user: str | None = None
    port: int | None = None
    password: str | None = None  # ssh: handed to sshpass in its environment, never on a command line
    identity_file: str | None = None
    ssh_args: tuple[str, ...] = ()  # extra ssh options, one argument each
    become: bool = False
    become_user: str | None = None
    control_path: str | None = None  # ansible.cfg's [ssh_connection] control_path
    inventory: str | None = None  # kind "ansible": the inventory Ansible reads the host from

    @property
    def label(self) -> str:
        """The host as reports name it: user@host:port."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user + '@' if self.user else ''}{host}{':' + str(self.port) if self.port else ''}"


def _shown(value: object, width: int = 72) -> str:
    """``value`` quoted for an error line (control characters escaped), at most ``width`` long."""
    text = str(value)
    return repr(text if len(text) <= width else text[: width - 1] + "…")


def host_name_problem(value: object) -> str | None:
    """Why ``value`` is not a host name or IP address (None when it is one)."""
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a host name"
    if not value:
        return "is empty"
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    if len(value) > 253 or not _HOST_NAME.fullmatch(value):
        bad = next((c for c in value if not (c.isascii() and (c.isalnum() or c in "._-"))), None)
        why = f"holds {bad!r}" if bad is not None else "is not a host name"
        return f"{why} (a host name, IPv4 or IPv6 address: letters, digits, '.', '-', '_', no leading '-')"
    return None


def check_host_name(value: object, what: str) -> str:
    """``value`` if it is a host name or IP address; otherwise InputError naming ``what``."""
    problem = host_name_problem(value)
    if problem:
        raise InputError(
            f"{what} {problem}",
            hint="name hosts by host name or address; anything else would be read as options by ssh or testinfra",
        )
    return str(value)


def ssh_option_problem(value: str, program: str = "ssh") -> str | None:
    """Why a string of ``program``'s arguments (ssh: ansible_ssh_common_args, …; scp or sftp:
    ansible_scp_extra_args, ansible_sftp_extra_args) could run a program here or is not made of
    that client's options; None when it is safe to hand to it as argv."""
    with_value, flags, refused = _GRAMMARS[program]
    bad = next((c for c in value if c in SHELL_METACHARACTERS or (ord(c) < 32 and c != "\t") or ord(c) == 127), None)
    if bad is not None:
        return f"holds {bad!r} (a shell metacharacter or control character)"
    try:
        words = shlex.split(value)
    except ValueError as exc:
        return f"does not split into arguments ({exc})"
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word in ("-", "--"):
            return f"holds {word!r}, which is not an option of {program}"
        j = 1
        while j < len(word):
            flag = word[j]
            if flag in with_value:
                arg = word[j + 1 :]
                if not arg:
                    i += 1
                    if i >= len(words):
                        return f"ends with -{flag} and no value"
                    arg = words[i]
                if flag in refused:
                    return f"sets -{flag}: {refused[flag]}"
                if flag == "o":
                    keyword = _ssh_keyword(arg)
                    if keyword.lower() in COMMAND_OPTIONS:
                        return f"sets {keyword}, which runs a program on this machine"
                break
            if flag not in flags:
                return f"holds -{flag}, which is not an option of {program}"
            j += 1
        i += 1
    return None


def _ssh_keyword(option: str) -> str:
    """The keyword of an ``-o`` option as ssh reads it: before the first blank or '=', or
    between double quotes (ssh_config(5) lets a keyword be quoted)."""
    text = option.strip()
    if text.startswith('"'):
        return text[1:].split('"', 1)[0]
    return re.split(r"[\s=]", text, maxsplit=1)[0].replace('"', "")


def ssh_arguments(value: object, what: str) -> tuple[str, ...]:
    """``value`` split into ssh arguments as Ansible splits it (shlex), or InputError naming ``what``."""
    if value is None or value == "":
        return ()
    if not isinstance(value, str):
        raise InputError(f"{what} is a {type(value).__name__}, not a string of ssh options", hint=SSH_HINT)
    problem = ssh_option_problem(value)
    if problem:
        raise InputError(f"{what} {problem}", hint=SSH_HINT)
    return tuple(word.strip() for word in shlex.split(value) if word.strip())


# Ansible's variable names for each connection setting (the first one set wins), its environment
# variable and its ansible.cfg entry, as Ansible's ssh connection reads them
_SETTINGS = {
    "host": (("ansible_host", "ansible_ssh_host"), None, None),
    "port": (("ansible_port", "ansible_ssh_port"), "ANSIBLE_REMOTE_PORT", ("defaults", "remote_port")),
    "user": (("ansible_user", "ansible_ssh_user"), "ANSIBLE_REMOTE_USER", ("defaults", "remote_user")),
    "password": (("ansible_password", "ansible_ssh_pass", "ansible_ssh_password"), None, None),
    "key": (("ansible_ssh_private_key_file", "ansible_private_key_file"), "ANSIBLE_PRIVATE_KEY_FILE", None),
    "ssh_args": (("ansible_ssh_args",), "ANSIBLE_SSH_ARGS", ("ssh_connection", "ssh_args")),
    "common": (("ansible_ssh_common_args",), "ANSIBLE_SSH_COMMON_ARGS", ("ssh_connection", "ssh_common_args")),
    "extra": (("ansible_ssh_extra_args",), "ANSIBLE_SSH_EXTRA_ARGS", ("ssh_connection", "ssh_extra_args")),
    "become": (("ansible_become",), "ANSIBLE_BECOME", ("privilege_escalation", "become")),
    "become_user": (("ansible_become_user",), "ANSIBLE_BECOME_USER", ("privilege_escalation", "become_user")),
    "connection": (("ansible_connection",), None, None),
}
_KINDS = {
    "ssh": "ssh",
    "smart": "ssh",
    "ansible.builtin.ssh": "ssh",
    "local": "local",
    "ansible.builtin.local": "local",
    "docker": "docker",
    "community.docker.docker": "docker",
    "podman": "podman",
    "containers.podman.podman": "podman",
}


def ansible_config():
    """The ansible.cfg Ansible would read (ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg,
    /etc/ansible/ansible.cfg), values uninterpolated; its path (None: none found)."""
    import configparser

    config = configparser.ConfigParser(interpolation=None)
    path = os.environ.get("ANSIBLE_CONFIG") or next(
        (
            p
            for p in ("ansible.cfg", os.path.expanduser("~/.ansible.cfg"), "/etc/ansible/ansible.cfg")
            if os.path.exists(p)
        ),
        None,
    )
    if path:
        try:
            config.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: cannot be read ({type(exc).__name__})", hint="fix or remove it") from None
    return config, path


def _user(value: Any, where: str, hint: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not _USER.fullmatch(value)):
        raise InputError(f"{where} is not a user name (letters, digits, '.', '_', '-', '@'; no leading '-')", hint=hint)
    return value


def _port(value: Any, where: str) -> int | None:
    if value is None:
        return None
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not re.fullmatch(r"[0-9]{1,5}", text) or not 0 < int(text) < 65536:
        raise InputError(f"{where} is not a port number (1-65535)", hint="ansible_port: 22")
    return int(text)


def _path(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InputError(f"{where} is not a file path", hint="ansible_ssh_private_key_file: ~/.ssh/id_ed25519")
    return os.path.expanduser(value)


def _control_path(config) -> str | None:
    """ansible.cfg's control_path with its %(directory)s, where that directory exists (as testinfra reads it)."""
    if not config.has_option("ssh_connection", "control_path"):
        return None
    directory = os.path.normpath(
        os.path.expanduser(config.get("persistent_connection", "control_path_dir", fallback="~/.ansible/cp"))
    )
    if not os.path.isdir(directory):
        return None
    return config.get("ssh_connection", "control_path").replace("%(directory)s", directory).replace("%%", "%")


def inventory_connection(
    name: str,
    hostvars: dict[str, Any],
    *,
    inventory: str | None = None,
    config=None,
    environ: dict[str, str] | None = None,
) -> Connection:
    """How to reach inventory host ``name``, from its variables as ansible-inventory printed
    them (then the environment and ansible.cfg, as Ansible's ssh connection reads them), checked:
    the host's name and address are host names or IP addresses, the user a user name, the port a
    port, the ssh arguments ssh options that run nothing here. Anything else is an InputError
    naming the host and the variable."""
    label = check_host_name(name, f"inventory host name {_shown(name)}")
    env = os.environ if environ is None else environ
    config_path = "ansible.cfg"
    if config is None:
        config, config_path = ansible_config()

    def setting(key: str) -> tuple[Any, str]:
        names, var, ini = _SETTINGS[key]
        for n in names:
            if hostvars.get(n) is not None:
                return hostvars[n], f"host {label!r}: {n}"
        if var and var in env:
            return env[var], f"host {label!r}: {var} (environment)"
        if ini and config.has_option(*ini):
            return config.get(*ini), f"host {label!r}: {config_path} [{ini[0]}] {ini[1]}"
        return None, f"host {label!r}: {names[0] if names else key}"

    raw_kind, where = setting("connection")
    if raw_kind is not None and (not isinstance(raw_kind, str) or not re.fullmatch(r"[A-Za-z0-9_.]+", raw_kind)):
        raise InputError(f"{where} is not a connection plugin name", hint="ansible_connection: ssh")
    kind = _KINDS.get(raw_kind or "ssh", "ansible")
    address, where = setting("host")
    address = label if address is None else check_host_name(address, where)
    become, where = setting("become")
    become = become is not None and ansible_boolean(become, where)
    become_user = _user(*setting("become_user"), "ansible_become_user: root")
    if kind == "ansible":  # a connection testinfra has no backend for: Ansible runs the commands
        return Connection("ansible", label, inventory=inventory, become=become)
    user = _user(*setting("user"), "ansible_user: root")
    if kind == "local":
        return Connection("local", become=become, become_user=become_user)
    if kind != "ssh":
        return Connection(kind, address, user=user, become=become, become_user=become_user)
    password, where = setting("password")
    if password is not None and (not isinstance(password, str) or "\x00" in password):
        raise InputError(f"{where} is not a string", hint="quote it")
    ssh_args: list[str] = []
    for part in ("ssh_args", "common", "extra"):
        ssh_args += ssh_arguments(*setting(part))
    return Connection(
        "ssh",
        address,
        user=user,
        port=_port(*setting("port")),
        password=password,
        identity_file=_path(*setting("key")),
        ssh_args=tuple(ssh_args),
        become=become,
        become_user=become_user,
        control_path=_control_path(config),
    )


def inventory_hostvars(inventory: str, name: str) -> dict[str, Any]:
    """Host ``name``'s variables as ``ansible-inventory --list`` prints them (its argument list
    quoted by testinfra), for a worker the CLI handed none."""
    from testinfra.utils.ansible_runner import AnsibleRunner

    hostvars = AnsibleRunner.get_runner(inventory).inventory.get("_meta", {}).get("hostvars", {})
    return dict(hostvars.get(name) or {})


URL_KINDS = ("ssh", "safe-ssh", "docker", "podman", "local")


def url_connection(url: str) -> Connection:
    """The Connection a ``--host`` URL names: [ssh|safe-ssh|docker|podman|local]://[user@]host[:port].
    Its parts are checked as an inventory's are; query options (testinfra reads ssh_config,
    ansible_inventory and more from them), a path or a fragment are refused."""
    import urllib.parse

    hint = "--host ssh://[user@]host[:port] (--sudo and --ssh-identity-file are options of their own)"
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise InputError(f"--host {url!r} holds a space or control character", hint=hint)
    if "://" not in url:
        url = "ssh://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in URL_KINDS:
        raise InputError(f"--host {url!r}: unknown connection {parts.scheme!r}", hint=f"one of {', '.join(URL_KINDS)}")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise InputError(f"--host {url!r}: testinfra URL options are not accepted", hint=hint)
    if parts.path not in ("", "/"):
        raise InputError(f"--host {url!r}: a host URL has no path", hint=hint)
    if parts.scheme == "local":
        if parts.netloc:
            raise InputError(f"--host {url!r}: local:// names no host", hint="--local, or --host local://")
        return Connection("local")
    try:
        port = parts.port
    except ValueError:
        raise InputError(f"--host {url!r}: the port is not a number from 1 to 65535", hint=hint) from None
    if not parts.hostname:
        raise InputError(f"--host {url!r} names no host", hint=hint)
    host = check_host_name(parts.hostname, f"--host {url!r}: the host")
    user, password = parts.username, parts.password
    if user is not None:
        _user(urllib.parse.unquote(user), f"--host {url!r}: the user", hint)
    if port == 0:
        raise InputError(f"--host {url!r}: the port is not a number from 1 to 65535", hint=hint)
    return Connection(
        parts.scheme,
        host,
        user=urllib.parse.unquote(user) if user else None,
        port=port,
        password=urllib.parse.unquote(password) if password else None,
    )


def ansible_boolean(value: object, what: str) -> bool:
    """``value`` read as Ansible reads a boolean (a role argument of type bool, `| bool`):
    ansible.module_utils' convert_bool; what Ansible refuses (2, "maybe", a list) is an
    InputError naming ``what``."""
    from ansible.module_utils.common.validation import check_type_bool

    try:
        return bool(check_type_bool(value))
    except TypeError:
        raise InputError(
            f"{what} is {_shown(value, 40) if isinstance(value, str) else repr(value)[:40]}, "
            "which Ansible does not read as a boolean",
            hint="write true or false (Ansible also reads yes/no, on/off, 1/0)",
        ) from None


# -- testinfra backends built from a Connection -------------------------------------------------------


def run_bounded(
    argv: Sequence[str], *, limit: int, env: dict[str, str] | None = None, drain: int = 16
) -> tuple[int, bytes, bytes, bool]:
    """Run ``argv`` (no shell), stdin from /dev/null; (exit status, stdout, stderr, cut). Each
    stream keeps at most ``limit`` bytes (``cut`` says one had more); what comes past that is read
    and dropped, so that the command ends and its exit status is its own, until ``drain`` times
    ``limit`` bytes were dropped: a command that prints on past that is killed."""
    import selectors
    import subprocess

    proc = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    buffers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    cut, dropped = False, 0
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        while selector.get_map() and dropped <= drain * limit:
            for key, _ in selector.select():
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer = buffers[key.fd]
                room = max(0, limit - len(buffer))
                buffer += chunk[:room]
                if len(chunk) > room:
                    cut, dropped = True, dropped + len(chunk) - room
    if dropped > drain * limit:
        proc.kill()
    proc.stdout.close()
    proc.stderr.close()
    rc = proc.wait()
    out, err = buffers.values()
    return rc, bytes(out), bytes(err), cut


_CLASSES: dict[str, type] = {}


def _backend_classes() -> dict[str, type]:
    """testinfra's backends, each made to take a Connection's checked parts as they are and to
    start its local commands as argument vectors, reading at most `output_limit` bytes of a
    command's output (made on first use: the CLI imports this module without testinfra)."""
    if _CLASSES:
        return _CLASSES
    from testinfra.backend.base import HostSpec
    from testinfra.backend.docker import DockerBackend
    from testinfra.backend.local import LocalBackend
    from testinfra.backend.podman import PodmanBackend
    from testinfra.backend.ssh import SafeSshBackend, SshBackend

    class Bounded:
        output_limit = OUTPUT_LIMIT  # bytes per stream (HostFacts raises it for a batch: `output_limit`)

        def run_argv(self, argv: list[str], *, env=None, shown: str | None = None):
            rc, out, err, cut = run_bounded(argv, limit=self.output_limit, env=env)
            result = self.result(rc, self.encode(shown if shown is not None else shlex.join(argv)), out, err)
            result.cut = cut  # the command printed more than output_limit: it was stopped there
            return result

        def run_local(self, command: str, *args: str):
            """What testinfra's own code runs here: sh -c with its arguments quoted, bounded."""
            return self.run_argv(["/bin/sh", "-c", self.quote(command, *args)])

    class Ssh(Bounded, SshBackend):
        def __init__(self, connection: Connection, *, ssh_config=None, ssh_identity_file=None, **kwargs):
            self.connection = connection
            spec = HostSpec(
                connection.host, str(connection.port) if connection.port else None, connection.user, connection.password
            )
            super().__init__(
                spec,
                ssh_config=ssh_config,
                ssh_identity_file=connection.identity_file or ssh_identity_file,
                controlpath=connection.control_path,
                ssh_extra_args=shlex.join(connection.ssh_args) or None,
                **kwargs,
            )

        @staticmethod
        def parse_hostspec(hostspec):  # type: ignore[override]
            return hostspec  # a HostSpec made from a Connection: nothing to parse

        def ssh_command(self, command: str) -> tuple[list[str], dict[str, str] | None]:
            """The ssh client's argv for ``command`` (and sshpass's environment with a password)."""
            own = " ".join(self.connection.ssh_args).lower()
            argv = ["ssh", *self.connection.ssh_args]
            if self.ssh_config:
                argv += ["-F", self.ssh_config]
            if self.host.user:
                argv += ["-o", f"User={self.host.user}"]
            if self.host.port:
                argv += ["-o", f"Port={self.host.port}"]
            if self.ssh_identity_file:
                argv += ["-i", self.ssh_identity_file]
            if "connecttimeout" not in own:
                argv += ["-o", f"ConnectTimeout={self.timeout}"]
            master = "controlmaster" in own
            if self.controlpersist and not master:
                argv += ["-o", "ControlMaster=auto", "-o", f"ControlPersist={self.controlpersist}s"]
                master = True
            if master and self.controlpath and "controlpath" not in own:
                argv += ["-o", f"ControlPath={self.controlpath}"]
            argv += ["--", self.host.name, command]
            if self.host.password:
                return ["sshpass", "-e", *argv], {**os.environ, "SSHPASS": self.host.password}
            return argv, None

        def _build_ssh_command(self, command: str):  # testinfra's form, never a shell line of inventory values
            argv, _ = self.ssh_command(command)
            return ["%s"] * len(argv), argv

        def run_ssh(self, command: str):
            argv, env = self.ssh_command(command)
            out = self.run_argv(argv, env=env, shown=command)
            if out.rc == 255:
                raise RuntimeError(out)  # ssh's own failure, as testinfra reports it
            return out

    class SafeSsh(Ssh, SafeSshBackend):
        NAME = "safe-ssh"

    class Local(Bounded, LocalBackend):
        pass

    class Container(Bounded):
        def __init__(self, connection: Connection, **kwargs):
            super().__init__(connection.host, **kwargs)
            self.name, self.user = connection.host, connection.user

        def run(self, command: str, *args: str, **kwargs: Any):
            cmd = self.get_command(command, *args)
            user = ["-u", self.user] if self.user else []
            return self.run_argv([self.NAME, "exec", *user, self.name, "/bin/sh", "-c", cmd], shown=cmd)

    class Docker(Container, DockerBackend):
        pass

    class Podman(Container, PodmanBackend):
        pass

    _CLASSES.update({"ssh": Ssh, "safe-ssh": SafeSsh, "local": Local, "docker": Docker, "podman": Podman})
    return _CLASSES


def build_host(
    connection: Connection,
    *,
    sudo: bool = False,
    ssh_identity_file: str | None = None,
    ssh_config: str | None = None,
    output_limit: int = OUTPUT_LIMIT,
):
    """The testinfra Host for ``connection``, its backend made with explicit arguments (no URL).
    ``sudo``: run every command through sudo (as --sudo; the inventory's become does too);
    ``output_limit``: bytes of each stream of a command read (the rest dropped, the result's
    ``cut`` set; Ansible-run connections are not bounded)."""
    import testinfra.host

    classes = _backend_classes()
    sudo = bool(sudo or connection.become)
    if connection.kind == "ansible":  # Ansible runs each command, reading the host from the inventory
        from testinfra.backend.ansible import AnsibleBackend

        backend = AnsibleBackend(
            connection.host, ansible_inventory=connection.inventory, force_ansible=True, sudo=bool(sudo)
        )
    elif connection.kind == "local":
        backend = classes["local"](sudo=sudo, sudo_user=connection.become_user)
    elif connection.kind in ("docker", "podman"):
        backend = classes[connection.kind](connection, sudo=sudo, sudo_user=connection.become_user)
    elif connection.kind in ("ssh", "safe-ssh"):
        backend = classes[connection.kind](
            connection,
            ssh_config=ssh_config,
            ssh_identity_file=ssh_identity_file,
            sudo=sudo,
            sudo_user=connection.become_user,
        )
    else:
        raise ValueError(f"unknown connection kind {connection.kind!r}")
    if hasattr(backend, "output_limit"):
        backend.output_limit = output_limit
    host = testinfra.host.Host(backend)
    backend.set_host(host)
    return host


@contextlib.contextmanager
def output_limit(host, limit: int):
    """Read up to ``limit`` bytes of each stream of the commands sent to ``host`` meanwhile
    (a batch of N commands gets N commands' worth); hosts not built by build_host are left as they are."""
    backend = getattr(host, "backend", None)
    if not hasattr(backend, "output_limit"):
        yield
        return
    before = backend.output_limit
    backend.output_limit = limit
    try:
        yield
    finally:
        backend.output_limit = before


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
    """The ssh backend `host` sends its commands through (one build_host made for ssh:// or
    safe-ssh://); None for other connections."""
    backend = getattr(host, "backend", None)
    return backend if getattr(backend, "NAME", None) in ("ssh", "safe-ssh") and hasattr(backend, "connection") else None


def share_connection(host, control_path: str | None) -> bool:
    """Make the host's commands share one SSH connection through control_path (the ssh backend
    adds ControlMaster=auto and ControlPersist, which need a ControlPath to take effect).
    False where it cannot: not ssh, ControlPersist off, or the inventory sets its own."""
    backend = ssh_backend(host) if control_path else None
    if backend is None or not getattr(backend, "controlpersist", 0):
        return False
    own = " ".join(backend.connection.ssh_args).lower()
    if backend.controlpath or "controlpath" in own or "controlmaster" in own:
        return False
    backend.controlpath = control_path
    return True


def ssh_argv(host, command: str) -> list[str] | None:
    """The ssh client's argv that runs ``command`` on ``host`` as its backend does (the
    inventory's user, port, key and ssh options; sudo where asked), for `run_jobs` to run
    without a Python worker in between; None for other connections and for a host reached
    with a password (sshpass reads it from the environment of its own process)."""
    backend = ssh_backend(host)
    if backend is None or backend.NAME != "ssh":
        return None
    argv, env = backend.ssh_command(backend.get_command(command))
    return argv if env is None else None


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
    limit: int | None = None,
) -> list[Outcome]:
    """Run the jobs, at most ``forks`` at once, each for at most ``timeout`` seconds; the outcomes
    come back in the jobs' order. An interrupt (Ctrl-C) ends every running job's group.

    ``limit``: keep at most that many bytes of each job's stdout and of its stderr (the rest is
    read and dropped; Outcome.cut says so), so that a job relaying what a host prints (an ssh
    client running a collector) holds bounded memory whatever the host sends.

    With ``preload``, and more than one job, each with an ``entry``, the ``preload`` modules are
    imported here once and each job runs as a child forked from this process (_fork_jobs): a
    Python worker then costs a fork, not an interpreter start and its imports (pytest and
    testinfra: a third of a second of CPU per host). Each child leads a session of its own as a
    started worker does, so the deadline and Ctrl-C end its group the same way."""
    import signal
    import subprocess
    import threading

    if preload and len(jobs) > 1 and all(job.entry for job in jobs) and hasattr(os, "fork"):
        return _fork_jobs(jobs, forks=forks, timeout=timeout, env=env, on_done=on_done, preload=preload, limit=limit)
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
        cut = False
        try:
            if limit is not None:
                rc, out, err, cut = _communicate_bounded(proc, job.stdin, timeout, limit)
            else:
                try:
                    out, err = proc.communicate(job.stdin, timeout=timeout)
                    rc = proc.returncode
                except subprocess.TimeoutExpired:
                    out, err = stop_group(proc)
                    rc = None
        finally:
            with lock:
                live.pop(proc.pid, None)
        result = _outcome(job, rc, (out, err), t0, started, cut=cut)
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


def _outcome(
    job: Job, rc: int | None, output: tuple[bytes, bytes], t0: float, started: float, *, cut: bool = False
) -> Outcome:
    out, err = (data.decode("utf-8", "replace") for data in output)
    return Outcome(job.name, rc, out, err, round(time.monotonic() - t0, 3), started, cut)


def _communicate_bounded(proc, stdin: bytes, timeout: float, limit: int) -> tuple[int | None, bytes, bytes, bool]:
    """proc.communicate with at most ``limit`` bytes kept of each stream (one thread per stream
    reads on and drops the rest); at the deadline the group is ended as stop_group ends it.
    (exit status or None at the deadline, stdout, stderr, cut)."""
    import contextlib
    import signal
    import subprocess
    import threading

    kept: dict[str, tuple[bytes, bool]] = {}

    def drain(name: str, stream) -> None:
        buffer, cut = bytearray(), False
        with contextlib.suppress(OSError, ValueError):
            for chunk in iter(lambda: stream.read1(65536), b""):
                room = max(0, limit - len(buffer))
                buffer += chunk[:room]
                cut = cut or len(chunk) > room
        kept[name] = (bytes(buffer), cut)

    readers = [
        threading.Thread(target=drain, args=(n, s), daemon=True)
        for n, s in (("out", proc.stdout), ("err", proc.stderr))
    ]
    for reader in readers:
        reader.start()
    with contextlib.suppress(OSError):
        if stdin:
            proc.stdin.write(stdin)
        proc.stdin.close()
    rc: int | None
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = None
        _kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=KILL_GRACE)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
    for reader in readers:
        reader.join(timeout=KILL_GRACE)
    for stream in (proc.stdout, proc.stderr):  # a grandchild that left the group still holds it
        with contextlib.suppress(OSError):
            stream.close()
    out, out_cut = kept.get("out", (b"", False))
    err, err_cut = kept.get("err", (b"", False))
    return rc, out, err, out_cut or err_cut


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
    limit: int | None = None,
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
                    output = tuple(_read_file(path, limit) for path in child.paths)
                    cut = limit is not None and any(len(data) > limit for data in output)
                    output = tuple(data[:limit] if limit is not None else data for data in output)
                    outcome = _outcome(jobs[child.index], rc, output, child.t0, child.started, cut=cut)  # type: ignore[arg-type]
                    results[child.index] = outcome
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


def _read_file(path: str, limit: int | None) -> bytes:
    """A forked child's output file, at most ``limit`` + 1 bytes of it (one more says it was cut)."""
    with open(path, "rb") as handle:
        return handle.read() if limit is None else handle.read(limit + 1)


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
