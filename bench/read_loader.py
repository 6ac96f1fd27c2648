#!/usr/bin/env python3
"""A data-loader-like reader for `make bench-read` (issue 14, the read path): reads every file under a
directory once per epoch, in a seeded shuffled order, with N worker processes, and prints one JSON document.

It reads as a PyTorch DataLoader with a RandomSampler and num_workers=N does: each epoch the list of files
is shuffled (seeded: the same seed and epoch give the same order on every run and every node), cut into
batches of --batch-size files, and the batches go to the workers through one shared queue (a worker that
is done takes the next batch, so a slow file does not hold the others). A read is open + read the whole
file into one reused buffer of --block-size bytes + close; its latency is timed around all three.

Self-contained: Python 3 standard library only, no fabric code. It is copied to a GPU node and run there
against a published version's mount (/datasets/NAME/VERSION):

  python3 read_loader.py /datasets/imagenet/v1 --workers 8 --epochs 3 --seed 1 --drop-caches-between-epochs

The document printed (and written to --json-out FILE when given):

  parameters  root, workers, epochs, seed, block_size, batch_size, drop_caches, files, bytes
  epochs[]    epoch (1-based), files (reads done), bytes, seconds (wall, from the first batch handed out to
              the last result in), mb_s, files_s, latency_ms {p50, p90, p99, max, mean}, reads_per_file
              {min, max} (1 and 1: every file was read exactly once), workers_used, caches_dropped
  units       MB = 10^6 bytes; latencies in milliseconds; percentiles by the nearest-rank method

--drop-caches-between-epochs writes 3 to /proc/sys/vm/drop_caches (after sync) before every epoch, the
first included, so that every epoch reads from the storage, not from this node's page cache (the storage
node's ARC is not touched: a second epoch can be served from there). It needs root; without root the
reader stops before reading anything (exit status 2). The statistics (``percentile``, ``summary``,
``rate``) are pure functions, unit-tested in tests/unit/test_read_loader.py, which also runs the reader
for real on a small temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import sys
import time
from collections.abc import Sequence

MB = 1e6  # MB/s with MB = 10^6 bytes
PERCENTILES = (50, 90, 99)
DROP_CACHES = "/proc/sys/vm/drop_caches"

# ---- pure: order, batches, statistics ----------------------------------------------------------------


def epoch_order(count: int, seed: int, epoch: int) -> list[int]:
    """The indices 0..count-1 shuffled for this epoch: the same (seed, epoch) gives the same order on every
    run and node with the same Python (a string seed is hashed with SHA-512, not with Python's per-process
    salted hash), and every epoch has its own order."""
    order = list(range(count))
    random.Random(f"read_loader/{seed}/{epoch}").shuffle(order)
    return order


def batches(order: Sequence[int], size: int) -> list[list[int]]:
    """The order cut into batches of ``size`` files (the last may be shorter), in order."""
    if size < 1:
        raise ValueError(f"a batch has at least one file, got {size}")
    return [list(order[i:i + size]) for i in range(0, len(order), size)]


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile by the nearest-rank method: the smallest value such that at least p % of the
    values are at or below it, i.e. sorted(values)[ceil(p / 100 * n) - 1] (p = 0 gives the minimum).
    Always one of the values (no interpolation). Raises ValueError on no values or p outside 0-100."""
    if not values:
        raise ValueError("no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is outside 0-100")
    ordered = sorted(values)
    rank = max(math.ceil(round(p * len(ordered) / 100, 9)), 1)  # round: 99.9 % of 1000 is rank 999, not 1000
    return ordered[rank - 1]


def summary(latencies_s: Sequence[float]) -> dict:
    """Latencies in seconds -> {p50, p90, p99, max, mean} in milliseconds (rounded to microseconds); all
    None when there are none."""
    keys = [f"p{p}" for p in PERCENTILES] + ["max", "mean"]
    if not latencies_s:
        return dict.fromkeys(keys)
    out = {f"p{p}": percentile(latencies_s, p) for p in PERCENTILES}
    out["max"] = max(latencies_s)
    out["mean"] = sum(latencies_s) / len(latencies_s)
    return {k: round(v * 1000, 3) for k, v in out.items()}


def rate(amount: float, seconds: float, unit: float = 1.0) -> float | None:
    """amount / unit per second (rate(bytes, s, MB) is MB/s with MB = 10^6 bytes); None for no time."""
    if not seconds > 0:
        return None
    return amount / unit / seconds


def epoch_report(epoch: int, results: Sequence[tuple], file_count: int, seconds: float,
                 caches_dropped: bool) -> dict:
    """One epoch's figures from the workers' results: (pid, indices, bytes, latencies) per batch."""
    counts = [0] * file_count
    latencies: list[float] = []
    total, pids = 0, set()
    for pid, indices, nbytes, lat in results:
        pids.add(pid)
        for i in indices:
            counts[i] += 1
        total += nbytes
        latencies.extend(lat)
    files = sum(counts)
    mb_s, files_s = rate(total, seconds, MB), rate(files, seconds)
    return {"epoch": epoch, "files": files, "bytes": total, "seconds": round(seconds, 6),
            "mb_s": None if mb_s is None else round(mb_s, 3), "files_s": None if files_s is None else round(files_s, 3),
            "latency_ms": summary(latencies),
            "reads_per_file": {"min": min(counts, default=0), "max": max(counts, default=0)},
            "workers_used": len(pids), "caches_dropped": caches_dropped}


# ---- I/O ------------------------------------------------------------------------------------------------


def list_files(root: str) -> list[str]:
    """Every regular file under root (symbolic links not followed), sorted: the same list on every node."""
    found = []
    for top, dirs, names in os.walk(root):
        dirs.sort()
        for name in names:
            path = os.path.join(top, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(path)
    return sorted(found)


_FILES: list[str] = []
_BUFFER = bytearray()


def _start_worker(files: list[str], block_size: int) -> None:
    global _FILES, _BUFFER
    _FILES, _BUFFER = files, bytearray(block_size)


def read_batch(indices: list[int]) -> tuple[int, list[int], int, list[float]]:
    """A worker reads one batch: (its pid, the indices read, bytes read, each file's latency in seconds)."""
    view = memoryview(_BUFFER)
    total, latencies = 0, []
    for i in indices:
        started = time.perf_counter()
        with open(_FILES[i], "rb", buffering=0) as fh:
            while True:
                n = fh.readinto(view)
                if not n:
                    break
                total += n
        latencies.append(time.perf_counter() - started)
    return os.getpid(), list(indices), total, latencies


def drop_caches() -> None:
    os.sync()
    with open(DROP_CACHES, "w") as fh:
        fh.write("3\n")


def _context():
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else None)


def run(root: str, *, workers: int = 4, epochs: int = 1, seed: int = 0, block_size: int = 1 << 20,
        batch_size: int = 16, drop: bool = False) -> dict:
    """Read every file under root once per epoch; the JSON document (see the module's docstring)."""
    files = list_files(root)
    if not files:
        raise SystemExit(f"read_loader: no files under {root}")
    sizes = sum(os.path.getsize(f) for f in files)
    reports = []
    with _context().Pool(workers, initializer=_start_worker, initargs=(files, block_size)) as pool:
        for epoch in range(1, epochs + 1):
            if drop:
                drop_caches()
            work = batches(epoch_order(len(files), seed, epoch), batch_size)
            started = time.perf_counter()
            results = list(pool.imap_unordered(read_batch, work))
            seconds = time.perf_counter() - started
            reports.append(epoch_report(epoch, results, len(files), seconds, drop))
    return {"tool": "bench/read_loader.py",
            "parameters": {"root": os.path.abspath(root), "workers": workers, "epochs": epochs, "seed": seed,
                           "block_size": block_size, "batch_size": batch_size, "drop_caches": drop,
                           "files": len(files), "bytes": sizes},
            "epochs": reports,
            "units": {"mb": MB, "latency": "ms", "percentiles": "nearest-rank"}}


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="MB = 10^6 bytes; latency percentiles by the nearest-rank method")
    parser.add_argument("root", help="the directory to read (every regular file under it, once per epoch)")
    parser.add_argument("--workers", type=_positive, default=4, help="worker processes (default 4)")
    parser.add_argument("--epochs", type=_positive, default=1, help="passes over every file (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffled order (default 0)")
    parser.add_argument("--block-size", type=_positive, default=1 << 20,
                        help="bytes per read() into one reused buffer (default 1048576)")
    parser.add_argument("--batch-size", type=_positive, default=16,
                        help="files a worker takes from the shared queue at a time (default 16)")
    parser.add_argument("--drop-caches-between-epochs", action="store_true",
                        help=f"write 3 to {DROP_CACHES} before every epoch (root only)")
    parser.add_argument("--json-out", metavar="FILE", help="also write the document to FILE")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.root):
        parser.error(f"{args.root} is not a directory")
    if args.drop_caches_between_epochs and os.geteuid() != 0:
        parser.error(f"--drop-caches-between-epochs writes {DROP_CACHES}, which only root may: run as root "
                     "(sudo) or leave the option out")
    doc = run(args.root, workers=args.workers, epochs=args.epochs, seed=args.seed, block_size=args.block_size,
              batch_size=args.batch_size, drop=args.drop_caches_between_epochs)
    text = json.dumps(doc, indent=2, sort_keys=True)
    if args.json_out:
        with open(args.json_out, "w") as fh:
            fh.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
