"""What acts on a storage node: ZFS (zfs, zpool, libzfs_core, their JSON), disks and pool layouts, LIO
targets and their ACLs, ZFS module parameters, holds and versions, file systems on volumes.

Imports ``base`` (never ``services``).
"""
