#!/usr/bin/python
# gpu-storage-fabric: Ansible module fabric_iscsi_session (open-iscsi node records and sessions).
# The logic lives in plugins/module_utils/fabric_core/node/iscsi.py; this module only parses arguments.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_iscsi_session
short_description: Log a GPU node in to (or out of) iSCSI targets of a storage node
description:
  - Converges open-iscsi node records and sessions for a list of targets on one portal.
  - A missing node record is created from the target name given (C(iscsiadm -o new)); the portal is never
    asked for a SendTargets discovery (the fabric's storage nodes refuse it, so that a host learns only the
    target names it is given). A target the portal does not have fails at the login.
  - Node record settings (C(node.startup), CHAP, extra C(settings)) are read first and updated only
    where they differ; a target with a session is not logged in again, so a second run changes nothing.
  - After a login the module waits for C(/dev/disk/by-path/ip-PORTAL-iscsi-IQN-lun-N) and returns it.
  - C(state=logged_out) logs out (refused while the disk is mounted) and deletes the node record.
  - A refused login (iscsiadm exit 24) fails with an authorization error naming the ACL and CHAP as
    causes; an unreachable portal fails with its own message. CHAP secrets never appear on a command
    line, in messages or in the returned commands.
version_added: "0.1.0"
author: gpu-storage-fabric authors (!UNKNOWN)
options:
  portal:
    description: The storage node's portal, C(ADDRESS) or C(ADDRESS:PORT) (port 3260 by default).
    type: str
    required: true
  targets:
    description: The targets to log in to (or out of) on this portal.
    type: list
    elements: dict
    required: true
    suboptions:
      iqn:
        description: The target's IQN.
        type: str
        required: true
      lun:
        description: The LUN whose device path is waited for and returned.
        type: int
        default: 0
      chap:
        description: CHAP credentials; leave out for no authentication (the target's ACL alone decides).
        type: dict
        suboptions:
          username:
            description: The initiator's CHAP user name.
            type: str
          password:
            description: The initiator's CHAP secret.
            type: str
          username_in:
            description: The target's user name for mutual CHAP.
            type: str
          password_in:
            description: The target's secret for mutual CHAP.
            type: str
  state:
    description: Whether the targets should be logged in or logged out (and their records deleted).
    type: str
    choices: [logged_in, logged_out]
    default: logged_in
  startup:
    description: C(node.startup) of the node records; C(automatic) logs in again at boot (open-iscsi.service).
    type: str
    choices: [automatic, manual]
    default: automatic
  settings:
    description:
      - Further node record settings to enforce, for example
        C(node.session.timeo.replacement_timeout). Values are compared as strings.
    type: dict
    default: {}
  device_timeout:
    description: Seconds to wait for a LUN's device after login.
    type: int
    default: 60
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Every read runs (sessions, node records); changes are planned and reported, not made.
  diff_mode:
    support: full
    details: Per target, whether it is logged in, whether its record exists, and its settings (secrets masked).
  platform:
    platforms: debian
notes:
  - CHAP secrets never reach a command line (C(iscsiadm -o update -v) would show them to every user in the
    process list); they are written into the node record file (/etc/iscsi/nodes/IQN/PORTAL..., mode 0600)
    by a small python3 program that reads them on stdin; iscsiadm reads them from there at each login.
  - Changed settings of a target that is logged in take effect at its next login; a warning says so.
"""

EXAMPLES = r"""
- name: Log in to two read-only dataset exports and wait for their disks
  fabric_iscsi_session:
    portal: 10.77.0.11
    targets:
      - iqn: iqn.2026-11.io.fabric.lab:imagenet
      - iqn: iqn.2026-11.io.fabric.lab:laion
        chap:
          username: gpu1
          password: "{{ vault_chap_secret }}"
  register: iscsi

- name: Log out of a target and delete its node record
  fabric_iscsi_session:
    portal: 10.77.0.11:3260
    targets:
      - iqn: iqn.2026-11.io.fabric.lab:imagenet
    state: logged_out
"""

RETURN = r"""
changed:
  description: Whether a node record or session was (or, in check mode, would be) changed.
  returned: always
  type: bool
  sample: true
sessions:
  description: Per target, the session after the run (null when logged out or only planned).
  returned: always
  type: list
  elements: dict
  sample:
    - target: iqn.2026-11.io.fabric.lab:imagenet
      portal: 10.77.0.11:3260
      tpgt: 1
      sid: 2
      transport: tcp
      state: LOGGED_IN
      connection_state: LOGGED IN
      initiator: iqn.2026-11.io.fabric.lab:gpu1
      disks: [{lun: 0, disk: sdb}]
devices:
  description: Target IQN to the stable device path of its LUN (in check mode, where it will appear).
  returned: when state is logged_in
  type: dict
  sample:
    "iqn.2026-11.io.fabric.lab:imagenet": >-
      /dev/disk/by-path/ip-10.77.0.11:3260-iscsi-iqn.2026-11.io.fabric.lab:imagenet-lun-0
commands:
  description: The state-changing iscsiadm commands run (or planned in check mode), CHAP secrets masked.
  returned: always
  type: list
  elements: str
  sample: ["iscsiadm -m node -T iqn.2026-11.io.fabric.lab:imagenet -p 10.77.0.11:3260 --login"]
warnings:
  description: Settings that changed on a target with a live session (they apply at the next login).
  returned: when there are any
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import FabricError
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.runner import ModuleRunner
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.node.iscsi import ensure_session


def _diff_text(per_target: dict, portal: str) -> str:
    lines = []
    for iqn, state in per_target.items():
        lines.append(f"{iqn} @ {portal}:")
        for key, value in state.items():
            lines.append(f"  {key}: {value}")
    return "\n".join(lines) + "\n"


def main():
    chap_spec = dict(username=dict(type="str"), password=dict(type="str", no_log=True),
                     username_in=dict(type="str"), password_in=dict(type="str", no_log=True))
    module = AnsibleModule(
        argument_spec=dict(
            portal=dict(type="str", required=True),
            targets=dict(type="list", elements="dict", required=True, options=dict(
                iqn=dict(type="str", required=True),
                lun=dict(type="int", default=0),
                chap=dict(type="dict", options=chap_spec),
            )),
            state=dict(type="str", choices=["logged_in", "logged_out"], default="logged_in"),
            startup=dict(type="str", choices=["automatic", "manual"], default="automatic"),
            settings=dict(type="dict", default={}),
            device_timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    p = module.params
    runner = ModuleRunner(module, dry_run=module.check_mode)
    result = {"changed": False, "sessions": [], "commands": []}
    if p["state"] == "logged_in":
        result["devices"] = {}
    warnings = []
    before, after = {}, {}
    try:
        seen = set()
        for target in p["targets"]:
            if target["iqn"] in seen:
                module.fail_json(msg=f"target {target['iqn']} is listed twice\n  fix: list each target once", **result)
            seen.add(target["iqn"])
        for target in p["targets"]:
            chap = {k: v for k, v in (target.get("chap") or {}).items() if v}
            res = ensure_session(runner, portal=p["portal"], target_iqn=target["iqn"], chap=chap or None,
                                 startup=p["startup"], state=p["state"], lun=target["lun"],
                                 settings={str(k): str(v) for k, v in p["settings"].items()},
                                 device_timeout=p["device_timeout"])
            result["changed"] = result["changed"] or res["changed"]
            result["commands"].extend(res["commands"])
            result["sessions"].append(res["session"])
            if p["state"] == "logged_in":
                result["devices"][target["iqn"]] = res["device"]
            warnings.extend(res["warnings"])
            before[target["iqn"]] = res["before"]
            after[target["iqn"]] = res["after"]
    except FabricError as err:
        if warnings:
            result["warnings"] = warnings
        module.fail_json(msg=str(err), **result)
    if warnings:
        result["warnings"] = warnings
        for w in warnings:
            module.warn(w)
    if module._diff:
        result["diff"] = {"before": _diff_text(before, p["portal"]), "after": _diff_text(after, p["portal"]),
                          "before_header": f"iSCSI node records and sessions on {p['portal']} (before)",
                          "after_header": f"iSCSI node records and sessions on {p['portal']} (after)"}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
