"""Replicate a job's checkpoints to other storage nodes, with ZFS send/receive (as `fabricctl replicate`).

Every checkpoint snapshot of the job (or one, with --step) goes to each named node, incrementally from
the newest one both hold; the job's checkpoint volume there is read-only (a replica: the job's one
writer writes here), so a restore can be published from either node. A cut-short replication resumes
when the same command runs again. --force and --limit as for `fabricctl replicate`.

Examples:
  fabricctl checkpoint replicate llama-7b --to storage2
  fabricctl checkpoint replicate llama-7b --step 1200 --to storage2 --dry-run
"""

from __future__ import annotations

from fabric_core.base.errors import NotFound, UserError
from fabric_core.base.names import snapshot_name, validate_fabric_name

from .. import checkpoints, replication
from .replicate import configure_common, limit_of, nodes_of, report

PATH = ("checkpoint", "replicate")
HELP = "copy a job's checkpoints to other storage nodes (incremental, resumable)"
MUTATING = True
NODE_LOCK = False  # hours of sending: the job's lock, shared (its checkpoint snapshots go on meanwhile)


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("checkpoint", validate_fabric_name(args.job, "job"), True)]


def configure(p) -> None:
    p.add_argument("job", metavar="JOB", help="the job")
    p.add_argument("--to", required=True, metavar="NODE,...", help="storage nodes (the inventory's storage_nodes)")
    p.add_argument("--step", type=int, metavar="N", help="only the checkpoint of this step (default: every one)")
    configure_common(p)


def run(ctx, args) -> int:
    job = validate_fabric_name(args.job, "job")
    checkpoints.require(ctx, job)
    rows = [r for r in checkpoints.snapshots(ctx, job) if r["step"] is not None]
    if not rows:
        raise UserError(f"job {job} has no checkpoint yet", f"take one: `fabricctl checkpoint snapshot {job} --step N`")
    if args.step is not None:
        wanted = [snapshot_name(args.step)]
        if wanted[0] not in {r["snapshot"] for r in rows}:
            raise NotFound(f"job {job} has no checkpoint of step {args.step} (steps: "
                           f"{', '.join(str(r['step']) for r in rows)})", "name one of those steps")
    else:
        wanted = [r["snapshot"] for r in rows]
    results = replication.replicate_to(ctx, checkpoints.volume(ctx.config, job), wanted, nodes_of(args.to),
                                       force=args.force, limit=limit_of(args), label=job)
    return report(ctx, job if args.step is None else f"{job}@{snapshot_name(args.step)}", results)
