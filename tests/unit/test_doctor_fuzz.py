"""Whatever it is given, doctor returns a Report or raises a ProvisionError (exit 2/3), never a
traceback: empty and random input, truncated real captures, foreign formats, mutated XML."""

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import SHARED_FIXTURES

from provision.doctor import (
    SECTION_KEYS,
    decode_bytes,
    diagnose_files,
    diagnose_named_texts,
    diagnose_texts,
)
from provision.doctor.model import Report
from provision.errors import InputError, ProvisionError

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "doctor"


def _captures() -> list[Path]:
    own = [p for p in FIX.iterdir() if p.is_file() and not p.name.endswith(".source.txt")]
    own += [p for p in (FIX / "bmc").iterdir() if not p.name.endswith((".source.txt", ".md"))]
    shared = []
    if SHARED_FIXTURES.is_dir():
        shared = [p for p in SHARED_FIXTURES.iterdir() if p.is_file() and not p.name.endswith((".source.txt", ".md"))]
    return sorted(own) + sorted(shared)


CAPTURES = [(p.name, p.read_text(encoding="utf-8", errors="replace")) for p in _captures()]
XML = [(n, t) for n, t in CAPTURES if n.endswith(".xml")]
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(fn, *args, **kwargs) -> str:
    try:
        result = fn(*args, **kwargs)
    except ProvisionError as exc:
        error = exc
    else:
        error = None
    if error is not None:
        assert error.exit_code in (2, 3)
        assert error.message
        return "rejected"
    assert isinstance(result, Report)
    json.dumps(result.to_dict())
    assert result.exit_code in (0, 1)
    return "report"


def test_captures_were_found():
    assert len(CAPTURES) >= 40
    assert XML


@pytest.mark.parametrize("content", ["", " ", "\n\n\t\n", "\ufeff"])
def test_empty_files_are_rejected(tmp_path, content):
    path = tmp_path / "empty.log"
    path.write_text(content)
    with pytest.raises(InputError, match="empty"):
        diagnose_files([path])


@FAST
@given(data=st.binary(max_size=4096))
def test_random_bytes(data):
    outcome(diagnose_named_texts, [("random.bin", decode_bytes(data))])


@FAST
@given(text=st.text(max_size=2000), key=st.sampled_from((*SECTION_KEYS, "unknown")))
def test_random_text_in_any_section(text, key):
    outcome(diagnose_texts, {key: text})
    outcome(diagnose_named_texts, [("x.txt", text)])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capture=st.sampled_from(CAPTURES), cut=st.floats(min_value=0, max_value=1))
def test_truncated_captures(capture, cut):
    name, text = capture
    prefix = text[: int(len(text) * cut)]
    outcome(diagnose_named_texts, [(name, prefix)])


@FAST
@given(capture=st.sampled_from(CAPTURES), cut=st.floats(min_value=0, max_value=1), key=st.sampled_from(SECTION_KEYS))
def test_truncated_captures_in_the_wrong_section(capture, cut, key):
    _, text = capture
    outcome(diagnose_texts, {key: text[: int(len(text) * cut)]})


SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)


@FAST
@given(doc=JSONISH)
def test_foreign_json_and_yaml(doc):
    outcome(diagnose_named_texts, [("doc.json", json.dumps(doc))])
    outcome(diagnose_named_texts, [("doc.yaml", yaml.safe_dump(doc))])


@FAST
@given(body=st.text(max_size=300))
def test_foreign_html(body):
    page = f"<!DOCTYPE html>\n<html><head><title>x</title></head><body><p>{body}</p></body></html>\n"
    assert outcome(diagnose_named_texts, [("page.html", page)]) == "rejected"


MUTATIONS = st.sampled_from(["delete", "insert", "duplicate", "digits", "tag"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capture=st.sampled_from(XML),
    how=MUTATIONS,
    where=st.floats(0, 1),
    size=st.integers(0, 400),
    junk=st.text(max_size=40),
)
def test_mutated_xml(capture, how, where, size, junk):
    name, xml = capture
    at = int(len(xml) * where)
    if how == "delete":
        xml = xml[:at] + xml[at + size :]
    elif how == "insert":
        xml = xml[:at] + junk + xml[at:]
    elif how == "duplicate":
        xml = xml[:at] + xml[at : at + size] + xml[at:]
    elif how == "digits":
        digits = "".join(ch if not ch.isdigit() else junk[:3] or "9" * 40 for ch in xml[at : at + size])
        xml = xml[:at] + digits + xml[at + size :]
    else:
        xml = xml[:at] + f"<{junk or 'gpu'}>" + xml[at:]
    outcome(diagnose_named_texts, [(name, xml)])
    outcome(diagnose_texts, {"nvidia-smi-q-x": xml})


def test_entity_expansion_is_refused():
    bomb = (
        '<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaaaaaaaa">'
        '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>\n<nvidia_smi_log><driver_version>&b;</driver_version>'
        "</nvidia_smi_log>\n"
    )
    with pytest.raises(InputError, match="entities"):
        diagnose_named_texts([("bomb.xml", bomb)])


def test_hostile_numbers_and_nesting_do_not_crash():
    huge = "9" * 5000
    deep_q = "==============NVSMI LOG==============\n" + "".join(" " * i + f"K{i}\n" for i in range(3000))
    cases = [
        ("k.log", f"NVRM: Xid (PCI:0000:01:00): {huge}, x\n"),
        ("t.txt", f"| NVIDIA-SMI 1.0  Driver Version: {huge}.1  CUDA Version: {huge}.2 |\n"),
        ("q.txt", deep_q),
        ("j.json", "[" * 100_000 + "]" * 100_000),
        ("a.log", "RuntimeError: The NVIDIA driver on your system is too old (found version 99999999999999).\n"),
    ]
    for name, content in cases:
        outcome(diagnose_named_texts, [(name, content)])
    outcome(diagnose_texts, {"nvidia-smi-rc": huge, "uname-r": huge, "app-log": f"cuda>={huge}.{huge}"})
