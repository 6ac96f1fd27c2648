#!/usr/bin/python
# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: Ansible module fabric_mounts (systemd .mount units of one owner).
# The logic lives in plugins/module_utils/fabric_core/node/mounts.py (shared with fabricctl); this module only
# parses arguments.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_mounts
short_description: Keep one owner's systemd mount units (read-only iSCSI datasets) exactly as listed
description:
  - Writes a systemd C(.mount) unit per listed mount, enables it (so the mount comes back after a
    reboot, ordered after its device, iscsid and the network) and starts it. A unit whose text
    changed is restarted; an unchanged, mounted one is left alone, so a second run changes nothing.
  - Read-only mounts never replay a journal (ext4 C(ro,noload), xfs C(ro,norecovery)); after
    starting, the module checks that the mount is really read-only.
  - Every unit carries a marker line naming its C(owner). With C(purge=true), units of the same
    owner whose mount point is no longer listed are unmounted, disabled and deleted before anything
    is written; units of other owners (fabricctl's published versions) and units without a marker
    are never touched. A mount to be removed that a process still uses is refused, naming the
    processes, unless C(force=true).
  - The same code writes fabricctl's mount units on GPU nodes.
version_added: "0.1.0"
author: gpu-storage-fabric authors (!UNKNOWN)
options:
  owner:
    description: The owner written into each unit's marker line; purge looks only at this owner's units.
    type: str
    required: true
  mounts:
    description: The mounts this owner wants; an empty list with C(purge=true) removes all of its units.
    type: list
    elements: dict
    required: true
    suboptions:
      device:
        description: The device to mount, a stable path such as C(/dev/disk/by-path/ip-...-iscsi-IQN-lun-0).
        type: str
        required: true
      mountpoint:
        description: An absolute path; the unit's name is derived from it (systemd-escape).
        type: path
        required: true
      fstype:
        description: The file system on the device.
        type: str
        choices: [ext4, xfs]
        required: true
      readonly:
        description: Mount read-only (the default for every dataset export).
        type: bool
        default: true
      description:
        description: The unit's Description=.
        type: str
        default: fabric dataset
  purge:
    description: Remove this owner's units whose mount point is not in C(mounts).
    type: bool
    default: true
  force:
    description: Remove unwanted mounts even while processes use them (they get I/O errors).
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the unit files, systemd and the mount table; reports what would be written, started or removed.
  diff_mode:
    support: full
    details: The text of each written unit, before and after; removed units by name.
  platform:
    platforms: debian
notes:
  - The devices must exist before the units start (log in first with M(gpufabric.storage.fabric_iscsi_session)).
"""

EXAMPLES = r"""
- name: Mount two read-only dataset exports, removing any other mount this role made
  fabric_mounts:
    owner: iscsi_initiator
    mounts:
      - device: /dev/disk/by-path/ip-10.77.0.11:3260-iscsi-iqn.2026-11.io.fabric.lab:storage1-exports-lun-0
        mountpoint: /datasets/imagenet
        fstype: ext4
        description: Read-only dataset imagenet
  register: mounts

- name: Log out of the targets whose mounts were removed
  fabric_iscsi_session:
    portal: "{{ item.portal }}"
    targets: [{iqn: "{{ item.target_iqn }}"}]
    state: logged_out
  loop: "{{ mounts.removed | selectattr('target_iqn', 'defined') | list }}"
"""

RETURN = r"""
changed:
  description: Whether a unit was (or, in check mode, would be) written, enabled, started, restarted or removed.
  returned: always
  type: bool
mounts:
  description: Per listed mount, its unit and whether it changed.
  returned: always
  type: list
  elements: dict
  sample: [{mountpoint: /datasets/imagenet, unit: datasets-imagenet.mount, changed: false}]
removed:
  description: >-
    The owner's units that were (or would be) removed, with the iSCSI target parsed from the
    device path where it is a C(/dev/disk/by-path/ip-...-iscsi-...) link.
  returned: always
  type: list
  elements: dict
  sample:
    - unit: datasets-old.mount
      mountpoint: /datasets/old
      device: /dev/disk/by-path/ip-10.77.0.11:3260-iscsi-iqn.2026-11.io.fabric.lab:old-lun-0
      portal: 10.77.0.11:3260
      target_iqn: iqn.2026-11.io.fabric.lab:old
      lun: 0
commands:
  description: The changes made (or planned in check mode).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base import rules
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import FabricError
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.runner import ModuleRunner
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.node import iscsi, mounts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            owner=dict(type="str", required=True),
            mounts=dict(type="list", elements="dict", required=True, options=dict(
                device=dict(type="str", required=True),
                mountpoint=dict(type="path", required=True),
                fstype=dict(type="str", choices=list(rules.FILESYSTEMS), required=True),
                readonly=dict(type="bool", default=True),
                description=dict(type="str", default="fabric dataset"),
            )),
            purge=dict(type="bool", default=True),
            force=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    runner = ModuleRunner(module, dry_run=module.check_mode)
    try:
        res = mounts.reconcile(runner, p["mounts"], owner=p["owner"], purge=p["purge"], force=p["force"])
    except FabricError as err:
        module.fail_json(msg=str(err), changed=bool(runner.executed))
    removed = [dict(u, **(iscsi.parse_by_path(u["device"]) or {})) for u in res["removed"]]
    result = {
        "changed": res["changed"],
        "mounts": [{"mountpoint": m["mountpoint"], "unit": r["unit"], "changed": r["changed"]}
                   for m, r in zip(p["mounts"], res["mounts"], strict=True)],
        "removed": removed,
        "commands": res["commands"],
    }
    if module._diff:
        before = "".join(f"# {r['unit']}\n{r['before']}" for r in res["mounts"] if r["before"] != r["after"])
        after = "".join(f"# {r['unit']}\n{r['after']}" for r in res["mounts"] if r["before"] != r["after"])
        before += "".join(f"# {u['unit']} (removed)\n" for u in removed)
        result["diff"] = {"before": before, "after": after, "before_header": f"{p['owner']}'s mount units",
                          "after_header": f"{p['owner']}'s mount units"}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
