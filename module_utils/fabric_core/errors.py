"""Typed errors of the core library. Each names the problem and, where there is one, the fix.

Ansible modules turn them into ``fail_json(msg=str(err))``; fabricctl maps ``exit_code``.
"""

from __future__ import annotations

EXIT_USER = 1
EXIT_PARTIAL = 2
EXIT_UNEXPECTED = 3


class FabricError(Exception):
    """Base class of every error the library raises on purpose."""

    exit_code = EXIT_UNEXPECTED

    def __init__(self, problem: str, fix: str = ""):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.problem}\n  fix: {self.fix}" if self.fix else self.problem


class UserError(FabricError):
    """The input is wrong; nothing was changed."""

    exit_code = EXIT_USER


class InvalidName(UserError):
    """A pool, dataset, snapshot, IQN or host name that does not follow its rules."""


class NotFound(UserError):
    """A named object (dataset, disk, host, version) does not exist."""


class AlreadyExists(UserError):
    """An object that must be new exists already."""


class Busy(UserError):
    """The object is in use (held, published, mounted, has sessions)."""


class UnsafeOperation(UserError):
    """Refused because it could destroy data; the fix says how to allow it explicitly."""


class CommandError(FabricError):
    """An external command failed unexpectedly."""

    def __init__(self, argv, rc: int, stdout: str = "", stderr: str = "", fix: str = ""):
        self.argv = list(argv)
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        detail = (stderr or stdout).strip()
        super().__init__(f"`{' '.join(self.argv)}` failed with exit {rc}" + (f": {detail}" if detail else ""), fix)
