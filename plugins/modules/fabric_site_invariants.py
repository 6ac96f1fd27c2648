#!/usr/bin/python
# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: the documentation of the action plugin fabric_site_invariants
# (plugins/action/fabric_site_invariants.py), which runs on the controller; a collection documents an action
# plugin by a module of the same name.

from __future__ import annotations

DOCUMENTATION = r"""
module: fabric_site_invariants
short_description: Check what must hold across the hosts of the fabric before any host is changed
description:
  - >-
    Runs on the controller over every host of the inventory (C(groups['all'])), whatever C(--limit) selects,
    and fails, naming the field, the value, both hosts and the fix, when an invariant does not hold
    (fabric_core.services.site): initiator names valid and unique, storage addresses unique, exports naming a
    storage node's address and one of its declared targets, ACLs naming GPU nodes of the inventory,
    target names and LUN serials unique across storage nodes, CHAP secrets distinct per host, hosts
    named by fabricctl_groups and fabricctl_hosts present.
  - Reads the same variables the roles read, with the roles' own defaults for those the inventory
    does not set (read from the roles' defaults files, so the rule is written once). Changes nothing.
options:
  storage_group:
    description: The inventory group of storage nodes.
    type: str
    default: storage_nodes
  gpu_group:
    description: The inventory group of GPU nodes.
    type: str
    default: gpu_nodes
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  check_mode:
    support: full
    details: Reads only; runs the same in check mode.
  diff_mode:
    support: none
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  platform:
    platforms: all
    details: Runs on the controller.
author: gpu-storage-fabric authors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The site-wide invariants hold (the whole inventory, before any change)
  gpufabric.storage.fabric_site_invariants:
  run_once: true
"""

RETURN = r"""
msg:
  description: What was checked, or (failed) every invariant that does not hold, with the fix.
  type: str
  returned: always
"""
