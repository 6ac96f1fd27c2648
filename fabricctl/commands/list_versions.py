"""List datasets and their sealed versions, with metadata and where each version is published.

With --nodes, also where each version lives: this node and every other storage node (the configuration's
storage_nodes, asked over their replica-serve) that holds the same snapshot (the same GUID), and for a
replica the node it came from (fabric:origin). A node that cannot be reached is named in a warning; the
listing goes on.

Each version names the hosts it is granted (published) to and those attached to it now (logged in to its
target here). With --holders, also who holds it on each host (asked of each host's node agent: `manual` for an
operator's publish, `job:<id>` for a scheduler's job).

With --paths, also how many paths each host that has a version reads it over, and how many are up
(asked on the hosts): a version published from several storage nodes is one multipath map there
(`2/2` both up, `1/2` one storage node's path down); a plain disk has one path per session.

Examples:
  fabricctl list
  fabricctl list imagenet --json
  fabricctl list --nodes --paths
  fabricctl list imagenet --holders
"""

from __future__ import annotations

from fabric_core.base.names import validate_fabric_name
from fabric_core.services import replicate

from .. import datasets, readings, replication
from ..output import human_bytes, print_rows

PATH = ("list",)
HELP = "list datasets and versions (--json for scripts)"
MUTATING = False  # read-only: no node lock, no journal record


def configure(p) -> None:
    p.add_argument("name", metavar="NAME", nargs="?", help="only this dataset")
    p.add_argument("--nodes", action="store_true", help="also which storage nodes hold each version (asks them)")
    p.add_argument("--paths", action="store_true", help="also the paths up per host and version (asks the hosts)")
    p.add_argument("--holders", action="store_true", help="also who holds each version on each host (asks each "
                   "host's node agent)")


def collect(ctx, name: str | None = None, nodes: bool = False, paths: bool = False, holders: bool = False) -> dict:
    cfg = ctx.config
    vols = datasets.all_volumes(ctx)
    if name is not None:
        datasets.require(ctx, validate_fabric_name(name))
    index = ctx.publisher.index()
    sessions = index.sessions()  # host (or initiator) -> the targets it is logged in to here
    listing = []
    for dname, vol in sorted(vols.items()):
        if name is not None and dname != name:
            continue
        rows = []
        for r in datasets.sealed(ctx, dname):
            export = datasets.export_of(ctx, r)
            rows.append({"version": r["snapshot"], "snapshot": r["name"], "created_at": r.get("fabric:created-at"),
                         "created_by": r.get("fabric:created-by"), "note": r.get("fabric:note"),
                         "files": r.get("fabric:files"), "bytes": r.get("fabric:bytes"),
                         "manifest_sha256": r.get("fabric:manifest-sha256"), "holds": r.get("userrefs") or 0,
                         "published_to": index.published_to(export), "used": r.get("used"),
                         "attached": sorted(h for h, targets in sessions.items()
                                            if ctx.publisher.settings.target_iqn(export) in targets)})
        listing.append({"name": dname, "volume": vol["name"], "size": vol.get("volsize"), "fs": vol.get("fabric:fs"),
                        "staging": datasets.staging_dir(cfg, dname), "versions": rows})
    out = {"datasets": listing}
    if nodes:
        out["unreachable"] = where(ctx, listing)
    if paths:
        out.setdefault("unreachable", {}).update(paths_of(ctx, listing))
    if holders:
        out.setdefault("unreachable", {}).update(holders_of(ctx, listing))
    return out


def holders_of(ctx, listing: list[dict]) -> dict[str, str]:
    """Fill in each version's ``holders`` ({host: [holder]}), asking the node agent of every host a version is
    published to (`fabric-node list`); returns {host: why} of the hosts that could not be asked."""
    names = sorted({h for d in listing for v in d["versions"] for h in v["published_to"] if h in ctx.config.hosts})
    if ctx.config.ssh.access != "agent":
        for d in listing:
            for v in d["versions"]:
                v["holders"] = {}
        return {h: "this node's key does not ask the node agent (ssh.access is not agent)" for h in names}
    fan = ctx.fan([ctx.config.hosts[h] for h in names], lambda host, step: ctx.agent(host).list(), "holders",
                  quiet=True)
    found = {h: {a["ref"]: [x["holder"] for x in a["holders"]] for a in res["attachments"]}
             for h, res in fan.values.items()}
    for d in listing:
        for v in d["versions"]:
            ref = f"{d['name']}@{v['version']}"
            v["holders"] = {h: found[h][ref] for h in sorted(found) if ref in found[h]}
    return {o.name: getattr(o.error, "problem", None) or str(o.error) for o in fan.outcomes if o.status != "ok"}


def paths_of(ctx, listing: list[dict]) -> dict[str, str]:
    """Fill in each version's ``paths`` ({host: {multipath, up, paths}}), asking every host it is published to
    (readings.host_paths); returns {host: why} of the hosts that could not be asked."""
    found, unreachable = readings.host_paths(ctx, [(d["name"], v["version"], v["published_to"])
                                                   for d in listing for v in d["versions"]])
    for d in listing:
        for v in d["versions"]:
            ref = f"{d['name']}@{v['version']}"
            v["paths"] = {h: found[h][ref] for h in v["published_to"] if ref in found.get(h, {})}
    return unreachable


def where(ctx, listing: list[dict]) -> dict[str, str]:
    """Fill in each version's ``nodes`` (this node and the storage nodes holding the same GUID) and each
    dataset's ``origin``; returns {node: why} of the storage nodes that could not be asked."""
    cfg = ctx.config
    peers = [replication.Peer(n, cfg.ssh) for _name, n in sorted(cfg.storage_nodes.items())]
    unreachable: dict[str, str] = {}
    for d in listing:
        here = replicate.read_side(ctx.local, d["volume"])
        d["origin"] = here.origin or None
        held = {p.guid: [cfg.node or "this node"] for p in here.snapshots}
        for peer in peers:
            if peer.name in unreachable:
                continue
            try:
                there = peer.state(d["volume"])
            except replication.PeerError as exc:
                unreachable[peer.name] = exc.problem
                continue
            for p in there.snapshots:
                if p.guid in held:
                    held[p.guid].append(peer.name)
        guid_of = here.guids
        for v in d["versions"]:
            v["nodes"] = held.get(guid_of.get(v["version"], ""), [])
    return unreachable


def run(ctx, args) -> int:
    data = collect(ctx, args.name, args.nodes, args.paths, args.holders)
    for node, why in data.get("unreachable", {}).items():
        ctx.note(f"fabricctl: warning: could not ask {node}: {why}")
    if args.json:
        ctx.emit(data)
        return 0
    rows = []
    for d in data["datasets"]:
        if not d["versions"]:
            rows.append([d["name"], "(staging only)", "", "", "", "", ""])
        for v in d["versions"]:
            rows.append([d["name"], v["version"], v["created_at"] or "", str(v["files"] or 0),
                         human_bytes(v["bytes"] or 0), ",".join(v["published_to"]) or "-", v["note"] or "",
                         *([",".join(v["nodes"])] if args.nodes else []),
                         *([", ".join(f"{h} {p['up']}/{p['paths']}" for h, p in v["paths"].items()) or "-"]
                           if args.paths else []),
                         *(["; ".join(f"{h}: {','.join(x)}" for h, x in v["holders"].items()) or "-"]
                           if args.holders else [])])
    if not rows:
        print("no datasets yet: `fabricctl dataset create NAME --size SIZE`")
        return 0
    print_rows(rows, ["DATASET", "VERSION", "CREATED", "FILES", "BYTES", "PUBLISHED TO", "NOTE",
                      *(["NODES"] if args.nodes else []), *(["PATHS UP"] if args.paths else []),
                      *(["HOLDERS"] if args.holders else [])])
    for d in data["datasets"]:
        if d.get("origin"):
            print(f"{d['name']}: a replica from {d['origin']}")
    return 0
