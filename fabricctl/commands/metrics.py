"""This storage node as Prometheus metrics, in node_exporter's textfile-collector format: the health state and each
check of `fabricctl status`, the pool (state, size, allocated, free, capacity, data errors, every device's read,
write and checksum error counters, scrub age and errors), the ARC and L2ARC (sizes, hits, misses, hit ratios), the
published versions with the hosts that have an ACL and those logged in, and each job's newest checkpoint age. The
metric names and their meaning: docs/fabricctl.md, "Metrics"; example alert rules: docs/alerts.yml.

The file is replaced atomically (a temporary file in the same directory, renamed; mode 0644). Without --output it
goes next to rotation's metrics file (rotation.metrics_file's directory, as fabric.prom), or to stdout when none is
configured; `--output -` prints it. A source that cannot be read leaves its metrics out and sets
fabric_metrics_source_up{source} to 0; the file is written all the same (exit 0). The fabricctl role runs this every
minute (fabricctl-metrics.timer). Rotation's own metrics stay in rotation's file.

Examples:
  fabricctl metrics --output -
  fabricctl metrics --output /var/lib/prometheus/node-exporter/fabric.prom
"""

from __future__ import annotations

import os
import socket
import time

from fabric_core.base.errors import FabricError
from fabric_core.services import health
from fabric_core.services import metrics as fabric_metrics

from .. import readings

PATH = ("metrics",)
HELP = "write the node's Prometheus metrics (node_exporter textfile format) to a file or stdout"
MUTATING = False  # read-only: no node lock, no journal record (it runs every minute)

FILE_NAME = "fabric.prom"  # next to rotation's metrics file (fabricctl.prom), in node_exporter's textfile directory
clock = time.time  # the metrics' clock (tests set it)
arcstats_path = fabric_metrics.ARCSTATS  # tests point it at a sample


def configure(p) -> None:
    p.add_argument("--output", metavar="FILE",
                   help=f"the textfile to replace (default: {FILE_NAME} in the directory of rotation.metrics_file; "
                        "stdout when none is configured; '-': stdout)")


def default_output(cfg) -> str | None:
    """Where the metrics go without --output: fabric.prom beside rotation's metrics file, None (stdout) without one."""
    if not cfg.rotation.metrics_file:
        return None
    return os.path.join(os.path.dirname(cfg.rotation.metrics_file), FILE_NAME)


def observe(ctx, now: float) -> fabric_metrics.Observed:
    """Every read of the metrics: status's (the pool, LIO, the checks), the ARC's kstat, the checkpoint snapshots."""
    cfg = ctx.config
    reading = readings.read(ctx, now)
    pool = reading.pool
    checkpoints = readings.checkpoint_snapshots(ctx)
    return fabric_metrics.Observed(pool_name=pool.name, now=now, node=cfg.node or socket.gethostname(),
                                   pool=pool.row, pool_health=pool.health, pool_missing=pool.missing,
                                   checks=reading.checks, versions=readings.published_versions(reading.exports),
                                   arcstats=readings.read_arcstats(arcstats_path),
                                   checkpoints=checkpoints, replicas=readings.replica_snapshots(ctx, checkpoints))


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
                fabric_metrics.Observed(pool_name="", now=now, checks=[check]))))
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
