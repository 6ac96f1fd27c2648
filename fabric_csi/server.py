"""The plugin's gRPC server on a unix socket: the services added, the socket root's alone, a clean stop on SIGTERM.

``endpoint_path`` takes the CSI endpoint as the sidecars name it (``unix:///csi/csi.sock``, or a bare absolute
path). A socket file left by a plugin that was killed is removed before binding (anything else at that path is
refused: the plugin never deletes a file it did not make); the socket is created under umask 077 and chmod 0600
after, so only root (the kubelet and the sidecars run as root) can call the plugin: a user on the node cannot
attach or mount through it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import stat
import threading
from concurrent.futures import ThreadPoolExecutor

from fabric_core.base.errors import UserError

log = logging.getLogger("fabric-csi")
STOP_GRACE = 30.0  # seconds the calls in progress get to finish at SIGTERM


def endpoint_path(endpoint: str) -> str:
    """The socket path of ``unix:///PATH`` (or ``unix:/PATH``, or ``/PATH``), or UserError."""
    path = endpoint
    for prefix in ("unix://", "unix:"):
        if path.startswith(prefix):
            path = path[len(prefix):]
            break
    if not path.startswith("/") or os.path.normpath(path) != path or not path.isprintable():
        raise UserError(f"--endpoint {endpoint!r} is not a unix socket's absolute path",
                        "for example --endpoint unix:///csi/csi.sock")
    return path


def clear_stale_socket(path: str) -> None:
    """Remove a socket left at ``path`` by a plugin that was killed; refuse anything else there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise UserError(f"{path} exists and is not a socket", "remove it, or give --endpoint another path")
    os.unlink(path)


def serve(path: str, add_services, *, workers: int = 8, stop: threading.Event | None = None,
          ready: threading.Event | None = None) -> int:
    """Serve on the unix socket ``path`` until SIGTERM/SIGINT (or ``stop``); ``add_services(server)`` adds the
    servicers. ``ready`` is set once the socket accepts calls."""
    import grpc  # noqa: PLC0415 - only serving needs grpc (serve-grants on a storage node does not)

    stop = stop or threading.Event()
    os.makedirs(os.path.dirname(path) or "/", mode=0o750, exist_ok=True)
    clear_stale_socket(path)
    server = grpc.server(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="csi"))
    add_services(server)
    old = os.umask(0o077)
    try:
        if server.add_insecure_port(f"unix://{path}") == 0:
            raise UserError(f"cannot listen on {path}", "check the directory and that no other plugin serves it")
    finally:
        os.umask(old)
    server.start()
    os.chmod(path, 0o600)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    log.info("serving on unix://%s", path)
    if ready is not None:
        ready.set()
    stop.wait()
    log.info("stopping (calls in progress get %.0f s)", STOP_GRACE)
    server.stop(STOP_GRACE).wait()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return 0
