#!/usr/bin/python
# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: Ansible module fabric_files (a role's small files and directories in one pass). The logic
# lives in plugins/module_utils/fabric_core/base/files.py.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_files
short_description: A role's small files and directories converged in one module execution
description:
  - Declares files (their content, mode, owner, group), directories and absent paths together, and converges
    them with one module execution on the node (one read of every path, a plan, then the changes). Each
    C(ansible.builtin.template), C(copy) or C(file) task costs a module execution per file even when nothing
    changes (seconds each on a busy or emulated node); a role's converged re-run then costs one.
  - Content is given as text (a C(lookup('ansible.builtin.template', ...)) or C(lookup('ansible.builtin.file', ...))
    renders a role's template or file on the controller). A file is replaced atomically (a temporary file of its
    own in the same directory, fsync, rename), so a link planted at its name is replaced, never written through.
  - A directory is created when missing (its missing parents too) and its mode and owner set; nothing inside it
    is touched. A link is made, or moved to its new target, atomically. An absent path is removed when it is a
    file or a link, or an empty directory.
  - A directory where a file is declared, anything but a directory where a directory is declared, anything but a
    link where a link is declared, or a directory with files in it declared absent, is refused with the fix,
    before any change.
version_added: "0.9.0"
author: gpu-storage-fabric authors (!UNKNOWN)
options:
  files:
    description: The paths, converged in the order given (a directory before the files in it).
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute, normalized path.
        type: str
        required: true
      state:
        description: What the path is.
        type: str
        choices: [file, directory, link, absent]
        default: file
      content:
        description: The file's text (state C(file) only; this or I(secret_content) is then required).
        type: str
      src:
        description: What a link points to (state C(link) only, and then required); the link is made or moved
          atomically (a new link under a temporary name, renamed over the old one).
        type: str
      mode:
        description:
          - Permission bits as an octal string (C("0644")). Default for a new file C(0644), a new directory
            C(0755); an existing path keeps its own.
        type: raw
      owner:
        description: User name; a new path gets root, an existing one keeps its own.
        type: str
      group:
        description: Group name; as for owner.
        type: str
      secret_content:
        description:
          - The file's text when it is a secret (credentials), instead of I(content). Marked no_log, so it never
            reaches the node's journal (where the module logs its arguments), a diff or the module's output.
        type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads every path and reports what would change; writes nothing.
  diff_mode:
    support: full
    details: One diff per file whose content changes (files given by secret_content left out).
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: The command, its directory and an old cron entry
  gpufabric.storage.fabric_files:
    files:
      - {path: /etc/fabricctl, state: directory, mode: "0700", owner: root, group: root}
      - path: /usr/local/sbin/fabricctl
        content: "{{ lookup('ansible.builtin.template', 'fabricctl.j2') }}"
        mode: "0755"
      - {path: /etc/cron.d/fabricctl-rotate, state: absent}
"""

RETURN = r"""
changes:
  description: Per path that changed (or would), what changed, in words.
  returned: always
  type: dict
  sample: {"/etc/fabricctl": ["created (mode 0700)"], "/usr/local/sbin/fabricctl": ["written (mode 0755)"]}
changed_paths:
  description: The paths that changed (or would), in the declared order.
  returned: always
  type: list
  elements: str
commands:
  description: The changes made (or, in check mode, planned), one entry each (no content).
  returned: always
  type: list
  elements: list
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base import files
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import FabricError
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.runner import ModuleRunner


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="dict", required=True, options=dict(
                path=dict(type="str", required=True),
                state=dict(type="str", choices=list(files.STATES), default="file"),
                content=dict(type="str"),
                src=dict(type="str"),
                mode=dict(type="raw"),
                owner=dict(type="str"),
                group=dict(type="str"),
                secret_content=dict(type="str", no_log=True),
            )),
        ),
        supports_check_mode=True,
    )
    try:
        out = files.ensure(ModuleRunner(module, dry_run=module.check_mode), module.params["files"])
    except FabricError as err:
        module.fail_json(msg=str(err))
    except OSError as err:  # the node refused a read or a change: name the path and why, nothing more
        module.fail_json(msg=f"{err.filename or 'a path'}: {err.strerror or err}; nothing after it was changed "
                             "(fix the path's parent directory or its permissions, then run again)")
    result = {"changed": out["changed"], "changes": out["changes"], "changed_paths": list(out["changes"]),
              "commands": out["commands"]}
    if module._diff and out["diffs"]:
        result["diff"] = out["diffs"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
