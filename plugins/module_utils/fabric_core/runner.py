"""Run external commands one way everywhere: argv lists (never a shell), LC_ALL=C, typed errors.

``Runner`` is the interface every piece of the library takes as an argument, so that parsers
and planners are tested with recorded output and no root. Two implementations:

* ``LocalRunner``: subprocess, for fabricctl and scripts on a storage node;
* ``ModuleRunner``: wraps an AnsibleModule's ``run_command`` (duck-typed: no Ansible import).

Dry runs follow zfs_autobackup's rule: with ``dry_run=True``, commands marked ``mutating=True``
are recorded in ``planned`` and not run; every read still runs, so a dry run sees real state.

A change made through a library rather than a command (libzfs_core: holds, snapshots, destroys;
rtslib: LIO objects) goes through ``call`` or ``record``, so that ``planned`` (a dry run, Ansible's
check mode) and ``executed`` list every change, whatever made it. Such entries start with the
library call's name (``lzc_hold``, ``rtslib``) instead of a command.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import CommandError

C_LOCALE = {"LC_ALL": "C", "LANG": "C", "LANGUAGE": "C"}


@dataclass(frozen=True)
class Result:
    argv: tuple
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


@dataclass
class Runner:
    dry_run: bool = False
    planned: list = field(default_factory=list)  # argv of mutating commands skipped by a dry run
    executed: list = field(default_factory=list)  # argv of mutating commands that ran

    def run(self, argv, *, check: bool = True, data: str | None = None, mutating: bool = False,
            ok_rcs: tuple = (0,)) -> Result:
        argv = tuple(str(a) for a in argv)
        if mutating and self.dry_run:
            self.planned.append(argv)
            return Result(argv, 0, "", "")
        rc, out, err = self._run(argv, data)
        if mutating:
            self.executed.append(argv)
        if check and rc not in ok_rcs:
            raise CommandError(argv, rc, out, err)
        return Result(argv, rc, out, err)

    def call(self, entry, fn: Callable[[], Any]) -> Any:
        """A change made by a library call (libzfs_core, rtslib): ``fn()`` runs unless this is a dry run;
        ``entry`` (the call's name and arguments) is recorded in ``planned`` or ``executed`` like a
        mutating command. Returns what ``fn`` returned (None in a dry run)."""
        entry = tuple(str(a) for a in entry)
        if self.dry_run:
            self.planned.append(entry)
            return None
        result = fn()
        self.executed.append(entry)
        return result

    def record(self, entry) -> None:
        """Record a library change made (or, in a dry run, planned) elsewhere, e.g. by lio.apply."""
        (self.planned if self.dry_run else self.executed).append(tuple(str(a) for a in entry))

    def _run(self, argv: tuple, data: str | None) -> tuple[int, str, str]:
        raise NotImplementedError


class LocalRunner(Runner):
    def _run(self, argv, data):
        try:
            proc = subprocess.run(list(argv), input=data, capture_output=True, text=True,
                                  env={**os.environ, **C_LOCALE}, check=False)  # the caller judges the exit
        except FileNotFoundError:
            return 127, "", f"{argv[0]}: command not found"
        return proc.returncode, proc.stdout, proc.stderr


class ModuleRunner(Runner):
    """Adapter over ``AnsibleModule.run_command``; pass ``dry_run=module.check_mode``."""

    def __init__(self, module, dry_run: bool = False):
        super().__init__(dry_run=dry_run)
        self.module = module
        module.run_command_environ_update = dict(C_LOCALE)

    def _run(self, argv, data):
        return self.module.run_command(list(argv), data=data, binary_data=True)
