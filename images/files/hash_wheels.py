"""Write built.lock for the wheels an image's build stage built from its locked sdists.

`python hash_wheels.py DIR` reads every *.whl in DIR and writes DIR/built.lock: one
`name==version --hash=sha256:<hex>` line per wheel (name and version from the wheel's file name,
PEP 427), so the runtime stage installs exactly the files it copied, with pip's
`--no-index --require-hashes`. Standard library only.
"""

import hashlib
import os
import re
import sys

WHEEL = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def main(folder):
    lines = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".whl"):
            continue
        m = WHEEL.match(name)
        if m is None:
            print("error: " + name + " is not a wheel file name")
            return 1
        digest = hashlib.sha256()
        with open(os.path.join(folder, name), "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        lines.append(m["name"] + "==" + m["version"] + " --hash=sha256:" + digest.hexdigest())
    if not lines:
        print("error: no wheel was built in " + folder)
        return 1
    with open(os.path.join(folder, "built.lock"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
