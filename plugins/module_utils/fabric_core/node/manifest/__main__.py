"""``python3 -m fabric_core.node.manifest build|verify|diff ...`` (``cli.main``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
