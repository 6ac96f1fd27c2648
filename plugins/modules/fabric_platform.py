#!/usr/bin/python
# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: Ansible module fabric_platform (is this node a supported platform, and what
# must happen to get it to OpenZFS 2.3). The logic lives in plugins/module_utils/fabric_core/base/platform.py.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_platform
short_description: Check that a node runs a supported Debian release and decide how it gets OpenZFS 2.3
description:
  - Reads, in one pass, C(/etc/os-release), the installed C(zfsutils-linux) package, the loaded zfs
    module's version and the imported pools. Changes nothing.
  - Fails, naming the two supported platforms, on anything but Debian 13 (trixie) and Debian 12
    (bookworm, with OpenZFS 2.3 from bookworm-backports).
  - With O(zfs=true) (storage nodes) it also decides what the storage_base role does about ZFS
    (RV(decision)). A Debian 12 node that runs OpenZFS 2.1 with a pool imported or the module loaded is
    refused with the exact upgrade steps unless O(allow_upgrade=true); a node whose loaded module is
    older than its installed packages is refused (it needs a reboot) unless O(allow_reboot=true).
version_added: "0.2.0"
author: gpu-storage-fabric authors (!UNKNOWN)
options:
  zfs:
    description: Decide about OpenZFS too (storage nodes); GPU nodes check only the release.
    type: bool
    default: false
  allow_upgrade:
    description: Allow installing OpenZFS 2.3 over a 2.1 that a pool or the loaded module uses.
    type: bool
    default: false
  allow_reboot:
    description: Allow the decision C(reboot) when the loaded module is older than the installed packages.
    type: bool
    default: false
  packages:
    description:
      - Debian packages to look up (one C(dpkg-query)); RV(missing_packages) lists those not installed, so that
        a role runs apt only when something is missing.
    type: list
    elements: str
    default: []
  files:
    description:
      - Paths to look for (one shell); RV(present_files) lists those that exist, so that a role runs a task on a
        file only when it is there.
    type: list
    elements: path
    default: []
  file_digests:
    description:
      - Directories whose regular files are read (one shell); RV(file_digests) gives each file's SHA-256, mode, owner
        and group, so that a role copies a file only when the node's differs.
    type: list
    elements: path
    default: []
  units:
    description:
      - systemd units to look up (one C(systemctl show)); RV(enabled_units), RV(active_units) and RV(running_units)
        list those enabled, active, and both, so that a role runs a service task only when its unit is not already
        as the task wants it.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads.
  diff_mode:
    support: none
  platform:
    platforms: debian
"""

EXAMPLES = r"""
- name: The node is a supported platform and OpenZFS 2.3 is (or will be) what it runs
  fabric_platform:
    zfs: true
    allow_upgrade: "{{ storage_base_zfs_allow_upgrade }}"
  register: platform
"""

RETURN = r"""
facts:
  description: What the node runs.
  returned: always
  type: dict
  sample: {"distribution": "debian", "major": "13", "codename": "trixie", "pretty": "Debian GNU/Linux 13 (trixie)",
           "zfs_package": "2.3.9-1", "zfs_module": "2.3.9-1", "pools": ["tank"]}
missing_packages:
  description: The packages of O(packages) that are not installed.
  returned: always
  type: list
  elements: str
  sample: [multipath-tools]
present_files:
  description: The paths of O(files) that exist on the node, in the order given.
  returned: always
  type: list
  elements: str
  sample: [/etc/apt/sources.list.d/debian.sources]
file_digests:
  description: The regular files directly in the directories of O(file_digests), each with its SHA-256, octal mode,
    owner and group.
  returned: always
  type: dict
  sample: {"/opt/fabricctl/wheel/gpu_storage_fabric-0.2.0-py3-none-any.whl": {
           "sha256": "0f343b0931126a20f133d67c2b018a3b6e1f2a1a3f1c8b9a0e6c2a1b3d4e5f60", "mode": "644",
           "owner": "root", "group": "root"}}
units:
  description: The states of the units of O(units) (C(load) C(not-found) for a unit that does not exist); empty when
    systemd did not answer.
  returned: always
  type: dict
  sample: {"iscsid.service": {"load": "loaded", "file": "enabled", "active": "active"}}
enabled_units:
  description: The units of O(units) whose unit file state is C(enabled).
  returned: always
  type: list
  elements: str
  sample: [iscsid.service]
active_units:
  description: The units of O(units) that are active.
  returned: always
  type: list
  elements: str
  sample: [iscsid.service]
running_units:
  description: The units of O(units) that are both enabled and active (a task that enables and starts a unit is
    needed only for those not in it).
  returned: always
  type: list
  elements: str
  sample: [iscsid.service]
decision:
  description: With O(zfs=true), what to do about ZFS (ok, install, upgrade, reboot), whether the packages come from
    bookworm-backports, and why.
  returned: when zfs is true
  type: dict
  sample: {"action": "ok", "backports": false,
           "explanation": "OpenZFS 2.3.9-1 from trixie contrib, module 2.3.9-1 loaded"}
"""

from dataclasses import asdict

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base import platform
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import FabricError
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.runner import ModuleRunner


def main():
    module = AnsibleModule(
        argument_spec=dict(
            zfs=dict(type="bool", default=False),
            allow_upgrade=dict(type="bool", default=False),
            allow_reboot=dict(type="bool", default=False),
            packages=dict(type="list", elements="str", default=[]),
            files=dict(type="list", elements="path", default=[]),
            file_digests=dict(type="list", elements="path", default=[]),
            units=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    runner = ModuleRunner(module)
    facts = platform.read(runner)
    out = {"changed": False, "facts": facts.as_dict(),
           "missing_packages": platform.missing_packages(runner, module.params["packages"]),
           "present_files": platform.present_files(runner, module.params["files"])}
    out["file_digests"] = platform.file_digests(runner, module.params["file_digests"])
    units = platform.unit_states(runner, module.params["units"])
    asked = module.params["units"]
    out.update(units=units, enabled_units=[u for u in asked if units.get(u, {}).get("file") == "enabled"],
               active_units=[u for u in asked if units.get(u, {}).get("active") == "active"])
    out["running_units"] = [u for u in out["enabled_units"] if u in out["active_units"]]
    try:
        if module.params["zfs"]:
            decision = platform.zfs_decision(facts, allow_upgrade=module.params["allow_upgrade"],
                                             allow_reboot=module.params["allow_reboot"])
            out["decision"] = asdict(decision)
        else:
            platform.check_supported(facts)
    except FabricError as err:
        module.fail_json(msg=str(err), **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
