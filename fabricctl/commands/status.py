"""The fabric as this storage node sees it: pool health and capacity, published versions with
their holds, and the iSCSI sessions of each host.

Examples:
  fabricctl status
  fabricctl status --json
"""

from __future__ import annotations

from fabric_core import lio, lzc, zpool
from fabric_core.errors import NotFound

from .. import common
from ..main import command_main
from ..output import human_bytes

PATH = ("status",)
HELP = "pool health, published versions, holds and sessions (--json for scripts)"
MUTATING = False  # read-only: no node lock, no journal record


def configure(p) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def collect(ctx) -> dict:
    cfg = ctx.config
    pool = zpool.pool_exists(ctx.local, cfg.pool)  # `zpool list -j --json-int`: name, size, alloc, free, cap, health
    if pool is None:
        raise NotFound(f"pool {cfg.pool} (`pool:` in the fabricctl configuration) is not imported on this node",
                       f"check the name with `zpool list`, or import it: `zpool import {cfg.pool}`")
    live = lio.read_live()
    by_init = common.host_by_initiator(cfg)
    sessions: dict = {}
    for s in live["sessions"]:
        host = by_init[s["initiator"]].name if s["initiator"] in by_init else s["initiator"]
        sessions.setdefault(host, []).append(s["target"])
    published = []
    for r in common.dataset_versions(ctx):
        export = common.export_of(ctx, r["name_short"], r["snapshot"], r.get("fabric:fs") or "ext4")
        to = common.published_to(cfg, live, export)
        holds = lzc.holds(r["name"]) if r.get("userrefs") else []
        if to or holds:
            published.append({"ref": f"{r['name_short']}@{r['snapshot']}", "target": export.target_iqn(cfg.iqn_base),
                              "published_to": to, "holds": holds})
    return {"pool": pool, "published": published,
            "sessions": {h: sorted(t) for h, t in sorted(sessions.items())}}


def run(ctx, args) -> int:
    data = collect(ctx)
    if args.json:
        ctx.emit(data)
        return 0
    p = data["pool"]
    print(f"pool {p['name']}: {p['health']}, {human_bytes(p['alloc'])} used of {human_bytes(p['size'])} "
          f"({p['cap']}%), {human_bytes(p['free'])} free")
    if data["published"]:
        common.table([[x["ref"], ",".join(x["published_to"]) or "-", ",".join(x["holds"]) or "-"]
                     for x in data["published"]], ["VERSION", "PUBLISHED TO", "HOLDS"])
    else:
        print("nothing published")
    for host, targets in data["sessions"].items():
        print(f"sessions of {host}: {len(targets)} ({', '.join(t.split(':', 1)[-1] for t in targets)})")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_main(PATH, argv)
