"""The command line: ``build``, ``verify`` and ``diff`` (``python3 -m fabric_core.node.manifest``), and the one
file that carries it to a host without fabric_core (``zipapp``: ``python3 FILE verify ...``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile

from .builder import CACHE_RELPATH, build, default_path
from .compare import ADDED, CHANGED, REMOVED, diff, verify
from .format import KINDS, MANIFEST_RELPATH, UserError

# ---------------------------------------------------------------------------------------------- CLI


def _print_progress(files: int, size: int) -> None:
    print(f"{files} files, {size} bytes", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="manifest", description="Build or verify a dataset manifest.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command, out_help in (("build", "where to write it"), ("verify", "the manifest to check against")):
        cmd = sub.add_parser(command)
        cmd.add_argument("root", help="the tree")
        cmd.add_argument("manifest", nargs="?", help=f"{out_help} (default: ROOT/{MANIFEST_RELPATH})")
        cmd.add_argument("--workers", type=int, default=4, help="hashing processes (default 4)")
        cmd.add_argument("--json", action="store_true", help="the result as JSON on stdout")
        cmd.add_argument("--progress", action="store_true", help="progress lines on stderr")
        if command == "build":
            cmd.add_argument("--cache", help="also write the stat cache there (e.g. ROOT/" + CACHE_RELPATH + ")")
            cmd.add_argument("--reuse", help="a previous build's stat cache: unchanged files are not read")
            cmd.add_argument("--reuse-sha256", help="the SHA-256 the --reuse cache must have (checked as it builds)")
    cmd = sub.add_parser("diff")
    cmd.add_argument("old", help="the older manifest")
    cmd.add_argument("new", help="the newer manifest")
    cmd.add_argument("--json", action="store_true", help="the totals and every change as JSON on stdout")
    cmd.add_argument("--stat", action="store_true", help="the totals only")
    args = parser.parse_args(argv)
    if args.command == "diff":
        return _diff_main(args)
    manifest_path = args.manifest or default_path(args.root)
    progress = _print_progress if args.progress else None
    try:
        if args.command == "build":
            summary = build(args.root, manifest_path, workers=args.workers, progress=progress,
                            cache_out=args.cache, reuse=args.reuse, reuse_sha256=args.reuse_sha256)
            if args.json:
                print(json.dumps(summary.to_dict()))
            else:
                print(f"{summary.path}: {summary.files} files, {summary.bytes} bytes, {summary.dirs} directories, "
                      f"{summary.symlinks} symlinks in {summary.seconds:.1f} s; sha256 {summary.manifest_sha256}")
            return 0
        report = verify(args.root, manifest_path, workers=args.workers, progress=progress)
    except UserError as err:
        print(f"manifest {args.command}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        for kind in KINDS:
            for diff in getattr(report, kind):
                print(f"{kind}\t{diff.path}\texpected={diff.expected}\tactual={diff.actual}")
        verdict = "OK" if report.ok else f"{report.count()} differences"
        print(f"{verdict}: {report.root} against {report.manifest} ({report.files} files, {report.bytes} bytes "
              f"listed) in {report.seconds:.1f} s")
    return 0 if report.ok else 1


def _diff_main(args) -> int:
    totals: dict = {}
    changes: list[dict] = []
    try:
        for change in diff(args.old, args.new, totals):
            if args.json and not args.stat:
                changes.append(change.to_dict())
            elif not args.json and not args.stat:
                print(change.line())
    except UserError as err:
        print(f"manifest diff: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if args.json:
        print(json.dumps({"totals": totals, **({} if args.stat else {"changes": changes})}))
    else:
        print(diff_summary(totals))
    return 0


def diff_summary(totals: dict) -> str:
    """The totals of a diff in one line."""
    return (f"{totals[ADDED]} added ({totals['added_bytes']} bytes), {totals[REMOVED]} removed "
            f"({totals['removed_bytes']} bytes), {totals[CHANGED]} changed ({totals['changed_bytes_old']} -> "
            f"{totals['changed_bytes_new']} bytes), {totals['unchanged']} unchanged")


# the one file's entry point: the package sits in it as ``fabric_manifest`` (outside fabric_core)
ZIPAPP_MAIN = """import sys

from fabric_manifest.cli import main

if __name__ == "__main__":
    sys.exit(main())
"""
ZIPAPP_MODULES = ("__init__", "format", "tree", "builder", "compare", "cli")


def zipapp(path: str | os.PathLike) -> None:
    """Write the package as one file that ``python3 PATH verify|build|diff ...`` runs on a host without fabric_core
    (a zip application: the package's modules as ``fabric_manifest``, standard library only, and a ``__main__``).
    Its errors are plain ones; ``build`` refuses there (it writes through fabric_core's atomic writer)."""
    here = os.path.dirname(os.path.abspath(__file__))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("__main__.py", ZIPAPP_MAIN)
        for name in ZIPAPP_MODULES:
            with open(os.path.join(here, f"{name}.py"), encoding="utf-8") as f:
                z.writestr(f"fabric_manifest/{name}.py", f.read())
