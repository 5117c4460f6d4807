"""Answers the catalogue gives the same arguments, worked out once per catalogue.

``@per_matrix`` wraps a pure function of a :class:`Matrix` and hashable arguments: its value is
kept in a table that belongs to that Matrix object, keyed by the function and its arguments, so
the plan resolver's search and assembly (provision/plan) ask the catalogue freely and
`provision matrix check`'s ~5,000 requests share what they have in common without a hand-keyed
memo. A function kept here must read nothing but its arguments (the Matrix included); a refusal
it raises is not kept (it is raised anew each time).

The tables live beside the Matrix, not in it: a Matrix stays the plain, hashable and picklable
record it is (a forked worker or a pickled copy starts with no table). They are keyed by the
object's identity and hold it, so an identity is never reused while its table lives; the last
``KEEP`` catalogues used keep theirs (a test that loads hundreds of edited catalogues does not
keep them all), and each function remembers its part of the table of the catalogue it was last
asked about (holding that catalogue too), so a run of questions about one catalogue costs one
identity check each.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

KEEP = 8
_TABLES: dict[int, tuple[object, dict]] = {}  # id(matrix) -> (matrix, {function: {args: value}})
_RESETS: list = []  # each kept function's way to forget the matrix it was asked about last


def table(matrix: object) -> dict:
    """The table of ``matrix`` (made on first use; the oldest of more than KEEP is dropped)."""
    entry = _TABLES.get(id(matrix))
    if entry is not None and entry[0] is matrix:
        return entry[1]
    while len(_TABLES) >= KEEP:
        del _TABLES[next(iter(_TABLES))]
    kept: dict = {}
    _TABLES[id(matrix)] = (matrix, kept)
    return kept


def per_matrix(fn: F) -> F:
    """Keep ``fn(matrix, *args)`` in the matrix's table, under ``args`` in fn's part of it."""
    # (the matrix asked last, fn's part of its table): one lookup fewer; one cell, so that threads
    # asking about two catalogues never pair one's matrix with the other's values
    last: tuple = (None, {})

    @functools.wraps(fn)
    def kept(matrix, *args):
        nonlocal last
        asked, values = last
        if asked is not matrix:
            values = table(matrix).setdefault(fn, {})
            last = (matrix, values)
        try:
            return values[args]
        except KeyError:
            value = values[args] = fn(matrix, *args)
            return value

    def reset() -> None:
        nonlocal last
        last = (None, {})

    kept.uncached = fn  # type: ignore[attr-defined]
    _RESETS.append(reset)
    return kept  # type: ignore[return-value]


def forget(matrix: object | None = None) -> None:
    """Drop the table of ``matrix`` (every table when None): tests that time a cold resolve."""
    if matrix is None:
        _TABLES.clear()
    else:
        _TABLES.pop(id(matrix), None)
    for reset in _RESETS:
        reset()
