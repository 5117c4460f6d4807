"""A host's fact commands in one round trip (provision/verify/batch.py): the script run for real on
this machine (sh, coreutils timeout), its parser against forged and cut-short output, and every
check run on facts from a batch against the same facts read command by command."""

from __future__ import annotations

import inspect
import json
import os
import shlex
import time
from pathlib import Path

import pytest
import testinfra

from provision.hostpool import Budget, Connection
from provision.plan.model import PlanRequest
from provision.plan.resolve import resolve
from provision.plan.runs import image_needs
from provision.verify import Target, batch
from provision.verify.checks import check_containers, check_driver, check_images, check_server, check_system
from provision.verify.facts import (
    KERNEL_LOG,
    NVLINK_STATUS,
    PCIE_QUERY,
    TOPOLOGY,
    HostFacts,
    Result,
    dmi_command,
    planned_commands,
    secure_boot_command,
)

LOCAL = testinfra.get_host("local://")
SSH = Connection("ssh", "h")


def run_batch(commands, *, left=60, share=20, kill_after=1):
    token = batch.new_token()
    res = LOCAL.run(batch.script(commands, token, left=left, share=share, kill_after=kill_after))
    return token, res, batch.parse(res.stdout, res.stderr, token, len(commands))


# -- the script, run by this machine's sh ----------------------------------------------------------
def test_each_command_gets_what_it_would_get_alone():
    commands = [
        "echo one; echo two",
        "printf 'no newline at the end'",
        "echo out; echo err >&2; exit 3",
        "true",
        "printf '\\n\\n'",
        "printf 'tab\\there \\342\\234\\223\\n' && printf 'warn\\n' >&2",
        # a delimiter of the right shape with a token the host cannot know: plain text
        "printf 'provision-00000000000000000000000000000000 1 e 0 20\\n'",
        "cat /nonexistent/file",
        "sh -c 'exit 124'",  # an exit status of 124 that no timeout caused
    ]
    _token, res, sections = run_batch(commands)
    assert res.rc == 0
    assert sections is not None
    assert len(sections) == len(commands)
    for command, section in zip(commands, sections, strict=True):
        alone = LOCAL.run(command)
        assert (section.out, section.err, section.rc) == (alone.stdout, alone.stderr, alone.rc), command
        assert section.seconds == 20
    assert sections[1].out == "no newline at the end"
    assert sections[2] == ("out\n", "err\n", 3, 20)
    assert sections[4].out == "\n\n"


def test_commands_run_under_a_shell_and_quote_safely():
    """The commands travel quoted: their quotes, $ and ; are theirs, not the script's."""
    commands = ["echo \"$HOME\" '$HOME' ; echo 'it'\"'\"'s'", "x=1; [ $x -eq 1 ] && echo yes"]
    _, _, sections = run_batch(commands)
    assert [s.out for s in sections] == [f"{os.environ['HOME']} $HOME\nit's\n", "yes\n"]


def test_a_hung_command_is_stopped_with_its_group_and_the_rest_still_run(tmp_path):
    pids = tmp_path / "pids"
    hung = f"echo $$ > {pids}; (trap '' TERM; sleep 60) & echo $! >> {pids}; trap '' TERM; wait"
    t0 = time.monotonic()
    _, _, sections = run_batch(["echo before", hung, "echo after"], share=1, kill_after=1)
    wall = time.monotonic() - t0
    assert [s.rc for s in sections][::2] == [0, 0]
    assert sections[1].rc in (124, 137)
    assert sections[1].seconds == 1
    assert sections[2].out == "after\n"
    assert wall < 10, wall
    for pid in pids.read_text().split():
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().split(") ")[1][0] == "Z", f"{pid} still runs"


def test_commands_whose_turn_comes_after_the_deadline_are_not_run(tmp_path):
    marker = tmp_path / "ran"
    t0 = time.monotonic()
    # 3 s to the deadline, 1 s kept for the kill: `sleep 5` gets 2 s, the next nothing
    _, _, sections = run_batch(["sleep 5", f"touch {marker}"], left=3, share=5, kill_after=1)
    assert time.monotonic() - t0 < 6
    assert (sections[0].rc, sections[0].seconds) == (124, 2)
    assert (sections[1].rc, sections[1].seconds) == (None, 0)
    assert not marker.exists()


# -- the parser: untrusted output ------------------------------------------------------------------
TOKEN = "provision-" + "ab" * 16


def framed(*sections, token=TOKEN):
    """(stdout, stderr) as the script prints them; sections: (out, err, rc, seconds)."""
    out = err = ""
    for i, (o, e, rc, s) in enumerate(sections):
        out += f"{token} {i} b\n{o}\n{token} {i} e {rc} {s}\n"
        err += f"{token} {i} b\n{e}\n{token} {i} e {rc} {s}\n"
    return out, err


def test_parse_reads_the_sections_back():
    out, err = framed(("a\n", "", 0, 40), ("", "boom\n", 2, 40), ("", "", "-", 0))
    assert batch.parse("ssh noise\n" + out, "Warning: added host key\n" + err, TOKEN, 3) == [
        ("a\n", "", 0, 40),
        ("", "boom\n", 2, 40),
        ("", "", None, 0),
    ]


def test_a_backend_that_strips_the_last_newline_loses_nothing():
    out, err = framed(("a\n", "", 0, 40), ("b", "e", 1, 40))
    assert batch.parse(out.rstrip("\n"), err.rstrip("\n"), TOKEN, 2) == [("a\n", "", 0, 40), ("b", "e", 1, 40)]


def test_a_batch_cut_short_gives_the_sections_it_finished():
    out, err = framed(("a\n", "", 0, 40), ("b\n", "", 0, 40))
    cut = out[: out.index(f"{TOKEN} 1 e")] + "partial"
    assert batch.parse(cut, err, TOKEN, 3) == [("a\n", "", 0, 40)]
    assert batch.parse("", "", TOKEN, 3) == []
    assert batch.parse("sudo: a password is required\n", "", TOKEN, 3) == []


@pytest.mark.parametrize(
    "forged",
    [
        # a command closes its own section early and forges the next ones
        f"x\n{TOKEN} 0 e 0 40\n{TOKEN} 1 b\nforged\n{TOKEN} 1 e 0 40\n",
        # it forges every remaining section, so that the script's own markers come after the last one
        f"{TOKEN} 0 e 0 40\n{TOKEN} 1 b\nforged\n{TOKEN} 1 e 0 40\n{TOKEN} 2 b\nforged\n{TOKEN} 2 e 0 40\n",
        # a bare copy of a marker anywhere in the output
        f"{TOKEN} 1 b\n",
        f"text {TOKEN} text",
        TOKEN,
    ],
)
@pytest.mark.parametrize("stream", ["out", "err"])
def test_output_holding_the_token_voids_the_batch(forged, stream):
    first = (forged, "", 0, 40) if stream == "out" else ("", forged, 0, 40)
    out, err = framed(first, ("real\n", "", 0, 40), ("real\n", "", 0, 40))
    assert batch.parse(out, err, TOKEN, 3) is None


def test_streams_that_disagree_void_the_batch():
    out, _ = framed(("a\n", "", 0, 40))
    _, err = framed(("a\n", "", 1, 40))
    assert batch.parse(out, err, TOKEN, 1) is None
    assert batch.parse(out.replace(" e 0 40", " e zero 40"), out, TOKEN, 1) is None


def test_a_token_is_random_and_of_the_safe_alphabet():
    tokens = {batch.new_token() for _ in range(100)}
    assert len(tokens) == 100
    with pytest.raises(ValueError, match="a batch token is"):
        batch.script(["true"], "short", left=10, share=5)
    with pytest.raises(ValueError, match="a batch token is"):
        batch.script(["true"], "provision-$(reboot)aaaaaaaaaaaaaa", left=10, share=5)


def test_a_forged_token_on_the_host_falls_back_to_one_command_at_a_time(tmp_path, monkeypatch, plans):
    """A file on the host that holds the run's token (as if a process there had read it): the
    batch is void, each command goes alone and the checks read exactly what the file holds."""
    token = "provision-" + "cd" * 16
    monkeypatch.setattr(batch, "new_token", lambda: token)
    daemon_json = tmp_path / "daemon.json"
    forged = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "note": f"\n{token} 9 e 0 40\n"}
    daemon_json.write_text(json.dumps(forged))
    target = Target(
        "local", Connection("local"), plans["debian"], hostvars={"container_runtime_daemon_json": str(daemon_json)}
    )
    facts = HostFacts(LOCAL, target, budget=Budget(60), have_timeout=True)
    assert facts.prefetch({"docker-runtime", "os"}) == 0
    assert json.loads(facts.read(str(daemon_json))) == forged
    assert facts.round_trips == 2
    # the same host without the forgery: one round trip answers both checks
    daemon_json.write_text(json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}))
    facts = HostFacts(LOCAL, target, budget=Budget(60), have_timeout=True)
    assert facts.prefetch({"docker-runtime", "os"}) == len(planned_commands(target, {"docker-runtime", "os"}))
    assert facts.read(str(daemon_json)) == daemon_json.read_text()
    assert facts.os_release == HostFacts(LOCAL, target).os_release
    assert facts.round_trips == 1


# -- every check on facts from one batch ----------------------------------------------------------
class Res:
    def __init__(self, rc=0, stdout="", stderr=""):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr


class ScriptedHost:
    """Answers each command from a script (the first key it starts with). A batch it answers
    as the script's sh would: each command's output between the token's markers."""

    def __init__(self, script, *, seconds=None, not_run=()):
        self.script, self.ran, self.seconds, self.not_run = script, [], seconds or {}, set(not_run)

    def answer(self, command):
        if command.startswith("timeout --kill-after="):  # hostpool.remote_command: the command it wraps
            command = shlex.split(command[: command.index(" & p=$!")])[5]
        for prefix, res in self.script.items():
            if command.startswith(prefix):
                return res
        return Res(127, "", f"sh: 1: {command.split()[0]}: not found\n")

    def run(self, command):
        self.ran.append(command)
        if not command.startswith("T=provision-"):
            return self.answer(command)
        token = command[2 : command.index("\n")]
        words = shlex.split(command[command.index("\nt; E=") + 1 :].split("\n", 1)[1])
        assert words[-2:] == ["exit", "0"], "the script ends with exit 0"
        assert len(words[:-2]) % 3 == 0, "r <i> <command> lines"
        out = err = ""
        for n in range(0, len(words) - 2, 3):
            _, i, cmd = words[n : n + 3]
            res, seconds = self.answer(cmd), self.seconds.get(cmd, 40)
            if cmd in self.not_run:  # its turn came after the host's deadline
                res, seconds = Res("-", "", ""), 0
            out += f"{token} {i} b\n{res.stdout}\n{token} {i} e {res.rc} {seconds}\n"
            err += f"{token} {i} b\n{res.stderr}\n{token} {i} e {res.rc} {seconds}\n"
        return Res(0, out, err)


@pytest.fixture(scope="module")
def plans(real_matrix):
    return {
        "debian": resolve(real_matrix, PlanRequest("debian12", "a100-pcie")),
        "rocky": resolve(real_matrix, PlanRequest("rocky9", "h100-sxm")),  # fabric manager
        "b200": resolve(real_matrix, PlanRequest("ubuntu22.04", "b200")),  # NVLink Subnet Manager
        "gh200": resolve(real_matrix, PlanRequest("ubuntu22.04", "gh200")),  # module options
        # a platform: the server checks (DMI, count, PCIe, NVLink, topology) and Fabric Manager from it
        "dgx-a100": resolve(real_matrix, PlanRequest("ubuntu22.04", "a100-sxm4-80gb", platform="dgx-a100")),
        "r750xa": resolve(real_matrix, PlanRequest("debian12", "a100-pcie", platform="r750xa")),
    }


CAPTURES = Path(__file__).resolve().parents[1] / "fakegpu" / "captures"
PLATFORMS = Path(__file__).resolve().parents[1] / "fixtures" / "platforms"


MIG = {
    "provision_mig_enabled": True,
    "provision_mig_layout": [{"profile": "4g.40gb", "placement": 0}, {"profile": "3g.40gb", "placement": 4}],
}
LGI = "|   0  MIG 3g.40gb          9        2          4:4     |\n|   0  MIG 4g.40gb          5        1          0:4     |\n"


def nvlink_up(count: int) -> str:
    """`nvidia-smi nvlink -s` of `count` A100 SXM4 GPUs with every link up: the captured GPU 0 block
    (tests/fakegpu/captures, a DGX-class A100) for each GPU index."""
    text = (CAPTURES / "nvlink-s__a100-sxm4-80gb-x2.txt").read_text()
    block = text[: text.index("GPU 1:")]
    return "".join(block.replace("GPU 0:", f"GPU {i}:", 1) for i in range(count))


def healthy(plan, mig=False, **override):
    """What a converged host of `plan` answers (Secure Boot on, so the signer is read too)."""
    driver = plan.driver.version
    pkgs = [(p.name, p.version) for p in plan.driver.packages]
    pkgs += [(p.name, p.version) for p in plan.fabric_manager.packages] if plan.fabric_manager else []
    pkgs += [(p.name, p.version) for p in plan.container_toolkit.packages]
    pkgs += (
        [(n, "1.0") for n in (*plan.subnet_manager.packages, *plan.subnet_manager.requires)]
        if plan.subnet_manager
        else []
    )
    os_id = {"Ubuntu": "ubuntu", "Debian": "debian", "Rocky": "rocky"}[plan.os.distribution]
    modes = "Enabled, Enabled" if mig else "Disabled, Disabled"
    count = plan.server.gpu_count if plan.server is not None and plan.server.gpu_count_is == "exact" else 1
    smi = "".join(
        f"{i}, {plan.gpu.name}, 0x{plan.gpu.pci_device_ids[0][2:].upper()}10DE, {driver}, Enabled, {modes}\n"
        for i in range(count)
    )
    script = {
        # the server checks' answers, from real captures (before "nvidia-smi --query-gpu": a prefix of this one)
        PCIE_QUERY: Res(0, "".join(f"{i}, 1, 4, 16, 16\n" for i in range(count))),  # an idle Gen4 x16 link
        NVLINK_STATUS: Res(0, nvlink_up(count) if count > 1 else ""),
        TOPOLOGY: Res(0, (PLATFORMS / "topo-m__dgx-a100__nv12.txt").read_text()),
        dmi_command("/sys/class/dmi/id"): Res(0, "+NVIDIA\n+DGXA100 920-23687-2531-001\n-\n"),
        "true": Res(0),
        "systemd-detect-virt": Res(1, "none\n"),
        "for f in /.dockerenv": Res(0, ""),
        "cat /etc/os-release": Res(0, f'ID={os_id}\nVERSION_ID="{plan.os.version}"\n'),
        secure_boot_command({}): Res(0, "   6   0   0   0   1\n"),
        "modinfo -F signer nvidia": Res(0, "provision module signing key\n"),
        "grep -lsE": Res(0, "/etc/modprobe.d/blacklist-nouveau.conf\n"),
        "grep -E '^nouveau '": Res(1, ""),
        "dpkg-query -W -f='${Package}": Res(0, "".join(f"{n}\t{v}-1\thi \n" for n, v in pkgs)),
        "dpkg-query -W -f='${db:Status-Abbrev} ": Res(0, "".join(f"hi {n}\n" for n, _ in pkgs) + "ii bash\n"),
        "rpm -q": Res(0, "".join(f"{n}\t{v}\t1.el9\n" for n, v in pkgs)),
        "dnf -q versionlock": Res(0, "".join(f"{n}-3:{v}-1.el9.*\n" for n, v in pkgs)),
        "dnf -q updateinfo": Res(0, ""),
        "systemctl is-active nvidia-persistenced": Res(0, "active\nenabled\n"),
        "systemctl is-active nvidia-fabricmanager": Res(0, "active\nenabled\n")
        if plan.fabric_manager
        else Res(3, "inactive\nnot-found\n"),
        "cat /proc/modules": Res(0, "ib_umad 40960 0 - Live 0x0\nnvidia 1 0 - Live 0x0\n"),
        "pgrep -x": Res(0, "4242\n"),
        "cat /etc/docker/daemon.json": Res(
            0, json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}})
        ),
        "cat /etc/modprobe.d/provision-nvidia.conf": Res(
            0, "".join(f"options {o.module} {o.option}={o.value}\n" for o in plan.driver.module_options)
        ),
        "cat /proc/driver/nvidia/version": Res(
            0, f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release Build  (dvs@x)\n"
        ),
        "cat /proc/driver/nvidia/params": Res(
            0, "".join(f'{o.option.removeprefix("NVreg_")}: "{o.value}"\n' for o in plan.driver.module_options)
        ),
        KERNEL_LOG: Res(0, ""),
        "nvidia-smi --query-gpu": Res(0, smi),
        "nvidia-smi mig -lgi": Res(0, LGI),
        "nv-fabricmanager --version": Res(0, f"Fabric Manager version is : {driver}\n"),
        "nvidia-ctk --version": Res(0, f"NVIDIA Container Toolkit CLI version {plan.container_toolkit.version}\n"),
        "docker image inspect": Res(1, "", "Error: No such image\n"),
    }
    script.update(override)
    return script


CHECKS = [
    f for module in (check_system, check_driver, check_containers, check_images, check_server)
    for f in vars(module).values()
    if callable(f) and hasattr(f, "provision_check")
]  # fmt: skip


def run_check(check, facts, catalogue=None):
    evidence: list[str] = []
    available = {"facts": facts, "facts_raw": facts, "plan": facts.target.plan, "target": facts.target,
                 "catalogue": catalogue,
                 "evidence": evidence.append, "warning": lambda text: evidence.append(f"warning: {text}")}  # fmt: skip
    kwargs = {name: available[name] for name in inspect.signature(check).parameters}
    try:
        check(**kwargs)
    except pytest.fail.Exception as exc:
        return "fail", str(exc), evidence
    except pytest.skip.Exception as exc:
        return "skip", str(exc), evidence
    return "pass", "", evidence


@pytest.mark.parametrize(
    ("name", "target_args", "override"),
    [
        ("debian", {}, {}),
        ("debian", {"mig": MIG, "gpu_count": 1}, {}),
        ("rocky", {}, {}),
        ("b200", {}, {}),
        ("gh200", {}, {}),
        # drift: each check must see the same thing through the batch as alone
        (
            "debian",
            {},
            {"nvidia-smi --query-gpu": Res(18, "Failed to initialize NVML: Driver/library version mismatch\n")},
        ),
        ("debian", {}, {"systemd-detect-virt": Res(0, "docker\n"), "cat /etc/os-release": Res(0, "ID=ubuntu\n")}),
        ("rocky", {}, {"dnf -q versionlock": Res(0, ""), "rpm -q": Res(0, "package nvidia-driver is not installed\n")}),
        ("b200", {}, {"pgrep -x": Res(1, ""), "cat /proc/modules": Res(0, "nvidia 1 0 - Live\n")}),
        ("gh200", {}, {"cat /proc/driver/nvidia/params": Res(0, 'CoherentGPUMemoryMode: "default"\n')}),
        # a fleet group's images (its own plan's image part): image-runs reads nvidia-smi too
        ("debian", {"images": "own"}, {}),
        ("rocky", {"images": "own"}, {"nvidia-smi --query-gpu": Res(0, "0, X, 0x233010DE, 550.163.01, E, D, D\n")}),
        # a platform: the server checks read their commands from the batch too
        ("dgx-a100", {}, {}),
        ("r750xa", {}, {}),
        ("dgx-a100", {}, {PCIE_QUERY: Res(0, "0, 1, 4, 8, 16\n"), NVLINK_STATUS: Res(0, "")}),  # x8, no NVLink
        ("r750xa", {}, {dmi_command("/sys/class/dmi/id"): Res(0, "-\n-\n-\n")}),  # DMI unreadable: a warning
    ],
)
def test_every_check_reads_the_same_from_one_round_trip(plans, real_matrix, name, target_args, override):
    plan = plans[name]
    script = healthy(plan, mig="mig" in target_args, **override)
    if target_args.get("images") == "own":
        target_args = {**target_args, "images": (image_needs(plan, "own.lock.json"),), "group": "g"}
    target = Target("h", SSH, plan, **target_args)
    alone = HostFacts(ScriptedHost(script), target)  # no deadline: each command on its own, as before
    batched = HostFacts(ScriptedHost(script), target, budget=Budget(120), have_timeout=True)
    assert batched.prefetch() == len(planned_commands(target))
    for check in CHECKS:
        assert run_check(check, batched, real_matrix) == run_check(check, alone, real_matrix), check.provision_check
    assert len(batched.host.ran) == 1, [c[:60] for c in batched.host.ran[1:]]  # nothing sent on its own
    if not override:
        assert [run_check(c, batched, real_matrix)[0] for c in CHECKS].count("fail") == 0
    if target.images and override:  # R550 cannot run the H100 plan's CUDA 13 image
        assert run_check(check_images.check_image_runs, batched, real_matrix)[0] == "fail"


def test_the_facts_come_back_as_they_were_printed(plans):
    plan = plans["debian"]
    script = healthy(
        plan,
        **{
            "nvidia-smi --query-gpu": Res(
                0, "0, A, 0x20B510DE, 1.2, Enabled, [N/A], [N/A]\n1, B, 0x20B510DE, 1.2, Disabled, [N/A], [N/A]\n"
            )
        },
    )
    facts = HostFacts(ScriptedHost(script), Target("h", SSH, plan), budget=Budget(120), have_timeout=True)
    facts.prefetch()
    assert facts.os_release == {"ID": "debian", "VERSION_ID": "12"}
    assert facts.container is None
    assert [(g.index, g.name, g.device_id, g.persistence) for g in facts.smi[1]] == [
        ("0", "A", "0x20b5", "Enabled"),
        ("1", "B", "0x20b5", "Disabled"),
    ]
    assert facts.systemd("nvidia-persistenced") == ("active", "enabled")
    pkg = plan.driver.packages[0]
    assert facts.installed([pkg.name])[pkg.name] == (pkg.name, pkg.version, f"{pkg.version}-1", True)
    assert "bash" not in facts.held_packages()
    assert facts.unreachable is None
    assert len(facts.host.ran) == 1


def test_a_hung_nvidia_smi_in_the_batch_is_a_finding(plans):
    """timeout stopped nvidia-smi on the host (exit 137 after its 13 s): the nvidia-smi check
    fails naming the wait and the kernel log; the checks that need its table skip."""
    from provision.verify.facts import SMI_QUERY

    plan = plans["debian"]
    xid = "[ 8412.4] NVRM: Xid (PCI:0000:17:00): 79, pid=0, GPU has fallen off the bus.\n"
    script = healthy(plan, **{"nvidia-smi --query-gpu": Res(137, ""), KERNEL_LOG: Res(0, xid)})
    host = ScriptedHost(script, seconds={SMI_QUERY: 13})
    facts = HostFacts(host, Target("h", SSH, plan), budget=Budget(40), have_timeout=True)
    facts.prefetch()
    assert facts.smi[0] == Result(137, "", "", 13)
    status, detail, evidence = run_check(check_driver.check_nvidia_smi, facts)
    assert status == "fail"
    assert detail.startswith("nvidia-smi did not answer in 13 s: the GPU may have fallen off the bus")
    assert evidence == [f"kernel log: {xid.strip()}"]
    assert run_check(check_driver.check_gpus, facts)[0] == "skip"
    assert len(host.ran) == 1


def test_a_command_whose_turn_came_after_the_deadline_says_so(plans):
    from provision.verify.facts import SMI_QUERY

    plan = plans["debian"]
    host = ScriptedHost(healthy(plan), not_run={SMI_QUERY})
    facts = HostFacts(host, Target("h", SSH, plan), budget=Budget(120), have_timeout=True)
    facts.prefetch()
    assert facts.run(SMI_QUERY) == Result(124, "", batch.NOT_RUN, 0)
    assert run_check(check_driver.check_nvidia_smi, facts)[1].startswith("nvidia-smi did not answer in 0 s")
    assert len(host.ran) == 1


def test_a_command_the_cut_batch_did_not_reach_goes_alone(plans):
    plan = plans["debian"]
    host = ScriptedHost(healthy(plan))
    facts = HostFacts(host, Target("h", SSH, plan), budget=Budget(120), have_timeout=True)
    commands = planned_commands(facts.target)
    real = host.run

    def cut(command):  # the host's deadline came after the first three commands
        res = real(command)
        marker = f"{command[2 : command.index(chr(10))]} 3 b\n"
        out = res.stdout[: res.stdout.index(marker)]
        return Res(0, out + marker + "partial", res.stderr)

    host.run = cut
    assert facts.prefetch() == 3
    assert facts.run(commands[2]).rc == 0
    host.run = real
    assert facts.run(commands[3]).out == host.answer(commands[3]).stdout  # sent on its own
    assert len(host.ran) == 2


def test_only_the_selected_checks_commands_are_sent(plans):
    target = Target("h", SSH, plans["debian"], mig=MIG)
    few = planned_commands(target, {"os", "reachable"})
    assert few == ["true", *few[1:3], "cat /etc/os-release"]
    everything = planned_commands(target)
    assert everything.index(KERNEL_LOG) < everything.index("nvidia-smi mig -lgi")
    # what can hang on a lost GPU comes after every cheap read
    gpu_first = min(everything.index(c) for c in everything if "nvidia" in c and "smi" in c)
    assert all("dpkg-query" not in c and "systemctl" not in c for c in everything[gpu_first:])


def test_no_batch_without_a_deadline_or_timeout_on_the_host(plans):
    target = Target("h", SSH, plans["debian"])
    bare = ScriptedHost(healthy(plans["debian"]))
    assert HostFacts(bare, target, budget=Budget(120), have_timeout=False).prefetch() == 0
    assert HostFacts(bare, target).prefetch() == 0
    assert bare.ran == []
    late = Budget(120, clock=iter([0.0, 200.0, 200.0, 200.0]).__next__)
    assert HostFacts(bare, target, budget=late, have_timeout=True).prefetch() == 0
    assert bare.ran == []


def test_an_unreachable_host_still_says_why(plans):
    class Down:
        def run(self, command):
            raise RuntimeError(Res(255, "", "ssh: connect to host 127.0.0.9 port 22: Connection refused\n"))

    facts = HostFacts(Down(), Target("h", SSH, plans["debian"]), budget=Budget(60), have_timeout=True)
    assert facts.prefetch() == 0
    assert facts.unreachable.startswith("RuntimeError")  # sent alone again: the worker's probe words it


def test_past_the_deadline_a_check_runs_only_on_what_the_batch_answered(plans):
    """The plugin skips a check as late only when it would have to send something itself."""
    from provision.verify.facts import SMI_QUERY

    plan = plans["debian"]
    facts = HostFacts(ScriptedHost(healthy(plan), not_run={SMI_QUERY}), Target("h", SSH, plan), budget=Budget(120))
    assert not facts.answers("os")
    facts.prefetch()
    answered = {c.provision_check for c in CHECKS if facts.answers(c.provision_check)}
    assert {"os", "driver-packages", "container-toolkit", "kernel-hold", "mig"} <= answered
    assert {"nvidia-smi", "gpus", "persistence"}.isdisjoint(answered)  # they read the table not read in time


def test_the_probe_asks_for_timeout_in_one_round_trip(monkeypatch):
    from provision.verify.worker import probe

    class Counting:
        def __init__(self):
            self.ran = []

        def run(self, command):
            self.ran.append(command)
            return LOCAL.run(command)

    host = Counting()
    assert probe(host, Budget(60)) == (None, True)  # this machine: coreutils timeout, a POSIX sh
    assert len(host.ran) == 1
    monkeypatch.setenv("PATH", "/nonexistent")  # no timeout there: commands go bare
    assert probe(Counting(), Budget(60)) == (None, False)

    class Down:
        def run(self, command):
            raise RuntimeError(Res(255, "", "ssh: connect to host 127.0.0.9 port 22: Connection refused\n"))

    assert probe(Down(), Budget(60)) == ("ssh: connect to host 127.0.0.9 port 22: Connection refused", False)
