"""The LIO iSCSI target as desired state: validation, a pure planner over rtslib dumps, an applier.

Three steps, each testable on its own:

* ``parse_desired(dict) -> DesiredState``: validates everything (IQNs, CHAP, LUN names, the
  one-writer rule) and raises ``UserError`` before anything is read or changed.
* ``plan(desired, live, purge=, force=) -> list[Action]``: a pure function. ``live`` is what
  ``read_live()`` returns: ``{"dump": RTSRoot().dump(), "sessions": [...], "devices": {...}}``
  (unit tests feed it recorded dumps from the lab). Actions with ``op == "keep"`` are reports
  (foreign or unpurged objects left alone); every other action is a change.
* ``apply(actions)``: runs the changes through rtslib-fb in the planned order and, when one
  fails, deletes what this run created (reverse order) before raising ``LioApplyError``.

``OPERATIONS`` is the one table of action kinds: their order in a plan (``RANK``), their simulation
on a dump (a dry run's predicted after-state, ``simulate``) and their execution through rtslib.
``converge`` is the one applier of a plan (``reconcile``'s, and ``plan_removal``'s for the
publishing service): it applies it, or in a dry run simulates it, and reports before and after.

Ownership: targets whose IQN starts with ``BASE_IQN:`` and block backstores whose name starts
with the backstore prefix (``fabric_``) are the project's; nothing else is ever changed.
rtslib-fb is imported lazily so that this module imports (and plans) without it.
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import json
import os
import re
import stat
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..base import atomic
from ..base.errors import Busy, FabricError, InvalidName, UnsafeOperation, UserError
from ..base.names import (
    validate_backstore_prefix,
    validate_iqn,
    validate_iqn_base,
    validate_lun_name,
    validate_target_name,
)
from ..base.rules import LIO, Chap, check_keys, parse_chap

TPG_TAG = 1
DEFAULT_BACKSTORE_PREFIX = "fabric_"
# Debian's rtslib-fb (and its rtslib-fb-targetctl.service, which restores at boot) use this file.
SAVE_FILE = "/etc/rtslib-fb-target/saveconfig.json"
RESTORE_UNIT = "rtslib-fb-targetctl.service"
CONFIGFS = "/sys/kernel/config/target"
# Fixed namespace of the deterministic T10 unit serials (uuid5 over "TARGET_IQN/LUN_NAME").
SERIAL_NAMESPACE = uuid.UUID("6f0d7a52-3c0e-5b8e-9f43-2d1a7c9e0b15")
MAX_LUN = 255
REDACTED = "********"
# LIO's SendTargets discovery credentials (one set for the whole node, rtslib's FabricModule.discovery_*)
DISCOVERY_CREDENTIALS = ("userid", "password", "mutual_userid", "mutual_password")

_UNIT_SERIAL = re.compile(r"^[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$")  # rtslib's unit_serial form
AUTH_FIELDS = LIO.names  # CHAP as LIO names it (rules.Chap, in the LIO view)
# the keys of the desired state's mappings (anything else is refused, with the closest valid key)
STATE_KEYS = ("base_iqn", "backstore_prefix", "targets", "require_chap")
TARGET_KEYS = ("name", "iqn", "portals", "luns", "acls", "writable")
PORTAL_KEYS = ("ip", "port")
LUN_KEYS = ("name", "device", "readonly", "wwn", "lun")
ACL_KEYS = ("initiator", "luns", "chap")


# ---------------------------------------------------------------------------------------------
# Desired state


@dataclass
class Portal:
    ip: str
    port: int = 3260

    def key(self) -> tuple:
        return (self.ip, self.port)


@dataclass
class LunSpec:
    name: str
    device: str
    readonly: bool = True
    wwn: str = ""  # T10 unit serial; derived when not given
    lun: int | None = None  # TPG LUN index; the existing or the lowest free one when not given
    backstore: str = ""


@dataclass
class AclSpec:
    initiator: str
    luns: list = field(default_factory=list)  # LUN names (resolved: never empty unless the target has none)
    chap: Chap | None = None


@dataclass
class TargetSpec:
    name: str
    iqn: str
    portals: list = field(default_factory=list)
    luns: list = field(default_factory=list)
    acls: list = field(default_factory=list)
    writable: bool = False

    @property
    def chap(self) -> bool:
        return any(a.chap for a in self.acls)


@dataclass
class DesiredState:
    base_iqn: str
    targets: list = field(default_factory=list)
    backstore_prefix: str = DEFAULT_BACKSTORE_PREFIX
    require_chap: bool = True  # every ACL authenticates its initiator (False: only for an isolated lab)

    def owns_target(self, iqn: str) -> bool:
        return iqn.startswith(self.base_iqn + ":")

    def owns_backstore(self, name: str) -> bool:
        return name.startswith(self.backstore_prefix)


def unit_serial(target_iqn: str, lun_name: str) -> str:
    """The deterministic T10 unit serial of a LUN: the same disk to initiators after a re-create.

    The target IQN is part of it so that the same LUN name on two storage nodes is never taken
    for one disk by dm-multipath.
    """
    return str(uuid.uuid5(SERIAL_NAMESPACE, f"{target_iqn}/{lun_name}"))


def emulate_pr(readonly: bool) -> int:
    """LIO's ``attrib/emulate_pr`` for a LUN's backstore. 0 on a read-only export, whose hosts share it: LIO then
    refuses SCSI-2 RESERVE/RELEASE and SPC-3 PERSISTENT RESERVE IN/OUT (ILLEGAL REQUEST, invalid command
    operation code) and checks no reservation, so no reader can hold one that stops the others' reads. 1 (the
    kernel's default) on a writable checkpoint volume: it has exactly one ACL, its writer, the only host that can
    hold anything. The kernel takes the attribute only while no LUN exports the backstore (export_count 0): it
    is set when the backstore is made, before its LUN (``create_backstore``), and rtslib's saved configuration
    keeps it (the boot-time restore sets attributes before it makes LUNs)."""
    return 1 if not readonly else 0


def set_reservations(so, value: int) -> None:
    """Set a new backstore's emulate_pr (an rtslib StorageObject, not exported yet). A read-only export on a
    kernel without the attribute is refused: its readers could stop each other."""
    if "emulate_pr" not in so.list_attributes():
        if value:
            return  # the kernel's only behaviour is the one wanted
        raise UserError(f"this kernel has no {so.path}/attrib/emulate_pr: LIO cannot refuse SCSI reservations, and "
                        "any host a read-only export is granted to could stop the others' reads",
                        "run a kernel with LIO's emulate_pr attribute (Linux 4.19 or later; Debian 12 and 13 have it)")
    if int(so.get_attribute("emulate_pr")) != value:
        so.set_attribute("emulate_pr", str(value))


def snapshot_serial(guid: str) -> str:
    """The T10 unit serial of a LUN exporting a ZFS snapshot: derived from the snapshot's GUID, which send and
    receive keep. Every storage node holding the same version gives its LUN the same serial (the WWID that
    dm-multipath groups paths by), and a version made again under the same name (other bytes, another GUID)
    gets another one, so paths to different bytes are never grouped."""
    if not str(guid).isdigit():
        raise UserError(f"snapshot GUID {guid!r} is not a number",
                        "read it with `zfs get -H -p -o value guid SNAPSHOT`")
    return str(uuid.uuid5(SERIAL_NAMESPACE, f"zfs-guid/{int(guid)}"))


def _bool(value, what: str) -> bool:
    if isinstance(value, bool):
        return value
    raise UserError(f"{what} must be true or false, got {value!r}")


def parse_desired(raw: dict | DesiredState) -> DesiredState:
    """Validate the desired state (plain dicts) into dataclasses; UserError on the first problem."""
    if isinstance(raw, DesiredState):
        return raw
    if not isinstance(raw, dict):
        raise UserError("desired LIO state must be a mapping with base_iqn and targets")
    check_keys(raw, STATE_KEYS, "desired LIO state")
    base = validate_iqn_base(raw.get("base_iqn") or "")
    prefix = validate_backstore_prefix(raw.get("backstore_prefix") or DEFAULT_BACKSTORE_PREFIX)
    state = DesiredState(base_iqn=base, backstore_prefix=prefix,
                         require_chap=_bool(raw.get("require_chap", True), "require_chap"))
    secret_owner: dict = {}  # CHAP secret -> the one initiator it belongs to
    targets = raw.get("targets") or []
    if not isinstance(targets, list):
        raise UserError("targets must be a list")
    lun_names: dict = {}
    devices: dict = {}
    iqns: set = set()
    for t in targets:
        if not isinstance(t, dict):
            raise UserError(f"each target must be a mapping, got {t!r}")
        name = validate_target_name(t.get("name") or "")
        iqn = t.get("iqn") or f"{base}:{name}"
        where = f"target {name!r}"
        check_keys(t, TARGET_KEYS, where)
        validate_iqn(iqn)
        if not state.owns_target(iqn):
            raise UserError(f"{where}: iqn {iqn!r} is not under base_iqn {base!r}",
                            f"name it {base}:<something> or leave iqn out (it defaults to {base}:{name})")
        if iqn in iqns:
            raise UserError(f"{where}: target name/iqn {iqn!r} is used twice", "give every target its own name")
        iqns.add(iqn)
        spec = TargetSpec(name=name, iqn=iqn, writable=_bool(t.get("writable", False), f"{where}: writable"))
        for p in t.get("portals") or []:
            check_keys(p, PORTAL_KEYS, f"{where}: portal")
            try:
                ip = str(ipaddress.ip_address(str(p.get("ip", ""))))
            except ValueError:
                raise UserError(f"{where}: portal ip {p.get('ip')!r} is not an IP address",
                                "give the storage address, for example 10.77.0.11") from None
            port = p.get("port", 3260)
            if not isinstance(port, int) or not 1 <= port <= 65535:
                raise UserError(f"{where}: portal port {port!r} must be 1-65535")
            portal = Portal(ip, port)
            if any(x.key() == portal.key() for x in spec.portals):
                raise UserError(f"{where}: portal {ip}:{port} is listed twice")
            spec.portals.append(portal)
        if not spec.portals:
            raise UserError(f"{where}: no portals", "give at least one portal: {ip: <storage address>, port: 3260}")
        explicit: set = set()
        for raw_lun in t.get("luns") or []:
            check_keys(raw_lun, LUN_KEYS, f"{where}: LUN")
            lname = raw_lun.get("name") or ""
            try:
                validate_lun_name(lname)
            except InvalidName as err:
                raise InvalidName(f"{where}: {err.problem}", err.fix) from None
            if lname in lun_names:
                raise UserError(f"{where}: LUN name {lname!r} is also used in target {lun_names[lname]!r}",
                                "LUN names are unique on a storage node (each is one backstore)")
            lun_names[lname] = name
            device = raw_lun.get("device") or ""
            if not device.startswith("/dev/") or "\n" in device or " " in device:
                raise UserError(f"{where}: LUN {lname!r} device {device!r} must be a /dev path",
                                "for example /dev/zvol/tank/datasets/imagenet@v1")
            if device in devices:
                raise UserError(f"{where}: device {device} is exported twice (LUNs {devices[device]!r} and {lname!r})",
                                "export each zvol or snapshot once; give several ACLs access to it instead")
            devices[device] = lname
            wwn = raw_lun.get("wwn") or unit_serial(iqn, lname)
            if not _UNIT_SERIAL.fullmatch(wwn):
                raise UserError(f"{where}: LUN {lname!r} wwn {wwn!r} is not a T10 unit serial in UUID form",
                                "leave wwn out (a stable one is derived) or give a UUID")
            index = raw_lun.get("lun")
            if index is not None:
                if not isinstance(index, int) or not 0 <= index <= MAX_LUN or index in explicit:
                    raise UserError(f"{where}: LUN {lname!r} index {index!r} must be a unique integer 0-{MAX_LUN}")
                explicit.add(index)
            spec.luns.append(LunSpec(name=lname, device=device,
                                     readonly=_bool(raw_lun.get("readonly", True), f"{where}: LUN {lname} readonly"),
                                     wwn=wwn.lower(), lun=index, backstore=prefix + lname))
        all_luns = [lun.name for lun in spec.luns]
        for raw_acl in t.get("acls") or []:
            check_keys(raw_acl, ACL_KEYS, f"{where}: ACL")
            initiator = raw_acl.get("initiator") or ""
            validate_iqn(initiator)
            if any(a.initiator == initiator for a in spec.acls):
                raise UserError(f"{where}: initiator {initiator!r} has two ACLs", "merge them into one")
            luns = raw_acl.get("luns")
            luns = list(all_luns) if luns is None else list(luns)
            for lname in luns:
                if lname not in all_luns:
                    raise UserError(f"{where}: ACL {initiator!r} names LUN {lname!r}, which the target does not have",
                                    f"use one of {all_luns}")
            spec.acls.append(AclSpec(initiator=initiator, luns=luns,
                                     chap=parse_chap(raw_acl.get("chap"), LIO, where=f"{where}: ACL {initiator}: ")))
        without = [a.initiator for a in spec.acls if not a.chap]
        if without and state.require_chap:
            raise UserError(f"{where}: ACL {without[0]} has no CHAP: a host that sets this initiator name (anyone on "
                            "the storage network can) would be let in",
                            "give every ACL the CHAP credentials of its own host (the roles and fabricctl do it from "
                            "the per-host secrets); only on an isolated lab, allow exports without CHAP "
                            "(fabric_insecure_no_chap: true)")
        for acl in spec.acls:
            _claim_secrets(acl, secret_owner, where)
        with_chap = [a.initiator for a in spec.acls if a.chap]
        if with_chap and len(with_chap) != len(spec.acls):
            raise UserError(f"{where}: CHAP is set for {with_chap} but not for the other ACLs",
                            "CHAP is per target (TPG attribute authentication): give every ACL a chap or none")
        for lun in spec.luns:
            if lun.readonly:
                continue
            readers = [a.initiator for a in spec.acls if lun.name in a.luns]
            if not spec.writable:
                raise UnsafeOperation(f"{where}: LUN {lun.name!r} is readonly: false but the target is not writable",
                                      "set writable: true on the target (one writer only) or keep the LUN read-only")
            if len(readers) != 1:
                raise UnsafeOperation(
                    f"{where}: writable LUN {lun.name!r} is mapped to {len(readers)} ACLs {readers}; a writable "
                    "export must have exactly one writer (two initiators writing one block device corrupt it)",
                    "give the writable LUN exactly one ACL, or make it readonly: true")
        state.targets.append(spec)
    return state


def _claim_secrets(acl: AclSpec, owner: dict, where: str) -> None:
    """Each CHAP secret belongs to one initiator: another initiator with it could log in as the first."""
    for secret in (acl.chap.password, acl.chap.mutual_password) if acl.chap else ():
        if secret and owner.setdefault(secret, acl.initiator) != acl.initiator:
            raise UserError(f"{where}: ACLs {owner[secret]} and {acl.initiator} share a CHAP secret (not shown): "
                            "either host could log in as the other",
                            "give every host its own CHAP secrets (the per-host secrets of the roles are)")


# ---------------------------------------------------------------------------------------------
# Actions

@dataclass
class Action:
    op: str
    target: str = ""  # target IQN ("" for backstores)
    params: dict = field(default_factory=dict)
    reason: str = ""

    @property
    def changes(self) -> bool:
        return self.op != "keep"

    def describe(self) -> str:
        """One readable line; CHAP secrets are redacted."""
        p = dict(self.params)
        if self.op == "set_auth" and "password" in p.get("field", ""):
            p["value"] = REDACTED if p.get("value") else ""
        where = f" {self.target}" if self.target else ""
        args = " ".join(f"{k}={v}" for k, v in p.items())
        text = f"{self.op}{where}" + (f" {args}" if args else "")
        return text + (f" ({self.reason})" if self.reason else "")

    def to_dict(self) -> dict:
        p = dict(self.params)
        if self.op == "set_auth" and "password" in p.get("field", "") and p.get("value"):
            p["value"] = REDACTED
        return {"op": self.op, "target": self.target, "params": p, "reason": self.reason}


# ---------------------------------------------------------------------------------------------
# The operations: one table of what each action does, in the order a plan runs them (children
# removed before their parents, parents created before their children): its simulation on a dump
# (the predicted after-state of a dry run) and its execution through rtslib (returning the undo of
# a creation).


class _Dump:
    """A dump being changed by a simulation (``simulate``)."""

    def __init__(self, dump: dict):
        self.dump = dump

    def target(self, iqn: str) -> dict:
        return next(t for t in self.dump["targets"] if t["wwn"] == iqn)

    def tpg(self, iqn: str) -> dict:
        return _tpg(self.target(iqn))

    def acl(self, iqn: str, initiator: str) -> dict:
        return next(a for a in self.tpg(iqn)["node_acls"] if a["node_wwn"] == initiator)

    def mapped_lun(self, a: Action) -> dict:
        return next(m for m in self.acl(a.target, a.params["initiator"])["mapped_luns"]
                    if m["index"] == a.params["index"])

    def set_auth(self, a: Action) -> None:
        acl, key = self.acl(a.target, a.params["initiator"]), "chap_" + a.params["field"]
        if a.params["value"]:
            acl[key] = a.params["value"]
        else:
            acl.pop(key, None)

    @staticmethod
    def drop(items: list, unwanted) -> None:
        items[:] = [x for x in items if not unwanted(x)]

    def close_discovery(self) -> None:
        modules = self.dump.setdefault("fabric_modules", [])
        self.drop(modules, lambda fm: fm.get("name") == "iscsi")
        modules.append({"name": "iscsi", "discovery_enable_auth": True})


class _Rtslib:
    """rtslib-fb objects of the project's targets (``apply``)."""

    BUSY_RETRY_SECONDS = 60.0

    def __init__(self, rts):
        self.rts = rts
        self.fm = rts.FabricModule("iscsi")

    def target(self, iqn):
        return self.rts.Target(self.fm, iqn, mode="lookup")

    def tpg(self, iqn):
        return self.rts.TPG(self.target(iqn), TPG_TAG, mode="lookup")

    def acl(self, iqn, initiator):
        return self.rts.NodeACL(self.tpg(iqn), initiator, mode="lookup")

    def mapped_lun(self, a: Action):
        return self.rts.MappedLUN(self.acl(a.target, a.params["initiator"]), a.params["index"])

    def portal(self, a: Action, mode: str):
        ip = a.params["ip"]
        return self.rts.NetworkPortal(self.tpg(a.target), f"[{ip}]" if ":" in ip else ip, a.params["port"], mode=mode)

    def create_backstore(self, p: dict):
        # zvol opens fail with ERESTARTSYS ("already in use" to rtslib) while another ZFS command holds
        # spa_namespace_lock (seen in the lab): retry for a while; rtslib removes its half-made object.
        deadline = time.monotonic() + self.BUSY_RETRY_SECONDS
        while True:
            try:
                so = self.rts.BlockStorageObject(p["name"], dev=p["device"], wwn=p["wwn"], readonly=p["readonly"])
                break
            except self.rts.RTSLibError as exc:
                if "in use" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        try:
            set_reservations(so, p.get("emulate_pr", emulate_pr(p["readonly"])))
        except Exception:
            so.delete()
            raise
        return so

    def close_discovery(self) -> None:
        """Discovery authentication enforced (first), then every discovery credential cleared: nobody can
        authenticate, so no initiator gets a SendTargets answer."""
        self.fm.discovery_enable_auth = True
        for attr in DISCOVERY_CREDENTIALS:
            setattr(self.fm, f"discovery_{attr}", "")

    def create_target(self, iqn: str):
        try:
            return self.rts.Target(self.fm, iqn, mode="create")
        except Exception:
            if os.path.isdir(f"{self.fm.path}/{iqn}"):  # a refused create can leave a half-made target behind
                self.rts.Target(self.fm, iqn, mode="lookup").delete()
            raise


@dataclass(frozen=True)
class Operation:
    """One kind of action: its simulation on a dump and its execution through rtslib. A creation's
    execution returns the undo (the new object's delete), which ``apply`` calls when a later action fails."""

    name: str
    simulate: Callable[[_Dump, Action], object]
    execute: Callable[[_Rtslib, Action], object]
    creates: bool = False


def _report(*_args) -> None:
    """``keep`` actions are reports: nothing to simulate or execute."""


OPERATIONS: dict[str, Operation] = {op.name: op for op in (
    Operation("keep", _report, _report),
    Operation("delete_mapped_lun",
              lambda d, a: d.drop(d.acl(a.target, a.params["initiator"])["mapped_luns"],
                                  lambda m: m["index"] == a.params["index"]),
              lambda x, a: x.mapped_lun(a).delete()),
    Operation("delete_acl",
              lambda d, a: d.drop(d.tpg(a.target)["node_acls"], lambda n: n["node_wwn"] == a.params["initiator"]),
              lambda x, a: x.acl(a.target, a.params["initiator"]).delete()),
    Operation("delete_lun",
              lambda d, a: d.drop(d.tpg(a.target)["luns"], lambda lu: lu["index"] == a.params["index"]),
              lambda x, a: x.rts.LUN(x.tpg(a.target), a.params["index"]).delete()),
    Operation("delete_portal",
              lambda d, a: d.drop(d.tpg(a.target)["portals"], lambda n: (_strip_ip(n["ip_address"]), n["port"])
                                  == (a.params["ip"], a.params["port"])),
              lambda x, a: x.portal(a, "lookup").delete()),
    Operation("delete_target",
              lambda d, a: d.drop(d.dump["targets"], lambda t: t["wwn"] == a.target),
              lambda x, a: x.target(a.target).delete()),
    Operation("delete_backstore",
              lambda d, a: d.drop(d.dump["storage_objects"], lambda so: so["name"] == a.params["name"]),
              lambda x, a: x.rts.BlockStorageObject(a.params["name"]).delete()),
    Operation("close_discovery", lambda d, a: d.close_discovery(), lambda x, a: x.close_discovery()),
    Operation("create_backstore",
              lambda d, a: d.dump["storage_objects"].append({
                  "name": a.params["name"], "plugin": "block", "dev": a.params["device"],
                  "readonly": a.params["readonly"], "wwn": a.params["wwn"],
                  "attributes": {"emulate_pr": a.params.get("emulate_pr", emulate_pr(a.params["readonly"]))}}),
              lambda x, a: x.create_backstore(a.params).delete, creates=True),
    Operation("create_target",
              lambda d, a: d.dump["targets"].append({"wwn": a.target, "fabric": "iscsi", "tpgs": []}),
              lambda x, a: x.create_target(a.target).delete, creates=True),
    Operation("create_tpg",
              lambda d, a: d.target(a.target)["tpgs"].append({"tag": a.params["tag"], "enable": False,
                                                              "attributes": {}, "luns": [], "portals": [],
                                                              "node_acls": []}),
              lambda x, a: x.rts.TPG(x.target(a.target), a.params["tag"], mode="create").delete, creates=True),
    Operation("set_tpg_attribute",
              lambda d, a: d.tpg(a.target).setdefault("attributes", {}).update({a.params["name"]: a.params["value"]}),
              lambda x, a: x.tpg(a.target).set_attribute(a.params["name"], str(a.params["value"]))),
    Operation("create_portal",
              lambda d, a: d.tpg(a.target)["portals"].append({"ip_address": a.params["ip"], "port": a.params["port"]}),
              lambda x, a: x.portal(a, "create").delete, creates=True),
    Operation("create_lun",
              lambda d, a: d.tpg(a.target)["luns"].append({"index": a.params["index"],
                                                           "storage_object": _bs_path(a.params["backstore"])}),
              lambda x, a: x.rts.LUN(x.tpg(a.target), a.params["index"],
                                     x.rts.BlockStorageObject(a.params["backstore"])).delete, creates=True),
    Operation("create_acl",
              lambda d, a: d.tpg(a.target)["node_acls"].append({"node_wwn": a.params["initiator"], "mapped_luns": []}),
              lambda x, a: x.rts.NodeACL(x.tpg(a.target), a.params["initiator"], mode="create").delete, creates=True),
    Operation("create_mapped_lun",
              lambda d, a: d.acl(a.target, a.params["initiator"])["mapped_luns"].append(
                  {"index": a.params["index"], "tpg_lun": a.params["tpg_lun"],
                   "write_protect": a.params["write_protect"]}),
              lambda x, a: x.rts.MappedLUN(x.acl(a.target, a.params["initiator"]), a.params["index"],
                                           a.params["tpg_lun"], write_protect=a.params["write_protect"]).delete,
              creates=True),
    Operation("set_write_protect",
              lambda d, a: d.mapped_lun(a).update(write_protect=a.params["value"]),
              lambda x, a: setattr(x.mapped_lun(a), "write_protect", a.params["value"])),
    Operation("set_auth",
              lambda d, a: d.set_auth(a),
              lambda x, a: setattr(x.acl(a.target, a.params["initiator"]), "chap_" + a.params["field"],
                                   a.params["value"])),
    Operation("enable_tpg",
              lambda d, a: d.tpg(a.target).update(enable=True),
              lambda x, a: setattr(x.tpg(a.target), "enable", True)),
)}
RANK = {name: i for i, name in enumerate(OPERATIONS)}  # the order of a plan


# ---------------------------------------------------------------------------------------------
# Planning (pure: plain dicts in, actions out)


def _bs_path(name: str) -> str:
    return f"/backstores/block/{name}"


def _tpg(target: dict | None, tag: int = TPG_TAG) -> dict | None:
    for tpg in (target or {}).get("tpgs", []):
        if tpg.get("tag") == tag:
            return tpg
    return None


def _strip_ip(ip: str) -> str:
    return ip[1:-1] if ip.startswith("[") and ip.endswith("]") else ip


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
        self.actions: list[Action] = []
        self.busy: list[str] = []
        self.targets = {t["wwn"]: t for t in self.dump.get("targets", []) if t.get("fabric", "iscsi") == "iscsi"}
        self.backstores = {s["name"]: s for s in self.dump.get("storage_objects", [])}
        self.deleted_luns: set = set()  # (target iqn, index)
        self.deleted_targets: set = set()
        self.deleted_maps: set = set()  # (target iqn, initiator, mapped index)

    def add(self, op: str, target: str = "", reason: str = "", **params) -> None:
        self.actions.append(Action(op, target, params, reason))

    def delete_map(self, iqn: str, initiator: str, index: int, reason: str) -> None:
        if (iqn, initiator, index) not in self.deleted_maps:
            self.deleted_maps.add((iqn, initiator, index))
            self.add("delete_mapped_lun", iqn, reason, initiator=initiator, index=index)

    def keep(self, kind: str, name: str, reason: str) -> None:
        self.add("keep", "", reason, kind=kind, name=name)

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
                    if lu.get("storage_object") != _bs_path(backstore):
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
                                if lu.get("storage_object") != _bs_path(lun.backstore):
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
        tpg = _tpg(live_t)
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
        have = {(_strip_ip(p["ip_address"]), p["port"]) for p in tpg.get("portals", [])}
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
            path = _bs_path(lun.backstore)
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
        wanted_luns = {index_of[lun.name]: _bs_path(lun.backstore) for lun in spec.luns}
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
            if live_luns.get(index) != _bs_path(lun.backstore) or index in removed_luns:
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
                     for lu in tpg.get("luns", []) if lu.get("storage_object") == _bs_path(name)
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

    def run(self) -> list[Action]:
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
        return sorted(self.actions, key=lambda a: RANK[a.op])


def discovery_closed(dump: dict) -> bool:
    """Whether a dump (``RTSRoot().dump()``, or a live state's) shows SendTargets discovery closed: discovery
    authentication enforced for iSCSI and no discovery credential set (nobody can authenticate)."""
    dump = dump.get("dump", dump)
    iscsi = next((fm for fm in dump.get("fabric_modules", []) if fm.get("name") == "iscsi"), {})
    return bool(iscsi.get("discovery_enable_auth")) and not any(iscsi.get(f"discovery_{attr}")
                                                                for attr in DISCOVERY_CREDENTIALS)


def plan(desired: dict | DesiredState, live: dict, *, purge: bool = False, force: bool = False) -> list[Action]:
    """The ordered actions that turn ``live`` into ``desired`` (pure; raises UserError/Busy)."""
    return _Planner(parse_desired(desired), live, purge, force).run()


def changes(actions: list[Action]) -> list[Action]:
    return [a for a in actions if a.changes]


def plan_removal(live: dict, *, iqn_base: str, backstore_prefix: str, target_iqns: list[str], force: bool = False,
                 planned_logouts: frozenset = frozenset()) -> list[Action]:
    """Actions deleting whole project-owned targets and the backstores only they export (pure).

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
                 for lu in tpg.get("luns", []) if lu.get("storage_object") == _bs_path(name)]
        if users and all(u in planner.deleted_targets for u in users):
            planner.add("delete_backstore", "", "its target is removed", name=name)
    if planner.busy and not force:
        raise Busy("refused, initiators are logged in: " + "; ".join(planner.busy),
                   "unpublish from those hosts first (or pass --force)")
    return sorted(planner.actions, key=lambda a: RANK[a.op])


def plan_access(live: dict, *, target_iqn: str, keep: Mapping[str, Chap | None], force: bool = False,
                planned_logouts: frozenset = frozenset(), cut_off: frozenset = frozenset()) -> list[Action]:
    """Actions bringing one existing target's ACLs to ``keep`` (initiator -> its CHAP credentials, or None)
    (pure): the ACLs (and mapped LUNs) of every other initiator are removed, so a host whose access is withdrawn
    can no longer log in; a kept ACL gets its CHAP credentials where they differ (a rotated secret; sessions
    stay, the new secret counts at the next login). Removing the ACL of an initiator still logged in is refused
    (unless ``force``, which cuts it off), except for those in ``planned_logouts`` (a dry run's own logouts) and
    those in ``cut_off`` (cut off whatever they do: hosts no longer trusted)."""
    planner = _Planner(DesiredState(base_iqn=target_iqn.split(":", 1)[0]), live, purge=True, force=force)
    tpg = _tpg(planner.targets.get(target_iqn)) or {}
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
    return sorted(planner.actions, key=lambda a: RANK[a.op])


def revoked(actions: list[Action]) -> list[str]:
    """The initiators whose ACL a plan removes."""
    return [a.params["initiator"] for a in actions if a.op == "delete_acl"]


# ---------------------------------------------------------------------------------------------
# Simulation and summaries (pure): the predicted "after" of a dry run, and readable diffs


def simulate(live: dict, actions: list[Action]) -> dict:
    """Apply actions to a copy of a live dict (as read_live returns), without touching the kernel."""
    out = copy.deepcopy(live)
    dump = out.setdefault("dump", {}) if "dump" in live or not live else out
    dump.setdefault("storage_objects", [])
    dump.setdefault("targets", [])
    model = _Dump(dump)
    for a in changes(actions):
        OPERATIONS[a.op].simulate(model, a)
    return out


def summarize(live: dict, state: DesiredState | None = None) -> dict:
    """A readable view of the project-owned LIO objects (secrets redacted)."""
    dump = live.get("dump", live)
    owns_t = state.owns_target if state else (lambda iqn: True)
    owns_b = state.owns_backstore if state else (lambda name: True)
    out: dict = {"backstores": {}, "targets": {}, "discovery": "closed" if discovery_closed(dump) else "open"}
    for so in dump.get("storage_objects", []):
        if owns_b(so["name"]):
            out["backstores"][so["name"]] = {"device": so.get("dev"), "readonly": so.get("readonly"),
                                             "wwn": so.get("wwn")}
    for t in dump.get("targets", []):
        if not owns_t(t["wwn"]):
            continue
        tpg = _tpg(t) or {}
        attrs = tpg.get("attributes", {})
        out["targets"][t["wwn"]] = {
            "enabled": bool(tpg.get("enable")),
            "attributes": {k: attrs.get(k) for k in ("authentication", "generate_node_acls", "cache_dynamic_acls",
                                                     "demo_mode_write_protect")},
            "portals": sorted(f"{_strip_ip(p['ip_address'])}:{p['port']}" for p in tpg.get("portals", [])),
            "luns": {str(lu["index"]): lu.get("storage_object", "").rsplit("/", 1)[-1]
                     for lu in sorted(tpg.get("luns", []), key=lambda x: x["index"])},
            "acls": {a["node_wwn"]: {
                "mapped_luns": {str(m["index"]): {"tpg_lun": m.get("tpg_lun"),
                                                  "write_protect": bool(m.get("write_protect"))}
                                for m in sorted(a.get("mapped_luns", []), key=lambda x: x["index"])},
                "chap_userid": a.get("chap_userid", ""),
                "chap_password": REDACTED if a.get("chap_password") else "",
                "chap_mutual_userid": a.get("chap_mutual_userid", ""),
                "chap_mutual_password": REDACTED if a.get("chap_mutual_password") else ""}
                for a in tpg.get("node_acls", [])},
        }
    return out


# ---------------------------------------------------------------------------------------------
# Reading and applying through rtslib-fb (the only part that needs root and the kernel)


def _rtslib():
    try:
        import rtslib_fb  # noqa: PLC0415 - lazy on purpose: planning works without rtslib
    except ImportError as exc:
        raise UserError("python3-rtslib-fb is not installed on this node",
                        "install the Debian packages targetcli-fb and python3-rtslib-fb") from exc
    return rtslib_fb


def device_facts(paths) -> dict:
    """{path: {"exists", "block", "realpath"}} for the given device paths (os.stat on the node)."""
    facts = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            facts[path] = {"exists": False, "block": False, "realpath": ""}
            continue
        facts[path] = {"exists": True, "block": stat.S_ISBLK(st.st_mode), "realpath": os.path.realpath(path)}
    return facts


def read_live(desired: DesiredState | None = None, rts=None) -> dict:
    """Read the live LIO state: ``{"dump", "sessions", "devices"}`` (the planner's input)."""
    rts = rts or _rtslib()
    if not os.path.isdir(CONFIGFS):
        raise UserError(f"{CONFIGFS} does not exist: configfs is not mounted or target_core_mod is not loaded",
                        "mount configfs (`mount -t configfs none /sys/kernel/config`) and `modprobe target_core_mod`")
    root = rts.RTSRoot()
    dump = root.dump()
    sessions = []
    for t in root.targets:
        if t.fabric_module.name != "iscsi":
            continue
        for tpg in t.tpgs:
            for acl in tpg.node_acls:
                s = acl.session
                if s:
                    sessions.append({"target": t.wwn, "tpg": tpg.tag, "initiator": acl.node_wwn,
                                     "state": s.get("state"), "id": s.get("id")})
    paths = set()
    if desired is not None:
        paths |= {lun.device for t in desired.targets for lun in t.luns}
    paths |= {so.get("dev") for so in dump.get("storage_objects", []) if so.get("dev")}
    return {"dump": dump, "sessions": sessions, "devices": device_facts(sorted(paths))}


RESERVATION_FILES = ("pr/res_holder", "pr/res_type", "pr/res_pr_type", "pr/res_pr_registered_i_pts",
                     "attrib/emulate_pr")


def read_reservations(configfs: str = CONFIGFS) -> dict:
    """The SCSI reservation state of every backstore, as configfs shows it: {backstore name: {file: text}} with
    the files of RESERVATION_FILES (``res_holder``, ..., ``emulate_pr``) under core/HBA/NAME (judged by
    ``health.reservations``). A file that cannot be read is left out. Reading needs no rtslib."""
    out: dict = {}
    core = os.path.join(configfs, "core")
    for hba in sorted(os.listdir(core)) if os.path.isdir(core) else []:
        hba_dir = os.path.join(core, hba)
        for name in sorted(os.listdir(hba_dir)) if os.path.isdir(hba_dir) else []:
            if not os.path.isdir(os.path.join(hba_dir, name, "pr")):
                continue
            files = {}
            for rel in RESERVATION_FILES:
                try:
                    with open(os.path.join(hba_dir, name, rel), encoding="utf-8", errors="replace") as f:
                        files[rel.rsplit("/", 1)[-1]] = f.read(65536).strip()
                except OSError:
                    continue
            out[name] = files
    return out


class LioApplyError(FabricError):
    """A change failed half-way; what this run created was removed again."""

    def __init__(self, problem: str, fix: str, done: list, rolled_back: list):
        super().__init__(problem, fix)
        self.done = done
        self.rolled_back = rolled_back
        self.result: dict = {}


def apply(actions: list[Action], *, rts=None, save_config: bool = True, save_file: str = SAVE_FILE) -> list[str]:
    """Run the changes in order; on failure undo this run's creations and raise LioApplyError.

    Deletions and attribute writes done before the failure are not undone (they are listed in
    the error). Whatever happened, once a change was attempted the whole configuration is saved for the
    boot-time restore (``_saved``): what was applied (a withdrawn ACL) must not come back at the next boot
    because a later step failed; a failed save is added to the error.
    """
    todo = changes(actions)
    if not todo:
        return []
    rts = rts or _rtslib()
    ex = _Rtslib(rts)
    done: list[str] = []
    undo: list = []
    with _saved(rts, save_file if save_config else None, done):
        for a in todo:
            try:
                op = OPERATIONS[a.op]
                made = op.execute(ex, a)
                step = made if op.creates else None  # the undo of a creation
            except Exception as exc:  # rtslib raises RTSLibError, OSError, ...
                rolled, failed = [], []
                for text, fn in reversed(undo):
                    try:
                        fn()
                        rolled.append(text)
                    except Exception as undo_exc:  # noqa: BLE001 - keep undoing the rest
                        if "does not exist" not in str(undo_exc):
                            failed.append(f"{text}: {undo_exc}")
                problem = f"LIO change failed at `{a.describe()}`: {exc}"
                if failed:
                    problem += "; could not undo: " + "; ".join(failed)
                raise LioApplyError(problem, "fix the cause and run again (the plan is recomputed from live state); "
                                    "creations of this run were removed, what was applied before the failure is "
                                    "saved for the next boot", done, rolled) from exc
            done.append(a.describe())
            if step is not None:
                undo.append((a.describe(), step))
    return done


@contextlib.contextmanager
def _saved(rts, save_file: str | None, done: list):
    """Save the configuration when the block ends, however it ends (``apply``: a change failed, or the run was
    interrupted): a failed save after a failed change is added to that change's LioApplyError (both are
    reported); after success it is raised as it is."""
    try:
        yield
    except BaseException as err:
        if save_file is not None:
            try:
                save(rts, save_file)
            except Exception as exc:  # noqa: BLE001 - reported with the change's own error
                if isinstance(err, LioApplyError):
                    err.problem += (f"; the configuration could not be saved ({exc}): what was applied "
                                    f"({len(done)} step(s)) is live but not in {save_file}")
                    err.fix += f"; then check that {save_file} is writable"
        raise
    if save_file is not None:
        save(rts, save_file)


def save(rts, save_file: str = SAVE_FILE) -> None:
    """The whole LIO configuration (``RTSRoot().dump()``, what rtslib's save_to_file writes and targetctl
    restores at boot) written atomically, mode 0600 (it holds CHAP secrets): a temporary file of its own in
    the same directory, fsync, rename (``atomic.write_file``). rtslib's own save uses one fixed temporary
    name for every writer, and a crash may leave a truncated file that the boot-time restore refuses."""
    os.makedirs(os.path.dirname(save_file), mode=0o700, exist_ok=True)
    text = json.dumps(rts.RTSRoot().dump(), sort_keys=True, indent=2) + "\n"
    atomic.write_file(save_file, text, mode=0o600)


CONFIGFS_ROOT = "/sys/kernel/config"
ISCSI_TARGET_MODULE = "/sys/module/iscsi_target_mod"


def kernel_ready() -> bool:
    """LIO can be read without side effects: configfs mounted with the target tree, the iSCSI fabric loaded."""
    return os.path.isdir(CONFIGFS) and os.path.isdir(ISCSI_TARGET_MODULE)


def ensure_kernel(runner) -> list[str]:
    """Mount configfs and load iscsi_target_mod (which loads target_core_mod) when they are not there.

    Returns what it did, or, in a dry run, what it would do (a dry run loads nothing: reading LIO
    through rtslib would create configfs directories and so load the modules)."""
    configfs_root, configfs, module = CONFIGFS_ROOT, CONFIGFS, ISCSI_TARGET_MODULE
    steps = []
    if not os.path.ismount(configfs_root):
        steps.append(f"mount configfs at {configfs_root}")
        runner.run(["mount", "-t", "configfs", "none", configfs_root], mutating=True)
    if not (os.path.isdir(module) and os.path.isdir(configfs)):
        steps.append("load iscsi_target_mod (and target_core_mod)")
        runner.run(["modprobe", "-a", "target_core_mod", "iscsi_target_mod"], mutating=True)
    return steps


def empty_live(desired: DesiredState | None = None) -> dict:
    """The live state of a node whose LIO modules are not loaded yet: no storage object, no target."""
    paths = {lun.device for t in desired.targets for lun in t.luns} if desired is not None else set()
    return {"dump": {"storage_objects": [], "targets": [], "fabric_modules": []}, "sessions": [],
            "devices": device_facts(sorted(paths))}


def reconcile(desired: dict | DesiredState, *, purge: bool = False, force: bool = False, dry_run: bool = False,
              save_config: bool = True, save_file: str = SAVE_FILE, rts=None, runner=None,
              predicted: dict | None = None) -> dict:
    """Read, plan, apply (unless dry_run); return a plain result for modules and fabricctl.

    With a runner, LIO's kernel side is made ready first (configfs, modules); a dry run on a node
    where it is not plans from an empty state and says what it would load, loading nothing.
    ``predicted`` (dry runs only): plan from this live state (``simulate``'s, after a plan made earlier in the
    same dry run) instead of reading LIO, which those planned changes did not reach."""
    state = parse_desired(desired)
    warnings = []
    loading = ensure_kernel(runner) if runner is not None else []
    if dry_run and loading:
        warnings.append(f"LIO is not loaded on this node: check mode would {' and '.join(loading)}, and plans "
                        "from an empty configuration")
        before = empty_live(state)
    elif dry_run and predicted is not None:
        before = copy.deepcopy(predicted)
    else:
        rts = rts or _rtslib()
        before = read_live(state, rts)
    if dry_run:
        # check mode of a whole run: a zvol that an earlier task would create does not exist yet
        for path, info in before["devices"].items():
            if not info["exists"]:
                before["devices"][path] = {"exists": True, "block": True, "realpath": path}
                warnings.append(f"{path} does not exist yet: check mode assumes an earlier task creates it "
                                "(a real run refuses a missing device)")
    actions = plan(state, before, purge=purge, force=force)
    return converge(state, before, actions, dry_run=dry_run, loading=loading, warnings=warnings, rts=rts,
                    save_config=save_config, save_file=save_file)


def converge(state: DesiredState, before: dict, actions: list[Action], *, dry_run: bool, loading: list | None = None,
             warnings: list | None = None, rts=None, save_config: bool = True, save_file: str = SAVE_FILE) -> dict:
    """The one applier of a plan (``plan``, ``plan_removal``) made from ``before``: applies it (unless
    dry_run) and returns {changed, actions, kept, before, after, targets, warnings[, done, rolled_back]}.
    In a dry run ``after`` is the simulation (``simulate``); otherwise what LIO reads afterwards.
    ``loading``: what was done (or is planned) to make the kernel side ready first."""
    loading = list(loading or [])
    todo = changes(actions)
    result = {"changed": bool(todo) or bool(loading), "actions": [*loading, *(a.describe() for a in todo)],
              "kept": [a.describe() for a in actions if not a.changes],
              "before": summarize(before, state), "warnings": list(warnings or [])}
    if not todo:
        result["after"] = result["before"]
        result["targets"] = result["before"]["targets"]
        return result
    if dry_run:
        result["after"] = summarize(simulate(before, actions), state)
        result["targets"] = result["before"]["targets"]
        return result
    rts = rts or _rtslib()
    try:
        result["done"] = apply(actions, rts=rts, save_config=save_config, save_file=save_file)
    except LioApplyError as err:
        result["done"] = err.done
        result["rolled_back"] = err.rolled_back
        result["after"] = summarize(read_live(state, rts), state)
        result["targets"] = result["after"]["targets"]
        err.result = result
        raise
    result["after"] = summarize(read_live(state, rts), state)
    result["targets"] = result["after"]["targets"]
    return result
