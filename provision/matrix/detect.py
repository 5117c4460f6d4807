"""Which catalogued GPU and OS a machine is, and how its MIG profiles compare with the catalogue.

Pure functions over the text of ``nvidia-smi --query-gpu`` (QUERY_ARGS), ``/etc/os-release``,
``nvidia-smi mig -lgip`` and ``nvidia-smi mig -lgipp``, and a Matrix. Running the commands, with
a timeout, is the caller's business: nothing here touches the machine.
"""

import csv
import io
import re
from collections.abc import Iterable
from typing import NamedTuple

from provision.matrix.model import Gpu, Matrix, MigProfileSet

# The query that identify() reads (with its header line: columns are found by name).
QUERY_ARGS = ("--query-gpu=index,name,pci.device_id", "--format=csv")
# /etc/os-release ID -> the catalogue's distribution (Ansible's name) where they differ in more than case.
_DISTRIBUTIONS = {"rhel": "redhat"}


class LiveGpu(NamedTuple):
    index: int
    name: str  # as nvidia-smi prints it: "NVIDIA H200"
    device_id: str  # PCI device id, vendor dropped, as the catalogue spells it: "0x2335"
    catalogue_id: str | None  # the catalogued GPU with that PCI device id; None: not catalogued


def pci_device(text: str) -> str:
    """``0x233510DE`` (nvidia-smi: device then vendor), ``0x2335`` or ``2335`` -> ``0x2335``."""
    digits = text.strip().lower().removeprefix("0x")
    if not re.fullmatch(r"[0-9a-f]{4}(?:10de)?", digits):
        return text.strip()
    return "0x" + digits[:4].upper()


def catalogue_gpu(matrix: Matrix, device_id: str) -> Gpu | None:
    """The catalogued GPU whose PCI device ids include ``device_id`` (any spelling pci_device takes)."""
    want = pci_device(device_id).lower()
    return next((g for g in matrix.gpus if want in {pci_device(d).lower() for d in g.pci_device_ids}), None)


def parse_gpu_query(text: str) -> list[tuple[int, str, str]]:
    """(index, name, raw PCI device id) per GPU from ``--query-gpu=...,name,...,pci.device_id
    --format=csv`` output with its header line (other columns are ignored; without an index
    column a GPU's index is its row). ValueError when the text is not such output."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("nvidia-smi printed nothing")
    header = [f.strip().split(" [")[0] for f in lines[0].split(",")]
    if "name" not in header or "pci.device_id" not in header:
        raise ValueError(f"not --query-gpu CSV with name and pci.device_id columns: {lines[0][:120]!r}")
    rows = []
    for row_no, row in enumerate(csv.reader(io.StringIO("\n".join(lines[1:])), skipinitialspace=True)):
        if len(row) != len(header):
            raise ValueError(f"row {row_no + 2} has {len(row)} values for {len(header)} columns")
        cells = dict(zip(header, (c.strip() for c in row), strict=True))
        index = int(cells["index"]) if cells.get("index", "").isdigit() else row_no
        rows.append((index, cells["name"], cells["pci.device_id"]))
    return rows


def identify(matrix: Matrix, query_text: str) -> list[LiveGpu]:
    """Each GPU of a ``nvidia-smi`` QUERY_ARGS answer, with its catalogue id."""
    out = []
    for index, name, raw in parse_gpu_query(query_text):
        gpu = catalogue_gpu(matrix, raw)
        out.append(LiveGpu(index, name, pci_device(raw), gpu.id if gpu else None))
    return out


def os_release(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key.strip()):
            out[key.strip()] = value.strip().strip("\"'")
    return out


def os_id(matrix: Matrix, os_release_text: str) -> str | None:
    """The catalogue's OS id for an ``/etc/os-release`` (None: not catalogued). EL releases are
    catalogued by major version (Rocky 9.4 -> rocky9), Ubuntu and Debian by the full one."""
    rel = os_release(os_release_text)
    distro = rel.get("ID", "").lower()
    distro = _DISTRIBUTIONS.get(distro, distro)
    version = rel.get("VERSION_ID", "")
    for candidate in matrix.os_releases:
        if candidate.distribution.lower() != distro:
            continue
        got = version.split(".")[0] if candidate.family == "RedHat" else version
        if got == candidate.version:
            return candidate.id
    return None


# -- MIG profiles ---------------------------------------------------------------------------
class LgipRow(NamedTuple):
    gpu: int
    name: str  # "1g.18gb" (without nvidia-smi's "MIG " prefix)
    id: int
    free: int
    total: int
    memory_gib: float


class LgippRow(NamedTuple):
    gpu: int
    id: int
    placements: tuple[int, ...]  # allowed start slots
    size: int  # memory slices an instance spans


_LGIP = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s", re.M)
_LGIPP = re.compile(r"^GPU\s+(\d+)\s+Profile\s+ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,\s]*)\}:(\d+)\s*$", re.M)


def parse_lgip(text: str) -> list[LgipRow]:
    """The profile rows of ``nvidia-smi mig -lgip`` (the table of GPU instance profiles)."""
    return [
        LgipRow(int(m[1]), m[2], int(m[3]), int(m[4]), int(m[5]), float(m[6]))
        for m in _LGIP.finditer(text.replace("\r\n", "\n"))
    ]


def parse_lgipp(text: str) -> list[LgippRow]:
    """The rows of ``nvidia-smi mig -lgipp``: ``GPU  0 Profile ID  9 Placements: {0,4}:4``."""
    rows = []
    for m in _LGIPP.finditer(text.replace("\r\n", "\n")):
        starts = tuple(int(s) for s in m[3].replace(" ", "").split(",") if s)
        rows.append(LgippRow(int(m[1]), int(m[2]), starts, int(m[4])))
    return rows


def mig_differences(
    profile_set: MigProfileSet, lgip: Iterable[LgipRow], lgipp: Iterable[LgippRow], gpu: int = 0
) -> list[str]:
    """Where one GPU's live profiles (names, ids, instance counts) and placements (start slots,
    sizes) differ from the catalogue's profile set; [] when they agree. Memory sizes are not
    compared: they move a little between driver releases."""
    problems: list[str] = []
    by_id = {p.id: p for p in profile_set.profiles if p.id is not None}
    live = {r.id: r for r in lgip if r.gpu == gpu}
    for row in live.values():
        cat = by_id.get(row.id)
        if cat is None:
            problems.append(f"GPU {gpu}: profile {row.name} (id {row.id}) is not in {profile_set.id}")
            continue
        if cat.name != row.name:
            problems.append(f"GPU {gpu}: profile id {row.id} is {row.name}; {profile_set.id} says {cat.name}")
        if cat.max_instances != row.total:
            problems.append(
                f"GPU {gpu}: {row.name} allows {row.total} instances; {profile_set.id} says {cat.max_instances}"
            )
    for ident, cat in by_id.items():
        if ident not in live:
            problems.append(f"GPU {gpu}: {profile_set.id} lists {cat.name} (id {ident}); nvidia-smi mig -lgip does not")
    for row in (r for r in lgipp if r.gpu == gpu):
        cat = by_id.get(row.id)
        if cat is None:
            problems.append(f"GPU {gpu}: placements for profile id {row.id}, which {profile_set.id} does not list")
            continue
        if tuple(cat.placements) != row.placements or cat.memory_slices != row.size:
            problems.append(
                f"GPU {gpu}: {cat.name} (id {row.id}) places at {{{','.join(map(str, row.placements))}}}:{row.size}; "
                f"{profile_set.id} says {{{','.join(map(str, cat.placements))}}}:{cat.memory_slices}"
            )
    return problems
