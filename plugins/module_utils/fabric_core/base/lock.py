"""Locks of a storage node: one node lock for short changes of shared node state, one lock per object for
long work on that object, so that a long copy never stalls every other change.

The node lock. fabricctl's short changes (main.py's dispatch: publish, unpublish, access sync, rotate,
dataset create/destroy, the checkpoint volume's create/destroy/rollback/restore) and the Ansible modules
that change LIO and ZFS state (fabric_lio_target, fabric_zpool, fabric_zfs_dataset, outside check mode)
take ``node_lock(what)`` before they change anything; the long commands take it only around the short
sections that change shared node state (``dataset ingest`` and ``dataset seal``: the staging mount). It is
``fcntl.flock`` on one file, ``/run/fabric/node.lock`` (directory 0700, file 0600): the kernel releases it
when its holder exits, however it exits, so a held lock always has a living holder. While held, the file
holds the holder's description as JSON: ``{"command": ..., "pid": ..., "since": ...}`` (``command`` is what
the caller passed: a command line without secrets). A second taker polls for a bounded time (60 s by
default) and then raises ``LockHeld`` (exit 4) naming the holder.

Object locks. ``object_lock(kind, name, what, shared=...)``: the same flock, on
``/run/fabric/locks/<kind>-<name>.lock`` (the node lock's directory; ``name`` escaped), exclusive or
shared. An exclusive holder describes itself in the file as the node lock's does; shared holders do not
write (several hold it at once) and are named from /proc/locks and their command lines. Kinds (``KINDS``):

* ``dataset-NAME`` / ``checkpoint-JOB``: the volume. Exclusive to make, destroy, roll back or receive into
  it; shared to read it or send it away (replicate, verify, checkpoint snapshot, restore, ingest, seal).
* ``staging-NAME``: a dataset's staging file system, exclusive while ingest or seal writes or reads it.
* ``writer-JOB``: a checkpoint job's writer, exclusive while checkpoint snapshot freezes it.

Ordering (no deadlock): a process takes its locks in rank order, volume lock (``dataset``/``checkpoint``)
first, then the sub-lock (``staging``/``writer``), then the node lock last, and two locks of one rank in
name order; never the reverse. Taking a lock of a lower rank (or a lower name of the same rank) while
holding a higher one raises ``LockOrderError`` at once (a bug in the caller, never a wait). A long
command drops the node lock before it does anything long; the node lock is never held while waiting for
an object lock.

Not re-entrant: flock locks belong to open files, so taking one twice in one process waits for itself.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import threading
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
    pids = _lock_pids(fd)
    return pids[0] if pids else None


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


class LockOrderError(RuntimeError):
    """A lock taken out of order (an object lock while holding the node lock, ...): a bug, never a wait."""


KINDS = {"dataset": 0, "checkpoint": 0, "staging": 1, "writer": 1}  # kind -> rank (the node lock: NODE_RANK)
NODE_RANK = 2
_held = threading.local()  # .stack: [(rank, name)] of the locks this thread holds, in the order taken


def _held_stack() -> list:
    if not hasattr(_held, "stack"):
        _held.stack = []
    return _held.stack


def _check_order(rank: int, name: str) -> None:
    for held_rank, held_name in _held_stack():
        if held_rank > rank or (held_rank == rank and held_name > name):  # the same lock again: waits for itself
            held = "the node lock" if held_rank == NODE_RANK else f"the lock {held_name}"
            want = "the node lock" if rank == NODE_RANK else f"the lock {name}"
            raise LockOrderError(f"{want} taken while holding {held}: locks go volume, then staging/writer, "
                                 "then the node lock (fabric_core.base.lock's ordering)")


def escape(name: str) -> str:
    """A name as a lock file's name: [A-Za-z0-9_-] kept, anything else (and a leading '.') as %XX."""
    out = []
    for i, ch in enumerate(name):
        if (ch.isascii() and (ch.isalnum() or ch in "_-")) or (ch == "." and i > 0):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode())
    return "".join(out) or "%00"


def object_path(kind: str, name: str, node_path: str | None = None) -> str:
    """The lock file of one object: ``locks/<kind>-<escaped name>.lock`` beside the node lock."""
    if kind not in KINDS:
        raise ValueError(f"unknown lock kind {kind!r} (one of {', '.join(KINDS)})")
    return os.path.join(os.path.dirname(node_path or DEFAULT_PATH), "locks", f"{kind}-{escape(name)}.lock")


def _lock_pids(fd: int) -> list[int]:
    """Every pid that holds a flock on this file (several for a shared lock), from /proc/locks."""
    try:
        st = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    pids = []
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == want:
                pids.append(int(fields[4]))
        except ValueError:
            continue
    return pids


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            words = fh.read(4096).split(b"\0")
    except OSError:
        return ""
    text = " ".join(w.decode("utf-8", "replace") for w in words if w)
    # fabricctl runs as `python3 /usr/bin/fabricctl ...`: name it from its own word on
    for j, word in enumerate(text.split()):
        if os.path.basename(word) == "fabricctl":
            return " ".join(["fabricctl", *text.split()[j + 1:]])
    return text


def holders_text(fd: int) -> str:
    """Who holds this object lock: the exclusive holder's description, or every shared holder's pid and
    command line (from /proc: shared holders do not write the file)."""
    info = holder(fd)
    if info.get("command"):
        return describe(info)
    pids = _lock_pids(fd)
    if not pids:
        return describe(info)
    return "; ".join(f"{_cmdline(pid) or 'unknown'}, pid {pid}" for pid in pids)


@contextlib.contextmanager
def _hold(path: str, what: str, wait: float, *, shared: bool, rank: int, label: str, describe_holder,
          clock, sleep, now, poll, waiting) -> Iterator[dict]:
    _check_order(rank, label)
    fd = _open(path)
    try:
        deadline = clock() + max(0.0, wait)
        told = False
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            remaining = deadline - clock()
            if remaining <= 0:
                raise LockHeld(f"another fabric command is running: {describe_holder(fd)}",
                               f"wait for it to end, then run this again (waited {wait:g} s for the lock {path}; "
                               "the kernel releases it when its holder exits, so the holder above is alive)")
            if waiting is not None and not told:
                told = True
                waiting(holder(fd) if rank == NODE_RANK else {"command": describe_holder(fd)})
            sleep(min(poll, remaining))
        info = {"command": what, "pid": os.getpid(), "since": now().isoformat(timespec="seconds")}
        if not shared:
            _write(fd, info)
        stack = _held_stack()
        stack.append((rank, label))
        try:
            yield info
        finally:
            stack.remove((rank, label))
            if not shared:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)  # before the unlock: the file never names a holder that has finished
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def object_lock(kind: str, name: str, what: str, *, shared: bool = False, wait: float | None = None,
                node_path: str | None = None, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep, now: Callable[[], datetime.datetime] = _now,
                poll: float = POLL, waiting: Callable[[dict], None] | None = None) -> Iterator[dict]:
    """Hold one object's lock (``kind`` of ``KINDS``, e.g. ("dataset", "imagenet")) for the ``with`` block,
    exclusive or ``shared``; the wait and the error as ``node_lock``'s. Taken before the node lock, never
    while holding it (``LockOrderError``)."""
    path = object_path(kind, name, node_path)
    with _hold(path, what, DEFAULT_WAIT if wait is None else wait, shared=shared, rank=KINDS[kind],
               label=f"{kind}-{name}", describe_holder=holders_text, clock=clock, sleep=sleep, now=now, poll=poll,
               waiting=waiting) as info:
        yield info


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
    with _hold(path, what, wait, shared=False, rank=NODE_RANK, label="node", describe_holder=lambda fd: describe(
            holder(fd)), clock=clock, sleep=sleep, now=now, poll=poll, waiting=waiting) as info:
        yield info
