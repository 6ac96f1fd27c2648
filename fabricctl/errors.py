"""Exit statuses of fabricctl. The numbers, their table and the error classes are the core library's
(fabric_core.base.errors); fabricctl adds only what is about many hosts at once (PartialFailure)."""

from __future__ import annotations

from fabric_core.base.errors import (
    EXIT_INTERRUPTED,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_STATUSES,
    EXIT_UNEXPECTED,
    EXIT_USAGE,
    EXIT_USER,
    FabricError,
    LockHeld,
    UserError,
)

__all__ = ["EXIT_OK", "EXIT_USER", "EXIT_USAGE", "EXIT_PARTIAL", "EXIT_LOCKED", "EXIT_UNEXPECTED",
           "EXIT_INTERRUPTED", "EXIT_STATUSES", "FabricError", "UserError", "LockHeld", "PartialFailure"]


class PartialFailure(FabricError):
    """The change was made on some hosts but not on others; the message names them and why."""

    exit_code = EXIT_PARTIAL
