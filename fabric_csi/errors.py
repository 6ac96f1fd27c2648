"""gRPC status codes of the plugin's answers: the one table mapping the core's typed errors (and fabricctl's, by
their class name) to the codes CSI prescribes, so that every service answers a failure the same way.

CSI's own rules: NOT_FOUND for a volume that does not exist (an unknown version), FAILED_PRECONDITION for one
this node may not use (a version not granted to it), INVALID_ARGUMENT for a request the plugin never serves (a
writable access mode, a malformed volume id). A transient failure (a storage node that does not answer, a lock
held, a command past its bound) is UNAVAILABLE or ABORTED: the kubelet and the sidecars take both as "not final"
and call again, which every operation here survives (each one is idempotent).
"""

from __future__ import annotations

import grpc
from fabric_core.base.errors import (
    Busy,
    CommandBounded,
    FabricError,
    InvalidName,
    LockHeld,
    NotFound,
    UserError,
)

Code = grpc.StatusCode


class CsiError(Exception):
    """A request answered with a gRPC status: ``code`` and ``message`` (the problem, and its fix)."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def text(err: FabricError) -> str:
    """A fabric error as one status message: the problem and, when there is one, the fix."""
    return f"{err.problem} (fix: {err.fix})" if err.fix else err.problem


# the core's errors, most specific first (the agent's NotGranted and StorageUnreachable are named by their
# ``reason``: "not_granted", "unreachable", so this module needs nothing of the agent)
_BY_CLASS = ((InvalidName, Code.INVALID_ARGUMENT), (NotFound, Code.NOT_FOUND), (Busy, Code.FAILED_PRECONDITION),
             (LockHeld, Code.ABORTED), (CommandBounded, Code.UNAVAILABLE), (UserError, Code.FAILED_PRECONDITION))
_BY_REASON = {"not_granted": Code.FAILED_PRECONDITION, "unreachable": Code.UNAVAILABLE}
# fabricctl's errors under --json (error_type: the exception's class name; exit_status as fabric_core.base.errors)
_BY_TYPE = {"InvalidName": Code.INVALID_ARGUMENT, "NotFound": Code.NOT_FOUND, "Busy": Code.FAILED_PRECONDITION,
            "LockHeld": Code.ABORTED, "UsageError": Code.INTERNAL, "KeyboardInterrupt": Code.ABORTED,
            "Refused": Code.PERMISSION_DENIED}
_BY_EXIT = {1: Code.FAILED_PRECONDITION, 2: Code.INTERNAL, 3: Code.UNAVAILABLE, 4: Code.ABORTED, 5: Code.INTERNAL,
            130: Code.ABORTED}


def code_of(err: FabricError) -> grpc.StatusCode:
    """The status code of a fabric error (INTERNAL for one the table does not name: a bug, or a command failing
    unexpectedly)."""
    reason = getattr(err, "reason", "")
    if reason in _BY_REASON:
        return _BY_REASON[reason]
    return next((code for cls, code in _BY_CLASS if isinstance(err, cls)), Code.INTERNAL)


def from_fabric(err: FabricError) -> CsiError:
    return CsiError(code_of(err), text(err))


def code_of_fabricctl(error_type: str, exit_status: int) -> grpc.StatusCode:
    """The status code of fabricctl's failure, from its --json answer."""
    return _BY_TYPE.get(error_type) or _BY_EXIT.get(exit_status, Code.INTERNAL)
