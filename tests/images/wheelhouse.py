"""A small package index of test wheels, built at test time and served on 127.0.0.1.

The wheels are empty packages whose metadata mirrors the catalogues (the fixture one,
tests/fixtures/compat/frameworks.yaml, that the render tests plan from, then the live compat/): each
framework release requires its CUDA runtime and cuDNN wheels the way the real one does (PyTorch
exactly, TensorFlow's [and-cuda] extra with floors), a newer cuDNN is on offer beside the planned one
(so only the plan's constraints keep it out), and tensorflow[and-cuda]==2.15.0 needs a tensorrt-libs
that the index lacks while 2.15.0.post1 does not, as on the real index. Zip timestamps are fixed,
so the wheels and their hashes are the same on every run.
"""

import base64
import hashlib
import http.server
import re
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet
from support import COMPAT, FIXTURE_COMPAT

STAMP = (2024, 1, 1, 0, 0, 0)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def make_wheel(folder: Path, name: str, version: str, requires=(), *, python: str | None = None, extras=()) -> Path:
    """A valid py3-none-any wheel with this metadata and one empty module."""
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Python: {python}"] if python else []
    metadata += [f"Provides-Extra: {e}" for e in extras]
    metadata += [f"Requires-Dist: {r}" for r in requires]
    files = {
        f"{dist.lower()}_stub/__init__.py": "",
        f"{info}/METADATA": "\n".join(metadata) + "\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: provision-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(zipfile.ZipInfo(member, STAMP), text)
    return path


def write_simple_index(root: Path, wheels: list[Path], prefix: str = "simple") -> None:
    """PEP 503 pages under root/<prefix>/<name>/ linking the wheels (kept in root/files/) with sha256 fragments."""
    by_name: dict[str, list[Path]] = {}
    for wheel in wheels:
        by_name.setdefault(canonical(wheel.name.split("-")[0]), []).append(wheel)
    up = "../" * (prefix.count("/") + 2)
    for name, files in by_name.items():
        page = root / prefix / name
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(
            f'<a href="{up}files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a>\n'
            for w in sorted(files)
        )
        (page / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")


def catalogue_wheels(files: Path, catalogues: tuple[Path, ...] = (FIXTURE_COMPAT, COMPAT)) -> list[Path]:
    """Wheels for every default (package-index) framework build of the catalogues, and their CUDA
    wheels. A release in more than one catalogue is built once, from the first (the fixture's, so
    the render tests' index never changes with a refresh of compat/)."""
    wheels: list[Path] = []
    made: set[tuple[str, str]] = set()
    cuda_wheels: set[tuple[str, str, tuple[str, ...]]] = set()
    for compat in catalogues:
        doc = yaml.safe_load((compat / "frameworks.yaml").read_text())
        for fw in doc["frameworks"]:
            for release in fw["releases"]:
                if (fw["package"], release["version"]) not in made:
                    made.add((fw["package"], release["version"]))
                    wheels += release_wheels(files, fw, release, cuda_wheels)
    for name, version, requires in sorted(cuda_wheels):
        extras = ("cudart",) if name == "cuda-toolkit" else ()
        wheels.append(make_wheel(files, name, version, list(requires), extras=extras))
    return wheels


def release_wheels(files: Path, fw: dict, release: dict, cuda_wheels: set) -> list[Path]:
    """The framework wheel(s) of one release's default build; the CUDA wheels it needs go to cuda_wheels."""
    wheels: list[Path] = []
    build = next((b for b in release["builds"] if b["index_url"] is None), None)
    if build is None:
        return wheels
    requires, extras = [], ()
    marker = ""
    if build["extra"]:
        extras = (build["extra"],)
        marker = f'; extra == "{build["extra"]}"'
    major = build["cuda"].split(".")[0]
    if build["libraries"] == "wheels" and build["cudnn"]:
        cudnn_major = int(build["cudnn"].split(".")[0])
        spec = f">={build['cudnn']},<{cudnn_major + 1}" if build["extra"] else f"=={build['cudnn']}"
        requires.append(f"nvidia-cudnn-cu{major}{spec}{marker}")
        cuda_wheels.add((f"nvidia-cudnn-cu{major}", build["cudnn"], ()))
        cuda_wheels.add((f"nvidia-cudnn-cu{major}", f"{cudnn_major}.99.0.1", ()))  # newer than any plan
    runtime = build["cuda_runtime"]
    if build["libraries"] == "wheels" and runtime:
        if int(major) >= 13:  # from CUDA 13 the cuda-toolkit metapackage carries the runtime wheel
            requires.append(f"cuda-toolkit[cudart]=={runtime}{marker}")
            inner = f"{build['cuda']}.86"
            cuda_wheels.add(("nvidia-cuda-runtime", inner, ()))
            cuda_wheels.add(("cuda-toolkit", runtime, (f'nvidia-cuda-runtime=={inner}; extra == "cudart"',)))
        elif runtime[0] in "<>=!~":  # a range, as TensorFlow 2.19's [and-cuda]: its floor and a newer one
            requires.append(f"nvidia-cuda-runtime-cu{major}{runtime}{marker}")
            floor = next(s.version for s in SpecifierSet(runtime) if s.operator == ">=")
            cuda_wheels.add((f"nvidia-cuda-runtime-cu{major}", floor, ()))
            cuda_wheels.add((f"nvidia-cuda-runtime-cu{major}", f"{major}.9.1", ()))
        else:
            requires.append(f"nvidia-cuda-runtime-cu{major}=={runtime}{marker}")
            cuda_wheels.add((f"nvidia-cuda-runtime-cu{major}", runtime, ()))
    package, version = fw["package"], release["version"]
    if (package, version) == ("tensorflow", "2.15.0"):
        # as on pypi.org: 2.15.0's [and-cuda] needs tensorrt-libs 8.6.1, which was never published
        broken = [*requires, f"tensorrt-libs==8.6.1{marker}"]
        wheels.append(make_wheel(files, package, version, broken, python=release["python"], extras=extras))
        version = "2.15.0.post1"
    wheels.append(make_wheel(files, package, version, requires, python=release["python"], extras=extras))
    return wheels


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the index's access log is noise in test output
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # a client that hangs up early (uv, pip) is no error here
        pass


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve `root` on a free 127.0.0.1 port; yields http://127.0.0.1:PORT."""

    def handler(*args, **kwargs):
        return _Quiet(*args, directory=str(root), **kwargs)

    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def make_sdist(folder: Path, name: str, version: str, requires=(), *, build_requires=("setuptools>=61",)) -> Path:
    """A source archive whose metadata is static (PKG-INFO 2.2, a PEP 621 [project] table with nothing
    dynamic), so a resolver reads it without building; fixed timestamps, so its hash is stable."""
    import io
    import tarfile

    dist = re.sub(r"[-_.]+", "_", name)
    root = f"{dist}-{version}"
    deps = ", ".join(f'"{r}"' for r in requires)
    needs = ", ".join(f'"{r}"' for r in build_requires)
    files = {
        "PKG-INFO": "\n".join(
            [
                "Metadata-Version: 2.2",
                f"Name: {name}",
                f"Version: {version}",
                *(f"Requires-Dist: {r}" for r in requires),
            ]
        )
        + "\n",
        "pyproject.toml": f'[build-system]\nrequires = [{needs}]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = [{deps}]\n',
        f"{dist.lower()}_stub/__init__.py": "",
    }
    path = folder / f"{dist}-{version}.tar.gz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{member}")
            info.size, info.mtime, info.mode = len(data), 1704067200, 0o644
            archive.addfile(info, io.BytesIO(data))
    import gzip

    path.write_bytes(gzip.compress(raw.getvalue(), mtime=0))
    return path
