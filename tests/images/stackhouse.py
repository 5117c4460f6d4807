"""Stand-in stack packages for a local package index: ONNX Runtime wheels and DeepSpeed sdists whose
metadata mirrors the catalogue's rows (compat/stacks.yaml), an importable torch, and the build
backend an sdist needs. Built at test time, served by wheelhouse.serve on 127.0.0.1.

- onnxruntime-gpu: one wheel per CPython minor of the row's Python range and architecture, tagged
  at the row's manylinux level, its Requires-Python and extras (`[cuda]`, `[cudnn]`: the CUDA and
  cuDNN wheels) the row's; a module `onnxruntime` with the release's `__version__` and
  `get_available_providers()` naming the providers the build ships (a provider library in the row's
  `sonames`: TensorRT and CUDA, then the CPU provider, as the real one lists them).
- deepspeed: an sdist as the real one is (setup.py, no pyproject.toml: the default setuptools
  backend; PKG-INFO with the row's Requires-Dist, and the Metadata-Version and Dynamic fields of the
  recorded PKG-INFO, tests/fixtures/refresh/stacks, where the row's file has one: `requires-dist`
  is dynamic from 0.16.3, so a resolver must build it to know its requirements). Its setup.py
  imports torch, as DeepSpeed's does (deepspeedai/DeepSpeed#7286, #4984: `pip install deepspeed`
  fails where torch is not installed), so a build with isolation on fails and with isolation off
  against the installed torch succeeds; it records torch's version and CUDA in
  deepspeed/git_version_info_installed.py as DeepSpeed's does. The wheel it builds has a
  `deepspeed` package with `__version__`, `deepspeed.ops.op_builder` whose builders' is_compatible()
  checks what DeepSpeed's op builder checks before a JIT build (nvcc under CUDA_HOME, else on PATH,
  else /usr/local/cuda, as torch finds it; its major.minor is torch.version.cuda's unless both are
  in the release's cuda_minor_mismatch_ok, the row's nvcc_minor_mismatch_ok), and `ds_report`.
- torch: wheelhouse's torch wheels (their metadata: the CUDA runtime and cuDNN wheels) with a `torch`
  package added: `__version__` (`2.15.0+cu132`, the default build's variant as the local part),
  `version.cuda` the build's CUDA, `cuda.is_available()` False (no GPU here),
  `backends.cudnn.version()` from the nvidia-cudnn wheel installed beside it, in torch's encoding.
- setuptools: a stand-in build backend (`setuptools.build_meta` and its `__legacy__`, for setup.py
  projects) that runs setup.py and writes a py3-none-any wheel itself, as setuptools does from
  70.1.0 (its changelog: "Adopted the bdist_wheel command from the wheel project"); before that a
  build needed the `wheel` package too. The real one cannot be fetched (test traffic stays on
  127.0.0.1), and the setuptools a venv bundles (Debian 12's 66.1.1) builds no wheel without it.
- whatever else a row requires (nvidia-cufft, nvidia-curand, nvidia-cuda-nvrtc for ONNX Runtime's
  `[cuda]`): an empty wheel at the requirement's floor, unless the index already has a version
  that satisfies it (the CUDA runtime and cuDNN wheels wheelhouse makes for the frameworks).

Zip and tar timestamps are fixed and gzip's header carries no time or name, so every archive and
its hash is the same on every run.
"""

import base64
import gzip
import hashlib
import io
import re
import tarfile
import zipfile
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version
from support import COMPAT, ROOT
from wheelhouse import STAMP, canonical, catalogue_wheels, write_simple_index

RECORDED = ROOT / "tests" / "fixtures" / "refresh" / "stacks"
# setuptools 70.1.0: bdist_wheel is part of setuptools (its changelog, v70.1.0 Features)
SETUPTOOLS = "70.1.0"
MTIME = 1704067200  # 2024-01-01T00:00:00Z, wheelhouse.STAMP's moment
PROVIDERS = (("tensorrt-provider", "TensorrtExecutionProvider"), ("cuda-provider", "CUDAExecutionProvider"))
# the op builders the stand-in DeepSpeed lists (names of DeepSpeed's ops; all CUDA ops, JIT-built)
DS_OPS = ("cpu_adam", "fused_adam", "fused_lamb", "transformer", "transformer_inference")


def stack_rows(compat: Path = COMPAT) -> dict[str, dict]:
    """compat/stacks.yaml's package kinds by id."""
    doc = yaml.safe_load((compat / "stacks.yaml").read_text())
    return {p["id"]: p for p in doc["packages"]}


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def write_wheel(
    folder: Path,
    name: str,
    version: str,
    metadata: str,
    members: dict[str, str],
    *,
    tag: str = "py3-none-any",
    entry_points: str | None = None,
) -> Path:
    """A wheel of `members` (path -> text) with this METADATA; deterministic."""
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    purelib = "true" if tag.endswith("-none-any") else "false"
    files = dict(members)
    files[f"{info}/METADATA"] = metadata
    files[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: provision-tests\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n"
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points
    record = [_record_line(p, t.encode()) for p, t in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    path = folder / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member in sorted(files):
            archive.writestr(zipfile.ZipInfo(member, STAMP), files[member])
    return path


def _metadata(name: str, version: str, requires=(), *, python=None, extras=(), header=None) -> str:
    """Core metadata: `header` (the recorded Metadata-Version and Dynamic fields) where given."""
    fields = dict(header or {})
    lines = [f"Metadata-Version: {fields.get('Metadata-Version', '2.1')}", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Python: {python}"] if python else []
    lines += [f"Requires-Dist: {r}" for r in requires]
    for extra, reqs in extras:
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    lines += [f"Dynamic: {d}" for d in fields.get("Dynamic", ())]
    return "\n".join(lines) + "\n"


def recorded_header(kind: str, filename: str) -> dict | None:
    """The Metadata-Version and Dynamic fields of the recorded METADATA (wheels) or PKG-INFO
    (sdists) of a row's evidence file; None where the copy has none."""
    member = "METADATA" if kind == "wheels" else "PKG-INFO"
    path = RECORDED / kind / filename / member
    if not path.is_file():
        return None
    text = path.read_text()
    version = re.search(r"^Metadata-Version: (\S+)$", text, re.M)
    return {
        "Metadata-Version": version[1] if version else "2.1",
        "Dynamic": tuple(re.findall(r"^Dynamic: (\S+)$", text, re.M)),
    }


def cpython_minors(spec: str) -> list[str]:
    """The CPython 3.x minors a Requires-Python range admits ("3.11", ...)."""
    specifier = SpecifierSet(spec)
    return [f"3.{m}" for m in range(6, 20) if specifier.contains(f"3.{m}")]


def _requirements(requires: dict) -> list[str]:
    """A row's `requires` ({torch: ">=2.0.0"}) as requirement strings."""
    return [f"{name}{spec or ''}" for name, spec in requires.items()]


# -- ONNX Runtime -------------------------------------------------------------------------------
ORT_MODULE = '''"""Stand-in for onnxruntime-gpu {version} (provision's test index): no runtime, only what the
release reports about itself: its version and the execution providers its build ships."""

__version__ = "{version}"
_PROVIDERS = {providers!r}


def get_available_providers():
    return list(_PROVIDERS)


def get_device():
    return "GPU"
'''


def providers(build: dict) -> list[str]:
    """The providers a build ships: those whose library the row reads (sonames), then the CPU one."""
    shipped = set(build.get("sonames") or {})
    return [name for key, name in PROVIDERS if key in shipped] + ["CPUExecutionProvider"]


def onnxruntime_wheels(files: Path, package: dict) -> list[Path]:
    """Every catalogued release's wheels of its default build (one per CPython minor and arch)."""
    wheels = []
    for release in package["releases"]:
        build = next(b for b in release["builds"] if b["default"])
        version = build["pin"] or release["version"]
        extras = tuple((k, tuple(v)) for k, v in (release.get("extras") or {}).items())
        evidence = Path(build["evidence"][0]).name if build.get("evidence") else ""
        header = recorded_header("wheels", evidence)
        for dist in build["distributions"]:
            if dist["artefact"] != "wheel":
                continue
            module = ORT_MODULE.format(version=version, providers=providers(build))
            text = _metadata(dist["pip"], version, python=build["python"], extras=extras, header=header)
            for arch in build["arches"]:
                python = build["python"] if arch == "x86_64" else build["python_aarch64"]
                level = (build.get("manylinux") or {}).get(arch)
                if not python or not level:
                    continue
                for minor in cpython_minors(python):
                    cp = "cp" + minor.replace(".", "")
                    tag = f"{cp}-{cp}-manylinux_{level.replace('.', '_')}_{arch}"
                    wheels.append(
                        write_wheel(files, dist["pip"], version, text, {"onnxruntime/__init__.py": module}, tag=tag)
                    )
    return wheels


# -- DeepSpeed ----------------------------------------------------------------------------------
DS_SETUP = """# Stand-in for DeepSpeed {version}'s setup.py (provision's test index): like DeepSpeed's, it
# imports torch, so it builds only where torch is installed (pip: --no-build-isolation), and it
# records the torch it was built against in deepspeed/git_version_info_installed.py.
import torch
from setuptools import find_packages, setup

torch_info = {{
    "version": ".".join(torch.__version__.split(".")[:2]),
    "cuda_version": ".".join((torch.version.cuda or "0.0").split(".")[:2]),
}}
with open("deepspeed/git_version_info_installed.py", "w") as fd:
    fd.write("version='{version}'\\n")
    fd.write(f"torch_info={{torch_info!r}}\\n")

setup(
    name="deepspeed",
    version="{version}",
    packages=find_packages(include=["deepspeed", "deepspeed.*"]),
    install_requires={requires!r},
    entry_points={{"console_scripts": ["ds_report=deepspeed.env_report:cli_main"]}},
)
"""

DS_INIT = '''"""Stand-in for DeepSpeed {version} (provision's test index)."""

__version__ = "{version}"
try:
    from deepspeed.git_version_info_installed import torch_info
except ImportError:  # not built: the source tree
    torch_info = None
'''

DS_BUILDER = '''"""Stand-in for DeepSpeed's op_builder/builder.py: before a JIT build, DeepSpeed finds nvcc as torch
does (CUDA_HOME, else nvcc on PATH, else /usr/local/cuda) and refuses one whose major.minor is not
the CUDA torch was built with, unless both are in cuda_minor_mismatch_ok (assert_no_cuda_mismatch)."""

import os
import re
import shutil
import subprocess

cuda_minor_mismatch_ok = {mismatch_ok!r}


class MissingCUDAException(Exception):
    pass


class CUDAMismatchException(Exception):
    pass


def _cuda_home():
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return home
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    return "/usr/local/cuda" if os.path.exists("/usr/local/cuda") else None


def installed_cuda_version(name=""):
    home = _cuda_home()
    nvcc = os.path.join(home, "bin", "nvcc") if home else None
    if not nvcc or not os.path.exists(nvcc):
        raise MissingCUDAException("CUDA_HOME does not exist, unable to compile CUDA op(s)")
    out = subprocess.run([nvcc, "-V"], capture_output=True, text=True, timeout=60, check=True).stdout
    release = re.search(r"release (\\d+)\\.(\\d+)", out)
    if release is None:
        raise MissingCUDAException(nvcc + " -V names no release")
    return int(release[1]), int(release[2])


def assert_no_cuda_mismatch(name=""):
    import torch

    major, minor = installed_cuda_version(name)
    system = f"{{major}}.{{minor}}"
    compiled = ".".join((torch.version.cuda or "0.0").split(".")[:2])
    if system == compiled:
        return True
    accepted = cuda_minor_mismatch_ok.get(str(major), [])
    if system in accepted and compiled in accepted:
        return True
    raise CUDAMismatchException(
        f">- DeepSpeed Op Builder: Installed CUDA version {{system}} does not match the version torch was "
        f"compiled with {{torch.version.cuda}}, unable to compile cuda/cpp extensions without a matching cuda version."
    )


class CUDAOpBuilder:
    NAME = None

    def __init__(self):
        self.error_log = None

    def is_compatible(self, verbose=False):
        try:
            assert_no_cuda_mismatch(self.NAME)
        except (MissingCUDAException, CUDAMismatchException, OSError, subprocess.SubprocessError) as exc:
            self.error_log = str(exc)
            if verbose:
                print(f"{{self.NAME}}: {{self.error_log}}")
            return False
        self.error_log = None
        return True
'''

DS_OP_BUILDER = """\"\"\"Stand-in for DeepSpeed's op_builder: a builder per op, each a CUDA op built just in time.\"\"\"

from deepspeed.ops.op_builder.builder import CUDAOpBuilder


def _builder(op):
    return type(op.title().replace("_", "") + "Builder", (CUDAOpBuilder,), {{"NAME": op}})


{classes}
"""

DS_ALL_OPS = """from deepspeed.ops.op_builder import {names}

ALL_OPS = {{op.NAME: op for op in ({instances})}}
"""

DS_ENV_REPORT = '''"""Stand-in for DeepSpeed's ds_report: each op and whether it is compatible, and the versions."""

import sys


def cli_main():
    import torch

    import deepspeed
    from deepspeed.ops.op_builder.all_ops import ALL_OPS

    okay, no = "[OKAY]", "[NO]"
    print("op name " + "." * 16 + " installed " + ".." + " compatible")
    for name, builder in ALL_OPS.items():
        compatible = builder.is_compatible()
        print(f"{name} {'.' * (24 - len(name))} {no} ....... {okay if compatible else no}")
        if not compatible:
            print(f" [WARNING] {builder.error_log}")
    print(f"torch version .................... {torch.__version__}")
    print(f"torch cuda version ............... {torch.version.cuda}")
    print(f"deepspeed info ................... {deepspeed.__version__}")
    print(f"deepspeed wheel compiled w. ...... torch {deepspeed.torch_info['version']}, "
          f"cuda {deepspeed.torch_info['cuda_version']}")
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
'''


def deepspeed_sources(version: str, build: dict) -> dict[str, str]:
    """The files of the stand-in sdist below its top directory."""
    mismatch_ok = {str(k): list(v) for k, v in (build.get("nvcc_minor_mismatch_ok") or {}).items()}
    classes = "\n".join(f"{_class(op)} = _builder({op!r})" for op in DS_OPS)
    return {
        "setup.py": DS_SETUP.format(version=version, requires=_requirements(build["requires"] or {})),
        "deepspeed/__init__.py": DS_INIT.format(version=version),
        "deepspeed/env_report.py": DS_ENV_REPORT,
        "deepspeed/ops/__init__.py": "",
        "deepspeed/ops/op_builder/__init__.py": DS_OP_BUILDER.format(classes=classes),
        "deepspeed/ops/op_builder/builder.py": DS_BUILDER.format(mismatch_ok=mismatch_ok),
        "deepspeed/ops/op_builder/all_ops.py": DS_ALL_OPS.format(
            names=", ".join(_class(op) for op in DS_OPS), instances=", ".join(f"{_class(op)}()" for op in DS_OPS)
        ),
    }


def _class(op: str) -> str:
    return op.title().replace("_", "") + "Builder"


def write_sdist(folder: Path, name: str, version: str, pkg_info: str, sources: dict[str, str]) -> Path:
    """name-version.tar.gz: a top directory with PKG-INFO and `sources`; deterministic."""
    top = f"{name}-{version}"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for member, text in sorted({"PKG-INFO": pkg_info, **sources}.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{member}")
            info.size, info.mtime, info.mode = len(data), MTIME, 0o644
            info.uname = info.gname = ""
            archive.addfile(info, io.BytesIO(data))
    path = folder / f"{top}.tar.gz"
    with path.open("wb") as out, gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    return path


def deepspeed_sdists(files: Path, package: dict) -> list[Path]:
    """Every catalogued release's sdist."""
    sdists = []
    for release in package["releases"]:
        build = next(b for b in release["builds"] if b["default"])
        version = build["pin"] or release["version"]
        evidence = Path(build["evidence"][0]).name if build.get("evidence") else ""
        header = recorded_header("sdists", evidence)
        for dist in build["distributions"]:
            if dist["artefact"] != "sdist":
                continue
            pkg_info = _metadata(
                dist["pip"], version, _requirements(build["requires"] or {}), python=build["python"], header=header
            )
            sdists.append(write_sdist(files, dist["pip"], version, pkg_info, deepspeed_sources(version, build)))
    return sdists


# -- torch and the build backend ----------------------------------------------------------------
TORCH_MODULES = {
    "torch/__init__.py": '''"""Stand-in for torch {version} ({variant}; provision's test index): versions, no GPU."""

from torch import backends, cuda, version

__version__ = "{version}+{variant}"
''',
    "torch/version.py": 'cuda = {cuda!r}\n__version__ = "{version}+{variant}"\n',
    "torch/cuda/__init__.py": """def is_available():
    return False  # no GPU: what torch answers where no driver serves one


def device_count():
    return 0
""",
    "torch/backends/__init__.py": "from torch.backends import cudnn\n",
    "torch/backends/cudnn/__init__.py": '''from importlib import metadata


def version():
    """The cuDNN torch loads (the nvidia-cudnn wheel beside it), in torch's encoding: 9.1.0 is
    90100 from cuDNN 9 on, 8.9.2 is 8902 before."""
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("nvidia-cudnn"):
            major, minor, patch = (int(p) for p in (dist.version.split(".") + ["0", "0"])[:3])
            return major * 10000 + minor * 100 + patch if major >= 9 else major * 1000 + minor * 100 + patch
    return None


def is_available():
    return version() is not None
''',
}


def importable_torch(files: Path, compat: Path = COMPAT) -> list[Path]:
    """wheelhouse's torch wheels (catalogue_wheels wrote them to `files`) with a `torch` package added."""
    doc = yaml.safe_load((compat / "frameworks.yaml").read_text())
    done = []
    for fw in doc["frameworks"]:
        if fw["package"] != "torch":
            continue
        for release in fw["releases"]:
            build = next((b for b in release["builds"] if b["index_url"] is None), None)
            wheel = files / f"torch-{release['version']}-py3-none-any.whl"
            if build is None or not wheel.exists():
                continue
            facts = {"version": release["version"], "variant": build["variant"], "cuda": build["cuda"]}
            modules = {path: text.format(**facts) for path, text in TORCH_MODULES.items()}
            done.append(add_members(wheel, modules))
    return done


def add_members(wheel: Path, members: dict[str, str]) -> Path:
    """The wheel rewritten in place with `members` added (its RECORD written anew)."""
    with zipfile.ZipFile(wheel) as archive:
        files = {n: archive.read(n) for n in archive.namelist() if not n.endswith(".dist-info/RECORD")}
    info = next(n for n in files if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
    files.update((p, t.encode()) for p, t in members.items())
    record = [_record_line(p, data) for p, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member in sorted(files):
            archive.writestr(zipfile.ZipInfo(member, STAMP), files[member])
    return wheel


SETUPTOOLS_INIT = '''"""Stand-in for setuptools @VERSION@ (provision's test index). setup() records its arguments for
the PEP 517 backend (setuptools.build_meta), and runs the two commands pip's legacy path gives
setup.py itself (pip before 23.1 where setuptools is installed and no pyproject.toml names a
backend): `egg_info --egg-base DIR` and `bdist_wheel -d DIR`. It writes the wheel itself, as
setuptools does from 70.1.0 on (bdist_wheel adopted from the wheel project)."""

import base64
import hashlib
import os
import re
import sys
import zipfile

__version__ = "@VERSION@"
STAMP = (2024, 1, 1, 0, 0, 0)
_called = {}


def setup(**kwargs):
    _called.clear()
    _called.update(kwargs)
    argv = sys.argv[1:]
    if "egg_info" in argv:
        base = argv[argv.index("--egg-base") + 1] if "--egg-base" in argv else "."
        write_egg_info(kwargs, base)
    if "bdist_wheel" in argv:
        for flag in ("-d", "--dist-dir"):
            if flag in argv:
                write_wheel(kwargs, argv[argv.index(flag) + 1])
                break
        else:
            write_wheel(kwargs, "dist")


def find_packages(where=".", exclude=(), include=("*",)):
    from fnmatch import fnmatch

    found = []
    for root, dirs, names in os.walk(where):
        dirs.sort()
        if "__init__.py" not in names or root == where:
            continue
        package = os.path.relpath(root, where).replace(os.sep, ".")
        if any(fnmatch(package, p) for p in include) and not any(fnmatch(package, p) for p in exclude):
            found.append(package)
    return found


def _dist(kw):
    return re.sub(r"[-_.]+", "_", kw["name"])


def metadata(kw):
    lines = ["Metadata-Version: 2.1", "Name: " + kw["name"], "Version: " + kw["version"]]
    lines += ["Requires-Dist: " + r for r in kw.get("install_requires", ())]
    for extra, reqs in sorted(kw.get("extras_require", {}).items()):
        lines.append("Provides-Extra: " + extra)
        lines += ["Requires-Dist: " + r + '; extra == "' + extra + '"' for r in reqs]
    return "\\n".join(lines) + "\\n"


def entry_points(kw):
    out = []
    for group, entries in sorted(kw.get("entry_points", {}).items()):
        out.append("[" + group + "]")
        for entry in entries:
            name, _, target = entry.partition("=")
            out.append(name.strip() + " = " + target.strip())
    return "\\n".join(out) + "\\n" if out else None


def write_egg_info(kw, base):
    folder = os.path.join(base, _dist(kw) + ".egg-info")
    os.makedirs(folder, exist_ok=True)
    requires = list(kw.get("install_requires", ()))
    for extra, reqs in sorted(kw.get("extras_require", {}).items()):
        requires += ["", "[" + extra + "]", *reqs]
    texts = {"PKG-INFO": metadata(kw), "requires.txt": "\\n".join(requires) + "\\n", "entry_points.txt": entry_points(kw)}
    for name, text in texts.items():
        if text is not None:
            with open(os.path.join(folder, name), "w") as fd:
                fd.write(text)
    return folder


def write_wheel(kw, directory):
    info = _dist(kw) + "-" + kw["version"] + ".dist-info"
    files = {}
    for package in kw.get("packages", ()):
        folder = package.replace(".", "/")
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as fd:
                    files[folder + "/" + name] = fd.read()
    files[info + "/METADATA"] = metadata(kw).encode()
    files[info + "/WHEEL"] = (
        b"Wheel-Version: 1.0\\nGenerator: setuptools-stand-in\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    )
    if entry_points(kw):
        files[info + "/entry_points.txt"] = entry_points(kw).encode()
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(path + ",sha256=" + digest + "," + str(len(data)))
    files[info + "/RECORD"] = ("\\n".join([*record, info + "/RECORD,,"]) + "\\n").encode()
    name = info[: -len(".dist-info")] + "-py3-none-any.whl"
    os.makedirs(directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(directory, name), "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member in sorted(files):
            archive.writestr(zipfile.ZipInfo(member, STAMP), files[member])
    return name
'''

SETUPTOOLS_BUILD_META = '''"""PEP 517 hooks of the stand-in setuptools: run setup.py, write a py3-none-any wheel."""

import os
import runpy
import sys

import setuptools


def _run_setup():
    setuptools._called.clear()
    argv, sys.argv = sys.argv, ["setup.py"]
    sys.path.insert(0, os.getcwd())
    try:
        runpy.run_path("setup.py", run_name="__main__")
    finally:
        sys.path.remove(os.getcwd())
        sys.argv = argv
    if not setuptools._called:
        raise SystemExit("setup.py did not call setup()")
    return dict(setuptools._called)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    kw = _run_setup()
    info = os.path.join(metadata_directory, setuptools._dist(kw) + "-" + kw["version"] + ".dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as fd:
        fd.write(setuptools.metadata(kw))
    if setuptools.entry_points(kw):
        with open(os.path.join(info, "entry_points.txt"), "w") as fd:
            fd.write(setuptools.entry_points(kw))
    return os.path.basename(info)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return setuptools.write_wheel(_run_setup(), wheel_directory)


class _Legacy:
    """setuptools.build_meta:__legacy__, the backend pip takes for a project without pyproject.toml."""

    get_requires_for_build_wheel = staticmethod(get_requires_for_build_wheel)
    get_requires_for_build_sdist = staticmethod(get_requires_for_build_sdist)
    prepare_metadata_for_build_wheel = staticmethod(prepare_metadata_for_build_wheel)
    build_wheel = staticmethod(build_wheel)


__legacy__ = _Legacy()
'''


def setuptools_wheel(files: Path) -> Path:
    modules = {
        "setuptools/__init__.py": SETUPTOOLS_INIT.replace("@VERSION@", SETUPTOOLS),
        "setuptools/build_meta.py": SETUPTOOLS_BUILD_META,
    }
    return write_wheel(files, "setuptools", SETUPTOOLS, _metadata("setuptools", SETUPTOOLS, python=">=3.8"), modules)


# -- what the rows require besides --------------------------------------------------------------
def _versions_by_name(files: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in files.iterdir():
        stem = path.name.removesuffix(".tar.gz") if path.name.endswith(".tar.gz") else path.stem
        name, version = stem.split("-")[:2]
        out.setdefault(canonical(name), set()).add(version)
    return out


def _floor(specifier: SpecifierSet) -> str:
    floors = [s.version for s in specifier if s.operator in (">=", "~=", "==", "===")]
    return max(floors, key=Version) if floors else "1.0"


def dependency_wheels(files: Path, requirements: list[str]) -> list[Path]:
    """An empty wheel at the floor of each requirement that no archive in `files` satisfies."""
    made = []
    for text in requirements:
        req = Requirement(text.split(";")[0])
        have = _versions_by_name(files).get(canonical(req.name), set())
        if any(req.specifier.contains(v, prereleases=True) for v in have):
            continue
        version = _floor(req.specifier)
        stub = re.sub(r"[-_.]+", "_", canonicalize_name(req.name)) + "_stub/__init__.py"
        made.append(write_wheel(files, req.name, version, _metadata(req.name, version), {stub: ""}))
    return made


def stack_requirements(rows: dict[str, dict]) -> list[str]:
    """Every requirement the ONNX Runtime and DeepSpeed rows name (extras included), and what the
    image's lock asks for to build their sdists (their build_requires, or the lock's fallback for an
    sdist whose build system names none: provision.images.pylock.LEGACY_BUILD_REQUIRES)."""
    from provision.images import pylock

    out = []
    for ident in ("onnxruntime", "deepspeed"):
        for release in rows[ident]["releases"]:
            for reqs in (release.get("extras") or {}).values():
                out += reqs
            for build in release["builds"]:
                out += _requirements(build["requires"] or {})
                sdist = any(d["artefact"] == "sdist" for d in build["distributions"])
                if sdist:
                    out += build["build_requires"] or list(getattr(pylock, "LEGACY_BUILD_REQUIRES", ()))
    return sorted(set(out))


def build_stack_index(root: Path, compat: Path = COMPAT) -> list[Path]:
    """root/simple: the frameworks' wheels (wheelhouse, the live catalogue) with an importable torch,
    the stand-in setuptools, ONNX Runtime's wheels, DeepSpeed's sdists and what their rows require."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    rows = stack_rows(compat)
    archives = catalogue_wheels(files, (compat,))
    importable_torch(files, compat)
    archives.append(setuptools_wheel(files))
    archives += onnxruntime_wheels(files, rows["onnxruntime"])
    archives += deepspeed_sdists(files, rows["deepspeed"])
    archives += dependency_wheels(files, stack_requirements(rows))
    write_simple_index(root, archives)
    return archives
