"""Run one of the collection's modules as Ansible runs it on a host: its own Python process, the
arguments as ANSIBLE_MODULE_ARGS JSON, the result as JSON on stdout (exit 1 on fail_json)."""

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from paths import MODULES

# Loads the module by path; optionally waits for a start time (so that racing runs reach main() at
# once, past their imports) and wraps one of its functions to sleep after it returns (to hold a race
# window open at a known point); then runs main() with the arguments.
_WRAPPER = """
import importlib.util, sys, time
path, args, start_at, slow_name, slow_for = sys.argv[1:6]
spec = importlib.util.spec_from_file_location("module_under_test", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
if slow_name:
    real = getattr(mod, slow_name)
    def slow(*a, **kw):
        got = real(*a, **kw)
        time.sleep(float(slow_for))
        return got
    setattr(mod, slow_name, slow)
while time.time() < float(start_at):
    time.sleep(0.005)
sys.argv = [path, args]
mod.main()
"""


@dataclass
class Result:
    rc: int
    out: dict[str, Any]
    stderr: str

    @property
    def failed(self) -> bool:
        return self.rc != 0 or bool(self.out.get("failed"))


def start(module: str, args: dict[str, Any], *, start_at: float = 0.0, slow: tuple[str, float] | None = None):
    name, delay = slow or ("", 0.0)
    argv = [sys.executable, "-c", _WRAPPER, str(MODULES / f"{module}.py"),
            json.dumps({"ANSIBLE_MODULE_ARGS": args}), str(start_at), name, str(delay)]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 60) -> Result:
    out, err = proc.communicate(timeout=timeout)
    try:
        doc = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    except ValueError:
        doc = {"unparsed": out}
    return Result(proc.returncode, doc, err)


def run(module: str, args: dict[str, Any], **kwargs) -> Result:
    return finish(start(module, args, **kwargs))


def race(module: str, many: list[dict[str, Any]], *, slow: tuple[str, float] | None = None) -> list[Result]:
    """Run the module once per argument set, all reaching main() at the same moment."""
    at = time.time() + 1.5  # past every process's start-up and imports
    procs = [start(module, args, start_at=at, slow=slow) for args in many]
    return [finish(p) for p in procs]
