#!/usr/bin/python
# gpu-storage-fabric: Ansible module over fabric_core.storage.lio (LIO iSCSI target through rtslib-fb).
# The logic lives in plugins/module_utils/fabric_core/storage/lio/; this file parses arguments and reports.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_lio_target
short_description: Converge the LIO iSCSI target (backstores, targets, ACLs, CHAP) to a desired state
description:
  - Reads the live LIO configuration through rtslib-fb, plans the changes as an ordered list of
    actions and applies only the delta. Parents are created first, children removed first.
  - Every LUN is read-only unless C(readonly=false) is given on a target with C(writable=true)
    and exactly one ACL for that LUN (block backstore readonly, mapped LUN write_protect, TPG
    demo_mode_write_protect=1).
  - A read-only LUN's backstore refuses SCSI reservations (C(attrib/emulate_pr=0), set before the LUN
    exists), so no host it is exported to can hold it against the others; one exported before with
    C(emulate_pr=1) is listed in RV(kept) while any of its hosts is logged in and re-made when none is.
  - Only project-owned objects are changed (targets under O(base_iqn), block backstores named
    O(backstore_prefix)LUN); everything else is left alone and listed in RV(kept).
  - Objects removed only with O(purge=true); a LUN, ACL or target with a logged-in initiator is
    removed only with O(force=true).
  - Every ACL authenticates its initiator with CHAP (its host's own credentials; two initiators may not share
    a secret); an ACL without CHAP is refused unless O(require_chap=false) (an isolated lab only).
  - SendTargets discovery is closed on the node (discovery authentication enforced, no discovery credentials),
    so no initiator learns a target name it was not given. Sessions are made from the target names given.
  - CHAP secrets are declared C(no_log) in the argument spec, so Ansible masks them before it logs the
    module's arguments (the journal of the node) and in every result.
  - After changes the configuration is saved to /etc/rtslib-fb-target/saveconfig.json, which
    rtslib-fb-targetctl.service restores at boot.
  - Mounts configfs and loads C(iscsi_target_mod) when they are not there. Check mode loads nothing
    (reading LIO through rtslib-fb would create configfs directories and so load the modules); on a node
    without them it says what it would load and plans from an empty configuration.
options:
  base_iqn:
    description: IQN prefix (no C(:)) of the project's targets; a target's IQN defaults to BASE_IQN:NAME.
    type: str
    required: true
  backstore_prefix:
    description: Prefix of the project's block backstores (the backstore of LUN C(x) is PREFIXx).
    type: str
    default: fabric_
  targets:
    description: The desired targets.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Target name (a-z, 0-9, C(.), C(-)).
        type: str
        required: true
      iqn:
        description: Explicit target IQN; must start with BASE_IQN:.
        type: str
      writable:
        description: Allow LUNs with C(readonly=false) (one writer each).
        type: bool
        default: false
      portals:
        description: Network portals, each C({ip, port}) (port defaults to 3260).
        type: list
        elements: dict
        required: true
        suboptions:
          ip:
            description: The portal's IP address (one of the node's).
            type: str
            required: true
          port:
            description: The TCP port.
            type: int
            default: 3260
      luns:
        description: >-
          LUNs, each C({name, device, readonly=true, wwn, lun}); C(wwn) (T10 unit serial) defaults
          to a stable uuid5 of the target IQN and LUN name; C(lun) (index) defaults to the existing or
          lowest free index.
        type: list
        elements: dict
        default: []
        suboptions:
          name:
            description: LUN name (its backstore is O(backstore_prefix)NAME).
            type: str
            required: true
          device:
            description: The block device (a zvol or a snapshot's device).
            type: str
            required: true
          readonly:
            description: Read-only (false only on a writable target, for its one ACL).
            type: bool
            default: true
          wwn:
            description: T10 unit serial (UUID form).
            type: str
          lun:
            description: TPG LUN index.
            type: int
      acls:
        description: >-
          Initiators allowed in, each C({initiator, luns, chap}); C(luns) (LUN names) defaults to all
          LUNs; C(chap) is C({userid, password, mutual_userid, mutual_password}) with secrets of 12-16
          printable characters, the host's own. CHAP is all ACLs of a target or none.
        type: list
        elements: dict
        default: []
        suboptions:
          initiator:
            description: The initiator's IQN.
            type: str
            required: true
          luns:
            description: The LUN names it sees (default all).
            type: list
            elements: str
          chap:
            description: Its host's CHAP credentials (secrets no_log).
            type: dict
            suboptions:
              userid:
                description: The initiator's CHAP user name.
                type: str
              password:
                description: The initiator's CHAP secret (12-16 characters).
                type: str
              mutual_userid:
                description: The target's user name for mutual CHAP.
                type: str
              mutual_password:
                description: The target's secret for mutual CHAP (12-16 characters, not the password).
                type: str
  purge:
    description: >-
      Remove project-owned targets, backstores, portals, LUNs, ACLs and mapped LUNs that are not
      in O(targets).
    type: bool
    default: false
  require_chap:
    description: >-
      Refuse an ACL without CHAP (any host that sets its initiator name would be let in). False only for an
      isolated lab (the roles set it from C(fabric_insecure_no_chap)).
    type: bool
    default: true
  force:
    description: Remove objects even when initiators are logged in (their I/O fails).
    type: bool
    default: false
  save_config:
    description: Save the whole LIO configuration after changes, for the restore at boot.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The plan is computed from a real read of the live configuration; nothing is changed.
  diff_mode:
    support: full
    details: Before and after summaries of the project-owned objects (CHAP secrets redacted).
  platform:
    platforms: debian
requirements:
  - python3-rtslib-fb on the target node (Debian package)
author: gpu-storage-fabric authors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Export an ImageNet snapshot read-only to two GPU nodes with CHAP
  fabric_lio_target:
    base_iqn: iqn.2026-11.io.fabric.lab
    targets:
      - name: datasets
        portals: [{ip: 10.77.0.11, port: 3260}]
        luns:
          - {name: imagenet_v1, device: /dev/zvol/tank/datasets/imagenet@v1}
        acls:
          - initiator: iqn.2004-10.com.debian:gpu1
            chap: {userid: gpu1, password: "{{ vault_gpu1_chap }}"}
          - initiator: iqn.2004-10.com.debian:gpu2
            chap: {userid: gpu2, password: "{{ vault_gpu2_chap }}"}

- name: A writable checkpoint volume for exactly one GPU node
  fabric_lio_target:
    base_iqn: iqn.2026-11.io.fabric.lab
    targets:
      - name: ckpt-gpu1
        writable: true
        portals: [{ip: 10.77.0.11}]
        luns: [{name: ckpt_gpu1, device: /dev/zvol/tank/ckpt/gpu1, readonly: false}]
        acls: [{initiator: iqn.2004-10.com.debian:gpu1}]

- name: Remove every project target and backstore (none is listed)
  fabric_lio_target:
    base_iqn: iqn.2026-11.io.fabric.lab
    targets: []
    purge: true
"""

RETURN = r"""
changed:
  description: Whether any LIO object was changed (or would be, in check mode).
  returned: always
  type: bool
  sample: true
actions:
  description:
    - The planned changes in order, readable, CHAP secrets redacted (C(close_discovery) when SendTargets discovery
      was open).
    - When LIO's kernel side was not ready, led by what was done (or, in check mode, would be done) first,
      C(mount configfs at /sys/kernel/config) and C(load iscsi_target_mod (and target_core_mod)).
  returned: always
  type: list
  elements: str
  sample: ["create_backstore name=fabric_imagenet_v1 device=/dev/zvol/tank/datasets/imagenet@v1 readonly=True wwn=...",
           "create_target iqn.2026-11.io.fabric.lab:datasets"]
kept:
  description: Objects left alone (foreign, or project-owned but not purged), with the reason.
  returned: always
  type: list
  elements: str
  sample: ["keep kind=target name=iqn.2003-01.org.example:other (not project-owned (outside base_iqn); left alone)"]
targets:
  description: Summary of the project-owned targets after the run (before it, in check mode).
  returned: always
  type: dict
  sample: {"iqn.2026-11.io.fabric.lab:datasets": {"enabled": true, "portals": ["10.77.0.11:3260"],
           "luns": {"0": "fabric_imagenet_v1"}, "acls": {}}}
diff:
  description: Before and after summaries (backstores and targets), in diff mode.
  returned: when diff mode is on
  type: dict
  sample: {"before": {}, "after": {}, "before_header": "LIO (live)", "after_header": "LIO (desired)"}
done:
  description: The changes that were carried out (on failure, those done before it).
  returned: when changes were applied or attempted
  type: list
  elements: str
  sample: ["create_target iqn.2026-11.io.fabric.lab:datasets"]
rolled_back:
  description: Creations of this run undone after a failure.
  returned: on an apply failure
  type: list
  elements: str
  sample: []
"""

from contextlib import nullcontext  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import FabricError  # noqa: E402
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.lock import node_lock  # noqa: E402
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.runner import ModuleRunner  # noqa: E402
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage.lio import reconcile  # noqa: E402

# The whole shape of a target, so that Ansible knows the CHAP secrets are secrets (no_log) before it logs the
# module's arguments: AnsibleModule logs its invocation to the node's journal while it starts, and a value
# registered as secret afterwards (no_log_values) is masked in the result but not in that log line.
CHAP_SPEC = dict(userid=dict(type="str"), password=dict(type="str", no_log=True),
                 mutual_userid=dict(type="str"), mutual_password=dict(type="str", no_log=True))
TARGET_SPEC = dict(
    name=dict(type="str", required=True),
    iqn=dict(type="str"),
    writable=dict(type="bool", default=False),
    portals=dict(type="list", elements="dict", required=True,
                 options=dict(ip=dict(type="str", required=True), port=dict(type="int", default=3260))),
    luns=dict(type="list", elements="dict", default=[],
              options=dict(name=dict(type="str", required=True), device=dict(type="str", required=True),
                           readonly=dict(type="bool", default=True), wwn=dict(type="str"), lun=dict(type="int"))),
    acls=dict(type="list", elements="dict", default=[],
              options=dict(initiator=dict(type="str", required=True), luns=dict(type="list", elements="str"),
                           chap=dict(type="dict", options=CHAP_SPEC))),
)


def _given(value):
    """The arguments without the keys Ansible filled with None (not given: the core's defaults apply)."""
    if isinstance(value, dict):
        return {k: _given(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_given(v) for v in value]
    return value


def _desired(params: dict) -> dict:
    return {"base_iqn": params["base_iqn"], "backstore_prefix": params["backstore_prefix"],
            "require_chap": params["require_chap"], "targets": _given(params["targets"] or [])}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_iqn=dict(type="str", required=True),
            backstore_prefix=dict(type="str", default="fabric_"),
            targets=dict(type="list", elements="dict", default=[], options=TARGET_SPEC),
            purge=dict(type="bool", default=False),
            force=dict(type="bool", default=False),
            save_config=dict(type="bool", default=True),
            require_chap=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    result: dict = {"changed": False, "actions": [], "kept": [], "targets": {}}
    try:
        # the node lock (shared with fabricctl) around a change; check mode changes nothing
        with nullcontext() if module.check_mode else node_lock("ansible fabric_lio_target"):
            out = reconcile(_desired(module.params), purge=module.params["purge"], force=module.params["force"],
                            save_config=module.params["save_config"], load_kernel=True,
                            runner=ModuleRunner(module, dry_run=module.check_mode))
    except FabricError as err:
        partial = getattr(err, "result", None) or {}
        result.update({k: v for k, v in partial.items() if k not in ("before", "after")})
        module.fail_json(msg=str(err), **result)
    result.update(changed=out["changed"], actions=out["actions"], kept=out["kept"], targets=out["targets"])
    for warning in out.get("warnings", []):
        module.warn(warning)
    if "done" in out:
        result["done"] = out["done"]
    if module._diff:
        result["diff"] = {"before": out["before"], "after": out["after"],
                          "before_header": "LIO (live)", "after_header": "LIO (desired)"}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
