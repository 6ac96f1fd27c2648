"""The CSI specification's csi.proto (v1.12.0, Apache-2.0: LICENSE beside it) and the Python modules protoc
generated from it (csi_pb2, csi_pb2_grpc: see README.md; tests/unit/test_csi_proto.py checks they match)."""
