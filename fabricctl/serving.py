"""Which storage nodes serve a version: this one, and the others of the configuration holding the same snapshot
(its GUID), reached over their restricted replica-serve (``replication.Peer``). ``publish --from-nodes``,
``grant`` and ``revoke`` ask it."""

from __future__ import annotations

from fabric_core.base.errors import UserError
from fabric_core.services import replicate

from . import datasets
from .replication import MAX_EXPORT_HOSTS, Peer, PeerError


def named_peers(ctx, spec: str, name: str, version: str) -> list:
    """The other storage nodes of ``spec`` (NODE,...: --from-nodes) with the GUID each must hold, checked before
    anything changes: this node among them, each known, each holding NAME@VERSION as the same snapshot (GUID)."""
    cfg = ctx.config
    wanted = list(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
    if cfg.node not in wanted:
        raise UserError(f"--from-nodes {spec} does not name this node ({cfg.node or 'unnamed'})",
                        "run the command on one of the nodes that serve the version, naming it too")
    volume = datasets.volume(cfg, name)
    guid = replicate.read_side(ctx.local, volume).guids[version]
    out = []
    for node in [n for n in wanted if n != cfg.node]:
        peer = Peer(cfg.storage_node(node), cfg.ssh)
        there = peer.state(volume).guids.get(version)
        if there is None:
            raise UserError(f"{node} does not hold {name}@{version}",
                            f"replicate it there first: `fabricctl replicate {name}@{version} --to {node}`")
        if there != guid:
            raise UserError(f"{name}@{version} on {node} is another snapshot (GUID {there}, here {guid})",
                            f"replicate it again: `fabricctl replicate {name}@{version} --to {node} --force`")
        out.append((peer, guid))
    return out


def holding_peers(ctx, name: str, version: str) -> tuple[list, dict[str, str]]:
    """Every other storage node of the configuration that holds NAME@VERSION as the same snapshot: ([(peer,
    guid)], {node: why} of those that could not be asked). A node without it is left out."""
    cfg = ctx.config
    if not cfg.storage_nodes:
        return [], {}
    volume = datasets.volume(cfg, name)
    guid = replicate.read_side(ctx.local, volume).guids[version]
    out, unreachable = [], {}
    for _node, sn in sorted(cfg.storage_nodes.items()):
        peer = Peer(sn, cfg.ssh)
        try:
            there = peer.state(volume).guids.get(version)
        except PeerError as exc:
            unreachable[peer.name] = exc.problem
            continue
        if there == guid:
            out.append((peer, guid))
    return out, unreachable


def peers(ctx, spec: str | None, name: str, version: str) -> tuple[list, dict[str, str]]:
    """--from-nodes NODE,... (``named_peers``: each must hold it), or with none every node holding it
    (``holding_peers``)."""
    if spec:
        return named_peers(ctx, spec, name, version), {}
    return holding_peers(ctx, name, version)


def ask_each(ctx, peers: list, names: list[str], record, ask) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """Ask every peer about the hosts ``names`` (``grant`` and ``revoke``): in requests of at most
    ``MAX_EXPORT_HOSTS`` hosts each (what replica-serve accepts), ``ask(peer, guid, chunk)`` giving one answer.
    A dry run asks nothing and records ``record(peer, guid)``'s request instead. Each peer's reach goes into the
    journal record (``ctx.hosts``). Returns the answers by peer and, for a peer that failed, its problem."""
    answers: dict[str, list[dict]] = {}
    failed: dict[str, str] = {}
    for peer, guid in peers:
        if ctx.dry_run:
            ctx.local.record(record(peer, guid))
            continue
        ctx.hosts.setdefault(peer.name, "contacted")
        try:
            answers[peer.name] = [ask(peer, guid, names[i:i + MAX_EXPORT_HOSTS])
                                  for i in range(0, len(names), MAX_EXPORT_HOSTS)]
        except PeerError as exc:
            failed[peer.name] = exc.problem
            ctx.hosts[peer.name] = "failed"
            continue
        ctx.hosts[peer.name] = "ok"
    return answers, failed
