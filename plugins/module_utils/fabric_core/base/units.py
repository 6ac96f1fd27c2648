"""Sizes, counts and durations for people: the one formatter of byte counts (fabricctl's listings, the
pool planner's reasons), and the one parser of counts (``175B`` parameters) and durations (``1h30m``)."""

from __future__ import annotations

import math
import re

from .errors import UserError

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_SI_UNITS = ("B", "kB", "MB", "GB", "TB", "PB", "EB")
# decimal multipliers of a count: 70M = 70 million, 7B (or 7G) = 7 billion, 1.5T = 1.5 trillion
_COUNT_SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
_COUNT_RE = re.compile(r"^([-+]?[0-9][0-9_]*(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?)\s*([KMBGT]?)$", re.IGNORECASE)
_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?)\s*([dhms])", re.IGNORECASE)


def human_bytes(n: int | float | None) -> str:
    """1536 -> '1.5 KiB', 200 GiB -> '200 GiB'; binary units as zfs(8) prints them; None -> '-'."""
    if n is None:
        return "-"
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{sign}{int(value)} B"
            return f"{sign}{value:.1f} {unit}" if value < 100 else f"{sign}{value:.0f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def si_bytes(n: int | float | None) -> str:
    """Decimal units, as bandwidths are quoted (1 GB = 1e9 bytes): 2.45e12 -> '2.45 TB', 13.6e9 -> '13.6 GB';
    three significant digits; None -> '-'."""
    if n is None:
        return "-"
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in _SI_UNITS:
        if round(value, 2) < 1000 or unit == _SI_UNITS[-1]:
            if unit == "B":
                return f"{sign}{value:.0f} B"
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{sign}{value:.{digits}f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def parse_count(value, what: str = "count") -> float:
    """A count with an optional decimal multiplier: '175e9', '175B' and '175G' (billions), '70M' (millions),
    '1.5T' (trillions), '8k', '7_000_000'. Returns a float (a count of parameters may be fractional in
    billions); a sign is read, and the range is not checked here (the caller knows its range)."""
    if isinstance(value, bool):
        raise UserError(f"invalid {what} {value!r}", "give a number such as 175e9, 175B, 7B or 70M")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        m = _COUNT_RE.match(str(value).strip())
        if not m:
            raise UserError(f"invalid {what} {value!r}",
                            "give a number such as 175e9, 175B (billions), 70M (millions), 8K or 1.5T (trillions)")
        number = float(m.group(1)) * _COUNT_SUFFIXES[m.group(2).upper()]
    if not math.isfinite(number):
        raise UserError(f"invalid {what} {value!r}", "give a finite number such as 175e9 or 7B")
    return number


def parse_duration(value, what: str = "duration") -> float:
    """A duration in seconds: '1h', '30m', '3600s', '1h30m', '1.5h', '2d', or a bare number of seconds ('90').
    Units d, h, m (minutes), s, each at most once and in that order. A sign is read ('-1h' -> -3600.0), so
    that the caller, which knows its range, can say what is wrong with a negative one."""
    if isinstance(value, bool):
        raise UserError(f"invalid {what} {value!r}", "give a duration such as 1h, 30m, 3600s or 1h30m")
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    fix = "give a duration such as 1h, 30m, 3600s, 1h30m or a number of seconds"
    try:
        return float(text) if text and not any(c.isalpha() for c in text) else _parse_parts(text, what, fix)
    except ValueError:
        raise UserError(f"invalid {what} {value!r}", fix) from None


def _parse_parts(text: str, what: str, fix: str) -> float:
    sign = -1.0 if text.startswith("-") else 1.0
    body = text[1:] if text[:1] in "+-" else text
    pos, total, seen = 0, 0.0, []
    for m in _DURATION_PART.finditer(body):
        if m.start() != pos and body[pos:m.start()].strip():
            break
        unit = m.group(2).lower()
        if seen and list(_DURATION_UNITS).index(unit) <= list(_DURATION_UNITS).index(seen[-1]):
            raise UserError(f"invalid {what} {text!r}: units go once each, in the order d, h, m, s", fix)
        seen.append(unit)
        total += float(m.group(1)) * _DURATION_UNITS[unit]
        pos = m.end()
    if not seen or body[pos:].strip():
        raise UserError(f"invalid {what} {text!r}", fix)
    return sign * total


def format_duration(seconds: float | None) -> str:
    """The inverse of parse_duration for people: 180 -> '3m', 5400 -> '1h30m', 12.5 -> '12.5s', 0 -> '0s'."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 60:
        return f"{seconds:.3g}s"
    whole = int(round(seconds))
    out = ""
    for unit, size in _DURATION_UNITS.items():
        n, whole = divmod(whole, size)
        if n:
            out += f"{n}{unit}"
    return out
