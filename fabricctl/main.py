"""fabricctl entry point: argument parsing, dispatch to fabricctl.commands, errors to exit codes."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .errors import EXIT_INTERRUPTED, EXIT_UNEXPECTED, FabricError

DESCRIPTION = """\
Operate the storage fabric from a storage node: publish immutable dataset versions read-only
to GPU nodes over iSCSI, snapshot training checkpoints, and rotate snapshots.

Exit codes: 0 success, 1 user error (nothing changed), 2 partial (some hosts failed),
3 unexpected error, 130 interrupted.
"""

COMMANDS: list = []  # command modules, filled as commands land (see fabricctl/commands/)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fabricctl", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fabricctl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except FabricError as exc:
        print(f"fabricctl: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fabricctl: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the last line of defence: map to exit 3 with a hint
        if os.environ.get("FABRICCTL_DEBUG"):
            raise
        print(f"fabricctl: unexpected error: {exc!r}\n  hint: re-run with FABRICCTL_DEBUG=1 for a traceback",
              file=sys.stderr)
        return EXIT_UNEXPECTED


if __name__ == "__main__":
    sys.exit(main())
