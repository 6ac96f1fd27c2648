"""fabric-node: the GPU-node agent's command line (root only), a thin shell over ``fabric_core.node.agent``.

  fabric-node attach NAME@VERSION --holder HOLDER [--current] [--json] [--dry-run]
  fabric-node detach NAME@VERSION --holder HOLDER [--force] [--json] [--dry-run]
  fabric-node detach --holder HOLDER --all [--force] [--json]
  fabric-node list [--json]
  fabric-node gc [--dry-run] [--json]
  fabric-node in-use NAME@VERSION [--json]
  fabric-node verify NAME@VERSION [--workers N] [--json]
  fabric-node current NAME [VERSION | --none] [--json] [--dry-run]
  fabric-node attach-writable JOB --fs FS --from NODE [--json] [--dry-run]
  fabric-node detach-writable JOB --from NODE [--force] [--json] [--dry-run]
  fabric-node attach-restore JOB STEP --fs FS --from NODE [--json] [--dry-run]
  fabric-node detach-restore JOB STEP --from NODE [--force] [--json] [--dry-run]
  fabric-node freeze JOB --seconds N [--json] [--dry-run]
  fabric-node thaw JOB --seconds N [--json]
  fabric-node writer-state JOB... [--json]
  fabric-node refresh-credentials [--json] [--dry-run]
  fabric-node --ssh [--from NODE]  (a storage node's forced command: the request in SSH_ORIGINAL_COMMAND)

HOLDER is ``job:<id>`` (a scheduler's job) or ``manual`` (an operator's: it stays across reboots). A version
is mounted read-only at MOUNT_ROOT/NAME/VERSION (/datasets by default) once a storage node granted it to this
host (``fabricctl grant NAME@VERSION --to HOST``). The checkpoint verbs are what fabricctl's checkpoint commands
ask of a job's hosts (``node.checkpoints``): its volume read-write at CHECKPOINT_MOUNT_ROOT/JOB on its writer,
a checkpoint read-only at CHECKPOINT_MOUNT_ROOT/JOB/restore/STEP, both from storage node NODE and back after a
reboot; the writer's freeze around a snapshot (a timer thaws it after N seconds whatever happens) and its thaw.
refresh-credentials writes this node's own CHAP credentials into its node records of the fabric's targets.
Exit statuses are fabricctl's (fabric_core.base.errors): 0 success, 1 bad input or refused (not granted, in
use, storage unreachable: nothing changed), 3 some of a ``detach --all`` failed, 4 another call held the node
lock too long, 5 unexpected. Under --json every outcome
is one JSON object on stdout; a failure's is {"problem", "fix", "exit"[, "reason"]}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import syslog
import time

from fabric_core.base import interrupt
from fabric_core.base.errors import EXIT_PARTIAL, EXIT_UNEXPECTED, EXIT_USAGE, FabricError, UserError
from fabric_core.base.rules import FILESYSTEMS
from fabric_core.base.runner import LocalRunner
from fabric_core.node import agent as agent_mod
from fabric_core.node import config as node_config

from . import ssh

PROG = "fabric-node"


class PartialFailure(FabricError):
    exit_code = EXIT_PARTIAL


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Attach dataset versions granted to this GPU node, count "
                                "their holders, and let go; mount a job's checkpoints and freeze its writer for "
                                "fabricctl (root only).",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="exit: 0 ok, 1 refused or bad input (nothing changed), 2 usage, 3 partial, "
                                       "4 node lock held, 5 unexpected")
    p.add_argument("--ssh", action="store_true", help="serve a storage node's request from SSH_ORIGINAL_COMMAND "
                   "(the forced command of its key, `--ssh --from NODE`; only the agent's verbs)")
    p.add_argument("--config", default=node_config.CONFIG_PATH, help=argparse.SUPPRESS)
    p.add_argument("--credentials", default=node_config.CREDENTIALS_PATH, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="verb", metavar="VERB")

    def verb(name: str, text: str, *, dry_run: bool = False):
        v = sub.add_parser(name, help=text, description=text)
        v.add_argument("--json", action="store_true", help="one JSON object on stdout")
        if dry_run:
            v.add_argument("--dry-run", action="store_true", help="plan the changes, change nothing")
        return v

    v = verb("attach", "mount NAME@VERSION read-only for a holder", dry_run=True)
    v.add_argument("ref", metavar="NAME@VERSION")
    v.add_argument("--holder", required=True, help="job:<id> or manual")
    v.add_argument("--from", dest="storage_node", metavar="NODE",
                   help="a storage node of this node's configuration that exports it now (a storage node's key adds "
                        "its own name): an attachment read without a path through it logs in there too")
    v.add_argument("--current", action="store_true",
                   help="then point MOUNT_ROOT/NAME/current at this version (what a publish of a dataset's newest "
                        "version asks)")
    v = verb("detach", "count a holder out (the last one unmounts and logs out)", dry_run=True)
    v.add_argument("ref", metavar="NAME@VERSION", nargs="?")
    v.add_argument("--holder", required=True, help="job:<id> or manual")
    v.add_argument("--all", action="store_true", help="everything the holder holds (a job's epilog)")
    v.add_argument("--force", action="store_true", help="unmount even while processes use it (lazily: they get "
                   "I/O errors); without it a version in use is refused, unless the holder's job has ended")
    v.add_argument("--from", dest="storage_node", metavar="NODE",
                   help="the storage node that stops publishing it (a storage node's key adds its own name): with "
                        "paths through other nodes too, only that node's path goes and the version stays mounted")
    verb("list", "attachments, holders, sessions and mounts")
    verb("gc", "drop stale job holders; remove sessions, node records and mounts no holder references",
         dry_run=True)
    v = verb("in-use", "the processes using a version's mount")
    v.add_argument("ref", metavar="NAME@VERSION")
    v = verb("verify", "check a mounted version against its manifest")
    v.add_argument("ref", metavar="NAME@VERSION")
    v.add_argument("--workers", type=int, default=4, help="parallel digest workers (default 4)")
    v = verb("current", "read MOUNT_ROOT/NAME/current, point it at an attached version, or remove it", dry_run=True)
    v.add_argument("name", metavar="NAME")
    v.add_argument("version", metavar="VERSION|--none", nargs="?")
    v.add_argument("--none", action="store_true", help="remove the link")
    _checkpoint_verbs(verb)
    return p


def _checkpoint_verbs(verb) -> None:
    """The verbs of a job's checkpoints (node.checkpoints), as fabricctl's checkpoint commands ask for them."""
    def node(v):
        v.add_argument("--from", dest="storage_node", required=True, metavar="NODE",
                       help="the storage node exporting it (one of this node's configuration)")

    texts = {("attach", "writable"): "mount a job's checkpoint volume read-write (this node is its writer)",
             ("detach", "writable"): "unmount a job's checkpoint volume and log out",
             ("attach", "restore"): "mount a job's checkpoint of a step read-only",
             ("detach", "restore"): "unmount a job's checkpoint of a step and log out"}
    for kind in ("writable", "restore"):
        for action in ("attach", "detach"):
            v = verb(f"{action}-{kind}", texts[action, kind], dry_run=True)
            v.add_argument("job", metavar="JOB")
            if kind == "restore":
                v.add_argument("step", metavar="STEP", help="the checkpoint's training step")
            node(v)
            if action == "attach":
                v.add_argument("--fs", required=True, choices=FILESYSTEMS, help="the volume's file system")
            else:
                v.add_argument("--force", action="store_true", help="unmount even while processes use it (lazily)")
    for name, text in (("freeze", "freeze a job's volume for a snapshot (a timer thaws it after --seconds whatever "
                                  "happens)"),
                       ("thaw", "thaw a job's volume and stop its timer once nothing is frozen")):
        v = verb(name, text, dry_run=name == "freeze")
        v.add_argument("job", metavar="JOB")
        v.add_argument("--seconds", type=int, required=True, help="the thaw timer (5-3600)")
    v = verb("writer-state", "what of the jobs' volumes is frozen, and the tasks waiting for a frozen file system")
    v.add_argument("jobs", metavar="JOB", nargs="+")
    verb("refresh-credentials", "this node's own CHAP credentials into its node records of the fabric's targets",
         dry_run=True)


def _log(text: str) -> None:
    """One line to the journal (syslog), for every change and every refused request."""
    try:
        syslog.openlog("fabric-node", syslog.LOG_PID, syslog.LOG_AUTHPRIV if "refused" in text else syslog.LOG_USER)
        syslog.syslog(syslog.LOG_NOTICE, text)
    except OSError:
        pass


def print_progress(files: int, size: int) -> None:
    """A verify's progress on stderr (over SSH, lines keep the caller's silence bound from expiring)."""
    print(f"progress files={files} bytes={size}", file=sys.stderr, flush=True)


def _emit(obj, as_json: bool) -> None:
    if as_json:
        print(json.dumps(obj, sort_keys=True, default=str))


def run(args, *, agent=None) -> int:
    """Run one verb (``args`` from the parser); ``agent``: an Agent, or a function of dry_run making one (tests),
    else one from the configuration."""
    dry = bool(getattr(args, "dry_run", False))
    if agent is not None and not isinstance(agent, agent_mod.Agent):
        agent = agent(dry)  # a factory: the agent for a dry run or a real one
    if agent is None:
        if os.geteuid() != 0:
            raise UserError("fabric-node runs as root (it logs in to storage nodes and mounts)",
                            "run it with sudo, or from a scheduler's prolog/epilog (they run as root)")
        cfg = node_config.load(args.config, args.credentials)
        agent = agent_mod.Agent(cfg, LocalRunner(dry_run=dry))
    out_json = bool(getattr(args, "json", False))
    verb = args.verb
    if verb == "attach":
        res = agent.attach(args.ref, args.holder, via=args.storage_node, current=args.current)
        _emit(res, out_json) if out_json else print(
            f"{res['ref']} {'would be ' if dry else ''}mounted read-only at {res['path']} ({res['device']}); holders: "
            f"{', '.join(res['holders'])}")
        return 0
    if verb == "detach":
        alive = agent.is_alive()
        if args.all:
            if args.ref:
                raise UserError("detach --all takes no NAME@VERSION", f"`{PROG} detach --holder HOLDER --all`")
            res = agent.detach_all(args.holder, force=args.force, is_alive=alive)
            failed = res.pop("failed")
            res["failed"] = {ref: agent_mod.as_dict(err) for ref, err in failed.items()}
            _emit(res, out_json) if out_json else print(
                f"{args.holder}: detached {', '.join(res['detached']) or 'nothing'}"
                + (f"; released {', '.join(res['released'])}" if res["released"] else ""))
            if failed:
                if not out_json:
                    for ref, err in failed.items():
                        print(f"{PROG}: {ref}: {err}", file=sys.stderr)
                raise PartialFailure(f"{len(failed)} of {len(failed) + len(res['detached']) + len(res['released'])} "
                                     f"detaches of {args.holder} failed", "see each one's problem and fix above")
            return 0
        if not args.ref:
            raise UserError("detach needs NAME@VERSION, or --all", f"`{PROG} detach imagenet@v3 --holder job:42`")
        res = agent.detach(args.ref, args.holder, force=args.force, is_alive=alive, via=args.storage_node)
        if out_json:
            _emit(res, True)
        elif not res["held"]:
            print(f"{res['ref']}: {args.holder} does not hold it (nothing to do)")
        else:
            print(f"{res['ref']}: {args.holder} released it; "
                  + ("unmounted and logged out" if res["detached"] else f"still held by {', '.join(res['holders'])}"))
        return 0
    if verb == "list":
        res = agent.list()
        if out_json:
            _emit(res, True)
            return 0
        if not res["attachments"]:
            print("no attachments")
        for a in res["attachments"]:
            holders = ", ".join(h["holder"] for h in a["holders"])
            print(f"{a['ref']:<30} {a['path']:<34} {'mounted' if a['mounted'] else a['state']:<9} "
                  f"{','.join(a['storage_nodes']) or '-':<20} {holders}")
        return 0
    if verb == "gc":
        res = agent.gc(is_alive=agent.is_alive())
        failed = res.pop("failed")
        res["failed"] = {what: agent_mod.as_dict(err) for what, err in failed.items()}
        if out_json:
            _emit(res, True)
        else:
            for line in res.get("planned") or res["done"]:
                print(("would " if dry else "") + line)
            for what, err in failed.items():
                print(f"{PROG}: {what}: {err}", file=sys.stderr)
            if not res["steps"]:
                print("nothing to collect")
        if failed:
            raise PartialFailure(f"{len(failed)} of {len(res['steps'])} gc steps failed",
                                 "see each one's problem above; run gc again once it is fixed")
        return 0
    if verb == "in-use":
        res = agent.in_use(args.ref)
        _emit(res, out_json) if out_json else print("\n".join(res["users"]) or f"{res['ref']}: not in use")
        return 0
    if verb == "verify":
        if not 1 <= args.workers <= 64:
            raise UserError("--workers must be 1-64")
        progress = print_progress if out_json else None  # over SSH: progress lines on stderr keep it alive
        res = agent.verify(args.ref, workers=args.workers, progress=progress)
        if out_json:
            _emit(res, True)
        else:
            print(json.dumps(res, indent=1, sort_keys=True, default=str))
        return 0
    if verb == "current":
        version = None if args.none or args.version == "--none" else (args.version or "")
        res = agent.current(args.name, version)
        _emit(res, out_json) if out_json else print(f"{res['link']} -> {res['current'] or '(none)'}")
        return 0
    if verb in CHECKPOINT_VERBS:
        return _checkpoint(agent, args, out_json, dry)
    raise UserError("no verb given", f"run `{PROG} --help`")


def started() -> float | None:
    """When this process started, on time.monotonic's clock (a freeze counts what passed before its timer was set
    from there: the caller's request began before it); None when /proc cannot tell."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime (after the comm field)
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.monotonic() - max(0.0, age)


CHECKPOINT_VERBS = ("attach-writable", "detach-writable", "attach-restore", "detach-restore", "freeze", "thaw",
                    "writer-state", "refresh-credentials")
CHANGING = ("attach", "detach", "gc", "current", "attach-writable", "detach-writable", "attach-restore",
            "detach-restore", "freeze", "thaw", "refresh-credentials")


def _checkpoint(agent, args, out_json: bool, dry: bool) -> int:
    ck, verb = agent.checkpoints, args.verb
    would = "would be " if dry else ""
    if verb.startswith("attach-"):
        res = ck.attach(args.job, storage_node=args.storage_node, fstype=args.fs, step=getattr(args, "step", None))
        text = (f"{res['path']} {would}mounted {'read-write' if res['kind'] == 'writable' else 'read-only'} "
                f"({res['device']}, from {res['storage_node']})")
    elif verb.startswith("detach-"):
        res = ck.detach(args.job, storage_node=args.storage_node, step=getattr(args, "step", None), force=args.force)
        text = f"{res['path']} {would}unmounted and logged out of {res['storage_node']}"
    elif verb == "freeze":
        res = ck.freeze(args.job, args.seconds, since=started())
        text = f"{res['path']} {would}frozen; {res['thaw_unit']}.timer thaws it in {args.seconds} s"
    elif verb == "thaw":
        res = ck.thaw(args.job, args.seconds)
        text = f"{res['path']} thawed"
    elif verb == "writer-state":
        res = ck.writer_state(args.jobs)
        text = json.dumps(res, indent=1, sort_keys=True)
    else:
        res = agent.refresh_credentials()
        text = (f"{len(res['records'])} node record(s) of the fabric's targets: "
                + (f"{would}updated" if res["changed"] else "current"))
    _emit(res, True) if out_json else print(text)
    return 0


def main(argv: list[str] | None = None, *, agent=None, environ=None) -> int:
    """Run one command of the agent; returns its exit status. Only the first Ctrl-C (or SIGINT) counts: the command
    stops and cleans up (``fabric_core.base.interrupt``)."""
    with interrupt.first_only():
        return _main(list(sys.argv[1:] if argv is None else argv), agent, environ)


def _main(argv: list[str], agent, environ) -> int:
    environ = os.environ if environ is None else environ
    p = parser()
    as_json = "--json" in argv
    try:
        if argv[:1] == ["--ssh"] and (len(argv) == 1 or len(argv) == 3 and argv[1] == "--from"):
            request = environ.get(ssh.ENV, "")
            as_json = "--json" in request.split()  # a refusal answers the way the request asked
            try:
                argv = ssh.parse(request, argv[2] if len(argv) == 3 else None)
            except ssh.Refused as err:
                _log(f"refused a storage node's request {request[:200]!r}: {err.problem}")
                raise
            as_json = "--json" in argv
            _log(f"a storage node's request: {' '.join(argv)}")
        elif "--ssh" in argv:
            raise UserError("--ssh takes only --from NODE (the request comes in SSH_ORIGINAL_COMMAND)")
        try:
            args = p.parse_args(argv)
        except SystemExit as exc:
            return int(exc.code or 0) if exc.code in (0, None) else EXIT_USAGE
        if args.verb is None:
            p.print_help()
            return EXIT_USAGE
        status = run(args, agent=agent)
        if args.verb in CHANGING and not getattr(args, "dry_run", False):
            _log(f"{' '.join(argv)}: done")
        return status
    except FabricError as err:
        status = err.exit_code
        if as_json:
            print(json.dumps({"problem": err.problem, "fix": err.fix, "exit": status,
                              **({"reason": err.reason} if getattr(err, "reason", "") else {})}, sort_keys=True))
        else:
            print(f"{PROG}: {err}", file=sys.stderr)
        return status
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one line, the exit status says unexpected
        if as_json:
            print(json.dumps({"problem": f"unexpected error: {type(exc).__name__}: {exc}", "fix": "report it",
                              "exit": EXIT_UNEXPECTED}))
        else:
            print(f"{PROG}: unexpected error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNEXPECTED


if __name__ == "__main__":
    sys.exit(main())
