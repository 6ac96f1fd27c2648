"""Reading pools: ``zpool status``/``list``/``get`` as OpenZFS 2.3 JSON (``-j --json-int``, see zjson.py; recorded
from the lab in tests/unit/data/zfs23/ and zfs23b/), parsed by pure functions (``parse_*``) and read through a
runner (``pool_exists``, ``get_layout``, ``get_props``, ``get_cache_space``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...base.errors import NotFound, UserError
from ...base.model import PoolLayout, Vdev
from ...base.runner import Runner
from .. import zjson

# the vdev classes of a pool object in `zpool status -j`, in the order zpool prints them -> vdev role;
# "vdevs" holds the root vdev, whose children are the data vdevs
_CLASSES = (("dedup", "dedup"), ("special", "special"), ("logs", "log"), ("l2cache", "cache"), ("spares", "spare"))
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


def pool_object(text: str, pool: str | None, what: str) -> dict:
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


def health_of(obj: dict) -> PoolHealth:
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
    return health_of(pool_object(text, pool, "zpool status -j --json-int -P"))


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


def layout_of(obj: dict) -> PoolLayout:
    vdevs = [_top_vdev(top, "data") for root in _children(obj) for top in _children(root)]
    for key, role in _CLASSES:
        vdevs += [_top_vdev(top, role) for top in (obj.get(key) or {}).values() if isinstance(top, dict)]
    return PoolLayout(vdevs=vdevs)


def expanding_of(obj: dict) -> dict | None:
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
    return layout_of(pool_object(text, pool, "zpool status -j --json-int -P"))


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
    return zjson.properties(pool_object(text, pool, "zpool get -j --json-int all"))


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


def pool_exists(runner: Runner, name: str) -> dict | None:
    """{name, size, alloc, free, cap, health} of the imported pool NAME (`zpool list -j --json-int`), None
    when there is no such pool."""
    doc = zjson.run(runner, ["zpool", "list", *zjson.ZPOOL_JSON, name], missing=zjson.NO_POOL)
    pools = [_pool_row(p) for p in zjson.objects(doc, "pools")] if doc is not None else []
    return next((p for p in pools if p["name"] == name), None)


def _missing_pool(name: str) -> NotFound:
    return NotFound(f"pool {name} does not exist (not imported on this node)",
                    f"check the name with `zpool list`; an exported pool comes back with `zpool import {name}`")


def status_object(runner: Runner, name: str) -> dict:
    """The live pool NAME's object in `zpool status -j --json-int -P NAME`; NotFound when it is not imported."""
    doc = zjson.run(runner, ["zpool", "status", *zjson.ZPOOL_JSON, "-P", name], missing=zjson.NO_POOL)
    obj = next((p for p in zjson.objects(doc or {}, "pools") if p.get("name") == name), None)
    if obj is None:
        raise _missing_pool(name)
    return obj


def get_layout(runner: Runner, name: str, aliases: dict | None = None) -> tuple:
    """(PoolLayout, PoolHealth) of a live pool from one `zpool status -j --json-int -P NAME`, paths mapped
    through ``aliases`` (alias -> by_id). NotFound when the pool is not imported."""
    obj = status_object(runner, name)
    layout = layout_of(obj)
    if aliases:
        for vdev in layout.vdevs:
            vdev.disks = [aliases.get(d, d) for d in vdev.disks]
    return layout, health_of(obj)


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
    return _cache_space(pool_object(text, pool, "zpool status -j --json-int -P"))


def get_cache_space(runner: Runner, name: str) -> dict:
    """parse_cache_space of the live pool NAME (the `zpool status -j --json-int -P NAME` get_layout reads);
    NotFound when the pool is not imported."""
    obj = status_object(runner, name)
    return _cache_space(obj)


def get_props(runner: Runner, name: str) -> dict:
    """{property: (value, source)} of the pool NAME (`zpool get -j --json-int all NAME`); NotFound when the
    pool is not imported."""
    doc = zjson.run(runner, ["zpool", "get", *zjson.ZPOOL_JSON, "all", name], missing=zjson.NO_POOL)
    obj = next((p for p in zjson.objects(doc or {}, "pools") if p.get("name") == name), None)
    if obj is None:
        raise _missing_pool(name)
    return zjson.properties(obj)
