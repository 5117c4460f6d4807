"""`provision mig suggest`: MIG layouts that give N instances of at least M GiB each, ranked.

Every candidate is a multiset of the GPU's plain profiles (no ``+me``, ``+gfx``, ``-me`` or
``+me.all`` variant: those take the same place as their plain profile) with exactly N
instances, each with at least the memory asked for, and it is kept only when the planner places
it (planner.arrange: every instance at a start slot `nvidia-smi mig -lgipp` allows, no overlap,
within the compute slices and instance limits). Exactly N loses nothing: an instance removed
from a valid layout leaves a valid layout, so N instances fit whenever more than N do.

Ranking, best first: fewest compute slices left unused, then the largest smallest instance (in
memory slots, which every profile has; GiB is proportional within a profile set), then the most
balanced (the least spread of compute slices between instances), then the most memory slots
used, then the layout text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from provision.errors import InputError
from provision.matrix.model import MigProfile, MigProfileSet
from provision.mig import planner

GIB = 1 << 30
_SIZE = re.compile(r"^(\d{1,6}(?:\.\d{1,6})?)\s*(gib|gi|gb|g)?$", re.IGNORECASE)
_SIZE_HINT = (
    "give the memory each instance needs: 20 or 20GiB / 20Gi / 20G (GiB, 2^30 bytes), "
    "or 20GB (10^9 bytes, 18.63 GiB), e.g. --min-memory 20GB"
)


class MemoryFloor(NamedTuple):
    """The memory each instance needs: ``gib`` as compared with compat/mig.yaml's memory_gib,
    ``given`` as the user wrote it (normalised: ``20 GB``, ``20 GiB``)."""

    gib: float
    given: str
    si: bool = False  # given in GB (10^9 bytes)

    def text(self) -> str:
        return f"{self.given} ({self.gib:.2f} GiB)" if self.si else self.given


def parse_memory(text: str) -> MemoryFloor:
    """``"20GB"`` (10^9 bytes), ``"20G"``, ``"20Gi"``, ``"20GiB"``, ``"20"`` (GiB) -> a MemoryFloor.

    "GB" is read as the SI unit it is (NVIDIA's profile names round to it: 2g.20gb has 19.62 GiB,
    21.07 GB); "G", "Gi" and a bare number as GiB, the unit the tables print. InputError (exit 2)
    for anything else."""
    m = _SIZE.match(text.strip())
    if m is None:
        raise InputError(f"--min-memory {text!r} is not a memory size", hint=_SIZE_HINT)
    number, unit = float(m.group(1)), (m.group(2) or "").lower()
    if number <= 0:
        raise InputError(f"--min-memory {text!r} asks for no memory", hint="leave --min-memory out, or " + _SIZE_HINT)
    shown = f"{number:g}"
    if unit == "gb":
        return MemoryFloor(number * 1e9 / GIB, f"{shown} GB", si=True)
    return MemoryFloor(number, f"{shown} GiB")


def plain_profiles(profile_set: MigProfileSet) -> tuple[MigProfile, ...]:
    """The profiles suggestions are made of: no media (+me, +me.all), graphics (+gfx) or -me variant."""
    return tuple(p for p in profile_set.profiles if not p.media and "+" not in p.name and not p.name.endswith("-me"))


@dataclass(frozen=True)
class Suggestion:
    profile_set: MigProfileSet
    instances: tuple[planner.Instance, ...]  # creation order, placed by the planner

    @property
    def profiles(self) -> tuple[MigProfile, ...]:
        return tuple(i.profile for i in self.instances)

    @property
    def layout(self) -> str:
        """The --layout / --mig string (planner.parse_layout reads it back)."""
        return planner.layout_text(self.profiles)

    @property
    def compute_used(self) -> int:
        return sum(p.compute_slices for p in self.profiles)

    @property
    def memory_used(self) -> int:
        return sum(p.memory_slices for p in self.profiles)

    @property
    def unused_compute(self) -> int:
        return self.profile_set.compute_slices - self.compute_used

    @property
    def smallest_gib(self) -> float | None:
        """The smallest instance's memory (None when a profile's memory is not catalogued)."""
        gib = [p.memory_gib for p in self.profiles]
        return None if None in gib else min(g for g in gib if g is not None)

    def rank_key(self) -> tuple:
        compute = [p.compute_slices for p in self.profiles]
        return (
            self.unused_compute,
            -min(p.memory_slices for p in self.profiles),
            max(compute) - min(compute),
            -self.memory_used,
            self.layout,
        )


@dataclass(frozen=True)
class Suggestions:
    profile_set: MigProfileSet
    services: int
    floor: MemoryFloor | None
    eligible: tuple[MigProfile, ...]  # the plain profiles with enough memory
    unknown_memory: tuple[MigProfile, ...]  # plain profiles left out: memory not catalogued (with a floor only)
    ranked: tuple[Suggestion, ...]  # every valid layout, best first


def layouts(profile_set: MigProfileSet, profiles: Sequence[MigProfile], n: int) -> Iterator[tuple[MigProfile, ...]]:
    """Every multiset of exactly ``n`` of ``profiles`` within their instance limits and the compute
    slices that the planner places (creation order)."""
    kinds = planner.ordered(dict.fromkeys(profiles))
    total = profile_set.compute_slices

    def go(i: int, left: int, compute: int, chosen: tuple[MigProfile, ...]) -> Iterator[tuple[MigProfile, ...]]:
        if left == 0:
            if planner.arrange(profile_set, chosen) is not None:
                yield chosen
            return
        if i == len(kinds):
            return
        p = kinds[i]
        for k in range(min(left, p.max_instances), -1, -1):
            if compute + k * p.compute_slices > total:
                continue
            yield from go(i + 1, left - k, compute + k * p.compute_slices, chosen + (p,) * k)

    if n <= total:  # every instance takes at least one compute slice
        yield from go(0, n, 0, ())


def eligible_profiles(
    profile_set: MigProfileSet, floor: MemoryFloor | None
) -> tuple[tuple[MigProfile, ...], tuple[MigProfile, ...]]:
    """(plain profiles with at least ``floor``, plain profiles whose memory is not catalogued)."""
    plain = plain_profiles(profile_set)
    if floor is None:
        return plain, ()
    unknown = tuple(p for p in plain if p.memory_gib is None)
    return tuple(p for p in plain if p.memory_gib is not None and p.memory_gib >= floor.gib), unknown


def suggest(profile_set: MigProfileSet, services: int, floor: MemoryFloor | None = None) -> Suggestions:
    """Every valid layout of exactly ``services`` instances with at least ``floor`` each, ranked.

    ``ranked`` is empty when none fits (refusal() says what would)."""
    if services < 1:
        raise InputError(f"--services {services}: ask for 1 instance or more", hint="e.g. --services 3")
    eligible, unknown = eligible_profiles(profile_set, floor)
    found = []
    for profiles in layouts(profile_set, eligible, services):
        instances = planner.arrange(profile_set, profiles)
        assert instances is not None  # layouts() yields only what the planner places
        found.append(Suggestion(profile_set, instances))
    found.sort(key=Suggestion.rank_key)
    return Suggestions(profile_set, services, floor, eligible, unknown, tuple(found))


def most_instances(profile_set: MigProfileSet, floor: MemoryFloor | None) -> int:
    """The most instances with at least ``floor`` each that one GPU holds (0: not even one)."""
    eligible, _ = eligible_profiles(profile_set, floor)
    best = 0
    for n in range(1, profile_set.compute_slices + 1):
        if next(layouts(profile_set, eligible, n), None) is None:
            break  # fewer instances fit whenever more do: the first n that fails ends it
        best = n
    return best


def largest_floor(profile_set: MigProfileSet, services: int) -> tuple[float, str] | None:
    """The most memory ``services`` instances can each have (GiB, a layout giving it); None when
    that many do not fit, or fit only with profiles whose memory is not catalogued."""
    known = tuple(p for p in plain_profiles(profile_set) if p.memory_gib is not None)
    best: tuple[float, str] | None = None
    for profiles in layouts(profile_set, known, services):
        gib = min(p.memory_gib for p in profiles if p.memory_gib is not None)
        if best is None or gib > best[0]:
            best = (gib, planner.layout_text(profiles))
    return best


def _instances(n: int, verb: str = "") -> str:
    """ "1 instance fits", "3 instances fit" (verb: the plural form, or none)."""
    text = f"{n} instance" if n == 1 else f"{n} instances"
    return text + (f" {verb}s" if n == 1 else f" {verb}") if verb else text


def refusal(result: Suggestions, gpu: str) -> InputError:
    """Why no layout fits, naming the most instances that would fit at this memory and the most
    memory that this many instances could each have."""
    ps, n, floor = result.profile_set, result.services, result.floor
    where = gpu if gpu == ps.id else f"{gpu} ({ps.id})"
    each = f" of at least {floor.text()}{' each' if n > 1 else ''}" if floor else ""
    message = f"no MIG layout of {where} gives {_instances(n)}{each}"
    ways: list[str] = []
    details: list[str] = []
    most_any = most_instances(ps, None)
    if floor is None:
        ways.append(f"{gpu} holds at most {_instances(most_any)} (--services {most_any})")
    else:
        most = most_instances(ps, floor)
        if most:
            ways.append(
                f"{_instances(most)} of at least {floor.text()} {'fits' if most == 1 else 'fit'} (--services {most})"
            )
        else:
            sized = [p for p in plain_profiles(ps) if p.memory_gib is not None]
            if sized:
                top = max(sized, key=lambda p: (p.memory_gib, -p.compute_slices))
                known = " with a catalogued memory," if result.unknown_memory else ","
                details.append(f"the largest instance{known} {top.name}, has {top.memory_gib:g} GiB")
        largest = largest_floor(ps, n) if n <= most_any else None
        if largest is not None:
            each_one = " each" if n > 1 else ""
            ways.append(f"{_instances(n, 'fit')} with up to {largest[0]:g} GiB{each_one} (--min-memory {largest[0]:g})")
        elif n > most_any:
            ways.append(f"{gpu} holds at most {_instances(most_any)} of any size")
        if result.unknown_memory:
            if n <= most_any:
                ways.append("leave --min-memory out to consider " + ", ".join(p.name for p in result.unknown_memory))
            details.append(
                "not considered with --min-memory: "
                + ", ".join(p.name for p in result.unknown_memory)
                + f" (memory not catalogued for {ps.id} in compat/mig.yaml)"
            )
    hint = "; or ".join(ways) if ways else f"the profiles of {ps.id}: {', '.join(p.name for p in ps.profiles)}"
    return InputError(message, hint=hint, details=details)
