"""Restore a checkpoint to many hosts at once: the snapshot exported read-only and mounted.

The same machinery as dataset publishing: the snapshot JOB@step-N is held while exported,
an LIO target exports it read-only with one ACL per host, and every host logs in and mounts it
read-only at CHECKPOINT_MOUNT_ROOT/JOB/restore/N, in parallel. Re-running finishes an
interrupted restore; `--remove` takes it off the hosts again (and releases the hold).

Examples:
  fabricctl checkpoint restore llama-7b --step 12000 --to gpu_nodes
  fabricctl checkpoint restore llama-7b --step 12000 --to gpu_nodes --remove
"""

from __future__ import annotations

from fabric_core import lio, publish
from fabric_core.errors import NotFound
from fabric_core.names import validate_fabric_name

from .. import common, publishing
from ..main import command_main

PATH = ("checkpoint", "restore")
HELP = "expose a checkpoint read-only on many hosts (or --remove it)"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def configure(p) -> None:
    p.add_argument("job", metavar="JOB", help="the job")
    p.add_argument("--step", required=True, type=int, help="the checkpoint's step")
    p.add_argument("--to", required=True, metavar="GROUP|HOST,...", help="host groups and/or hosts")
    p.add_argument("--remove", action="store_true", help="unmount and un-export it from these hosts instead")
    p.add_argument("--force", action="store_true", help="with --remove: unmount even while in use")
    p.add_argument("--dry-run", action="store_true", help="show what would change; change nothing")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(ctx, args) -> int:
    job = validate_fabric_name(args.job, "job")
    cfg = ctx.config
    hosts = cfg.resolve_targets(args.to)
    vol = common.require_job(ctx, job)
    rows = {r["step"]: r for r in common.checkpoints(ctx, job)}
    if args.step not in rows:
        known = ", ".join(str(s) for s in sorted(x for x in rows if x is not None)) or "none"
        raise NotFound(f"job {job} has no checkpoint at step {args.step} (steps: {known})",
                       "pick one of those steps (`fabricctl checkpoint list JOB`)")
    export = publish.checkpoint_restore_export(cfg.checkpoint_root, cfg.checkpoint_mount_root, job, args.step,
                                               vol.get("fabric:fs") or "ext4")
    target = export.target_iqn(cfg.iqn_base)
    if args.remove:
        return remove(ctx, args, export, hosts, target)
    storage = publishing.storage_side(ctx, export, hosts)
    fan = common.fan(ctx, hosts, lambda host, step: publishing.host_side(ctx, export, host, step),
                     f"restore {job} step {args.step}", quiet=args.json)
    out = {"job": job, "step": args.step, "target": target, "mountpoint": export.mountpoint, "storage": storage,
           "hosts": common.outcome_dict(fan), "dry_run": ctx.dry_run}
    if args.json:
        ctx.emit(out)
    else:
        verb = "would restore" if ctx.dry_run else "restored"
        print(f"{verb} {job} step {args.step} read-only at {export.mountpoint} on "
              f"{', '.join(common.ok_names(fan)) or 'no host'}")
    fan.raise_for_partial(f"restore {job} step {args.step}")
    return 0


def remove(ctx, args, export, hosts, target) -> int:
    cfg = ctx.config
    fan = common.fan(ctx, hosts, lambda host, step: publish.detach(
        ctx.ssh(host), export, target_iqn=target, portal=cfg.portal.address, force=args.force, step=step),
        f"remove restore {export.name} step {args.step}", quiet=args.json)
    gone = {h.initiator for h in hosts if h.name in common.ok_names(fan)}
    live = lio.read_live()
    remaining = [i for i in publish.acl_initiators(live, target) if i not in gone]
    released = publishing.storage_withdraw(ctx, export, remaining, force=args.force, live=live,
                                           detached=frozenset(gone))["released"]
    out = {"job": export.name, "step": args.step, "hosts": common.outcome_dict(fan), "still_restored_to": remaining,
           "released": released, "dry_run": ctx.dry_run}
    if args.json:
        ctx.emit(out)
    else:
        print(f"removed {export.name} step {args.step} from {', '.join(common.ok_names(fan)) or 'no host'}"
              + ("; hold released" if released else ""))
    fan.raise_for_partial(f"remove restore {export.name} step {args.step}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_main(PATH, argv)
