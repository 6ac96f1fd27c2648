"""List a job's checkpoints: step, time, metrics, tags, holds and where each is restored.

Examples:
  fabricctl checkpoint list llama-7b
  fabricctl checkpoint list llama-7b --json
"""

from __future__ import annotations

from fabric_core.base.names import validate_fabric_name

from .. import checkpoints
from ..output import human_bytes, print_rows

PATH = ("checkpoint", "list")
HELP = "list a job's checkpoint snapshots (--json for scripts)"
MUTATING = False  # read-only: no node lock, no journal record


def configure(p) -> None:
    p.add_argument("job", metavar="JOB", help="the job")


def collect(ctx, job: str) -> dict:
    vol = checkpoints.require(ctx, job)
    pub = ctx.publisher
    index = pub.acl_index("ck", job)  # who has each restore: ACL directory names, not rtslib's full read
    rows = []
    for r in checkpoints.snapshots(ctx, job):
        if r["step"] is None:
            continue
        export = pub.settings.restore(job, r["step"], r.get("fabric:fs") or vol.get("fabric:fs") or "ext4")
        rows.append({"step": r["step"], "snapshot": r["name"], "created_at": r.get("fabric:created-at"),
                     "metrics": r["metrics"], "tags": r["tags"], "holds": r.get("userrefs") or 0,
                     "restored_to": index.published_to(export), "used": r.get("used")})
    rows.sort(key=lambda x: x["step"])
    return {"job": job, "volume": vol["name"], "writer": vol.get("fabric:writer"), "checkpoints": rows}


def run(ctx, args) -> int:
    data = collect(ctx, validate_fabric_name(args.job, "job"))
    if args.json:
        ctx.emit(data)
        return 0
    if not data["checkpoints"]:
        print(f"{data['job']}: no checkpoints yet (`fabricctl checkpoint snapshot {data['job']} --step N`)")
        return 0
    rows = []
    for c in data["checkpoints"]:
        metrics = " ".join(f"{k}={v:g}" for k, v in sorted(c["metrics"].items()))
        rows.append([str(c["step"]), c["created_at"] or "", metrics, ",".join(c["tags"]), human_bytes(c["used"] or 0),
                     ",".join(c["restored_to"]) or "-"])
    print_rows(rows, ["STEP", "CREATED", "METRICS", "TAGS", "USED", "RESTORED TO"])
    return 0
