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


# ---- reading a writer's freeze state (fabricctl status --writers) ----------------------------------------

BLOCKED_WCHAN = "percpu_rwsem_wait"  # where a write to a frozen file system waits (mnt_want_write, sb_start_write)
# Every task waiting in BLOCKED_WCHAN, as "PID COMM" lines: a fixed script (no argument of anyone's in it); dash's
# `read` returns 1 at a wchan's missing newline but has set the variable; a task that ends meanwhile is skipped
# (the loop's errors go to /dev/null).
BLOCKED_SCRIPT = ("for f in /proc/[0-9]*/wchan; do w=; read -r w < \"$f\"; "
                  f"if [ \"$w\" = {BLOCKED_WCHAN} ]; then c=; read -r c < \"${{f%wchan}}comm\"; "
                  "p=${f#/proc/}; echo \"${p%/wchan} $c\"; fi; done 2>/dev/null; true")
_TIMER_PROPS = ("Id", "ActiveState", "ActiveEnterTimestampMonotonic", "NextElapseUSecMonotonic")


def parse_show(text: str) -> dict[str, dict[str, str]]:
    """`systemctl show -p ... UNIT...` (blocks of KEY=VALUE separated by blank lines) -> {Id: {KEY: VALUE}}."""
    units: dict[str, dict[str, str]] = {}
    for block in text.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            units[props["Id"]] = props
    return units


def parse_blocked(text: str) -> list[dict]:
    """BLOCKED_SCRIPT's lines -> [{"pid": int, "comm": str}]."""
    out = []
    for line in text.splitlines():
        pid, _space, comm = line.strip().partition(" ")
        if pid.isdigit():
            out.append({"pid": int(pid), "comm": comm})
    return out


_SPAN_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def timespan(text: str) -> float | None:
    """systemd's time span as `systemctl show` prints it ("3min 48.010503s", "infinity", "0") -> seconds, None
    for infinity or nothing."""
    total, found = 0.0, False
    for value, unit in re.findall(r"([0-9.]+)\s*(us|ms|min|s|h|d)\b", text):
        total += float(value) * _SPAN_UNITS[unit]
        found = True
    return total if found else None


def freeze_states(units: dict[str, dict[str, str]], mountpoints: list[str], uptime: float) -> dict[str, dict]:
    """{mountpoint: {"frozen_for": seconds, "thaw_in": seconds}} of the mount points whose thaw timer is armed
    (fabricctl froze them and has not thawed them yet: a snapshot in progress, or its fabricctl died and the
    timer will thaw it); the others are not frozen by fabricctl. ``uptime``: the host's monotonic clock (s)."""
    out = {}
    for mountpoint in mountpoints:
        props = units.get(f"{thaw_unit(mountpoint)}.timer", {})
        if props.get("ActiveState") != "active":
            continue
        since = int(props.get("ActiveEnterTimestampMonotonic") or 0) / 1e6
        due = timespan(props.get("NextElapseUSecMonotonic", ""))
        out[mountpoint] = {"frozen_for": round(max(0.0, uptime - since), 1) if since else None,
                           "thaw_in": round(due - uptime, 1) if due else None}
    return out


def read_writer(runner, mountpoints: list[str]) -> dict:
    """On a writer: which of ``mountpoints`` fabricctl holds frozen (freeze_states) and every task waiting for a
    frozen file system (any, fabricctl's or not: {"pid", "comm"}). Reads only."""
    units = [f"{thaw_unit(m)}.timer" for m in mountpoints]
    shown = runner.run(["systemctl", "show", *(f"--property={p}" for p in _TIMER_PROPS), *units], check=False)
    uptime = float(runner.run(["cat", "/proc/uptime"]).stdout.split()[0])
    blocked = parse_blocked(runner.run(["sh", "-c", BLOCKED_SCRIPT], check=False).stdout)
    return {"frozen": freeze_states(parse_show(shown.stdout), mountpoints, uptime), "blocked": blocked}
