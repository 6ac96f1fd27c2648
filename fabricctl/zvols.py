"""The ZFS volumes fabricctl makes on this node (dataset staging volumes, checkpoint volumes): listing
them by kind, waiting for a new one's device, giving it a file system, destroying one."""

from __future__ import annotations

import time

from fabric_core import blockfs, versions
from fabric_core.errors import CommandError


def by_name(ctx, root: str, kinds: tuple[str, ...]) -> dict:
    """The volumes of these kinds under root, by their last name component (the dataset or the job)."""
    return {v["name"].rsplit("/", 1)[-1]: v for v in versions.list_volumes(ctx.local, root, kinds=kinds)}


def settle(ctx, volume: str) -> None:
    """Wait for a new volume's device (udev makes /dev/zvol/...); nothing to wait for in a dry run."""
    if not ctx.dry_run:
        blockfs.require("/dev/zvol/" + volume, runner=ctx.local)


def destroy(ctx, volume: str, attempts: int = 5) -> None:
    """`zfs destroy -r`, waiting out the moment a zvol stays busy after its LIO backstore or its mount
    went (udev's probe may still hold it open)."""
    for attempt in range(attempts):
        ctx.local.run(["udevadm", "settle"], check=False)
        res = ctx.local.run(["zfs", "destroy", "-r", volume], mutating=True, check=False)
        if res.rc == 0:
            return
        if "busy" not in res.stderr or attempt == attempts - 1:
            raise CommandError(res.argv, res.rc, res.stdout, res.stderr,
                               fix=f"see what still uses /dev/zvol/{volume} (`fuser -v`, `targetcli ls`), then "
                                   "run the command again")
        time.sleep(2 * (attempt + 1))
