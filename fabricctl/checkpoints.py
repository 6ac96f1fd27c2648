"""Training jobs on this node: a job's checkpoint volume CHECKPOINT_ROOT/JOB (one writer) and its
checkpoint snapshots JOB@step-N with their step, metrics and tags."""

from __future__ import annotations

from fabric_core.base.errors import NotFound
from fabric_core.base.rules import KIND_CHECKPOINT, KIND_CHECKPOINT_VOLUME
from fabric_core.storage import versions

from . import zvols


def volume(cfg, job: str) -> str:
    """The checkpoint volume of JOB: CHECKPOINT_ROOT/JOB."""
    return cfg.checkpoint(job)


def mountpoint(cfg, job: str) -> str:
    """Where JOB's checkpoint volume is mounted read-write on its writer (CHECKPOINT_MOUNT_ROOT/JOB): the mount
    point of its export, by fabric_core.services.publish's rule (the file system does not change it)."""
    return cfg.publishing().writable(job, "ext4").mountpoint


VOLUMES = zvols.Volumes("checkpoint_root", KIND_CHECKPOINT_VOLUME, lambda job, known: NotFound(
    f"unknown job {job!r} (jobs with a checkpoint volume: {known})",
    f"create its volume with `fabricctl checkpoint volume create {job} --size SIZE --writer HOST`"))
all_volumes = VOLUMES.all  # job -> its checkpoint volume's row
require = VOLUMES.require  # the checkpoint volume's row of JOB; NotFound names the jobs there are


def metric_columns(cfg) -> tuple[str, ...]:
    """The user properties that hold the configured metrics, one per metric, for a snapshot listing."""
    return tuple(f"fabric:metric.{m}" for m in cfg.metrics)


def snapshots(ctx, job: str) -> list[dict]:
    """The job's checkpoint snapshots, oldest first, with step (int), metrics and tags parsed."""
    columns = metric_columns(ctx.config)
    rows = versions.list_snapshots(ctx.local, volume(ctx.config, job), kinds=(KIND_CHECKPOINT,),
                                   extra_columns=columns)  # one listing, metrics included
    for r in rows:
        r["step"] = int(r["fabric:step"]) if (r.get("fabric:step") or "").isdigit() else None
        r["tags"] = [t for t in (r.get("fabric:tags") or "").split(",") if t]
        r["metrics"] = {}
        for column in columns:
            metric = _metric_value(r.pop(column, None))
            if metric is not None:
                r["metrics"][column.split(".", 1)[1]] = metric
    return rows


def _metric_value(text: str | None) -> float | None:
    if text in (None, "", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        return None
