#!/usr/bin/env python3
"""Benchmark of issue 31 on the lab: `fabricctl dataset seal` after 1% of 100,000 files changed, against --full.

Issue 31 asks: "The same on the lab with 100,000 files through `fabricctl dataset seal`. Key
lab_seal_1pct_over_full." (The same: the host benchmark's seal after 1% changed, incremental against full.)

On storage1, in one run:
1. a dataset of this benchmark's own (benchseal, 2 GiB staging volume, ext4) whose staging file system gets
   100,000 files of 1-8 KiB (seeded, 100 directories of 1,000) written straight into it by one Python process
   (the cost of an ingest is not the seal's), then sealed once (v0: every file hashed, the stat cache written);
2. ROUNDS rounds (default 2), each: 1% of the files (1,000) changed in the staging file system, keeping their
   sizes (half rewritten in place, half replaced by a new file renamed over the old one, as `dataset ingest`
   writes), then `fabricctl dataset seal benchseal vN --json` (incremental: reuses the parent's stat cache) and
   right after it `fabricctl dataset seal benchseal vN+1 --full --json` of the same tree (every file hashed). The
   incremental seal runs first in every round: run after a full seal of the same tree, it would find nothing
   changed. Both seals include what every seal does besides the manifest (sync, unmount, the snapshot with its
   properties, the mount again). Each seal is timed on storage1 (GNU time around the command).
   lab_seal_1pct_over_full = the mean incremental time over the mean full time (target <= 0.05).
3. clean-up: `fabricctl dataset destroy benchseal --yes` (the staging volume and every version of it).

Run as root on the lab's host with the lab up and converged: `make bench-versions-lab` (ROUNDS=N). It writes the
`versions-lab` section of docs/benchmarks.md and the lab_* figures of bench/results/versions.json (the host
benchmark's figures there are kept).
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from labbench import BenchError, bench_args, fabricctl_facts, run_bench, say, ssh, timed  # noqa: E402
from report import commit, now  # noqa: E402

SECTION = "versions-lab"
STORAGE = "storage1"
DATA = "benchseal"
FILES, DIRS = 100_000, 100
RESULTS = Path(__file__).resolve().parent / "results" / "versions.json"

# Runs on storage1. argv: root, mode ("make" or "change"), seed. Prints one JSON object.
TREE = r'''
import json, os, random, sys
root, mode, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
files, dirs = 100_000, 100
per = files // dirs
if mode == "make":
    rng = random.Random(seed)
    total = 0
    for d in range(dirs):
        path = os.path.join(root, "train", f"d{d:03d}")
        os.makedirs(path, exist_ok=True)
        for f in range(per):
            data = rng.randbytes(rng.randint(1024, 8192))
            with open(os.path.join(path, f"f{f:04d}.bin"), "wb") as fh:
                fh.write(data)
            total += len(data)
    print(json.dumps({"files": files, "bytes": total}))
else:
    rng = random.Random(seed)
    picked = rng.sample(range(files), files // 100)
    for n, index in enumerate(picked):
        path = os.path.join(root, "train", f"d{index // per:03d}", f"f{index % per:04d}.bin")
        data = rng.randbytes(os.path.getsize(path))
        if n % 2 == 0:
            with open(path, "r+b") as fh:
                fh.write(data)
        else:
            tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".new")
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
    os.sync()
    print(json.dumps({"changed": len(picked)}))
'''


def fctl(*args: str, check: bool = True):
    return ssh(STORAGE, "fabricctl " + " ".join(shlex.quote(a) for a in args), check=check, timeout=3600)


def exists() -> bool:
    names = [d["name"] for d in json.loads(fctl("list", "--json").stdout)["datasets"]]
    return DATA in names


def staging_root() -> str:
    """Where fabricctl mounts the staging file system (a seal's dry run names it; it also mounts it)."""
    out = json.loads(fctl("dataset", "seal", DATA, "vdry", "--dry-run", "--json").stdout)
    step = out["steps"][0]  # "manifest of ROOT (...)"
    return step.split(" of ", 1)[1].split(" (", 1)[0]


def seal(version: str, *extra: str) -> dict:
    t = timed(STORAGE, "fabricctl dataset seal " + shlex.join([DATA, version, "--json", *extra]))
    out = t.json()
    return {"seconds": round(t.node, 2), "hashed": out.get("hashed"), "reused": out.get("reused"),
            "incremental": out.get("incremental"), "how": out.get("how")}


def measure(rounds: int) -> dict:
    say(f"{DATA}: create (2G), {FILES:,} files written into its staging file system")
    fctl("dataset", "create", DATA, "--size", "2G")
    ssh(STORAGE, "mkdir -p /tmp/.bench-seal-empty")
    fctl("dataset", "ingest", DATA, "/tmp/.bench-seal-empty/")  # the staging file system mounted, as for a copy
    root = staging_root()
    if ssh(STORAGE, f"findmnt -n {shlex.quote(root)}", check=False).returncode != 0:
        raise BenchError(f"{DATA}'s staging file system is not mounted at {root} after an ingest")
    ssh(STORAGE, "cat > /tmp/.bench-seal-tree.py", input_text=TREE)
    made = json.loads(ssh(STORAGE, f"python3 /tmp/.bench-seal-tree.py {shlex.quote(root)} make 31",
                          timeout=7200).stdout.strip().splitlines()[-1])
    say(f"first seal v0 ({made['files']:,} files, {made['bytes']:,} bytes): every file hashed, the stat cache made")
    first = seal("v0")
    runs = []
    for r in range(rounds):
        changed = json.loads(ssh(STORAGE, f"python3 /tmp/.bench-seal-tree.py {shlex.quote(root)} change {100 + r}",
                                 timeout=3600).stdout.strip().splitlines()[-1])["changed"]
        say(f"round {r + 1}/{rounds}: {changed} files changed; incremental seal v{2 * r + 1}, then --full v{2 * r + 2}")
        incremental = seal(f"v{2 * r + 1}")
        full = seal(f"v{2 * r + 2}", "--full")
        if not incremental["incremental"] or full["incremental"]:
            raise BenchError(f"round {r + 1}: the seals were not what was asked: {incremental}, {full}")
        runs.append({"changed": changed, "incremental": incremental, "full": full})
        say(f"  incremental {incremental['seconds']} s ({incremental['hashed']} hashed, {incremental['reused']} "
            f"reused), full {full['seconds']} s")
    inc = statistics.mean(r["incremental"]["seconds"] for r in runs)
    full = statistics.mean(r["full"]["seconds"] for r in runs)
    return {"rounds": rounds, "made": made, "first": first, "runs": runs,
            "figures": {"lab_files": made["files"], "lab_bytes": made["bytes"], "lab_first_seal_s": first["seconds"],
                        "lab_incremental_s": [r["incremental"]["seconds"] for r in runs],
                        "lab_full_s": [r["full"]["seconds"] for r in runs],
                        "lab_changed_files": runs[0]["changed"]},
            "ratios": {"lab_seal_1pct_over_full": round(inc / full, 3) if full else None}}


def cleanup(keep: bool) -> list[str]:
    ssh(STORAGE, "rm -rf /tmp/.bench-seal-tree.py /tmp/.bench-seal-empty", check=False)
    if keep:
        return []
    try:
        if exists():
            fctl("dataset", "destroy", DATA, "--yes")
    except BenchError as exc:
        return [str(exc)]
    return []


def write_results(done: dict) -> None:
    doc = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    runs = dict(doc.get("runs", {}))
    runs["lab"] = {"date": now(), "commit": commit(), "rounds": done["rounds"], "first": done["first"],
                   "seals": done["runs"]}
    doc.update({"date": doc.get("date") or now(), "commit": doc.get("commit") or commit(),
                "lab": "host; lab_* on the QEMU TCG lab (docs/lab.md)",
                "figures": {**doc.get("figures", {}), **done["figures"]},
                "ratios": {**doc.get("ratios", {}), **done["ratios"]}, "runs": runs})
    RESULTS.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def rows(done: dict, when: str) -> list[str]:
    f, r = done["figures"], done["ratios"]
    inc = ", ".join(f"{s} s" for s in f["lab_incremental_s"])
    full = ", ".join(f"{s} s" for s in f["lab_full_s"])
    hashed = ", ".join(str(x["incremental"]["hashed"]) for x in done["runs"])
    ratio = r["lab_seal_1pct_over_full"]
    return [
        "## Issue 31: a seal that costs the change, on the lab (`make bench-versions-lab`)",
        "",
        f"{when}, commit {commit()}, storage1 (TCG), a dataset of {f['lab_files']:,} files of 1-8 KiB "
        f"({f['lab_bytes']:,} bytes, ext4 on a 2 GiB zvol); {done['rounds']} rounds, each: {f['lab_changed_files']:,} "
        "files (1%) changed in the staging file system (sizes kept, half in place, half renamed over), then "
        "`fabricctl dataset seal` (incremental) and `fabricctl dataset seal --full` of the same tree. Whole "
        "commands, timed on storage1 (sync, unmount, snapshot and mount included).",
        "",
        "| incremental seal | full seal (`--full`) | mean ratio (target) |",
        "|---|---|---|",
        f"| {inc} ({hashed} hashed) | {full} | **{ratio}** (<= 0.05) |",
        "",
        f"First seal of the tree (every file hashed, the stat cache made): {f['lab_first_seal_s']} s. "
        + ("Target met." if ratio is not None and ratio <= 0.05 else "Target not met."),
    ]


def main() -> int:
    args = bench_args(__doc__, rounds=2, rounds_help="rounds of incremental then full", keep=DATA)
    result: dict = {}

    def preflight() -> dict:
        fabricctl_facts(STORAGE)
        return {}

    def run(_lab) -> dict:
        result.update(measure(args.rounds))
        return result

    def report(done: dict, when: str) -> list[str]:
        write_results(done)
        return rows(done, when)

    def leftovers(_lab) -> list[str]:
        if args.cleanup_only:
            return cleanup(False)
        if exists():  # a dataset of that name is not destroyed unless asked
            return [f"a dataset named {DATA} exists on {STORAGE} (an earlier run's, kept with --keep or "
                    f"interrupted): `make bench-versions-lab` with ARGS=--cleanup-only destroys it"]
        return []

    return run_bench("bench-versions-lab", SECTION, checking="up and converged (fabricctl on storage1)",
                     preflight=preflight, leftovers=leftovers, cleanup_only=args.cleanup_only,
                     measure=run, cleanup=lambda _lab: cleanup(args.keep),
                     rows=lambda _lab, done, when: report(done, when), partial=lambda: result)


if __name__ == "__main__":
    sys.exit(main())
