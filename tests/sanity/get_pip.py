"""Stands in for the get-pip script ansible-test downloads from ci-files.testing.ansible.com to start each
sanity test's virtualenv (a host this project's CI machines cannot resolve). It takes get-pip.py's
arguments and does what get-pip.py does, from what is at hand: Python's own ensurepip puts a pip into
the virtualenv, which then installs the pip version ansible-test pinned (and any other package named)
from the package index pip is configured with. tests/sanity/run.sh puts it where ansible-test looks for
a cached copy (ansible-test prints "Using cached pip ... bootstrap script")."""

import subprocess
import sys

# ensurepip in a child process: in this one it would set PIP_CONFIG_FILE=/dev/null for the pip after it
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"], stdout=subprocess.DEVNULL)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]  # get-pip.py's own options
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *args])
