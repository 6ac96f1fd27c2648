"""The CSI controller service: a volume (a sealed version, NAME@VERSION) granted to the node a pod is scheduled on,
and the grant taken back when the node is done with it.

ControllerPublishVolume is ``fabricctl grant NAME@VERSION --to NODE`` (the node id is the host's fabric name,
NodeGetInfo's answer): the version exported read-only by every storage node that holds it, with an ACL carrying
that host's own CHAP; the host is not contacted (its node plugin logs in at NodeStageVolume). A second publish
to the same node changes nothing (the grant is there), so the call is idempotent as CSI requires; the volume is
read-only whatever ``readonly`` says (PUBLISH_READONLY: the LUN is write-protected). ControllerUnpublishVolume
is ``fabricctl revoke NAME@VERSION --from NODE``: refused (FAILED_PRECONDITION, the external-attacher retries)
while the host is still logged in to it, which it is until its last holder let go (NodeUnstageVolume; or a Slurm
job or an operator's attach of the same version on that host); an unknown version or node, or a node never
granted, is already unpublished (OK). A volume id naming a tag is refused (INVALID_ARGUMENT: a tag moves, a
volume must not), and a grant the refused call made is taken back.

Volumes are provisioned statically: CreateVolume and DeleteVolume are not served (a PersistentVolume names a
version that fabricctl sealed). ValidateVolumeCapabilities confirms MULTI_NODE_READER_ONLY mounts of a version
that exists (NOT_FOUND otherwise).
"""

from __future__ import annotations

import contextlib
import logging

from fabric_core.base.errors import UserError
from fabric_core.base.names import validate_hostname

from .errors import Code, CsiError
from .proto import csi_pb2, csi_pb2_grpc
from .service import InFlight, rpc
from .volumes import capability_problem, mount_flags, volume_ref

Capability = csi_pb2.ControllerServiceCapability.RPC
log = logging.getLogger("fabric-csi")
STATIC = ("volumes are provisioned statically: a PersistentVolume names a sealed version (volumeHandle NAME@VERSION; "
          "`fabricctl dataset seal` makes one)")


def node_of(node_id: str) -> str:
    """The host a node id names (its fabric name, as NodeGetInfo answered), or INVALID_ARGUMENT."""
    if not node_id:
        raise CsiError(Code.INVALID_ARGUMENT, "node_id is required")
    try:
        return validate_hostname(node_id)
    except UserError as err:
        raise CsiError(Code.INVALID_ARGUMENT, f"node id: {err.problem} (a node id is a GPU node's fabric name, as "
                                              "its node plugin's NodeGetInfo answers)") from None


class ControllerService(csi_pb2_grpc.ControllerServicer):
    """The controller service over a fabricctl backend (``backend.Fabricctl``)."""

    def __init__(self, backend, *, inflight: InFlight | None = None):
        self.backend = backend
        self.inflight = inflight or InFlight()

    @rpc
    def ControllerGetCapabilities(self, request, context):  # noqa: N802 - the CSI method's name
        caps = [csi_pb2.ControllerServiceCapability(rpc=Capability(type=t))
                for t in (Capability.PUBLISH_UNPUBLISH_VOLUME, Capability.PUBLISH_READONLY)]
        return csi_pb2.ControllerGetCapabilitiesResponse(capabilities=caps)

    @rpc
    def ControllerPublishVolume(self, request, context):  # noqa: N802
        ref = volume_ref(request.volume_id)
        node = node_of(request.node_id)
        mount_flags(request)
        with self.inflight.hold(f"{ref} {node}", "ControllerPublishVolume"):
            answer = self.backend.grant(ref, node)
            if answer.get("tag"):
                here = next(iter((answer.get("nodes") or {}).values()), {})
                if node in (here.get("new") or ()):  # this call's grant: taken back
                    with contextlib.suppress(CsiError):
                        self.backend.revoke(answer["ref"], node)
                raise CsiError(Code.INVALID_ARGUMENT, f"volume id {ref} names tag {answer['tag']} (now version "
                                                      f"{answer['ref']}): a volume is one version (fix: give the "
                                                      f"PersistentVolume volumeHandle {answer['ref']})")
            missed = answer.get("unreachable") or {}
            if missed:
                log.warning("ControllerPublishVolume %s %s: not granted by %s: %s", ref, node, ", ".join(missed),
                            "; ".join(f"{k}: {v}" for k, v in missed.items()))
        return csi_pb2.ControllerPublishVolumeResponse()

    @rpc
    def ControllerUnpublishVolume(self, request, context):  # noqa: N802
        ref = volume_ref(request.volume_id)
        node = node_of(request.node_id) if request.node_id else ""
        with self.inflight.hold(f"{ref} {node or '*'}", "ControllerUnpublishVolume"):
            if node:
                nodes = [node]
            else:  # every node: the hosts the version is granted to
                try:
                    nodes = list(self.backend.show(ref).get("granted_to") or [])
                except CsiError as err:
                    if err.code == Code.NOT_FOUND:
                        return csi_pb2.ControllerUnpublishVolumeResponse()
                    raise
            for host in nodes:
                try:
                    self.backend.revoke(ref, host)
                except CsiError as err:
                    if err.code != Code.NOT_FOUND:  # no such version or host: nothing is published to it
                        raise
        return csi_pb2.ControllerUnpublishVolumeResponse()

    @rpc
    def ValidateVolumeCapabilities(self, request, context):  # noqa: N802
        ref = volume_ref(request.volume_id)
        if not request.volume_capabilities:
            raise CsiError(Code.INVALID_ARGUMENT, "volume_capabilities is required")
        self.backend.show(ref)  # NOT_FOUND for a version that does not exist
        problems = [p for p in (capability_problem(c) for c in request.volume_capabilities) if p]
        if problems:
            return csi_pb2.ValidateVolumeCapabilitiesResponse(message="; ".join(problems))
        confirmed = csi_pb2.ValidateVolumeCapabilitiesResponse.Confirmed(
            volume_context=request.volume_context, volume_capabilities=request.volume_capabilities,
            parameters=request.parameters)
        return csi_pb2.ValidateVolumeCapabilitiesResponse(confirmed=confirmed)

    @rpc
    def CreateVolume(self, request, context):  # noqa: N802
        raise CsiError(Code.UNIMPLEMENTED, f"CreateVolume is not served: {STATIC}")

    @rpc
    def DeleteVolume(self, request, context):  # noqa: N802
        raise CsiError(Code.UNIMPLEMENTED, f"DeleteVolume is not served: {STATIC}; versions are destroyed with "
                                           "`fabricctl dataset destroy`")
