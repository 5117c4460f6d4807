"""provision.hostpool: a bounded pool of per-host workers, each under a deadline that ends its
whole process group, also children that ignore SIGTERM; the budget that shares a host's
deadline among its commands; the remote command wrapper, run here for real."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision.hostpool import (
    KILL_AFTER,
    KILL_GRACE,
    Budget,
    Connection,
    Job,
    SharedSsh,
    build_host,
    inventory_connection,
    remote_command,
    run_jobs,
    share_connection,
    ssh_argv,
    timed_out_rc,
    url_connection,
)


def sleeper(seconds: float) -> list[str]:
    return [sys.executable, "-c", f"import time; time.sleep({seconds}); print('done')"]


def overlapping(outcomes) -> int:
    """The most workers that ran at the same moment (from their start times and durations),
    looked at 0.1 s after each start (a thread starts its next job as the last one ends)."""
    spans = [(o.started, o.started + o.seconds) for o in outcomes]
    return max(sum(1 for s, e in spans if s <= start + 0.1 < e) for start, _ in spans)


def test_jobs_run_side_by_side_up_to_forks():
    t0 = time.monotonic()
    outcomes = run_jobs([Job(f"h{i}", sleeper(1.0)) for i in range(3)], forks=3, timeout=30)
    wall = time.monotonic() - t0
    assert [o.name for o in outcomes] == ["h0", "h1", "h2"], "outcomes keep the jobs' order"
    assert all(o.rc == 0 and o.stdout.strip() == "done" for o in outcomes)
    assert overlapping(outcomes) == 3
    assert wall < 2.5, f"3 one-second jobs with forks=3 took {wall:.1f} s"


def test_forks_bounds_how_many_run_at_once():
    outcomes = run_jobs([Job(f"h{i}", sleeper(0.6)) for i in range(4)], forks=2, timeout=30)
    assert overlapping(outcomes) == 2
    assert all(o.rc == 0 for o in outcomes)


def test_a_job_past_its_deadline_is_ended_with_its_group(tmp_path):
    """The worker and its grandchild both ignore SIGTERM: SIGKILL to the group ends them; what the
    worker printed before its deadline comes back."""
    pidfile = tmp_path / "grandchild.pid"
    script = f"trap '' TERM; (trap '' TERM; exec sleep 300) & echo $! > {pidfile}; echo 'check 1 done'; wait"
    t0 = time.monotonic()
    (outcome,) = run_jobs([Job("hung", ["sh", "-c", script])], forks=1, timeout=1)
    wall = time.monotonic() - t0
    assert outcome.timed_out
    assert outcome.rc is None
    assert "check 1 done" in outcome.stdout
    assert wall < 1 + 2 * KILL_GRACE + 2
    assert ends(pidfile), "the grandchild outlived its worker's deadline"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def ends(pidfile: Path, within: float = 5) -> bool:
    """Whether the process whose pid ``pidfile`` holds (once written) is gone within ``within`` s."""
    deadline = time.monotonic() + within
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    return not alive(pid)


def test_no_jobs_is_no_outcomes():
    assert run_jobs([], timeout=1) == []


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_budget_gives_each_command_a_share_never_past_the_deadline():
    clock = Clock()
    budget = Budget(120, clock=clock)
    # a third of the host's timeout: one hung command leaves time for the others
    assert budget.command_timeout() == 40
    clock.now += 60
    # 120 - reserve (kill-after, grace, 1) - 60 s spent = 52 left; minus the command's kill-after
    assert budget.remaining() == pytest.approx(120 - (KILL_AFTER + KILL_GRACE + 1) - 60)
    assert budget.command_timeout() == 40
    clock.now += 40
    assert budget.command_timeout() == round(budget.remaining() - KILL_AFTER)
    clock.now += 30
    assert budget.command_timeout() == 0, "past the deadline nothing more runs"
    # the smallest host timeout still gives its first command a few seconds
    assert Budget(15, clock=clock).command_timeout() == 15 - (KILL_AFTER + KILL_GRACE + 1) - KILL_AFTER


def test_a_command_and_its_kill_after_end_before_the_deadline():
    for seconds in (15, 30, 60, 120, 600):
        clock = Clock()
        budget = Budget(seconds, clock=clock)
        used = 0.0
        while (t := budget.command_timeout()) > 0:
            used += t + KILL_AFTER  # every command hangs until SIGKILL
            clock.now += t + KILL_AFTER
            assert used <= seconds - KILL_GRACE, (seconds, used)


def test_remote_command_kills_a_child_that_ignores_sigterm():
    """SIGTERM at the limit, SIGKILL KILL_AFTER later, to the whole group."""
    command = remote_command("trap '' TERM; sleep 300 & wait", 1)
    t0 = time.monotonic()
    proc = subprocess.run(["sh", "-c", command], capture_output=True, timeout=30, check=False)
    wall = time.monotonic() - t0
    assert timed_out_rc(proc.returncode), proc.returncode
    assert 1 + KILL_AFTER - 0.5 < wall < 1 + KILL_AFTER + 3


def test_remote_command_kills_a_grandchild_that_ignores_sigterm(tmp_path):
    """A hung tool started by a script (the shell dies of SIGTERM, the tool ignores it): timeout
    alone would return and leave it running; the group's SIGKILL ends it."""
    pidfile = tmp_path / "tool.pid"
    tool = f"sh -c \"echo \\$\\$ > {pidfile}; trap '' TERM; exec sleep 300\""
    t0 = time.monotonic()
    proc = subprocess.run(["sh", "-c", remote_command(tool, 1)], capture_output=True, timeout=30, check=False)
    wall = time.monotonic() - t0
    assert timed_out_rc(proc.returncode), (proc.returncode, proc.stderr)
    assert wall < 1 + KILL_AFTER + 3
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    assert not alive(pid), "the tool that ignored SIGTERM outlived the command's limit"


def test_remote_command_quotes_the_command_and_passes_its_status():
    command = remote_command("printf '%s\\n' \"it's\" ; exit 3", 10)
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30, check=False)
    assert (proc.returncode, proc.stdout) == (3, "it's\n")
    assert remote_command("true", 10, have_timeout=False) == "true"
    assert not timed_out_rc(3)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_interrupt_ends_running_jobs(tmp_path, monkeypatch):
    """Ctrl-C in the parent (any exception in a waiting thread) ends every running worker's group."""
    pidfile = tmp_path / "w.pid"
    calls = []

    def boom(outcome):
        calls.append(outcome.name)
        raise KeyboardInterrupt

    jobs = [
        Job("quick", ["sh", "-c", "sleep 0.5"]),
        Job("slow", ["sh", "-c", f"echo $$ > {pidfile}; exec sleep 300"]),
    ]
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_jobs(jobs, forks=2, timeout=60, on_done=boom)
    assert time.monotonic() - t0 < 10
    assert ends(pidfile)


# -- jobs forked from this process (Job.entry with preload) ---------------------------------------
# The entries are functions of this module: a forked child finds it in sys.modules.


def entry_sleep(stdin: bytes) -> int:
    """Prints its pid, parent, session and environment marker, sleeps stdin's seconds, exits 0."""
    print(f"{os.getpid()} {os.getppid()} {os.getsid(0)} {os.environ.get('HOSTPOOL_MARK', '-')}", flush=True)
    time.sleep(float(stdin or b"0"))
    print("done", flush=True)
    return 0


def entry_status(stdin: bytes) -> int:
    print("to stdout", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    if stdin == b"raise":
        raise RuntimeError("the worker broke")
    if stdin == b"exit":
        sys.exit(4)
    return int(stdin)


def entry_hang(stdin: bytes) -> int:
    """Ignores SIGTERM, starts a grandchild that ignores it too (its pid in the file stdin names)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 300"])
    Path(stdin.decode()).write_text(str(grandchild.pid))
    print("check 1 done", flush=True)
    time.sleep(300)
    return 0


PRELOAD = ("json",)  # anything importable: what the tests check is that the jobs run forked


def forked_job(name: str, function, stdin: bytes = b"") -> Job:
    return Job(name, ["false"], stdin, entry=f"{__name__}:{function.__name__}")  # argv never runs


def test_entry_jobs_with_preload_run_as_forked_children_side_by_side(monkeypatch):
    monkeypatch.setenv("HOSTPOOL_MARK", "parent")
    jobs = [forked_job(f"h{i}", entry_sleep, b"1") for i in range(3)]
    t0 = time.monotonic()
    outcomes = run_jobs(jobs, forks=3, timeout=30, preload=PRELOAD, env={**os.environ, "HOSTPOOL_MARK": "job"})
    wall = time.monotonic() - t0
    assert [o.name for o in outcomes] == ["h0", "h1", "h2"], "outcomes keep the jobs' order"
    assert all(o.rc == 0 and o.stdout.endswith("done\n") for o in outcomes), outcomes
    for o in outcomes:
        pid, ppid, sid, mark = o.stdout.split()[:4]
        assert int(ppid) == os.getpid(), "forked from this process, not started through argv"
        assert sid == pid, "each child leads a session of its own"
        assert mark == "job", "the job's environment, not the parent's"
    assert overlapping(outcomes) == 3
    assert wall < 2.5, f"3 one-second jobs with forks=3 took {wall:.1f} s"
    assert os.environ["HOSTPOOL_MARK"] == "parent"


def test_forked_jobs_are_bounded_by_forks():
    outcomes = run_jobs(
        [forked_job(f"h{i}", entry_sleep, b"0.6") for i in range(4)], forks=2, timeout=30, preload=PRELOAD
    )
    assert overlapping(outcomes) == 2
    assert all(o.rc == 0 for o in outcomes)


def test_a_forked_job_returns_its_status_and_both_streams():
    jobs = [
        forked_job("three", entry_status, b"3"),
        forked_job("raises", entry_status, b"raise"),
        forked_job("exits", entry_status, b"exit"),
    ]
    three, raises, exits = run_jobs(jobs, forks=3, timeout=30, preload=PRELOAD)
    assert (three.rc, three.stdout, three.stderr) == (3, "to stdout\n", "to stderr\n")
    assert raises.rc == 1
    assert "RuntimeError: the worker broke" in raises.stderr, "a traceback goes to the job's stderr"
    assert exits.rc == 4


def test_a_single_entry_job_starts_its_argv():
    """One host: no import here pays off, so the job starts argv as without preload."""
    (outcome,) = run_jobs([Job("one", sleeper(0), entry=f"{__name__}:entry_sleep")], timeout=30, preload=PRELOAD)
    assert (outcome.rc, outcome.stdout.strip()) == (0, "done")


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_a_forked_job_past_its_deadline_is_ended_with_its_group(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    jobs = [forked_job("hung", entry_hang, str(pidfile).encode()), forked_job("quick", entry_status, b"0")]
    t0 = time.monotonic()
    hung, quick = run_jobs(jobs, forks=2, timeout=1, preload=PRELOAD)
    wall = time.monotonic() - t0
    assert hung.timed_out
    assert "check 1 done" in hung.stdout, "what it printed before its deadline comes back"
    assert (quick.rc, quick.timed_out) == (0, False)
    assert wall < 1 + 2 * KILL_GRACE + 2
    assert ends(pidfile), "the grandchild outlived its worker's deadline"


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_interrupt_ends_running_forked_jobs(tmp_path):
    pidfile = tmp_path / "grandchild.pid"

    def boom(outcome):
        raise KeyboardInterrupt

    jobs = [forked_job("quick", entry_status, b"0"), forked_job("hung", entry_hang, str(pidfile).encode())]
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_jobs(jobs, forks=2, timeout=60, on_done=boom, preload=PRELOAD)
    assert time.monotonic() - t0 < 10
    # the hung worker was killed and reaped before run_jobs raised: a pidfile not written by now
    # never will be (the interrupt came before it started its grandchild, on a busy machine)
    assert not pidfile.exists() or ends(pidfile)


# -- one SSH connection per host, no worker or ansible-inventory run where none is needed ----------


FAKE_SSH = """#!/bin/sh
# stands in for OpenSSH's client: logs its arguments, then runs the remote command here
echo "$*" | tr '\n' ' ' >> {log}; echo >> {log}
echo "$PPID $(ps -o ppid= -p $PPID)" >> {log}.parents
case "$*" in *"Port=1 "*) echo "ssh: connect to host 127.0.0.1 port 1: Connection refused" >&2; exit 255;; esac
for last; do :; done
exec sh -c "$last"
"""


def fake_ssh(tmp_path, monkeypatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "ssh.log"
    ssh = bin_dir / "ssh"
    ssh.write_text(FAKE_SSH.format(log=log))
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log


def test_an_ssh_host_shares_one_connection_through_a_private_socket():
    shared = SharedSsh()
    try:
        assert os.stat(shared.dir).st_mode & 0o777 == 0o700
        path = shared.path(0)
        assert path is not None
        assert os.path.dirname(path) == shared.dir
        host = build_host(url_connection("ssh://root@127.0.0.1:2201"))
        assert share_connection(host, path)
        argv = ssh_argv(host, "true")
        assert f"ControlPath={path}" in argv
        assert "ControlMaster=auto" in argv
        # a host's own multiplexing settings stand; other connections have no ssh command
        own = build_host(Connection("ssh", "127.0.0.1", port=2202, ssh_args=("-o", "ControlPath=/run/own/%C")))
        assert not share_connection(own, shared.path(1))
        assert shared.path(1) not in " ".join(ssh_argv(own, "true"))
        local = build_host(Connection("local"))
        assert not share_connection(local, shared.path(2))
        assert ssh_argv(local, "true") is None
        assert not share_connection(host, None)
        Path(path).write_text("")  # a socket left behind by a worker stopped at its deadline
    finally:
        shared.close()
    assert not os.path.exists(shared.dir)


def test_an_inventory_host_is_reached_with_its_variables_without_running_ansible_inventory(tmp_path, monkeypatch):
    """The CLI has read the inventory: the host's variables it hands on are what the ssh client
    is given, one argument each, and nothing is run to read them again (no ansible-inventory on
    PATH, no inventory file)."""
    import configparser

    monkeypatch.setenv("PATH", str(tmp_path))
    hostvars = {
        "ansible_host": "127.9.8.7",
        "ansible_port": 2222,
        "ansible_user": "ops",
        "ansible_ssh_private_key_file": "/keys/ops",
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no",
    }
    connection = inventory_connection("gpu-z", hostvars, config=configparser.ConfigParser(), environ={})
    host = build_host(connection, sudo=True)
    argv = ssh_argv(host, "nvidia-smi -L")
    assert argv[:3] == ["ssh", "-o", "StrictHostKeyChecking=no"]
    for pair in (["-o", "User=ops"], ["-o", "Port=2222"], ["-i", "/keys/ops"], ["--", "127.9.8.7"]):
        assert any(argv[i : i + 2] == pair for i in range(len(argv))), (pair, argv)
    assert argv[-1] == "sudo /bin/sh -c 'nvidia-smi -L'"  # --sudo wraps the command as testinfra does


def test_a_command_through_ssh_argv_runs_as_one_job(tmp_path, monkeypatch):
    log = fake_ssh(tmp_path, monkeypatch)
    host = build_host(url_connection("ssh://root@127.0.0.1:2203"))
    (outcome,) = run_jobs([Job("h", ssh_argv(host, 'echo "it\'s here"; exit 3'))], forks=1, timeout=30)
    assert (outcome.rc, outcome.stdout) == (3, "it's here\n")
    assert "-o Port=2203" in log.read_text()


def test_doctor_reads_ssh_hosts_with_one_ssh_client_each(tmp_path, monkeypatch):
    """collect_remote: a host Ansible reaches over ssh is one ssh job (no Python worker); its
    collector output comes back whole; a refused connection is the host's one problem."""
    from provision.doctor.collect import collect_remote

    log = fake_ssh(tmp_path, monkeypatch)
    hostvars = {
        "gpu-ok": {"ansible_host": "127.0.0.1", "ansible_port": 2204, "ansible_user": "root"},
        "gpu-down": {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_user": "root"},
    }
    got = collect_remote(
        ["gpu-down", "gpu-ok"], str(tmp_path / "never-read.yml"), hostvars=hostvars, host_timeout=60, forks=2
    )
    assert [c.host for c in got] == ["gpu-down", "gpu-ok"]
    down, ok = got
    assert (down.text, down.problem) == (None, "ssh: connect to host 127.0.0.1 port 1: Connection refused")
    assert ok.problem is None
    assert "===== provision-doctor: kernel-log-source =====" in ok.text
    assert "===== provision-doctor: nvidia-smi-rc =====" in ok.text
    assert len(log.read_text().splitlines()) == 2  # one ssh client per host
    # started by this process (through sh at most), not by a Python worker in between
    parents = Path(f"{log}.parents").read_text().split("\n")
    assert all(str(os.getpid()) in line.split() for line in parents if line.strip()), parents


# -- what a job prints is bounded when asked ---------------------------------------------------------
FLOOD = [sys.executable, "-c", "import sys; sys.stdout.write('x' * (5 << 20)); sys.stderr.write('e' * 10)"]


def test_a_job_keeps_at_most_limit_bytes_of_each_stream():
    (outcome,) = run_jobs([Job("h", FLOOD)], timeout=60, limit=1 << 20)
    assert (outcome.rc, len(outcome.stdout), outcome.stderr, outcome.cut) == (0, 1 << 20, "e" * 10, True)
    (whole,) = run_jobs([Job("h", FLOOD)], timeout=60)
    assert (len(whole.stdout), whole.cut) == (5 << 20, False)


def entry_flood(stdin: bytes) -> int:
    sys.stdout.write("x" * int(stdin))
    return 0


def test_forked_jobs_keep_at_most_limit_bytes():
    jobs = [forked_job("big", entry_flood, str(3 << 20).encode()), forked_job("small", entry_flood, b"10")]
    big, small = run_jobs(jobs, forks=2, timeout=60, preload=PRELOAD, limit=1 << 20)
    assert (len(big.stdout), big.cut) == (1 << 20, True)
    assert (small.stdout, small.cut) == ("x" * 10, False)


def test_a_job_that_prints_without_end_stops_at_its_deadline_with_bounded_output():
    t0 = time.monotonic()
    (outcome,) = run_jobs([Job("h", ["sh", "-c", "trap '' TERM; yes"])], timeout=2, limit=1 << 16)
    assert outcome.timed_out
    assert outcome.cut
    assert len(outcome.stdout) == 1 << 16
    assert time.monotonic() - t0 < 2 + 2 * KILL_GRACE + 3


def test_a_built_host_reads_at_most_its_output_limit():
    host = build_host(Connection("local"), output_limit=1000)
    res = host.run("head -c 5000 /dev/zero | tr '\\0' x; echo done >&2")
    assert (res.rc, len(res.stdout), res.stderr, res.cut) == (0, 1000, "done\n", True)
    assert build_host(Connection("local")).run("head -c 5000 /dev/zero | tr '\\0' x").cut is False
