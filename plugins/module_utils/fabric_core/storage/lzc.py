"""libzfs_core (pyzfs) for the operations where one library call beats many `zfs` commands.

Snapshots with their user properties in one atomic call, holds, and batched destroys: one
``lzc_destroy_snaps`` for many snapshots of a pool instead of one ``zfs destroy`` (and one txg
wait) per snapshot. Reads and property listings stay with the ``zfs`` command through a Runner
(libzfs_core has no property read), see ``zfs.py``.

Every function takes and returns ``str`` names (pyzfs wants bytes) and turns pyzfs exceptions into
typed fabric errors. A change goes through the caller's ``Runner`` (``runner.call``): in a dry run it
is planned, not made, and either way it is recorded with the commands (``lzc_hold SNAPSHOT TAG``), so
a dry run lists holds and destroys as it lists ``zfs set``. pyzfs is imported lazily: the module
imports on machines without it (unit tests, controllers).
"""

from __future__ import annotations

from ..base.errors import AlreadyExists, Busy, FabricError, NotFound, UserError
from ..base.rules import HOLD_PUBLISHED
from ..base.runner import Runner

__all__ = ["HOLD_PUBLISHED", "ZfsLibraryError", "exists", "snapshot", "holds", "hold", "release",
           "destroy_snapshots", "rollback_to"]


class ZfsLibraryError(FabricError):
    """A libzfs_core call failed for a reason the caller did not anticipate."""


def _lzc():
    try:
        import libzfs_core  # noqa: PLC0415 - lazy on purpose
    except ImportError as exc:
        raise UserError("python3-pyzfs (libzfs_core) is not installed on this node",
                        "install the Debian package python3-pyzfs (the storage role does)") from exc
    return libzfs_core


def _b(value: str) -> bytes:
    return value.encode()


def _errors(exc) -> str:
    inner = getattr(exc, "errors", None) or []
    parts = [f"{type(e).__name__}: {getattr(e, 'name', b'') and e.name.decode(errors='replace')} {e}".strip()
             for e in inner]
    return f"{type(exc).__name__}: {exc}" + (f" ({'; '.join(parts)})" if parts else "")


def exists(name: str) -> bool:
    return bool(_lzc().lzc_exists(_b(name)))


def snapshot(names: list[str], props: dict[str, str] | None = None, *, runner: Runner) -> list[str]:
    """Create the snapshots atomically (all in one txg) with user properties; AlreadyExists if one exists."""
    if names:
        runner.call(("lzc_snapshot", *names), lambda: _snapshot(names, props))
    return list(names)


def _snapshot(names: list[str], props: dict[str, str] | None) -> None:
    lzc = _lzc()
    from libzfs_core import exceptions as ex  # noqa: PLC0415

    try:
        lzc.lzc_snapshot([_b(n) for n in names], {_b(k): _b(str(v)) for k, v in (props or {}).items()})
    except ex.SnapshotFailure as exc:
        if any(isinstance(e, ex.SnapshotExists) for e in (exc.errors or [])):
            raise AlreadyExists(f"snapshot already exists: {', '.join(names)}",
                                "choose a new version/step; versions are immutable") from exc
        if any(isinstance(e, ex.NoSpace) for e in (exc.errors or [])):
            raise UserError(f"the pool has no space for snapshot {', '.join(names)}",
                            "free space (fabricctl rotate) or grow the pool") from exc
        raise ZfsLibraryError(f"lzc_snapshot {', '.join(names)} failed: {_errors(exc)}") from exc


def holds(snapshot_name: str) -> list[str]:
    lzc = _lzc()
    from libzfs_core import exceptions as ex  # noqa: PLC0415

    try:
        return sorted(t.decode() for t in lzc.lzc_get_holds(_b(snapshot_name)))
    except ex.SnapshotNotFound as exc:
        raise NotFound(f"snapshot {snapshot_name} does not exist") from exc


def hold(snapshot_name: str, tag: str = HOLD_PUBLISHED, *, runner: Runner) -> bool:
    """Place the hold unless it is there; return True when it was (or would be) added."""
    if tag in holds(snapshot_name):
        return False
    return runner.call(("lzc_hold", snapshot_name, tag), lambda: _hold(snapshot_name, tag)) is not False


def _hold(snapshot_name: str, tag: str) -> bool:
    lzc = _lzc()
    from libzfs_core import exceptions as ex  # noqa: PLC0415

    try:
        lzc.lzc_hold({_b(snapshot_name): _b(tag)}, None)
    except ex.HoldFailure as exc:
        if any(isinstance(e, ex.HoldExists) for e in (exc.errors or [])):
            return False
        raise ZfsLibraryError(f"lzc_hold {snapshot_name} {tag} failed: {_errors(exc)}") from exc
    return True


def release(snapshot_name: str, tag: str = HOLD_PUBLISHED, *, runner: Runner) -> bool:
    """Release the hold if it is there; return True when it was (or would be) released."""
    try:
        present = tag in holds(snapshot_name)
    except NotFound:
        return False
    if not present:
        return False
    runner.call(("lzc_release", snapshot_name, tag), lambda: _release(snapshot_name, tag))
    return True


def _release(snapshot_name: str, tag: str) -> None:
    lzc = _lzc()
    from libzfs_core import exceptions as ex  # noqa: PLC0415

    try:
        lzc.lzc_release({_b(snapshot_name): [_b(tag)]})
    except ex.HoldReleaseFailure as exc:
        raise ZfsLibraryError(f"lzc_release {snapshot_name} {tag} failed: {_errors(exc)}") from exc


def destroy_snapshots(names: list[str], *, runner: Runner) -> list[str]:
    """Destroy many snapshots of one pool in one call (no deferral: a held snapshot fails the batch)."""
    if not names:
        return []
    pools = {n.split("/", 1)[0] for n in names}
    if len(pools) != 1:
        raise UserError(f"one destroy batch must stay in one pool, got {sorted(pools)}")
    runner.call(("lzc_destroy_snaps", *names), lambda: _destroy_snapshots(names))
    return list(names)


def _destroy_snapshots(names: list[str]) -> None:
    lzc = _lzc()
    from libzfs_core import exceptions as ex  # noqa: PLC0415

    try:
        lzc.lzc_destroy_snaps([_b(n) for n in names], False)
    except ex.SnapshotDestructionFailure as exc:
        if any(isinstance(e, ex.SnapshotIsHeld) for e in (exc.errors or [])):
            raise Busy(f"a snapshot in the batch is held: {_errors(exc)}",
                       "release or unpublish it first; nothing in this batch was destroyed") from exc
        raise ZfsLibraryError(f"lzc_destroy_snaps of {len(names)} snapshots failed: {_errors(exc)}") from exc


def rollback_to(dataset: str, snapshot_name: str, *, runner: Runner) -> None:
    """Roll back to the most recent snapshot (libzfs_core refuses if a newer one exists)."""
    runner.call(("lzc_rollback_to", dataset, snapshot_name), lambda: _rollback_to(dataset, snapshot_name))


def _rollback_to(dataset: str, snapshot_name: str) -> None:
    lzc = _lzc()
    from libzfs_core import exceptions as ex  # noqa: PLC0415

    try:
        lzc.lzc_rollback_to(_b(dataset), _b(snapshot_name))
    except ex.SnapshotNotLatest as exc:
        raise UserError(f"{snapshot_name} is not the latest snapshot of {dataset}",
                        "destroy the newer snapshots first") from exc
    except ex.ZFSError as exc:
        raise ZfsLibraryError(f"lzc_rollback_to {snapshot_name} failed: {_errors(exc)}") from exc
