"""The history of a dataset, newest first: each version with its parent, author, message, size and tags.

Read from one listing of the dataset's versions (their provenance is on each snapshot, set when it was
sealed) and the dataset's tags (its staging volume's fabric:tag:* properties). SIZE is the bytes of the
version's files; WRITTEN what the version wrote since the one before it (ZFS `written`: what it costs on
its own). A tag naming a version no longer on this node is named in a warning.

Examples:
  fabricctl log imagenet
  fabricctl log imagenet --json
"""

from __future__ import annotations

from fabric_core.base.names import validate_fabric_name
from fabric_core.services import history

from .. import datasets
from ..output import human_bytes, print_rows

PATH = ("log",)
HELP = "the history of a dataset: versions newest first, parents, messages, sizes, tags"
MUTATING = False  # read-only: no lock, no journal record


def configure(p) -> None:
    p.add_argument("name", metavar="NAME", help="the dataset")


def run(ctx, args) -> int:
    name = validate_fabric_name(args.name)
    datasets.require(ctx, name)  # an unknown dataset: NotFound naming the datasets there are
    rows = datasets.history_rows(ctx, name)
    tags = datasets.tags(ctx, name)
    entries = history.log(rows, tags)
    stale = history.dangling(tags, [r["snapshot"] for r in rows])
    for tag, version in sorted(stale.items()):
        ctx.note(f"fabricctl: warning: tag {name}@{tag} names {version}, which is not on this node")
    if args.json:
        ctx.emit({"dataset": name, "versions": entries, "tags": tags, "dangling_tags": stale})
        return 0
    if not entries:
        print(f"{name}: no version sealed yet: `fabricctl dataset seal {name} v1 -m MESSAGE`")
        return 0
    print_rows([[e["version"], ",".join(e["tags"]) or "-", e["parent"] or "-", e["created_at"] or "",
                 e["author"] or e["created_by"] or "", str(e["files"] or 0), human_bytes(e["bytes"] or 0),
                 human_bytes(e["written"] or 0), (e["message"] or "").splitlines()[0] if e["message"] else ""]
                for e in entries],
               ["VERSION", "TAGS", "PARENT", "CREATED", "AUTHOR", "FILES", "SIZE", "WRITTEN", "MESSAGE"])
    return 0
