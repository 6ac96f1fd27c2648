"""Comparing: a tree against its manifest (``verify``), and two manifests read side by side (``diff``), both as
sorted streams."""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass

from . import tree  # its tunables (BATCH, CHUNK, ...) read where they are set
from .format import (
    DIRECTORY,
    FILE,
    HEADER,
    SYMLINK,
    Difference,
    Entry,
    NotFound,
    Report,
    UserError,
    bad_line,
    display,
    entry_of,
    read_entries,
)
from .tree import (
    HASH_ERROR,
    HASH_GONE,
    HASH_NOT_REGULAR,
    HASH_OK,
    Progress,
    Ticker,
    check_root,
    check_workers,
    pipeline,
    raise_hash_error,
    show_path,
    walk,
)

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
    root_b = check_root(root)
    workers = check_workers(workers)
    report = Report(root=os.fsdecode(root_b), manifest=os.fsdecode(manifest_path))
    totals: dict = {}
    entries = read_entries(manifest_path, totals)
    ticker = Ticker(progress)
    hashed = hashed_bytes = 0

    def job_of(pair: tuple) -> tuple[bytes, int] | None:
        expected, actual = pair
        if expected is not None and actual is not None and expected.kind == FILE and actual[1] == FILE:
            return (expected.path, expected.size)
        return None

    with closing(pipeline(root_b, _merge(entries, walk(root_b)), job_of, workers)) as results:  # pool shut on errors
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
                    raise UserError(f"cannot read the symlink {show_path(root_b, expected.path)}: {err.strerror}",
                                    "check the tree's permissions") from err
                if target != expected.target:
                    report.target_changed.append(Difference(display(expected.path), display(expected.target),
                                                            display(target)))
            elif expected.kind == FILE:
                status = result[0]
                if status == HASH_GONE:
                    report.missing.append(Difference(display(expected.path), FILE, None))
                elif status == HASH_NOT_REGULAR:
                    report.type_changed.append(Difference(display(expected.path), FILE, result[1]))
                elif status == HASH_ERROR:
                    raise_hash_error(root_b, expected.path, result)
                elif result[2] != expected.size:
                    report.size_changed.append(Difference(display(expected.path), expected.size, result[2]))
                elif result[1] != expected.sha256:
                    report.digest_changed.append(Difference(display(expected.path), expected.sha256, result[1]))
                if status == HASH_OK:
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
        while chunk := handle.read(tree.CHUNK):
            digest.update(chunk)
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            for line in lines:
                lineno += 1
                if lineno == 1:
                    if line + b"\n" != HEADER:
                        raise bad_line(name, 1, f"the header is {line[:60]!r}, expected {HEADER!r}")
                elif trailer is not None:
                    raise bad_line(name, lineno, "a line after the trailer")
                elif line[:1] == b"#":
                    trailer = _TRAILER.match(line)
                    if trailer is None:
                        raise bad_line(name, lineno, f"{line[:60]!r} is neither an entry nor the trailer")
                else:
                    yield lineno, line
    if lineno == 0:
        raise bad_line(name, 1, "the file is empty")
    if tail:
        raise bad_line(name, lineno + 1, "the last line is cut short")
    if trailer is None:
        raise bad_line(name, lineno, "no trailer: the manifest is truncated")
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
                self.entry = entry_of(self.line)
            except ValueError as err:
                raise bad_line(self.name, self.lineno, str(err)) from None
            if self.entry.path <= self.previous:
                raise bad_line(self.name, self.lineno, f"{display(self.entry.path)!r} is out of order")
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
