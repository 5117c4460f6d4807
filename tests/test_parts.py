"""tests/run's two parts (--part fleet, --part rest) split one collection without losing a test."""

from types import SimpleNamespace

import pytest
from support import split_part


def item(name: str, *fixtures: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, fixturenames=list(fixtures))


ITEMS = [
    item("apply", "fleet_env", "tmp_path"),
    item("verify", "converged_fleet", "fleet_env", "tmp_path"),  # the closure names fleet_env
    item("rocky", "rocky_env", "tmp_path"),  # its own module fleet: beside the session fleet
    item("plan", "cli"),
    SimpleNamespace(name="doctest"),  # an item without fixtures
]


def test_the_fleet_part_is_the_session_fleet_tests_in_order():
    keep, drop = split_part(ITEMS, "fleet")
    assert [i.name for i in keep] == ["apply", "verify"]
    assert [i.name for i in drop] == ["rocky", "plan", "doctest"]


def test_the_two_parts_are_disjoint_and_make_the_whole():
    fleet, _ = split_part(ITEMS, "fleet")
    rest, _ = split_part(ITEMS, "rest")
    assert not {id(i) for i in fleet} & {id(i) for i in rest}
    assert sorted(i.name for i in fleet + rest) == sorted(i.name for i in ITEMS)


def test_an_unknown_part_is_refused():
    with pytest.raises(ValueError, match="one of fleet, rest"):
        split_part(ITEMS, "gpu")
