"""Publish a sealed version read-only to GPU nodes: iSCSI export, login and mount on every host.

Steps, each convergent (a publish interrupted at any point is finished by running it again):
on this node, the version's snapshot device is made visible, the snapshot is held
(`zfs hold fabric:published`: it cannot be destroyed while exported) and an LIO target
exports it read-only with one ACL per host (and CHAP when the config has it). Then on every
host in parallel: iSCSI login, a read-only mount at MOUNT_ROOT/NAME/VERSION through a systemd
unit (back after a reboot), and an atomic switch of MOUNT_ROOT/NAME/current when this version
is newer than the one it points to. Hosts that fail are named with the reason (exit 3); the
others finish. Where this node's key runs only the hosts' node agent (ssh.access: agent, the default of
role fabric_node), the host side is the agent's own `fabric-node attach NAME@VERSION --holder manual` (with
`--current` when the version is the dataset's newest: one request a host; an older version's `current` is a
second request, only when the link is to move): nothing else runs there. With no key on the hosts
(ssh.access: none, pull only), publish grants the version and the hosts attach it themselves. Publishing again
to more hosts adds them; hosts already there are left as they are.

With --from-nodes, the version is served by several storage nodes at once: each named node must hold
the same snapshot (same GUID; `fabricctl replicate` copies it there) and exports it too (asked over its
restricted replica-serve key), and every host logs in to every node's portal. On the hosts (multipathd,
role iscsi_initiator) the paths are one disk, mounted once; reads go on over the others when a node
goes away. Publishing the same version on each node in turn does the same, one node at a time.

Examples:
  fabricctl publish imagenet@v1 --to gpu_nodes
  fabricctl publish imagenet@v2 --to gpu1,gpu2 --dry-run
  fabricctl publish imagenet@v3 --to gpu_nodes --from-nodes storage1,storage2
"""

from __future__ import annotations

from fabric_core.base.errors import UserError
from fabric_core.base.names import parse_ref

from .. import datasets, serving

PATH = ("publish",)
HELP = "export a sealed version read-only and mount it on GPU nodes"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the sealed version")
    p.add_argument("--to", required=True, metavar="GROUP|HOST,...", help="host groups and/or hosts from the config")
    p.add_argument("--from-nodes", metavar="NODE,...", help="storage nodes that serve it (this one among them; each "
                   "must hold the same snapshot): every host reads it over all of them (multipath)")


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref)
    hosts = ctx.config.resolve_targets(args.to)
    row, volume_row, listed = datasets.resolve(ctx, name, version)  # one listing of volumes and one of versions
    version = row["snapshot"]  # a tag resolved (datasets.require_version): the version it names now
    export = datasets.export_of(ctx, row, volume_row)
    created = {r["snapshot"]: r["creation"] for r in listed}
    pub = ctx.publisher
    peers = serving.named_peers(ctx, args.from_nodes, name, version) if args.from_nodes else []
    pull_only = ctx.config.ssh.access == "none"  # each host attaches it itself: granted, not published
    # the hosts' ACLs tagged as a publish's (`status` checks they stay logged in), unless pull only
    storage = pub.export(export, hosts, published=not pull_only)
    volume, names = datasets.volume(ctx.config, name), [h.name for h in hosts]
    # each other node exports it too, asked in requests of at most MAX_EXPORT_HOSTS hosts (serving.ask_each)
    answers, failed = serving.ask_each(
        ctx, peers, names, lambda peer, guid: ("replica-serve", peer.name, "export", volume, version, guid,
                                               *([] if pull_only else ["--published"]), *names),
        lambda peer, guid, chunk: peer.export(volume, version, guid, chunk, published=not pull_only))
    if failed:
        node, problem = next(iter(sorted(failed.items())))
        raise UserError(f"--from-nodes: {node} did not export {name}@{version}: {problem}",
                        f"fix {node} (the message says how) and publish again, or leave it out of --from-nodes; "
                        "what this node exported stays, and a second run converges")
    nodes = {node: got[0] for node, got in answers.items()}
    portals = [nodes[peer.name]["portal"] if peer.name in nodes else f"{peer.node.address}:3260" for peer, _g in peers]
    if pull_only:
        out = {"ref": f"{name}@{version}", "target": pub.settings.target_iqn(export), "dry_run": ctx.dry_run,
               "storage": storage, "hosts": {h.name: {"status": "granted"} for h in hosts},
               "mountpoint": export.mountpoint, "planned": ctx.planned(), "pull_only": True}
        ctx.report(out, f"{ctx.tense('would grant', 'granted')} {name}@{version} to {', '.join(h.name for h in hosts)}"
                   f" (pull only: each host attaches it with `fabric-node attach {name}@{version} --holder ...`)")
        return 0
    fan = ctx.fan(hosts, lambda host, step: pub.attach(export, host, step, created=created, portals=portals),
                  f"publish {name}@{version}", quiet=args.json)
    out = {"ref": f"{name}@{version}", "target": pub.settings.target_iqn(export), "dry_run": ctx.dry_run,
           "storage": storage, "hosts": fan.to_dict(), "mountpoint": export.mountpoint, "planned": ctx.planned()}
    if args.from_nodes:
        out["nodes"] = {ctx.config.node: {"portal": pub.settings.portal}, **nodes}
    for w in [] if args.json else storage["warnings"]:
        ctx.note("warning: " + w)
    ctx.report(out, f"{ctx.tense('would publish', 'published')} {name}@{version} read-only at {export.mountpoint} on "
               f"{', '.join(fan.ok_names) or 'no host'}")
    fan.raise_for_partial(f"publish {name}@{version}")
    return 0
