"""Apply the retention policies: destroy the snapshots no rule keeps, in one call per dataset.

Policies are named templates in the config (`retention.policies`), assigned to datasets and
jobs by path (`retention.assign`: "datasets/NAME", "checkpoints/JOB", globs allowed). Rules:
keep_last N; keep_every K (steps divisible by K); hourly/daily/weekly/monthly/yearly N; keep_best
by a metric (min or max); pin_tags. The period counts, by the policy's `calendar`:
newest-per-period (default) keeps the newest snapshot of each of the N newest calendar periods
that have one, the current one counted (restic forget's rule, not sanoid's); sanoid keeps what
sanoid 2.x keeps with the same counts, for sites migrating from it: of the snapshots named
autosnap_..._TYPE, those younger than N periods and at least the N newest of each type (other
names are left to keep_last/keep_every/keep_best, or kept). A snapshot is never destroyed when
it is held, published or restored somewhere, pinned, tagged, or not created by fabricctl (no
fabric:managed=true; in sanoid mode sanoid's autosnap_ snapshots are pruned as sanoid would);
a dataset or job without a policy
keeps everything. The plan is computed by a pure function of the snapshot list and the clock;
--explain says why each snapshot is kept or destroyed. A run (not --dry-run) holds the node lock,
as every change does, so it never overlaps another rotation or any other change on this node; the
last success time and counts go to a Prometheus textfile for node_exporter.

Examples:
  fabricctl rotate --dry-run --explain
  fabricctl rotate --json
"""

from __future__ import annotations

import datetime
import time

from fabric_core.services import history, retention
from fabric_core.services import metrics as fabric_metrics
from fabric_core.storage import lzc, versions

from .. import checkpoints, datasets

PATH = ("rotate",)
HELP = "destroy snapshots that no retention rule keeps (--dry-run --explain first)"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def configure(p) -> None:
    p.add_argument("--explain", action="store_true", help="one line per snapshot: KEEP/DESTROY and why")


def collect(ctx, now: datetime.datetime) -> tuple[retention.Plan, list[dict]]:
    cfg = ctx.config
    rules = retention.parse_retention(cfg.retention, cfg.metrics)
    exported = ctx.publisher.exported_snapshots()  # configfs names and device paths, not rtslib's full read
    plans, scopes = [], []
    metric_columns = checkpoints.metric_columns(cfg)
    for prefix, vols in (("datasets", datasets.all_volumes(ctx)), ("checkpoints", checkpoints.all_volumes(ctx))):
        for name, vol in sorted(vols.items()):
            path = f"{prefix}/{name}"
            policy = rules.policy_for(path)
            snaps = []
            # a dataset version a tag names is never destroyed (fabric_core.services.retention: protected, with the tag)
            named = history.tags_by_version(datasets.tags(ctx, name)) if prefix == "datasets" else {}
            # one listing per volume, the metrics included (they are plain fabric:metric.* columns)
            for row in versions.list_all_snapshots(ctx.local, vol["name"], extra_columns=metric_columns):
                props = versions.as_property_strings(row)
                if not versions.owned(row):  # e.g. taken by hand: it inherits fabric:managed=true
                    props["fabric:managed"] = "false"
                if row["name"] in exported:
                    props["fabric:published"] = "lio"
                snaps.append(retention.snapshot_from_properties(
                    row["name"], props, named_by=named.get(row["name"].partition("@")[2], ())))
            plans.append(retention.plan(snaps, policy, now))
            scopes.append({"path": path, "policy": policy.name if policy else None, "snapshots": len(snaps)})
    return retention.combine(plans), scopes


def write_metrics(path: str | None, *, kept: int, destroyed: int, seconds: float) -> None:
    """rotation.metrics_file, as `fabricctl metrics` writes its own: rendered by prometheus_client, replaced through
    the core's atomic writer (fabric_core.services.metrics.write_textfile: no predictable temporary name, no link
    followed)."""
    if not path:
        return
    fabric_metrics.write_textfile(path, fabric_metrics.render(fabric_metrics.rotation_registry(
        now=time.time(), kept=kept, destroyed=destroyed, seconds=seconds)))


def run(ctx, args) -> int:
    cfg = ctx.config
    started = time.monotonic()
    retention.parse_retention(cfg.retention, cfg.metrics)  # a bad policy is refused before anything else
    # no lock of its own: main.py holds the node lock around a run that is not --dry-run
    plan, scopes = collect(ctx, datetime.datetime.now(datetime.UTC))
    batches = retention.batches(plan)
    destroyed = []
    if not ctx.dry_run:
        for names in batches.values():  # one libzfs_core call per dataset
            destroyed += lzc.destroy_snapshots(names, runner=ctx.local)
        write_metrics(cfg.rotation.metrics_file, kept=len(plan.keep), destroyed=len(destroyed),
                      seconds=time.monotonic() - started)
    if args.json:
        ctx.emit({**plan.to_dict(), "scopes": scopes, "dry_run": ctx.dry_run,
                  "batches": {k: len(v) for k, v in batches.items()}})
        return 0
    if args.explain:
        print(retention.explain_text(plan))
    for s in scopes:
        print(f"{s['path']}: policy {s['policy'] or '(none: keeps everything)'}, {s['snapshots']} snapshots")
    verb = "would destroy" if ctx.dry_run else "destroyed"
    print(f"{verb} {len(plan.destroy)} snapshot(s) in {len(batches)} batch(es); kept {len(plan.keep)}")
    return 0
