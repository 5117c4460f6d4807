"""What runs where, asked of provision.matrix.runs_on (the rule) and nothing else:

- ``runs_on``: the CUDA releases, nvidia/cuda image sets and framework builds a driver release
  runs, each with its mode (``provision runs-on``);
- ``image_needs``: a plan's image part as the rule reads it;
- ``check``: host groups x images, each pair with its mode or the reason it cannot run
  (``provision check``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from provision.errors import InputError, UnknownId
from provision.matrix import model as m
from provision.matrix import runs_on as rule
from provision.plan.model import Plan, read_plan
from provision.versions import DottedVersion as Version
from provision.versions import major_minor


# -- a driver as the user names it -----------------------------------------------------------
def driver_release(matrix: m.Matrix, text: str) -> tuple[Version, str | None]:
    """A --driver value: a release (535.183.01, catalogued or not), or a branch (535: its newest
    catalogued release). Returns the release and a note when it was chosen for the user."""
    value = (text or "").strip().lstrip("Rr")
    if re.fullmatch(r"\d{3,4}", value):
        branch = matrix.branch(int(value))
        if branch is None or not branch.releases:
            raise UnknownId(
                f"driver branch R{value} is not in the catalogue",
                hint="give the release the hosts run (nvidia-smi: Driver Version), e.g. --driver 535.183.01",
            )
        newest = branch.releases[0].version
        return newest, f"R{value}: its newest catalogued release, {newest}"
    if re.fullmatch(r"\d{3,4}\.\d{1,3}(\.\d{1,3})?", value):
        return Version(value), None
    raise InputError(
        f"--driver {text!r} is neither a driver release nor a branch",
        hint="the release nvidia-smi reports (535.183.01), or a branch (535)",
    )


# -- an image as the rule reads it -------------------------------------------------------------
def image_needs(plan: Plan, label: str | None = None) -> rule.ImageNeeds:
    """A plan's image part: its CUDA release and the SMs its framework build (or its CUDA) serves."""
    if plan.cuda is None:
        raise InputError(
            f"{label or 'the plan'} has no image part (--host-only)",
            hint="give plan locks made without --host-only, or image.lock.json files",
        )
    fw = plan.framework
    sass = fw.compute_capabilities if fw is not None else None
    ptx = fw.ptx if fw is not None else None
    return rule.ImageNeeds(
        Version(plan.cuda.version),
        Version(plan.cuda.min_driver),
        tuple(sass) if sass else None,
        ptx,
        tuple(plan.cuda.compute_capabilities or ()),
        True,  # built FROM nvidia/cuda, whose images install cuda-compat-<major>-<minor>
        label or plan.base_image or "",
    )


# -- runs-on -----------------------------------------------------------------------------------
class Row(NamedTuple):
    kind: str  # cuda | image | framework
    name: str  # 12.8.1, nvidia/cuda 12.8.1 (ubuntu22.04, ...), torch==2.9.1 (cu128)
    cuda: str
    verdict: rule.Verdict
    status: str | None = None  # image sets: supported / superseded / end of life
    oses: tuple[str, ...] | list[str] = ()  # image sets: every OS suffix they are published for

    @property
    def mode(self) -> str:
        return self.verdict.mode

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.name,
            "cuda": self.cuda,
            "mode": self.verdict.mode,
            "runs": self.verdict.runs,
            "reason": self.verdict.reason,
            "limits": list(self.verdict.limits),
            **({"status": self.status, "os": list(self.oses)} if self.kind == "image" else {}),
        }


class RunsOn(NamedTuple):
    driver: Version
    note: str | None
    gpu: m.Gpu | None
    image_os: str | None
    rows: tuple[Row, ...]


def runs_on(matrix: m.Matrix, driver: Version, gpu: m.Gpu | None = None, image_os: str | None = None) -> RunsOn:
    """Every catalogued CUDA release, image set and framework build, with the mode in which
    ``driver`` runs it (on ``gpu`` when given; image sets published for ``image_os`` when given)."""
    arch = gpu.host_arches[0] if gpu is not None else m.DEFAULT_ARCH
    platform = m.PLATFORMS[arch]
    rows: list[Row] = []
    by_version = {c.version: c for c in matrix.cuda}
    for cuda in matrix.cuda:
        verdict = rule.decide(matrix, rule.needs_for_cuda(matrix, cuda), driver, gpu)
        rows.append(Row("cuda", f"{cuda.version} ({cuda.label})", str(cuda.version), verdict))
    for image in matrix.images:
        oses = [o for o in image.os if image_os is None or o == image_os]
        toolkit = by_version.get(image.carries)
        if not oses or toolkit is None or platform not in image.platforms:
            continue
        verdict = rule.decide(matrix, rule.needs_for_cuda(matrix, toolkit), driver, gpu)
        status, _ = image.status(matrix.as_of)
        shown = ", ".join(oses[:2]) + (f" +{len(oses) - 2}" if len(oses) > 2 else "")
        rows.append(Row("image", f"nvidia/cuda {image.cuda} ({shown})", str(image.carries), verdict, status, oses))
    for fw in matrix.frameworks:
        for release in fw.releases:
            for build in release.builds:
                if arch not in build.arches:
                    continue
                line = [c for c in matrix.cuda if major_minor(c.version) == build.cuda]
                if not line:
                    continue
                cuda = line[0]  # the newest release of the build's CUDA line, as plans take it
                sass, ptx, _ = build.sms_for(arch)
                needs = rule.ImageNeeds(
                    cuda.version,
                    cuda.min_driver,
                    tuple(sass) if sass else None,
                    ptx,
                    rule.cuda_targets(matrix, cuda.version),
                )
                verdict = rule.decide(matrix, needs, driver, gpu)
                name = f"{fw.package}{build.requirement_extra}=={release.version} ({build.variant})"
                rows.append(Row("framework", name, str(cuda.version), verdict))
    return RunsOn(driver, None, gpu, image_os, tuple(rows))


# -- check: host groups x images --------------------------------------------------------------
class Image(NamedTuple):
    """An image the fleet should run: from a plan lock, or an image.lock.json and its plan."""

    label: str  # the file, as given
    path: str
    needs: rule.ImageNeeds
    plan_digest: str


class Cell(NamedTuple):
    group: str
    image: str
    assigned: bool  # the group's fleet entry lists it (or none are assigned: every image is)
    verdict: rule.Verdict


class Checked(NamedTuple):
    groups: tuple[str, ...]
    images: tuple[str, ...]
    cells: tuple[Cell, ...]

    @property
    def ok(self) -> bool:
        return all(c.verdict.runs for c in self.cells if c.assigned)


def image_files(paths: Iterable[str]) -> list[str]:
    """--images arguments: files as given, folders as the *.json files directly inside them."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".json"))
            if not found:
                raise InputError(
                    f"--images {path}: no .json lock files in it", hint="give plan locks or image.lock.json"
                )
            files += found
        else:
            files.append(path)
    unique: dict[str, str] = {}  # the same file, named twice (a folder and a fleet file's images: list)
    for path in files:
        unique.setdefault(os.path.realpath(path), _shown(path))
    return list(unique.values())


def _shown(path: str) -> str:
    """A path as a table shows it: relative to the working folder when it lies under it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def split_image_files(
    files: Iterable[str], given_as: str
) -> tuple[list[tuple[str, Plan, str]], list[tuple[str, dict]]]:
    """Each file read once, as untrusted JSON: the plan locks (path, plan, its digest), each read
    with read_plan (``given_as`` for its hint), and the image.lock.json documents (path, document)
    for _plan_of_image_lock, both in the files' order."""
    from provision.documents import load_json, read_text

    plans: list[tuple[str, Plan, str]] = []
    image_locks: list[tuple[str, dict]] = []
    for path in files:
        doc = load_json(read_text(path, "image or plan lock"), repr(path))
        if isinstance(doc, dict) and "plan_digest" in doc and "image_id" in doc:
            image_locks.append((path, doc))
            continue
        plans.append((path, read_plan(path, given_as=given_as), doc["digest"]))  # read_plan verified the digest
    return plans, image_locks


def read_images(paths: Iterable[str]) -> list[Image]:
    """Plan locks and image.lock.json files; an image lock's plan must be among the plan locks
    given, or at a path its ``plans`` list names (relative to the image lock's folder)."""
    plan_locks, image_locks = split_image_files(image_files(paths), "--images")
    plans = {digest: (path, plan) for path, plan, digest in plan_locks}
    images = [Image(path, path, image_needs(plan, path), digest) for digest, (path, plan) in plans.items()]
    for path, doc in image_locks:
        plan = _plan_of_image_lock(path, doc, plans)
        images.append(Image(path, path, image_needs(plan, path), doc["plan_digest"]))
    return images


_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
_PLAN_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,250}")


def _plan_of_image_lock(path: str, doc: dict, plans: Mapping[str, tuple[str, Plan]]) -> Plan:
    """The plan an image lock was built from. Only ``plan_digest`` and ``plans`` are read, each
    held to the image-lock schema's pattern (provision/images/schema/image-lock.schema.json), and a
    plan path never leaves the image lock's folder."""
    wanted = doc.get("plan_digest")
    entries = doc.get("plans", [])
    if not isinstance(wanted, str) or not _DIGEST.fullmatch(wanted) or not isinstance(entries, list):
        raise InputError(f"{path}: not an image lock (plan_digest, plans)", hint="write one with provision build")
    if wanted in plans:
        return plans[wanted][1]
    folder = os.path.dirname(os.path.abspath(path))
    for entry in entries:
        rel = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(rel, str) or not _PLAN_PATH.fullmatch(rel) or ".." in rel.split("/"):
            raise InputError(f"{path}: plans: {rel!r} is not a plan path", hint="write it with provision ci image-lock")
        candidate = os.path.join(folder, rel)
        if entry.get("digest") == wanted and os.path.isfile(candidate):
            plan = read_plan(candidate, given_as=f"{path}'s plans list")
            if plan.digest() == wanted:
                return plan
    raise InputError(
        f"{path} was built from plan {wanted}, which is not among the files given",
        hint="give its plan lock too: provision check --images PLAN.lock.json IMAGE.lock.json",
    )


def check(
    matrix: m.Matrix,
    groups: Mapping[str, Plan],
    images: list[Image],
    assigned: Mapping[str, tuple[str, ...]] | None = None,
) -> Checked:
    """Every host group's driver and GPU against every image; ``assigned``: group -> the image
    files its fleet entry lists (a group with none runs every image given)."""
    if not images:
        raise InputError("no images to check", hint="--images DIR or lock files")
    by_path = {os.path.realpath(i.path): i for i in images}
    cells = []
    for group, plan in groups.items():
        gpu = matrix.gpu_members(plan.gpu.id)[1][0]
        driver = Version(plan.driver.version)
        wanted = {os.path.realpath(p) for p in (assigned or {}).get(group, ())}
        unknown = sorted(wanted - set(by_path))
        if unknown:
            raise InputError(
                f"fleet group {group!r} assigns {unknown[0]}, which is not among --images",
                hint="give it with --images, or fix the group's images: list",
            )
        for image in images:
            is_assigned = not wanted or os.path.realpath(image.path) in wanted
            cells.append(Cell(group, image.label, is_assigned, rule.decide(matrix, image.needs, driver, gpu)))
    return Checked(tuple(groups), tuple(i.label for i in images), tuple(cells))


def checked_json(result: Checked, groups: Mapping[str, Plan]) -> str:
    doc = {
        "ok": result.ok,
        "groups": {
            g: {"driver": groups[g].driver.version, "gpu": groups[g].gpu.id, "os": groups[g].os.id}
            for g in result.groups
        },
        "images": list(result.images),
        "pairs": [
            {
                "group": c.group,
                "image": c.image,
                "assigned": c.assigned,
                "mode": c.verdict.mode,
                "runs": c.verdict.runs,
                "reason": c.verdict.reason,
                "limits": list(c.verdict.limits),
            }
            for c in result.cells
        ],
    }
    return json.dumps(doc, indent=2) + "\n"
