"""Check a version's content against its manifest, on this node or as mounted on a GPU node.

On this node, the version's snapshot device is mounted read-only for the check (through a loop
device, since LIO holds an exported device exclusively) and
every file is compared with the manifest sealed into it; the manifest's own SHA-256 is compared
with the one recorded on the snapshot. With --on HOST, the same check runs on that GPU node
over its read-only mount (the manifest package is copied there as one file for the run); --on takes what --to
takes, a group or a comma list too, and then checks every host of it in parallel. Every difference
is reported: missing, extra, size or content changed. Exit 1 when anything differs on any host;
3 when some hosts could not be checked (each named with why) and the others matched.

Examples:
  fabricctl verify imagenet@v1
  fabricctl verify imagenet@v1 --on gpu1 --json
  fabricctl verify imagenet@v1 --on gpu_nodes
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

from fabric_core.base.errors import EXIT_USER, FabricError, NotFound, UserError
from fabric_core.base.names import parse_ref
from fabric_core.base.runner import PROGRESS_SILENCE
from fabric_core.node import manifest, mounts

from .. import datasets

PATH = ("verify",)
HELP = "check a version's files against its manifest"
MUTATING = False  # read-only: no node lock, no journal record (the dataset's lock, shared)
NODE_LOCK = False


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("dataset", parse_ref(args.ref)[0], True)]  # read while it runs: no destroy meanwhile


MANIFEST = os.path.join(".fabric", "manifest.tsv")


class VerifyFailed(FabricError):
    """The content differs from the manifest: exit 1 (nothing was changed), as a refusal."""

    exit_code = EXIT_USER


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the sealed version")
    p.add_argument("--on", metavar="HOST|GROUP,...", help="check the copy mounted on this GPU node, or on each host "
                   "of these groups and hosts from the config (as --to)")
    p.add_argument("--workers", type=int, default=None, help="parallel digest workers (default: config)")


def file_sha256(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except FileNotFoundError:
        return "(missing)"


def report_text(report: dict) -> str:
    """One line per difference, grouped by kind, then a count."""
    lines = []
    for kind, items in sorted(report.items()):
        if not isinstance(items, list):
            continue
        for item in items:
            if not isinstance(item, dict):
                item = {"path": item}
            detail = ", ".join(f"{k}={v}" for k, v in sorted(item.items()) if k != "path")
            path = item.get("path")
            lines.append(f"{kind:>15}  {path}" + (f"  ({detail})" if detail else ""))
    return "\n".join(lines) if lines else "no differences"


def verify_local(ctx, export, workers: int, expected_sha: str) -> dict:
    # the one read-only mount of a version (datasets.mounted_readonly: a loop device, XFS with nouuid)
    with datasets.mounted_readonly(ctx, export) as where:
        path = os.path.join(where, MANIFEST)
        got_sha = file_sha256(path)
        report = manifest.verify(where, path, workers=workers).to_dict()
    report["manifest_sha256"] = {"expected": expected_sha, "actual": got_sha, "ok": got_sha == expected_sha}
    return report


def verify_remote(ctx, export, host, workers: int, expected_sha: str) -> dict:
    agent = ctx.agent(host)
    if agent is not None:  # the host's node agent checks its own mount (its progress keeps the connection alive)
        with agent.runner.bounds(timeout=None, command_timeout=PROGRESS_SILENCE):
            report = agent.verify(export.ref, workers)
        sha = report.pop("manifest_sha256", {}).get("actual")
        report.pop("ref", None)
        report["manifest_sha256"] = {"expected": expected_sha, "actual": sha, "ok": sha == expected_sha}
        return report
    runner = ctx.ssh(host)
    if not mounts.current_mount(runner, export.mountpoint):
        raise NotFound(f"{export.name}@{export.version} is not mounted on {host.name} at {export.mountpoint}",
                       f"publish it there first (`fabricctl publish {export.name}@{export.version} --to {host.name}`)")
    script = f"/run/fabricctl-manifest-{os.getpid()}.pyz"
    with tempfile.TemporaryDirectory(prefix="fabricctl-manifest-") as local:  # the package as one file
        manifest.zipapp(os.path.join(local, "manifest.pyz"))
        runner.put_file(os.path.join(local, "manifest.pyz"), script, 0o600)
    try:
        path = f"{export.mountpoint}/{MANIFEST}"
        sha = runner.run(["sha256sum", path]).stdout.split()[0]
        # a read of the whole version: no total bound, only silence (its progress lines on stderr keep it alive)
        with runner.bounds(timeout=None, command_timeout=PROGRESS_SILENCE):
            res = runner.run(["python3", script, "verify", export.mountpoint, path, "--workers", str(workers),
                              "--json", "--progress"], check=False)
    finally:
        runner.run(["rm", "-f", script], check=False)
    if res.rc not in (0, 1):
        said = (res.stderr.strip().splitlines() or res.stdout.strip().splitlines() or [""])[-1]
        raise UserError(f"verification on {host.name} failed to run: {said}",
                        "check that python3 exists on the host and the mount is readable")
    report = json.loads(res.stdout)
    report["manifest_sha256"] = {"expected": expected_sha, "actual": sha, "ok": sha == expected_sha}
    return report


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref)
    cfg = ctx.config
    hosts = cfg.resolve_targets(args.on) if args.on else []  # the hosts first: a wrong name reads nothing
    row = datasets.require_version(ctx, name, version)
    export = datasets.export_of(ctx, row)
    workers = args.workers or cfg.defaults.manifest_workers
    expected = row.get("fabric:manifest-sha256") or ""
    if args.on and args.on not in cfg.hosts:  # a group or a list: every host of it
        return _run_on_hosts(ctx, args, export, hosts, workers, expected)
    if args.on:
        report = verify_remote(ctx, export, hosts[0], workers, expected)
    else:
        report = verify_local(ctx, export, workers, expected)
    ok = _judge(report)
    ref = f"{export.name}@{export.version}"  # the version, also when a tag named it
    report.update(ref=ref, where=args.on or "storage node", ok=ok)
    if version != export.version:
        report["tag"] = version
    if args.json:
        ctx.emit(report)
    else:
        print(report_text(report))
        if not report["manifest_sha256"]["ok"]:
            print(f"manifest changed: sha256 {report['manifest_sha256']['actual']} but the version records "
                  f"{expected}")
    if not ok:
        raise VerifyFailed(f"{ref} on {args.on or 'the storage node'} differs from its manifest", DIFFERS_FIX)
    if not args.json:
        tag = f" (tag {version})" if version != export.version else ""
        print(f"{ref} on {args.on or 'the storage node'}: OK{tag}")
    return 0


DIFFERS_FIX = ("see the differences above; a published version is read-only, so a difference means a damaged device "
               "or a copy that is not this version")


def _judge(report: dict) -> bool:
    return bool(report.get("ok")) and report["manifest_sha256"]["ok"]


def _run_on_hosts(ctx, args, export, hosts, workers: int, expected: str) -> int:
    """--on a group or a list: the check on every host in parallel; one report per host."""
    ref = f"{export.name}@{export.version}"
    fan = ctx.fan(hosts, lambda host, step: verify_remote(ctx, export, host, workers, expected), f"verify {ref}",
                  quiet=args.json)
    reports = fan.values
    for report in reports.values():
        report["ok"] = _judge(report)
    differ = [host for host, report in reports.items() if not report["ok"]]
    if args.json:
        ctx.emit({"ref": ref, "where": [h.name for h in hosts], "ok": fan.all_ok and not differ,
                  "hosts": fan.to_dict()})
    else:
        for host, report in reports.items():
            print(f"{host}:")
            print("\n".join(f"  {line}" for line in report_text(report).splitlines()))
            if not report["manifest_sha256"]["ok"]:
                print(f"  manifest changed: sha256 {report['manifest_sha256']['actual']} but the version records "
                      f"{expected}")
    if differ:
        unchecked = [o.name for o in fan.not_done]
        raise VerifyFailed(f"{ref} differs from its manifest on {', '.join(differ)}"
                           + (f"; not checked on {', '.join(unchecked)}" if unchecked else ""), DIFFERS_FIX)
    fan.raise_for_partial(f"verify {ref}")
    if not args.json:
        print(f"{ref} on {', '.join(reports)}: OK")
    return 0
