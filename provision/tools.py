"""Finding the commands provision runs (ansible-core's, installed beside it)."""

import contextlib
import os
import shutil

from provision.errors import ToolingError


def tool_path() -> str:
    """PATH with this interpreter's bin directory first: ansible-core's commands are installed
    beside provision's, also when its virtual environment is not activated (pipx, .venv/bin/provision)."""
    import sys

    return os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


@contextlib.contextmanager
def tools_on_path():
    """PATH = tool_path() meanwhile: testinfra's ansible backend runs ansible-inventory from PATH."""
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = tool_path()
    try:
        yield
    finally:
        os.environ["PATH"] = old


def ansible_inventory_binary() -> str:
    exe = shutil.which("ansible-inventory", path=tool_path())
    if exe is None:
        raise ToolingError(
            "ansible-inventory is not installed", hint="pip install gpu-provision (it depends on ansible-core)"
        )
    return exe
