#!/bin/bash
# Tools some unit tests run, into the virtualenv (argument: its directory), taken out of Debian's packages
# without installing them (`apt-get download` + `dpkg-deb -x`; nothing is installed on this machine):
#   promtool  -> VENV/bin/promtool: checks the example alert rules (tests/unit/test_metrics.py). From the
#                prometheus package: installing it would also enable a Prometheus server here.
#   sanoid    -> VENV/share/sanoid/{sanoid,sanoid.defaults.conf} and the two Perl modules it needs
#                (Config::IniFiles, Capture::Tiny) -> VENV/share/perl5: retention's sanoid mode is compared with
#                the real sanoid on the same snapshots (tests/unit/test_retention_sanoid.py). The package itself
#                depends on zfsutils-linux, which a developer's machine need not have.
# `make venv`, `make unit` and `make test` run it; a tool already there is not fetched again. A tool that cannot
# be fetched is reported here; its test then fails under CI and is skipped, saying why, elsewhere.
set -eu
venv=$1
bin=$venv/bin share=$venv/share
need=()
[ -x "$bin/promtool" ] || need+=(prometheus)
if [ ! -f "$share/sanoid/sanoid" ] || [ ! -f "$share/perl5/Config/IniFiles.pm" ] || [ ! -f "$share/perl5/Capture/Tiny.pm" ]; then
    need+=(sanoid libconfig-inifiles-perl libcapture-tiny-perl)
fi
[ ${#need[@]} -eq 0 ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 0755 "$work"  # apt's _apt user downloads into it
download() { (cd "$work" && apt-get download -q "${need[@]}" >/dev/null 2>&1); }
if ! download; then
    [ "$(id -u)" -eq 0 ] && DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 || true
    download || {
        echo "test-tools: could not download Debian's ${need[*]} (apt-get download; as root it runs apt-get update" \
             "first): the tests that need them fail under CI and are skipped, saying so, elsewhere" >&2
        exit 0
    }
fi
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/x"; done
if [ -f "$work/x/usr/bin/promtool" ]; then
    install -D -m 0755 "$work/x/usr/bin/promtool" "$bin/promtool"
    echo "test-tools: $("$bin/promtool" --version 2>&1 | head -1) in $bin"
fi
if [ -f "$work/x/usr/sbin/sanoid" ]; then
    install -D -m 0644 "$work/x/usr/sbin/sanoid" "$share/sanoid/sanoid"
    install -D -m 0644 "$work/x/usr/share/sanoid/sanoid.defaults.conf" "$share/sanoid/sanoid.defaults.conf"
    mkdir -p "$share/perl5"
    cp -r "$work/x/usr/share/perl5/." "$share/perl5/"
    echo "test-tools: sanoid $(sed -n "s/^\$::VERSION = '\(.*\)';/\1/p" "$share/sanoid/sanoid") in $share/sanoid"
fi
