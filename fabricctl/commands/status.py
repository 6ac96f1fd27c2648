"""The fabric as this storage node sees it, as a health check: pool state, device errors, data errors, the
last scrub and capacity (thresholds: `health:` in the configuration), how access is guarded (per-host CHAP,
SendTargets discovery closed), hosts with an ACL but no session, ACLs of unknown initiators; then the
published versions with their holds and the iSCSI sessions of each host. With --paths, the hosts are
asked too: a version a host reads over no path is CRITICAL, one with a path down (a multipath map short of
one of the storage nodes serving it) WARNING. With --writers, each checkpoint writer is asked too: a
checkpoint volume held frozen (its writes wait) is WARNING, past its safety timer CRITICAL; tasks waiting
as writes to a frozen file system do, with nothing frozen by fabricctl, WARNING. A monitoring check on a
storage node runs `fabricctl status --paths --writers`.

The first line is a monitoring plugin's (Nagios, Icinga, Checkmk, ...): FABRIC STATE - why | perfdata.
The exit status is the worst check's, by the monitoring-plugin convention: 0 OK, 1 WARNING, 2 CRITICAL,
3 UNKNOWN (a source or the configuration could not be read). See docs/fabricctl.md.

Examples:
  fabricctl status
  fabricctl status --json
  fabricctl status >/dev/null || echo "fabric needs attention (exit $?)"
  fabricctl status --paths
  fabricctl status --paths --writers
"""

from __future__ import annotations

import time

from fabric_core.base.errors import FabricError
from fabric_core.services import health

from .. import readings
from ..output import human_bytes, print_rows

PATH = ("status",)
HELP = "health checks (exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN), published versions, holds and sessions"
MUTATING = False  # read-only: no node lock, no journal record

clock = time.time  # the checks' clock (tests set it)


def configure(p) -> None:
    p.add_argument("--paths", action="store_true", help="also ask the hosts how many paths of each version are up")
    p.add_argument("--writers", action="store_true", help="also ask each checkpoint writer whether fabricctl holds "
                   "its checkpoint volume frozen, and whether tasks there wait for a frozen file system")


def collect(ctx, now: float | None = None, paths: bool = False, writers: bool = False) -> tuple[dict, list]:
    """(what `status --json` prints: the overall state, the plugin's line, every check, and the pool, published
    versions, sessions, access and access warnings; the checks as fabric_core.services.health.Check). ``paths`` and
    ``writers`` add the checks that ask hosts (--paths, --writers)."""
    now = clock() if now is None else now
    reading = readings.read(ctx, now)
    checks = list(reading.checks)
    if paths:
        checks.append(path_check(ctx, reading.exports.get("published") or []))
    if writers:
        checks.append(health.writers(*readings.writer_states(ctx)))
    return {"state": health.overall(checks).state, "summary": health.status_line(checks),
            "checks": [c.to_dict() for c in checks], "pool": reading.pool.row, **reading.exports}, checks


access_warnings = readings.access_warnings  # what an operator must know about how this node's exports are guarded


def _unreadable(ctx, args, exc: FabricError) -> int:
    """The configuration could not be loaded: UNKNOWN (exit 3), the error on stderr."""
    check = health.unknown("config", readings.why(exc))
    ctx.note(f"fabricctl: error: {exc}")
    if args.json:
        ctx.emit({"state": check.state, "summary": health.status_line([check]), "checks": [check.to_dict()]})
    else:
        print(health.status_line([check]))
    return check.code


def path_check(ctx, published: list[dict]):
    """The paths check: every host a version is published to, asked how many of its paths are up."""
    return health.paths(*readings.host_paths(ctx, [(*x["ref"].split("@", 1), x["published_to"]) for x in published]))


def run(ctx, args) -> int:
    try:
        data, checks = collect(ctx, paths=args.paths, writers=args.writers)
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
