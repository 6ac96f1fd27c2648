"""Roll a job's writable checkpoint volume back to an earlier checkpoint.

Rolling back destroys every newer checkpoint of the job, so it is refused unless each of them is
named with --discard-newer (a typo cannot lose a checkpoint), and refused while one of them is
held or restored somewhere. The writer unmounts and logs out first (refused while a process uses
the volume, unless --force), the newer snapshots are destroyed in one libzfs_core call, the
volume is rolled back, and the writer logs in and mounts it again.

Examples:
  fabricctl checkpoint rollback llama-7b --step 11000 --discard-newer 12000,13000
"""

from __future__ import annotations

from fabric_core.base.errors import Busy, NotFound, UnsafeOperation, UserError
from fabric_core.base.names import validate_fabric_name
from fabric_core.storage import lzc, versions

from .. import checkpoints

PATH = ("checkpoint", "rollback")
HELP = "roll the writable volume back to a checkpoint (newer ones must be named)"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("checkpoint", validate_fabric_name(args.job, "job"), False)]  # the volume rolled back


def configure(p) -> None:
    p.add_argument("job", metavar="JOB", help="the job")
    p.add_argument("--step", required=True, type=int, help="the checkpoint to go back to")
    p.add_argument("--discard-newer", default="", metavar="STEP,...",
                   help="every newer checkpoint's step: they are destroyed")
    p.add_argument("--force", action="store_true", help="unmount on the writer even while in use")


def parse_steps(text: str) -> set[int]:
    try:
        return {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        raise UserError(f"--discard-newer {text!r} must be a comma-separated list of steps",
                        "for example --discard-newer 12000,13000") from None


def run(ctx, args) -> int:
    job = validate_fabric_name(args.job, "job")
    cfg = ctx.config
    vol = checkpoints.require(ctx, job)
    rows = checkpoints.snapshots(ctx, job)  # oldest first (createtxg)
    index = next((i for i, r in enumerate(rows) if r["step"] == args.step), None)
    if index is None:
        raise NotFound(f"job {job} has no checkpoint at step {args.step}", "see `fabricctl checkpoint list JOB`")
    newer = rows[index + 1:]
    named = parse_steps(args.discard_newer)
    newer_steps = {r["step"] for r in newer}
    if newer_steps - named:
        raise UnsafeOperation(
            f"rolling {job} back to step {args.step} would destroy the newer checkpoints "
            f"{', '.join(str(s) for s in sorted(newer_steps))}; not named: "
            f"{', '.join(str(s) for s in sorted(newer_steps - named))}",
            f"name every one of them: --discard-newer {','.join(str(s) for s in sorted(newer_steps))}")
    if named - newer_steps:
        raise UserError(f"--discard-newer names steps that are not newer than {args.step}: "
                        f"{', '.join(str(s) for s in sorted(named - newer_steps))}", "name only newer checkpoints")
    later = [r["name"] for r in versions.list_all_snapshots(ctx.local, vol["name"])]
    later = later[later.index(rows[index]["name"]) + 1:]
    foreign = [n for n in later if n not in {r["name"] for r in newer}]
    if foreign:
        raise UnsafeOperation(f"newer snapshots not created by fabricctl exist: {', '.join(foreign)}",
                              "fabricctl never destroys what it did not create: destroy or move them yourself, "
                              "then roll back")
    held = [f"step {r['step']}" for r in newer if r.get("userrefs")]
    if held:
        raise Busy(f"newer checkpoints are held or restored on hosts: {', '.join(held)}",
                   "remove those restores first (`fabricctl checkpoint restore JOB --step N --to HOSTS --remove`)")
    writer = cfg.host(vol.get("fabric:writer") or "")
    pub = ctx.publisher
    export = pub.settings.writable(job, vol.get("fabric:fs") or "ext4")
    snap = rows[index]["name"]
    out = {"job": job, "step": args.step, "snapshot": snap, "discarded": [r["name"] for r in newer],
           "writer": writer.name, "dry_run": ctx.dry_run}
    if ctx.dry_run:
        ctx.report(out, f"would unmount on {writer.name}, destroy {', '.join(out['discarded']) or 'nothing'}, "
                   f"roll back to {snap}, mount again")
        return 0
    pub.detach(export, writer, force=args.force)
    try:
        if newer:
            lzc.destroy_snapshots([r["name"] for r in newer], runner=ctx.local)
        lzc.rollback_to(vol["name"], snap, runner=ctx.local)
    finally:
        pub.attach(export, writer)
    ctx.report(out, f"{job} rolled back to step {args.step} ({snap}); discarded {len(newer)} newer checkpoint(s); "
               f"mounted again on {writer.name}")
    return 0
