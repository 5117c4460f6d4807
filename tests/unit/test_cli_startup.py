"""Start-up: `provision --help` lists the commands without importing them, and the listing says what
each command's own help says; `provision plan`'s fast path (no click) behaves exactly as click's
path does (benchmarks/bench_plan.py measures the times)."""

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from provision.cli import COMMANDS, SUMMARIES, cli


def test_every_command_has_a_summary_its_help_begins_with():
    assert set(SUMMARIES) == set(COMMANDS)
    ctx = click.Context(cli)
    for name in COMMANDS:
        help_text = " ".join((cli.get_command(ctx, name).help or "").split())
        assert help_text.startswith(SUMMARIES[name].rstrip(".")), f"{name}: SUMMARIES drifted from the command's help"


def test_help_imports_no_command_module():
    code = (
        "import sys, json\n"
        "from provision.cli import main\n"
        "main(['--help'])\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    commands = {target.partition(":")[0] for target in COMMANDS.values()}
    assert not commands & loaded, f"--help imported {sorted(commands & loaded)}"
    for heavy in ("yaml", "jinja2", "docker", "ansible_runner", "jsonschema", "rich"):
        assert heavy not in loaded, f"--help imported {heavy}"
    assert "Commands:" in proc.stdout
    assert "plan " in proc.stdout


# -- `provision plan`'s fast path (provision/cli/plan_run.py) -------------------------------------
# Each argument list runs twice in a fresh process: as installed (the fast path where it applies) and
# with the fast path switched off (click parses everything); output, errors and exit code must match.
CLICK_ONLY = (
    "import sys\n"
    "from provision.cli import main, plan_run\n"
    "plan_run.fast_plan_args = lambda args: None\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
G = "a100-pcie-80gb"  # fixture catalogue ids
FAST = [
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G],
    ["plan", "--os", "rocky9", "--gpu", G, "--compat-dir", "{C}", "--format", "json"],
    ["--compat-dir", "{C}", "plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--format", "yaml"],
    ["--compat-dir", "{C}", "plan", "--gpu", "h100-sxm", "--os", "ubuntu22.04", "--format", "ansible"],
    ["--debug", "--compat-dir", "{C}", "plan", "--os", "ubuntu22.04", "--gpu", "h100-sxm", "--policy", "latest"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--framework", "pytorch", "--format", "json"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--cudnn", "9", "--explain"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--mig", "3g.40gb,3g.40gb"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--mig", "9g.99gb"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--cuda", "11.8"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--cuda", "11.8", "--explain"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--cuda", "banana"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--driver", "9000"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--framework", "mxnet"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky8", "--gpu", G],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", "a100pcie80gb"],
    ["--compat-dir", "{C}", "plan", "--os", "", "--gpu", G],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--lock", "{T}/plan.lock.json"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--lock", "{T}/\x1b[1mbold\x1b[0m.json"],
    ["--compat-dir", "{C}", "plan", "--os", "rocky9", "--gpu", G, "--lock", "{T}/missing/plan.json"],
    ["--compat-dir", "{T}/nope", "plan", "--os", "rocky9", "--gpu", G],
    ["--compat-dir", "{T}/nope", "plan", "--os", "rocky9", "--gpu", G, "--compat-dir", "{C}"],
    ["plan", "--os", "rocky9", "--gpu", G],  # PROVISION_COMPAT_DIR
    ["plan", "--os", "rocky9", "--gpu", "a100-pcie", "--compat-dir", "{LIVE}"],
    ["plan", "--os", "ubuntu22.04", "--platform", "dgx-a100", "--compat-dir", "{LIVE}"],
    ["plan", "--os", "ubuntu22.04", "--platform", "r750xa", "--gpu", "a100-sxm4-80gb", "--compat-dir", "{LIVE}"],
]
SLOW = [
    ["--help"],
    ["--version"],
    ["plan"],
    ["plan", "--help"],
    ["plan", "--os", "rocky9", "--gpu", G, "-h"],
    ["plan", "--os", "rocky9"],
    ["plan", "--os=rocky9", "--gpu", G],
    ["plan", "--os", "rocky9", "--os", "ubuntu22.04", "--gpu", G],
    ["plan", "--os", "-x", "--gpu", G],
    ["plan", "--os", "rocky9", "--gpu", G, "--policy", "newest"],
    ["plan", "--os", "rocky9", "--gpu", G, "--format", "xml"],
    ["plan", "--os", "rocky9", "--gpu", G, "--format"],
    ["plan", "--os", "rocky9", "--gpu", G, "extra"],
    ["plan", "--os", "rocky9", "--gpu", G, "--nope"],
    ["plan", "--os", "rocky9", "--gpu", G, "--debug"],
    ["plan", "--os", "rocky9", "--gpu", G, "--explain", "--explain"],
    ["plan", "--os", "rocky9", "--gpu", G, "--lock", "{T}"],
    ["--compat-dir", "{T}/file", "plan", "--os", "rocky9", "--gpu", G],
    ["plan", "--os", "rocky9", "--gpu", G, "--compat-dir", "{T}/file"],
    ["--debug", "--debug", "plan", "--os", "rocky9", "--gpu", G],
    ["matrix", "gpus", "--format", "json"],
]


@pytest.fixture
def places(tmp_path, monkeypatch):
    from support import COMPAT, make_compat

    compat = make_compat(tmp_path / "compat")
    (tmp_path / "file").write_text("not a directory\n")
    monkeypatch.setenv("PROVISION_COMPAT_DIR", str(compat))
    return {"{C}": str(compat), "{T}": str(tmp_path), "{LIVE}": str(COMPAT)}


def _argv(template: list[str], places: dict[str, str]) -> list[str]:
    out = []
    for arg in template:
        text = arg
        for key, value in places.items():
            text = text.replace(key, value)
        out.append(text)
    return out


def _run(cmd: list[str], lock: Path | None) -> tuple[int, str, str, str | None]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    written = lock.read_text() if lock is not None and lock.is_file() else None
    if lock is not None and lock.is_file():
        lock.unlink()
    return proc.returncode, proc.stdout, proc.stderr, written


@pytest.mark.parametrize("template", FAST + SLOW, ids=lambda t: " ".join(t).replace("--compat-dir {C} ", ""))
def test_plan_fast_path_is_click_byte_for_byte(template, places):
    from provision.cli.plan_run import fast_plan_args

    argv = _argv(template, places)
    assert (fast_plan_args(argv) is not None) == (template in FAST)
    lock = Path(argv[argv.index("--lock") + 1]) if "--lock" in argv else None
    fast = _run([sys.executable, "-m", "provision", *argv], lock)
    slow = _run([sys.executable, "-c", CLICK_ONLY, *argv], lock)
    assert fast == slow
    assert "Traceback" not in fast[2]


def test_plain_plan_imports_no_click_yaml_or_schema_checker(places):
    code = (
        "import sys, json\n"
        "from provision.cli import main\n"
        f"rc = main(['plan', '--os', 'rocky9', '--gpu', {G!r}])\n"
        "print(json.dumps([rc, sorted(sys.modules)]), file=sys.stderr)\n"
    )
    for _ in range(2):  # the first run fills the validated-data cache
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    rc, loaded = json.loads(proc.stderr.strip().splitlines()[-1])
    assert rc == 0
    assert "Plan: " in proc.stdout
    for heavy in ("click", "yaml", "jsonschema", "rich", "jinja2", "packaging", "provision.cli.group"):
        assert heavy not in loaded, f"provision plan imported {heavy}"


def test_plan_fast_path_on_a_closed_pipe_exits_as_click_does(places):
    """`provision plan | head` that closes early: exit 1 and nothing on stderr, either way."""
    import os

    argv = _argv(FAST[1], places)
    results = []
    for cmd in ([sys.executable, "-m", "provision", *argv], [sys.executable, "-c", CLICK_ONLY, *argv]):
        read, write = os.pipe()
        os.close(read)
        try:
            proc = subprocess.run(cmd, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, check=False)
        finally:
            os.close(write)
        results.append((proc.returncode, proc.stderr))
    assert results[0] == results[1] == (1, "")


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, EOFError])
def test_plan_fast_path_reports_an_interrupt_as_click_does(interrupt, places, capsys, monkeypatch):
    from provision.cli import main, plan, plan_run

    def interrupted(**_):
        raise interrupt

    argv = _argv(FAST[0], places)
    assert plan_run.fast_plan_args(argv) is not None
    monkeypatch.setattr(plan_run, "run_plan", interrupted)
    monkeypatch.setattr(plan, "run_plan", interrupted)
    fast = main(argv), capsys.readouterr()
    monkeypatch.setattr(plan_run, "fast_plan_args", lambda args: None)
    slow = main(argv), capsys.readouterr()
    assert fast == slow
    assert fast[0] == 130
    assert fast[1].err == "\naborted\n"
