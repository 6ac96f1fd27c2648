"""fabricctl: the operator's CLI for the storage fabric (runs on storage nodes)."""

from fabric_core import __version__

__all__ = ["__version__"]
