"""Warming a dataset version on its storage node: reading its snapshot's device once, ahead of a training run,
so that epoch 1 finds its blocks in the ARC (RAM) and the L2ARC (the pool's cache devices) instead of on the
data disks. Two parts: ``plan`` (pure: how much to read, and why) and ``read_device`` (the one reading loop).

What the cache holds (``plan``'s inputs, read by the command):

* the ARC: ``c_max`` of /proc/spl/kstat/zfs/arcstats (its ceiling), of which ``ARC_SHARE`` is counted for the
  version: the ARC also holds metadata (the zvol's indirect blocks, dnodes), the dbuf cache and other datasets'
  blocks, and a sequential read of more than the ARC holds evicts its own first blocks (the oldest buffers go
  first), which is why the read stops at the cache's size instead of reading the whole version anyway;
* the L2ARC: the size of the pool's ONLINE cache devices, ``total_space`` of each in `zpool status -j
  --json-int -P` (``zpool.cache_space``: the reading of the pool that `fabricctl status` already makes; the
  ARC's kstat has no device sizes, only ``l2_size``/``l2_asize``, what the L2ARC holds now). Counted only when
  the version's ``secondarycache`` is ``all``; a version whose ``primarycache`` is not ``all`` is refused (the
  ARC keeps none of its data: there is nothing to warm).

Sizes are compared in stored bytes: the snapshot's ``referenced`` (after compression), since the ARC and the
L2ARC hold blocks compressed as they are on disk. The read goes through the device's offsets (``volsize``);
a version larger than the cache is read up to the same fraction of its device as the cache holds of its
stored bytes (the file system's data taken as spread over the device), so that about the cache's size of
data is read; the holes of a sparse zvol cost next to nothing to read and take no room in the ARC.

The L2ARC is not written by reads: its feed thread copies buffers from the tail of the ARC's lists (those
next to be evicted), at most ``l2arc_write_max`` bytes per ``l2arc_feed_secs`` (``l2arc_rate``; faster only
while the feed keeps up). A read faster than that past the ARC's share would evict blocks from the ARC
before the feed copies them: they would be in neither cache. So the part of the read beyond the ARC's share
is paced to the feed rate (``Plan.pace``, in device bytes per second); within the ARC's share the read goes
as fast as the disks give. The buffers read are demand reads (prefetched by ZFS, then used), which the
L2ARC takes whatever ``l2arc_noprefetch`` says.

How the device is read (``read_device``): buffered ``os.preadv`` of ``CHUNK`` bytes in sequence into one
buffer, with ``posix_fadvise(POSIX_FADV_DONTNEED)`` over the range first (so that pages the kernel's page
cache already had do not hide the read from ZFS) and after each chunk (so that the page cache does not hold
a second copy of what the ARC holds). Not O_DIRECT: on OpenZFS 2.3 an O_DIRECT read of a zvol still goes
through the ARC (only the Linux page cache is bypassed), but Direct I/O for zvols is proposed upstream, and
there an O_DIRECT read skips the ARC: the warming would silently warm nothing. Buffered reads go through the
ARC on every version. The snapshot's device is opened read-only and not exclusively, so a version LIO
exports (LIO holds its device exclusively) is read all the same; nothing is changed anywhere.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ..base.errors import UserError
from ..base.units import human_bytes

CHUNK = 4 * 1024 * 1024  # bytes per read: several volblocks and records, the size ZFS's prefetch ramps up to
ALIGN = 1024 * 1024  # a partial read stops on a MiB boundary
ARC_SHARE = 0.9  # of c_max, for the version (see the module's docstring)
L2ARC_WRITE_MAX = 8 * 1024 * 1024  # OpenZFS's defaults of l2arc_write_max and l2arc_feed_secs (zfs(4)),
L2ARC_FEED_SECS = 1  # used when /sys/module/zfs/parameters cannot be read
# what a warming reports of the ARC's kstat, before and after: the ARC's size, target and ceiling, its counters, and
# the L2ARC's data (l2_size; l2_asize as allocated on the devices), counters and bytes its feed wrote
ARC_FIELDS = ("size", "c", "c_max", "hits", "misses", "l2_size", "l2_asize", "l2_hits", "l2_misses", "l2_write_bytes")


def l2arc_rate(params: dict) -> float:
    """Bytes per second the L2ARC's feed writes at least: l2arc_write_max per l2arc_feed_secs (the module's
    parameters as read from /sys/module/zfs/parameters, text values; a missing or unreadable one: ZFS's
    default)."""
    def number(name: str, default: int) -> int:
        try:
            value = int(str(params.get(name, default)).strip())
        except ValueError:
            return default
        return value if value > 0 else default

    return number("l2arc_write_max", L2ARC_WRITE_MAX) / number("l2arc_feed_secs", L2ARC_FEED_SECS)


def arc_state(arcstats: dict) -> dict:
    """The fields of parsed arcstats (metrics.parse_arcstats) a warming reports: ARC_FIELDS (None: absent)."""
    return {name: arcstats.get(name) for name in ARC_FIELDS}


@dataclass(frozen=True)
class Plan:
    """How much of a version to read, and why (``lines``).

    device_bytes: the device's size (volsize); stored_bytes: the version's data as stored (referenced).
    arc_bytes, l2arc_bytes: what the ARC and L2ARC hold for it; cache_bytes their sum. read_bytes: how far
    into the device to read; arc_end: the offset after which reads are paced at ``pace`` device bytes per
    second (None: not paced). fits: the whole version fits in the cache; otherwise the read stops early.
    """

    ref: str
    device_bytes: int
    stored_bytes: int
    arc_max: int
    arc_bytes: int
    l2arc_bytes: int
    cache_bytes: int
    read_bytes: int
    arc_end: int
    pace: float | None
    fits: bool
    lines: list = field(default_factory=list)

    @property
    def stops_early(self) -> bool:
        return not self.fits

    @property
    def warmed_stored_bytes(self) -> int:
        """About how many of the version's stored bytes the read brings into the cache."""
        if not self.device_bytes:
            return 0
        return min(self.stored_bytes, int(self.stored_bytes * self.read_bytes / self.device_bytes))

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("lines")
        out.update(stops_early=self.stops_early, explanation=list(self.lines))
        return out


def _fraction(device_bytes: int, part: int, whole: int) -> int:
    """The offset of ``device_bytes`` that holds about ``part`` of ``whole`` stored bytes, on an ALIGN
    boundary."""
    offset = device_bytes * part // whole
    return min(device_bytes, offset - offset % ALIGN)


def plan(ref: str, *, device_bytes: int, stored_bytes: int, arc_max: int, l2arc_bytes: int = 0,
         primarycache: str = "all", secondarycache: str = "all", l2arc_rate: float = 0.0,
         arc_only: bool = False, arc_share: float = ARC_SHARE) -> Plan:
    """What to read of version ``ref`` (see the module's docstring for every rule); refuses a version the ARC
    keeps no data of (primarycache not ``all``). ``l2arc_rate``: the L2ARC's feed in stored bytes per second
    (``l2arc_rate()``; 0: reads are not paced); ``arc_only``: count the ARC only (no slow L2ARC part)."""
    if primarycache != "all":
        raise UserError(f"{ref} has primarycache={primarycache}: the ARC keeps none of its data, so reading it "
                        "ahead warms nothing",
                        "set `zfs set primarycache=all` on its dataset's volume, or do not warm it")
    device_bytes, stored_bytes, arc_max = max(int(device_bytes), 0), max(int(stored_bytes), 0), max(int(arc_max), 0)
    arc = int(arc_max * arc_share)
    lines = []
    if arc_only:
        l2 = 0
        if l2arc_bytes:
            lines.append(f"the L2ARC ({human_bytes(l2arc_bytes)}) is not counted (--arc-only)")
    elif l2arc_bytes and secondarycache != "all":
        l2 = 0
        lines.append(f"the L2ARC ({human_bytes(l2arc_bytes)}) keeps none of its data (secondarycache="
                     f"{secondarycache}): only the ARC is counted")
    else:
        l2 = max(int(l2arc_bytes), 0)
    cache = arc + l2
    held = (f"cache holds {human_bytes(cache)} (ARC {human_bytes(arc)}: {arc_share:.0%} of c_max "
            f"{human_bytes(arc_max)}" + (f"; L2ARC {human_bytes(l2)})" if l2 else "; no L2ARC)"))
    if not device_bytes or not stored_bytes:
        lines.insert(0, f"{ref} holds no data: nothing to read")
        return Plan(ref, device_bytes, stored_bytes, arc_max, arc, l2, cache, 0, 0, None, True, lines)
    fits = stored_bytes <= cache
    if fits:
        read = device_bytes
        lines.insert(0, f"version is {human_bytes(stored_bytes)} (stored; its device {human_bytes(device_bytes)}), "
                        f"{held}: reading all of it")
    else:
        read = _fraction(device_bytes, cache, stored_bytes)
        lines.insert(0, f"version is {human_bytes(stored_bytes)} (stored), {held}: warming the first "
                        f"{human_bytes(read)} of its {human_bytes(device_bytes)} device (about "
                        f"{human_bytes(cache)} of its data); epoch 1 will still read the rest from disk")
    arc_end, pace = read, None
    if stored_bytes > arc and l2 and l2arc_rate > 0:
        arc_end = min(read, _fraction(device_bytes, arc, stored_bytes))
        if arc_end < read:
            pace = l2arc_rate * device_bytes / stored_bytes
            paced_stored = (read - arc_end) * stored_bytes / device_bytes
            lines.append(f"past the ARC's share (from {human_bytes(arc_end)} of the device), reads are held to the "
                         f"L2ARC's feed rate ({human_bytes(l2arc_rate)}/s of stored data): at least "
                         f"{paced_stored / l2arc_rate:.0f} s for that part")
    return Plan(ref, device_bytes, stored_bytes, arc_max, arc, l2, cache, read, arc_end, pace, fits, lines)


@dataclass(frozen=True)
class Reading:
    """What ``read_device`` did: bytes read, seconds it took, whether it reached the end it was given (False:
    the device ended first)."""

    bytes_read: int
    seconds: float
    complete: bool

    @property
    def mb_per_s(self) -> float:
        """Decimal megabytes per second, as bandwidths are quoted."""
        return self.bytes_read / 1e6 / self.seconds if self.seconds > 0 else 0.0


def _drop(fd: int, offset: int, length: int) -> None:
    """Drop the page cache's clean pages of a range (best effort: a file system without it reads all the same)."""
    try:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass


def read_device(path: str, length: int, *, arc_end: int | None = None, pace: float | None = None,
                chunk: int = CHUNK, progress: Callable[[int], None] | None = None,
                clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Reading:
    """Read ``path`` from offset 0 to ``length`` in ``chunk``-byte reads (see the module's docstring for how),
    calling ``progress(bytes done)`` after each. From ``arc_end`` on, reads are held to ``pace`` bytes per
    second (None: not paced). Stops early, ``complete`` False, when the device ends before ``length``."""
    fd = os.open(path, os.O_RDONLY)  # not O_EXCL: LIO may hold an exported device exclusively
    started = clock()
    done = 0
    try:
        _drop(fd, 0, length)
        buf = bytearray(chunk)
        view = memoryview(buf)
        paced_from = length if arc_end is None or not pace else arc_end
        paced_start = None  # when the read entered the paced part
        while done < length:
            want = min(chunk, length - done)
            if paced_start is None and done + want > paced_from:
                paced_start = clock()
            got = os.preadv(fd, [view[:want]], done)
            if got <= 0:
                break
            _drop(fd, done, got)
            done += got
            if progress is not None:
                progress(done)
            if paced_start is not None:
                due = paced_start + max(done - paced_from, 0) / pace
                now = clock()
                if due > now:
                    sleep(due - now)
        _drop(fd, 0, length)  # what the kernel's readahead left
    finally:
        os.close(fd)
    return Reading(done, clock() - started, done >= length)


__all__ = ["ALIGN", "ARC_FIELDS", "ARC_SHARE", "CHUNK", "Plan", "Reading", "arc_state", "l2arc_rate", "plan",
           "read_device"]
