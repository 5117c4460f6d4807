"""The resolver's search: candidate stacks in the order of preference (provision.plan.resolve's
docstring), each held to the rules of provision.plan.rules, the first that passes returned as a
:class:`Choice`: a small record of what was chosen, not a Plan (provision.plan.assemble builds
the Plan and its reasons from it). What the catalogue gives the same arguments (a request's
driver candidates, a framework pin's builds, a CUDA release's images for a GPU and image OS,
runs_on's verdicts) is kept per catalogue (provision.matrix.memo), eliminations included, and
replayed into each resolution's record in the order the search reaches them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from provision.matrix import model as m
from provision.matrix import runs_on
from provision.matrix.memo import per_matrix
from provision.plan import rules
from provision.plan.context import Context, Elimination, PinText, Subject, parse_pins, request_facts
from provision.plan.rules import TIERS, CudaLink, CudnnChoice, carries_sm, cudnn_supports  # noqa: F401 (re-exported)
from provision.versions import major_minor, prefix_matches

BRANCH_TYPES = {
    "ltsb": "long-term support branch",
    "pb": "production branch",
    "nfb": "new feature branch",
    "unknown": "branch (designation not published)",
}


class DriverChoice(NamedTuple):
    branch: m.DriverBranch
    release: m.DriverRelease
    module: str
    packaging: m.DriverPackaging


class Choice(NamedTuple):
    """What the search chose: a driver and, unless the plan is host-only, a framework build (or
    none), a CUDA release, its image set, how the driver runs it and the cuDNN."""

    driver: DriverChoice
    fw_release: m.FrameworkRelease | None = None
    build: m.FrameworkBuild | None = None
    cuda: m.CudaRelease | None = None
    image: m.ImageRelease | None = None
    link: CudaLink | None = None
    cudnn: CudnnChoice | None = None
    # --host-only --cuda X: how the driver runs the CUDA X images the host must run (the least
    # preferred mode among them); None: no CUDA pin, or not a host-only plan
    host_runs: runs_on.Verdict | None = None
    # the stack packages chosen (provision.plan.rules.PackageDraft), in the request's order
    packages: tuple = ()

    @property
    def host_only(self) -> bool:
        return self.cuda is None


class DriverSearch(NamedTuple):
    choices: tuple[DriverChoice, ...]
    eliminations: tuple[Elimination, ...]
    skipped: tuple[tuple[m.DriverBranch, str], ...]  # branches the policy or end of life left out, why


def search(ctx: Context) -> Choice | None:
    """The first candidate stack that passes every rule, in the order of the module docstring of
    provision.plan.resolve.

    Whether the driver runs a CUDA release is provision.matrix.runs_on's answer: native, then
    minor-version, then forward compatibility (the images' cuda-compat package, data-center GPUs
    and the branches NVIDIA lists). A framework build is taken newest first if the driver runs it
    at all, each build natively if it can (a driver pinned to R535 gets the newest PyTorch build it
    runs, not an older native one); without a framework, a mode is used only when no CUDA release
    runs in a preferred mode on any candidate driver."""
    request = ctx.request
    found = driver_search(ctx.matrix, ctx.subject, request.driver)
    for elimination in found.eliminations:
        ctx.drop(elimination)
    ctx.skipped.extend(found.skipped)
    drivers = found.choices
    if not drivers:
        return None
    if request.host_only:
        return Choice(drivers[0]) if ctx.pins.cuda is None else host_cuda(ctx, drivers)
    builds = _framework_candidates(ctx)
    if ctx.pins.framework is not None and not builds:
        return None
    tiers = range(len(TIERS))
    if builds:
        order = ((drv, fw, tier) for drv in drivers for fw in builds for tier in tiers)
    else:
        order = ((drv, (None, None), tier) for tier in tiers for drv in drivers)
    package = ctx.pins.framework.package if ctx.pins.framework is not None else None
    fw_id = ctx.pins.framework.id if ctx.pins.framework is not None else None
    stack = ctx.pins.stack
    on, questions = (ctx.host, ctx.gpus[0].id), {}
    for drv, (fw_release, build), tier in order:
        question = questions.get(tier)
        if question is None:
            question = questions[tier] = rules.StackQuestion(
                ctx.matrix, on, ctx.cc, ctx.pins.cudnn, tier, package, stack, ctx.img_os, fw_id
            )
        for cuda, image in cuda_candidates(ctx, build):
            done = rules.run(rules.STACK_RULES, question, rules.StackDraft(drv, fw_release, build, cuda, image))
            if isinstance(done, Elimination):
                ctx.drop(done)
                continue
            return Choice(
                done.driver,
                done.fw_release,
                done.build,
                done.cuda,
                done.image,
                done.link,
                done.cudnn,
                None,
                done.packages,
            )
    return None


def host_cuda(ctx: Context, drivers: tuple[DriverChoice, ...]) -> Choice:
    """--host-only --cuda X: the first driver candidate that runs every catalogued CUDA X release's
    nvidia/cuda images on the GPU (provision.matrix.runs_on's rule: native, then minor-version,
    then forward compatibility), with no image part; BadPin naming the closest refusal when none does."""
    from provision.errors import BadPin

    pin = ctx.pins.cuda
    releases = [c for c in ctx.matrix.cuda if prefix_matches(pin, c.version)]
    if not releases:
        raise BadPin(
            f"--cuda {pin} is not a catalogued CUDA release",
            hint=f"provision matrix cuda lists them (newest: {ctx.matrix.cuda[0].version})",
        )
    needs = [runs_on.needs_for_cuda(ctx.matrix, c, f"CUDA {c.version} images") for c in releases]
    verdicts = [
        (drv, [runs_on.decide(ctx.matrix, n, drv.release.version, ctx.gpus[0]) for n in needs]) for drv in drivers
    ]
    for tier in range(len(TIERS)):  # native on any candidate before minor-version before forward-compat
        for drv, found in verdicts:
            if all(v.runs for v in found) and max(TIERS.index(v.mode) for v in found) <= tier:
                return Choice(drv, host_runs=max(found, key=lambda v: TIERS.index(v.mode)))
    drv, found = verdicts[0]
    refused = next(v for v in found if not v.runs)
    raise BadPin(
        f"--host-only --cuda {pin}: no candidate driver runs CUDA {pin} images on {ctx.gpu_id} "
        f"(R{drv.branch.branch}: {refused.reason})",
        hint=f"provision runs-on --gpu {ctx.gpu_id} --driver RELEASE says what a driver runs; or drop --cuda",
    )


# -- driver branches ------------------------------------------------------------------------------
@per_matrix
def driver_search(matrix: m.Matrix, subject: Subject, driver: str | None) -> DriverSearch:
    """The driver candidates of a request (each branch's newest fitting release), with what the
    policy, end of life and the driver rules left out: all a request's OS, GPU, platform, policy
    and --driver decide (its other pins are never read here)."""
    facts = request_facts(matrix, subject)
    pins = parse_pins(matrix, PinText(driver))
    policy = subject.policy
    as_of = matrix.as_of
    skipped: list[tuple[m.DriverBranch, str]] = []
    if pins.driver_branch is not None:
        branches = [matrix.branch(pins.driver_branch)]
    else:
        branches = []
        for b in matrix.drivers:
            if b.past_eol(as_of):
                skipped.append((b, f"end of life {b.eol or 'listed'}"))
            elif policy == "lts" and b.type not in ("ltsb", "pb"):
                skipped.append((b, BRANCH_TYPES[b.type]))
            else:
                branches.append(b)
    question = rules.DriverQuestion(matrix, facts, pins.driver_release)
    choices: list[DriverChoice] = []
    eliminations: list[Elimination] = []
    for b in branches:
        done = rules.run(rules.DRIVER_RULES, question, rules.DriverDraft(b))
        if isinstance(done, Elimination):
            eliminations.append(done)
            continue
        choices.append(DriverChoice(b, done.releases[0], done.module, done.packaging))
    return DriverSearch(tuple(choices), tuple(eliminations), tuple(skipped))


# -- framework builds -----------------------------------------------------------------------------
def _framework_candidates(ctx: Context) -> list[tuple[m.FrameworkRelease, m.FrameworkBuild]]:
    """The framework builds to try, in order, each refused one eliminated."""
    if ctx.pins.framework is None:
        return []
    drops, builds = framework_builds(ctx.matrix, ctx.request.framework, ctx.pins.cuda, ctx.host, ctx.cc)
    for drop in drops:
        ctx.drop(drop)
    return list(builds)


@per_matrix
def framework_builds(
    matrix: m.Matrix, framework: str, cuda_pin: str | None, host: str, cc: str
) -> tuple[tuple[Elimination, ...], tuple[tuple[m.FrameworkRelease, m.FrameworkBuild], ...]]:
    """(eliminations in order, the (release, build) pairs that pass) for a --framework pin: its
    releases (the one pinned, or all newest first), each release's builds the package index
    default first, then the other CUDA builds newest first."""
    pins = parse_pins(matrix, PinText(framework=framework))
    fw = pins.framework
    releases = [pins.framework_release] if pins.framework_release else list(fw.releases)
    question = rules.BuildQuestion(matrix, fw.package, cuda_pin, host, cc)
    drops, builds = [], []
    for rel in releases:
        for build in sorted(rel.builds, key=lambda b: (not b.default, [-x for x in b.cuda_version.release])):
            done = rules.run(rules.BUILD_RULES, question, rules.BuildDraft(rel, build))
            if isinstance(done, Elimination):
                drops.append(done)
                continue
            builds.append((rel, build))
    return tuple(drops), tuple(builds)


# -- CUDA releases and their images ---------------------------------------------------------------
def cuda_candidates(ctx: Context, build: m.FrameworkBuild | None) -> Iterator[tuple[m.CudaRelease, m.ImageRelease]]:
    """Each CUDA release the pin and the build allow, newest first, with its images that fit; image
    sets past NVIDIA's end of life come after every supported one (NVIDIA deletes their tags six
    months later), so they are chosen only when nothing supported fits, or when pinned. The
    eliminations are made as the search reaches each release (a refusal lists them in that order)."""
    matrix = ctx.matrix
    flavour = rules.image_flavour(matrix, build, ctx.pins.stack)
    ask = ctx.asks.get(flavour)
    if ask is None:
        ask = ctx.asks[flavour] = rules.CudaAsk(ctx.cc, ctx.arch.name, ctx.img_os, ctx.host, flavour)
    walk = cuda_walk(matrix, ctx.pins.cuda, None if build is None else build.cuda, ask)
    past_eol = []
    as_of = matrix.as_of
    for k, index in enumerate(walk.indices):
        reached = walk.reached[k]
        if reached is None:
            reached = walk.reached[k] = cuda_release(matrix, index, ask)
        for found in reached:
            if isinstance(found, Elimination):
                ctx.drop(found)
            elif found.image.past_eol(as_of):
                past_eol.append((found.cuda, found.image))
            else:
                yield found.cuda, found.image
    if not walk.catalogued:
        ctx.drop(
            Elimination(
                f"cuda {build.cuda}",
                f"not in the catalogue (oldest catalogued: {matrix.cuda[-1].version})",
                "cuda-uncatalogued",
            )
        )
    yield from past_eol


class CudaWalk:
    """The CUDA releases a pin and a build's line reach for one ask, and what each gives (made as
    the search first reaches it: most searches stop at the first release or two)."""

    __slots__ = ("catalogued", "indices", "reached")

    def __init__(self, indices: tuple[int, ...], catalogued: bool) -> None:
        self.indices, self.catalogued = indices, catalogued
        self.reached: list[tuple | None] = [None] * len(indices)


@per_matrix
def cuda_walk(matrix: m.Matrix, pin: str | None, line: str | None, ask: rules.CudaAsk) -> CudaWalk:
    return CudaWalk(*cuda_lines(matrix, pin, line))


@per_matrix
def cuda_lines(matrix: m.Matrix, pin: str | None, line: str | None) -> tuple[tuple[int, ...], bool]:
    """(indices into matrix.cuda of the releases matching the CUDA pin and the build's CUDA line,
    whether the build's line is catalogued at all)."""
    cudas = matrix.cuda
    return (
        tuple(
            i
            for i, cuda in enumerate(cudas)
            if (pin is None or prefix_matches(pin, cuda.version))
            and (line is None or major_minor(cuda.version) == line)
        ),
        line is None or any(major_minor(c.version) == line for c in cudas),
    )


@per_matrix
def cuda_release(matrix: m.Matrix, index: int, ask: rules.CudaAsk) -> tuple[Elimination | rules.ImageDraft, ...]:
    """What matrix.cuda[index] gives what ``ask`` names: a GPU of compute capability, a host whose
    images are for an image OS and start from a flavour: an ImageDraft for each image set that fits, an
    Elimination for each that does not (or one for the release), in order."""
    question = rules.CudaQuestion(matrix, *ask)
    done = rules.run(rules.CUDA_RULES, question, rules.CudaDraft(matrix.cuda[index]))
    if isinstance(done, Elimination):
        return (done,)
    return tuple(rules.run(rules.IMAGE_RULES, question, rules.ImageDraft(done.cuda, image)) for image in done.images)
