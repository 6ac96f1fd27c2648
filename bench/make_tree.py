#!/usr/bin/env python3
"""The tree `make bench-read` reads (issue 14): files of random bytes (incompressible, so ZFS's compression
does not shrink what is read) with sizes drawn log-uniformly between --min and --max, until --total bytes,
1000 files per directory. Seeded: the same arguments give the same names and sizes (the bytes themselves are
random). Self-contained (standard library): copied to the storage node and run there into a staging volume.

  python3 make_tree.py DEST --total 1G --min 16K --max 1M --seed 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size(text: str) -> int:
    text = text.strip().upper()
    return int(float(text[:-1]) * UNITS[text[-1]]) if text[-1:] in UNITS else int(text)


def sizes(total: int, low: int, high: int, seed: int) -> list[int]:
    """File sizes, log-uniform in [low, high], summing to at least ``total``."""
    rng = random.Random(f"make_tree/{seed}")
    out, done = [], 0
    while done < total:
        n = int(math.exp(rng.uniform(math.log(low), math.log(high))))
        out.append(n)
        done += n
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dest")
    p.add_argument("--total", type=size, required=True)
    p.add_argument("--min", type=size, required=True)
    p.add_argument("--max", type=size, required=True)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    plan = sizes(a.total, a.min, a.max, a.seed)
    for i, n in enumerate(plan):
        d = os.path.join(a.dest, f"d{i // 1000:03d}")
        if i % 1000 == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:06d}.bin"), "wb") as fh:
            while n > 0:
                chunk = min(n, 1 << 20)
                fh.write(os.urandom(chunk))
                n -= chunk
    print(json.dumps({"files": len(plan), "bytes": sum(plan)}))


if __name__ == "__main__":
    main()
