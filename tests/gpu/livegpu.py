"""The machine's real GPU, for the tests marked gpu: found with nvidia-smi (each call under a
timeout, its process group killed after it), mapped to the catalogue with provision.matrix.detect.

Everything here only reads: nvidia-smi -L, --query-gpu, -q -x, mig -lgip and mig -lgipp. Nothing
changes MIG mode, clocks, persistence or any other setting.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import NamedTuple

from provision.matrix.detect import QUERY_ARGS, LiveGpu, identify, os_id

SMI_TIMEOUT = 30  # seconds for one nvidia-smi call


class Ran(NamedTuple):
    rc: int | None  # None: killed at the timeout
    out: str
    err: str

    @property
    def text(self) -> str:
        return (self.out + self.err).strip()

    def first_line(self) -> str:
        return self.text.splitlines()[0] if self.text else f"exit {self.rc}"


def run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> Ran:
    """Run a command in its own process group; at the timeout the whole group is killed."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return Ran(None, out, err)
    return Ran(proc.returncode, out, err)


class Live(NamedTuple):
    smi: str  # the nvidia-smi found
    gpus: list[LiveGpu]
    listing: str  # nvidia-smi -L
    query: str  # nvidia-smi QUERY_ARGS


def probe(matrix, path: str | None = None, timeout: float = SMI_TIMEOUT) -> tuple[Live | None, str]:
    """(Live, "") when nvidia-smi on ``path`` (default: $PATH) answers and lists GPUs; else
    (None, the reason to skip)."""
    smi = shutil.which("nvidia-smi", path=path)
    if smi is None:
        return None, "no NVIDIA GPU: nvidia-smi is not on PATH"
    env = {**os.environ, "PATH": path} if path is not None else None
    listing = run([smi, "-L"], timeout, env)
    if listing.rc is None:
        return None, f"no usable NVIDIA GPU: nvidia-smi -L did not answer in {timeout:g} s"
    if listing.rc != 0:
        return None, f"no usable NVIDIA GPU: nvidia-smi -L failed (exit {listing.rc}): {listing.first_line()}"
    if not any(line.startswith("GPU ") for line in listing.out.splitlines()):
        return None, f"no NVIDIA GPU: nvidia-smi -L lists none ({listing.first_line()})"
    query = run([smi, *QUERY_ARGS], timeout, env)
    if query.rc != 0:
        return None, f"nvidia-smi {' '.join(QUERY_ARGS)} failed ({query.rc}): {query.first_line()}"
    try:
        gpus = identify(matrix, query.out)
    except ValueError as exc:
        return None, f"nvidia-smi {' '.join(QUERY_ARGS)}: {exc}"
    if not gpus:
        return None, "no NVIDIA GPU: nvidia-smi --query-gpu lists none"
    return Live(smi, gpus, listing.out, query.out), ""


def plan_target(matrix, live: Live, os_release_text: str) -> tuple[tuple[str, str] | None, str]:
    """((os id, gpu id), "") to plan for this machine, or (None, the reason to skip): every GPU
    must be the same catalogued one and the OS catalogued."""
    ids = sorted({g.catalogue_id or f"uncatalogued {g.name} ({g.device_id})" for g in live.gpus})
    if len(ids) != 1:
        return None, f"GPUs of several kinds ({', '.join(ids)}): one plan cannot cover them"
    gpu = live.gpus[0]
    if gpu.catalogue_id is None:
        return None, f"{gpu.name} (PCI device {gpu.device_id}) is not in compat/gpus.yaml"
    found = os_id(matrix, os_release_text)
    if found is None:
        rel = {k: v for k, v in (ln.partition("=")[::2] for ln in os_release_text.splitlines()) if k}
        name = rel.get("PRETTY_NAME", "this OS").strip('"')
        return None, f"{name} is not in compat/os.yaml: no plan to verify against"
    return (found, gpu.catalogue_id), ""


def slug(text: str) -> str:
    """A file-name-safe form of a GPU id or name."""
    return "".join(c if c.isalnum() or c in "-." else "-" for c in text.lower()).strip("-") or "gpu"


def keep(directory: Path, name: str, ran: Ran) -> None:
    """Save a command's output as ``name`` and what it wrote to stderr, if anything, beside it."""
    save(directory, name, ran.out)
    if ran.err.strip():
        save(directory, name + ".stderr.txt", ran.err)


def save(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path
