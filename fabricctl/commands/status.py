"""The fabric as this storage node sees it, as a health check: pool state, device errors, data errors, the
last scrub and capacity (thresholds: `health:` in the configuration), how access is guarded (per-host CHAP,
SendTargets discovery closed), hosts with an ACL but no session, ACLs of unknown initiators; then the
published versions with their holds and the iSCSI sessions of each host.

The first line is a monitoring plugin's (Nagios, Icinga, Checkmk, ...): FABRIC STATE - why | perfdata.
The exit status is the worst check's, by the monitoring-plugin convention: 0 OK, 1 WARNING, 2 CRITICAL,
3 UNKNOWN (a source or the configuration could not be read). See docs/fabricctl.md.

Examples:
  fabricctl status
  fabricctl status --json
  fabricctl status >/dev/null || echo "fabric needs attention (exit $?)"
"""

from __future__ import annotations

import time

from fabric_core import health, lzc, zfs, zpool
from fabric_core.errors import FabricError

from .. import datasets
from ..output import human_bytes, print_rows

PATH = ("status",)
HELP = "health checks (exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN), published versions, holds and sessions"
MUTATING = False  # read-only: no node lock, no journal record

clock = time.time  # the checks' clock (tests set it)


def configure(p) -> None:
    """Only the options every command has (--json)."""


def _why(exc: Exception) -> str:
    """An error on one line (its problem, without the fix)."""
    text = exc.problem if isinstance(exc, FabricError) else f"{type(exc).__name__}: {exc}"
    return " ".join(str(text).split())


def _created(ctx, pool: str) -> float | None:
    """When the pool was made (its root dataset's creation), the age of a pool never scrubbed; None unknown."""
    try:
        value = zfs.get_props(ctx.local, pool, ["creation"]).get(pool, {}).get("creation", ("",))[0]
        return float(value)
    except Exception:  # noqa: BLE001 - only a scrub's reference point: unknown, never a failure
        return None


def read_pool(ctx, name: str, now: float, thresholds) -> tuple[dict | None, list]:
    """(the `zpool list` row or None, the pool's checks); a pool that cannot be read is one UNKNOWN check."""
    try:  # a health check reports what it could not read instead of failing: any error is UNKNOWN
        pool = zpool.pool_exists(ctx.local, name)  # `zpool list -j --json-int`: name, size, alloc, free, cap
        if pool is None:
            return None, [health.missing_pool(name)]
        _layout, pool_health = zpool.get_layout(ctx.local, name)  # `zpool status -j --json-int -P`
    except Exception as exc:  # noqa: BLE001
        return None, [health.unknown("pool_state", f"cannot read pool {name}: {_why(exc)}")]
    return pool, health.pool_checks(pool_health, pool, now, thresholds, _created(ctx, name))


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
                      health.unknown("exports", f"cannot read LIO's exports: {_why(exc)}")]
    access = {"chap": "off (insecure_no_chap)" if cfg.insecure_no_chap else "per-host",
              "discovery": "closed" if closed else "open"}
    checks = [health.chap(not cfg.insecure_no_chap), health.discovery(closed),
              health.sessions({t: [index.name_of(i) for i in inits] for t, inits in acls.items()}, logged_in),
              health.foreign_acls({t: [i for i in inits if i not in index.hosts] for t, inits in acls.items()})]
    return {"published": published, "sessions": logged_in, "access": access,
            "warnings": access_warnings(access)}, checks


def collect(ctx, now: float | None = None) -> tuple[dict, list]:
    """(what `status --json` prints: the overall state, the plugin's line, every check, and the pool, published
    versions, sessions, access and access warnings; the checks as fabric_core.health.Check)."""
    cfg = ctx.config
    now = clock() if now is None else now
    pool, checks = read_pool(ctx, cfg.pool, now, cfg.health)
    exports, more = read_exports(ctx)
    checks += more
    return {"state": health.overall(checks).state, "summary": health.status_line(checks),
            "checks": [c.to_dict() for c in checks], "pool": pool, **exports}, checks


def access_warnings(access: dict) -> list[str]:
    """What an operator must know about how this node's exports are guarded."""
    out = []
    if access["chap"] != "per-host":
        out.append(health.NO_CHAP)
    if access["discovery"] != "closed":
        out.append(health.OPEN_DISCOVERY)
    return out


def _unreadable(ctx, args, exc: FabricError) -> int:
    """The configuration could not be loaded: UNKNOWN (exit 3), the error on stderr."""
    check = health.unknown("config", _why(exc))
    ctx.note(f"fabricctl: error: {exc}")
    if args.json:
        ctx.emit({"state": check.state, "summary": health.status_line([check]), "checks": [check.to_dict()]})
    else:
        print(health.status_line([check]))
    return check.code


def run(ctx, args) -> int:
    try:
        data, checks = collect(ctx)
    except FabricError as exc:  # the configuration (every source read after it is a check): UNKNOWN, not exit 1
        return _unreadable(ctx, args, exc)
    if args.json:
        ctx.emit(data)
        return health.exit_code(checks)
    print(data["summary"])
    for c in checks:
        print(f"{c.state:<8} {c.name:<13} {c.summary}")
    p = data["pool"]
    if p:
        print(f"pool {p['name']}: {p['health']}, {human_bytes(p['alloc'])} used of {human_bytes(p['size'])} "
              f"({p['cap']}%), {human_bytes(p['free'])} free")
    if data["published"]:
        print_rows([[x["ref"], ",".join(x["published_to"]) or "-", ",".join(x["holds"]) or "-"]
                     for x in data["published"]], ["VERSION", "PUBLISHED TO", "HOLDS"])
    elif data["access"] is not None:
        print("nothing published")
    for host, targets in data["sessions"].items():
        print(f"sessions of {host}: {len(targets)} ({', '.join(t.split(':', 1)[-1] for t in targets)})")
    if data["access"] is not None:
        print(f"access: CHAP {data['access']['chap']}, SendTargets discovery {data['access']['discovery']}")
    return health.exit_code(checks)
