"""One module per fabricctl command; each exposes ``add_parser(subparsers)`` and ``run(args) -> int``."""
