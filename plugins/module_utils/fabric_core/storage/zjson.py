"""OpenZFS 2.3's JSON output, read one way by every part of the core.

OpenZFS 2.3 prints pools, vdev trees, datasets and properties as JSON (``-j``). The core reads every
pool, dataset, property and status from it:

* ``zpool status -j --json-int -P [POOL]``, ``zpool list -j --json-int POOL``,
  ``zpool get -j --json-int all POOL`` (zpool.py, disks.py): ``ZPOOL_JSON``, numbers as JSON numbers;
* ``zfs get -j -p PROPS NAME``, ``zfs list -j -p -o ... -r ROOT`` (zfs.py, versions.py): ``ZFS_JSON``,
  without ``--json-int``: every value is the string ``zfs get -H -p`` prints.

Why zfs is read without ``--json-int``: libzfs prints EVERY all-digit value as a number under it, user
properties included (``zprop_nvlist_one_property``), so ``fabric:version=007`` reads back as ``7`` and
``fabric:note=0042`` as ``42``, and the original text is lost (recorded on the lab:
tests/unit/data/zfs23b/x_list_snaps_int.json against x_list_snaps_p.json). With ``-p`` alone numbers
arrive as exact digit strings, which is the text form the core compares anyway.

zpool keeps ``--json-int``: ``zpool status`` and ``zpool list`` (default columns) print no property a
user sets. ``zpool get all`` does list a pool's user properties (OpenZFS 2.2 added them; libzfs
``zpool_expand_proplist`` adds them to "all"), and the native string property ``comment`` too, so an
all-digit value there loses its leading zeros the same way: zpool.py refuses to declare a pool property
value that would not read back as written (``zpool.check_json_int_safe``). The recordings hold no pool
user property (tests/unit/data/zfs23b/*get*.json of zpool).

What 2.3 prints only as text stays text, and is never parsed: the dry runs ``zpool create -n``,
``zpool add -n`` and ``zfs create -n -v`` are shown to the operator as they are. ``zfs holds`` has
no ``-j`` in 2.3; holds are read through libzfs_core (lzc.py).

A property comes back in the form ``zfs get -H -p`` printed it, ``(value, source)``: the value as a
string ("-" when unset), the source "local", "default", "-", "inherited from X", "temporary" or
"received". Comparisons and the normalisation of values (zfs.normalize) stay independent of how
the output was read.
"""

from __future__ import annotations

import json

from ..base.errors import CommandError, FabricError, UserError
from ..base.runner import Runner

ZPOOL_JSON = ("-j", "--json-int")  # zpool status/list/get: numbers as JSON numbers
JSON = ZPOOL_JSON  # the name disks.py reads `zpool status` with
ZFS_JSON = ("-j", "-p")  # zfs get/list: every value as the exact text `zfs get -H -p` prints, never a number
NO_POOL = "no such pool"  # stderr of zpool for a pool that is not imported
NO_DATASET = "does not exist"  # stderr of zfs: "cannot open 'x': dataset does not exist"
# what zpool/zfs print when they do not know -j (OpenZFS before 2.3); recorded on 2.3 from `zfs holds -j`
_NO_JSON = "invalid option 'j'"
_SOURCES = {"LOCAL": "local", "DEFAULT": "default", "NONE": "-", "TEMPORARY": "temporary", "RECEIVED": "received"}


class ZfsWithoutJson(UserError):
    """The node's zpool/zfs do not print JSON: an OpenZFS older than 2.3, which the fabric no longer runs on."""


def loads(argv, text: str) -> dict:
    """The JSON document a zpool/zfs command printed; a FabricError when it is not one."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise FabricError(f"`{' '.join(argv)}` did not print JSON ({exc}): {text.strip()[:200]!r}",
                          "check that this node runs OpenZFS 2.3 (`zfs version`)") from exc
    if not isinstance(doc, dict):
        raise FabricError(f"`{' '.join(argv)}` printed JSON that is not an object: {text.strip()[:200]!r}",
                          "check that this node runs OpenZFS 2.3 (`zfs version`)")
    return doc


def run(runner: Runner, argv, *, missing: str = "") -> dict | None:
    """Run a read-only zpool/zfs command with JSON output and return the document.

    None when it failed because the named object does not exist (``missing`` is in its stderr,
    e.g. NO_POOL or NO_DATASET); ZfsWithoutJson when zpool/zfs do not know -j; CommandError for
    any other failure.
    """
    res = runner.run(argv, check=False)
    if res.rc == 0:
        return loads(res.argv, res.stdout)
    if missing and missing in res.stderr:
        return None
    refuse_without_json(res)
    raise CommandError(res.argv, res.rc, res.stdout, res.stderr)


def refuse_without_json(res) -> None:
    """Raise ZfsWithoutJson when a failed command's stderr says its zpool/zfs does not know -j."""
    if _NO_JSON in res.stderr:
        raise ZfsWithoutJson(f"`{' '.join(res.argv)}` failed: this node's {res.argv[0]} prints no JSON (it is older "
                             "than OpenZFS 2.3)", "upgrade the node to OpenZFS 2.3 (role storage_base; "
                             "fabric_platform lists the steps), then run again")


def value_text(value) -> str:
    """A JSON property value as `zfs get -H -p` prints it: numbers as digits, "-" for none."""
    if value is None:
        return "-"
    return str(value)


def source_text(source) -> str:
    """A JSON property source ({type, data}) as the text SOURCE column: local, default, -, inherited from X..."""
    if not isinstance(source, dict):
        return "-"
    kind = str(source.get("type", "NONE"))
    if kind == "INHERITED":
        return f"inherited from {source.get('data', '')}"
    return _SOURCES.get(kind, kind.lower())


def properties(obj: dict) -> dict:
    """{property: (value, source)} of one pool or dataset object of `zpool get`/`zfs get`/`zfs list` -j."""
    out = {}
    for prop, entry in (obj.get("properties") or {}).items():
        if isinstance(entry, dict):
            out[prop] = (value_text(entry.get("value")), source_text(entry.get("source")))
    return out


def objects(doc: dict, key: str) -> list:
    """The pool (key "pools") or dataset (key "datasets") objects of a document, in the order printed."""
    return [v for v in (doc.get(key) or {}).values() if isinstance(v, dict)]


__all__ = ["JSON", "NO_DATASET", "NO_POOL", "ZFS_JSON", "ZPOOL_JSON", "ZfsWithoutJson", "loads", "objects",
           "properties", "refuse_without_json", "run", "source_text", "value_text"]
