"""Every command that writes a file treats a missing directory the same way: exit 2, naming it,
before any work is done and without creating it (a new user's trial hit three behaviours). The
commands read the fixture catalogue: where a file goes does not depend on today's data."""

import pytest

# fixture catalogue ids; the MIG layout is one of the fixture profile set's profiles
GPU, LAYOUT = "a100-pcie-80gb", "3g.40gb"

pytestmark = pytest.mark.usefixtures("on_fixture_catalogue")


def test_the_fixture_has_the_layout(fixture_matrix):
    profiles = fixture_matrix.mig_set(fixture_matrix.gpu(GPU).mig).profiles
    assert LAYOUT in {p.name for p in profiles}


@pytest.fixture
def lock(cli, tmp_path):
    path = tmp_path / "plan.lock.json"
    assert cli("plan", "--os", "ubuntu22.04", "--gpu", GPU, "--lock", str(path), "--format", "json").code == 0
    return str(path)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["plan", "--os", "ubuntu22.04", "--gpu", GPU, "--lock", "MISSING"], "--lock"),
        (["gpus", "--format", "svg", "--out", "MISSING"], "--out"),
        (["mig", "plan", "--gpu", GPU, "--layout", LAYOUT, "--out-config", "MISSING"], "--out-config"),
        (["mig", "plan", "--gpu", GPU, "--layout", LAYOUT, "--out-vars", "MISSING"], "--out-vars"),
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
