"""What changed between two versions of a dataset: files added, removed and changed, with counts and bytes.

Read from the two versions' manifests (each in its snapshot, mounted read-only for the run as `verify`
mounts one), side by side as two streams: both are sorted by path, so one entry of each is in memory at a
time, never a whole manifest, and the changes are printed as they are found. A changed entry is a file
whose size or SHA-256 differs, a symbolic link with another target, or a path whose kind changed. Each
manifest's SHA-256 is checked against the one its version recorded. Versions of two datasets are refused
(a diff compares versions of one dataset); NAME@TAG names the version the tag names now.

  + path          added (in B only)
  - path          removed (in A only)
  M path  (...)   changed

--stat prints the totals only; --json the totals and every change (the changes, not the manifests, are
then held in memory: --stat --json for the totals alone).

Examples:
  fabricctl diff imagenet@v1 imagenet@v2
  fabricctl diff imagenet@v1 imagenet@prod --stat
"""

from __future__ import annotations

import os

from fabric_core.base.errors import UserError
from fabric_core.base.names import parse_ref
from fabric_core.node import manifest

from .. import datasets

PATH = ("diff",)
HELP = "files added, removed and changed between two versions of a dataset"
MUTATING = False  # read-only: no node lock, no journal record (the dataset's lock, shared)
NODE_LOCK = False


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("dataset", parse_ref(args.old)[0], True)]  # read while it runs: no destroy meanwhile


def configure(p) -> None:
    p.add_argument("old", metavar="NAME@A", help="the older version (or a tag)")
    p.add_argument("new", metavar="NAME@B", help="the newer version (or a tag)")
    p.add_argument("--stat", action="store_true", help="the totals only")


def check_same_dataset(old_ref: str, new_ref: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The two references parsed; UserError when they name two datasets."""
    old, new = parse_ref(old_ref), parse_ref(new_ref)
    if old[0] != new[0]:
        raise UserError(f"{old_ref} and {new_ref} are versions of two datasets ({old[0]}, {new[0]}): a diff "
                        "compares two versions of one dataset", f"name two versions of one dataset, e.g. "
                        f"`fabricctl diff {old_ref} {old[0]}@{new[1]}`")
    return old, new


def run(ctx, args) -> int:
    (name, a), (_same, b) = check_same_dataset(args.old, args.new)
    row_a, row_b = datasets.require_version(ctx, name, a), datasets.require_version(ctx, name, b)
    a, b = row_a["snapshot"], row_b["snapshot"]
    totals: dict = {}
    changes: list[dict] = []
    with datasets.mounted_readonly(ctx, datasets.export_of(ctx, row_a)) as root_a, \
            datasets.mounted_readonly(ctx, datasets.export_of(ctx, row_b)) as root_b:
        path_a, path_b = (os.path.join(r, manifest.MANIFEST_RELPATH) for r in (root_a, root_b))
        for change in manifest.diff(path_a, path_b, totals):
            if args.json:
                if not args.stat:
                    changes.append(change.to_dict())
            elif not args.stat:
                print(change.line())
    for row, side in ((row_a, "old"), (row_b, "new")):
        recorded = row.get("fabric:manifest-sha256")
        if recorded and totals[side]["manifest_sha256"] != recorded:
            raise UserError(f"the manifest of {name}@{row['snapshot']} is not the one its seal recorded (sha256 "
                            f"{totals[side]['manifest_sha256']}, recorded {recorded})",
                            f"run `fabricctl verify {name}@{row['snapshot']}`: the version is damaged")
    out = {"dataset": name, "old": a, "new": b, "totals": totals, **({} if args.stat else {"changes": changes})}
    if args.json:
        ctx.emit(out)
    else:
        print(f"{name}@{a} -> {name}@{b}: {manifest.diff_summary(totals)}")
    return 0
