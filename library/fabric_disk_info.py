#!/usr/bin/python
# Copyright: gpu-storage-fabric contributors
# Apache License 2.0 (see pyproject.toml)
"""Ansible module fabric_disk_info: the disks of a storage node and, optionally, a planned pool layout."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_disk_info
short_description: Discover the disks of a storage node and plan a ZFS pool layout from them
description:
  - Lists every whole disk of the node (loop, zram, optical drives and ZFS volumes are left out) with
    its stable C(/dev/disk/by-id) names, serial, model, size, transport, class (hdd, ssd or nvme) and
    whether it is in use, with the reasons (partitions, signatures found by C(wipefs), mount points,
    holders such as md/dm, membership of an imported pool).
  - Signatures are probed on the devices with C(wipefs --no-act); the udev-cached FSTYPE of C(lsblk)
    is not trusted because it can be stale.
  - With O(spec), also plans a pool layout with the fabric_core layout planner and returns it with
    one explanation sentence per decision. Nothing is ever changed on the node.
version_added: "0.1.0"
author: gpu-storage-fabric contributors
options:
  spec:
    description:
      - "A layout spec. Policy form, for example C({data: {type: raidz2, width: 6, class: hdd}, special: {type: mirror,
        width: 2, class: nvme}, log: {type: mirror, width: 2, class: ssd}, cache: {class: nvme, count: rest}, spares: 1,
        min_size: 4000000000}). C(data.count) defaults to as many full vdevs as the free disks allow;
        disks are taken in /dev/disk/by-id order, data first, then spares (from the data class), special, log, cache."
      - "Or explicit form C({vdevs: [{role: data, type: mirror, disks: [ata-A, ata-B]}], wipe: [ata-B]}); disks
        may be given by their by-id path or link name. In-use disks are refused unless listed in C(wipe), and a
        disk that is mounted, held or in an imported pool is refused even then."
      - Both forms accept C(allow_nonredundant_data) and C(allow_nonredundant_special) (default false).
      - An invalid spec fails the task with the problem and the fix, and still returns RV(disks).
    type: dict
    required: false
  pool:
    description:
      - The pool the O(spec) is for. Disks that are members of this imported pool (and in use for no other
        reason) count as free when planning, so that planning an existing pool again gives the same layout.
    type: str
    required: false
  exclude:
    description:
      - Disks to leave out of the result and of the planning, by C(/dev/disk/by-id) path, link name or
        kernel name. Names that match no disk are reported in a warning.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details: The module only reads; it behaves the same in check mode and always reports changed=false.
  diff_mode:
    support: none
    details: Nothing is changed, so there is nothing to diff.
notes:
  - Runs C(lsblk), C(find) (on /dev/disk/by-id and /sys/class/block), C(wipefs --no-act) and C(zpool status -P);
    needs root to probe signatures.
"""

EXAMPLES = r"""
- name: Find the disks of the storage node
  fabric_disk_info:
  register: found

- name: Plan raidz2 of six HDDs with an NVMe special mirror and an SSD log mirror
  fabric_disk_info:
    spec:
      data: {type: raidz2, width: 6, class: hdd}
      special: {type: mirror, width: 2, class: nvme}
      log: {type: mirror, width: 2, class: ssd}
  register: planned

- name: Show why each disk was chosen or skipped
  ansible.builtin.debug:
    var: planned.layout.explanation

- name: Plan striped mirrors (RAID10) of HDDs, all free NVMe as cache, leaving the hot-swap bay out
  fabric_disk_info:
    spec:
      data: {type: mirror, width: 2, class: hdd, count: 3}
      cache: {class: nvme, count: rest}
    exclude:
      - /dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1005

- name: Plan an explicit mirror, allowing one old disk to be wiped
  fabric_disk_info:
    spec:
      vdevs:
        - {role: data, type: mirror, disks: [ata-LAB_HDD_8TB_7200_HDD1000, ata-LAB_HDD_8TB_7200_HDD1001]}
      wipe: [ata-LAB_HDD_8TB_7200_HDD1001]
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
layout:
  description:
    - The planned pool layout, when O(spec) is given. C(vdevs) are ordered data, special, log, cache, spare;
      each has C(role), C(type) (disk, mirror, raidz1/2/3) and C(disks) (by-id paths).
    - C(explanation) has one sentence per decision (why a disk was picked, skipped or left unused).
  returned: when spec is given
  type: dict
  sample:
    vdevs:
      - role: data
        type: mirror
        disks: [/dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1000, /dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1001]
      - role: cache
        type: disk
        disks: [/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_NVME1000]
    explanation:
      - "policy layout requested: data: 1 x mirror of 2 hdd, cache: rest x single disk nvme"
      - "skipped virtio-lab-root (in use: filesystem ext4 labelled 'root'; mounted at /)"
      - >-
        data vdev 1: mirror of ata-LAB_HDD_8TB_7200_HDD1000, ata-LAB_HDD_8TB_7200_HDD1001
        (2 x 8.0 GiB hdd; count 1 requested)
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.fabric_core.disks import discover, free_for_pool
from ansible.module_utils.fabric_core.errors import FabricError
from ansible.module_utils.fabric_core.layout import plan
from ansible.module_utils.fabric_core.names import validate_pool_name
from ansible.module_utils.fabric_core.runner import ModuleRunner


def main():
    module = AnsibleModule(
        argument_spec={
            "spec": {"type": "dict", "required": False},
            "exclude": {"type": "list", "elements": "str", "default": []},
            "pool": {"type": "str", "required": False},
        },
        supports_check_mode=True,
    )
    result = {"changed": False}
    try:
        if module.params["pool"]:
            validate_pool_name(module.params["pool"])  # before any command: a bad name is bad input
        found = discover(ModuleRunner(module, dry_run=module.check_mode))
        excluded = set(module.params["exclude"] or [])
        matched = set()
        kept = []
        for disk in found:
            names = {disk.name, f"/dev/{disk.name}", disk.by_id, *disk.ids, *(p.rsplit("/", 1)[-1] for p in disk.ids)}
            hits = names & excluded
            matched |= hits
            if not hits:
                kept.append(disk)
        for name in sorted(excluded - matched):
            module.warn(f"exclude: no disk named {name!r} on this node")
        result["disks"] = [d.to_dict() for d in kept]
        if module.params["spec"] is not None:
            candidates = free_for_pool(kept, module.params["pool"]) if module.params["pool"] else kept
            result["layout"] = plan(candidates, module.params["spec"]).to_dict()
    except FabricError as err:
        module.fail_json(msg=str(err), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
