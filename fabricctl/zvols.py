"""The ZFS volumes fabricctl makes on this node (dataset staging volumes, checkpoint volumes): listing
them by kind, waiting for a new one's device, giving it a file system, destroying one."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from fabric_core.base.errors import CommandError, NotFound, UnsafeOperation
from fabric_core.storage import blockfs, lzc, versions


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


def destroy(ctx, volume: str, snapshots: list[str], attempts: int = 5) -> None:
    """Destroy exactly ``snapshots`` (the volume's snapshots the caller checked: one libzfs_core batch, refused
    whole if one is held), then the volume itself without `-r`: a snapshot taken since the check (by hand, or a
    replication receiving into it) is never destroyed unseen; the volume's destroy then fails, naming it.
    Waits out the moment a zvol stays busy after its LIO backstore or its mount went (udev's probe may still
    hold it open)."""
    mine = [s for s in snapshots if s.partition("@")[0] == volume]
    if len(mine) != len(snapshots):
        raise UnsafeOperation(f"not snapshots of {volume}: {', '.join(sorted(set(snapshots) - set(mine)))}",
                              "destroy each volume with its own snapshots")
    lzc.destroy_snapshots(mine, runner=ctx.local)
    for attempt in range(attempts):
        ctx.local.run(["udevadm", "settle"], check=False)
        res = ctx.local.run(["zfs", "destroy", volume], mutating=True, check=False)
        if res.rc == 0:
            return
        if "has children" in res.stderr:
            new = [r["name"] for r in versions.list_all_snapshots(ctx.local, volume)]
            raise UnsafeOperation(f"{volume} has snapshots taken after fabricctl checked them: "
                                  f"{', '.join(new) or res.stderr.strip()}; the volume was kept (the snapshots "
                                  "checked are destroyed)", "look at who took them (a hand-made snapshot, a "
                                  "replication), destroy or keep them yourself, then run the command again")
        if "busy" not in res.stderr or attempt == attempts - 1:
            raise CommandError(res.argv, res.rc, res.stdout, res.stderr,
                               fix=f"see what still uses /dev/zvol/{volume} (`fuser -v`, `targetcli ls`), then "
                                   "run the command again")
        time.sleep(2 * (attempt + 1))
