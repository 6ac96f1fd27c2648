"""fabric_csi as a process serves it: a real gRPC server on a unix socket (its mode, a stale socket replaced), called
through `fabric-csi call` the way the kubelet and the sidecars call it; the command line's refusals; the CSI
specification's protocol kept as released and the committed generated modules matching it (and importable with
Debian's protobuf and grpcio); and the plugin's place in the layers (only the GPU-node side of the core)."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import grpc
import pytest
from csi_support import P1, POD_A, STAGING, node, service

from fabric_csi import DRIVER_NAME, client, main, server
from fabric_csi.identity import IdentityService
from fabric_csi.proto import csi_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
PROTO = REPO / "fabric_csi" / "proto"


@pytest.fixture
def socket_dir():
    path = tempfile.mkdtemp(prefix="csi", dir="/tmp")  # a unix socket's path is at most 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def plugin(tmp_path, socket_dir):
    """A node plugin over the simulated node, serving on a real socket: (socket path, simulated node)."""
    fake = node(P1)
    svc = service(tmp_path, fake)
    path = os.path.join(socket_dir, "csi.sock")
    stop, ready = threading.Event(), threading.Event()

    def add(srv):
        csi_pb2_grpc.add_IdentityServicer_to_server(IdentityService(controller=False), srv)
        csi_pb2_grpc.add_NodeServicer_to_server(svc, srv)
    thread = threading.Thread(target=server.serve, args=(path, add), kwargs={"stop": stop, "ready": ready})
    thread.start()
    assert ready.wait(30)
    yield path, fake
    stop.set()
    thread.join(60)


def test_the_kubelets_calls_over_the_socket_answer_as_csi_says(plugin):
    path, fake = plugin
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # root's alone: no user on the node calls the plugin
    assert client.call(path, "GetPluginInfo", {}) == (0, {"name": DRIVER_NAME, "vendor_version": client_version()})
    assert client.call(path, "Probe", {}) == (0, {"ready": True})
    assert client.call(path, "GetPluginCapabilities", {}) == (0, {})  # no controller in a node plugin
    assert client.call(path, "NodeGetInfo", {}) == (0, {"node_id": "gpu1"})
    request = {"volume_id": "imagenet@v3", "staging_target_path": STAGING,
               "volume_capability": {"mount": {}, "access_mode": {"mode": "MULTI_NODE_READER_ONLY"}}}
    assert client.call(path, "NodeStageVolume", request) == (0, {})
    assert client.call(path, "NodePublishVolume", {**request, "target_path": POD_A}) == (0, {})
    writable = {**request, "volume_capability": {"mount": {}, "access_mode": {"mode": "SINGLE_NODE_WRITER"}}}
    rc, answer = client.call(path, "NodeStageVolume", writable)
    assert rc == 1 and answer["code"] == "INVALID_ARGUMENT" and "writable" in answer["message"]
    rc, answer = client.call(path, "CreateVolume", {"name": "x"})
    assert rc == 1 and answer["code"] == "UNIMPLEMENTED"  # no controller service in a node plugin
    assert POD_A in fake.binds()


def client_version() -> str:
    from fabric_core import __version__

    return __version__


def test_a_stale_socket_is_replaced_and_anything_else_at_the_path_refused(socket_dir):
    path = os.path.join(socket_dir, "csi.sock")
    import socket

    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)  # a plugin killed with -9 leaves its socket file
    stale.close()
    server.clear_stale_socket(path)
    assert not os.path.exists(path)
    Path(path).write_text("not a socket")
    with pytest.raises(server.UserError):
        server.clear_stale_socket(path)
    assert Path(path).read_text() == "not a socket"


def test_endpoints_as_the_sidecars_name_them():
    assert server.endpoint_path("unix:///csi/csi.sock") == "/csi/csi.sock"
    assert server.endpoint_path("unix:/csi/csi.sock") == "/csi/csi.sock"
    assert server.endpoint_path("/var/lib/kubelet/plugins/x/csi.sock") == "/var/lib/kubelet/plugins/x/csi.sock"
    for bad in ("tcp://0.0.0.0:10000", "csi.sock", "unix://csi/../x.sock", ""):
        with pytest.raises(server.UserError):
            server.endpoint_path(bad)


def test_the_command_lines_refusals(tmp_path, monkeypatch, capsys):
    real_uid = os.geteuid()
    assert main.main(["--mode", "sideways"]) == 2
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main.main(["--mode", "node", "--endpoint", f"unix://{tmp_path}/c.sock"]) == 1
    assert "runs as root" in capsys.readouterr().err
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    cfg = tmp_path / "etc"
    cfg.mkdir(mode=0o700)
    import json

    from csi_support import CHAP, RAW

    for name, content in (("config.json", {**RAW, "state_dir": str(tmp_path / "state")}), ("credentials.json",
                                                                                             {"chap": CHAP})):
        (cfg / name).write_text(json.dumps(content))
        (cfg / name).chmod(0o600)
    args = ["--mode", "node", "--endpoint", f"unix://{tmp_path}/c.sock", "--config", str(cfg / "config.json"),
            "--credentials", str(cfg / "credentials.json")]
    if real_uid == 0:  # the configuration must be root's own (files this user made are not, unless root)
        assert main.main([*args, "--node-id", "gpu7"]) == 1
        assert "is not this host's fabric name (gpu1" in capsys.readouterr().err
    assert main.main(["--mode", "controller", "--storage-node", "10.77.0.11"]) == 1
    assert "--ssh-key" in capsys.readouterr().err
    assert main.main(["--mode", "controller", "--fabricctl", "/nonexistent/fabricctl"]) == 1
    assert "fabricctl is not installed here" in capsys.readouterr().err
    assert main.main(["call", "NodeFrobnicate", "--endpoint", f"unix://{tmp_path}/c.sock"]) == 1
    assert "unknown CSI method" in capsys.readouterr().err


def test_call_answers_unavailable_when_no_plugin_listens(socket_dir, capsys):
    rc = main.main(["call", "Probe", "--endpoint", f"unix://{socket_dir}/none.sock", "--timeout", "5"])
    assert rc == 1 and '"code": "UNAVAILABLE"' in capsys.readouterr().out


# --- the protocol: as released, its licence beside it, the generated modules matching it ---------------------

def test_csi_proto_is_the_specifications_v1_12_0_with_its_licence():
    digest = hashlib.sha256((PROTO / "csi.proto").read_bytes()).hexdigest()
    assert digest == "5b81236a3809f3ff0b877ff9b82215d0b74a8e291d7f3ec6ee1a44f537c0f86a"
    assert digest in (PROTO / "README.md").read_text()
    assert "Apache License" in (PROTO / "LICENSE").read_text() and "Version 2.0" in (PROTO / "LICENSE").read_text()
    assert 'package csi.v1;' in (PROTO / "csi.proto").read_text()


def test_the_committed_generated_modules_are_what_the_pinned_grpcio_tools_makes_of_csi_proto():
    pytest.importorskip("grpc_tools")
    from fabric_csi.proto import generate

    with tempfile.TemporaryDirectory() as scratch:
        fresh = generate.generate(scratch)
    for name, content in fresh.items():
        assert (PROTO / name).read_bytes() == content, f"{name} is stale: python -m fabric_csi.proto.generate"


def test_the_generated_modules_import_with_debians_protobuf_and_grpcio():
    """Debian 12 and 13 ship protobuf 3.21.12 and grpcio 1.51.1: the modules must not carry the runtime version
    checks newer generators write (they refuse older runtimes), and import with the pinned equivalents here."""
    text = (PROTO / "csi_pb2.py").read_text() + (PROTO / "csi_pb2_grpc.py").read_text()
    assert "_runtime_version" not in text and "GRPC_GENERATED_VERSION" not in text
    import google.protobuf

    assert google.protobuf.__version__.split(".")[1] == "21" and grpc.__version__.startswith("1.51.")
    script = "import fabric_csi.proto.csi_pb2_grpc as g; print(g.NodeServicer.__name__)"
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "NodeServicer", proc.stderr


# --- the layers: the plugin is a front end of the GPU-node side --------------------------------------------

def plugin_imports() -> dict[str, set[str]]:
    out = {}
    for path in sorted((REPO / "fabric_csi").rglob("*.py")):
        targets = set()
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Import):
                targets |= {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom) and not n.level:
                targets.add(n.module or "")
        out[str(path.relative_to(REPO))] = targets
    return out


def test_the_plugin_imports_only_the_gpu_node_side_of_the_core_and_no_other_front_end():
    for path, targets in plugin_imports().items():
        core = {t for t in targets if t.startswith("fabric_core.")}
        assert all(re.match(r"fabric_core\.(base|node)(\.|$)", t) for t in core), (path, core)
        assert not any(t.startswith(("fabricctl", "fabric_node", "ansible")) for t in targets), (path, targets)


def test_the_plugin_imports_without_the_storage_side():
    script = """
import importlib, importlib.abc, pkgutil, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("fabric_core.storage", "fabric_core.services", "fabricctl")):
            raise ImportError(name + " is of the storage side")
sys.meta_path.insert(0, Refuse())
import fabric_csi
names = [m.name for m in pkgutil.walk_packages(fabric_csi.__path__, "fabric_csi.")]
for name in names:
    importlib.import_module(name)
print(len(names))
"""
    path = f"import sys; sys.path[:0] = {[str(REPO / 'plugins' / 'module_utils'), str(REPO)]!r}"
    proc = subprocess.run([sys.executable, "-I", "-c", path + script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.strip()) >= 14
