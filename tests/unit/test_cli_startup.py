"""Start-up: `provision --help` lists the commands without importing them, and the listing says what
each command's own help says (benchmarks/bench_plan.py measures the times)."""

import json
import subprocess
import sys

import click

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
