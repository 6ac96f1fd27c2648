#!/usr/bin/python
# Copyright: the gpu-storage-fabric authors. Apache-2.0.
"""Ansible module: ZFS kernel module parameters, persistent and live."""

DOCUMENTATION = r"""
module: fabric_zfs_tunables
short_description: Set ZFS kernel module parameters in /etc/modprobe.d and live in sysfs
description:
  - Writes C(options zfs ...) to a modprobe.d file so the values hold after a reboot, and writes
    each parameter whose live value in C(/sys/module/zfs/parameters) differs, so they hold now.
  - Only parameters that differ are written. A second run reports no change.
options:
  parameters:
    description: Parameter name to value (integers; booleans become 0/1). An empty dict writes an empty file.
    type: dict
    required: true
  modprobe_file:
    description: The modprobe.d file this module owns.
    type: path
    default: /etc/modprobe.d/zfs-fabric.conf
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the file and sysfs, reports what would change, writes nothing.
  diff_mode:
    support: full
  platform:
    platforms: debian
author: gpu-storage-fabric authors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Limit the ARC to 8 GiB and cache prefetched reads in L2ARC
  fabric_zfs_tunables:
    parameters:
      zfs_arc_max: 8589934592
      l2arc_noprefetch: 0
      l2arc_write_max: 67108864
      l2arc_rebuild_enabled: 1
"""

RETURN = r"""
file_changed:
  description: Whether the modprobe.d file was (or would be) rewritten.
  returned: always
  type: bool
live_changed:
  description: Live parameters that were (or would be) written, with before and after values.
  returned: always
  type: dict
  sample: {"zfs_arc_max": {"before": "0", "after": "536870912"}}
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import FabricError
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.runner import ModuleRunner
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage import tunables


def main():
    module = AnsibleModule(
        argument_spec=dict(
            parameters=dict(type="dict", required=True),
            modprobe_file=dict(type="path", default=str(tunables.MODPROBE_FILE)),
        ),
        supports_check_mode=True,
    )
    try:
        # the plan's steps through the runner: check mode records the writes and makes none
        result = tunables.ensure(ModuleRunner(module, dry_run=module.check_mode), module.params["parameters"],
                                 modprobe_file=Path(module.params["modprobe_file"]))
    except FabricError as err:
        module.fail_json(msg=str(err))
    out = {"changed": result["changed"], "file_changed": result["file_changed"],
           "live_changed": result["live_changed"]}
    if module._diff:
        out["diff"] = {"before": result["before"], "after": result["after"],
                       "before_header": module.params["modprobe_file"], "after_header": module.params["modprobe_file"]}
    module.exit_json(**out)


if __name__ == "__main__":
    main()
