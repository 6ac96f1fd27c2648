"""Datasets on this node: the staging volume DATASET_ROOT/NAME, its sealed versions (snapshots) and its
read-write mount at STAGING_ROOT/NAME, with lookups that say what exists when a name is wrong."""

from __future__ import annotations

import contextlib
import os

from fabric_core.base.errors import NotFound, UserError
from fabric_core.base.rules import KIND_DATASET
from fabric_core.node import mounts
from fabric_core.services import history
from fabric_core.storage import versions, zfs

from . import zvols


def volume(cfg, name: str) -> str:
    """The staging volume of dataset NAME: DATASET_ROOT/NAME."""
    return cfg.dataset(name)


def staging_dir(cfg, name: str) -> str:
    return os.path.join(cfg.staging_root, name)


STAGING = zvols.Volumes("dataset_root", KIND_DATASET, lambda name, known: NotFound(
    f"unknown dataset {name!r} (fabricctl datasets on this node: {known})",
    f"create it with `fabricctl dataset create {name} --size SIZE`, or check the name"))
all_volumes = STAGING.all  # dataset name -> its staging volume's row
require = STAGING.require  # the staging volume's row of dataset NAME; NotFound names the datasets there are


def sealed(ctx, name: str | None = None) -> list[dict]:
    """The sealed versions (of dataset NAME, or of all), oldest first."""
    rows = versions.list_snapshots(ctx.local, ctx.config.dataset_root)
    return [r for r in rows if name is None or r["name_short"] == name]


def require_version(ctx, name: str, version: str) -> dict:
    """The row of NAME@VERSION, VERSION a version or a tag: the one place a version named on a command line is
    resolved, when the command runs (a tag: to the version it names now; the row's ``snapshot`` is the version,
    ``tag`` the tag). NotFound names the dataset's versions and tags (and, on a node with peers, how to
    replicate it here)."""
    return resolve(ctx, name, version)[0]


def resolve(ctx, name: str, version: str) -> tuple[dict, dict, list[dict]]:
    """``require_version``, with what it read handed on: (the version's row, the staging volume's row, the dataset's
    sealed versions oldest first), so that a command needing them too does not list them again."""
    try:
        volume_row = require(ctx, name)
    except NotFound as exc:
        raise NotFound(exc.problem, exc.fix + _replicate_hint(ctx, f"{name}@{version}")) from None
    listed = sealed(ctx, name)
    rows = {r["snapshot"]: r for r in listed}
    if version in rows:
        return rows[version], volume_row, listed
    known_tags = tags(ctx, name)
    if version in known_tags:
        target = known_tags[version]
        if target not in rows:
            raise NotFound(f"tag {name}@{version} names version {target}, which is not on this node (destroyed, or "
                           "not replicated here)", f"move the tag (`fabricctl tag {name}@VERSION {version}`) or remove "
                           f"it (`fabricctl untag {name} {version}`)" + _replicate_hint(ctx, f"{name}@{target}"))
        return {**rows[target], "tag": version}, volume_row, listed
    known = ", ".join(rows) or "none sealed yet"
    tagged = ", ".join(f"{t} -> {v}" for t, v in sorted(known_tags.items()))
    raise NotFound(f"unknown version {name}@{version} (versions of {name}: {known}"
                   + (f"; tags: {tagged}" if tagged else "") + ")",
                   f"seal it first with `fabricctl dataset seal {name} {version}`, or check the version"
                   + _replicate_hint(ctx, f"{name}@{version}"))


def tags(ctx, name: str) -> dict[str, str]:
    """{tag: version} of dataset NAME (its staging volume's ``fabric:tag:*`` properties)."""
    vol = volume(ctx.config, name)
    return history.tags_of(zfs.get_props(ctx.local, vol).get(vol, {}))


def history_rows(ctx, name: str) -> list[dict]:
    """The sealed versions of NAME, oldest first, with ZFS's ``written`` (what each wrote since the one before)."""
    rows = versions.list_snapshots(ctx.local, ctx.config.dataset_root,
                                   extra_columns=(*history.PROVENANCE_PROPS, "written"))
    return [r for r in rows if r["name_short"] == name]


@contextlib.contextmanager
def mounted_readonly(ctx, export):
    """A sealed version's file system mounted read-only in a directory of its own under /run, for the ``with``
    block: through a read-only loop device, since LIO opens an exported device exclusively and a loop device
    does not. Unmounted and the loop device detached however the block ends. XFS gets ``nouuid``: every version
    of a dataset, and its staging file system, carry the same XFS UUID, which XFS otherwise mounts once."""
    import tempfile  # noqa: PLC0415 - lazy: a command's start (docs/testing.md)

    run = ctx.local
    where = tempfile.mkdtemp(prefix=f"fabricctl-{export.name}-{export.version}-", dir="/run")
    try:
        device = readable_device(ctx, export)
        loop = run.run(["losetup", "--find", "--show", "--read-only", device]).stdout.strip()
        try:
            options = mounts.options(export.fstype, readonly=True) + (",nouuid" if export.fstype == "xfs" else "")
            run.run(["mount", "-t", export.fstype, "-o", options, loop, where])
            try:
                yield where
            finally:
                run.run(["umount", where])
        finally:
            run.run(["losetup", "-d", loop], check=False)
    finally:
        os.rmdir(where)


def export_of(ctx, row: dict, vol: dict | None = None):
    """The export (fabric_core.services.publish.Export) of a sealed version's row."""
    fstype = row.get("fabric:fs") or (vol or {}).get("fabric:fs") or "ext4"
    return ctx.publisher.settings.dataset(row["name_short"], row["snapshot"], fstype)


def readable_device(ctx, export) -> str:
    """The block device of a sealed version's snapshot (/dev/zvol/DATASET_ROOT/NAME@VERSION), once udev has made
    it; UserError when there is none (its volume's snapdev is hidden: fabricctl dataset create sets it visible,
    and a replica receives it with the volume's properties). Reading it changes nothing; LIO's exclusive hold
    of a published version's device does not keep a reader out (a mount, which opens it exclusively, goes
    through a loop device)."""
    ctx.local.run(["udevadm", "settle"], check=False)
    if not os.path.exists(export.device):
        raise UserError(f"{export.device} does not exist", f"run `zfs set snapdev=visible "
                        f"{export.snapshot.split('@')[0]}` (fabricctl dataset create sets it)")
    return export.device


def mount_staging(ctx, name: str, fstype: str) -> str:
    """Mount the staging volume read-write at STAGING_ROOT/NAME (idempotent); return the path."""
    cfg, run = ctx.config, ctx.local
    where = staging_dir(cfg, name)
    if mounts.current_mount(run, where):
        return where
    zvols.settle(ctx, volume(cfg, name))
    run.run(["mkdir", "-p", where], mutating=True)
    run.run(["mount", "-t", fstype, "-o", mounts.options(fstype, readonly=False), "/dev/zvol/" + volume(cfg, name),
             where], mutating=True)
    return where


def unmount_staging(ctx, name: str) -> bool:
    where = staging_dir(ctx.config, name)
    if not mounts.current_mount(ctx.local, where):
        return False
    ctx.local.run(["sync", "-f", where], mutating=True)
    ctx.local.run(["umount", where], mutating=True)
    return True


def _replicate_hint(ctx, ref: str) -> str:
    """How a version another storage node holds gets here (when this node has peers)."""
    cfg = ctx.config
    if not cfg.storage_nodes:
        return ""
    return (f"; if another storage node ({', '.join(sorted(cfg.storage_nodes))}) has it, replicate it here from "
            f"there: `fabricctl replicate {ref} --to {cfg.node or 'THIS_NODE'}`")
