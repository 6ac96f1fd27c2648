"""The LIO planner (pure): desired state and live state (``kernel.read_live``'s dicts) in, ordered steps out
(``model.Step``s made by ``operations.step``, their ``kind`` the LIO operation).

``plan(desired, live, purge=, force=)``: the steps that turn ``live`` into ``desired``; steps of kind
``"keep"`` are reports (foreign or unpurged objects left alone), every other step is a change.
``plan_removal`` and ``plan_access`` are the publishing service's: whole targets removed, one target's ACLs
brought to a set of hosts.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...base.errors import Busy, UnsafeOperation, UserError
from ...base.model import Step
from ...base.names import TPG_TAG
from ...base.rules import Chap
from .operations import KEEP, backstore_path, discovery_closed, ordered, step, strip_brackets, tpg_of
from .spec import AUTH_FIELDS, MAX_LUN, DesiredState, LunSpec, TargetSpec, emulate_pr, parse_desired


def desired_attributes(spec: TargetSpec) -> dict:
    return {"authentication": 1 if spec.chap else 0, "generate_node_acls": 0, "cache_dynamic_acls": 0,
            "demo_mode_write_protect": 1}


class _Planner:
    def __init__(self, state: DesiredState, live: dict, purge: bool, force: bool):
        self.state = state
        self.dump = live.get("dump", live)
        self.sessions = live.get("sessions") or []
        self.devices = live.get("devices")
        self.purge = purge
        self.force = force
        self.steps: list[Step] = []
        self.busy: list[str] = []
        self.targets = {t["wwn"]: t for t in self.dump.get("targets", []) if t.get("fabric", "iscsi") == "iscsi"}
        self.backstores = {s["name"]: s for s in self.dump.get("storage_objects", [])}
        self.deleted_luns: set = set()  # (target iqn, index)
        self.deleted_targets: set = set()
        self.deleted_maps: set = set()  # (target iqn, initiator, mapped index)

    def add(self, op: str, target: str = "", reason: str = "", **params) -> None:
        self.steps.append(step(op, target, params, reason))

    def delete_map(self, iqn: str, initiator: str, index: int, reason: str) -> None:
        if (iqn, initiator, index) not in self.deleted_maps:
            self.deleted_maps.add((iqn, initiator, index))
            self.add("delete_mapped_lun", iqn, reason, initiator=initiator, index=index)

    def keep(self, kind: str, name: str, reason: str) -> None:
        self.add(KEEP, "", reason, kind=kind, name=name)

    def session_initiators(self, iqn: str) -> list:
        return sorted({s["initiator"] for s in self.sessions if s.get("target") == iqn
                       and s.get("tpg", TPG_TAG) == TPG_TAG})

    def check_busy(self, what: str, iqn: str, initiators: list) -> None:
        active = [i for i in initiators if i in self.session_initiators(iqn)]
        if active:
            self.busy.append(f"{what} of {iqn} is in use by logged-in initiator(s) {', '.join(active)}")

    def lun_users(self, iqn: str, tpg: dict, index: int) -> list:
        return [acl["node_wwn"] for acl in tpg.get("node_acls", [])
                if any(m.get("tpg_lun") == index for m in acl.get("mapped_luns", []))]

    def reservation_drift(self, lun: LunSpec, live: dict) -> str:
        """What differs in the live backstore's emulate_pr from ``emulate_pr``'s ("" nothing). A dump without the
        attribute (a kernel without it, a recording without attributes) plans nothing: creation refuses such a
        kernel for a read-only export."""
        have = (live.get("attributes") or {}).get("emulate_pr")
        want = emulate_pr(lun.readonly)
        return "" if have is None or int(have) == want else f"emulate_pr {int(have)} -> {want}"

    def logged_in_users(self, backstore: str) -> list:
        """Who would lose a LUN of this backstore if it were re-created: the initiators logged in to a target
        that maps it (to a LUN of their ACL), and any target that is not the project's exporting it."""
        users: set = set()
        for iqn, tgt in self.targets.items():
            for tpg in tgt.get("tpgs", []):
                for lu in tpg.get("luns", []):
                    if lu.get("storage_object") != backstore_path(backstore):
                        continue
                    if not self.state.owns_target(iqn):
                        users.add(f"foreign target {iqn}")
                        continue
                    mapped = self.lun_users(iqn, tpg, lu["index"])
                    users |= {i for i in self.session_initiators(iqn) if i in mapped}
        return sorted(users)

    # -- validation against live state --
    def validate(self) -> None:
        desired_names = {lun.backstore for t in self.state.targets for lun in t.luns}
        for t in self.state.targets:
            for lun in t.luns:
                if self.devices is not None:
                    info = self.devices.get(lun.device) or {}
                    if not info.get("exists"):
                        hint = (" (a snapshot's device appears only with `zfs set snapdev=visible` on its "
                                "dataset)" if "@" in lun.device else "")
                        raise UserError(f"target {t.name!r}: LUN {lun.name!r} device {lun.device} does not exist"
                                        + hint, "create the zvol first (and run `udevadm settle`), or fix the path")
                    if not info.get("block"):
                        raise UserError(f"target {t.name!r}: LUN {lun.name!r} device {lun.device} is not a block "
                                        "device", "give a zvol path under /dev/zvol/")
                real = ((self.devices or {}).get(lun.device) or {}).get("realpath") or lun.device
                for so in self.backstores.values():
                    if so["name"] in desired_names:
                        continue
                    so_real = ((self.devices or {}).get(so.get("dev")) or {}).get("realpath") or so.get("dev")
                    if so.get("dev") in (lun.device, real) or so_real == real:
                        if self.state.owns_backstore(so["name"]) and self.purge:
                            continue  # it will be purged first
                        raise UserError(f"target {t.name!r}: device {lun.device} of LUN {lun.name!r} is already "
                                        f"exported by backstore {so['name']!r}",
                                        "remove that export first (or purge it, if it is the project's)")

    # -- backstores --
    def plan_backstores(self) -> set:
        """Create/replace desired backstores; return the names being (re)created."""
        fresh: set = set()
        for t in self.state.targets:
            for lun in t.luns:
                live = self.backstores.get(lun.backstore)
                if live is not None:
                    if live.get("plugin", "block") != "block":
                        raise UserError(f"backstore {lun.backstore!r} exists as a {live.get('plugin')} backstore",
                                        "delete it or rename the LUN")
                    drift = [f"{k} {live.get(k)!r} -> {v!r}" for k, v in
                             (("dev", lun.device), ("readonly", lun.readonly), ("wwn", lun.wwn))
                             if (str(live.get(k)).lower() if k == "wwn" else live.get(k)) != v]
                    pr_drift = self.reservation_drift(lun, live)
                    if pr_drift and not drift:
                        readers = self.logged_in_users(lun.backstore)
                        if readers:  # re-created only when nobody reads it: a live export never drops readers
                            self.keep("backstore", lun.backstore,
                                      f"{pr_drift}: any host it is exported to can hold a SCSI reservation that "
                                      f"stops the others; the attribute is set only with the LUN unmapped, and "
                                      f"{', '.join(readers)} read it: re-created at the first run with none of "
                                      "its hosts logged in (log them out, or unpublish and publish it again)")
                            continue
                    if pr_drift:
                        drift.append(pr_drift)
                    if not drift:
                        continue
                    for iqn, tgt in self.targets.items():
                        tpg_list = tgt.get("tpgs", [])
                        for tpg in tpg_list:
                            for lu in tpg.get("luns", []):
                                if lu.get("storage_object") != backstore_path(lun.backstore):
                                    continue
                                if not self.state.owns_target(iqn):
                                    raise UnsafeOperation(
                                        f"backstore {lun.backstore!r} must be re-created ({'; '.join(drift)}) but "
                                        f"foreign target {iqn} exports it", "remove that export first")
                                for acl in tpg.get("node_acls", []):
                                    for m in acl.get("mapped_luns", []):
                                        if m.get("tpg_lun") == lu["index"]:
                                            self.check_busy(f"LUN {lu['index']}", iqn, [acl["node_wwn"]])
                                            self.delete_map(iqn, acl["node_wwn"], m["index"],
                                                            "its backstore is re-created")
                                self.add("delete_lun", iqn, "its backstore is re-created", index=lu["index"])
                                self.deleted_luns.add((iqn, lu["index"]))
                    self.add("delete_backstore", "", "re-created: " + "; ".join(drift), name=lun.backstore)
                self.add("create_backstore", "", name=lun.backstore, device=lun.device, readonly=lun.readonly,
                         wwn=lun.wwn, emulate_pr=emulate_pr(lun.readonly))
                fresh.add(lun.backstore)
        return fresh

    # -- one target --
    def plan_target(self, spec: TargetSpec, fresh: set) -> None:
        iqn = spec.iqn
        live_t = self.targets.get(iqn)
        tpg = tpg_of(live_t)
        if live_t is None:
            self.add("create_target", iqn)
        if tpg is None:
            self.add("create_tpg", iqn, tag=TPG_TAG)
            tpg = {"tag": TPG_TAG, "enable": False, "attributes": {}, "luns": [], "portals": [], "node_acls": []}
        for other in (live_t or {}).get("tpgs", []):
            if other.get("tag") != TPG_TAG:
                self.keep("tpg", f"{iqn} tpgt_{other.get('tag')}", "only TPG 1 is managed")
        attrs = tpg.get("attributes", {})
        for name, value in desired_attributes(spec).items():
            if attrs.get(name) != value:
                self.add("set_tpg_attribute", iqn, name=name, value=value)
        # portals
        want = {p.key() for p in spec.portals}
        have = {(strip_brackets(p["ip_address"]), p["port"]) for p in tpg.get("portals", [])}
        for ip, port in sorted(have - want):
            if self.purge:
                self.check_busy(f"portal {ip}:{port}", iqn, self.session_initiators(iqn))
                self.add("delete_portal", iqn, "not in desired state", ip=ip, port=port)
            else:
                self.keep("portal", f"{iqn} {ip}:{port}", "not in desired state; purge: true removes it")
        for ip, port in sorted(want - have):
            self.add("create_portal", iqn, ip=ip, port=port)
        # LUNs: index per desired LUN
        live_luns = {lu["index"]: lu.get("storage_object", "") for lu in tpg.get("luns", [])
                     if (iqn, lu["index"]) not in self.deleted_luns}
        by_path: dict = {}
        for index, path in sorted(live_luns.items()):
            by_path.setdefault(path, index)
        explicit = {lun.lun for lun in spec.luns if lun.lun is not None}
        index_of: dict = {}
        claimed: set = set(explicit)
        for lun in spec.luns:
            path = backstore_path(lun.backstore)
            if lun.lun is not None:
                index_of[lun.name] = lun.lun
            elif path in by_path and by_path[path] not in explicit:
                index_of[lun.name] = by_path[path]
                claimed.add(by_path[path])
        for lun in spec.luns:
            if lun.name in index_of:
                continue
            index = next(i for i in range(MAX_LUN + 1) if i not in claimed and i not in live_luns)
            index_of[lun.name] = index
            claimed.add(index)
        wanted_luns = {index_of[lun.name]: backstore_path(lun.backstore) for lun in spec.luns}
        removed_luns: set = set()
        for index, path in sorted(live_luns.items()):
            if wanted_luns.get(index) == path:
                continue
            users = self.lun_users(iqn, tpg, index)
            if index in wanted_luns or self.purge:
                self.check_busy(f"LUN {index}", iqn, users)
                for acl in tpg.get("node_acls", []):
                    for m in acl.get("mapped_luns", []):
                        if m.get("tpg_lun") == index:
                            self.delete_map(iqn, acl["node_wwn"], m["index"], f"TPG LUN {index} is removed")
                self.add("delete_lun", iqn, f"not in desired state ({path})", index=index)
                removed_luns.add(index)
                self.deleted_luns.add((iqn, index))
            else:
                self.keep("lun", f"{iqn} lun {index} ({path})", "not in desired state; purge: true removes it")
        for lun in spec.luns:
            index = index_of[lun.name]
            if live_luns.get(index) != backstore_path(lun.backstore) or index in removed_luns:
                self.add("create_lun", iqn, index=index, backstore=lun.backstore)
        recreated_luns = {index_of[lun.name] for lun in spec.luns if lun.backstore in fresh} | {
            index for index in wanted_luns if live_luns.get(index) != wanted_luns[index]}
        # ACLs
        live_acls = {a["node_wwn"]: a for a in tpg.get("node_acls", [])}
        wanted_acls = {a.initiator: a for a in spec.acls}
        # a declared target's ACLs are its whole access list: an initiator taken off it loses its ACL (access
        # withdrawn is revoked on the target, not left to purge); a logged-in one only with force
        for initiator in sorted(live_acls):
            if initiator in wanted_acls:
                continue
            self.check_busy(f"ACL {initiator}", iqn, [initiator])
            self.add("delete_acl", iqn, "not in desired state (access withdrawn)", initiator=initiator)
        ro = {lun.name: lun.readonly for lun in spec.luns}
        declared = {index_of[lun.name] for lun in spec.luns}
        for acl in spec.acls:
            live_acl = live_acls.get(acl.initiator)
            if live_acl is None:
                self.add("create_acl", iqn, initiator=acl.initiator)
            live_maps = {m["index"]: m for m in (live_acl or {}).get("mapped_luns", [])}
            wanted_maps = {index_of[name]: ro[name] for name in acl.luns}
            for index, m in sorted(live_maps.items()):
                if index in wanted_maps and m.get("tpg_lun") == index and index not in recreated_luns:
                    continue
                if (iqn, acl.initiator, index) in self.deleted_maps:
                    continue  # already deleted with its TPG LUN
                if index in wanted_maps or index in declared or self.purge:
                    # a declared LUN taken off the ACL is access withdrawn: unmapped without purge
                    self.check_busy(f"mapped LUN {index}", iqn, [acl.initiator])
                    self.delete_map(iqn, acl.initiator, index, "not in desired state")
                else:
                    self.keep("mapped_lun", f"{iqn} {acl.initiator} lun {index}",
                              "its LUN is not in desired state; purge: true removes both")
            for index, readonly in sorted(wanted_maps.items()):
                m = live_maps.get(index)
                if m is None or m.get("tpg_lun") != index or index in recreated_luns:
                    self.add("create_mapped_lun", iqn, initiator=acl.initiator, index=index, tpg_lun=index,
                             write_protect=readonly)
                elif bool(m.get("write_protect")) != readonly:
                    self.add("set_write_protect", iqn, initiator=acl.initiator, index=index, value=readonly)
            want_auth = acl.chap.fields() if acl.chap else dict.fromkeys(AUTH_FIELDS, "")
            for name, value in want_auth.items():
                if (live_acl or {}).get("chap_" + name, "") != value:
                    self.add("set_auth", iqn, initiator=acl.initiator, field=name, value=value)
            if acl.tag is not None and (live_acl or {}).get("tag") != acl.tag:
                self.add("set_acl_tag", iqn, initiator=acl.initiator, value=acl.tag)
        if not tpg.get("enable"):
            self.add("enable_tpg", iqn)

    def plan_unwanted(self) -> None:
        desired_iqns = {t.iqn for t in self.state.targets}
        for iqn in sorted(self.targets):
            if not self.state.owns_target(iqn):
                self.keep("target", iqn, "not project-owned (outside base_iqn); left alone")
            elif iqn not in desired_iqns:
                if self.purge:
                    self.check_busy("target", iqn, self.session_initiators(iqn))
                    self.add("delete_target", iqn, "not in desired state")
                    self.deleted_targets.add(iqn)
                else:
                    self.keep("target", iqn, "project-owned but not in desired state; purge: true removes it")

    def plan_unwanted_backstores(self) -> None:
        desired = {lun.backstore for t in self.state.targets for lun in t.luns}
        for name in sorted(self.backstores):
            if name in desired:
                continue
            if not self.state.owns_backstore(name):
                self.keep("backstore", name, "not project-owned (no backstore prefix); left alone")
                continue
            users = [f"{iqn} lun {lu['index']}" for iqn, tgt in self.targets.items() for tpg in tgt.get("tpgs", [])
                     for lu in tpg.get("luns", []) if lu.get("storage_object") == backstore_path(name)
                     and iqn not in self.deleted_targets and (iqn, lu["index"]) not in self.deleted_luns]
            if self.purge and not users:
                self.add("delete_backstore", "", "not in desired state", name=name)
            else:
                why = f"still exported by {', '.join(users)}" if users else "purge: true removes it"
                self.keep("backstore", name, f"project-owned but not in desired state; {why}")

    def plan_discovery(self) -> None:
        """SendTargets discovery is closed: LIO's discovery authentication is enforced with no credentials, so
        no initiator learns a target name it was not given (LIO's discovery CHAP is one secret for every
        host, which would let any host that has it list the targets another host's initiator name may see).
        Sessions are made from node records written by the fabric itself."""
        if not discovery_closed(self.dump):
            self.add("close_discovery", "", "SendTargets discovery lists target names; the fabric's hosts get them "
                     "from the fabric")

    def run(self) -> list[Step]:
        self.validate()
        self.plan_discovery()
        self.plan_unwanted()
        fresh = self.plan_backstores()
        for spec in self.state.targets:
            self.plan_target(spec, fresh)
        self.plan_unwanted_backstores()
        if self.busy and not self.force:
            raise Busy("refused, initiators are logged in: " + "; ".join(self.busy),
                       "log them out first (`iscsiadm -m node -T TARGET --logout` on the GPU node) or set "
                       "force: true to cut them off")
        if self.busy:
            for item in self.busy:
                self.keep("session", item, "force: true, removed anyway")
        return ordered(self.steps)


def plan(desired: dict | DesiredState, live: dict, *, purge: bool = False, force: bool = False) -> list[Step]:
    """The ordered steps that turn ``live`` into ``desired`` (pure; raises UserError/Busy)."""
    return _Planner(parse_desired(desired), live, purge, force).run()


def plan_removal(live: dict, *, iqn_base: str, backstore_prefix: str, target_iqns: list[str], force: bool = False,
                 planned_logouts: frozenset = frozenset()) -> list[Step]:
    """Steps deleting whole project-owned targets and the backstores only they export (pure).

    A target with logged-in initiators is refused (unless ``force``), except for the initiators in
    ``planned_logouts``: a dry run's own planned logouts, whose sessions are still there."""
    state = DesiredState(base_iqn=iqn_base, backstore_prefix=backstore_prefix)
    planner = _Planner(state, live, purge=True, force=force)
    for iqn in [iqn for iqn in target_iqns if iqn in planner.targets]:
        if not state.owns_target(iqn):
            raise UserError(f"target {iqn} is not fabricctl's (outside {iqn_base})", "leave it to its owner")
        planner.check_busy("target", iqn, [i for i in planner.session_initiators(iqn) if i not in planned_logouts])
        planner.add("delete_target", iqn, "unpublished")
        planner.deleted_targets.add(iqn)
    for name in sorted(planner.backstores):
        if not state.owns_backstore(name):
            continue
        users = [iqn for iqn, tgt in planner.targets.items() for tpg in tgt.get("tpgs", [])
                 for lu in tpg.get("luns", []) if lu.get("storage_object") == backstore_path(name)]
        if users and all(u in planner.deleted_targets for u in users):
            planner.add("delete_backstore", "", "its target is removed", name=name)
    if planner.busy and not force:
        raise Busy("refused, initiators are logged in: " + "; ".join(planner.busy),
                   "unpublish from those hosts first (or pass --force)")
    return ordered(planner.steps)


def plan_access(live: dict, *, target_iqn: str, keep: Mapping[str, Chap | None], force: bool = False,
                planned_logouts: frozenset = frozenset(), cut_off: frozenset = frozenset()) -> list[Step]:
    """Steps bringing one existing target's ACLs to ``keep`` (initiator -> its CHAP credentials, or None)
    (pure): the ACLs (and mapped LUNs) of every other initiator are removed, so a host whose access is withdrawn
    can no longer log in; a kept ACL gets its CHAP credentials where they differ (a rotated secret; sessions
    stay, the new secret counts at the next login). Removing the ACL of an initiator still logged in is refused
    (unless ``force``, which cuts it off), except for those in ``planned_logouts`` (a dry run's own logouts) and
    those in ``cut_off`` (cut off whatever they do: hosts no longer trusted)."""
    planner = _Planner(DesiredState(base_iqn=target_iqn.split(":", 1)[0]), live, purge=True, force=force)
    tpg = tpg_of(planner.targets.get(target_iqn)) or {}
    for acl in sorted(tpg.get("node_acls", []), key=lambda a: a["node_wwn"]):
        initiator = acl["node_wwn"]
        if initiator in keep:
            chap = keep[initiator]
            want = chap.fields() if chap else dict.fromkeys(AUTH_FIELDS, "")
            for name, value in want.items():
                if acl.get("chap_" + name, "") != value:
                    planner.add("set_auth", target_iqn, "CHAP of this host", initiator=initiator, field=name,
                                value=value)
            continue
        if initiator not in planned_logouts | cut_off:
            planner.check_busy(f"ACL {initiator}", target_iqn, [initiator])
        for m in sorted(acl.get("mapped_luns", []), key=lambda m: m["index"]):
            planner.delete_map(target_iqn, initiator, m["index"], "access withdrawn")
        planner.add("delete_acl", target_iqn, "access withdrawn", initiator=initiator)
    want_auth = 1 if any(keep.values()) else 0
    if tpg and keep and tpg.get("attributes", {}).get("authentication") != want_auth:
        planner.add("set_tpg_attribute", target_iqn, name="authentication", value=want_auth)
    if planner.busy and not force:
        raise Busy("refused, initiators are logged in: " + "; ".join(planner.busy),
                   "log them out first (unpublish from those hosts), or pass --force to cut them off")
    return ordered(planner.steps)


def revoked(steps: list[Step]) -> list[str]:
    """The initiators whose ACL a plan removes."""
    return [s.params["initiator"] for s in steps if s.kind == "delete_acl"]
