"""The plan schema's closed vocabularies hold every value a catalogue puts in a plan (review item A).

A lock validated without the catalogue (render, build, verify) is held to these enums and patterns;
a catalogue row outside them would make provision refuse its own locks, so each catalogue (the
fixture one and the live one) is read against them here."""

import json
import re
from pathlib import Path

from provision.plan.lockcheck import REPO_ARCHES
from provision.plan.model import SCHEMA_FILE

SCHEMA = json.loads(Path(SCHEMA_FILE).read_text(encoding="utf-8"))


def prop(*path: str) -> dict:
    node = SCHEMA["properties"]
    for i, key in enumerate(path):
        node = node[key]
        if i < len(path) - 1:
            node = node["properties"] if "properties" in node else _object(node)["properties"]
    return node


def _object(node: dict) -> dict:
    return next(alt for alt in node["anyOf"] if alt.get("type") == "object")


def test_subnet_manager_vocabulary_covers_the_catalogue(each_matrix):
    sm = each_matrix.subnet_manager
    if sm is not None:
        assert sm.service in prop("subnet_manager", "service")["enum"]
        assert sm.process in prop("subnet_manager", "process")["enum"]
        assert set(sm.kernel_modules) <= set(prop("subnet_manager", "kernel_modules")["items"]["enum"])
    for row in each_matrix.driver_packaging:
        if row.subnet_manager is not None:
            assert set(row.subnet_manager.packages) <= set(prop("subnet_manager", "packages")["items"]["enum"])
            assert set(row.subnet_manager.requires) <= set(prop("subnet_manager", "requires")["items"]["enum"])


def test_fabric_manager_names_match_the_schema_for_every_branch(each_matrix):
    pattern = SCHEMA["$defs"]["fabric_manager_package"]["pattern"]
    branches = [b.branch for b in each_matrix.drivers]
    for row in each_matrix.driver_packaging:
        for branch in branches:
            if row.branches.contains(str(branch)):
                for name in row.fabric_manager:
                    assert re.fullmatch(pattern, name.format(branch=branch)), (row.os, name, branch)


def test_repository_directories_are_the_ones_a_lock_is_held_to(each_matrix):
    assert set(prop("os", "repo_arch")["enum"]) == set(REPO_ARCHES.values())
    for os_rel in each_matrix.os_releases:
        for arch, directory in os_rel.arches:
            assert REPO_ARCHES[arch] == directory, (os_rel.id, arch)
