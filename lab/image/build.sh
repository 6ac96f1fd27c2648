#!/bin/bash
# Build the lab guest image: a Debian 12 root filesystem with ZFS (DKMS), LIO and open-iscsi,
# packed into an ext4 raw disk labelled "root", plus the kernel and initrd for direct boot.
#
# usage: build.sh OUTDIR            (env: FABRIC_LAB_MIRROR, FABRIC_LAB_SECURITY_MIRROR)
# Writes OUTDIR/{disk.raw,vmlinuz,initrd.img,manifest.txt}. Runs as root. Idempotent per OUTDIR:
# the caller builds into a temporary directory and renames it into the cache when done.
set -euo pipefail

out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mirror=${FABRIC_LAB_MIRROR:?FABRIC_LAB_MIRROR must name a Debian mirror}
security=${FABRIC_LAB_SECURITY_MIRROR:-}
root="$out/rootfs"

log() { printf '[image %(%H:%M:%S)T] %s\n' -1 "$*"; }

cleanup() {
    for m in dev/pts dev proc sys; do
        mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m" || true
    done
}
trap cleanup EXIT

mkdir -p "$out"
log "debootstrap bookworm (minbase, main+contrib) from $mirror"
debootstrap --variant=minbase --components=main,contrib \
    --include=systemd-sysv,udev,kmod,iproute2,openssh-server,python3,ca-certificates,dbus \
    bookworm "$root" "$mirror" >"$out/debootstrap.log" 2>&1 \
    || { tail -n 30 "$out/debootstrap.log" >&2; exit 1; }

{
    echo "deb $mirror bookworm main contrib"
    echo "deb $mirror bookworm-updates main contrib"
    [ -n "$security" ] && echo "deb $security bookworm-security main contrib"
} >"$root/etc/apt/sources.list"

mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"

pkgs=$(grep -v '^\s*#' "$here/packages.txt" | grep -v '^\s*$' | tr '\n' ' ')
log "apt-get install (kernel, zfs-dkms build, LIO, open-iscsi, tools)"
# zfs-dkms asks a license question through debconf; answer it.
echo "zfs-dkms zfs-dkms/note-incompatible-licenses note true" | chroot "$root" debconf-set-selections
chroot "$root" env DEBIAN_FRONTEND=noninteractive LC_ALL=C bash -c "
    apt-get update -q &&
    apt-get install -y -q --no-install-recommends $pkgs" >"$out/apt.log" 2>&1 \
    || { tail -n 40 "$out/apt.log" >&2; exit 1; }

kver=$(ls "$root/lib/modules" | sort -V | tail -n 1)
log "guest kernel $kver"
[ -n "$(find "$root/lib/modules/$kver" -name 'zfs.ko*' | head -n 1)" ] \
    || { echo "zfs.ko was not built for $kver (see $out/apt.log)" >&2; exit 1; }

log "configure guest"
cp -a "$here/files/." "$root/"
chmod 0755 "$root/usr/local/sbin/"*
cat >"$root/etc/fstab" <<FSTAB
LABEL=root / ext4 defaults,noatime 0 1
FSTAB
# Per-VM identity is created at first boot by fabric-lab-seed (hostname, address, keys).
rm -f "$root"/etc/ssh/ssh_host_* "$root/etc/iscsi/initiatorname.iscsi" "$root/etc/hostid"
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
chroot "$root" systemctl enable systemd-networkd fabric-lab-seed.service >/dev/null 2>&1
for unit in apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer \
            fstrim.timer sanoid.timer zfs-scrub-monthly@.timer; do
    chroot "$root" systemctl mask "$unit" >/dev/null 2>&1 || true
done
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/tmp/*

cp "$root/boot/vmlinuz-$kver" "$out/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$out/initrd.img"
chmod 0644 "$out/vmlinuz" "$out/initrd.img"
chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' >"$out/manifest.txt"
cleanup
trap - EXIT

log "mkfs.ext4 -d (root filesystem image)"
mkfs.ext4 -q -F -L root -d "$root" "$out/disk.raw" 6G
rm -rf "$root"
log "done: $(du -sh --apparent-size "$out/disk.raw" | cut -f1) apparent, $(du -sh "$out/disk.raw" | cut -f1) on disk"
