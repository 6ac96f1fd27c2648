"""Take a published version off GPU nodes: unmount, log out, remove ACLs; then target and hold.

By default from every host it is published to, or only --from the given hosts. Before anything
changes, every host is asked whether a process still uses the mount: if one does, nothing is
changed and the host and process are named (`--force` unmounts anyway, lazily; the process then
gets I/O errors). When the last host is gone, the LIO target and its backstore are removed and
the snapshot's hold is released. If /datasets/NAME/current pointed at this version, it moves to
the newest version still published to that host (or is removed).

Examples:
  fabricctl unpublish imagenet@v1
  fabricctl unpublish imagenet@v1 --from gpu2 --dry-run
"""

from __future__ import annotations

from fabric_core import lio, mounts, publish
from fabric_core.errors import Busy
from fabric_core.names import parse_ref

from .. import common, publishing
from ..main import command_main

PATH = ("unpublish",)
HELP = "unmount and un-export a published version"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the published version")
    p.add_argument("--from", dest="from_", metavar="GROUP|HOST,...", help="only these hosts (default: all)")
    p.add_argument("--force", action="store_true", help="unmount even while processes use the mount")
    p.add_argument("--dry-run", action="store_true", help="show what would change; change nothing")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref)
    cfg = ctx.config
    row = common.require_version(ctx, name, version)
    export = common.export_of(ctx, name, version, row.get("fabric:fs") or "ext4")
    target_iqn = export.target_iqn(cfg.iqn_base)
    live = lio.read_live()
    acl_inits = publish.acl_initiators(live, target_iqn)
    by_init = common.host_by_initiator(cfg)
    published = [by_init[i] for i in acl_inits if i in by_init]
    foreign = [i for i in acl_inits if i not in by_init]
    hosts = cfg.resolve_targets(args.from_) if args.from_ else published
    versions_on = {}  # host -> other versions of this dataset published to it (for `current`)
    for r in common.dataset_versions(ctx, name):
        if r["snapshot"] == version:
            continue
        other = common.export_of(ctx, name, r["snapshot"], "ext4")
        for i in publish.acl_initiators(live, other.target_iqn(cfg.iqn_base)):
            versions_on.setdefault(i, []).append((r["creation"], r["snapshot"]))

    def check(host, step):
        step("in use?")
        return mounts.users(ctx.ssh(host), export.mountpoint)

    busy = {}
    if not args.force:
        checked = common.fan(ctx, hosts, check, "check", quiet=True)
        busy = {h: users for h, users in checked.values.items() if users}
        if busy:
            raise Busy(f"{name}@{version} is in use: " + "; ".join(f"{h}: {', '.join(u)}" for h, u in busy.items()),
                       "stop those processes and run again, or pass --force (they get I/O errors)")

    def detach(host, step):
        runner = ctx.ssh(host)
        res = publish.detach(runner, export, target_iqn=target_iqn, portal=cfg.portal.address, force=args.force,
                             step=step)
        link = f"{cfg.mount_root}/{name}/current"
        if publish.read_link(runner, link) == version:
            others = sorted(versions_on.get(host.initiator, []))
            res["current"] = others[-1][1] if others else None
            publish.switch_link(runner, link, res["current"])
        return res

    fan = common.fan(ctx, hosts, detach, f"unpublish {name}@{version}", quiet=args.json)
    gone = {h.initiator for h in hosts if h.name in common.ok_names(fan)}
    remaining = [i for i in acl_inits if i not in gone]
    # --force also drops the ACLs of initiators that are not in the config (they cannot be logged out)
    keep = [] if set(remaining) <= set(foreign) and args.force else remaining
    storage = {"acls_left": remaining, **publishing.storage_withdraw(ctx, export, keep, force=args.force,
                                                                           detached=frozenset(gone))}
    out = {"ref": f"{name}@{version}", "dry_run": ctx.dry_run, "hosts": common.outcome_dict(fan), "storage": storage,
           "foreign_acls": foreign}
    if args.json:
        ctx.emit(out)
    else:
        verb = "would unpublish" if ctx.dry_run else "unpublished"
        print(f"{verb} {name}@{version} from {', '.join(common.ok_names(fan)) or 'no host'}"
              + ("; target removed, hold released" if not remaining else f"; still published to {len(remaining)}"))
    fan.raise_for_partial(f"unpublish {name}@{version}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_main(PATH, argv)
