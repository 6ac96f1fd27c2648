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


def as_live(acls: dict[str, list[str]]) -> dict:
    """``acl_map``'s answer in the shape of ``lio.read_live()`` (targets with their ACLs; no storage
    objects, sessions or devices: those were not read)."""
    targets = [{"wwn": t, "fabric_module": "iscsi",
                "tpgs": [{"tag": 1, "node_acls": [{"node_wwn": i} for i in inits]}]}
               for t, inits in sorted(acls.items())]
    return {"dump": {"targets": targets, "storage_objects": []}, "sessions": [], "devices": {}, "partial": True}
