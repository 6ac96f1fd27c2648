"""ZFS kernel module parameters: the persistent file in /etc/modprobe.d and the live values in
/sys/module/zfs/parameters. Reading and writing go through small file functions so the logic
is tested against a temporary directory.
"""

from __future__ import annotations

from pathlib import Path

from ..base import atomic
from ..base.errors import NotFound, UserError

SYSFS = Path("/sys/module/zfs/parameters")
MODPROBE_FILE = Path("/etc/modprobe.d/zfs-fabric.conf")
HEADER = "# Managed by the storage_base role (fabric). Changes here are overwritten.\n"


def render_modprobe(params: dict) -> str:
    """The modprobe.d file for params (sorted, so the file is stable across runs)."""
    if not params:
        return HEADER
    opts = " ".join(f"{k}={_value(v)}" for k, v in sorted(params.items()))
    return f"{HEADER}options zfs {opts}\n"


def _value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def read_live(params, sysfs: Path = SYSFS) -> dict:
    """Live values of the named parameters; NotFound for a parameter this ZFS does not have."""
    live = {}
    for name in params:
        path = sysfs / name
        try:
            live[name] = path.read_text().strip()
        except FileNotFoundError:
            if not sysfs.is_dir():
                raise NotFound(f"{sysfs} does not exist: the zfs kernel module is not loaded",
                               "load it (`modprobe zfs`) before applying live tunables") from None
            raise NotFound(f"unknown ZFS module parameter {name!r} (no {path})",
                           "check the name against `ls /sys/module/zfs/parameters`") from None
    return live


def diff_live(params: dict, live: dict) -> dict:
    """{name: (live, desired)} for every parameter whose live value differs."""
    return {k: (live[k], _value(v)) for k, v in params.items() if live.get(k) != _value(v)}


def apply_live(changes: dict, sysfs: Path = SYSFS) -> None:
    for name, (_old, new) in changes.items():
        path = sysfs / name
        try:
            with open(path, "w") as fh:
                fh.write(new)
        except OSError as exc:
            raise UserError(f"cannot set {name}={new} live: {exc.strerror}",
                            "the value may be out of range for this ZFS version; check `modinfo zfs`") from exc


def ensure(params: dict, *, dry_run: bool, sysfs: Path = SYSFS, modprobe_file: Path = MODPROBE_FILE) -> dict:
    """Write the modprobe file and live values where they differ. Returns changed/diff details."""
    for k, v in params.items():
        if not isinstance(v, (int, bool)) or (isinstance(v, int) and v < 0):
            raise UserError(f"ZFS tunable {k}={v!r} must be a non-negative integer",
                            "give a number of bytes (zfs_arc_max) or 0/1 (flags)")
    wanted = render_modprobe(params)
    try:
        current = modprobe_file.read_text()
    except FileNotFoundError:
        current = ""
    file_changed = current != wanted
    if sysfs.is_dir():
        live_changes = diff_live(params, read_live(params, sysfs))
    else:
        live_changes = {}  # module not loaded: modprobe applies the file's values when it loads
    if not dry_run:
        if file_changed:
            atomic.write_file(modprobe_file, wanted, mode=0o644)  # no predictable temporary name, no link followed
        apply_live(live_changes, sysfs)
    return {"changed": file_changed or bool(live_changes), "file_changed": file_changed,
            "module_loaded": sysfs.is_dir(),
            "live_changed": {k: {"before": a, "after": b} for k, (a, b) in live_changes.items()},
            "before": current, "after": wanted}
