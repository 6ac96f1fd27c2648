"""The manifest's format: its lines, their escaping, the results of a build, a verification and a diff, and the
reading of a manifest as a stream of entries (checked: header, syntax, order, trailer). The package's docstring
says the format.

Standard library only: it also runs outside fabric_core (``cli.zipapp``, copied to a GPU node), where the
errors are plain ones of the same names.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

try:  # part of the fabric_core package: its typed errors
    from ...base.errors import NotFound, UserError
except ImportError:  # outside fabric_core (``cli.zipapp``, copied to a GPU node): plain errors

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


# ---------------------------------------------------------------------------------------------- escaping

ESCAPE_RE = re.compile("[\\\\\t\n\r\udc80-\udcff]")
_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPE_RE = re.compile(rb"\\(x[0-9a-f]{2}|[\\tnr]|)")
_UNESCAPES = {b"\\": b"\\", b"t": b"\t", b"n": b"\n", b"r": b"\r"}


def escape_char(match: re.Match) -> str:
    char = match.group()
    return _ESCAPES.get(char) or f"\\x{ord(char) - 0xDC00:02x}"


def escape(raw: bytes) -> bytes:
    """A path or link target as written in the manifest: valid UTF-8 without tab, newline or CR."""
    text = raw.decode("utf-8", "surrogateescape")
    if ESCAPE_RE.search(text) is None:
        return raw
    return ESCAPE_RE.sub(escape_char, text).encode("utf-8")


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


# ---------------------------------------------------------------------------------------------- reading


@dataclass
class Entry:
    path: bytes  # raw relative path
    kind: str  # FILE, DIRECTORY or SYMLINK
    size: int = -1  # files only
    sha256: str = ""  # files only
    target: bytes = b""  # symlinks only


_HEX = re.compile(rb"^[0-9a-f]{64}$")


def bad_line(path: str, lineno: int, what: str) -> UserError:
    return UserError(f"{path} line {lineno}: {what}; this is not an intact fabric manifest",
                     "rebuild it with `python3 -m fabric_core.node.manifest build`, or take it from the sealed "
                     "snapshot again")


def entry_of(line: bytes) -> Entry:
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
                    raise bad_line(name, 1, f"the header is {line[:60]!r}, expected {HEADER!r}")
                continue
            if not line.endswith(b"\n"):
                raise bad_line(name, lineno, "the last line is cut short")
            if trailer is not None:
                raise bad_line(name, lineno, "a line after the trailer")
            if line.startswith(TRAILER_PREFIX):
                trailer = line
                continue
            try:
                entry = entry_of(line[:-1])
            except ValueError as err:
                raise bad_line(name, lineno, str(err)) from None
            rel = entry.path
            framed = b"/" + rel + b"/"
            if not rel or b"//" in framed or b"/./" in framed or b"/../" in framed or framed.startswith(b"/.fabric/"):
                raise bad_line(name, lineno, f"the path {display(rel)!r} is not a clean relative path")
            if rel <= previous:
                raise bad_line(name, lineno, f"{display(rel)!r} is out of order (after {display(previous)!r})")
            previous = rel
            counts[entry.kind] += 1
            if entry.kind == FILE:
                total += entry.size
            yield entry
    if lineno == 0:
        raise bad_line(name, 1, "the file is empty")
    expected = b"%sfiles=%d bytes=%d dirs=%d symlinks=%d\n" % (
        TRAILER_PREFIX, counts[FILE], total, counts[DIRECTORY], counts[SYMLINK])
    if trailer is None:
        raise bad_line(name, lineno, "no trailer: the manifest is truncated")
    if trailer != expected:
        raise bad_line(name, lineno, f"the trailer {trailer!r} does not match the lines ({expected!r})")
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
