"""Take a published version off GPU nodes: unmount, log out, remove their ACLs; then target and hold.

By default from every host it is published to, or only --from the given hosts. Before anything
changes, every host is asked whether a process still uses the mount: if one does, nothing is
changed and the host and process are named (`--force` unmounts anyway, lazily; the process then
gets I/O errors). Each host that let go loses its ACL (and mapped LUN) on this node in the same
command, so it cannot log in again; a host that could not be reached keeps its ACL (run again),
unless --force, which cuts it off. ACLs of hosts no longer in the configuration are removed too.
The JSON result names what was revoked. When the last host is gone, the LIO target and its
backstore are removed and the snapshot's hold is released. If /datasets/NAME/current pointed at
this version, it moves to the newest version still published to that host (or is removed).

Examples:
  fabricctl unpublish imagenet@v1
  fabricctl unpublish imagenet@v1 --from gpu2 --dry-run
"""

from __future__ import annotations

from fabric_core.base.errors import Busy
from fabric_core.base.names import parse_ref
from fabric_core.services import publish

from .. import datasets

PATH = ("unpublish",)
HELP = "unmount and un-export a published version"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the published version")
    p.add_argument("--from", dest="from_", metavar="GROUP|HOST,...", help="only these hosts (default: all)")
    p.add_argument("--force", action="store_true", help="unmount even while processes use the mount")


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref)
    row, _volume_row, listed = datasets.resolve(ctx, name, version)
    version = row["snapshot"]  # a tag resolved (datasets.require_version): the version it names now
    export = datasets.export_of(ctx, row)
    pub = ctx.publisher
    index = pub.index()
    published, foreign = index.hosts_of(export)
    acl_inits = index.initiators(export)
    hosts = ctx.config.resolve_targets(args.from_) if args.from_ else published
    created = {r["snapshot"]: r["creation"] for r in listed}

    if not args.force:
        checked = ctx.fan(hosts, lambda host, step: pub.in_use(export, host, step), "check", quiet=True)
        busy = {h: users for h, users in checked.values.items() if users}
        if busy:
            raise Busy(f"{name}@{version} is in use: " + "; ".join(f"{h}: {', '.join(u)}" for h, u in busy.items()),
                       "stop those processes and run again, or pass --force (they get I/O errors)")

    fan = ctx.fan(hosts, lambda host, step: pub.detach(export, host, step, force=args.force, index=index,
                                                       created=created),
                  f"unpublish {name}@{version}", quiet=args.json)
    gone = frozenset(h.initiator for h in hosts if h.name in fan.ok_names)
    # the hosts that let go lose their ACLs (a failed one too with --force); those no longer configured always
    remaining = [i for i in publish.staying(acl_inits, hosts, fan.ok_names, force=args.force) if i not in foreign]
    storage = {"acls_left": [index.name_of(i) for i in remaining],
               **pub.withdraw(export, remaining, force=args.force, detached=gone)}
    out = {"ref": f"{name}@{version}", "dry_run": ctx.dry_run, "hosts": fan.to_dict(), "storage": storage,
           "foreign_acls": foreign}
    revoked = f"; {ctx.tense('would revoke', 'revoked')} {', '.join(storage['revoked'])}" if storage["revoked"] else ""
    ctx.report(out, f"{ctx.tense('would unpublish', 'unpublished')} {name}@{version} from "
               f"{', '.join(fan.ok_names) or 'no host'}" + revoked
               + ("; target removed, hold released" if not remaining else f"; still published to {len(remaining)}"))
    fan.raise_for_partial(f"unpublish {name}@{version}")
    return 0
