"""Read a version on this storage node ahead of a training run, so that epoch 1 finds its blocks in the ARC
(RAM) and the L2ARC (the pool's cache devices) instead of on the data disks.

The version's snapshot device (/dev/zvol/DATASET_ROOT/NAME@VERSION) is read once, in sequence, with a
progress bar on a terminal. The cache is the ARC (90 % of its ceiling, c_max of the ARC's kstat: the ARC
also holds metadata and other data) plus the pool's ONLINE cache devices (when the version's
secondarycache is all). A version larger than that is read only as far as the cache holds, and the
command says so: reading on would evict the version's own first blocks. Past the ARC's share, reads are
held to the L2ARC's feed rate (l2arc_write_max per l2arc_feed_secs), since the L2ARC is filled from the
ARC's evictions at that rate and no faster; --arc-only skips that slower part.

Nothing is changed: no lock is taken, and a published version is read while hosts use it. The page cache
of this node keeps no second copy of what was read (see fabric_core/services/warm.py for how and why). The report
gives the bytes read, seconds, MB/s, the ARC and L2ARC before and after, and whether the read stopped early.

Examples:
  fabricctl warm imagenet@v1
  fabricctl warm imagenet@v1 --arc-only --json
"""

from __future__ import annotations

import sys

from fabric_core.base.errors import FabricError, NotFound, UserError
from fabric_core.base.names import parse_ref
from fabric_core.services import warm
from fabric_core.services.metrics import ARCSTATS, parse_arcstats
from fabric_core.storage import tunables, zfs, zpool

from .. import datasets, readings
from ..output import ProgressBar, human_bytes

PATH = ("warm",)
HELP = "read a version ahead of a training run so that its blocks are in the ARC and L2ARC"
MUTATING = False  # read-only: no node lock, no journal record

arcstats_path = ARCSTATS  # tests point them at samples
sysfs = tunables.SYSFS
PROPS = ("volsize", "referenced", "primarycache", "secondarycache")
L2ARC_PARAMS = ("l2arc_write_max", "l2arc_feed_secs")


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the sealed version")
    p.add_argument("--arc-only", action="store_true",
                   help="count the ARC only: stop at what it holds (no L2ARC part, which is read at the feed rate)")
    p.add_argument("--l2arc-rate", metavar="SIZE",
                   help="stored bytes per second past the ARC's share, e.g. 200M (default: l2arc_write_max per "
                        "l2arc_feed_secs; 0: as fast as the disks)")


def arc_now() -> dict:
    """The ARC's statistics now (warm.ARC_FIELDS); UserError when its kstat cannot be read."""
    text = readings.read_arcstats(arcstats_path)
    if text is None:
        raise UserError(f"cannot read {arcstats_path}: is the zfs module loaded?",
                        "run fabricctl warm on the storage node that holds the version")
    return warm.arc_state(parse_arcstats(text))


def feed_rate(args) -> float:
    """The L2ARC's feed rate in stored bytes per second: --l2arc-rate, else the module's parameters."""
    if args.l2arc_rate is not None:
        return float(zfs.parse_size(args.l2arc_rate))
    try:
        params = tunables.read_live(L2ARC_PARAMS, sysfs)
    except FabricError:
        params = {}
    return warm.l2arc_rate(params)


def version(ctx, ref: str):
    """The export (fabric_core.services.publish.Export) of a sealed version; NotFound says how to list the versions."""
    name, ver = parse_ref(ref)
    try:
        row = datasets.require_version(ctx, name, ver)
    except NotFound as exc:
        raise NotFound(exc.problem, f"{exc.fix}; `fabricctl list` shows the versions on this node") from None
    return datasets.export_of(ctx, row)


def make_plan(ctx, args, export, arc: dict) -> tuple[warm.Plan, dict]:
    """(the plan, {cache device: bytes}) from the snapshot's properties, the ARC's state (``arc_now``) and the
    pool's cache devices."""
    props = zfs.get_props(ctx.local, export.snapshot, PROPS).get(export.snapshot, {})

    def prop(name: str, default: str = "") -> str:
        return str(props.get(name, (default,))[0])

    def number(name: str) -> int:
        text = prop(name, "0")
        return int(text) if text.isdigit() else 0

    pool = export.snapshot.split("/", 1)[0]
    cache_devices = zpool.get_cache_space(ctx.local, pool)
    plan = warm.plan(export.ref, device_bytes=number("volsize"), stored_bytes=number("referenced"),
                     arc_max=arc.get("c_max") or 0, l2arc_bytes=sum(cache_devices.values()),
                     primarycache=prop("primarycache", "all"), secondarycache=prop("secondarycache", "all"),
                     l2arc_rate=feed_rate(args), arc_only=args.arc_only)
    return plan, cache_devices


def summary(plan: warm.Plan, reading: warm.Reading) -> str:
    """What the warming did, on one line."""
    if not plan.read_bytes:
        return f"{plan.ref}: nothing to read"
    if not reading.complete:
        return (f"{plan.ref}: the device ended after {human_bytes(reading.bytes_read)} of the "
                f"{human_bytes(plan.read_bytes)} planned")
    if plan.fits:
        return f"{plan.ref} is warm: all of it was read"
    return (f"version is {human_bytes(plan.stored_bytes)}, cache holds {human_bytes(plan.cache_bytes)}: warmed the "
            f"first {human_bytes(plan.read_bytes)} of its {human_bytes(plan.device_bytes)} device (about "
            f"{human_bytes(plan.warmed_stored_bytes)} of its data); epoch 1 will still read the rest from disk")


def run(ctx, args) -> int:
    export = version(ctx, args.ref)
    before = arc_now()  # the plan's c_max, and the ARC as the read found it
    plan, cache_devices = make_plan(ctx, args, export, before)
    device = datasets.readable_device(ctx, export)
    if not args.json:
        for line in plan.lines:
            print(line)
    progress_bar = None
    if plan.read_bytes and not args.json and sys.stderr.isatty():  # a terminal only: no lines in a log
        progress_bar = ProgressBar(0, plan.read_bytes, label=f"warm {export.ref}")
    try:
        reading = warm.read_device(device, plan.read_bytes, arc_end=plan.arc_end, pace=plan.pace,
                                   progress=(lambda done: progress_bar.set(0, done)) if progress_bar else None) \
            if plan.read_bytes else warm.Reading(0, 0.0, True)
    finally:
        if progress_bar:
            progress_bar.close()
    after = arc_now()
    text = summary(plan, reading)
    out = {"ref": export.ref, "device": device, "bytes_read": reading.bytes_read,
           "seconds": round(reading.seconds, 3), "mb_per_s": round(reading.mb_per_s, 1),
           "stopped_early": plan.stops_early or not reading.complete, "complete": reading.complete,
           "arc_before": before, "arc_after": after, "l2arc_devices": cache_devices, "plan": plan.to_dict(),
           "summary": text}
    if args.json:
        ctx.emit(out)
        return 0
    print(f"read {human_bytes(reading.bytes_read)} in {reading.seconds:.1f} s ({reading.mb_per_s:.1f} MB/s); "
          f"ARC {human_bytes(before['size'])} -> {human_bytes(after['size'])}, "
          f"L2ARC {human_bytes(before['l2_size'])} -> {human_bytes(after['l2_size'])}")
    print(text)
    return 0
