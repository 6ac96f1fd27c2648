"""Foundations of the core, used on both sides (storage nodes and GPU nodes) and by every front end.

The typed errors (problem + fix), the plan model and its applier, the one runner of commands, the naming
and configuration rules, units, the atomic file writer, the node and object locks, CHAP, conffile editing
and the platform check. Nothing here imports ``node``, ``storage`` or ``services``.
"""
