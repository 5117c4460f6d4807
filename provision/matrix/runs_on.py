"""Does an image run on a host? The one place that knows NVIDIA's compatibility model.

An image needs a CUDA release X.Y.Z (its toolkit, or the CUDA its framework's wheels carry) and
code for the GPU's SM. A host has a driver release and a GPU. NVIDIA's CUDA Compatibility guide
and the CUDA release notes decide, in this order:

1. **native** — the driver is at or above the CUDA release's minimum (release notes, Table 3,
   "CUDA Toolkit and Corresponding Driver Versions"; compat/cuda.yaml ``min_driver``), or of a
   newer CUDA major (backward compatibility: a driver runs every older toolkit's code).
2. **minor-version** — same CUDA major as the driver's own, and the driver at or above that
   major's floor (release notes, Table 2, "Minimum Required Driver Version for CUDA Minor Version
   Compatibility"; compat/cuda.yaml ``minor_version_compatibility``: 11.x >= 450.80.02, 12.x >=
   525.60.13, 13.x >= 580.65.06). Its limits (CUDA Compatibility guide, "Application
   Considerations"): code compiled to PTX by the newer toolkit cannot be JIT-compiled by the older
   driver, so a GPU the image serves only through PTX does not run it; features introduced by the
   newer toolkit and driver return ``cudaErrorCallRequiresNewerDriver``.
3. **forward-compat** — an older driver branch runs a newer CUDA through the
   ``cuda-compat-<major>-<minor>`` package, which must then be in the image (every nvidia/cuda
   image installs it); only on NVIDIA Data Center GPUs, and only on the driver branches the
   guide's table marks compatible for that package (compat/cuda.yaml ``forward_compatibility``;
   not New Feature Branches, not branches past end of life). PTX JIT works, OpenGL/Vulkan interop
   does not.
4. **no** — none of the above, with the reason.

The GPU's SM must also be served by the image: SASS of the same major at or below it (sm_80 code
runs on sm_86), or PTX at or below it that the driver JIT-compiles; without a framework build, the
SMs its CUDA release can build for (compat/cuda.yaml ``compute_capabilities``).

``require_cuda`` writes the same rule as the Container Toolkit's ``NVIDIA_REQUIRE_CUDA``
expression (libnvidia-container's grammar: space-separated alternatives of comma-separated
conditions on ``driver``, ``arch``, ``brand`` and ``cuda``), so that the toolkit neither refuses a
host this rule accepts nor starts the image on one it refuses.
"""

from __future__ import annotations

from typing import NamedTuple

from provision.matrix import model as m
from provision.versions import DottedVersion as Version
from provision.versions import major_minor

NATIVE, MINOR, FORWARD, NO = "native", "minor-version", "forward-compat", "no"
MODES = (NATIVE, MINOR, FORWARD, NO)
RUNS = (NATIVE, MINOR, FORWARD)

MINOR_LIMITS = (
    "no PTX JIT of the newer toolkit's PTX (the GPU needs SASS in the image)",
    "features of the newer toolkit that need a newer driver return cudaErrorCallRequiresNewerDriver",
)
FORWARD_LIMITS = (
    "the image must carry cuda-compat-{major}-{minor} (nvidia/cuda images do) and the Container Toolkit "
    "must load it (CUDA-OpenGL/Vulkan interop is not supported)",
)


class ImageNeeds(NamedTuple):
    """What an image asks of a host: its CUDA release and the SMs it carries code for."""

    cuda: Version  # the toolkit release (12.8.1), whose Table 3 minimum is min_driver
    min_driver: Version
    sass: tuple[str, ...] | None  # compiled SMs ("8.0", "9.0"); None: not published
    ptx: str | None  # PTX embedded for this compute capability and newer
    targets: tuple[str, ...]  # what the CUDA release builds for (a plain CUDA image serves these)
    compat_package: bool = True  # cuda-compat-X-Y in the image (nvidia/cuda images install it)
    label: str = ""  # how to name the image in a reason ("nvidia/cuda:12.8.1-base-ubuntu22.04")

    @property
    def major(self) -> int:
        return self.cuda.release[0]


class Verdict(NamedTuple):
    mode: str  # native | minor-version | forward-compat | no
    reason: str
    limits: tuple[str, ...] = ()
    short: str = ""  # the reason in a few words, for a table cell

    @property
    def runs(self) -> bool:
        return self.mode in RUNS


def needs_for_cuda(matrix: m.Matrix, cuda: m.CudaRelease, label: str = "") -> ImageNeeds:
    """A plain nvidia/cuda image of a CUDA release (no framework build)."""
    return ImageNeeds(cuda.version, cuda.min_driver, None, None, cuda_targets(matrix, cuda.version), True, label)


def cuda_targets(matrix: m.Matrix, version: Version) -> tuple[str, ...]:
    """The compute capabilities a CUDA release builds for, oldest first."""
    return tuple(
        sorted(
            {s.compute_capability for s in matrix.compute_support if s.cuda.contains(version)},
            key=_cc_key,
        )
    )


def decide(matrix: m.Matrix, needs: ImageNeeds, driver: Version, gpu: m.Gpu | None = None) -> Verdict:
    """The mode in which an image runs on a driver (and a GPU, when known), or why it does not."""
    sm_kind, sm_text = _sm(needs, gpu)
    if sm_kind is None:
        return Verdict(NO, sm_text, (), sm_text.split(" (", 1)[0].removeprefix("the image carries "))
    cuda = f"CUDA {needs.cuda}"
    if driver >= needs.min_driver or _major_of(matrix, driver) > needs.major:
        how = (
            f"driver {driver} is at or above {cuda}'s minimum {needs.min_driver} (release notes, Table 3)"
            if driver >= needs.min_driver
            else f"driver {driver} serves a newer CUDA major than {needs.major}.x (backward compatibility)"
        )
        short = f">= {needs.min_driver} (Table 3)" if driver >= needs.min_driver else "newer CUDA major"
        return Verdict(NATIVE, f"{how}; {sm_text}", (), short)
    floor = matrix.minor_compat_floor(needs.major)
    minor_why = None
    if floor is not None and driver >= floor.min_driver:
        if sm_kind in ("sass", "any"):
            return Verdict(
                MINOR,
                f"driver {driver} is below {cuda}'s minimum {needs.min_driver} but at or above the CUDA "
                f"{needs.major}.x minor-version floor {floor.min_driver} (release notes, Table 2); {sm_text}",
                MINOR_LIMITS,
                f"< {needs.min_driver}, >= floor {floor.min_driver}",
            )
        minor_why = (
            f"minor-version compatibility (CUDA {needs.major}.x from {floor.min_driver}) does not JIT-compile the "
            f"newer toolkit's PTX, and {sm_text}"
        )
    forward = _forward(matrix, needs, driver, gpu)
    if forward is not None:
        package = f"cuda-compat-{needs.major}-{needs.cuda.release[1]}"
        return Verdict(FORWARD, f"{forward}; {sm_text}", _forward_limits(needs), f"{package} on R{driver.release[0]}")
    below = f"driver {driver} is below {cuda}'s minimum {needs.min_driver} (release notes, Table 3)"
    short = f"needs >= {needs.min_driver}"
    if minor_why is not None:
        return Verdict(NO, f"{below}; {minor_why}", (), f"{short} (PTX JIT)")
    if floor is None:
        return Verdict(NO, f"{below}; no minor-version floor is catalogued for CUDA {needs.major}.x", (), short)
    if _major_of(matrix, driver) < needs.major:
        return Verdict(
            NO,
            f"{below}; it serves CUDA {_major_of(matrix, driver)}.x, an older major (minor-version compatibility "
            f"needs CUDA {needs.major}.x's floor {floor.min_driver}){_forward_note(matrix, needs, driver, gpu)}",
            (),
            f"{short} (CUDA {needs.major}.x)",
        )
    return Verdict(
        NO,
        f"{below} and the CUDA {needs.major}.x minor-version floor {floor.min_driver} (Table 2)",
        (),
        f"{short}, floor {floor.min_driver}",
    )


def _major_of(matrix: m.Matrix, driver: Version) -> int:
    """The CUDA major a driver serves natively: the newest major whose first release's Table 3
    minimum it meets (R535: 12, R580: 13); 0 below every catalogued release."""
    majors = [c.version.release[0] for c in matrix.cuda if driver >= c.min_driver]
    return max(majors, default=0)


def _sm(needs: ImageNeeds, gpu: m.Gpu | None) -> tuple[str | None, str]:
    """("sass" | "ptx" | "any", what serves the GPU), or (None, why nothing does)."""
    if gpu is None:
        return "any", "the GPU's SM is not checked (no GPU given)"
    cc = gpu.compute_capability
    sm = "sm_" + cc.replace(".", "")
    if needs.sass is None and needs.ptx is None:
        if cc in needs.targets:
            return "sass", f"CUDA {major_minor(needs.cuda)} builds for {sm}"
        return None, f"CUDA {major_minor(needs.cuda)} cannot build for {sm} ({gpu.id})"
    gmaj, gmin = _cc_key(cc)
    for arch in needs.sass or ():
        amaj, amin = _cc_key(arch)
        if amaj == gmaj and amin <= gmin:
            return "sass", f"the image carries sm_{amaj}{amin} code for {sm}"
    if needs.ptx is not None and _cc_key(needs.ptx) <= (gmaj, gmin):
        return "ptx", f"{sm} runs the image's compute_{needs.ptx.replace('.', '')} PTX through JIT"
    carried = ", ".join("sm_" + a.replace(".", "") for a in needs.sass or ())
    ptx = f" + PTX {needs.ptx}" if needs.ptx else ""
    return None, f"the image carries no code for {sm} ({gpu.id}): {carried or 'no SASS'}{ptx}"


def _forward_row(matrix: m.Matrix, needs: ImageNeeds) -> m.ForwardCompat | None:
    line = major_minor(needs.cuda)
    return next((f for f in matrix.forward_compat if f.cuda == line), None)


def _forward(matrix: m.Matrix, needs: ImageNeeds, driver: Version, gpu: m.Gpu | None) -> str | None:
    """Why the image runs through its cuda-compat package, or None."""
    row = _forward_row(matrix, needs)
    branch = driver.release[0]
    if row is None or not needs.compat_package or branch not in row.branches:
        return None
    if gpu is None or gpu.segment != "data-center":
        return None
    return (
        f"R{branch} is a supported base branch of cuda-compat-{needs.major}-{needs.cuda.release[1]} on data-center "
        f"GPUs (CUDA Compatibility guide, forward compatibility table)"
    )


def _forward_note(matrix: m.Matrix, needs: ImageNeeds, driver: Version, gpu: m.Gpu | None) -> str:
    """Why forward compatibility does not rescue it, when it nearly could."""
    row = _forward_row(matrix, needs)
    if row is None:
        return ""
    branch = driver.release[0]
    package = f"cuda-compat-{needs.major}-{needs.cuda.release[1]}"
    if branch not in row.branches:
        listed = ", ".join(f"R{b}" for b in row.branches)
        return f"; {package} supports base branches {listed} only"
    if gpu is None:
        return f"; {package} would run it on a data-center GPU (give --gpu)"
    return f"; {package} runs only on data-center GPUs, not on {gpu.id}"


def _forward_limits(needs: ImageNeeds) -> tuple[str, ...]:
    return tuple(t.format(major=needs.major, minor=needs.cuda.release[1]) for t in FORWARD_LIMITS)


# -- the Container Toolkit's view --------------------------------------------------------------
# NVML brands of data-center GPUs (nvmlBrandType_t: NVML_BRAND_TESLA, NVML_BRAND_NVIDIA; the
# Container Toolkit compares case-insensitively): the brands a forward-compat alternative admits.
DATA_CENTER_BRANDS = ("tesla", "nvidia")


def require_cuda(matrix: m.Matrix, needs: ImageNeeds) -> str:
    """The NVIDIA_REQUIRE_CUDA expression that admits exactly the hosts ``decide`` admits.

    Alternatives (space-separated, any one suffices), each a comma-separated conjunction:
    per SM window the image serves with SASS, a driver at or above the minor-version floor (which
    the native minimum is at or above); for its PTX, a driver at or above the native minimum; per
    supported base branch of its cuda-compat package, that branch on a data-center brand."""
    windows = _windows(needs)
    floor = matrix.minor_compat_floor(needs.major)
    terms: list[str] = []
    for kind, window in windows:
        low = needs.min_driver if kind == "ptx" or floor is None else min(floor.min_driver, needs.min_driver)
        terms.append(",".join([f"driver>={low}", *window]))
    row = _forward_row(matrix, needs)
    if row is not None and needs.compat_package:
        for branch in row.branches:
            for brand in DATA_CENTER_BRANDS:
                for _, window in windows:
                    terms.append(",".join([f"brand={brand}", f"driver>={branch}", f"driver<{branch + 1}", *window]))
    return " ".join(dict.fromkeys(terms))


def _windows(needs: ImageNeeds) -> list[tuple[str, tuple[str, ...]]]:
    """The image's SM coverage as arch conditions: ("sass", (arch>=8.0, arch<9)) per SASS major
    window, ("ptx", (arch>=9.0,)) for PTX; a plain CUDA image's targets as contiguous ranges."""
    if needs.sass is None and needs.ptx is None:
        return [("sass", (f"arch>={lo}", f"arch<={hi}")) for lo, hi in _ranges(needs.targets)]
    out = []
    for arch in sorted(set(needs.sass or ()), key=_cc_key):
        major = _cc_key(arch)[0]
        out.append(("sass", (f"arch>={arch}", f"arch<{major + 1}")))
    if needs.ptx is not None:
        out.append(("ptx", (f"arch>={needs.ptx}",)))
    return out


def _ranges(targets: tuple[str, ...]) -> list[tuple[str, str]]:
    """A CUDA release's targets as one range per major family (7.5-7.5, 8.0-8.9, ...)."""
    by_major: dict[int, list[str]] = {}
    for cc in sorted(targets, key=_cc_key):
        by_major.setdefault(_cc_key(cc)[0], []).append(cc)
    return [(ccs[0], ccs[-1]) for ccs in by_major.values()]


def _cc_key(cc: str) -> tuple[int, int]:
    major, minor = cc.split(".")
    return int(major), int(minor)


class HostFacts(NamedTuple):
    """What the Container Toolkit reads of a host for NVIDIA_REQUIRE_* (per visible GPU)."""

    driver: str  # nvrm version: 535.183.01
    cuda: str  # the driver's CUDA version (nvmlSystemGetCudaDriverVersion): 12.2
    arch: str  # the GPU's compute capability: 8.0
    brand: str  # the NVML brand: Tesla, NVIDIA, GeForce, ...


def toolkit_admits(expression: str, host: HostFacts) -> bool:
    """libnvidia-container's evaluation of one NVIDIA_REQUIRE_* expression (src/cli/dsl.c's
    semantics, written out here to test ``require_cuda`` against ``decide``): any space-separated
    alternative whose comma-separated conditions all hold; versions compared numerically field by
    field, trailing zero fields ignored; brands case-insensitively."""
    facts = {"driver": host.driver, "cuda": host.cuda, "arch": host.arch, "brand": host.brand}
    for alternative in expression.split(" "):
        if not alternative:
            continue
        conditions = [c for c in alternative.split(",") if c]
        if all(_holds(c, facts) for c in conditions):
            return True
    return False


def _holds(condition: str, facts: dict[str, str]) -> bool:
    for op in (">=", "<=", "!=", "=", ">", "<"):
        key, sep, value = condition.partition(op)
        if sep and key in facts:
            if key == "brand":
                if op not in ("=", "!="):
                    raise ValueError(f"brand takes = or != only: {condition!r}")
                return (facts[key].lower() == value.lower()) == (op == "=")
            return _compare(_fields(facts[key]), op, _fields(value))
    raise ValueError(f"not a toolkit condition: {condition!r}")


def _fields(version: str) -> tuple[int, ...]:
    parts = [int(p) for p in version.split(".") if p]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _compare(a: tuple[int, ...], op: str, b: tuple[int, ...]) -> bool:
    return {
        ">=": a >= b,
        "<=": a <= b,
        ">": a > b,
        "<": a < b,
        "=": a == b,
        "!=": a != b,
    }[op]
