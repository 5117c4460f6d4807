"""`provision plan` and `provision matrix check` print, byte for byte, what they printed when
tests/golden/plan-outputs.fixture.json was recorded (before issue 24's resolver split): every
(OS, GPU) pair of the fixture catalogue as a table and as JSON, pinned requests and refusals,
every (OS, platform, GPU) request through the API, and matrix check's JSON. A change meant to
move code must keep them; a change meant to change an answer re-records the file
(python tests/golden/plan_outputs.py record) and says why in its commit."""

import json
import sys

from support import ROOT, make_compat

sys.path.insert(0, str(ROOT / "tests" / "golden"))
import plan_outputs


def test_plan_outputs_are_byte_identical_to_the_record(tmp_path, monkeypatch):
    compat = str(make_compat(tmp_path / "compat"))
    for key, value in plan_outputs.env(compat).items():
        monkeypatch.setenv(key, value)
    want = json.loads(plan_outputs.GOLDEN.read_text())
    got = plan_outputs.outcomes(compat)
    differ, extra = plan_outputs.compare(want, got)
    assert not differ, f"{len(differ)} of {len(want)} cases print otherwise, e.g. {differ[:5]}"
    assert not extra, f"cases not recorded: {extra[:5]}"
    assert len(want) > 300
    assert any(v.startswith("exit 2") for v in got.values()), "refusals are among the cases"
    assert sum(k.startswith("plan ") and "--format json" in k for k in got) > 20


def test_a_changed_answer_is_caught(tmp_path, monkeypatch):
    """The comparison fails on one changed byte (else the test above could not fail)."""
    want = {"plan a": plan_outputs.digest("exit 0\nx"), "plan b": "exit 0\ny"}
    assert plan_outputs.compare(want, {"plan a": "exit 0\nx", "plan b": "exit 0\ny"}) == ([], [])
    assert plan_outputs.compare(want, {"plan a": "exit 0\nX", "plan b": "exit 0\ny"}) == (["plan a"], [])
    assert plan_outputs.compare(want, {"plan a": "exit 0\nx", "plan b": "exit 0\ny "}) == (["plan b"], [])
    assert plan_outputs.compare(want, {"plan a": "exit 0\nx", "plan b": "exit 0\ny", "c": ""}) == ([], ["c"])
