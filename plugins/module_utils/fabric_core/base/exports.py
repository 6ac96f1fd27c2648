"""What an export is called and where it is mounted: the one rule both sides use.

A storage node exports dataset version NAME@VERSION as the iSCSI target ``IQN_BASE:ds.NAME.VERSION`` (LUN
``NAME.VERSION``); a GPU node mounts it read-only at ``MOUNT_ROOT/NAME/VERSION``. The publishing service
(``services.publish``) names its exports here, and the GPU-node agent (``node.agent``) derives the target it
logs in to and the path it mounts from NAME@VERSION with the same functions, so the two can never disagree.
Checkpoint exports (``ck``: a job's writable volume, its restores) are named here too.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from .names import snapshot_name, validate_fabric_name, validate_version

KINDS = {"ds": "dataset version", "ck": "checkpoint"}
WRITABLE_VERSION = "rw"  # the "version" of a job's writable checkpoint volume


@dataclass(frozen=True)
class Export:
    """One published object: its ZFS snapshot (or volume), LIO names and where hosts mount it."""

    kind: str  # "ds" | "ck"
    name: str  # dataset or job name
    version: str  # version, "s<STEP>" for a checkpoint restore, "rw" for a checkpoint volume
    snapshot: str  # POOL/.../NAME@VERSION (a checkpoint volume: POOL/.../JOB)
    mountpoint: str  # on the hosts
    fstype: str
    writable: bool = False  # only a checkpoint volume, exported to exactly one writer
    serial: str = ""  # the LUN's T10 unit serial ("": lio's rule from target and LUN name; see Publisher.identify)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def step(self) -> int | None:
        """The training step of a checkpoint restore (version ``s<STEP>``); None for anything else."""
        return int(self.version[1:]) if self.kind == "ck" and self.version[1:].isdigit() else None

    @property
    def target_name(self) -> str:
        return f"{self.kind}.{self.name}.{self.version}"

    @property
    def lun_name(self) -> str:
        return f"{self.name}.{self.version}"

    @property
    def description(self) -> str:
        """What its mount unit on a host says it is (``fabric dataset version imagenet@v1``, ``fabric checkpoint
        llama@rw``): the same whoever mounts it (fabricctl over a shell key, or the host's agent)."""
        return f"fabric {KINDS[self.kind]} {self.ref}"

    @property
    def device(self) -> str:
        return "/dev/zvol/" + self.snapshot  # a volume's device, or a snapshot's (snapdev=visible)

    @property
    def is_snapshot(self) -> bool:
        """A snapshot (published read-only, and held while it is); else a writable volume."""
        return "@" in self.snapshot

    @property
    def current_link(self) -> str | None:
        """MOUNT_ROOT/NAME/current of a dataset version (None for checkpoints)."""
        return current_link_of(self.mountpoint) if self.kind == "ds" else None

    def target_iqn(self, iqn_base: str) -> str:
        return f"{iqn_base}:{self.target_name}"


def checkpoint_volume_export(checkpoint_root: str, mount_root: str, job: str, fstype: str) -> Export:
    """The writable checkpoint volume of a job, exported to its one writer."""
    validate_fabric_name(job, "job")
    return Export("ck", job, WRITABLE_VERSION, f"{checkpoint_root}/{job}", f"{mount_root}/{job}", fstype,
                  writable=True)


def checkpoint_restore_export(checkpoint_root: str, mount_root: str, job: str, step: int, fstype: str) -> Export:
    """A checkpoint snapshot, exported read-only to many hosts at MOUNT_ROOT/JOB/restore/STEP."""
    validate_fabric_name(job, "job")
    return Export("ck", job, f"s{step}", f"{checkpoint_root}/{job}@{snapshot_name(step)}",
                  f"{mount_root}/{job}/restore/{step}", fstype)


def dataset_export(dataset_root: str, mount_root: str, name: str, version: str, fstype: str) -> Export:
    """Dataset version NAME@VERSION: the snapshot DATASET_ROOT/NAME@VERSION, mounted at MOUNT_ROOT/NAME/VERSION."""
    validate_fabric_name(name)
    validate_version(version)
    return Export("ds", name, version, f"{dataset_root}/{name}@{version}", f"{mount_root}/{name}/{version}", fstype)


def dataset_target_prefix(iqn_base: str) -> str:
    """The common start of every dataset version's target IQN (``IQN_BASE:ds.``)."""
    return f"{iqn_base}:ds."


def current_link_of(mountpoint: str) -> str:
    """The ``current`` link of a dataset: MOUNT_ROOT/NAME/current, beside each version's mount point
    MOUNT_ROOT/NAME/VERSION (``Export.current_link``, and the GPU node's agent)."""
    return posixpath.join(posixpath.dirname(mountpoint), "current")


def dataset_on_node(iqn_base: str, mount_root: str, name: str, version: str) -> tuple[str, str]:
    """(target IQN, mount point) of dataset version NAME@VERSION as a GPU node sees it: the storage side's
    ``dataset_export`` rule itself (a GPU node knows no dataset root; the snapshot's name is the storage side's)."""
    export = dataset_export("", mount_root, name, version, "")
    return export.target_iqn(iqn_base), export.mountpoint
