"""``fabricctl --version``: fabricctl's own version, then what it finds of what it runs with on a node.

The tools (ZFS, open-iscsi) and the Python modules fabricctl imports: rtslib-fb, libzfs_core,
prometheus_client, systemd's journal binding, paramiko and PyYAML. On a storage node the modules are
Debian's packages (``REQUIREMENTS``), seen through the virtualenv's system site packages; pyproject.toml
declares paramiko and PyYAML (pip checks them at install) and the others as extras, which the fabricctl
role does not ask for: ``--version`` is where a node shows which of them it has.

Each probe returns a version string or None ("not found", followed by the Debian package that provides
it); a probe never fails the command (a missing tool, a hung tool (timeout), a module that does not
import: all are reported, none raises).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
from collections.abc import Callable, Sequence

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


def module_version(distribution: str, module: str,
                   metadata: Callable[[str], str] = importlib.metadata.version,
                   import_module: Callable[[str], object] = importlib.import_module) -> str | None:
    """The version of a Python module fabricctl imports, as this interpreter finds it: None when it is not
    installed; its distribution's version (what pip sees, a Debian package's egg-info included), else the
    module's ``__version__``, else "installed (version unknown)"; a module that is installed but does not
    import (a missing shared library, a broken install) says so, with the error."""
    try:
        imported = import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            return None  # the module itself (or its package) is not there
        return f"installed, but does not import: {exc}"  # one of its own imports is missing
    except Exception as exc:  # noqa: BLE001 - a broken module is reported, never raised
        return f"installed, but does not import: {type(exc).__name__}: {exc}"
    try:
        return metadata(distribution)
    except importlib.metadata.PackageNotFoundError:
        pass
    version = getattr(imported, "__version__", None)
    return str(version) if version else "installed (version unknown)"


def rtslib_version(metadata: Callable[[str], str] = importlib.metadata.version,
                   import_module: Callable[[str], object] = importlib.import_module) -> str | None:
    return module_version("rtslib-fb", "rtslib_fb", metadata, import_module)


def iscsi_version(run: Callable[[list[str]], str | None] = _run) -> str | None:
    """`iscsiadm --version`, e.g. "iscsiadm version 2.1.8"."""
    return _first_line(run(["iscsiadm", "--version"]))


# The Python modules fabricctl imports: (label, distribution, module, Debian package, pyproject.toml extra, or
# None for a declared dependency). pyproject.toml's dependencies and extras are checked against this table.
REQUIREMENTS: tuple[tuple[str, str, str, str, str | None], ...] = (
    ("rtslib-fb", "rtslib-fb", "rtslib_fb", "python3-rtslib-fb", "lio"),  # the LIO targets
    ("libzfs_core", "pyzfs", "libzfs_core", "python3-pyzfs", "zfs"),  # snapshots, holds, batched destroys
    ("prometheus-client", "prometheus-client", "prometheus_client", "python3-prometheus-client", "metrics"),
    ("systemd journal", "systemd-python", "systemd.journal", "python3-systemd", "journal"),  # else syslog
    ("paramiko", "paramiko", "paramiko", "python3-paramiko", None),  # SSH to the GPU nodes
    ("PyYAML", "PyYAML", "yaml", "python3-yaml", None),  # a configuration in YAML
)


def _module_probe(distribution: str, module: str) -> Probe:
    return lambda: module_version(distribution, module)


# (label, probe, Debian package named when it is not found)
PROBES: tuple[tuple[str, Probe, str], ...] = (
    ("zfs", zfs_version, "zfsutils-linux"),
    ("open-iscsi", iscsi_version, "open-iscsi"),
    *((label, _module_probe(dist, module), package) for label, dist, module, package, _extra in REQUIREMENTS),
)


def version_text(probes: Sequence[tuple] | None = None, own: Callable[[], str] | None = None) -> str:
    """``fabricctl X.Y.Z`` then one ``LABEL: VERSION`` line per probe (default PROBES): 'not found' when absent,
    followed by the Debian package that provides it when the probe names one."""
    lines = [f"fabricctl {(own or fabricctl_version)()}"]
    for label, probe, *package in PROBES if probes is None else probes:
        try:
            found = probe()
        except Exception:  # noqa: BLE001 - --version never fails on what it cannot find
            found = None
        missing = f"not found (Debian package {package[0]})" if package and package[0] else "not found"
        lines.append(f"{label}: {found or missing}")
    return "\n".join(lines)
