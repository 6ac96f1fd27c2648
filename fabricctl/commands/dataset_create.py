"""Create a dataset's writable staging volume: a zvol with a file system, mounted on this node.

The volume is DATASET_ROOT/NAME (fully reserved, so the pool cannot run out under it), with
snapshot devices visible (each sealed version becomes a read-only block device). It is mounted
read-write at STAGING_ROOT/NAME: ingest data with `fabricctl dataset ingest` or any copy tool,
then seal a version.

Examples:
  fabricctl dataset create imagenet --size 200G
  fabricctl dataset create imagenet --size 200G --fs xfs --dry-run
  fabricctl dataset create shards --size 2T --volblocksize 64K
"""

from __future__ import annotations

from fabric_core.base.errors import AlreadyExists, UserError
from fabric_core.base.names import validate_fabric_name
from fabric_core.base.rules import (
    FILESYSTEMS,
    KIND_DATASET,
    KIND_PROP,
    VOLBLOCKSIZE_DEFAULT,
    VOLBLOCKSIZES,
    validate_volblocksize,
)
from fabric_core.storage import blockfs, zfs
from fabric_core.storage.versions import created_by, now_iso

from .. import datasets, zvols

PATH = ("dataset", "create")
HELP = "create a writable staging volume for a dataset"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("dataset", validate_fabric_name(args.name), False)]  # the volume made: exclusive


# room for ZFS metadata beyond volsize when checking that a fully reserved volume fits
RESERVE_SLACK = 1.02


def configure(p) -> None:
    p.add_argument("name", metavar="NAME", help="dataset name: a-z, 0-9, '-' (at most 30)")
    p.add_argument("--size", required=True, help="volume size, e.g. 500G or 2T")
    p.add_argument("--fs", choices=FILESYSTEMS, default=None, help="file system (default: the config's defaults.fs)")
    p.add_argument("--volblocksize", default=VOLBLOCKSIZE_DEFAULT, metavar="SIZE",
                   help=f"the volume's block size, fixed at creation: {', '.join(VOLBLOCKSIZES)} (default "
                        f"{VOLBLOCKSIZE_DEFAULT}; docs/benchmarks.md has what larger blocks did to reads)")


def run(ctx, args) -> int:
    name = validate_fabric_name(args.name)
    blocksize = validate_volblocksize(args.volblocksize)
    size = zfs.parse_size(args.size)
    if size < 64 * 2**20:
        raise UserError(f"--size {args.size} is too small", "give at least 64M")
    cfg = ctx.config
    fstype = args.fs or cfg.defaults.fs
    volume = datasets.volume(cfg, name)
    if name in datasets.all_volumes(ctx) or zfs.get_props(ctx.local, volume, ["type"]):
        raise AlreadyExists(f"dataset {name!r} exists already ({volume})",
                            f"ingest into it (`fabricctl dataset ingest {name} ...`) or choose another name")
    avail = zfs.get_props(ctx.local, cfg.dataset_root, ["available"]).get(cfg.dataset_root, {}).get("available")
    if avail is None:
        raise UserError(f"the dataset root {cfg.dataset_root} does not exist",
                        "run playbooks/site.yml (it creates the dataset tree) or fix dataset_root in the config")
    free = int(avail[0])
    if size * RESERVE_SLACK > free:
        raise UserError(f"the pool is too full for a {args.size} staging volume: {cfg.dataset_root} has "
                        f"{free / 2**30:.1f} GiB available, the volume reserves {size * RESERVE_SLACK / 2**30:.1f} GiB",
                        "give a smaller --size, free space (unpublish and destroy old versions, `fabricctl rotate`), "
                        "or grow the pool")
    props = {"volblocksize": blocksize, "snapdev": "visible", KIND_PROP: KIND_DATASET, "fabric:fs": fstype,
             "fabric:created-by": created_by(), "fabric:created-at": now_iso()}
    result = zfs.ensure_dataset(ctx.local, name=volume, properties=props, volume_size=size)
    zvols.settle(ctx, volume)
    ctx.local.run(blockfs.mkfs_argv(fstype, "/dev/zvol/" + volume), mutating=True)
    where = datasets.mount_staging(ctx, name, fstype)
    out = {"dataset": name, "volume": volume, "size": size, "fs": fstype, "volblocksize": blocksize, "staging": where,
           "dry_run": ctx.dry_run, "commands": result["commands"] + ctx.planned()}
    if args.json:
        ctx.emit(out)
    elif ctx.dry_run:
        print(f"would create {volume} ({args.size}, {fstype}) and mount it at {where}:")
        for line in ctx.planned():
            print("  " + line)
    else:
        print(f"created {name}: {volume} ({args.size}, {fstype}), mounted read-write at {where}")
        print(f"next: copy data in (`fabricctl dataset ingest {name} SOURCE...`), then "
              f"`fabricctl dataset seal {name} VERSION`")
    return 0
