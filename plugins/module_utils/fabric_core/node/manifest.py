"""Dataset manifest: every file's relative path, size and SHA-256, built and verified as a stream.

``fabricctl dataset seal`` builds it (``build``) into ``ROOT/.fabric/manifest.tsv`` so that it travels
inside the filesystem with the snapshot, and puts ``files``, ``bytes`` and the manifest's own SHA-256 in
the snapshot's user properties. ``fabricctl verify`` checks a tree against it (``verify``) on the storage
node, or on a GPU node where the version is mounted: fabricctl copies this one file there and runs it as
a script, so it uses only the standard library and works without its package::

    python3 manifest.py build  ROOT [OUT]      [--workers N] [--json] [--progress]
    python3 manifest.py verify ROOT [MANIFEST] [--workers N] [--json] [--progress]

(OUT and MANIFEST default to ROOT/.fabric/manifest.tsv.) Exit codes: 0 ok, 1 differences found or bad
input (message on stderr), 130 interrupted. Imported as ``fabric_core.node.manifest`` it raises the typed
errors of ``fabric_core.base.errors``; run as a script, plain messages.

Format (UTF-8 text, lines ending in ``\\n``, fields separated by one tab)::

    # fabric-manifest v1 sha256
    <sha256 hex, 64 lowercase>\\t<size in bytes>\\t<path>          a regular file
    D\\t-\\t<path>                                                  a directory (every one, empty or not)
    L\\t-\\t<path>\\t<target>                                        a symbolic link (not followed)
    # end files=<n> bytes=<n> dirs=<n> symlinks=<n>

- ``<path>`` is relative to ROOT, components joined by ``/``. The top-level directory ``.fabric`` (where
  the manifest lives) is left out of the walk and of verification; a ``.fabric`` deeper in the tree is
  ordinary content. ROOT itself is not listed.
- Order: lines are sorted by the path's raw bytes (the name as the kernel holds it; on Linux the
  surrogateescape encoding of the str), strictly increasing, no duplicates. A directory's own line sits
  at its name (``a``) while its contents sit under ``a/``: ``a`` < ``a.txt`` (``.`` is 0x2e) < ``a/x``
  (``/`` is 0x2f) < ``a0``. The walk produces this order without a global sort: each directory's
  entries are sorted by path, with each subdirectory entered a second time under ``<path>/``.
- Escaping, in ``<path>`` and ``<target>``: backslash -> ``\\\\``, tab -> ``\\t``, newline -> ``\\n``,
  carriage return -> ``\\r``, and every byte that is not part of valid UTF-8 -> ``\\xHH`` (two lowercase
  hex digits). Everything else is written as it is (UTF-8). Sorting is on the unescaped bytes.
- Only regular files count in ``files`` and ``bytes``. Permissions, owners and times are not recorded.
  FIFOs, sockets and device nodes are refused by ``build`` (an error naming the path).
- The trailer makes a truncated manifest detectable. The manifest digest is the SHA-256 of the file's
  bytes.

Memory: the walk holds the sorted listing of each directory on the current path (so one directory of
n entries costs O(n)); ``build`` also the results of the directories scanned ahead (at most ``workers * 4``),
``verify`` the batches in flight (at most ``workers * 4`` batches of 256 paths) and the differences found.
Never the whole file list.

Parallelism: ``build`` scans whole directories in ``workers`` processes (``spawn``): listing, lstat, the stat
cache's lookup and the hashing of what changed, ahead of the order it writes in, so that the calling process
only joins each directory's lines; a directory with many files to hash has them spread over the pool in batches.
``verify`` walks in the calling process and hashes batches of paths in the workers (threads hashing many
small files are bound by the GIL). Either starts no pool for a tree of at most one batch (256 files).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import heapq
import json
import os
import re
import stat
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import asdict, dataclass, field

try:  # the core's atomic writer (build writes the manifest through it)
    from ..base import atomic
except ImportError:  # run as a script: the core's base/atomic.py (standard library only), when in its tree
    def _atomic_of_the_tree():
        import importlib.util  # noqa: PLC0415 - only when run as a script

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "base", "atomic.py")
        if not os.path.isfile(path):  # copied alone (verify on a GPU node): build refuses
            return None
        spec = importlib.util.spec_from_file_location("fabric_core_atomic", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    atomic = _atomic_of_the_tree()

try:  # part of the fabric_core package: its typed errors
    from ..base.errors import NotFound, UserError
except ImportError:  # run as a standalone script (e.g. copied to a GPU node): plain errors

    class UserError(Exception):  # type: ignore[no-redef]
        exit_code = 1

        def __init__(self, problem: str, fix: str = ""):
            super().__init__(problem)
            self.problem = problem
            self.fix = fix

        def __str__(self) -> str:
            return f"{self.problem}\n  fix: {self.fix}" if self.fix else self.problem

    class NotFound(UserError):  # type: ignore[no-redef]
        pass


HEADER = b"# fabric-manifest v1 sha256\n"
TRAILER_PREFIX = b"# end "
META_DIR = b".fabric"
MANIFEST_RELPATH = ".fabric/manifest.tsv"

FILE, DIRECTORY, SYMLINK = "file", "directory", "symlink"
_SUBTREE = "subtree"  # walk-internal: enter a directory (sorted under "<path>/")

_BATCH = 256  # paths per hashing job
_WINDOW_PER_WORKER = 4  # batches in flight per worker
_CHUNK = 1 << 20  # read size for files of 1 MiB and more
_PROGRESS_EVERY = 0.1  # seconds between progress callbacks

# results of hashing one path (in a worker)
_OK, _GONE, _NOT_REGULAR, _ERROR = 0, 1, 2, 3

Progress = Callable[[int, int], None]


# ---------------------------------------------------------------------------------------------- escaping

_ESCAPE_RE = re.compile("[\\\\\t\n\r\udc80-\udcff]")
_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPE_RE = re.compile(rb"\\(x[0-9a-f]{2}|[\\tnr]|)")
_UNESCAPES = {b"\\": b"\\", b"t": b"\t", b"n": b"\n", b"r": b"\r"}


def _escape_char(match: re.Match) -> str:
    char = match.group()
    return _ESCAPES.get(char) or f"\\x{ord(char) - 0xDC00:02x}"


def escape(raw: bytes) -> bytes:
    """A path or link target as written in the manifest: valid UTF-8 without tab, newline or CR."""
    text = raw.decode("utf-8", "surrogateescape")
    if _ESCAPE_RE.search(text) is None:
        return raw
    return _ESCAPE_RE.sub(_escape_char, text).encode("utf-8")


def _unescape_sequence(match: re.Match) -> bytes:
    code = match.group(1)
    if not code:
        raise ValueError(f"a backslash that starts no escape sequence at byte {match.start()}")
    return bytes([int(code[1:], 16)]) if code[:1] == b"x" else _UNESCAPES[code]


def unescape(text: bytes) -> bytes:
    """Inverse of escape(); ValueError on a backslash that starts no known sequence."""
    if b"\\" not in text:
        return text
    return _UNESCAPE_RE.sub(_unescape_sequence, text)


def display(raw: bytes) -> str:
    """A relative path for people and JSON: its escaped manifest form."""
    return escape(raw).decode("utf-8")


# ---------------------------------------------------------------------------------------------- results


@dataclass
class Summary:
    """What a manifest holds: regular files and their bytes (the snapshot's properties), and its digest."""

    files: int
    bytes: int
    manifest_sha256: str
    seconds: float
    dirs: int = 0
    symlinks: int = 0
    path: str = ""
    hashed: int = 0  # files read and hashed (all of them but those reused from the stat cache)
    reused: int = 0  # files whose digest came from the previous seal's stat cache, unread
    cache_sha256: str = ""  # the stat cache written beside the manifest ("" when none)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Difference:
    path: str  # escaped relative path, as in the manifest
    expected: str | int | None
    actual: str | int | None

    def to_dict(self) -> dict:
        return asdict(self)


KINDS = ("missing", "extra", "type_changed", "size_changed", "digest_changed", "target_changed")


@dataclass
class Report:
    """Every difference between a tree and its manifest. ``files``/``bytes``: what the manifest lists."""

    root: str
    manifest: str
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    missing: list[Difference] = field(default_factory=list)  # expected: kind; actual: None
    extra: list[Difference] = field(default_factory=list)  # expected: None; actual: kind
    type_changed: list[Difference] = field(default_factory=list)  # kind -> kind
    size_changed: list[Difference] = field(default_factory=list)  # bytes -> bytes
    digest_changed: list[Difference] = field(default_factory=list)  # sha256 -> sha256 (same size)
    target_changed: list[Difference] = field(default_factory=list)  # symlink target -> target

    @property
    def ok(self) -> bool:
        return not any(getattr(self, kind) for kind in KINDS)

    def count(self) -> int:
        return sum(len(getattr(self, kind)) for kind in KINDS)

    def to_dict(self) -> dict:
        out: dict = {"ok": self.ok, "root": self.root, "manifest": self.manifest, "files": self.files,
                     "bytes": self.bytes, "seconds": round(self.seconds, 3), "differences": self.count()}
        for kind in KINDS:
            out[kind] = [diff.to_dict() for diff in getattr(self, kind)]
        return out


# ---------------------------------------------------------------------------------------------- the walk


def _mode_kind(mode: int) -> str:
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
    return _mode_kind(entry.stat(follow_symlinks=False).st_mode)


def _listing(root: bytes, rel: bytes) -> list[tuple]:
    """One directory's entries as sorted (path, kind); each subdirectory also as (path + b"/", _SUBTREE)."""
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
                    items.append((child + b"/", _SUBTREE))
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
        elif item[1] == _SUBTREE:
            stack.append(iter(_listing(root_b, item[0][:-1])))
        else:
            yield item


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What the stat cache compares: (inode, size, mtime_ns, ctime_ns)."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# ---------------------------------------------------------------------------------------------- hashing


def _hash_path(path: bytes, expected_size: int) -> tuple:
    """(_OK, hex, size, identity) | (_OK, None, size) when the size is not the expected one (>= 0) |
    (_GONE,) | (_NOT_REGULAR, kind) | (_ERROR, message). identity: (inode, size, mtime_ns, ctime_ns) as fstat
    saw them before the read (a change after it changes the ctime, so the next seal hashes the file again)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return (_GONE,)
    except OSError as err:
        if err.errno == 40:  # ELOOP: replaced by a symlink
            return (_NOT_REGULAR, SYMLINK)
        return (_ERROR, err.strerror)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return (_NOT_REGULAR, _mode_kind(st.st_mode))
        if expected_size >= 0 and st.st_size != expected_size:
            return (_OK, None, st.st_size)
        if st.st_size < _CHUNK:
            data = os.read(fd, st.st_size + 1)
            if len(data) == st.st_size:  # asked for one byte more: this is the end of the file
                return (_OK, hashlib.sha256(data).hexdigest(), len(data), _identity(st))
            digest, size = hashlib.sha256(data), len(data)
        else:
            digest, size = hashlib.sha256(), 0
        while data := os.read(fd, _CHUNK):
            digest.update(data)
            size += len(data)
        if expected_size >= 0 and size != expected_size:
            return (_OK, None, size)
        return (_OK, digest.hexdigest(), size, _identity(st))
    except OSError as err:
        return (_ERROR, err.strerror)
    finally:
        os.close(fd)


def _hash_batch(root: bytes, jobs: list[tuple[bytes, int]]) -> list[tuple]:
    """Hash a batch of (relative path, expected size or -1); runs in a worker process."""
    return [_hash_path(root + b"/" + rel, size) for rel, size in jobs]


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def _pipeline(root: bytes, records: Iterable, job_of: Callable, workers: int) -> Iterator[tuple]:
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
        future = pool.submit(_hash_batch, root, jobs) if pool is not None else _Done(_hash_batch(root, jobs))
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
            if len(jobs) >= _BATCH or len(batch) >= 4 * _BATCH:
                submit(last=False)
                batch, jobs = [], []
                while len(window) > max(1, workers) * _WINDOW_PER_WORKER:
                    yield from drain()
        if batch:
            submit(last=True)
        while window:
            yield from drain()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


class _Ticker:
    def __init__(self, progress: Progress | None):
        self.progress = progress
        self.last = time.monotonic()

    def tick(self, files: int, size: int, final: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if final or now - self.last >= _PROGRESS_EVERY:
            self.last = now
            self.progress(files, size)


def _check_root(root: str | bytes) -> bytes:
    root_b = os.fsencode(root)
    try:
        st = os.stat(root_b)
    except FileNotFoundError:
        raise NotFound(f"{os.fsdecode(root_b)} does not exist", "give the root of the dataset's tree") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{os.fsdecode(root_b)} is not a directory", "give the root of the dataset's tree")
    return root_b.rstrip(b"/") or b"/"


def _check_workers(workers: int) -> int:
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise UserError(f"workers must be a whole number >= 1, not {workers!r}", "use for example workers=4")
    return workers


# ---------------------------------------------------------------------------------------------- build


def default_path(root: str | bytes) -> str:
    return os.path.join(os.fsdecode(root), MANIFEST_RELPATH)


def build(root: str | bytes, out_path: str | bytes, *, workers: int = 4, progress: Progress | None = None,
          cache_out: str | bytes | None = None, reuse: str | bytes | None = None,
          reuse_sha256: str | None = None) -> Summary:
    """Write the manifest of the tree at root to out_path (atomically) and return its Summary.

    out_path is normally ROOT/.fabric/manifest.tsv; it may not be elsewhere inside the tree. ``cache_out``
    (normally ROOT/.fabric/stat-cache.tsv): also write the stat cache of this build (see the stat cache below).
    ``reuse``: a stat cache the caller trusts (the previous seal's); a file whose name, inode, size, mtime and ctime
    are those the cache lists gets the cache's digest without being read, every other file is hashed.
    ``reuse_sha256``: the SHA-256 that cache must have (the one the previous version recorded), checked while the
    build runs (read once, in a thread) and before anything is renamed into place: StaleCache when it differs.

    Directories are scanned (listed, each regular file lstat'ed through the directory's descriptor and looked up in
    the cache, the others read and hashed) by ``workers`` processes, ahead of the order the manifest is written in;
    this process only joins each directory's lines. Raises NotFound (no root, no cache), UserError (a special file,
    an unreadable file or directory, a bad out_path, a cache that is not intact).
    """
    started = time.monotonic()
    started_ns = time.time_ns()
    root_b = _check_root(root)
    workers = _check_workers(workers)
    out = _check_out(root_b, out_path)
    cache_path = _check_out(root_b, cache_out) if cache_out is not None else None
    if atomic is None:
        raise UserError("manifest.py build needs fabric_core's base/atomic.py (the one file writer)",
                        "run it from the core's tree (node/manifest.py beside base/), or run `fabricctl dataset seal` "
                        "on the storage node")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    reuse_b = os.fsencode(reuse) if reuse is not None else None
    check = _CacheCheck(reuse_b, reuse_sha256) if reuse_b is not None and reuse_sha256 is not None else None
    index = _cache_index(reuse_b) if reuse_b is not None else {}
    digest, cache_digest = hashlib.sha256(), hashlib.sha256()
    counts = [0] * 6  # files, bytes, dirs, symlinks, hashed, reused
    ticker = _Ticker(progress)
    # a ctime from RACY_NS before this build's start on is too close to this read to be trusted by the next one
    scans = _Scans(root_b, reuse_b, index, started_ns - RACY_NS, workers)
    groups = 0
    with contextlib.ExitStack() as stack:
        stack.callback(scans.close)  # the pool shut on errors too
        # temporary names nobody can predict (O_EXCL|O_NOFOLLOW), renamed over out (and the cache) once complete
        cache = stack.enter_context(atomic.replacing(cache_path, mode=0o644, buffering=1 << 20)) if cache_path \
            else None
        manifest = stack.enter_context(atomic.replacing(out, mode=0o644, buffering=1 << 20))
        manifest.write(HEADER)
        digest.update(HEADER)
        if cache is not None:
            cache.write(CACHE_HEADER)
            cache_digest.update(CACHE_HEADER)
        walking = [b""]
        pieces_stack = []
        while walking or pieces_stack:
            if walking:
                rel = walking.pop()
                pieces, group, dir_counts = scans.take(rel)
                for i, n in enumerate(dir_counts):
                    counts[i] += n
                if cache is not None and group:
                    head = b"P\t%s\t%d\n" % (escape(rel), len(group))
                    for part in (head, group):
                        cache.write(part)
                        cache_digest.update(part)
                    groups += 1
                pieces_stack.append(iter(pieces))
                ticker.tick(counts[0], counts[1])
            piece = next(pieces_stack[-1], None)
            if piece is None:
                pieces_stack.pop()
            elif piece.__class__ is tuple:  # a subdirectory: its subtree comes here
                walking.append(piece[0])
            else:
                manifest.write(piece)
                digest.update(piece)
        files, total, dirs, links, hashed, reused = counts
        trailer = b"%sfiles=%d bytes=%d dirs=%d symlinks=%d\n" % (TRAILER_PREFIX, files, total, dirs, links)
        manifest.write(trailer)
        digest.update(trailer)
        if cache is not None:
            trailer = b"%sdirs=%d\n" % (TRAILER_PREFIX, groups)
            cache.write(trailer)
            cache_digest.update(trailer)
        if check is not None:
            check.finish()  # before either file is renamed into place
    ticker.tick(files, total, final=True)
    return Summary(files=files, bytes=total, manifest_sha256=digest.hexdigest(),
                   seconds=time.monotonic() - started, dirs=dirs, symlinks=links, path=out, hashed=hashed,
                   reused=reused, cache_sha256=cache_digest.hexdigest() if cache is not None else "")


def _check_out(root_b: bytes, out_path: str | bytes) -> str:
    """An output path of build: outside the tree, or under its top-level .fabric (left out of the walk)."""
    out = os.path.abspath(os.fsdecode(out_path))
    real_root = os.path.realpath(os.fsdecode(root_b))
    real_out = os.path.join(os.path.realpath(os.path.dirname(out)), os.path.basename(out))
    inside = real_out.startswith(real_root.rstrip("/") + "/")
    if inside and not real_out.startswith(os.path.join(real_root, ".fabric") + "/"):
        raise UserError(f"the manifest {out} would be inside the tree it lists ({real_root})",
                        f"write it to {default_path(real_root)} (excluded from the walk) or outside the tree")
    return out


# ---------------------------------------------------------------------------------------------- one directory
#
# A build scans each directory once, in a worker (``_scan``): it opens the directory, lists it (os.scandir: the
# kind of each entry from d_type, no stat), lstat()s each regular file through the directory's descriptor
# (fstatat: one path component, not the whole path), sorts the entries by their raw bytes (subdirectories also
# under "<name>/", where their subtrees go), looks each file up in its directory's group of the stat cache by
# (name, inode, size, mtime, ctime), hashes the others (in the worker when they are few: at most _BATCH files and
# _INLINE_BYTES; else the calling process spreads them over the pool in batches) and returns the directory's
# manifest lines, joined between its subdirectories, and its new group of the stat cache.

_INLINE_BYTES = 64 << 20  # a directory's files to hash, in bytes, that its scan hashes itself
_HEX_RUN = re.compile(r"[0-9a-f]+")  # a group's digests, joined


def _escape_str(name: str) -> str:
    return _ESCAPE_RE.sub(_escape_char, name)


def _scan(root: bytes, rel: bytes, cache: bytes | None, span: tuple[int, int] | None,
          trusted_before: int) -> tuple:
    """Scan one directory of a build (in a worker): ("error", problem, fix) | ("done", pieces, group, counts) |
    ("partial", lines, group lines, pending, jobs, counts) when it left more than it hashes itself to the caller."""
    path = root + b"/" + rel if rel else root
    try:
        cached = _cached_group(cache, span, rel) if span is not None else {}
    except UserError as err:
        return ("error", err.problem, err.fix)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        return ("error", f"cannot list {os.fsdecode(path)}: {err.strerror}",
                "make the tree readable by this user (fabricctl runs as root), and leave it unchanged while it is "
                "sealed")
    try:
        return _scan_open(root, rel, fd, cached, trusted_before)
    except OSError as err:
        return ("error", f"cannot read {os.fsdecode(path)}: {err.strerror}",
                "make the tree readable by this user (fabricctl runs as root)")
    finally:
        os.close(fd)


def _scan_open(root: bytes, rel: bytes, fd: int, cached: dict, trusted_before: int) -> tuple:
    files: list = []  # (name, lstat) of the regular files
    others: list = []  # (name, kind) of the rest
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                if entry.is_file(follow_symlinks=False):
                    files.append((entry.name, entry.stat(follow_symlinks=False)))
                elif entry.is_symlink():
                    others.append((entry.name, SYMLINK))
                elif entry.is_dir(follow_symlinks=False):
                    others.append((entry.name, DIRECTORY))
                else:
                    others.append((entry.name, _mode_kind(entry.stat(follow_symlinks=False).st_mode)))
            except FileNotFoundError:  # removed while we walk
                continue
    if not rel:
        files = [item for item in files if item[0] != ".fabric"]
        others = [item for item in others if item[0] != ".fabric"]
    joined = "\0".join([item[0] for item in files] + [item[0] for item in others])
    plain = _ESCAPE_RE.search(joined) is None  # no name needs escaping (the common case: one test, not one a name)
    order = _first if joined.isascii() else _raw_first  # ASCII: str order is byte order
    files.sort(key=order)
    names = [item[0] for item in files] if plain else [_escape_str(item[0]) for item in files]
    keys = [f"{name}\t{st.st_ino}\t{st.st_size}\t{st.st_mtime_ns}\t{st.st_ctime_ns}"
            for name, (_n, st) in zip(names, files, strict=True)]
    shas = list(map(cached.get, keys))
    prefix = escape(rel).decode() + "/" if rel else ""
    lines = [f"{sha}\t{st.st_size}\t{prefix}{name}\n" if sha is not None else None
             for sha, name, (_n, st) in zip(shas, names, files, strict=True)]
    group = [f"{key}\t{sha}\n" if sha is not None and st.st_ctime_ns < trusted_before else ""
             for key, sha, (_n, st) in zip(keys, shas, files, strict=True)]
    pending: list = []  # (index in lines, index in group, escaped name) of each file to hash
    jobs: list = []  # (relative path, -1) of each file to hash
    size_to_hash = nbytes = 0
    for at, sha in enumerate(shas):
        if sha is None:
            pending.append((at, at, names[at]))
            jobs.append((_child(rel, files[at][0]), -1))
            size_to_hash += files[at][1].st_size
        else:
            nbytes += files[at][1].st_size
    dirs = links = 0
    if others:  # merged with the files by name; each subdirectory also under "<name>/", where its subtree goes
        rows = [(order(item), at) for at, item in enumerate(files)]
        for name, kind in others:
            ename = name if plain else _escape_str(name)
            if kind == DIRECTORY:
                rows.append((order((name,)), f"D\t-\t{prefix}{ename}\n"))
                rows.append((order((name + "/",)), (_child(rel, name),)))
                dirs += 1
            elif kind == SYMLINK:
                try:
                    target = os.fsencode(os.readlink(name, dir_fd=fd))
                except OSError as err:
                    return ("error", f"cannot read the symlink {_show(root, _child(rel, name))}: {err.strerror}",
                            "leave the tree unchanged while it is sealed")
                rows.append((order((name,)), f"L\t-\t{prefix}{ename}\t{escape(target).decode()}\n"))
                links += 1
            else:
                return ("error", f"{_show(root, _child(rel, name))} is a {kind}, which a dataset cannot hold",
                        "remove it (only regular files, directories and symlinks are allowed)")
        rows.sort(key=_first)
        where = {}  # a file's index in lines -> its index once merged
        merged: list = []
        for _key, row in rows:
            if row.__class__ is int:
                where[row] = len(merged)
                merged.append(lines[row])
            else:
                merged.append(row)
        lines = merged
        pending = [(where[line_at], group_at, ename) for line_at, group_at, ename in pending]
    counts = [len(files), nbytes, dirs, links, 0, len(files) - len(jobs)]
    if jobs and (len(jobs) > _BATCH or size_to_hash > _INLINE_BYTES):
        return ("partial", lines, group, pending, jobs, counts)
    return _complete(root, prefix, lines, group, pending, jobs, _hash_batch(root, jobs) if jobs else [], counts,
                     trusted_before)


def _first(row: tuple):
    return row[0]


def _raw_first(row: tuple) -> bytes:
    return os.fsencode(row[0])


def _child(rel: bytes, name: str) -> bytes:
    return rel + b"/" + os.fsencode(name) if rel else os.fsencode(name)


def _complete(root: bytes, prefix: str, lines: list, group: list, pending: list, jobs: list, results: list,
              counts: list, trusted_before: int) -> tuple:
    """A scanned directory with its files hashed: ("done", pieces, group, counts) or ("error", problem, fix).
    pieces: the manifest's bytes between subdirectories, and (subdirectory,) where its subtree goes."""
    for (line_at, group_at, ename), (rel, _size), result in zip(pending, jobs, results, strict=True):
        if result[0] != _OK:
            err = _hash_error(root, rel, result)
            return ("error", err.problem, err.fix)
        sha, size, ident = result[1], result[2], result[3]
        lines[line_at] = f"{sha}\t{size}\t{prefix}{ename}\n"
        group[group_at] = f"{ename}\t{ident[0]}\t{size}\t{ident[2]}\t{ident[3]}\t{sha}\n" \
            if ident[1] == size and ident[3] < trusted_before else ""
        counts[1] += size
        counts[4] += 1
    pieces: list = []
    run: list = []
    for line in lines:
        if line.__class__ is tuple:
            if run:
                pieces.append("".join(run).encode())
                run = []
            pieces.append(line)
        else:
            run.append(line)
    if run:
        pieces.append("".join(run).encode())
    return ("done", pieces, "".join(group).encode(), counts)


class _Scans:
    """The directories of a build, scanned ahead of the order they are written in: at most ``workers * 4`` in
    flight, the nearest first (a directory's place in that order is its path + "/", by raw bytes). One process
    until the build has seen more than _BATCH files (a small tree starts no pool), then ``workers`` processes."""

    def __init__(self, root: bytes, cache: bytes | None, index: dict, trusted_before: int, workers: int):
        self.root, self.cache, self.index, self.trusted_before = root, cache, index, trusted_before
        self.workers = workers
        self.window = workers * _WINDOW_PER_WORKER
        self.waiting: list = []  # heap of (rel + b"/", rel): found, not yet scanning
        self.running: dict = {}  # rel -> future
        self.pool = None
        self.files = 0

    def _pool(self):
        if self.pool is None and self.workers > 1 and self.files > _BATCH:
            from concurrent.futures import ProcessPoolExecutor
            from multiprocessing import get_context

            self.pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=get_context("spawn"))
        return self.pool

    def _start(self, rel: bytes) -> None:
        args = (self.root, rel, self.cache, self.index.get(rel), self.trusted_before)
        pool = self._pool()
        self.running[rel] = pool.submit(_scan, *args) if pool is not None else _Done(_scan(*args))

    def take(self, rel: bytes) -> tuple[list, bytes, list]:
        """The next directory in the manifest's order, complete: its pieces, its cache group and its counts."""
        if rel not in self.running:
            if rel:
                heapq.heappop(self.waiting)  # the nearest one found: this one
            self._start(rel)
        result = self.running.pop(rel).result()
        if result[0] == "partial":
            _status, lines, group, pending, jobs, counts = result
            result = _complete(self.root, escape(rel).decode() + "/" if rel else "", lines, group, pending, jobs,
                               self._hash(jobs), counts, self.trusted_before)
        if result[0] == "error":
            raise UserError(result[1], result[2])
        _status, pieces, group, counts = result
        for piece in pieces:
            if piece.__class__ is tuple:
                heapq.heappush(self.waiting, (piece[0] + b"/", piece[0]))
        self.files += counts[0]
        while self.waiting and len(self.running) < self.window:
            self._start(heapq.heappop(self.waiting)[1])
        return pieces, group, counts

    def _hash(self, jobs: list) -> list:
        """Many files of one directory: hashed in batches over the pool (in this process without one)."""
        batches = [jobs[i:i + _BATCH] for i in range(0, len(jobs), _BATCH)]
        self.files += len(jobs)
        pool = self._pool()
        if pool is None:
            return [result for batch in batches for result in _hash_batch(self.root, batch)]
        futures = [pool.submit(_hash_batch, self.root, batch) for batch in batches]
        return [result for future in futures for result in future.result()]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------------------------------------- the stat cache
#
# A seal that costs the change. Beside the manifest, build writes ROOT/.fabric/stat-cache.tsv: for each regular
# file, what stat said of it when it was hashed, and its digest, in one group per directory::
#
#     # fabric-stat-cache v2
#     P\t<directory, escaped as in the manifest; empty for the root>\t<bytes of the group's lines that follow>
#     <name, escaped>\t<inode>\t<size>\t<mtime_ns>\t<ctime_ns>\t<sha256>
#     ...
#     # end dirs=<groups>
#
# Groups in the manifest's order of their directories (a directory without a file to remember has none), lines in
# the manifest's order. The next build given it (``reuse``) reads only the group headers (each says how long its
# group is: the reader seeks past it), and each directory's scan reads its own group (pread) into a table keyed by
# the line without its digest: a file whose name, inode, size, mtime and ctime are all the same takes the digest.
# What that trusts: the staging file system (the same ext4 or xfs from one version to the next) changes a file's
# ctime whenever its content, size or inode changes (write, truncate, rename over it, utimes), and user space cannot
# set a ctime; a file replaced gets another inode. A file whose ctime is within RACY_NS of the start of the build
# that recorded it is left out of the cache (a later change in the same timestamp tick would not move its ctime:
# ext4 with 128-byte inodes keeps whole seconds), so it is hashed again next time. Every file is still lstat'ed:
# a directory's unchanged mtime says only that no entry was added, removed or renamed in it, nothing of its files'
# contents, so it lets nothing be skipped. Nothing else is trusted: the caller gives only a cache whose SHA-256 is
# the one the previous version recorded (``reuse_sha256``), and `verify` still reads every byte.

CACHE_HEADER = b"# fabric-stat-cache v2\n"
CACHE_HEADERS_OLDER = (b"# fabric-stat-cache v1\n",)
CACHE_RELPATH = ".fabric/stat-cache.tsv"
RACY_NS = 2_000_000_000
_CACHE_TRAILER = re.compile(rb"# end dirs=(\d+)\n")


class StaleCache(UserError):
    """The stat cache given to reuse is not the one its version recorded."""


def cache_format(path: str | bytes) -> str | None:
    """"current", "older" (a cache of an older fabricctl: not reused) or "unknown" by a cache's first line; None
    when there is no such file."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(64)
    except FileNotFoundError:
        return None
    return "current" if first == CACHE_HEADER else "older" if first in CACHE_HEADERS_OLDER else "unknown"


class _CacheCheck:
    """The SHA-256 of the cache a build reuses, read in a thread beside the build (hashlib and reads release the
    GIL); ``finish`` raises StaleCache when it is not the expected one."""

    def __init__(self, path: bytes, expected: str):
        import threading

        self.path, self.expected, self.found = path, expected, None
        self.thread = threading.Thread(target=self._run, name="stat-cache-sha256", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with contextlib.suppress(OSError):
            self.found = file_sha256(self.path)

    def finish(self) -> None:
        self.thread.join()
        if self.found != self.expected:
            raise StaleCache(f"the stat cache {os.fsdecode(self.path)} has SHA-256 {self.found or 'unreadable'}, not "
                             f"the {self.expected} its version recorded",
                             "seal with --full (it hashes every file and writes a new cache)")


def _cache_index(path: bytes) -> dict[bytes, tuple[int, int]]:
    """{directory: (offset, length) of its group} from a stat cache's group headers (the groups are skipped);
    checks the header, each group header, their order and the trailer."""
    name = os.fsdecode(path)
    try:
        handle = open(path, "rb", buffering=1 << 16)
    except FileNotFoundError:
        raise NotFound(f"no stat cache at {name}", "seal with --full (it hashes every file and writes one)") from None
    except OSError as err:
        raise UserError(f"cannot read the stat cache {name}: {err.strerror}", "check its permissions") from err
    index: dict = {}
    previous = None
    with handle:
        first = handle.readline()
        if first != CACHE_HEADER:
            raise _bad_cache(name, 0, f"the header is {first[:60]!r}")
        while True:
            at = handle.tell()
            line = handle.readline()
            if not line.endswith(b"\n"):
                raise _bad_cache(name, at, "no trailer: the cache is truncated")
            trailer = _CACHE_TRAILER.fullmatch(line)
            if trailer is not None:
                if int(trailer.group(1)) != len(index):
                    raise _bad_cache(name, at, f"the trailer counts {int(trailer.group(1))} groups, not {len(index)}")
                if handle.read(1):
                    raise _bad_cache(name, at, "something after the trailer")
                return index
            try:
                kind, escaped, length = line[:-1].split(b"\t")
                if kind != b"P" or not length.isdigit():
                    raise ValueError("not a group's header")
                rel = unescape(escaped)
            except ValueError as err:
                raise _bad_cache(name, at, f"{line[:60]!r} is not a group's header ({err})") from None
            key = rel + b"/" if rel else b""
            if previous is not None and key <= previous:
                raise _bad_cache(name, at, f"the group of {display(rel)!r} is out of order")
            previous = key
            index[rel] = (handle.tell(), int(length))
            handle.seek(int(length), os.SEEK_CUR)


def _cached_group(path: bytes, span: tuple[int, int], rel: bytes) -> dict[str, str]:
    """One directory's group of a stat cache: {line without its digest: digest}."""
    offset, length = span
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        text = data.decode()
    except (OSError, UnicodeDecodeError) as err:
        raise _bad_cache(os.fsdecode(path), offset, f"the group of {display(rel)!r} cannot be read ({err})") from None
    table = {line[:-65]: line[-64:] for line in text.split("\n")[:-1]}
    if len(data) != length or not text.endswith("\n") or _HEX_RUN.fullmatch("".join(table.values())) is None \
            or len(table) * 64 != sum(map(len, table.values())):
        raise _bad_cache(os.fsdecode(path), offset, f"the group of {display(rel)!r} is not stat cache lines")
    return table


def read_cache(path: str | bytes) -> Iterator[tuple[bytes, tuple[int, int, int, int], str]]:
    """Every file a stat cache lists, in its order: (raw relative path, (inode, size, mtime_ns, ctime_ns), sha256)."""
    path_b = os.fsencode(path)
    for rel, span in _cache_index(path_b).items():
        for key, sha in _cached_group(path_b, span, rel).items():
            ename, ino, size, mtime, ctime = key.rsplit("\t", 4)
            name = unescape(ename.encode())
            yield (rel + b"/" + name if rel else name), (int(ino), int(size), int(mtime), int(ctime)), sha


def _bad_cache(path: str, offset: int, what: str) -> UserError:
    return UserError(f"{path} at byte {offset}: {what}; this is not an intact stat cache",
                     "seal with --full (it hashes every file and writes a new cache)")


def file_sha256(path: str | bytes) -> str | None:
    """The SHA-256 of a file's bytes, or None when there is no such file."""
    try:
        with open(path, "rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def _show(root: bytes, rel: bytes) -> str:
    return os.fsdecode(root).rstrip("/") + "/" + display(rel)


def _hash_error(root: bytes, rel: bytes, result: tuple) -> UserError:
    where = _show(root, rel)
    if result[0] == _GONE:
        return UserError(f"{where} disappeared while the manifest was built",
                         "leave the tree unchanged while it is sealed")
    if result[0] == _NOT_REGULAR:
        return UserError(f"{where} became a {result[1]} while the manifest was built",
                         "leave the tree unchanged while it is sealed")
    return UserError(f"cannot read {where}: {result[1]}",
                     "make the tree readable by this user (fabricctl runs as root)")


def _raise_hash_error(root: bytes, rel: bytes, result: tuple) -> None:
    raise _hash_error(root, rel, result)


# ---------------------------------------------------------------------------------------------- reading


@dataclass
class Entry:
    path: bytes  # raw relative path
    kind: str  # FILE, DIRECTORY or SYMLINK
    size: int = -1  # files only
    sha256: str = ""  # files only
    target: bytes = b""  # symlinks only


_HEX = re.compile(rb"^[0-9a-f]{64}$")


def _bad(path: str, lineno: int, what: str) -> UserError:
    return UserError(f"{path} line {lineno}: {what}; this is not an intact fabric manifest",
                     "rebuild it with `manifest.py build`, or take it from the sealed snapshot again")


def _entry_of(line: bytes) -> Entry:
    """One manifest line (without its newline) as an Entry; ValueError when it is not one."""
    fields = line.split(b"\t")
    if fields[0] == b"D" and len(fields) == 3 and fields[1] == b"-":
        return Entry(unescape(fields[2]), DIRECTORY)
    if fields[0] == b"L" and len(fields) == 4 and fields[1] == b"-":
        return Entry(unescape(fields[2]), SYMLINK, target=unescape(fields[3]))
    if len(fields) == 3 and _HEX.match(fields[0]) and fields[1].isdigit():
        return Entry(unescape(fields[2]), FILE, int(fields[1]), fields[0].decode())
    raise ValueError("not a file, directory or symlink line")


def read_entries(manifest_path: str | bytes, totals: dict | None = None) -> Iterator[Entry]:
    """Stream a manifest's entries, checking header, syntax, order and trailer.

    When the whole manifest was read, ``totals`` (if given) holds files, bytes, dirs, symlinks and the
    manifest's sha256. Raises NotFound or UserError (with the line number).
    """
    name = os.fsdecode(manifest_path)
    try:
        handle = open(manifest_path, "rb", buffering=1 << 20)
    except FileNotFoundError:
        raise NotFound(f"no manifest at {name}",
                       "seal the version first (it writes ROOT/.fabric/manifest.tsv)") from None
    except OSError as err:
        raise UserError(f"cannot read the manifest {name}: {err.strerror}", "check its permissions") from err
    digest = hashlib.sha256()
    counts = {FILE: 0, DIRECTORY: 0, SYMLINK: 0}
    total = 0
    previous = b""
    trailer: bytes | None = None
    lineno = 0
    with handle:
        for lineno, line in enumerate(handle, 1):
            digest.update(line)
            if lineno == 1:
                if line != HEADER:
                    raise _bad(name, 1, f"the header is {line[:60]!r}, expected {HEADER!r}")
                continue
            if not line.endswith(b"\n"):
                raise _bad(name, lineno, "the last line is cut short")
            if trailer is not None:
                raise _bad(name, lineno, "a line after the trailer")
            if line.startswith(TRAILER_PREFIX):
                trailer = line
                continue
            try:
                entry = _entry_of(line[:-1])
            except ValueError as err:
                raise _bad(name, lineno, str(err)) from None
            rel = entry.path
            framed = b"/" + rel + b"/"
            if not rel or b"//" in framed or b"/./" in framed or b"/../" in framed or framed.startswith(b"/.fabric/"):
                raise _bad(name, lineno, f"the path {display(rel)!r} is not a clean relative path")
            if rel <= previous:
                raise _bad(name, lineno, f"{display(rel)!r} is out of order (after {display(previous)!r})")
            previous = rel
            counts[entry.kind] += 1
            if entry.kind == FILE:
                total += entry.size
            yield entry
    if lineno == 0:
        raise _bad(name, 1, "the file is empty")
    expected = b"%sfiles=%d bytes=%d dirs=%d symlinks=%d\n" % (
        TRAILER_PREFIX, counts[FILE], total, counts[DIRECTORY], counts[SYMLINK])
    if trailer is None:
        raise _bad(name, lineno, "no trailer: the manifest is truncated")
    if trailer != expected:
        raise _bad(name, lineno, f"the trailer {trailer!r} does not match the lines ({expected!r})")
    if totals is not None:
        totals.update(files=counts[FILE], bytes=total, dirs=counts[DIRECTORY], symlinks=counts[SYMLINK],
                      manifest_sha256=digest.hexdigest())


def read_summary(manifest_path: str | bytes) -> Summary:
    """files, bytes, dirs, symlinks and the sha256 of a manifest, read as a stream (and checked)."""
    started = time.monotonic()
    totals: dict = {}
    for _entry in read_entries(manifest_path, totals):
        pass
    return Summary(seconds=time.monotonic() - started, path=os.fsdecode(manifest_path), **totals)


# ---------------------------------------------------------------------------------------------- verify


def _merge(manifest: Iterator[Entry], tree: Iterator[tuple[bytes, str]]) -> Iterator[tuple]:
    """Merge two sorted streams: (expected Entry | None, (rel, actual kind) | None)."""
    expected = next(manifest, None)
    actual = next(tree, None)
    while expected is not None or actual is not None:
        if actual is None or (expected is not None and expected.path < actual[0]):
            yield expected, None
            expected = next(manifest, None)
        elif expected is None or actual[0] < expected.path:
            yield None, actual
            actual = next(tree, None)
        else:
            yield expected, actual
            expected, actual = next(manifest, None), next(tree, None)


def verify(root: str | bytes, manifest_path: str | bytes, *, workers: int = 4,
           progress: Progress | None = None) -> Report:
    """Compare the tree at root with its manifest; return a Report of every difference.

    progress(files, bytes) reports the files hashed so far. Raises NotFound / UserError when the root
    or the manifest is missing, the manifest is not intact, or a file cannot be read.
    """
    started = time.monotonic()
    root_b = _check_root(root)
    workers = _check_workers(workers)
    report = Report(root=os.fsdecode(root_b), manifest=os.fsdecode(manifest_path))
    totals: dict = {}
    entries = read_entries(manifest_path, totals)
    ticker = _Ticker(progress)
    hashed = hashed_bytes = 0

    def job_of(pair: tuple) -> tuple[bytes, int] | None:
        expected, actual = pair
        if expected is not None and actual is not None and expected.kind == FILE and actual[1] == FILE:
            return (expected.path, expected.size)
        return None

    with closing(_pipeline(root_b, _merge(entries, walk(root_b)), job_of, workers)) as results:  # pool shut on errors
        for (expected, actual), result in results:
            if actual is None:
                report.missing.append(Difference(display(expected.path), expected.kind, None))
            elif expected is None:
                report.extra.append(Difference(display(actual[0]), None, actual[1]))
            elif expected.kind != actual[1]:
                report.type_changed.append(Difference(display(expected.path), expected.kind, actual[1]))
            elif expected.kind == SYMLINK:
                try:
                    target = os.readlink(root_b + b"/" + expected.path)
                except FileNotFoundError:
                    report.missing.append(Difference(display(expected.path), SYMLINK, None))
                    continue
                except OSError as err:
                    raise UserError(f"cannot read the symlink {_show(root_b, expected.path)}: {err.strerror}",
                                    "check the tree's permissions") from err
                if target != expected.target:
                    report.target_changed.append(Difference(display(expected.path), display(expected.target),
                                                            display(target)))
            elif expected.kind == FILE:
                status = result[0]
                if status == _GONE:
                    report.missing.append(Difference(display(expected.path), FILE, None))
                elif status == _NOT_REGULAR:
                    report.type_changed.append(Difference(display(expected.path), FILE, result[1]))
                elif status == _ERROR:
                    _raise_hash_error(root_b, expected.path, result)
                elif result[2] != expected.size:
                    report.size_changed.append(Difference(display(expected.path), expected.size, result[2]))
                elif result[1] != expected.sha256:
                    report.digest_changed.append(Difference(display(expected.path), expected.sha256, result[1]))
                if status == _OK:
                    hashed += 1
                    hashed_bytes += result[2]
                    ticker.tick(hashed, hashed_bytes)
    ticker.tick(hashed, hashed_bytes, final=True)
    report.files, report.bytes = totals["files"], totals["bytes"]
    report.seconds = time.monotonic() - started
    return report


# ---------------------------------------------------------------------------------------------- diff

ADDED, REMOVED, CHANGED = "added", "removed", "changed"


@dataclass
class Change:
    """One path that differs between two manifests: added (only in the new), removed (only in the old) or
    changed (a file's size or digest, a symlink's target, or the kind of entry)."""

    status: str  # ADDED, REMOVED or CHANGED
    path: bytes
    old: Entry | None
    new: Entry | None

    def to_dict(self) -> dict:
        out: dict = {"status": self.status, "path": display(self.path)}
        for side, entry in (("old", self.old), ("new", self.new)):
            if entry is not None:
                out[side] = {"kind": entry.kind, **({"size": entry.size, "sha256": entry.sha256}
                                                    if entry.kind == FILE else {}),
                             **({"target": display(entry.target)} if entry.kind == SYMLINK else {})}
        return out

    def line(self) -> str:
        """One line for people: ``+ path``, ``- path`` or ``M path (what changed)``."""
        mark = {ADDED: "+", REMOVED: "-", CHANGED: "M"}[self.status]
        entry = self.new or self.old
        what = "/" if entry.kind == DIRECTORY else (f" -> {display(entry.target)}" if entry.kind == SYMLINK else "")
        detail = ""
        if self.status == CHANGED:
            if self.old.kind != self.new.kind:
                detail = f"  ({self.old.kind} -> {self.new.kind})"
            elif self.old.kind == FILE:
                detail = f"  ({self.old.size} -> {self.new.size} bytes)" if self.old.size != self.new.size \
                    else "  (content)"
            elif self.old.kind == SYMLINK:
                what = f" -> {display(self.old.target)} => {display(self.new.target)}"
        return f"{mark} {display(self.path)}{what}{detail}"


def _same(old: Entry, new: Entry) -> bool:
    return old.kind == new.kind and old.size == new.size and old.sha256 == new.sha256 and old.target == new.target


def _file_bytes(entry: Entry | None) -> int:
    return entry.size if entry is not None and entry.kind == FILE else 0


_TRAILER = re.compile(rb"^# end files=(\d+) bytes=(\d+) dirs=(\d+) symlinks=(\d+)$")


def _raw_lines(path: str | bytes, totals: dict) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its newline) of a manifest's entries, read in 1 MiB blocks; the header is
    checked first, the trailer last (its counts, with the file's SHA-256, go to ``totals``)."""
    name = os.fsdecode(path)
    try:
        handle = open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise NotFound(f"no manifest at {name}",
                       "seal the version first (it writes ROOT/.fabric/manifest.tsv)") from None
    except OSError as err:
        raise UserError(f"cannot read the manifest {name}: {err.strerror}", "check its permissions") from err
    digest, tail, lineno, trailer = hashlib.sha256(), b"", 0, None
    with handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            for line in lines:
                lineno += 1
                if lineno == 1:
                    if line + b"\n" != HEADER:
                        raise _bad(name, 1, f"the header is {line[:60]!r}, expected {HEADER!r}")
                elif trailer is not None:
                    raise _bad(name, lineno, "a line after the trailer")
                elif line[:1] == b"#":
                    trailer = _TRAILER.match(line)
                    if trailer is None:
                        raise _bad(name, lineno, f"{line[:60]!r} is neither an entry nor the trailer")
                else:
                    yield lineno, line
    if lineno == 0:
        raise _bad(name, 1, "the file is empty")
    if tail:
        raise _bad(name, lineno + 1, "the last line is cut short")
    if trailer is None:
        raise _bad(name, lineno, "no trailer: the manifest is truncated")
    files, size, dirs, links = (int(g) for g in trailer.groups())
    totals.update(files=files, bytes=size, dirs=dirs, symlinks=links, manifest_sha256=digest.hexdigest())


class _Side:
    """One manifest of a diff: its current line, parsed only when it differs from the other side's."""

    def __init__(self, path: str | bytes, totals: dict):
        self.name = os.fsdecode(path)
        self.lines = _raw_lines(path, totals)
        self.previous = b""
        self.lineno, self.line, self.entry = 0, None, None
        self.advance()

    def advance(self) -> None:
        self.lineno, self.line = next(self.lines, (self.lineno, None))
        self.entry = None

    def parsed(self) -> Entry:
        if self.entry is None:
            try:
                self.entry = _entry_of(self.line)
            except ValueError as err:
                raise _bad(self.name, self.lineno, str(err)) from None
            if self.entry.path <= self.previous:
                raise _bad(self.name, self.lineno, f"{display(self.entry.path)!r} is out of order")
            self.previous = self.entry.path
        return self.entry


def diff(old_path: str | bytes, new_path: str | bytes, totals: dict | None = None) -> Iterator[Change]:
    """The differences between two manifests, in path order, read as two streams side by side (both are
    sorted by path: one entry of each in memory, never a whole manifest). A line that is the same in both is
    one unchanged entry and is not parsed; lines that differ are parsed and merged by path (each checked in
    order against the last one parsed on its side).

    ``totals`` (if given) holds, once both were read whole: ``added``, ``removed``, ``changed``, ``unchanged``
    (entries of any kind), ``added_bytes``/``removed_bytes`` (files' sizes), ``changed_bytes_old``/
    ``changed_bytes_new`` (the changed files' sizes before and after), and ``old``/``new``: each manifest's
    files, bytes, dirs and symlinks (its trailer's) and manifest_sha256 (of the file's bytes: fabricctl checks
    it against the one the version recorded). NotFound / UserError naming the file and line (a manifest that is
    not intact fails even after some changes were yielded).
    """
    old_totals: dict = {}
    new_totals: dict = {}
    counts = dict.fromkeys((ADDED, REMOVED, CHANGED, "unchanged", "added_bytes", "removed_bytes",
                            "changed_bytes_old", "changed_bytes_new"), 0)
    old, new = _Side(old_path, old_totals), _Side(new_path, new_totals)
    same = 0
    while old.line is not None or new.line is not None:
        if old.line == new.line:  # the one test for the 99%: equal bytes, the same entry
            same += 1
            old.advance()
            new.advance()
            continue
        if new.line is None or (old.line is not None and old.parsed().path < new.parsed().path):
            entry = old.parsed()
            counts[REMOVED] += 1
            counts["removed_bytes"] += _file_bytes(entry)
            yield Change(REMOVED, entry.path, entry, None)
            old.advance()
        elif old.line is None or new.parsed().path < old.parsed().path:
            entry = new.parsed()
            counts[ADDED] += 1
            counts["added_bytes"] += _file_bytes(entry)
            yield Change(ADDED, entry.path, None, entry)
            new.advance()
        else:
            before, after = old.parsed(), new.parsed()
            if _same(before, after):
                same += 1
            else:
                counts[CHANGED] += 1
                counts["changed_bytes_old"] += _file_bytes(before)
                counts["changed_bytes_new"] += _file_bytes(after)
                yield Change(CHANGED, after.path, before, after)
            old.advance()
            new.advance()
    counts["unchanged"] = same
    if totals is not None:
        totals.update(counts, old=old_totals, new=new_totals)


# ---------------------------------------------------------------------------------------------- CLI


def _print_progress(files: int, size: int) -> None:
    print(f"{files} files, {size} bytes", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="manifest.py", description="Build or verify a dataset manifest.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command, out_help in (("build", "where to write it"), ("verify", "the manifest to check against")):
        cmd = sub.add_parser(command)
        cmd.add_argument("root", help="the tree")
        cmd.add_argument("manifest", nargs="?", help=f"{out_help} (default: ROOT/{MANIFEST_RELPATH})")
        cmd.add_argument("--workers", type=int, default=4, help="hashing processes (default 4)")
        cmd.add_argument("--json", action="store_true", help="the result as JSON on stdout")
        cmd.add_argument("--progress", action="store_true", help="progress lines on stderr")
        if command == "build":
            cmd.add_argument("--cache", help="also write the stat cache there (e.g. ROOT/" + CACHE_RELPATH + ")")
            cmd.add_argument("--reuse", help="a previous build's stat cache: unchanged files are not read")
            cmd.add_argument("--reuse-sha256", help="the SHA-256 the --reuse cache must have (checked as it builds)")
    cmd = sub.add_parser("diff")
    cmd.add_argument("old", help="the older manifest")
    cmd.add_argument("new", help="the newer manifest")
    cmd.add_argument("--json", action="store_true", help="the totals and every change as JSON on stdout")
    cmd.add_argument("--stat", action="store_true", help="the totals only")
    args = parser.parse_args(argv)
    if args.command == "diff":
        return _diff_main(args)
    manifest_path = args.manifest or default_path(args.root)
    progress = _print_progress if args.progress else None
    try:
        if args.command == "build":
            summary = build(args.root, manifest_path, workers=args.workers, progress=progress,
                            cache_out=args.cache, reuse=args.reuse, reuse_sha256=args.reuse_sha256)
            if args.json:
                print(json.dumps(summary.to_dict()))
            else:
                print(f"{summary.path}: {summary.files} files, {summary.bytes} bytes, {summary.dirs} directories, "
                      f"{summary.symlinks} symlinks in {summary.seconds:.1f} s; sha256 {summary.manifest_sha256}")
            return 0
        report = verify(args.root, manifest_path, workers=args.workers, progress=progress)
    except UserError as err:
        print(f"manifest.py {args.command}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        for kind in KINDS:
            for diff in getattr(report, kind):
                print(f"{kind}\t{diff.path}\texpected={diff.expected}\tactual={diff.actual}")
        verdict = "OK" if report.ok else f"{report.count()} differences"
        print(f"{verdict}: {report.root} against {report.manifest} ({report.files} files, {report.bytes} bytes "
              f"listed) in {report.seconds:.1f} s")
    return 0 if report.ok else 1


def _diff_main(args) -> int:
    totals: dict = {}
    changes: list[dict] = []
    try:
        for change in diff(args.old, args.new, totals):
            if args.json and not args.stat:
                changes.append(change.to_dict())
            elif not args.json and not args.stat:
                print(change.line())
    except UserError as err:
        print(f"manifest.py diff: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if args.json:
        print(json.dumps({"totals": totals, **({} if args.stat else {"changes": changes})}))
    else:
        print(diff_summary(totals))
    return 0


def diff_summary(totals: dict) -> str:
    """The totals of a diff in one line."""
    return (f"{totals[ADDED]} added ({totals['added_bytes']} bytes), {totals[REMOVED]} removed "
            f"({totals['removed_bytes']} bytes), {totals[CHANGED]} changed ({totals['changed_bytes_old']} -> "
            f"{totals['changed_bytes_new']} bytes), {totals['unchanged']} unchanged")


if __name__ == "__main__":
    sys.exit(main())
