"""The fabric as this storage node sees it: pool health and capacity, published versions with
their holds, the iSCSI sessions of each host, and how access is guarded (per-host CHAP, SendTargets
discovery closed). It warns when exports go without CHAP (insecure_no_chap) or discovery is open.

Examples:
  fabricctl status
  fabricctl status --json
"""

from __future__ import annotations

from fabric_core import lzc, zpool
from fabric_core.errors import NotFound

from .. import datasets
from ..output import human_bytes, print_rows

PATH = ("status",)
HELP = "pool health, published versions, holds and sessions (--json for scripts)"
MUTATING = False  # read-only: no node lock, no journal record


def configure(p) -> None:
    """Only the options every command has (--json)."""


def collect(ctx) -> dict:
    cfg = ctx.config
    pool = zpool.pool_exists(ctx.local, cfg.pool)  # `zpool list -j --json-int`: name, size, alloc, free, cap, health
    if pool is None:
        raise NotFound(f"pool {cfg.pool} (`pool:` in the fabricctl configuration) is not imported on this node",
                       f"check the name with `zpool list`, or import it: `zpool import {cfg.pool}`")
    pub = ctx.publisher
    index = pub.index()
    published = []
    for r in datasets.sealed(ctx):
        export = datasets.export_of(ctx, r)
        to = index.published_to(export)
        holds = lzc.holds(r["name"]) if r.get("userrefs") else []
        if to or holds:
            published.append({"ref": f"{r['name_short']}@{r['snapshot']}", "target": pub.settings.target_iqn(export),
                              "published_to": to, "holds": holds})
    access = {"chap": "off (insecure_no_chap)" if cfg.insecure_no_chap else "per-host",
              "discovery": "closed" if index.discovery_closed() else "open"}
    return {"pool": pool, "published": published,
            "sessions": {h: sorted(t) for h, t in sorted(index.sessions().items())},
            "access": access, "warnings": access_warnings(access)}


def access_warnings(access: dict) -> list[str]:
    """What an operator must know about how this node's exports are guarded."""
    out = []
    if access["chap"] != "per-host":
        out.append("exports have no CHAP (insecure_no_chap: true): any host on the storage network that sets "
                   "another's initiator name gets its exports, its writable checkpoint volumes included; only for "
                   "an isolated lab (fabric_insecure_no_chap in the inventory)")
    if access["discovery"] != "closed":
        out.append("SendTargets discovery is open on this node: any host on the storage network can list target "
                   "names; the next publish (or playbooks/site.yml) closes it")
    return out


def run(ctx, args) -> int:
    data = collect(ctx)
    for warning in data["warnings"]:
        ctx.note(f"fabricctl: warning: {warning}")
    if args.json:
        ctx.emit(data)
        return 0
    p = data["pool"]
    print(f"pool {p['name']}: {p['health']}, {human_bytes(p['alloc'])} used of {human_bytes(p['size'])} "
          f"({p['cap']}%), {human_bytes(p['free'])} free")
    if data["published"]:
        print_rows([[x["ref"], ",".join(x["published_to"]) or "-", ",".join(x["holds"]) or "-"]
                     for x in data["published"]], ["VERSION", "PUBLISHED TO", "HOLDS"])
    else:
        print("nothing published")
    for host, targets in data["sessions"].items():
        print(f"sessions of {host}: {len(targets)} ({', '.join(t.split(':', 1)[-1] for t in targets)})")
    print(f"access: CHAP {data['access']['chap']}, SendTargets discovery {data['access']['discovery']}")
    return 0
