"""The GPU-node agent's records: which versions this node has attached, and who holds each (pure but for the
store's file reads and writes).

An attachment is one dataset version mounted read-only at MOUNT_ROOT/NAME/VERSION. Its holders say why it is there:
``manual`` (an operator's publish: it stays across reboots), ``job:<id>`` (a scheduler's job: it lives as long as
the job) or ``csi:<NAME@VERSION>`` (a CSI volume staged on this node, fabric_csi: it lives until the kubelet
unstages it, and never past a reboot, after which the kubelet stages it again). Two jobs sharing a version share one
mount, and the last holder out detaches it. Each attachment is one JSON file,
``<state dir>/attachments/NAME@VERSION.json`` (0600 in a 0700 directory), written through the one atomic writer
(``base.atomic``): a reader, or the node after a crash, sees the old record or the new one.

A record is written with its new holder *before* the agent logs in or mounts anything (state ``attaching``),
so an agent killed half-way leaves a record that says what it was doing: running the same attach again
finishes it, and ``gc`` knows the sessions and mounts are the fabric's.

``plan_gc`` is the pure half of ``fabric-node gc``: from the records, what the node has (sessions, node
records, mounts), this boot's id and an optional "is this job alive" answer, the holders that are stale and
what no holder references any more.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from ..base import atomic
from ..base.errors import InvalidName, UserError
from ..base.model import Step
from ..base.names import parse_ref

MANUAL = "manual"
JOB_PREFIX = "job:"
CSI_PREFIX = "csi:"  # the CSI node plugin's holder: csi:<volume id>, the volume id being NAME@VERSION
# a scheduler's job id: Slurm's are digits (123, an array task's 123_4, a heterogeneous job's 123+0); other
# schedulers' ids are letters, digits and . _ - too. Never a path: records are named by the version.
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
STATES = ("attaching", "attached")
RECORD_DIR = "attachments"
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def validate_holder(holder: str) -> str:
    """``manual``, ``job:<id>`` (id: letters, digits, '.', '_', '+', '-', at most 64, starting alphanumeric) or
    ``csi:<NAME@VERSION>`` (a CSI volume on this node; the ref by ``parse_version_ref``)."""
    if holder == MANUAL:
        return holder
    if isinstance(holder, str) and holder.startswith(JOB_PREFIX) and _JOB_ID.fullmatch(holder[len(JOB_PREFIX):]):
        return holder
    if isinstance(holder, str) and holder.startswith(CSI_PREFIX):
        with contextlib.suppress(UserError):
            parse_version_ref(holder[len(CSI_PREFIX):])
            return holder
    raise InvalidName(f"invalid holder {holder!r}: a holder is `manual`, `job:<id>` (the id: letters, digits, "
                      "'.', '_', '+', '-', at most 64) or `csi:NAME@VERSION`",
                      "for example `--holder job:4242` or `--holder manual`")


def job_of(holder: str) -> str | None:
    """The job id of a job holder (None for ``manual``)."""
    return holder[len(JOB_PREFIX):] if holder.startswith(JOB_PREFIX) else None


def parse_version_ref(ref: str) -> tuple[str, str]:
    """NAME@VERSION as the agent takes it: both parts by the fabric's naming rules (names.parse_ref), so no ref
    ever names a path outside the mount root ('../x', '/', spaces, 300 characters are refused)."""
    if isinstance(ref, str) and len(ref) > 64:
        raise InvalidName(f"invalid reference {ref[:40]!r}... ({len(ref)} characters): NAME@VERSION is at most "
                          "30 + 1 + 16 characters", "for example `imagenet@v3`")
    name, version = parse_ref(ref)
    return name, version


def now_text() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def read_boot_id(path: str = BOOT_ID) -> str:
    """This boot's id (the kernel's random boot_id): a job holder recorded under another boot is stale."""
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


@dataclass
class Attachment:
    """One version attached on this node (the record's content)."""

    name: str
    version: str
    target: str  # the target IQN (exports.dataset_target)
    mountpoint: str
    holders: dict = field(default_factory=dict)  # holder -> {"since": ISO time, "boot_id": boot id}
    state: str = "attaching"  # attaching (holder recorded, the work maybe half-done) | attached
    device: str = ""  # what is mounted: a multipath map's by-id link or a session's by-path link
    fstype: str = ""
    portals: dict = field(default_factory=dict)  # storage node -> its portal, of the sessions logged in
    multipath: str | None = None  # the map's WWID, when mounted through one
    persistent: bool = False  # as applied: the mount unit in /etc and node.startup automatic (a manual holder)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def wants_persistent(self) -> bool:
        """A manual holder keeps the version across reboots; job holders never log in again by themselves."""
        return MANUAL in self.holders

    def to_dict(self) -> dict:
        return {"ref": self.ref, **asdict(self)}

    @classmethod
    def from_dict(cls, raw: dict) -> Attachment:
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        known = {f: raw[f] for f in cls.__dataclass_fields__ if f in raw}
        att = cls(**known)
        name, version = parse_version_ref(f"{att.name}@{att.version}")
        if (name, version) != (att.name, att.version) or att.state not in STATES:
            raise ValueError("a field breaks its rule")
        if not isinstance(att.holders, dict) or not all(isinstance(v, dict) for v in att.holders.values()):
            raise ValueError("holders is not a mapping of holder -> {since, boot_id}")
        for holder in att.holders:
            validate_holder(holder)
        return att


def add_holder(att: Attachment, holder: str, *, since: str, boot_id: str) -> bool:
    """Count ``holder`` in (True when it is new; holding twice is holding once)."""
    validate_holder(holder)
    if holder in att.holders:
        att.holders[holder]["boot_id"] = boot_id  # a job attaching again after a reboot holds it in this boot
        return False
    att.holders[holder] = {"since": since, "boot_id": boot_id}
    return True


def remove_holder(att: Attachment, holder: str) -> bool:
    """Count ``holder`` out (True when it held the attachment)."""
    return att.holders.pop(holder, None) is not None


def holder_stale(holder: str, info: dict, *, boot_id: str, is_alive: Callable[[str], bool | None] | None) -> str:
    """Why a holder no longer holds ("" when it does): a job or CSI holder recorded in another boot (its job, or
    the kubelet's mounts, did not survive the reboot), or a job whose job ``is_alive`` says has ended (True alive,
    False ended, None unknown: kept). ``manual`` is never stale: an operator's attachment stays until the
    operator detaches it."""
    if holder == MANUAL:
        return ""
    job = job_of(holder)
    if boot_id and info.get("boot_id") and info.get("boot_id") != boot_id:
        return "recorded in an earlier boot (the node was rebooted)"
    if job is not None and is_alive is not None and is_alive(job) is False:
        return f"job {job} is no longer running"
    return ""


# --------------------------------------------------------------------------------------------
# The store: one JSON file per attachment


class Store:
    """The attachment records under ``root`` (the agent's state directory, 0700)."""

    def __init__(self, root: str):
        self.root = root
        self.dir = os.path.join(root, RECORD_DIR)

    def path(self, ref: str) -> str:
        name, version = parse_version_ref(ref)
        return os.path.join(self.dir, f"{name}@{version}.json")

    def ensure(self) -> None:
        for directory in (self.root, self.dir):
            os.makedirs(directory, mode=0o700, exist_ok=True)
            os.chmod(directory, 0o700)

    def load(self, ref: str) -> Attachment | None:
        path = self.path(ref)
        try:
            with open(path, encoding="utf-8") as fh:
                raw = json.load(fh)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise UserError(f"the record {path} cannot be read: {exc}",
                            "move it aside and run `fabric-node gc` (it finds what the record named)") from None
        try:
            return Attachment.from_dict(raw)
        except (TypeError, ValueError, UserError) as exc:
            raise UserError(f"the record {path} is damaged: {exc}",
                            "move it aside and run `fabric-node gc` (it finds what the record named)") from None

    def save(self, att: Attachment) -> None:
        self.ensure()
        atomic.write_file(self.path(att.ref), json.dumps(att.to_dict(), indent=1, sort_keys=True) + "\n", mode=0o600)

    def remove(self, ref: str) -> bool:
        try:
            os.unlink(self.path(ref))
        except FileNotFoundError:
            return False
        with contextlib.suppress(OSError):
            atomic.sync_directory(self.dir)
        return True

    def refs(self) -> list[str]:
        """The refs of every record (a file whose name is not NAME@VERSION.json is not the agent's: ignored)."""
        try:
            names = sorted(os.listdir(self.dir))
        except FileNotFoundError:
            return []
        out = []
        for entry in names:
            stem, dot, ext = entry.rpartition(".")
            if not dot or ext != "json":
                continue
            try:
                parse_version_ref(stem)
            except UserError:
                continue
            out.append(stem)
        return out

    def all(self) -> list[Attachment]:
        out = []
        for ref in self.refs():
            att = self.load(ref)
            if att is not None:
                out.append(att)
        return out


# --------------------------------------------------------------------------------------------
# gc: the pure plan


GC_WHAT = {"drop_holder": "drop holder {holder} of {ref}", "detach": "detach {ref}", "unmount": "unmount {mountpoint}",
           "logout": "log out of {target} at {portal}",
           "delete_record": "delete the node record of {target} at {portal}"}


def gc_step(kind: str, reason: str = "", **params: str) -> Step:
    """One step of a gc, as a plan step (``model.Step``): ``kind`` is drop_holder (ref, holder), detach (ref: the
    whole attachment taken down), unmount (mountpoint), logout (target, portal) or delete_record (target, portal);
    ``params`` holds those and the reason. The agent carries each out (``Agent.gc``) through ``apply_steps``."""
    what = GC_WHAT[kind].format(**params)
    return Step(f"{what} ({reason})" if reason else what, kind=kind, params={**params, "reason": reason})


def gc_dict(step: Step) -> dict:
    """A gc step as `fabric-node gc --json` reports it: {op, ref|holder|mountpoint|target|portal, reason}."""
    return {"op": step.kind, **{k: v for k, v in step.params.items() if v}}


GC_ORDER = ("drop_holder", "detach", "unmount", "logout", "delete_record")


def version_mountpoint(mountpoint: str, mount_root: str) -> tuple[str, str] | None:
    """(name, version) when ``mountpoint`` is MOUNT_ROOT/NAME/VERSION with valid names, else None."""
    root = mount_root.rstrip("/") + "/"
    if not mountpoint.startswith(root):
        return None
    parts = mountpoint[len(root):].split("/")
    if len(parts) != 2:
        return None
    try:
        return parse_version_ref(f"{parts[0]}@{parts[1]}")
    except UserError:
        return None


def plan_gc(records: Iterable[Attachment], *, sessions: Iterable[dict], node_records: Iterable[dict],
            mounts: Iterable[str], foreign: Iterable[str] = (), target_prefix: str, mount_root: str, boot_id: str,
            is_alive: Callable[[str], bool | None] | None = None) -> list[Step]:
    """What a gc does, in order (pure).

    records: the agent's attachments. sessions and node_records: this node's iSCSI sessions and node records
    ({target, portal}); only those of targets under ``target_prefix`` (the fabric's dataset targets,
    ``IQN_BASE:ds.``) are the agent's to judge. mounts: the mount points mounted now; only MOUNT_ROOT/NAME/VERSION
    ones are judged, and never one in ``foreign`` (a mount unit another tool owns: fabricctl's older units, a
    role's). A job holder is stale when ``holder_stale`` says so; an attachment whose holders are all gone is
    detached whole; then every session, node record and mount of the fabric that no remaining attachment
    references goes (an agent killed before it wrote its record, a record removed by hand)."""
    records = list(records)
    steps: list[Step] = []
    kept: list[Attachment] = []
    for att in sorted(records, key=lambda a: a.ref):
        left = []
        for holder, info in sorted(att.holders.items()):
            why = holder_stale(holder, info, boot_id=boot_id, is_alive=is_alive)
            if why:
                steps.append(gc_step("drop_holder", why, ref=att.ref, holder=holder))
            else:
                left.append(holder)
        if left:
            kept.append(att)
        else:
            steps.append(gc_step("detach", "no holder left" if att.holders else "no holder", ref=att.ref))
    referenced_targets = {a.target for a in kept}
    taken_down = {a.target for a in records} - referenced_targets  # the detach steps take those down whole
    known_points = {a.mountpoint for a in records}
    foreign = set(foreign)
    # a foreign unit's version keeps its sessions and node records too (fabricctl's publish from before the agent);
    # its target is TARGET_PREFIX + NAME.VERSION (base.exports' rule: ds.NAME.VERSION)
    for point in foreign:
        named = version_mountpoint(point, mount_root)
        if named is not None:
            referenced_targets.add(f"{target_prefix}{named[0]}.{named[1]}")
    for point in sorted(set(mounts)):
        if point in known_points or point in foreign or version_mountpoint(point, mount_root) is None:
            continue
        steps.append(gc_step("unmount", "no attachment record names it", mountpoint=point))
    seen_sessions = set()
    for s in sessions:
        key = (s["target"], s["portal"])
        if not s["target"].startswith(target_prefix) or key in seen_sessions:
            continue
        seen_sessions.add(key)
        if s["target"] not in referenced_targets and s["target"] not in taken_down:
            steps.append(gc_step("logout", "no attachment holds it", target=s["target"], portal=s["portal"]))
    seen_records = set()
    for r in node_records:
        key = (r["target"], r["portal"])
        if not r["target"].startswith(target_prefix) or key in seen_records:
            continue
        seen_records.add(key)
        if r["target"] not in referenced_targets and r["target"] not in taken_down:
            steps.append(gc_step("delete_record", "no attachment holds it", target=r["target"], portal=r["portal"]))
    return sorted(steps, key=lambda s: GC_ORDER.index(s.kind))
