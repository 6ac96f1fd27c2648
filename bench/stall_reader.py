#!/usr/bin/env python3
"""A reader that measures read stalls: it reads every file under a directory again and again with O_DIRECT
(each read goes to the disk, never to this node's page cache) until a stop file appears or --seconds pass,
and reports the longest time between two completed reads (a stall), every read error, and what it read.

Self-contained (Python 3 standard library only): it is copied to a GPU node and run there against a
published version's mount while a storage node reboots (tests/integration/test_reboot.py, and
`make bench-replication` for the single-path against multipath figures):

  python3 stall_reader.py /datasets/shared/v1 --stop-file /run/stall.stop --json-out /run/stall.json

The document printed (and written to --json-out FILE):

  reads, bytes, seconds, errors (count), first_errors (up to 10: [seconds since start, file, message]),
  max_stall_s (the longest time from one completed read to the next), stalls_over_1s ([start, length] in
  seconds since start, for every gap over one second), block_size
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import time

BLOCK = 1 << 20  # bytes per read (a multiple of the page size, as O_DIRECT needs)


def list_files(root: str) -> list[str]:
    out = []
    for top, dirs, files in os.walk(root):
        dirs.sort()
        out += [os.path.join(top, f) for f in sorted(files)]
    return [f for f in out if os.path.isfile(f) and not os.path.islink(f)]


def read_direct(path: str, buf: mmap.mmap) -> int:
    """Read a whole file with O_DIRECT into buf; returns the bytes read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    try:
        total = 0
        while True:
            n = os.readv(fd, [buf])
            total += n
            if n < len(buf):
                return total
    finally:
        os.close(fd)


def run(root: str, *, seconds: float, stop_file: str | None, block: int = BLOCK, clock=time.monotonic) -> dict:
    files = list_files(root)
    if not files:
        raise SystemExit(f"stall_reader: no files under {root}")
    buf = mmap.mmap(-1, block)
    start = last = clock()
    reads = nbytes = errors = 0
    first_errors: list = []
    stalls: list = []
    max_gap = 0.0
    i = 0
    while clock() - start < seconds and not (stop_file and os.path.exists(stop_file)):
        path = files[i % len(files)]
        i += 1
        try:
            nbytes += read_direct(path, buf)
            reads += 1
        except OSError as exc:
            errors += 1
            if len(first_errors) < 10:
                first_errors.append([round(clock() - start, 3), path, str(exc)])
            time.sleep(0.05)  # a failing path must not spin
            continue
        now = clock()
        gap = now - last
        if gap > 1.0:
            stalls.append([round(last - start, 3), round(gap, 3)])
        max_gap = max(max_gap, gap)
        last = now
    return {"root": root, "reads": reads, "bytes": nbytes, "seconds": round(clock() - start, 3), "errors": errors,
            "first_errors": first_errors, "max_stall_s": round(max_gap, 3), "stalls_over_1s": stalls,
            "block_size": block, "files": len(files)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root")
    p.add_argument("--seconds", type=float, default=900.0, help="stop after this long (default 900)")
    p.add_argument("--stop-file", help="stop as soon as this file exists")
    p.add_argument("--json-out", help="also write the document to this file")
    args = p.parse_args(argv)
    out = run(args.root, seconds=args.seconds, stop_file=args.stop_file)
    text = json.dumps(out, indent=2)
    if args.json_out:
        with open(args.json_out + ".tmp", "w") as f:
            f.write(text + "\n")
        os.replace(args.json_out + ".tmp", args.json_out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
