"""Stands in for the get-pip.py that ansible-test downloads to put pip into each sanity
virtual environment: that script comes from a host this machine cannot reach, while PyPI is
reachable. Same contract: run by ansible-test (quiet_pip.py, GET_PIP=<this file>) with the venv's
python and pip-install arguments (``--disable-pip-version-check pip==X [--no-setuptools]
[--no-wheel]``); it installs the interpreter's bundled pip (ensurepip), then those packages.
get-pip's own flags --no-setuptools / --no-wheel only mean "do not add them", so they are dropped."""

import ensurepip
import os
import subprocess
import sys

if __name__ == "__main__":
    env = dict(os.environ)  # ensurepip blanks pip's settings (PIP_CONFIG_FILE=/dev/null) in os.environ
    ensurepip.bootstrap(upgrade=True)
    args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
    sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args], env=env, timeout=600))
