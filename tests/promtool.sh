#!/bin/bash
# promtool (checks docs/alerts.yml in the unit tests) into the virtualenv's bin: taken out of Debian's
# prometheus package without installing it (installing would also enable a Prometheus server on this
# machine). Best effort: without it the one test that needs it says it is skipped, and why.
set -eu
dest=$1
[ -x "$dest/promtool" ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && apt-get download -q prometheus >/dev/null 2>&1); then
    [ "$(id -u)" -eq 0 ] && DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 || true
    (cd "$work" && apt-get download -q prometheus >/dev/null 2>&1) || {
        echo "promtool: could not download Debian's prometheus package; the promtool test will be skipped" >&2
        exit 0
    }
fi
dpkg-deb -x "$work"/prometheus_*.deb "$work/x"
install -m 0755 "$work/x/usr/bin/promtool" "$dest/promtool"
echo "promtool: $("$dest/promtool" --version 2>&1 | head -1) in $dest"
