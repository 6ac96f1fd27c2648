"""Sizes for people: the one formatter of byte counts (fabricctl's listings, the pool planner's reasons)."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


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
