"""tests/run's two parts (--part fleet, --part rest) split one collection without losing a test."""

from types import SimpleNamespace

import pytest
from support import split_part


def item(name: str, *fixtures: str, marks: tuple[str, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(
        name=name, fixturenames=list(fixtures), get_closest_marker=lambda mark: mark if mark in marks else None
    )


ITEMS = [
    item("apply", "fleet_env", "tmp_path"),
    item("verify", "converged_fleet", "fleet_env", "tmp_path"),  # the closure names fleet_env
    item("rocky", "rocky_env", "tmp_path"),  # the module fleet: in the fleet part too
    item("mig", "mig_fleet", "fleet_env", marks=("fresh_fleet",)),  # a session fleet of its own there
    item("plan", "cli"),
    SimpleNamespace(name="doctest"),  # an item without fixtures or marks
]


def test_the_fleet_part_is_the_fleet_tests_in_order_but_the_fresh_fleet_ones():
    keep, drop = split_part(ITEMS, "fleet")
    assert [i.name for i in keep] == ["apply", "verify", "rocky"]
    assert [i.name for i in drop] == ["mig", "plan", "doctest"]


def test_the_two_parts_are_disjoint_and_make_the_whole():
    fleet, _ = split_part(ITEMS, "fleet")
    rest, _ = split_part(ITEMS, "rest")
    assert not {id(i) for i in fleet} & {id(i) for i in rest}
    assert sorted(i.name for i in fleet + rest) == sorted(i.name for i in ITEMS)


def test_an_unknown_part_is_refused():
    with pytest.raises(ValueError, match="one of fleet, rest"):
        split_part(ITEMS, "gpu")
