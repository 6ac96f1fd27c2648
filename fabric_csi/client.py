"""``fabric-csi call``: one CSI request to a plugin's socket, the way a kubelet or a sidecar sends it, its answer as
JSON (for the lab's tests, which have no kubelet, and for an operator checking a node by hand).

  fabric-csi call NodeStageVolume '{"volume_id": "imagenet@v3", "staging_target_path": "/var/lib/...",
      "volume_capability": {"mount": {}, "access_mode": {"mode": "MULTI_NODE_READER_ONLY"}}}'

The request is the method's request message in protobuf's JSON mapping (field names as in csi.proto); the
answer is the response message (exit 0) or {"code": "NOT_FOUND", "message": "..."} (exit 1). Every unary method of
csi.proto's services can be called.
"""

from __future__ import annotations

import json

from fabric_core.base.errors import UserError

from .proto import csi_pb2

PACKAGE = "csi.v1"


def methods() -> dict:
    """{method: (service, request class, response class)} of every unary method of csi.proto."""
    from google.protobuf import descriptor_pb2  # noqa: PLC0415

    out = {}
    for service in csi_pb2.DESCRIPTOR.services_by_name.values():
        for m in service.methods:
            shape = descriptor_pb2.MethodDescriptorProto()
            m.CopyToProto(shape)  # (protobuf 3.21's descriptors have no client_streaming of their own)
            if shape.client_streaming or shape.server_streaming:
                continue
            out[m.name] = (service.name, getattr(csi_pb2, m.input_type.name), getattr(csi_pb2, m.output_type.name))
    return out


def call(path: str, method: str, request: dict | str, *, timeout: float = 300.0) -> tuple[int, dict]:
    """(0, the answer) or (1, {code, message}) of one call to the plugin on the unix socket ``path``."""
    import grpc  # noqa: PLC0415
    from google.protobuf import json_format  # noqa: PLC0415

    known = methods()
    if method not in known:
        raise UserError(f"unknown CSI method {method!r}", f"one of {', '.join(sorted(known))}")
    service, req_cls, resp_cls = known[method]
    try:
        message = json_format.Parse(request, req_cls()) if isinstance(request, str) else \
            json_format.ParseDict(request, req_cls())
    except json_format.ParseError as exc:
        raise UserError(f"the request is not a {req_cls.__name__}: {exc}", "write it as csi.proto's JSON") from None
    with grpc.insecure_channel(f"unix://{path}") as channel:
        stub = channel.unary_unary(f"/{PACKAGE}.{service}/{method}", request_serializer=req_cls.SerializeToString,
                                   response_deserializer=resp_cls.FromString)
        try:
            answer = stub(message, timeout=timeout)
        except grpc.RpcError as err:
            return 1, {"code": err.code().name, "message": err.details() or ""}
    return 0, json_format.MessageToDict(answer, preserving_proto_field_name=True)


def dumps(obj: dict) -> str:
    return json.dumps(obj, sort_keys=True)
