#!/usr/bin/python
# gpu-storage-fabric: a ZFS dataset or volume with declared properties (never destroyed).
# The logic lives in plugins/module_utils/fabric_core/storage/zfs.py (read, a pure plan, one applier); this module
# parses arguments and reports.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_zfs_dataset
short_description: A ZFS filesystem or volume with declared properties; created or updated, never destroyed
description:
  - Creates the dataset (C(zfs create -p -o k=v ... -o fabric:managed=true)), or a volume when
    O(volume_size) is given (C(-V)), when it does not exist.
  - On an existing dataset, sets only the properties whose normalised value differs (one C(zfs set)).
    Sizes (10G), on/off spellings and compression aliases (on = lz4, zstd = zstd-3) compare equal.
  - Properties that are fixed at creation (casesensitivity, normalization, utf8only, volblocksize,
    encryption) are refused when they differ; a volume is never shrunk. Nothing is ever destroyed.
  - An existing dataset without a local C(fabric:managed=true) is changed only with O(adopt=true).
  - With O(datasets), a whole list is converged in one call, in order (parents first). The zfs_datasets
    role does this, one module run per node instead of one per dataset.
  - A volume with O(filesystem) gets that file system when it is blank (no signature at all); one that
    carries it already is left alone; one that carries anything else is refused, never reformatted.
version_added: "0.1.0"
author: gpu-storage-fabric authors (!UNKNOWN)
options:
  name:
    description: Dataset name, C(POOL/PATH). Required unless O(datasets) is given.
    type: str
  datasets:
    description:
      - Several datasets in one call, converged in order, each with the options of a single one;
        O(allow_dedup) and O(adopt) apply to all. Not with O(name).
    type: list
    elements: dict
    suboptions:
      name:
        description: Dataset name, C(POOL/PATH).
        type: str
        required: true
      properties:
        description: This dataset's ZFS and user properties, as O(properties).
        type: dict
        default: {}
      volume_size:
        description: Create a volume (zvol) of this size instead of a filesystem, as O(volume_size).
        type: str
      filesystem:
        description: For a volume, the file system it gets when blank, as O(filesystem).
        type: str
        choices: [ext4, xfs]
      encryption:
        description: This dataset's native ZFS encryption, chosen only at creation, as O(encryption).
        type: dict
        suboptions:
          enabled:
            description: Whether the dataset is encrypted.
            type: bool
            default: true
          key:
            description:
              - The passphrase (8-512 characters), 64 hex digits, or 32 raw bytes, per C(keyformat).
              - Never logged and never on a command line (passed on stdin).
            type: str
          keyformat:
            description: How the key is given.
            type: str
            choices: [passphrase, hex, raw]
            default: passphrase
  filesystem:
    description: For a volume, the file system it gets when blank (C(ext4) or C(xfs)).
    type: str
    choices: [ext4, xfs]
  properties:
    description:
      - ZFS properties (compression, recordsize, quota, refquota, reservation, atime, primarycache,
        secondarycache, special_small_blocks, dedup, ...) and user properties (names with C(:)).
      - Booleans become on/off. Sizes accept suffixes (K, M, G, T) or C(none).
    type: dict
    default: {}
  encryption:
    description:
      - Native ZFS encryption, chosen only at creation. With C(enabled=true) the dataset is created with
        C(encryption=aes-256-gcm), the given C(keyformat) and C(keylocation=prompt); the key is passed on
        stdin, never on the command line.
      - For an existing dataset, a different encryption setting is an error (it cannot change).
    type: dict
    suboptions:
      enabled:
        description: Whether the dataset is encrypted.
        type: bool
        default: true
      key:
        description:
          - The passphrase (8-512 characters), 64 hex digits, or 32 raw bytes, per C(keyformat).
          - Never logged and never on a command line (passed on stdin).
        type: str
      keyformat:
        description: How the key is given.
        type: str
        choices: [passphrase, hex, raw]
        default: passphrase
  allow_dedup:
    description:
      - Allow a C(dedup) property other than off. Deduplication costs about 5 GB of RAM per TB of unique
        data; without this flag it is refused.
    type: bool
    default: false
  volume_size:
    description:
      - Create a volume (zvol) of this size instead of a filesystem, e.g. C(100G).
      - Growing an existing volume is allowed, shrinking is refused.
    type: str
  adopt:
    description: Allow changing an existing dataset that was not created by this project; sets C(fabric:managed=true).
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Every read runs; a new dataset is validated with C(zfs create -n -v) and its output is in RV(prepared).
  diff_mode:
    support: full
    details: The declared properties before and after.
  platform:
    platforms: debian
"""

EXAMPLES = r"""
- name: Training dataset with large records, zstd, a quota and small blocks on the special vdev
  fabric_zfs_dataset:
    name: tank/datasets/imagenet
    properties:
      compression: zstd
      recordsize: 1M
      quota: 2T
      atime: false
      special_small_blocks: 64K
      fabric:role: dataset

- name: Encrypted dataset (key from the vault, passed on stdin)
  fabric_zfs_dataset:
    name: tank/secret
    encryption:
      enabled: true
      key: "{{ vault_tank_secret_passphrase }}"
      keyformat: passphrase
  no_log: true

- name: Checkpoint volume
  fabric_zfs_dataset:
    name: tank/checkpoints/run42
    volume_size: 200G
    properties:
      volblocksize: 64K

- name: A dataset tree and a volume with ext4, in one call
  fabric_zfs_dataset:
    datasets:
      - {name: tank/datasets, properties: {recordsize: 1M, compression: zstd}}
      - {name: tank/exports/welcome, volume_size: 256M, filesystem: ext4, properties: {volblocksize: 16K}}
"""

RETURN = r"""
datasets:
  description: With O(datasets), the result of each dataset (created, changed_properties, commands, filesystem).
  returned: when datasets is given
  type: dict
filesystem:
  description: The file system made (or that would be made) on a blank volume, with the mkfs command.
  returned: when filesystem is given
  type: dict
  sample: {changed: true, found: null,
           command: [mkfs.ext4, -q, -m, "0", -E, "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
                     -L, welcome, /dev/zvol/tank/exports/welcome]}
changed:
  description: Whether the dataset was created or properties set (or would be, in check mode).
  returned: always
  type: bool
created:
  description: Whether the dataset was created by this run.
  returned: always
  type: bool
changed_properties:
  description: Properties set (or that would be set), with the value before and after.
  returned: always
  type: dict
  sample: {compression: {before: lz4, after: zstd}, quota: {before: "0", after: 2T}}
commands:
  description: State-changing commands that ran (or would run), as argv lists. Keys never appear in them.
  returned: always
  type: list
  elements: list
  sample: [[zfs, set, compression=zstd, quota=2T, tank/datasets/imagenet]]
prepared:
  description: In check mode for a new dataset, the output of C(zfs create -n -v).
  returned: always
  type: str
steps:
  description: The planned steps of a single dataset in order (run, or in check mode only planned), each with a
    description and its command (an encryption key is never in them); a volume's mkfs is in RV(filesystem).
  returned: when name is given
  type: list
  elements: dict
  sample: [{description: "set compression=zstd on tank/datasets/imagenet",
            argv: [zfs, set, compression=zstd, tank/datasets/imagenet]}]
warnings:
  description: Warnings (dedup RAM cost, adoption), emitted with C(module.warn) so Ansible shows them.
  returned: when there are any
  type: list
  elements: str
diff:
  description:
    - The declared properties before and after (with diff mode), and a volume's file system (C(none (blank))
      before its mkfs).
    - With O(datasets), a list of them, one per dataset that changed (or would).
  returned: when diff mode is on
  type: raw
"""

from contextlib import nullcontext

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import FabricError
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.lock import node_lock
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.runner import ModuleRunner
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage import blockfs
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage.zfs import ensure_dataset
except ImportError as exc:  # pragma: no cover - reported by main()
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None

ENCRYPTION = dict(type="dict", options=dict(
    enabled=dict(type="bool", default=True),
    key=dict(type="str", no_log=True),
    keyformat=dict(type="str", default="passphrase", choices=["passphrase", "hex", "raw"]),
))
ONE = dict(
    properties=dict(type="dict", default={}),
    encryption=ENCRYPTION,
    volume_size=dict(type="str"),
    filesystem=dict(type="str", choices=list(blockfs.FILESYSTEMS) if IMPORT_ERROR is None else None),
)


def converge_one(runner, spec: dict, allow_dedup: bool, adopt: bool) -> dict:
    """One dataset, then the file system of a volume that declares one."""
    out = ensure_dataset(runner, name=spec["name"], properties=spec.get("properties") or {},
                         encryption=spec.get("encryption"), allow_dedup=allow_dedup,
                         volume_size=spec.get("volume_size"), adopt=adopt)
    if spec.get("filesystem"):
        if not spec.get("volume_size"):
            raise blockfs.UserError(f"{spec['name']}: filesystem is only for volumes",
                                    "give volume_size, or drop filesystem")
        made = blockfs.ensure_filesystem(runner, f"/dev/zvol/{spec['name']}", spec["filesystem"],
                                         label=spec["name"].rsplit("/", 1)[-1], device_planned=out["created"])
        out["filesystem"] = made
        out["changed"] = out["changed"] or made["changed"]
        if made["command"] and made["changed"]:
            out["commands"] = [*out["commands"], made["command"]]
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str"),
            datasets=dict(type="list", elements="dict",
                          options=dict(name=dict(type="str", required=True), **ONE)),
            allow_dedup=dict(type="bool", default=False),
            adopt=dict(type="bool", default=False),
            **ONE,
        ),
        required_one_of=[("name", "datasets")],
        mutually_exclusive=[("name", "datasets")],
        supports_check_mode=True,
    )
    if IMPORT_ERROR is not None:
        module.fail_json(msg=f"fabric_core is not available: {IMPORT_ERROR}")
    p = module.params
    many = p["datasets"] is not None
    specs = p["datasets"] if many else [{k: p[k] for k in ("name", "properties", "encryption", "volume_size",
                                                           "filesystem")}]
    runner = ModuleRunner(module, dry_run=module.check_mode)
    result = {"changed": False, "created": False, "changed_properties": {}, "commands": [], "prepared": ""}
    outs: dict = {}
    what = ", ".join(spec["name"] for spec in specs)
    try:
        # the node lock (shared with fabricctl) around a change; check mode changes nothing
        with nullcontext() if module.check_mode else node_lock(f"ansible fabric_zfs_dataset {what}"):
            for spec in specs:
                outs[spec["name"]] = converge_one(runner, spec, p["allow_dedup"], p["adopt"])
    except FabricError as err:
        result["commands"] = [list(a) for a in (runner.executed + runner.planned)]
        if many:
            result["datasets"] = {name: _public(out) for name, out in outs.items()}
        module.fail_json(msg=str(err), **result)
    if many:
        result.update(changed=any(o["changed"] for o in outs.values()),
                      created=any(o["created"] for o in outs.values()),
                      commands=[c for o in outs.values() for c in o["commands"]],
                      datasets={name: _public(out) for name, out in outs.items()})
    else:
        out = outs[specs[0]["name"]]
        result.update(changed=out["changed"], created=out["created"], changed_properties=out["changed_properties"],
                      commands=out["commands"], prepared=out["prepared"], steps=out["steps"])
        if "filesystem" in out:
            result["filesystem"] = out["filesystem"]
    if module._diff:
        result["diff"] = [{"before": _with_fs(out["before"], out, "found"),
                           "after": _with_fs(out["after"], out, "want"),
                           "before_header": f"{name} (live)", "after_header": f"{name} (declared)"}
                          for name, out in outs.items() if out["changed"] or not many]
        if not many:
            result["diff"] = result["diff"][0]
    for out in outs.values():
        for warning in out["warnings"]:
            module.warn(warning)
    module.exit_json(**result)


def _public(out: dict) -> dict:
    keys = ("changed", "created", "changed_properties", "commands", "prepared", "filesystem")
    return {k: out[k] for k in keys if k in out}


def _with_fs(state, out: dict, side: str):
    """The diff's before/after with the volume's file system (none before a mkfs on a blank volume)."""
    made = out.get("filesystem")
    if made is None or not isinstance(state, dict):
        return state
    fstype = made["found"] if side == "found" or not made["command"] else made["command"][0].split(".", 1)[1]
    return {**state, "filesystem": fstype or "none (blank)"}


if __name__ == "__main__":
    main()
