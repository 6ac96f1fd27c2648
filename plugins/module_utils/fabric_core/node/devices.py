"""The block device of a logged-in LUN: udev's link, or the kernel's disk itself.

Two waits, one for each kind of caller (``iscsi.apply_session`` picks one):

* ``wait_for_device``: udev's by-path link (/dev/disk/by-path/ip-ADDRESS:PORT-iscsi-IQN-lun-N), made once udev's
  rules for the disk have run. A persistent mount unit names that link, and a multipath map needs udev's view of
  its paths (the WWID, multipathd's path properties), so they wait for it.
* ``wait_for_disk``: the kernel's disk (/dev/sdX) of this session's LUN, read from sysfs as soon as the SCSI scan
  after the login has added it with its capacity read: before udev's rules for it have run. A job's attachment of a
  plain disk mounts the kernel's device directly (``mounts.ensure_runtime_mount``) and needs nothing udev does;
  udev's rules for an iSCSI disk (`sg_inq`, `multipath -u`, ZFS's `vdev_id`, `blkid`) took 1-1.4 s of a job's start
  on the lab's emulated CPU (issue 29's prolog), a few milliseconds on real machines.
"""

from __future__ import annotations

import time

from ..base.errors import FabricError


class DeviceTimeout(FabricError):
    """Logged in, but the LUN's block device did not appear."""


def _timeout(what: str, timeout: float) -> DeviceTimeout:
    return DeviceTimeout(
        f"logged in, but {what} did not appear within {timeout:g}s",
        "check on the storage node that the export maps this LUN number to this initiator's ACL "
        "(MappedLUN), and `dmesg` on this host for SCSI errors")


def wait_for_device(runner, path: str, *, timeout: float = 60.0, interval: float = 0.5, sleep=time.sleep,
                    clock=time.monotonic) -> str:
    """Wait for a by-path link (``udevadm wait``: that one device made and initialised by udev, not the whole event
    queue as `udevadm settle` waits for; then a bounded poll); return the kernel device (/dev/sdX)."""
    runner.run(["udevadm", "wait", f"--timeout={int(max(timeout, 1))}", path], check=False)
    deadline = clock() + timeout
    while True:
        res = runner.run(["readlink", "-e", path], check=False)
        if res.rc == 0 and res.stdout.strip():
            return res.stdout.strip()
        if clock() >= deadline:
            raise _timeout(path, timeout)
        sleep(interval)


# The kernel's disk of one session's LUN: argv IQN ADDRESS PORT LUN SECONDS [ROOT] (ROOT: where /sys and /dev are,
# for a test; the host's own by default). The session is the one to that target
# whose connection's persistent address and port are the portal's (sysfs: iscsi_session's targetname,
# iscsi_connection's persistent_address/persistent_port); its LUN's disk is under the session's SCSI target
# (HOST:CHANNEL:ID:LUN/block/NAME). Prints /dev/NAME once the disk has its capacity and its device node
# (devtmpfs makes it before udev hears of the disk); exit 1 after SECONDS without. Reads with bash's own `read`:
# every fork costs tens of milliseconds on an emulated CPU.
DISK_OF_SESSION = r"""
iqn=$1 address=$2 port=$3 lun=$4 limit=$5 root=${6:-}
while :; do
  for s in "$root"/sys/class/iscsi_session/session*; do
    read -r name 2>/dev/null < "$s/targetname" && [ "$name" = "$iqn" ] || continue
    c=$root/sys/class/iscsi_connection/connection${s##*session}:0
    read -r a 2>/dev/null < "$c/persistent_address" && [ "$a" = "$address" ] || continue
    read -r p 2>/dev/null < "$c/persistent_port" && [ "$p" = "$port" ] || continue
    for b in "$s"/device/target*/*:"$lun"/block/*; do
      read -r size 2>/dev/null < "$b/size" && [ "$size" -gt 0 ] && [ -e "$root/dev/${b##*/}" ] &&
        { echo "/dev/${b##*/}"; exit 0; }
    done
  done
  [ "$SECONDS" -lt "$limit" ] || exit 1
  sleep 0.05
done
"""


def disk_argv(portal: str, target_iqn: str, lun: int, timeout: float, root: str = "") -> list:
    """The command ``wait_for_disk`` runs (``portal``: normalised ADDRESS:PORT or [ADDRESS]:PORT)."""
    address, port = portal.rsplit(":", 1)
    return ["bash", "-c", DISK_OF_SESSION, "fabric-disk", target_iqn, address.strip("[]"), port, str(int(lun)),
            str(int(max(timeout, 1))), *([root] if root else [])]


def wait_for_disk(runner, *, portal: str, target_iqn: str, lun: int = 0, timeout: float = 60.0) -> str:
    """The kernel's disk (/dev/sdX) of the session to ``target_iqn`` at ``portal``, LUN ``lun``, as soon as the
    kernel has added it (``DISK_OF_SESSION``), without waiting for udev."""
    res = runner.run(disk_argv(portal, target_iqn, lun, timeout), check=False)
    if res.rc == 0 and res.stdout.strip().startswith("/dev/"):
        return res.stdout.strip()
    raise _timeout(f"the kernel's disk of LUN {int(lun)} of {target_iqn} at {portal}", timeout)
