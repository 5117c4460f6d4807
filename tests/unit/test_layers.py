"""The import-layer contract (pyproject.toml [tool.importlinter]) holds, and it is not vacuous:
a data-layer module that imports the CLI breaks it."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_layers_hold():
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 kept, 0 broken" in proc.stdout


def test_a_lower_layer_importing_the_cli_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "provision", tmp_path / "provision", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    model = tmp_path / "provision" / "matrix" / "model.py"
    model.write_text(model.read_text() + "\nfrom provision.cli.output import dumps_json  # noqa\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "provision.matrix.model -> provision.cli.output" in proc.stdout
