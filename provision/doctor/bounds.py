"""How much of what a host prints doctor reads: every limit in one place (issue 22).

A host is untrusted: whatever it prints, doctor's time stays linear in the input and its memory
bounded. The collector's output is read up to ``HOST_BYTES`` per host and each section up to
``SECTION_CHARS``; the patterns read each line up to ``MAX_LINE`` characters, and a kernel-log line
takes at most ``MAX_JOINED`` continuation lines. What is cut is said: a finding (``output-cut``)
for a host or a section, the evidence for a line.
"""

from __future__ import annotations

from collections.abc import Iterator

MAX_LINE = 4096  # characters of one line the patterns read (no kernel message is that long)
MAX_JOINED = 8  # continuation lines joined to one kernel-log line (a multi-line NVRM message has 7)
SECTION_CHARS = 4 << 20  # characters of one collector section (or --app-log tail) analysed
HOST_BYTES = 16 << 20  # bytes of one host's collector output read


MAX_GPUS = 1024  # GPUs one nvidia-smi capture may list (more is not nvidia-smi output)
MAX_MESSAGE_LINES = 1000  # lines around a structured capture kept for the message patterns


_BLOCK = 1 << 16  # characters split at once by lines()


def lines(text: str) -> Iterator[str]:
    """The lines of ``text``, one at a time, split at "\\n" and "\\r" ("\\r\\n" is one break).
    ``str.splitlines`` builds them all at once (4 MiB of two-character lines is a list of 1.4
    million strings); this splits a block of about 64 KiB at a time, in C, so memory stays at a
    block and the time per line at a fraction of a microsecond."""
    start, end = 0, len(text)
    while start < end:
        stop = text.find("\n", min(start + _BLOCK, end))
        last = stop < 0
        block = text[start : end if last else stop]
        start = end if last else stop + 1
        if last and block.endswith("\n"):  # a final newline ends the last line, it starts none
            block = block[:-1]
        if "\r" in block:
            block = block.removesuffix("\r").replace("\r\n", "\n").replace("\r", "\n")
        yield from block.split("\n")


def line_note(length: int) -> str:
    """What the evidence says of a line longer than MAX_LINE."""
    return f"a line of {length:,} characters: its first {MAX_LINE:,} read"


def size(n: int) -> str:
    """``4 MiB`` / ``150.2 MiB`` / ``812 KiB`` / ``93 bytes``."""
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f}".removesuffix(".0") + " MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.0f} KiB"
    return f"{n} bytes"
