"""The two halves of publishing an export, shared by `publish` and `checkpoint restore`/`volume create`."""

from __future__ import annotations

from fabric_core import lio, lzc, publish, zfs
from fabric_core.errors import UserError

from . import common


def desired(ctx, export: publish.Export, initiators: list[str]) -> dict:
    """The export's LIO desired state from the config, with an ACL for each initiator."""
    cfg = ctx.config
    return publish.desired_state(export, iqn_base=cfg.iqn_base, backstore_prefix=cfg.backstore_prefix,
                                 portal_ip=cfg.portal.ip, portal_port=cfg.portal.port, initiators=initiators,
                                 chap=cfg.chap)


def storage_withdraw(ctx, export: publish.Export, remaining: list[str], *, force: bool,
                     live: dict | None = None, detached: frozenset = frozenset()) -> dict:
    """After hosts detached: keep the ACLs of ``remaining``; with none left, remove the target, its
    backstore and the hold. Shared by `unpublish`, `checkpoint restore --remove` and `checkpoint
    volume destroy`. ``detached``: the initiators the caller detached in this run; in a dry run
    their logouts were only planned, so their sessions do not make the plan refuse."""
    cfg = ctx.config
    if remaining:
        result = lio.reconcile(desired(ctx, export, remaining), dry_run=ctx.dry_run)
        return {"lio_actions": result["actions"], "released": False}
    actions = publish.plan_removal(live or lio.read_live(), iqn_base=cfg.iqn_base,
                                   backstore_prefix=cfg.backstore_prefix,
                                   target_iqns=[export.target_iqn(cfg.iqn_base)], force=force,
                                   planned_logouts=detached if ctx.dry_run else frozenset())
    if not ctx.dry_run:
        lio.apply(actions)
    held = "@" in export.snapshot  # a checkpoint volume (not a snapshot) is never held
    return {"lio_actions": [a.describe() for a in lio.changes(actions)],
            "released": lzc.release(export.snapshot, runner=ctx.local) if held else False}


def storage_side(ctx, export: publish.Export, hosts, *, hold: bool = True) -> dict:
    """Snapshot device visible, the hold, the LIO target with ACLs for (existing + new) hosts."""
    cfg, run = ctx.config, ctx.local
    volume = export.snapshot.split("@")[0]
    changed_snapdev = False
    if "@" in export.snapshot:
        snapdev = zfs.get_props(run, volume, ["snapdev"]).get(volume, {}).get("snapdev", ("hidden",))[0]
        if snapdev != "visible":
            run.run(["zfs", "set", "snapdev=visible", volume], mutating=True)
            changed_snapdev = True
    held = lzc.hold(export.snapshot, runner=ctx.local) if hold else False
    if not ctx.dry_run:
        run.run(["udevadm", "settle"], check=False)
        common.wait_for(export.device)
    live = lio.read_live()
    initiators = set(publish.acl_initiators(live, export.target_iqn(cfg.iqn_base))) | {h.initiator for h in hosts}
    result = lio.reconcile(desired(ctx, export, sorted(initiators)), dry_run=ctx.dry_run)
    return {"held": held, "snapdev": changed_snapdev, "lio_changed": result["changed"],
            "lio_actions": result["actions"], "warnings": result.get("warnings", [])}


def host_side(ctx, export: publish.Export, host, step) -> dict:
    """Check the host's initiator name, then session and mount."""
    cfg = ctx.config
    runner = ctx.ssh(host)
    step("check initiator")
    actual = publish.host_initiator(runner)
    if actual != host.initiator:
        raise UserError(f"{host.name} has initiator name {actual!r}, the config says {host.initiator!r}",
                        "run playbooks/site.yml (it sets both from the inventory) or fix hosts in the fabricctl "
                        "config")
    return publish.attach(runner, export, target_iqn=export.target_iqn(cfg.iqn_base), portal=cfg.portal.address,
                          chap=cfg.initiator_chap(), step=step)
