"""fabricctl entry point: argument parsing, dispatch to fabricctl.commands, errors to exit codes.

Every command lives in its own module under ``fabricctl/commands/`` and declares ``PATH`` (its
words on the command line, e.g. ``("dataset", "create")``), ``HELP``, ``configure(parser)``,
``run(ctx, args) -> int`` and ``main(argv) -> int``. This module builds the nested parsers from
those declarations and maps errors to exit codes in one place.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .errors import EXIT_INTERRUPTED, EXIT_UNEXPECTED, FabricError

DESCRIPTION = """\
Operate the storage fabric from a storage node: publish immutable dataset versions read-only
to GPU nodes over iSCSI, snapshot training checkpoints, and rotate snapshots.

A dataset version is a ZFS snapshot of a staging volume: create the volume, ingest data, seal
a version (snapshot + manifest), publish it read-only to GPU nodes (mounted at
/datasets/NAME/VERSION, with /datasets/NAME/current pointing at the newest), unpublish, destroy.

Exit codes: 0 success, 1 user error (nothing changed), 2 partial (some hosts failed),
3 unexpected error, 130 interrupted.
"""

GROUP_HELP = {"dataset": "staging volumes and sealed versions of training datasets",
              "checkpoint": "checkpoint volumes and snapshots of training jobs"}


def _commands() -> list:
    from .commands import ALL  # noqa: PLC0415 - commands import main's helpers

    return ALL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fabricctl", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fabricctl {__version__}")
    parser.add_argument("--config", metavar="PATH",
                        help="configuration file (default: $FABRICCTL_CONFIG or /etc/fabricctl/config.yml)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict = {}
    for module in _commands():
        *parents, leaf = module.PATH
        where = sub
        for depth, word in enumerate(parents):
            key = tuple(parents[: depth + 1])
            if key not in groups:
                gp = where.add_parser(word, help=GROUP_HELP.get(word, ""), description=GROUP_HELP.get(word, ""))
                gp.set_defaults(func=None, group_parser=gp)
                groups[key] = gp.add_subparsers(dest="_".join(key), metavar="COMMAND")
            where = groups[key]
        doc = (module.__doc__ or "").strip()
        p = where.add_parser(leaf, help=module.HELP, description=doc or module.HELP,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(p)
        p.set_defaults(func=module.run, command_path=module.PATH)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        (getattr(args, "group_parser", None) or parser).print_help()
        return 0
    from .context import Context  # noqa: PLC0415

    ctx = Context(args)
    try:
        return args.func(ctx, args)
    except FabricError as exc:
        print(f"fabricctl: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fabricctl: interrupted; the fabric is consistent (re-run the command to finish it)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the last line of defence: map to exit 3 with a hint
        if os.environ.get("FABRICCTL_DEBUG"):
            raise
        print(f"fabricctl: unexpected error: {exc!r}\n  hint: re-run with FABRICCTL_DEBUG=1 for a traceback; "
              "`journalctl -t fabricctl` and `dmesg` on this node", file=sys.stderr)
        return EXIT_UNEXPECTED
    finally:
        ctx.close()


def command_main(path: tuple, argv: list[str] | None) -> int:
    """``main(argv)`` of one command module: the same as ``fabricctl <path...> <argv...>``."""
    return main([*path, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
