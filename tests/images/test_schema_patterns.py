"""The published schemas of provision/images/schema/ refuse a string with a newline at its end (issue 22).

A JSON Schema pattern is ECMA-262, where `$` matches only at the end of the string; the `jsonschema`
library (and check-jsonschema's python regex variant) searches with Python's `re`, where `$` also
matches before a final newline, so `"sha256:…\\n"` passed every pattern. Each pattern is found by
walking the schema documents, an example it accepts is generated from the pattern itself, and the
same example with a newline appended must be refused by the library's validator."""

import json
import re
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SCHEMAS = sorted((Path(__file__).resolve().parents[2] / "provision" / "images" / "schema").glob("*.json"))


def patterns(node, where=""):
    """(location, pattern) of every `pattern` keyword in a schema document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield where, value
            else:
                yield from patterns(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from patterns(value, f"{where}/{i}")


PATTERNS = [(f"{path.name}{where}", p) for path in SCHEMAS for where, p in patterns(json.loads(path.read_text()))]


def test_every_schema_has_patterns():
    assert {name.split("/")[0] for name, _ in PATTERNS} == {p.name for p in SCHEMAS}
    assert len(PATTERNS) >= 11


@pytest.mark.parametrize(("where", "pattern"), PATTERNS, ids=[w for w, _ in PATTERNS])
def test_a_trailing_newline_is_refused(where, pattern):
    validator = jsonschema.Draft202012Validator({"type": "string", "pattern": pattern})
    # an example the pattern accepts, generated from the pattern without its end guard
    plain = pattern.removesuffix("(?!\\n)")

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_regex(re.compile(plain, re.ASCII), fullmatch=True).filter(lambda s: "\n" not in s))
    def check(example):
        assert validator.is_valid(example), (where, example)
        assert not validator.is_valid(example + "\n"), (where, example)

    check()
