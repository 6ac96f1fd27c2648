#!/usr/bin/env python3
"""`make bench-zvol-mq` (issue 17): zvol reads on a storage node with OpenZFS 2.3's block-multiqueue
zvol path (zvol_use_blk_mq=1) against the classic one (0), measured in one run, interleaved.

A zvol takes the mode when it is created or its pool imported, so the bench makes its own mirror pool
on storage1's two free HDDs (the reference layout leaves HDD1006 and HDD1007 out), fills a volume with
random data, and for each setting exports and imports the pool before reading. Two cases:

- ARC-hot: a 256 MiB volume read once first, so fio's reads come from RAM: the zvol layer itself
  (request handling, queues, threads) is what differs;
- from disk: a 1 GiB volume with primarycache=metadata, so every read goes to the (emulated) disks.

fio (direct I/O, libaio, 20 s): random 128 KiB reads with 2 jobs at queue depth 16 (the VM's two
vCPUs), and sequential 1 MiB reads with one job at depth 4. Rounds alternate 0,1,0,1; the table keeps
the median of the two. Writes its section of docs/benchmarks.md and bench/results/zvol_mq.json.
The lab must be up (`make lab-up`); nothing of the site is touched. Absolute figures are bound by
software emulation; compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402
from labbench import BenchError, run_bench, say, ssh  # noqa: E402
from report import write_json  # noqa: E402

STORAGE = "storage1"
POOL = "benchmq"
DISKS = ["/dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1006", "/dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1007"]
PARAM = "/sys/module/zfs/parameters/zvol_use_blk_mq"
CASES = {"arc_hot": {"mib": 256, "props": "-o primarycache=all"},
         "from_disk": {"mib": 1024, "props": "-o primarycache=metadata"}}
JOBS = {"rand128k": "--rw=randread --bs=128k --numjobs=2 --iodepth=16",
        "seq1m": "--rw=read --bs=1M --numjobs=1 --iodepth=4"}
SECONDS = 20


def sh(host: str, command: str, **kw) -> str:
    """A command's standard output on a lab VM, stripped (labbench.ssh gives the whole CompletedProcess)."""
    return ssh(host, command, **kw).stdout.strip()


def preflight() -> dict:
    if sh(STORAGE, f"test -e {PARAM} && echo yes", check=False) != "yes":
        raise BenchError(f"{PARAM} is missing: this bench needs OpenZFS 2.3 on {STORAGE}")
    for disk in DISKS:
        if sh(STORAGE, f"blkid -p {disk} >/dev/null 2>&1; echo $?", check=False) != "2" \
                and sh(STORAGE, f"zpool status -P {POOL} 2>/dev/null | grep -c {disk}", check=False) != "1":
            raise BenchError(f"{disk} is not blank: another test or bench is using it")
    return {"before": sh(STORAGE, f"cat {PARAM}"), "version": sh(STORAGE, "cat /sys/module/zfs/version")}


def leftovers(lab: dict) -> list[str]:
    return cleanup(lab)


def cleanup(lab: dict) -> list[str]:
    sh(STORAGE, f"zpool destroy -f {POOL} 2>/dev/null; for d in {' '.join(DISKS)}; do "
                 "zpool labelclear -f $d-part1 2>/dev/null; wipefs -qa $d; done; "
                 f"echo {lab.get('before', '0')} > {PARAM}", check=False)
    left = sh(STORAGE, f"zpool list -H -o name {POOL} 2>/dev/null", check=False)
    return [f"pool {POOL}"] if left else []


def fio(device: str, job: str) -> dict:
    out = sh(STORAGE, f"fio --name=b --filename={device} --direct=1 --ioengine=libaio {JOBS[job]} "
                       f"--time_based --runtime={SECONDS} --group_reporting --output-format=json", timeout=600)
    read = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    return {"MBps": round(read["bw_bytes"] / 1e6, 1), "iops": round(read["iops"]),
            "p99_ms": round(read["clat_ns"]["percentile"]["99.000000"] / 1e6, 2)}


def measure(lab: dict) -> dict:
    say(f"pool {POOL}: mirror of the two free HDDs; volumes for the two cases")
    sh(STORAGE, f"zpool create -f -o ashift=12 {POOL} mirror {' '.join(DISKS)}")
    for case, c in CASES.items():
        sh(STORAGE, f"zfs create -V {c['mib']}M -o volblocksize=128K -o compression=off {c['props']} {POOL}/{case}"
                     f" && udevadm settle && dd if=/dev/urandom of=/dev/zvol/{POOL}/{case} bs=1M "
                     f"count={c['mib']} oflag=direct status=none", timeout=1800)
    results: dict = {case: {job: {"0": [], "1": []} for job in JOBS} for case in CASES}
    for round_ in (1, 2):
        for setting in ("0", "1"):
            say(f"round {round_}: zvol_use_blk_mq={setting} (pool exported and imported)")
            sh(STORAGE, f"zpool export {POOL} && echo {setting} > {PARAM} && zpool import -d /dev/disk/by-id {POOL} "
                         "&& udevadm settle")
            mq = sh(STORAGE, f"ls /sys/block/$(basename $(readlink -f /dev/zvol/{POOL}/arc_hot))/mq 2>/dev/null "
                              "| wc -l", check=False)
            results.setdefault("mq_queues", {})[setting] = int(mq or 0)
            sh(STORAGE, f"dd if=/dev/zvol/{POOL}/arc_hot of=/dev/null bs=1M status=none")  # warm the ARC
            for case in CASES:
                for job in JOBS:
                    results[case][job][setting].append(fio(f"/dev/zvol/{POOL}/{case}", job))
    return results


def median(rows: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 2)


def rows(lab: dict, res: dict, when: str) -> list[str]:
    ratios, figures = {}, {}
    table = ["| case | fio job | zvol_use_blk_mq=0 | =1 | ratio 1 / 0 (MB/s) |", "|---|---|---|---|---|"]
    for case in CASES:
        for job in JOBS:
            a, b = res[case][job]["0"], res[case][job]["1"]
            ma, mb = median(a, "MBps"), median(b, "MBps")
            ratios[f"mq_over_classic_{case}_{job}"] = round(mb / ma, 3) if ma else None
            figures[f"{case}_{job}"] = {"classic": a, "blk_mq": b}
            table.append(f"| {case.replace('_', ' ')} | {job} | {ma} MB/s, p99 {median(a, 'p99_ms')} ms | "
                         f"{mb} MB/s, p99 {median(b, 'p99_ms')} ms | {ratios[f'mq_over_classic_{case}_{job}']} |")
    commit = report.commit()
    write_json("zvol_mq", {"date": report.now(),
                           "commit": commit,
                           "lab": f"storage1 of the trixie lab (TCG, 2 vCPU), OpenZFS {lab['version']}",
                           "figures": {**figures, "mq_queues_seen": res.get("mq_queues", {})}, "ratios": ratios})
    return ["## Issue 17: zvol reads with and without block multiqueue (storage node, TCG)", "",
            f"Measured in one run by `make bench-zvol-mq` on {when} at commit {commit}, on storage1 (OpenZFS "
            f"{lab['version']}): a mirror pool of the two free HDDs, volumes of 128 KiB blocks filled with random "
            "data, each setting applied by exporting and importing the pool (a zvol takes the mode when it "
            f"appears); fio direct libaio reads of {SECONDS} s, rounds interleaved 0,1,0,1, medians of two. "
            f"Block-layer queues seen under /sys/block/zdN/mq: {res.get('mq_queues', {})}. Figures also in "
            "`bench/results/zvol_mq.json`.", "", *table, "",
            "ARC-hot: a 256 MiB volume read once before, so the reads come from RAM and only the zvol layer "
            "differs; from disk: a 1 GiB volume with primarycache=metadata (the emulated disks are image files "
            "that the host's page cache holds, so these are not HDD speeds: they show the zvol and ZFS read path "
            "with the ARC out of the way). rand128k: random 128 KiB reads, 2 jobs "
            "at depth 16; seq1m: sequential 1 MiB reads, 1 job at depth 4. The roles leave zvol_use_blk_mq at "
            "its default (0) unless these ratios, on real hardware, say otherwise: see the storage_base README.",
            "", "Absolute numbers are bound by software emulation; compare ratios."]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cleanup-only", action="store_true", help="remove what an interrupted run left")
    args = parser.parse_args()
    return run_bench("bench-zvol-mq", "zvol_mq", checking="OpenZFS 2.3 on storage1, its two free HDDs blank",
                     preflight=preflight, leftovers=leftovers, cleanup_only=args.cleanup_only, measure=measure,
                     cleanup=cleanup, rows=rows)


if __name__ == "__main__":
    sys.exit(main())
