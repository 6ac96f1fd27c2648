"""Site-wide invariants: what must hold across hosts before any host of the fabric is changed.

A role sees one host; some mistakes only show between hosts: two GPU nodes with one initiator name
(one of them would log in to the other's exports), two hosts with one storage address, an export
that names a portal no storage node has, an ACL for an initiator no GPU node uses, two storage nodes
that would give different data the same target name, two hosts sharing one CHAP secret (either could
pose as the other). ``check`` is a pure function of what the inventory declares (one ``HostView`` per
host); the site playbooks run it once for the whole inventory, whatever ``--limit`` says, before any
change (plugins/action/fabric_site_invariants.py).

Every violation names the field, the value (never a secret), both hosts and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base.errors import UserError
from ..base.names import validate_iqn
from ..node.iscsi import normalize_portal


@dataclass
class Export:
    """An export a GPU node logs in to (iscsi_initiator_exports)."""

    name: str
    portal: str  # ADDRESS[:PORT]
    target_iqn: str


@dataclass
class Target:
    """A target a storage node declares (lio_target_targets), with the initiators its ACLs name."""

    iqn: str
    initiators: list = field(default_factory=list)
    wwns: list = field(default_factory=list)  # explicit LUN serials
    chap_secrets: dict = field(default_factory=dict)  # initiator -> (password, mutual_password)


@dataclass
class HostView:
    name: str
    groups: list
    address: str = ""  # the storage-network address (fabric_storage_address, else ansible_host)
    initiator: str = ""  # GPU nodes: the initiator name the iscsi_initiator role sets
    chap_password: str = ""  # GPU nodes: the default CHAP secret of their sessions
    exports: list = field(default_factory=list)  # list[Export] (GPU nodes)
    targets: list = field(default_factory=list)  # list[Target] (storage nodes)
    named_hosts: dict = field(default_factory=dict)  # field -> [host names it refers to] (fabricctl_groups, ...)


@dataclass(frozen=True)
class Violation:
    field: str
    value: str
    hosts: tuple
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.problem}\n  fix: {self.fix}"


class SiteInvariantError(UserError):
    """The inventory as a whole is inconsistent; nothing was changed on any host."""


def _portal_address(portal: str) -> str:
    """The address of a portal (iscsi.normalize_portal's rule), or the text as given when it is invalid."""
    try:
        return normalize_portal(portal).rsplit(":", 1)[0].strip("[]")
    except UserError:
        return portal


def _duplicates(values: dict) -> dict:
    """{value: [hosts]} for every value more than one host has (empty values ignored)."""
    seen: dict = {}
    for host, value in values.items():
        if value:
            seen.setdefault(value, []).append(host)
    return {v: sorted(h) for v, h in seen.items() if len(h) > 1}


def check(hosts: dict, *, storage_group: str = "storage_nodes", gpu_group: str = "gpu_nodes") -> list:
    """Every violation of the site-wide invariants, in a stable order (empty: all hold)."""
    out: list = []
    gpus = {n: h for n, h in hosts.items() if gpu_group in h.groups}
    storages = {n: h for n, h in hosts.items() if storage_group in h.groups}

    for name, host in sorted(gpus.items()):
        if host.initiator:
            try:
                validate_iqn(host.initiator)
            except UserError as err:
                out.append(Violation("iscsi_initiator_iqn", host.initiator, (name,),
                                     f"{name}: {err.problem}", err.fix or "set a valid iscsi_initiator_iqn"))
    for value, names in sorted(_duplicates({n: h.initiator for n, h in gpus.items()}).items()):
        out.append(Violation(
            "iscsi_initiator_iqn", value, tuple(names),
            f"iscsi_initiator_iqn {value} is the initiator name of {' and '.join(names)}: each would be let in to "
            "the other's exports",
            f"give each GPU node its own name (remove iscsi_initiator_iqn from {names[-1]} to get "
            f"<fabric_iqn_base>:{names[-1]}, or set another)"))
    addresses = {n: h.address for n, h in hosts.items()}
    for value, names in sorted(_duplicates(addresses).items()):
        out.append(Violation(
            "fabric_storage_address", value, tuple(names),
            f"storage address {value} is the address of {' and '.join(names)}",
            "give each host its own storage-network address (fabric_storage_address, else ansible_host)"))
    secrets = {n: h.chap_password for n, h in gpus.items()}
    for _value, names in sorted(_duplicates(secrets).items(), key=lambda kv: kv[1]):
        out.append(Violation(
            "iscsi_initiator_chap_password", "(secret not shown)", tuple(names),
            f"{' and '.join(names)} share one CHAP secret: either could log in as the other",
            "give every GPU node its own CHAP secret (one vault entry per host)"))

    by_address = {h.address: n for n, h in storages.items() if h.address}
    declared = {n: {t.iqn for t in h.targets} for n, h in storages.items()}
    for name, host in sorted(gpus.items()):
        for export in host.exports:
            address = _portal_address(export.portal)
            owner = by_address.get(address)
            if owner is None:
                out.append(Violation(
                    "iscsi_initiator_exports", f"{export.name} (portal {export.portal})", (name,),
                    f"{name}'s export {export.name} names portal {export.portal}, the address of no storage node "
                    f"of the inventory ({', '.join(sorted(by_address)) or 'none'})",
                    f"point it at a storage node's address, or add that storage node to {storage_group}"))
            elif declared[owner] and export.target_iqn not in declared[owner]:
                out.append(Violation(
                    "iscsi_initiator_exports", f"{export.name} ({export.target_iqn})", (name, owner),
                    f"{name}'s export {export.name} names target {export.target_iqn}, which {owner} does not declare "
                    f"(it declares {', '.join(sorted(declared[owner]))})",
                    f"use one of {owner}'s targets, or declare it in {owner}'s lio_target_targets"))

    known_initiators = {h.initiator: n for n, h in gpus.items() if h.initiator}
    target_owner: dict = {}
    wwn_owner: dict = {}
    for name, host in sorted(storages.items()):
        for target in host.targets:
            if target.iqn in target_owner and target_owner[target.iqn] != name:
                other = target_owner[target.iqn]
                out.append(Violation(
                    "lio_target_targets", target.iqn, (other, name),
                    f"target {target.iqn} is declared by both {other} and {name}: one name for two exports",
                    "give each storage node its own lio_target_base_iqn or target names"))
            target_owner.setdefault(target.iqn, name)
            for wwn in target.wwns:
                if wwn in wwn_owner and wwn_owner[wwn] != (name, target.iqn):
                    other = wwn_owner[wwn]
                    out.append(Violation(
                        "lio_target_targets", f"LUN serial {wwn}", (other[0], name),
                        f"LUN serial {wwn} is given to {other[1]} on {other[0]} and to {target.iqn} on {name}",
                        "drop the explicit wwn (each LUN then gets its own), or make them differ"))
                wwn_owner.setdefault(wwn, (name, target.iqn))
            for initiator in target.initiators:
                if initiator not in known_initiators:
                    out.append(Violation(
                        "lio_target_targets", f"ACL {initiator}", (name,),
                        f"{name}'s target {target.iqn} has an ACL for {initiator}, the initiator name of no GPU node "
                        f"of the inventory",
                        f"list the GPU node in {gpu_group} (with that initiator name), or remove the ACL"))
            passwords = {i: p[0] for i, p in target.chap_secrets.items() if p and p[0]}
            for _value, initiators in sorted(_duplicates(passwords).items(), key=lambda kv: kv[1]):
                owners = [known_initiators.get(i, i) for i in initiators]
                out.append(Violation(
                    "lio_target_targets", f"CHAP of {target.iqn} (secret not shown)", tuple(owners),
                    f"{name}'s target {target.iqn} gives {' and '.join(owners)} one CHAP secret: either could log "
                    "in as the other",
                    "give every ACL its own CHAP secret"))
    for name, host in sorted(hosts.items()):
        for what, names in sorted(host.named_hosts.items()):
            for missing in sorted(set(names) - set(hosts)):
                out.append(Violation(
                    what, missing, (name,),
                    f"{name}'s {what} names host {missing}, which is not in the inventory",
                    f"add {missing} to the inventory, or remove it from {what}"))
    return out


def require(hosts: dict, **groups) -> None:
    """Raise SiteInvariantError naming every violation; nothing else happens."""
    found = check(hosts, **groups)
    if found:
        lines = "\n".join(f"- {v.problem}\n  fix: {v.fix}" for v in found)
        raise SiteInvariantError(f"{len(found)} site-wide problem(s), nothing was changed on any host:\n{lines}",
                                 "fix the inventory as each problem says, then run again")
