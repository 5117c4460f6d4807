"""Where the data (compat/), templates (images/) and playbooks (playbooks/) are.

Order: an explicit path (a command-line flag) > ``PROVISION_<NAME>_DIR`` in the environment >
the source checkout this package was imported from > the copy inside the installed wheel
(``provision/_resources/<name>``).
"""

from __future__ import annotations

import os
from pathlib import Path

from provision.errors import InputError

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent
_MARKERS = {"compat": "gpus.yaml", "images": "variants.yaml", "playbooks": "site.yml"}


def resource_dir(name: str, explicit: str | os.PathLike[str] | None = None) -> Path:
    marker = _MARKERS[name]
    if explicit is not None:
        path = Path(explicit)
        if not path.is_dir():
            raise InputError(
                f"{name} directory {str(path)!r} does not exist",
                hint=f"point --{name}-dir at a folder holding {marker}",
            )
        return path
    env = os.environ.get(f"PROVISION_{name.upper()}_DIR")
    if env:
        return resource_dir(name, env)
    tried = []
    for candidate in (_CHECKOUT / name, _PACKAGE / "_resources" / name):
        tried.append(str(candidate))
        if (candidate / marker).is_file():
            return candidate
    raise InputError(
        f"cannot find the {name}/ directory (looked in {', '.join(tried)})",
        hint=f"reinstall provision, or set PROVISION_{name.upper()}_DIR",
    )


def compat_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    return resource_dir("compat", explicit)


def images_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    return resource_dir("images", explicit)


def playbooks_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    return resource_dir("playbooks", explicit)
