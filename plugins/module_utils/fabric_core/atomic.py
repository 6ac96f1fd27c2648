"""Files replaced atomically: a reader, or the machine after a crash, sees the old content or the new one,
never a truncated mix.

The new content goes to a temporary file of its own (a unique name, so two writers never share one) in the
same directory, is flushed to disk (fsync), gets its mode (and owner) and is renamed over the old file; the
directory is synced so that the rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import os
import tempfile


def write_file(path: str | os.PathLike, data: str | bytes, *, mode: int = 0o600, owner: tuple[int, int] | None = None,
               ) -> None:
    """Replace ``path`` with ``data`` atomically, with ``mode`` (and ``owner``: (uid, gid)) from the start."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        os.fchmod(fd, mode)  # mkstemp's file is 0600 already; a wider mode only once the content is complete
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        if owner is not None:
            os.chown(tmp, *owner)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    sync_directory(directory)


def sync_directory(directory: str) -> None:
    """fsync a directory (the rename of an entry in it is then on disk)."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
