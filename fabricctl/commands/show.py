"""One version in full: its provenance, sizes, where it is published and which storage nodes hold it.

Provenance is what the seal recorded on the snapshot: the message, the author, the parent version, the
ingest sources and the manifest's SHA-256. Sizes: the files and bytes its manifest lists, ZFS `referenced`
(all its blocks) and `written` (the blocks it wrote since its parent: what this version costs on its own).
GRANTED TO: the hosts with an ACL on its target; LOGGED IN: those with a session to it. NODES: this node
and every other storage node of the configuration that holds the same snapshot (the same GUID; asked over
their replica-serve; one that cannot be reached is named in a warning). NAME@TAG shows the version the
tag names now.

Examples:
  fabricctl show imagenet@v2
  fabricctl show imagenet@prod --json
"""

from __future__ import annotations

from fabric_core.base.names import parse_ref
from fabric_core.services import history

from .. import datasets
from ..output import human_bytes
from . import list_versions

PATH = ("show",)
HELP = "one version: provenance, sizes, tags, where it is published and held"
MUTATING = False  # read-only: no lock, no journal record


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the version (or NAME@TAG)")


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref)
    row = datasets.require_version(ctx, name, version)
    version = row["snapshot"]
    full = next(r for r in datasets.history_rows(ctx, name) if r["snapshot"] == version)
    tags = datasets.tags(ctx, name)
    out = history.entry(full, tags)
    export = datasets.export_of(ctx, row)
    index = ctx.publisher.index()
    target = ctx.publisher.settings.target_iqn(export)
    out.update(dataset=name, asked_as=args.ref, granted_to=index.published_to(export),
               logged_in=sorted(h for h, targets in index.sessions().items() if target in targets),
               target=target if index.exists(export) else None, mountpoint=export.mountpoint,
               holds=row.get("userrefs") or 0)
    listing = [{"name": name, "volume": datasets.volume(ctx.config, name), "versions": [{"version": version}]}]
    unreachable = list_versions.where(ctx, listing) if ctx.config.storage_nodes else {}
    out["nodes"] = listing[0]["versions"][0].get("nodes") or [ctx.config.node or "this node"]
    out["origin"] = listing[0].get("origin")
    for node, why in unreachable.items():
        ctx.note(f"fabricctl: warning: could not ask {node}: {why}")
    if args.json:
        ctx.emit(out)
        return 0
    lines = [("version", f"{name}@{version}" + (f" (tag {row['tag']})" if row.get("tag") else "")),
             ("tags", ", ".join(out["tags"]) or "-"), ("parent", out["parent"] or "-"),
             ("author", out["author"] or out["created_by"] or "-"), ("created", out["created_at"] or "-"),
             ("sources", "; ".join(out["sources"]) or "-"), ("manifest", out["manifest_sha256"] or "-"),
             ("files", f"{out['files'] or 0} ({human_bytes(out['bytes'] or 0)})"),
             ("referenced", human_bytes(out["referenced"] or 0)),
             ("written", f"{human_bytes(out['written'] or 0)} (this version's own, since its parent)"),
             ("granted to", ", ".join(out["granted_to"]) or "-"), ("logged in", ", ".join(out["logged_in"]) or "-"),
             ("nodes", ", ".join(out["nodes"]) + (f" (a replica from {out['origin']})" if out["origin"] else "")),
             ("holds", str(out["holds"]))]
    for key, value in lines:
        print(f"{key + ':':<12}{value}")
    if out["message"]:
        print()
        for line in out["message"].splitlines():
            print(f"    {line}")
    return 0
