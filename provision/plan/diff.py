"""What changes between two plans, or between what a host runs (a scan) and its plan, in the terms
an operator acts on: the server (--platform), a driver branch change, a release within the branch, a
kernel-module flavour switch (each needs a reboot), Fabric Manager and NVLink Subnet Manager, the
Container Toolkit, the MIG layout (a GPU reset), and the image part (image OS, CUDA, cuDNN, framework,
base image).

``provision diff OLD NEW`` prints them (exit 0 when there are none, 1 when there are, as diff
does); ``provision plan --lock FILE`` prints them before it overwrites a different lock.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, NamedTuple

from provision.errors import InputError
from provision.plan.model import Plan, read_plan

SCAN_SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema", "scan.schema.json")


class State(NamedTuple):
    """A plan or a scan, reduced to what the two can be compared on (None: not known / not there)."""

    kind: str  # plan | scan
    name: str
    os: str | None
    gpu: str | None
    driver_version: str | None
    driver_branch: str | None
    kernel_module: str | None
    fabric_manager: str | None  # its version ("" for a scan's Fabric Manager of unknown version)
    subnet_manager: tuple[str, ...] | None
    container_toolkit: str | None
    mig: str | None
    image: dict[str, str | None] | None  # image part; None: none (host-only plan) or not known (scan)
    server: str | None = None  # the platform a plan is for (--platform); None: none, or a scan


class Change(NamedTuple):
    key: str  # driver-branch, driver-release, kernel-module, fabric-manager, ...
    old: str
    new: str
    note: str  # what it means on a host

    @property
    def reboot(self) -> bool:
        return self.key in ("driver-branch", "driver-release", "kernel-module")

    def line(self) -> str:
        return f"{self.key}: {self.old} -> {self.new} ({self.note})"


# -- reading ---------------------------------------------------------------------------------
@functools.cache
def _scan_validator() -> Any:
    import jsonschema

    with open(SCAN_SCHEMA, encoding="utf-8") as handle:
        return jsonschema.Draft202012Validator(json.load(handle))


def check_scan(doc: Any, origin: str) -> dict:
    """A scan document held to its schema (it holds what a host printed: untrusted)."""
    import jsonschema

    error = jsonschema.exceptions.best_match(_scan_validator().iter_errors(doc))
    if error is not None:
        field = ".".join(str(p) for p in error.absolute_path) or "the document"
        raise InputError(
            f"{origin}: {field}: {error.message[:160]}",
            hint="scans are written by provision inventory scan; re-scan the host",
        )
    return doc


def read_state(path: str) -> State:
    """A plan lock or a scan document (provision inventory scan --out), as a State."""
    from provision.documents import load_json, read_text

    doc = load_json(read_text(path, "plan or scan"), repr(path))
    if isinstance(doc, dict) and doc.get("kind") == "provision-scan":
        return scan_state(check_scan(doc, repr(path)), path)
    return plan_state(read_plan(path, given_as="provision diff's argument"), path)


def plan_state(plan: Plan, name: str = "plan") -> State:
    fm = plan.fabric_manager
    image = None
    if plan.cuda is not None:
        fw = plan.framework
        image = {
            "image OS": plan.image_os,
            "CUDA": plan.cuda.version
            + ("" if plan.cuda.compatibility == "toolkit-driver" else f" ({plan.cuda.compatibility})"),
            "cuDNN": plan.cudnn.version if plan.cudnn else None,
            "framework": f"{fw.requirement} [{fw.variant}]" if fw else None,
            "base image": plan.base_image,
        }
    mig = None
    if plan.mig is not None:
        mig = ",".join(f"{i.profile}@{i.placement}" for i in plan.mig.instances)
    return State(
        "plan",
        name,
        plan.os.id,
        plan.gpu.id,
        plan.driver.version,
        plan.driver.branch,
        plan.driver.kernel_module,
        fm.version if fm else None,
        tuple(plan.subnet_manager.packages) if plan.subnet_manager else None,
        plan.container_toolkit.version,
        mig,
        image,
        plan.server.id if plan.server is not None else None,
    )


def scan_state(doc: dict, name: str = "scan") -> State:
    if not doc["reachable"]:
        raise InputError(
            f"{name}: host {doc['host']} was not reachable when scanned ({doc['error']})",
            hint="scan it again once it answers",
        )
    driver = doc["driver"] or {}
    os_doc = doc["os"] or {}
    gpus = sorted({g.get("catalogue_id") or g["name"] for g in doc["gpus"]})
    fm = doc["fabric_manager"]
    return State(
        "scan",
        name,
        os_doc.get("catalogue_id") or (f"{os_doc['id']}{os_doc['version_id']}" if os_doc else None),
        ", ".join(gpus) or None,
        driver.get("version"),
        driver.get("branch"),
        driver.get("kernel_module"),
        (fm["version"] or "") if fm and fm["active"] else None,
        None,
        doc["container_toolkit"],
        None,
        None,
    )


# -- comparing -------------------------------------------------------------------------------
def changes(old: State, new: State) -> list[Change]:
    """Every difference that matters to an operator, host part first, then the image part. A
    fact one side does not know (a scan has no image part, no MIG layout) is not a change."""
    out: list[Change] = []

    def shown(value: Any, none: str = "none") -> str:
        return none if value in (None, "") else str(value)

    if old.os and new.os and old.os != new.os:
        out.append(Change("os", old.os, new.os, "another operating system: a reinstall, not a rollout"))
    if old.gpu and new.gpu and old.gpu != new.gpu and (old.kind == new.kind == "plan"):
        out.append(Change("gpu", old.gpu, new.gpu, "planned for another GPU"))
    if old.server != new.server and old.kind == new.kind == "plan":
        out.append(
            Change(
                "server",
                shown(old.server),
                shown(new.server),
                "planned for another server: the GPU count, interconnect and links verify expects",
            )
        )
    if old.driver_version != new.driver_version:
        if old.driver_version is None or new.driver_version is None:
            note = "driver installed" if old.driver_version is None else "driver removed"
            out.append(Change("driver-release", shown(old.driver_version), shown(new.driver_version), note))
        elif old.driver_branch != new.driver_branch:
            out.append(
                Change(
                    "driver-branch",
                    f"R{old.driver_branch} {old.driver_version}",
                    f"R{new.driver_branch} {new.driver_version}",
                    "branch change: other packages (and module stream), modules rebuilt by DKMS, reboot needed",
                )
            )
        else:
            out.append(
                Change(
                    "driver-release",
                    old.driver_version,
                    new.driver_version,
                    f"same R{new.driver_branch} branch: packages upgraded, reboot to load the new modules",
                )
            )
    if old.kernel_module and new.kernel_module and old.kernel_module != new.kernel_module:
        out.append(
            Change(
                "kernel-module",
                old.kernel_module,
                new.kernel_module,
                "flavour switch: the other kernel-module packages replace these, reboot needed",
            )
        )
    if old.fabric_manager != new.fabric_manager:
        note = (
            "Fabric Manager installed and started (NVSwitch systems)"
            if old.fabric_manager is None
            else "Fabric Manager stopped and removed"
            if new.fabric_manager is None
            else "Fabric Manager follows the driver's exact version"
        )
        out.append(Change("fabric-manager", shown(old.fabric_manager), shown(new.fabric_manager, "none"), note))
    if old.subnet_manager != new.subnet_manager and old.kind == new.kind == "plan":
        out.append(
            Change(
                "subnet-manager",
                ", ".join(old.subnet_manager or ()) or "none",
                ", ".join(new.subnet_manager or ()) or "none",
                "NVLink Subnet Manager beside Fabric Manager (fourth-generation NVSwitch)",
            )
        )
    if old.container_toolkit != new.container_toolkit:
        out.append(
            Change(
                "container-toolkit",
                shown(old.container_toolkit),
                shown(new.container_toolkit),
                "nvidia-container-toolkit packages; the container engine's runtime configuration is kept",
            )
        )
    if old.mig != new.mig and old.kind == new.kind == "plan":
        out.append(Change("mig", shown(old.mig), shown(new.mig), "MIG layout: GPU instances re-created, GPU reset"))
    if old.kind == new.kind == "plan":
        if (old.image is None) != (new.image is None):
            out.append(
                Change(
                    "image-part",
                    "none (--host-only)" if old.image is None else "planned",
                    "none (--host-only)" if new.image is None else "planned",
                    "images rendered, built and verified from this plan",
                )
            )
        elif old.image is not None and new.image is not None:
            for key, before in old.image.items():
                after = new.image.get(key)
                if before != after:
                    note = "rebuild the image" if key != "base image" else "a new base image: rebuild and re-pin"
                    out.append(Change(key.replace(" ", "-"), shown(before), shown(after), note))
    return out


def summary(old: State, new: State, found: list[Change]) -> list[str]:
    """The changes as lines, and whether a host must reboot."""
    if not found:
        return [f"{old.name} and {new.name}: no change that matters to a host or an image"]
    lines = [c.line() for c in found]
    if any(c.reboot for c in found):
        lines.append("reboot needed: yes (the driver's kernel modules change)")
    return lines


def changes_json(old: State, new: State, found: list[Change]) -> str:
    doc = {
        "old": {"name": old.name, "kind": old.kind},
        "new": {"name": new.name, "kind": new.kind},
        "equal": not found,
        "reboot": any(c.reboot for c in found),
        "changes": [{"key": c.key, "old": c.old, "new": c.new, "note": c.note} for c in found],
    }
    return json.dumps(doc, indent=2) + "\n"
