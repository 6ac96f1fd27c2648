#!/usr/bin/python
# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: the documentation of the action plugin fabric_chap (plugins/action/fabric_chap.py), which runs
# on the controller; a collection documents an action plugin by a module of the same name.

from __future__ import annotations

DOCUMENTATION = r"""
module: fabric_chap
short_description: Per-GPU-node CHAP secrets, generated into Ansible Vault when missing, rotated on request
description:
  - >-
    Runs on the controller. For every host of O(hosts), the host's own CHAP secrets (its password, and the
    target's password for mutual CHAP): a rotation asked for in C(fabric_chap_rotate) and not done yet, else a
    rotated pair of the store, else the operator's C(vault_fabric_chap[HOST]), else a generated pair of the store,
    else a new pair generated into the store (fabric_core.base.chap).
  - The store is an Ansible-Vault-encrypted YAML file (C(fabric_chap_store), default
    C(<inventory_dir>/fabric-chap.vault.yml)), encrypted with the vault id of C(fabric_chap_vault_id), else the
    one the store was encrypted with, else the only vault id loaded; never written in plaintext, written
    atomically (mode 0600) under a lock, so the hosts of one run agree. Check mode writes nothing.
  - >-
    Refuses, before it reads or writes anything, several vault ids loaded with none chosen (the store's id would
    be a guess), a C(fabric_chap_vault_id) the run did not load, and the lab's vault id (named C(lab), or the
    lab's committed password under any name) for any store but the lab inventory's own (C(inventory/lab) of
    this checkout): anyone could open a store encrypted with it. The fix names C(fabric_chap_vault_id) and
    C(--vault-id).
  - Refuses two hosts sharing a secret and a malformed secret, never showing one.
  - With C(fabric_insecure_no_chap) true (an isolated lab only) it returns no credentials.
  - Its result carries the secrets and is always no_log; register it.
options:
  hosts:
    description: The GPU nodes whose credentials are wanted (inventory names).
    type: list
    elements: str
    required: true
notes:
  - >-
    Site variables read (task variables) C(fabric_chap_store), C(fabric_chap_vault_id), C(fabric_chap_rotate)
    (C({HOST: ROTATION_ID}), a new pair once per id), C(fabric_chap_mutual) (default true),
    C(fabric_chap_target_userid) (the targets' name in mutual CHAP, default C(fabric-target)),
    C(vault_fabric_chap) (the operator's pairs), C(fabric_insecure_no_chap).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  check_mode:
    support: full
    details: Reports the secrets it would generate or rotate; writes no store.
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
- name: This host's own CHAP secrets (generated into the vault when missing)
  gpufabric.storage.fabric_chap:
    hosts: ["{{ inventory_hostname }}"]
  register: chap
  no_log: true
"""

RETURN = r"""
chap:
  description: HOST -> its credentials in LIO's names (userid, password, mutual_userid, mutual_password).
  returned: success (empty when RV(insecure))
  type: dict
initiators:
  description: The initiator name of each host of O(hosts) that is an inventory host -> the host.
  returned: success (empty when RV(insecure))
  type: dict
generated:
  description: Hosts whose secrets were generated in this call (or would be, in check mode).
  returned: success
  type: list
  elements: str
rotated:
  description: Hosts whose secrets were rotated in this call (or would be, in check mode).
  returned: success
  type: list
  elements: str
insecure:
  description: C(fabric_insecure_no_chap) is true; no credentials are returned.
  returned: success
  type: bool
store:
  description: The path of the vault-encrypted store of generated and rotated pairs.
  returned: success, unless RV(insecure)
  type: str
"""
