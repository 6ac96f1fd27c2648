"""What acts on a GPU node: iSCSI sessions (open-iscsi), multipath maps, read-only mounts, the
checkpoint writer's freeze, and a version's manifest (built on the storage node, verified where it is
mounted).

Imports only ``base`` and ``node``: the GPU-node agent and a CSI node plugin import this side without the
storage node's (ZFS, LIO).
"""
