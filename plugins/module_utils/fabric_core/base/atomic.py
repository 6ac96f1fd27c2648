"""Files replaced atomically: a reader, or the machine after a crash, sees the old content or the new one,
never a truncated mix. The one way the fabric writes a file (fabricctl and the modules alike).

The new content goes to a temporary file of its own in the same directory: a name nobody can predict, created
with O_CREAT|O_EXCL|O_NOFOLLOW (``tempfile.mkstemp``), so a link planted there in advance is never followed nor
written through, and two writers never share one. It is flushed to disk (fsync), gets its mode and owner through
its descriptor (never by name: the name could be swapped in between) and is renamed over the old file; rename(2)
replaces a symlink at the final name itself, never what it points to. The directory is synced so that the
rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def replacing(path: str | os.PathLike, *, mode: int = 0o600, owner: tuple[int, int] | None = None,
              buffering: int = -1):
    """A binary file object whose content replaces ``path`` atomically, with ``mode`` (and ``owner``: (uid, gid)),
    once the ``with`` block ends without an error; on an error the old file stays and the temporary one goes."""
    path = os.fspath(path)
    import tempfile  # noqa: PLC0415 - lazy: a command's start (docs/testing.md)

    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")  # 0600, O_EXCL|O_NOFOLLOW
    try:
        with os.fdopen(fd, "wb", buffering=buffering) as fh:
            yield fh
            fh.flush()
            if owner is not None:
                os.fchown(fh.fileno(), *owner)
            os.fchmod(fh.fileno(), mode)  # a wider mode only once the content is complete
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    sync_directory(directory)


def write_file(path: str | os.PathLike, data: str | bytes, *, mode: int = 0o600, owner: tuple[int, int] | None = None,
               ) -> None:
    """Replace ``path`` with ``data`` atomically, with ``mode`` (and ``owner``: (uid, gid))."""
    with replacing(path, mode=mode, owner=owner) as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


def sync_directory(directory: str) -> None:
    """fsync a directory (the rename of an entry in it is then on disk)."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def replace_link(path: str | os.PathLike, target: str) -> None:
    """A symbolic link at ``path`` to ``target``, atomically: a new link under a name of its own in the same
    directory, renamed over ``path`` (whatever was there, a link or nothing, is replaced at once; rename(2) never
    follows a link at the final name)."""
    path = os.fspath(path)
    directory, base = os.path.split(path)
    for n in range(100):
        tmp = os.path.join(directory or ".", f".{base}.link-{os.getpid()}-{n}")
        try:
            os.symlink(target, tmp)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {path}: remove the stale .{base}.link-* entries")
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    sync_directory(directory or ".")
