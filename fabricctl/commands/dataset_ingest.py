"""Copy data into a dataset's staging volume, with a progress bar (files and bytes); resumable.

Each SOURCE is a file or directory on this node. Like rsync: a directory given with a trailing
slash copies its contents into the dataset root; without one, the directory itself is copied
(DATASET/<basename>/...). Files already present with the same size and modification time are
skipped, so re-running an interrupted ingest continues where it stopped. Each file is written
to a temporary name and renamed into place, so no half-copied file is ever taken for a good one.

Copying with any other tool into the mounted staging directory (STAGING_ROOT/NAME) works too.

Examples:
  fabricctl dataset ingest imagenet /import/imagenet/
  fabricctl dataset ingest imagenet /import/train /import/val --into raw
"""

from __future__ import annotations

import os
import shutil
import stat

from fabric_core.errors import NotFound, UserError
from fabric_core.names import validate_fabric_name

from .. import datasets
from ..output import ProgressBar

PATH = ("dataset", "ingest")
HELP = "copy files into a dataset's staging volume (resumable)"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)
PARTIAL = ".fabric-partial"


def configure(p) -> None:
    p.add_argument("name", metavar="NAME", help="the dataset (created with `fabricctl dataset create`)")
    p.add_argument("sources", metavar="SOURCE", nargs="+", help="files or directories on this node")
    p.add_argument("--into", metavar="SUBDIR", default="", help="a sub-directory of the dataset to copy into")


def plan_pairs(sources: list[str], dest_root: str):
    """Yield (source file, destination path, size, mtime_ns) for every regular file; refuse specials."""
    for src in sources:
        st = os.lstat(src)
        if stat.S_ISREG(st.st_mode):
            yield src, os.path.join(dest_root, os.path.basename(src.rstrip("/"))), st.st_size, st.st_mtime_ns
            continue
        base = dest_root if src.endswith("/") else os.path.join(dest_root, os.path.basename(src.rstrip("/")))
        for dirpath, dirnames, filenames in os.walk(src):
            dirnames.sort()
            rel = os.path.relpath(dirpath, src)
            for fname in sorted(filenames):
                path = os.path.join(dirpath, fname)
                fst = os.lstat(path)
                if stat.S_ISLNK(fst.st_mode):
                    continue  # symlinks are not followed (they could point outside the sources)
                if not stat.S_ISREG(fst.st_mode):
                    raise UserError(f"{path} is not a regular file", "remove special files from the source")
                yield path, os.path.normpath(os.path.join(base, rel, fname)), fst.st_size, fst.st_mtime_ns


def up_to_date(dest: str, size: int, mtime_ns: int) -> bool:
    try:
        st = os.stat(dest)
    except FileNotFoundError:
        return False
    return st.st_size == size and st.st_mtime_ns == mtime_ns


def copy_one(src: str, dest: str) -> None:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = dest + PARTIAL
    shutil.copy2(src, tmp)
    os.replace(tmp, dest)


def run(ctx, args) -> int:
    name = validate_fabric_name(args.name)
    missing = [s for s in args.sources if not os.path.lexists(s)]
    if missing:
        raise NotFound(f"source path does not exist: {', '.join(missing)}", "check the path (on this storage node)")
    into = os.path.normpath(args.into) if args.into else ""
    if into.startswith("..") or os.path.isabs(into) or into.startswith(".fabric"):
        raise UserError(f"--into {args.into!r} must be a relative path inside the dataset (not .fabric)",
                        "for example --into train")
    vol = datasets.require(ctx, name)
    root = datasets.mount_staging(ctx, name, vol.get("fabric:fs") or "ext4")
    dest_root = os.path.join(root, into)
    files = total = 0
    for _, _, size, _ in plan_pairs(args.sources, dest_root):
        files += 1
        total += size
    copied = skipped = copied_bytes = 0
    bar = None if (ctx.dry_run or args.json) else ProgressBar(files, total, label=f"ingest {name}")
    done_files = done_bytes = 0
    try:
        for src, dest, size, mtime_ns in plan_pairs(args.sources, dest_root):
            if up_to_date(dest, size, mtime_ns):
                skipped += 1
            elif not ctx.dry_run:
                copy_one(src, dest)
                copied += 1
                copied_bytes += size
            else:
                copied += 1
                copied_bytes += size
            done_files += 1
            done_bytes += size
            if bar:
                bar.set(done_files, done_bytes)
    finally:
        if bar:
            bar.close()
    out = {"dataset": name, "staging": root, "files": files, "bytes": total, "copied": copied,
           "copied_bytes": copied_bytes, "skipped": skipped, "dry_run": ctx.dry_run}
    ctx.report(out, f"{name}: {ctx.tense('would copy', 'copied')} {copied} files ({copied_bytes} bytes), {skipped} "
               f"already present, into {dest_root}")
    return 0
