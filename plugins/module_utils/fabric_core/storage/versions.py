"""Dataset staging volumes and their sealed versions, read from ZFS in one listing each
(`zfs list -j -p`, OpenZFS 2.3 JSON without --json-int: user properties such as fabric:version=007
arrive as set; see zjson.py).

A dataset NAME is a zvol ``DATASET_ROOT/NAME`` (the writable staging volume, carrying
``fabric:kind=dataset`` and ``fabric:fs``); each version is a snapshot ``DATASET_ROOT/NAME@VERSION``
with ``fabric:kind=dataset-version`` and the seal's user properties. Checkpoint volumes
(``fabric:kind=checkpoint-volume``) and their snapshots (``fabric:kind=checkpoint``) use the same
listing.
"""

from __future__ import annotations

import datetime
import os

from . import zfs, zjson

PROPS = ("fabric:managed", "fabric:kind", "fabric:version", "fabric:created-by", "fabric:created-at", "fabric:note",
         "fabric:files", "fabric:bytes", "fabric:manifest-sha256", "fabric:step", "fabric:tags", "fabric:fs")
SNAPSHOT_COLUMNS = ("name", "creation", "used", "referenced", "userrefs", *PROPS)
VOLUME_COLUMNS = ("name", "volsize", "used", "referenced", "snapdev", "fabric:managed", "fabric:kind", "fabric:fs",
                  "fabric:writer")
# fabric:kind values set on snapshots themselves (volumes carry "dataset" / "checkpoint-volume", which
# a snapshot taken by hand inherits: that is how a foreign snapshot is told apart)
SNAPSHOT_KINDS = ("dataset-version", "checkpoint")
INT_COLUMNS = {"creation", "used", "referenced", "userrefs", "volsize", "fabric:files", "fabric:bytes"}


def _typed(rows: list[dict]) -> list[dict]:
    for row in rows:
        for key, value in list(row.items()):
            if value == "-":
                row[key] = None
            elif key in INT_COLUMNS and value.isdigit():
                row[key] = int(value)
    return rows


def _list(runner, root: str, kind: str, columns, oldest_first: bool = False) -> list[dict]:
    extra = ("-s", "createtxg") if oldest_first else ()
    argv = ["zfs", "list", *zjson.ZFS_JSON, "-t", kind, "-o", ",".join(columns), *extra, "-r", root]
    doc = zjson.run(runner, argv, missing=zjson.NO_DATASET)
    # oldest first: zfs sorts by createtxg, and so does rows_of, on the txg each object of the JSON carries
    return [] if doc is None else _typed(zfs.rows_of(doc, columns, by_txg=oldest_first))


def parse_snapshots(text: str) -> list[dict]:
    """`zfs list -j -p -t snapshot -o SNAPSHOT_COLUMNS ...` -> rows, oldest first: "-" becomes
    None and the INT_COLUMNS numbers; every other value stays the string `zfs get -Hp` prints."""
    return _typed(zfs.list_rows(text, SNAPSHOT_COLUMNS, by_txg=True))


def list_snapshots(runner, root: str, kinds=("dataset-version",), extra_columns=()) -> list[dict]:
    """Project snapshots under root, oldest first, with their fabric properties and userrefs (holds).

    extra_columns: more properties read in the same listing (a checkpoint's metrics), so that one
    `zfs list` serves, however many snapshots there are.
    """
    rows = _list(runner, root, "snapshot", (*SNAPSHOT_COLUMNS, *extra_columns), oldest_first=True)
    out = []
    for row in rows:
        if row.get("fabric:managed") != "true" or (kinds and row.get("fabric:kind") not in kinds):
            continue
        dataset, _at, snap = row["name"].partition("@")
        row["dataset"], row["snapshot"] = dataset, snap
        row["name_short"] = dataset.rsplit("/", 1)[-1]
        out.append(row)
    return out


def list_volumes(runner, root: str, kinds=("dataset",)) -> list[dict]:
    rows = _list(runner, root, "volume", VOLUME_COLUMNS)
    return [r for r in rows if r.get("fabric:managed") == "true" and (not kinds or r.get("fabric:kind") in kinds)]


def created_by() -> str:
    import getpass  # noqa: PLC0415 - lazy: a command's start (docs/testing.md)

    user = os.environ.get("SUDO_USER") or getpass.getuser()
    return f"{user}@{os.uname().nodename}"  # gethostname(2)


def now_iso(now: datetime.datetime | None = None) -> str:
    now = now or datetime.datetime.now(datetime.UTC)
    return now.astimezone(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def list_all_snapshots(runner, root: str, extra_columns=()) -> list[dict]:
    """Every snapshot under root (managed or not), oldest first, with the fabric properties (and
    extra_columns, read in the same listing)."""
    rows = _list(runner, root, "snapshot", (*SNAPSHOT_COLUMNS, *extra_columns), oldest_first=True)
    for row in rows:
        row["dataset"], _at, row["snapshot"] = row["name"].partition("@")
    return rows


def owned(row: dict) -> bool:
    """Whether fabricctl made this snapshot: fabric:kind is one of its snapshot kinds.

    Not fabric:managed alone: user properties are inherited, so a snapshot someone takes by hand
    of a fabricctl volume shows fabric:managed=true (and the volume's kind) as well.
    """
    return row.get("fabric:managed") == "true" and row.get("fabric:kind") in SNAPSHOT_KINDS


def as_property_strings(row: dict) -> dict[str, str]:
    """A listing row back to `zfs get -Hp` strings ("-" for unset), as retention expects."""
    return {k: "-" if v is None else str(v) for k, v in row.items()}
