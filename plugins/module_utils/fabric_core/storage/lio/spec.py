"""The LIO target's desired state: the validated dataclasses (``parse_desired``), ownership and LUN serials.

``parse_desired(dict) -> DesiredState`` validates everything (IQNs, CHAP, LUN names, the one-writer rule) and
raises ``UserError`` before anything is read or changed.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from ...base.errors import InvalidName, UnsafeOperation, UserError
from ...base.names import (
    validate_backstore_prefix,
    validate_iqn,
    validate_iqn_base,
    validate_lun_name,
    validate_target_name,
)
from ...base.rules import LIO, Chap, check_keys, parse_chap

DEFAULT_BACKSTORE_PREFIX = "fabric_"
# Fixed namespace of the deterministic T10 unit serials (uuid5 over "TARGET_IQN/LUN_NAME").
SERIAL_NAMESPACE = "6f0d7a52-3c0e-5b8e-9f43-2d1a7c9e0b15"
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
ACL_KEYS = ("initiator", "luns", "chap", "tag")
# the NodeACL tag of a host expected to stay logged in (a publish: the host was asked to attach), unlike a grant's
# ACL (the host may attach when a job wants it); `status` warns only of the former without a session. LIO keeps
# a tag in configfs and rtslib's saved configuration; the kernel does nothing with it.
PUBLISHED_TAG = "fabric-published"


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
    tag: str | None = None  # the ACL's LIO tag (PUBLISHED_TAG); None: whatever it has is left as it is


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


def _serial(name: str) -> str:
    """uuid5 of ``name`` in SERIAL_NAMESPACE, as text."""
    import uuid  # noqa: PLC0415 - lazy: a command's start (docs/testing.md; uuid imports platform)

    return str(uuid.uuid5(uuid.UUID(SERIAL_NAMESPACE), name))


def unit_serial(target_iqn: str, lun_name: str) -> str:
    """The deterministic T10 unit serial of a LUN: the same disk to initiators after a re-create.

    The target IQN is part of it so that the same LUN name on two storage nodes is never taken
    for one disk by dm-multipath.
    """
    return _serial(f"{target_iqn}/{lun_name}")


def emulate_pr(readonly: bool) -> int:
    """LIO's ``attrib/emulate_pr`` for a LUN's backstore. 0 on a read-only export, whose hosts share it: LIO then
    refuses SCSI-2 RESERVE/RELEASE and SPC-3 PERSISTENT RESERVE IN/OUT (ILLEGAL REQUEST, invalid command
    operation code) and checks no reservation, so no reader can hold one that stops the others' reads. 1 (the
    kernel's default) on a writable checkpoint volume: it has exactly one ACL, its writer, the only host that can
    hold anything. The kernel takes the attribute only while no LUN exports the backstore (export_count 0): it
    is set when the backstore is made, before its LUN (``create_backstore``), and rtslib's saved configuration
    keeps it (the boot-time restore sets attributes before it makes LUNs)."""
    return 1 if not readonly else 0


def snapshot_serial(guid: str) -> str:
    """The T10 unit serial of a LUN exporting a ZFS snapshot: derived from the snapshot's GUID, which send and
    receive keep. Every storage node holding the same version gives its LUN the same serial (the WWID that
    dm-multipath groups paths by), and a version made again under the same name (other bytes, another GUID)
    gets another one, so paths to different bytes are never grouped."""
    if not str(guid).isdigit():
        raise UserError(f"snapshot GUID {guid!r} is not a number",
                        "read it with `zfs get -H -p -o value guid SNAPSHOT`")
    return _serial(f"zfs-guid/{int(guid)}")


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
            tag = raw_acl.get("tag")
            if tag is not None and (not isinstance(tag, str) or not 0 < len(tag) < 64
                                    or not all(c.isprintable() and not c.isspace() for c in tag)):
                raise UserError(f"{where}: ACL {initiator!r} has tag {str(tag)[:80]!r}: not a LIO tag",
                                "a tag is 1-63 printable characters without spaces (or leave it out)")
            spec.acls.append(AclSpec(initiator=initiator, luns=luns,
                                     chap=parse_chap(raw_acl.get("chap"), LIO, where=f"{where}: ACL {initiator}: "),
                                     tag=tag))
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
