"""Output of fabricctl: results on stdout (tables or JSON), progress on stderr."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any, TextIO

from fabric_core.base.units import human_bytes

__all__ = ["human_bytes", "human_duration", "failure", "print_json", "print_rows", "print_table", "to_jsonable",
           "with_failure", "ProgressBar"]


def human_duration(seconds: float | None) -> str:
    """75 -> '1:15', 3725 -> '1:02:05'; None or not finite -> '--:--'."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "--:--"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


# --------------------------------------------------------------------------------------------
# results


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dt.datetime):
        return _iso(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return ",".join(_cell(v) for v in items) or "-"
    return str(value)


def print_table(rows: Iterable[Mapping[str, Any] | Any], columns: Sequence[str | tuple[str, str]], *,
                stream: TextIO | None = None, empty: str | None = None) -> None:
    """Print rows as aligned columns with a header.

    ``columns``: keys, or (key, HEADER) pairs; a row is a mapping or an object with those attributes.
    Numbers are right-aligned, None prints as '-'. With no rows, ``empty`` (if given) is printed instead.
    """
    stream = stream if stream is not None else sys.stdout
    cols = [(c, c.upper()) if isinstance(c, str) else (c[0], c[1]) for c in columns]
    rows = list(rows)
    if not rows and empty is not None:
        print(empty, file=stream)
        return
    raw = [[(r.get(key) if isinstance(r, Mapping) else getattr(r, key, None)) for key, _header in cols] for r in rows]
    cells = [[_cell(v) for v in row] for row in raw]
    numeric = [bool(raw) and all(isinstance(row[i], (int, float)) and not isinstance(row[i], bool) or row[i] is None
                                 for row in raw) for i in range(len(cols))]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, (_key, h) in enumerate(cols)]

    def fmt(values: list[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    print(fmt([h for _key, h in cols]), file=stream)
    for row in cells:
        print(fmt(row), file=stream)


def print_rows(rows: Iterable[Sequence], headers: Sequence[str], *, stream: TextIO | None = None) -> None:
    """Print rows given as lists under their headers (``print_table`` with the headers as keys)."""
    print_table([dict(zip(headers, row, strict=True)) for row in rows], [(h, h) for h in headers], stream=stream)


def _iso(value: dt.datetime) -> str:
    if value.tzinfo is not None and value.utcoffset() == dt.timedelta(0):
        return value.replace(tzinfo=None).isoformat() + "Z"
    return value.isoformat()


def to_jsonable(obj: Any) -> Any:
    """Datetimes as ISO 8601 (UTC as ...Z), dataclasses as dicts, sets sorted, paths and enums as strings."""
    if isinstance(obj, dt.datetime):
        return _iso(obj)
    if isinstance(obj, (dt.date, dt.time)):
        return obj.isoformat()
    if isinstance(obj, dt.timedelta):
        return obj.total_seconds()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value)
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (set, frozenset)):
        return [to_jsonable(v) for v in sorted(obj, key=str)]
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, bytes):
        return obj.decode(errors="replace")
    return obj


def print_json(obj: Any, *, stream: TextIO | None = None) -> None:
    """fabricctl's one JSON writer (every --json): pretty, keys sorted (stable for scripts and diffs), ASCII."""
    stream = stream if stream is not None else sys.stdout
    print(json.dumps(to_jsonable(obj), sort_keys=True, indent=2, default=str), file=stream)


def failure(problem: str, fix: str, exit_status: int, error_type: str) -> dict:
    """What a failed command says under --json (main builds it for every command, from the error that ended it):
    the problem, the fix, the exit status and the error's class (its kind: NotFound, Busy, UsageError, ...)."""
    return {"error": problem, "fix": fix, "exit_status": exit_status, "error_type": error_type}


def with_failure(result: Any, fail: Mapping[str, Any]) -> dict:
    """The one JSON object of a command that failed: its result, when it made one before failing (a publish that
    reached some hosts, a verify that found differences), with the failure's keys added; else the failure alone.
    A result that is not a mapping goes under "result"."""
    if result is None:
        return dict(fail)
    base = dict(result) if isinstance(result, Mapping) else {"result": result}
    return {**base, **fail}


# --------------------------------------------------------------------------------------------
# progress


class ProgressBar:
    """Progress of an ingest, a seal or a read on stderr: files (none when the total is 0) and bytes done of a total.

    On a terminal one line is redrawn (at most every ``refresh`` seconds); otherwise (CI, a log)
    a line is appended every ``interval`` seconds, plus a last one at ``close()``. Thread-safe:
    manifest workers call ``advance`` concurrently.
    """

    def __init__(self, total_files: int, total_bytes: int, *, label: str = "", stream: TextIO | None = None,
                 tty: bool | None = None, interval: float = 5.0, refresh: float = 0.1,
                 clock: Callable[[], float] = time.monotonic, width: int = 24):
        self.total_files = max(int(total_files), 0)
        self.total_bytes = max(int(total_bytes), 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = interval
        self.refresh = refresh
        self.clock = clock
        self.width = width
        self.files = 0
        self.bytes = 0
        self.started = clock()
        self._last_draw: float | None = None
        self._closed = False
        self._lock = threading.Lock()

    def advance(self, files: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            self.files += files
            self.bytes += nbytes
            self._maybe_draw()

    def set(self, files: int, nbytes: int) -> None:
        with self._lock:
            self.files, self.bytes = files, nbytes
            self._maybe_draw()

    def _maybe_draw(self) -> None:
        now = self.clock()
        if self.tty:  # redraw at once, then at most every `refresh` seconds
            due = self._last_draw is None or now - self._last_draw >= self.refresh
        else:  # a line every `interval` seconds
            due = now - (self.started if self._last_draw is None else self._last_draw) >= self.interval
        if due and not self._closed:
            self._last_draw = now
            self._draw(now)

    def line(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        elapsed = max(now - self.started, 1e-9)
        rate = self.bytes / elapsed
        if self.total_bytes:
            fraction = min(self.bytes / self.total_bytes, 1.0)
        elif self.total_files:
            fraction = min(self.files / self.total_files, 1.0)
        else:
            fraction = 1.0
        eta = (self.total_bytes - self.bytes) / rate if rate > 0 and self.total_bytes else None
        filled = int(fraction * self.width)
        gauge = "#" * filled + "." * (self.width - filled)
        label = f"{self.label} " if self.label else ""
        files = f"{self.files}/{self.total_files} files  " if self.total_files else ""  # none: bytes only
        return (f"{label}[{gauge}] {fraction * 100:5.1f}%  {human_bytes(self.bytes)}/{human_bytes(self.total_bytes)}  "
                f"{files}{human_bytes(rate)}/s  "
                f"{'ETA ' + human_duration(eta) if fraction < 1 else 'elapsed ' + human_duration(elapsed)}")

    def _draw(self, now: float) -> None:
        text = self.line(now)
        try:
            self.stream.write(f"\r\x1b[2K{text}" if self.tty else f"{text}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._draw(self.clock())
            if self.tty:
                try:
                    self.stream.write("\n")
                    self.stream.flush()
                except (OSError, ValueError):
                    pass

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
