"""Grants: a version exported to hosts that attach it themselves (issue 29: storage nodes grant, GPU nodes attach).

``fabricctl grant NAME@VERSION --to HOSTS`` makes the version attachable by those hosts, without contacting
them: the export (``Publisher.export``: snapshot device, hold, LIO target) when there is none yet, and one ACL
per host with that host's own CHAP credentials and the version's LUN mapped read-only. The hosts' agents log in
when they attach (``fabric-node attach``). ``revoke`` removes their ACLs (refused while a host is logged in,
unless forced: that cuts it off), and with the last one the export (``Publisher.withdraw``).

Hundreds of hosts: a grant never reads the whole of LIO through rtslib (4 s at 500 ACLs on the lab). It reads the
target's ACL names, LUNs and TPG attributes from configfs (``lioacls.target_facts``), and the CHAP fields of the
ACLs it is asked about that exist already; ``plan_grant`` (pure) adds only what is missing, and ``lio.apply``
runs those steps through rtslib and saves the configuration once. A 501st host costs one ACL, its mapped LUN,
its CHAP and the save. (A version not exported yet is exported first, by the publishing service, with one of the
hosts: that reads LIO through rtslib once and saves it with that one ACL, before the others are added.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ..base.errors import Busy, UserError
from ..base.exports import Export
from ..base.model import Step
from ..base.rules import Chap
from ..storage import lio, lioacls

AUTH_FIELDS = lioacls.AUTH_FILES


def plan_grant(target: str, facts: dict, wanted: Mapping[str, Chap | None], *,
               current_auth: Callable[[str], dict], writable: bool = False, tag: str | None = None,
               current_tag: Callable[[str], str | None] = lambda _i: None) -> list[Step]:
    """The steps giving each initiator of ``wanted`` (initiator -> its CHAP credentials, None: none) an ACL on
    ``target`` (pure). ``facts``: the target as ``lioacls.target_facts`` read it; an initiator with an ACL already
    gets only the CHAP fields that differ (``current_auth(initiator)``: its fields as LIO has them); a new one its
    ACL, the target's LUN mapped (read-only unless ``writable``) and its CHAP. The TPG authenticates once any ACL
    has CHAP. ``tag``: every wanted ACL gets it (``lio.PUBLISHED_TAG``: a publish through a peer), where it has
    another (``current_tag(initiator)``); None leaves tags as they are (a grant never untags a publish's ACL)."""
    if not facts.get("luns"):
        raise UserError(f"{target} exports no LUN (a half-made export)",
                        "publish or grant it again after `fabricctl access sync`, which converges the export")
    lun = facts["luns"][0]
    existing = set(facts.get("acls") or ())
    steps: list[Step] = []
    if any(wanted.values()) and facts.get("authentication") != 1:
        steps.append(lio.step("set_tpg_attribute", target, {"name": "authentication", "value": 1}))
    for initiator in sorted(wanted):
        chap = wanted[initiator]
        fields = chap.fields() if chap else dict.fromkeys(AUTH_FIELDS, "")
        if initiator in existing:
            have = current_auth(initiator)
            for name in AUTH_FIELDS:
                if have.get(name, "") != fields.get(name, ""):
                    steps.append(lio.step("set_auth", target, {"initiator": initiator, "field": name,
                                                               "value": fields.get(name, "")}, "CHAP of this host"))
            retag = tag is not None and current_tag(initiator) != tag
        else:
            steps.append(lio.step("create_acl", target, {"initiator": initiator}, "granted"))
            steps.append(lio.step("create_mapped_lun", target, {"initiator": initiator, "index": 0,
                                                                "tpg_lun": lun, "write_protect": not writable}))
            for name in AUTH_FIELDS:
                if fields.get(name):
                    steps.append(lio.step("set_auth", target, {"initiator": initiator, "field": name,
                                                               "value": fields[name]}))
            retag = tag is not None
        if retag:
            steps.append(lio.step("set_acl_tag", target, {"initiator": initiator, "value": tag}))
    return lio.ordered(steps)


def plan_revoke(target: str, facts: dict | None, initiators: Iterable[str], *, logged_in: Callable[[str], bool],
                force: bool = False) -> tuple[list[Step], list[str], list[str]]:
    """(steps, revoked, not granted) removing the ACLs of ``initiators`` from ``target`` (pure but for
    ``logged_in``, asked of the initiators being revoked only). A logged-in initiator is refused (Busy) unless
    ``force``, which cuts it off (rtslib removes an ACL's mapped LUNs with it)."""
    existing = set((facts or {}).get("acls") or ())
    revoking = sorted(i for i in set(initiators) if i in existing)
    missing = sorted(i for i in set(initiators) if i not in existing)
    busy = [i for i in revoking if logged_in(i)]
    if busy and not force:
        raise Busy(f"{', '.join(busy)} {'is' if len(busy) == 1 else 'are'} logged in to {target}: revoking now cuts "
                   "a live session off mid-read",
                   "detach it on the host first (its job ends, or `fabricctl unpublish`), or pass --force to cut it "
                   "off (its reads then fail with I/O errors)")
    steps = [lio.step("delete_acl", target, {"initiator": i},
                      "revoked (logged in: cut off)" if i in busy else "revoked") for i in revoking]
    return steps, revoking, missing


class Grants:
    """Grants on this node, through its publishing service (``publisher``: its settings, runner and hosts)."""

    def __init__(self, publisher):
        self.publisher = publisher

    @property
    def dry_run(self) -> bool:
        return self.publisher.dry_run

    def _run(self, steps: list[Step]) -> list[str]:
        """The steps made (one save) through this node's runner, which records them (a dry run makes none);
        returns their descriptions."""
        return lio.run_plan(steps, self.publisher.local)

    def grant(self, export: Export, hosts: list, *, published: bool = False) -> dict:
        """``hosts`` (objects with name and initiator) may attach ``export``. ``published``: their ACLs are tagged
        as a publish's (another node's `publish --from-nodes`: the hosts log in here too and stay). Returns
        {target, granted (host names given an ACL), refreshed (whose CHAP was set again), already, exported (the
        export was made: the publishing service's result), lio_actions (how many)}."""
        if not hosts:
            raise UserError("no hosts to grant to", "name hosts or groups with --to")
        settings = self.publisher.settings
        target = settings.target_iqn(export)
        wanted = {h.initiator: settings.chap_of(h.initiator) for h in hosts}
        names = {h.initiator: h.name for h in hosts}
        facts = lioacls.target_facts(target)
        exported = None
        tag = lio.PUBLISHED_TAG if published else None
        planned: dict = {}  # a dry run's export: its one ACL as the export would leave it ((CHAP fields, tag))
        if facts is None or not facts["luns"] or not facts["enabled"]:
            first = sorted(hosts, key=lambda h: h.initiator)[0]
            exported = self.publisher.export(export, [first], published=published)  # saved, with one ACL
            facts = lioacls.target_facts(target) if not self.dry_run else None
            if facts is None:  # a dry run: as the export would leave it
                chap = wanted[first.initiator]
                facts = {"acls": [first.initiator], "luns": [0], "authentication": 1 if chap else 0, "enabled": True}
                planned[first.initiator] = (chap.fields() if chap else dict.fromkeys(AUTH_FIELDS, ""), tag)
        before = set(facts["acls"])
        steps = plan_grant(target, facts, wanted, writable=export.writable, tag=tag,
                           current_auth=lambda i: planned[i][0] if i in planned else lioacls.acl_auth(target, i),
                           current_tag=lambda i: planned[i][1] if i in planned else lioacls.acl_tag(target, i))
        lines = self._run(steps)
        created = {s.params["initiator"] for s in steps if s.kind == "create_acl"}
        if exported is not None:
            created |= before & set(wanted)  # the export made their ACLs
        refreshed = {s.params["initiator"] for s in steps if s.kind == "set_auth"} - created
        return {"target": target, "hosts": sorted(names.values()), "new": sorted(names[i] for i in created),
                "refreshed": sorted(names[i] for i in refreshed),
                "already": sorted(names[i] for i in (before & set(wanted)) - created - refreshed),
                "exported": exported, "lio_actions": len(lines)}

    def revoke(self, export: Export, hosts: list, *, force: bool = False) -> dict:
        """Remove the ACLs of ``hosts`` (refused while one is logged in, unless ``force``); with none left, the
        export goes whole (``Publisher.withdraw``: target, backstore, hold). Returns {target, revoked, not_granted,
        withdrawn, lio_actions}."""
        settings = self.publisher.settings
        target = settings.target_iqn(export)
        names = {h.initiator: h.name for h in hosts}
        facts = lioacls.target_facts(target)
        if facts is None:
            return {"target": target, "revoked": [], "not_granted": sorted(names.values()), "withdrawn": False,
                    "lio_actions": 0}
        steps, revoking, missing = plan_revoke(target, facts, names, force=force,
                                               logged_in=lambda i: lioacls.logged_in(target, i))
        left = [i for i in facts["acls"] if i not in revoking]
        out = {"target": target, "revoked": sorted(names[i] for i in revoking),
               "not_granted": sorted(names[i] for i in missing), "withdrawn": False}
        if not revoking:
            return {**out, "lio_actions": 0}
        if not left:  # the last hosts: the export goes whole (the slow path: its whole LIO state is read once)
            res = self.publisher.withdraw(export, [], force=force, detached=frozenset(revoking))
            return {**out, "withdrawn": True, "released": res.get("released"), "lio_actions": len(res["lio_actions"])}
        return {**out, "lio_actions": len(self._run(steps))}
