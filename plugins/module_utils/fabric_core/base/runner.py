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

Every command has a bounded time and a bounded output (the bounds below, one place for every kind of
call): ``LocalRunner`` kills a command (its whole process group) that runs longer than ``LOCAL_TIMEOUT``
or prints more than ``OUTPUT_CAP`` bytes on one stream, and raises ``CommandBounded`` (a CommandError,
whatever ``check`` says) naming the bound; fabricctl's SSH runner does the same on a GPU node
(``REMOTE_TIMEOUT`` in all, ``REMOTE_IDLE`` without a byte of output), and a request to another storage
node (``PEER_TIMEOUT``). A stream between nodes (zfs send | ssh | zfs receive) has no total bound, which
would cut a legitimate copy of hours: it is stalled, and fails, when no byte moved for ``STALL_SECONDS``,
and ssh itself gives up on a silent peer after ``SSH_ALIVE_INTERVAL`` x ``SSH_ALIVE_COUNT`` seconds.
``ModuleRunner`` is not bounded here: Ansible's ``run_command`` takes no timeout (Ansible's task_timeout is
the bound of a play's task).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import CommandBounded, CommandError, redact_argv

C_LOCALE = {"LC_ALL": "C", "LANG": "C", "LANGUAGE": "C"}

# ---- the bounds of every call (seconds, bytes) ----
LOCAL_TIMEOUT = 900.0  # a command on this node: zfs, mkfs, sync of a large dirty cache, udevadm (with its own)
REMOTE_TIMEOUT = 300.0  # a command on a GPU node in all: an iscsiadm login's retries (~2 min), fsfreeze's flush
REMOTE_IDLE = 180.0  # a command on a GPU node silent this long is hung (iscsiadm gives up on a login at ~120 s itself)
PROGRESS_SILENCE = 600.0  # a long read on a GPU node (verify --on) has no total bound: its progress lines, this
#                          long apart at most (one huge file's digest), keep it alive
PEER_TIMEOUT = 120.0  # one replica-serve request answered with JSON (state, export) from another storage node
STALL_SECONDS = 120.0  # a stream between storage nodes that moved no byte for this long is stalled
SSH_ALIVE_INTERVAL = 5  # ssh's ServerAliveInterval to a peer: a silent peer is dropped after
SSH_ALIVE_COUNT = 3  # ... ServerAliveCountMax unanswered probes (15 s)
OUTPUT_CAP = 16 << 20  # bytes kept of one stream (stdout or stderr) of one command; more: killed, failed


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
    # called with one line per command run, planned or library call (secrets masked): fabricctl's -v
    trace: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    def _traced(self, entry: tuple, outcome: str, started: float | None = None) -> None:
        if self.trace is not None:
            took = f" in {time.monotonic() - started:.2f} s" if started is not None else ""
            self.trace(f"{' '.join(redact_argv(entry))}: {outcome}{took}")

    def run(self, argv, *, check: bool = True, data: str | None = None, mutating: bool = False,
            ok_rcs: tuple = (0,)) -> Result:
        argv = tuple(str(a) for a in argv)
        if mutating and self.dry_run:
            self.planned.append(argv)
            self._traced(argv, "not run (dry run)")
            return Result(argv, 0, "", "")
        started, outcome = time.monotonic(), "failed to run"
        try:
            rc, out, err = self._run(argv, data)
            outcome = f"exit {rc}"
        finally:
            self._traced(argv, outcome, started)
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
            self._traced(entry, "not called (dry run)")
            return None
        started, outcome = time.monotonic(), "failed"
        try:
            result = fn()
            outcome = "done"
        finally:
            self._traced(entry, outcome, started)
        self.executed.append(entry)
        return result

    def record(self, entry) -> None:
        """Record a library change made (or, in a dry run, planned) elsewhere, e.g. by lio.apply."""
        (self.planned if self.dry_run else self.executed).append(tuple(str(a) for a in entry))

    def _run(self, argv: tuple, data: str | None) -> tuple[int, str, str]:
        raise NotImplementedError


class LocalRunner(Runner):
    """Commands on this node, each within ``timeout`` seconds and ``output_cap`` bytes per stream."""

    def __init__(self, dry_run: bool = False, *, timeout: float = LOCAL_TIMEOUT, output_cap: int = OUTPUT_CAP):
        super().__init__(dry_run=dry_run)
        self.timeout = timeout
        self.output_cap = output_cap

    def _run(self, argv, data):
        return bounded_run(argv, data, timeout=self.timeout, output_cap=self.output_cap)


class _Capture:
    """One stream of a command read to its end in a thread, at most ``cap`` bytes kept; ``over`` is set
    (and ``on_over`` called once) when it printed more."""

    def __init__(self, stream, cap: int, on_over: Callable[[], None]):
        self.chunks: list[bytes] = []
        self.size = 0
        self.over = False
        self._stream, self._cap, self._on_over = stream, cap, on_over
        # set when the reading ends: after a Ctrl-C that interrupted the thread's join, CPython 3.11 reports the
        # thread not alive while it still reads (fabricctl.fanout has the same rule), so is_alive() cannot say it
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                chunk = self._stream.read1(65536)
                if not chunk:
                    return
                room = self._cap - self.size
                if len(chunk) > room:
                    self.chunks.append(chunk[:max(room, 0)])
                    self.size = self._cap
                    if not self.over:
                        self.over = True
                        self._on_over()
                    continue  # drain until the killed command's pipe closes, keeping nothing more
                self.chunks.append(chunk)
                self.size += len(chunk)
        except (OSError, ValueError):
            return
        finally:
            self.done.set()

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the command and whatever it started (its own session)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def bounded_run(argv, data: str | bytes | None = None, *, timeout: float = LOCAL_TIMEOUT,
                output_cap: int = OUTPUT_CAP, env: dict | None = None, where: str = "",
                fix: str = "") -> tuple[int, str, str]:
    """Run ``argv`` (no shell) with ``data`` on its stdin; (rc, stdout, stderr). A command still running after
    ``timeout`` seconds, or printing more than ``output_cap`` bytes on a stream, is killed with its process
    group and ``CommandBounded`` raised (``where``: the host it reached, for the message). 127 when not found."""
    argv = tuple(str(a) for a in argv)
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                env=env if env is not None else {**os.environ, **C_LOCALE})
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found"
    out = err = None
    try:
        out = _Capture(proc.stdout, output_cap, lambda: _kill_group(proc))
        err = _Capture(proc.stderr, output_cap, lambda: _kill_group(proc))
        if data is not None:
            threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True).start()
        deadline = time.monotonic() + timeout
        timed_out = False
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            proc.wait()
        for capture in (out, err):
            capture.thread.join(5)  # a grandchild that kept the pipe open past the kill is not waited for
    except BaseException:  # Ctrl-C included: never leave the command running behind us
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        for stream, capture in ((proc.stdout, out), (proc.stderr, err)):
            if capture is None or capture.done.is_set():  # never closed under a reading thread
                stream.close()
    if timed_out:
        raise CommandBounded(argv, f"ran longer than {timeout:g} s", out.text(), err.text(), where=where,
                             fix=fix or "find out why it hangs (the host's load, a stuck device, the network), "
                             "then run the command again; nothing was left half-done that a re-run does not finish")
    if out.over or err.over:
        stream = "stdout" if out.over else "stderr"
        raise CommandBounded(argv, f"printed more than {output_cap >> 10} KiB on {stream} (the rest was not kept)",
                             out.text()[:4096], err.text()[:4096], where=where,
                             fix=fix or "find out what floods its output on that host, then run the command again")
    return proc.returncode, out.text(), err.text()


def _feed(stdin, data: str | bytes) -> None:
    try:
        stdin.write(data.encode() if isinstance(data, str) else data)
    except (BrokenPipeError, OSError, ValueError):
        pass  # a command may exit without reading its input
    finally:
        try:
            stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass


class ModuleRunner(Runner):
    """Adapter over ``AnsibleModule.run_command``; pass ``dry_run=module.check_mode``."""

    def __init__(self, module, dry_run: bool = False):
        super().__init__(dry_run=dry_run)
        self.module = module
        module.run_command_environ_update = dict(C_LOCALE)

    def _run(self, argv, data):
        return self.module.run_command(list(argv), data=data, binary_data=True)
