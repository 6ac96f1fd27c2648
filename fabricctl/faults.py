"""Fault injection for the lab tests: FABRICCTL_FAULTS=name[,name] makes ``point(name)`` fail.

Used to prove clean-up paths that a real failure cannot be provoked for on demand (for example
that the writer is thawed when the snapshot step fails). Unset in production: ``point`` is a no-op.
"""

from __future__ import annotations

import os

from fabric_core.errors import FabricError


class InjectedFault(FabricError):
    """A failure injected on purpose through FABRICCTL_FAULTS."""


def point(name: str) -> None:
    if name in os.environ.get("FABRICCTL_FAULTS", "").split(","):
        raise InjectedFault(f"injected fault at {name!r} (FABRICCTL_FAULTS)", "unset FABRICCTL_FAULTS")
