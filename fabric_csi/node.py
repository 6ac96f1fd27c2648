"""The CSI node service: a version attached through the GPU-node agent and shown read-only at the kubelet's paths.

NodeStageVolume: ``Agent.attach(NAME@VERSION, csi:NAME@VERSION)`` (the agent logs in to the storage nodes that
granted the version to this node, one multipath map when its configuration names several storage nodes, else the
session's disk; mounts it read-only at MOUNT_ROOT/NAME/VERSION and counts
the holder; a Slurm job or an operator holding the same version shares the one mount), then a read-only bind of
that mount at the staging path. NodePublishVolume: a read-only bind at the pod's target path (each pod its own;
two pods of one node share the staging and the agent's mount). NodeUnpublishVolume removes a target's bind and
its directory; NodeUnstageVolume removes the staging bind and counts the holder out: the last holder out
unmounts, logs out of every portal of the version's target (found by the target's name, never by matching a
device, so a device that went away still gets its sessions logged out) and deletes the node records. A
NodeUnstage while a pod's path still shows the version is refused (FAILED_PRECONDITION, naming the paths).

Each step is idempotent: the agent counts a holder once and converges what is missing; a path holds exactly one
mount of the right file system or is rebuilt (``binds.ensure_readonly_bind``: never a mount stacked on a stale
one). A stage that fails after its attach counted a new holder counts it out again, so that a failure the
kubelet takes as final leaves nothing; a plugin killed in between leaves the holder recorded: the kubelet's
next NodeStage or NodeUnstage finishes or undoes it, and after a reboot the agent's boot-time gc drops it.
"""

from __future__ import annotations

import contextlib

from fabric_core.node import binds

from .errors import Code, CsiError
from .proto import csi_pb2, csi_pb2_grpc
from .service import InFlight, rpc
from .volumes import holder_of, mount_flags, path_of, volume_ref

Capability = csi_pb2.NodeServiceCapability.RPC
PUBLISH_WAIT = 30.0  # seconds a pod's bind waits for another call on the same volume (another pod's bind)


class NodeService(csi_pb2_grpc.NodeServicer):
    """The node service over an ``Agent`` (``fabric_core.node.agent``) and its runner (the same commands, the same
    node lock)."""

    def __init__(self, agent, *, inflight: InFlight | None = None):
        self.agent = agent
        self.runner = agent.runner
        self.inflight = inflight or InFlight()

    # ---- helpers

    def _holds(self, ref: str, holder: str) -> bool:
        att = self.agent.store.load(ref)
        return att is not None and holder in att.holders

    def _mountpoint(self, ref: str) -> str:
        return self.agent.version(ref)[3]

    # ---- stage

    @rpc
    def NodeStageVolume(self, request, context):  # noqa: N802 - the CSI method's name
        ref = volume_ref(request.volume_id)
        staging = path_of(request.staging_target_path, "staging_target_path")
        mount_flags(request)
        holder = holder_of(ref)
        with self.inflight.hold(ref, "NodeStageVolume"):
            held = self._holds(ref, holder)
            attached = self.agent.attach(ref, holder)
            try:
                binds.ensure_readonly_bind(self.runner, attached["path"], staging)
            except BaseException:
                if not held:  # this call counted the holder in: it counts it out (nothing is left staged)
                    with contextlib.suppress(Exception):
                        binds.remove_bind(self.runner, staging)
                    with contextlib.suppress(Exception):
                        self.agent.detach(ref, holder)
                raise
        return csi_pb2.NodeStageVolumeResponse()

    @rpc
    def NodeUnstageVolume(self, request, context):  # noqa: N802
        ref = volume_ref(request.volume_id)
        staging = path_of(request.staging_target_path, "staging_target_path")
        with self.inflight.hold(ref, "NodeUnstageVolume"):
            source = binds.mounted(self.runner, self._mountpoint(ref))
            if source is not None:
                others = binds.binds_of(self.runner, source, besides=(staging,))
                if others:
                    raise CsiError(Code.FAILED_PRECONDITION,
                                   f"{ref} is still published on this node at {', '.join(others[:5])}"
                                   + (f" and {len(others) - 5} more" if len(others) > 5 else "")
                                   + " (fix: NodeUnpublishVolume each of them first)")
            binds.remove_bind(self.runner, staging)
            self.agent.detach(ref, holder_of(ref))  # a holder that does not hold it: nothing to do
        return csi_pb2.NodeUnstageVolumeResponse()

    # ---- publish

    @rpc
    def NodePublishVolume(self, request, context):  # noqa: N802
        ref = volume_ref(request.volume_id)
        target = path_of(request.target_path, "target_path")
        if not request.staging_target_path:
            raise CsiError(Code.FAILED_PRECONDITION, "staging_target_path is not set: this plugin stages volumes "
                                                     "(fix: NodeStageVolume first, then publish from its path)")
        staging = path_of(request.staging_target_path, "staging_target_path")
        flags = mount_flags(request)
        with self.inflight.hold(ref, "NodePublishVolume", wait=PUBLISH_WAIT):
            mountpoint = self._mountpoint(ref)
            if not self._holds(ref, holder_of(ref)) or binds.mounted(self.runner, mountpoint) is None:
                raise CsiError(Code.FAILED_PRECONDITION, f"{ref} is not staged on this node (fix: NodeStageVolume "
                                                         "first)")
            binds.ensure_readonly_bind(self.runner, mountpoint, staging)  # a stale staging bind is rebuilt
            binds.ensure_readonly_bind(self.runner, mountpoint, target, flags=flags)
        return csi_pb2.NodePublishVolumeResponse()

    @rpc
    def NodeUnpublishVolume(self, request, context):  # noqa: N802
        ref = volume_ref(request.volume_id)
        target = path_of(request.target_path, "target_path")
        with self.inflight.hold(ref, "NodeUnpublishVolume", wait=PUBLISH_WAIT):
            binds.remove_bind(self.runner, target, remove_dir=True)
        return csi_pb2.NodeUnpublishVolumeResponse()

    # ---- reading

    @rpc
    def NodeGetVolumeStats(self, request, context):  # noqa: N802
        ref = volume_ref(request.volume_id)
        path = path_of(request.volume_path, "volume_path")
        source = binds.mounted(self.runner, self._mountpoint(ref))
        here = binds.mounted(self.runner, path)
        if source is None or here is None or not here.same_filesystem(source):
            raise CsiError(Code.NOT_FOUND, f"{ref} is not mounted at {path} on this node")
        used = binds.usage(self.runner, path)
        unit = csi_pb2.VolumeUsage
        return csi_pb2.NodeGetVolumeStatsResponse(usage=[
            unit(unit=unit.BYTES, **used["bytes"]), unit(unit=unit.INODES, **used["inodes"])])

    @rpc
    def NodeGetCapabilities(self, request, context):  # noqa: N802
        caps = [csi_pb2.NodeServiceCapability(rpc=Capability(type=t))
                for t in (Capability.STAGE_UNSTAGE_VOLUME, Capability.GET_VOLUME_STATS)]
        return csi_pb2.NodeGetCapabilitiesResponse(capabilities=caps)

    @rpc
    def NodeGetInfo(self, request, context):  # noqa: N802
        # the node id is the host's fabric name: what fabricctl grants to (ControllerPublishVolume's node_id)
        return csi_pb2.NodeGetInfoResponse(node_id=self.agent.config.host)
