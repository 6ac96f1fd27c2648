"""Plain data shared by disk discovery, the layout planner and the zpool/zfs logic, and the steps of a plan
with the one function that runs them.

Every type converts to and from plain dicts (``to_dict``/``from_dict``) because that is how it
travels through Ansible variables and fabricctl's ``--json`` output.

Pools and datasets converge in three parts, as the LIO target does (storage/lio/): a read of the live state,
a pure planner (declared state + live state -> a plan: ordered ``Step``s, refusals raised before any
step, warnings, the predicted after-state) and ``apply_steps``, which runs a plan's steps through the
Runner and records every one, so that a dry run (check mode, fabricctl --dry-run) shows them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

DISK_CLASSES = ("hdd", "ssd", "nvme")
VDEV_ROLES = ("data", "special", "log", "cache", "spare")
VDEV_TYPES = ("disk", "mirror", "raidz1", "raidz2", "raidz3")
# minimum member count per vdev type, and how many members may fail
MIN_WIDTH = {"disk": 1, "mirror": 2, "raidz1": 2, "raidz2": 3, "raidz3": 4}
PARITY = {"disk": 0, "mirror": None, "raidz1": 1, "raidz2": 2, "raidz3": 3}


def tolerated_failures(vdev: Vdev) -> int:
    """How many member devices the vdev can lose and keep its data."""
    if vdev.type == "mirror":
        return len(vdev.disks) - 1
    return PARITY[vdev.type]


@dataclass
class DiskInfo:
    """One whole disk found on a storage node."""

    name: str  # kernel name: sda, nvme0n1
    by_id: str  # the preferred stable path: /dev/disk/by-id/...
    ids: list = field(default_factory=list)  # every /dev/disk/by-id path of the disk
    serial: str = ""
    model: str = ""
    size: int = 0  # bytes
    rotational: bool = False
    transport: str = ""  # nvme, sata, sas, virtio, iscsi, usb, ... ("" when the kernel does not say)
    disk_class: str = ""  # hdd, ssd or nvme (derived from transport and rotational)
    in_use: bool = False
    reasons: list = field(default_factory=list)  # why it is in use: "filesystem ext4", "mounted at /", ...

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> DiskInfo:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class Vdev:
    """A top-level vdev of a pool. For cache and spare, ``type`` is "disk" (one device each)."""

    role: str  # one of VDEV_ROLES
    type: str  # one of VDEV_TYPES
    disks: list  # /dev/disk/by-id paths
    # how zpool names a live vdev (raidz2-0, mirror-1, or the device itself); "" for a declared one.
    # Not part of the vdev's identity (key, equality) or of its dict.
    name: str = field(default="", compare=False)

    def to_dict(self) -> dict:
        return {"role": self.role, "type": self.type, "disks": list(self.disks)}

    @classmethod
    def from_dict(cls, d: dict) -> Vdev:
        return cls(role=d.get("role", "data"), type=d.get("type", "disk"), disks=list(d["disks"]))

    def key(self) -> tuple:
        """Identity for comparisons: role, type and the set of members."""
        return (self.role, self.type, tuple(sorted(self.disks)))


@dataclass
class PoolLayout:
    vdevs: list = field(default_factory=list)  # list[Vdev]
    explanation: list = field(default_factory=list)  # one sentence per decision, in order
    # True when the plan knowingly mixes redundancy levels (accepted by the user), so that
    # `zpool create/add` must override ZFS's replication-level check with -f.
    force: bool = False

    def to_dict(self) -> dict:
        return {"vdevs": [v.to_dict() for v in self.vdevs], "explanation": list(self.explanation),
                "force": self.force}

    @classmethod
    def from_dict(cls, d: dict) -> PoolLayout:
        return cls(vdevs=[Vdev.from_dict(v) for v in d.get("vdevs", [])],
                   explanation=list(d.get("explanation", [])), force=bool(d.get("force", False)))

    def by_role(self, role: str) -> list:
        return [v for v in self.vdevs if v.role == role]

    def disks(self) -> list:
        return [disk for v in self.vdevs for disk in v.disks]


@dataclass
class Step:
    """One step of a plan: what it does, in words, and the command (``argv``) or the library call (``call``) that
    does it.

    The applier runs ``argv`` as a change (a dry run records it and runs nothing). A step made by a library or a
    file write instead (libzfs_core, rtslib, a configuration file, a sysfs value) has ``call`` (no arguments; what
    it does) and ``entry`` (how it is recorded in the runner's ``planned``/``executed``, as a command would be: its
    name and what it changes, never a secret); the applier makes it through ``Runner.call``, which a dry run
    records and does not call. ``dry_run_argv`` is
    ZFS's own validation of the step (`zpool create -n`, `zpool add -n`, `zfs create -n -v`), run in a
    dry run only, its output shown as ``prepared``; when ``dry_run_strict`` is false a refusal is a warning
    (``dry_run_refusal`` says why it may be wrong, e.g. a wipe the real run does first). ``follow_up``:
    read-only commands run after the step in a real run (`udevadm settle` after `zfs create -V`). ``ok_rcs``: the
    exit statuses that are success (iscsiadm's "no objects" for a logout already done). ``kind`` names the change
    in the mechanism's words (create_record, login, ...) for the mechanism's own applier, which orders or
    re-plans by it; ``keys``: the settings the step changes (what a module reports as updated); ``params``: what
    the step acts on, in the planner's words (a gc step's ref, holder, mount point), for that applier and for a
    JSON report (never a secret); ``target``: the object the step acts on, when its mechanism names one (a LIO
    target's IQN; "" when none); ``reason``: why the planner made the step ("" when it says nothing). A secret a
    step carries (an encryption key, iSCSI or LIO CHAP secrets) is in ``data`` only: never in its description,
    argv, entry or params.
    """

    description: str
    argv: list = field(default_factory=list)
    data: str | None = field(default=None, repr=False)  # stdin (an encryption key): never shown anywhere
    check: bool = True  # False: a non-zero exit is no error (`zpool labelclear` of a disk without a label)
    dry_run_argv: list | None = None
    dry_run_strict: bool = True
    dry_run_refusal: str = ""
    follow_up: list = field(default_factory=list)
    call: Callable[[], Any] | None = field(default=None, repr=False, compare=False)
    entry: tuple = ()
    ok_rcs: tuple = (0,)
    kind: str = ""
    keys: tuple = ()
    params: dict = field(default_factory=dict)
    target: str = ""
    reason: str = ""

    def to_dict(self) -> dict:
        if self.call is not None:
            return {"description": self.description, "call": [str(a) for a in self.entry]}
        return {"description": self.description, "argv": list(self.argv)}


@dataclass
class Applied:
    """What ``apply_steps`` did: the commands (run, or recorded by a dry run), ZFS's dry-run output, warnings."""

    commands: list = field(default_factory=list)
    prepared: str = ""
    warnings: list = field(default_factory=list)


def apply_steps(runner, steps: list) -> Applied:
    """Run a plan's steps in order through ``runner`` (a fabric_core.base.runner.Runner), every one as a change.

    In a dry run (``runner.dry_run``) each step's ``dry_run_argv`` runs first (a read: ZFS validates the
    step) and the step itself is recorded in ``runner.planned``, not run. Every step's argv is in
    ``commands`` either way (a call step's ``entry``). A failing step raises (CommandError, or the call's own
    error) and the later steps do not run.
    """
    done = Applied()
    for step in steps:
        if step.call is not None:  # a library call or a file write: made (or, in a dry run, recorded) by the runner
            runner.call(step.entry or (step.description,), step.call)
            done.commands.append([str(a) for a in step.entry or (step.description,)])
            continue
        if runner.dry_run and step.dry_run_argv:
            res = runner.run(step.dry_run_argv, data=step.data, check=step.dry_run_strict)
            done.prepared = (res.stdout + res.stderr).strip()
            if res.rc != 0:
                done.warnings.append(f"{step.dry_run_refusal}{res.stderr.strip()}")
        runner.run(step.argv, data=step.data, check=step.check, mutating=True, ok_rcs=step.ok_rcs)
        done.commands.append(list(step.argv))
        if not runner.dry_run:
            for argv in step.follow_up:
                runner.run(argv, check=False)
    return done
