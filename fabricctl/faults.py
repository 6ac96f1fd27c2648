"""Fault injection for the lab tests: FABRICCTL_FAULTS=name[,name] makes ``point(name)`` fail, and
FABRICCTL_PAUSE=name:SECONDS makes ``pause(name)`` sleep there.

Used to prove clean-up paths that a real failure cannot be provoked for on demand (for example
that the writer is thawed when the snapshot step fails, or when fabricctl is killed while the writer
is frozen). Unset in production: ``point`` and ``pause`` are no-ops.
"""

from __future__ import annotations

import os
import time

from fabric_core.base.errors import FabricError


class InjectedFault(FabricError):
    """A failure injected on purpose through FABRICCTL_FAULTS."""


def point(name: str) -> None:
    if name in os.environ.get("FABRICCTL_FAULTS", "").split(","):
        raise InjectedFault(f"injected fault at {name!r} (FABRICCTL_FAULTS)", "unset FABRICCTL_FAULTS")


def pause(name: str) -> None:
    for item in os.environ.get("FABRICCTL_PAUSE", "").split(","):
        point_name, _colon, seconds = item.partition(":")
        if point_name == name and seconds:
            time.sleep(float(seconds))
