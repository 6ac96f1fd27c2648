"""Plain data shared by disk discovery, the layout planner and the zpool logic.

Every type converts to and from plain dicts (``to_dict``/``from_dict``) because that is how it
travels through Ansible variables and fabricctl's ``--json`` output.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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
