#!/usr/bin/env python3
"""`make bench-read` (issue 14, the read path): a training job's reads of a published version over iSCSI
against the same bytes read from a local copy on the GPU node's NVMe and over the kernel NFS server, in one run.

The tree: 1 GiB of files of 16 KiB to 1 MiB (log-uniform sizes, random bytes: bench/make_tree.py), written
into a dataset's staging volume on storage1 and sealed; the same tree (same seed) in an xfs dataset; and a
shard-style tree of 64-256 MiB files. Each is published read-only to gpu1 (`fabricctl publish`). The readers
(bench/read_loader.py on gpu1: N worker processes read every file once per epoch in a seeded shuffled order,
as PyTorch's DataLoader with a random sampler does; gpu1's page cache dropped before every epoch) read:

- iscsi-ext4, iscsi-xfs: the published versions (/datasets/NAME/v1);
- nfs: the same ext4 snapshot, mounted read-only on storage1 (a read-only loop device over the snapshot's
  device, with direct I/O so the bytes are cached once, in the ARC) and exported read-only to gpu1 alone by the
  kernel NFS server, mounted on gpu1 with NFSv4.2 and nconnect=4;
- local: a copy on gpu1's scratch NVMe (ext4), the baseline.

Epoch 1 starts cold: storage1's ARC shrunk to its minimum (zfs_arc_max lowered to c_min, caches dropped, then
restored) and its L2ARC emptied (the pool's one cache device removed and added again), gpu1's page cache
dropped. Epochs 2 and 3 follow at 8 workers, then one epoch at 1 and at 4 workers (caches warm). For each
read, storage1's arcstats before and after give the ARC and L2ARC hit ratios. Then `fabricctl warm` after a
cold start and epoch 1 again (iscsi-ext4), and fio random reads (4 KiB and 128 KiB, queue depth 32) on gpu1's
iSCSI device against the same on storage1's snapshot device.

Needs the lab up and converged (storage1, gpu1). Everything it makes is taken away at the end, and the ARC and
cache device are left as it found them. Writes its section of docs/benchmarks.md and bench/results/read.json.
Absolute figures are bound by software emulation (TCG) on two shared host cores: compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402
from fabric_core.services.metrics import parse_arcstats  # noqa: E402 - the core, as make venv installs it
from labbench import (  # noqa: E402
    BenchError,
    fabricctl_facts,
    put,
    run_bench,
    say,
    ssh,
    vm_cores,
    vm_cpu_ticks,
)
from report import write_json, write_section  # noqa: E402

STORAGE, GPU = "storage1", "gpu1"
SMALL, XFS, SHARDS = "rb-small", "rb-xfs", "rb-shards"
TREES = {SMALL: ("ext4", "--total 1G --min 16K --max 1M"), XFS: ("xfs", "--total 1G --min 16K --max 1M"),
         SHARDS: ("ext4", "--total 1G --min 64M --max 256M")}
VOLSIZE = "1600M"
LOCAL = "/var/tmp/readbench-local"
NFS_EXPORT, NFS_MOUNT = "/srv/readbench-nfs", "/var/tmp/readbench-nfs"
LOADER, TREE = "/root/read_loader.py", "/root/make_tree.py"
LABEL = "readbench"
ARC = "/proc/spl/kstat/zfs/arcstats"
PARAMS = "/sys/module/zfs/parameters"
FIO_S = 15


def sh(host: str, command: str, **kw) -> str:
    return ssh(host, command, **kw).stdout.strip()


def preflight() -> dict:
    facts = preflight_nfs()
    # the cache vdev's name as zpool shows it: a whole disk by its /dev/disk/by-id name (-P would show its
    # partition, -part1, and adding that back would leave the pool with a partition where it had the disk)
    cache = sh(STORAGE, f"zpool list -H -v {facts['pool']} | awk '/^cache/{{c=1; next}} c && $1 !~ /^(logs|special|"
                        "spares|dedup)$/ {print $1}'").split()
    if len(cache) != 1:
        raise BenchError(f"the pool {facts['pool']} has {len(cache)} cache devices; this benchmark empties the "
                         "L2ARC by removing and adding back exactly one")
    if ssh(STORAGE, "fabricctl warm --help", check=False).returncode != 0:
        raise BenchError(f"fabricctl on {STORAGE} has no `warm` command: install this checkout's fabricctl "
                         "(.venv/bin/ansible-playbook playbooks/fabricctl.yml)")
    for host in (STORAGE, GPU):
        sh(host, "command -v fio")
    disk = f"/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_SCRATCH{GPU[-1]}"
    if ssh(GPU, f"test -b {disk}", check=False).returncode != 0:
        raise BenchError(f"{GPU} has no scratch disk {disk}")
    return {**facts, "cache_device": cache[0], "scratch": disk, "zfs": sh(STORAGE, "cat /sys/module/zfs/version"),
            "arc_max": int(sh(STORAGE, f"cat {PARAMS}/zfs_arc_max"))}


def preflight_nfs() -> dict:
    """What the NFS baseline alone needs: fabricctl's facts and the kernel NFS server on storage1."""
    facts = fabricctl_facts(STORAGE, GPU)
    sh(STORAGE, "command -v exportfs && test -e /lib/systemd/system/nfs-server.service")
    return facts


def cleanup(lab: dict) -> list[str]:
    left = []
    ssh(GPU, f"umount {LOCAL} 2>/dev/null; rmdir {LOCAL} 2>/dev/null; true", check=False)
    nfs_withdraw(lab, nfs_device(lab))
    for name in TREES:
        vol = f"{lab['dataset_root']}/{name}"
        if ssh(STORAGE, f"zfs list {vol}", check=False).returncode == 0:
            ssh(STORAGE, f"fabricctl unpublish {name}@v1 --force", check=False, timeout=900)
            done = ssh(STORAGE, f"fabricctl dataset destroy {name} --yes", check=False, timeout=900)
            if done.returncode != 0:
                left.append(f"{vol}: {done.stderr.strip()[-200:]}")
    restore_caches(lab)
    if ssh(GPU, f"findmnt -n {LOCAL}", check=False).returncode == 0:
        left.append(f"{GPU}:{LOCAL} still mounted")
    return left + nfs_left(lab, nfs_device(lab))


# ---- the NFS baseline: one snapshot exported read-only to gpu1 alone, and taken away again ------------------

def nfs_export(lab: dict, dev: str) -> dict:
    """``dev`` (a snapshot's device: read-only already) mounted read-only on storage1 through a read-only loop
    device with direct I/O (so the bytes are cached once, in the ARC), exported read-only with root squashed
    to gpu1's address alone, and mounted read-only on gpu1 with NFSv4.2 and nconnect=4."""
    gpu_ip, storage_ip = lab["hosts"][GPU], lab["portal_ip"]
    sh(STORAGE, f"mkdir -p {NFS_EXPORT} && loop=$(losetup -r --direct-io=on -f --show {dev}) && "
                f"mount -o ro,noload $loop {NFS_EXPORT} && systemctl start nfs-server && "
                f"exportfs -o ro,root_squash,no_subtree_check,fsid=7314 '{gpu_ip}:{NFS_EXPORT}'")
    sh(GPU, f"mkdir -p {NFS_MOUNT} && mount -t nfs4 -o ro,vers=4.2,nconnect=4 {storage_ip}:{NFS_EXPORT} {NFS_MOUNT}")
    return {"nfs_export": sh(STORAGE, "exportfs -v"), "nfs_mount": sh(GPU, f"findmnt -n {NFS_MOUNT}")}


def nfs_withdraw(lab: dict, dev: str) -> None:
    """Everything nfs_export made taken away (idempotent): gpu1's mount, the export, the NFS server (the lab
    image keeps it off), storage1's mount and its loop devices over ``dev``."""
    ssh(GPU, f"umount {NFS_MOUNT} 2>/dev/null; rmdir {NFS_MOUNT} 2>/dev/null; true", check=False)
    ssh(STORAGE, f"exportfs -u '{lab['hosts'][GPU]}:{NFS_EXPORT}' 2>/dev/null; systemctl stop nfs-server; "
                 f"umount {NFS_EXPORT} 2>/dev/null; rmdir {NFS_EXPORT} 2>/dev/null; "
                 f"for l in $(losetup -j {dev} -O NAME -n); do losetup -d $l; done; true", check=False)


def nfs_left(lab: dict, dev: str) -> list[str]:
    """What of the NFS baseline is still there, each read where the kernel keeps it."""
    left = []
    if ssh(GPU, f"findmnt -n {NFS_MOUNT}", check=False).returncode == 0:
        left.append(f"{GPU}:{NFS_MOUNT} still mounted")
    if ssh(STORAGE, f"grep -qs '^{NFS_EXPORT}' /proc/fs/nfsd/exports", check=False).returncode == 0:
        left.append(f"{STORAGE}: {NFS_EXPORT} still in the kernel's export table")
    if ssh(STORAGE, "systemctl is-active --quiet nfs-server", check=False).returncode == 0:
        left.append(f"{STORAGE}: the NFS server still runs")
    if sh(STORAGE, f"losetup -j {dev} -O NAME -n"):
        left.append(f"{STORAGE}: a loop device over {dev} is left")
    if ssh(STORAGE, f"findmnt -n {NFS_EXPORT}", check=False).returncode == 0:
        left.append(f"{STORAGE}:{NFS_EXPORT} still mounted")
    return left


def restore_caches(lab: dict) -> None:
    """zfs_arc_max and the cache device as preflight found them (idempotent)."""
    ssh(STORAGE, f"echo {lab['arc_max']} > {PARAMS}/zfs_arc_max; echo 1 > {PARAMS}/l2arc_rebuild_enabled", check=False)
    dev = lab["cache_device"]
    if ssh(STORAGE, f"zpool list -H -v {lab['pool']} | grep -q '{dev}'", check=False).returncode != 0:
        ssh(STORAGE, f"zpool add {lab['pool']} cache /dev/disk/by-id/{dev}", check=False)


def cold(lab: dict) -> None:
    """storage1's ARC down to its minimum and its L2ARC empty; gpu1's page cache is dropped by the reader."""
    c_min = sh(STORAGE, f"awk '$1 == \"c_min\" {{print $3}}' {ARC}")
    pool, dev = lab["pool"], lab["cache_device"]
    sh(STORAGE, f"echo {c_min} > {PARAMS}/zfs_arc_max && sync && echo 3 > /proc/sys/vm/drop_caches && sleep 2; "
                f"echo {lab['arc_max']} > {PARAMS}/zfs_arc_max; zpool remove {pool} {dev} && "
                f"zpool add {pool} cache /dev/disk/by-id/{dev}")


def arcstats() -> dict:
    keys = ("hits", "misses", "l2_hits", "l2_misses", "size", "l2_size")
    rows = parse_arcstats(sh(STORAGE, f"cat {ARC}"))  # the core's reader of the kstat
    return {k: rows[k] for k in keys}


def ratios_of(before: dict, after: dict) -> dict:
    d = {k: after[k] - before[k] for k in ("hits", "misses", "l2_hits", "l2_misses")}
    lookups = d["hits"] + d["misses"]
    return {"arc_hit_ratio": round(d["hits"] / lookups, 3) if lookups else None,
            "l2arc_hit_ratio": round(d["l2_hits"] / (d["l2_hits"] + d["l2_misses"]), 3)
            if d["l2_hits"] + d["l2_misses"] else None,
            "cache_hit_ratio": round((d["hits"] + d["l2_hits"]) / lookups, 3) if lookups else None, **d}


def host_cpu() -> tuple[int, int]:
    """This host's CPU time (busy, total) in ticks from /proc/stat: the lab's VMs all run on it."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def read(path: str, workers: int, seed: int, label: str) -> dict:
    before = arcstats()
    cpu, vms, started = host_cpu(), vm_cpu_ticks(), time.monotonic()
    doc = json.loads(sh(GPU, f"python3 {LOADER} {path} --workers {workers} --epochs 1 --seed {seed} "
                             "--drop-caches-between-epochs", timeout=3600))
    vms_after, wall = vm_cpu_ticks(), time.monotonic() - started
    epoch = doc["epochs"][0]
    out = {k: epoch[k] for k in ("seconds", "mb_s", "files_s", "latency_ms", "files", "bytes")}
    busy, total = (b - a for a, b in zip(cpu, host_cpu(), strict=True))
    out["host_cpu_busy"] = round(busy / total, 3) if total else None  # how much of the lab's host the read took
    # each VM's QEMU, in host cores, over the ssh call (the reader's start and its JSON included: a second or so)
    out["vm_cores"] = vm_cores(vms, vms_after, wall)
    out.update(ratios_of(before, arcstats()))
    say(f"  {label}: {workers} workers: {out['mb_s']} MB/s, {out['files_s']} files/s, p50 "
        f"{out['latency_ms']['p50']} ms, p99 {out['latency_ms']['p99']} ms; ARC+L2ARC hits {out['cache_hit_ratio']}; "
        f"host CPU busy {out['host_cpu_busy']}")
    return out


def epochs(lab: dict, path: str, label: str, *, more_workers: bool) -> dict:
    cold(lab)
    res = {f"8w_epoch{e}": read(path, 8, e, f"{label} epoch {e}") for e in (1, 2, 3)}
    if more_workers:
        for w in (1, 4):
            res[f"{w}w_warm"] = read(path, w, 10 + w, f"{label} (warm)")
    return res


def make_version(name: str, fs: str, spec: str, *, volblocksize: str = "") -> dict:
    """Dataset NAME with the tree of make_tree.py SPEC (seed 1: the same files every time), sealed as v1 and
    published to gpu1; the tree's description."""
    say(f"{name}: {spec} ({fs}{', volblocksize ' + volblocksize if volblocksize else ''}), sealed, published to "
        f"{GPU}")
    sh(STORAGE, f"fabricctl dataset create {name} --size {VOLSIZE} --fs {fs}"
                f"{' --volblocksize ' + volblocksize if volblocksize else ''} >/dev/null", timeout=900)
    tree = json.loads(sh(STORAGE, f"python3 {TREE} /srv/fabricctl/staging/{name} {spec} --seed 1", timeout=1800))
    sh(STORAGE, f"fabricctl dataset seal {name} v1 >/dev/null && fabricctl publish {name}@v1 --to {GPU} >/dev/null",
       timeout=1800)
    return tree


def nfs_device(lab: dict) -> str:
    """The snapshot the NFS baseline exports: the small-file tree's, the one read over iSCSI too."""
    return f"/dev/zvol/{lab['dataset_root']}/{SMALL}@v1"


def install_tools() -> None:
    """The tree maker on storage1 and the data loader on gpu1 (this checkout's copies)."""
    put(STORAGE, TREE, (Path(__file__).resolve().parent / "make_tree.py").read_text())
    put(GPU, LOADER, (Path(__file__).resolve().parent / "read_loader.py").read_text())


def setup(lab: dict) -> dict:
    install_tools()
    trees = {name: make_version(name, fs, spec) for name, (fs, spec) in TREES.items()}
    local_copies(lab, {"small": SMALL, "shards": SHARDS})
    say(f"nfs: {SMALL}@v1 mounted read-only on {STORAGE} and exported read-only to {GPU} alone")
    return {"trees": trees, **nfs_export(lab, nfs_device(lab))}


def local_copies(lab: dict, copies: dict[str, str]) -> None:
    """gpu1's scratch NVMe (ext4, made when blank, refused when it carries anything else) mounted at LOCAL, with
    LOCAL/DIR a copy of the published version NAME@v1 for each DIR: NAME of ``copies``."""
    say(f"{GPU}: the local copies on its scratch NVMe ({lab['scratch']})")
    blank = ssh(GPU, f"blkid -p -o export {lab['scratch']}", check=False)
    if blank.returncode == 2:
        sh(GPU, f"mkfs.ext4 -q -F -L {LABEL} {lab['scratch']}", timeout=600)
    elif f"LABEL={LABEL}" not in blank.stdout.split():
        raise BenchError(f"{GPU}: {lab['scratch']} carries something else ({' '.join(blank.stdout.split())}); "
                         "left alone")
    copy = " && ".join(f"rm -rf {LOCAL}/{d} && cp -a /datasets/{name}/v1/. {LOCAL}/{d}/" for d, name in copies.items())
    sh(GPU, f"mkdir -p {LOCAL} && mount -o noatime {lab['scratch']} {LOCAL} && {copy} && sync", timeout=1800)


def fio(host: str, device: str, bs: str) -> dict:
    out = json.loads(sh(host, f"fio --name=r --filename={device} --readonly --direct=1 --rw=randread --bs={bs} "
                              f"--iodepth=32 --ioengine=libaio --runtime={FIO_S} --time_based --output-format=json",
                        timeout=600))
    r = out["jobs"][0]["read"]
    return {"iops": round(r["iops"]), "mib_s": round(r["bw"] / 1024, 1),
            "p99_ms": round(r["clat_ns"]["percentile"]["99.000000"] / 1e6, 2)}


MEASURED: dict = {}  # what measure() has so far: printed (not written) when a later step fails


def measure(lab: dict) -> dict:
    res = MEASURED
    res["setup"] = setup(lab)
    say("reads (every figure: one epoch, gpu1's page cache dropped first)")
    res["iscsi-ext4"] = epochs(lab, f"/datasets/{SMALL}/v1", "iscsi-ext4", more_workers=True)
    res["nfs"] = epochs(lab, NFS_MOUNT, "nfs", more_workers=True)
    res["local"] = epochs(lab, f"{LOCAL}/small", "local", more_workers=True)
    res["iscsi-xfs"] = epochs(lab, f"/datasets/{XFS}/v1", "iscsi-xfs", more_workers=False)
    say("shards (64-256 MiB files)")
    res["shards"] = {}
    for label, path in (("iscsi-ext4", f"/datasets/{SHARDS}/v1"), ("local", f"{LOCAL}/shards")):
        cold(lab)
        res["shards"][label] = {f"8w_epoch{e}": read(path, 8, e, f"shards {label} epoch {e}") for e in (1, 2)}
    say(f"fabricctl warm {SMALL}@v1 after a cold start, then epoch 1 over iSCSI")
    cold(lab)
    before = arcstats()
    res["warm"] = {"fabricctl": json.loads(sh(STORAGE, f"fabricctl warm {SMALL}@v1 --json", timeout=3600)),
                   "arc_after_warm": arcstats(), "arc_before_warm": before}
    res["warm"]["8w_epoch1"] = read(f"/datasets/{SMALL}/v1", 8, 1, "iscsi-ext4 epoch 1 after warm")
    say("fio random reads, queue depth 32: gpu1's iSCSI device against storage1's snapshot device")
    device = sh(GPU, f"findmnt -n -o SOURCE /datasets/{SMALL}/v1")
    res["fio"] = {f"{where}_{bs}": fio(host, dev, bs) for bs in ("4k", "128k")
                  for where, host, dev in (("iscsi", GPU, device),
                                           ("zvol", STORAGE, f"/dev/zvol/{lab['dataset_root']}/{SMALL}@v1"))}
    return res


def profile(lab: dict) -> dict:
    """--profile: where a read's CPU goes. The small-file tree (ext4) is published to gpu1 and copied to its NVMe;
    one read over iSCSI fills storage1's caches; then two rounds of one read over iSCSI and one of the local copy
    (8 workers, caches warm, gpu1's page cache dropped first), each VM's QEMU CPU time measured on this host."""
    res = MEASURED
    install_tools()
    res["tree"] = make_version(SMALL, *TREES[SMALL])
    local_copies(lab, {"small": SMALL})
    res["nfs"] = nfs_export(lab, nfs_device(lab))
    read(f"/datasets/{SMALL}/v1", 8, 1, "iscsi-ext4: first read (fills storage1's ARC and L2ARC)")
    read(NFS_MOUNT, 8, 1, "nfs: first read (fills storage1's page cache over the loop device)")
    sources = {"iscsi-ext4": f"/datasets/{SMALL}/v1", "nfs": NFS_MOUNT, "local": f"{LOCAL}/small"}
    res["reads"] = {source: [] for source in sources}
    for seed in (2, 3):
        for source, path in sources.items():
            res["reads"][source].append(read(path, 8, seed, f"{source} (warm)"))
    return res


def profile_rows(lab: dict, res: dict, when: str) -> list[str]:
    """Writes bench/results/read_profile.json and returns the report section (``profile_section``)."""
    reads = res["reads"]
    gib = res["tree"]["bytes"] / 2**30
    per = {}
    for source, runs in reads.items():
        vms = sorted({vm for r in runs for vm in r["vm_cores"]})
        per[source] = {"mb_s": round(statistics.median(r["mb_s"] for r in runs), 1),
                       "cores": {vm: round(statistics.median(r["vm_cores"].get(vm, 0) for r in runs), 3)
                                 for vm in vms},
                       # CPU-seconds each VM spent per GiB read: cores x seconds / GiB
                       "cpu_s_per_gib": {vm: round(statistics.median(r["vm_cores"].get(vm, 0) * r["seconds"]
                                                                     for r in runs) / gib, 1) for vm in vms}}
    i, loc = per["iscsi-ext4"], per["local"]
    nfs = per.get("nfs")
    ratios = {"iscsi_over_local_mb_s": _r(i["mb_s"], loc["mb_s"]),
              **({"iscsi_over_nfs_mb_s": _r(i["mb_s"], nfs["mb_s"]),
                  "lab_cpu_per_gib_iscsi_over_nfs": _r(sum(i["cpu_s_per_gib"].values()),
                                                       sum(nfs["cpu_s_per_gib"].values()))} if nfs else {}),
              "gpu1_cpu_per_gib_iscsi_over_local": _r(i["cpu_s_per_gib"][GPU], loc["cpu_s_per_gib"][GPU]),
              "lab_cpu_per_gib_iscsi_over_local": _r(sum(i["cpu_s_per_gib"].values()),
                                                     sum(loc["cpu_s_per_gib"].values()))}
    cores = os.cpu_count()
    doc = {"date": report.now(), "commit": report.commit(), "lab": f"trixie lab (TCG), OpenZFS {lab['zfs']}, "
           f"storage1 (2 vCPU) and gpu1 (1 vCPU) on a host of {cores} cores",
           "figures": {**res, "summary": per, "host_cores": cores},
           "ratios": ratios}
    write_json("read_profile", doc)
    return profile_section(doc, when)


def profile_section(doc: dict, when: str) -> list[str]:
    per, ratios, tree = doc["figures"]["summary"], doc["ratios"], doc["figures"]["tree"]
    vms = sorted({vm for p in per.values() for vm in p["cores"]})
    out = ["## Issue 14: where a read's CPU goes (per-VM profile)", "",
           f"Measured in one run by `make bench-read-profile` on {when} at commit {doc['commit']}: the small-file "
           f"tree ({tree['files']} files, {tree['bytes'] / 2**30:.2f} GiB) read by 8 workers with storage1's caches "
           "warm, " + ", ".join({"iscsi-ext4": "over iSCSI", "nfs": "over NFS (exported as bench-read does)",
                                 "local": "from gpu1's local NVMe copy"}.get(source, source) for source in per)
           + ", two rounds each (medians). Each VM's CPU is its QEMU "
           "process's CPU time on this host (1.0 = one host core all the time); CPU-s/GiB is what each VM spent "
           "per GiB read. Figures also in `bench/results/read_profile.json`.", "",
           "| read | MB/s | " + " | ".join(f"{vm} cores" for vm in vms) + " | "
           + " | ".join(f"{vm} CPU-s/GiB" for vm in vms) + " |",
           "|---|---|" + "---|" * (2 * len(vms))]
    for source, p in per.items():
        out.append(f"| {source} | {p['mb_s']:.1f} | " + " | ".join(str(p["cores"].get(vm, "-")) for vm in vms)
                   + " | " + " | ".join(str(p["cpu_s_per_gib"].get(vm, "-")) for vm in vms) + " |")
    cores, i, loc = doc["figures"].get("host_cores"), per["iscsi-ext4"], per["local"]
    if cores:
        # the most a read could reach if every CPU it needs were free: per GiB it needs that many CPU-seconds
        remote = sum(i["cpu_s_per_gib"].get(vm, 0) for vm in (STORAGE, GPU))
        ceiling = cores / remote * 2**30 / 1e6 if remote else None
        near = loc["cpu_s_per_gib"].get(GPU)
        out += ["", f"What it says: over iSCSI, each GiB cost the lab {remote:.1f} CPU-seconds of emulation "
                f"({GPU} {i['cpu_s_per_gib'].get(GPU)}, {STORAGE} {i['cpu_s_per_gib'].get(STORAGE)}); the host has "
                f"{cores} cores, so no iSCSI read here can exceed about {ceiling:.0f} MB/s, and it read at "
                f"{i['mb_s']} MB/s ({i['mb_s'] / ceiling:.0%} of that). The local copy cost {near} CPU-seconds per "
                f"GiB in {GPU} ({loc['cpu_s_per_gib'].get(STORAGE)} in {STORAGE}, which does not serve it); {GPU}'s "
                f"one vCPU could give it at most about {2**30 / 1e6 / near:.0f} MB/s, and it read at {loc['mb_s']} "
                f"MB/s with {loc['cores'].get(GPU)} cores of {GPU}. Every read was served from storage1's caches, so "
                "the network, the disks and the ARC's size are not what limits the iSCSI read: the CPU of two "
                "emulated machines on the same host cores is. On this lab the ratio to the local copy measures what "
                "the emulator spends per byte on each path; how the same paths compare on machines with their own "
                "CPUs is not measured here."]
        nfs = per.get("nfs")
        if nfs:
            over_nfs = sum(nfs["cpu_s_per_gib"].get(vm, 0) for vm in (STORAGE, GPU))
            out += ["", f"Over NFS each GiB cost {over_nfs:.1f} CPU-seconds ({GPU} {nfs['cpu_s_per_gib'].get(GPU)}, "
                    f"{STORAGE} {nfs['cpu_s_per_gib'].get(STORAGE)}) and it read at {nfs['mb_s']} MB/s: where one "
                    "path reads faster than the other here, it is the one that costs the emulator less per byte."]
    out += ["", "Ratios:", ""] + [f"- {k}: {v}" for k, v in ratios.items()] + [""]
    return out


def _r(a, b):
    return round(a / b, 3) if a is not None and b else None


def rows(lab: dict, res: dict, when: str) -> list[str]:
    """Writes bench/results/read.json and returns the report section (``section``)."""
    i, n, loc, x = res["iscsi-ext4"], res["nfs"], res["local"], res["iscsi-xfs"]
    f = res["fio"]
    ratios = {
        "iscsi_over_local_8w_epoch2": _r(i["8w_epoch2"]["mb_s"], loc["8w_epoch2"]["mb_s"]),
        "iscsi_over_local_8w_epoch1_warmed": _r(res["warm"]["8w_epoch1"]["mb_s"], loc["8w_epoch1"]["mb_s"]),
        "iscsi_over_local_8w_epoch1_cold": _r(i["8w_epoch1"]["mb_s"], loc["8w_epoch1"]["mb_s"]),
        "iscsi_over_nfs_8w": _r(i["8w_epoch2"]["mb_s"], n["8w_epoch2"]["mb_s"]),
        "iscsi_over_nfs_8w_epoch1": _r(i["8w_epoch1"]["mb_s"], n["8w_epoch1"]["mb_s"]),
        "xfs_over_ext4_8w_epoch2": _r(x["8w_epoch2"]["mb_s"], i["8w_epoch2"]["mb_s"]),
        "shards_iscsi_over_local_8w_epoch2": _r(res["shards"]["iscsi-ext4"]["8w_epoch2"]["mb_s"],
                                                res["shards"]["local"]["8w_epoch2"]["mb_s"]),
        "epoch2_cache_hit_ratio": i["8w_epoch2"]["cache_hit_ratio"],
        "fio_128k_qd32_iscsi_over_zvol_iops": _r(f["iscsi_128k"]["iops"], f["zvol_128k"]["iops"]),
        "fio_4k_qd32_iscsi_over_zvol_iops": _r(f["iscsi_4k"]["iops"], f["zvol_4k"]["iops"]),
    }
    commit = report.commit()
    date = report.now()
    doc = {"date": date, "commit": commit, "lab": f"trixie lab (TCG), OpenZFS {lab['zfs']}, storage1 (2 vCPU, ARC 512 "
           "MiB, NVMe L2ARC) and gpu1 (1 vCPU, 1280 MiB)", "figures": res, "ratios": ratios}
    write_json("read", doc)
    return section(doc, when)


def section(doc: dict, when: str) -> list[str]:
    """The report section of one run's results document (bench/results/read.json)."""
    res, ratios, commit = doc["figures"], doc["ratios"], doc["commit"]
    i, n, loc, x = res["iscsi-ext4"], res["nfs"], res["local"], res["iscsi-xfs"]
    f = res["fio"]

    def line(label, d, key):
        e = d[key]
        hits = e["cache_hit_ratio"] if e["cache_hit_ratio"] is not None and "local" not in label else "-"
        return (f"| {label} | {e['mb_s']} | {e['files_s']} | {e['latency_ms']['p50']} | {e['latency_ms']['p99']} | "
                f"{hits} | {e.get('host_cpu_busy', '-')} |")

    out = ["## Issue 14: the read path (a data loader over iSCSI, NFS and a local copy)", "",
           f"Measured in one run by `make bench-read` on {when} at commit {commit}. The tree: "
           f"{res['setup']['trees'][SMALL]['files']} files, {res['setup']['trees'][SMALL]['bytes'] / 2**30:.2f} GiB "
           "(16 KiB-1 MiB, random bytes). bench/read_loader.py on gpu1: N workers read every file once per epoch in "
           "a seeded shuffled order, gpu1's page cache dropped before each epoch; epoch 1 after storage1's ARC was "
           "shrunk to its minimum and its L2ARC emptied. Cache hits: storage1's (ARC hits + L2ARC hits) / ARC "
           "lookups during that read (none for the local copy, which storage1 does not serve). Figures also in "
           "`bench/results/read.json`.", "",
           "| read | MB/s | files/s | p50 ms | p99 ms | ARC+L2ARC hits | host CPU busy |",
           "|---|---|---|---|---|---|---|"]
    for label, d in (("iscsi-ext4", i), ("iscsi-xfs", x), ("nfs (v4.2, nconnect=4)", n), ("local NVMe copy", loc)):
        for key in ("8w_epoch1", "8w_epoch2", "8w_epoch3", "1w_warm", "4w_warm"):
            if key in d:
                out.append(line(f"{label}, {key.replace('_', ', ').replace('w,', ' workers,')}", d, key))
    out.append(line("iscsi-ext4, 8 workers, epoch 1 after `fabricctl warm`", res["warm"], "8w_epoch1"))
    for label in ("iscsi-ext4", "local"):
        for key in ("8w_epoch1", "8w_epoch2"):
            out.append(line(f"shards (64-256 MiB), {label}, {key.replace('_', ', ').replace('w,', ' workers,')}",
                            res["shards"][label], key))
    w = res["warm"]["fabricctl"]
    out += ["", f"`fabricctl warm`: {w.get('summary', '')}", "",
            "| fio randread, QD 32 | iSCSI on gpu1 | zvol on storage1 | iSCSI / zvol |", "|---|---|---|---|"]
    for bs in ("4k", "128k"):
        a, b = f[f"iscsi_{bs}"], f[f"zvol_{bs}"]
        out.append(f"| {bs}: IOPS (p99 ms) | {a['iops']} ({a['p99_ms']}) | {b['iops']} ({b['p99_ms']}) | "
                   f"{_r(a['iops'], b['iops'])} |")
    remote = [e.get("host_cpu_busy") for d in (i, x, n) for e in d.values()]
    near = [e.get("host_cpu_busy") for e in loc.values()]
    remote, near = [v for v in remote if v is not None], [v for v in near if v is not None]
    if remote and near:
        out += ["", "What this lab can and cannot say: the storage VM (ZFS, LIO or nfsd) and the GPU VM (ext4, "
                "SCSI or NFS client, the reader) are emulated on the same two host cores. During the iSCSI and NFS "
                f"reads the host was {statistics.median(remote):.2f} busy (median; {min(remote)}-{max(remote)}), "
                f"during the local ones {statistics.median(near):.2f} ({min(near)}-{max(near)}): a remote read "
                "spends CPU in two emulated machines for every byte, out of one budget, where a local one spends it "
                "in one. The ratios measure that emulated path; they do not say how a storage network with its own "
                "CPUs on each side compares with a local NVMe."]
    out += ["", "DLIO (MLPerf Storage's `dlio-benchmark`) does not run in the lab's GPU VMs, so only the plain reader "
            "above is reported. Its newest release on PyPI (2.0.0) pins `pydftracer==1.0.2`, which has no wheel for "
            "CPython 3.13 (pip finds a cp311 one), the trixie guests' Python: `pip download dlio-benchmark "
            "--python-version 3.13 --only-binary=:all:` ends with `ERROR: No matching distribution found for "
            "pydftracer==1.0.2`. Building it needs a C++ tool chain and CMake in the guest, and DLIO needs an MPI "
            "library (mpi4py): the guest image has neither, and the guests reach no package index.",
            "", "Ratios (targets of issue 14 in brackets):", ""]
    targets = {"iscsi_over_local_8w_epoch2": "≥ 0.9", "iscsi_over_local_8w_epoch1_warmed": "≥ 0.8",
               "iscsi_over_nfs_8w": "≥ 1.5", "epoch2_cache_hit_ratio": "≥ 0.9",
               "fio_128k_qd32_iscsi_over_zvol_iops": "≥ 0.8"}
    out += [f"- {k}: {v}" + (f" (target {targets[k]})" if k in targets else "") for k, v in ratios.items()]
    out.append("")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cleanup", action="store_true", help="only remove what an earlier run left, then exit")
    p.add_argument("--render", action="store_true", help="only write the report section again from "
                   "bench/results/read.json (the figures of the last run; nothing is measured)")
    p.add_argument("--profile", action="store_true", help="measure only where a read's CPU goes (each VM's QEMU "
                   "CPU time during warm reads over iSCSI and from the local copy) -> bench/results/read_profile.json")
    a = p.parse_args()
    if a.profile and a.render:
        doc = json.loads((Path(__file__).resolve().parent / "results" / "read_profile.json").read_text())
        write_section("read-profile", profile_section(doc, doc["date"].replace("T", " ").replace("+00:00", " UTC")))
        return 0
    if a.profile:
        return run_bench("bench-read-profile", "read-profile", checking="storage1 and gpu1 converged, one cache "
                         "device, fio, NFS server", preflight=preflight, leftovers=cleanup, cleanup_only=a.cleanup,
                         measure=profile, cleanup=cleanup, rows=profile_rows, partial=lambda: MEASURED)
    if a.render:
        doc = json.loads((Path(__file__).resolve().parent / "results" / "read.json").read_text())
        write_section("read", section(doc, doc["date"].replace("T", " ").replace("+00:00", " UTC")))
        return 0
    return run_bench("bench-read", "read", checking="storage1 and gpu1 converged, one cache device, fio, NFS server",
                     preflight=preflight, leftovers=cleanup, cleanup_only=a.cleanup, measure=measure,
                     cleanup=cleanup, rows=rows, partial=lambda: MEASURED)


if __name__ == "__main__":
    sys.exit(main())
