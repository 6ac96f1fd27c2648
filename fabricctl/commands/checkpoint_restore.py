"""Restore a checkpoint to many hosts at once: the snapshot exported read-only and mounted.

The same machinery as dataset publishing: the snapshot JOB@step-N is held while exported,
an LIO target exports it read-only with one ACL per host, and every host logs in and mounts it
read-only at CHECKPOINT_MOUNT_ROOT/JOB/restore/N, in parallel (each host's node agent does,
`fabric-node attach-restore`, where this node's key runs only the agent). Re-running finishes an
interrupted restore; `--remove` takes it off the hosts again: each host that let go loses its
ACL on this node in the same command (it cannot log in again; an unreachable one keeps it unless
--force), and with no host left the target goes and the hold is released.

Examples:
  fabricctl checkpoint restore llama-7b --step 12000 --to gpu_nodes
  fabricctl checkpoint restore llama-7b --step 12000 --to gpu_nodes --remove
"""

from __future__ import annotations

from fabric_core.base.errors import NotFound
from fabric_core.base.names import validate_fabric_name
from fabric_core.services import publish

from .. import checkpoints

PATH = ("checkpoint", "restore")
HELP = "expose a checkpoint read-only on many hosts (or --remove it)"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("checkpoint", validate_fabric_name(args.job, "job"), True)]  # the volume read


def configure(p) -> None:
    p.add_argument("job", metavar="JOB", help="the job")
    p.add_argument("--step", required=True, type=int, help="the checkpoint's step")
    p.add_argument("--to", required=True, metavar="GROUP|HOST,...", help="host groups and/or hosts")
    p.add_argument("--remove", action="store_true", help="unmount and un-export it from these hosts instead")
    p.add_argument("--force", action="store_true", help="with --remove: unmount even while in use")


def run(ctx, args) -> int:
    job = validate_fabric_name(args.job, "job")
    hosts = ctx.config.resolve_targets(args.to)
    vol = checkpoints.require(ctx, job)
    rows = {r["step"]: r for r in checkpoints.snapshots(ctx, job)}
    if args.step not in rows:
        known = ", ".join(str(s) for s in sorted(x for x in rows if x is not None)) or "none"
        raise NotFound(f"job {job} has no checkpoint at step {args.step} (steps: {known})",
                       "pick one of those steps (`fabricctl checkpoint list JOB`)")
    pub = ctx.publisher
    export = pub.settings.restore(job, args.step, vol.get("fabric:fs") or "ext4")
    if args.remove:
        return remove(ctx, args, export, hosts)
    storage = pub.export(export, hosts)
    fan = ctx.fan(hosts, lambda host, step: pub.attach(export, host, step), f"restore {job} step {args.step}",
                  quiet=args.json)
    out = {"job": job, "step": args.step, "target": pub.settings.target_iqn(export), "mountpoint": export.mountpoint,
           "storage": storage, "hosts": fan.to_dict(), "dry_run": ctx.dry_run}
    ctx.report(out, f"{ctx.tense('would restore', 'restored')} {job} step {args.step} read-only at "
               f"{export.mountpoint} on {', '.join(fan.ok_names) or 'no host'}")
    fan.raise_for_partial(f"restore {job} step {args.step}")
    return 0


def remove(ctx, args, export, hosts) -> int:
    pub = ctx.publisher
    fan = ctx.fan(hosts, lambda host, step: pub.detach(export, host, step, force=args.force),
                  f"remove restore {export.name} step {args.step}", quiet=args.json)
    gone = frozenset(h.initiator for h in hosts if h.name in fan.ok_names)
    index = pub.index()
    remaining = publish.staying(index.initiators(export), hosts, fan.ok_names, force=args.force)
    storage = pub.withdraw(export, remaining, force=args.force, index=index, detached=gone)
    out = {"job": export.name, "step": args.step, "hosts": fan.to_dict(),
           "still_restored_to": [index.name_of(i) for i in remaining if i not in pub.unknown(export, index)],
           "revoked": storage["revoked"], "lio_actions": storage["lio_actions"], "released": storage["released"],
           "dry_run": ctx.dry_run}
    ctx.report(out, f"{ctx.tense('would remove', 'removed')} {export.name} step {args.step} from "
               f"{', '.join(fan.ok_names) or 'no host'}"
               + (f"; revoked {', '.join(storage['revoked'])}" if storage["revoked"] else "")
               + ("; hold released" if storage["released"] else ""))
    fan.raise_for_partial(f"remove restore {export.name} step {args.step}")
    return 0
