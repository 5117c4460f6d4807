"""GPU tier lists: the catalogued GPUs ranked per workload from their specs (`provision gpus`).

Every score is a weighted geometric mean of a few spec-derived metrics, each normalised to the
best GPU in the catalogue on that metric:

    score = 100 * product over terms of (metric_i / max_i) ^ weight_i     (weights sum to 1)

A geometric mean rewards balance (a GPU that is weak on one axis cannot buy it back linearly
with another), makes the order independent of the metrics' units, and gives 100 only to a GPU
that leads on every term. Ratios between two GPUs' scores read as "times better" on that
workload. Nothing here names a GPU: the order comes from compat/gpus.yaml (and mig.yaml) alone.

Pure logic: no click, no printing. Rendering helpers (SVG, Markdown) live at the bottom.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple
from xml.sax.saxutils import escape, quoteattr

from provision.matrix.model import Gpu, Matrix, Platform

# GPU-to-GPU bandwidth of a board without NVLink: its PCIe x16 link, both directions (NVLink figures
# in the catalogue are bidirectional totals too), from gpus.yaml `pcie`; PCIe Gen4 x16 where the
# catalogue does not record the link.
PCIE_X16_GBS = 64.0
# Share of an NVLink's bandwidth that counts when GPUs are linked pairwise (bridge) or in a
# partial mesh rather than all-to-all through NVSwitch: collectives across more than the linked
# peers fall back to PCIe or hop through a neighbour.
POINT_TO_POINT_NVLINK_SHARE = 0.5
# Share of FP8's extra peak that counts for training: mixed FP8 training (Transformer Engine)
# keeps master weights, optimizer and many ops in BF16/FP32, so it lands well short of 2x.
FP8_TRAINING_WEIGHT = 0.25

# Tier label from the score's ratio to the catalogue's best score on the workload: each tier
# starts at half the floor of the one above (scores are multiplicative, so bands are too).
TIERS: tuple[tuple[str, float], ...] = (
    ("S", 0.5),
    ("A", 0.25),
    ("B", 0.125),
    ("C", 0.0625),
    ("D", 0.0),
)


class Metric(NamedTuple):
    id: str
    label: str
    unit: str
    definition: str
    value: Callable[[Gpu, Matrix], float]
    spec: bool = False  # the value is a figure from the spec sheet as is; else computed from them (legend)


class Term(NamedTuple):
    metric: Metric
    weight: float


class Workload(NamedTuple):
    id: str
    title: str
    rationale: str
    terms: tuple[Term, ...]

    @property
    def formula(self) -> str:
        parts = " * ".join(f"({t.metric.id}/max)^{t.weight:g}" for t in self.terms)
        return f"score = 100 * {parts}"


class TermValue(NamedTuple):
    metric: str
    label: str
    unit: str
    value: float
    weight: float
    normalised: float  # value / catalogue max, in (0, 1]
    factor: float  # normalised ** weight: this term's multiplier on the score
    spec: bool  # a spec-sheet figure as is (False: computed from spec figures, see the metric's definition)


class RankedGpu(NamedTuple):
    rank: int
    gpu: Gpu
    score: float  # 0 < score <= 100
    ratio: float  # score / best catalogue score for the workload
    tier: str
    workload: str
    terms: tuple[TermValue, ...]

    def to_dict(self) -> dict:
        g = self.gpu
        return {
            "rank": self.rank,
            "id": g.id,
            "name": g.name,
            "score": round(self.score, 2),
            "tier": self.tier,
            "ratio_to_best": round(self.ratio, 4),
            "workload": self.workload,
            "terms": {
                t.metric: {
                    "value": round(t.value, 3),
                    "unit": t.unit,
                    "weight": t.weight,
                    "normalised": round(t.normalised, 4),
                    "factor": round(t.factor, 4),
                    "spec": t.spec,
                }
                for t in self.terms
            },
            "inputs": {
                "architecture": g.architecture,
                "fp16_tflops": g.fp16_tflops,
                "bf16_tflops": g.bf16_tflops,
                "fp8_tflops": g.fp8_tflops,
                "memory_gb": g.memory_gb,
                "memory_bandwidth_gbs": g.memory_bandwidth_gbs,
                "nvlink_bandwidth_gbs": g.nvlink_bandwidth_gbs,
                "nvswitch": g.nvswitch,
                "tdp_w": g.tdp_w,
                "mig": g.mig,
            },
        }


# -- metrics -------------------------------------------------------------------------------------


def training_precision_tflops(gpu: Gpu) -> float:
    """Dense tensor TFLOPS at the training precision: BF16, or FP16 (loss scaling) without BF16."""
    return gpu.bf16_tflops if gpu.bf16_tflops else gpu.fp16_tflops


def training_blend(gpu: Gpu) -> float:
    """Not a spec: the training-precision TFLOPS plus FP8_TRAINING_WEIGHT of FP8's extra peak, i.e.
    (1 - w) x BF16 + w x FP8 where FP8 is faster, the BF16 (FP16) figure otherwise."""
    base = training_precision_tflops(gpu)
    if gpu.fp8_tflops and gpu.fp8_tflops > base:
        return base + FP8_TRAINING_WEIGHT * (gpu.fp8_tflops - base)
    return base


def inference_tflops(gpu: Gpu) -> float:
    """Best dense tensor TFLOPS a served model can use: FP8 where supported, else BF16/FP16."""
    return max(v for v in (gpu.fp8_tflops, gpu.bf16_tflops, gpu.fp16_tflops) if v)


def interconnect_gbs(gpu: Gpu) -> float:
    pcie = gpu.pcie_bandwidth_gbs or PCIE_X16_GBS
    if not gpu.nvlink_bandwidth_gbs:
        return pcie
    share = 1.0 if gpu.nvswitch else POINT_TO_POINT_NVLINK_SHARE
    return max(gpu.nvlink_bandwidth_gbs * share, pcie)


def mig_instances(gpu: Gpu, matrix: Matrix) -> float:
    """Isolated GPU instances one card can serve: MIG's most 1g instances, else 1."""
    if not gpu.mig:
        return 1.0
    try:
        profiles = matrix.mig_set(gpu.mig).profiles
    except KeyError:
        return 1.0
    counts = [p.max_instances for p in profiles if not p.media and p.compute_slices == 1]
    return float(max(counts, default=1))


TRAIN = Metric(
    "train_blend",
    "training blend",
    "TFLOPS-eq",
    f"{1 - FP8_TRAINING_WEIGHT:g} x dense BF16 + {FP8_TRAINING_WEIGHT:g} x dense FP8 tensor TFLOPS (BF16 alone "
    "without FP8, FP16 without BF16): a blend of two spec figures, not a spec; mixed FP8 training keeps "
    "much of its work in BF16/FP32 and gains well under 2x",
    lambda g, m: training_blend(g),
)
INFER = Metric(
    "infer_tflops",
    "inference TFLOPS",
    "TFLOPS",
    "the GPU's best dense tensor TFLOPS spec a served model uses: FP8 where supported, else BF16/FP16",
    lambda g, m: inference_tflops(g),
)
MEMORY = Metric(
    "memory_gb",
    "memory",
    "GB",
    "GPU memory capacity (model, optimizer state, activations, KV cache)",
    lambda g, m: g.memory_gb,
    spec=True,
)
BANDWIDTH = Metric(
    "bandwidth_gbs",
    "memory bandwidth",
    "GB/s",
    "GPU memory bandwidth",
    lambda g, m: g.memory_bandwidth_gbs,
    spec=True,
)
INTERCONNECT = Metric(
    "interconnect_gbs",
    "GPU-to-GPU",
    "GB/s",
    f"NVLink bandwidth per GPU; x {POINT_TO_POINT_NVLINK_SHARE:g} when linked by bridge or mesh "
    f"rather than all-to-all through NVSwitch; the PCIe x16 link without NVLink (Gen3 "
    f"32 GB/s, {PCIE_X16_GBS:g} GB/s Gen4 where not recorded)",
    lambda g, m: interconnect_gbs(g),
)
TFLOPS_PER_W = Metric(
    "tflops_per_w",
    "TFLOPS/W",
    "TFLOPS/W",
    "inference TFLOPS (FP8 where supported, else BF16/FP16) per watt of board TDP",
    lambda g, m: inference_tflops(g) / g.tdp_w,
)
BANDWIDTH_PER_W = Metric(
    "bandwidth_per_w",
    "GB/s per W",
    "GB/s/W",
    "memory bandwidth per watt of board TDP",
    lambda g, m: g.memory_bandwidth_gbs / g.tdp_w,
)
MIG = Metric(
    "mig_instances",
    "MIG instances",
    "instances",
    "isolated instances per GPU: the most 1g MIG instances (mig.yaml), 1 without MIG",
    mig_instances,
)

WORKLOADS: dict[str, Workload] = {
    w.id: w
    for w in (
        Workload(
            "training",
            "Training (single node and multi-GPU)",
            "Training is bound by tensor throughput at BF16 (FP8 partly), needs memory for weights, "
            "optimizer state and activations, streams them at memory bandwidth, and scales across "
            "GPUs over NVLink.",
            (Term(TRAIN, 0.45), Term(MEMORY, 0.20), Term(BANDWIDTH, 0.20), Term(INTERCONNECT, 0.15)),
        ),
        Workload(
            "inference",
            "Inference and serving",
            "Token generation is memory-bandwidth bound, capacity sets model size and KV cache, "
            "prefill uses FP8 tensor throughput; tensor parallelism needs some GPU-to-GPU bandwidth "
            "and MIG lets one card serve several isolated small models.",
            (Term(BANDWIDTH, 0.35), Term(INFER, 0.25), Term(MEMORY, 0.25), Term(INTERCONNECT, 0.10), Term(MIG, 0.05)),
        ),
        Workload(
            "memory",
            "Memory capacity (largest model per GPU)",
            "How large a model or data set fits on one GPU, and how fast it can be swept.",
            (Term(MEMORY, 0.75), Term(BANDWIDTH, 0.25)),
        ),
        Workload(
            "bandwidth",
            "Memory-bandwidth-bound kernels (HPC stencils, LLM decode)",
            "Kernels that stream memory run at the memory bandwidth, whatever the tensor cores do.",
            (Term(BANDWIDTH, 1.0),),
        ),
        Workload(
            "interconnect",
            "Multi-GPU scaling (tensor / pipeline parallel, all-reduce)",
            "Multi-GPU jobs spend their time in collectives: GPU-to-GPU bandwidth first, then compute and memory.",
            (Term(INTERCONNECT, 0.60), Term(TRAIN, 0.25), Term(MEMORY, 0.15)),
        ),
        Workload(
            "efficiency",
            "Performance per watt",
            "Work per joule: tensor throughput per watt of TDP, with memory bandwidth per watt for "
            "the bandwidth-bound part. Board TDP, not measured draw.",
            (Term(TFLOPS_PER_W, 0.70), Term(BANDWIDTH_PER_W, 0.30)),
        ),
    )
}

DEFAULT_WORKLOAD = "training"


def workload(ident: str) -> Workload:
    try:
        return WORKLOADS[ident]
    except KeyError:
        raise KeyError(f"unknown workload {ident!r}; known: {', '.join(WORKLOADS)}") from None


def tier_for(ratio: float) -> str:
    return next(label for label, floor in TIERS if ratio >= floor)


def _positive(value: float | None) -> float:
    return value if value is not None and math.isfinite(value) and value > 0 else 0.0


def rank(matrix: Matrix, workload_id: str = DEFAULT_WORKLOAD, gpus: Iterable[str] | None = None) -> list[RankedGpu]:
    """The catalogue's GPUs (or the ids in ``gpus``) in score order for a workload.

    Metrics are normalised to the best GPU of the whole catalogue, so a GPU's score, ratio and
    tier do not depend on which others are shown; ``rank`` numbers the GPUs shown (equal scores
    share a rank). Ties keep catalogue order.
    """
    wl = workload(workload_id)
    catalogue = matrix.gpus
    values = {g.id: [_positive(t.metric.value(g, matrix)) for t in wl.terms] for g in catalogue}
    maxima = [max((v[i] for v in values.values()), default=0.0) or 1.0 for i in range(len(wl.terms))]

    def score(gpu: Gpu) -> tuple[float, tuple[TermValue, ...]]:
        terms = []
        total = 100.0
        for i, term in enumerate(wl.terms):
            value = values[gpu.id][i]
            norm = value / maxima[i]
            factor = norm**term.weight if norm > 0 else 0.0
            total *= factor
            metric = term.metric
            terms.append(TermValue(metric.id, metric.label, metric.unit, value, term.weight, norm, factor, metric.spec))
        return total, tuple(terms)

    scored = [(g, *score(g)) for g in catalogue]
    best = max((s for _, s, _ in scored), default=0.0) or 1.0
    wanted = None if gpus is None else set(gpus)
    shown = [row for row in scored if wanted is None or row[0].id in wanted]
    order = sorted(range(len(shown)), key=lambda i: (-shown[i][1], i))
    ranked: list[RankedGpu] = []
    for position, i in enumerate(order, start=1):
        gpu, total, terms = shown[i]
        same = ranked and math.isclose(ranked[-1].score, total, rel_tol=1e-9)
        number = ranked[-1].rank if same else position
        ratio = total / best
        ranked.append(RankedGpu(number, gpu, total, ratio, tier_for(ratio), wl.id, terms))
    return ranked


# -- a platform: its GPUs and per-node figures ---------------------------------------------------
# `provision gpus --platform X` ranks the GPUs the platform takes (a system or baseboard: those it
# lists; a server: any GPU of its form factors) and adds per-node figures computed from catalogued
# facts only: the platform's GPU count (compat/platforms.yaml) times the GPU's memory, and times its
# NVLink bandwidth where the board links every GPU by NVLink (NVSwitch, or NVLink without one).
# Scores stay the GPU's own, normalised to the whole catalogue.

NODE_HEADERS = ("node memory", "node NVLink")

_INTERCONNECT_WORDS = {
    "nvswitch": "NVSwitch",
    "nvlink": "NVLink without NVSwitch",
    "nvlink-bridge": "NVLink bridges between pairs",
    "none": "PCIe only, no NVLink",
}


class NodeFigures(NamedTuple):
    """One GPU model in a platform, per node: None where the catalogue does not give the factors."""

    count: int | None  # GPUs per node (platforms.yaml gpus.count)
    up_to: bool  # the count is a maximum (a host may hold fewer)
    memory_gb: float | None  # count x the GPU's memory
    nvlink_gbs: float | None  # count x the GPU's NVLink bandwidth, where the board NVLinks every GPU

    def to_dict(self) -> dict:
        return {
            "gpu_count": self.count,
            "count_is": None if self.count is None else ("up-to" if self.up_to else "exact"),
            "memory_gb": self.memory_gb,
            "nvlink_gbs": self.nvlink_gbs,
        }


def platform_gpus(matrix: Matrix, platform: Platform) -> list[str]:
    """The catalogued GPUs the platform takes, in catalogue order (Platform.takes)."""
    return [g.id for g in matrix.gpus if platform.takes(g)]


def node_figures(platform: Platform, gpu: Gpu) -> NodeFigures:
    count = platform.gpu_count
    up_to = platform.gpu_count_is == "up-to"
    if count is None:
        return NodeFigures(None, False, None, None)
    linked = platform.interconnect in ("nvswitch", "nvlink") and gpu.nvlink_bandwidth_gbs
    return NodeFigures(count, up_to, count * gpu.memory_gb, count * gpu.nvlink_bandwidth_gbs if linked else None)


def platform_summary(platform: Platform) -> str:
    """``NVIDIA DGX H100 (8x, NVSwitch)``: the platform, its GPU count and interconnect."""
    if platform.gpu_count is None:
        count = "any count"
    else:
        count = f"{'up to ' if platform.gpu_count_is == 'up-to' else ''}{platform.gpu_count}x"
    link = _INTERCONNECT_WORDS.get(platform.interconnect or "", "interconnect not catalogued")
    if platform.interconnect_optional:
        link = "optional " + link
    return f"{platform.name} ({count}, {link})"


def node_cells(figures: NodeFigures) -> list[str]:
    prefix = "up to " if figures.up_to else ""
    return [
        "-" if figures.memory_gb is None else f"{prefix}{figures.memory_gb:,.0f} GB",
        "-" if figures.nvlink_gbs is None else f"{prefix}{figures.nvlink_gbs:,.0f} GB/s",
    ]


def node_legend(platform: Platform) -> str:
    """What the per-node columns are, for this platform; scores stay the GPU's own."""
    own = "scores and the other columns are the GPU's own"
    if platform.gpu_count is None:
        return f"{platform.id} has no catalogued GPU count: no per-node figures; {own}"
    count = f"{'up to ' if platform.gpu_count_is == 'up-to' else ''}{platform.gpu_count}"
    text = f"node memory: {count} x the GPU's memory"
    if platform.interconnect in ("nvswitch", "nvlink"):
        text += f"; node NVLink: {count} x the GPU's NVLink bandwidth (both directions, as gpus.yaml gives it)"
    else:
        text += f"; no node NVLink: {platform.id} does not NVLink every GPU on a board"
    return f"{text}; {own}"


def explain(workload_id: str, width: int = 92) -> str:
    """The workload's rationale, formula and terms, wrapped to ``width`` at spaces only."""
    wl = workload(workload_id)
    pad = max(len(t.metric.id) for t in wl.terms)
    lines = [*_wrap(f"{wl.id}: {wl.title}", width), "", *_wrap(wl.rationale, width), ""]
    lines += [*_wrap(wl.formula, width, hanging="    "), ""]
    for t in wl.terms:
        head = f"  {t.metric.id.ljust(pad)}  weight {t.weight:.2f}  "
        if len(head) + 20 > width:  # too narrow to put the definitions beside: under it
            lines += [head.rstrip(), *_wrap(f"{t.metric.definition} [{t.metric.unit}]", width, "    ", "    ")]
        else:
            lines += _wrap(f"{t.metric.definition} [{t.metric.unit}]", width, head, " " * len(head))
    tiers = ", ".join(f"{label} ≥ {floor:.4g}" for label, floor in TIERS if floor > 0)
    lines += [
        "",
        *_wrap(
            "max: the best catalogued GPU on that metric, so the score is in (0, 100] and a GPU's score does not "
            "depend on which others are shown. Weighted geometric mean: a ratio of two scores reads as 'times "
            "better' on this workload. Figures are dense (no sparsity) from compat/gpus.yaml; MIG from "
            "compat/mig.yaml.",
            width,
        ),
        *_wrap(
            f"tier: score / best catalogued score: {tiers}, D below (each band starts at half the one above).", width
        ),
    ]
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int, indent: str = "", hanging: str = "") -> list[str]:
    """``text`` wrapped at spaces only: a figure, an id or a formula's term is never split."""
    return textwrap.wrap(
        text,
        max(1, width),
        initial_indent=indent,
        subsequent_indent=hanging,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent.rstrip()]


def legend(workload_id: str) -> list[str]:
    """What the table's computed columns are: one line per term that is not a spec-sheet figure
    as is, saying which spec figures it comes from and how (the score's formula: --explain)."""
    wl = workload(workload_id)
    lines = [f"{t.metric.label} [{t.metric.unit}]: {t.metric.definition}" for t in wl.terms if not t.metric.spec]
    lines.append(
        f"score: {wl.formula.removeprefix('score = ')} over these columns, each to the best catalogued GPU "
        f"(`provision gpus --rank {wl.id} --explain`)"
    )
    return lines


# -- rendering ---------------------------------------------------------------------------------


def term_cell(t: TermValue) -> str:
    value = f"{t.value:.3g}" if t.value < 100 else f"{t.value:,.0f}"
    unit = t.unit[:-1] if t.value == 1 and t.unit == "instances" else t.unit  # "1 instance"
    return f"{value} {unit}"


def table_rows(ranked: Sequence[RankedGpu]) -> tuple[list[str], list[list[str]]]:
    headers = ["rank", "tier", "gpu", "name", "score"]
    if ranked:
        headers += [t.label for t in ranked[0].terms]
    rows = [
        [str(r.rank), r.tier, r.gpu.id, r.gpu.name, f"{r.score:.1f}", *(term_cell(t) for t in r.terms)] for r in ranked
    ]
    return headers, rows


_TIER_COLOURS = {"S": "#76b900", "A": "#4f9d2d", "B": "#3b7ea1", "C": "#8a6fb0", "D": "#9e9e9e"}


def render_svg(ranked: Sequence[RankedGpu], title: str) -> str:
    """A self-contained horizontal bar chart: one <rect class="bar"> per GPU, scaled to 100."""
    row_h, gap, top, left, bar_w, right = 22, 6, 48, 300, 440, 120
    width = left + bar_w + right
    height = top + len(ranked) * (row_h + gap) + 28
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-labelledby="chart-title">',
        f'<title id="chart-title">{escape(title)}</title>',
        "<style>text{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;"
        "fill:#222}.title{font-size:16px;font-weight:600}.score{font-variant-numeric:tabular-nums}"
        ".axis{stroke:#bbb;stroke-width:1}</style>",
        f'<rect class="background" x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text class="title" x="12" y="26">{escape(title)}</text>',
        f'<line class="axis" x1="{left}" y1="{top - 6}" x2="{left}" y2="{height - 22}"/>',
    ]
    for i, r in enumerate(ranked):
        y = top + i * (row_h + gap)
        w = max(bar_w * r.score / 100.0, 1.0)
        base = y + row_h * 0.7
        label = escape(f"{r.rank}. {r.gpu.name}")
        tooltip = escape(f"{r.gpu.id}: {r.score:.1f} (tier {r.tier})")
        colour = _TIER_COLOURS.get(r.tier, "#9e9e9e")
        out += [
            f'<g class="gpu" data-id={quoteattr(r.gpu.id)}>',
            f'<text class="label" x="{left - 8}" y="{base:.1f}" text-anchor="end">{label}</text>',
            f'<rect class="bar tier-{r.tier}" x="{left}" y="{y}" width="{w:.1f}" height="{row_h}" '
            f'rx="3" fill="{colour}"><title>{tooltip}</title></rect>',
            f'<text class="score" x="{left + w + 6:.1f}" y="{base:.1f}">{r.score:.1f} · {r.tier}</text>',
            "</g>",
        ]
    out.append(
        f'<text x="{left}" y="{height - 6}" fill="#666">score: 100 = best catalogued GPU '
        "on every term (provision gpus --explain)</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"
