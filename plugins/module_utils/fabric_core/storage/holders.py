"""Holds that say who placed them: a later run tells a dead holder's hold from a live one's.

A hold a command places for as long as it runs (``fabric:sending`` on the snapshots a replication sends,
``fabric:receiving`` on a receive's base) is released by that command when it ends, however it fails; but a
command killed with SIGKILL, or a node that crashed, releases nothing, and the hold then blocks the snapshot's
destroy and rotation forever. So such a hold's tag carries its holder: ``BASE:BOOT_ID:PID:START`` (the boot of
the node, the process id, the process's start time in clock ticks since boot, ``/proc/PID/stat`` field 22): the
holder is alive exactly when the node still runs that boot and a process with that pid started at that time
(a pid reused by another process has another start time). ``stale`` (pure) says which holds are a dead
holder's; ``release_stale`` releases them (the next run of the command does, at its start); ``leftovers``
lists them for ``fabricctl status`` with the command that releases each by hand.

A tag that is exactly ``BASE`` (placed by a fabricctl before this rule) names no holder: it is never released
here, only listed, with the command that releases it once nobody uses the snapshot.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..base.errors import FabricError
from ..base.runner import Runner
from . import lzc, versions

BOOT_ID = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class Holder:
    """A process of one boot of this node."""

    boot: str
    pid: int
    start: int  # clock ticks after boot (/proc/PID/stat field 22)


def _start_time(stat_text: str) -> int:
    """Field 22 of /proc/PID/stat (the command name, field 2, may hold spaces and parentheses)."""
    return int(stat_text.rpartition(")")[2].split()[19])


def boot_id(proc: str = "/proc") -> str:
    """This boot of the node (a new one at every boot)."""
    with open(proc + BOOT_ID[len("/proc"):]) as fh:
        return fh.read().strip()


def current(proc: str = "/proc") -> Holder:
    """This process, in this boot."""
    with open(f"{proc}/self/stat") as fh:
        text = fh.read()
    return Holder(boot_id(proc), int(text.split(" ", 1)[0]), _start_time(text))


def tag(base: str, holder: Holder | None = None) -> str:
    """The hold tag of ``base`` placed by ``holder`` (this process by default): ``BASE:BOOT:PID:START``."""
    h = holder or current()
    return f"{base}:{h.boot}:{h.pid}:{h.start}"


def parse(text: str, base: str) -> Holder | None:
    """The holder a tag of ``base`` names; None for the bare ``base`` (no holder recorded). ValueError for a
    tag of another base or a malformed one."""
    if text == base:
        return None
    prefix = base + ":"
    if not text.startswith(prefix):
        raise ValueError(f"{text!r} is not a {base} hold")
    boot, pid, start = text[len(prefix):].split(":")
    return Holder(boot, int(pid), int(start))


def alive(holder: Holder, boot: str, read_stat: Callable[[int], str | None]) -> bool:
    """Whether the holder still runs: this boot, and a process with its pid that started when it did."""
    if holder.boot != boot:
        return False
    text = read_stat(holder.pid)
    try:
        return text is not None and _start_time(text) == holder.start
    except (IndexError, ValueError):
        return False


def read_stat(pid: int, proc: str = "/proc") -> str | None:
    """/proc/PID/stat, None when there is no such process."""
    try:
        with open(f"{proc}/{pid}/stat") as fh:
            return fh.read()
    except OSError:
        return None


@dataclass(frozen=True)
class Leftover:
    """A hold of a holder that is gone (``holder`` None: the tag names none, its holder cannot be told)."""

    snapshot: str
    tag: str
    base: str
    holder: Holder | None

    @property
    def release(self) -> str:
        """The command that releases it by hand."""
        return shlex.join(["zfs", "release", self.tag, self.snapshot])

    def to_dict(self) -> dict:
        return {"snapshot": self.snapshot, "tag": self.tag, "holder": None if self.holder is None else
                {"pid": self.holder.pid, "boot": self.holder.boot}, "release": self.release}


def stale(held: dict[str, list[str]], bases: Iterable[str], *, boot: str,
          is_alive: Callable[[Holder], bool]) -> list[Leftover]:
    """The holds of ``bases`` in ``held`` ({snapshot: its hold tags}) whose holder is gone, and those that name
    no holder (pure: ``boot`` is this node's boot id, ``is_alive`` asks whether a holder of this boot runs)."""
    out = []
    for snapshot, tags in sorted(held.items()):
        for text in sorted(tags):
            for base in bases:
                if text != base and not text.startswith(base + ":"):
                    continue
                try:
                    holder = parse(text, base)
                except ValueError:
                    holder = None  # malformed: nobody can be told to hold it
                if holder is None or holder.boot != boot or not is_alive(holder):
                    out.append(Leftover(snapshot, text, base, holder))
    return out


def _held(runner: Runner, roots: Iterable[str]) -> dict[str, list[str]]:
    """{snapshot: its hold tags} of the snapshots under ``roots`` that have holds (one listing per root)."""
    out = {}
    for root in roots:
        for row in versions.list_all_snapshots(runner, root):
            if row.get("userrefs"):
                try:
                    out[row["name"]] = lzc.holds(row["name"])
                except FabricError:
                    continue  # destroyed meanwhile
    return out


def leftovers(runner: Runner, roots: Iterable[str], bases: Iterable[str]) -> list[Leftover]:
    """The holds of ``bases`` under ``roots`` whose holder is gone, or names none."""
    boot = boot_id()
    return stale(_held(runner, roots), tuple(bases), boot=boot,
                 is_alive=lambda h: alive(h, boot, read_stat))


def release_stale(runner: Runner, roots: Iterable[str], bases: Iterable[str]) -> list[Leftover]:
    """Release the holds of ``bases`` under ``roots`` whose holder is gone (those naming no holder are left:
    who placed them cannot be told). Returns what was (or, in a dry run, would be) released."""
    gone = [h for h in leftovers(runner, roots, bases) if h.holder is not None]
    for h in gone:
        lzc.release(h.snapshot, h.tag, runner=runner)
    return gone
