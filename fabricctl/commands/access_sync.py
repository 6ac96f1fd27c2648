"""Bring every export of this node in line with the configuration's hosts and their CHAP secrets.

On this node, every fabricctl target: the ACLs (and mapped LUNs) of initiators that no host of the
configuration has are removed (a host taken out of the configuration is cut off, even while logged
in: it is no longer trusted), and every other ACL gets its host's current CHAP credentials (a rotated
secret). On every host with sessions to this node's targets, their node records get the host's
current secrets: where this node's key runs only the host's agent (ssh.access: agent), the agent writes its
own (`fabric-node refresh-credentials`, from its root-only credentials.json: no secret travels); with
ssh.access none no host is contacted (each host's role refreshes its records when its credentials change).
No session is dropped: a rotated secret counts at the host's next login. The fabricctl
role runs it whenever it rewrites the configuration (a host removed, a secret rotated); the JSON
result names every revoked host and every change.

Examples:
  fabricctl access sync --dry-run
  fabricctl access sync --json
"""

from __future__ import annotations

PATH = ("access", "sync")
HELP = "revoke hosts no longer configured and apply rotated CHAP secrets (targets and node records)"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def configure(p) -> None:
    """Only the options every change has (--dry-run, --json)."""


def run(ctx, args) -> int:
    pub = ctx.publisher
    storage = pub.sync_access()
    # the hosts' node records: through their agents (their own credentials) or commands (shell); none: not contacted
    hosts = [h for h in ctx.config.hosts.values() if h.name in storage["sessions"] and ctx.config.ssh.access != "none"]
    fan = ctx.fan(hosts, lambda host, step: pub.refresh(host, storage["sessions"][host.name], step),
                  "node records", quiet=args.json)
    revoked = {target: change["revoked"] for target, change in storage["targets"].items() if change["revoked"]}
    out = {"dry_run": ctx.dry_run, "targets": storage["targets"], "revoked": revoked, "hosts": fan.to_dict()}
    names = sorted({name for gone in revoked.values() for name in gone})
    ctx.report(out, f"{ctx.tense('would change', 'changed')} {len(storage['targets'])} target(s)"
               + (f"; {ctx.tense('would revoke', 'revoked')} {', '.join(names)}" if names else "")
               + f"; node records of {', '.join(fan.ok_names) or 'no host'} checked")
    fan.raise_for_partial("access sync")
    return 0
