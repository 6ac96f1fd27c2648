"""Replication of versions and checkpoints between storage nodes, with ZFS's own send and receive.

A version never changes, so every storage node that holds the same snapshot (the same GUID: send and
receive keep it) serves the same bytes. Replication copies snapshots of a volume from this node (the
source) to another storage node (the target); nothing else moves data, and no protocol of the
fabric's own carries it.

The three parts, as everywhere in the core:

* **read**: ``read_side`` reads one side's volume (does it exist, its snapshots and bookmarks with their
  GUIDs, an interrupted receive's resume token, bytes written since its newest snapshot, the space
  left, encryption), locally or, for the target, through its restricted SSH command (``serve``), which
  answers with the same reading as JSON (``Side.to_dict``/``from_dict``);
* **plan** (pure): ``plan`` compares the two sides for the snapshots wanted and gives the transfers:
  nothing for a snapshot the target has (same GUID), a resume of an interrupted receive first, a full
  send only when the target has no volume, otherwise an incremental send from the newest snapshot (or
  bookmark, if the snapshot is gone here) both sides share; it refuses, naming the problem and the
  fix, a target whose snapshot of the same name has another GUID (diverged), a target with no
  snapshot in common, a snapshot older than the target's newest, and a target changed since the base
  (unless ``force``: the receive then rolls it back to the base, which the plan says);
* **apply**: ``send_argv``/``receive_argv`` are the two ends of a transfer, ``pump`` moves the stream
  between them (``os.splice``, no copy through Python's memory) with an optional bandwidth limit and a
  progress callback; the fabricctl command holds both sides' snapshots while a transfer is in flight
  and bookmarks what arrived, so the next incremental has a base even after the version is destroyed
  here.

The stream: one volume's one snapshot, a plain stream (never ``-p``, ``-R``: a stream package carries
properties and may hold several substreams, which ``zfs receive`` creates one after the other, under names
the sender chooses), ``-w`` (raw) for an encrypted volume, else ``-c -L -e`` (blocks as they are stored,
compressed, large, embedded). The version's ``fabric:*`` metadata (the volume's and the snapshot's user
properties; its manifest is inside the volume's file system) travels in the request instead, where the
target checks each one (``check_props``) and sets it itself. The receive is resumable (``-s``), never
mounted (``-u``), leaves the volume read-only and marks it managed and where it came from
(``fabric:origin``).

The target trusts nothing the source says (the peer key is a credential another machine holds; see
docs/security.md). Before anything is received it checks, with the same rules the source plans with:
the volume it would write (``check_receive``: a replica from the asking node, or none yet; never a volume
it made itself, one fabricctl does not own, or another node's replica; ``-F`` only into the asker's own
replica) and the stream's first record (``parse_stream_header``/``check_stream``: a plain stream of a
volume, not a file system, not a package). A stream refused there was never given to ``zfs receive``,
so it leaves nothing behind.
"""

from __future__ import annotations

import os
import re
import select
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..base.errors import FabricError, NotFound, UnsafeOperation, UserError
from ..base.names import validate_dataset_name, validate_snapshot_component
from ..base.runner import STALL_SECONDS, Runner
from ..storage import zjson

HOLD_SENDING = "fabric:sending"  # on the source's snapshots while a send is in flight
HOLD_RECEIVING = "fabric:receiving"  # on the target's incremental base while a receive is in flight
ORIGIN_PROP = "fabric:origin"  # set on a received volume: the storage node it came from
READ_PROPS = ("receive_resume_token", "written", "available", "encryption", "fabric:managed", ORIGIN_PROP,
              "fabric:kind")
MANAGED_PROP = "fabric:managed"
# set by the target on every receive, whatever the request says: a replica is never written but by a receive,
# fabricctl owns it, and it came from the node the asking key belongs to
RECEIVE_PROPS = {"readonly": "on", MANAGED_PROP: "true"}
# fabric:* properties a request may not set (the target's own: RECEIVE_PROPS, ORIGIN_PROP; readings)
RESERVED_PROPS = frozenset({ORIGIN_PROP, MANAGED_PROP, "fabric:published"})
_USER_PROP = re.compile(r"fabric:[a-z0-9][a-z0-9_.:-]{0,247}")  # zfs: lower case, at most 255 characters
MAX_PROPS = 64  # fabric:* properties of one volume or snapshot a request may carry
MAX_PROP_VALUE = 8191  # characters of one value (zfs's limit for a user property)


@dataclass(frozen=True)
class Point:
    """A snapshot (``@v1``) or bookmark (``#v1``) of a volume, by the GUID that send and receive keep."""

    name: str  # the short name, after the @ or #
    guid: str
    txg: int
    bookmark: bool = False

    @property
    def ref(self) -> str:
        return ("#" if self.bookmark else "@") + self.name


@dataclass
class Side:
    """One volume as read on one storage node."""

    dataset: str
    exists: bool = False
    snapshots: list = field(default_factory=list)  # list[Point], oldest first
    bookmarks: list = field(default_factory=list)  # list[Point], oldest first
    resume_token: str = ""  # an interrupted resumable receive left this ("" none)
    written: int = 0  # bytes written to the volume since its newest snapshot
    available: int = 0  # bytes the volume may still grow by (its pool's free space, quotas applied)
    encrypted: bool = False
    managed: bool = False  # fabric:managed=true
    origin: str = ""  # fabric:origin: the node it was received from ("" made here)

    @property
    def guids(self) -> dict[str, str]:
        """Snapshot name -> GUID (what identifies a version across nodes)."""
        return {p.name: p.guid for p in self.snapshots}

    def to_dict(self) -> dict:
        return {"dataset": self.dataset, "exists": self.exists, "resume_token": self.resume_token,
                "written": self.written, "available": self.available, "encrypted": self.encrypted,
                "managed": self.managed, "origin": self.origin,
                "snapshots": [[p.name, p.guid, p.txg] for p in self.snapshots],
                "bookmarks": [[p.name, p.guid, p.txg] for p in self.bookmarks]}

    @classmethod
    def from_dict(cls, d: dict) -> Side:
        try:
            return cls(dataset=str(d["dataset"]), exists=bool(d["exists"]), resume_token=str(d["resume_token"]),
                       written=int(d["written"]), available=int(d["available"]), encrypted=bool(d["encrypted"]),
                       managed=bool(d["managed"]), origin=str(d["origin"]),
                       snapshots=[Point(str(n), str(g), int(t)) for n, g, t in d["snapshots"]],
                       bookmarks=[Point(str(n), str(g), int(t), True) for n, g, t in d["bookmarks"]])
        except (KeyError, TypeError, ValueError) as exc:
            raise FabricError(f"the target's state is not what fabricctl replica-serve prints ({exc!r})",
                              "install the same fabricctl on every storage node (playbooks/fabricctl.yml)") from None


# --------------------------------------------------------------------------------------------
# read


def parse_points(text: str, dataset: str) -> tuple[list, list]:
    """(snapshots, bookmarks) of `zfs list -j -p -t snapshot,bookmark -o name,guid,createtxg -d 1 DATASET`,
    oldest first."""
    doc = zjson.loads(("zfs", "list"), text)
    snaps, marks = [], []
    for obj in zjson.objects(doc, "datasets"):
        name = str(obj.get("name", ""))
        props = obj.get("properties") or {}
        guid = zjson.value_text((props.get("guid") or {}).get("value"))
        txg = _int(zjson.value_text((props.get("createtxg") or {}).get("value")) or obj.get("createtxg"))
        for sep, out, bookmark in (("@", snaps, False), ("#", marks, True)):
            parent, found, short = name.partition(sep)
            if found and parent == dataset:
                out.append(Point(short, guid, txg, bookmark))
    return sorted(snaps, key=lambda p: p.txg), sorted(marks, key=lambda p: p.txg)


def _int(value) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def read_side(runner: Runner, dataset: str) -> Side:
    """The volume ``dataset`` as ``runner``'s node has it (every read, in a dry run too)."""
    validate_dataset_name(dataset)
    doc = zjson.run(runner, ["zfs", "get", *zjson.ZFS_JSON, ",".join(READ_PROPS), dataset], missing=zjson.NO_DATASET)
    if doc is None:
        return Side(dataset)
    props = zjson.properties(next(iter(zjson.objects(doc, "datasets")), {}))

    def value(prop: str) -> str:
        v = props.get(prop)
        v = v[0] if isinstance(v, tuple) else v
        return "" if v in (None, "-") else str(v)

    res = runner.run(["zfs", "list", *zjson.ZFS_JSON, "-t", "snapshot,bookmark", "-o", "name,guid,createtxg",
                      "-d", "1", dataset])
    snaps, marks = parse_points(res.stdout, dataset)
    return Side(dataset, exists=True, snapshots=snaps, bookmarks=marks, resume_token=value("receive_resume_token"),
                written=_int(value("written")), available=_int(value("available")),
                encrypted=value("encryption") not in ("", "off"), managed=value("fabric:managed") == "true",
                origin=value(ORIGIN_PROP))


def read_fabric_props(runner: Runner, name: str) -> dict[str, str]:
    """The ``fabric:*`` properties set on a volume or snapshot (locally, or received by an older fabricctl's
    ``send -p``), but the target's own (RESERVED_PROPS): what a transfer carries in its request."""
    doc = zjson.run(runner, ["zfs", "get", *zjson.ZFS_JSON, "-s", "local,received", "all", name])
    props = zjson.properties(next(iter(zjson.objects(doc or {}, "datasets")), {}))
    return {k: v[0] for k, v in sorted(props.items()) if _USER_PROP.fullmatch(k) and k not in RESERVED_PROPS}


# --------------------------------------------------------------------------------------------
# the target's checks: what it receives into, what it receives, which properties it sets


def check_receive(dst: Side, *, origin: str, force: bool, node: str = "this node") -> None:
    """The one rule for the volume a receive writes, checked by the source when it plans (``plan``) and by the
    target before it receives (replica-serve, which trusts no source): a new volume, or the replica ``origin``
    sent before; ``force`` (``-F``: roll back, or replace) only into that replica. Never a volume fabricctl does
    not own, one ``node`` made itself (a live checkpoint volume, a sealed version: a receive would replace its
    data under its writer or readers), or another node's replica. UnsafeOperation otherwise."""
    where = f"{dst.dataset} on {node}"
    if not dst.exists:
        if force:
            raise UnsafeOperation(f"--force (zfs receive -F) into {where}, which does not exist: nothing to roll back",
                                  "replicate without --force")
        return
    if not dst.managed:
        raise UnsafeOperation(f"{where} exists but fabricctl does not own it (fabric:managed is not true)",
                              f"fabricctl never writes over what it did not make: move it away on {node}")
    if not dst.origin:
        raise UnsafeOperation(f"{where} was made there (it has no fabric:origin): a volume a node made itself, a live "
                              "checkpoint volume or a sealed version, never receives from another node",
                              f"replicate under another name, or destroy it on {node} with fabricctl first")
    if dst.origin != origin:
        raise UnsafeOperation(f"{where} is a replica from {dst.origin}: only {dst.origin} replicates into it, not "
                              f"{origin}", f"replicate from {dst.origin}; to take it from {origin} instead, destroy "
                              f"the replica on {node} (`zfs destroy -r {dst.dataset}`), then replicate again")


def check_props(props: dict[str, str], what: str) -> dict[str, str]:
    """The ``fabric:*`` properties a request asks the target to set on ``what``, checked: the fabric's own
    namespace only, never the target's own (RESERVED_PROPS), at most MAX_PROPS of MAX_PROP_VALUE characters."""
    if len(props) > MAX_PROPS:
        raise UserError(f"replica-serve: {len(props)} properties for {what}, more than {MAX_PROPS}",
                        "a transfer carries only the version's fabric:* properties")
    for key, value in props.items():
        if not _USER_PROP.fullmatch(key) or key in RESERVED_PROPS:
            raise UserError(f"replica-serve: property {key[:80]!r} for {what} is not one a replica may be given "
                            "(fabric:* only, not fabric:origin, fabric:managed or fabric:published)",
                            "a transfer carries only the version's fabric:* properties")
        if len(value) > MAX_PROP_VALUE or "\0" in value:
            raise UserError(f"replica-serve: the value of {key} for {what} is longer than {MAX_PROP_VALUE} characters "
                            "or holds a NUL", "shorten it on the source node")
    return props


# The first record of a send stream (OpenZFS include/sys/zfs_ioctl.h): dmu_replay_record_t, 312 bytes.
# drr_type u32, drr_payloadlen u32, then drr_begin: drr_magic u64, drr_versioninfo u64 (bits 0-1: the
# header type), drr_creation_time u64, drr_type u32 (dmu_objset_type_t), drr_flags u32, drr_toguid u64,
# drr_fromguid u64, drr_toname char[256]. A stream from another byte order has its magic swapped.
RECORD_SIZE = 312
DRR_BEGIN = 0
BACKUP_MAGIC = 0x2F5BACBAC
SUBSTREAM, COMPOUNDSTREAM = 1, 2
OBJSET_TYPES = {2: "file system", 3: "volume"}  # DMU_OST_ZFS, DMU_OST_ZVOL
_BEGIN = "II QQQ II QQ 256s"


@dataclass(frozen=True)
class StreamHeader:
    """What the first record of a send stream says it carries."""

    record: int  # drr_type: DRR_BEGIN (0) in a stream
    magic_ok: bool
    header_type: int  # SUBSTREAM (one snapshot of one dataset) or COMPOUNDSTREAM (a package: -p, -R)
    objset: str  # "volume", "file system", or "type N"
    toname: str  # DATASET@SNAPSHOT on the sending node
    toguid: int
    fromguid: int  # 0: a full stream

    @property
    def snapshot(self) -> str:
        return self.toname.partition("@")[2]


def parse_stream_header(data: bytes) -> StreamHeader:
    """The first record of a send stream (RECORD_SIZE bytes); UserError when there are fewer."""
    if len(data) < RECORD_SIZE:
        raise UserError(f"replica-serve: the stream ended after {len(data)} bytes, before its first record",
                        "the sending node re-runs the same command")
    fields = None
    for order in "<>":
        fields = struct.unpack_from(order + _BEGIN, data)
        if fields[2] == BACKUP_MAGIC:
            break
    record, _payload, magic, versioninfo, _created, objset, _flags, toguid, fromguid, toname = fields
    return StreamHeader(record=record, magic_ok=magic == BACKUP_MAGIC, header_type=versioninfo & 3,
                        objset=OBJSET_TYPES.get(objset, f"type {objset}"),
                        toname=toname.split(b"\0", 1)[0].decode(errors="replace"), toguid=toguid, fromguid=fromguid)


def check_stream(header: StreamHeader, dataset: str) -> str:
    """A stream the target receives: a plain stream (one snapshot of one dataset) of a volume, for a snapshot
    with a name of the rulebook; its snapshot's name. UnsafeOperation otherwise (nothing was received)."""
    if header.record != DRR_BEGIN or not header.magic_ok:
        raise UnsafeOperation(f"replica-serve: what arrived for {dataset} is not a ZFS send stream",
                              "send it with fabricctl replicate")
    if header.header_type == COMPOUNDSTREAM:
        raise UnsafeOperation(f"replica-serve: the stream for {dataset} is a package (zfs send -p/-R/-b): it carries "
                              "properties and may create other datasets", "send one snapshot without -p "
                              "(fabricctl replicate does; install the same fabricctl on every storage node)")
    if header.header_type != SUBSTREAM:
        raise UnsafeOperation(f"replica-serve: the stream for {dataset} has an unknown header type "
                              f"{header.header_type}", "send it with fabricctl replicate")
    if header.objset != "volume":
        raise UnsafeOperation(f"replica-serve: the stream for {dataset} carries a {header.objset}, not a volume: "
                              "the fabric replicates volumes only", "send a dataset version or a checkpoint "
                              "volume with fabricctl replicate")
    return validate_snapshot_component(header.snapshot)


# --------------------------------------------------------------------------------------------
# plan


@dataclass(frozen=True)
class Transfer:
    """One send/receive: ``snapshot`` arrives on the target, from ``base`` (``@v1``/``#v1``; None: a full
    send), or the interrupted receive of ``resume_token`` is finished."""

    snapshot: str
    base: str | None = None
    resume_token: str = ""
    force: bool = False  # receive -F: the target is rolled back to the base first
    estimate: int = 0  # bytes, from `zfs send -nP` (filled in by the caller)

    @property
    def kind(self) -> str:
        return "resume" if self.resume_token else ("incremental" if self.base else "full")

    def describe(self, dataset: str) -> str:
        if self.resume_token:
            return f"resume the interrupted receive of {dataset}@{self.snapshot}"
        what = f"incremental from {self.base}" if self.base else "full"
        return f"send {dataset}@{self.snapshot} ({what}{', rolling the target back to the base' if self.force else ''})"


@dataclass
class Plan:
    source: str  # the dataset here
    target: str  # the dataset there
    transfers: list = field(default_factory=list)  # list[Transfer], in order
    present: list = field(default_factory=list)  # snapshots the target has already (same GUID)
    notes: list = field(default_factory=list)


def plan(src: Side, dst: Side, wanted: list[str], *, origin: str, node: str = "the target", force: bool = False,
         resume_name: str = "") -> Plan:
    """The transfers that bring the snapshots ``wanted`` (short names, any order) of ``src`` to ``dst``, from the
    node ``origin`` (this one: the target accepts only what ``check_receive`` allows, checked here first).

    ``resume_name``: the snapshot ``dst.resume_token`` is for (`zfs send -nvt TOKEN` names it), planned as
    arrived once resumed. Raises NotFound / UserError / UnsafeOperation naming the problem and the fix.
    """
    out = Plan(src.dataset, dst.dataset)
    if not src.exists:
        raise NotFound(f"{src.dataset} does not exist on this node", "name a dataset or job of `fabricctl list`")
    order = {p.name: i for i, p in enumerate(src.snapshots)}
    for name in wanted:
        if name not in order:
            have = ", ".join(p.name for p in src.snapshots) or "none"
            raise NotFound(f"{src.dataset}@{name} does not exist on this node (its snapshots: {have})",
                           "name a version of `fabricctl list`")
    wanted = sorted(set(wanted), key=order.__getitem__)
    check_receive(dst, origin=origin, force=False, node=node)
    # what the target has (or will have), by name -> GUID
    there = dst.guids
    if dst.resume_token:
        if not resume_name or resume_name not in order:
            raise UserError(f"{dst.dataset} on {node} holds an interrupted receive of a snapshot this node does not "
                            f"have ({resume_name or 'unknown'})",
                            f"discard it on {node} with `zfs receive -A {dst.dataset}`, then replicate again")
        out.transfers.append(Transfer(resume_name, resume_token=dst.resume_token))
        there[resume_name] = src.snapshots[order[resume_name]].guid
    changed_checked = False
    for name in wanted:
        mine = src.snapshots[order[name]]
        if name in there:
            if there[name] != mine.guid:
                raise UserError(f"{dst.dataset}@{name} on {node} is not this node's {name}: GUID {there[name]} there, "
                                f"{mine.guid} here (the two diverged: made separately under one name)",
                                "keep the one you want: destroy the other version with `fabricctl dataset destroy` on "
                                "its node, then replicate again")
            if not any(t.snapshot == name for t in out.transfers):
                out.present.append(name)
            continue
        if not there and not dst.exists:
            out.transfers.append(Transfer(name))
            there[name] = mine.guid
            continue
        base = _base(src, there, mine)
        if base is None:
            raise UserError(f"{dst.dataset} on {node} shares no snapshot with this node's {src.dataset} (it has: "
                            f"{', '.join(p.name for p in dst.snapshots) or 'none'}), so no incremental send can "
                            "reach it; a full send would replace it", f"if it is not needed, destroy it on {node} "
                            "(`zfs destroy -r`), then replicate again")
        newer = [p for p in dst.snapshots if _newer(p, base, src)]
        if newer:
            raise UserError(f"{node} has {dst.dataset}@{newer[-1].name}, newer than {name}: ZFS adds snapshots only "
                            "after the newest one there", f"replicate {name} before newer versions, or leave it "
                            f"out; to replace {node}'s copy destroy it there first")
        force_this = False
        if not changed_checked:
            changed_checked = True
            changed = _changed_since(dst, base, src)
            if changed and not force:
                raise UnsafeOperation(f"{dst.dataset} on {node} changed since {base.ref} ({changed}): a replica is "
                                      "never written but by a receive",
                                      f"find out who changed it; --force rolls it back to {base.ref} and discards "
                                      f"those changes on {node} (held or published "
                                      "snapshots newer than it make the receive fail, never lost)")
            force_this = bool(changed)
            if changed:
                out.notes.append(f"--force: {node}'s {dst.dataset} is rolled back to {base.ref} ({changed})")
        out.transfers.append(Transfer(name, base=base.ref, force=force_this))
        there[name] = mine.guid
    return out


def _base(src: Side, there: dict, snap: Point) -> Point | None:
    """The newest snapshot (or, when gone here, bookmark) older than ``snap`` that the target has."""
    guids = set(there.values())
    candidates = [p for p in (*src.snapshots, *src.bookmarks) if p.guid in guids and p.txg < snap.txg]
    if not candidates:
        return None
    newest = max(p.txg for p in candidates)
    return next(p for p in sorted(candidates, key=lambda p: p.bookmark) if p.txg == newest)  # a snapshot first


def _newer(point: Point, base: Point, src: Side) -> bool:
    """Whether the target's snapshot ``point`` is a version of this node's newer than the base (a snapshot this
    node does not know was made there by hand: a change, which _changed_since reports)."""
    mine = {p.guid: p for p in (*src.snapshots, *src.bookmarks)}
    here = mine.get(point.guid)
    return here is not None and here.txg > base.txg


def _changed_since(dst: Side, base: Point, src: Side) -> str:
    """How the target changed since the base: snapshots made there after it, data written; "" none."""
    known = {p.guid for p in src.snapshots} | {p.guid for p in src.bookmarks}
    extra = [p.name for p in dst.snapshots if p.guid not in known]
    parts = []
    if extra:
        parts.append(f"snapshots made there: {', '.join(extra)}")
    if dst.written:
        parts.append(f"{dst.written} bytes written since its newest snapshot")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------
# apply: the two ends of a transfer and the pump between them


def send_argv(dataset: str, transfer: Transfer, *, raw: bool, estimate: bool = False) -> list[str]:
    """`zfs send` of a transfer (``estimate``: the dry run `-nP` that prints its size)."""
    dry = ["-n", "-P"] if estimate else []
    if transfer.resume_token:
        return ["zfs", "send", *dry, "-t", transfer.resume_token]
    flags = ["-w"] if raw else ["-c", "-L", "-e"]  # never -p: a package (check_stream)
    base = ["-i", dataset + transfer.base] if transfer.base else []
    return ["zfs", "send", *dry, *flags, *base, f"{dataset}@{transfer.snapshot}"]


def receive_argv(dataset: str, *, origin: str, force: bool = False, props: dict[str, str] | None = None) -> list[str]:
    """`zfs receive` on the target: resumable, never mounted, read-only, managed, marked with where it came from,
    with the volume's ``fabric:*`` properties of the request (``props``, checked: ``check_props``)."""
    sets = {**(props or {}), **RECEIVE_PROPS, ORIGIN_PROP: origin}
    return ["zfs", "receive", "-s", "-u", *(["-F"] if force else []),
            *[w for k, v in sets.items() for w in ("-o", f"{k}={v}")], dataset]


def snapshot_props_argv(snapshot: str, props: dict[str, str]) -> list[str]:
    """`zfs set` of the snapshot's ``fabric:*`` properties of the request on the target, once it arrived."""
    return ["zfs", "set", *[f"{k}={v}" for k, v in props.items()], snapshot]


_SIZE = re.compile(r"^size\s+(\d+)\s*$", re.MULTILINE)
_TONAME = re.compile(r"^\s*toname = (\S+)\s*$", re.MULTILINE)


def parse_estimate(text: str) -> int:
    """Bytes a `zfs send -nP` would send (its ``size`` line); 0 when it printed none."""
    m = _SIZE.search(text)
    return int(m.group(1)) if m else 0


def parse_token_name(text: str) -> str:
    """The snapshot's short name a resume token is for, from `zfs send -nvt TOKEN` ("toname = ds@snap")."""
    m = _TONAME.search(text)
    return m.group(1).partition("@")[2] if m else ""


SPLICE_CHUNK = 1 << 20


class Stalled(FabricError):
    """No byte of a stream moved for the pump's ``stall`` seconds (a silent sender or a receiver that stopped
    reading); the stream is abandoned."""


class Pump:
    """Moves a stream from one pipe to another (``os.splice``, no copy through Python), at most ``limit`` bytes
    per second (0: no limit), calling ``progress(total_bytes)`` as it goes. A stream of hours has no total bound:
    it fails (``Stalled``) when no byte moved for ``stall`` seconds, whichever side stopped (fabric_core.base.runner's
    STALL_SECONDS by default; 0: never)."""

    def __init__(self, limit: int = 0, progress: Callable[[int], None] | None = None, *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 stall: float = STALL_SECONDS):
        self.limit = limit
        self.progress = progress
        self.clock = clock
        self.sleep = sleep
        self.stall = stall
        self.total = 0

    def _wait(self, fd: int, event: int, since: float, what: str) -> None:
        """Wait until ``fd`` is ready for ``event``; Stalled once nothing moved for ``stall`` seconds."""
        poller = select.poll()
        poller.register(fd, event | select.POLLERR | select.POLLHUP)
        while True:
            left = self.stall - (self.clock() - since) if self.stall else 60.0
            if left <= 0:
                raise Stalled(f"no byte moved for {self.stall:g} s: {what} ({self.total} bytes moved before)",
                              "check the other storage node and the network between them, then run the same "
                              "command again: it resumes what arrived")
            if poller.poll(max(1, int(min(left, 5.0) * 1000))):
                return

    def run(self, src: int, dst: int) -> int:
        started = last = self.clock()
        while True:
            chunk = SPLICE_CHUNK if not self.limit else max(4096, min(SPLICE_CHUNK, self.limit // 10))
            self._wait(src, select.POLLIN, last, "the sending side is silent")
            try:
                moved = os.splice(src, dst, chunk, flags=os.SPLICE_F_NONBLOCK)
            except BrokenPipeError:
                raise FabricError("the receiving side closed the stream", "") from None
            except BlockingIOError:  # the source has data (polled): the receiving side does not take it
                self._wait(dst, select.POLLOUT, last, "the receiving side does not read")
                continue
            if moved == 0:
                return self.total
            last = self.clock()
            self.total += moved
            if self.progress:
                self.progress(self.total)
            wait = pace(self.total, self.clock() - started, self.limit)
            if wait > 0:
                self.sleep(wait)


def pace(total: int, elapsed: float, limit: int) -> float:
    """Seconds to wait so that ``total`` bytes in ``elapsed`` seconds stay within ``limit`` bytes/s."""
    return max(0.0, total / limit - elapsed) if limit else 0.0
