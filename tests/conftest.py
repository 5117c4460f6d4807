"""Shared fixtures: the real catalogue, the tiny fixture catalogue, and an in-process CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import COMPAT, PARTS, SHARED_FIXTURES, make_compat, split_part

from provision.cli import main
from provision.matrix.loader import load_matrix

CORPUS = Path(__file__).resolve().parent / "corpus"


def pytest_addoption(parser):
    parser.addoption(
        "--shared-corpus",
        action="store_true",
        help=f"also run tests/corpus: doctor and the Xid refresh over {SHARED_FIXTURES} "
        "(captures published elsewhere, not committed here); tests/run adds it when that folder exists",
    )
    parser.addoption(
        "--part",
        choices=PARTS,
        default=None,
        help="only the tests on the test fleets (fleet: those using fleet_env or rocky_env, but the "
        "modules marked fresh_fleet), or only the others (rest); tests/run runs the two parts side by side",
    )


def pytest_collection_modifyitems(config, items):
    part = config.getoption("--part")
    if part is None:
        return
    keep, drop = split_part(items, part)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_ignore_collect(collection_path, config):
    """tests/corpus reads files outside this repository: it runs only when asked for, so a fresh
    clone's suite neither skips nor depends on them."""
    if collection_path == CORPUS and not config.getoption("--shared-corpus"):
        return True
    return None


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test run gets its own validated-data cache (never the user's)."""
    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "provision-cache"))


@pytest.fixture(scope="session")
def real_matrix():
    return load_matrix(COMPAT)


@pytest.fixture(scope="session")
def fixture_compat(tmp_path_factory) -> Path:
    return make_compat(tmp_path_factory.mktemp("fixture") / "compat")


@pytest.fixture(scope="session")
def fixture_matrix(fixture_compat):
    return load_matrix(fixture_compat)


@pytest.fixture(params=["fixture", "live"])
def each_matrix(request):
    """For properties that hold for any catalogue: the fixture one (fixed) and the live one
    (whatever a refresh brings)."""
    return request.getfixturevalue("real_matrix" if request.param == "live" else "fixture_matrix")


@pytest.fixture
def on_fixture_catalogue(fixture_compat, monkeypatch) -> Path:
    """Every command the test runs reads the fixture catalogue (PROVISION_COMPAT_DIR, the env form
    of --compat-dir), so a refresh of compat/ changes none of its expectations."""
    monkeypatch.setenv("PROVISION_COMPAT_DIR", str(fixture_compat))
    return fixture_compat


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, out={self.out[-400:]!r}, err={self.err[-400:]!r})"


@pytest.fixture
def cli(capsys):
    """Run the real entry point in-process; returns exit code, stdout and stderr."""

    def run(*args: str) -> CliResult:
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
