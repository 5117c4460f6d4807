"""The catalogue as listings (`provision matrix gpus|os|…`): rows for a table and records for JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # kept import-free: the CLI reads TOPICS while it builds its commands
    from provision.matrix.model import Matrix

TOPICS = ("gpus", "platforms", "os", "drivers", "cuda", "cudnn", "frameworks", "images", "stacks")
"""The listings there are, in `provision matrix` order."""


class Listing(NamedTuple):
    title: str
    headers: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    records: list[dict[str, Any]]  # the JSON form
    optional: tuple[str, ...] = ()
    """Columns a terminal table leaves out (and names) where it fits the width without them only;
    Markdown and JSON always have them."""


def listing(matrix: Matrix, topic: str) -> Listing:
    return _LISTINGS[topic](matrix)


def _gpus(m: Matrix) -> Listing:
    headers = (
        "id",
        "name",
        "arch",
        "cc",
        "memory",
        "bandwidth GB/s",
        "FP16/BF16/FP8 TFLOPS",
        "TDP W",
        "form",
        "NVLink GB/s",
        "NVSwitch",
        "MIG",
        "min driver",
        "PCI ids",
    )
    rows, records = [], []
    for g in m.gpus:
        tf = "/".join("-" if x is None else f"{x:g}" for x in (g.fp16_tflops, g.bf16_tflops, g.fp8_tflops))
        rows.append(
            (
                g.id,
                g.name,
                g.architecture,
                g.compute_capability,
                f"{g.memory_gb:g} GB {g.memory_type}",
                f"{g.memory_bandwidth_gbs:g}",
                tf,
                f"{g.tdp_w:g}",
                g.form_factor,
                f"{g.nvlink_bandwidth_gbs:g}" if g.nvlink_bandwidth_gbs else "-",
                g.nvswitch,
                g.mig or "-",
                str(g.min_driver) if g.min_driver else "-",
                list(g.pci_device_ids),
            )
        )
        records.append(
            {
                "id": g.id,
                "name": g.name,
                "aliases": list(g.aliases),
                "architecture": g.architecture,
                "compute_capability": g.compute_capability,
                "memory_gb": g.memory_gb,
                "memory_type": g.memory_type,
                "memory_bandwidth_gbs": g.memory_bandwidth_gbs,
                "tensor_tflops": {"fp16": g.fp16_tflops, "bf16": g.bf16_tflops, "fp8": g.fp8_tflops},
                "tdp_w": g.tdp_w,
                "form_factor": g.form_factor,
                "nvlink": {"generation": g.nvlink_generation, "bandwidth_gbs": g.nvlink_bandwidth_gbs},
                "nvswitch": g.nvswitch,
                "mig": g.mig,
                "min_driver": str(g.min_driver) if g.min_driver else None,
                "pci_device_ids": list(g.pci_device_ids),
                "sources": list(g.sources),
            }
        )
    pci = {g.id: g.pci_device_ids for g in m.gpus}
    for grp in m.gpu_groups:
        ids = list(dict.fromkeys(p for member in grp.members for p in pci.get(member, ())))
        name = f"{grp.name}: {', '.join(grp.members)}"
        rows.append((grp.id, name, "(group)", "", "", "", "", "", "", "", "", "", "", ids))
        records.append({"id": grp.id, "name": grp.name, "members": list(grp.members)})
    # left out in this order where the terminal is narrow: the specs `provision gpus` ranks first
    optional = ("PCI ids", "NVSwitch", "NVLink GB/s", "TDP W", "FP16/BF16/FP8 TFLOPS", "bandwidth GB/s", "form", "MIG")
    return Listing("GPUs", headers, rows, records, optional)


def _platforms(m: Matrix) -> Listing:
    """One row per platform (compat/platforms.yaml), or per GPU set where its facts differ with the
    GPUs it carries (the XE9680's HGX A100 and HGX H100/H200 boards). "-": no source gives the fact
    (the record's left_out says why); unconfirmed: the facts a doubt names."""
    headers = (
        "id",
        "name",
        "kind",
        "GPUs",
        "count",
        "form",
        "interconnect",
        "NVSwitch",
        "topo -m",
        "PCIe",
        "PSUs",
        "inlet C",
        "unconfirmed",
        "sources",
    )
    rows, records = [], []
    for p in m.platforms:
        shared = (
            _platform_psus(p),
            f"{p.inlet_min_c:g}-{p.inlet_max_c:g}" if p.inlet_min_c is not None and p.inlet_max_c is not None else "-",
            ", ".join(p.unconfirmed) or "-",
            list(p.sources),
        )
        for gpus, generation, count, topology, pcie in _platform_sets(p):
            rows.append(
                (
                    p.id,
                    p.name,
                    p.kind,
                    _platform_gpus_cell(p, gpus),
                    _platform_count_cell(p),
                    ", ".join(p.form_factors),
                    (p.interconnect or "-") + (" (optional)" if p.interconnect_optional else ""),
                    _platform_nvswitch_cell(p, generation, count),
                    "/".join(topology) or "-",
                    f"Gen{pcie[0]} x{pcie[1]}" if pcie[0] is not None else "-",
                    *shared,
                )
            )
        records.append(
            {
                "id": p.id,
                "name": p.name,
                "aliases": list(p.aliases),
                "kind": p.kind,
                "gpus": {
                    "ids": list(p.gpus),
                    "count": p.gpu_count,
                    "count_is": p.gpu_count_is,
                    "form_factors": list(p.form_factors),
                    "takes": "listed" if p.strict else "form_factor",
                },
                "interconnect": {
                    "kind": p.interconnect,
                    "optional": p.interconnect_optional,
                    "nvswitch_generation": p.nvswitch_generation,
                    "nvswitch_count": p.nvswitch_count,
                },
                "variants": [
                    {
                        "gpus": list(v.gpus),
                        "nvswitch_generation": v.nvswitch_generation,
                        "nvswitch_count": v.nvswitch_count,
                        "topology": list(v.topology),
                        "pcie": {"generation": v.pcie_generation, "width": v.pcie_width},
                        "sources": list(v.sources),
                    }
                    for v in p.variants
                ],
                "topology": list(p.topology),
                "pcie": {"generation": p.pcie_generation, "width": p.pcie_width},
                "psus": {"count": p.psu_count, "redundancy": p.psu_redundancy},
                "inlet_c": {"min": p.inlet_min_c, "max": p.inlet_max_c},
                "dmi": {
                    "vendor": list(p.dmi_vendor),
                    "product": list(p.dmi_product),
                    "family": list(p.dmi_family),
                    "unverified": {field: list(values) for field, values in p.dmi_unverified},
                },
                "unconfirmed": list(p.unconfirmed),
                "doubts": [{"fields": list(d.fields), "text": d.text} for d in p.doubts],
                "left_out": dict(p.left_out),
                "evidence": {fact: list(keys) for fact, keys in p.evidence},
                "sources": list(p.sources),
            }
        )
    # left out in this order where the terminal is narrow
    optional = ("sources", "name", "unconfirmed", "inlet C", "PSUs", "kind")
    return Listing("Platforms: servers and GPU baseboards", headers, rows, records, optional)


def _platform_sets(p: Any) -> list[tuple[tuple[str, ...], Any, Any, tuple[str, ...], tuple[Any, Any]]]:
    """(GPUs, NVSwitch generation, NVSwitch count, topology, PCIe link) per GPU set: a variant's facts
    over the platform's own, and the platform's GPUs no variant names (all of them without variants)."""
    sets = [
        (
            v.gpus,
            v.nvswitch_generation or p.nvswitch_generation,
            v.nvswitch_count or p.nvswitch_count,
            v.topology or p.topology,
            (v.pcie_generation, v.pcie_width) if v.pcie_generation else (p.pcie_generation, p.pcie_width),
        )
        for v in p.variants
    ]
    rest = tuple(g for g in p.gpus if not any(g in v.gpus for v in p.variants))
    if rest or not sets:
        sets.insert(0, (rest, p.nvswitch_generation, p.nvswitch_count, p.topology, (p.pcie_generation, p.pcie_width)))
    return sets


def _platform_gpus_cell(p: Any, gpus: tuple[str, ...]) -> str:
    """The GPU ids a source shows in it; a server that takes any GPU of its form factors says so."""
    if p.strict:
        return ", ".join(gpus)
    fits = f"any {' or '.join(p.form_factors)}"
    return f"{', '.join(gpus)} ({fits})" if gpus else fits


def _platform_count_cell(p: Any) -> str:
    if p.gpu_count is None:
        return "-"
    return f"{'up to ' if p.gpu_count_is == 'up-to' else ''}{p.gpu_count}"


def _platform_nvswitch_cell(p: Any, generation: Any, count: Any) -> str:
    if p.interconnect is None:
        return "-"
    if p.interconnect != "nvswitch":
        return "none"
    gen = f"gen{generation}" if generation else "generation not sourced"
    return f"{count}x {gen}" if count else gen


def _platform_psus(p: Any) -> str:
    if p.psu_count is None:
        return "-"
    return f"{p.psu_count} ({p.psu_redundancy})" if p.psu_redundancy else str(p.psu_count)


def _os(m: Matrix) -> Listing:
    headers = ("id", "name", "family", "package manager", "NVIDIA repo", "kernel headers", "nvidia/cuda OS")
    rows = [
        (o.id, o.name, o.family, o.pkg_manager, o.nvidia_repo, list(o.kernel_headers), o.cuda_image_os)
        for o in m.os_releases
    ]
    records = [
        {
            "id": o.id,
            "name": o.name,
            "aliases": list(o.aliases),
            "family": o.family,
            "distribution": o.distribution,
            "version": o.version,
            "pkg_manager": o.pkg_manager,
            "nvidia_repo": o.nvidia_repo,
            "kernel_headers": list(o.kernel_headers),
            "cuda_image_os": o.cuda_image_os,
            "sources": list(o.sources),
        }
        for o in m.os_releases
    ]
    return Listing("Operating systems", headers, rows, records, ("kernel headers",))


PAST_EOL_CELL = {"past": True, "supported": False, "unknown": "unknown"}
"""`matrix drivers`' "past EOL" cell per DriverBranch.eol_state: yes, no, or unknown where NVIDIA has
published no end of life (an unknown end of life is not "supported")."""


def _drivers(m: Matrix) -> Listing:
    headers = ("branch", "type", "EOL", "past EOL", "newest release", "releases", "kernel modules", "default")
    rows, records = [], []
    for b in m.drivers:
        eol = b.eol or ("listed" if b.eol_listed else "unknown")
        state = b.eol_state(m.as_of)
        rows.append(
            (
                b.label,
                b.type,
                eol,
                PAST_EOL_CELL[state],
                str(b.releases[0].version),
                len(b.releases),
                list(b.kernel_modules),
                b.default_module,
            )
        )
        records.append(
            {
                "branch": str(b.branch),
                "type": b.type,
                "eol": b.eol,
                "eol_listed": b.eol_listed,
                # null where no end of life is published: eol_state says "unknown"
                "past_eol": None if state == "unknown" else state == "past",
                "eol_state": state,
                "kernel_modules": list(b.kernel_modules),
                "default_module": b.default_module,
                "releases": [{"version": str(r.version), "date": r.date, "os": list(r.os)} for r in b.releases],
                "sources": list(b.sources),
            }
        )
    return Listing(f"Driver branches (as of {m.as_of})", headers, rows, records, ("releases",))


def _cuda(m: Matrix) -> Listing:
    headers = ("CUDA", "release", "min driver", "compute capabilities", "host OS repos")
    rows, records = [], []
    for c in m.cuda:
        ccs = [s.compute_capability for s in m.compute_support if s.cuda.contains(c.version)]
        rows.append((str(c.version), c.label, str(c.min_driver), ccs, list(c.os)))
        records.append(
            {
                "version": str(c.version),
                "label": c.label,
                "min_driver": str(c.min_driver),
                "compute_capabilities": ccs,
                "os": list(c.os),
                "source": c.source,
            }
        )
    return Listing("CUDA toolkit releases", headers, rows, records)


def _cudnn(m: Matrix) -> Listing:
    headers = ("cuDNN", "CUDA", "min driver", "compute capabilities")
    rows, records = [], []
    for c in m.cudnn:
        for b in c.builds:
            rows.append(
                (
                    str(c.version),
                    str(b.cuda),
                    str(b.min_driver),
                    f"{b.compute_capabilities[0]} .. {b.compute_capabilities[-1]}",
                )
            )
        records.append(
            {
                "version": str(c.version),
                "source": c.source,
                "builds": [
                    {
                        "cuda": str(b.cuda),
                        "min_driver": str(b.min_driver),
                        "compute_capabilities": list(b.compute_capabilities),
                    }
                    for b in c.builds
                ],
            }
        )
    return Listing("cuDNN support matrices", headers, rows, records)


def _frameworks(m: Matrix) -> Listing:
    headers = ("framework", "version", "build", "default", "CUDA", "CUDA runtime", "cuDNN", "index", "SMs")
    rows, records = [], []
    for fw in m.frameworks:
        for rel in fw.releases:
            for b in rel.builds:
                sms = list(b.compute_capabilities) if b.compute_capabilities else "-"
                if b.ptx:
                    sms = f"{', '.join(b.compute_capabilities or ())} +PTX {b.ptx}"
                rows.append(
                    (
                        fw.id,
                        str(rel.version),
                        b.variant,
                        b.default,
                        b.cuda,
                        b.cuda_runtime,
                        b.cudnn,
                        b.index_url or "pypi",
                        sms,
                    )
                )
                records.append(
                    {
                        "framework": fw.id,
                        "package": fw.package,
                        "version": str(rel.version),
                        "variant": b.variant,
                        "default": b.default,
                        "cuda": b.cuda,
                        "cuda_runtime": b.cuda_runtime,
                        "cudnn": b.cudnn,
                        "index_url": b.index_url,
                        "extra": b.extra,
                        "libraries": b.libraries,
                        "compute_capabilities": list(b.compute_capabilities) if b.compute_capabilities else None,
                        "ptx": b.ptx,
                        "source": b.source,
                        "evidence": b.evidence,
                    }
                )
    return Listing("Framework builds", headers, rows, records, ("index", "CUDA runtime"))


def _images(m: Matrix) -> Listing:
    headers = ("CUDA", "toolkit", "status", "OS", "platforms", "flavours", "cuDNN", "example tag")
    rows, records = [], []
    for i in m.images:
        state, words = i.status(m.as_of)
        example = _example_tag(i)
        rows.append(
            (
                str(i.cuda),
                _image_toolkit_cell(i),
                words,
                list(i.os),
                list(i.platforms),
                list(i.flavours),
                _image_cudnn_cell(i),
                f"{m.image_repository}:{example}",
            )
        )
        records.append(
            {
                "cuda": str(i.cuda),
                "carries": str(i.carries),
                "toolkit": (
                    {"version": str(i.toolkit), "cublas": i.cublas, "source": i.toolkit_source}
                    if i.toolkit_source is not None
                    else None
                ),
                "status": state,
                "status_text": words,
                "eol": (
                    {
                        "date": i.eol_date,
                        "superseded_by": str(i.superseded_by) if i.superseded_by else None,
                        "source": i.eol_source,
                    }
                    if i.eol_source is not None
                    else None
                ),
                "os": list(i.os),
                "platforms": list(i.platforms),
                "platforms_source": i.platforms_source,
                "flavours": list(i.flavours),
                "cudnn": (
                    {"version": i.cudnn_version, "marker": i.cudnn_marker, "os": list(i.cudnn_os or i.os)}
                    if i.cudnn_marker
                    else None
                ),
                "tags": {f"{f}-{o}": f"{m.image_repository}:{tag}" for f, o, tag in i.tags()},
                "source": i.source,
            }
        )
    return Listing(f"{m.image_repository} tags", headers, rows, records, ("flavours", "example tag"))


def _example_tag(i: Any) -> str:
    """A tag the set has: its cudnn runtime tag on the first OS that has one, else its runtime tag."""
    for flavour in ("cudnn-runtime", "runtime", "base"):
        for f, _o, tag in i.tags():
            if f == flavour:
                return tag
    return i.tags()[0][2]


def _image_cudnn_cell(i: Any) -> str:
    """The cuDNN in the cudnn tags, and the OSes without them where not every OS has them."""
    if not i.cudnn_marker:
        return "-"
    cell = i.cudnn_version or "?"
    missing = [o for o in i.os if i.cudnn_os is not None and o not in i.cudnn_os]
    return f"{cell} (not on {', '.join(missing)})" if missing else cell


TOOLKIT_MARK = "*"
"""Marks the toolkit cell of an image set numbered past the toolkit release it installs."""


def _image_toolkit_cell(i: Any) -> str:
    """The toolkit release the set installs; an image set numbered past it (12.9.2 carries 12.9.1
    with a newer cuBLAS) is marked, with that cuBLAS."""
    if i.toolkit_source is None:
        return str(i.carries)
    cublas = f" (cuBLAS {i.cublas})" if i.cublas else ""
    return f"{i.carries}{TOOLKIT_MARK}{cublas}"


def _stacks(m: Matrix) -> Listing:
    """One row per build of every catalogued stack release (compat/stacks.yaml)."""
    headers = (
        "package",
        "version",
        "build",
        "default",
        "CUDA",
        "cuDNN",
        "artefacts",
        "Python",
        "SM floor",
        "TensorRT",
        "pins",
    )
    rows, records = [], []
    for package in m.stacks:
        needs = {d.name(None): d for d in package.distributions}
        for rel in package.releases:
            for b in rel.builds:
                described = {d.name(b.flavour): d for d in package.distributions}
                rows.append(
                    (
                        package.id,
                        str(rel.version) + (f" ({b.pin})" if b.pin else ""),
                        b.flavour or "-",
                        b.default,
                        _stack_cuda_cell(b),
                        _stack_cudnn_cell(b),
                        "+".join(sorted({kind for _, kind in b.distributions})),
                        b.python or "-",
                        b.sm_floor or "-",
                        ", ".join(b.needs_soname("libnvinfer")) or "-",
                        _stack_pins_cell(b),
                    )
                )
                records.append(
                    {
                        "package": package.id,
                        "pip": package.pip,
                        "version": str(rel.version),
                        "post": list(rel.post),
                        "flavour": b.flavour,
                        "default": b.default,
                        "pin": b.pin,
                        "distributions": [
                            {
                                "pip": name,
                                "artefact": kind,
                                "build": _sdist_needs(described.get(name) or needs.get(name)),
                            }
                            for name, kind in b.distributions
                        ],
                        "arches": list(b.arches),
                        "python": b.python,
                        "python_aarch64": b.python_aarch64,
                        "manylinux": dict(b.manylinux),
                        "cuda_major": b.cuda_major,
                        "cuda": b.cuda,
                        "cuda_requirement": b.cuda_requirement,
                        "cuda_from": b.cuda_from,
                        "cuda_source": b.cuda_source,
                        "cudnn_major": b.cudnn_major,
                        "cudnn_spec": str(b.cudnn_spec) if b.cudnn_spec is not None else None,
                        "cudnn_requirement": b.cudnn_requirement,
                        "cudnn_min": str(b.cudnn_min) if b.cudnn_min is not None else None,
                        "cudnn_from": b.cudnn_from,
                        "sonames": {label: list(names) if names is not None else None for label, names in b.sonames},
                        "requires": dict(b.requires),
                        "extras": {name: list(reqs) for name, reqs in rel.extras},
                        "build_requires": list(b.build_requires) if b.build_requires is not None else None,
                        "nvcc_minor_mismatch_ok": (
                            {str(k): list(v) for k, v in b.nvcc_minor_mismatch_ok}
                            if b.nvcc_minor_mismatch_ok is not None
                            else None
                        ),
                        "runtime": _stack_runtime(package.runtime),
                        "library_index": b.library_index,
                        "library_index_source": b.library_index_source,
                        "sm_floor": b.sm_floor,
                        "sm_source": b.sm_source,
                        "features": [
                            {
                                "name": f.name,
                                "any_of": [{"sm": sm, "cuda": str(cuda) if cuda else None} for sm, cuda in f.any_of],
                                "source": f.source,
                            }
                            for f in package.features
                            if f.releases.contains(rel.version)
                        ],
                        "source": b.source,
                        "evidence": list(b.evidence),
                    }
                )
    return Listing(
        "Stack packages (inference and training)",
        headers,
        rows,
        records,
        ("pins", "TensorRT", "artefacts", "Python", "SM floor"),
    )


def _stack_pins_cell(b: Any) -> str:
    """The pins to other packages (its own distributions' and the -libs/-bindings halves left out)."""
    pins = [
        f"{name}{spec or ' (any)'}"
        for name, spec in b.requires
        if name not in b.pip_names and not name.endswith(("-libs", "-bindings"))
    ]
    return ", ".join(pins) or "-"


def _stack_cuda_cell(b: Any) -> str:
    """ "13 (13.0)": the build's CUDA major (and minor where the package records one); "torch's": none of its own."""
    if b.cuda_major is None:
        return "torch's"
    return (
        f"{b.cuda_major}"
        + (f" ({b.cuda})" if b.cuda else "")
        + (STACK_DOCUMENTED_MARK if b.cuda_from == "documented" else "")
    )


STACK_DOCUMENTED_MARK = "*"
"""Marks a CUDA major NVIDIA documents for the build's flavour where no file of the build says it."""


def _stack_cudnn_cell(b: Any) -> str:
    if b.cudnn_major is None:
        return "-"
    limits = [str(x) for x in (b.cudnn_spec, f">={b.cudnn_min}" if b.cudnn_min is not None else None) if x]
    return f"{b.cudnn_major}" + (f" ({', '.join(limits)})" if limits else "")


def _sdist_needs(dist: Any) -> dict[str, Any] | None:
    if dist is None or dist.build is None:
        return None
    n = dist.build
    return {
        "image": n.image,
        "nvcc": n.nvcc,
        "isolation": n.isolation,
        "needs": list(n.needs),
        "fetches": n.fetches,
        "note": n.note,
        "sources": list(n.sources),
    }


def _stack_runtime(r: Any) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"image": r.image, "nvcc": r.nvcc, "note": r.note, "sources": list(r.sources)}


_LISTINGS = {
    "gpus": _gpus,
    "platforms": _platforms,
    "os": _os,
    "drivers": _drivers,
    "cuda": _cuda,
    "cudnn": _cudnn,
    "frameworks": _frameworks,
    "images": _images,
    "stacks": _stacks,
}
