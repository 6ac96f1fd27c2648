#!/usr/bin/python
# Copyright: gpu-storage-fabric contributors
# Apache License 2.0 (see pyproject.toml)
"""Ansible module fabric_disk_info: the disks of a storage node, reported (planning is fabric_zpool's)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_disk_info
short_description: Report the disks of a storage node and whether each is in use
description:
  - Lists every whole disk of the node (loop, zram, optical drives and ZFS volumes are left out) with
    its stable C(/dev/disk/by-id) names, serial, model, size, transport, class (hdd, ssd or nvme) and
    whether it is in use, with the reasons (partitions, signatures found by C(wipefs), mount points,
    holders such as md/dm, membership of an imported pool).
  - Signatures are probed on the devices with C(wipefs --no-act); the udev-cached FSTYPE of C(lsblk)
    is not trusted because it can be stale.
  - It only reports. A pool's layout is planned by M(gpufabric.storage.fabric_zpool) from its C(spec), on
    the disks that module discovers itself in the same run (one discovery per pool). Nothing is ever
    changed on the node.
version_added: "0.1.0"
author: gpu-storage-fabric authors (!UNKNOWN)
options:
  exclude:
    description:
      - Disks to leave out of the result, by C(/dev/disk/by-id) path, link name or kernel name. Names that
        match no disk are reported in a warning.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; it behaves the same in check mode and always reports changed=false.
  diff_mode:
    support: none
    details: Nothing is changed, so there is nothing to diff.
  platform:
    platforms: debian
notes:
  - Runs C(lsblk), C(find) (on /dev/disk/by-id and /sys/class/block), C(wipefs --no-act) and
    C(zpool status -j --json-int -P); needs root to probe signatures.
seealso:
  - module: gpufabric.storage.fabric_zpool
    description: Plans a pool's layout from a spec on the disks it discovers, and creates or completes the pool.
"""

EXAMPLES = r"""
- name: Find the disks of the storage node
  fabric_disk_info:
  register: found

- name: Show the disks that are in use, and why
  ansible.builtin.debug:
    msg: "{{ found.disks | selectattr('in_use') | items2dict(key_name='by_id', value_name='reasons') }}"

- name: The same, leaving the hot-swap bay out of the report
  fabric_disk_info:
    exclude:
      - /dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1005
"""

RETURN = r"""
disks:
  description: Every whole disk of the node (minus O(exclude)), sorted by preferred by-id path.
  returned: always
  type: list
  elements: dict
  sample:
    - name: sda
      by_id: /dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1000
      ids: [/dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1000, /dev/disk/by-id/wwn-0x5000c50100770000]
      serial: HDD1000
      model: LAB HDD 8TB 7200
      size: 8589934592
      rotational: true
      transport: sata
      disk_class: hdd
      in_use: false
      reasons: []
    - name: vda
      by_id: /dev/disk/by-id/virtio-lab-root
      ids: [/dev/disk/by-id/virtio-lab-root]
      serial: lab-root
      model: ""
      size: 6442450944
      rotational: true
      transport: virtio
      disk_class: hdd
      in_use: true
      reasons: ["filesystem ext4 labelled 'root'", "mounted at /"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import FabricError
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.runner import ModuleRunner
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage.disks import discover, names_of


def main():
    module = AnsibleModule(
        argument_spec={
            "exclude": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    result = {"changed": False}
    try:
        found = discover(ModuleRunner(module, dry_run=module.check_mode))
        excluded = set(module.params["exclude"] or [])
        matched = set()
        kept = []
        for disk in found:
            hits = names_of(disk) & excluded
            matched |= hits
            if not hits:
                kept.append(disk)
        for name in sorted(excluded - matched):
            module.warn(f"exclude: no disk named {name!r} on this node")
        result["disks"] = [d.to_dict() for d in kept]
    except FabricError as err:
        module.fail_json(msg=str(err), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
