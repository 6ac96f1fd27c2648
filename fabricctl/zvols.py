"""The ZFS volumes fabricctl makes on this node (dataset staging volumes, checkpoint volumes): listing
them by kind, waiting for a new one's device, giving it a file system, destroying one."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from fabric_core import blockfs, versions
from fabric_core.errors import CommandError, NotFound


@dataclass(frozen=True)
class Volumes:
    """The volumes of one kind under one root of the configuration (``root``: the Config attribute),
    by their last name component (the dataset or the job)."""

    root: str
    kind: str
    unknown: Callable[[str, str], NotFound]  # (name, the names there are) -> the error of an unknown name

    def all(self, ctx) -> dict:
        """Name -> the volume's row (versions.list_volumes)."""
        rows = versions.list_volumes(ctx.local, getattr(ctx.config, self.root), kinds=(self.kind,))
        return {v["name"].rsplit("/", 1)[-1]: v for v in rows}

    def require(self, ctx, name: str) -> dict:
        """The row of volume NAME; the error names the volumes there are."""
        vols = self.all(ctx)
        if name not in vols:
            raise self.unknown(name, ", ".join(sorted(vols)) or "none yet")
        return vols[name]


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
