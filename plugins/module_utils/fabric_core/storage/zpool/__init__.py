"""ZFS pools: read ``zpool status``/``list``/``get`` as OpenZFS 2.3 JSON, build create/add commands, converge a pool.

Every pool read is JSON with numbers as numbers (``-j --json-int``, see zjson.py; recorded from the lab in
tests/unit/data/zfs23/ and zfs23b/); the root dataset's properties are read by zfs.py, without ``--json-int``.
The dry runs ``zpool create -n`` and ``zpool add -n`` print only text in 2.3: it goes to the caller
as ``prepared``, unparsed.

Three modules: ``status`` reads (pure parsers of the JSON, and the reads through a runner), ``vdevs`` validates
layouts, builds command lines and compares layouts, ``converge`` converges a pool. Converging, as the LIO
package (``lio``) does it: ``pool_spec`` validates the declared pool against the node's disks;
``read_pool`` reads the live pool (then ``check_layout`` refuses a conflicting layout before
``read_pool_details`` reads its properties and root dataset); ``plan_pool`` is pure: declared + live ->
ordered steps (model.Step: a description and the argv), warnings and the predicted after-state, every
refusal raised before any step; ``apply_pool`` runs the steps through the Runner (model.apply_steps),
recording every one, so a dry run shows them all. ``ensure_pool`` does the four in order.

Safety rules (see docs/dev/helper-brief.md): a pool is never destroyed or re-created and a vdev is
never removed. A disk that carries something (a filesystem, a partition table, another pool) is
used only when it is named in ``wipe`` AND ``safe_mode`` is off. An existing pool is changed only
when its root dataset carries ``fabric:managed=true`` (or ``adopt=True`` is given). A raidz vdev grows
by attaching disks only with ``allow_raidz_expansion``, and pool features are enabled (``zpool upgrade``)
only with ``upgrade_features``: an older ZFS can no longer import a pool with new features enabled.
"""

from ...base.model import DiskInfo
from .converge import (
    LivePool,
    PoolPlan,
    PoolSpec,
    apply_pool,
    check_json_int_safe,
    check_layout,
    ensure_pool,
    plan_pool,
    pool_spec,
    read_pool,
    read_pool_details,
    wipe_steps,
)
from .status import (
    DeviceHealth,
    PoolHealth,
    get_cache_space,
    get_layout,
    get_props,
    parse_cache_space,
    parse_health,
    parse_list,
    parse_pools,
    parse_props,
    parse_status,
    pool_exists,
    strip_part1,
)
from .vdevs import Expansion, LayoutDiff, add_argv, compare_layout, create_argv, diff_layout, validate_layout, vdev_args

__all__ = ["DeviceHealth", "Expansion", "LayoutDiff", "LivePool", "PoolHealth", "PoolPlan", "PoolSpec", "DiskInfo",
           "add_argv", "apply_pool", "check_json_int_safe", "check_layout", "compare_layout", "create_argv",
           "diff_layout", "ensure_pool", "get_cache_space", "get_layout", "get_props", "parse_cache_space",
           "parse_health", "parse_list", "parse_pools", "parse_props", "parse_status", "plan_pool", "pool_exists",
           "pool_spec", "read_pool", "read_pool_details", "strip_part1", "validate_layout", "vdev_args", "wipe_steps"]
