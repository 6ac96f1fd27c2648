"""LIO's saved configuration: what the boot-time restore (Debian's rtslib-fb-targetctl.service) reads.

``save`` writes the whole configuration atomically, mode 0600 (it holds CHAP secrets).
"""

from __future__ import annotations

import json
import os

from ...base import atomic

# Debian's rtslib-fb (and its rtslib-fb-targetctl.service, which restores at boot) use this file.
SAVE_FILE = "/etc/rtslib-fb-target/saveconfig.json"
RESTORE_UNIT = "rtslib-fb-targetctl.service"


def save(rts, save_file: str = SAVE_FILE) -> None:
    """The whole LIO configuration (``RTSRoot().dump()``, what rtslib's save_to_file writes and targetctl
    restores at boot) written atomically, mode 0600 (it holds CHAP secrets): a temporary file of its own in
    the same directory, fsync, rename (``atomic.write_file``). rtslib's own save uses one fixed temporary
    name for every writer, and a crash may leave a truncated file that the boot-time restore refuses."""
    os.makedirs(os.path.dirname(save_file), mode=0o700, exist_ok=True)
    text = json.dumps(rts.RTSRoot().dump(), sort_keys=True, indent=2) + "\n"
    atomic.write_file(save_file, text, mode=0o600)
