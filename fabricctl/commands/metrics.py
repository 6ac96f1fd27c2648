"""This storage node as Prometheus metrics, in node_exporter's textfile-collector format: fabric_build_info, the
health state and each check of `fabricctl status`, the pool (state, size, allocated, free, capacity, data errors,
every device's read, write and checksum error counters, last scrub time and errors), the published versions (per
version: hosts with an ACL and those logged in; per host: versions published to it and those it is logged in to),
each job's newest checkpoint time and count, and the newest snapshot time of each volume received from another
node. Every name starts with fabric_; points in time are Unix times (*_timestamp_seconds). The ARC and L2ARC are
node_exporter's own (its zfs collector: node_zfs_arc_*). The metric names and their meaning: docs/fabricctl.md,
"Metrics"; example alert rules: roles/fabricctl/files/fabric-alerts.yml (the role installs them with
fabricctl_alert_rules_file).

The file is replaced atomically (a temporary file in the same directory, renamed; mode 0644). Without --output it
goes next to rotation's metrics file (rotation.metrics_file's directory, as fabric.prom), or to stdout when none is
configured; `--output -` prints it. A source that cannot be read leaves its metrics out and sets
fabric_metrics_source_up{source} to 0; the file is written all the same (exit 0). The fabricctl role runs this every
minute (fabricctl-metrics.timer). Rotation's own metrics (fabric_rotate_*) stay in rotation's file.

Examples:
  fabricctl metrics --output -
  fabricctl metrics --output /var/lib/prometheus/node-exporter/fabric.prom
"""

from __future__ import annotations

import os
import platform
import socket
import time

from fabric_core.base.errors import FabricError
from fabric_core.services import health
from fabric_core.services import metrics as fabric_metrics

from .. import about, readings

PATH = ("metrics",)
HELP = "write the node's Prometheus metrics (node_exporter textfile format) to a file or stdout"
MUTATING = False  # read-only: no node lock, no journal record (it runs every minute)

FILE_NAME = "fabric.prom"  # next to rotation's metrics file (fabricctl.prom), in node_exporter's textfile directory
clock = time.time  # the metrics' clock (tests set it)
zfs_module_version = "/sys/module/zfs/version"  # fabric_build_info's openzfs (tests point it at a sample)


def configure(p) -> None:
    p.add_argument("--output", metavar="FILE",
                   help=f"the textfile to replace (default: {FILE_NAME} in the directory of rotation.metrics_file; "
                        "stdout when none is configured; '-': stdout)")


def default_output(cfg) -> str | None:
    """Where the metrics go without --output: fabric.prom beside rotation's metrics file, None (stdout) without one."""
    if not cfg.rotation.metrics_file:
        return None
    return os.path.join(os.path.dirname(cfg.rotation.metrics_file), FILE_NAME)


def build() -> dict:
    """fabric_build_info's labels: fabricctl's version, the Python running it, the loaded OpenZFS module's version
    (None: unknown)."""
    try:
        with open(zfs_module_version, encoding="utf-8") as fh:
            openzfs = fh.read().strip() or None
    except OSError:
        openzfs = None
    return {"version": about.fabricctl_version(), "python": platform.python_version(), "openzfs": openzfs}


def observe(ctx, now: float) -> fabric_metrics.Observed:
    """Every read of the metrics: status's (the pool, LIO, the checks), the checkpoint and replica snapshots, the
    build."""
    cfg = ctx.config
    reading = readings.read(ctx, now)
    pool = reading.pool
    checkpoints = readings.checkpoint_snapshots(ctx)
    return fabric_metrics.Observed(pool_name=pool.name, now=now, node=cfg.node or socket.gethostname(),
                                   pool=pool.row, pool_health=pool.health, pool_missing=pool.missing,
                                   checks=reading.checks, versions=readings.published_versions(reading.exports),
                                   checkpoints=checkpoints, replicas=readings.replica_snapshots(ctx, checkpoints),
                                   build=build())


def write(path: str | None, text: bytes) -> None:
    """Replace PATH atomically (0644, its directory made 0755 when missing), or print to stdout (None or '-')."""
    if path in (None, "-"):
        print(text.decode(), end="")
        return
    fabric_metrics.write_textfile(path, text)  # atomic, 0644, no link followed


def run(ctx, args) -> int:
    now = clock()
    try:
        obs = observe(ctx, now)
    except FabricError as exc:  # the configuration: with --output, the file says UNKNOWN before the error is shown
        if args.output and args.output != "-":
            check = health.unknown("config", readings.why(exc))
            write(args.output, fabric_metrics.render(fabric_metrics.registry(
                fabric_metrics.Observed(pool_name="", now=now, checks=[check], build=build()))))
        raise
    text = fabric_metrics.render(fabric_metrics.registry(obs))
    path = args.output or default_output(ctx.config)
    to_stdout = path in (None, "-")
    if not (to_stdout and args.json):
        write(path, text)
    down = [source for source, up in fabric_metrics.sources_up(obs).items() if not up]
    if down:
        ctx.note(f"fabricctl metrics: could not read {', '.join(down)} (fabric_metrics_source_up is 0; "
                 "`fabricctl status` says why for the pool and LIO)")
    if args.json:  # to stdout: the text is in the JSON
        ctx.emit({"output": None if to_stdout else path, "bytes": len(text), "state": health.overall(obs.checks).state,
                  "sources_down": down, **({"text": text.decode()} if to_stdout else {})})
    return 0
