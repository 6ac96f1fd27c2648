"""Seal a version: manifest, flush, unmount, snapshot NAME@VERSION with its metadata, remount.

The manifest (every file's relative path, size and SHA-256, computed in parallel) is written
into the file system itself, at .fabric/manifest.tsv, so it travels with the snapshot; its own
SHA-256 is stored on the snapshot. The snapshot is created in one libzfs_core call together with
its user properties, so a version never exists without its metadata: fabric:version, created-by,
created-at, files, bytes, manifest-sha256, and its provenance: the message (fabric:note), the
author (the invoking user, or --author), the parent (the version this staging volume sealed
before), the sources `dataset ingest` copied in since then, and the SHA-256 of the stat cache.
A snapshot is read-only: a sealed version can never be written again. The staging volume is
mounted again afterwards, to prepare the next version.

A seal costs the change: the previous seal left a stat cache (.fabric/stat-cache.tsv: each
file's inode, size, mtime and ctime when it was hashed, and its digest); a file whose four are
unchanged keeps its digest unread, every other file is hashed; each file is still lstat'ed. The
cache is used only when its SHA-256 is the one the parent version recorded (read beside the
manifest's build, before anything is renamed into place); --full hashes every file. What this trusts: the
staging file system changes a file's ctime on any change of its content (user space cannot set
it). `fabricctl verify` still reads every byte.

Examples:
  fabricctl dataset seal imagenet v1 -m "ILSVRC2012 train+val, deduplicated"
  fabricctl dataset seal imagenet v2 -m "relabelled 1% of val" --author "Ada <ada@example.org>"
  fabricctl dataset seal imagenet v3 --full
"""

from __future__ import annotations

import os

from fabric_core.base.errors import AlreadyExists, Busy
from fabric_core.base.names import validate_fabric_name, validate_version
from fabric_core.base.rules import KIND_DATASET_VERSION, KIND_PROP, MANAGED_PROP
from fabric_core.node import manifest, mounts
from fabric_core.services import history
from fabric_core.storage import lzc, versions

from .. import datasets
from ..output import ProgressBar

PATH = ("dataset", "seal")
HELP = "snapshot the staging volume as an immutable, manifested version"
MUTATING = True  # logs a journal record (not with --dry-run); its locks below
NODE_LOCK = False  # the manifest reads every file: the node lock only around the mount, unmount and snapshot


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    name = validate_fabric_name(args.name)
    return [("dataset", name, True), ("staging", name, False)]  # the volume kept; its staging file system ours


def configure(p) -> None:
    p.add_argument("name", metavar="NAME", help="the dataset")
    p.add_argument("version", metavar="VERSION", help="the new version: a-z, 0-9, '.', '-' (e.g. v1)")
    p.add_argument("-m", "--message", "--note", dest="note", default="",
                   help="why this version: a message stored with it (--note is the same)")
    p.add_argument("--author", default=None, help="who made it (default: the invoking user, USER@HOST)")
    p.add_argument("--full", action="store_true", help="hash every file (default: only those changed since the "
                   "parent version's seal)")
    p.add_argument("--workers", type=int, default=None, help="parallel digest workers (default: config)")


def _tag_clash(ctx, name: str, version: str) -> None:
    tagged = datasets.tags(ctx, name)
    if version in tagged:
        raise AlreadyExists(f"{name} has a tag named {version!r} (naming {tagged[version]}): a version of that name "
                            "would hide it", f"seal under another version, or remove the tag first "
                            f"(`fabricctl untag {name} {version}`)")


def _reuse(parent: dict | None, cache: str, full: bool) -> tuple[str | None, str | None, str]:
    """The stat cache the manifest may reuse (None: hash every file), the SHA-256 it must have (checked by
    manifest.build while it runs, in a thread: StaleCache before anything is renamed into place) and why."""
    if full:
        return None, None, "--full: every file hashed"
    if parent is None:
        return None, None, "the first version: every file hashed"
    recorded = parent.get(history.CACHE_SHA_PROP)
    if not recorded or recorded == "-":
        return None, None, f"{parent['snapshot']} has no stat cache (sealed by an older fabricctl): every file hashed"
    found = manifest.cache_format(cache)
    if found is None:
        return None, None, f"the stat cache of {parent['snapshot']} is missing: every file hashed"
    if found != "current":
        return None, None, f"the stat cache of {parent['snapshot']} is in an older format: every file hashed"
    return cache, recorded, f"files unchanged since {parent['snapshot']} (name, inode, size, mtime, ctime) reused"


def run(ctx, args) -> int:
    name, version = validate_fabric_name(args.name), validate_version(args.version)
    message = history.validate_message(args.note or "")
    author = history.validate_author(args.author) if args.author is not None else versions.created_by()
    cfg = ctx.config
    vol = datasets.require(ctx, name)
    rows = datasets.history_rows(ctx, name)
    existing = {r["snapshot"] for r in rows}
    snap = f"{datasets.volume(cfg, name)}@{version}"
    if version not in existing:
        _tag_clash(ctx, name, version)
    if version in existing or lzc.exists(snap):
        raise AlreadyExists(f"version {name}@{version} exists already (versions are immutable)",
                            "seal under a new version, e.g. bump it to the next number")
    parent = history.parent_of(rows)
    fstype = vol.get("fabric:fs") or "ext4"
    with ctx.node_lock():  # mounts are node state: the node lock around them, never around the manifest's read
        root = datasets.mount_staging(ctx, name, fstype)
    cache = os.path.join(root, manifest.CACHE_RELPATH)
    reuse, reuse_sha256, how = _reuse(parent, cache, args.full)
    sources = history.read_sources(root)
    if ctx.dry_run:
        out = {"dataset": name, "version": version, "snapshot": snap, "dry_run": True, "author": author,
               "parent": parent["snapshot"] if parent else None, "sources": sources, "incremental": reuse is not None,
               "how": how, "steps": [f"manifest of {root} ({how})", f"sync and unmount {root}", f"snapshot {snap}",
                                     f"mount {root}"]}
        ctx.report(out, "would: " + "; ".join(out["steps"]))
        return 0
    users = mounts.users(ctx.local, root)
    others = [u for u in users if not u.startswith(f"{os.getpid()} ")]
    if others:
        raise Busy(f"the staging file system {root} is in use by {', '.join(others)}",
                   "let those processes finish (a copy still running would be cut off), then seal again")
    workers = args.workers or cfg.defaults.manifest_workers
    os.makedirs(os.path.join(root, ".fabric"), exist_ok=True)
    out_path = os.path.join(root, ".fabric", "manifest.tsv")
    fs = os.statvfs(root)  # totals for the bar: used inodes (files and directories) and used bytes
    progress_bar = None
    if not args.json:
        progress_bar = ProgressBar(fs.f_files - fs.f_ffree, (fs.f_blocks - fs.f_bfree) * fs.f_frsize,
                                   label=f"manifest {name}@{version} (totals approximate)")
    try:
        try:
            summary = manifest.build(root, out_path, workers=workers, cache_out=cache, reuse=reuse,
                                     reuse_sha256=reuse_sha256,
                                     progress=progress_bar.set if progress_bar else None)
        except manifest.StaleCache:  # changed since its seal: nothing was written; every file hashed instead
            reuse, how = None, f"the stat cache of {parent['snapshot']} changed since: every file hashed"
            summary = manifest.build(root, out_path, workers=workers, cache_out=cache,
                                     progress=progress_bar.set if progress_bar else None)
    finally:
        if progress_bar:
            progress_bar.close()
    props = {MANAGED_PROP: "true", KIND_PROP: KIND_DATASET_VERSION, "fabric:version": version,
             "fabric:created-by": versions.created_by(), "fabric:created-at": versions.now_iso(),
             "fabric:files": str(summary.files), "fabric:bytes": str(summary.bytes),
             "fabric:manifest-sha256": summary.manifest_sha256, "fabric:fs": fstype,
             **history.provenance(message=message, author=author, parent=parent["snapshot"] if parent else None,
                                  sources=sources, cache_sha256=summary.cache_sha256)}
    with ctx.node_lock():
        _tag_clash(ctx, name, version)  # again under the lock `fabricctl tag` takes: no tag of this name meanwhile
        datasets.unmount_staging(ctx, name)
        try:
            lzc.snapshot([snap], props, runner=ctx.local)
        finally:
            datasets.mount_staging(ctx, name, fstype)
    history.clear_sources(root)  # the next version's sources start empty (this one keeps them in its snapshot)
    out = {"dataset": name, "version": version, "snapshot": snap, "files": summary.files, "bytes": summary.bytes,
           "manifest_sha256": summary.manifest_sha256, "note": message, "message": message, "author": author,
           "parent": parent["snapshot"] if parent else None, "sources": sources, "hashed": summary.hashed,
           "reused": summary.reused, "incremental": reuse is not None, "how": how, "dry_run": False}
    ctx.report(out, f"sealed {name}@{version}: {summary.files} files, {summary.bytes} bytes, "
               f"manifest sha256 {summary.manifest_sha256[:16]}...",
               f"{summary.hashed} files hashed, {summary.reused} reused ({how}); parent "
               f"{parent['snapshot'] if parent else '-'}; author {author}",
               f"next: `fabricctl publish {name}@{version} --to GROUP|HOST,...`")
    return 0
