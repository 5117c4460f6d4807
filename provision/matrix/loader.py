"""compat/*.yaml -> JSON Schema check -> model objects -> invariant check -> Matrix.

Every problem is a ``CompatDataError`` naming the file and the key path (exit code 3).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from typing import Any

from provision.errors import CompatDataError
from provision.matrix import model as m
from provision.versions import parse_specifier, parse_version

FILES = (
    "sources",
    "os",
    "gpus",
    "drivers",
    "cuda",
    "cudnn",
    "frameworks",
    "images",
    "container_toolkit",
    "mig",
    "unsupported",
)


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def read_raw(compat: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and schema-check every data file; returns {name: parsed document}."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    raw: dict[str, Any] = {}
    for name in FILES:
        path = os.path.join(compat, f"{name}.yaml")
        try:
            text = _read_bytes(path)
        except OSError as exc:
            raise CompatDataError(f"{name}.yaml", "", f"cannot read ({exc.strerror or exc})") from None
        try:
            doc = yaml.load(text, Loader=loader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise CompatDataError(f"{name}.yaml", where, f"invalid YAML: {problem}") from None
        _validate(compat, name, doc)
        raw[name] = doc
    return raw


def _validate(compat: str | os.PathLike[str], name: str, doc: Any) -> None:
    import jsonschema

    schema_path = os.path.join(compat, "schema", f"{name}.schema.json")
    try:
        schema = json.loads(_read_bytes(schema_path))
    except (OSError, ValueError) as exc:
        raise CompatDataError(f"schema/{name}.schema.json", "", f"unreadable schema ({exc})") from None
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        err = errors[0]
        raise CompatDataError(f"{name}.yaml", key_path(doc, list(err.absolute_path)), _short(err))


def _short(err: Any) -> str:
    if err.validator == "type" and err.validator_value == "string":
        return f"{err.instance!r} must be a quoted string (YAML reads unquoted 12.10 as 12.1)"
    if err.validator == "additionalProperties":
        return err.message.replace("Additional properties are not allowed", "unknown key")
    return err.message


def key_path(doc: Any, path: list[Any]) -> str:
    """``gpus[3](a100-pcie).memory``: list indexes annotated with the item's id when it has one."""
    out = ""
    node = doc
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            ident = None
            if isinstance(node, dict):
                ident = node.get("id") or node.get("version") or node.get("branch")
            if ident is not None:
                out += f"({ident})"
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out


def load_matrix(compat: str | os.PathLike[str]) -> m.Matrix:
    """Load compat/ into a Matrix; raise CompatDataError on the first problem found."""
    return load_checked(compat)[0]


def load_checked(compat: str | os.PathLike[str]) -> tuple[m.Matrix, dict[str, Any]]:
    """(matrix, raw documents) after schema and invariant checks."""
    from provision.matrix.invariants import check_invariants

    raw = read_raw(compat)
    matrix = build(raw)
    problems = check_invariants(matrix, raw)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more; run provision matrix check)" if len(problems) > 1 else ""
        raise CompatDataError(first.file, first.key_path, first.problem + more)
    matrix = attach_hashes(matrix, {f"{n}.yaml": _read_bytes(os.path.join(compat, f"{n}.yaml")) for n in FILES})
    return matrix, raw


def attach_hashes(matrix: m.Matrix, contents: dict[str, bytes]) -> m.Matrix:
    hashes = tuple((name, hashlib.sha256(data).hexdigest()) for name, data in sorted(contents.items()))
    return matrix._replace(files=hashes)


def _v(file: str, path: str, text: str):
    try:
        return parse_version(text)
    except ValueError as exc:
        raise CompatDataError(file, path, str(exc)) from None


def _spec(file: str, path: str, text: str):
    try:
        return parse_specifier(text)
    except ValueError as exc:
        raise CompatDataError(file, path, str(exc)) from None


def build(raw: dict[str, Any]) -> m.Matrix:
    """Turn schema-valid documents into the model (versions parsed here, once)."""
    sources = {
        key: m.Source(key, s["title"], s["url"], s["retrieved"], s["kind"])
        for key, s in raw["sources"]["sources"].items()
    }
    os_releases = tuple(
        m.OsRelease(
            id=o["id"],
            name=o["name"],
            aliases=tuple(o["aliases"]),
            family=o["family"],
            distribution=o["distribution"],
            version=o["version"],
            pkg_manager=o["pkg_manager"],
            nvidia_repo=o["nvidia_repo"],
            kernel_headers=tuple(o["kernel_headers"]),
            cuda_image_os=o["cuda_image_os"],
            cuda_image_note=o.get("cuda_image_note"),
            sources=tuple(o["sources"]),
        )
        for o in raw["os"]["os"]
    )
    g = raw["gpus"]
    architectures = tuple(
        m.Architecture(
            id=a["id"],
            name=a["name"],
            compute_capabilities=tuple(a["compute_capabilities"]),
            kernel_modules=tuple(a["kernel_modules"]),
            first_driver_branch=a["first_driver_branch"],
            last_driver_branch=a["last_driver_branch"],
            sources=tuple(a["sources"]),
        )
        for a in g["architectures"]
    )
    gpus = []
    for i, x in enumerate(g["gpus"]):
        nvlink = x["nvlink"] or {}
        gpus.append(
            m.Gpu(
                id=x["id"],
                name=x["name"],
                aliases=tuple(x["aliases"]),
                architecture=x["architecture"],
                compute_capability=x["compute_capability"],
                memory_gb=x["memory"]["size_gb"],
                memory_type=x["memory"]["type"],
                memory_bandwidth_gbs=x["memory"]["bandwidth_gbs"],
                fp16_tflops=x["tensor_tflops"]["fp16"],
                bf16_tflops=x["tensor_tflops"]["bf16"],
                fp8_tflops=x["tensor_tflops"]["fp8"],
                tdp_w=x["tdp_w"],
                form_factor=x["form_factor"],
                nvlink_generation=nvlink.get("generation"),
                nvlink_bandwidth_gbs=nvlink.get("bandwidth_gbs"),
                nvswitch=x["nvswitch"],
                pci_device_ids=tuple(x["pci_device_ids"]),
                mig=x["mig"],
                min_driver=_v("gpus.yaml", f"gpus[{i}].min_driver", x["min_driver"]) if x["min_driver"] else None,
                sources=tuple(x["sources"]),
                pcie_generation=(x.get("pcie") or {}).get("generation"),
                pcie_bandwidth_gbs=(x.get("pcie") or {}).get("bandwidth_gbs"),
            )
        )
    groups = tuple(m.GpuGroup(x["id"], x["name"], tuple(x["members"])) for x in g["groups"])

    d = raw["drivers"]
    drivers = []
    for i, b in enumerate(d["branches"]):
        releases = tuple(
            m.DriverRelease(
                version=_v("drivers.yaml", f"branches[{i}].releases[{j}].version", r["version"]),
                date=r.get("date"),
                os=tuple(r["os"]),
                source=r["source"],
            )
            for j, r in enumerate(b["releases"])
        )
        drivers.append(
            m.DriverBranch(
                branch=int(b["branch"]),
                type=b["type"],
                eol=b["eol"],
                eol_listed=b["eol_listed"],
                kernel_modules=tuple(b["kernel_modules"]),
                default_module=b["default_module"],
                releases=releases,
                sources=tuple(b["sources"]),
            )
        )
    packaging = tuple(
        m.DriverPackaging(
            os=tuple(p["os"]),
            branches=_spec("drivers.yaml", f"packaging[{i}].branches", p["branches"]),
            kernel_module=p["kernel_module"],
            method=p["method"],
            module_stream=p["module_stream"],
            packages=tuple(p["packages"]),
            fabric_manager=tuple(p["fabric_manager"]),
            sources=tuple(p["sources"]),
        )
        for i, p in enumerate(d["packaging"])
    )

    c = raw["cuda"]
    cuda = tuple(
        m.CudaRelease(
            version=_v("cuda.yaml", f"releases[{i}].version", r["version"]),
            label=r["label"],
            min_driver=_v("cuda.yaml", f"releases[{i}].min_driver", r["min_driver"]),
            os=tuple(r["os"]),
            source=r["source"],
        )
        for i, r in enumerate(c["releases"])
    )
    compute_support = tuple(
        m.ComputeSupport(
            s["compute_capability"], _spec("cuda.yaml", f"compute_capabilities[{i}].cuda", s["cuda"]), s["source"]
        )
        for i, s in enumerate(c["compute_capabilities"])
    )
    minor = tuple(
        m.MinorCompat(
            x["cuda_major"],
            _v("cuda.yaml", f"minor_version_compatibility[{i}].min_driver", x["min_driver"]),
            x["source"],
        )
        for i, x in enumerate(c["minor_version_compatibility"])
    )
    cudnn = tuple(
        m.CudnnRelease(
            version=_v("cudnn.yaml", f"releases[{i}].version", r["version"]),
            builds=tuple(
                m.CudnnBuild(
                    cuda=_spec("cudnn.yaml", f"releases[{i}].builds[{j}].cuda", b["cuda"]),
                    min_driver=_v("cudnn.yaml", f"releases[{i}].builds[{j}].min_driver", b["min_driver"]),
                    compute_capabilities=tuple(b["compute_capabilities"]),
                )
                for j, b in enumerate(r["builds"])
            ),
            source=r["source"],
        )
        for i, r in enumerate(raw["cudnn"]["releases"])
    )
    frameworks = []
    for fi, f in enumerate(raw["frameworks"]["frameworks"]):
        releases = []
        for ri, r in enumerate(f["releases"]):
            builds = tuple(
                m.FrameworkBuild(
                    variant=b["variant"],
                    index_url=b["index_url"],
                    default=b["default"],
                    cuda=b["cuda"],
                    cuda_runtime=b["cuda_runtime"],
                    cudnn=b["cudnn"],
                    libraries=b["libraries"],
                    extra=b["extra"],
                    compute_capabilities=tuple(b["compute_capabilities"]) if b["compute_capabilities"] else None,
                    ptx=b["ptx"],
                    arch_source=b["arch_source"],
                    source=b["source"],
                    evidence=b["evidence"],
                )
                for b in r["builds"]
            )
            releases.append(
                m.FrameworkRelease(
                    version=_v("frameworks.yaml", f"frameworks[{fi}].releases[{ri}].version", r["version"]),
                    python=r["python"],
                    builds=builds,
                )
            )
        frameworks.append(m.Framework(f["id"], f["name"], f["package"], tuple(releases)))
    im = raw["images"]
    images = tuple(
        m.ImageRelease(
            cuda=_v("images.yaml", f"releases[{i}].cuda", r["cuda"]),
            os=tuple(r["os"]),
            flavours=tuple(r["flavours"]),
            cudnn_version=(r["cudnn"] or {}).get("version"),
            cudnn_marker=(r["cudnn"] or {}).get("marker"),
            source=r["source"],
            cudnn_os=tuple(r["cudnn"]["os"]) if r["cudnn"] and "os" in r["cudnn"] else None,
            eol_date=(r.get("eol") or {}).get("date"),
            superseded_by=_v("images.yaml", f"releases[{i}].eol.superseded_by", r["eol"]["superseded_by"])
            if r.get("eol") and r["eol"]["superseded_by"]
            else None,
            eol_source=(r.get("eol") or {}).get("source"),
        )
        for i, r in enumerate(im["releases"])
    )
    tk = raw["container_toolkit"]
    toolkit = tuple(
        m.ToolkitRelease(
            version=_v("container_toolkit.yaml", f"releases[{i}].version", r["version"]),
            date=r["date"],
            packages=tuple(tk["packages"]),
            revision=tk["revision"],
            source=r["source"],
        )
        for i, r in enumerate(tk["releases"])
    )
    mig = tuple(
        m.MigProfileSet(
            id=s["id"],
            name=s["name"],
            memory_slices=s["memory_slices"],
            compute_slices=s["compute_slices"],
            placements_confirmed=s["placements_confirmed"],
            note=s["note"],
            profiles=tuple(
                m.MigProfile(
                    name=p["name"],
                    id=p["id"],
                    compute_slices=p["compute_slices"],
                    memory_slices=p["memory_slices"],
                    placements=tuple(p["placements"]),
                    max_instances=p["max_instances"],
                    memory_gib=p["memory_gib"],
                    sms=p["sms"],
                    media=p["media"],
                )
                for p in s["profiles"]
            ),
            sources=tuple(s["sources"]),
        )
        for s in raw["mig"]["profile_sets"]
    )
    exclusions = tuple(
        m.Exclusion(x["os"], x["gpu"], x["reason"], x["source"]) for x in raw["unsupported"]["unsupported"]
    )
    return m.Matrix(
        as_of=dt.date.fromisoformat(_full_date(d["as_of"])),
        sources=sources,
        os_releases=os_releases,
        architectures=architectures,
        gpus=tuple(gpus),
        gpu_groups=groups,
        drivers=tuple(drivers),
        driver_packaging=packaging,
        cuda=cuda,
        compute_support=compute_support,
        minor_compat=minor,
        cudnn=cudnn,
        frameworks=tuple(frameworks),
        images=images,
        image_repository=im["repository"],
        toolkit=toolkit,
        mig=mig,
        exclusions=exclusions,
    )


def _full_date(text: str) -> str:
    return text if len(text) == 10 else f"{text}-01"
