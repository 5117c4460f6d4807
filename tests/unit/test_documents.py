"""provision.documents: what a user's file says is only ever data (issue 22's loader attacks)."""

from __future__ import annotations

import os
import time

import pytest

from provision.documents import load_json, load_yaml, read_text, refuse_controls, write_text
from provision.errors import InputError


def refused(func, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as info:
        func(*args, **kwargs)
    assert "\n" not in info.value.message
    assert info.value.hint
    return info.value


# -- YAML -------------------------------------------------------------------------------------
def test_an_unquoted_version_is_refused_naming_key_and_line():
    text = "groups:\n  a100:\n    os: rocky9\n    gpu: a100-pcie\n    cudnn: 9.10\n"
    error = refused(load_yaml, text, "fleet.yaml", versions=("cudnn",))
    assert error.message == "fleet.yaml: line 5: cudnn: 9.10 is read by YAML as a float, not a version"
    assert error.hint == 'quote it: cudnn: "9.10"'


@pytest.mark.parametrize("value", ["12.10", "535", "1.5e+3", "0x10", "true"])
def test_every_non_string_scalar_is_refused_for_a_version_key(value):
    assert "is read by YAML as" in refused(load_yaml, f"cuda: {value}\n", "f", versions=("cuda",)).message


def test_quoted_and_null_versions_load():
    assert load_yaml('cuda: "12.10"\ncudnn: null\n', "f", versions=("cuda", "cudnn")) == {
        "cuda": "12.10",
        "cudnn": None,
    }
    # a key not named a version keeps YAML's reading
    assert load_yaml("count: 8\n", "f", versions=("cuda",)) == {"count": 8}


def test_an_alias_bomb_is_refused_at_once():
    bomb = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
        f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n"
        for i in range(9)
    )
    assert len(bomb) < 700
    started = time.monotonic()
    assert "anchors and aliases" in refused(load_yaml, bomb, "fleet.yaml").message
    assert time.monotonic() - started < 1


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: 1\na: 2\n", "appears twice"),
        ("1: x\n", "is not a string"),
        ("a: {<<: {b: 1}}\n", "merge keys"),
        ("a: !!python/object/apply:os.system [id]\n", "constructor"),
        ("a: " + "[" * 40 + "]" * 40 + "\n", "nests deeper"),
        ("a: b: c\n", "not valid YAML"),
    ],
)
def test_yaml_refusals(text, words):
    assert words in refused(load_yaml, text, "f").message


def test_oversize_documents_are_refused():
    assert "over the" in refused(load_yaml, "a: " + "x" * 100, "f", max_bytes=50).message
    assert "over the" in refused(load_json, b'"' + b"x" * 100 + b'"', "f", max_bytes=50).message


# -- JSON -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"digest": "a", "digest": "b"}', "twice"),
        ('{"a": NaN}', "NaN"),
        ('{"a": -Infinity}', "Infinity"),
        ("[" * 100000 + "]" * 100000, "nests deeper"),
        ("[" * 40 + "]" * 40, "nests deeper"),
        ("{", "not JSON"),
        (b"\xff{}", "not UTF-8"),
    ],
)
def test_json_refusals(text, words):
    assert words in refused(load_json, text, "plan.lock.json").message


def test_json_within_bounds_loads():
    assert load_json('{"a": [1, {"b": null}]}', "f") == {"a": [1, {"b": None}]}


# -- strings ----------------------------------------------------------------------------------
@pytest.mark.parametrize("char", ["\x00", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\u202e", "\n"])
def test_control_characters_are_refused(char):
    assert f"U+{ord(char):04X}" in refused(refuse_controls, f"torch==2.5.1{char}--extra-index-url", "lock").message


def test_newlines_may_be_allowed_in_a_file():
    assert refuse_controls("a\nb\tc", "file", newlines=True) == "a\nb\tc"
    refused(refuse_controls, "a\nb\x0cc", "file", newlines=True)


# -- files ------------------------------------------------------------------------------------
def test_a_symlinked_input_is_refused_without_echoing_its_target(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("TOKEN=hunter2\n")
    link = tmp_path / "plan.lock.json"
    link.symlink_to(secret)
    error = refused(read_text, link, "plan")
    assert "symbolic link" in error.message
    assert "hunter2" not in error.message + str(error.hint)


def test_a_fifo_or_folder_is_not_read(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(read_text, fifo, "plan").message
    assert "not a regular file" in refused(read_text, tmp_path, "plan").message


def test_read_text_bounds_size_and_encoding(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    assert "over the 100" in refused(read_text, big, "plan", max_bytes=100).message
    latin = tmp_path / "latin"
    latin.write_bytes(b"caf\xe9")
    assert "not UTF-8" in refused(read_text, latin, "plan").message


def test_write_text_replaces_a_planted_symlink_instead_of_following_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    out = tmp_path / "out.json"
    out.symlink_to(victim)
    write_text(out, "new\n")
    assert victim.read_text() == "keep me\n"
    assert not out.is_symlink()
    assert out.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_write_text_leaves_nothing_when_it_fails(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_text(tmp_path / "missing" / "out", "x")
    with pytest.raises(TypeError):
        write_text(tmp_path / "out", 1)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
