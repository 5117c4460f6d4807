"""The MIG layout planner behind `provision mig plan`: pure logic, no click, no output.

Model (compat/mig.yaml, as `nvidia-smi mig -lgipp` lists it): a GPU has ``memory_slices``
memory slots (8; 4 on an A30) and ``compute_slices`` compute slices (7; 4 on an A30). A GPU instance of profile P
occupies the memory slots ``[start, start + P.memory_slices)`` with ``start`` one of
``P.placements``; instances must not overlap; their compute slices add up to at most the
GPU's; at most ``P.max_instances`` instances of P; at most one media (``+me``) instance.
A layout is valid when such an arrangement exists: slice sums alone are not enough (a
1-slot 1g profile cannot start at slot 7, a 2g only at 0, 2 or 4, a 4g only at 0).

The search is a backtracking over the allowed starts, larger instances first, each start
tried from the highest down (the low slots are the flexible ones: 4g and 7g start only at
0). The space is tiny (at most 7 instances on 8 slots), so it is exhaustive and exact.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from provision.errors import InputError
from provision.matrix.model import Gpu, Matrix, MigProfile, MigProfileSet
from provision.matrix.suggest import close_ids

# A Kubernetes label value (the GPU Operator selects a mig-parted config by the node label
# nvidia.com/mig.config), which is also a safe mig-parted config name.
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_COUNTED = re.compile(r"^(\d+)\s*[x*]\s*(\S+)$", re.IGNORECASE)


class MigLayoutError(InputError):
    """A layout that no arrangement of the GPU's memory slots can hold (exit 2).

    ``problems``: why, one line each; ``completions``: the largest valid sub-layouts of the
    request (profile names, creation order), best first.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str | None,
        problems: list[str],
        completions: list[tuple[str, ...]],
        details: list[str],
    ):
        super().__init__(message, hint=hint, details=details)
        self.problems = problems
        self.completions = completions


# -- instances and plans ---------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """A GPU instance of ``profile`` whose memory starts at slot ``start``."""

    profile: MigProfile
    start: int

    @property
    def end(self) -> int:  # exclusive
        return self.start + self.profile.memory_slices

    @property
    def slots(self) -> range:
        return range(self.start, self.end)

    @property
    def label(self) -> str:
        return f"{self.profile.name}@{self.start}"

    def span(self) -> str:
        return f"slot {self.start}" if self.profile.memory_slices == 1 else f"slots {self.start}-{self.end - 1}"

    def to_dict(self) -> dict[str, Any]:
        p = self.profile
        return {
            "profile": p.name,
            "profile_id": p.id,
            "placement": self.start,
            "memory_slices": p.memory_slices,
            "compute_slices": p.compute_slices,
            "memory_slots": list(self.slots),
            "memory_gib": p.memory_gib,
            "sms": p.sms,
            "media": p.media,
        }


@dataclass(frozen=True)
class MigPlan:
    gpu: str  # the catalogue id (or group id) the plan was made for
    profile_set: MigProfileSet
    instances: tuple[Instance, ...]  # creation order: larger instances first
    request: tuple[str, ...]  # the requested profile names, as given (canonical spelling)
    name: str  # the mig-parted config name
    fill: str | None = None
    filled: int = 0  # instances of `fill` added to the request
    pci_device_ids: tuple[str, ...] = ()  # of the GPUs covered (catalogue form, 0x20B0)
    device_filter: bool = False  # restrict the mig-parted entry to those PCI ids

    @property
    def compute_used(self) -> int:
        return sum(i.profile.compute_slices for i in self.instances)

    @property
    def memory_used(self) -> int:
        return sum(i.profile.memory_slices for i in self.instances)

    @property
    def free_slots(self) -> list[int]:
        used = {s for i in self.instances for s in i.slots}
        return [s for s in range(self.profile_set.memory_slices) if s not in used]

    def devices(self) -> dict[str, int]:
        """mig-devices: profile name -> count, larger profiles first."""
        return dict(Counter(i.profile.name for i in self.instances))

    def note(self) -> str | None:
        return placements_note(self.profile_set)

    def to_dict(self) -> dict[str, Any]:
        ps = self.profile_set
        doc: dict[str, Any] = {
            "gpu": self.gpu,
            "profile_set": ps.id,
            "placements_confirmed": ps.placements_confirmed,
        }
        if (note := self.note()) is not None:
            doc["note"] = note
        doc["request"] = list(self.request)
        if self.fill is not None:
            doc["fill"] = {"profile": self.fill, "added": self.filled}
        doc["instances"] = [i.to_dict() for i in self.instances]
        doc["used"] = {"compute_slices": self.compute_used, "memory_slices": self.memory_used}
        doc["free"] = {
            "compute_slices": ps.compute_slices - self.compute_used,
            "memory_slices": len(self.free_slots),
            "memory_slots": self.free_slots,
            "can_add": {p.name: n for p, n in room(ps, [i.profile for i in self.instances])},
        }
        from provision.mig.parted import ansible_vars, mig_parted_config

        doc["mig_parted"] = mig_parted_config(self)
        doc["ansible_vars"] = ansible_vars(self)
        return doc


def placements_note(profile_set: MigProfileSet) -> str | None:
    """What to check on the host when no -lgipp capture of this exact GPU backs the placements."""
    if profile_set.placements_confirmed:
        return None
    return (
        f"placements for {profile_set.id} come from the same die family, not from an -lgipp "
        f"capture of this GPU; check them with `nvidia-smi mig -lgipp` on the host "
        f"[data: {profile_set.note}]"
    )


# -- parsing ---------------------------------------------------------------------------------


def describe_profile(p: MigProfile) -> str:
    starts = ",".join(str(s) for s in p.placements)
    media = ", media engines" if p.media else ""
    pid = "?" if p.id is None else p.id
    return (
        f"{p.name:<12} id {pid!s:>2}  {p.compute_slices} compute + {p.memory_slices} memory slices, "
        f"starts {{{starts}}}, at most {p.max_instances}{media}"
    )


def find_profile(profile_set: MigProfileSet, name: str) -> MigProfile:
    """The profile called ``name`` (case-insensitive); InputError listing the set's profiles."""
    wanted = name.strip().lower()
    for p in profile_set.profiles:
        if p.name.lower() == wanted:
            return p
    names = [p.name for p in profile_set.profiles]
    close, _ = close_ids(wanted, names, limit=2)
    guess = f"did you mean {' or '.join(close)}? " if close else ""
    raise InputError(
        f"unknown MIG profile {name.strip()!r} for {profile_set.id}",
        hint=f"{guess}the profiles of {profile_set.id}: {', '.join(names)}",
        details=[describe_profile(p) for p in profile_set.profiles],
    )


class Flags(NamedTuple):
    """The command-line flags a hint names: `provision mig plan`'s by default; `provision plan
    --mig` passes its own (its layout flag, and no fill flag)."""

    layout: str = "--layout"
    fill: str | None = "--fill"


MIG_PLAN_FLAGS = Flags()


def parse_layout(
    profile_set: MigProfileSet, layout: str | Iterable[str | MigProfile] | None, flags: Flags = MIG_PLAN_FLAGS
) -> tuple[MigProfile, ...]:
    """``"3g.40gb,2g.20gb,2x1g.10gb"`` (or a list of names/profiles) -> the profiles, in order.

    Names are matched case-insensitively; ``Nx`` before a name repeats it.
    """
    if layout is None:
        return ()
    items = [x.strip() for x in layout.split(",")] if isinstance(layout, str) else list(layout)
    if isinstance(layout, str) and items == [""]:
        return ()
    out: list[MigProfile] = []
    for item in items:
        if isinstance(item, MigProfile):
            out.append(find_profile(profile_set, item.name))
            continue
        if not item:
            raise InputError(
                f"empty entry in MIG layout {layout!r}",
                hint=f"separate profiles with single commas: {flags.layout} 3g.40gb,2g.20gb,2x1g.10gb",
            )
        count, name = 1, item
        if (m := _COUNTED.match(item)) and not find_profile_or_none(profile_set, item):
            count, name = int(m.group(1)), m.group(2)
            if count < 1:
                raise InputError(
                    f"MIG layout entry {item!r} asks for no instance", hint="drop it, or give a count of 1 or more"
                )
        out.extend([find_profile(profile_set, name)] * count)
    return tuple(out)


def find_profile_or_none(profile_set: MigProfileSet, name: str) -> MigProfile | None:
    wanted = name.strip().lower()
    return next((p for p in profile_set.profiles if p.name.lower() == wanted), None)


# -- the search ------------------------------------------------------------------------------


def creation_key(p: MigProfile) -> tuple:
    """Larger instances first (memory, then compute), then the least flexible, then by name."""
    return (-p.memory_slices, -p.compute_slices, len(p.placements), p.name)


def ordered(profiles: Iterable[MigProfile]) -> tuple[MigProfile, ...]:
    return tuple(sorted(profiles, key=creation_key))


def count_problems(profile_set: MigProfileSet, profiles: Sequence[MigProfile]) -> list[str]:
    """What is wrong with a layout before any placement: instance limits, media, compute slices."""
    problems = []
    counts = Counter(profiles)
    for p in ordered(counts):
        if counts[p] > p.max_instances:
            problems.append(f"{counts[p]}x {p.name}: at most {p.max_instances} on a GPU of {profile_set.id}")
    media = [p for p in profiles if p.media]
    if len(media) > 1 and not (len(set(media)) == 1 and len(media) > media[0].max_instances):
        problems.append(
            f"{len(media)} media instances ({', '.join(p.name for p in ordered(media))}): the GPU's "
            "media engines go to one +me instance at most"
        )
    compute = sum(p.compute_slices for p in profiles)
    if compute > profile_set.compute_slices:
        terms = "+".join(str(p.compute_slices) for p in ordered(profiles))
        problems.append(f"compute slices: {terms} = {compute}, the GPU has {profile_set.compute_slices}")
    return problems


@lru_cache(maxsize=1 << 16)
def _arrange(profile_set: MigProfileSet, profiles: tuple[MigProfile, ...]) -> tuple[int, ...] | None:
    """Starts for ``profiles`` (already in creation order), or None when none exists.

    Only placement: instance counts, media and compute slices are count_problems().
    """
    n = len(profiles)
    slots = profile_set.memory_slices
    starts = [0] * n

    def go(i: int, occupied: int) -> bool:
        if i == n:
            return True
        p = profiles[i]
        # identical instances are interchangeable: take their starts in decreasing order only
        bound = starts[i - 1] if i and profiles[i - 1] == p else None
        for s in sorted(p.placements, reverse=True):
            if (bound is not None and s >= bound) or s + p.memory_slices > slots:
                continue
            mask = ((1 << p.memory_slices) - 1) << s
            if occupied & mask:
                continue
            starts[i] = s
            if go(i + 1, occupied | mask):
                return True
        return False

    return tuple(starts) if go(0, 0) else None


def arrange(profile_set: MigProfileSet, profiles: Iterable[MigProfile]) -> tuple[Instance, ...] | None:
    """A valid arrangement of ``profiles`` (creation order), or None when the layout is invalid."""
    profiles = ordered(profiles)
    if count_problems(profile_set, profiles):
        return None
    starts = _arrange(profile_set, profiles)
    if starts is None:
        return None
    return tuple(Instance(p, s) for p, s in zip(profiles, starts, strict=True))


def fits(profile_set: MigProfileSet, profiles: Iterable[MigProfile]) -> bool:
    return arrange(profile_set, profiles) is not None


def arrangements(profile_set: MigProfileSet, profiles: Iterable[MigProfile]) -> Iterator[tuple[Instance, ...]]:
    """Every placement-valid arrangement (identical instances taken once, in decreasing starts)."""
    profiles = ordered(profiles)
    slots = profile_set.memory_slices

    def go(i: int, occupied: int, placed: tuple[Instance, ...]) -> Iterator[tuple[Instance, ...]]:
        if i == len(profiles):
            yield placed
            return
        p = profiles[i]
        bound = placed[-1].start if i and profiles[i - 1] == p else None
        for s in sorted(p.placements, reverse=True):
            if (bound is not None and s >= bound) or s + p.memory_slices > slots:
                continue
            mask = ((1 << p.memory_slices) - 1) << s
            if not occupied & mask:
                yield from go(i + 1, occupied | mask, (*placed, Instance(p, s)))

    yield from go(0, 0, ())


def room(profile_set: MigProfileSet, profiles: Sequence[MigProfile]) -> list[tuple[MigProfile, int]]:
    """For each profile, the most instances of it that can be added to a valid layout (> 0 only)."""
    out = []
    for p in profile_set.profiles:
        n = max_fill(profile_set, profiles, p)
        if n:
            out.append((p, n))
    return out


def max_fill(profile_set: MigProfileSet, profiles: Sequence[MigProfile], fill: MigProfile) -> int:
    """The most instances of ``fill`` that fit beside ``profiles`` (0 when none, or invalid)."""
    have = sum(1 for p in profiles if p == fill)
    free_compute = profile_set.compute_slices - sum(p.compute_slices for p in profiles)
    upper = min(fill.max_instances - have, free_compute // max(fill.compute_slices, 1))
    for k in range(upper, 0, -1):
        if fits(profile_set, [*profiles, *[fill] * k]):
            return k
    return 0


# -- refusal: why, and what would fit --------------------------------------------------------


def _slots_text(starts: Iterable[int]) -> str:
    return "{" + ",".join(str(s) for s in starts) + "}"


def _nth(profiles: Sequence[MigProfile], i: int) -> str:
    p = profiles[i]
    total = sum(1 for q in profiles if q == p)
    if total == 1:
        return p.name
    return f"{p.name} #{sum(1 for q in profiles[:i] if q == p) + 1} of {total}"


def placement_problem(profile_set: MigProfileSet, profiles: Sequence[MigProfile]) -> list[str]:
    """Which instance finds no placement, and what blocks each of its allowed starts.

    Instances are placed in creation order; the first one that no arrangement of the
    instances before it leaves room for is the one reported. Empty when the layout places.
    """
    profiles = ordered(profiles)
    lines: list[str] = []
    memory = sum(p.memory_slices for p in profiles)
    if memory > profile_set.memory_slices:
        terms = "+".join(str(p.memory_slices) for p in profiles)
        lines.append(f"memory slices: {terms} = {memory}, the GPU has {profile_set.memory_slices}")
    for i in range(len(profiles)):
        if _arrange(profile_set, profiles[: i + 1]) is not None:
            continue
        prefix = profiles[:i]
        starts = _arrange(profile_set, prefix) or ()
        placed = [Instance(p, s) for p, s in zip(prefix, starts, strict=True)]
        blocker = profiles[i]
        groups: dict[tuple[str, ...], list[int]] = {}
        for s in blocker.placements:
            over = tuple(f"{x.label} ({x.span()})" for x in placed if x.start < s + blocker.memory_slices and s < x.end)
            groups.setdefault(over, []).append(s)
        parts = []
        for over, ss in groups.items():
            verb = "overlaps" if len(ss) == 1 and len(over) == 1 else "overlap"
            parts.append(
                f"{'start' if len(ss) == 1 else 'starts'} {','.join(map(str, ss))} {verb} {' and '.join(over)}"
            )
        lines.append(
            f"{_nth(profiles, i)} finds no placement: it may start at "
            f"{_slots_text(blocker.placements)} ({blocker.memory_slices} memory "
            f"{'slot' if blocker.memory_slices == 1 else 'slots'}); " + "; ".join(parts)
        )
        used = {s for x in placed for s in x.slots}
        free = [s for s in range(profile_set.memory_slices) if s not in used]
        if free:
            lines.append(
                f"  free {'slot' if len(free) == 1 else 'slots'} {_slots_text(free)} "
                f"{'holds' if len(free) == 1 else 'hold'} no allowed {blocker.name} placement"
            )
        if prefix:
            count = sum(1 for _ in arrangements(profile_set, prefix))
            which = "their only arrangement leaves no" if count == 1 else f"none of their {count} arrangements leaves"
            lines.append(
                f"  placed before it (larger first): {', '.join(x.label for x in placed)}; {which} room for it"
            )
        break
    return lines


def completions(
    profile_set: MigProfileSet, profiles: Sequence[MigProfile], limit: int = 3
) -> list[tuple[MigProfile, ...]]:
    """The largest valid sub-layouts of a request, best first: most instances kept, then most
    compute slices, then most memory slices. Only maximal ones (none is part of another)."""
    counts = Counter(profiles)
    kinds = ordered(counts)
    valid: list[tuple[int, ...]] = []

    def sub_layouts(i: int, compute: int, media: int, vec: tuple[int, ...]) -> None:
        # every sub-multiset within the instance limits, compute slices and one media instance
        if i == len(kinds):
            sub = [p for p, n in zip(kinds, vec, strict=True) for _ in range(n)]
            if sub and _arrange(profile_set, ordered(sub)) is not None:
                valid.append(vec)
            return
        p = kinds[i]
        for n in range(min(counts[p], p.max_instances) + 1):
            if compute + n * p.compute_slices > profile_set.compute_slices or media + n * p.media > 1:
                break
            sub_layouts(i + 1, compute + n * p.compute_slices, media + n * p.media, (*vec, n))

    sub_layouts(0, 0, 0, ())

    def score(vec: tuple[int, ...]) -> tuple:
        return (
            -sum(vec),
            -sum(n * p.compute_slices for p, n in zip(kinds, vec, strict=True)),
            -sum(n * p.memory_slices for p, n in zip(kinds, vec, strict=True)),
            tuple(-n for n in vec),
        )

    valid.sort(key=score)
    best: list[tuple[int, ...]] = []
    for vec in valid:
        if any(all(a <= b for a, b in zip(vec, other, strict=True)) for other in best):
            continue
        best.append(vec)
        if len(best) == limit:
            break
    return [tuple(p for p, n in zip(kinds, vec, strict=True) for _ in range(n)) for vec in best]


def layout_text(profiles: Iterable[MigProfile]) -> str:
    """``3g.40gb,2g.20gb,2x1g.10gb`` (creation order; parse_layout reads it back)."""
    counts = Counter(ordered(profiles))
    return ",".join(p.name if n == 1 else f"{n}x{p.name}" for p, n in counts.items())


def refusal(
    profile_set: MigProfileSet, profiles: Sequence[MigProfile], gpu: str | None = None, flags: Flags = MIG_PLAN_FLAGS
) -> MigLayoutError:
    """The error for a layout that does not fit: why (which instance finds no placement),
    and the largest valid sub-layouts, each with what could still be added to it."""
    profiles = ordered(profiles)
    problems = count_problems(profile_set, profiles) or placement_problem(profile_set, profiles)
    subs = completions(profile_set, profiles)
    details = list(problems)
    for sub in subs:
        dropped = Counter(profiles) - Counter(sub)
        extra = room(profile_set, sub)
        line = (
            f"fits: {flags.layout} {layout_text(sub)} (keeps {len(sub)} of {len(profiles)}, "
            f"drops {layout_text(dropped.elements())})"
        )
        if extra:
            line += "; room left for " + " or ".join(p.name if n == 1 else f"{n}x{p.name}" for p, n in extra)
        details.append(line)
    where = gpu or profile_set.id
    gpu_text = where if where == profile_set.id else f"{where} ({profile_set.id})"
    message = f"MIG layout {layout_text(profiles)} does not fit on {gpu_text}"
    if subs:
        hint = f"try {flags.layout} {layout_text(subs[0])}"
        if flags.fill and room(profile_set, subs[0]):
            hint += f" and {flags.fill} PROFILE to pack what is left"
    else:
        hint = f"the profiles of {profile_set.id}: {', '.join(p.name for p in profile_set.profiles)}"
    return MigLayoutError(
        message, hint=hint, problems=problems, completions=[tuple(p.name for p in s) for s in subs], details=details
    )


# -- planning --------------------------------------------------------------------------------


def plan_layout(
    profile_set: MigProfileSet,
    layout: str | Iterable[str | MigProfile] | None,
    fill: str | MigProfile | None = None,
    *,
    gpu: str | None = None,
    name: str | None = None,
    pci_device_ids: Sequence[str] = (),
    device_filter: bool = False,
    flags: Flags = MIG_PLAN_FLAGS,
) -> MigPlan:
    """Place ``layout`` on a GPU of ``profile_set``, then add as many ``fill`` instances as fit.

    ``fill`` alone (no layout) fills the whole GPU with that profile. Raises MigLayoutError
    (an InputError, exit 2) when the layout does not fit, InputError for unknown profiles.
    """
    profiles = parse_layout(profile_set, layout, flags)
    fill_profile = None
    if fill is not None:
        fill_profile = find_profile(profile_set, fill.name if isinstance(fill, MigProfile) else fill)
    if not profiles and fill_profile is None:
        give = f"{flags.layout} PROFILES" + (f" and/or {flags.fill} PROFILE" if flags.fill else "")
        raise InputError(
            f"no MIG layout: give {give}",
            hint=f"e.g. {flags.layout} {layout_text(_example(profile_set))}; "
            f"profiles of {profile_set.id}: {', '.join(p.name for p in profile_set.profiles)}",
        )
    if arrange(profile_set, profiles) is None and profiles:
        raise refusal(profile_set, profiles, gpu, flags)
    filled = 0
    if fill_profile is not None:
        filled = max_fill(profile_set, profiles, fill_profile)
    everything = [*profiles, *[fill_profile] * filled] if fill_profile is not None else list(profiles)
    instances = arrange(profile_set, everything)
    assert instances is not None  # max_fill only counts what fits
    gpu = gpu or profile_set.id
    if name is None:
        name = default_config_name(gpu, instances)
    else:
        check_config_name(name)
    return MigPlan(
        gpu=gpu,
        profile_set=profile_set,
        instances=instances,
        request=tuple(p.name for p in profiles),
        name=name,
        fill=fill_profile.name if fill_profile else None,
        filled=filled,
        pci_device_ids=tuple(pci_device_ids),
        device_filter=device_filter,
    )


def _example(profile_set: MigProfileSet) -> tuple[MigProfile, ...]:
    """A valid two-profile example for hints: the largest profile that leaves room, plus room."""
    for p in sorted(profile_set.profiles, key=creation_key):
        for q, n in room(profile_set, [p]):
            return (p, *[q] * n)
    return profile_set.profiles[:1]


def default_config_name(gpu: str, instances: Sequence[Instance]) -> str:
    """``provision-<gpu>-<layout slug>``; a short hash instead when that would pass 63 characters."""
    counts = Counter(i.profile.name for i in instances)
    slug = "-".join(n if c == 1 else f"{c}x{n}" for n, c in counts.items()).replace("+", ".")
    name = f"provision-{gpu}-{slug}"
    if len(name) > 63 or not _LABEL_VALUE.match(name):
        digest = hashlib.sha256(",".join(f"{c}x{n}" for n, c in counts.items()).encode()).hexdigest()[:8]
        name = f"provision-{gpu}-{digest}"
    return name


def check_config_name(name: str) -> None:
    if not _LABEL_VALUE.match(name):
        raise InputError(
            f"--name {name!r} is not a usable mig-parted config name",
            hint="1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit "
            "(the GPU Operator selects it through the nvidia.com/mig.config node label)",
        )


# -- GPUs ------------------------------------------------------------------------------------


def mig_capable(matrix: Matrix) -> list[str]:
    """Catalogue GPU ids and groups that have one MIG profile set."""
    ids = [g.id for g in matrix.gpus if g.mig is not None]
    for group in matrix.gpu_groups:
        sets = {matrix.gpu(m).mig for m in group.members}
        if len(sets) == 1 and None not in sets:
            ids.append(group.id)
    return ids


def gpu_profile_set(matrix: Matrix, ident: str) -> tuple[str, MigProfileSet, tuple[Gpu, ...]]:
    """Resolve a GPU id, alias or group to (canonical id, its MIG profile set, the GPUs).

    InputError (exit 2) for an unknown GPU, a GPU without MIG, or a group whose GPUs have
    different MIG layouts.
    """
    canonical, members = matrix.gpu_members(ident)
    without = [g.id for g in members if g.mig is None]
    if without:
        raise InputError(
            f"{canonical} has no MIG" + ("" if without == [canonical] else f" ({', '.join(without)})"),
            hint=f"MIG-capable GPUs: {', '.join(mig_capable(matrix))}",
        )
    sets = {g.mig for g in members}
    if len(sets) > 1:
        raise InputError(
            f"{canonical} covers GPUs with different MIG layouts",
            hint=f"pick one: {', '.join('--gpu ' + g.id for g in members)}",
            details=[f"{g.id}: {g.mig}" for g in members],
        )
    return canonical, matrix.mig_set(sets.pop()), members
