"""The resolver's explanation of a refusal: the summary (a line per kind of elimination, in the
order of provision.plan.rules.KINDS), the branches the policy left out, and the pin changes that
would resolve (each tried through the search itself).
"""

from __future__ import annotations

import re
from collections import Counter

from provision.errors import InputError
from provision.matrix import model as m
from provision.matrix.memo import per_matrix
from provision.plan.context import (
    Context,
    context,
    framework_named,
    image_os_of,
    published_image_oses,
    stack_named,
)
from provision.plan.model import Plan, PlanRequest
from provision.plan.rules import KINDS, kind_text
from provision.plan.search import BRANCH_TYPES, search
from provision.versions import DottedVersion as Version
from provision.versions import major_minor, prefix_matches


def pin_text(request: PlanRequest) -> str:
    pins = [
        f"{k}={getattr(request, k)}"
        for k in ("platform", "driver", "cuda", "cudnn", "framework", "image_os")
        if getattr(request, k)
    ]
    pins += [f"with={w}" for w in request.with_]
    if request.policy != "lts":
        pins.append(f"policy={request.policy}")
    if request.host_only:
        pins.append("host-only")
    return f" pins=[{', '.join(pins)}]" if pins else ""


def _span(items: list[str], limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


_ORDER = {row.kind: i for i, row in enumerate(KINDS)}


def summarise(ctx: Context, eliminations: list[tuple[str, str]] | None = None) -> list[str]:
    """A refusal in a few lines: one per rule that eliminated candidates (how many, one example),
    what a pin could have matched, and the branches the policy left out. The full list stays in
    the error's eliminations (provision plan --explain prints it)."""
    by_rule: dict[str, list[tuple[str, str]]] = {}
    for cand, why, rule in ctx.eliminated:
        by_rule.setdefault(rule, []).append((cand, why))
    lines = _pin_facts(ctx)
    for rule in sorted(by_rule, key=lambda r: _ORDER.get(r, len(_ORDER))):
        items = by_rule[rule]
        if len({why for _, why in items}) == 1:
            lines.append(f"{_span([cand for cand, _ in items])}: {items[0][1]}")
        else:  # the example: a candidate with the most common reason (versions aside)
            shapes = Counter(re.sub(r"\d+(\.\d+)*", "#", why) for _, why in items)
            cand, why = next(c for c in items if re.sub(r"\d+(\.\d+)*", "#", c[1]) == shapes.most_common(1)[0][0])
            lines.append(f"{len(items)} {kind_text(ctx, rule, len(items))}, e.g. {cand}: {why}")
    if ctx.skipped:
        lines.append(not_tried(ctx, short=True))
    if any(len(items) > 3 or len({why for _, why in items}) > 1 for items in by_rule.values()):
        lines.append(f"({len(ctx.eliminated)} candidates in all: provision plan … --explain lists each)")
    return lines


def not_tried(ctx: Context, *, short: bool = False) -> str:
    """The branches the policy or end of life left out: supported ones first (the policy's choice,
    which --policy latest widens), then those past end of life (only a --driver pin takes one)."""
    return _not_tried_text(ctx.matrix, short, ctx.request.policy, tuple((b.branch, why) for b, why in ctx.skipped))


@per_matrix
def _not_tried_text(matrix: m.Matrix, short: bool, policy: str, skipped_ids: tuple[tuple[int, str], ...]) -> str:
    as_of = matrix.as_of
    skipped = [(matrix.branch(number), why) for number, why in skipped_ids]
    supported = [(b, why) for b, why in skipped if not b.past_eol(as_of)]
    ended = [(b, why) for b, why in skipped if b.past_eol(as_of)]
    takes = "long-term support and production branches" if policy == "lts" else "branches"
    if not short:
        listed = ", ".join(f"{b.label} ({why})" for b, why in supported + ended)
        widen = "; --policy latest adds new feature branches" if supported else ""
        return (
            f"{listed}: policy {policy} takes {takes} not past end of life{widen}; "
            "a --driver pin takes any branch (end-of-life branches get no fixes)"
        )
    parts = []
    if supported:
        kinds = sorted({why for _, why in supported})
        parts.append(
            f"{_span([b.label for b, _ in supported], 4)} ({', '.join(kinds)}: policy {policy} leaves "
            f"{'it' if len(supported) == 1 else 'them'} out, --policy latest takes "
            f"{'it' if len(supported) == 1 else 'them'})"
        )
    if ended:
        parts.append(
            f"{len(ended)} branch{'es' if len(ended) > 1 else ''} past end of life "
            f"({_span([b.label for b, _ in ended], 4)}: only a --driver pin takes one)"
        )
    return "not tried: " + "; ".join(parts)


def _pin_facts(ctx: Context) -> list[str]:
    """For a cuDNN pin that no image for the OS carries: what they carry, and what the catalogue knows."""
    pin = ctx.pins.cudnn
    if not pin or "cudnn-pin" not in ctx.kinds:
        return []
    img_os = ctx.img_os
    carried = sorted(
        {Version(i.cudnn_version) for i in ctx.matrix.images if i.cudnn_version and img_os in i.os}, reverse=True
    )
    if any(prefix_matches(pin, v) for v in carried):
        return []  # some image carries it: the rules below say what else eliminated those stacks
    catalogued = sorted({c.version for c in ctx.matrix.cudnn}, reverse=True)
    matrices = [str(v) for v in catalogued if prefix_matches(pin, v)]
    known = (
        f"the catalogue's support matrices list {', '.join(matrices)}"
        if matrices
        else f"no catalogued support matrix matches either ({_range(catalogued)})"
    )
    return [
        f"--cudnn {pin}: no nvidia/cuda image for {img_os} with a catalogued cuDNN carries it "
        f"(they carry {_range(carried)}); {known}"
    ]


def _range(versions: list) -> str:
    if not versions:
        return "none"
    return str(versions[0]) if len(versions) == 1 else f"{versions[-1]} … {versions[0]}"


# -- the pin changes that would resolve -------------------------------------------------------------
def _resolves(matrix: m.Matrix, request: PlanRequest) -> Plan | None:
    """The plan of a request (no MIG layout, no hint of its own), or None where it is refused."""
    from provision.plan.assemble import assemble

    try:
        ctx = context(matrix, request)
        choice = search(ctx)
        return None if choice is None else assemble(ctx, choice)
    except InputError:
        return None


def suggest(matrix: m.Matrix, request: PlanRequest, kinds: frozenset[str] = frozenset(), limit: int = 3) -> str:
    """Pin changes that resolve, cheapest first. Driver branches are offered as the resolver's
    ``lts`` policy would take them (``driver_order``): supported long-term support and production
    branches, newest first, with the long-term support branch that works always among them; new
    feature branches after those; end-of-life branches only when no supported branch resolves."""

    def replace(req: PlanRequest, **changes) -> PlanRequest:
        return req._replace(**changes)

    found: list[str] = []

    def attempt(label: str, req: PlanRequest) -> None:
        if len(found) >= limit:
            return
        plan = _resolves(matrix, req)
        if plan is not None:
            found.append(f"{label} ({_gives(plan)})")

    if kinds & {"image", "image-platform"} and not request.host_only:
        # the container's OS is independent of the host's: other images first, then the host alone
        own = image_os_of(matrix, matrix.os(request.os), request.image_os)
        for img_os in published_image_oses(matrix):
            if img_os != own and len(found) < 2:
                attempt(f"--image-os {img_os}", replace(request, image_os=img_os))
    if request.cuda:
        for mm in sorted({major_minor(c.version) for c in matrix.cuda}, key=Version, reverse=True):
            if mm != request.cuda and len(found) < 2:
                attempt(f"--cuda {mm}", replace(request, cuda=mm))
    if request.driver:
        found.extend(_driver_suggestions(matrix, request, limit - len(found)))
    stack_hint = _stack_suggestions(matrix, request) if request.with_ or _names_stack(matrix, request) else []
    found.extend(stack_hint[:limit])
    if request.framework and "==" in request.framework and not _names_stack(matrix, request):
        name, _, ver = request.framework.partition("==")
        fw = framework_named(matrix, name) or matrix.framework(name)
        for rel in fw.releases:
            if str(rel.version) != ver and len(found) < limit:
                attempt(f"--framework {name}=={rel.version}", replace(request, framework=f"{name}=={rel.version}"))
                if found and found[-1].startswith("--framework"):
                    break
    if request.cudnn:
        carried = {Version(i.cudnn_version).release[0] for i in matrix.images if i.cudnn_version}
        for major in sorted(carried, reverse=True):
            if str(major) != request.cudnn.strip().split(".")[0] and len(found) < 2:
                attempt(f"--cudnn {major}", replace(request, cudnn=str(major)))
        attempt("drop --cudnn", replace(request, cudnn=None))
    for key in ("cuda", "driver", "framework"):
        if getattr(request, key):
            attempt(f"drop --{key}", replace(request, **{key: None}))
    if request.policy == "lts":
        attempt("--policy latest", replace(request, policy="latest"))
    if request.image_os:
        attempt("drop --image-os", replace(request, image_os=None))
    if kinds & {"image", "image-platform"} and not request.host_only and len(found) < limit:
        bare = replace(request, cuda=None, cudnn=None, framework=None, image_os=None, host_only=True)
        attempt("--host-only without image pins", bare)
    if not found:
        for os_rel in matrix.os_releases:
            if os_rel.id != request.os:
                attempt(f"--os {os_rel.id}", replace(request, os=os_rel.id))
    if not found:
        return "no single pin change resolves; see the reasons above and provision matrix check"
    return "try " + "; or ".join(found)


def _names_stack(matrix: m.Matrix, request: PlanRequest) -> bool:
    """--framework names a stack package (an inference image: onnxruntime, tensorrt)."""
    name = (request.framework or "").partition("==")[0].strip()
    return bool(name) and framework_named(matrix, name) is None and stack_named(matrix, name) is not None


def _stack_suggestions(matrix: m.Matrix, request: PlanRequest) -> list[str]:
    """For each stack package pinned to a release (--with NAME==V, --framework onnxruntime==V): the
    catalogued releases that resolve with everything else as asked, each tried through the search,
    as the range they span (``onnxruntime >= 1.19.0, <= 1.23.2``) and the newest as a pin."""
    given = [("framework", request.framework)] if _names_stack(matrix, request) else []
    given += [("with", w) for w in request.with_]
    out = []
    for flag, text in given:
        name, _, version = text.partition("==")
        if not version:
            continue
        package = stack_named(matrix, name.strip())
        works = []
        for release in package.releases:
            pin = f"{name.strip()}=={release.version}"
            if flag == "framework":
                changed = request._replace(framework=pin)
            else:
                changed = request._replace(with_=tuple(pin if w == text else w for w in request.with_))
            if str(release.version) != version.strip() and _resolves(matrix, changed) is not None:
                works.append(release.version)
        if not works:
            continue
        ordered = sorted(works)
        every = [r.version for r in package.releases]
        low, high = ordered[0], ordered[-1]
        span = [v for v in every if low <= v <= high]
        if len(span) != len(works):
            spans = ", ".join(str(v) for v in ordered[::-1][:6])
            what = f"{package.id} {spans}{', …' if len(ordered) > 6 else ''}"
        elif high == every[0]:
            what = f"{package.id} >= {low}"
        elif low == every[-1]:
            what = f"{package.id} <= {high}"
        else:
            what = f"{package.id} >= {low}, <= {high}"
        out.append(f"--{flag} {package.id}=={high} (the releases that fit: {what})")
    return out


def _gives(plan: Plan) -> str:
    if plan.cuda is None:
        return f"gives driver {plan.driver.version}, no image"
    image = f" on {plan.image_os} images" if plan.image_os != plan.os.cuda_image_os else ""
    return f"gives driver {plan.driver.version}, cuda {plan.cuda.version}{image}"


def driver_order(matrix: m.Matrix) -> list[m.DriverBranch]:
    """Branches in the order a hint offers them: not past end of life on the catalogue's date
    first; among those long-term support and production branches before new feature branches
    (and branches without a published designation); newest first within each."""
    as_of = matrix.as_of
    return sorted(matrix.drivers, key=lambda b: (b.past_eol(as_of), b.type not in ("ltsb", "pb"), -b.branch))


def _driver_text(matrix: m.Matrix, branch: m.DriverBranch, plan: Plan) -> str:
    kind = BRANCH_TYPES[branch.type]
    if branch.past_eol(matrix.as_of):
        kind += f", past end of life {branch.eol or '(listed)'}"
    elif branch.eol:
        kind += f" until {branch.eol}"
    return f"--driver {branch.branch} ({branch.label} {kind}; {_gives(plan)})"


def _driver_suggestions(matrix: m.Matrix, request: PlanRequest, room: int) -> list[str]:
    """Up to ``room`` --driver changes that resolve, in ``driver_order``; a supported long-term
    support branch that resolves is always among them (it takes the last place if newer branches
    filled the others), and end-of-life branches are offered only when no supported one resolves."""
    if room <= 0 or request.driver is None:
        return []
    pinned = request.driver.strip().lstrip("Rr").split(".")[0]
    as_of = matrix.as_of
    working: list[tuple[m.DriverBranch, Plan]] = []
    for b in driver_order(matrix):
        if str(b.branch) == pinned:
            continue
        if b.past_eol(as_of) and any(not w.past_eol(as_of) for w, _ in working):
            break  # a supported branch resolves: end-of-life ones are not offered
        if len(working) >= room:
            if any(w.type == "ltsb" for w, _ in working) or b.past_eol(as_of):
                break
            if b.type != "ltsb":
                continue  # the places are taken: only a supported long-term support branch may still join
        plan = _resolves(matrix, request._replace(driver=str(b.branch)))
        if plan is not None:
            working.append((b, plan))
    chosen = working[:room]
    if len(working) > room and not any(b.type == "ltsb" for b, _ in chosen):
        chosen[-1] = working[-1]  # the long-term support branch found past the places
    return [_driver_text(matrix, b, plan) for b, plan in chosen]
