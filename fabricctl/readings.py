"""What this storage node is, read once for `fabricctl status` and `fabricctl metrics`: the pool (`zpool list`,
`zpool status`, its creation), LIO's exports and sessions (the publishing service's ExportIndex), and the health
checks of fabric_core.services.health on them. A source that cannot be read is one UNKNOWN check, never a failure; the
metrics add the checkpoint and replica snapshots (`fabricctl warm` reads the ARC's statistics here)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fabric_core.base.errors import FabricError
from fabric_core.base.rules import KIND_CHECKPOINT
from fabric_core.node import freeze
from fabric_core.services import health, replicate
from fabric_core.services.metrics import ARCSTATS, ROTATION_LAST_SUCCESS, ROTATION_LAST_SUCCESS_OLD
from fabric_core.services.replicate import ORIGIN_PROP
from fabric_core.storage import holders, lio, lzc, versions, zfs, zpool

from . import checkpoints, datasets


def why(exc: Exception) -> str:
    """An error on one line (its problem, without the fix)."""
    text = exc.problem if isinstance(exc, FabricError) else f"{type(exc).__name__}: {exc}"
    return " ".join(str(text).split())


@dataclass
class PoolReading:
    """The pool as read: its `zpool list` row (None: not imported, or unreadable), its PoolHealth, its creation
    (epoch seconds, None unknown), whether it is missing (not imported), and its checks."""

    name: str
    row: dict | None = None
    health: zpool.PoolHealth | None = None
    created: float | None = None
    missing: bool = False
    checks: list = field(default_factory=list)


@dataclass
class Reading:
    """The node as read: the pool, the exports as `status --json` has them (published, sessions, access, warnings;
    access None when LIO could not be read) and every check, the pool's first."""

    pool: PoolReading
    exports: dict
    checks: list


def _created(ctx, pool: str) -> float | None:
    """When the pool was made (its root dataset's creation), the age of a pool never scrubbed; None unknown."""
    try:
        value = zfs.get_props(ctx.local, pool, ["creation"]).get(pool, {}).get("creation", ("",))[0]
        return float(value)
    except Exception:  # noqa: BLE001 - only a scrub's reference point: unknown, never a failure
        return None


def read_pool(ctx, name: str, now: float, thresholds) -> PoolReading:
    """The pool and its checks; a pool that cannot be read is one UNKNOWN check."""
    try:  # a health check reports what it could not read instead of failing: any error is UNKNOWN
        row = zpool.pool_exists(ctx.local, name)  # `zpool list -j --json-int`: name, size, alloc, free, cap
        if row is None:
            return PoolReading(name, missing=True, checks=[health.missing_pool(name)])
        _layout, pool_health = zpool.get_layout(ctx.local, name)  # `zpool status -j --json-int -P`
    except Exception as exc:  # noqa: BLE001
        return PoolReading(name, checks=[health.unknown("pool_state", f"cannot read pool {name}: {why(exc)}")])
    created = _created(ctx, name)
    return PoolReading(name, row, pool_health, created,
                       checks=health.pool_checks(pool_health, row, now, thresholds, created))


def access_warnings(access: dict) -> list[str]:
    """What an operator must know about how this node's exports are guarded."""
    out = []
    if access["chap"] != "per-host":
        out.append(health.NO_CHAP)
    if access["discovery"] != "closed":
        out.append(health.OPEN_DISCOVERY)
    return out


def read_exports(ctx) -> tuple[dict, list]:
    """(published versions, sessions and access as `status --json` has them, the LIO checks); LIO that
    cannot be read is one UNKNOWN check."""
    cfg = ctx.config
    pub = ctx.publisher
    try:
        index = pub.index()
        published = []
        for r in datasets.sealed(ctx):
            export = datasets.export_of(ctx, r)
            to = index.published_to(export)
            holds = lzc.holds(r["name"]) if r.get("userrefs") else []
            if to or holds:
                published.append({"ref": f"{r['name_short']}@{r['snapshot']}",
                                  "target": pub.settings.target_iqn(export), "published_to": to, "holds": holds})
        acls = {t: index.target_initiators(t) for t in index.targets()}
        logged_in = {h: sorted(t) for h, t in sorted(index.sessions().items())}
        closed = index.discovery_closed()
    except Exception as exc:  # noqa: BLE001 - as read_pool
        data = {"published": [], "sessions": {}, "access": None, "warnings": []}
        return data, [health.chap(not cfg.insecure_no_chap),
                      health.unknown("exports", f"cannot read LIO's exports: {why(exc)}")]
    access = {"chap": "off (insecure_no_chap)" if cfg.insecure_no_chap else "per-host",
              "discovery": "closed" if closed else "open"}
    checks = [health.chap(not cfg.insecure_no_chap), health.discovery(closed), saved_check(index.live["dump"]),
              reservations_check(index.live["dump"]),
              health.sessions({t: [index.name_of(i) for i in index.published_initiators(t)] for t in acls},
                              logged_in, all_acls=sum(len(i) for i in acls.values())),
              health.foreign_acls({t: [i for i in inits if i not in index.hosts] for t, inits in acls.items()})]
    return {"published": published, "sessions": logged_in, "access": access,
            "warnings": access_warnings(access)}, checks


def host_paths(ctx, published) -> tuple[dict, dict]:
    """Ask every host a version is published to (in parallel) how many of its paths are up: ``published`` is
    (dataset, version, host names); returns ({host: {ref: {multipath, up, paths}}} (``Publisher.paths``),
    {host: why} of the hosts that could not be asked). Hosts not in the configuration are not asked."""
    pub, cfg = ctx.publisher, ctx.config
    wanted: dict = {}
    for name, version, hosts in published:
        for h in hosts:
            if h in cfg.hosts:  # the mount point and target are all it reads: the file system does not matter
                wanted.setdefault(h, []).append(pub.settings.dataset(name, version, "ext4"))
    if not wanted:
        return {}, {}
    fan = ctx.fan([cfg.host(h) for h in sorted(wanted)], lambda host, step: pub.paths(wanted[host.name], host, step),
                  "paths", quiet=True)
    return fan.values, {o.name: why(o.error) for o in fan.failed}


def writer_states(ctx) -> tuple[dict, dict]:
    """Ask every checkpoint writer (in parallel) what fabricctl holds frozen there and which tasks wait for a
    frozen file system (freeze.read_writer): ({host: {"jobs": {job: mount point}, "frozen", "blocked"}},
    {host: why} of the writers that could not be asked). Writers not in the configuration are not asked."""
    cfg = ctx.config
    jobs: dict = {}
    for job, row in checkpoints.all_volumes(ctx).items():
        writer = row.get("fabric:writer") or ""
        if writer in cfg.hosts:
            jobs.setdefault(writer, {})[job] = checkpoints.mountpoint(cfg, job)
    if not jobs:
        return {}, {}

    def ask(host, step):
        step("freeze")
        agent = ctx.agent(host)
        if agent is not None:  # the writer's agent reads the same (node.checkpoints.writer_state)
            res = agent.writer_state(sorted(jobs[host.name]))
            return {"jobs": jobs[host.name], "frozen": res.get("frozen") or {}, "blocked": res.get("blocked") or []}
        return {"jobs": jobs[host.name], **freeze.read_writer(ctx.ssh(host), sorted(jobs[host.name].values()))}

    fan = ctx.fan([cfg.host(h) for h in sorted(jobs)], ask, "writers", quiet=True)
    return fan.values, {o.name: why(o.error) for o in fan.failed}


SAVE_FILE = lio.SAVE_FILE  # what LIO restores at boot (targetctl); tests point it elsewhere


def saved_check(live: dict, path: str | None = None):
    """LIO as it runs against what it restores at boot (health.lio_saved); an unreadable file is UNKNOWN."""
    path = path or SAVE_FILE
    try:
        with open(path) as fh:
            saved = json.load(fh)
    except FileNotFoundError:
        saved = None
    except (OSError, ValueError) as exc:
        return health.unknown("lio_saved", f"cannot read {path}: {why(exc)}")
    return health.lio_saved(live, saved, path)


def reservations_check(dump: dict, configfs: str | None = None):
    """SCSI reservations and registrations on LIO's backstores, read from configfs (health.reservations); what
    cannot be read is UNKNOWN."""
    try:
        found = lio.read_reservations(configfs or lio.CONFIGFS)
    except Exception as exc:  # noqa: BLE001 - as read_pool
        return health.unknown("reservations", f"cannot read LIO's reservations: {why(exc)}")
    return health.reservations(found, dump)


def rotation_check(path: str | None, now: float):
    """The age of the last successful rotation, from the metrics file `fabricctl rotate` writes (health.rotation)."""
    if not path:
        return health.rotation(None, now, "rotation.metrics_file is off")
    try:
        with open(path) as fh:
            text = fh.read()
    except FileNotFoundError:
        return health.rotation(None, now, f"no {path}")
    except OSError as exc:
        return health.unknown("rotation", f"cannot read {path}: {why(exc)}")
    found = {}
    for line in text.splitlines():  # the name 0.2.0 wrote too, until the next run rewrites the file
        name, _space, value = line.partition(" ")
        if name in (ROTATION_LAST_SUCCESS, ROTATION_LAST_SUCCESS_OLD):
            found.setdefault(name, value)
    value = found.get(ROTATION_LAST_SUCCESS, found.get(ROTATION_LAST_SUCCESS_OLD))
    try:
        return health.rotation(float(value), now, path)
    except (TypeError, ValueError):
        return health.unknown("rotation", f"{path} has no {ROTATION_LAST_SUCCESS}")


def holds_check(ctx):
    """Replication holds whose process is gone (a killed replicate or receive) or that name none, under the dataset
    and checkpoint roots (health.leftover_holds); holds that cannot be read are UNKNOWN."""
    cfg = ctx.config
    try:
        found = holders.leftovers(ctx.local, [cfg.dataset_root, cfg.checkpoint_root],
                                  (replicate.HOLD_SENDING, replicate.HOLD_RECEIVING))
    except Exception as exc:  # noqa: BLE001 - as read_pool
        return health.unknown("holds", f"cannot read the snapshots' holds: {why(exc)}")
    return health.leftover_holds([h.to_dict() for h in found])


def read(ctx, now: float) -> Reading:
    """The pool, the exports and every check (the configuration is loaded first: its errors are raised)."""
    cfg = ctx.config
    pool = read_pool(ctx, cfg.pool, now, cfg.health)
    exports, more = read_exports(ctx)
    return Reading(pool, exports, pool.checks + more + [rotation_check(cfg.rotation.metrics_file, now),
                                                        holds_check(ctx)])


def published_versions(exports: dict) -> list[dict] | None:
    """The versions published to at least one host, [{"dataset", "version", "acl": [host], "sessions": [host]}]
    (the hosts with an ACL, those of them logged in to the version's target), of read_exports' answer; None when
    LIO could not be read."""
    if exports.get("access") is None:
        return None
    out = []
    for p in exports["published"]:
        if not p["published_to"]:
            continue
        dataset, _at, version = p["ref"].partition("@")
        out.append({"dataset": dataset, "version": version, "acl": list(p["published_to"]),
                    "sessions": [h for h in p["published_to"] if p["target"] in exports["sessions"].get(h, [])]})
    return out


def read_arcstats(path: str = ARCSTATS) -> str | None:
    """The text of the ARC's kstat (None: unreadable, e.g. the zfs module is not loaded)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def replica_snapshots(ctx, checkpoints: list[dict] | None) -> list[dict] | None:
    """The snapshots of volumes received from another storage node (fabric:origin set, as replicate's receive
    sets it; its snapshots inherit it): the dataset versions from one `zfs list` under the dataset root, the
    checkpoints from ``checkpoints`` (checkpoint_snapshots' rows, which carry fabric:origin); None when either
    cannot be listed."""
    if checkpoints is None:
        return None
    try:
        version_rows = versions.list_snapshots(ctx.local, ctx.config.dataset_root, kinds=("dataset-version",),
                                               extra_columns=(ORIGIN_PROP,))
    except Exception:  # noqa: BLE001 - a metrics source: reported as not up
        return None
    return [row for row in version_rows + checkpoints if row.get(ORIGIN_PROP)]


def checkpoint_snapshots(ctx) -> list[dict] | None:
    """Every job's checkpoint snapshots (one `zfs list` under the checkpoint root; rows with name_short: the job,
    creation, fabric:origin for replica_snapshots), None when they cannot be listed."""
    try:
        return versions.list_snapshots(ctx.local, ctx.config.checkpoint_root, kinds=(KIND_CHECKPOINT,),
                                       extra_columns=(ORIGIN_PROP,))
    except Exception:  # noqa: BLE001 - a metrics source: reported as not up
        return None
