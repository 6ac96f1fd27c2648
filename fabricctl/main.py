"""fabricctl entry point: argument parsing, dispatch to fabricctl.commands, errors to exit statuses.

Every command lives in its own module under ``fabricctl/commands/`` and declares ``PATH`` (its
words on the command line, e.g. ``("dataset", "create")``), ``HELP``, ``MUTATING`` (True when it
changes the fabric; a --dry-run never does), ``configure(parser)`` (its own arguments) and
``run(ctx, args) -> int``; and, for its locks (fabric_core.base.lock), optionally ``OBJECT_LOCKS(args)`` (the
objects' locks it holds for its whole run: ``[(kind, name, shared)]``, taken first, even by a command that
changes nothing, never in a dry run) and ``NODE_LOCK`` (whether a change holds the node lock for its whole
run: True by default; False for a long command, which takes ``ctx.node_lock()`` around its short sections
that change shared node state). This module builds the nested parsers from those declarations, adds the
options every command shares (``--json``; ``--dry-run`` to a change), and, in one place (``main``),
for every command: takes its locks around it (fabric_core.base.lock), maps errors to exit
statuses (fabric_core.base.errors.EXIT_STATUSES), reports a failure (on stderr as text; under --json also as the
command's one JSON object on stdout: the problem, the fix and the exit status, usage errors included), and
logs one journal record when a change ends (fabricctl.audit). Commands never import this module.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from fabric_core.base import interrupt

from . import audit, commands, output
from .context import Context
from .errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_STATUSES, EXIT_UNEXPECTED, EXIT_USAGE, FabricError

DESCRIPTION = """\
Operate the storage fabric from a storage node: publish immutable dataset versions read-only
to GPU nodes over iSCSI, snapshot training checkpoints, and rotate snapshots.

A dataset version is a ZFS snapshot of a staging volume: create the volume, ingest data, seal
a version (snapshot + manifest), publish it read-only to GPU nodes (mounted at
/datasets/NAME/VERSION, with /datasets/NAME/current pointing at the newest), unpublish, destroy.

Every change (not a --dry-run) takes this node's lock first (/run/fabric/node.lock, shared with
the Ansible modules), for its whole run when it is short, around its short steps when it is long
(ingest, seal, replicate, checkpoint snapshot: these hold their volume's own lock under
/run/fabric/locks instead): a second change waits for a lock (lock.wait_seconds in the config,
default 60 s), then gives up with exit status 4. When a change ends, one record goes to the journal
(journalctl -t fabricctl).

Exit statuses:
""" + "".join(f"  {status:>3}  {meaning}\n" for status, meaning in EXIT_STATUSES)

GROUP_HELP = {"dataset": "staging volumes and sealed versions of training datasets",
              "checkpoint": "checkpoint volumes and snapshots of training jobs",
              "access": "who may log in to this node's exports (per-host CHAP, revocation)",
              "plan": "capacity planning from the fabric's measured figures (pure arithmetic, changes nothing)",
              "config": "fabricctl's configuration file (/etc/fabricctl/config.yml)"}
# the options every command shares, declared once
JSON_HELP = "print the result as JSON, for scripts (a failure too: its error, fix and exit status)"
VERBOSE_HELP = "print each command fabricctl runs, here or on a host, with its exit status and time (on stderr)"
DEBUG_HELP = "on an error, print its traceback too (on stderr); the same as FABRICCTL_DEBUG=1"
DEBUG_ENV = "FABRICCTL_DEBUG"
GLOBAL_FLAGS = ("-v", "--verbose", "--debug")  # fabricctl's own options that take no value
USAGE_ERROR = "UsageError"  # the error_type of a usage error under --json (argparse's, exit 2)


class UsageExit(SystemExit):
    """argparse's usage error (status 2), with its message and the parser's name kept for --json."""

    def __init__(self, prog: str, message: str):
        super().__init__(EXIT_USAGE)
        self.prog = prog
        self.message = message


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage error (printed on stderr as argparse does) keeps its message (UsageExit)."""

    def error(self, message):
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise UsageExit(self.prog, message)


def _shared(parser: argparse.ArgumentParser, *, command: bool = False) -> None:
    """-v/--verbose and --debug: fabricctl's options, also accepted after a command's words (on a command's parser
    without a default, so that a flag given before the command is not reset by it, and left out of its help)."""
    default = argparse.SUPPRESS if command else False
    parser.add_argument("-v", "--verbose", action="store_true", default=default,
                        help=argparse.SUPPRESS if command else VERBOSE_HELP)
    parser.add_argument("--debug", action="store_true", default=default,
                        help=argparse.SUPPRESS if command else DEBUG_HELP)


DRY_RUN_HELP = "do every read and every check, change nothing, and print the plan"


def build_parser(only=None) -> argparse.ArgumentParser:
    """The command-line parser: the whole tree, or with ``only`` (a command module) that command alone,
    parsing its command lines exactly as the whole tree does (``main`` uses it to import one command)."""
    parser = Parser(prog="fabricctl", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, help="show fabricctl's version and those of ZFS, open-iscsi "
                        "and the Python modules it uses (rtslib-fb, libzfs_core, prometheus-client, the systemd "
                        "journal, paramiko, PyYAML) found on this node, each missing one with its Debian package, "
                        "then exit")
    parser.add_argument("--config", metavar="PATH",
                        help="configuration file (default: $FABRICCTL_CONFIG or /etc/fabricctl/config.yml)")
    _shared(parser)
    parser.set_defaults(command_tree=build_parser)  # the whole tree, for `completion` (commands never import main)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict = {}
    for module in [only] if only else commands.ALL:
        *parents, leaf = module.PATH
        where = sub
        for depth, word in enumerate(parents):
            key = tuple(parents[: depth + 1])
            if key not in groups:
                gp = where.add_parser(word, help=GROUP_HELP.get(word, ""), description=GROUP_HELP.get(word, ""))
                gp.set_defaults(func=None, group_parser=gp)
                groups[key] = gp.add_subparsers(dest="_".join(("group", *key)), metavar="COMMAND")  # not --config's
            where = groups[key]
        doc = (module.__doc__ or "").strip()
        p = where.add_parser(leaf, help=module.HELP, description=doc or module.HELP,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(p)
        if module.MUTATING:
            p.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP)
        p.add_argument("--json", action="store_true", help=JSON_HELP)
        _shared(p, command=True)
        p.set_defaults(func=module.run, command_path=module.PATH, command_module=module)
    return parser


class _Version(argparse.Action):
    """--version: probes the node's ZFS, open-iscsi and Python modules only when asked (fabricctl.about)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from .about import version_text  # noqa: PLC0415

        print(version_text())
        parser.exit()


def command_words(argv: list[str]) -> list[str]:
    """The words that name the command on a command line: those before its first option, after the
    global options (--config PATH, -v, --debug; at most three: the deepest command has three)."""
    words: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token == "--config":
            skip = True
        elif token.startswith("--config=") or token in GLOBAL_FLAGS:
            continue
        elif token.startswith("-") or len(words) == 3:
            break
        else:
            words.append(token)
    return words


def changes(module, args) -> bool:
    """Whether this run of the command changes the fabric: its module's MUTATING, and never a --dry-run."""
    declared = module.MUTATING
    mutating = declared(args) if callable(declared) else bool(declared)
    return mutating and not getattr(args, "dry_run", False)


def object_locks(ctx, module, args) -> list[tuple[str, str, bool]]:
    """The objects' locks a command holds for its whole run (its OBJECT_LOCKS; none in a dry run)."""
    declared = getattr(module, "OBJECT_LOCKS", None)
    if declared is None or getattr(args, "dry_run", False):
        return []
    return list(declared(ctx, args))


def holds_node_lock(module, args) -> bool:
    """Whether a change holds the node lock for its whole run (its NODE_LOCK, True by default)."""
    declared = getattr(module, "NODE_LOCK", True)
    return bool(declared(args) if callable(declared) else declared)


def _locks(ctx, args, change: bool) -> contextlib.ExitStack:
    """The command's locks, in fabric_core.base.lock's order: its objects' locks, then the node lock."""
    stack = contextlib.ExitStack()
    try:
        for kind, name, shared in object_locks(ctx, args.command_module, args):
            stack.enter_context(ctx.object_lock(kind, name, shared=shared))
        if change and holds_node_lock(args.command_module, args):
            stack.enter_context(ctx.node_lock())
    except BaseException:
        stack.close()
        raise
    return stack


def json_asked(argv: list[str]) -> bool:
    """Whether the command line asks for JSON (--json before any ``--``), read before argparse has parsed it."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in words


def debugging(args=None) -> bool:
    """--debug, or FABRICCTL_DEBUG set to anything but empty or 0."""
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def fail(ctx, status: int, error_type: str, problem: str, fix: str, text: str) -> None:
    """Report a command that failed, the one way for every command: ``text`` on stderr (for people), and under
    --json the command's one JSON object on stdout (its result, if it made one, with the problem, the fix, the exit
    status and the error's class: output.failure)."""
    print(text, file=sys.stderr)
    if debugging(ctx.args):
        import traceback  # noqa: PLC0415 - lazy: a command's start (docs/testing.md)

        traceback.print_exc(file=sys.stderr)
    ctx.finish(output.failure(problem, fix, status, error_type))


def _usage_error(exc: UsageExit) -> None:
    """A usage error under --json: argparse printed it on stderr; stdout gets it as the JSON object."""
    output.print_json(output.failure(exc.message, f"see `{exc.prog} --help` for the command line it takes",
                                     EXIT_USAGE, USAGE_ERROR))


def main(argv: list[str] | None = None, *, sink: audit.Sink | None = None) -> int:
    """Run one command; returns its exit status. ``sink`` receives the journal record of a change
    (default: the journal, else syslog; see fabricctl.audit). Only the first Ctrl-C counts (the command stops
    at its next step boundary and cleans up; ``fabric_core.base.interrupt``)."""
    with interrupt.first_only():
        return _main(sys.argv[1:] if argv is None else list(argv), sink)


def _main(argv: list[str], sink: audit.Sink | None) -> int:
    parser = build_parser(commands.matching(command_words(argv)))
    try:
        args = parser.parse_args(argv)
    except UsageExit as exc:  # a usage error (argparse printed it; status 2)
        if json_asked(argv):
            _usage_error(exc)
        return EXIT_USAGE
    except SystemExit as exc:  # --help or --version (0)
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_USAGE)
    if not getattr(args, "func", None):
        (getattr(args, "group_parser", None) or parser).print_help()
        return 0
    ctx = Context(args)
    change = changes(args.command_module, args)
    started = time.monotonic()
    status, error = EXIT_UNEXPECTED, ""
    try:
        with _locks(ctx, args, change):
            status = args.func(ctx, args)
        ctx.finish()
        return status
    except FabricError as exc:
        status, error = exc.exit_code, type(exc).__name__
        fail(ctx, status, error, exc.problem, exc.fix, f"fabricctl: error: {exc}")
        return status
    except KeyboardInterrupt:
        status, error = EXIT_INTERRUPTED, "KeyboardInterrupt"
        fail(ctx, status, error, "interrupted; the fabric is consistent", "re-run the command to finish it",
             "fabricctl: interrupted; the fabric is consistent (re-run the command to finish it)")
        return status
    except Exception as exc:  # noqa: BLE001 - the last line of defence: map to exit 5 with a hint
        status, error = EXIT_UNEXPECTED, type(exc).__name__
        hint = (f"re-run with --debug (or {DEBUG_ENV}=1) for a traceback; `journalctl -t fabricctl` and `dmesg` on "
                "this node")
        fail(ctx, status, error, f"unexpected error: {exc!r}", hint,
             f"fabricctl: unexpected error: {exc!r}\n  hint: {hint}")
        return status
    finally:
        ctx.close()
        if change:
            audit.emit(audit.record(args, ctx.hosts, status, time.monotonic() - started, error), sink)


if __name__ == "__main__":
    sys.exit(main())
