"""Drain and undrain commands are argument vectors with a deadline (issue 22): the configured command
is split first and the host's name substituted per argument; a host name that is not a host name or
an address (above all one starting with '-') is refused, by the check play and by the module; at
provision_drain_timeout the command is ended with its whole process group."""

import importlib.util
import json
import os
import signal
import sys
import time

import pytest
from paths import MODULES
from playrun import SAFETY_VARS, local_hosts, run_play, site_task

spec = importlib.util.spec_from_file_location("drain_command", MODULES / "drain_command.py")
drain = importlib.util.module_from_spec(spec)
spec.loader.exec_module(drain)

HOSTILE = [
    "--selector=nvidia.com/gpu.present=true",  # the payload: kubectl drain would drain every GPU node
    "gpu2 --all",  # spaces added arguments
    "-n",
    "gpu3;touch /tmp/pwned",
    "$(touch /tmp/pwned)",
    "gpu4\n--all",
    "gpu-",
    "",
]
FINE = ["gpu-a", "gpu_01.dc1.example.com", "127.0.4.17", "::1", "fe80::2", "n1"]
CHECK = "Check the run's guards (booleans, deadlines and limits, batch size, host name)."
DRAIN = "Drain the host before changing it."
UNDRAIN = "Return the host to service."


def running(pid: int) -> bool:
    """Whether pid is a live process (a zombie waiting to be reaped is not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def end_group_of(pid: int) -> None:
    """Clean up after a failed test: the process group pid belongs to (never this test's own group)."""
    if not running(pid):
        return
    group = os.getpgid(pid)
    if group == os.getpgrp():
        os.kill(pid, signal.SIGKILL)
    else:
        os.killpg(group, signal.SIGKILL)


# ---------------------------------------------------------------------------------- the argument vector


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        (
            "scontrol update nodename={{ inventory_hostname }} state=drain reason=provision",
            ["scontrol", "update", "nodename=gpu-a", "state=drain", "reason=provision"],
        ),
        (
            "kubectl drain {{ inventory_hostname }} --ignore-daemonsets",
            ["kubectl", "drain", "gpu-a", "--ignore-daemonsets"],
        ),
        ("notify 'host {{ inventory_hostname }} drained' \"a b\"", ["notify", "host gpu-a drained", "a b"]),
        (
            "scontrol update nodename={{inventory_hostname}} state=resume",
            ["scontrol", "update", "nodename=gpu-a", "state=resume"],
        ),
        ("echo $HOME; rm -rf / | tee x", ["echo", "$HOME;", "rm", "-rf", "/", "|", "tee", "x"]),  # no shell: words
    ],
)
def test_the_command_is_split_first_then_the_host_goes_into_each_word(command, argv):
    assert drain.substitute(command, "gpu-a") == argv


def test_a_host_name_with_spaces_stays_one_argument():
    """Substituted after the split, the name adds no argument (before: replaced in the string, then split)."""
    argv = drain.substitute("kubectl drain {{ inventory_hostname }} --ignore-daemonsets", "gpu2 --all")
    assert argv == ["kubectl", "drain", "gpu2 --all", "--ignore-daemonsets"]


@pytest.mark.parametrize("host", HOSTILE)
def test_hostile_host_names_are_refused_by_the_module_and_the_play_pattern(host):
    import re

    import yaml

    assert drain.host_problem(host)
    pattern = yaml.safe_load(SAFETY_VARS.read_text())["provision_host_name_pattern"]
    assert not re.match(pattern, host)
    if host.startswith("-"):
        assert "the command would read it as an option" in drain.host_problem(host)


@pytest.mark.parametrize("host", FINE)
def test_host_names_and_addresses_pass_both(host):
    import re

    import yaml

    assert drain.host_problem(host) is None
    assert re.match(yaml.safe_load(SAFETY_VARS.read_text())["provision_host_name_pattern"], host)


# ---------------------------------------------------------------------------------- the deadline


def stubborn(tmp_path, leader_sleeps: int = 300):
    """A command whose child ignores SIGTERM (the child writes its pid to child.pid)."""
    script = tmp_path / "stubborn"
    pidfile = tmp_path / "child.pid"
    script.write_text(
        "#!/bin/sh\n"
        f"sh -c 'trap \"\" TERM; echo $$ > {pidfile}; exec sleep 300' &\n"
        f"while [ ! -s {pidfile} ]; do sleep 0.05; done\n"
        f"sleep {leader_sleeps}\n"
    )
    script.chmod(0o755)
    return script, pidfile


def test_at_the_deadline_the_whole_process_group_is_ended(tmp_path):
    script, pidfile = stubborn(tmp_path)
    start = time.monotonic()
    result = drain.run([str(script)], timeout=1, grace=1)
    took = time.monotonic() - start
    child = int(pidfile.read_text())
    try:
        assert result["timed_out"] is True
        assert result["rc"] is None
        assert result["ended_with"] == "SIGKILL", "the child ignored SIGTERM"
        assert not running(child)
        assert took < 8, took
    finally:
        end_group_of(child)


def test_what_a_command_leaves_in_its_group_is_ended_when_it_exits(tmp_path):
    script, pidfile = stubborn(tmp_path, leader_sleeps=0)
    result = drain.run([str(script)], timeout=30, grace=1)
    child = int(pidfile.read_text())
    try:
        assert result["timed_out"] is False
        assert result["rc"] == 0
        assert result["ended_with"] == "SIGKILL"
        assert not running(child)
    finally:
        end_group_of(child)


def test_a_command_that_ends_in_time_leaves_nothing_to_end(tmp_path):
    result = drain.run([sys.executable, "-c", "print('drained')"], timeout=30, grace=1)
    assert result == {"rc": 0, "timed_out": False, "ended_with": None, "stdout": "drained\n", "stderr": ""}


# ---------------------------------------------------------------------------------- in the play


def recorder(tmp_path):
    """A drain command that records the argument vector it was given."""
    log = tmp_path / "argv.log"
    script = tmp_path / "record"
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\nopen({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    script.chmod(0o755)
    return script, log


def unsafe_vars(**values) -> str:
    """Extra vars as provision apply writes them: strings tagged !unsafe, so the placeholder stays literal."""
    return "".join(
        f"{k}: !unsafe {json.dumps(v)}\n" if isinstance(v, str) else f"{k}: {json.dumps(v)}\n"
        for k, v in values.items()
    )


def drain_plays(*check_tasks):
    return [
        {"name": "check", "hosts": "all", "gather_facts": False, "vars_files": [str(SAFETY_VARS)],
         "tasks": list(check_tasks)},
        {"name": "roll", "hosts": "all", "gather_facts": False, "pre_tasks": [site_task(DRAIN)],
         "post_tasks": [site_task(UNDRAIN)]},
    ]  # fmt: skip


def test_the_check_play_refuses_hostile_names_before_any_host_is_drained(tmp_path):
    script, log = recorder(tmp_path)
    hosts = {"gpu-a": {}, "--selector=nvidia.com/gpu.present=true": {}, "gpu2 --all": {}}
    run = run_play(
        tmp_path,
        drain_plays(site_task(CHECK)),
        local_hosts(hosts),
        extravars_yaml=unsafe_vars(
            provision_drain_command=f"{script} drain {{{{ inventory_hostname }}}} --ignore-daemonsets",
            provision_undrain_command=f"{script} undrain {{{{ inventory_hostname }}}}",
        ),
    )
    assert run.rc == 2, run.output[-3000:]
    drained = [json.loads(line) for line in log.read_text().splitlines()]
    assert drained == [["drain", "gpu-a", "--ignore-daemonsets"], ["undrain", "gpu-a"]]
    selector = run.of("--selector=nvidia.com/gpu.present=true", CHECK)
    assert selector["status"] == "failed"
    assert "starts with '-', and the drain command would read it as an option" in selector["result"]["msg"]
    spaced = run.of("gpu2 --all", CHECK)
    assert spaced["status"] == "failed"
    assert '"gpu2 --all" is not a host name or an IP address' in spaced["result"]["msg"]
    assert not run.ran("gpu2 --all", DRAIN)


def test_the_drain_task_itself_refuses_a_name_starting_with_a_dash(tmp_path):
    """Defence in depth: without the check play, the drain task still runs nothing for such a host."""
    script, log = recorder(tmp_path)
    plays = [{"hosts": "all", "gather_facts": False, "tasks": [site_task(DRAIN)]}]
    hosts = {"--selector=nvidia.com/gpu.present=true": {}}
    run = run_play(
        tmp_path,
        plays,
        local_hosts(hosts),
        extravars_yaml=unsafe_vars(provision_drain_command=f"{script} drain {{{{ inventory_hostname }}}}"),
    )
    assert run.rc == 2, run.output[-3000:]
    assert not log.exists(), "the drain command never ran"
    msg = run.of("--selector=nvidia.com/gpu.present=true", DRAIN)["result"]["msg"]
    assert "starts with '-': the command would read it as an option" in msg


def test_the_drain_deadline_ends_the_command_and_a_child_that_ignores_sigterm(tmp_path):
    """Before: Ansible's task timeout failed the task and left the command (and its child) running."""
    script, pidfile = stubborn(tmp_path)
    plays = [{"hosts": "all", "gather_facts": False, "tasks": [site_task(DRAIN)]}]
    start = time.monotonic()
    run = run_play(
        tmp_path,
        plays,
        local_hosts({"gpu-a": {}}),
        extravars_yaml=unsafe_vars(provision_drain_command=str(script), provision_drain_timeout=2),
    )
    took = time.monotonic() - start
    child = int(pidfile.read_text())
    try:
        assert not running(child), "the child that ignored SIGTERM is gone with the command"
        assert run.rc == 2, run.output[-3000:]
        result = run.of("gpu-a", DRAIN)["result"]
        assert f"{script} ran past its deadline of 2 s; its process group was ended (SIGKILL)" in result["msg"]
        assert took < 60, took
    finally:
        end_group_of(child)


# ---------------------------------------------------------------------------------- as Ansible runs it


def test_the_module_refuses_before_running_anything(tmp_path):
    import modrun

    script, log = recorder(tmp_path)
    args = {"command": f"{script} drain {{{{ inventory_hostname }}}}", "timeout": 30}
    refused = modrun.run("drain_command", {**args, "host": "--selector=nvidia.com/gpu.present=true"})
    assert refused.failed
    assert refused.out["argv"] == []
    for bad, said in (({"timeout": 0}, "timeout must be at least 1 second, not 0"),
                      ({"command": "kubectl drain '{{ inventory_hostname }}"}, "cannot split the command into words"),
                      ({"command": "   "}, "the command is empty")):  # fmt: skip
        got = modrun.run("drain_command", {**args, "host": "gpu-a", **bad})
        assert got.failed
        assert said in got.out["msg"]
    assert not log.exists()
    missing = modrun.run("drain_command", {**args, "command": str(tmp_path / "absent"), "host": "gpu-a"})
    assert missing.failed
    assert f"cannot run {tmp_path / 'absent'}: No such file or directory" in missing.out["msg"]
    done = modrun.run("drain_command", {**args, "host": "gpu-a"})
    assert not done.failed
    assert done.out["changed"] is True
    assert done.out["argv"] == [str(script), "drain", "gpu-a"]
    assert json.loads(log.read_text()) == ["drain", "gpu-a"]


def test_a_failing_command_fails_the_task_with_its_last_words(tmp_path):
    import modrun

    argv = f"{sys.executable} -c \"import sys; print('node gpu-a not found', file=sys.stderr); sys.exit(3)\""
    got = modrun.run("drain_command", {"command": argv, "host": "gpu-a", "timeout": 30})
    assert got.failed
    assert got.out["rc"] == 3
    assert got.out["msg"].endswith("exited 3: node gpu-a not found")
