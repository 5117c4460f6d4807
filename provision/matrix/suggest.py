"""'Did you mean …' for an unknown id: only ids that a listing shows, the closest first.

Ranking, most convincing first:

0. the same id up to case and punctuation (``A100_PCIE``, ``ubuntu-22.04``);
1. ids that start with what was typed (``a100`` -> ``a100-pcie``, ``a100-80gb``, …), shorter first;
2. ids that contain it, or that it starts with (``4090`` -> ``rtx-4090``, ``rocky9.4`` -> ``rocky9``);
3. then by similarity (``rhel8`` -> ``rhel9``), where a shared first letter breaks ties
   (``b100`` -> ``b200`` before ``v100``).

Aliases are matched too, but the id the listing shows is what is suggested.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

_CUTOFF = 0.6  # similarity below this is noise (difflib's own default)


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _continues(typed: str, name: str) -> bool:
    """``typed`` is ``name`` and more, without splitting a number or a word of it.

    ``rocky9.4`` continues ``rocky9``; ``a100-pice`` does not continue ``a10`` (100 is not 10).
    """
    t, n = (re.sub(r"[^a-z0-9]+", "-", x.lower()).strip("-") for x in (typed, name))
    if not n or not t.startswith(n) or t == n:
        return False
    last, nxt = n[-1], t[len(n)]
    return not ((last.isdigit() and nxt.isdigit()) or (last.isalpha() and nxt.isalpha()))


def close_ids(typed: str, names: Mapping[str, str] | Iterable[str], limit: int = 3) -> tuple[list[str], int]:
    """The listed ids nearest to ``typed`` (at most ``limit``) and how many more match as well.

    ``names`` maps every accepted name (id or alias) to the id the listing shows; a plain
    iterable is a list of ids.
    """
    listed = dict(names) if isinstance(names, Mapping) else {n: n for n in names}
    order = {ident: i for i, ident in enumerate(dict.fromkeys(listed.values()))}
    want, raw = _key(typed), typed.strip().lower()
    best: dict[str, tuple] = {}
    for name, ident in listed.items():
        key = _key(name)
        if not want or not key:
            continue
        if key == want:
            rank = (0, len(ident), order[ident])
        elif key.startswith(want):
            rank = (1, len(ident), order[ident])
        elif want in key or _continues(typed, name):
            rank = (2, len(ident), order[ident])
        else:
            ratio = difflib.SequenceMatcher(None, raw, name.lower()).ratio()
            if ratio < _CUTOFF:
                continue
            rank = (3, -ratio, name.lower()[:1] != raw[:1], order[ident])
        if ident not in best or rank < best[ident]:
            best[ident] = rank
    ranked = sorted(best, key=best.__getitem__)
    if not ranked:
        return [], 0
    tier = best[ranked[0]][0]
    same_tier = [i for i in ranked if best[i][0] == tier]
    if tier == 3:
        return ranked[:limit], 0
    # exact and prefix/substring matches first; similar-looking ids only fill the remaining places
    shown = (same_tier + [i for i in ranked if best[i][0] != tier and best[i][0] < 3])[:limit]
    return shown, max(0, len(same_tier) - limit)


def did_you_mean(typed: str, names: Mapping[str, str] | Iterable[str], listing: str, limit: int = 3) -> str:
    """The hint for an unknown id: the nearest listed ids, and where the full list is."""
    shown, more = close_ids(typed, names, limit)
    if not shown:
        return f"list: {listing}"
    more_text = f"{more} more match; " if more else ""
    return f"did you mean {' or '.join(shown)}? ({more_text}list: {listing})"
