"""The fabric as Prometheus metrics: a pure function of what was read (``Observed``: the pool's `zpool list` row and
``zpool.PoolHealth``, the health checks of ``fabric_core.services.health``, the published versions with their
hosts, the checkpoint snapshot rows, the build, the clock) to a ``prometheus_client`` ``CollectorRegistry``;
``render`` gives node_exporter's textfile-collector format (``generate_latest``).

Every metric is in ``METRICS`` (name, type, labels, unit, meaning), and those `fabricctl rotate` writes in
``ROTATION_METRICS``: the lists the exposition, the docs (docs/fabricctl.md, "Metrics") and the example alert rules
(roles/fabricctl/files/fabric-alerts.yml) are checked against. Prometheus' conventions: one prefix (``fabric_``)
for all of them; counters carry ``_total`` in their names, as they are exposed; a point in time is a Unix time
named ``*_timestamp_seconds`` (an alert computes the age with ``time() - ...``), never an age the file would have
to be rewritten to keep true; ``fabric_build_info`` is 1 with the build in its labels. Nothing node_exporter's zfs
collector exports (``node_zfs_arc_*``: the ARC and L2ARC; ``node_zfs_zpool_state``) is exported again, except
``fabric_pool_state``, which also says MISSING for the configured pool that is not imported (node_exporter knows
only imported pools). The series of published versions are per version and per host, never per host and
version: a node publishing V versions to H hosts has 2V + 2H of them, not 2VH (docs/fabricctl.md, "Metrics").
A source that could not be read has no samples and ``fabric_metrics_source_up{source}`` 0; what could be read is
still exposed.

prometheus_client is imported when a registry is built (Debian's python3-prometheus-client; 0.16, Debian 12's, is
the oldest this uses), so the rest of the core works without it. ``parse_arcstats`` (the ARC's kstat) is here for
`fabricctl warm` and the read benchmark; no metric comes from it.
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
    Metric("fabric_build_info", GAUGE, ("version", "python", "openzfs"), "info",
           "Always 1: the fabricctl that wrote the file (version), the Python it runs on and the OpenZFS module "
           "loaded on the node (/sys/module/zfs/version; unknown when it cannot be read)."),
    Metric("fabric_health_state", GAUGE, (), "state",
           "The overall state of fabricctl status: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the worst check's; "
           "CRITICAL wins over WARNING over UNKNOWN)."),
    Metric("fabric_health_check_state", GAUGE, ("check",), "state",
           "The state of one health check of fabricctl status (pool_state, device_errors, data_errors, scrub, "
           "capacity, chap, discovery, lio_saved, sessions, foreign_acls, rotation, holds; exports or config "
           "when unreadable): 0-3 as above."),
    Metric("fabric_metrics_source_up", GAUGE, ("source",), "boolean",
           "1 when the source (pool, exports, checkpoints, replicas) was read, 0 when it could not be "
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
    Metric("fabric_pool_last_scrub_timestamp_seconds", GAUGE, ("pool",), "seconds",
           "When the pool was last scrubbed as the scrub check counts it (Unix time): the end of a finished scan, "
           "the start of one in progress, the pool's creation when never scrubbed (absent when that is unknown)."),
    Metric("fabric_pool_scrub_errors", GAUGE, ("pool",), "errors",
           "Errors the last scan found (zpool keeps one scan: the last scrub unless a resilver came after it)."),
    Metric("fabric_published_versions", GAUGE, ("node",), "versions",
           "Dataset versions this storage node publishes (an ACL for at least one host)."),
    Metric("fabric_version_hosts", GAUGE, ("dataset", "version"), "hosts",
           "Hosts with an ACL on the version's target (an initiator of no configured host counts as one)."),
    Metric("fabric_version_sessions", GAUGE, ("dataset", "version"), "hosts",
           "Of the hosts with an ACL on the version's target, those logged in to it."),
    Metric("fabric_host_versions", GAUGE, ("host",), "versions",
           "Versions this storage node publishes to the host (an ACL on their targets; a host is a configured "
           "host's name, an initiator of none its IQN)."),
    Metric("fabric_host_sessions", GAUGE, ("host",), "versions",
           "Of the versions published to the host, those it is logged in to; fewer than fabric_host_versions: "
           "`fabricctl status` (the sessions check) names which."),
    Metric("fabric_checkpoint_newest_snapshot_timestamp_seconds", GAUGE, ("job",), "seconds",
           "Creation (Unix time) of the job's newest checkpoint snapshot."),
    Metric("fabric_checkpoint_snapshots", GAUGE, ("job",), "snapshots", "Checkpoint snapshots the job has."),
    Metric("fabric_replica_newest_snapshot_timestamp_seconds", GAUGE, ("kind", "volume", "origin"), "seconds",
           "For each volume received from another storage node (fabric:origin; kind dataset or checkpoint): the "
           "creation (Unix time) of its newest snapshot on the node that took it (send and receive keep it). "
           "When the origin snapshots a job regularly, time() minus this is how far the replica lags."),
)
BY_NAME = {m.name: m for m in METRICS}
NAMES = tuple(BY_NAME)
SOURCES = ("pool", "exports", "checkpoints", "replicas")
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
    "sessions": [host, ...]}] (hosts with an ACL, those of them logged in). checkpoints: the checkpoint snapshot
    rows ({"name_short": job, "creation": epoch seconds}). replicas: the snapshot rows of volumes received from
    another node ({"name_short", "fabric:kind", "fabric:origin", "creation"}). node: this storage node's name.
    build: fabric_build_info's labels ({"version", "python", "openzfs"}; None: no such sample). now: the clock
    (epoch seconds)."""

    pool_name: str
    now: float
    node: str = ""
    pool: dict | None = None
    pool_health: object | None = None
    pool_missing: bool = False
    checks: list = field(default_factory=list)
    versions: list | None = None
    checkpoints: list | None = None
    replicas: list | None = None
    build: dict | None = None


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


def sources_up(obs: Observed) -> dict[str, bool]:
    """{source: whether it was read} for SOURCES (a pool that is not imported was read: it is MISSING)."""
    return {"pool": obs.pool is not None or obs.pool_missing, "exports": obs.versions is not None,
            "checkpoints": obs.checkpoints is not None, "replicas": obs.replicas is not None}


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

    if obs.build is not None:
        add("fabric_build_info", tuple(obs.build.get(k) or "unknown" for k in BY_NAME["fabric_build_info"].labels), 1)
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
            add("fabric_pool_last_scrub_timestamp_seconds", (ph.name,), scrub.details.get("since"))
        if ph.scan_stats:
            add("fabric_pool_scrub_errors", (ph.name,), ph.scan_stats.get("errors", 0))

    if obs.versions is not None:
        published = [v for v in obs.versions if v.get("acl")]
        add("fabric_published_versions", (obs.node,), len(published))
        per_host: dict[str, list[int]] = {}  # host -> [versions with an ACL, those logged in]
        for v in sorted(published, key=lambda v: (v["dataset"], v["version"])):
            acl, logged_in = set(v["acl"]), set(v.get("sessions") or ()) & set(v["acl"])
            add("fabric_version_hosts", (v["dataset"], v["version"]), len(acl))
            add("fabric_version_sessions", (v["dataset"], v["version"]), len(logged_in))
            for host in acl:
                counts = per_host.setdefault(host, [0, 0])
                counts[0] += 1
                counts[1] += host in logged_in
        for host in sorted(per_host):
            add("fabric_host_versions", (host,), per_host[host][0])
            add("fabric_host_sessions", (host,), per_host[host][1])

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
                add("fabric_checkpoint_newest_snapshot_timestamp_seconds", (job,), newest[job])

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
            add("fabric_replica_newest_snapshot_timestamp_seconds", key, received[key])
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
# the last successful run, which `fabricctl status` reads back (the rotation check). 0.2.0 and earlier named them
# fabricctl_rotate_* (CHANGELOG, "Metrics renamed"); ROTATION_LAST_SUCCESS_OLD is still read from a file the
# previous version wrote, until the next run replaces it.
ROTATION_METRICS = (
    Metric("fabric_rotate_last_success_timestamp_seconds", GAUGE, (), "seconds",
           "End (Unix time) of the last successful fabricctl rotate."),
    Metric("fabric_rotate_snapshots", GAUGE, ("action",), "snapshots",
           "Snapshots kept and destroyed by the last successful run."),
    Metric("fabric_rotate_duration_seconds", GAUGE, (), "seconds", "Duration of the last successful run."),
)
ROTATION_LAST_SUCCESS = ROTATION_METRICS[0].name
ROTATION_LAST_SUCCESS_OLD = "fabricctl_rotate_last_success_timestamp_seconds"


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
           "ROTATION_LAST_SUCCESS", "ROTATION_LAST_SUCCESS_OLD", "ROTATION_METRICS", "SOURCES", "parse_arcstats",
           "registry", "render", "rotation_registry", "sources_up", "write_textfile"]
