"""Read-only bind mounts of a mounted version, and what is mounted where: the CSI node plugin's mechanism.

The agent mounts a version once, read-only, at MOUNT_ROOT/NAME/VERSION (``node.agent``). A CSI node plugin
(``fabric_csi``) shows it to the kubelet at two more places: the volume's staging path (NodeStageVolume) and
each pod's target path (NodePublishVolume). Each is a bind mount of the version's mount made read-only at the
mount point too: ``mount --bind`` then ``mount -o remount,bind,ro,...`` (MS_BIND, then MS_REMOUNT|MS_BIND|
MS_RDONLY), so that the pod's path refuses writes whatever the file system's own flags, while the LUN under it
is read-only on the storage node anyway (a write-protected mapped LUN of a read-only backstore).

One path holds one mount. ``ensure_readonly_bind`` reads every mount stacked at the path (``findmnt
--mountpoint`` lists them all, the bottom one first) and keeps the path as it is only when it holds exactly one
mount, of the source's file system (device number and root) and read-only with the wanted flags; anything else
there (a stale bind of a device that went away, a second mount stacked on the first after a reconnect, a
writable bind) is unmounted, layer by layer, before the one bind is made. A bind whose read-only remount fails
is unmounted again: a writable bind is never left behind.

Every command goes through the runner (a dry run plans the mounts and still reads), and every path is checked
first: absolute, normalized, printable, at most ``PATH_MAX`` bytes.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
from dataclasses import dataclass

from ..base.errors import CommandError, FabricError, InvalidName, NotFound, UserError

PATH_MAX = 4096
# the per-mount flags a bind may carry (VFS flags, as `mount -o remount,bind` sets them); "ro" always
BIND_FLAGS = ("ro", "nosuid", "nodev", "noexec", "noatime", "nodiratime", "relatime", "strictatime")
DEFAULT_FLAGS = ("ro", "nosuid", "nodev")  # what every bind of a version has (the agent's mount has them too)
COLUMNS = "TARGET,MAJ:MIN,FSROOT,VFS-OPTIONS"
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


@dataclass(frozen=True)
class MountEntry:
    """One mount as findmnt lists it: where, of which file system (its device number and the root of the
    file system the mount shows) and its per-mount options."""

    target: str
    device: str  # MAJ:MIN
    root: str  # FSROOT: "/" for the whole file system
    options: tuple = ()

    @property
    def readonly(self) -> bool:
        return "ro" in self.options

    def same_filesystem(self, other: MountEntry) -> bool:
        return (self.device, self.root) == (other.device, other.root)


def validate_path(path: str, what: str = "path") -> str:
    """An absolute, normalized path without control characters, at most PATH_MAX bytes (the paths a kubelet
    gives: its staging and target paths)."""
    if not isinstance(path, str) or not path:
        raise InvalidName(f"the {what} is missing", "the container orchestrator sets it (a CSI request field)")
    if not path.isprintable() or len(path.encode()) > PATH_MAX:
        raise InvalidName(f"the {what} {path[:80]!r} has a control character or is longer than {PATH_MAX} bytes",
                          "give an absolute path of printable characters")
    if not path.startswith("/") or posixpath.normpath(path) != path or path == "/":
        raise InvalidName(f"the {what} {path!r} is not an absolute, normalized path (no '..', '.', '//' or "
                          "trailing '/'; not '/')", "give the directory's absolute path")
    return path


def check_flags(flags) -> tuple:
    """The per-mount flags of a bind (``BIND_FLAGS``; ``DEFAULT_FLAGS`` always), sorted, or InvalidName."""
    wanted = set(DEFAULT_FLAGS)
    for flag in flags or ():
        if flag not in BIND_FLAGS:
            raise InvalidName(f"mount option {flag!r} is not one a read-only bind of a version takes",
                              f"use only {', '.join(BIND_FLAGS)} (or none): the version is mounted read-only as it "
                              "is, with the file system's own options")
        wanted.add(flag)
    return tuple(sorted(wanted))


def _unescape(text: str) -> str:
    """findmnt -r writes a space, a tab, a backslash and other bytes of a path as \\xHH."""
    if "\\x" not in text:
        return text
    raw = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
    return raw.encode("latin-1", "surrogateescape").decode("utf-8", "replace")


def parse_findmnt(text: str) -> list[MountEntry]:
    """`findmnt -rn -o TARGET,MAJ:MIN,FSROOT,VFS-OPTIONS` -> entries, in its order."""
    out = []
    for line in text.splitlines():
        words = line.split(" ")
        if len(words) < 4:
            continue
        target, device, root, options = words[:4]
        out.append(MountEntry(_unescape(target), device, _unescape(root), tuple(options.split(","))))
    return out


def entries(runner, path: str) -> list[MountEntry]:
    """The mounts stacked at ``path``, the bottom one first ([] when nothing is mounted there)."""
    res = runner.run(["findmnt", "-rn", "-o", COLUMNS, "--mountpoint", path], check=False)
    if res.rc != 0:
        return []
    return [e for e in parse_findmnt(res.stdout) if e.target == path]


def mounted(runner, path: str) -> MountEntry | None:
    """The mount one sees at ``path`` (the top of a stack), or None."""
    found = entries(runner, path)
    return found[-1] if found else None


def all_entries(runner) -> list[MountEntry]:
    """Every mount of the node's mount table."""
    res = runner.run(["findmnt", "-rn", "-o", COLUMNS], check=False)
    return parse_findmnt(res.stdout) if res.rc == 0 else []


def binds_of(runner, entry: MountEntry, *, besides: tuple = ()) -> list[str]:
    """The other mount points of ``entry``'s file system (same device and root), ``besides`` those named."""
    skip = {entry.target, *besides}
    return sorted({e.target for e in all_entries(runner) if e.same_filesystem(entry) and e.target not in skip})


def is_bind_of(runner, source: str, target: str, flags=()) -> bool:
    """Whether ``target`` holds exactly one mount, a read-only bind of what is mounted at ``source`` with
    ``flags``."""
    src = mounted(runner, source)
    have = entries(runner, target)
    return src is not None and _settled(have, src, check_flags(flags))


def _settled(have: list[MountEntry], src: MountEntry, flags: tuple) -> bool:
    return len(have) == 1 and have[0].same_filesystem(src) and set(flags) <= set(have[0].options)


def _umount_all(runner, path: str, count: int) -> list[str]:
    """Unmount every layer at ``path`` (``count`` of them), top first. A layer in use is refused (Busy)."""
    commands = []
    for layer in range(count, 0, -1):
        try:
            runner.run(["umount", path], mutating=True)
        except CommandError as err:
            raise FabricError(f"cannot unmount {path} (layer {layer} of {count}): "
                              f"{(err.stderr or err.stdout).strip() or f'exit {err.rc}'}",
                              "stop what uses it (`fuser -vm PATH`), then try again") from None
        commands.append(f"umount {path}")
    return commands


def ensure_readonly_bind(runner, source: str, target: str, *, flags=(), make_dir: bool = True) -> dict:
    """``target`` holds one mount: a read-only bind of the file system mounted at ``source`` (see the module's
    docstring). Returns {changed, commands, replaced (the layers unmounted first)}."""
    validate_path(source, "source path")
    validate_path(target, "target path")
    wanted = check_flags(flags)
    src = mounted(runner, source)
    if src is None:
        raise NotFound(f"nothing is mounted at {source}", "attach the version first")
    have = entries(runner, target)
    if _settled(have, src, wanted):
        return {"changed": False, "commands": [], "replaced": 0}
    commands = _umount_all(runner, target, len(have))
    if make_dir:
        runner.run(["mkdir", "-p", target], mutating=True)
        commands.append(f"mkdir -p {target}")
    runner.run(["mount", "--bind", source, target], mutating=True)
    commands.append(f"mount --bind {source} {target}")
    remount = ["mount", "-o", "remount,bind," + ",".join(wanted), target]
    try:
        runner.run(remount, mutating=True)
    except CommandError as err:
        with contextlib.suppress(CommandError):
            runner.run(["umount", target], mutating=True)  # never leave a writable bind
        raise FabricError(f"cannot make the bind at {target} read-only: {err.stderr.strip() or f'exit {err.rc}'}",
                          "check the kernel's mount flags support (util-linux mount, MS_REMOUNT|MS_BIND)") from None
    commands.append(" ".join(remount))
    if not runner.dry_run:
        after = entries(runner, target)
        if not _settled(after, src, wanted):
            seen = "; ".join(f"{e.device}{e.root} " + ",".join(e.options) for e in after) or "nothing"
            raise FabricError(f"{target} is not a read-only bind of {source} after mounting it ({seen})",
                              "check the node's mount table (`findmnt --mountpoint PATH`)")
    return {"changed": True, "commands": commands, "replaced": len(have)}


def remove_bind(runner, target: str, *, remove_dir: bool = False) -> dict:
    """Every mount at ``target`` unmounted (a missing path or nothing mounted: nothing to do), then, with
    ``remove_dir``, the directory removed when it is empty. Returns {changed, commands}."""
    validate_path(target, "target path")
    have = entries(runner, target)
    commands = _umount_all(runner, target, len(have))
    if remove_dir and runner.run(["test", "-d", target], check=False).rc == 0:
        if runner.run(["rmdir", target], check=False, mutating=True).rc == 0:
            commands.append(f"rmdir {target}")
    return {"changed": bool(commands), "commands": commands}


def usage(runner, path: str) -> dict:
    """Bytes and inodes of the file system mounted at ``path``: {bytes: {total, used, available}, inodes: {...}}
    (df, through the runner)."""
    validate_path(path)
    res = runner.run(["df", "--block-size=1", "--output=size,used,avail,itotal,iused,iavail", path], check=False)
    lines = [line.split() for line in res.stdout.splitlines() if line.strip()]
    if res.rc != 0 or len(lines) < 2 or len(lines[-1]) != 6:
        raise UserError(f"cannot read the usage of {path}: {res.stderr.strip() or 'no answer from df'}",
                        "check that the volume is mounted there")
    try:
        size, used, avail, itotal, iused, iavail = (max(0, int(w)) if w != "-" else 0 for w in lines[-1])
    except ValueError:
        raise UserError(f"cannot read the usage of {path}: df printed {' '.join(lines[-1])!r}") from None
    return {"bytes": {"total": size, "used": used, "available": avail},
            "inodes": {"total": itotal, "used": iused, "available": iavail}}
