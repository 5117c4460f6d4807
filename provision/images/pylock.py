"""requirements.lock: an image's Python packages, every one pinned `==` with its sha256 hashes.

uv resolves the plan's framework requirement for the image's Python and platform, with the plan's
CUDA runtime and cuDNN wheel versions as constraints, so that the lock installs what the plan says
(TensorFlow's `[and-cuda]` extra alone only sets floors). Whatever the source of a lock, resolved
here or given with --lock-file, it is checked line by line and against the plan before it is used.
The image installs it with `pip install --require-hashes --no-deps --only-binary=:all:`.
"""

import os
import re
import subprocess
import sys
import tempfile
from typing import NamedTuple

from provision.errors import InputError, OperationFailed, ToolingError
from provision.plan.model import PlanFramework, PlanStackPackage

LOCK_NAME = "requirements.lock"
PYPI = "https://pypi.org/simple"
MAX_LOCK_BYTES = 16 * 1024 * 1024
RESOLVE_TIMEOUT_S = 600
ARCHES = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
INSTALL = "pip install --require-hashes --no-deps --only-binary=:all: -r requirements.lock"
INSTALL_STACK = (
    "the sdists (sdists.lock) built by pip wheel --no-deps --no-build-isolation --require-hashes "
    "in the build stage, with what only their builds need (build.lock); the rest (wheels.lock) by "
    + INSTALL.replace("requirements.lock", "wheels.lock")
)
# What an sdist built with isolation off needs when its [build-system] names nothing: PEP 517's
# fallback (setuptools' legacy backend, which pip runs through setuptools>=40.8.0), and wheel for
# the setuptools releases before 70.1 that had no bdist_wheel of their own.
LEGACY_BUILD_REQUIRES = ("setuptools>=40.8.0", "wheel")

# What uv may read from the environment: its cache, network and TLS settings. Index, constraint and
# configuration variables would change what gets resolved behind the tool's back.
_UV_ENV = (
    "UV_CACHE_DIR",
    "UV_HTTP_TIMEOUT",
    "UV_HTTP_RETRIES",
    "UV_NATIVE_TLS",
    "UV_CONCURRENT_DOWNLOADS",
    "UV_OFFLINE",
)

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_VERSION = r"[0-9][A-Za-z0-9.!+_-]*"
_PIN = re.compile(rf"(?P<name>{_NAME})==(?P<version>{_VERSION})")
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")
# pip's requirements-file reader, restated (pip/_internal/req/req_file.py: preprocess, join_lines,
# ignore_comments, break_args_options; pip 20 to 26 read a file this way): `#` starts a comment at
# the start of a line or after whitespace; a line ending in `\` is joined with the next (a comment
# line is never continued, and a comment line that follows a continuation ends the joined line);
# the joined line's tokens are split at spaces, and the first token starting with `-` begins its
# options.
_PIP_COMMENT = re.compile(r"(^|\s+)#.*$")
_URL = re.compile(r"^https?://[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?(/[A-Za-z0-9._~%-]+)*/?$")


class PackageIndex(NamedTuple):
    """Where requirements are resolved from: PyPI, or a mirror (--index-url, PROVISION_INDEX_URL).
    A plan's own index (PyTorch's variant builds) is searched first, as an extra index."""

    url: str = PYPI
    timeout_s: int = RESOLVE_TIMEOUT_S

    @classmethod
    def default(cls, url: str | None = None) -> "PackageIndex":
        url = url or os.environ.get("PROVISION_INDEX_URL") or PYPI
        check_index_url(url, "--index-url")
        return cls(url)


class LockTarget(NamedTuple):
    """What to resolve, for which interpreter and platform, constrained to the plan's CUDA wheels."""

    requirement: str  # "tensorflow[and-cuda]==2.15.0"
    python: str  # "3.10"
    platform: str  # uv --python-platform: "x86_64-manylinux_2_35"
    extra_index: str | None  # the plan's index (PyTorch variant builds), searched before the main one
    constraints: tuple[str, ...]  # "nvidia-cudnn-cu12==8.9.4.25", ...
    # the plan's stack packages ("deepspeed==0.16.4") and what building its sdists needs (setuptools)
    more: tuple[str, ...] = ()
    # the second index a stack row of the catalogue names for its libraries (NVIDIA's), never user input
    library_index: str | None = None
    # distributions locked as sdists (their hashes pinned; uv may read their metadata): all else is wheels
    sdists: tuple[str, ...] = ()
    # the sdists' build requirements that are none of the image's own requirements (canonical names)
    build: tuple[str, ...] = ()

    @property
    def extra_indexes(self) -> tuple[str, ...]:
        """The plan's own indexes, in the order they are searched (before the main one)."""
        return tuple(i for i in (self.extra_index, self.library_index) if i)


class Lock(NamedTuple):
    text: str  # the file, byte for byte
    pins: dict[str, str]  # canonical name -> version
    note: str | None  # what the resolution had to do, e.g. take a post-release
    # pins only the sdists' builds need (build_only): the build stage installs them, the image not
    build_only: tuple[str, ...] = ()


def check_index_url(url: str, what: str) -> str:
    if "@" in url or not _URL.fullmatch(url):
        raise InputError(
            f"{what} {url!r} is not a package index URL",
            hint="give http(s)://HOST[:PORT]/PATH without credentials, query or spaces "
            "(credentials go in ~/.netrc, never in a URL that is written into the lock)",
        )
    return url


def uv_platform(glibc: str, platform: str | None) -> str:
    """uv's --python-platform for an image: the CPU of --platform (default linux/amd64) and the
    manylinux level of the image OS's glibc (images/os.yaml)."""
    arch = ARCHES.get(platform or "linux/amd64")
    if arch is None:
        raise InputError(f"--platform {platform!r} is not supported", hint=f"one of: {', '.join(ARCHES)}")
    return f"{arch}-manylinux_{glibc.replace('.', '_')}"


def cuda_major(fw: PlanFramework) -> str:
    return fw.cuda.split(".")[0]


def plan_constraints(fw: PlanFramework) -> tuple[str, ...]:
    """The plan's CUDA wheels as constraints: cuDNN exactly, and the CUDA runtime (the runtime
    wheel up to CUDA 12; the cuda-toolkit metapackage that carries it from CUDA 13 on), exactly or
    within the plan's CUDA release."""
    if fw.libraries != "wheels":
        return ()
    major = cuda_major(fw)
    out = []
    if fw.cudnn:
        out.append(f"nvidia-cudnn-cu{major}=={fw.cudnn}")
    if fw.cuda_runtime:
        # a range (">=12.5.82,<13.0": the wheel's own floor) is held to the plan's CUDA release
        spec = f"{fw.cuda_runtime},=={fw.cuda}.*" if fw.cuda_runtime[0] in "<>=!~" else f"=={fw.cuda_runtime}"
        out.append(f"{'cuda-toolkit' if int(major) >= 13 else f'nvidia-cuda-runtime-cu{major}'}{spec}")
    return tuple(out)


def check_requirement(fw: PlanFramework) -> str:
    """The plan's requirement, as one `name[extra]==version`: no options, URLs or markers."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    text = fw.requirement
    try:
        req = Requirement(text)
    except InvalidRequirement:
        req = None
    bad = (
        req is None
        or req.url
        or req.marker
        or canonicalize_name(req.name) != canonicalize_name(fw.package)
        or len(req.specifier) != 1
        or next(iter(req.specifier)).operator != "=="
        or not re.fullmatch(rf"{_NAME}(\[{_NAME}(,{_NAME})*\])?=={_VERSION}", text)
    )
    if bad:
        raise InputError(
            f"the plan's framework requirement {text!r} is not `{fw.package}[extra]==VERSION`",
            hint="requirements carry no options, URLs or markers; re-plan with provision plan --framework NAME==VERSION",
        )
    return text


def requirement_name(pkg: PlanStackPackage) -> str:
    """The distribution a stack package's requirement installs (canonical): the package's own name
    (tensorrt, the selector of its default build), or one of its distributions (tensorrt-cu12, the
    meta package of another build line: what the plan's requirement names then)."""
    m = re.match(rf"({_NAME})", pkg.requirement)
    return _canonical(m[1]) if m else _canonical(pkg.pip)


def _plain_requirement(text: str):
    """The requirement `text` as packaging reads it, or None when it does not parse or carries a URL
    or an environment marker (what no requirement of a plan or the catalogue may carry)."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    return None if req.url or req.marker else req


def check_stack_requirement(pkg: PlanStackPackage) -> str:
    """A stack package's requirement, as one `name[extra]==install`: no options, URLs or markers;
    the name is the package's or one of its distributions' (a build line's meta package)."""
    from packaging.utils import canonicalize_name

    req = _plain_requirement(pkg.requirement)
    if (
        req is None
        or canonicalize_name(req.name)
        not in {canonicalize_name(n) for n in (pkg.pip, *(d for d, _ in pkg.distributions))}
        or [(s.operator, s.version) for s in req.specifier] != [("==", pkg.install)]
        or not re.fullmatch(rf"{_NAME}(\[{_NAME}(,{_NAME})*\])?=={_VERSION}", pkg.requirement)
    ):
        raise InputError(
            f"the plan's stack requirement {pkg.requirement!r} is not `{pkg.pip}[extra]=={pkg.install}`",
            hint="requirements carry no options, URLs or markers; re-plan with provision plan --with NAME==VERSION",
        )
    return pkg.requirement


def source_builds(stack: tuple[PlanStackPackage, ...]) -> tuple[str, ...]:
    """The distributions of the stack that the image builds from their sdists (canonical names):
    every one the plan marks sdist, except a package's -libs stub where the catalogue names a
    library index (its build would download the real wheel unhashed: the lock takes that wheel from
    the library index instead)."""
    out: list[str] = []
    for pkg in stack:
        for name, kind in pkg.distributions:
            if kind != "sdist" or (pkg.library_index and _canonical(name).endswith("-libs")):
                continue
            if _canonical(name) not in out:
                out.append(_canonical(name))
    return tuple(out)


def stack_library_index(stack: tuple[PlanStackPackage, ...]) -> str | None:
    """The one library index the plan's stack rows name (the catalogue's), checked; two are refused."""
    found = sorted({pkg.library_index for pkg in stack if pkg.library_index})
    if len(found) > 1:
        raise InputError(
            f"the plan's stack names {len(found)} library indexes ({', '.join(found)})",
            hint="a lock takes at most one second index, the catalogue's; re-plan with provision plan",
        )
    return check_index_url(found[0], "the plan's library_index") if found else None


def lock_target(
    fw: PlanFramework | None, *, python: str, platform: str, stack: tuple[PlanStackPackage, ...] = ()
) -> LockTarget:
    """What to lock for an image: the framework (if any) and the plan's stack packages, with the
    build requirements of the sdists it builds (their [build-system] requires, or PEP 517's
    fallback) so the build stage installs them from the same hashed lock."""
    if fw is None and not stack:
        raise InputError("nothing to lock: the plan has no framework and no stack", hint="plan with --framework")
    requirements = [check_requirement(fw)] if fw is not None else []
    requirements += [check_stack_requirement(pkg) for pkg in stack]
    extra = check_index_url(fw.index_url, "the plan's index_url") if fw is not None and fw.index_url else None
    sdists = source_builds(stack)
    built = [pkg for pkg in stack if any(_canonical(n) in sdists for n, _ in pkg.distributions)]
    needs: list[str] = []
    for pkg in built:
        for requirement in pkg.build_requires or LEGACY_BUILD_REQUIRES:
            if requirement not in needs and requirement not in requirements:
                needs.append(_check_build_requirement(requirement))
    constraints = plan_constraints(fw) if fw is not None else ()
    own = {_requirement_key(r) for r in requirements}
    return LockTarget(
        requirements[0],
        python,
        platform,
        extra,
        constraints,
        tuple(requirements[1:] + needs),
        stack_library_index(stack),
        sdists,
        tuple(dict.fromkeys(k for r in needs if (k := _requirement_key(r)) not in own)),
    )


def _requirement_key(text: str) -> str:
    """The canonical distribution name a requirement (checked before) names."""
    m = re.match(rf"\s*({_NAME})", text)
    return _canonical(m[1]) if m else text


def _check_build_requirement(text: str) -> str:
    """A build requirement of the catalogue's (`setuptools>=64`, `torch`): a name and specifiers only."""
    if _plain_requirement(text) is None or not re.fullmatch(
        rf"{_NAME}(\[{_NAME}(,{_NAME})*\])?[<>=!~.,0-9*a-z]*", text
    ):
        raise InputError(
            f"the plan's build requirement {text!r} is not NAME[SPECIFIERS]",
            hint="build requirements come from the catalogue; re-plan with provision plan",
        )
    return text


# -- reading and checking ---------------------------------------------------------------------
def check_lock_text(text: str, origin: str) -> None:
    """Refuse what would make pip read other lines than this module checks: any character at which
    ``str.splitlines()`` (pip's) breaks a line but ``split("\\n")`` does not (``\\r``, ``\\x0b``,
    ``\\x0c``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028, U+2029), every other control character but the
    newline (tab included: pip splits a line's tokens at spaces only), and the bidirectional overrides
    that hide text in a review. The line is named, its content never shown."""
    from provision.documents import control_character

    for number, line in enumerate(text.split("\n"), 1):
        found = control_character(line) or ("U+0009" if "\t" in line else None)
        if found:
            raise InputError(
                f"{origin}: line {number} holds the control character {found}",
                hint="a lock is plain text with Unix line endings: pip breaks lines at characters a review "
                "shows inside one line, so what pip installs would not be what was checked",
            )


def _pip_lines(lines: list[str]) -> list[tuple[int, str]]:
    """pip's logical lines (first physical line number, text) of a file's physical lines, comments
    removed: join_lines then ignore_comments of pip/_internal/req/req_file.py, step for step."""
    joined: list[tuple[int, str]] = []
    pending: list[str] = []
    first = 0
    for number, physical in enumerate(lines, 1):
        if not physical.endswith("\\") or _PIP_COMMENT.match(physical):
            # pip: a comment line gets a leading space, so it is removed from the joined line below
            line = " " + physical if _PIP_COMMENT.match(physical) else physical
            if pending:
                pending.append(line)
                joined.append((first, "".join(pending)))
                pending = []
            else:
                joined.append((number, line))
        else:
            if not pending:
                first = number
            pending.append(physical.strip("\\"))
    if pending:
        joined.append((first, "".join(pending)))
    out = []
    for number, line in joined:
        bare = _PIP_COMMENT.sub("", line).strip()
        if bare:
            out.append((number, bare))
    return out


def _break_args_options(line: str) -> tuple[str, str]:
    """pip's break_args_options: the requirement, and the options from the first token starting with `-`."""
    tokens = line.split(" ")
    args: list[str] = []
    for token in tokens:
        if token.startswith("-"):
            break
        args.append(token)
    return " ".join(args), " ".join(tokens[len(args) :])


def parse_lock(text: str, origin: str) -> dict[str, str]:
    """name -> version of a lock, read as pip reads it: every logical line (continued with `\\`) is
    one `name==version` followed by `--hash=sha256:…` options only; comments where pip sees them.
    Options, URLs, extras, markers, editables and environment variables are refused."""
    return parse_requirements(text, origin)[0]


def parse_requirements(text: str, origin: str, *, index_option: bool = False) -> tuple[dict[str, str], str | None]:
    """parse_lock's pins, and with `index_option` the one `--index-url URL` line a lock may then hold
    (a package index URL without credentials; provision ci's gpu-provision.lock names its index so)."""
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    index: str | None = None
    check_lock_text(text, origin)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if lines and lines[-1].endswith("\\") and not _PIP_COMMENT.match(lines[-1]):
        raise InputError(f"{origin}: the last line ends with a continuation `\\`", hint="end it with a hash")
    pins: dict[str, str] = {}
    hashed: dict[str, bool] = {}
    for number, line in _pip_lines(lines):
        args, options = _break_args_options(line)
        requirement = args.strip()
        option_tokens = [t for t in options.split(" ") if t]
        problem = None
        if index_option and not requirement and len(option_tokens) == 2 and option_tokens[0] == "--index-url":
            if index is not None:
                raise InputError(f"{origin}: line {number}: a second --index-url", hint="name one index")
            try:
                index = check_index_url(option_tokens[1], "--index-url")
            except InputError as exc:  # its message would show the file's text
                raise InputError(
                    f"{origin}: line {number}: --index-url is not a package index URL", hint=exc.hint
                ) from None
            continue
        if not requirement:
            problem = "it sets a pip option"
        elif not (m := _PIN.fullmatch(requirement)):
            problem = "its requirement is not name==version"
        elif not all(_HASH.fullmatch(t) for t in option_tokens):
            problem = "it has an option other than --hash=sha256:<64 hex digits>"
        if problem is not None:
            raise InputError(
                f"{origin}: line {number} is not a `name==version --hash=sha256:…` line ({problem})",
                hint="a lock holds only hash-pinned requirements and comments: no options, URLs, -e or "
                "--index-url (generate one with provision render)",
            )
        try:
            Version(m["version"])
        except InvalidVersion:
            raise InputError(
                f"{origin}: line {number}: the pin's version is not a version", hint="pin name==VERSION"
            ) from None
        name = canonicalize_name(m["name"])
        if name in pins:
            raise InputError(f"{origin}: line {number}: {name} is pinned twice", hint="keep one pin")
        pins[name] = m["version"]
        hashed[name] = bool(option_tokens)
    if unhashed := [n for n, h in hashed.items() if not h]:
        raise InputError(
            f"{origin}: {', '.join(unhashed)} carries no --hash=sha256:", hint="every pin needs its hashes"
        )
    if not pins:
        raise InputError(f"{origin}: no requirements", hint="generate a lock with provision render")
    return pins, index


def _same_release(locked: str, planned: str) -> bool:
    """`locked` is the planned version, or a post-release or local build of it (2.15.0.post1, 2.5.1+cu121)."""
    from packaging.version import Version

    a, b = Version(locked), Version(planned)
    pad = max(len(a.release), len(b.release))
    return (
        a.epoch == b.epoch
        and a.release + (0,) * (pad - len(a.release)) == b.release + (0,) * (pad - len(b.release))
        and a.pre == b.pre
        and a.dev == b.dev
        and (b.post is None or a.post == b.post)
    )


def check_against_plan(
    pins: dict[str, str], fw: PlanFramework | None, origin: str, stack: tuple[PlanStackPackage, ...] = ()
) -> None:
    """Refuse a lock that contradicts the plan: another framework version, another cuDNN, a CUDA
    runtime outside the plan's, or CUDA wheels for a build that uses the image's CUDA; a stack
    package at another version than the plan installs, or one of its distributions missing."""
    hint = "re-render without --lock-file to resolve a lock for this plan" if "lock-file" in origin else None

    def refuse(problem: str) -> None:
        raise InputError(f"{origin} contradicts the plan: {problem}", hint=hint or "check the plan's framework build")

    for pkg in stack:
        name = requirement_name(pkg)
        if name not in pins:
            refuse(f"it does not install {name} (the plan's {pkg.id})")
        if pins[name] != pkg.install:
            refuse(f"it installs {name}=={pins[name]}, the plan {name}=={pkg.install}")
        for dist, kind in pkg.distributions:
            if _canonical(dist) not in pins:
                refuse(f"it does not pin {dist}, a {kind} of the plan's {pkg.id} {pkg.version}")
            # each distribution of the build is the plan's release (or a post release of it: TensorRT
            # 10.14.1.48's bindings exist only as .post1); pip installs them --no-deps, so a lock that
            # pinned another would go into the image unchecked
            if not _same_release(pins[_canonical(dist)], pkg.version):
                refuse(f"it installs {dist}=={pins[_canonical(dist)]}, a {kind} of the plan's {pkg.id} {pkg.version}")
    if fw is not None:
        _check_framework(pins, fw, refuse)


def _check_framework(pins: dict[str, str], fw: PlanFramework, refuse) -> None:
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    package = canonicalize_name(fw.package)
    if package not in pins:
        refuse(f"it does not install {fw.package}")
    if not _same_release(pins[package], fw.version):
        refuse(f"it installs {fw.package}=={pins[package]}, the plan {fw.package}=={fw.version}")
    cudnn = {n: v for n, v in pins.items() if re.fullmatch(r"nvidia-cudnn(-cu\d+)?", n)}
    runtime = {n: v for n, v in pins.items() if re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?|cuda-toolkit", n)}
    if fw.libraries != "wheels":
        if cudnn or runtime:
            found = ", ".join(f"{n}=={v}" for n, v in {**cudnn, **runtime}.items())
            refuse(f"the plan's build uses the image's CUDA and cuDNN, the lock brings {found}")
        return
    if fw.cudnn:
        if not cudnn:
            refuse(f"the plan's cuDNN {fw.cudnn} comes from wheels, the lock has no nvidia-cudnn wheel")
        for name, version in cudnn.items():
            if Version(version) != Version(fw.cudnn):
                refuse(f"it installs {name}=={version}, the plan cuDNN {fw.cudnn}")
    for name, version in runtime.items():
        if ".".join(str(p) for p in Version(version).release[:2]) != fw.cuda:
            refuse(f"it installs {name}=={version}, outside the plan's CUDA {fw.cuda}")
    if fw.cuda_runtime:
        spec = SpecifierSet(fw.cuda_runtime if fw.cuda_runtime[0] in "<>=!~" else f"=={fw.cuda_runtime}")
        carrier = "cuda-toolkit" if "cuda-toolkit" in runtime else next(iter(sorted(runtime)), None)
        if carrier is None:
            refuse(f"the plan's CUDA runtime {fw.cuda_runtime} comes from wheels, the lock has none")
        elif not spec.contains(runtime[carrier], prereleases=True):
            refuse(f"it installs {carrier}=={runtime[carrier]}, the plan CUDA runtime {fw.cuda_runtime}")


_INDEX_HEADER = re.compile(r"^# (extra index \(searched first\)|library index \(the catalogue's\)): (.*)$")


def check_lock_indexes(text: str, target: LockTarget | None, origin: str) -> None:
    """A lock's header names the indexes beyond the main one it was resolved from; each must be one
    of the plan's own (its framework build's index, the catalogue's library index), or pip's hashes
    would have been checked against files of an index the plan never named."""
    allowed = set(target.extra_indexes) if target is not None else set()
    for number, line in enumerate(text.split("\n"), 1):
        m = _INDEX_HEADER.match(line)
        if m and m[2] not in allowed:
            raise InputError(
                f"{origin}: line {number} names a second index that is not the plan's",
                hint="a lock is resolved from the main index and the plan's own indexes only (its framework "
                "build's, the catalogue's library index); re-render without --lock-file",
            )


def read_lock_file(
    path: str, fw: PlanFramework | None, stack: tuple[PlanStackPackage, ...] = (), target: LockTarget | None = None
) -> Lock:
    """A committed lock, reused byte for byte once it passes both checks (read as untrusted: not
    through a symbolic link, bounded, UTF-8; its content is never shown in an error)."""
    from provision.documents import read_text

    origin = f"--lock-file {path}"
    text = read_text(path, "--lock-file", max_bytes=MAX_LOCK_BYTES)
    pins = parse_lock(text, origin)
    check_lock_indexes(text, target, origin)
    check_against_plan(pins, fw, origin, stack)
    return Lock(text, pins, None)


# -- resolving --------------------------------------------------------------------------------
def _uv() -> str:
    try:
        from uv import find_uv_bin
    except ImportError:
        raise ToolingError(
            "uv is not installed", hint="pip install gpu-provision (uv is one of its dependencies)"
        ) from None
    try:
        return find_uv_bin()
    except FileNotFoundError:
        raise ToolingError("the uv binary is missing", hint="reinstall uv: pip install --force-reinstall uv") from None


def uv_version() -> str:
    proc = subprocess.run([_uv(), "--version"], capture_output=True, text=True, timeout=30, check=False)
    return proc.stdout.strip() or "uv"


class _Unresolvable(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def compile_lock(target: LockTarget, requirement: str, index: PackageIndex) -> str:
    """uv pip compile, in a scratch directory (so its annotations name no temporary paths)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k in _UV_ENV}
    env["NO_COLOR"] = "1"
    with tempfile.TemporaryDirectory(prefix="provision-lock-") as tmp:
        with open(os.path.join(tmp, "requirements.in"), "w", encoding="utf-8") as handle:
            handle.write("".join(r + "\n" for r in (requirement, *target.more)))
        with open(os.path.join(tmp, "constraints.txt"), "w", encoding="utf-8") as handle:
            handle.write("".join(c + "\n" for c in target.constraints))
        argv = [
            _uv(), "pip", "compile", "requirements.in", "--constraints", "constraints.txt",
            "--generate-hashes", "--no-config", "--no-header", "--quiet", "--color", "never",
            "--no-python-downloads", "--python", sys.executable,
            "--python-version", target.python, "--python-platform", target.platform,
            "--index-url", index.url,
        ]  # fmt: skip
        # wheels only, but for the planned sdists (their hashes are locked; uv reads their metadata)
        argv += ["--only-binary", ":all:"] + [a for name in target.sdists for a in ("--no-binary", name)]
        for extra in target.extra_indexes:
            argv += ["--extra-index-url", extra]
        if target.library_index:  # which index each pin came from: the header names the library index's
            argv += ["--emit-index-annotation"]
        try:
            proc = subprocess.run(
                argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=index.timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise ToolingError(
                f"resolving {requirement} took longer than {index.timeout_s} s",
                hint=f"is {index.url} reachable? set --index-url to a mirror",
            ) from None
    if proc.returncode == 0:
        return proc.stdout
    err = proc.stderr.strip()
    if "No solution found" in err:
        raise _Unresolvable(_reason(err))
    if re.search(r"(?i)failed to fetch|error sending request|dns error|connect|timed out|certificate", err):
        raise ToolingError(
            f"the package index did not answer while resolving {requirement}: {_last(err)}",
            hint=f"check the network and {' and '.join((*target.extra_indexes, index.url))}, "
            "or pass --index-url MIRROR, or --lock-file a committed lock",
        )
    raise OperationFailed(
        f"uv could not resolve {requirement}: {_last(err)}",
        hint="retry; if it persists, resolve by hand (uv pip compile --generate-hashes) and pass --lock-file",
    )


def _reason(err: str) -> str:
    """uv's explanation on one line: "Because there is no version of tensorrt-libs==8.6.1 and …"."""
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    body = [ln.removeprefix("cause:").removeprefix("╰─▶").strip() for ln in lines if "No solution found" not in ln]
    return " ".join(body) or _last(err)


def _last(err: str) -> str:
    """uv's error on one line: the error and its last cause."""
    lines = [ln.strip().removeprefix("error:").strip() for ln in err.splitlines() if ln.strip()]
    if not lines:
        return "no output"
    return lines[0] if len(lines) == 1 else f"{lines[0]} ({lines[-1]})"


def _post_releases(requirement: str) -> str | None:
    """`name[extra]==V` -> a requirement for V's post-releases only (V.post0 <= x < V.1)."""
    from packaging.version import Version

    name, _, version = requirement.partition("==")
    v = Version(version)
    if v.pre or v.dev or v.post is not None or v.local:
        return None
    upper = ".".join(map(str, (*v.release, 1)))
    return f"{name}>={version}.post0,<{upper}"


def resolve_lock(
    target: LockTarget, index: PackageIndex, fw: PlanFramework | None, stack: tuple[PlanStackPackage, ...] = ()
) -> Lock:
    """Resolve and check. A pin that cannot be installed is retried once as its post-releases
    (tensorflow[and-cuda]==2.15.0 -> 2.15.0.post1, which dropped the unpublished tensorrt pin) and taken
    only when that lock also passes the plan check; otherwise refused with uv's reason."""
    note = None
    try:
        body = compile_lock(target, target.requirement, index)
    except _Unresolvable as first:
        post = _post_releases(target.requirement)
        try:
            if post is None:
                raise _Unresolvable(first.reason) from None
            body = compile_lock(target, post, index)
        except _Unresolvable:
            raise InputError(
                f"{target.requirement} cannot be installed on Python {target.python} ({target.platform}): "
                f"{first.reason}",
                hint="plan another release of the framework (provision plan ... --framework NAME==VERSION)"
                + ("; none of its post-releases resolves either" if post else ""),
            ) from None
        main = fw.package if fw is not None else requirement_name(stack[0])
        chosen = parse_lock(body, "the resolved lock").get(_canonical(main))
        note = (
            f"{target.requirement} cannot be installed ({first.reason}); locked its post-release "
            f"{main}=={chosen}, whose CUDA and cuDNN wheels are the plan's"
        )
    header = _header(target, index, note, library=from_index(body, target.library_index))
    text = header + body
    pins = parse_lock(text, "the resolved lock")
    check_against_plan(pins, fw, "the resolved lock", stack)
    return Lock(text, pins, note)


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return canonicalize_name(name)


def from_index(body: str, url: str | None) -> tuple[str, ...]:
    """The pins (canonical names) uv's index annotations (`# from URL`, --emit-index-annotation)
    say came from `url`: the library index's wheels, TensorRT's -libs among them."""
    if url is None:
        return ()
    found: list[str] = []
    current = None
    for line in body.split("\n"):
        m = _PIN.match(line)
        if m:
            current = _canonical(m["name"])
        elif current and line.strip().startswith("# from ") and line.strip()[7:].rstrip("/") == url.rstrip("/"):
            found.append(current)
    return tuple(dict.fromkeys(found))


def _header(target: LockTarget, index: PackageIndex, note: str | None, library: tuple[str, ...] = ()) -> str:
    lines = [
        f"# {LOCK_NAME} for {' '.join((target.requirement, *target.more))}: every package pinned with its hashes.",
        f"# Resolved by {uv_version()} for Python {target.python} on {target.platform}.",
        f"# index: {index.url}",
    ]
    if target.extra_index:
        lines.append(f"# extra index (searched first): {target.extra_index}")
    if target.library_index:
        lines.append(f"# library index (the catalogue's): {target.library_index}")
        taken = " ".join(library) or "nothing"
        lines.append(f"# from the library index: {taken}")
    if target.sdists:
        lines.append(f"# sdists (hashes of the source archives, built in the image): {' '.join(target.sdists)}")
    if target.constraints:
        lines.append(f"# constraints (the plan's CUDA wheels): {' '.join(target.constraints)}")
    if note:
        lines.append(f"# note: {note}")
    lines.append(f"# install: {INSTALL_STACK if target.sdists else INSTALL}")
    return "\n".join(lines) + "\n"


def image_lock(
    fw: PlanFramework | None,
    *,
    python: str,
    platform: str,
    lock_file: str | None = None,
    index: PackageIndex | None = None,
    stack: tuple[PlanStackPackage, ...] = (),
) -> Lock:
    """The lock for a framework or stack image: the committed one (checked), or a fresh resolution."""
    target = lock_target(fw, python=python, platform=platform, stack=stack)
    if lock_file is not None:
        lock = read_lock_file(lock_file, fw, stack, target)
    else:
        lock = resolve_lock(target, index or PackageIndex.default(), fw, stack)
    return lock._replace(build_only=build_only(lock.text, target))


_VIA_ONE = re.compile(r"^\s+# via (?P<what>\S.*)$")
_VIA_MORE = re.compile(r"^\s+#   (?P<what>\S.*)$")


def via_annotations(text: str) -> dict[str, set[str]]:
    """uv's `# via` annotations of a lock: canonical pin name -> what brought it (canonical package
    names, `-r` for the requirements given, `-c` for a constraint). A pin without one is absent."""
    via: dict[str, set[str]] = {}
    current: str | None = None
    listing = False
    for line in text.split("\n"):
        m = _PIN.match(line)
        if m:
            current, listing = _canonical(m["name"]), False
            continue
        if current is None:
            continue
        if line.strip() == "# via":
            listing = True
            continue
        found = _VIA_ONE.match(line) or (_VIA_MORE.match(line) if listing else None)
        if found:
            what = found["what"].strip()
            if what.startswith(("-r ", "-c ")):
                key = what[:2]
            else:
                name = re.match(rf"({_NAME})", what)
                key = _canonical(name[1]) if name else what
            via.setdefault(current, set()).add(key)
        elif not line.startswith(" ") and line.strip():
            current, listing = None, False
    return via


def build_only(text: str, target: LockTarget) -> tuple[str, ...]:
    """The pins that only the sdists' builds need (canonical names, in the lock's order): what
    target.build brings in (setuptools and wheel, the catalogue's build requirements) and nothing
    the image's own requirements bring in, read from uv's `# via` annotations. A pin the image's
    requirements name, a pin without annotations (a hand-written lock), and everything they
    depend on stay in the image: only what the annotations prove build-only leaves it."""
    if not target.build:
        return ()
    pins = parse_lock(text, "the lock")
    via = via_annotations(text)
    needed_by: dict[str, set[str]] = {}  # package -> the pins it requires
    for pin, sources in via.items():
        for source in sources:
            needed_by.setdefault(source, set()).add(pin)
    build = set(target.build)
    runtime = [p for p in pins if p not in via or ("-r" in via[p] and p not in build)]
    seen = set(runtime)
    while runtime:
        for dep in needed_by.get(runtime.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                runtime.append(dep)
    return tuple(p for p in pins if p not in seen)


def split_lock(text: str, sdists: tuple[str, ...], build: tuple[str, ...] = ()) -> tuple[str, str, str]:
    """A checked lock as three files pip reads the same way: the image's wheels (installed with
    --only-binary=:all:), the sdists (built with pip wheel) and the wheels only the sdists' builds
    need (`build`, build_only's names: installed in the build stage only). Each is pip's logical lines of the
    lock (continuations joined, comments dropped), one requirement with its hashes per line."""
    wheels: list[str] = []
    sources: list[str] = []
    builds: list[str] = []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    for _, line in _pip_lines(lines):
        requirement, options = _break_args_options(line)
        m = _PIN.fullmatch(requirement.strip())
        if m is None:  # parse_lock refuses such a lock before it gets here
            raise InputError("the lock holds a line that is not a pin", hint="check it with provision render")
        entry = " ".join([requirement.strip(), *(t for t in options.split(" ") if t)])
        name = _canonical(m["name"])
        (sources if name in sdists else builds if name in build else wheels).append(entry)
    return tuple("".join(line + "\n" for line in part) for part in (wheels, sources, builds))
