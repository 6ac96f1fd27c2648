"""Publish a sealed version read-only to GPU nodes: iSCSI export, login and mount on every host.

Steps, each convergent (a publish interrupted at any point is finished by running it again):
on this node, the version's snapshot device is made visible, the snapshot is held
(`zfs hold fabric:published`: it cannot be destroyed while exported) and an LIO target
exports it read-only with one ACL per host (and CHAP when the config has it). Then on every
host in parallel: iSCSI login, a read-only mount at MOUNT_ROOT/NAME/VERSION through a systemd
unit (back after a reboot), and an atomic switch of MOUNT_ROOT/NAME/current when this version
is newer than the one it points to. Hosts that fail are named with the reason (exit 3); the
others finish. Publishing again to more hosts adds them; hosts already there are left as they are.

Examples:
  fabricctl publish imagenet@v1 --to gpu_nodes
  fabricctl publish imagenet@v2 --to gpu1,gpu2 --dry-run
"""

from __future__ import annotations

from fabric_core.names import parse_ref

from .. import datasets

PATH = ("publish",)
HELP = "export a sealed version read-only and mount it on GPU nodes"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the sealed version")
    p.add_argument("--to", required=True, metavar="GROUP|HOST,...", help="host groups and/or hosts from the config")


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref)
    hosts = ctx.config.resolve_targets(args.to)
    row = datasets.require_version(ctx, name, version)
    export = datasets.export_of(ctx, row, datasets.require(ctx, name))
    created = {r["snapshot"]: r["creation"] for r in datasets.sealed(ctx, name)}
    pub = ctx.publisher
    storage = pub.export(export, hosts)
    fan = ctx.fan(hosts, lambda host, step: pub.attach(export, host, step, created=created),
                  f"publish {name}@{version}", quiet=args.json)
    out = {"ref": f"{name}@{version}", "target": pub.settings.target_iqn(export), "dry_run": ctx.dry_run,
           "storage": storage, "hosts": fan.to_dict(), "mountpoint": export.mountpoint, "planned": ctx.planned()}
    for w in [] if args.json else storage["warnings"]:
        ctx.note("warning: " + w)
    ctx.report(out, f"{ctx.tense('would publish', 'published')} {name}@{version} read-only at {export.mountpoint} on "
               f"{', '.join(fan.ok_names) or 'no host'}")
    fan.raise_for_partial(f"publish {name}@{version}")
    return 0
