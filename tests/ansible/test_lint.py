"""ansible-lint (production profile) and ansible-playbook --syntax-check over playbooks/."""

import os
import subprocess
import sys
from pathlib import Path

from support import ROOT

PLAYBOOKS = ROOT / "playbooks"
BIN = Path(sys.executable).parent


def test_ansible_lint_production_profile():
    proc = subprocess.run(
        [str(BIN / "ansible-lint"), "--nocolor", "--profile", "production", "."],
        cwd=PLAYBOOKS,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "profile 'production' was required, and it passed" in (proc.stdout + proc.stderr).lower().replace("'", "'")


def test_syntax_check():
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,", "site.yml"],
        cwd=PLAYBOOKS,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "playbook: site.yml" in proc.stdout
