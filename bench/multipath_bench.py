#!/usr/bin/env python3
"""`make bench-multipath` (issue 13): a version read by gpu1 and gpu2 from one storage node against from two
(aggregate throughput), and the longest read stall on a GPU node while a storage node reboots, with one path
against two, measured in one run.

A version (random files, sealed on storage1) is replicated to storage2. Readers (bench/stall_reader.py:
every file again and again with O_DIRECT, so each read reaches the storage) run on gpu1 and gpu2 at once
for READ_S seconds, first with the version published from storage1 only, then from both nodes (one
multipath map, two paths on each GPU node). Then storage2 unpublishes it from gpu2 only (gpu2 keeps one
path), both readers run again while storage1 reboots, until storage1's paths are back on both GPU nodes;
each reports its reads, its read errors and its longest time between two completed reads. Needs the lab
up with storage2 and the site converged (`make lab-up STORAGE2=1`, then playbooks/site.yml). Everything it
makes is taken away at the end. Writes its section of docs/benchmarks.md, bench/results/multipath.json,
and the stall figures into bench/results/replication.json (`multipath_max_stall_s`,
`single_path_max_stall_s`, as issue 13 names them). Absolute figures are bound by software emulation (TCG)
and the lab's VMs share two host cores: the aggregate figures show the mechanism, not the scale.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402
from labbench import BenchError, fabricctl_facts, put, run_bench, say, ssh  # noqa: E402
from report import write_json  # noqa: E402

NAME = "benchmp"
READER = "/root/stall_reader.py"
WAIT_BACK_S = 600
READ_S = 40
GPUS = ("gpu1", "gpu2")


def sh(host: str, command: str, **kw) -> str:
    return ssh(host, command, **kw).stdout.strip()


def preflight() -> dict:
    facts = fabricctl_facts("storage1", "gpu1", "gpu2")
    sh("storage2", "command -v fabricctl")
    for gpu in ("gpu1", "gpu2"):
        if sh(gpu, "systemctl is-active multipathd.service", check=False) != "active":
            raise BenchError(f"multipathd does not run on {gpu}: converge playbooks/site.yml (iscsi_initiator)")
    return {**facts, "zfs": sh("storage1", "cat /sys/module/zfs/version")}


def cleanup(lab: dict) -> list[str]:
    """Unpublish, destroy on both nodes; returns what is still there."""
    vol = f"{lab['dataset_root']}/{NAME}"
    for node in ("storage2", "storage1"):
        if ssh(node, f"zfs list {vol}", check=False).returncode == 0:
            ssh(node, f"fabricctl unpublish {NAME}@v1 --force", check=False)
    ssh("storage2", f"zfs destroy -r {vol}", check=False)
    ssh("storage1", f"zfs list {vol} >/dev/null 2>&1 && fabricctl dataset destroy {NAME} --yes", check=False)
    return [f"{node}:{vol}" for node in ("storage1", "storage2")
            if ssh(node, f"zfs list {vol}", check=False).returncode == 0]


def leftovers(lab: dict) -> list[str]:
    return cleanup(lab)


def boot_id(host: str) -> str:
    """"" while the host does not answer (rebooting)."""
    try:
        return sh(host, "cat /proc/sys/kernel/random/boot_id", check=False, timeout=30)
    except BenchError:
        return ""


def paths_up(gpu: str, wwid: str) -> int:
    out = sh(gpu, "multipathd show paths raw format '%w %t %T'", check=False)
    return sum(1 for line in out.splitlines() if line.split() == [wwid, "active", "ready"])


def start_readers(seconds: float) -> None:
    for gpu in GPUS:
        # a transient service: a process left behind by an SSH command keeps that command's channel open
        sh(gpu, "systemctl stop fabric-stall-reader 2>/dev/null; systemctl reset-failed fabric-stall-reader "
                "2>/dev/null; rm -f /run/stall.stop /run/stall.json && systemd-run --quiet --collect "
                f"--unit=fabric-stall-reader python3 {READER} /datasets/{NAME}/v1 --seconds {seconds} "
                "--stop-file /run/stall.stop --json-out /run/stall.json")


def collect() -> dict:
    out = {}
    for gpu in GPUS:
        sh(gpu, "touch /run/stall.stop; for i in $(seq 60); do test -s /run/stall.json && break; sleep 1; done")
        out[gpu] = json.loads(sh(gpu, "cat /run/stall.json"))
    return out


def check_paths(wwid: str, want: dict) -> None:
    got = {gpu: paths_up(gpu, wwid) for gpu in want}
    if got != want:
        raise BenchError(f"paths up: {got}, expected {want}")


def aggregate(label: str) -> dict:
    say(f"gpu1 and gpu2 read at once for {READ_S} s ({label})")
    start_readers(READ_S)
    time.sleep(READ_S + 5)
    got = collect()
    mb_s = {gpu: round(r["bytes"] / r["seconds"] / 1e6, 1) for gpu, r in got.items()}
    return {"per_gpu_mb_s": mb_s, "aggregate_mb_s": round(sum(mb_s.values()), 1),
            "errors": sum(r["errors"] for r in got.values())}


def measure(lab: dict) -> dict:
    say(f"{NAME}: 128 MiB of random files, sealed, replicated to storage2")
    sh("storage1", f"fabricctl dataset create {NAME} --size 256M && rm -rf /srv/{NAME} && mkdir -p /srv/{NAME} && "
                   f"for i in $(seq 1 64); do head -c 2M /dev/urandom > /srv/{NAME}/f$i; done && "
                   f"fabricctl dataset ingest {NAME} /srv/{NAME}/ && fabricctl dataset seal {NAME} v1 && "
                   f"fabricctl replicate {NAME}@v1 --to storage2")
    reader = (Path(__file__).resolve().parent / "stall_reader.py").read_text()
    for gpu in GPUS:
        put(gpu, READER, reader)
    first = json.loads(sh("storage1", f"fabricctl publish {NAME}@v1 --to gpu1,gpu2 --json"))
    wwid = first["hosts"]["gpu1"]["result"]["multipath"]
    if not wwid:
        raise BenchError("gpu1 does not read the version through a multipath map")
    check_paths(wwid, {"gpu1": 1, "gpu2": 1})
    one = aggregate("served by storage1")
    sh("storage2", f"fabricctl publish {NAME}@v1 --to gpu1,gpu2")
    check_paths(wwid, {"gpu1": 2, "gpu2": 2})
    two = aggregate("served by storage1 and storage2")
    say("storage2 unpublishes it from gpu2: gpu2 keeps one path (storage1), gpu1 two")
    sh("storage2", f"fabricctl unpublish {NAME}@v1 --from gpu2")
    want = {"gpu1": 2, "gpu2": 1}
    check_paths(wwid, want)
    start_readers(3600)
    before = boot_id("storage1")
    say("rebooting storage1 under both readers")
    started = time.monotonic()
    ssh("storage1", "systemd-run --on-active=1 --timer-property=AccuracySec=100ms systemctl reboot")
    while boot_id("storage1") in ("", before):
        if time.monotonic() - started > WAIT_BACK_S:
            raise BenchError(f"storage1 did not come back within {WAIT_BACK_S} s")
        time.sleep(3)
    up_s = time.monotonic() - started
    while {gpu: paths_up(gpu, wwid) for gpu in want} != want and time.monotonic() - started < WAIT_BACK_S:
        time.sleep(2)
    back_s = time.monotonic() - started
    time.sleep(10)
    res: dict = {"storage1_reboot_s": round(up_s, 1), "paths_back_s": round(back_s, 1), "wwid": wwid,
                 "aggregate_one_node": one, "aggregate_two_nodes": two, **collect()}
    say(f"gpu1 (two paths): {res['gpu1']['max_stall_s']} s, {res['gpu1']['errors']} errors; "
        f"gpu2 (one path): {res['gpu2']['max_stall_s']} s, {res['gpu2']['errors']} errors")
    return res


def rows(lab: dict, res: dict, when: str) -> list[str]:
    multi, single = res["gpu1"], res["gpu2"]
    one, two = res["aggregate_one_node"], res["aggregate_two_nodes"]
    ratios = {"multipath_over_single_path_stall": round(multi["max_stall_s"] / single["max_stall_s"], 3)
              if single["max_stall_s"] else None,
              "aggregate_two_nodes_over_one": round(two["aggregate_mb_s"] / one["aggregate_mb_s"], 3)}
    stall = {"multipath_max_stall_s": multi["max_stall_s"], "single_path_max_stall_s": single["max_stall_s"],
             "multipath_read_errors": multi["errors"], "single_path_read_errors": single["errors"]}
    commit = report.commit()
    date = report.now()
    write_json("multipath", {"date": date, "commit": commit, "lab": f"trixie lab (TCG), OpenZFS {lab['zfs']}, "
                             "storage1 and storage2, gpu1 and gpu2", "figures": {**stall, **res}, "ratios": ratios})
    merge_into_replication(stall, date, commit)
    return ["## Issue 13: reads from one storage node against two (aggregate throughput, stalls in a reboot)", "",
            f"Measured in one run by `make bench-multipath` on {when} at commit {commit}. Readers "
            "(bench/stall_reader.py, every file again and again with O_DIRECT) on gpu1 and gpu2 at once for "
            f"{READ_S} s each:", "",
            "| version served by | gpu1 | gpu2 | aggregate | read errors |", "|---|---|---|---|---|",
            f"| storage1 | {one['per_gpu_mb_s']['gpu1']} MB/s | {one['per_gpu_mb_s']['gpu2']} MB/s | "
            f"{one['aggregate_mb_s']} MB/s | {one['errors']} |",
            f"| storage1 and storage2 (multipath) | {two['per_gpu_mb_s']['gpu1']} MB/s | "
            f"{two['per_gpu_mb_s']['gpu2']} MB/s | {two['aggregate_mb_s']} MB/s | {two['errors']} |", "",
            f"Two nodes over one: {ratios['aggregate_two_nodes_over_one']}"
            + (" (two nodes were slower here)" if ratios["aggregate_two_nodes_over_one"] < 1 else "")
            + ". The lab's four VMs share two host cores (software emulation), so a second storage VM serving "
            "competes for the same CPU as the first and the readers: this run says nothing about scale on racks, "
            "where each storage node brings its own CPUs, disks and network.",
            "", f"Then one reboot of storage1 "
            f"(back on SSH after {res['storage1_reboot_s']} s, its paths back on both GPU nodes after "
            f"{res['paths_back_s']} s) while gpu1 read a version published from storage1 and storage2 (one "
            "multipath map, two paths) and gpu2 read it from storage1 only (one path). Each reader "
            "(bench/stall_reader.py) reads every file again and again with O_DIRECT; a stall is the longest time "
            "between two completed reads. Figures also in `bench/results/multipath.json`.", "",
            "| GPU node | paths | reads | read errors | longest stall |", "|---|---|---|---|---|",
            f"| gpu1 | 2 (storage1, storage2) | {multi['reads']} | {multi['errors']} | {multi['max_stall_s']} s |",
            f"| gpu2 | 1 (storage1) | {single['reads']} | {single['errors']} | {single['max_stall_s']} s |", "",
            "The stall figures are also in `bench/results/replication.json` (multipath_max_stall_s, "
            "single_path_max_stall_s).", "",
            f"multipath / single path: {ratios['multipath_over_single_path_stall']} (target: no stall over 10 s "
            "and no read error with two paths). With one path, reads queue until the node is back (at most "
            "`iscsi_initiator_multipath_no_path_retry` x 5 s, then they fail).", ""]


def merge_into_replication(stall: dict, date: str, commit: str) -> None:
    """The stall figures into bench/results/replication.json (issue 13 names them there), with their own run."""
    path = Path(__file__).resolve().parent / "results" / "replication.json"
    doc = json.loads(path.read_text()) if path.exists() else None
    if doc is None:
        return
    doc["figures"].update(stall)
    doc["figures"]["stall_note"] = f"measured by make bench-multipath on {date} at commit {commit}"
    path.write_text(json.dumps(doc, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cleanup-only", action="store_true", help="remove what an interrupted run left")
    args = parser.parse_args()
    return run_bench("bench-multipath", "multipath",
                     checking="storage1, storage2, gpu1 and gpu2 up, the site converged", preflight=preflight,
                     leftovers=leftovers, cleanup_only=args.cleanup_only, measure=measure,
                     cleanup=cleanup, rows=rows)


if __name__ == "__main__":
    sys.exit(main())
