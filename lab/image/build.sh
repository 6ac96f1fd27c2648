#!/bin/bash
# Build the lab guest image: a Debian root filesystem with OpenZFS 2.3 (DKMS), LIO and open-iscsi,
# packed into an ext4 raw disk labelled "root", plus the kernel and initrd for direct boot.
#
# usage: build.sh OUTDIR RELEASE    (env: FABRIC_LAB_MIRROR, FABRIC_LAB_SECURITY_MIRROR)
#   RELEASE trixie   Debian 13, OpenZFS 2.3 from trixie contrib (the primary platform)
#   RELEASE bookworm Debian 12, OpenZFS 2.3 from bookworm-backports contrib, pinned there exactly as
#                    the storage_base role pins it (never ZFS 2.1 from bookworm itself)
# Writes OUTDIR/{disk.raw,vmlinuz,initrd.img,manifest.txt}. Runs as root. Idempotent per OUTDIR:
# the caller builds into a temporary directory and renames it into the cache when done.
set -euo pipefail

out=${1:?usage: build.sh OUTDIR RELEASE}
release=${2:?usage: build.sh OUTDIR RELEASE}
here=$(cd "$(dirname "$0")" && pwd)
mirror=${FABRIC_LAB_MIRROR:?FABRIC_LAB_MIRROR must name a Debian mirror}
security=${FABRIC_LAB_SECURITY_MIRROR:-}
root="$out/rootfs"

case "$release" in
    trixie|bookworm) ;;
    *) echo "build.sh: release must be trixie or bookworm, not '$release'" >&2; exit 2 ;;
esac

log() { printf '[image %(%H:%M:%S)T] %s\n' -1 "$*"; }

cleanup() {
    for m in dev/pts dev proc sys; do
        mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m" || true
    done
}
trap cleanup EXIT

mkdir -p "$out"
log "debootstrap $release (minbase, main+contrib) from $mirror"
debootstrap --variant=minbase --components=main,contrib \
    --include=systemd-sysv,udev,kmod,iproute2,openssh-server,python3,ca-certificates,dbus \
    "$release" "$root" "$mirror" >"$out/debootstrap.log" 2>&1 \
    || { tail -n 30 "$out/debootstrap.log" >&2; exit 1; }

# Apt sources in the deb822 form that Debian 13 installs (and Debian 12 accepts).
rm -f "$root/etc/apt/sources.list"
{
    printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main contrib\n' "$mirror" "$release" "$release"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    if [ -n "$security" ]; then
        printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main contrib\n' "$security" "$release"
        printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    fi
} >"$root/etc/apt/sources.list.d/debian.sources"
if [ "$release" = bookworm ]; then
    # The same two files the storage_base role writes on a Debian 12 node (see its tasks/zfs_repo.yml):
    # a converged lab node then reports no change.
    printf '%s\n' "# Managed by the storage_base role (fabric): OpenZFS 2.3 for Debian 12." \
        "Types: deb" "URIs: $mirror" "Suites: bookworm-backports" "Components: main contrib" \
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
        >"$root/etc/apt/sources.list.d/fabric-bookworm-backports.sources"
    printf '%s\n' "# Managed by the storage_base role (fabric): every OpenZFS package from bookworm-backports." \
        "Package: src:zfs-linux" "Pin: release n=bookworm-backports" "Pin-Priority: 990" \
        >"$root/etc/apt/preferences.d/fabric-zfs.pref"
fi

mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"

pkgs=$(grep -v '^\s*#' "$here/packages.txt" | grep -v '^\s*$' | tr '\n' ' ')
log "apt-get install (kernel, zfs-dkms build, LIO, open-iscsi, tools)"
# zfs-dkms asks a license question through debconf; answer it.
echo "zfs-dkms zfs-dkms/note-incompatible-licenses note true" | chroot "$root" debconf-set-selections
# the build's own speed, undone below: dpkg writes without an fsync per file (a throw-away root that becomes an
# image once whole, as debootstrap and mmdebstrap do), and man-db's index is not rebuilt at every package
echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/fabric-image-build"
echo "man-db man-db/auto-update boolean false" | chroot "$root" debconf-set-selections
chroot "$root" env DEBIAN_FRONTEND=noninteractive LC_ALL=C bash -c "
    apt-get update -q &&
    apt-get install -y -q --no-install-recommends $pkgs" >"$out/apt.log" 2>&1 \
    || { tail -n 40 "$out/apt.log" >&2; exit 1; }

kver=$(ls "$root/lib/modules" | sort -V | tail -n 1)
log "guest kernel $kver"
[ -n "$(find "$root/lib/modules/$kver" -name 'zfs.ko*' | head -n 1)" ] \
    || { echo "zfs.ko was not built for $kver (see $out/apt.log)" >&2; exit 1; }
zfs_version=$(chroot "$root" dpkg-query -W -f='${Version}' zfsutils-linux)
case "$zfs_version" in
    2.3.*) log "OpenZFS $zfs_version" ;;
    *) echo "zfsutils-linux is $zfs_version, not 2.3 (see $out/apt.log)" >&2; exit 1 ;;
esac

rm -f "$root/etc/dpkg/dpkg.cfg.d/fabric-image-build"
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
for unit in apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer dpkg-db-backup.timer \
            fstrim.timer sanoid.timer zfs-scrub-monthly@.timer zfs-trim-monthly@.timer; do
    chroot "$root" systemctl mask "$unit" >/dev/null 2>&1 || true
done
# Installed for later work (multipath, the NFS baseline) but off until a role or benchmark starts them:
# under emulation every idle daemon costs CPU, and multipathd must not claim disks it was not given.
for unit in multipathd.service multipathd.socket nfs-server.service rpcbind.service rpcbind.socket \
            nfs-blkmap.service iperf3.service; do
    chroot "$root" systemctl disable "$unit" >/dev/null 2>&1 || true
done
# Slurm and munge are a lab fixture of the GPU nodes (playbooks/lab-slurm.yml): off on every node until that
# playbook enables them where the lab says, and no munge key in the image (the playbook writes one per lab).
for unit in munge.service slurmd.service slurmctld.service; do
    chroot "$root" systemctl disable "$unit" >/dev/null 2>&1 || true
done
rm -f "$root/etc/munge/munge.key"
# The initramfs carries what the lab's direct boot needs to mount its root (virtio-blk, ext4), not every module
# MODULES=most takes (36 MB; unpacking it and its udev's module loads took about 9 s of each emulated boot): the
# data disks' drivers load from the root file system, as anything else does.
printf '%s\n' "# the lab's root disk (lab/image/build.sh)" virtio_pci virtio_blk ext4 >>"$root/etc/initramfs-tools/modules"
sed -i 's/^MODULES=.*/MODULES=list/' "$root/etc/initramfs-tools/initramfs.conf"
chroot "$root" update-initramfs -u -k "$kver" >"$out/initramfs.log" 2>&1 || { tail -n 20 "$out/initramfs.log" >&2; exit 1; }
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/tmp/*
# /etc and /var are up to date with /usr (ldconfig and apt's triggers ran in the build): the first boot of every lab
# VM then skips the units that ConditionNeedsUpdate= starts after a /usr update (ldconfig.service, the journal's
# catalog: about 8 s of an emulated first boot).
chroot "$root" /usr/lib/systemd/systemd-update-done

cp "$root/boot/vmlinuz-$kver" "$out/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$out/initrd.img"
chmod 0644 "$out/vmlinuz" "$out/initrd.img"
chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' >"$out/manifest.txt"
echo "$release" >"$out/release"
cleanup
trap - EXIT

log "mkfs.ext4 -d (root filesystem image)"
mkfs.ext4 -q -F -L root -d "$root" "$out/disk.raw" 6G
rm -rf "$root"
log "done: $(du -sh --apparent-size "$out/disk.raw" | cut -f1) apparent, $(du -sh "$out/disk.raw" | cut -f1) on disk"
