"""What every service of the plugin shares: one way to answer a call (``rpc``: its status code from the one table
in ``errors``, one log line per call, no secret in either) and the in-flight guard (``InFlight``).

CSI asks every call to be idempotent, and the kubelet and the sidecars call again when a call times out on their
side while it still runs here. A second call for a volume with one in progress is answered ABORTED at once (the
caller retries with its backoff; the CSI specification's "operation pending for volume"), rather than queueing
behind the first: the node lock of the agent keeps changes to the node in turn anyway.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time

from fabric_core.base.errors import FabricError

from .errors import Code, CsiError, from_fabric

log = logging.getLogger("fabric-csi")
# the request fields a log line names (never secrets, never a volume context: only ids and paths)
LOGGED_FIELDS = ("volume_id", "node_id", "staging_target_path", "target_path", "volume_path")


def describe(request) -> str:
    words = []
    for name in LOGGED_FIELDS:
        value = getattr(request, name, "")
        if value:
            words.append(f"{name}={value}")
    return " ".join(words)


def rpc(method):
    """A servicer method answering through the one table: CsiError as it says, a fabric error by ``errors``,
    anything else INTERNAL; one log line per call (method, request ids, outcome, seconds)."""
    @functools.wraps(method)
    def handler(self, request, context):
        started = time.monotonic()
        what = f"{method.__name__} {describe(request)}".strip()
        try:
            response = method(self, request, context)
        except CsiError as err:
            failure = err
        except FabricError as err:
            failure = from_fabric(err)
        except Exception as exc:  # noqa: BLE001 - one answer for a bug: INTERNAL, logged with its traceback
            log.exception("%s: unexpected error", what)
            failure = CsiError(Code.INTERNAL, f"unexpected error: {type(exc).__name__}: {exc}")
        else:
            log.info("%s: OK (%.2f s)", what, time.monotonic() - started)
            return response
        log.warning("%s: %s %s (%.2f s)", what, failure.code.name, failure.message, time.monotonic() - started)
        context.abort(failure.code, failure.message)
        raise failure  # context.abort raises; a context that does not (a test's) still ends the call
    return handler


class InFlight:
    """The volumes with a call in progress: one call at a time per key. ``hold(key, what)`` answers ABORTED at
    once when another call holds the key (a long call: stage, unstage, a grant); with ``wait`` it waits that
    many seconds first (a short one: a bind of a pod's path, behind another pod's)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._keys: dict[str, threading.Lock] = {}
        self._what: dict[str, str] = {}

    @contextlib.contextmanager
    def hold(self, key: str, what: str, *, wait: float = 0.0):
        with self._lock:
            lock = self._keys.setdefault(key, threading.Lock())
        got = lock.acquire(timeout=wait) if wait > 0 else lock.acquire(blocking=False)
        if not got:
            raise CsiError(Code.ABORTED, f"an operation on volume {key} is in progress "
                                         f"({self._what.get(key, 'another call')}); call again once it ended")
        self._what[key] = what
        try:
            yield
        finally:
            self._what.pop(key, None)
            lock.release()
