"""Load and validate fabricctl's configuration, the way every command does, plus the retention policies
(validated by rotate only otherwise), and print what it says: the pool and its roots, the IQN base and
portal, this node and the other storage nodes, the GPU nodes and groups, CHAP, retention, health
thresholds, the lock's wait, and the warnings (obsolete keys, exports without CHAP, no GPU node). No
secret is printed (CHAP is shown as mutual, one-way or none).

Exit status 0 when the file is valid, 1 with the first problem (the key, where it is and the fix)
otherwise; --json prints {"valid": false, "source", "error", "fix", "exit_status", "error_type"} then
(every command's failure under --json, with "valid" and "source"). It reads only the file: no ZFS, LIO
or GPU node is contacted, and no lock is taken. The file is --config, else $FABRICCTL_CONFIG,
else /etc/fabricctl/config.yml (root only: it holds the CHAP secrets).

Examples:
  fabricctl config check
  fabricctl --config /tmp/new-config.yml config check --json
"""

from __future__ import annotations

from fabric_core.base.errors import UserError
from fabric_core.services.health import KEYS as HEALTH_KEYS
from fabric_core.services.retention import parse_retention

from .. import config as config_file
from ..output import print_table

PATH = ("config", "check")
HELP = "validate the configuration and summarize it (pool, roots, IQN base, hosts, groups, warnings)"
MUTATING = False  # reads the configuration file only


def configure(p) -> None:
    pass


def _chap(host) -> str:
    if host.chap is None:
        return "none"
    return "mutual" if host.chap.mutual else "one-way"


def summary(cfg) -> dict:
    """What the configuration says, without a secret (also --json's document)."""
    retention = parse_retention(cfg.retention, cfg.metrics)
    warnings = list(cfg.deprecations)
    if cfg.insecure_no_chap:
        warnings.append("insecure_no_chap is set: exports without CHAP are allowed (an isolated lab only); "
                        "fabricctl status warns about each")
    if not cfg.hosts:
        warnings.append("no GPU node is configured (hosts): nothing can be published or restored; add GPU nodes "
                        "to the inventory group of fabricctl_host_group and re-run playbooks/fabricctl.yml")
    for group, members in sorted(cfg.groups.items()):
        if not members:
            warnings.append(f"group {group!r} has no hosts: publishing to it is refused")
    return {
        "valid": True,
        "source": cfg.source,
        "pool": cfg.pool,
        "dataset_root": cfg.dataset_root,
        "checkpoint_root": cfg.checkpoint_root,
        "iqn_base": cfg.iqn_base,
        "portal": cfg.portal.address,
        "backstore_prefix": cfg.backstore_prefix,
        "mount_root": cfg.mount_root,
        "checkpoint_mount_root": cfg.checkpoint_mount_root,
        "staging_root": cfg.staging_root,
        "node": cfg.node or None,
        "storage_nodes": {n.name: {"address": n.address} for n in cfg.storage_nodes.values()},
        "hosts": {h.name: {"address": h.address, "initiator": h.initiator, "chap": _chap(h)}
                  for h in cfg.hosts.values()},
        "groups": {name: list(members) for name, members in cfg.groups.items()},
        "insecure_no_chap": cfg.insecure_no_chap,
        "metrics": list(cfg.metrics),
        "retention": {"policies": sorted(retention.policies), "assign": dict(retention.assign)},
        "health": {key: getattr(cfg.health, key) for key in HEALTH_KEYS},
        "lock_wait_seconds": cfg.lock.wait_seconds,
        "warnings": warnings,
    }


def run(ctx, args) -> int:
    source = getattr(args, "config", None) or config_file.default_path()
    try:
        cfg = config_file.load(source)
        out = summary(cfg)
    except UserError:
        # main reports it: "fabricctl: error: PROBLEM / fix: FIX" on stderr, exit 1; under --json this with the
        # problem, the fix and the exit status added (what every command prints when it fails)
        ctx.emit({"valid": False, "source": source})
        raise
    if ctx.json:
        ctx.emit(out)
        return 0
    h = out["health"]
    lines = [
        ("configuration", f"{out['source']}: valid"),
        ("pool", f"{out['pool']} (datasets {out['dataset_root']}, checkpoints {out['checkpoint_root']})"),
        ("iqn base", out["iqn_base"]),
        ("portal", out["portal"]),
        ("mounts", f"datasets {out['mount_root']}, checkpoints {out['checkpoint_mount_root']} (GPU nodes); "
                   f"staging {out['staging_root']}"),
        ("node", out["node"] or "- (not named: replication needs it)"),
        ("storage nodes", ", ".join(f"{n} ({v['address']})" for n, v in out["storage_nodes"].items()) or "none"),
        ("groups", "; ".join(f"{g}: {', '.join(m) or 'no hosts'}" for g, m in out["groups"].items()) or "none"),
        ("retention", f"{len(out['retention']['policies'])} policies, {len(out['retention']['assign'])} "
                      f"assignments; metrics: {', '.join(out['metrics']) or 'none'}"),
        ("health", f"capacity {h['capacity_warn_percent']}/{h['capacity_critical_percent']} %, scrub age "
                   f"{h['scrub_warn_days']}/{h['scrub_critical_days']} days (warning/critical)"),
        ("lock wait", f"{out['lock_wait_seconds']:g} s"),
    ]
    width = max(len(k) for k, _value in lines)
    for key, value in lines:
        print(f"{key + ':':<{width + 1}} {value}")
    print(f"\nGPU nodes ({len(out['hosts'])}):")
    print_table([{"host": n, **v} for n, v in out["hosts"].items()], ["host", "address", "initiator", "chap"],
                empty="  none")
    print(f"\nwarnings: {len(out['warnings']) or 'none'}")
    for text in out["warnings"]:
        print(f"  {text}")
    return 0
