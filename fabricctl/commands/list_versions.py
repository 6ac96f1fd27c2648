"""List datasets and their sealed versions, with metadata and where each version is published.

Examples:
  fabricctl list
  fabricctl list imagenet --json
"""

from __future__ import annotations

from fabric_core.names import validate_fabric_name

from .. import datasets
from ..output import human_bytes, print_rows

PATH = ("list",)
HELP = "list datasets and versions (--json for scripts)"
MUTATING = False  # read-only: no node lock, no journal record


def configure(p) -> None:
    p.add_argument("name", metavar="NAME", nargs="?", help="only this dataset")


def collect(ctx, name: str | None = None) -> dict:
    cfg = ctx.config
    vols = datasets.all_volumes(ctx)
    if name is not None:
        datasets.require(ctx, validate_fabric_name(name))
    index = ctx.publisher.index()
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
                         "published_to": index.published_to(export), "used": r.get("used")})
        listing.append({"name": dname, "volume": vol["name"], "size": vol.get("volsize"), "fs": vol.get("fabric:fs"),
                        "staging": datasets.staging_dir(cfg, dname), "versions": rows})
    return {"datasets": listing}


def run(ctx, args) -> int:
    data = collect(ctx, args.name)
    if args.json:
        ctx.emit(data)
        return 0
    rows = []
    for d in data["datasets"]:
        if not d["versions"]:
            rows.append([d["name"], "(staging only)", "", "", "", "", ""])
        for v in d["versions"]:
            rows.append([d["name"], v["version"], v["created_at"] or "", str(v["files"] or 0),
                         human_bytes(v["bytes"] or 0), ",".join(v["published_to"]) or "-", v["note"] or ""])
    if not rows:
        print("no datasets yet: `fabricctl dataset create NAME --size SIZE`")
        return 0
    print_rows(rows, ["DATASET", "VERSION", "CREATED", "FILES", "BYTES", "PUBLISHED TO", "NOTE"])
    return 0
