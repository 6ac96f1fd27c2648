"""Copy a source tree into a dataset's staging file system: only what is inside the tree, or nothing.

The copy runs as root and what it copies is published read-only to every GPU node, so no path may lead
outside the source, and a partial copy must never pass for a whole one:

* the tree is walked with directory descriptors (as ``os.fwalk``): every directory is opened relative to
  its parent's descriptor with O_NOFOLLOW and checked to be the directory the walk listed (``os.fwalk``
  silently skips a directory swapped during the walk; here that is an error);
* every file is opened relative to its directory's descriptor with O_NOFOLLOW, checked (a regular file,
  the inode the walk listed) and copied from that descriptor: a file swapped for a symbolic link between
  the walk and the copy fails with ELOOP instead of copying the link's target;
* symbolic links are refused, every one of them named (a link followed as root could copy any file of
  the storage node, /etc/shadow, an SSH key, into a dataset published to every GPU node; copying it as a
  link would put a dangling or misleading link into every GPU node's view). So are special files;
* any file or directory that cannot be read fails the ingest, with its path (a partly unreadable source
  would otherwise give a partial dataset and exit 0);
* a source argument may itself be a symbolic link (the operator's choice, resolved once); a broken one
  or a loop is refused.

``walk(sources)`` yields every regular file with a way to open it; ``plan`` walks everything first (for
the totals, and to refuse before anything is copied); ``copy`` writes one file from its descriptor to a
temporary name beside its destination and renames it into place (mode and times kept).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .errors import UserError

PARTIAL = ".fabric-partial"  # a file being copied; renamed into place when complete
CHUNK = 1 << 20
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a FIFO swapped in never hangs


class IngestRefused(UserError):
    """The source holds what the fabric does not copy (symbolic links, special files), cannot be read, or
    changed under the copy; ``paths`` names each offending path."""

    def __init__(self, problem: str, fix: str, paths: list[str]):
        super().__init__(problem, fix)
        self.paths = paths


@dataclass(frozen=True)
class File:
    """A regular file of the source: where it is, where it goes (relative to the destination root), what the
    walk saw of it."""

    source: str
    rel: str
    size: int
    mtime_ns: int
    atime_ns: int
    mode: int
    identity: tuple  # (st_dev, st_ino)


SYMLINK_FIX = ("replace each link with what it points to (for example copy the source with `cp -rL` first) or "
               "remove it; symbolic links are never copied (followed as root, a link can copy any file of this "
               "node into a dataset that every GPU node reads)")
UNREADABLE_FIX = ("make it readable (or remove it from the source), then run the ingest again: it resumes, files "
                  "already copied are skipped")


def _unreadable(path: str, exc: OSError) -> IngestRefused:
    return IngestRefused(f"cannot read {path}: {exc.strerror or exc}; nothing of a partial source is accepted",
                         UNREADABLE_FIX, [path])


def _open_root(src: str) -> tuple[int, os.stat_result]:
    """The source argument opened (a symbolic link given by the operator is resolved, once): (fd, stat)."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if os.path.islink(src):
            why = "a symbolic link loop" if exc.errno == errno.ELOOP else \
                f"a broken symbolic link (to {os.readlink(src)!r})" if exc.errno == errno.ENOENT else str(exc.strerror)
            raise IngestRefused(f"source {src} is {why}", "give the directory or file itself", [src]) from None
        if exc.errno == errno.ENOENT:
            raise IngestRefused(f"source path does not exist: {src}", "check the path (on this storage node)",
                                [src]) from None
        raise _unreadable(src, exc) from None
    return fd, os.fstat(fd)


def walk(sources: list[str], *, complete: bool = True) -> Iterator[tuple[File, Callable[[], int]]]:
    """Every regular file of the sources, in a stable order, with a function that opens it (valid while the
    walk is at that file). Raises IngestRefused on an unreadable path or a special file; symbolic links are
    collected and refused together once the walk is done (``complete``), or at the first (not ``complete``:
    the copy's walk, where one can only have been swapped in since the plan)."""
    links: list[str] = []
    for src in sources:
        root_fd, st = _open_root(src)
        try:
            if stat.S_ISREG(st.st_mode):
                name = os.path.basename(src.rstrip("/"))
                yield _file(src, name, st), _reopen(root_fd)
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise IngestRefused(f"{src} is not a regular file or a directory", "remove special files from the "
                                    "source", [src])
            base = "" if src.endswith("/") else os.path.basename(src.rstrip("/"))
            yield from _walk_dir(root_fd, src.rstrip("/") or "/", base, links, complete)
        finally:
            os.close(root_fd)
    if links:
        shown = ", ".join(links[:10]) + (f" (and {len(links) - 10} more)" if len(links) > 10 else "")
        raise IngestRefused(f"the source holds {len(links)} symbolic link(s): {shown}", SYMLINK_FIX, links)


def _reopen(fd: int) -> Callable[[], int]:
    return lambda: os.dup(fd)


def _file(path: str, rel: str, st: os.stat_result) -> File:
    return File(path, rel, st.st_size, st.st_mtime_ns, st.st_atime_ns, stat.S_IMODE(st.st_mode),
                (st.st_dev, st.st_ino))


def _walk_dir(dirfd: int, path: str, rel: str, links: list[str], complete: bool) -> Iterator:
    try:
        names = sorted(os.listdir(dirfd))
    except OSError as exc:
        raise _unreadable(path + "/", exc) from None
    subdirs = []
    for name in names:
        child, child_rel = os.path.join(path, name), os.path.join(rel, name) if rel else name
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except OSError as exc:
            raise _unreadable(child, exc) from None
        if stat.S_ISLNK(st.st_mode):
            if not complete:
                raise IngestRefused(f"{child} became a symbolic link during the ingest", SYMLINK_FIX, [child])
            links.append(f"{child} -> {_target(name, dirfd)}")
        elif stat.S_ISDIR(st.st_mode):
            subdirs.append((name, child, child_rel, st))
        elif stat.S_ISREG(st.st_mode):
            yield _file(child, child_rel, st), _opener(dirfd, name, child, st)
        else:
            raise IngestRefused(f"{child} is not a regular file (a device, FIFO or socket)",
                                "remove special files from the source", [child])
    for name, child, child_rel, st in subdirs:
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=dirfd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise IngestRefused(f"{child} became a symbolic link during the ingest", SYMLINK_FIX,
                                    [child]) from None
            raise _unreadable(child + "/", exc) from None
        try:
            if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) != (st.st_dev, st.st_ino):
                raise IngestRefused(f"{child} was replaced during the ingest", "run the ingest again on a source "
                                    "that nothing changes", [child])
            yield from _walk_dir(fd, child, child_rel, links, complete)
        finally:
            os.close(fd)


def _target(name: str, dirfd: int) -> str:
    try:
        return os.readlink(name, dir_fd=dirfd)
    except OSError:
        return "?"


def _opener(dirfd: int, name: str, path: str, seen: os.stat_result) -> Callable[[], int]:
    def open_file() -> int:
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=dirfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise IngestRefused(f"{path} became a symbolic link during the ingest: not copied", SYMLINK_FIX,
                                    [path]) from None
            raise _unreadable(path, exc) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            os.close(fd)
            raise IngestRefused(f"{path} was replaced during the ingest: not copied", "run the ingest again on a "
                                "source that nothing changes", [path])
        return fd
    return open_file


def plan(sources: list[str]) -> list[File]:
    """Every regular file of the sources, after a whole walk: IngestRefused before anything is copied."""
    return [f for f, _opener in walk(sources)]


def up_to_date(dest: str, file: File) -> bool:
    """The destination has this file already (same size and modification time: a resumed ingest skips it)."""
    try:
        st = os.stat(dest, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == file.size and st.st_mtime_ns == file.mtime_ns


def copy(src_fd: int, dest: str, file: File) -> int:
    """Copy from an open source descriptor to ``dest`` (through a temporary name, then renamed), with the
    source's mode and times; returns the bytes copied. Closes ``src_fd``."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = dest + PARTIAL
    copied = 0
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while chunk := os.read(src_fd, CHUNK):
                _write_all(out, chunk)
                copied += len(chunk)
            os.fchmod(out, file.mode)
            os.utime(out, ns=(file.atime_ns, file.mtime_ns))
        finally:
            os.close(out)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    finally:
        os.close(src_fd)
    return copied


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
