"""Every render in tests/images resolves its requirements.lock against a local index of test wheels
(tests/images/wheelhouse.py) on 127.0.0.1, with a uv cache of its own: offline and deterministic;
the CI tests resolve the pipelines' gpu-provision.lock against a local index serving the wheel of this
checkout and its dependencies (tests/images/toolindex.py). Only tests marked `network` reach pypi.org."""

import shutil
from pathlib import Path
from typing import NamedTuple

import pytest
from support import COMPAT, make_compat
from toolindex import build_tool_index
from wheelhouse import catalogue_wheels, serve, write_simple_index


class WheelIndex(NamedTuple):
    url: str  # http://127.0.0.1:PORT; the index is <url>/simple
    root: Path  # what is served; the wheels are in root/files


@pytest.fixture(scope="session")
def wheel_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel-index")
    (root / "files").mkdir()
    write_simple_index(root, catalogue_wheels(root / "files"))
    with serve(root) as url:
        yield WheelIndex(url, root)


@pytest.fixture(scope="session")
def tool_index(tmp_path_factory):
    """gpu-provision as `pip wheel .` builds it, and its dependencies, on 127.0.0.1 (toolindex.py)."""
    root = tmp_path_factory.mktemp("tool-index")
    build_tool_index(root)
    with serve(root) as url:
        yield WheelIndex(url, root)


@pytest.fixture
def on_tool_index(tool_index, monkeypatch):
    """provision ci resolves its gpu-provision.lock from the local tool index."""
    monkeypatch.setenv("PROVISION_TOOL_INDEX_URL", tool_index.url + "/simple")
    return tool_index


@pytest.fixture(scope="session")
def ci_compat(tmp_path_factory):
    """The fixture catalogue with compat/ci_actions.yaml beside it (the CI generator's action and
    job-image pins, which the fixture catalogue does not carry): ci holds plans to this catalogue."""
    dest = make_compat(tmp_path_factory.mktemp("ci-compat") / "compat")
    shutil.copy(COMPAT / "ci_actions.yaml", dest / "ci_actions.yaml")
    return dest


@pytest.fixture
def on_ci_catalogue(ci_compat, monkeypatch):
    """Every command the test runs (plan, ci, render) reads the fixture catalogue with the CI pins."""
    monkeypatch.setenv("PROVISION_COMPAT_DIR", str(ci_compat))
    return ci_compat


@pytest.fixture(scope="session")
def uv_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("uv-cache")


@pytest.fixture(autouse=True)
def _local_index(request, monkeypatch, uv_cache):
    monkeypatch.setenv("UV_CACHE_DIR", str(uv_cache))
    if request.node.get_closest_marker("network") is None:
        monkeypatch.setenv("PROVISION_INDEX_URL", request.getfixturevalue("wheel_index").url + "/simple")
    else:
        monkeypatch.delenv("PROVISION_INDEX_URL", raising=False)
