"""Building a manifest (``build``), directory by directory in worker processes, with the stat cache that lets a
seal hash only what changed."""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import os
import re
import time
from collections.abc import Iterator
from operator import itemgetter

from . import tree  # its tunables (BATCH, CHUNK, ...) read where they are set
from .format import (
    DIRECTORY,
    ESCAPE_RE,
    HEADER,
    MANIFEST_RELPATH,
    SYMLINK,
    TRAILER_PREFIX,
    NotFound,
    Summary,
    UserError,
    display,
    escape,
    escape_char,
    unescape,
)
from .tree import (
    HASH_OK,
    Done,
    Progress,
    Ticker,
    check_root,
    check_workers,
    hash_batch,
    hash_error,
    mode_kind,
    show_path,
)

try:  # the core's atomic writer (build writes the manifest through it)
    from ...base import atomic
except ImportError:  # outside fabric_core (``cli.zipapp``, copied to a GPU node to verify): build refuses
    atomic = None  # type: ignore[assignment]

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
    root_b = check_root(root)
    workers = check_workers(workers)
    out = _check_out(root_b, out_path)
    cache_path = _check_out(root_b, cache_out) if cache_out is not None else None
    if atomic is None:
        raise UserError("manifest build needs fabric_core (its one file writer, base/atomic.py)",
                        "run `python3 -m fabric_core.node.manifest build` where fabric_core is installed, or "
                        "`fabricctl dataset seal` on the storage node")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    reuse_b = os.fsencode(reuse) if reuse is not None else None
    check = _CacheCheck(reuse_b, reuse_sha256) if reuse_b is not None and reuse_sha256 is not None else None
    index = _cache_index(reuse_b) if reuse_b is not None else {}
    digest, cache_digest = hashlib.sha256(), hashlib.sha256()
    counts = [0] * 6  # files, bytes, dirs, symlinks, hashed, reused
    ticker = Ticker(progress)
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
# (name, inode, size, mtime, ctime), hashes the others (in the worker when they are few: at most tree.BATCH files and
# _INLINE_BYTES; else the calling process spreads them over the pool in batches) and returns the directory's
# manifest lines, joined between its subdirectories, and its new group of the stat cache.

_INLINE_BYTES = 64 << 20  # a directory's files to hash, in bytes, that its scan hashes itself
_HEX_DIGITS = b"0123456789abcdef"  # a group's digests, joined and encoded, are these bytes only


def _escape_str(name: str) -> str:
    return ESCAPE_RE.sub(escape_char, name)


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
                    others.append((entry.name, mode_kind(entry.stat(follow_symlinks=False).st_mode)))
            except FileNotFoundError:  # removed while we walk
                continue
    if not rel:
        files = [item for item in files if item[0] != ".fabric"]
        others = [item for item in others if item[0] != ".fabric"]
    joined = "\0".join([item[0] for item in files] + [item[0] for item in others])
    plain = ESCAPE_RE.search(joined) is None  # no name needs escaping (the common case: one test, not one a name)
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
                    return ("error", f"cannot read the symlink {show_path(root, _child(rel, name))}: {err.strerror}",
                            "leave the tree unchanged while it is sealed")
                rows.append((order((name,)), f"L\t-\t{prefix}{ename}\t{escape(target).decode()}\n"))
                links += 1
            else:
                return ("error", f"{show_path(root, _child(rel, name))} is a {kind}, which a dataset cannot hold",
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
    if jobs and (len(jobs) > tree.BATCH or size_to_hash > _INLINE_BYTES):
        return ("partial", lines, group, pending, jobs, counts)
    return _complete(root, prefix, lines, group, pending, jobs, hash_batch(root, jobs) if jobs else [], counts,
                     trusted_before)


_first = itemgetter(0)  # a row's sort key (str order is byte order for ASCII); in C, not a Python call per row


def _raw_first(row: tuple) -> bytes:
    return os.fsencode(row[0])


def _child(rel: bytes, name: str) -> bytes:
    return rel + b"/" + os.fsencode(name) if rel else os.fsencode(name)


def _complete(root: bytes, prefix: str, lines: list, group: list, pending: list, jobs: list, results: list,
              counts: list, trusted_before: int) -> tuple:
    """A scanned directory with its files hashed: ("done", pieces, group, counts) or ("error", problem, fix).
    pieces: the manifest's bytes between subdirectories, and (subdirectory,) where its subtree goes."""
    for (line_at, group_at, ename), (rel, _size), result in zip(pending, jobs, results, strict=True):
        if result[0] != HASH_OK:
            err = hash_error(root, rel, result)
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
    until the build has seen more than tree.BATCH files (a small tree starts no pool), then ``workers`` processes."""

    def __init__(self, root: bytes, cache: bytes | None, index: dict, trusted_before: int, workers: int):
        self.root, self.cache, self.index, self.trusted_before = root, cache, index, trusted_before
        self.workers = workers
        self.window = workers * tree.WINDOW_PER_WORKER
        self.waiting: list = []  # heap of (rel + b"/", rel): found, not yet scanning
        self.running: dict = {}  # rel -> future
        self.pool = None
        self.files = 0

    def _pool(self):
        if self.pool is None and self.workers > 1 and self.files > tree.BATCH:
            from concurrent.futures import ProcessPoolExecutor
            from multiprocessing import get_context

            self.pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=get_context("spawn"))
        return self.pool

    def _start(self, rel: bytes) -> None:
        args = (self.root, rel, self.cache, self.index.get(rel), self.trusted_before)
        pool = self._pool()
        self.running[rel] = pool.submit(_scan, *args) if pool is not None else Done(_scan(*args))

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
        batches = [jobs[i:i + tree.BATCH] for i in range(0, len(jobs), tree.BATCH)]
        self.files += len(jobs)
        pool = self._pool()
        if pool is None:
            return [result for batch in batches for result in hash_batch(self.root, batch)]
        futures = [pool.submit(hash_batch, self.root, batch) for batch in batches]
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
    digests = "".join(table.values()).encode()  # bytes.translate: what a regex [0-9a-f]+ checks, ~7x faster
    if len(data) != length or not text.endswith("\n") or not digests or digests.translate(None, _HEX_DIGITS) \
            or len(table) * 64 != len(digests):
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
