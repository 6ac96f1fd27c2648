"""Grant a sealed version to GPU nodes: they may attach it themselves (fabric-node attach), nobody logs them in.

The version is exported on this node when it is not yet (snapshot device, hold, read-only LIO target, as
publish does) and every host gets an ACL with its own CHAP credentials and the version's LUN mapped read-only;
the hosts are not contacted. Every other storage node of the configuration that holds the same snapshot (the
same GUID) grants it too (asked over its restricted replica-serve key), so a host attaches it from all of them
(one multipath map); --from-nodes names the nodes instead (this one among them), as publish's does. Granting
again to more hosts adds them; a host granted already keeps its ACL (and gets its current CHAP secret).

Hundreds of hosts cost one read of the target's ACL names in configfs, one ACL with its mapped LUN and CHAP per
new host, and one save of LIO's configuration: no read of the whole of LIO per host.

Examples:
  fabricctl grant imagenet@v3 --to gpu_nodes
  fabricctl grant imagenet@v3 --to gpu7 --dry-run
  fabricctl grant imagenet@v3 --to gpu_nodes --from-nodes storage1,storage2
"""

from __future__ import annotations

from fabric_core.base.names import parse_ref
from fabric_core.services.grants import Grants

from .. import datasets, serving
from ..errors import PartialFailure

PATH = ("grant",)
HELP = "let GPU nodes attach a sealed version (ACLs with their own CHAP; hosts not contacted)"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the sealed version (or NAME@TAG)")
    p.add_argument("--to", required=True, metavar="GROUP|HOST,...", help="host groups and/or hosts from the config")
    p.add_argument("--from-nodes", metavar="NODE,...", help="the storage nodes that grant it (this one among them; "
                   "each must hold the same snapshot); default: this node and every other one holding it")


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref)
    hosts = ctx.config.resolve_targets(args.to)
    row, volume_row, _listed = datasets.resolve(ctx, name, version)
    version = row["snapshot"]  # a tag resolved: the version it names now
    export = datasets.export_of(ctx, row, volume_row)
    peers, unreachable = serving.peers(ctx, args.from_nodes, name, version)
    here = Grants(ctx.publisher).grant(export, hosts)
    nodes = {ctx.config.node or "this node": here}
    names = [h.name for h in hosts]
    volume = datasets.volume(ctx.config, name)
    answered, failed = serving.ask_each(
        ctx, peers, names, lambda peer, guid: ("replica-serve", peer.name, "export", volume, version, guid, *names),
        lambda peer, guid, chunk: peer.export(volume, version, guid, chunk))
    for peer, answers in answered.items():
        nodes[peer] = {"portal": answers[0]["portal"], "target": answers[0]["target"],
                       "new": sorted(n for a in answers for n in a["storage"].get("new", []))}
    failed = {**unreachable, **failed}
    out = {"ref": f"{name}@{version}", "target": here["target"], "dry_run": ctx.dry_run,
           "hosts": names, "nodes": nodes, "unreachable": failed, "planned": ctx.planned()}
    if version != parse_ref(args.ref)[1]:
        out["tag"] = parse_ref(args.ref)[1]
    for node, why in failed.items():
        ctx.note(f"fabricctl: warning: {node} did not grant it: {why}")
    new = here["new"]
    ctx.report(out, f"{ctx.tense('would grant', 'granted')} {name}@{version} to {len(hosts)} host(s) on "
               f"{', '.join(nodes)} ({len(new)} new here"
               + (f", {len(here['refreshed'])} with their CHAP set again" if here["refreshed"] else "")
               + (f", {len(here['already'])} had it" if here["already"] else "") + "); each attaches it with "
               f"`fabric-node attach {name}@{version} --holder ...`")
    if failed:
        raise PartialFailure(f"grant {name}@{version}: {', '.join(failed)} did not grant it",
                             "check those storage nodes, then grant again (hosts granted already are kept)")
    return 0
