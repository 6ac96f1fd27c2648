"""Disk discovery on a storage node: which whole disks exist, what they are, and whether they are free.

``discover(runner)`` runs read-only commands through the Runner it is given and combines their
output; every parser below is pure (text in, data out) and tested on output recorded from the lab.

Commands, all read-only (so a dry run runs them too):

* ``lsblk --json --bytes --output ...`` (tree form): the disks, their partitions and stacked
  devices (md, dm), sizes, rotational flag, transport, serial, model and mount points.
  lsblk reads topology, sizes and mount points from sysfs and /proc/self/mountinfo, which are
  current. Its FSTYPE column, however, comes from the udev database and can be stale (a disk
  wiped or formatted without a udev event keeps its old value), so it is NOT used for decisions.
* ``find /dev/disk/by-id ... -printf '%f\\t%l\\n'``: the stable names and what they point to.
* ``find /sys/class/block/X/holders ...``: devices stacked on a disk or its partitions (md, dm).
* ``wipefs --no-act --json DEV...``: the signatures (filesystem, RAID, LVM, zfs_member, partition
  table) found by probing the devices NOW with libblkid. This is the signature source we trust;
  for zfs_member its label is the pool name.
* ``zpool status -j --json-int -P``: the devices of every imported pool, from OpenZFS 2.3's JSON
  (absent ZFS tools are tolerated: the zfs_member signature still marks such disks as in use).

A disk is in use when any of these holds; each produces a reason sentence (``DiskInfo.reasons``).
Reasons that start with one of ``ACTIVE_USE_PREFIXES`` mean the disk is actively used right now
(mounted, held by a stacked device, member of an imported pool): no "wipe" may ever override them.
"""

from __future__ import annotations

import json
import re

from ..base.errors import CommandError
from ..base.model import DiskInfo
from ..base.runner import Runner
from . import zjson

BY_ID_DIR = "/dev/disk/by-id"
LSBLK_COLUMNS = "NAME,KNAME,TYPE,SIZE,ROTA,TRAN,SERIAL,MODEL,WWN,MOUNTPOINTS,PKNAME"
LSBLK_ARGV = ("lsblk", "--json", "--bytes", "--output", LSBLK_COLUMNS)
BY_ID_ARGV = ("find", BY_ID_DIR, "-mindepth", "1", "-maxdepth", "1", "-printf", r"%f\t%l\n")
ZPOOL_STATUS_ARGV = ("zpool", "status", *zjson.JSON, "-P")

# kernel names of block devices that are never candidate disks: loop devices, compressed RAM,
# optical drives, RAM disks, floppies and ZFS volumes (zd*)
EXCLUDED_NAME = re.compile(r"^(loop|zram|sr|ram|fd|zd)\d")

ACTIVE_USE_PREFIXES = ("mounted at", "held by", "part of imported pool")

# by-id link name prefixes, best first: names built from model and serial, then WWN-like ones
_ID_RANK = (
    (re.compile(r"^nvme-(eui\.|nvme\.)"), 2),  # EUI-64 / NGUID based NVMe names
    (re.compile(r"^wwn-"), 2),
    (re.compile(r"^scsi-[0-9]"), 1),  # scsi-3<naa>, scsi-2..., scsi-0/1 vendor-based ids
    (re.compile(r"^(nvme|ata|scsi|virtio|usb|mmc|memstick|ieee1394|cciss)-"), 0),
)
_PART_LINK = re.compile(r"-part\d+$")

_SIGNATURE_KINDS = {
    "zfs_member": "ZFS pool member",
    "linux_raid_member": "Linux RAID (md) member",
    "LVM2_member": "LVM physical volume",
    "crypto_LUKS": "LUKS encrypted volume",
    "swap": "swap space",
    "bcache": "bcache device",
    "ceph_bluestore": "Ceph BlueStore device",
    "drbd": "DRBD device",
}
_PARTITION_TABLES = {"gpt", "dos", "PMBR", "atari", "bsd", "sun", "sgi", "mac", "amiga"}


# ---------------------------------------------------------------------------------------------
# pure parsers


def _bool(value) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip() in ("1", "true", "True")


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _text(value) -> str:
    return "" if value is None else str(value).strip()


def _walk(node: dict):
    """Every descendant of an lsblk node (partitions, stacked devices), depth first."""
    for child in node.get("children") or []:
        yield child
        yield from _walk(child)


def parse_lsblk(json_text: str) -> list[dict]:
    """The whole disks of ``lsblk --json --bytes --output ...`` (tree form), in lsblk's order.

    Each item: name, size, rotational, transport, serial, model, wwn, partitions (kernel names),
    stacked (kernel names of non-partition descendants such as md/dm devices), mountpoints
    (of the disk and every descendant: list of (kernel name, mount point)).
    """
    data = json.loads(json_text)
    disks = []
    for node in data.get("blockdevices") or []:
        name = _text(node.get("kname") or node.get("name"))
        if _text(node.get("type")) != "disk" or EXCLUDED_NAME.match(name):
            continue
        partitions, stacked, mounts = [], [], []
        for dev in [node, *_walk(node)]:
            dev_name = _text(dev.get("kname") or dev.get("name"))
            if dev is not node:
                (partitions if _text(dev.get("type")) == "part" else stacked).append(dev_name)
            points = dev.get("mountpoints")
            if points is None:  # older lsblk: a single MOUNTPOINT column
                points = [dev.get("mountpoint")]
            mounts.extend((dev_name, p) for p in points if p)
        transport = _text(node.get("tran"))
        if not transport and name.startswith("vd"):
            transport = "virtio"  # virtio-blk disks have no TRAN
        disks.append({
            "name": name,
            "size": _int(node.get("size")),
            "rotational": _bool(node.get("rota")),
            "transport": transport,
            "serial": _text(node.get("serial")),
            "model": _text(node.get("model")),
            "wwn": _text(node.get("wwn")),
            "partitions": partitions,
            "stacked": sorted(set(stacked)),
            "mountpoints": mounts,
        })
    return disks


def parse_by_id(listing_text: str) -> dict[str, str]:
    """Map each /dev/disk/by-id link name to the kernel name it points to.

    Accepts the ``find -printf '%f\\t%l\\n'`` listing discover() uses, and ``ls -l`` output.
    """
    links = {}
    for line in listing_text.splitlines():
        if " -> " in line:
            left, target = line.rsplit(" -> ", 1)
            name = left.split()[-1] if left.split() else ""
        elif "\t" in line:
            name, target = line.split("\t", 1)
        else:
            continue
        name, target = name.strip(), target.strip()
        if name and target and name not in (".", ".."):
            links[name] = target.rsplit("/", 1)[-1]
    return links


def id_rank(link_name: str) -> tuple:
    """Sort key of a by-id link: model/serial names first, WWN/EUI names last, then shortest, then by name."""
    rank = 1
    for pattern, value in _ID_RANK:
        if pattern.match(link_name):
            rank = value
            break
    return (rank, len(link_name), link_name)


def disk_ids(links: dict[str, str], kernel_name: str) -> list[str]:
    """Every by-id path of a whole disk (never a -partN link), sorted by preference."""
    names = [n for n, target in links.items() if target == kernel_name and not _PART_LINK.search(n)]
    return [f"{BY_ID_DIR}/{n}" for n in sorted(names, key=id_rank)]


def preferred_id(ids: list[str]) -> str:
    """The preferred of some by-id paths (see id_rank), "" when there is none."""
    return min(ids, key=lambda p: id_rank(p.rsplit("/", 1)[-1])) if ids else ""


def parse_wipefs(json_text: str) -> dict[str, list[dict]]:
    """``wipefs --no-act --json DEV...`` → {kernel name: [{type, label, uuid, offset}, ...]}."""
    if not json_text.strip():
        return {}
    result: dict[str, list[dict]] = {}
    for sig in json.loads(json_text).get("signatures") or []:
        device = _text(sig.get("device")).rsplit("/", 1)[-1]
        result.setdefault(device, []).append({k: _text(sig.get(k)) for k in ("type", "label", "uuid", "offset")})
    return result


def parse_holders(listing_text: str) -> dict[str, list[str]]:
    """``find /sys/class/block/X/holders ... -printf '%h\\t%f\\n'`` → {kernel name: [holder names]}."""
    result: dict[str, list[str]] = {}
    for line in listing_text.splitlines():
        if "\t" not in line:
            continue
        directory, holder = line.split("\t", 1)
        parts = directory.rstrip("/").split("/")
        if len(parts) >= 2 and parts[-1] == "holders" and holder.strip():
            result.setdefault(parts[-2], []).append(holder.strip())
    return {k: sorted(v) for k, v in result.items()}


def parse_zpool_status(json_text: str) -> dict[str, list[str]]:
    """``zpool status -j --json-int -P`` → {pool: [device paths]}: every device of every imported pool (data,
    special, dedup and log vdevs, cache and spare devices, spares standing in), as zpool names it (by-id
    links keep their -partN). A device the pool misses counts by the path it was at ("was"): the pool
    wants that disk back."""
    pools: dict[str, list[str]] = {}
    for pool in zjson.objects(zjson.loads(ZPOOL_STATUS_ARGV, json_text), "pools"):
        paths = pools.setdefault(str(pool.get("name", "")), [])
        roots = [*(pool.get("vdevs") or {}).values()]
        for key in ("dedup", "special", "logs", "l2cache", "spares"):
            roots += (pool.get(key) or {}).values()
        for node in roots:
            _device_paths(node, paths)
    return pools


def _device_paths(node, paths: list[str]) -> None:
    if not isinstance(node, dict):
        return
    children = (node.get("vdevs") or {}).values()
    if not children:
        path = str(node.get("was") or node.get("path") or "")
        if path.startswith("/") and path not in paths:
            paths.append(path)
    for child in children:
        _device_paths(child, paths)


def signature_reason(sig: dict, device: str, disk: str) -> str:
    """The in-use sentence for one wipefs signature found on ``device`` (the disk or one of its partitions)."""
    kind = sig["type"]
    where = "" if device == disk else f" on {device}"
    if kind == "zfs_member":
        pool = f" of pool '{sig['label']}'" if sig.get("label") else ""
        return f"ZFS pool member{pool}{where} (zfs_member signature)"
    if kind in _PARTITION_TABLES:
        return f"partition table {'gpt' if kind == 'PMBR' else kind}{where}"
    if kind in _SIGNATURE_KINDS:
        return f"{_SIGNATURE_KINDS[kind]}{where} ({kind} signature)"
    label = f" labelled '{sig['label']}'" if sig.get("label") else ""
    return f"filesystem {kind}{label}{where}"


def build_disks(lsblk: list[dict], links: dict[str, str], signatures: dict[str, list[dict]],
                holders: dict[str, list[str]], pools: dict[str, list[str]],
                probe_errors: dict[str, str] | None = None) -> list[DiskInfo]:
    """Combine the parsed outputs into DiskInfo objects (pure), sorted by preferred path."""
    probe_errors = probe_errors or {}
    owner = {}  # kernel name of the disk or a partition -> the disk's kernel name
    for d in lsblk:
        owner[d["name"]] = d["name"]
        for part in d["partitions"]:
            owner[part] = d["name"]
    pool_of: dict[str, list[str]] = {}
    for pool, paths in pools.items():
        for path in paths:
            base = path.rsplit("/", 1)[-1]
            kname = links.get(base, base) if path.startswith(BY_ID_DIR + "/") else base
            if kname in owner and pool not in pool_of.setdefault(owner[kname], []):
                pool_of[owner[kname]].append(pool)

    result = []
    for d in lsblk:
        name = d["name"]
        ids = disk_ids(links, name)
        reasons = []
        if d["partitions"]:
            reasons.append(f"has partitions: {', '.join(d['partitions'])}")
        seen = set()
        for dev in [name, *d["partitions"]]:
            sigs = signatures.get(dev, [])
            if any(s["type"] == "gpt" for s in sigs):
                sigs = [s for s in sigs if s["type"] != "PMBR"]
            for sig in sigs:
                reason = signature_reason(sig, dev, name)
                if reason not in seen:
                    seen.add(reason)
                    reasons.append(reason)
            if dev in probe_errors:
                reasons.append(f"signatures of {dev} could not be read ({probe_errors[dev]})")
        for dev, point in d["mountpoints"]:
            reasons.append(f"mounted at {point}" + ("" if dev == name else f" (from {dev})"))
        held = []
        for dev in [name, *d["partitions"]]:
            held += [(h, dev) for h in holders.get(dev, [])]
        held_names = {h for h, _dev in held}
        held += [(s, "") for s in d["stacked"] if s not in held_names]
        for holder, dev in held:
            reasons.append(f"held by {holder}" + (f" (via {dev})" if dev and dev != name else ""))
        for pool in pool_of.get(name, []):
            reasons.append(f"part of imported pool '{pool}'")
        transport = d["transport"]
        disk_class = "nvme" if transport == "nvme" else "hdd" if d["rotational"] else "ssd"
        result.append(DiskInfo(
            name=name, by_id=preferred_id(ids) or f"/dev/{name}", ids=ids, serial=d["serial"], model=d["model"],
            size=d["size"], rotational=d["rotational"], transport=transport, disk_class=disk_class,
            in_use=bool(reasons), reasons=reasons))
    return sorted(result, key=lambda disk: (disk.by_id, disk.name))


def names_of(disk: DiskInfo) -> set[str]:
    """Every name a disk may be given by: a by-id path or its link name, the kernel name, /dev/NAME."""
    paths = {disk.by_id, *disk.ids} - {""}
    return {*paths, *(p.rsplit("/", 1)[-1] for p in paths), disk.name, f"/dev/{disk.name}"}


def index_of(disks: list[DiskInfo]) -> dict[str, DiskInfo]:
    """Each name of ``names_of`` -> its disk (the one index of disks by name)."""
    return {name: disk for disk in disks for name in names_of(disk)}


def free_for_pool(disks: list[DiskInfo], pool: str) -> list[DiskInfo]:
    """Copies of disks where the members of the imported pool ``pool`` count as free.

    Planning a pool that already exists must find its own disks available, or a second run would
    plan around them. A member's reasons (partitions ZFS made, its zfs_member label, the pool
    membership) all come from that pool; any other reason keeps the disk in use.
    """
    member = f"part of imported pool '{pool}'"
    own = (member, "has partitions: ", "partition table gpt", f"ZFS pool member of pool '{pool}'")
    result = []
    for disk in disks:
        if member in disk.reasons and all(r.startswith(own) or _unlabelled_member(r) for r in disk.reasons):
            disk = DiskInfo.from_dict({**disk.to_dict(), "in_use": False, "reasons": []})
        result.append(disk)
    return result


def _unlabelled_member(reason: str) -> bool:
    """A zfs_member label that names no pool: an L2ARC (cache) device's label carries only the pool's
    GUID (OpenZFS 2.3), so `zpool status` membership, checked beside it, says whose it is."""
    return reason.startswith("ZFS pool member on ") or reason == "ZFS pool member (zfs_member signature)"


def is_active_use(reason: str) -> bool:
    """True for a reason that no wipe can override (mounted, held, in an imported pool)."""
    return reason.startswith(ACTIVE_USE_PREFIXES)


# ---------------------------------------------------------------------------------------------
# commands


def holders_argv(devices: list[str]) -> tuple:
    return ("find", *[f"/sys/class/block/{d}/holders" for d in devices], "-mindepth", "1", "-maxdepth", "1",
            "-printf", r"%h\t%f\n")


def wipefs_argv(devices: list[str]) -> tuple:
    return ("wipefs", "--no-act", "--json", *[f"/dev/{d}" for d in devices])


def _probe_signatures(runner: Runner, devices: list[str]) -> tuple[dict, dict]:
    """Signatures of all devices in one wipefs call; per device when that fails (a device vanished)."""
    res = runner.run(wipefs_argv(devices), check=False)
    if res.ok:
        return parse_wipefs(res.stdout), {}
    signatures, errors = {}, {}
    for dev in devices:
        one = runner.run(wipefs_argv([dev]), check=False)
        if one.ok:
            signatures.update(parse_wipefs(one.stdout))
        else:
            errors[dev] = (one.stderr or one.stdout).strip() or f"wipefs exit {one.rc}"
    return signatures, errors


def discover(runner: Runner) -> list[DiskInfo]:
    """Every whole disk of this node with its stable names, class and in-use reasons (read-only)."""
    lsblk = parse_lsblk(runner.run(LSBLK_ARGV).stdout)
    by_id = runner.run(BY_ID_ARGV, check=False)  # no by-id directory at all: rc 1, no links
    links = parse_by_id(by_id.stdout)
    devices = [dev for d in lsblk for dev in (d["name"], *d["partitions"])]
    if not devices:
        return []
    holders = runner.run(holders_argv(devices), check=False)
    signatures, probe_errors = _probe_signatures(runner, devices)
    status = runner.run(ZPOOL_STATUS_ARGV, check=False)
    if status.rc not in (0, 127) and "modules are not loaded" not in (status.stderr + status.stdout):
        zjson.refuse_without_json(status)
        raise CommandError(ZPOOL_STATUS_ARGV, status.rc, status.stdout, status.stderr,
                           fix="check that ZFS works on this node (`zpool status`)")
    pools = parse_zpool_status(status.stdout) if status.ok else {}
    return build_disks(lsblk, links, signatures, parse_holders(holders.stdout), pools, probe_errors)
