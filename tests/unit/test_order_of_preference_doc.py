"""The order of preference is stated once, in provision/plan/resolve.py's docstring; docs/plans.md
copies it (issue 24's design note: the README copy had drifted from the docstring). The copy may
add Markdown emphasis and a dash; its words must be the docstring's."""

import re
from pathlib import Path

from provision.plan import resolve

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plans.md"


def _words(text: str) -> str:
    text = text.replace("**", "").replace("``", "").replace("`", "").replace(" —", ":")
    return re.sub(r"\s+", " ", text).strip()


def _docstring_list() -> str:
    doc = resolve.__doc__
    start = doc.index("1. Driver branch")
    return doc[start : doc.index("\n\n", start)]


def _docs_list() -> str:
    text = DOCS.read_text()
    start = text.index("1. **Driver branch**")
    return text[start : text.index("\n\n", start)]


def test_docs_copy_the_docstring_order_of_preference():
    want, got = _words(_docstring_list()), _words(_docs_list())
    assert got == want, next(
        (
            f"first difference at word {i}: docs {g!r} vs docstring {w!r}"
            for i, (g, w) in enumerate(zip(got.split(), want.split(), strict=False))
            if g != w
        ),
        "one is a prefix of the other",
    )


def test_the_comparison_sees_a_drift():
    drifted = _docs_list().replace("newest first", "oldest first", 1)
    assert _words(drifted) != _words(_docstring_list())
