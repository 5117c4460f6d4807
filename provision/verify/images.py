"""The images a fleet group runs, as the image-runs check reads them, worked out on the controller.

A fleet group's ``images:`` list (plan locks, or image.lock.json files with their plan lock beside
them or named in their ``plans`` list; provision.fleet.inventory.FleetGroup.images, paths relative
to the fleet file) is read as `provision check` reads ``--images`` (provision.plan.runs): each plan
read as an untrusted lock, held to the catalogue like every lock (provision.plan.lockcheck), and
turned into what the rule reads (provision.plan.runs.image_needs). The workers get these needs with
the other per-host inputs (provision.verify.Target.images); the host's driver and GPU are read
there, and provision.matrix.runs_on.decide, the one rule, is asked there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from provision.errors import InputError
from provision.matrix import model as m
from provision.matrix.runs_on import ImageNeeds


def assigned_images(
    matrix: m.Matrix, group: str, paths: Iterable[str], fleet_file: str | None = None
) -> tuple[ImageNeeds, ...]:
    """The needs of each image a fleet group's ``images:`` list names, in its order, each labelled
    as the list names it (relative to ``fleet_file``'s folder); InputError naming the group for a
    file that is not a checked plan lock or image lock."""
    from provision.plan.lockcheck import check_against_catalogue
    from provision.plan.runs import _plan_of_image_lock, image_files, image_needs, split_image_files

    given = f"fleet group {group!r}'s images: list (relative to the fleet file)"
    try:
        files = image_files(paths)
        plans, image_locks = split_image_files(files, given)
        # an image lock's plan: one of the plan locks listed, or one its plans list names
        by_digest = {digest: (path, plan) for path, plan, digest in plans}
        chosen = {path: plan for path, plan, _ in plans}
        for path, doc in image_locks:
            chosen[path] = _plan_of_image_lock(path, doc, by_digest)
        needs = []
        for path in files:  # the list's order
            plan = chosen[path]
            check_against_catalogue(plan, matrix, repr(path))
            needs.append(image_needs(plan, _label(path, fleet_file)))
    except InputError as exc:
        raise InputError(f"fleet group {group!r}: images: {exc.message}", hint=exc.hint) from None
    return tuple(needs)


def _label(path: str, fleet_file: str | None) -> str:
    """An image as the fleet file's images: list names it (a path relative to the fleet file)."""
    if fleet_file is None:
        return path
    return os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.abspath(fleet_file)))
