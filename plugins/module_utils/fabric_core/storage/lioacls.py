"""Who has an ACL on which iSCSI target, read from configfs directory names alone.

``lio.read_live()`` reads everything through rtslib-fb (every storage object's attributes, every
ACL's auth and mapped LUNs): what a plan needs, and seconds of work on a node with many exports (4.1 s
for one target with 500 ACLs on the lab). A listing that only asks "which hosts have this export"
needs the names of the directories ``iscsi/<target>/tpgt_<N>/acls/<initiator>`` and nothing else:
one ``listdir`` per target and TPG. ``as_live`` shapes the answer as ``read_live()``'s, so the
publishing service's ``ExportIndex`` reads it unchanged (its ACL questions, nothing about backstores
or sessions).
"""

from __future__ import annotations

import os

CONFIGFS_ISCSI = "/sys/kernel/config/target/iscsi"
CONFIGFS_CORE = "/sys/kernel/config/target/core"  # backstores: core/<plugin>_<index>/<name>/


def acl_map(prefix: str, root: str = CONFIGFS_ISCSI) -> dict[str, list[str]]:
    """Target IQN -> the initiators with an ACL on it (sorted), for every iSCSI target whose IQN starts
    with ``prefix``. A target that goes away while it is read is left out; no LIO (no directory): {}."""
    out: dict[str, list[str]] = {}
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return out
    for target in names:
        if not target.startswith(prefix) or not target.startswith(("iqn.", "eui.", "naa.")):
            continue  # discovery_auth, lio_version, ...: not targets
        initiators: set[str] = set()
        try:
            for tpg in os.listdir(os.path.join(root, target)):
                if tpg.startswith("tpgt_"):
                    acls = os.path.join(root, target, tpg, "acls")
                    initiators.update(os.listdir(acls) if os.path.isdir(acls) else ())
        except FileNotFoundError:
            continue
        out[target] = sorted(initiators)
    return out


def block_devices(root: str = CONFIGFS_CORE) -> dict[str, str]:
    """Block backstore name -> the device it exports (its ``udev_path``, as rtslib-fb's dump names it ``dev``),
    from configfs files alone: what a question about exported snapshots needs, without rtslib's read of every
    storage object's attributes. A backstore without a device path, or going away while it is read, is left
    out; no LIO: {}."""
    out: dict[str, str] = {}
    try:
        hbas = sorted(os.listdir(root))
    except FileNotFoundError:
        return out
    for hba in hbas:
        if not hba.startswith("iblock_"):
            continue
        try:
            names = sorted(os.listdir(os.path.join(root, hba)))
        except FileNotFoundError:
            continue
        for name in names:
            dev = (_read(os.path.join(root, hba, name, "udev_path")) or "").strip()
            if dev:
                out[name] = dev
    return out


def as_live(acls: dict[str, list[str]], backstores: dict[str, str] | None = None) -> dict:
    """``acl_map``'s answer (and ``block_devices``'s) in the shape of ``lio.read_live()`` (targets with their
    ACLs, block backstores with their device; no attributes, sessions or devices: those were not read)."""
    targets = [{"wwn": t, "fabric_module": "iscsi",
                "tpgs": [{"tag": 1, "node_acls": [{"node_wwn": i} for i in inits]}]}
               for t, inits in sorted(acls.items())]
    objects = [{"name": name, "plugin": "block", "dev": dev} for name, dev in sorted((backstores or {}).items())]
    return {"dump": {"targets": targets, "storage_objects": objects}, "sessions": [], "devices": {}, "partial": True}


# --------------------------------------------------------------------------------------------
# One target, read from configfs files alone: what a grant or a revoke needs, without rtslib's read of the whole
# of LIO (issue 29: a 501st host must not cost a read proportional to the 500 before it)

NO_SESSION = "No active iSCSI Session for Initiator Endpoint"  # an ACL's info, with nobody logged in (the kernel's)
# LIO's CHAP fields of an ACL (rtslib's names, rules.LIO) -> their files in the ACL's auth/ directory
AUTH_FILES = {"userid": "userid", "password": "password", "mutual_userid": "userid_mutual",
              "mutual_password": "password_mutual"}
TPG = "tpgt_1"


def target_facts(target: str, root: str = CONFIGFS_ISCSI) -> dict | None:
    """A target's TPG 1 as configfs names it: {acls: [initiators], luns: [indexes], authentication: int|None,
    enabled: bool}; None when the target (or its TPG) does not exist."""
    tpg = os.path.join(root, target, TPG)
    if not os.path.isdir(tpg):
        return None
    acls_dir, luns_dir = os.path.join(tpg, "acls"), os.path.join(tpg, "lun")
    acls = sorted(os.listdir(acls_dir)) if os.path.isdir(acls_dir) else []
    luns = sorted(int(n[4:]) for n in (os.listdir(luns_dir) if os.path.isdir(luns_dir) else ())
                  if n.startswith("lun_") and n[4:].isdigit())
    return {"acls": acls, "luns": luns, "authentication": _int(os.path.join(tpg, "attrib", "authentication")),
            "enabled": _int(os.path.join(tpg, "enable")) == 1}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(65536)
    except OSError:
        return None


def _int(path: str) -> int | None:
    text = (_read(path) or "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


def acl_auth(target: str, initiator: str, root: str = CONFIGFS_ISCSI) -> dict[str, str]:
    """One ACL's CHAP fields as LIO holds them ({userid, password, mutual_userid, mutual_password}; a field that
    cannot be read is "", which differs from any valid value). Root only: configfs shows the secrets."""
    auth = os.path.join(root, target, TPG, "acls", initiator, "auth")
    return {name: (_read(os.path.join(auth, file)) or "").strip() for name, file in AUTH_FILES.items()}


def acl_tag(target: str, initiator: str, root: str = CONFIGFS_ISCSI) -> str | None:
    """One ACL's LIO tag (``lio.PUBLISHED_TAG`` on a publish's ACL), None when it has none."""
    return (_read(os.path.join(root, target, TPG, "acls", initiator, "tag")) or "").strip() or None


def logged_in(target: str, initiator: str, root: str = CONFIGFS_ISCSI) -> bool:
    """Whether an initiator has a session on the target, from its ACL's ``info`` (the kernel's sentence for
    none). An ACL whose info cannot be read counts as logged in: revoking is refused rather than cutting off a
    session nobody could see."""
    text = _read(os.path.join(root, target, TPG, "acls", initiator, "info"))
    return text is None or not text.lstrip().startswith(NO_SESSION)
