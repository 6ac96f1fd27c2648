#!/usr/bin/env python3
"""panic_repro: reproduce storage1's guest-kernel panics (issue 27) under chosen emulation profiles.

Each run boots a storage node of its own (storage1's disks and memory, blank disks, in a namespace of
its own beside any running lab: state in .lab-repro/), then runs the workload that panicked it on
2026-11-25: a raidz2 pool as the lab's, a checkpoint-like volume with a writer writing and syncing
all the time, 1,000 snapshots of it, then 900 of them destroyed one `zfs destroy` at a time (as sanoid
prunes). The serial console is watched throughout; a run ends early when the guest panics. Boot panics
(the "Oops: int3" seen under TCG) are counted from `lab up`'s own restarts.

  lab/panic_repro.py --profiles multi:2,single:2,multi:1 --runs 2

A profile is TCG_THREAD:STORAGE_CPUS (FABRIC_LAB_TCG_THREAD, FABRIC_LAB_STORAGE_CPUS). The CPU model is
FABRIC_LAB_TCG_CPU's (default max), recorded with each run: `FABRIC_LAB_TCG_CPU=max,-cx16 lab/panic_repro.py ...`
runs the same workload on a CPU without CMPXCHG16B. Every run is appended to bench/results/panic.json and the
table in docs/lab.md ("Panic runs") is written from it.
The repro's VM is always stopped and its namespace removed at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fabric_lab import host, image, topology  # noqa: E402
from fabric_lab.errors import LabError  # noqa: E402
from fabric_lab.lab import Lab, console_panicked, log  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STATE = REPO / ".lab-repro"
RESULTS = REPO / "bench" / "results" / "panic.json"
DOC = REPO / "docs" / "lab.md"
BEGIN, END = "<!-- BEGIN panic-runs -->", "<!-- END panic-runs -->"
PANIC_WORDS = ("Kernel panic", "double fault", "BUG:", "Oops:", "general protection fault")

WORKLOAD = r"""
set -eu
D=/dev/disk/by-id
modprobe zfs
zpool create -f -o ashift=12 -O compression=lz4 rp raidz2 {hdds} special mirror {nvme0} {nvme1} {nvme2} \
    log mirror {ssd0} {ssd1} cache {nvme3}
zfs create -V 3G -o volblocksize=16K rp/ck
udevadm settle; for i in $(seq 50); do [ -e /dev/zvol/rp/ck ] && break; sleep 0.2; done
mkfs.ext4 -q /dev/zvol/rp/ck
mkdir -p /mnt/ck && mount /dev/zvol/rp/ck /mnt/ck
# the writer: 4 MiB written and synced every second, so ZFS's write taskq (z_wr_int) is busy throughout while each
# transaction group still completes (32 MiB synced back to back made every txg, so every snapshot and every
# destroy, wait half a minute under emulation: 5 snapshots in 3 minutes)
( while true; do dd if=/dev/urandom of=/mnt/ck/f.$((RANDOM % 8)) bs=1M count=4 conv=fsync status=none; sleep 1; done ) \
    >/dev/null 2>&1 &
W=$!
t0=$(date +%s)
# one `zfs snapshot` per checkpoint, as fabricctl takes them: ZFS takes one snapshot of a dataset per transaction
# group (one command cannot take two of one volume; a channel program taking a second in its txg gets EAGAIN)
for i in $(seq 1 {snapshots}); do zfs snapshot rp/ck@s$i; done
t1=$(date +%s)
echo "@@snapshots $(zfs list -H -t snapshot -o name -r rp/ck | wc -l) in $((t1 - t0)) s"
for i in $(seq 1 {destroy}); do zfs destroy rp/ck@s$i; done
t2=$(date +%s)
echo "@@destroyed {destroy} in $((t2 - t1)) s"
kill $W; wait $W 2>/dev/null || true
umount /mnt/ck; zpool destroy rp
echo "@@done"
"""


def parse_profile(text: str) -> dict:
    thread, _colon, cpus = text.partition(":")
    if thread not in topology.TCG_THREADS or cpus not in ("1", "2"):
        raise argparse.ArgumentTypeError(f"profile {text!r}: TCG_THREAD:CPUS, TCG_THREAD one of "
                                         f"{', '.join(topology.TCG_THREADS)}, CPUS 1 or 2 (e.g. multi:2)")
    return {"tcg_thread": thread, "storage_cpus": int(cpus)}


def workload(vm: topology.VM, snapshots: int, destroy: int) -> str:
    by_id = {d.serial: f"$D/{d.by_id}" for d in vm.disks}
    hdds = " ".join(by_id[f"HDD1{i:03d}"] for i in range(6))
    return WORKLOAD.format(hdds=hdds, snapshots=snapshots, destroy=destroy,
                           **{f"nvme{i}": by_id[f"NVME1{i:03d}"] for i in range(4)},
                           **{f"ssd{i}": by_id[f"SSD1{i:03d}"] for i in range(2)})


def panic_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if any(w in line for w in PANIC_WORDS)]


def one_run(profile: dict, n: int, args) -> dict:
    os.environ["FABRIC_LAB_STORAGE_CPUS"] = str(profile["storage_cpus"])
    os.environ["FABRIC_LAB_TCG_THREAD"] = profile["tcg_thread"]
    lab = Lab(state_dir=STATE, inventory_dir=STATE / "inventory")
    lab.facts_dir = STATE / "facts"  # never the main lab's fact cache
    vm = topology.plan(storage_cpus=profile["storage_cpus"])[0]
    release = image.release_name(image.DEFAULT_DEBIAN)
    record = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), **profile,
              "tcg_cpu": lab.profile()["tcg_cpu"], "run": n,
              "release": release, "host_load": os.getloadavg()[0], "boot_panics": 0, "panicked": False,
              "workload": "incomplete"}
    t0 = time.monotonic()
    STATE.mkdir(parents=True, exist_ok=True)
    try:
        img = image.ensure_image(log, release)
        lab.ensure_key()
        host.ensure_netns(lab.netns, lab.state_dir, log)
        lab.stop(vm)
        for old in lab.vmdir(vm).glob("*"):
            old.unlink()
        lab.start(vm, img, "tcg")
        lab.wait_for_ssh((vm,), restart=lambda v: lab.start(v, img, "tcg"))
        record["boot_panics"] = len(list(lab.vmdir(vm).glob("console.panic-*.log")))
        record["boot_s"] = round(time.monotonic() - t0, 1)
        lab.write_access_files((vm,))
        result: dict = {}

        def work():
            try:
                result["proc"] = lab.ssh(vm.name, "bash", "-c", shlex.quote(workload(vm, args.snapshots, args.destroy)),
                                         check=False, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                result["timeout"] = True

        worker = threading.Thread(target=work, daemon=True)
        t1 = time.monotonic()
        worker.start()
        console = lab.vmdir(vm) / "console.log"
        while worker.is_alive():
            worker.join(10)
            if console_panicked(console):
                break
        record["workload_s"] = round(time.monotonic() - t1, 1)
        text = console.read_text(errors="replace") if console.exists() else ""
        record["panicked"] = console_panicked(console)
        record["console_lines"] = panic_lines(text)[:12]
        proc = result.get("proc")
        if record["panicked"]:
            record["workload"] = "guest panicked"
        elif result.get("timeout"):
            record["workload"] = f"timed out after {args.timeout} s"
        elif proc is not None and proc.returncode == 0 and "@@done" in proc.stdout:
            record["workload"] = "completed"
            for line in proc.stdout.splitlines():
                if m := re.match(r"@@destroyed (\d+) in (\d+) s", line):
                    record["destroyed"], record["destroy_s"] = int(m[1]), int(m[2])
                if m := re.match(r"@@snapshots (\d+) in (\d+) s", line):
                    record["snapshots"], record["snapshot_s"] = int(m[1]), int(m[2])
        elif proc is not None:
            record["workload"] = f"failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
        if record["panicked"] or record["console_lines"]:
            keep = STATE / "consoles"
            keep.mkdir(parents=True, exist_ok=True)
            name = f"{record['date'].replace(':', '')}-{profile['tcg_thread']}-{profile['storage_cpus']}.log"
            (keep / name).write_text(text)
            record["console"] = str((keep / name).relative_to(REPO))
    finally:
        lab.stop(vm)
    return record


def teardown(lab: Lab) -> None:
    for vm in topology.plan():
        lab.stop(vm)
    if host.netns_exists(lab.netns):
        host.delete_netns(lab.netns, log)


def load() -> list[dict]:
    try:
        return json.loads(RESULTS.read_text())["runs"]
    except FileNotFoundError:
        return []


def render(runs: list[dict]) -> str:
    """The table of docs/lab.md: one row per profile (runs, panics at boot and in the workload, minutes)."""
    rows: dict[tuple, dict] = {}
    for r in runs:
        key = (r["tcg_thread"], r["storage_cpus"], r.get("tcg_cpu", "max"), r.get("release", ""))
        row = rows.setdefault(key, {"runs": 0, "completed": 0, "panics": 0, "boot_panics": 0, "minutes": 0.0,
                                    "destroy": []})
        row["runs"] += 1
        row["completed"] += r["workload"] == "completed"
        row["panics"] += bool(r["panicked"])
        row["boot_panics"] += r.get("boot_panics", 0)
        row["minutes"] += (r.get("boot_s", 0) + r.get("workload_s", 0)) / 60
        if "destroy_s" in r:
            row["destroy"].append(f"{r.get('destroyed', 900)} in {r['destroy_s']}")
    out = ["| profile (TCG thread, storage vCPUs, CPU model, guest) | runs | workload completed | "
           "panics in the workload | boot panics | snapshots destroyed one at a time, in s | lab minutes |",
           "|---|---|---|---|---|---|---|"]
    for (thread, cpus, cpu, release), row in sorted(rows.items()):
        destroys = ", ".join(row["destroy"]) or "-"
        out.append(f"| thread={thread}, {cpus} vCPU, {cpu}, {release} | {row['runs']} | {row['completed']} | "
                   f"{row['panics']} | {row['boot_panics']} | {destroys} | {row['minutes']:.0f} |")
    return "\n".join(out)


def write(runs: list[dict]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    doc = DOC.read_text()
    if BEGIN in doc:
        head, _b, rest = doc.partition(BEGIN)
        _old, _e, tail = rest.partition(END)
        DOC.write_text(f"{head}{BEGIN}\n{render(runs)}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="panic_repro", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--profiles", type=lambda s: [parse_profile(p) for p in s.split(",")],
                        default=[parse_profile("multi:2")], help="TCG_THREAD:CPUS,... (default multi:2)")
    parser.add_argument("--runs", type=int, default=1, help="runs per profile, interleaved (default 1)")
    parser.add_argument("--snapshots", type=int, default=1000, help="snapshots made, one `zfs snapshot` each")
    parser.add_argument("--destroy", type=int, default=900, help="snapshots destroyed one at a time")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds the workload may take")
    parser.add_argument("--render", action="store_true", help="only rewrite docs/lab.md's table from panic.json")
    args = parser.parse_args(argv)
    if args.render:
        write(load())
        return 0
    if os.geteuid() != 0:
        print("panic_repro: run as root (it boots a VM in a network namespace of its own)", file=sys.stderr)
        return 2
    runs = load()
    lab = Lab(state_dir=STATE, inventory_dir=STATE / "inventory")
    try:  # a LabError (no boot, no SSH) stops the whole series: it is no run of the workload
        for n in range(1, args.runs + 1):
            for profile in args.profiles:
                log(f"panic run {n}: thread={profile['tcg_thread']}, {profile['storage_cpus']} vCPU, "
                    f"cpu={os.environ.get('FABRIC_LAB_TCG_CPU') or topology.TCG_CPU}")
                record = one_run(profile, n, args)
                log(f"  -> {record['workload']}; panicked={record['panicked']}, boot panics {record['boot_panics']}"
                    + (f"; {record['console_lines'][:2]}" if record.get("console_lines") else ""))
                runs.append(record)
                write(runs)
    except LabError as exc:
        print(f"panic_repro: {exc}", file=sys.stderr)
        return 1
    finally:
        teardown(lab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
