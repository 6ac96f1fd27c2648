"""The CSI identity service: the plugin's name and version, whether it serves the controller, and Probe."""

from __future__ import annotations

from collections.abc import Callable

from fabric_core import __version__
from google.protobuf import wrappers_pb2

from . import DRIVER_NAME
from .errors import Code, CsiError
from .proto import csi_pb2, csi_pb2_grpc
from .service import rpc

Service = csi_pb2.PluginCapability.Service


class IdentityService(csi_pb2_grpc.IdentityServicer):
    """``controller``: this process serves the controller service too; ``health``: a cheap check whose answer is
    "" when the plugin can serve, else the problem (Probe answers FAILED_PRECONDITION with it)."""

    def __init__(self, *, controller: bool, health: Callable[[], str] = lambda: ""):
        self.controller = controller
        self.health = health

    @rpc
    def GetPluginInfo(self, request, context):  # noqa: N802 - the CSI method's name
        return csi_pb2.GetPluginInfoResponse(name=DRIVER_NAME, vendor_version=__version__)

    @rpc
    def GetPluginCapabilities(self, request, context):  # noqa: N802
        caps = []
        if self.controller:
            caps.append(csi_pb2.PluginCapability(service=Service(type=Service.CONTROLLER_SERVICE)))
        return csi_pb2.GetPluginCapabilitiesResponse(capabilities=caps)

    @rpc
    def Probe(self, request, context):  # noqa: N802
        problem = self.health()
        if problem:
            raise CsiError(Code.FAILED_PRECONDITION, problem)
        return csi_pb2.ProbeResponse(ready=wrappers_pb2.BoolValue(value=True))
