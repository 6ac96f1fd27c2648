"""The fabric as Prometheus metrics: a pure function of what was read (``Observed``: the pool's `zpool list` row and
``zpool.PoolHealth``, the health checks of ``fabric_core.services.health``, the published versions with their
hosts, the text of ``/proc/spl/kstat/zfs/arcstats``, the checkpoint snapshot rows, the clock) to a ``prometheus_client``
``CollectorRegistry``; ``render`` gives node_exporter's textfile-collector format (``generate_latest``).

Every metric is in ``METRICS`` (name, type, labels, unit, meaning): the one list the exposition, the docs
(docs/fabricctl.md, "Metrics") and the example alert rules (docs/alerts.yml) are checked against. Counters carry
``_total`` in their names, as they are exposed. A source that could not be read has no samples and
``fabric_metrics_source_up{source}`` 0; what could be read is still exposed.

prometheus_client is imported when a registry is built (Debian's python3-prometheus-client; 0.16, Debian 12's, is
the oldest this uses), so the rest of the core works without it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..base import atomic
from ..base.errors import UserError
from . import health

GAUGE, COUNTER = "gauge", "counter"


@dataclass(frozen=True)
class Metric:
    """One metric family as exposed: its name (a counter's with ``_total``), type, label names, unit, meaning."""

    name: str
    type: str
    labels: tuple
    unit: str
    help: str


METRICS: tuple[Metric, ...] = (
    Metric("fabric_health_state", GAUGE, (), "state",
           "The overall state of fabricctl status: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the worst check's; "
           "CRITICAL wins over WARNING over UNKNOWN)."),
    Metric("fabric_health_check_state", GAUGE, ("check",), "state",
           "The state of one health check of fabricctl status (pool_state, device_errors, data_errors, scrub, "
           "capacity, chap, discovery, lio_saved, sessions, foreign_acls, rotation, holds; exports or config "
           "when unreadable): 0-3 as above."),
    Metric("fabric_metrics_source_up", GAUGE, ("source",), "boolean",
           "1 when the source (pool, exports, arcstats, checkpoints, replicas) was read, 0 when it could not be "
           "(its metrics are then absent)."),
    Metric("fabric_pool_state", GAUGE, ("pool", "state"), "boolean",
           "1 for the pool's state (ONLINE, DEGRADED, FAULTED, OFFLINE, UNAVAIL, REMOVED, SUSPENDED; MISSING: not "
           "imported), 0 for each other state."),
    Metric("fabric_pool_size_bytes", GAUGE, ("pool",), "bytes", "The pool's size (zpool list SIZE)."),
    Metric("fabric_pool_allocated_bytes", GAUGE, ("pool",), "bytes", "Space allocated in the pool (zpool list ALLOC)."),
    Metric("fabric_pool_free_bytes", GAUGE, ("pool",), "bytes", "Free space in the pool (zpool list FREE)."),
    Metric("fabric_pool_capacity_ratio", GAUGE, ("pool",), "ratio",
           "Allocated over size, 0-1 (zpool's CAP is this in whole percent)."),
    Metric("fabric_pool_data_errors", GAUGE, ("pool",), "errors",
           "Permanent data errors the pool knows of (zpool status -v lists the files)."),
    Metric("fabric_pool_device_read_errors_total", COUNTER, ("pool", "vdev", "device"), "errors",
           "READ errors of a node of the vdev tree since the pool was imported or zpool clear: device is its path "
           "(a vdev or the pool's root: its name), vdev its top-level vdev (a disk that is one, a cache device: "
           "itself)."),
    Metric("fabric_pool_device_write_errors_total", COUNTER, ("pool", "vdev", "device"), "errors",
           "WRITE errors, as the read errors."),
    Metric("fabric_pool_device_checksum_errors_total", COUNTER, ("pool", "vdev", "device"), "errors",
           "CKSUM errors, as the read errors."),
    Metric("fabric_pool_scrub_age_seconds", GAUGE, ("pool",), "seconds",
           "Age of the last scrub as the scrub check has it: from the end of a finished scan, the start of one in "
           "progress, the pool's creation when never scrubbed (absent when that is unknown)."),
    Metric("fabric_pool_scrub_errors", GAUGE, ("pool",), "errors",
           "Errors the last scan found (zpool keeps one scan: the last scrub unless a resilver came after it)."),
    Metric("fabric_arc_size_bytes", GAUGE, (), "bytes", "The ARC's size (arcstats size)."),
    Metric("fabric_arc_hits_total", COUNTER, (), "hits", "ARC hits since the module was loaded (arcstats hits)."),
    Metric("fabric_arc_misses_total", COUNTER, (), "misses",
           "ARC misses since the module was loaded (arcstats misses)."),
    Metric("fabric_arc_hit_ratio", GAUGE, (), "ratio",
           "hits / (hits + misses) since the module was loaded (absent before any access); for a recent ratio use "
           "rate() of the two counters."),
    Metric("fabric_l2arc_size_bytes", GAUGE, (), "bytes", "Data held by the L2ARC (cache devices; arcstats l2_size)."),
    Metric("fabric_l2arc_hits_total", COUNTER, (), "hits", "L2ARC hits (arcstats l2_hits)."),
    Metric("fabric_l2arc_misses_total", COUNTER, (), "misses", "L2ARC misses (arcstats l2_misses)."),
    Metric("fabric_l2arc_hit_ratio", GAUGE, (), "ratio",
           "l2_hits / (l2_hits + l2_misses) since the module was loaded (absent before any L2ARC access: no cache "
           "device, or none read yet)."),
    Metric("fabric_published_versions", GAUGE, ("node",), "versions",
           "Dataset versions this storage node publishes (an ACL for at least one host)."),
    Metric("fabric_version_acl", GAUGE, ("dataset", "version", "host"), "boolean",
           "1 for each host with an ACL on the version's target (an initiator of no configured host: its IQN)."),
    Metric("fabric_version_session", GAUGE, ("dataset", "version", "host"), "boolean",
           "For each host with an ACL on the version: 1 logged in to its target, 0 not."),
    Metric("fabric_checkpoint_age_seconds", GAUGE, ("job",), "seconds",
           "Age of the job's newest checkpoint snapshot (its creation)."),
    Metric("fabric_checkpoint_snapshots", GAUGE, ("job",), "snapshots", "Checkpoint snapshots the job has."),
    Metric("fabric_replica_newest_snapshot_age_seconds", GAUGE, ("kind", "volume", "origin"), "seconds",
           "For each volume received from another storage node (fabric:origin; kind dataset or checkpoint): the "
           "age of its newest snapshot, by its creation on the node that took it (send and receive keep it). "
           "When the origin snapshots a job regularly, this is how far the replica lags."),
)
BY_NAME = {m.name: m for m in METRICS}
NAMES = tuple(BY_NAME)
SOURCES = ("pool", "exports", "arcstats", "checkpoints", "replicas")
# the pool states of zpool (vdev_state_t as zpool_pool_state_to_name names a pool's), and MISSING: not imported
POOL_STATES = ("ONLINE", "DEGRADED", "FAULTED", "OFFLINE", "UNAVAIL", "REMOVED", "SUSPENDED", "MISSING")
ARCSTATS = "/proc/spl/kstat/zfs/arcstats"


# --------------------------------------------------------------------------------------------------
# what was read


@dataclass
class Observed:
    """What the command read, for ``registry``. ``None`` for a source that could not be read.

    pool: the `zpool list -j --json-int` row ({name, size, alloc, free, cap, health}); pool_health: the
    zpool.PoolHealth of `zpool status`; pool_missing: the pool is not imported. checks: the health.Check list of
    fabricctl status. versions: the published dataset versions, [{"dataset", "version", "acl": [host, ...],
    "sessions": [host, ...]}] (hosts with an ACL, those of them logged in). arcstats: the text of
    /proc/spl/kstat/zfs/arcstats. checkpoints: the checkpoint snapshot rows ({"name_short": job, "creation": epoch
    seconds}). replicas: the snapshot rows of volumes received from another node ({"name_short", "fabric:kind",
    "fabric:origin", "creation"}). node: this storage node's name. now: the clock (epoch seconds)."""

    pool_name: str
    now: float
    node: str = ""
    pool: dict | None = None
    pool_health: object | None = None
    pool_missing: bool = False
    checks: list = field(default_factory=list)
    versions: list | None = None
    arcstats: str | None = None
    checkpoints: list | None = None
    replicas: list | None = None


# --------------------------------------------------------------------------------------------------
# pure parts


def parse_arcstats(text: str) -> dict[str, int]:
    """/proc/spl/kstat/zfs/arcstats -> {name: value}. The kstat's text: a header line of numbers, the column line
    ``name type data``, then one ``NAME TYPE VALUE`` line per statistic (numbers only in the ARC's; a line that is
    not is skipped). A text without the column line is not arcstats: UserError."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.split() == ["name", "type", "data"]), None)
    if start is None:
        raise UserError("this is not the text of /proc/spl/kstat/zfs/arcstats (no 'name type data' line)",
                        "read /proc/spl/kstat/zfs/arcstats on a node with the zfs module loaded")
    out = {}
    for line in lines[start + 1:]:
        parts = line.split()
        if len(parts) == 3:
            try:
                out[parts[0]] = int(parts[2])
            except ValueError:
                continue
    return out


def _ratio(hits: int | None, misses: int | None) -> float | None:
    if hits is None or misses is None or hits + misses == 0:
        return None
    return hits / (hits + misses)


def sources_up(obs: Observed) -> dict[str, bool]:
    """{source: whether it was read} for SOURCES (a pool that is not imported was read: it is MISSING)."""
    return {"pool": obs.pool is not None or obs.pool_missing, "exports": obs.versions is not None,
            "arcstats": obs.arcstats is not None, "checkpoints": obs.checkpoints is not None,
            "replicas": obs.replicas is not None}


def _device_labels(pool: str, d) -> tuple[str, str, str]:
    """(pool, vdev, device) of a node of the vdev tree: a device by its path, a vdev (and the root) by its name; a
    device that is a top-level vdev of its own (a single disk, a cache or spare device) is its own vdev."""
    device = d.path or d.name
    return pool, device if d.depth <= 1 else d.vdev, device


def _samples(obs: Observed) -> dict[str, list]:
    """{metric name: [(label values, value), ...]}: every sample, in METRICS' order of families."""
    out: dict[str, list] = {m.name: [] for m in METRICS}

    def add(name: str, labels: tuple, value) -> None:
        if value is not None:
            out[name].append((tuple(str(x) for x in labels), float(value)))

    checks = list(obs.checks)
    if checks:
        add("fabric_health_state", (), health.EXIT_CODES[health.overall(checks).state])
        for c in checks:
            add("fabric_health_check_state", (c.name,), c.code)
    up = sources_up(obs)
    for source in SOURCES:
        add("fabric_metrics_source_up", (source,), int(up[source]))

    pool = obs.pool_name
    if obs.pool_missing:
        for state in POOL_STATES:
            add("fabric_pool_state", (pool, state), int(state == "MISSING"))
    elif obs.pool is not None:
        row = obs.pool
        pool = row.get("name") or pool
        now_state = (getattr(obs.pool_health, "state", "") or row.get("health") or "").upper()
        for state in (*POOL_STATES, *(() if now_state in POOL_STATES or not now_state else (now_state,))):
            add("fabric_pool_state", (pool, state), int(state == now_state))
        add("fabric_pool_size_bytes", (pool,), row.get("size"))
        add("fabric_pool_allocated_bytes", (pool,), row.get("alloc"))
        add("fabric_pool_free_bytes", (pool,), row.get("free"))
        size, alloc = row.get("size"), row.get("alloc")
        add("fabric_pool_capacity_ratio", (pool,),
            alloc / size if size and alloc is not None else (row["cap"] / 100 if row.get("cap") is not None else None))
    if obs.pool_health is not None:
        ph = obs.pool_health
        add("fabric_pool_data_errors", (ph.name,), ph.error_count)
        seen = set()
        for d in ph.devices:
            labels = _device_labels(ph.name, d)
            if labels in seen:  # the same node twice (never seen): one sample per label set
                continue
            seen.add(labels)
            add("fabric_pool_device_read_errors_total", labels, d.read)
            add("fabric_pool_device_write_errors_total", labels, d.write)
            add("fabric_pool_device_checksum_errors_total", labels, d.cksum)
        scrub = next((c for c in checks if c.name == "scrub" and c.details.get("pool") == ph.name), None)
        if scrub is not None:
            add("fabric_pool_scrub_age_seconds", (ph.name,), scrub.details.get("age_seconds"))
        if ph.scan_stats:
            add("fabric_pool_scrub_errors", (ph.name,), ph.scan_stats.get("errors", 0))

    if obs.arcstats is not None:
        arc = parse_arcstats(obs.arcstats)
        add("fabric_arc_size_bytes", (), arc.get("size"))
        add("fabric_arc_hits_total", (), arc.get("hits"))
        add("fabric_arc_misses_total", (), arc.get("misses"))
        add("fabric_arc_hit_ratio", (), _ratio(arc.get("hits"), arc.get("misses")))
        add("fabric_l2arc_size_bytes", (), arc.get("l2_size"))
        add("fabric_l2arc_hits_total", (), arc.get("l2_hits"))
        add("fabric_l2arc_misses_total", (), arc.get("l2_misses"))
        add("fabric_l2arc_hit_ratio", (), _ratio(arc.get("l2_hits"), arc.get("l2_misses")))

    if obs.versions is not None:
        published = [v for v in obs.versions if v.get("acl")]
        add("fabric_published_versions", (obs.node,), len(published))
        for v in sorted(published, key=lambda v: (v["dataset"], v["version"])):
            logged_in = set(v.get("sessions") or ())
            for host in sorted(set(v["acl"])):
                add("fabric_version_acl", (v["dataset"], v["version"], host), 1)
                add("fabric_version_session", (v["dataset"], v["version"], host), int(host in logged_in))

    if obs.checkpoints is not None:
        newest: dict[str, float] = {}
        count: dict[str, int] = {}
        for row in obs.checkpoints:
            job = row.get("name_short") or str(row.get("name", "")).partition("@")[0].rsplit("/", 1)[-1]
            count[job] = count.get(job, 0) + 1
            created = row.get("creation")
            if isinstance(created, int | float):
                newest[job] = max(newest.get(job, created), created)
        for job in sorted(count):
            add("fabric_checkpoint_snapshots", (job,), count[job])
            if job in newest:
                add("fabric_checkpoint_age_seconds", (job,), max(0.0, obs.now - newest[job]))

    if obs.replicas is not None:
        received: dict[tuple, float] = {}
        for row in obs.replicas:
            origin, created = row.get("fabric:origin"), row.get("creation")
            if not origin or not isinstance(created, int | float):
                continue
            kind = "checkpoint" if row.get("fabric:kind") == "checkpoint" else "dataset"
            key = (kind, str(row.get("name_short", "")), str(origin))
            received[key] = max(received.get(key, created), created)
        for key in sorted(received):
            add("fabric_replica_newest_snapshot_age_seconds", key, max(0.0, obs.now - received[key]))
    return out


# --------------------------------------------------------------------------------------------------
# prometheus_client


def _client():
    try:
        import prometheus_client  # noqa: PLC0415 - lazy on purpose: only the metrics need it
        from prometheus_client import core  # noqa: PLC0415
    except ImportError as exc:
        raise UserError("python3-prometheus-client is not installed on this node",
                        "install the Debian package python3-prometheus-client (the fabricctl role does)") from exc
    return prometheus_client, core


class _Collector:
    """A prometheus_client custom collector of one observation's samples."""

    def __init__(self, obs: Observed):
        self.obs = obs

    def describe(self):
        return []  # no samples while registering: the registry does not call collect() for them

    def collect(self):
        _prometheus_client, core = _client()
        for name, samples in _samples(self.obs).items():
            metric = BY_NAME[name]
            kind = core.CounterMetricFamily if metric.type == COUNTER else core.GaugeMetricFamily
            family = kind(name, metric.help, labels=list(metric.labels))
            for labels, value in samples:
                family.add_metric(list(labels), value)
            yield family


def registry(obs: Observed):
    """A CollectorRegistry holding the observation's metrics (every family of METRICS, some maybe empty)."""
    client, _core = _client()
    reg = client.CollectorRegistry(auto_describe=False)
    reg.register(_Collector(obs))
    return reg


def render(reg) -> bytes:
    """The registry in the text format node_exporter's textfile collector reads."""
    client, _core = _client()
    return client.generate_latest(reg)


# fabricctl rotate's own metrics (its file, rotation.metrics_file): not an observation of the node, the record of
# the last successful run, which `fabricctl status` reads back (the rotation check).
ROTATION_METRICS = (
    Metric("fabricctl_rotate_last_success_timestamp_seconds", GAUGE, (), "seconds",
           "End of the last successful fabricctl rotate."),
    Metric("fabricctl_rotate_snapshots", GAUGE, ("action",), "",
           "Snapshots kept and destroyed by the last successful run."),
    Metric("fabricctl_rotate_duration_seconds", GAUGE, (), "seconds", "Duration of the last successful run."),
)


def rotation_registry(*, now: float, kept: int, destroyed: int, seconds: float):
    """A CollectorRegistry of fabricctl rotate's metrics (ROTATION_METRICS) for one successful run."""
    client, core = _client()
    stamp, snapshots, duration = ROTATION_METRICS
    families = [core.GaugeMetricFamily(stamp.name, stamp.help, value=round(now)),
                core.GaugeMetricFamily(snapshots.name, snapshots.help, labels=list(snapshots.labels)),
                core.GaugeMetricFamily(duration.name, duration.help, value=round(seconds, 3))]
    families[1].add_metric(["kept"], kept)
    families[1].add_metric(["destroyed"], destroyed)

    class _Fixed:
        def collect(self):
            return families

    reg = client.CollectorRegistry(auto_describe=False)
    reg.register(_Fixed())
    return reg


def write_textfile(path: str, text: bytes) -> None:
    """Replace a textfile of node_exporter's collector: through the core's atomic writer (a temporary name nobody
    can predict, O_EXCL|O_NOFOLLOW, renamed; mode 0644), its directory made 0755 when missing. Not
    prometheus_client's write_to_textfile: its temporary name is PATH.PID.THREAD, opened without O_EXCL or
    O_NOFOLLOW, so a link planted there by whoever can write the directory would be written through as root."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o755, exist_ok=True)
    atomic.write_file(path, text, mode=0o644)  # node_exporter never reads a half-written file


__all__ = ["ARCSTATS", "BY_NAME", "COUNTER", "GAUGE", "METRICS", "Metric", "NAMES", "Observed", "POOL_STATES",
           "ROTATION_METRICS", "SOURCES", "parse_arcstats", "registry", "render", "rotation_registry", "sources_up",
           "write_textfile"]
