"""Replicate a sealed version (or every version of a dataset) to other storage nodes, with ZFS send/receive.

The first replication of a dataset sends its version whole; later ones send only what changed since the
newest version both nodes hold (an incremental send; its base is kept here as a bookmark, so it works
even after that version is destroyed here). The version's properties (its seal: note, manifest digest,
files, bytes) travel with it, and its manifest is inside its file system. On the target the volume is
read-only, marked with where it came from (fabric:origin), and owned by fabricctl there, so the version
can be published from it (`fabricctl publish` on that node). The same version keeps its GUID on every
node, which is how nodes agree that they hold the same bytes.

While a send runs, the snapshots are held on both nodes (fabric:sending here, fabric:receiving on the
base there); a replication cut short (killed, or the link dropped) leaves a resumable receive on the
target, and running the same command again resumes it where it stopped instead of starting over.

Refused, with what to do: an unknown node, a target without the space the send needs (estimated with
`zfs send -nP`), a version the target holds with another GUID (the two diverged; both GUIDs named), a
target volume with no version in common, and a target volume changed since the base (snapshots taken
or data written there by hand): --force rolls the target back to the base, discarding those changes
there (a held or published snapshot newer than the base makes the receive fail; nothing held is lost).

Storage nodes reach each other with their own fabricctl keys, authorized on the others only for
`fabricctl replica-serve` (role fabricctl).

Examples:
  fabricctl replicate imagenet@v2 --to storage2
  fabricctl replicate imagenet --all --to storage2,storage3 --limit 200M
  fabricctl replicate imagenet@v2 --to storage2 --dry-run --json
"""

from __future__ import annotations

from fabric_core.base.errors import UserError
from fabric_core.base.names import parse_ref
from fabric_core.storage import zfs

from .. import datasets, replication
from ..output import human_bytes, print_rows

PATH = ("replicate",)
HELP = "copy a version (or --all) to other storage nodes with ZFS send/receive, incrementally, resumably"
MUTATING = True
NODE_LOCK = False  # hours of sending: the volume's lock, shared (a snapshot, publish or grant goes on)


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("dataset", parse_ref(args.ref, version_required=False)[0], True)]


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the sealed version (NAME alone with --all)")
    p.add_argument("--to", required=True, metavar="NODE,...", help="storage nodes (from the inventory's "
                   "storage_nodes group)")
    p.add_argument("--all", action="store_true", help="every sealed version of the dataset, oldest first")
    configure_common(p)


def configure_common(p) -> None:
    p.add_argument("--force", action="store_true", help="roll a target changed since the base back to it "
                   "(discarding what was changed there by hand)")
    p.add_argument("--limit", metavar="RATE", help="bandwidth limit per transfer in bytes per second, "
                   "with a unit: 100M, 1G (default: none)")


def limit_of(args) -> int:
    if not args.limit:
        return 0
    rate = zfs.parse_size(args.limit)
    if rate < 1 << 20:
        raise UserError(f"--limit {args.limit} is below 1 MiB/s", "give a rate such as 50M or 1G (bytes per second)")
    return rate


def nodes_of(spec: str) -> list[str]:
    names = [n.strip() for n in (spec or "").split(",") if n.strip()]
    if not names:
        raise UserError("no storage node given", "name one, for example `--to storage2`")
    return list(dict.fromkeys(names))


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref, version_required=not args.all)
    if args.all and version:
        raise UserError(f"--all replicates every version of {name}; {args.ref} names one",
                        f"give `{name} --all`, or drop --all")
    rows = datasets.sealed(ctx, name)
    if version:
        version = datasets.require_version(ctx, name, version)["snapshot"]  # a tag: the version it names
    else:
        datasets.require(ctx, name)
    wanted = replication.wanted_versions(rows, version, args.all)
    if not wanted:
        raise UserError(f"{name} has no sealed version", f"seal one first: `fabricctl dataset seal {name} v1`")
    results = replication.replicate_to(ctx, datasets.volume(ctx.config, name), wanted, nodes_of(args.to),
                                       force=args.force, limit=limit_of(args), label=name)
    return report(ctx, args.ref, results)


def report(ctx, ref: str, results: list[dict]) -> int:
    out = {"ref": ref, "dry_run": ctx.dry_run, "nodes": results, "planned": ctx.planned()}
    if ctx.json:
        ctx.emit(out)
        return 0
    rows = []
    for r in results:
        for t in r["transfers"]:
            rows.append([r["node"], t["snapshot"], t["kind"] + (" (--force)" if t["force"] else ""),
                         (t["base"] or "-"), human_bytes(t["estimated_bytes"]),
                         "-" if ctx.dry_run else human_bytes(t["sent_bytes"])])
        for snap in r["present"]:
            rows.append([r["node"], snap, "present already", "-", "-", "-"])
        for note in r["notes"]:
            ctx.note(f"fabricctl: {note}")
    print_rows(rows, ["NODE", "VERSION", "TRANSFER", "BASE", "ESTIMATE", "SENT"])
    print(f"{ctx.tense('would replicate', 'replicated')} {ref} to {', '.join(r['node'] for r in results)}")
    return 0
