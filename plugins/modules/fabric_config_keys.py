#!/usr/bin/python
# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: Ansible module fabric_config_keys (keys of a packaged configuration file set in
# place). The logic lives in plugins/module_utils/fabric_core/base/conffile.py.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_config_keys
short_description: Set C(key = value) lines of a packaged configuration file in place, leaving the rest alone
description:
  - For a configuration file a Debian package owns (a dpkg conffile such as C(/etc/iscsi/iscsid.conf)),
    each key's first active line is rewritten, or its commented-out default line is replaced by the active
    line, or the line is appended under one marker comment. Every other line stays as the package wrote it,
    so a package upgrade merges cleanly (no conffile prompt, and the package's new defaults are kept).
  - Later active duplicates of a managed key are commented out.
  - The file is replaced atomically (a temporary file in the same directory, fsync, rename) with its mode
    and owner kept.
version_added: "0.2.0"
author: gpu-storage-fabric authors (!UNKNOWN)
options:
  path:
    description: The file; it must exist (the package's).
    type: path
    required: true
  settings:
    description: Key to value. Booleans become Yes/No (open-iscsi's spelling).
    type: dict
    required: true
  separator:
    description: What stands between a key and its value on a line written by the module.
    type: str
    default: " = "
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the file and reports the keys that would change.
  diff_mode:
    support: full
  platform:
    platforms: debian
"""

EXAMPLES = r"""
- name: iscsid.conf carries the fabric's settings
  fabric_config_keys:
    path: /etc/iscsi/iscsid.conf
    settings:
      node.startup: automatic
      node.session.timeo.replacement_timeout: 120
"""

RETURN = r"""
changes:
  description: The keys that changed (or would), with the value before (null when the key was not set) and after.
  returned: always
  type: dict
  sample: {"node.startup": {"before": "manual", "after": "automatic"}}
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base import conffile
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import FabricError
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.runner import ModuleRunner


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            settings=dict(type="dict", required=True),
            separator=dict(type="str", default=" = "),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        # read, a pure plan, its one write through the runner: check mode records it and makes none
        out = conffile.ensure(ModuleRunner(module, dry_run=module.check_mode), Path(p["path"]), p["settings"],
                              separator=p["separator"])
    except FabricError as err:
        module.fail_json(msg=str(err))
    result = {"changed": out["changed"], "changes": out["changes"]}
    if module._diff:
        result["diff"] = {"before": out["before"], "after": out["after"], "before_header": p["path"],
                          "after_header": p["path"]}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
