"""fabric_csi: a CSI plugin (Container Storage Interface v1, gRPC over a unix socket) that gives pods a dataset
version read-only, on the GPU-node agent (docs/csi.md).

A thin front end, like fabric_node: the node service attaches through ``fabric_core.node.agent`` and binds the
version's mount read-only into the kubelet's paths (``fabric_core.node.binds``); the controller service grants
and revokes through fabricctl on a storage node (``backend``). It imports only the GPU-node side of the core.
"""

DRIVER_NAME = "csi.gpufabric.storage"  # the CSIDriver object's name, the PersistentVolumes' spec.csi.driver
