"""The tree: its walk in the manifest's order, and the hashing of its files in worker processes."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from .format import DIRECTORY, FILE, META_DIR, SYMLINK, NotFound, UserError, display

SUBTREE = "subtree"  # walk-internal: enter a directory (sorted under "<path>/")

BATCH = 256  # paths per hashing job
WINDOW_PER_WORKER = 4  # batches in flight per worker
CHUNK = 1 << 20  # read size for files of 1 MiB and more
PROGRESS_EVERY = 0.1  # seconds between progress callbacks

# results of hashing one path (in a worker)
HASH_OK, HASH_GONE, HASH_NOT_REGULAR, HASH_ERROR = 0, 1, 2, 3

Progress = Callable[[int, int], None]


# ---------------------------------------------------------------------------------------------- the walk


def mode_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISREG, FILE), (stat.S_ISDIR, DIRECTORY), (stat.S_ISLNK, SYMLINK),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return "unknown file type"


def _entry_kind(entry: os.DirEntry) -> str:
    if entry.is_symlink():
        return SYMLINK
    if entry.is_dir(follow_symlinks=False):
        return DIRECTORY
    if entry.is_file(follow_symlinks=False):
        return FILE
    return mode_kind(entry.stat(follow_symlinks=False).st_mode)


def _listing(root: bytes, rel: bytes) -> list[tuple]:
    """One directory's entries as sorted (path, kind); each subdirectory also as (path + b"/", SUBTREE)."""
    items: list[tuple] = []
    path = root + b"/" + rel if rel else root
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                name = entry.name
                if not rel and name == META_DIR:
                    continue
                child = rel + b"/" + name if rel else name
                try:
                    kind = _entry_kind(entry)
                except FileNotFoundError:  # removed while we walk
                    continue
                items.append((child, kind))
                if kind == DIRECTORY:
                    items.append((child + b"/", SUBTREE))
    except OSError as err:
        raise UserError(f"cannot list {os.fsdecode(path)}: {err.strerror}",
                        "make the tree readable by this user (fabricctl runs as root)") from err
    items.sort()
    return items


def walk(root: str | bytes) -> Iterator[tuple[bytes, str]]:
    """(relative path, kind) of everything under root but the top-level .fabric, in manifest order."""
    root_b = os.fsencode(root).rstrip(b"/") or b"/"
    stack = [iter(_listing(root_b, b""))]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
        elif item[1] == SUBTREE:
            stack.append(iter(_listing(root_b, item[0][:-1])))
        else:
            yield item


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What the stat cache compares: (inode, size, mtime_ns, ctime_ns)."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# ---------------------------------------------------------------------------------------------- hashing


def _hash_path(path: bytes, expected_size: int) -> tuple:
    """(HASH_OK, hex, size, identity) | (HASH_OK, None, size) when the size is not the expected one (>= 0) |
    (HASH_GONE,) | (HASH_NOT_REGULAR, kind) | (HASH_ERROR, message). identity: (inode, size, mtime_ns, ctime_ns) as
    fstat saw them before the read (a change after it changes the ctime, so the next seal hashes the file again)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return (HASH_GONE,)
    except OSError as err:
        if err.errno == 40:  # ELOOP: replaced by a symlink
            return (HASH_NOT_REGULAR, SYMLINK)
        return (HASH_ERROR, err.strerror)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return (HASH_NOT_REGULAR, mode_kind(st.st_mode))
        if expected_size >= 0 and st.st_size != expected_size:
            return (HASH_OK, None, st.st_size)
        if st.st_size < CHUNK:
            data = os.read(fd, st.st_size + 1)
            if len(data) == st.st_size:  # asked for one byte more: this is the end of the file
                return (HASH_OK, hashlib.sha256(data).hexdigest(), len(data), _identity(st))
            digest, size = hashlib.sha256(data), len(data)
        else:
            digest, size = hashlib.sha256(), 0
        while data := os.read(fd, CHUNK):
            digest.update(data)
            size += len(data)
        if expected_size >= 0 and size != expected_size:
            return (HASH_OK, None, size)
        return (HASH_OK, digest.hexdigest(), size, _identity(st))
    except OSError as err:
        return (HASH_ERROR, err.strerror)
    finally:
        os.close(fd)


def hash_batch(root: bytes, jobs: list[tuple[bytes, int]]) -> list[tuple]:
    """Hash a batch of (relative path, expected size or -1); runs in a worker process."""
    return [_hash_path(root + b"/" + rel, size) for rel, size in jobs]


class Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def pipeline(root: bytes, records: Iterable, job_of: Callable, workers: int) -> Iterator[tuple]:
    """Yield (record, hash result or None) in the order of records; job_of(record) -> (rel, size) | None.

    Jobs are hashed in batches by ``workers`` processes with a bounded number of batches in flight; the
    pool starts only when there is more than one batch.
    """
    window: deque = deque()
    pool = None
    batch: list[tuple] = []
    jobs: list[tuple[bytes, int]] = []

    def submit(last: bool) -> None:
        nonlocal pool
        if pool is None and workers > 1 and not (last and not window):
            from concurrent.futures import ProcessPoolExecutor
            from multiprocessing import get_context

            pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"))
        future = pool.submit(hash_batch, root, jobs) if pool is not None else Done(hash_batch(root, jobs))
        window.append((batch, future))

    def drain() -> Iterator[tuple]:
        records_, future = window.popleft()
        results = future.result()  # one per record with a job, in order
        taken = 0
        for record, has_job in records_:
            if has_job:
                taken += 1
                yield record, results[taken - 1]
            else:
                yield record, None

    try:
        for record in records:
            job = job_of(record)
            batch.append((record, job is not None))
            if job is not None:
                jobs.append(job)
            if len(jobs) >= BATCH or len(batch) >= 4 * BATCH:
                submit(last=False)
                batch, jobs = [], []
                while len(window) > max(1, workers) * WINDOW_PER_WORKER:
                    yield from drain()
        if batch:
            submit(last=True)
        while window:
            yield from drain()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


class Ticker:
    def __init__(self, progress: Progress | None):
        self.progress = progress
        self.last = time.monotonic()

    def tick(self, files: int, size: int, final: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if final or now - self.last >= PROGRESS_EVERY:
            self.last = now
            self.progress(files, size)


def check_root(root: str | bytes) -> bytes:
    root_b = os.fsencode(root)
    try:
        st = os.stat(root_b)
    except FileNotFoundError:
        raise NotFound(f"{os.fsdecode(root_b)} does not exist", "give the root of the dataset's tree") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{os.fsdecode(root_b)} is not a directory", "give the root of the dataset's tree")
    return root_b.rstrip(b"/") or b"/"


def check_workers(workers: int) -> int:
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise UserError(f"workers must be a whole number >= 1, not {workers!r}", "use for example workers=4")
    return workers


def show_path(root: bytes, rel: bytes) -> str:
    return os.fsdecode(root).rstrip("/") + "/" + display(rel)


def hash_error(root: bytes, rel: bytes, result: tuple) -> UserError:
    where = show_path(root, rel)
    if result[0] == HASH_GONE:
        return UserError(f"{where} disappeared while the manifest was built",
                         "leave the tree unchanged while it is sealed")
    if result[0] == HASH_NOT_REGULAR:
        return UserError(f"{where} became a {result[1]} while the manifest was built",
                         "leave the tree unchanged while it is sealed")
    return UserError(f"cannot read {where}: {result[1]}",
                     "make the tree readable by this user (fabricctl runs as root)")


def raise_hash_error(root: bytes, rel: bytes, result: tuple) -> None:
    raise hash_error(root, rel, result)
