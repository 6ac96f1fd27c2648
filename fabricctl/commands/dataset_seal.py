"""Seal a version: manifest, flush, unmount, snapshot NAME@VERSION with its metadata, remount.

The manifest (every file's relative path, size and SHA-256, computed in parallel) is written
into the file system itself, at .fabric/manifest.tsv, so it travels with the snapshot; its own
SHA-256 is stored on the snapshot. The snapshot is created in one libzfs_core call together with
its user properties (fabric:version, created-by, created-at, note, files, bytes,
manifest-sha256), so a version never exists without its metadata. A snapshot is read-only: a
sealed version can never be written again. The staging volume is mounted again afterwards, to
prepare the next version.

Examples:
  fabricctl dataset seal imagenet v1 --note "ILSVRC2012 train+val, deduplicated"
"""

from __future__ import annotations

import os

from fabric_core import lzc, manifest, mounts, versions
from fabric_core.errors import AlreadyExists, Busy
from fabric_core.names import validate_fabric_name, validate_version
from fabric_core.rules import KIND_DATASET_VERSION, KIND_PROP, MANAGED_PROP

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
    p.add_argument("--note", default="", help="a free-text note stored with the version")
    p.add_argument("--workers", type=int, default=None, help="parallel digest workers (default: config)")


def run(ctx, args) -> int:
    name, version = validate_fabric_name(args.name), validate_version(args.version)
    cfg = ctx.config
    vol = datasets.require(ctx, name)
    existing = {r["snapshot"] for r in datasets.sealed(ctx, name)}
    snap = f"{datasets.volume(cfg, name)}@{version}"
    if version in existing or lzc.exists(snap):
        raise AlreadyExists(f"version {name}@{version} exists already (versions are immutable)",
                            "seal under a new version, e.g. bump it to the next number")
    fstype = vol.get("fabric:fs") or "ext4"
    with ctx.node_lock():  # mounts are node state: the node lock around them, never around the manifest's read
        root = datasets.mount_staging(ctx, name, fstype)
    if ctx.dry_run:
        out = {"dataset": name, "version": version, "snapshot": snap, "dry_run": True,
               "steps": [f"manifest of {root}", f"sync and unmount {root}", f"snapshot {snap}", f"mount {root}"]}
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
        summary = manifest.build(root, out_path, workers=workers,
                                 progress=progress_bar.set if progress_bar else None)
    finally:
        if progress_bar:
            progress_bar.close()
    props = {MANAGED_PROP: "true", KIND_PROP: KIND_DATASET_VERSION, "fabric:version": version,
             "fabric:created-by": versions.created_by(), "fabric:created-at": versions.now_iso(),
             "fabric:note": args.note or "-", "fabric:files": str(summary.files), "fabric:bytes": str(summary.bytes),
             "fabric:manifest-sha256": summary.manifest_sha256, "fabric:fs": fstype}
    with ctx.node_lock():
        datasets.unmount_staging(ctx, name)
        try:
            lzc.snapshot([snap], props, runner=ctx.local)
        finally:
            datasets.mount_staging(ctx, name, fstype)
    out = {"dataset": name, "version": version, "snapshot": snap, "files": summary.files, "bytes": summary.bytes,
           "manifest_sha256": summary.manifest_sha256, "note": args.note, "dry_run": False}
    ctx.report(out, f"sealed {name}@{version}: {summary.files} files, {summary.bytes} bytes, "
               f"manifest sha256 {summary.manifest_sha256[:16]}...",
               f"next: `fabricctl publish {name}@{version} --to GROUP|HOST,...`")
    return 0
