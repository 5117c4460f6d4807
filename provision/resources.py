"""Where the data (compat/), templates (images/) and playbooks (playbooks/) are.

Order: an explicit path (a command-line flag) > ``PROVISION_<NAME>_DIR`` in the environment >
the source checkout this package was imported from > the copy inside the installed wheel
(``provision/_resources/<name>``).
"""

from __future__ import annotations

import os

from provision.errors import InputError

# os.path rather than pathlib: `provision plan` starts faster without importing pathlib.
_PACKAGE = os.path.dirname(os.path.realpath(__file__))
_CHECKOUT = os.path.dirname(_PACKAGE)
_MARKERS = {"compat": "gpus.yaml", "images": "variants.yaml", "playbooks": "site.yml"}


def resource_dir(name: str, explicit: str | os.PathLike[str] | None = None) -> str:
    marker = _MARKERS[name]
    if explicit is not None:
        path = os.fspath(explicit)
        if not os.path.isdir(path):
            raise InputError(
                f"{name} directory {path!r} does not exist",
                hint=f"point --{name}-dir at a folder holding {marker}",
            )
        return path
    env = os.environ.get(f"PROVISION_{name.upper()}_DIR")
    if env:
        return resource_dir(name, env)
    tried = []
    for candidate in (os.path.join(_CHECKOUT, name), os.path.join(_PACKAGE, "_resources", name)):
        tried.append(candidate)
        if os.path.isfile(os.path.join(candidate, marker)):
            return candidate
    raise InputError(
        f"cannot find the {name}/ directory (looked in {', '.join(tried)})",
        hint=f"reinstall provision, or set PROVISION_{name.upper()}_DIR",
    )


def compat_dir(explicit: str | os.PathLike[str] | None = None) -> str:
    return resource_dir("compat", explicit)


def images_dir(explicit: str | os.PathLike[str] | None = None) -> str:
    return resource_dir("images", explicit)


def playbooks_dir(explicit: str | os.PathLike[str] | None = None) -> str:
    return resource_dir("playbooks", explicit)
