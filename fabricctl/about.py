"""``fabricctl --version``: fabricctl's own version, then what it finds of ZFS, rtslib-fb and open-iscsi.

Each probe returns a version string or None ("not found"); a probe never fails the command (a
missing tool, a hung tool (timeout), a module that does not import: all are "not found").
"""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
from collections.abc import Callable

DISTRIBUTION = "gpu-storage-fabric"  # pyproject.toml's project name
TIMEOUT = 10.0  # seconds a version command may take

Probe = Callable[[], "str | None"]


def _run(argv: list[str]) -> str | None:
    """stdout (else stderr) of a command that exits 0, or None."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False)  # noqa: S603
    except (OSError, subprocess.SubprocessError):
        return None
    return (res.stdout.strip() or res.stderr.strip()) if res.returncode == 0 else None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _first_line(text: str | None) -> str | None:
    return text.strip().splitlines()[0].strip() if text and text.strip() else None


def fabricctl_version(metadata: Callable[[str], str] = importlib.metadata.version) -> str:
    """The installed distribution's version; fabricctl.__version__ when it is not installed as one
    (the fabricctl role copies the packages)."""
    try:
        return metadata(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        from . import __version__  # noqa: PLC0415

        return __version__


def zfs_version(run: Callable[[list[str]], str | None] = _run, read: Callable[[str], str | None] = _read) -> str | None:
    """The first line of `zfs version` (userland, e.g. zfs-2.1.11-1), else the loaded module's version."""
    line = _first_line(run(["zfs", "version"]))
    if line:
        return line
    module = _first_line(read("/sys/module/zfs/version"))
    return f"zfs-kmod-{module} (kernel module)" if module else None


def rtslib_version(metadata: Callable[[str], str] = importlib.metadata.version,
                   import_module: Callable[[str], object] = importlib.import_module) -> str | None:
    try:
        return metadata("rtslib-fb")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return str(import_module("rtslib_fb").__version__)
    except Exception:  # noqa: BLE001 - not installed, or broken: "not found" either way
        return None


def iscsi_version(run: Callable[[list[str]], str | None] = _run) -> str | None:
    """`iscsiadm --version`, e.g. "iscsiadm version 2.1.8"."""
    return _first_line(run(["iscsiadm", "--version"]))


PROBES: tuple[tuple[str, Probe], ...] = (("zfs", zfs_version), ("rtslib-fb", rtslib_version),
                                         ("open-iscsi", iscsi_version))


def version_text(probes: tuple[tuple[str, Probe], ...] | None = None, own: Callable[[], str] | None = None) -> str:
    """``fabricctl X.Y.Z`` then one ``LABEL: VERSION`` line per probe (default PROBES), 'not found' when absent."""
    lines = [f"fabricctl {(own or fabricctl_version)()}"]
    for label, probe in PROBES if probes is None else probes:
        try:
            found = probe()
        except Exception:  # noqa: BLE001 - --version never fails on what it cannot find
            found = None
        lines.append(f"{label}: {found or 'not found'}")
    return "\n".join(lines)
