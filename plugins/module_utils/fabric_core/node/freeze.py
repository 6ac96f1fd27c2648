"""A file system frozen on a host for a consistent snapshot, and always thawed, whatever happens to the caller.

``fsfreeze -f`` blocks every write to a file system until ``fsfreeze -u``. If the process that froze it dies
in between (SIGKILL, a lost SSH connection, a crashed storage node), nobody thaws it: the writer hangs
forever. So before freezing, a systemd timer is set on the host itself (``systemd-run --on-active``) whose
service thaws the file system after a bounded time; it fires whatever happens to the caller, and the caller
stops it once it has thawed the file system itself. A snapshot that finishes after that bound may have been
taken after the timer thawed the writer: it is not known to be consistent, and the caller discards it.

A freeze is not instant: ``fsfreeze -f`` first blocks new writes, then flushes what is dirty, and only then is
the file system frozen (``FIFREEZE`` returns). The timer may fire during that flush, or before the freeze even
started (a caller stopped between arming and freezing); a thaw at that moment finds nothing frozen, and the
freeze would land after it with no timer left. Three rules close that, one lock file per mount point
(``lock_path``, in /run: root's) being the token of a freeze in flight:

* the freeze runs under the lock (``flock LOCK fsfreeze -f``, the lock held by the freezing process itself
  until the kernel returns) and starts only while its timer is still waiting (``freeze_argv``): a freeze
  never starts after its watchdog has fired;
* the watchdog (``WATCHDOG``, the timer's service) does not thaw once: from the time it fires, it tries
  ``fsfreeze -u`` under the lock every second, and ends only when it thawed the file system, or found it not
  frozen while holding the lock (no freeze in flight, and none can start any more), or after ``GIVE_UP``
  tries (about an hour: a freeze that never completes, the device hangs); a freeze that lands late is thawed
  within about a second of landing;
* the caller thaws under the lock whatever happened (a freeze that failed or timed out on the caller's side
  may still land on the host), and stops the timer only once its thaw found nothing frozen and nothing in
  flight (``snapshot_frozen``); otherwise the timer stays and does it.

So a writer is frozen at most until the later of the timer (``limit`` seconds after it was armed) and a
second after its freeze landed, whatever is killed when (see docs/security.md for each kill point).

One timer unit per mount point (``thaw_unit``): arming first thaws and clears a leftover of a killed run,
under the lock (``recover_argv``), so a stale timer never thaws a later freeze early and a leftover freeze
is never left without its watchdog.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TypeVar

from ..base.errors import FabricError, UserError
from . import mounts

T = TypeVar("T")
MIN_SECONDS, MAX_SECONDS = 5, 3600
GIVE_UP = 3600  # tries (a second apart) of the watchdog once fired (a freeze in flight that long: the device hangs)
LOCK_WAIT = 10  # seconds a freeze, a thaw or arming waits for the lock (another of them in flight)
BUSY = 75  # flock's exit status when the lock stays taken (flock -E): a freeze of the mount point is in flight
LATE = 76  # the freeze's exit status when its timer is no longer waiting (it fired: too late to freeze)
NOT_FROZEN = "Invalid argument"  # fsfreeze -u on a file system that is not frozen (EINVAL)

# The timer's service: $1 mount point, $2 lock file, $3 tries (a second apart). A thaw under the lock every
# second until it thaws, or finds nothing frozen with no freeze in flight (it holds the lock), or gives up.
# systemd expands "${...}", "$$" and specifiers ("%x") in a service's command line: the script has none.
WATCHDOG = (
    'n=0; '
    'while :; do '
    'out=$(flock -n -E 75 "$2" fsfreeze -u "$1" 2>&1); rc=$?; '
    'if [ $rc -eq 0 ]; then echo "thawed $1"; exit 0; fi; '
    'case "$rc:$out" in 75:*) ;; *"Invalid argument"*) echo "$1 is not frozen"; exit 0;; *) echo "$out" >&2;; esac; '
    'n=$((n + 1)); '
    'if [ $n -ge $3 ]; then echo "gave up thawing $1 after $3 tries" >&2; exit 1; fi; '
    'sleep 1; '
    'done')
# The freeze: $1 the timer's unit, $2 the mount point; run under the lock, and only while the timer waits.
FREEZE = ('state=$(systemctl show -P SubState "$1.timer"); '
          'if [ "$state" != waiting ]; then '
          'echo "the safety timer $1.timer is ${state:-not there}, not waiting: not freezing" >&2; exit 76; fi; '
          'exec fsfreeze -f "$2"')
# Before arming: under the lock, thaw a leftover freeze of a killed run and clear its timer and service.
RECOVER = ('fsfreeze -u "$2" 2>/dev/null; systemctl stop "$1.timer" "$1.service" 2>/dev/null; '
           'systemctl reset-failed "$1.timer" "$1.service" 2>/dev/null; true')


class ThawedEarly(FabricError):
    """The freeze lasted as long as the safety timer: the snapshot may not be consistent (it was discarded)."""


class FreezeRefused(UserError):
    """The writer refused the freeze before setting anything (its volume is not mounted read-write there, a bad
    bound): nothing to thaw."""


class FreezeInFlight(FabricError):
    """A freeze of the mount point has not returned on the writer yet: its safety timer thaws it once it lands."""

    reason = "in_flight"  # how the node agent's answer names it (node.client.AgentWriter raises it again)


def thaw_unit(mountpoint: str) -> str:
    """The systemd unit (timer and service) that thaws ``mountpoint``: fabric-thaw-<path>."""
    return "fabric-thaw-" + re.sub(r"[^A-Za-z0-9_.-]", "_", mountpoint.strip("/").replace("/", "-"))


def lock_path(mountpoint: str) -> str:
    """The lock file on the writer held by a freeze in flight (and briefly by each thaw): /run/<unit>.lock."""
    return f"/run/{thaw_unit(mountpoint)}.lock"


def _locked(mountpoint: str, wait: int | None) -> list[str]:
    how = ["-n"] if wait is None else ["-w", str(wait)]
    return ["flock", *how, "-E", str(BUSY), lock_path(mountpoint)]


def arm_argv(mountpoint: str, seconds: int) -> list[str]:
    """The command that sets the safety timer: the watchdog (``WATCHDOG``) on this host in ``seconds``."""
    return ["systemd-run", f"--unit={thaw_unit(mountpoint)}", f"--on-active={seconds}s",
            "--timer-property=AccuracySec=1s", "--collect", "--quiet",
            f"--description=fabric: thaw {mountpoint} if the checkpoint snapshot does not", "sh", "-c", WATCHDOG,
            "fabric-thaw", mountpoint, lock_path(mountpoint), str(GIVE_UP)]


def recover_argv(mountpoint: str) -> list[str]:
    """Under the lock: thaw a leftover freeze, stop and reset a leftover timer and service (``RECOVER``)."""
    return [*_locked(mountpoint, LOCK_WAIT), "sh", "-c", RECOVER, "fabric-recover", thaw_unit(mountpoint),
            mountpoint]


def freeze_argv(mountpoint: str) -> list[str]:
    """The freeze, under the lock, only while its timer still waits (``FREEZE``)."""
    return [*_locked(mountpoint, LOCK_WAIT), "sh", "-c", FREEZE, "fabric-freeze", thaw_unit(mountpoint), mountpoint]


def thaw_argv(mountpoint: str) -> list[str]:
    """The caller's thaw, under the lock (exit ``BUSY``: a freeze is still in flight)."""
    return [*_locked(mountpoint, LOCK_WAIT), "fsfreeze", "-u", mountpoint]


def arm(runner, mountpoint: str, seconds: int) -> str:
    """Set the safety timer on the host (a leftover of a killed run is thawed and cleared first, under the lock);
    returns its unit."""
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise UserError(f"the thaw timer must be {MIN_SECONDS}-{MAX_SECONDS} s, got {seconds}",
                        "set defaults.thaw_after_seconds in the fabricctl configuration")
    unit = thaw_unit(mountpoint)
    res = runner.run(recover_argv(mountpoint), check=False, mutating=True)
    if res.rc == BUSY:
        raise FreezeInFlight(f"an earlier freeze of {mountpoint} has not returned on the writer after {LOCK_WAIT} s",
                             f"wait: its safety timer {unit}.timer thaws it once it lands; then take the "
                             "snapshot again")
    runner.run(arm_argv(mountpoint, seconds), mutating=True)
    return unit


def disarm(runner, unit: str) -> None:
    """Stop the safety timer (and its service): the caller thawed the file system itself, under the lock."""
    runner.run(["systemctl", "stop", f"{unit}.timer", f"{unit}.service"], check=False, mutating=True)


class Here:
    """A writer's file system frozen and thawed through a runner that runs commands on the writer: the node agent's
    local runner (``fabric-node freeze``/``thaw``, what fabricctl asks for through its key), or fabricctl's SSH
    runner where its key runs commands. ``node.client.AgentWriter`` is the same two steps asked of the agent."""

    def __init__(self, runner, mountpoint: str, clock: Callable[[], float] = time.monotonic):
        self.runner, self.mountpoint, self.clock = runner, mountpoint, clock

    def check(self, limit: int) -> None:
        """What the freeze checks before it sets anything: the bound, and the volume mounted read-write here
        (FreezeRefused otherwise; reads only)."""
        if not MIN_SECONDS <= limit <= MAX_SECONDS:
            raise FreezeRefused(f"the thaw timer must be {MIN_SECONDS}-{MAX_SECONDS} s, got {limit}",
                                "set defaults.thaw_after_seconds in the fabricctl configuration")
        mounted = mounts.current_mount(self.runner, self.mountpoint)
        if not mounted or "rw" not in mounted["options"]:
            raise FreezeRefused(f"{self.mountpoint} is not mounted read-write on the writer",
                                "attach the job's volume there again: `fabricctl checkpoint volume create JOB --size "
                                "SIZE --writer HOST` on the storage node")

    def freeze(self, limit: int, *, since: float | None = None) -> float:
        """``check``, ``sync -f``, the safety timer (``arm``: FreezeInFlight when an earlier freeze has not
        returned, then nothing is armed), the freeze (``freeze_argv``). Returns the seconds spent before the timer
        was set, from ``since`` (this clock's time the caller's request started; default: now): the caller's
        freeze window counts from the timer, not from its request."""
        start = self.clock() if since is None else since
        self.check(limit)
        self.runner.run(["sync", "-f", self.mountpoint])
        lead = self.clock() - start
        arm(self.runner, self.mountpoint, limit)
        self.runner.run(freeze_argv(self.mountpoint))
        return lead

    def thaw(self, limit: int) -> None:
        """The thaw under the lock, and the timer stopped once it found nothing frozen and nothing in flight.
        FreezeInFlight (a freeze has not returned: the timer stays and thaws it once it lands), UserError (the
        thaw failed: the timer stays and keeps trying)."""
        unit = thaw_unit(self.mountpoint)
        thaw = self.runner.run(thaw_argv(self.mountpoint), check=False)
        if thaw.rc == BUSY:
            raise FreezeInFlight(f"the freeze of {self.mountpoint} had not returned on the writer when it was thawed",
                                 f"nothing to do: the safety timer {unit}.timer thaws it once it lands (within a "
                                 f"second after {limit} s); take the checkpoint again")
        if thaw.rc != 0 and NOT_FROZEN not in thaw.stderr:  # EINVAL: not frozen (never, or the timer thawed it)
            raise UserError(f"could not thaw {self.mountpoint}: {thaw.stderr.strip()}",
                            f"run `fsfreeze -u {self.mountpoint}` on the writer now (the safety timer {unit}.timer "
                            f"keeps trying from {limit} s on)")
        disarm(self.runner, unit)  # nothing frozen, nothing in flight (the thaw held the lock): the timer is done


def snapshot_frozen(runner, mountpoint: str, take: Callable[[], T], *, limit: int,
                    discard: Callable[[], object], clock: Callable[[], float] = time.monotonic) -> tuple[T, float]:
    """``frozen`` on a writer reached through ``runner`` (``Here``)."""
    return frozen(Here(runner, mountpoint, clock), take, limit=limit, discard=discard, clock=clock)


def frozen(writer, take: Callable[[], T], *, limit: int, discard: Callable[[], object],
           clock: Callable[[], float] = time.monotonic) -> tuple[T, float]:
    """``writer.freeze`` (sync, the safety timer, the freeze), ``take()`` (the snapshot), then ``writer.thaw``
    whatever happened (a freeze that failed on this side may still land on the writer), which stops the timer
    once it found nothing frozen and nothing in flight. ``writer``: ``Here`` (commands on the writer) or
    ``node.client.AgentWriter`` (the writer's node agent). Returns (what take returned, the freeze window in
    seconds, counted from before the timer was set). When the window reached ``limit`` (the timer may have thawed
    the writer before the snapshot), ``discard()`` removes the snapshot and ThawedEarly is raised. The timer is
    left armed when the thaw could not be made or confirmed (a lost connection, a freeze still in flight, a failed
    thaw): it thaws the writer itself. An earlier freeze still in flight refuses the freeze before anything is
    armed (FreezeInFlight, and no thaw)."""
    start = clock()  # before the timer starts: a window shorter than ``limit`` means the timer has not fired
    error: BaseException | None = None
    result = None
    lead = 0.0
    try:
        lead = writer.freeze(limit)
        result = take()
    except (FreezeInFlight, FreezeRefused):
        raise  # refused before arming: nothing of this run to thaw
    except BaseException as exc:  # noqa: BLE001 - re-raised after the thaw (a failed freeze may still land)
        error = exc
    try:
        writer.thaw(limit)
    except BaseException as exc:  # the writer could not be reached, a freeze in flight, a failed thaw: the timer
        if error is not None:
            raise exc from error
        raise
    window = clock() - start - lead
    if error is not None:
        raise error
    if window >= limit:
        discard()
        raise ThawedEarly(f"{writer.mountpoint} stayed frozen {window:.1f} s, as long as the safety timer ({limit} s): "
                          "it may have been thawed before the snapshot, which was therefore discarded",
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
