#!/usr/bin/python
# gpu-storage-fabric: a ZFS pool with a declared layout (created or completed, never destroyed).
# The logic lives in plugins/module_utils/fabric_core/storage/zpool/ (read, a pure plan, one applier); this module
# parses arguments and reports.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_zpool
short_description: A ZFS pool with a declared vdev layout; created or completed, never destroyed
description:
  - Creates the pool C(name) with the declared C(layout) when it does not exist
    (C(zpool create -o ashift=N ... -O fabric:managed=true)).
  - On an existing pool, adds the declared special, log, cache and spare vdevs that are missing
    (C(zpool add)), data vdevs only with O(allow_grow), grows raidz vdevs only with O(allow_raidz_expansion),
    and sets the pool properties that differ.
  - There is only one state, present. The module never destroys or re-creates a pool and never
    removes a vdev; a live vdev that is not declared, or a declared vdev whose disks are elsewhere,
    is reported as a conflict and nothing is changed.
  - With O(spec) instead of O(layout), the module plans the layout itself from the disks it discovers
    (with the fabric_core layout planner, so there is one discovery per pool and run) and returns the
    plan's explanation, one sentence per decision, in RV(explanation). The members of this pool count as free
    for the planner, so planning an existing pool again gives its live layout.
  - Disks are found on the node itself (fabric disk discovery). Every declared disk must exist. A disk that
    carries anything (filesystem, partition table, another pool) is refused unless it is listed in
    O(wipe) and O(safe_mode=false); a mounted disk or a member of another imported pool is always refused.
  - An existing pool without C(fabric:managed=true) on its root dataset is not changed unless O(adopt=true).
  - The module reads the pool, plans every step (each with a description and its command; every refusal comes
    before the first step) and then runs them in order; RV(steps) lists them, in check mode too.
version_added: "0.1.0"
author: gpu-storage-fabric authors (!UNKNOWN)
options:
  name:
    description: Pool name.
    type: str
    required: true
  layout:
    description:
      - The pool layout written by hand (or planned elsewhere); give O(spec) or O(layout).
      - C(vdevs) is a list of C({role, type, disks}); role is data, special, log, cache or spare; type
        is disk, mirror, raidz1, raidz2 or raidz3 (cache and spare are type disk); disks are
        C(/dev/disk/by-id) paths. Other keys (explanation) are ignored.
    type: dict
  spec:
    description:
      - "A layout spec for the planner, in policy form (C({data: {type: raidz2, width: 6, class: hdd}, special:
        {type: mirror, width: 3, class: nvme}, log: {...}, cache: {class: nvme, count: rest}})) or explicit form
        (C({vdevs: [{role, type, disks}]})); see the zfs_pool role's README. In this form disks may be named by
        by-id path or link name."
      - O(wipe) applies to it. A C(wipe) list inside the spec is the same list; giving both with different disks
        is refused before anything runs.
    type: dict
  ashift:
    description: Sector size exponent for new vdevs (12 = 4 KiB). Used at creation and when adding vdevs.
    type: int
    default: 12
  properties:
    description:
      - Pool properties (C(zpool -o)), e.g. C(autotrim=on).
      - On an existing pool they are compared with C(zpool get -p) and set (C(zpool set)) when different.
    type: dict
    default: {}
  filesystem_properties:
    description:
      - Properties of the root dataset (C(zpool create -O)), e.g. C(compression=lz4), C(atime=off).
      - On an existing pool they are compared and set like C(fabric_zfs_dataset) does.
    type: dict
    default: {}
  safe_mode:
    description: When true (the default), no disk is ever wiped, whatever O(wipe) says.
    type: bool
    default: true
  wipe:
    description:
      - Disks (by-id paths) that may be wiped (C(zpool labelclear -f), C(wipefs -a)) before use, when they
        carry a signature. Has effect only with O(safe_mode=false). Their contents are destroyed.
    type: list
    elements: str
    default: []
  allow_grow:
    description:
      - Allow adding declared data vdevs that are missing from an existing pool (same type as the pool's
        data vdevs only). Adding a data vdev cannot be undone.
    type: bool
    default: false
  allow_raidz_expansion:
    description:
      - Allow growing a live raidzN data vdev by attaching disks (raidz expansion, OpenZFS 2.3), when a declared
        raidzN vdev is that vdev's members plus disks that are not in the pool. One C(zpool attach POOL raidzN-M
        DISK) per new disk, in the declared order, each followed by C(zpool wait -t raidz_expand POOL), since ZFS
        expands one disk at a time; each reflow can take hours on large disks.
      - Expansion cannot be undone, and the data already on the vdev keeps its old data-to-parity ratio (and
        space use) until it is rewritten. Without this option such a declaration is a conflict.
      - The pool's C(feature@raidz_expansion) must be enabled; a pool with it disabled is refused before any
        change (see O(upgrade_features)). New disks follow the same in-use and wipe rules as added vdevs. A pool
        that is expanding counts the disk being added as a member already, and the run warns that it is.
    type: bool
    default: false
  adopt:
    description: Allow changing an existing pool that was not created by this project; sets C(fabric:managed=true).
    type: bool
    default: false
  upgrade_features:
    description:
      - Enable the pool's disabled features (one C(zpool upgrade NAME)) when some C(feature@*) is C(disabled).
        Nothing else ever runs C(zpool upgrade).
      - A pool with new features enabled cannot be imported by an older ZFS. Keeping them off keeps the way back
        after a failed OS or ZFS upgrade (boot the previous release, import the pool); enable them once that is
        no longer needed. While false, a run on a pool with disabled features warns how many there are.
      - Needed by O(allow_raidz_expansion) on a pool whose C(feature@raidz_expansion) is disabled; the upgrade is
        then planned before the attach.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - Every read runs; C(zpool create -n) or C(zpool add -n) validates the plan; its output is in RV(prepared).
      - Every planned step is in RV(steps) and its command in RV(commands); none runs.
  diff_mode:
    support: full
    details: The layout before and after, as C({vdevs} ) dicts.
  platform:
    platforms: debian
notes:
  - Requires root on the storage node and OpenZFS 2.3 (pools are read as its JSON).
"""

EXAMPLES = r"""
- name: Pool tank exists (raidz2 HDD data, NVMe special mirror, SSD log, NVMe cache, one spare)
  fabric_zpool:
    name: tank
    ashift: 12
    properties:
      autotrim: "on"
    filesystem_properties:
      compression: lz4
      atime: "off"
    layout:
      vdevs:
        - {role: data, type: raidz2, disks: [/dev/disk/by-id/ata-HDD1, /dev/disk/by-id/ata-HDD2,
                                             /dev/disk/by-id/ata-HDD3, /dev/disk/by-id/ata-HDD4]}
        - {role: special, type: mirror, disks: [/dev/disk/by-id/nvme-A, /dev/disk/by-id/nvme-B]}
        - {role: log, type: mirror, disks: [/dev/disk/by-id/ata-SSD1, /dev/disk/by-id/ata-SSD2]}
        - {role: cache, type: disk, disks: [/dev/disk/by-id/nvme-C]}
        - {role: spare, type: disk, disks: [/dev/disk/by-id/ata-HDD5]}

- name: Pool tank planned from the disks found (the lab's reference layout); the plan's reasons in explanation
  fabric_zpool:
    name: tank
    spec:
      data: {type: raidz2, width: 6, class: hdd}
      special: {type: mirror, width: 3, class: nvme}
      log: {type: mirror, width: 2, class: ssd}
      cache: {class: nvme, count: rest}
    properties:
      autotrim: "on"
  register: tank

- name: Grow tank's raidz2 vdev by two disks (raidz expansion; it cannot be undone)
  fabric_zpool:
    name: tank
    allow_raidz_expansion: true
    layout:
      vdevs:
        - {role: data, type: raidz2, disks: [/dev/disk/by-id/ata-HDD1, /dev/disk/by-id/ata-HDD2,
                                             /dev/disk/by-id/ata-HDD3, /dev/disk/by-id/ata-HDD4,
                                             /dev/disk/by-id/ata-HDD6, /dev/disk/by-id/ata-HDD7]}

- name: Use a disk that used to hold ext4 (destroys its contents)
  fabric_zpool:
    name: fast
    layout: {vdevs: [{role: data, type: mirror, disks: [/dev/disk/by-id/nvme-A, /dev/disk/by-id/nvme-B]}]}
    wipe: [/dev/disk/by-id/nvme-B]
    safe_mode: false
"""

RETURN = r"""
changed:
  description: Whether the pool was created, vdevs added or properties set (or would be, in check mode).
  returned: always
  type: bool
created:
  description: Whether the pool was created by this run.
  returned: always
  type: bool
  sample: false
added:
  description: The vdevs created or added, as dicts.
  returned: always
  type: list
  elements: dict
  sample: [{role: cache, type: disk, disks: [/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_NVME1000]}]
commands:
  description: The state-changing commands that ran (or would run in check mode), as argv lists.
  returned: always
  type: list
  elements: list
  sample: [[zpool, add, -o, ashift=12, tank, cache, /dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_NVME1000]]
prepared:
  description: In check mode, the output of C(zpool create -n) or C(zpool add -n) (ZFS's own validation).
  returned: always
  type: str
  sample: "would update 'tank' to the following configuration: ..."
expanded:
  description: The raidz vdevs grown (or to be grown, in check mode) by raidz expansion, with the disks attached.
  returned: always
  type: list
  elements: dict
  sample: [{vdev: raidz2-0, disks: [/dev/disk/by-id/ata-HDD7]}]
steps:
  description: The planned steps in order (run, or in check mode only planned), each with a description and its command.
  returned: always
  type: list
  elements: dict
  sample: [{description: "add to pool tank: cache disk of /dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_NVME1000",
            argv: [zpool, add, -o, ashift=12, tank, cache, /dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_NVME1000]}]
explanation:
  description: With O(spec), one sentence per planning decision (why each disk was picked, skipped or left unused).
  returned: when spec is given
  type: list
  elements: str
layout:
  description: The live layout after the run (predicted in check mode), with by-id paths.
  returned: always
  type: dict
  sample: {pool: tank, exists: true, vdevs: [{role: data, type: raidz1, disks: [/dev/disk/by-id/ata-HDD1]}]}
properties_changed:
  description: Pool properties that were (or would be) set, with before and after values.
  returned: always
  type: dict
  sample: {autotrim: {before: "off", after: "on"}}
health:
  description: The pool state reported by C(zpool status) (ONLINE, DEGRADED, ...); empty when the pool was just planned.
  returned: always
  type: str
  sample: ONLINE
warnings:
  description: Things worth knowing that did not stop the run (degraded pool, wiped disks, adoption, a raidz expansion
    planned or in progress, disabled pool features left off), emitted with
    C(module.warn) so Ansible shows them.
  returned: when there are any
  type: list
  elements: str
diff:
  description: Layout before and after (with diff mode).
  returned: when diff mode is on
  type: dict
"""

from contextlib import nullcontext

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import (
        FabricError,
        UserError,
    )
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.lock import node_lock
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.model import PoolLayout
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.names import validate_pool_name
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.runner import ModuleRunner
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage import disks as fabric_disks
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage.layout import plan
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage.zpool import (
        ensure_pool,
        validate_layout,
    )
except ImportError as exc:  # pragma: no cover - reported by main()
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None


def _layout_arg(module, raw: dict):
    vdevs = raw.get("vdevs")
    if not isinstance(vdevs, list):
        module.fail_json(msg="layout.vdevs must be a list of {role, type, disks}\n  fix: give spec instead to let "
                             "this module plan the layout, or write layout: {vdevs: [{role: data, type: raidz1, "
                             "disks: [...]}]}")
    for n, vdev in enumerate(vdevs):
        if not isinstance(vdev, dict) or "disks" not in vdev:
            module.fail_json(msg=f"layout.vdevs[{n}] must be a dict with role, type and disks")
    return PoolLayout.from_dict(raw)


def _by_id(disks, names: list) -> list:
    """The by-id paths of the disks named in a spec's wipe list, which the planner accepts by by-id path or
    link name, kernel name or /dev/NAME; ensure_pool matches disks by path. A name that matches no disk stays
    as it is (the planner has refused it already)."""
    index = fabric_disks.index_of(disks)
    return [index[name].by_id if name in index else name for name in names]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            layout=dict(type="dict"),
            spec=dict(type="dict"),
            ashift=dict(type="int", default=12),
            properties=dict(type="dict", default={}),
            filesystem_properties=dict(type="dict", default={}),
            safe_mode=dict(type="bool", default=True),
            wipe=dict(type="list", elements="str", default=[]),
            allow_grow=dict(type="bool", default=False),
            allow_raidz_expansion=dict(type="bool", default=False),
            upgrade_features=dict(type="bool", default=False),
            adopt=dict(type="bool", default=False),
        ),
        required_one_of=[("layout", "spec")],
        mutually_exclusive=[("layout", "spec")],
        supports_check_mode=True,
    )
    if IMPORT_ERROR is not None:
        module.fail_json(msg=f"fabric_core is not available: {IMPORT_ERROR}")
    p = module.params
    runner = ModuleRunner(module, dry_run=module.check_mode)
    result = {"changed": False, "created": False, "added": [], "commands": [], "prepared": "", "layout": {},
              "properties_changed": {}, "health": "", "expanded": [], "steps": []}
    try:
        validate_pool_name(p["name"])
        if p["layout"] is not None:
            layout = validate_layout(_layout_arg(module, p["layout"]))  # bad input fails before discovery
        wipe = p["wipe"]
        if p["spec"] is not None and p["spec"].get("wipe"):
            if wipe and sorted(wipe) != sorted(p["spec"]["wipe"]):
                raise UserError("wipe is given twice, inside spec and beside it, with different disks",
                                "give the disks that may be wiped once, in wipe")
            wipe = list(p["spec"]["wipe"])
        # the node lock (shared with fabricctl) around discovery and change; check mode changes nothing
        with nullcontext() if module.check_mode else node_lock(f"ansible fabric_zpool {p['name']}"):
            disks = fabric_disks.discover(runner)
            if p["spec"] is not None:
                # one discovery per pool and run: the plan is made here, from the disks just found; the pool's
                # own members count as free so that re-planning an existing pool gives its live layout
                planned = plan(fabric_disks.free_for_pool(disks, p["name"]), {**p["spec"], "wipe": wipe})
                result["explanation"] = planned.explanation
                layout = validate_layout(planned)
                wipe = _by_id(disks, wipe)
            out = ensure_pool(runner, name=p["name"], layout=layout, disks=disks, ashift=p["ashift"],
                              properties=p["properties"], fs_properties=p["filesystem_properties"],
                              safe_mode=p["safe_mode"], wipe=wipe, allow_grow=p["allow_grow"],
                              adopt=p["adopt"], allow_raidz_expansion=p["allow_raidz_expansion"],
                              upgrade_features=p["upgrade_features"])
    except FabricError as err:
        result["commands"] = [list(a) for a in (runner.executed + runner.planned)]
        module.fail_json(msg=str(err), **result)
    result.update(changed=out["changed"], created=out["created"], added=out["added"], commands=out["commands"],
                  prepared=out["prepared"], layout=out["after"] or {}, health=out.get("health", ""),
                  properties_changed=out.get("properties_changed", {}), expanded=out["expanded"], steps=out["steps"])
    if module._diff:
        result["diff"] = {"before": out["before"], "after": out["after"],
                          "before_header": f"pool {p['name']} (live)",
                          "after_header": f"pool {p['name']} (declared)"}
    for warning in out["warnings"]:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
