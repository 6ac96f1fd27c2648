"""A file system frozen on a host for a consistent snapshot, and always thawed, whatever happens to the caller.

``fsfreeze -f`` blocks every write to a file system until ``fsfreeze -u``. If the process that froze it dies
in between (SIGKILL, a lost SSH connection, a crashed storage node), nobody thaws it: the writer hangs
forever. So before freezing, a systemd timer is set on the host itself (``systemd-run --on-active``) that
runs ``fsfreeze -u`` after a bounded time; it fires whatever happens to the caller, and the caller stops it
once it has thawed the file system itself. A snapshot that finishes after that bound may have been taken
after the timer thawed the writer: it is not known to be consistent, and the caller discards it.

One timer unit per mount point (``thaw_unit``): arming stops a leftover of a killed run first, so a stale
timer never thaws a later freeze early.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TypeVar

from .errors import FabricError, UserError

T = TypeVar("T")
MIN_SECONDS, MAX_SECONDS = 5, 3600


class ThawedEarly(FabricError):
    """The freeze lasted as long as the safety timer: the snapshot may not be consistent (it was discarded)."""


def thaw_unit(mountpoint: str) -> str:
    """The systemd unit (timer and service) that thaws ``mountpoint``: fabric-thaw-<path>."""
    return "fabric-thaw-" + re.sub(r"[^A-Za-z0-9_.-]", "_", mountpoint.strip("/").replace("/", "-"))


def arm_argv(mountpoint: str, seconds: int) -> list[str]:
    """The command that sets the safety timer: ``fsfreeze -u MOUNTPOINT`` on this host in ``seconds``."""
    return ["systemd-run", f"--unit={thaw_unit(mountpoint)}", f"--on-active={seconds}s",
            "--timer-property=AccuracySec=1s", "--collect", "--quiet",
            f"--description=fabric: thaw {mountpoint} if the checkpoint snapshot does not", "fsfreeze", "-u",
            mountpoint]


def arm(runner, mountpoint: str, seconds: int) -> str:
    """Set the safety timer on the host (a leftover of a killed run is stopped first); returns its unit."""
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise UserError(f"the thaw timer must be {MIN_SECONDS}-{MAX_SECONDS} s, got {seconds}",
                        "set defaults.thaw_after_seconds in the fabricctl configuration")
    unit = thaw_unit(mountpoint)
    disarm(runner, unit)
    runner.run(["systemctl", "reset-failed", f"{unit}.timer", f"{unit}.service"], check=False, mutating=True)
    runner.run(arm_argv(mountpoint, seconds), mutating=True)
    return unit


def disarm(runner, unit: str) -> None:
    """Stop the safety timer (and its service): the caller thawed the file system itself."""
    runner.run(["systemctl", "stop", f"{unit}.timer", f"{unit}.service"], check=False, mutating=True)


def snapshot_frozen(runner, mountpoint: str, take: Callable[[], T], *, limit: int,
                    discard: Callable[[], object], clock: Callable[[], float] = time.monotonic) -> tuple[T, float]:
    """``sync -f``, the safety timer, ``fsfreeze -f``, ``take()`` (the snapshot), then ``fsfreeze -u`` whatever
    happened, and the timer stopped. Returns (what take returned, the freeze window in seconds). When the
    window reached ``limit`` (the timer may have thawed the writer before the snapshot), ``discard()`` removes
    the snapshot and ThawedEarly is raised."""
    runner.run(["sync", "-f", mountpoint])
    unit = arm(runner, mountpoint, limit)
    armed = clock()
    try:
        runner.run(["fsfreeze", "-f", mountpoint])
        error: BaseException | None = None
        result = None
        try:
            result = take()
        except BaseException as exc:  # noqa: BLE001 - re-raised after the thaw
            error = exc
        finally:
            thaw = runner.run(["fsfreeze", "-u", mountpoint], check=False)
            window = clock() - armed
        if thaw.rc != 0 and "Invalid argument" not in thaw.stderr:  # EINVAL: not frozen (the timer thawed it)
            raise UserError(f"could not thaw {mountpoint}: {thaw.stderr.strip()}",
                            f"run `fsfreeze -u {mountpoint}` on the writer now (the safety timer {unit}.timer does "
                            f"it within {limit} s)")
        if error is not None:
            raise error
    finally:
        disarm(runner, unit)
    if window >= limit:
        discard()
        raise ThawedEarly(f"{mountpoint} stayed frozen {window:.1f} s, as long as the safety timer ({limit} s): it "
                          "may have been thawed before the snapshot, which was therefore discarded",
                          "take the checkpoint again; if the pool is that slow, raise defaults.thaw_after_seconds")
    return result, window
