"""Take a grant back: the hosts' ACLs on the version are removed on this node and on every other storage node
holding it, so they can no longer log in to it; with the last host the export goes (target, backstore, hold).

Revoking a host that is logged in to the version (a live session: a job of it reads the version, or an operator
attached it) is refused, naming it: detach it there first (the job ends, `fabricctl unpublish`, or
`fabric-node detach` on the host). --force cuts it off instead: its ACL goes at once, and the reads on that
host fail with I/O errors until it detaches. A host that was never granted the version is named and skipped.

Examples:
  fabricctl revoke imagenet@v3 --from gpu7
  fabricctl revoke imagenet@v3 --from gpu_nodes --dry-run
  fabricctl revoke imagenet@v3 --from gpu7 --force
"""

from __future__ import annotations

from fabric_core.base.names import parse_ref
from fabric_core.services.grants import Grants

from .. import datasets, serving
from ..errors import PartialFailure

PATH = ("revoke",)
HELP = "take a grant back from GPU nodes (refused while one is logged in, unless --force)"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the granted version (or NAME@TAG)")
    p.add_argument("--from", dest="from_", required=True, metavar="GROUP|HOST,...",
                   help="the host groups and/or hosts whose grant goes")
    p.add_argument("--from-nodes", metavar="NODE,...", help="the storage nodes that revoke it (this one among "
                   "them); default: this node and every other one holding it")
    p.add_argument("--force", action="store_true", help="revoke a host even while it is logged in to the version "
                   "(its session is cut off: reads there fail with I/O errors until it detaches)")


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref)
    hosts = ctx.config.resolve_targets(args.from_)
    row = datasets.require_version(ctx, name, version)
    version = row["snapshot"]  # a tag resolved: the version it names now
    export = datasets.export_of(ctx, row)
    peers, unreachable = serving.peers(ctx, args.from_nodes, name, version)
    here = Grants(ctx.publisher).revoke(export, hosts, force=args.force)
    nodes = {ctx.config.node or "this node": here}
    names = [h.name for h in hosts]
    volume = datasets.volume(ctx.config, name)
    force = ["--force"] if args.force else []
    answered, failed = serving.ask_each(
        ctx, peers, names, lambda peer, _guid: ("replica-serve", peer.name, "revoke", volume, version, *force, *names),
        lambda peer, _guid, chunk: peer.revoke(volume, version, chunk, force=args.force))
    for peer, answers in answered.items():
        nodes[peer] = {"revoked": sorted(n for a in answers for n in a["storage"]["revoked"]),
                       "withdrawn": any(a["storage"]["withdrawn"] for a in answers)}
    failed = {**unreachable, **failed}
    out = {"ref": f"{name}@{version}", "target": here["target"], "dry_run": ctx.dry_run, "hosts": names,
           "nodes": nodes, "unreachable": failed, "planned": ctx.planned()}
    for node, why in failed.items():
        ctx.note(f"fabricctl: warning: {node} did not revoke it: {why}")
    if here["not_granted"] and not args.json:
        ctx.note(f"fabricctl: {', '.join(here['not_granted'])} had no grant of {name}@{version} here")
    ctx.report(out, f"{ctx.tense('would revoke', 'revoked')} {name}@{version} from "
               f"{', '.join(here['revoked']) or 'no host'} on {', '.join(nodes)}"
               + ("; the export is withdrawn (no host left)" if here["withdrawn"] else ""))
    if failed:
        raise PartialFailure(f"revoke {name}@{version}: {', '.join(failed)} did not revoke it",
                             "check those storage nodes, then revoke again: until then the hosts can still log in "
                             "there")
    return 0
