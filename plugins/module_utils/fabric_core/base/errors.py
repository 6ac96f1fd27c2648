"""Typed errors of the core library. Each names the problem and, where there is one, the fix.

Ansible modules turn them into ``fail_json(msg=str(err))``; fabricctl maps ``exit_code``.

The exit statuses of fabricctl are defined here, once (``EXIT_STATUSES``); fabricctl re-exports
them, prints the table in ``fabricctl --help`` and docs/fabricctl.md lists the same codes.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_USER = 1  # bad input or refused (UserError and its subclasses): nothing was changed
EXIT_USAGE = 2  # argparse's own status for a usage error (unknown option, missing argument)
EXIT_PARTIAL = 3  # some hosts done, some failed (fabricctl.errors.PartialFailure)
EXIT_LOCKED = 4  # another fabric command holds this node's lock past the bounded wait (LockHeld)
EXIT_UNEXPECTED = 5  # internal or unexpected error: CommandError, any other FabricError, any uncaught exception
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)

# (status, meaning): the one table of exit statuses, in the order --help and the docs show it.
EXIT_STATUSES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "success"),
    (EXIT_USER, "bad input or refused (or verify found differences); nothing was changed"),
    (EXIT_USAGE, "usage error: unknown command or option, missing or malformed argument"),
    (EXIT_PARTIAL, "partial success: some hosts done, some failed (each named with its reason)"),
    (EXIT_LOCKED, "another fabric command holds this node's lock (waited, gave up); nothing was changed"),
    (EXIT_UNEXPECTED, "internal or unexpected error (an external command failing unexpectedly, a bug)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C); the fabric is consistent, the same command finishes the job"),
)


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


class LockHeld(FabricError):
    """Another fabric command (fabricctl or an Ansible module) held the node's lock for the whole wait."""

    exit_code = EXIT_LOCKED


MASK = "********"
# Settings whose value is a secret when a command line sets it (`iscsiadm ... -n NAME -v VALUE`). The fabric
# never puts a secret on a command line (secrets go through files and stdin); every error message built from a
# command line masks these anyway, so that a mistake cannot print one.
SECRET_SETTINGS = frozenset({"node.session.auth.password", "node.session.auth.password_in",
                             "discovery.sendtargets.auth.password", "discovery.sendtargets.auth.password_in"})


def redact_argv(argv) -> list[str]:
    """A copy of an argv with the value of every secret setting (``-n NAME -v VALUE``, ``NAME=VALUE``)
    replaced by ``MASK``."""
    out = [str(a) for a in argv]
    for i, word in enumerate(out):
        if word in SECRET_SETTINGS and i + 2 < len(out) and out[i + 1] in ("-v", "--value"):
            out[i + 2] = MASK
        name, sep, _value = word.partition("=")
        if sep and name.lstrip("-") in SECRET_SETTINGS | {"password", "mutual_password"}:
            out[i] = f"{name}={MASK}"
    return out


class CommandError(FabricError):
    """An external command failed unexpectedly. Its message shows the command line with secrets masked
    (``redact_argv``); ``argv`` keeps it as it ran."""

    def __init__(self, argv, rc: int, stdout: str = "", stderr: str = "", fix: str = ""):
        self.argv = list(argv)
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        detail = (stderr or stdout).strip()
        super().__init__(f"`{' '.join(redact_argv(self.argv))}` failed with exit {rc}"
                         + (f": {detail}" if detail else ""), fix)


class CommandBounded(CommandError):
    """An external command went past its bound (its time, or the output kept of it) and was killed: it failed,
    whatever it would have returned. ``why`` says which bound; ``where`` names the host ("" for this node)."""

    def __init__(self, argv, why: str, stdout: str = "", stderr: str = "", fix: str = "", where: str = ""):
        super().__init__(argv, -9, stdout, stderr, fix)
        self.why = why
        self.where = where
        on = f" on {where}" if where else ""
        detail = (stderr or stdout).strip()
        self.problem = (f"`{' '.join(redact_argv(self.argv))}`{on} {why}; killed"
                        + (f" (its output began: {detail[:300]!r})" if detail else ""))
