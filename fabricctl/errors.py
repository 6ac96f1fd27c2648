"""Exit codes of fabricctl. The error classes are the core library's (fabric_core.errors);
fabricctl adds only what is about many hosts at once."""

from __future__ import annotations

from fabric_core.errors import EXIT_PARTIAL, EXIT_UNEXPECTED, EXIT_USER, FabricError, UserError

EXIT_OK = 0
EXIT_INTERRUPTED = 130

__all__ = ["EXIT_OK", "EXIT_USER", "EXIT_PARTIAL", "EXIT_UNEXPECTED", "EXIT_INTERRUPTED",
           "FabricError", "UserError", "PartialFailure"]


class PartialFailure(FabricError):
    """The change was made on some hosts but not on others; the message names them and why."""

    exit_code = EXIT_PARTIAL
