"""Resolve a plan request (OS, GPU, optional pins) against the compatibility matrix.

This docstring is the one statement of the order of preference (README "Order of preference"
repeats it); the code holds to it in four rooms: provision.plan.context (the request, its facts
and pins), provision.plan.search (candidates in this order, held to the rules of
provision.plan.rules, returning a Choice), provision.plan.assemble (the Plan and its reasons) and
provision.plan.explain (a refusal's summary and the pin changes that would resolve).

Order of preference, first consistent stack wins (every rule shows up in the plan's reasons):

1. Driver branch: the pinned one (``--driver`` names the branch or the release), else by policy:
   ``lts`` (default) tries the Long Term Support and Production branches not past end of life on
   the data's date, newest first; ``latest`` every branch not past end of life, New Feature
   Branches included, newest first. End-of-life branches are used only when pinned (with a
   warning). A branch must support the GPU's architecture (Volta ends with R580, Blackwell starts
   with R570) and be at or above the GPU's own minimum driver (HGX B200: 570.133.20).
2. Release: the newest release of the branch that the OS's NVIDIA repository carries.
3. Kernel modules: the branch's default flavour (open from R560) when the GPU runs it, otherwise
   the flavour it needs (Volta: proprietary; Blackwell and the GH200: open).
4. Framework build, when one is asked for: the package index default first, then the other CUDA
   builds newest first. The build must carry the GPU's SM (as SASS of the same major, or as PTX
   it can JIT from) in its wheels for the host architecture.
5. CUDA: the newest release matching the pin (or the framework build's major.minor) that builds
   for the GPU's SM and has published nvidia/cuda images, in the flavour the plan starts from,
   for the images' OS (``--image-os``, default the host OS's own) and platform, that the driver
   runs by provision.matrix.runs_on's rule: natively first, then through minor-version
   compatibility, then through forward compatibility. With a framework, its builds are taken
   newest first, each in the first mode the driver runs it (a driver pinned to R535 gets the
   newest build it runs, not the newest one built for CUDA 12.2); without one, a mode is used
   only when no CUDA release runs in a preferred mode on any candidate branch. Image sets past
   NVIDIA's end of life (superseded by a newer update, or moved to end of life; NVIDIA deletes
   their tags six months on) come after every supported one: they are chosen only when pinned or
   when nothing supported fits. The plan says which mode and why.
6. cuDNN: the framework build's pin (a wheel that accepts a range, as TensorFlow 2.20's
   ``[and-cuda]`` does, gets the newest catalogued cuDNN inside it that supports the CUDA and the
   SM: cuDNN 9.17 dropped sm_70), or the one in the nvidia/cuda cudnn images; it must support the
   CUDA release, the SM and the driver (its catalogued support matrix, or the catalogued matrices
   on either side for a release without one). A plan without a framework or a ``--cudnn`` pin
   reports the images' cuDNN, and leaves it out when that cannot be confirmed.
7. Fabric Manager exactly when the GPU sits on an NVSwitch baseboard, at the driver's exact
   version; the NVLink Subnet Manager beside it from the NVSwitch generation drivers.yaml names
   (HGX B200: fourth; nvidia-fabricmanager starts it), with driver branches below its floor (R570)
   eliminated. With a platform (``--platform``, compat/platforms.yaml) the platform's interconnect
   decides both, not the GPU's form factor: an HGX A100 or H100 4-GPU board connects its SXM GPUs
   by NVLink without NVSwitch, so no Fabric Manager. Without a platform, the GPU's own row
   (gpus.yaml nvswitch) decides.
8. Container Toolkit: the newest catalogued release.

A platform also gives the GPU when ``--gpu`` is left out (its one GPU model, or the catalogued
group of its models), and refuses a GPU it does not take: a system or baseboard takes the GPUs it
lists, a server any GPU of its form factors (``--platform r750xa --gpu a100-sxm4-80gb``: the
R750xa takes PCIe cards). The plan records the server (``Plan.server``) for verify.

A refusal lists every candidate tried with the reason it was eliminated, and the pin changes
that would resolve.
"""

from provision.errors import NoCompatibleStack
from provision.matrix import model as m
from provision.plan.assemble import assemble, server_part
from provision.plan.assemble import data_digest as _data_digest
from provision.plan.context import (
    POLICIES,
    Context,
    Elimination,
    Pins,
    context,
    gpu_ident,
    image_os_of,
    parse_pins,
    platform_refusal,
)
from provision.plan.context import published_image_oses as _published_image_oses
from provision.plan.model import Plan, PlanRequest, Reason
from provision.plan.search import BRANCH_TYPES, Choice, carries_sm, cudnn_supports, search

__all__ = [
    "BRANCH_TYPES",
    "POLICIES",
    "Choice",
    "Context",
    "Elimination",
    "Pins",
    "_data_digest",
    "_published_image_oses",
    "carries_sm",
    "context",
    "cudnn_supports",
    "gpu_ident",
    "image_os_of",
    "parse_pins",
    "platform_refusal",
    "resolve",
    "server_part",
]


def resolve(matrix: m.Matrix, request: PlanRequest, *, suggest: bool = True) -> Plan:
    """Resolve a request: the context (provision.plan.context), the search for a choice
    (provision.plan.search, held to provision.plan.rules), the plan assembled from it
    (provision.plan.assemble); NoCompatibleStack says what was tried and which pins would work
    (provision.plan.explain). What the catalogue gives the same arguments is worked out once per
    catalogue (provision.matrix.memo), so `provision matrix check` shares it across requests."""
    mig = _mig(matrix, request) if request.mig else None
    ctx = context(matrix, request)
    choice = search(ctx)
    if choice is not None:
        plan = assemble(ctx, choice)
        if mig is not None:
            plan = plan._replace(mig=mig[0], reasons=(*plan.reasons, mig[1]))
        return plan
    from provision.plan import explain  # a refusal's words: imported only for a refusal

    eliminations = [(e.candidate, e.why) for e in ctx.eliminated]
    if ctx.skipped:
        eliminations.append(("not tried", explain.not_tried(ctx)))
    error = NoCompatibleStack(
        f"no compatible stack for os={ctx.os.id} gpu={ctx.gpu_id}{explain.pin_text(request)}",
        eliminations=eliminations,
        hint=explain.suggest(matrix, request, frozenset(ctx.kinds)) if suggest else None,
    )
    error.kinds = frozenset(ctx.kinds)
    error.summary = explain.summarise(ctx, eliminations)
    raise error


def __getattr__(name: str):
    """summarise and _driver_order (provision.plan.explain), imported on first use: a plan that
    resolves never loads the words of a refusal."""
    if name in ("summarise", "_driver_order"):
        from provision.plan import explain

        return explain.summarise if name == "summarise" else explain.driver_order
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _mig(matrix: m.Matrix, request: PlanRequest):
    """The MIG layout of the request, placed by provision.mig (refusals explain themselves)."""
    from provision.mig import planner as migplan
    from provision.mig.parted import cgi_args
    from provision.plan.model import PlanMig, PlanMigInstance

    gpu_id, profile_set, members = migplan.gpu_profile_set(matrix, gpu_ident(matrix, request))
    placed = migplan.plan_layout(
        profile_set,
        request.mig,
        gpu=gpu_id,
        pci_device_ids=tuple(p for g in members for p in g.pci_device_ids),
        flags=migplan.Flags(layout="--mig", fill=None),  # hints name provision plan's flag
    )
    instances = tuple(
        PlanMigInstance(i.profile.name, i.profile.id, i.start, i.profile.memory_slices, i.profile.compute_slices)
        for i in placed.instances
    )
    text = (
        f"MIG layout {', '.join(i.label for i in placed.instances)} (profile@start slot) on the "
        f"{profile_set.id} profile set: every instance at a start `nvidia-smi mig -lgipp` allows, none overlapping, "
        f"{placed.compute_used}/{profile_set.compute_slices} compute slices"
    )
    if not profile_set.placements_confirmed:
        text += f"; placements of the same die family ({profile_set.note})"
    mig = PlanMig(
        placed.name, profile_set.id, profile_set.placements_confirmed, instances, placed.devices(), cgi_args(placed)
    )
    return mig, Reason("mig", text, profile_set.sources[0] if profile_set.sources else None)
