"""Copy data into a dataset's staging volume, with a progress bar (files and bytes); resumable.

Each SOURCE is a file or directory on this node. Like rsync: a directory given with a trailing
slash copies its contents into the dataset root; without one, the directory itself is copied
(DATASET/<basename>/...). Files already present with the same size and modification time are
skipped, so re-running an interrupted ingest continues where it stopped. Each file is written
to a temporary name and renamed into place, so no half-copied file is ever taken for a good one.

Only what is inside the source is copied (fabric_core.services.ingest): the whole source is walked first,
with directory descriptors, and the ingest is refused, before anything is copied, when it holds a
symbolic link (every one is named: a link followed as root could copy any file of this node into
a dataset every GPU node reads), a file with a hard link outside the sources, a special file, or
anything that cannot be read. The copy takes exactly the files that walk checked: each is opened
again without following links and copied from that descriptor only if it is the file checked, so a
file swapped for a link during the copy is refused too, and one added since is not copied. A
SOURCE that is itself a symbolic link is followed once; a broken one or a loop is refused.

Copying with any other tool into the mounted staging directory (STAGING_ROOT/NAME) works too.
Each ingest records its sources (their absolute paths, and --into) for the next seal, which stores
them with the version (fabric:sources; `fabricctl show NAME@VERSION`).

Examples:
  fabricctl dataset ingest imagenet /import/imagenet/
  fabricctl dataset ingest imagenet /import/train /import/val --into raw
"""

from __future__ import annotations

import errno
import os

from fabric_core.base.errors import NotFound, UserError
from fabric_core.base.names import validate_fabric_name
from fabric_core.services import history, ingest

from .. import datasets, faults
from ..output import ProgressBar, human_bytes

PATH = ("dataset", "ingest")
HELP = "copy files into a dataset's staging volume (resumable)"
MUTATING = True  # logs a journal record (not with --dry-run); its locks below
NODE_LOCK = False  # hours of copying: only around the staging mount (datasets.mount_staging)


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    name = validate_fabric_name(args.name)
    return [("dataset", name, True), ("staging", name, False)]  # the volume kept; its staging file system ours


def configure(p) -> None:
    p.add_argument("name", metavar="NAME", help="the dataset (created with `fabricctl dataset create`)")
    p.add_argument("sources", metavar="SOURCE", nargs="+", help="files or directories on this node")
    p.add_argument("--into", metavar="SUBDIR", default="", help="a sub-directory of the dataset to copy into")


def run(ctx, args) -> int:
    name = validate_fabric_name(args.name)
    missing = [s for s in args.sources if not os.path.lexists(s)]
    if missing:
        raise NotFound(f"source path does not exist: {', '.join(missing)}", "check the path (on this storage node)")
    into = os.path.normpath(args.into) if args.into else ""
    if into.startswith("..") or os.path.isabs(into) or into.startswith(".fabric"):
        raise UserError(f"--into {args.into!r} must be a relative path inside the dataset (not .fabric)",
                        "for example --into train")
    files = ingest.plan(args.sources)  # the whole source, walked before anything changes: refused here
    faults.pause("ingest-copy")  # the lab's test swaps a file for a symbolic link here
    vol = datasets.require(ctx, name)
    with ctx.node_lock():  # the mount is node state; the copy below holds only this dataset's locks
        root = datasets.mount_staging(ctx, name, vol.get("fabric:fs") or "ext4")
    faults.pause("ingest-copying")  # the lab's stall test holds a copy here: mounted, the node lock released
    dest_root = os.path.join(root, into)
    total = sum(f.size for f in files)
    need = sum(f.size for f in files if not ingest.up_to_date(os.path.normpath(os.path.join(dest_root, f.rel)), f))
    free = _free_bytes(root)
    if need > free:
        size = human_bytes(vol.get("volsize") or 0)
        raise UserError(f"the staging volume of {name} ({size}) has {human_bytes(free)} free, the files to copy take "
                        f"{human_bytes(need)}", "ingest fewer files, or make a dataset with a larger --size "
                        "(`fabricctl dataset create NAME --size SIZE`)")
    copied = skipped = copied_bytes = 0
    progress_bar = None if (ctx.dry_run or args.json) else ProgressBar(len(files), total, label=f"ingest {name}")
    done_files = done_bytes = 0
    try:
        # exactly the files the walk checked, each the inode it checked (one added since is not copied)
        walked = ((f, None) for f in files) if ctx.dry_run else ingest.opened(files)
        for file, open_file in walked:
            dest = os.path.normpath(os.path.join(dest_root, file.rel))
            if ingest.up_to_date(dest, file):
                skipped += 1
            else:
                try:
                    copied_bytes += ingest.copy(open_file(), dest, file) if open_file else file.size
                except OSError as exc:
                    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                        raise
                    raise UserError(f"the staging volume of {name} is full ({file.rel} did not fit; {copied} files "
                                    "copied, the partial one removed)", "make room in it, or re-create the dataset "
                                    "with a larger --size; re-running the ingest continues where it stopped") from None
                copied += 1
            done_files += 1
            done_bytes += file.size
            if progress_bar:
                progress_bar.set(done_files, done_bytes)
    finally:
        if progress_bar:
            progress_bar.close()
    if not ctx.dry_run:  # the next seal's provenance: what was ingested since the last one
        history.add_sources(root, [history.source_label(s, into) for s in args.sources])
    out = {"dataset": name, "staging": root, "files": len(files), "bytes": total, "copied": copied,
           "copied_bytes": copied_bytes, "skipped": skipped, "symlinks": "refused", "dry_run": ctx.dry_run}
    ctx.report(out, f"{name}: {ctx.tense('would copy', 'copied')} {copied} files ({copied_bytes} bytes), {skipped} "
               f"already present, into {dest_root}")
    return 0


def _free_bytes(path: str) -> int:
    """Bytes a copy may still write under ``path`` (its file system's blocks available to non-root: what
    ext4 and xfs keep back for root is not counted, so a copy never fills the reserve)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
