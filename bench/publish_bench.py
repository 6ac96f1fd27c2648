#!/usr/bin/env python3
"""Benchmark of issue 4 on the lab: publishing a dataset version against copying it with rsync.

Issue 4 asks: "Publishing a 1 GiB and a 4 GiB version (many small files, like an image dataset)
to gpu1 and gpu2: the time of `fabricctl publish` against copying the same content to both hosts
with rsync, as ratios. Publish time must not grow with the dataset size: show both sizes."

For each size S (1 GiB, then 4 GiB), all in one run:
1. A tree of many small files totalling S on storage1 (16-256 KiB each, 1000 per directory,
   pseudo-random content: slices at random offsets of a 64 MiB block from os.urandom, each file
   starting with its own index, so no two files are alike and nothing compresses), written by one
   python3 process on storage1 into a ZFS file system of this benchmark (<pool>/pubbench-src-Sg;
   storage1's root disk is too small for 4 GiB).
2. `fabricctl dataset create pubbench-Sg --size ceil(1.3 S)G`, `dataset ingest`, `dataset seal
   pubbench-Sg v1`: timed and reported, not the headline.
3. The headline: `fabricctl publish pubbench-Sg@v1 --to gpu1,gpu2`, timed on storage1 (GNU time
   around the command) and on the host (wall clock around the ssh call).
4. Baseline: `rsync -a --whole-file SRC/ rsync://GPU:8730/pubbench/pubbench-rsync-Sg/` from
   storage1 to gpu1 and gpu2 in parallel: an rsync daemon on each GPU node (started by this
   benchmark for the run, accepting storage1's address only), unencrypted as iSCSI is, so neither
   side pays for ciphers the other does not use. It writes onto each GPU VM's local NVMe scratch
   disk (the lab gives each one; this benchmark makes an ext4 file system labelled `pubbench` on it
   when the disk is blank, and refuses a disk that carries anything else). When the scratch file
   system has no room for S plus a reserve, the rsync is skipped and the section says so (no
   figure is invented). As a second baseline, the same tree streamed over TCP to both hosts and
   discarded there (`tar -cf - | mbuffer -O GPU:8731` into `mbuffer -I 8731 -o /dev/null`): the
   floor of any copy over the lab network, since nothing is written on the GPU side.
5. First read on gpu1 (page cache dropped first): `tar -cf - | wc -c` of the published version
   against the same read of the rsync'ed copy.
   The floor copy (in 4) and the first read (5) run only for the sizes in --extras-sizes (default:
   1 GiB); at 4 GiB they would add about half an hour under TCG and are context, not the headline.
6. Clean-up of everything it created: unpublish, `fabricctl dataset destroy --yes`, the rsync
   copies, the source file system (destroyed only if it carries this benchmark's bench:owner mark).

Precondition: the lab is up and converged: `make lab-up` and `ansible-playbook playbooks/site.yml`
(which installs fabricctl on storage1 with its config, SSH key and known_hosts). This script does
not start, stop or converge the lab; it checks the precondition first and stops with a clear
message when it does not hold. Leftovers of an earlier, interrupted run of this script (its own
names only) are cleaned up first.

Run as root on the host that runs the lab: `make bench-publish` (`--sizes 1` for a quick run).
It writes the `publish` section of docs/benchmarks.md and bench/results/publish.json (issue 29): every
measured number of each size named with the size (`publish_s_4g`), and the ratios publish_over_rsync_4g
(target <= 0.02) and publish_4g_over_1g (target <= 1.1). A ratio whose inputs were not measured (a run
without 4 GiB, an rsync skipped for lack of room) is null, and `not_measured` says why, as it does for
each missing figure. Absolute figures depend on the emulated lab (TCG); the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from labbench import (  # noqa: E402
    OWNER_PROP,
    BenchError,
    fabricctl_facts,
    owner_of,
    put,
    ratio,
    run_bench,
    say,
    snapshot_names,
    ssh,
    tail,
    timed,
    zfs_exists,
    zfs_value,
)
from report import commit, now, write_json  # noqa: E402

SECTION = "publish"
STORAGE = "storage1"
GPUS = ("gpu1", "gpu2")
VERSION = "v1"
OWNER = "bench/publish_bench.py"
GIB = 2**30
MIB = 2**20
GPU_RESERVE = 256 * MIB          # left free on a GPU VM's scratch file system after the rsync copy
SCRATCH_MOUNT = "/var/tmp/pubbench-scratch"
SCRATCH_LABEL = "pubbench"
FILE_OVERHEAD = 4096             # per file on the GPU's ext4 (block rounding, inode, directory entry)
LAB = "trixie lab (TCG), storage1 publishing to gpu1 and gpu2"
# issue 29's ratios of bench/results/publish.json: (numerator, denominator) figures and the target (at most)
RATIOS = {"publish_over_rsync_4g": ("publish_s_4g", "rsync_s_4g", 0.02),
          "publish_4g_over_1g": ("publish_s_4g", "publish_s_1g", 1.1)}


GENERATE = r'''
import json, os, random, sys, time
root, total, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
block = os.urandom(64 << 20)
started = time.monotonic()
written = files = 0
while written < total:
    size = min(rng.randint(16 << 10, 256 << 10), total - written)
    d = os.path.join(root, f"class{files // 1000:04d}")
    if files % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    off = rng.randrange(0, len(block) - size)
    data = (files.to_bytes(8, "little") + block[off + 8:off + size])[:size]
    with open(os.path.join(d, f"img{files:07d}.bin"), "wb") as fh:
        fh.write(data)
    written += size
    files += 1
os.sync()
print(json.dumps({"files": files, "bytes": written, "seconds": round(time.monotonic() - started, 2)}))
'''


RSYNC_PORT, SINK_PORT = 8730, 8731
RSYNCD_CONF = "/run/pubbench-rsyncd.conf"
DAEMONS = ("pubbench-rsyncd", "pubbench-sink")  # transient systemd units on the GPU nodes


@dataclass
class Lab:
    pool: str
    dataset_root: str
    mount_root: str
    storage_address: str       # storage1's address on the storage network (fabricctl's portal)
    addresses: dict[str, str]  # gpu name -> its address, as fabricctl reaches it


def preflight() -> Lab:
    """The lab is up, converged, fabricctl installed on storage1, the copy tools on every node."""
    facts = fabricctl_facts(STORAGE, *GPUS)
    for host, tool in ((STORAGE, "/usr/bin/time"), (STORAGE, "rsync"), (STORAGE, "mbuffer"),
                       *((g, t) for g in GPUS for t in ("rsync", "mbuffer"))):
        if ssh(host, f"command -v {tool} >/dev/null", check=False).returncode != 0:
            raise BenchError(f"{host} has no {tool} (it is in lab/image/packages.txt: rebuild the image)")
    return Lab(facts["pool"], facts["dataset_root"], facts["mount_root"], facts["portal_ip"],
               {g: facts["hosts"][g] for g in GPUS})


def start_daemon(gpu: str, unit: str, command: str, port: int) -> None:
    """A transient systemd service on the GPU node, listening on port (waited for)."""
    ssh(gpu, f"systemctl stop {unit} 2>/dev/null; systemctl reset-failed {unit} 2>/dev/null; "
             f"systemd-run --quiet --unit={unit} {command}")
    for _ in range(60):
        if ssh(gpu, f"ss -Hltn 'sport = :{port}' | grep -q LISTEN", check=False).returncode == 0:
            return
        time.sleep(1)
    raise BenchError(f"{gpu}: {unit} does not listen on port {port} (`journalctl -u {unit}`)")


def start_rsyncd(lab: Lab, gpu: str) -> None:
    conf = (f"[pubbench]\npath = {SCRATCH_MOUNT}\nread only = false\nuid = root\ngid = root\n"
            f"use chroot = no\nhosts allow = {lab.storage_address}\n")
    put(gpu, RSYNCD_CONF, conf)
    start_daemon(gpu, DAEMONS[0], f"rsync --daemon --no-detach --config={RSYNCD_CONF} --port={RSYNC_PORT} "
                                  f"--address={lab.addresses[gpu]}", RSYNC_PORT)


def stop_daemons(gpu: str) -> None:
    for unit in DAEMONS:
        ssh(gpu, f"systemctl stop {unit} 2>/dev/null; systemctl reset-failed {unit} 2>/dev/null; true", check=False)
    ssh(gpu, f"rm -f {RSYNCD_CONF}", check=False)


# ---- names of this benchmark's objects -----------------------------------------------------------

def ds_name(gib: int) -> str:
    return f"pubbench-{gib}g"


def src_dataset(lab: Lab, gib: int) -> str:
    return f"{lab.pool}/pubbench-src-{gib}g"


def src_dir(gib: int) -> str:
    return f"/srv/pubbench-src-{gib}g"


def rsync_dir(gib: int) -> str:
    return f"{SCRATCH_MOUNT}/pubbench-rsync-{gib}g"


def scratch_disk(gpu: str) -> str:
    return f"/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_SCRATCH{gpu[-1]}"


def mount_scratch(gpu: str) -> None:
    """Mount the GPU VM's scratch NVMe at SCRATCH_MOUNT: ext4 labelled SCRATCH_LABEL, made only on a
    blank disk (a disk that carries anything else is refused, never formatted)."""
    disk = scratch_disk(gpu)
    if ssh(gpu, f"findmnt -n {SCRATCH_MOUNT}", check=False).returncode == 0:
        return
    if ssh(gpu, f"test -b {disk}", check=False).returncode != 0:
        raise BenchError(f"{gpu} has no scratch disk {disk} (the lab gives every GPU VM one: `make lab-down lab-up`)")
    probe = ssh(gpu, f"blkid -p -o export {disk}", check=False)
    if probe.returncode == 2:  # no signature at all: a blank disk
        say(f"{gpu}: mkfs.ext4 -L {SCRATCH_LABEL} on the blank scratch disk {disk}")
        ssh(gpu, f"mkfs.ext4 -q -F -L {SCRATCH_LABEL} {disk}", timeout=600)
    elif f"LABEL={SCRATCH_LABEL}" not in probe.stdout.split():
        raise BenchError(f"{gpu}: {disk} carries something that is not this benchmark's file system "
                         f"({' '.join(probe.stdout.split())}); left alone")
    ssh(gpu, f"mkdir -p {SCRATCH_MOUNT} && mount -o noatime {disk} {SCRATCH_MOUNT}")


def avail(dataset: str) -> int:
    return int(zfs_value(STORAGE, dataset, "available"))


def cleanup(lab: Lab, gib: int) -> list[str]:
    """Remove what this benchmark created for one size; return what could not be removed."""
    left = []
    name = ds_name(gib)
    volume = f"{lab.dataset_root}/{name}"
    if (zfs_exists(STORAGE, volume)
            and owner_of(STORAGE, volume) != OWNER):
        left.append(f"{volume} exists but is not this benchmark's ({OWNER_PROP} unset): left alone")
    elif zfs_exists(STORAGE, volume):
        say(f"clean-up: unpublish and destroy {name}")
        if f"{volume}@{VERSION}" in snapshot_names(STORAGE, volume):
            proc = ssh(STORAGE, f"fabricctl unpublish {name}@{VERSION} --json", check=False, timeout=900)
            if proc.returncode != 0:  # only this benchmark's own readers could hold the mount
                say(f"  unpublish said: {tail(proc.stderr, 5)}; retrying with --force")
                ssh(STORAGE, f"fabricctl unpublish {name}@{VERSION} --force --json", check=False, timeout=900)
        proc = ssh(STORAGE, f"fabricctl dataset destroy {name} --yes", check=False, timeout=900)
        if proc.returncode != 0:
            left.append(f"{lab.dataset_root}/{name} ({tail(proc.stderr, 3)})")
    for gpu in GPUS:
        stop_daemons(gpu)
        ssh(gpu, f"rm -rf --one-file-system {rsync_dir(gib)}", check=False, timeout=900)
        ssh(gpu, f"umount {SCRATCH_MOUNT} 2>/dev/null; rmdir {SCRATCH_MOUNT} 2>/dev/null; true", check=False)
    src = src_dataset(lab, gib)
    if zfs_exists(STORAGE, src):
        owner = owner_of(STORAGE, src)
        if owner == OWNER:
            say(f"clean-up: zfs destroy -r {src}")
            proc = ssh(STORAGE, f"zfs destroy -r {src}", check=False, timeout=900)
            if proc.returncode != 0:
                left.append(f"{src} ({tail(proc.stderr, 3)})")
            ssh(STORAGE, f"rmdir {src_dir(gib)} 2>/dev/null || true", check=False)
        else:
            left.append(f"{src} exists but is not this benchmark's ({OWNER_PROP}={owner!r}); left alone")
    return left


def cleanup_all(lab: Lab, sizes: list[int]) -> list[str]:
    left = []
    for gib in sizes:
        try:
            left += cleanup(lab, gib)
        except BenchError as exc:
            left.append(f"the {gib} GiB case: {exc}")
    return left


def parallel(commands: list[str]) -> str:
    """A shell snippet running the commands in parallel; fails if any fails."""
    lines = [f"( {c} ) & p{i}=$!" for i, c in enumerate(commands)]
    waits = [f"wait $p{i} || rc=1" for i in range(len(commands))]
    return "rc=0; " + "; ".join(lines + waits) + "; exit $rc"


def drop_caches(host: str) -> None:
    ssh(host, "sync; echo 3 > /proc/sys/vm/drop_caches")


def read_tree(host: str, path: str) -> tuple[float, int]:
    """Seconds and bytes of `tar -cf - PATH | wc -c` on host, page cache dropped first."""
    drop_caches(host)
    t = timed(host, f"tar -C {shlex.quote(path)} -cf - . | wc -c", timeout=3600)
    return t.node, int(t.stdout.strip().splitlines()[-1])


def run_size(lab: Lab, gib: int, extras: bool) -> dict:
    name, src, where = ds_name(gib), src_dataset(lab, gib), src_dir(gib)
    total = gib * GIB
    vol_gib = math.ceil(gib * 1.3)
    r: dict = {"gib": gib, "vol_gib": vol_gib, "floor_s": None, "read_pub_s": None}

    need = total + vol_gib * GIB * 1.02 + GIB
    have = avail(lab.pool)
    if have < need:
        raise BenchError(f"pool {lab.pool} has {have / GIB:.1f} GiB available; the {gib} GiB case needs about "
                         f"{need / GIB:.1f} GiB (source tree + fully reserved {vol_gib} GiB staging volume)")

    say(f"[{gib} GiB] source tree: zfs create {src}, then many small files (expect minutes under TCG)")
    ssh(STORAGE, f"zfs create -o mountpoint={where} -o {OWNER_PROP}={OWNER} {src}")
    put(STORAGE, "/tmp/pubbench-generate.py", GENERATE)
    gen = json.loads(ssh(STORAGE, f"python3 /tmp/pubbench-generate.py {where} {total} {gib}",
                         timeout=7200).stdout)
    r.update(files=gen["files"], bytes=gen["bytes"], generate_s=gen["seconds"])
    say(f"[{gib} GiB]   {gen['files']} files, {gen['bytes']} bytes in {gen['seconds']:.0f} s")

    say(f"[{gib} GiB] fabricctl dataset create {name} --size {vol_gib}G")
    r["create_s"] = timed(STORAGE, f"fabricctl dataset create {name} --size {vol_gib}G --json").node
    ssh(STORAGE, f"zfs set {OWNER_PROP}={OWNER} {lab.dataset_root}/{name}")
    say(f"[{gib} GiB] fabricctl dataset ingest {name} {where}/")
    t = timed(STORAGE, f"fabricctl dataset ingest {name} {where}/ --json", timeout=7200)
    ingest = t.json()
    if ingest["files"] != gen["files"] or ingest["copied"] != gen["files"]:
        raise BenchError(f"ingest copied {ingest['copied']} of {ingest['files']} files; {gen['files']} were generated")
    r["ingest_s"] = t.node
    say(f"[{gib} GiB]   {t.node:.1f} s")
    say(f"[{gib} GiB] fabricctl dataset seal {name} {VERSION}")
    t = timed(STORAGE, f"fabricctl dataset seal {name} {VERSION} --note 'bench/publish_bench.py' --json",
              timeout=7200)
    r["seal_s"] = t.node
    r["sealed_files"] = t.json().get("files")
    say(f"[{gib} GiB]   {t.node:.1f} s")

    say(f"[{gib} GiB] HEADLINE: fabricctl publish {name}@{VERSION} --to {','.join(GPUS)}")
    t = timed(STORAGE, f"fabricctl publish {name}@{VERSION} --to {','.join(GPUS)} --json", timeout=1800)
    hosts = t.json().get("hosts", {})
    bad = {h: v for h, v in hosts.items() if v.get("status") != "ok"}
    if bad or set(hosts) != set(GPUS):
        raise BenchError(f"publish did not succeed on every host: {json.dumps(hosts)[:1000]}")
    r["publish_s"], r["publish_wall"] = t.node, t.wall
    # each host's side as fabricctl timed it (its fan-out: the agent's attach and the current link, hosts in
    # parallel); the rest of the publish is storage1's own (reads, export, grant): where a growth with size is
    r["host_s"] = {h: hosts[h].get("seconds") for h in GPUS}
    say(f"[{gib} GiB]   publish: {t.node:.1f} s on storage1, {t.wall:.1f} s wall on the host")
    mountpoint = f"{lab.mount_root}/{name}/{VERSION}"
    for gpu in GPUS:
        opts = ssh(gpu, f"findmnt -n -o OPTIONS {mountpoint}").stdout.strip()
        if not opts.split(",")[0] == "ro":
            raise BenchError(f"{gpu}: {mountpoint} is not mounted read-only (options: {opts})")

    if extras:
        say(f"[{gib} GiB] baseline 1: tar | mbuffer over TCP to both GPU nodes, discarded there (network floor)")
        for gpu in GPUS:
            start_daemon(gpu, DAEMONS[1], f"mbuffer -q -I {SINK_PORT} -o /dev/null", SINK_PORT)
        floor = parallel([f"tar -C {where} -cf - . | mbuffer -q -O {lab.addresses[g]}:{SINK_PORT}" for g in GPUS])
        r["floor_s"] = timed(STORAGE, floor, timeout=7200).node
        say(f"[{gib} GiB]   {r['floor_s']:.1f} s")

    need_gpu = gen["bytes"] + gen["files"] * FILE_OVERHEAD + GPU_RESERVE
    for gpu in GPUS:
        mount_scratch(gpu)
    free = {g: int(ssh(g, f"df -B1 --output=avail {SCRATCH_MOUNT} | tail -n 1").stdout.strip()) for g in GPUS}
    r["gpu_free"] = free
    short = [g for g in GPUS if free[g] < need_gpu]
    if short:
        r["rsync_s"] = None
        r["rsync_skip"] = (", ".join(f"{g} has {free[g] / GIB:.1f} GiB free in {SCRATCH_MOUNT}" for g in short)
                           + f"; the copy needs {need_gpu / GIB:.1f} GiB (with a {GPU_RESERVE // MIB} MiB reserve)")
        say(f"[{gib} GiB] baseline 2: rsync SKIPPED: {r['rsync_skip']}")
    else:
        say(f"[{gib} GiB] baseline 2: rsync -a --whole-file to an rsync daemon on both GPU nodes in parallel")
        for gpu in GPUS:
            start_rsyncd(lab, gpu)
        cmd = parallel([f"rsync -a --whole-file {where}/ rsync://{lab.addresses[g]}:{RSYNC_PORT}/pubbench/"
                        f"{rsync_dir(gib).rsplit('/', 1)[1]}/" for g in GPUS])
        r["rsync_s"] = timed(STORAGE, cmd, timeout=7200).node
        for gpu in GPUS:
            count = int(ssh(gpu, f"find {rsync_dir(gib)} -type f | wc -l").stdout.strip())
            if count != gen["files"]:
                raise BenchError(f"{gpu}: the rsync copy has {count} files, {gen['files']} expected")
        say(f"[{gib} GiB]   {r['rsync_s']:.1f} s")

    if extras:
        say(f"[{gib} GiB] first read on {GPUS[0]} of the published version (tar | wc -c, page cache dropped)")
        r["read_pub_s"], r["read_pub_bytes"] = read_tree(GPUS[0], mountpoint)
        say(f"[{gib} GiB]   {r['read_pub_s']:.1f} s")
    if extras and r["rsync_s"] is not None:
        say(f"[{gib} GiB] first read on {GPUS[0]} of the rsync'ed copy")
        r["read_copy_s"], r["read_copy_bytes"] = read_tree(GPUS[0], rsync_dir(gib))
        say(f"[{gib} GiB]   {r['read_copy_s']:.1f} s")

    say(f"[{gib} GiB] fabricctl unpublish {name}@{VERSION}")
    r["unpublish_s"] = timed(STORAGE, f"fabricctl unpublish {name}@{VERSION} --json", timeout=1800).node
    left = cleanup(lab, gib)
    if left:
        raise BenchError("clean-up left: " + "; ".join(left))
    return r


def size_figures(r: dict) -> tuple[dict, dict]:
    """One size's measured numbers from run_size, each named with the size (publish_s_4g; gpu_free_gpu1_4g for
    a number per GPU node), and why each figure of that size that was not measured is missing."""
    g = f"_{r['gib']}g"
    figures, why = {}, {}
    for key, value in r.items():
        if isinstance(value, dict):
            figures.update({f"{key}_{sub}{g}": v for sub, v in value.items()})
        elif isinstance(value, (int, float)) and key != "gib":
            figures[key + g] = value
    extras = f"not measured: {r['gib']} GiB is not in --extras-sizes (only those get the floor copy and the first read)"
    if r["rsync_s"] is None:
        why["rsync_s" + g] = f"the rsync was not run: {r['rsync_skip']}"
    if r["floor_s"] is None:
        why["floor_s" + g] = extras
    if r["read_pub_s"] is None:
        why["read_pub_s" + g] = extras
    if r.get("read_copy_s") is None:
        why["read_copy_s" + g] = extras if r["read_pub_s"] is None else f"no rsync'ed copy: {why['rsync_s' + g]}"
    return figures, why


def document(done: list[dict]) -> dict:
    """bench/results/publish.json of one run (run_size's results, one a size): the figures of every size, issue 29's
    ratios (RATIOS), and in not_measured why a figure or a ratio is missing (a ratio without both of its figures
    is null, never estimated)."""
    figures, why = {}, {}
    for r in done:
        got, missing = size_figures(r)
        figures.update(got)
        why.update(missing)
    sizes = sorted(r["gib"] for r in done)
    no_run = f"not measured: no run of that size (--sizes {','.join(map(str, sizes))})"
    ratios = {}
    for name, (a, b, _target) in RATIOS.items():
        lacking = [k for k in (a, b) if figures.get(k) is None]
        if lacking:
            ratios[name] = None
            why[name] = "; ".join(f"{k}: {why.get(k, no_run)}" for k in lacking)
        elif not figures[b]:
            ratios[name], why[name] = None, f"{b} is 0"
        else:
            ratios[name] = round(figures[a] / figures[b], 3)
    return {"date": now(), "commit": commit(), "lab": LAB, "sizes_gib": sizes, "figures": figures, "ratios": ratios,
            "not_measured": why}


def fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


def mbs(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 1e6:.1f} MB/s"


def section(results: list[dict], when: str, doc: dict) -> list[str]:
    rows = [
        "## Issue 4: publishing a dataset version vs copying it with rsync (lab, TCG)",
        "",
        f"Measured in one run by `make bench-publish` on {when} at commit {doc['commit']}: storage1 publishes to gpu1 "
        "and gpu2. Each tree: files of 16-256 KiB of pseudo-random data, 1000 per directory. Figures also in "
        "`bench/results/publish.json`.",
        "",
        "| size | files | ours: `fabricctl publish --to gpu1,gpu2` (on storage1 / host wall) "
        "| baseline: `rsync -a --whole-file` to an rsync daemon on both, in parallel | ratio publish / rsync "
        "| floor: `tar \\| mbuffer` over TCP to both, discarded | ratio publish / floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rsync = fmt(r["rsync_s"]) if r["rsync_s"] is not None else "not run: no room on the scratch disks (see below)"
        rows.append(f"| {r['gib']} GiB | {r['files']:,} | {fmt(r['publish_s'])} / {fmt(r['publish_wall'])} "
                    f"| {rsync} | {ratio(r['publish_s'], r['rsync_s'])} | {fmt(r['floor_s'])} "
                    f"| {ratio(r['publish_s'], r['floor_s'])} |")
    by = {r["gib"]: r for r in results}
    if 1 in by and 4 in by:
        growth = [f"publish {ratio(by[4]['publish_s'], by[1]['publish_s'])} "
                  f"(host wall {ratio(by[4]['publish_wall'], by[1]['publish_wall'])})"]
        if by[4]["rsync_s"] and by[1]["rsync_s"]:
            growth.append(f"rsync {ratio(by[4]['rsync_s'], by[1]['rsync_s'])}")
        if by[4]["floor_s"] and by[1]["floor_s"]:
            growth.append(f"floor copy {ratio(by[4]['floor_s'], by[1]['floor_s'])}")
        rows += ["", "Growth with size, 4 GiB / 1 GiB: " + "; ".join(growth) + "."]
    parts = []
    for r in results:
        took = [v for v in (r.get("host_s") or {}).values() if v is not None]
        if took:
            hosts = ", ".join(f"{h} {fmt(v)}" for h, v in r["host_s"].items())
            parts.append(f"{r['gib']} GiB: the hosts' side {hosts} (in parallel), storage1's own "
                         f"{fmt(r['publish_s'] - max(took))}")
    if parts:
        rows += ["", "Where a publish's seconds went (fabricctl's own timing of each host: the agent's attach and "
                 "the current link): " + "; ".join(parts) + "."]
    rows += ["", "Ratios (targets of issue 29 in brackets):", ""]
    for name, (_a, _b, target) in RATIOS.items():
        value = doc["ratios"][name]
        if value is None:
            rows.append(f"- {name}: - (target <= {target}; not measured: {doc['not_measured'][name]})")
        else:
            rows.append(f"- {name}: **{value}** (target <= {target}{'' if value <= target else ', not met'})")
    rows += ["", "First read on gpu1 (`tar -cf - DIR | wc -c`, gpu1's page cache dropped before each read):", "",
             "| size | published version over iSCSI | rsync'ed copy on gpu1's disk | ratio published / copy |",
             "|---|---|---|---|"]
    for r in results:
        if r["read_pub_s"] is None:
            rows.append(f"| {r['gib']} GiB | not measured (`--extras-sizes`) | | |")
            continue
        pub = f"{fmt(r['read_pub_s'])} ({mbs(r['read_pub_bytes'], r['read_pub_s'])})"
        copy = (f"{fmt(r['read_copy_s'])} ({mbs(r['read_copy_bytes'], r['read_copy_s'])})"
                if r.get("read_copy_s") else "- (no copy)")
        rows.append(f"| {r['gib']} GiB | {pub} | {copy} | {ratio(r['read_pub_s'], r.get('read_copy_s'))} |")
    rows += ["", "The steps before publishing (on storage1; reported, not compared):", "",
             "| size | generate tree | `dataset create` | `dataset ingest` | `dataset seal` (manifest + snapshot) "
             "| `unpublish` |", "|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r['gib']} GiB (volume {r['vol_gib']}G) | {fmt(r['generate_s'])} | {fmt(r['create_s'])} "
                    f"| {fmt(r['ingest_s'])} | {fmt(r['seal_s'])} | {fmt(r['unpublish_s'])} |")
    rows += [""]
    for r in results:
        if r["rsync_s"] is None:
            rows.append(f"The {r['gib']} GiB rsync was not run: {r['rsync_skip']}. The floor copy (nothing written "
                        "on the GPU side) is the lower bound of any copy there.")
            rows.append("")
    rows += [
        "Times on storage1 are GNU time around the command (fabricctl's Python start-up included); the host "
        "wall time adds the ssh round trip from the host. Publishing exports the sealed snapshot's block device "
        "read-only (LIO), logs gpu1 and gpu2 in and mounts it: no file data is copied, so its time should not "
        "depend on the dataset size, while any copy moves every byte. The rsync and the floor copy read the "
        "source tree from storage1's pool (ARC at most 512 MiB, so mostly from disk) and go unencrypted over TCP "
        "(as iSCSI does) through the emulated network, and rsync writes onto each GPU VM's local NVMe scratch "
        "disk (ext4). The published read is served by storage1's zvol over iSCSI (storage1's ARC may hold part "
        "of it), the copy by gpu1's local scratch disk. Absolute numbers are bound by software emulation; "
        "compare ratios.",
    ]
    return rows


def report(done: list[dict], when: str) -> list[str]:
    """Writes bench/results/publish.json and returns the report section."""
    doc = document(done)
    write_json(SECTION, doc)
    return section(done, when, doc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4", help="sizes in GiB, comma separated (default 1,4)")
    parser.add_argument("--extras-sizes", default="1",
                        help="sizes (GiB) that also get the floor copy and the first-read comparison "
                             "(default 1: at 4 GiB they add about half an hour under TCG)")
    parser.add_argument("--cleanup-only", action="store_true", help="remove this benchmark's leftovers and stop")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    extras = {int(s) for s in args.extras_sizes.split(",") if s.strip()}
    if any(s < 1 for s in sizes):
        parser.error("sizes are whole GiB, at least 1")
    results: list[dict] = []

    def measure(lab: Lab) -> list[dict]:
        for gib in sizes:
            results.append(run_size(lab, gib, gib in extras))
        return results

    return run_bench("bench-publish", SECTION,
                     checking="up, converged, fabricctl on storage1, rsync and mbuffer on every node",
                     preflight=preflight, leftovers=lambda lab: cleanup_all(lab, sorted(set(sizes) | {1, 4})),
                     cleanup_only=args.cleanup_only, measure=measure, cleanup=lambda lab: cleanup_all(lab, sizes),
                     rows=lambda _lab, done, when: report(done, when),
                     cleanup_note="clean-up (whatever is left)", partial=lambda: results)


if __name__ == "__main__":
    sys.exit(main())
