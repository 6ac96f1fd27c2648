"""Generate (or check) csi_pb2.py and csi_pb2_grpc.py from csi.proto with grpcio-tools' protoc.

    python -m fabric_csi.proto.generate           write them beside csi.proto
    python -m fabric_csi.proto.generate --check   exit 1 when the committed ones differ from a fresh generation

The generator is pinned (requirements/constraints.txt: grpcio-tools 1.51.3, protoc 3.21.6): its output imports
with the protobuf runtime 3.20 and later and uses only the grpc API of 1.51, which is what Debian 12 and 13 ship
(python3-protobuf 3.21.12, python3-grpcio 1.51.1). A newer grpcio-tools writes code that refuses to import with
those (a runtime version check): regenerate only with the pinned one (docs/csi.md, "Generated code").
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = "fabric_csi/proto/csi.proto"  # as protoc sees it: the generated import is `from fabric_csi.proto import ...`
OUTPUTS = ("csi_pb2.py", "csi_pb2_grpc.py")
GENERATOR = "1.51.3"  # grpcio-tools


def generate(into: str) -> dict[str, bytes]:
    """The generated modules ({file name: content}), made in a scratch tree under ``into``."""
    with warnings.catch_warnings():  # grpcio-tools 1.51 imports pkg_resources, which setuptools deprecates
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        import grpc_tools  # noqa: PLC0415 - only the generator needs it
        from grpc_tools import protoc  # noqa: PLC0415

    os.makedirs(os.path.join(into, "fabric_csi", "proto"), exist_ok=True)
    shutil.copyfile(os.path.join(HERE, "csi.proto"), os.path.join(into, PROTO))
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    cwd = os.getcwd()
    os.chdir(into)
    try:
        rc = protoc.main(["protoc", "-I.", f"-I{include}", "--python_out=.", "--grpc_python_out=.", PROTO])
    finally:
        os.chdir(cwd)
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit {rc}")
    out = {}
    for name in OUTPUTS:
        with open(os.path.join(into, "fabric_csi", "proto", name), "rb") as fh:
            out[name] = fh.read()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fabric_csi.proto.generate", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="compare with the committed modules, write nothing")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        fresh = generate(scratch)
    stale = []
    for name, content in fresh.items():
        path = os.path.join(HERE, name)
        try:
            with open(path, "rb") as fh:
                same = fh.read() == content
        except FileNotFoundError:
            same = False
        if same:
            continue
        stale.append(name)
        if not args.check:
            with open(path, "wb") as fh:
                fh.write(content)
    if args.check and stale:
        print(f"stale: {', '.join(stale)} (regenerate with grpcio-tools {GENERATOR}: python -m fabric_csi.proto."
              "generate)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
