#!/bin/bash
# Build fabricctl's wheel on the controller from a repository checkout, once per content.
#
# usage: build-wheel.sh REPO CACHE_DIR PYTHON
# Prints the path of the wheel. The wheel is built from a clean copy of exactly the files the package
# is made of (pyproject.toml, README.md, fabricctl/, fabric_node/, fabric_csi/, plugins/module_utils/fabric_core/),
# so no stale build directory can leak into it, with SOURCE_DATE_EPOCH fixed so that the same sources always give the
# same bytes (the role then copies and installs it only when it changed). Cached under
# CACHE_DIR/<sha256 of the sources>/; a second call with the same sources builds nothing.
set -euo pipefail
repo=${1:?usage: build-wheel.sh REPO CACHE_DIR PYTHON}
cache=${2:?usage: build-wheel.sh REPO CACHE_DIR PYTHON}
python=${3:?usage: build-wheel.sh REPO CACHE_DIR PYTHON}
cd "$repo"
sources=$(find pyproject.toml README.md fabricctl fabric_node fabric_csi plugins/module_utils/fabric_core -type f \
          -not -path '*/__pycache__/*' -not -name '*.py[co]' | LC_ALL=C sort)
digest=$( (printf '%s\n' "$sources"; cat $sources) | sha256sum | cut -c1-16)
out="$cache/$digest"
wheel=$(ls "$out"/*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    printf '%s\n' $sources | tar -cf - -T - | tar -xf - -C "$work"
    mkdir -p "$cache"
    tmp=$(mktemp -d "$cache/.build.XXXXXX")
    SOURCE_DATE_EPOCH=1700000000 "$python" -m pip wheel --quiet --no-deps --no-build-isolation \
        --wheel-dir "$tmp" "$work" >&2
    rm -rf "$out"
    mv "$tmp" "$out"
    wheel=$(ls "$out"/*.whl | head -n 1)
fi
echo "$wheel"
