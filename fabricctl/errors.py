"""Typed errors and the exit codes they map to (one place, used by every command)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_USER = 1  # bad input: nothing was changed
EXIT_PARTIAL = 2  # some hosts failed; the report names them
EXIT_UNEXPECTED = 3  # a bug or an unexpected system state; see the hint
EXIT_INTERRUPTED = 130


class FabricError(Exception):
    """Base class: a message naming the problem and, where there is one, the fix."""

    exit_code = EXIT_UNEXPECTED

    def __init__(self, problem: str, fix: str = ""):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.problem}\n  fix: {self.fix}" if self.fix else self.problem


class UserError(FabricError):
    """The input is wrong (unknown name, invalid value, ...); nothing was changed."""

    exit_code = EXIT_USER


class PartialFailure(FabricError):
    """The change was made on some hosts but not on others."""

    exit_code = EXIT_PARTIAL
