"""Create a job's writable checkpoint volume, exported read-write to exactly one writer host.

The volume is CHECKPOINT_ROOT/JOB (a zvol with a file system, fully reserved). The LIO target
has one ACL, the writer's: two initiators writing one block device would corrupt it, so a second
writer is refused (the same rule as the Ansible role's). The writer logs in and mounts it
read-write at CHECKPOINT_MOUNT_ROOT/JOB through a systemd unit (its node agent does, `fabric-node
attach-writable`, where this node's key runs only the agent). Running it again with the same
writer changes nothing.

Examples:
  fabricctl checkpoint volume create llama-7b --size 200G --writer gpu1
"""

from __future__ import annotations

from fabric_core.base.errors import UnsafeOperation, UserError
from fabric_core.base.names import validate_fabric_name
from fabric_core.base.rules import FILESYSTEMS, KIND_CHECKPOINT_VOLUME, KIND_PROP
from fabric_core.storage import zfs
from fabric_core.storage.versions import created_by, now_iso

from .. import checkpoints, zvols

PATH = ("checkpoint", "volume", "create")
HELP = "create a job's checkpoint volume for its one writer host"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("checkpoint", validate_fabric_name(args.job, "job"), False)]  # the volume made


def configure(p) -> None:
    p.add_argument("job", metavar="JOB", help="job name: a-z, 0-9, '-' (at most 30)")
    p.add_argument("--size", required=True, help="volume size, e.g. 500G")
    p.add_argument("--writer", required=True, metavar="HOST", help="the one host that writes checkpoints")
    p.add_argument("--fs", choices=FILESYSTEMS, default=None, help="file system (default: the config's defaults.fs)")


def run(ctx, args) -> int:
    job = validate_fabric_name(args.job, "job")
    size = zfs.parse_size(args.size)
    cfg = ctx.config
    writer = cfg.host(args.writer, "--writer")
    fstype = args.fs or cfg.defaults.fs
    volume = checkpoints.volume(cfg, job)
    existing = checkpoints.all_volumes(ctx).get(job)
    if existing is not None:
        if existing.get("fabric:writer") != writer.name:
            raise UnsafeOperation(f"job {job!r} already has a checkpoint volume written by "
                                  f"{existing.get('fabric:writer')!r}; a second writer ({writer.name}) is refused",
                                  "a volume has exactly one writer: restore a checkpoint read-only to other hosts "
                                  "(`fabricctl checkpoint restore`) or use another job name")
        fstype = existing.get("fabric:fs") or fstype
    else:
        avail = zfs.get_props(ctx.local, cfg.checkpoint_root, ["available"]).get(cfg.checkpoint_root, {})
        if "available" not in avail:
            raise UserError(f"the checkpoint root {cfg.checkpoint_root} does not exist",
                            "run playbooks/site.yml (it creates the dataset tree) or fix checkpoint_root")
        if size * 1.02 > int(avail["available"][0]):
            raise UserError(f"the pool is too full for a {args.size} checkpoint volume ({cfg.checkpoint_root} has "
                            f"{int(avail['available'][0]) / 2**30:.1f} GiB available)",
                            "give a smaller --size, free space (`fabricctl rotate`), or grow the pool")
        props = {"volblocksize": "64K", "snapdev": "visible", KIND_PROP: KIND_CHECKPOINT_VOLUME, "fabric:fs": fstype,
                 "fabric:writer": writer.name, "fabric:created-by": created_by(), "fabric:created-at": now_iso()}
        zfs.ensure_dataset(ctx.local, name=volume, properties=props, volume_size=size)
        zvols.settle(ctx, volume)
    blank = ctx.dry_run and existing is None or ctx.local.run(
        ["blkid", "-p", "-o", "value", "-s", "TYPE", "/dev/zvol/" + volume], check=False).rc == 2
    if blank:  # new, or an earlier create was interrupted before mkfs (blkid exit 2: no signature)
        mkfs = (["mkfs.ext4", "-q", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0"]
                if fstype == "ext4" else ["mkfs.xfs", "-q", "-K"])
        ctx.local.run([*mkfs, "/dev/zvol/" + volume], mutating=True)
    pub = ctx.publisher
    export = pub.settings.writable(job, fstype)
    storage = pub.export(export, [writer], hold=False)
    fan = ctx.fan([writer], lambda host, step: pub.attach(export, host, step), f"checkpoint volume {job}",
                  quiet=args.json)
    out = {"job": job, "volume": volume, "writer": writer.name, "mountpoint": export.mountpoint,
           "target": pub.settings.target_iqn(export), "storage": storage, "hosts": fan.to_dict(),
           "dry_run": ctx.dry_run, "planned": ctx.planned()}
    ready = (f"{ctx.tense('would create', 'ready')}: {volume} ({fstype}) mounted read-write at {export.mountpoint} "
             f"on {writer.name}")
    ctx.report(out, *([ready] if fan.all_ok else []))  # a failed writer is reported by raise_for_partial
    fan.raise_for_partial(f"checkpoint volume {job}")
    return 0
