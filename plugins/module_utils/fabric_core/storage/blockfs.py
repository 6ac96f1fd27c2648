"""File systems on block devices the fabric owns (volumes): one rule for making them, used by the
zfs_datasets role (through fabric_zfs_dataset) and by fabricctl.

A blank device (no signature at all, `blkid -p` exit 2) gets the declared file system; a device
that already carries the declared one is left alone; a device with anything else is refused, never
reformatted. The options suit volumes that are later exported read-only or written by one training
job: no discard pass over a fresh zvol (it is already all zeroes, and discarding is slow), no lazy
inode-table or journal initialisation (that would write in the background after mkfs returns, into a
volume about to be snapshotted), and no blocks reserved for root.
"""

from __future__ import annotations

import os
import time

from ..base.errors import UserError
from ..base.rules import FILESYSTEMS, validate_filesystem
from ..base.runner import Runner

__all__ = ["FILESYSTEMS", "LABEL_MAX", "validate", "mkfs_argv", "probe", "wait_for", "require", "ensure_filesystem"]
LABEL_MAX = {"ext4": 16, "xfs": 12}


def validate(fstype: str) -> None:
    validate_filesystem(fstype)


def mkfs_argv(fstype: str, device: str, label: str = "") -> list[str]:
    """The mkfs command line for device (the label is cut to what the file system allows)."""
    validate(fstype)
    if fstype == "ext4":
        argv = ["mkfs.ext4", "-q", "-m", "0", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0"]
    else:
        argv = ["mkfs.xfs", "-q", "-K"]
    if label:
        argv += ["-L", label[: LABEL_MAX[fstype]]]
    return [*argv, device]


def probe(runner: Runner, device: str) -> str | None:
    """The signature type on device ('ext4', 'xfs', 'zfs_member', ...), or None when it is blank."""
    res = runner.run(["blkid", "-p", "-o", "value", "-s", "TYPE", device], check=False)
    if res.rc == 2:
        return None
    if res.rc != 0:
        raise UserError(f"cannot read the signature of {device}: {(res.stderr or res.stdout).strip()}",
                        "check that the device exists and is readable")
    return res.stdout.strip() or "unknown"


def wait_for(device: str, seconds: float = 30.0, runner: Runner | None = None) -> bool:
    """True once device exists (a new zvol's node appears after udev has run)."""
    if runner is not None:
        runner.run(["udevadm", "settle"], check=False)
    deadline = time.monotonic() + seconds
    while not os.path.exists(device):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def require(device: str, seconds: float = 60.0, runner: Runner | None = None) -> str:
    """``wait_for``, refusing a device that did not appear; returns the device."""
    if not wait_for(device, seconds, runner):
        raise UserError(f"{device} did not appear within {seconds:g}s", "run `udevadm settle` and check `dmesg`")
    return device


def ensure_filesystem(runner: Runner, device: str, fstype: str, *, label: str = "",
                      device_planned: bool = False) -> dict:
    """Make fstype on a blank device; accept it already there; refuse any other signature.

    device_planned: the device does not exist yet because a dry run only planned its creation;
    the file system is then planned too. Returns {changed, found, command}.
    """
    validate(fstype)
    argv = mkfs_argv(fstype, device, label)
    if device_planned and runner.dry_run:
        runner.run(argv, mutating=True)
        return {"changed": True, "found": None, "command": argv}
    if not wait_for(device, runner=runner):
        raise UserError(f"{device} did not appear", "check `zfs list` and udev (`udevadm settle`), then run again")
    found = probe(runner, device)
    if found is None:
        runner.run(argv, mutating=True)
        return {"changed": True, "found": None, "command": argv}
    if found == fstype:
        return {"changed": False, "found": found, "command": []}
    raise UserError(
        f"{device} carries {found}, not the declared {fstype}; a volume with data is never reformatted",
        f"declare filesystem: {found} for it, or wipe it yourself (`wipefs -a {device}`) if its data may go")
