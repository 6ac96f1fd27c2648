"""What composes mechanisms on a storage node: publishing, replication, retention, the checkpoint
planner, versions' history, ingest, warming, health and metrics, and the site-wide invariants.

May import ``base``, ``node`` and ``storage``.
"""
