"""Refusal hints offer driver branches the way the lts policy would take them: supported (not past
end of life on the catalogue's as_of) before end of life, long-term support and production before
new feature branches, newest first, and always the long-term support branch that works. The
"not tried" line separates what the policy left out from what is past end of life.

Runs over the fixture catalogue (tests/fixtures/compat); the cases that need a different fact
(R610 past end of life as in the real catalogue, R580 missing) edit a copy of it."""

import re

import pytest
from support import FIXTURE_COMPAT, make_compat

from provision.errors import InputError, NoCompatibleStack
from provision.matrix.loader import load_matrix
from provision.plan.model import PlanRequest
from provision.plan.resolve import _driver_order, resolve

DRIVER_HINT = re.compile(r"--driver (\d+) \(R\d+ ([^;]+); gives driver ([\d.]+), cuda ([\d.]+)\)")


def refusal(matrix, **request) -> NoCompatibleStack:
    with pytest.raises(NoCompatibleStack) as info:
        resolve(matrix, PlanRequest(**request))
    return info.value


def offered(hint: str) -> list[tuple[int, str]]:
    """The --driver changes a hint offers, in order: (branch, what the hint says about it)."""
    return [(int(b), kind) for b, kind, _, _ in DRIVER_HINT.findall(hint)]


def edited(tmp_path, old: str, new: str):
    compat = make_compat(tmp_path / "compat")
    drivers = compat / "drivers.yaml"
    text = drivers.read_text()
    assert old in text, "the fixture changed under this test"
    drivers.write_text(text.replace(old, new))
    return load_matrix(compat)


R610_NFB = 'branch: "610", type: nfb, eol: null'


@pytest.fixture
def r610_ended(tmp_path):
    """The fixture catalogue with R610 past end of life, as NVIDIA lists it (2026-08)."""
    matrix = edited(tmp_path, R610_NFB, 'branch: "610", type: nfb, eol: "2026-08"')
    assert matrix.branch(610).past_eol(matrix.as_of)
    return matrix


def test_volta_is_offered_the_ltsb_not_end_of_life_branches(r610_ended):
    err = refusal(r610_ended, os="ubuntu22.04", gpu="v100-pcie", driver="610")
    assert err.hint.startswith("try --driver 580 (R580 long-term support branch until 2028-06; gives driver 580.95.05")
    # R570 and R535 would resolve too (pinned), but they are past end of life and R580 is not
    assert offered(err.hint) == [(580, "long-term support branch until 2028-06")]
    assert resolve(r610_ended, PlanRequest(os="ubuntu22.04", gpu="v100-pcie", driver="570")).driver.branch == "570"


def test_an_end_of_life_feature_branch_is_not_offered(r610_ended):
    err = refusal(r610_ended, os="ubuntu22.04", gpu="b200", driver="535")
    assert [b for b, _ in offered(err.hint)] == [595, 580]
    assert "--driver 610" not in err.hint


def test_feature_branches_come_after_ltsb_and_production(fixture_matrix):
    assert not fixture_matrix.branch(610).past_eol(fixture_matrix.as_of)
    err = refusal(fixture_matrix, os="ubuntu22.04", gpu="b200", driver="535")
    assert offered(err.hint) == [
        (595, "production branch until 2027-03"),
        (580, "long-term support branch until 2028-06"),
        (610, "new feature branch"),
    ]


def test_the_ltsb_takes_the_last_place(fixture_matrix):
    """Two --cuda changes leave one place; R595 is newer, but the long-term support branch takes it."""
    err = refusal(fixture_matrix, os="ubuntu22.04", gpu="a100-pcie-80gb", driver="535", cuda="13.0")
    assert err.hint.count("; or ") == 2
    assert offered(err.hint) == [(580, "long-term support branch until 2028-06")]
    assert resolve(fixture_matrix, PlanRequest(os="ubuntu22.04", gpu="a100-pcie-80gb", driver="595", cuda="13.0"))


def test_end_of_life_branches_only_when_nothing_supported_resolves(tmp_path):
    line = next(ln for ln in (FIXTURE_COMPAT / "drivers.yaml").read_text().splitlines() if 'branch: "580"' in ln)
    matrix = edited(tmp_path, line + "\n", "")
    assert matrix.branch(580) is None
    err = refusal(matrix, os="ubuntu22.04", gpu="v100-pcie", driver="595")
    assert offered(err.hint) == [
        (570, "production branch, past end of life 2026-02"),
        (535, "long-term support branch, past end of life 2026-06"),
    ]


def test_driver_hints_follow_the_policy_order_everywhere(fixture_matrix):
    """Every refusal with a --driver pin: the branches offered resolve, come in policy order, include
    no end-of-life branch while a supported one is offered, and include a supported long-term support
    branch whenever one resolves."""
    as_of = fixture_matrix.as_of
    rank = {b.branch: i for i, b in enumerate(_driver_order(fixture_matrix))}
    checked = 0
    for os_rel in fixture_matrix.os_releases:
        for gpu in fixture_matrix.gpu_ids():
            for pinned in fixture_matrix.drivers:
                for cuda in (None, "13.0", "12.2"):
                    request = PlanRequest(os=os_rel.id, gpu=gpu, driver=str(pinned.branch), cuda=cuda)
                    try:
                        resolve(fixture_matrix, request, suggest=False)
                        continue
                    except NoCompatibleStack:
                        pass
                    except InputError:
                        continue  # a group whose members differ: refused before any search
                    hint = refusal(fixture_matrix, **request._asdict()).hint
                    branches = [fixture_matrix.branch(b) for b, _ in offered(hint)]
                    if not branches:
                        continue
                    checked += 1
                    assert [rank[b.branch] for b in branches] == sorted(rank[b.branch] for b in branches), hint
                    ended = [b.past_eol(as_of) for b in branches]
                    assert not (any(ended) and not all(ended)), hint
                    for b in branches:
                        assert resolve(fixture_matrix, request._replace(driver=str(b.branch)))
                    ltsb_works = any(
                        _resolves(fixture_matrix, request._replace(driver=str(b.branch)))
                        for b in fixture_matrix.drivers
                        if b.type == "ltsb" and not b.past_eol(as_of) and b.branch != pinned.branch
                    )
                    if ltsb_works:
                        assert any(b.type == "ltsb" and not b.past_eol(as_of) for b in branches), hint
    assert checked >= 5, "the fixture catalogue should refuse several driver pins that another branch resolves"


def _resolves(matrix, request) -> bool:
    try:
        resolve(matrix, request, suggest=False)
    except NoCompatibleStack:
        return False
    return True


def test_not_tried_separates_policy_from_end_of_life(fixture_matrix):
    err = refusal(fixture_matrix, os="ubuntu22.04", gpu="v100-pcie", cuda="13.0")
    line = next(ln for ln in err.summary if ln.startswith("not tried:"))
    assert line == (
        "not tried: R610 (new feature branch: policy lts leaves it out, --policy latest takes it); "
        "2 branches past end of life (R570, R535: only a --driver pin takes one)"
    )
    full = dict(err.eliminations)["not tried"]
    assert full.startswith("R610 (new feature branch), R570 (end of life 2026-02), R535 (end of life 2026-06): ")
    assert "--policy latest adds new feature branches" in full


def test_not_tried_under_policy_latest_names_only_end_of_life(r610_ended):
    err = refusal(r610_ended, os="ubuntu22.04", gpu="v100-pcie", cuda="13.0", policy="latest")
    line = next(ln for ln in err.summary if ln.startswith("not tried:"))
    assert line == "not tried: 3 branches past end of life (R610, R570, R535: only a --driver pin takes one)"
    assert "--policy latest" not in dict(err.eliminations)["not tried"]
