#!/bin/bash
# ansible-test sanity on the collection as it ships: the tarball `ansible-galaxy collection build` makes,
# installed into a temporary ansible_collections/gpufabric/storage tree (ansible-test runs only from such a
# tree), with this directory's ignore files. Run by `make lint` (and so by `make test`, before the lab).
#
# usage: tests/sanity/run.sh VENV
# The tests below are those that need no virtualenv of their own: ansible-test gives the others (ansible-doc,
# import, pep8, pylint, runtime-metadata, validate-modules, yamllint) a per-test virtualenv bootstrapped
# with get-pip from ci-files.testing.ansible.com and filled from PyPI with its own environment, which this
# CI machine cannot reach (docs/testing.md, "Linters"). `make lint` checks those sources otherwise: ruff,
# ansible-doc on every plugin, ansible-lint.
set -euo pipefail
venv=$(cd "${1:?usage: run.sh VENV}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PATH="$venv/bin:$PATH"
cd "$repo"
ansible-galaxy collection build --output-path "$work" >/dev/null
tarball=$(ls "$work"/gpufabric-storage-*.tar.gz)
mkdir -p "$work/ansible_collections/gpufabric/storage"
tar -xzf "$tarball" -C "$work/ansible_collections/gpufabric/storage"
mkdir -p "$work/ansible_collections/gpufabric/storage/tests/sanity"
cp tests/sanity/ignore-*.txt "$work/ansible_collections/gpufabric/storage/tests/sanity/"
cd "$work/ansible_collections/gpufabric/storage"
tests=(action-plugin-docs compile empty-init ignores line-endings no-assert no-get-exception
       no-illegal-filenames no-smart-quotes replace-urlopen shebang symlinks use-argspec-type-path use-compat-six)
LC_ALL=C.UTF-8 ansible-test sanity --local --python "$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
    "${tests[@]/#/--test=}" 2>&1 | grep -v '^WARNING: Using locale'
