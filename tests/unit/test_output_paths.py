"""Every command that writes a file treats a missing directory the same way: exit 2, naming it,
before any work is done and without creating it (a new user's trial hit three behaviours)."""

import pytest


@pytest.fixture
def lock(cli, tmp_path):
    path = tmp_path / "plan.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", "a100-pcie", "--lock", str(path), "--format", "json").code == 0
    return str(path)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["plan", "--os", "ubuntu22.04", "--gpu", "l4", "--lock", "MISSING"], "--lock"),
        (["gpus", "--format", "svg", "--out", "MISSING"], "--out"),
        (["mig", "plan", "--gpu", "a100-pcie", "--layout", "3g.40gb", "--out-config", "MISSING"], "--out-config"),
        (["mig", "plan", "--gpu", "a100-pcie", "--layout", "3g.40gb", "--out-vars", "MISSING"], "--out-vars"),
        (["ci", "github", "--plan", "LOCK", "--out", "MISSING"], "--out"),
        (["verify", "--local", "--plan", "LOCK", "--junit", "MISSING"], "--junit"),
        (["build", "--plan", "LOCK", "--image-lock", "MISSING"], "--image-lock"),
    ],
)
def test_a_missing_directory_is_refused_the_same_way(cli, tmp_path, lock, args, flag):
    missing = tmp_path / "missing" / "dir"
    target = str(missing / "out.file")
    r = cli(*[{"MISSING": target, "LOCK": lock}.get(a, a) for a in args])
    assert r.code == 2, r
    assert f"error: {flag} {target}: the directory {missing} does not exist" in r.err
    assert "hint: create it first" in r.err
    assert not (tmp_path / "missing").exists()
