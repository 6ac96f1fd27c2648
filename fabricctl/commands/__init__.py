"""One module per command. NAMES lists them in the order `fabricctl --help` shows them.

Each module is imported only when needed: ``matching(argv)`` imports only the modules whose names
could be the command on a command line (so `fabricctl status` does not import every other command and
what it imports: 0.22-0.24 s of each run on the lab's storage1), and ``ALL`` (every
module, imported on first use) serves the whole tree: --help, completion, the reference.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

NAMES = ("dataset_create", "dataset_ingest", "dataset_seal", "dataset_destroy", "publish", "unpublish", "grant",
         "revoke", "replicate", "list_versions", "show", "log", "diff", "tag", "untag", "status", "metrics",
         "verify", "warm", "checkpoint_volume_create", "checkpoint_volume_destroy", "checkpoint_snapshot",
         "checkpoint_list", "checkpoint_restore", "checkpoint_rollback", "checkpoint_replicate", "rotate",
         "access_sync", "plan_checkpoint", "replica_serve", "config_check", "completion")


def load(name: str):
    """The command module NAME (one of NAMES)."""
    return importlib.import_module(f"{__name__}.{name}")


def matching(words: Sequence[str]):
    """The one command module whose PATH begins ``words`` (the command line's words, options excluded),
    importing only the modules that could be it: those whose names begin with the longest run of the
    words, joined by "_", that any name begins with (a module's name is its PATH so joined, or that and
    more: `list` is list_versions). None when no module, or more than one, matches: the caller then
    builds the whole tree, and argparse says what is wrong."""
    keys = [w.replace("-", "_") for w in words]
    for k in range(len(keys), 0, -1):
        prefix = "_".join(keys[:k])
        candidates = [n for n in NAMES if n == prefix or n.startswith(prefix + "_")]
        if candidates:
            found = [m for m in map(load, candidates) if tuple(words[: len(m.PATH)]) == m.PATH]
            return found[0] if len(found) == 1 else None
    return None


def __getattr__(name: str):
    if name == "ALL":  # every command module, in NAMES's order (imports them all)
        return [load(n) for n in NAMES]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
