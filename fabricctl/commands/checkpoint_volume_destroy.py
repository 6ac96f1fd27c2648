"""Retire a finished job: its writer unmounts and logs out, the read-write LIO target goes, and the
checkpoint volume is destroyed with every checkpoint of the job.

Refused while any of the job's checkpoints is restored on a host or held (remove the restores
first: `fabricctl checkpoint restore JOB --step N --to HOSTS --remove`), while the volume has
snapshots fabricctl did not create, and while a process on the writer uses the mount (unless
--force). Destroying is permanent, so it needs --yes (or --dry-run to see what would go).

Examples:
  fabricctl checkpoint volume destroy llama-7b --dry-run
  fabricctl checkpoint volume destroy llama-7b --yes
"""

from __future__ import annotations

from fabric_core.base.errors import Busy, UnsafeOperation, UserError
from fabric_core.base.names import validate_fabric_name
from fabric_core.storage import versions

from .. import checkpoints, zvols

PATH = ("checkpoint", "volume", "destroy")
HELP = "retire a job: unmount on its writer, remove its export, destroy its volume and checkpoints"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("checkpoint", validate_fabric_name(args.job, "job"), False)]  # the volume destroyed


def configure(p) -> None:
    p.add_argument("job", metavar="JOB", help="the job whose volume goes")
    p.add_argument("--yes", action="store_true", help="confirm: this is permanent")
    p.add_argument("--force", action="store_true", help="unmount on the writer even while a process uses it")


def run(ctx, args) -> int:
    job = validate_fabric_name(args.job, "job")
    cfg = ctx.config
    vol = checkpoints.require(ctx, job)
    volume = checkpoints.volume(cfg, job)
    writer = cfg.host(vol.get("fabric:writer") or "")
    snapshots = versions.list_all_snapshots(ctx.local, volume)
    foreign = [r["name"] for r in snapshots if not versions.owned(r)]
    if foreign:
        raise UnsafeOperation(f"{volume} has snapshots fabricctl did not create: {', '.join(foreign)}",
                              "destroy or keep them yourself; fabricctl only destroys what it created")
    pub = ctx.publisher
    restored = pub.index().restores(job)
    rw = pub.settings.writable(job, vol.get("fabric:fs") or "ext4")
    held = [r["name"] for r in snapshots if r.get("userrefs")]
    if restored or held:
        steps = ", ".join(s[1:] if s.startswith("s") else s for s in restored)
        raise Busy(f"refused: job {job} has checkpoints in use (restored: step {steps or 'none'}; "
                   f"held: {', '.join(held) or 'none'})",
                   f"remove the restores first (`fabricctl checkpoint restore {job} --step N --to HOSTS --remove`)")
    what = [volume] + [r["name"] for r in snapshots]
    if not args.yes and not ctx.dry_run:
        raise UserError(f"destroying {volume} and its {len(snapshots)} checkpoint(s) is permanent and needs --yes",
                        f"run `fabricctl checkpoint volume destroy {job} --yes` (or --dry-run to look first)")
    fan = ctx.fan([writer], lambda host, step: pub.detach(rw, host, step, force=args.force), f"retire {job}",
                  quiet=args.json)
    fan.raise_for_partial(f"retire {job} (the volume is kept until its writer has let go of it)")
    # LIO is read again: the writer's session, seen above, ended with its logout
    storage = pub.withdraw(rw, [], force=args.force, detached=frozenset({writer.initiator}))
    zvols.destroy(ctx, volume, [r["name"] for r in snapshots])  # exactly the snapshots checked above
    out = {"job": job, "writer": writer.name, "hosts": fan.to_dict(),
           "lio_actions": storage["lio_actions"], "destroyed" if not ctx.dry_run else "would_destroy": what,
           "dry_run": ctx.dry_run, "planned": ctx.planned()}
    ctx.report(out, f"{ctx.tense('would destroy', 'destroyed')} {volume} and {len(snapshots)} checkpoint(s); "
               f"unmounted from {writer.name}")
    return 0
