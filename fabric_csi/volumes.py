"""What a volume is to this plugin, checked before anything runs (pure).

A volume is a sealed dataset version: its id (the PersistentVolume's ``volumeHandle``) is ``NAME@VERSION``,
named by the fabric's rules (``attachments.parse_version_ref``: no path, no space, at most 64 characters; a tag
is not a volume id: it would move under a running pod). Volumes are provisioned statically (the version exists
before the PersistentVolume naming it). The one access mode is MULTI_NODE_READER_ONLY (Kubernetes'
ReadOnlyMany) with the mount access type: a writable mode is refused (INVALID_ARGUMENT), and so are a raw block
volume and the other read-only mode (SINGLE_NODE_READER_ONLY: Kubernetes never asks for it). ``fs_type`` may be
empty, ext4 or xfs and is not used (the version's own file system is mounted, found by the agent); the mount
flags may be the per-mount flags of a read-only bind (``binds.BIND_FLAGS``).
"""

from __future__ import annotations

from fabric_core.base.errors import UserError
from fabric_core.base.rules import FILESYSTEMS
from fabric_core.node import binds
from fabric_core.node.attachments import CSI_PREFIX, parse_version_ref

from .errors import Code, CsiError
from .proto import csi_pb2

Mode = csi_pb2.VolumeCapability.AccessMode
READER_MODE = Mode.MULTI_NODE_READER_ONLY
WRITABLE_MODES = frozenset({Mode.SINGLE_NODE_WRITER, Mode.MULTI_NODE_SINGLE_WRITER, Mode.MULTI_NODE_MULTI_WRITER,
                            Mode.SINGLE_NODE_SINGLE_WRITER, Mode.SINGLE_NODE_MULTI_WRITER})
FIX_MODE = "a dataset version is read-only: give the PersistentVolume and its claim accessModes [ReadOnlyMany]"


def volume_ref(volume_id: str) -> str:
    """The version a volume id names (NAME@VERSION, checked), or INVALID_ARGUMENT."""
    if not volume_id:
        raise CsiError(Code.INVALID_ARGUMENT, "volume_id is required")
    try:
        name, version = parse_version_ref(volume_id)
    except UserError as err:
        raise CsiError(Code.INVALID_ARGUMENT, f"volume id {volume_id[:80]!r}: {err.problem} (a volume id is a "
                       "dataset version, NAME@VERSION: the PersistentVolume's volumeHandle)") from None
    return f"{name}@{version}"


def holder_of(ref: str) -> str:
    """The agent's holder for this volume on this node (``csi:NAME@VERSION``)."""
    return f"{CSI_PREFIX}{ref}"


def path_of(path: str, what: str) -> str:
    """A path of a request (staging, target, volume path), or INVALID_ARGUMENT."""
    try:
        return binds.validate_path(path, what)
    except UserError as err:
        raise CsiError(Code.INVALID_ARGUMENT, err.problem) from None


def capability_problem(cap) -> str:
    """Why this plugin cannot serve a volume capability ("" when it can)."""
    mode = cap.access_mode.mode
    if mode in WRITABLE_MODES:
        return (f"access mode {Mode.Mode.Name(mode)} is writable: a dataset version is immutable and served "
                "read-only only (MULTI_NODE_READER_ONLY)")
    if mode != READER_MODE:
        return f"access mode {Mode.Mode.Name(mode)} is not served: the one mode is MULTI_NODE_READER_ONLY"
    kind = cap.WhichOneof("access_type")
    if kind == "block":
        return "a raw block volume is not served: a version is a file system, mounted (volumeMode: Filesystem)"
    if kind != "mount":
        return "the volume capability names no access type (mount)"
    if cap.mount.fs_type not in ("", *FILESYSTEMS):
        return f"fs_type {cap.mount.fs_type!r} is not a file system of a version ({', '.join(FILESYSTEMS)}, or none)"
    try:
        binds.check_flags(cap.mount.mount_flags)
    except UserError as err:
        return err.problem
    return ""


def mount_flags(request) -> tuple:
    """The bind's flags of a request's volume capability (one this plugin serves), or INVALID_ARGUMENT naming why
    it is not served (a missing capability too)."""
    if not request.HasField("volume_capability"):
        raise CsiError(Code.INVALID_ARGUMENT, "volume_capability is required")
    cap = request.volume_capability
    problem = capability_problem(cap)
    if problem:
        raise CsiError(Code.INVALID_ARGUMENT, f"{problem} (fix: {FIX_MODE})")
    return binds.check_flags(cap.mount.mount_flags)
