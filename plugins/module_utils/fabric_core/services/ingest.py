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
  or a loop is refused;
* a file with hard links is copied only when every one of its links is inside the sources (the walk counts
  the links it meets per inode against ``st_nlink``): a hard link planted in the source to a file elsewhere
  on the node (the same threat as a symbolic link, without a link to see) is refused, named. Links that stay
  inside the sources are copied as independent files (the dataset is read-only: nothing is lost);
* what is copied is exactly what the whole walk checked: the copy goes down the plan's list (``opened``),
  each file reached again by descriptors from its source without following links and accepted only if it
  is the inode the walk checked. A file added to the source after the walk is not copied; a file of the
  plan removed or replaced since fails the ingest.

``walk(sources)`` yields every regular file with a way to open it; ``plan`` walks everything first (for
the totals, and to refuse before anything is copied); ``opened(plan)`` opens the plan's files for the copy;
``copy`` writes one file from its descriptor to a temporary name beside its destination and renames it into
place (mode and times kept).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from ..base.errors import UserError

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
    origin: str = ""  # the source argument it was found under
    inner: str = ""  # its path below that source ("" when the source is the file itself)


SYMLINK_FIX = ("replace each link with what it points to (for example copy the source with `cp -rL` first) or "
               "remove it; symbolic links are never copied (followed as root, a link can copy any file of this "
               "node into a dataset that every GPU node reads)")
HARDLINK_FIX = ("copy such files into the source as files of their own (for example `cp --preserve=all FILE "
                "FILE.tmp && mv FILE.tmp FILE`), or give every directory holding their other links as sources; a "
                "hard link to a file outside the source could copy any file of this node into a dataset that every "
                "GPU node reads")
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
    hard: dict = {}  # (st_dev, st_ino) of a file with several links -> {"nlink", "paths", "seen": {link identity}}
    for src in sources:
        root_fd, st = _open_root(src)
        try:
            if stat.S_ISREG(st.st_mode):
                name = os.path.basename(src.rstrip("/"))
                file = replace(_file(src, name, st), origin=src)
                _count_link(hard, file, st, (_parent_identity(src), name))
                yield file, _reopen(root_fd)
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise IngestRefused(f"{src} is not a regular file or a directory", "remove special files from the "
                                    "source", [src])
            base = "" if src.endswith("/") else os.path.basename(src.rstrip("/"))
            top = src.rstrip("/") or "/"
            found = _walk_dir(root_fd, top, base, links, complete, _Walk(src, (st.st_dev, st.st_ino), hard))
            yield from found
        finally:
            os.close(root_fd)
    if links:
        shown = ", ".join(links[:10]) + (f" (and {len(links) - 10} more)" if len(links) > 10 else "")
        raise IngestRefused(f"the source holds {len(links)} symbolic link(s): {shown}", SYMLINK_FIX, links)
    outside = sorted(p for h in hard.values() if len(h["seen"]) < h["nlink"] for p in h["paths"])
    if outside and complete:
        shown = ", ".join(outside[:10]) + (f" (and {len(outside) - 10} more)" if len(outside) > 10 else "")
        raise IngestRefused(f"the source holds {len(outside)} file(s) with hard links outside it: {shown}",
                            HARDLINK_FIX, outside)


@dataclass(frozen=True)
class _Walk:
    """What the walk of one directory source carries down: its argument, its root's identity, the hard-link
    counts of the whole walk."""

    origin: str
    root: tuple
    hard: dict


def _parent_identity(path: str) -> tuple:
    try:
        st = os.stat(os.path.dirname(os.path.realpath(path)) or "/")
    except OSError:
        return ("?", path)
    return (st.st_dev, st.st_ino)


def _count_link(hard: dict, file: File, st: os.stat_result, link: tuple) -> None:
    """One link of a file met by the walk (``link``: its directory's identity and its name)."""
    if st.st_nlink > 1:
        entry = hard.setdefault(file.identity, {"nlink": st.st_nlink, "paths": [], "seen": set()})
        if link not in entry["seen"]:
            entry["seen"].add(link)
            entry["paths"].append(file.source)


def _reopen(fd: int) -> Callable[[], int]:
    return lambda: os.dup(fd)


def _file(path: str, rel: str, st: os.stat_result) -> File:
    return File(path, rel, st.st_size, st.st_mtime_ns, st.st_atime_ns, stat.S_IMODE(st.st_mode),
                (st.st_dev, st.st_ino))


def _walk_dir(dirfd: int, path: str, rel: str, links: list[str], complete: bool, how: _Walk,
              inner: str = "", here: tuple = ()) -> Iterator:
    here = here or how.root
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
            file = replace(_file(child, child_rel, st), origin=how.origin, inner=f"{inner}/{name}" if inner else name)
            _count_link(how.hard, file, st, (here, name))
            yield file, _opener(dirfd, name, child, st)
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
            yield from _walk_dir(fd, child, child_rel, links, complete, how, f"{inner}/{name}" if inner else name,
                                 (st.st_dev, st.st_ino))
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


def opened(files: list[File]) -> Iterator[tuple[File, Callable[[], int]]]:
    """The plan's files, in its order, each with a function that opens it for the copy: reached again from its
    source argument, one directory descriptor at a time without following links, and accepted only if it is
    the regular file (the inode) the walk checked. Nothing else is ever opened: a file added to the source
    after the walk is not copied. The function is valid until the next file is yielded."""
    held: dict = {}  # the open directory chain of the previous file: (origin, directory path) -> fd
    try:
        for file in files:
            yield file, _planned_opener(file, held)
    finally:
        for fd in held.values():
            os.close(fd)


def _planned_opener(file: File, held: dict) -> Callable[[], int]:
    def open_file() -> int:
        if not file.inner:  # the source argument is the file itself
            fd, _st = _open_root(file.origin)
            return _checked(fd, file)
        directory, _slash, name = file.inner.rpartition("/")
        dirfd = _directory(file, directory, held)
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=dirfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise IngestRefused(f"{file.source} became a symbolic link during the ingest: not copied",
                                    SYMLINK_FIX, [file.source]) from None
            raise _unreadable(file.source, exc) from None
        return _checked(fd, file)
    return open_file


def _directory(file: File, directory: str, held: dict) -> int:
    """The descriptor of ``directory`` (a path below the file's source) opened from the source without following
    a link; the chain of the previous file is kept while the files stay in it."""
    key = (file.origin, directory)
    if key in held:
        return held[key]
    for fd in held.values():
        os.close(fd)
    held.clear()
    fd, st = _open_root(file.origin)
    if not stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise IngestRefused(f"{file.origin} is no longer a directory", "run the ingest again on a source that "
                            "nothing changes", [file.origin])
    where = file.origin.rstrip("/")
    for part in directory.split("/") if directory else ():
        where = f"{where}/{part}"
        try:
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise IngestRefused(f"{where} became a symbolic link during the ingest", SYMLINK_FIX,
                                    [where]) from None
            raise _unreadable(where + "/", exc) from None
        os.close(fd)
        fd = child
    held[key] = fd
    return fd


def _checked(fd: int, file: File) -> int:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != file.identity:
        os.close(fd)
        raise IngestRefused(f"{file.source} was replaced during the ingest: not copied", "run the ingest again on a "
                            "source that nothing changes", [file.source])
    return fd


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
