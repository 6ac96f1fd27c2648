#!/bin/bash
# Debian packages that `make venv` needs on a fresh Debian 12 machine (the lab installs its own).
set -eu
need=()
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
command -v git >/dev/null || need+=(git)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "host-deps: missing Debian packages: ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
    exit 1
fi
echo "host-deps: installing ${need[*]}"
DEBIAN_FRONTEND=noninteractive apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
