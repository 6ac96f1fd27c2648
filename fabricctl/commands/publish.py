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

from fabric_core import publish
from fabric_core.names import parse_ref

from .. import common, publishing
from ..main import command_main

PATH = ("publish",)
HELP = "export a sealed version read-only and mount it on GPU nodes"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the sealed version")
    p.add_argument("--to", required=True, metavar="GROUP|HOST,...", help="host groups and/or hosts from the config")
    p.add_argument("--dry-run", action="store_true", help="show what would change on the node and each host")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def host_side(ctx, export, host, created: dict, step) -> dict:
    """Session and read-only mount, then `current` moves when this version is newer than its target."""
    cfg = ctx.config
    res = publishing.host_side(ctx, export, host, step)
    runner = ctx.ssh(host)
    step("current")
    link = f"{cfg.mount_root}/{export.name}/current"
    now = publish.read_link(runner, link)
    newer = now not in created or created[now] <= created[export.version]
    switched = publish.switch_link(runner, link, export.version) if newer else False
    res.update(current=export.version if newer else now, switched=switched)
    res["changed"] = res["changed"] or switched
    return res


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref)
    cfg = ctx.config
    hosts = cfg.resolve_targets(args.to)
    row = common.require_version(ctx, name, version)
    vol = common.require_volume(ctx, name)
    export = common.export_of(ctx, name, version, row.get("fabric:fs") or vol.get("fabric:fs") or "ext4")
    created = {r["snapshot"]: r["creation"] for r in common.dataset_versions(ctx, name)}
    storage = publishing.storage_side(ctx, export, hosts)
    fan = common.fan(ctx, hosts, lambda host, step: host_side(ctx, export, host, created, step),
                     f"publish {name}@{version}", quiet=args.json)
    out = {"ref": f"{name}@{version}", "target": export.target_iqn(cfg.iqn_base), "dry_run": ctx.dry_run,
           "storage": storage, "hosts": common.outcome_dict(fan), "mountpoint": export.mountpoint,
           "planned": ctx.planned()}
    if args.json:
        ctx.emit(out)
    else:
        for w in storage["warnings"]:
            ctx.note("warning: " + w)
        verb = "would publish" if ctx.dry_run else "published"
        where = ", ".join(common.ok_names(fan)) or "no host"
        print(f"{verb} {name}@{version} read-only at {export.mountpoint} on {where}")
    fan.raise_for_partial(f"publish {name}@{version}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_main(PATH, argv)
