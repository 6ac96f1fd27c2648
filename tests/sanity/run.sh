#!/bin/bash
# ansible-test sanity on the collection as it ships: the tarball `ansible-galaxy collection build` makes,
# installed into a temporary ansible_collections/gpufabric/storage tree (ansible-test runs only from such a
# tree), with this directory's ignore files. Run by `make lint` (and so by `make test`, before the lab).
#
# usage: tests/sanity/run.sh VENV
#
# All of ansible-test's sanity tests that apply to this collection run (docs/testing.md, "Linters").
# Seven of them (ansible-doc, import, pep8, pylint, runtime-metadata, validate-modules, yamllint) run in
# virtualenvs of their own, which ansible-test makes under $HOME/.ansible/test/venv and starts with a
# get-pip script it downloads from ci-files.testing.ansible.com, a host this CI machine cannot resolve.
# So ansible-test runs with HOME set to a cache directory shared by clones, next to the lab's image cache
# ($FABRIC_LAB_CACHE, default /var/cache/fabric-lab; where that is not writable, ~/.cache/fabric-lab),
# in whose .ansible/test/cache/get_pip_<pip version>.py ansible-test finds tests/sanity/get_pip.py
# ("Using cached pip ... bootstrap script"): ensurepip, then pip from the configured package index. The
# pip version is the one the installed ansible-test pins. The first run makes the virtualenvs (about a
# minute), later runs reuse them; a lock keeps two clones from making them at the same time.
set -euo pipefail
venv=$(cd "${1:?usage: run.sh VENV}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
export PATH="$venv/bin:$PATH"
python=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

cache=${FABRIC_LAB_CACHE:-/var/cache/fabric-lab}/ansible-test-home
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/fabric-lab/ansible-test-home
    mkdir -p "$cache"
fi
exec 9>"$cache/.lock"
flock 9  # one run at a time per cache: ansible-test would make the same virtualenvs side by side
# the pip version ansible-test bootstraps its virtualenvs with (python_requirements.get_venv_packages), from
# which it names the cached script (ansible_test/_util/target/setup/requirements.py, bootstrap); should that
# internal function change, the pin is read from its source
pip_version=$("$venv/bin/python" - "$python" 2>/dev/null <<'PY'
import sys, types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version=sys.argv[1]))["pip"])
PY
) || pip_version=$(sed -n "s/^ *pip='\([0-9.]*\)',\$/\1/p" "$("$venv/bin/python" -c \
    'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')/_internal/python_requirements.py" || true)
if ! [[ $pip_version =~ ^[0-9]+(\.[0-9]+)+$ ]]; then
    echo "run.sh: cannot tell which pip ansible-test bootstraps its virtualenvs with (got '$pip_version')" >&2
    exit 1
fi
mkdir -p "$cache/.ansible/test/cache"
get_pip="$cache/.ansible/test/cache/get_pip_${pip_version//./_}.py"
cmp -s "$repo/tests/sanity/get_pip.py" "$get_pip" || cp "$repo/tests/sanity/get_pip.py" "$get_pip"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$repo"
ansible-galaxy collection build --output-path "$work" >/dev/null
tarball=$(ls "$work"/gpufabric-storage-*.tar.gz)
mkdir -p "$work/ansible_collections/gpufabric/storage"
tar -xzf "$tarball" -C "$work/ansible_collections/gpufabric/storage"
mkdir -p "$work/ansible_collections/gpufabric/storage/tests/sanity"
cp tests/sanity/ignore-*.txt "$work/ansible_collections/gpufabric/storage/tests/sanity/"
cd "$work/ansible_collections/gpufabric/storage"
# no virtualenv of their own
tests=(action-plugin-docs compile empty-init ignores line-endings no-assert no-get-exception
       no-illegal-filenames no-smart-quotes replace-urlopen shebang symlinks use-argspec-type-path use-compat-six)
# each in its virtualenv under $cache
tests+=(ansible-doc import pep8 pylint runtime-metadata validate-modules yamllint)
HOME=$cache LC_ALL=C.UTF-8 ansible-test sanity --local --python "$python" "${tests[@]/#/--test=}" 2>&1 \
    | grep --line-buffered -v -e '^WARNING: Using locale' -e '^WARNING: Reviewing previous 1 warning(s):$'
