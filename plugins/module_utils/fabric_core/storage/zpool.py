"""ZFS pools: read ``zpool status``/``list``/``get`` as OpenZFS 2.3 JSON, build create/add commands, converge a pool.

Every pool read is JSON with numbers as numbers (``-j --json-int``, see zjson.py; recorded from the lab in
tests/unit/data/zfs23/ and zfs23b/); the root dataset's properties are read by zfs.py, without ``--json-int``.
The dry runs ``zpool create -n`` and ``zpool add -n`` print only text in 2.3: it goes to the caller
as ``prepared``, unparsed.

Converging, as lio.py does it: ``pool_spec`` validates the declared pool against the node's disks;
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

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..base.errors import FabricError, NotFound, UnsafeOperation, UserError
from ..base.model import MIN_WIDTH, VDEV_ROLES, VDEV_TYPES, DiskInfo, PoolLayout, Step, Vdev, apply_steps
from ..base.names import validate_pool_name
from ..base.rules import MANAGED_PROP
from ..base.runner import Runner
from . import zfs, zjson
from .disks import ACTIVE_USE_PREFIXES, index_of

# the vdev classes of a pool object in `zpool status -j`, in the order zpool prints them -> vdev role;
# "vdevs" holds the root vdev, whose children are the data vdevs
_CLASSES = (("dedup", "dedup"), ("special", "special"), ("logs", "log"), ("l2cache", "cache"), ("spares", "spare"))
# role -> keyword on the zpool create/add command line
_ROLE_KEYWORD = {"special": "special", "log": "log", "cache": "cache", "spare": "spare"}
# vdev_type of a node that stands for one declared member while a pool heals: a hot spare standing in
# (spare-N: the original member first, then the spare) or a replacement (replacing-N: old first, then new)
_INNER_TYPES = ("spare", "replacing")
_RAIDZ_NAME = re.compile(r"^raidz([123])-\d+$")  # raidz vdevs are named raidzP-N (P = parity)
_PART1 = re.compile(r"^(/dev/.+?)-part1$")


# --------------------------------------------------------------------------------------------------
# reading `zpool status/list/get -j --json-int`


def strip_part1(path: str) -> str:
    """/dev/disk/by-id/X-part1 -> /dev/disk/by-id/X (ZFS partitions whole disks and shows part 1)."""
    m = _PART1.match(path)
    return m.group(1) if m else path


@dataclass
class DeviceHealth:
    """One node of the vdev tree of `zpool status -j` (the pool's root vdev, a vdev, or a device)."""

    name: str  # as zpool names it (with -P a device's full path; a missing device's GUID)
    path: str  # device path mapped back to the declared disk, -part1 stripped ("" for vdev nodes)
    state: str  # ONLINE, DEGRADED, FAULTED, OFFLINE, UNAVAIL, REMOVED, AVAIL, INUSE
    role: str  # data, special, log, cache, spare, dedup; "pool" for the root vdev
    vdev: str  # the top-level vdev it belongs to (mirror-1, raidz1-0, or itself)
    read: int = 0  # error counters
    write: int = 0
    cksum: int = 0
    aux: str = ""  # why zpool does not use it as is: OPEN_FAILED, SPARED (a spare standing in), ...
    depth: int = 0  # 0 the root vdev, 1 a top-level vdev (or cache/spare device), 2 and more inside

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class PoolHealth:
    name: str = ""
    state: str = ""
    status: str = ""  # zpool's explanation when the pool is not fine, on one line
    action: str = ""  # what zpool suggests, on one line
    scan: str = ""  # the last or current scan: "resilver finished, 0 errors", "scrub scanning, ..."
    error_count: int = 0  # data errors zpool knows of
    devices: list = field(default_factory=list)  # list[DeviceHealth]
    # the last or current scan as zpool's scan_stats has it (empty: none ever ran): function (SCRUB, RESILVER,
    # ERRORSCRUB) and state (SCANNING, FINISHED, CANCELED) upper case, the numbers of SCAN_NUMBERS (times in
    # epoch seconds, 0 when unset; ``processed``: bytes repaired, ``scrub_pause``: when a scrub was paused)
    scan_stats: dict = field(default_factory=dict)

    def unhealthy(self) -> list:
        """Devices (and vdevs) whose state is not ONLINE/AVAIL."""
        return [d for d in self.devices if d.state not in ("ONLINE", "AVAIL")]

    def to_dict(self) -> dict:
        return {"name": self.name, "state": self.state, "status": self.status, "action": self.action,
                "scan": self.scan, "error_count": self.error_count, "devices": [d.to_dict() for d in self.devices],
                "scan_stats": dict(self.scan_stats)}


def parse_pools(text: str) -> dict:
    """{pool name: pool object} of `zpool status|list|get -j --json-int` output."""
    doc = zjson.loads(("zpool",), text)
    return {str(p.get("name", "")): p for p in zjson.objects(doc, "pools")}


def _pool(text: str, pool: str | None, what: str) -> dict:
    pools = parse_pools(text)
    if pool is None and len(pools) == 1:
        return next(iter(pools.values()))
    if pool is None:
        raise UserError(f"the `{what}` output holds {len(pools)} pools ({', '.join(pools) or 'none'}), not one",
                        f"name the pool: `{what} POOL`")
    if pool not in pools:
        raise UserError(f"pool {pool} is not in the `{what}` output (it holds {', '.join(pools) or 'no pool'})",
                        f"pass the output of `{what} {pool}`")
    return pools[pool]


def _leaf_path(node: dict) -> str:
    # a device that is missing is named by its GUID; "was" keeps the path it had
    return strip_part1(str(node.get("was") or node.get("path") or node.get("name", "")))


def _children(node: dict) -> list:
    return [c for c in (node.get("vdevs") or {}).values() if isinstance(c, dict)]


def _walk_health(node: dict, role: str, top: str, depth: int, out: list) -> None:
    name = str(node.get("name", ""))
    children = _children(node)
    top = top or name
    out.append(DeviceHealth(name=name, path="" if children else _leaf_path(node), state=str(node.get("state", "")),
                            role=role, vdev=top, read=_int(node.get("read_errors")),
                            write=_int(node.get("write_errors")), cksum=_int(node.get("checksum_errors")),
                            aux=str(node.get("aux", "")), depth=depth))
    for child in children:
        _walk_health(child, role, top, depth + 1, out)


def _health(obj: dict) -> PoolHealth:
    health = PoolHealth(name=str(obj.get("name", "")), state=str(obj.get("state", "")),
                        status=" ".join(str(obj.get("status", "")).split()),
                        action=" ".join(str(obj.get("action", "")).split()),
                        scan=_scan_text(obj.get("scan_stats")), error_count=_int(obj.get("error_count")),
                        scan_stats=_scan_stats(obj.get("scan_stats")))
    for root in _children(obj):  # "vdevs" of the pool: its root vdev, named like the pool
        health.devices.append(DeviceHealth(name=str(root.get("name", "")), path="", state=str(root.get("state", "")),
                                           role="pool", vdev="", read=_int(root.get("read_errors")),
                                           write=_int(root.get("write_errors")),
                                           cksum=_int(root.get("checksum_errors")), depth=0))
        for top in _children(root):
            _walk_health(top, "data", "", 1, health.devices)
    for key, role in _CLASSES:
        for top in (obj.get(key) or {}).values():
            _walk_health(top, role, "", 1, health.devices)
    return health


def _scan_text(scan) -> str:
    if not isinstance(scan, dict) or not scan.get("function"):
        return ""
    return f"{str(scan['function']).lower()} {str(scan.get('state', '')).lower()}, {_int(scan.get('errors'))} errors"


# the numbers of a scan_stats object of `zpool status -j --json-int` (recorded: zfs23/status_cksum.json)
SCAN_NUMBERS = ("start_time", "end_time", "to_examine", "examined", "skipped", "processed", "errors", "pass_start",
                "scrub_pause", "scrub_spent_paused", "issued")


def _scan_stats(scan) -> dict:
    if not isinstance(scan, dict) or not scan.get("function"):
        return {}
    out = {"function": str(scan["function"]).upper(), "state": str(scan.get("state", "")).upper()}
    out.update({key: _int(scan.get(key)) for key in SCAN_NUMBERS})
    return out


def parse_health(text: str, pool: str | None = None) -> PoolHealth:
    """The state of a pool and of every node of its vdev tree from `zpool status -j --json-int -P [POOL]`.

    ``pool`` picks one pool when the output holds several (`zpool status` of all pools).
    """
    return _health(_pool(text, pool, "zpool status -j --json-int -P"))


def _first_leaf(node: dict) -> dict:
    children = _children(node)
    return _first_leaf(children[0]) if children else node


def _members(node: dict) -> list:
    """The declared members under a vdev: a spare standing in or a new disk being resilvered in shows
    as the member it stands for (the first child of spare-N/replacing-N)."""
    out = []
    for child in _children(node):
        if child.get("vdev_type") in _INNER_TYPES:
            out.append(_leaf_path(_first_leaf(child)))
        elif _children(child):
            out += _members(child)
        else:
            out.append(_leaf_path(child))
    return out


def _top_vdev(node: dict, role: str) -> Vdev:
    kind = node.get("vdev_type")
    name = str(node.get("name", ""))
    if kind == "mirror":
        return Vdev(role=role, type="mirror", disks=_members(node), name=name)
    if kind == "raidz":
        m = _RAIDZ_NAME.match(name)
        return Vdev(role=role, type=f"raidz{m.group(1)}" if m else name, disks=_members(node), name=name)
    if kind in _INNER_TYPES:  # a single-disk vdev whose disk is being spared or replaced
        return Vdev(role=role, type="disk", disks=[_leaf_path(_first_leaf(node))], name=name)
    if _children(node):  # another kind (draid): never declared by this project, reported as it is
        return Vdev(role=role, type=str(kind), disks=_members(node), name=name)
    return Vdev(role=role, type="disk", disks=[_leaf_path(node)], name=name)


def _layout(obj: dict) -> PoolLayout:
    vdevs = [_top_vdev(top, "data") for root in _children(obj) for top in _children(root)]
    for key, role in _CLASSES:
        vdevs += [_top_vdev(top, role) for top in (obj.get(key) or {}).values() if isinstance(top, dict)]
    return PoolLayout(vdevs=vdevs)


def _expanding(obj: dict) -> dict | None:
    """The raidz expansion a pool object of `zpool status -j` reports in progress (``raidz_expand_stats`` with
    state SCANNING): {vdev, reflowed, to_reflow} (bytes), or None. The disk being added shows as a member of
    the vdev already (recorded: zfs23b/x_status_expanding.json)."""
    stats = obj.get("raidz_expand_stats")
    if not isinstance(stats, dict) or stats.get("state") != "SCANNING":
        return None
    tops = [top for root in _children(obj) for top in _children(root)]
    index = _int(stats.get("expanding_vdev"))
    vdev = str(tops[index].get("name", "")) if 0 <= index < len(tops) else str(stats.get("name", ""))
    return {"vdev": vdev, "reflowed": _int(stats.get("reflowed")), "to_reflow": _int(stats.get("to_reflow"))}


def parse_status(text: str, pool: str | None = None) -> PoolLayout:
    """The layout of a pool from `zpool status -j --json-int -P [POOL]`.

    Devices keep their full path, minus the ``-part1`` ZFS adds on whole disks. A spare that is
    standing in (``spare-N``) or a replacement in progress (``replacing-N``) is shown as the
    original member, so the layout stays the declared one while the pool heals; the states are in
    ``parse_health``.
    """
    return _layout(_pool(text, pool, "zpool status -j --json-int -P"))


def _pool_row(obj: dict) -> dict:
    props = obj.get("properties") or {}

    def value(key):
        entry = props.get(key)
        return entry.get("value") if isinstance(entry, dict) else None

    return {"name": str(obj.get("name", "")), "size": _int_or_none(value("size")),
            "alloc": _int_or_none(value("allocated")), "free": _int_or_none(value("free")),
            "cap": _int_or_none(value("capacity")), "health": str(value("health") or obj.get("state", ""))}


def parse_list(text: str) -> list:
    """`zpool list -j --json-int [POOL]` -> [{name, size, alloc, free, cap, health}] (bytes; cap in %)."""
    return [_pool_row(p) for p in parse_pools(text).values()]


def parse_props(text: str, pool: str | None = None) -> dict:
    """`zpool get -j --json-int all POOL` -> {property: (value, source)}, as `zpool get -H -p` printed them."""
    return zjson.properties(_pool(text, pool, "zpool get -j --json-int all"))


def _int(value) -> int:
    number = _int_or_none(value)
    return 0 if number is None else number


def _int_or_none(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value))
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------------
# validation and command lines


def validate_layout(layout: PoolLayout) -> PoolLayout:
    """Check roles, types, widths and duplicates of a declared layout; return it unchanged."""
    if not layout.vdevs:
        raise UserError("the pool layout has no vdevs", "declare at least one data vdev, e.g. "
                        "{role: data, type: raidz1, disks: [A, B, C]}")
    seen: dict = {}
    for n, vdev in enumerate(layout.vdevs):
        where = f"vdev {n} ({vdev.role} {vdev.type})"
        if vdev.role not in VDEV_ROLES:
            raise UserError(f"{where}: unknown role {vdev.role!r}", f"use one of {', '.join(VDEV_ROLES)}")
        if vdev.type not in VDEV_TYPES:
            raise UserError(f"{where}: unknown type {vdev.type!r}", f"use one of {', '.join(VDEV_TYPES)}")
        if not isinstance(vdev.disks, list) or not vdev.disks or not all(isinstance(d, str) and d for d in vdev.disks):
            raise UserError(f"{where}: disks must be a non-empty list of device paths",
                            "list /dev/disk/by-id/... paths")
        if vdev.role in ("cache", "spare") and vdev.type != "disk":
            raise UserError(f"{where}: {vdev.role} devices cannot be grouped in a {vdev.type}",
                            f"use type: disk for {vdev.role} devices (one entry per device or several disks)")
        if vdev.type != "disk" and len(vdev.disks) < MIN_WIDTH[vdev.type]:
            raise UserError(f"{where}: a {vdev.type} needs at least {MIN_WIDTH[vdev.type]} disks, "
                            f"{len(vdev.disks)} given", "add disks or choose another vdev type")
        if vdev.type == "disk" and vdev.role in ("data", "special", "log") and len(vdev.disks) != 1:
            raise UserError(f"{where}: type disk holds exactly one disk, {len(vdev.disks)} given",
                            "declare one vdev per disk, or use mirror/raidz")
        for disk in vdev.disks:
            if not disk.startswith("/"):
                raise UserError(f"{where}: {disk!r} is not an absolute device path",
                                "use /dev/disk/by-id/... paths (stable across reboots)")
            key = strip_part1(disk)
            if key in seen:
                raise UserError(f"disk {disk} is declared twice ({seen[key]} and {where})",
                                "use every disk in one vdev only")
            seen[key] = where
    if not layout.by_role("data"):
        raise UserError("the pool layout has no data vdev", "declare at least one vdev with role: data")
    return layout


def _vdev_args(vdev: Vdev) -> list:
    return list(vdev.disks) if vdev.type == "disk" else [vdev.type, *vdev.disks]


def vdev_args(vdevs: list) -> list:
    """The vdev part of a zpool create/add command line, grouped by role in ZFS's order."""
    argv: list = []
    for role in VDEV_ROLES:
        group = [v for v in vdevs if v.role == role]
        if not group:
            continue
        if role != "data":
            argv.append(_ROLE_KEYWORD[role])
        for vdev in group:
            argv += _vdev_args(vdev)
    return argv


def _kv(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def create_argv(name: str, layout: PoolLayout, ashift: int = 12, pool_properties: dict | None = None,
                fs_properties: dict | None = None, dry_run: bool = False) -> list:
    """zpool create [-n] [-f] -o ashift=N -o k=v ... -O k=v ... -O fabric:managed=true NAME VDEVS...

    -f only when the plan accepted mismatched redundancy (layout.force); the project's own disk
    checks have run before, so -f overrides nothing else that matters.
    """
    argv = ["zpool", "create"] + (["-n"] if dry_run else []) + (["-f"] if layout.force else [])
    if ashift:
        argv += ["-o", f"ashift={int(ashift)}"]
    for key, value in (pool_properties or {}).items():
        if key != "ashift":
            argv += ["-o", f"{key}={_kv(value)}"]
    fs = dict(fs_properties or {})
    fs[MANAGED_PROP] = "true"
    for key, value in fs.items():
        argv += ["-O", f"{key}={_kv(value)}"]
    return argv + [name] + vdev_args(layout.vdevs)


def add_argv(name: str, vdevs: list, dry_run: bool = False, ashift: int | None = None, force: bool = False) -> list:
    """zpool add [-n] [-f] [-o ashift=N] NAME special mirror A B log mirror C D cache E spare F."""
    argv = ["zpool", "add"] + (["-n"] if dry_run else []) + (["-f"] if force else [])
    if ashift:
        argv += ["-o", f"ashift={int(ashift)}"]
    return argv + [name] + vdev_args(vdevs)


# --------------------------------------------------------------------------------------------------
# comparing declared and live layouts


def _describe(vdev: Vdev) -> str:
    return f"{vdev.role} {vdev.type} [{', '.join(vdev.disks)}]"


@dataclass
class Expansion:
    """A live raidz vdev grown by attaching disks (raidz expansion, OpenZFS 2.3)."""

    vdev: str  # how zpool names it: raidz2-0
    live: Vdev  # its members now
    disks: list  # the disks to attach, in the declared order and spelling

    def to_dict(self) -> dict:
        return {"vdev": self.vdev, "disks": list(self.disks)}


@dataclass
class LayoutDiff:
    """What a declared layout asks of a live pool: vdevs to add, raidz vdevs to expand, and conflicts."""

    to_add: list = field(default_factory=list)  # list[Vdev], declared spelling
    expansions: list = field(default_factory=list)  # list[Expansion]
    conflicts: list = field(default_factory=list)  # one sentence each


def compare_layout(declared: PoolLayout, live: PoolLayout, allow_grow: bool = False,
                   allow_raidz_expansion: bool = False) -> LayoutDiff:
    """The declared layout against the live one (pure).

    to_add: declared vdevs whose disks are all absent from the pool and that can be added:
    special/log/cache/spare always; data vdevs only with ``allow_grow`` and when their type equals
    the pool's data vdev type (adding a data vdev cannot be undone on a pool with raidz).
    expansions: a declared raidzN data vdev made of all the members of a live raidzN vdev plus disks
    that are not in the pool, with ``allow_raidz_expansion`` (without it, a conflict that names the option).
    conflicts: one sentence per problem: a declared vdev whose members are partly or wholly in
    another live vdev, a data vdev of another type, growth without allow_grow, and a live vdev that
    is not declared (reported, never removed). Paths are compared with ``-part1`` stripped.
    """
    def norm(v: Vdev) -> Vdev:
        # cache and spare devices are independent: compare them one device at a time
        return Vdev(v.role, v.type, sorted(strip_part1(d) for d in v.disks), v.name)

    def split(vs: list) -> list:
        out = []
        for v in vs:
            if v.role in ("cache", "spare"):
                out += [Vdev(v.role, "disk", [d], v.name) for d in v.disks]
            else:
                out.append(v)
        return out

    declared_vdevs = split(declared.vdevs)
    have = [norm(v) for v in split(live.vdevs)]
    live_disks = {d: v for v in have for d in v.disks}
    have_keys = {v.key() for v in have}
    # keep the declared spelling of each path (the comparison normalised it)
    spelled = {strip_part1(d): d for d in declared.disks()}
    matched: set = set()
    diff = LayoutDiff()
    to_add: list = []
    live_data_types = {v.type for v in have if v.role == "data"}
    for original in declared_vdevs:
        vdev = norm(original)
        if vdev.key() in have_keys:
            matched.add(vdev.key())
            continue
        present = [d for d in vdev.disks if d in live_disks]
        if present:
            target = live_disks[present[0]]
            new = [strip_part1(d) for d in original.disks if strip_part1(d) not in live_disks]
            if (vdev.role == "data" and vdev.type.startswith("raidz") and target.role == "data"
                    and target.type == vdev.type and new and set(present) == set(target.disks)):
                matched.add(target.key())
                if allow_raidz_expansion:
                    diff.expansions.append(Expansion(target.name, target, [spelled.get(d, d) for d in new]))
                else:
                    diff.conflicts.append(
                        f"declared {_describe(vdev)} is live {target.name} [{', '.join(target.disks)}] plus "
                        f"{', '.join(new)}: growing a raidz vdev by attaching disks (raidz expansion, OpenZFS 2.3) "
                        "needs allow_raidz_expansion=true; expansion cannot be undone, and the data already on "
                        "the vdev keeps its old data-to-parity ratio until it is rewritten")
                continue
            where = sorted({_describe(live_disks[d]) for d in present})
            diff.conflicts.append(f"declared {_describe(vdev)} does not match the pool: {', '.join(present)} "
                                  f"{'is' if len(present) == 1 else 'are'} in live {'; '.join(where)}")
            for d in present:
                matched.add(live_disks[d].key())
            continue
        if vdev.role == "data":
            if live_data_types and vdev.type not in live_data_types:
                diff.conflicts.append(f"declared data vdev {_describe(vdev)} has type {vdev.type} but the pool's data "
                                      f"vdevs are {', '.join(sorted(live_data_types))}; mixing types is refused")
                continue
            if not allow_grow:
                diff.conflicts.append(f"declared data vdev {_describe(vdev)} is not in the pool; adding a data vdev "
                                      "cannot be undone, so it needs allow_grow=true")
                continue
        to_add.append(vdev)
    for vdev in have:
        if vdev.key() not in matched:
            diff.conflicts.append(f"live {_describe(vdev)} is not declared; vdevs are never removed, declare it")
    # cache/spare additions: merge back into one vdev per role for a compact command line
    for vdev in to_add:
        if vdev.role in ("cache", "spare") and diff.to_add and diff.to_add[-1].role == vdev.role:
            diff.to_add[-1].disks.append(vdev.disks[0])
        else:
            diff.to_add.append(Vdev(vdev.role, vdev.type, list(vdev.disks)))
    for vdev in diff.to_add:
        vdev.disks = [spelled.get(d, d) for d in vdev.disks]
    return diff


def diff_layout(declared: PoolLayout, live: PoolLayout, allow_grow: bool = False) -> tuple:
    """(to_add, conflicts) between a declared layout and the live one (compare_layout without raidz expansion:
    a raidz vdev declared with more disks than it has is a conflict)."""
    diff = compare_layout(declared, live, allow_grow=allow_grow)
    return diff.to_add, diff.conflicts


# --------------------------------------------------------------------------------------------------
# converging: declared spec, live state, a pure plan, one applier (model.apply_steps)


def normalize_pool_prop(prop: str, value) -> str:
    value = _kv(value).strip()
    low = value.lower()
    if low in ("on", "yes", "true"):
        return "on"
    if low in ("off", "no", "false"):
        return "off"
    if prop in ("comment", "cachefile", "altroot"):
        return value
    return low


def pool_exists(runner: Runner, name: str) -> dict | None:
    """{name, size, alloc, free, cap, health} of the imported pool NAME (`zpool list -j --json-int`), None
    when there is no such pool."""
    doc = zjson.run(runner, ["zpool", "list", *zjson.ZPOOL_JSON, name], missing=zjson.NO_POOL)
    pools = [_pool_row(p) for p in zjson.objects(doc, "pools")] if doc is not None else []
    return next((p for p in pools if p["name"] == name), None)


def _missing_pool(name: str) -> NotFound:
    return NotFound(f"pool {name} does not exist (not imported on this node)",
                    f"check the name with `zpool list`; an exported pool comes back with `zpool import {name}`")


def _status_object(runner: Runner, name: str) -> dict:
    """The live pool NAME's object in `zpool status -j --json-int -P NAME`; NotFound when it is not imported."""
    doc = zjson.run(runner, ["zpool", "status", *zjson.ZPOOL_JSON, "-P", name], missing=zjson.NO_POOL)
    obj = next((p for p in zjson.objects(doc or {}, "pools") if p.get("name") == name), None)
    if obj is None:
        raise _missing_pool(name)
    return obj


def get_layout(runner: Runner, name: str, aliases: dict | None = None) -> tuple:
    """(PoolLayout, PoolHealth) of a live pool from one `zpool status -j --json-int -P NAME`, paths mapped
    through ``aliases`` (alias -> by_id). NotFound when the pool is not imported."""
    obj = _status_object(runner, name)
    layout = _layout(obj)
    if aliases:
        for vdev in layout.vdevs:
            vdev.disks = [aliases.get(d, d) for d in vdev.disks]
    return layout, _health(obj)


def _cache_space(obj: dict) -> dict:
    out = {}
    for node in (obj.get("l2cache") or {}).values():
        if str(node.get("state", "")) == "ONLINE":
            out[_leaf_path(node)] = _int(node.get("total_space"))
    return out


def parse_cache_space(text: str, pool: str | None = None) -> dict:
    """{device path: bytes} of the pool's ONLINE cache devices (its L2ARC) from `zpool status -j --json-int -P
    [POOL]`: each one's ``total_space`` (the SIZE `zpool list -v` shows; recorded: zfs23b/tank_status.json). A
    cache device that is not ONLINE holds nothing for the L2ARC and is left out."""
    return _cache_space(_pool(text, pool, "zpool status -j --json-int -P"))


def get_cache_space(runner: Runner, name: str) -> dict:
    """parse_cache_space of the live pool NAME (the `zpool status -j --json-int -P NAME` get_layout reads);
    NotFound when the pool is not imported."""
    obj = _status_object(runner, name)
    return _cache_space(obj)


def get_props(runner: Runner, name: str) -> dict:
    """{property: (value, source)} of the pool NAME (`zpool get -j --json-int all NAME`); NotFound when the
    pool is not imported."""
    doc = zjson.run(runner, ["zpool", "get", *zjson.ZPOOL_JSON, "all", name], missing=zjson.NO_POOL)
    obj = next((p for p in zjson.objects(doc or {}, "pools") if p.get("name") == name), None)
    if obj is None:
        raise _missing_pool(name)
    return zjson.properties(obj)


def _check_props(props: dict, what: str) -> None:
    for key in props:
        if not isinstance(key, str) or not key or "=" in key or " " in key:
            raise UserError(f"invalid {what} name {key!r}", "use ZFS property names such as `autotrim`")


def check_json_int_safe(properties: dict) -> None:
    """Refuse a declared pool property value that `zpool get -j --json-int` would not read back as written.

    --json-int prints every all-digit value as a JSON number, and `zpool get all` lists a pool's user
    properties (OpenZFS 2.2 and later) and the string property ``comment``: ``007`` reads back as 7, so
    the pool would differ on every run (see zjson.py).
    """
    for key, value in properties.items():
        text = _kv(value).strip()
        if text.isascii() and text.isdigit() and str(int(text)) != text:
            raise UserError(f"pool property {key}={text}: `zpool get -j --json-int` prints an all-digit value as a "
                            f"number, so it would read back as {int(text)} and the pool would be changed on every run",
                            f"write it as {int(text)}, or keep such a value in a user property of the root dataset "
                            "(filesystem_properties), which the fabric reads as text")


def wipe_steps(path: str, reasons: list) -> list:
    """The steps that clear ZFS labels and every signature of a disk (``zpool labelclear`` exits 1 on a disk
    without a label: no error)."""
    why = "; ".join(reasons) or "in use"
    return [Step(f"wipe {path} ({why}): clear its ZFS labels", ["zpool", "labelclear", "-f", path], check=False),
            Step(f"wipe {path}: erase every signature, destroying its contents", ["wipefs", "-a", path])]


@dataclass
class PoolSpec:
    """A declared pool, validated against the node's disks: nothing wrong in it is found after a command ran."""

    name: str
    layout: PoolLayout  # as declared (declared spellings of the disks)
    canonical: PoolLayout  # the same with every disk's by-id path
    by_disk: dict  # declared path -> DiskInfo
    aliases: dict  # every path of a known disk -> its by-id path (to read a live pool in the same terms)
    ashift: int = 12
    properties: dict = field(default_factory=dict)
    fs_properties: dict = field(default_factory=dict)
    safe_mode: bool = True
    wipe: set = field(default_factory=set)  # by-id paths whose contents may be destroyed
    allow_grow: bool = False
    adopt: bool = False
    allow_raidz_expansion: bool = False
    upgrade_features: bool = False


def pool_spec(*, name: str, layout: PoolLayout, disks: list, ashift: int = 12, properties: dict | None = None,
              fs_properties: dict | None = None, safe_mode: bool = True, wipe: list | None = None,
              allow_grow: bool = False, adopt: bool = False, allow_raidz_expansion: bool = False,
              upgrade_features: bool = False) -> PoolSpec:
    """Validate a declared pool (pure); UserError/NotFound before any command."""
    properties = dict(properties or {})
    fs_properties = dict(fs_properties or {})
    validate_pool_name(name)
    if isinstance(layout, dict):
        layout = PoolLayout.from_dict(layout)
    validate_layout(layout)
    _check_props(properties, "pool property")
    check_json_int_safe(properties)
    _check_props(fs_properties, "filesystem property")
    if not isinstance(ashift, int) or not 9 <= ashift <= 16:
        raise UserError(f"ashift {ashift!r} is out of range", "use 12 (4 KiB sectors) or 13 (8 KiB); 9..16 allowed")
    index = index_of(disks)
    by_disk: dict = {}
    for path in layout.disks():
        disk = index.get(path) or index.get(strip_part1(path))
        if disk is None:
            raise NotFound(f"declared disk {path} was not found on this node",
                           "check the path under /dev/disk/by-id (fabric disk discovery lists the disks found)")
        by_disk[path] = disk
    wipe_set = set()
    for path in wipe or []:
        disk = index.get(path)
        if disk is None:
            raise NotFound(f"disk {path} to wipe was not found on this node", "name it by its /dev/disk/by-id path")
        wipe_set.add(disk.by_id)
    # compare with by_id paths on both sides
    canonical = PoolLayout(vdevs=[Vdev(v.role, v.type, [by_disk[d].by_id for d in v.disks]) for v in layout.vdevs],
                           force=layout.force)
    return PoolSpec(name=name, layout=layout, canonical=canonical, by_disk=by_disk,
                    aliases={path: disk.by_id for path, disk in index.items()}, ashift=ashift, properties=properties,
                    fs_properties=fs_properties, safe_mode=safe_mode, wipe=wipe_set, allow_grow=allow_grow,
                    adopt=adopt, allow_raidz_expansion=allow_raidz_expansion, upgrade_features=upgrade_features)


@dataclass
class LivePool:
    """What ZFS says of the pool: read_pool fills the first part, read_pool_details the rest."""

    name: str
    exists: bool
    layout: PoolLayout | None = None  # by-id paths (aliases mapped)
    health: PoolHealth | None = None
    expanding: dict | None = None  # a raidz expansion in progress: {vdev, reflowed, to_reflow}
    managed: bool = False  # fabric:managed=true on the root dataset
    props: dict | None = None  # {property: (value, source)} of `zpool get -j --json-int all`
    root: zfs.LiveDataset | None = None  # the root dataset, read when filesystem properties are declared

    @classmethod
    def from_outputs(cls, name: str, *, status: str, managed: str, props: str | None = None,
                     root: str | None = None, aliases: dict | None = None) -> LivePool:
        """The live state of an existing pool from the outputs read_pool reads (`zpool status -j --json-int -P`,
        `zfs get -j -p fabric:managed`, `zpool get -j --json-int all`, `zfs get -j -p all` of the root): for
        planning without a runner."""
        live = cls(name=name, exists=True)
        _fill_status(live, _pool(status, name, "zpool status -j --json-int -P"), aliases)
        live.managed = zfs.parse_get(managed).get(name, {}).get(MANAGED_PROP, ("-", ""))[0] == "true"
        if props is not None:
            live.props = parse_props(props, name)
        if root is not None:
            live.root = zfs.LiveDataset(props=zfs.parse_get(root).get(name))
        return live


def _fill_status(live: LivePool, obj: dict, aliases: dict | None) -> None:
    layout = _layout(obj)
    for vdev in layout.vdevs:
        vdev.disks = [(aliases or {}).get(d, d) for d in vdev.disks]
    live.layout, live.health, live.expanding = layout, _health(obj), _expanding(obj)


def read_pool(runner: Runner, spec: PoolSpec) -> LivePool:
    """Whether the pool exists (`zpool list -j --json-int NAME`) and, when it does, its layout, health and
    expansion (`zpool status -j --json-int -P NAME`) and whether this project made it (`zfs get -j -p
    fabric:managed NAME`). Enough to refuse a conflicting layout before reading more (read_pool_details)."""
    if pool_exists(runner, spec.name) is None:
        return LivePool(name=spec.name, exists=False)
    live = LivePool(name=spec.name, exists=True)
    obj = _status_object(runner, spec.name)
    _fill_status(live, obj, spec.aliases)
    root = zfs.get_props(runner, spec.name, [MANAGED_PROP]).get(spec.name, {})
    live.managed = root.get(MANAGED_PROP, ("-", ""))[0] == "true"
    return live


def read_pool_details(runner: Runner, spec: PoolSpec, live: LivePool) -> LivePool:
    """The pool's properties and features (`zpool get -j --json-int all NAME`) and, when filesystem properties
    are declared, its root dataset (`zfs get -j -p all NAME`)."""
    live.props = get_props(runner, spec.name)
    if spec.fs_properties:
        live.root = zfs.read_dataset(runner, spec.name)
    return live


@dataclass
class PoolPlan:
    """The steps that turn the live pool into the declared one, what they change, and the predicted result."""

    name: str
    steps: list  # list[Step], in order; empty when nothing changes
    created: bool = False
    warnings: list = field(default_factory=list)
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)  # predicted
    added: list = field(default_factory=list)  # vdev dicts created or added
    expanded: list = field(default_factory=list)  # [{vdev, disks}] grown by raidz expansion
    properties_changed: dict = field(default_factory=dict)
    fs: zfs.DatasetPlan | None = None  # the root dataset's properties (filesystem properties of an existing pool)
    health: str = ""  # the live pool's state ("" for a pool to create)
    reshapes: bool = False  # the layout changes: a real run reads it back


def _disabled_features(props: dict) -> list:
    return sorted(k.split("@", 1)[1] for k, (value, _source) in props.items()
                  if k.startswith("feature@") and value == "disabled")


def _some(names: list, shown: int = 5) -> str:
    """The first names of a list, and how many more there are."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _refuse_or_wipe(spec: PoolSpec, paths: list) -> list:
    """The disks among ``paths`` that must be wiped first; raise for in-use disks that may not be wiped."""
    to_wipe = []
    for path in paths:
        disk = spec.by_disk[path]
        if not disk.in_use:
            continue
        reasons = "; ".join(disk.reasons) or "in use"
        active = [r for r in disk.reasons if r.startswith(ACTIVE_USE_PREFIXES)]
        if active:
            raise UnsafeOperation(f"disk {path} is in active use ({'; '.join(active)}); refusing to use it",
                                  "use another disk; a mounted disk, a held disk or a member of an imported "
                                  "pool is never wiped")
        if disk.by_id in spec.wipe and not spec.safe_mode:
            to_wipe.append(path)
            continue
        if disk.by_id in spec.wipe:
            fix = "set safe_mode=false as well to wipe it (this destroys its contents)"
        else:
            fix = (f"use another disk, or list {path} in wipe AND set safe_mode=false to erase it "
                   "(this destroys its contents)")
        raise UnsafeOperation(f"disk {path} is in use ({reasons}); refusing to use it", fix)
    return to_wipe


def _wipes(spec: PoolSpec, paths: list, steps: list, warnings: list) -> list:
    to_wipe = _refuse_or_wipe(spec, paths)
    for path in to_wipe:
        steps += wipe_steps(path, spec.by_disk[path].reasons)
        warnings.append(f"wiped {path} ({'; '.join(spec.by_disk[path].reasons)})")
    return to_wipe


def _summary(vdevs: list) -> str:
    return "; ".join(f"{v.role} {v.type} of {', '.join(v.disks)}" for v in vdevs)


def check_layout(spec: PoolSpec, live: LivePool) -> LayoutDiff:
    """The declared layout against the live pool's (pure); UserError naming every conflict."""
    diff = compare_layout(spec.canonical, live.layout or PoolLayout(), allow_grow=spec.allow_grow,
                          allow_raidz_expansion=spec.allow_raidz_expansion)
    if diff.conflicts:
        raise UserError(f"pool {spec.name} does not match the declared layout: " + "; ".join(diff.conflicts),
                        "declare the pool as it is (see `zpool status -P`) plus only what may be added; this module "
                        "never removes or reshapes vdevs")
    return diff


def plan_pool(spec: PoolSpec, live: LivePool) -> PoolPlan:
    """The plan for ``spec`` over ``live`` (pure: no command): create the pool, or on an existing one adopt it,
    upgrade its features, wipe and add vdevs, expand raidz vdevs, set pool and root dataset properties.
    Every refusal (a conflicting layout, a disk in use, a feature missing for raidz expansion, a pool this
    project did not create) is raised here, before any step runs."""
    if not live.exists:
        return _plan_create(spec)
    return _plan_existing(spec, live)


def _plan_create(spec: PoolSpec) -> PoolPlan:
    steps: list = []
    warnings: list = []
    wiped = _wipes(spec, spec.layout.disks(), steps, warnings)
    steps.append(Step(
        description=f"create pool {spec.name} (ashift {spec.ashift}): {_summary(spec.layout.vdevs)}"
        + ("; with -f: the plan accepted mismatched redundancy" if spec.layout.force else ""),
        argv=create_argv(spec.name, spec.layout, spec.ashift, spec.properties, spec.fs_properties),
        dry_run_argv=create_argv(spec.name, spec.layout, spec.ashift, spec.properties, spec.fs_properties,
                                 dry_run=True),
        dry_run_strict=not wiped,
        dry_run_refusal="`zpool create -n` refused the plan before the wipe that a real run does first: "))
    return PoolPlan(name=spec.name, steps=steps, created=True, warnings=warnings,
                    before={"pool": spec.name, "exists": False, "vdevs": []},
                    after={"pool": spec.name, "exists": True, **_layout_dict(spec.canonical)},
                    added=[v.to_dict() for v in spec.layout.vdevs], reshapes=True)


def _plan_existing(spec: PoolSpec, live: LivePool) -> PoolPlan:
    name = spec.name
    diff = check_layout(spec, live)
    if live.props is None or (spec.fs_properties and (live.root is None or live.root.props is None)):
        raise FabricError(f"pool {name}: its properties (and, with filesystem properties, its root dataset) were "
                          "not read", "read them with read_pool_details before planning")
    props = live.props
    health = live.health.state if live.health else ""
    warnings: list = []
    if health and health != "ONLINE":
        bad = ", ".join(f"{d.path or d.name} {d.state}" for d in live.health.unhealthy() if d.role != "pool")
        warnings.append(f"pool {name} is {health}" + (f": {bad}" if bad else ""))
    if live.expanding:
        e = live.expanding
        warnings.append(f"pool {name} is expanding {e['vdev']} (raidz expansion in progress, {e['reflowed']} of "
                        f"{e['to_reflow']} bytes copied): its new disk counts as a member already; the space it adds "
                        f"is usable once `zpool wait -t raidz_expand {name}` returns")
    prop_changes = {}
    for key, value in spec.properties.items():
        if key == "ashift":
            continue
        have = props.get(key)
        if have is None:
            raise UserError(f"pool {name} has no property {key!r}", "check `zpool get all` for valid names")
        if normalize_pool_prop(key, have[0]) != normalize_pool_prop(key, value):
            prop_changes[key] = {"before": have[0], "after": _kv(value)}
    disabled = _disabled_features(props)
    upgrade = bool(spec.upgrade_features and disabled)
    if diff.expansions and not upgrade:
        feature = props.get("feature@raidz_expansion", ("missing", "-"))[0]
        if feature not in ("enabled", "active"):
            vdevs = ", ".join(e.vdev for e in diff.expansions)
            raise UnsafeOperation(
                f"pool {name} cannot grow {vdevs} by raidz expansion: its feature@raidz_expansion is {feature} "
                "(ZFS refuses the attach: \"raidz_expansion feature must be enabled in order to attach a device "
                "to raidz\"); nothing was changed",
                f"enable the pool's features with `zpool upgrade {name}` (or upgrade_features=true), knowing that "
                "afterwards an older ZFS can no longer import the pool, so going back to the previous OS or ZFS "
                "release is no longer possible with it; or declare the vdev as it is")
    fs_plan = None
    if spec.fs_properties:
        fs_plan = zfs.plan_dataset(zfs.dataset_spec(name, spec.fs_properties, adopt=True), live.root)
    steps: list = []
    if not live.managed and (diff.to_add or diff.expansions or prop_changes or upgrade or spec.fs_properties):
        if not spec.adopt:
            raise UnsafeOperation(f"pool {name} exists but was not created by this project "
                                  f"({MANAGED_PROP} is not true on its root dataset); refusing to change it",
                                  "set adopt=true to take it over (sets fabric:managed=true), or use another name")
        steps.append(Step(f"adopt pool {name}: set {MANAGED_PROP}=true on its root dataset",
                          ["zfs", "set", f"{MANAGED_PROP}=true", name]))
        warnings.append(f"adopted pool {name}: set {MANAGED_PROP}=true")
    if upgrade:
        steps.append(Step(f"enable the {len(disabled)} disabled feature(s) of pool {name} ({_some(disabled)}), as "
                          "upgrade_features asks: an older ZFS can no longer import the pool afterwards, which rules "
                          "out going back to the previous OS or ZFS release with it", ["zpool", "upgrade", name]))
    elif disabled:
        warnings.append(f"pool {name} has {len(disabled)} disabled feature(s) ({_some(disabled)}); they stay off "
                        "(upgrade_features is false), so an older ZFS can still import the pool: the way back "
                        "after a failed OS or ZFS upgrade. Set upgrade_features=true to enable them")
    # the declared spelling of every new disk (the comparison ran on by-id paths), for the in-use and wipe rules,
    # the command lines and the report
    to_path = {disk.by_id: path for path, disk in spec.by_disk.items()}
    to_add = [Vdev(v.role, v.type, [to_path.get(d, d) for d in v.disks]) for v in diff.to_add]
    expansions = [Expansion(e.vdev, e.live, [to_path.get(d, d) for d in e.disks]) for e in diff.expansions]
    new_paths = [d for v in to_add for d in v.disks] + [d for e in expansions for d in e.disks]
    wiped = _wipes(spec, new_paths, steps, warnings)
    if to_add:
        steps.append(Step(
            description=f"add to pool {name}: {_summary(to_add)}",
            argv=add_argv(name, to_add, ashift=spec.ashift, force=spec.layout.force),
            dry_run_argv=add_argv(name, to_add, dry_run=True, ashift=spec.ashift, force=spec.layout.force),
            dry_run_strict=not any(d in wiped for v in to_add for d in v.disks),
            dry_run_refusal="`zpool add -n` refused the plan before the wipe that a real run does first: "))
    if diff.expansions and live.expanding:
        steps.append(Step(f"wait for the raidz expansion of {live.expanding['vdev']} in progress to finish (ZFS "
                          "expands one disk at a time)", ["zpool", "wait", "-t", "raidz_expand", name]))
    for expansion in expansions:
        warnings.append(f"raidz expansion of {expansion.vdev} in pool {name} by {', '.join(expansion.disks)}: it "
                        "cannot be undone; the data already on the vdev keeps its old data-to-parity ratio (and "
                        "space use) until it is rewritten; ZFS expands one disk at a time, so each attach is "
                        "followed by a wait for its reflow (hours on large disks)")
        total = len(expansion.disks)
        for n, disk in enumerate(expansion.disks, 1):
            steps.append(Step(f"attach {disk} to {expansion.vdev} (raidz expansion, disk {n} of {total}): ZFS "
                              "reflows the vdev's data across its disks",
                              ["zpool", "attach", name, expansion.vdev, disk]))
            steps.append(Step(f"wait until {expansion.vdev} is expanded onto {disk} (`zpool wait` returns when "
                              "the reflow is done)", ["zpool", "wait", "-t", "raidz_expand", name]))
    for key, change in prop_changes.items():
        steps.append(Step(f"set pool property {key}={change['after']} on {name} (was {change['before']})",
                          ["zpool", "set", f"{key}={change['after']}", name]))
    if fs_plan is not None:
        steps += fs_plan.steps
        warnings += fs_plan.warnings
    by_id = {path: disk.by_id for path, disk in spec.by_disk.items()}
    grown = {e.vdev: [by_id.get(d, d) for d in e.disks] for e in expansions}
    predicted = PoolLayout(vdevs=[Vdev(v.role, v.type, [*v.disks, *grown.get(v.name, [])]) for v in live.layout.vdevs]
                           + [Vdev(v.role, v.type, [by_id.get(d, d) for d in v.disks]) for v in to_add])
    return PoolPlan(name=name, steps=steps, warnings=warnings,
                    before={"pool": name, "exists": True, **_layout_dict(live.layout)},
                    after={"pool": name, "exists": True, **_layout_dict(predicted)},
                    added=[v.to_dict() for v in to_add], expanded=[e.to_dict() for e in expansions],
                    properties_changed=prop_changes, fs=fs_plan, health=health,
                    reshapes=bool(to_add or diff.expansions))


def apply_pool(runner: Runner, spec: PoolSpec, plan: PoolPlan) -> dict:
    """Run the plan's steps (model.apply_steps) and report; a real run that changed the layout reads it back.

    Returns {changed, created, added, expanded, commands, prepared, before, after, warnings, health,
    properties_changed, steps} (and fs_properties_changed when the root dataset's properties were planned).
    """
    done = apply_steps(runner, plan.steps)
    result: dict = {"changed": bool(plan.steps), "created": plan.created, "added": plan.added,
                    "expanded": plan.expanded, "commands": done.commands, "prepared": done.prepared,
                    "before": plan.before, "after": plan.after, "warnings": [*plan.warnings, *done.warnings],
                    "properties_changed": plan.properties_changed, "steps": [s.to_dict() for s in plan.steps]}
    if plan.health:
        result["health"] = plan.health
    if plan.fs is not None:
        result["fs_properties_changed"] = plan.fs.changed_properties
    if plan.reshapes and not runner.dry_run:
        after, health = get_layout(runner, spec.name, spec.aliases)
        result["after"] = {"pool": spec.name, "exists": True, **_layout_dict(after)}
        if plan.created:
            result["health"] = health.state
    return result


def ensure_pool(runner: Runner, *, name: str, layout: PoolLayout, disks: list, ashift: int = 12,
                properties: dict | None = None, fs_properties: dict | None = None, safe_mode: bool = True,
                wipe: list | None = None, allow_grow: bool = False, adopt: bool = False,
                allow_raidz_expansion: bool = False, upgrade_features: bool = False) -> dict:
    """Create the pool NAME with ``layout``, or add what is missing to it; never destroy or remove.

    ``disks``: the node's disks (disks.discover); every declared disk must be one of them.
    Validate (pool_spec), read (read_pool; a conflicting layout is refused before the pool's properties are
    read; read_pool_details), plan (plan_pool, pure), apply (apply_pool): see apply_pool for the result.
    In a dry run (runner.dry_run) nothing changes; `zpool create -n`/`zpool add -n` validate the
    plan and their output is in ``prepared``.
    """
    spec = pool_spec(name=name, layout=layout, disks=disks, ashift=ashift, properties=properties,
                     fs_properties=fs_properties, safe_mode=safe_mode, wipe=wipe, allow_grow=allow_grow, adopt=adopt,
                     allow_raidz_expansion=allow_raidz_expansion, upgrade_features=upgrade_features)
    live = read_pool(runner, spec)
    if live.exists:
        check_layout(spec, live)
        read_pool_details(runner, spec, live)
    return apply_pool(runner, spec, plan_pool(spec, live))


def _layout_dict(layout: PoolLayout) -> dict:
    return {"vdevs": [v.to_dict() for v in layout.vdevs]}


__all__ = ["DeviceHealth", "Expansion", "LayoutDiff", "LivePool", "PoolHealth", "PoolPlan", "PoolSpec", "DiskInfo",
           "add_argv", "apply_pool", "check_json_int_safe", "check_layout", "compare_layout", "create_argv",
           "diff_layout", "ensure_pool", "get_cache_space", "get_layout", "get_props", "parse_cache_space",
           "parse_health", "parse_list", "parse_pools", "parse_props", "parse_status", "plan_pool", "pool_exists",
           "pool_spec", "read_pool", "read_pool_details", "strip_part1", "validate_layout", "vdev_args", "wipe_steps"]
