#!/usr/bin/env python3
"""`make bench-read-levers` (issue 14, part 2): one tuning lever of the read path at a time, each value measured
in turn A B A B (the host is shared and noisy: alternating keeps drift out of the comparison), on the same tree
as `make bench-read` (1 GiB of 16 KiB-1 MiB files, published read-only to gpu1), read by bench/read_loader.py
with 8 workers, storage1's caches warm (an epoch 2: the lever acts on the path, not on the disks).

Levers (set on gpu1 for the block devices under the mount: the multipath map and its iSCSI disks):
- read_ahead_kb: 128 (the kernel's default) against 1024 and 4096;
- nr_requests: the kernel's default against 32 (fewer requests in flight per disk);
- max_sectors_kb: 1024 (what the role sets) against 256.

Writes its section of docs/benchmarks.md and bench/results/read_levers.json. Everything it makes is taken away
at the end and every value it changed is set back. Needs the lab up and converged (storage1, gpu1).
"""

from __future__ import annotations

import datetime
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import read_bench as rb  # noqa: E402
from labbench import fabricctl_facts, put, run_bench, say, ssh  # noqa: E402
from report import write_json  # noqa: E402

NAME = "rb-levers"
MOUNT = f"/datasets/{NAME}/v1"
LEVERS = {"read_ahead_kb": ["128", "1024", "4096"], "nr_requests": [None, "32"], "max_sectors_kb": ["1024", "256"]}
ROUNDS = 2


def sh(host: str, command: str, **kw) -> str:
    return ssh(host, command, **kw).stdout.strip()


def preflight() -> dict:
    return fabricctl_facts(rb.STORAGE, rb.GPU)


def cleanup(lab: dict) -> list[str]:
    vol = f"{lab['dataset_root']}/{NAME}"
    if ssh(rb.STORAGE, f"zfs list {vol}", check=False).returncode == 0:
        ssh(rb.STORAGE, f"fabricctl unpublish {NAME}@v1 --force", check=False, timeout=900)
        ssh(rb.STORAGE, f"fabricctl dataset destroy {NAME} --yes", check=False, timeout=900)
    return [vol] if ssh(rb.STORAGE, f"zfs list {vol}", check=False).returncode == 0 else []


def queues() -> list[str]:
    """The queue directories of the block devices under the mount: the map (dm-N) and its iSCSI disks."""
    dev = sh(rb.GPU, f"basename $(readlink -f $(findmnt -n -o SOURCE {MOUNT}))")
    slaves = sh(rb.GPU, f"ls /sys/block/{dev}/slaves 2>/dev/null").split()
    return [f"/sys/block/{d}/queue" for d in (dev, *slaves)]


def get(paths: list[str], lever: str) -> dict[str, str]:
    return {p: sh(rb.GPU, f"cat {p}/{lever}") for p in paths}


def set_all(values: dict[str, str], lever: str) -> None:
    for path, value in values.items():
        sh(rb.GPU, f"echo {value} > {path}/{lever}")


def measure(lab: dict) -> dict:
    put(rb.STORAGE, rb.TREE, (Path(__file__).resolve().parent / "make_tree.py").read_text())
    put(rb.GPU, rb.LOADER, (Path(__file__).resolve().parent / "read_loader.py").read_text())
    fs, spec = rb.TREES[rb.SMALL]
    say(f"{NAME}: {spec}, sealed, published to {rb.GPU}")
    sh(rb.STORAGE, f"fabricctl dataset create {NAME} --size {rb.VOLSIZE} --fs {fs} >/dev/null", timeout=900)
    sh(rb.STORAGE, f"python3 {rb.TREE} /srv/fabricctl/staging/{NAME} {spec} --seed 1", timeout=1800)
    sh(rb.STORAGE, f"fabricctl dataset seal {NAME} v1 >/dev/null && fabricctl publish {NAME}@v1 --to {rb.GPU} "
                   ">/dev/null", timeout=1800)
    paths = queues()
    rb.read(MOUNT, 8, 1, "first read (fills storage1's ARC and L2ARC)")
    out: dict = {"devices": paths}
    seed = 100
    for lever, values in LEVERS.items():
        original = get(paths, lever)
        say(f"{lever}: now {sorted(set(original.values()))}; values {values} (None: as found)")
        runs: dict = {str(v): [] for v in values}
        try:
            for _ in range(ROUNDS):
                for value in values:
                    set_all(original if value is None else dict.fromkeys(paths, value), lever)
                    seed += 1
                    runs[str(value)].append(rb.read(MOUNT, 8, seed, f"{lever}={value}"))
        finally:
            set_all(original, lever)
        base = str(values[0])
        mb = {v: statistics.mean(r["mb_s"] for r in rs) for v, rs in runs.items()}
        out[lever] = {"found": original, "runs": runs, "mean_mb_s": {v: round(m, 1) for v, m in mb.items()},
                      "over_first": {v: round(m / mb[base], 3) for v, m in mb.items()}}
    return out


def rows(lab: dict, res: dict, when: str) -> list[str]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    ratios = {f"{lever}_{v}_over_{LEVERS[lever][0]}": r for lever in LEVERS
              for v, r in res[lever]["over_first"].items() if v != str(LEVERS[lever][0])}
    write_json("read_levers", {"date": date, "commit": commit, "lab": "trixie lab (TCG), storage1 and gpu1",
                               "figures": res, "ratios": ratios})
    out = ["## Issue 14: read-path levers, one at a time", "",
           f"Measured in one run by `make bench-read-levers` on {when} at commit {commit}: bench/read_loader.py, 8 "
           f"workers, the bench-read tree over iSCSI (ext4) on gpu1, storage1's caches warm; each value read "
           f"{ROUNDS} times, the values in turn (A B A B). Set on the multipath map and its iSCSI disks "
           f"({', '.join(Path(p).parent.name for p in res['devices'])}).", "",
           "| lever | value | MB/s (mean) | over the first value | runs (MB/s) |", "|---|---|---|---|---|"]
    for lever in LEVERS:
        r = res[lever]
        for v in r["mean_mb_s"]:
            shown = v if v != "None" else f"as found ({', '.join(sorted(set(r['found'].values())))})"
            out.append(f"| {lever} | {shown} | {r['mean_mb_s'][v]} | {r['over_first'][v]} | "
                       f"{', '.join(str(x['mb_s']) for x in r['runs'][v])} |")
    out.append("")
    return out


def main() -> int:
    return run_bench("bench-read-levers", "read-levers", checking="storage1 and gpu1 converged",
                     preflight=preflight, leftovers=cleanup, cleanup_only="--cleanup" in sys.argv[1:],
                     measure=measure, cleanup=cleanup, rows=rows)


if __name__ == "__main__":
    sys.exit(main())
