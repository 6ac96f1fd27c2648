"""Take a consistent checkpoint snapshot of a job: freeze on the writer, snapshot, thaw.

On the writer host (asked of its node agent, `fabric-node freeze`/`thaw`, where this node's key runs only
the agent): `sync -f`, then a systemd timer that thaws the file system after
defaults.thaw_after_seconds (30) whatever happens to fabricctl (killed, connection lost), then
`fsfreeze -f` on CHECKPOINT_MOUNT_ROOT/JOB (new writes wait, everything written so far is on the
volume); on this node: one libzfs_core call creates JOB@step-N together with its user properties
(fabric:step, fabric:metric.NAME, fabric:tags, created-at); then `fsfreeze -u` on the writer,
whatever happened (a failed snapshot still thaws), and the timer is stopped. The freeze window is
measured and reported; a snapshot that took as long as the timer (it may have been thawed first)
is discarded. If the writer cannot be reached, nothing is frozen and no snapshot is taken.

Examples:
  fabricctl checkpoint snapshot llama-7b --step 12000 --metric loss=1.734 --tag nightly
"""

from __future__ import annotations

import contextlib

from fabric_core.base.errors import AlreadyExists, UserError
from fabric_core.base.names import snapshot_name, validate_fabric_name
from fabric_core.base.rules import KIND_CHECKPOINT, KIND_PROP, MANAGED_PROP
from fabric_core.node import freeze
from fabric_core.storage import lzc
from fabric_core.storage.versions import created_by, now_iso

from .. import checkpoints, faults

PATH = ("checkpoint", "snapshot")
HELP = "snapshot a job's checkpoint volume consistently (fsfreeze on the writer)"
MUTATING = True  # logs a journal record (not with --dry-run); its locks below
NODE_LOCK = False  # no shared node state changes: a long replicate, ingest or publish never delays it


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    job = validate_fabric_name(args.job, "job")
    return [("checkpoint", job, True), ("writer", job, False)]  # the volume kept (shared with a send); one freeze


def configure(p) -> None:
    p.add_argument("job", metavar="JOB", help="the job")
    p.add_argument("--step", required=True, type=int, help="the training step of this checkpoint")
    p.add_argument("--metric", action="append", default=[], metavar="NAME=VALUE",
                   help="a metric of this checkpoint (repeatable); NAME must be listed in the config's metrics")
    p.add_argument("--tag", action="append", default=[], metavar="TEXT", help="a tag (repeatable), e.g. release")


def parse_metrics(items: list[str], known: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UserError(f"--metric {item!r} must be NAME=VALUE", "for example --metric loss=1.73")
        if name not in known:
            raise UserError(f"unknown metric {name!r} (the config declares: {', '.join(known) or 'none'})",
                            "add it to `metrics:` in the fabricctl config (the storage role writes it), or fix "
                            "the name")
        try:
            out[name] = float(value)
        except ValueError:
            raise UserError(f"--metric {item!r}: {value!r} is not a number", "for example --metric loss=1.73") from None
    return out


def parse_tags(items: list[str]) -> list[str]:
    for tag in items:
        if not tag or "," in tag or not tag.isprintable() or len(tag) > 64:
            raise UserError(f"invalid tag {tag!r}: printable text without ',' (at most 64)", "for example `release`")
    return sorted(set(items))


@contextlib.contextmanager
def refused(writer, job: str):
    """The writer's refusal of the freeze (nothing was set there) as this command's error, naming the writer."""
    try:
        yield
    except freeze.FreezeRefused as err:
        raise UserError(f"{writer.name}: {err.problem}",
                        err.fix.replace("JOB", job).replace("HOST", writer.name)) from None


def run(ctx, args) -> int:
    job = validate_fabric_name(args.job, "job")
    if args.step < 0:
        raise UserError(f"--step {args.step} must be 0 or more", "give the training step, e.g. --step 12000")
    cfg = ctx.config
    metrics = parse_metrics(args.metric, cfg.metrics)
    tags = parse_tags(args.tag)
    vol = checkpoints.require(ctx, job)
    snap = f"{vol['name']}@{snapshot_name(args.step)}"
    if any(r["step"] == args.step for r in checkpoints.snapshots(ctx, job)) or lzc.exists(snap):
        raise AlreadyExists(f"job {job} already has a checkpoint at step {args.step} ({snap})",
                            "checkpoints are immutable: use the next step")
    writer = cfg.host(vol.get("fabric:writer") or "")
    mountpoint = checkpoints.mountpoint(cfg, job)
    # the writer's agent (ssh.access agent), or commands over this node's key (shell): the same freeze either way
    frozen_on = ctx.writer(writer, job, mountpoint)
    props = {MANAGED_PROP: "true", KIND_PROP: KIND_CHECKPOINT, "fabric:step": str(args.step),
             "fabric:created-by": created_by(), "fabric:created-at": now_iso(),
             "fabric:tags": ",".join(tags) or "-", **{f"fabric:metric.{k}": repr(v) for k, v in metrics.items()}}
    if ctx.dry_run:
        with refused(writer, job):
            frozen_on.check(cfg.defaults.thaw_after_seconds)  # mounted read-write there (and the writer reachable)
        out = {"job": job, "snapshot": snap, "writer": writer.name, "properties": props, "dry_run": True}
        ctx.report(out, f"would freeze {mountpoint} on {writer.name}, snapshot {snap}, thaw")
        return 0

    def take() -> None:
        faults.pause("checkpoint-snapshot")  # the lab's SIGKILL test stops fabricctl here, the writer frozen
        faults.point("checkpoint-snapshot")
        lzc.snapshot([snap], props, runner=ctx.local)

    with refused(writer, job):
        _taken, window = freeze.frozen(frozen_on, take, limit=cfg.defaults.thaw_after_seconds,
                                       discard=lambda: lzc.destroy_snapshots([snap], runner=ctx.local))
    out = {"job": job, "step": args.step, "snapshot": snap, "writer": writer.name, "metrics": metrics, "tags": tags,
           "freeze_seconds": round(window, 3), "dry_run": False}
    ctx.report(out, f"checkpoint {job} step {args.step}: {snap} (writes frozen on {writer.name} for "
               f"{window * 1000:.0f} ms)")
    return 0
