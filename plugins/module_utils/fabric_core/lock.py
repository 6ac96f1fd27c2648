"""One lock per storage node around every change, so that two changes never interleave.

fabricctl's mutating commands (main.py's dispatch, not each command) and the Ansible modules that
change LIO and ZFS state (fabric_lio_target, fabric_zpool, fabric_zfs_dataset, outside check mode)
take ``node_lock(what)`` before they change anything. It is ``fcntl.flock`` on one file,
``/run/fabric/node.lock`` (directory 0700, file 0600): the kernel releases it when its holder
exits, however it exits, so a held lock always has a living holder. While held, the file holds
the holder's description as JSON: ``{"command": ..., "pid": ..., "since": ...}`` (``command`` is what
the caller passed: a command line without secrets). A second taker polls for a bounded time
(60 s by default) and then raises ``LockHeld`` (exit 4) naming the holder.

Not re-entrant: flock locks belong to open files, so taking it twice in one process waits for itself.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator

from .errors import FabricError, LockHeld, UserError

DEFAULT_PATH = "/run/fabric/node.lock"  # looked up at call time (tests point it elsewhere)
DEFAULT_WAIT = 60.0  # seconds
POLL = 0.25  # seconds between two attempts while waiting


def _now() -> datetime.datetime:
    return datetime.datetime.now().astimezone()


def _open(path: str) -> int:
    directory = os.path.dirname(path)
    try:
        if directory and not os.path.isdir(directory):
            os.makedirs(directory, mode=0o700, exist_ok=True)
            os.chmod(directory, 0o700)  # makedirs' mode is filtered by the umask
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except PermissionError:
        raise UserError(f"cannot open the node lock {path}: permission denied",
                        "run it as root (fabric commands change ZFS, LIO and mounts: `sudo ...`)") from None
    except OSError as exc:
        raise FabricError(f"cannot open the node lock {path}: {exc.strerror or exc}",
                          f"check that {directory or '.'} is a writable directory (/run is a tmpfs)") from None
    with contextlib.suppress(PermissionError):
        os.fchmod(fd, 0o600)  # a file made by someone else (e.g. flock(1)) gets the same mode
    return fd


def _read_text(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode("utf-8", "replace")
    except OSError:
        return ""


def _parse(text: str) -> dict:
    """The first JSON object of the file (a shorter description written over a longer one may leave
    a tail for a moment), or {} when there is none."""
    try:
        value, _end = json.JSONDecoder().raw_decode(text.strip())
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _lock_pid(fd: int) -> int | None:
    """The pid that holds a flock on this file, from /proc/locks (None when it cannot be told)."""
    try:
        st = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue  # "->": a waiter, not the holder
        try:
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == want:
                return int(fields[4])
        except ValueError:
            continue
    return None


def holder(fd: int) -> dict:
    """Who holds the lock on this open lock file: {"command", "pid", "since"} (values may be None).

    The description comes from the file; when the kernel names another pid than the file does
    (the file is left over from a holder that was killed, and the new holder did not describe
    itself, e.g. flock(1)), only the kernel's pid is kept.
    """
    info = _parse(_read_text(fd))
    out = {"command": info.get("command"), "pid": info.get("pid"), "since": info.get("since")}
    pid = _lock_pid(fd)
    if pid is not None and pid != out["pid"]:
        out = {"command": None, "pid": pid, "since": None}
    return out


def describe(info: dict) -> str:
    """``<command>, pid <pid>, since <time>`` with 'unknown' for what the holder did not say."""
    return (f"{info.get('command') or 'unknown (it did not describe itself)'}, pid {info.get('pid') or 'unknown'}, "
            f"since {info.get('since') or 'unknown'}")


def _write(fd: int, info: dict) -> None:
    data = (json.dumps(info, sort_keys=True) + "\n").encode()
    os.pwrite(fd, data, 0)  # over the old content, then cut: a reader never sees an empty file in between
    os.ftruncate(fd, len(data))


@contextlib.contextmanager
def node_lock(what: str, path: str | None = None, wait: float | None = None, *,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
              now: Callable[[], datetime.datetime] = _now, poll: float = POLL,
              waiting: Callable[[dict], None] | None = None) -> Iterator[dict]:
    """Hold the node's lock for the ``with`` block; yield the description written into the lock file.

    what: the holder's description for others to read (a command line WITHOUT secrets).
    path: the lock file (default ``DEFAULT_PATH``); wait: seconds to wait for a holder to finish
    (default ``DEFAULT_WAIT``; 0: try once), both resolved at call time; waiting(holder): called
    once when the lock is found held (e.g. to tell the operator what it waits for). Raises
    ``LockHeld`` after ``wait`` seconds.
    """
    path = path or DEFAULT_PATH
    wait = DEFAULT_WAIT if wait is None else wait
    fd = _open(path)
    try:
        deadline = clock() + max(0.0, wait)
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            remaining = deadline - clock()
            if remaining <= 0:
                raise LockHeld(f"another fabric command is running: {describe(holder(fd))}",
                               f"wait for it to end, then run this again (waited {wait:g} s for the lock {path}; "
                               "the kernel releases it when its holder exits, so the holder above is alive)")
            if waiting is not None and not told:
                told = True
                waiting(holder(fd))
            sleep(min(poll, remaining))
        info = {"command": what, "pid": os.getpid(), "since": now().isoformat(timespec="seconds")}
        _write(fd, info)
        try:
            yield info
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # before the unlock: the file never names a holder that has finished
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
