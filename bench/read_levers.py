#!/usr/bin/env python3
"""`make bench-read-levers` (issue 14, part 2): one tuning lever of the read path at a time, each value measured
in turn A B A B (the host is shared and noisy: alternating keeps drift out of the comparison), on the same tree
as `make bench-read` (1 GiB of 16 KiB-1 MiB files, published read-only to gpu1), read by bench/read_loader.py
with 8 workers, storage1's caches warm (an epoch 2: the lever acts on the path, not on the disks).

Levers (the first value is the baseline; "as found" is what the lab has):
- on gpu1, the multipath map under the mount and its iSCSI disks:
  read_ahead_kb (128, 1024, 4096), nr_requests (as found, 32), max_sectors_kb (1024, 256);
- on gpu1, the iSCSI disks only: scheduler (as found, none), the SCSI device's queue_depth (as found: the
  session's node.session.queue_depth, 32; then 8 and 64);
- the iSCSI session's PDU sizes (pdu_kb: as found, 1024): MaxBurstLength and MaxRecvDataSegmentLength of the
  initiator's node record and MaxBurstLength and MaxXmitDataSegmentLength of storage1's target, then the
  session logged out and in again so that they are negotiated (read back from `iscsiadm -m session -P 2`);
- several sessions per target (sessions: as found, 2, 4): node.session.nr_sessions of the initiator's node
  record, then a re-login; each session is one more path of the version's multipath map (multibus,
  service-time), read back from the map's paths;
- on storage1, the version's LIO backstore: how its commands are submitted (lio_submit_type: as found, 2 =
  queued to a workqueue);
- on storage1: ZFS prefetch (zfs_prefetch_disable: as found, 1);
- the volume's volblocksize (16K, 64K, 128K): the same tree (same seed) in three datasets made with
  `fabricctl dataset create --volblocksize`, each published to gpu1 and read once before the rounds.

`--levers a,b` measures only those; the figures of levers measured in earlier runs are kept in
bench/results/read_levers.json with their own date and commit, and the section of docs/benchmarks.md shows
them all. Everything it makes is taken away at the end and every value it changed is set back. Needs the lab
up and converged (storage1, gpu1).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import read_bench as rb  # noqa: E402
import report  # noqa: E402
from labbench import BenchError, fabricctl_facts, run_bench, say, ssh  # noqa: E402
from report import write_json, write_section  # noqa: E402

NAME = "rb-levers"
MOUNT = f"/datasets/{NAME}/v1"
ROUNDS = 2
BLOCKSIZES = {"16K": NAME, "64K": "rb-levers-64k", "128K": "rb-levers-128k"}  # volblocksize -> dataset
PDU_PARAMS = {  # pdu_kb: (initiator node record names, target TPG parameter names)
    "initiator": ("node.session.iscsi.MaxBurstLength", "node.conn[0].iscsi.MaxRecvDataSegmentLength"),
    "target": ("MaxBurstLength", "MaxXmitDataSegmentLength"),
}


def sh(host: str, command: str, **kw) -> str:
    return ssh(host, command, **kw).stdout.strip()


@dataclass
class Lever:
    """A lever: its values (the first is the baseline; None: as found), what reads it, what sets it, and
    which mount a value is read through (the same one but for volblocksize)."""
    values: list
    where: str
    get: Callable[[], dict]
    put: Callable[[dict], None]
    mount: Callable[[str], str] = lambda value: MOUNT
    scale: int = 1  # a value times this is what is written (pdu_kb: KiB -> bytes)
    readback: Callable[[], dict] | None = None  # what a value became, where it is negotiated (pdu_kb)

    def setting(self, found: dict, value) -> dict:
        return found if value is None else dict.fromkeys(found, str(int(value) * self.scale) if self.scale > 1
                                                          else value)


# ---- where the levers live ------------------------------------------------------------------------

def disks() -> tuple[str, list[str]]:
    """The multipath map under the mount (dm-N) and its iSCSI disks (sdX)."""
    dev = sh(rb.GPU, f"basename $(readlink -f $(findmnt -n -o SOURCE {MOUNT}))")
    return dev, sh(rb.GPU, f"ls /sys/block/{dev}/slaves 2>/dev/null").split()


def sysfs(files: Callable[[], list[str]]) -> tuple[Callable[[], dict], Callable[[dict], None]]:
    def get() -> dict:
        out = {}
        for f in files():
            text = sh(rb.GPU, f"cat {f}")
            chosen = re.search(r"\[(\S+)\]", text)  # scheduler: "none [mq-deadline]"
            out[f] = chosen.group(1) if chosen else text
        return out

    def put(values: dict) -> None:
        for f, value in values.items():
            sh(rb.GPU, f"echo {value} > {f}")
    return get, put


def queue_files(attr: str, *, map_too: bool) -> Callable[[], list[str]]:
    def files() -> list[str]:
        dev, slaves = disks()
        return [f"/sys/block/{d}/queue/{attr}" for d in ([dev] if map_too else []) + slaves]
    return files


def device_files(attr: str) -> Callable[[], list[str]]:
    return lambda: [f"/sys/block/{d}/device/{attr}" for d in disks()[1]]


def zfs_param(name: str) -> tuple[Callable[[], dict], Callable[[dict], None]]:
    path = f"{rb.PARAMS}/{name}"

    def put(values: dict) -> None:
        for p, v in values.items():
            sh(rb.STORAGE, f"echo {v} > {p}")
    return lambda: {path: sh(rb.STORAGE, f"cat {path}")}, put


def sessions() -> list[dict]:
    """The iSCSI sessions under the map: id, target, portal (from sysfs, as the kernel has them)."""
    out = []
    for disk in disks()[1]:
        sid = re.search(r"/session(\d+)/", sh(rb.GPU, f"readlink -f /sys/block/{disk}/device")).group(1)
        cls = f"/sys/class/iscsi_session/session{sid}"
        conn = f"/sys/class/iscsi_connection/connection{sid}:0"
        out.append({"sid": sid, "target": sh(rb.GPU, f"cat {cls}/targetname"),
                    "portal": sh(rb.GPU, f"echo $(cat {conn}/persistent_address):$(cat {conn}/persistent_port)")})
    return out


def tpg(target: str) -> str:
    return f"/sys/kernel/config/target/iscsi/{target}/tpgt_1/param"


def pdu_get() -> dict:
    """Each session's node record and target parameters, keyed 'initiator|target|portal|name' and
    'target|target|name'."""
    out = {}
    for s in sessions():
        record = sh(rb.GPU, f"iscsiadm -m node -T {s['target']} -p {s['portal']}")
        for name in PDU_PARAMS["initiator"]:
            found = re.search(rf"^{re.escape(name)} = (\d+)$", record, re.M)
            if not found:
                raise BenchError(f"{rb.GPU}: the node record of {s['target']} has no {name}")
            out[f"initiator|{s['target']}|{s['portal']}|{name}"] = found.group(1)
        for name in PDU_PARAMS["target"]:
            out[f"target|{s['target']}|{name}"] = sh(rb.STORAGE, f"cat {tpg(s['target'])}/{name}")
    return out


def pdu_put(values: dict) -> None:
    """Set the node records and the target's parameters, then log each session out and in again (they are
    negotiated at login) and wait for the map to have its paths back."""
    pairs = set()
    for key, value in values.items():
        side, target, *rest = key.split("|")
        if side == "initiator":
            portal, name = rest
            sh(rb.GPU, f"iscsiadm -m node -T {target} -p {portal} -o update -n '{name}' -v {value}")
            pairs.add((target, portal))
        else:
            sh(rb.STORAGE, f"echo {value} > {tpg(target)}/{rest[0]}")
    relogin(sorted(pairs), want=len(pairs))


def records() -> list[tuple[str, str]]:
    """(target, portal) of the node records behind the map's sessions (several sessions may share one)."""
    return sorted({(s["target"], s["portal"]) for s in sessions()})


def sessions_get() -> dict:
    """node.session.nr_sessions of each node record behind the map, keyed 'target|portal'."""
    out = {}
    for target, portal in records():
        found = re.search(r"^node\.session\.nr_sessions = (\d+)$",
                          sh(rb.GPU, f"iscsiadm -m node -T {target} -p {portal}"), re.M)
        out[f"{target}|{portal}"] = found.group(1) if found else "1"
    return out


def sessions_put(values: dict) -> None:
    """nr_sessions into each node record, then a re-login (the login makes that many sessions, each a path of
    the map: multibus, service-time) and a wait for every path."""
    for key, value in values.items():
        target, portal = key.split("|")
        sh(rb.GPU, f"iscsiadm -m node -T {target} -p {portal} -o update -n node.session.nr_sessions -v {value}")
    relogin([tuple(k.split("|")) for k in sorted(values)], want=sum(int(v) for v in values.values()))


def paths() -> dict:
    """What the map has after a change: its paths (iSCSI disks) and the sessions behind them."""
    slaves = disks()[1]
    return {"paths": len(slaves), "sessions": len({s["sid"] for s in sessions()})}


def relogin(pairs: list, *, want: int) -> None:
    """Log the node records' sessions out and in again, then wait until the mount is back on its map with at
    least ``want`` paths."""
    # fabricctl's mount unit requires the map's device: with its only path logged out, systemd unmounts it, and
    # it is started again once the map is back
    unit = sh(rb.GPU, f"systemd-escape --path --suffix=mount {MOUNT}")
    for target, portal in pairs:
        sh(rb.GPU, f"iscsiadm -m node -T {target} -p {portal} --logout >/dev/null && "
                   f"iscsiadm -m node -T {target} -p {portal} --login >/dev/null", timeout=120)
    deadline = time.monotonic() + 120
    while True:
        back = ssh(rb.GPU, f"udevadm settle; systemctl start '{unit}' && findmnt -n {MOUNT} >/dev/null && "
                           f"ls /sys/block/$(basename $(readlink -f $(findmnt -n -o SOURCE {MOUNT})))/slaves",
                   check=False)
        if back.returncode == 0 and len(back.stdout.split()) >= want:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"{rb.GPU}: {MOUNT} did not come back on its map with {want} path(s) after the iSCSI "
                             f"re-login: {back.stderr.strip()[-300:]}")
        time.sleep(2)


def negotiated() -> dict:
    """What the sessions negotiated, as `iscsiadm -m session -P 2` shows it."""
    out = {}
    for s in sessions():
        text = sh(rb.GPU, f"iscsiadm -m session -r {s['sid']} -P 2")
        out[s["target"]] = {k: int(v) for k, v in re.findall(r"(MaxBurstLength|MaxRecvDataSegmentLength): (\d+)",
                                                              text)}
    return out


def lio_attrib(name: str) -> tuple[Callable[[], dict], Callable[[dict], None]]:
    """An attribute of the benchmark version's LIO backstore on storage1 (configfs)."""
    def files() -> list[str]:
        found = sh(rb.STORAGE, f"ls -d /sys/kernel/config/target/core/*/*_{NAME}.v1/attrib/{name} 2>/dev/null").split()
        if len(found) != 1:
            raise BenchError(f"{rb.STORAGE}: expected one LIO backstore of {NAME}@v1 with {name}, found {found}")
        return found

    def get() -> dict:
        return {f: sh(rb.STORAGE, f"cat {f}") for f in files()}

    def put(values: dict) -> None:
        for f, value in values.items():
            sh(rb.STORAGE, f"echo {value} > {f}")
    return get, put


LEVERS: dict[str, Lever] = {
    "read_ahead_kb": Lever(["128", "1024", "4096"], "gpu1: the map and its iSCSI disks",
                           *sysfs(queue_files("read_ahead_kb", map_too=True))),
    "nr_requests": Lever([None, "32"], "gpu1: the map and its iSCSI disks",
                         *sysfs(queue_files("nr_requests", map_too=True))),
    "max_sectors_kb": Lever(["1024", "256"], "gpu1: the map and its iSCSI disks",
                            *sysfs(queue_files("max_sectors_kb", map_too=True))),
    "scheduler": Lever([None, "none"], "gpu1: the iSCSI disks", *sysfs(queue_files("scheduler", map_too=False))),
    # at most the iSCSI host's can_queue (113 here: open-iscsi's cmds_max 128 less its reserved tasks)
    "queue_depth": Lever([None, "8", "64"], "gpu1: the iSCSI disks' SCSI devices (the session's queue depth)",
                         *sysfs(device_files("queue_depth"))),
    "pdu_kb": Lever([None, "1024"], "gpu1's node record and storage1's target (MaxBurstLength, "
                                    "MaxRecvDataSegmentLength / MaxXmitDataSegmentLength), then a re-login",
                    pdu_get, pdu_put, scale=1024, readback=negotiated),
    "sessions": Lever([None, "2", "4"], "gpu1's node record (node.session.nr_sessions: sessions per target, each "
                                        "a path of the multipath map), then a re-login",
                      sessions_get, sessions_put, readback=paths),
    # kernel 6.11+: 0 the fabric's default (iSCSI: submitted from the connection's receive thread), 1 direct,
    # 2 queued to a workqueue (the backstore's I/O submitted from another CPU than the one receiving)
    "lio_submit_type": Lever([None, "2"], "storage1: the version's LIO backstore (attrib/submit_type)",
                             *lio_attrib("submit_type")),
    "zfs_prefetch_disable": Lever([None, "1"], "storage1: the zfs module", *zfs_param("zfs_prefetch_disable")),
    "volblocksize": Lever(list(BLOCKSIZES), "storage1: the volume (a dataset each, same tree)",
                          lambda: {}, lambda values: None, lambda value: f"/datasets/{BLOCKSIZES[value]}/v1"),
}


READBACK_CAPTIONS = {  # how the report names what a lever's readback found
    "pdu_kb": "Negotiated by the sessions (`iscsiadm -m session -P 2`)",
    "sessions": "The map's paths and sessions for each `sessions` value",
}


# ---- the run --------------------------------------------------------------------------------------

def lever_names(text: str) -> list[str]:
    names = text.split(",")
    unknown = [n for n in names if n not in LEVERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown lever(s) {', '.join(unknown)}; the levers: {', '.join(LEVERS)}")
    return names


def datasets(lab: dict) -> list[str]:
    return [NAME, *(BLOCKSIZES[b] for b in BLOCKSIZES if b != "16K" and "volblocksize" in lab["levers"])]


def cleanup(lab: dict) -> list[str]:
    left = []
    for name in (NAME, *BLOCKSIZES.values()):
        vol = f"{lab['dataset_root']}/{name}"
        if ssh(rb.STORAGE, f"zfs list {vol}", check=False).returncode == 0:
            ssh(rb.STORAGE, f"fabricctl unpublish {name}@v1 --force", check=False, timeout=900)
            ssh(rb.STORAGE, f"fabricctl dataset destroy {name} --yes", check=False, timeout=900)
        if ssh(rb.STORAGE, f"zfs list {vol}", check=False).returncode == 0:
            left.append(vol)
    return left


def measure(lab: dict) -> dict:
    rb.install_tools()
    for blocksize, name in BLOCKSIZES.items():
        if name in datasets(lab):
            rb.make_version(name, *rb.TREES[rb.SMALL], volblocksize=blocksize)
    for name in datasets(lab):
        rb.read(f"/datasets/{name}/v1", 8, 1, f"{name}: first read (fills storage1's ARC and L2ARC)")
    out: dict = {}
    seed = 100
    for name in lab["levers"]:
        lever = LEVERS[name]
        original = lever.get()
        say(f"{name}: now {sorted(set(original.values()))}; values {lever.values} (None: as found)")
        runs: dict = {str(v): [] for v in lever.values}
        extra: dict = {}
        try:
            try:
                for _ in range(lab["rounds"]):
                    for value in lever.values:
                        lever.put(lever.setting(original, value))
                        if lever.readback is not None:
                            extra[str(value)] = lever.readback()
                        seed += 1
                        runs[str(value)].append(rb.read(lever.mount(value), 8, seed, f"{name}={value}"))
            finally:
                lever.put(original)
        except BenchError as exc:  # this lever could not be set (or set back): said, and the next one is measured
            say(f"{name}: NOT measured: {exc}")
            out[name] = {"where": lever.where, "found": original, "error": str(exc)}
            continue
        base = str(lever.values[0])
        mb = {v: statistics.mean(r["mb_s"] for r in rs) for v, rs in runs.items()}
        out[name] = {"where": lever.where, "found": original, "runs": runs,
                     "mean_mb_s": {v: round(m, 1) for v, m in mb.items()},
                     "over_first": {v: round(m / mb[base], 3) for v, m in mb.items()}}
        if extra:
            out[name]["negotiated"] = extra
    return out


JSON = Path(__file__).resolve().parent / "results" / "read_levers.json"


def merged(earlier: dict, res: dict, date: str, commit: str) -> dict:
    """bench/results/read_levers.json after a run: the levers it measured, and those measured by earlier runs
    (each keeps the date and commit of the run that measured it)."""
    figures = {k: dict(v) for k, v in (earlier.get("figures") or {}).items() if k in LEVERS}
    for r in figures.values():
        r.setdefault("date", earlier.get("date"))
        r.setdefault("commit", earlier.get("commit"))
    for name, r in res.items():
        figures[name] = {"date": date, "commit": commit, **r}
    figures = {k: figures[k] for k in LEVERS if k in figures}
    ratios = {f"{name}_{v}_over_{next(iter(r['runs']))}": x for name, r in figures.items() if "runs" in r
              for v, x in r["over_first"].items() if v != next(iter(r["runs"]))}
    return {"date": date, "commit": commit, "lab": "trixie lab (TCG), storage1 and gpu1", "figures": figures,
            "ratios": ratios}


def section(doc: dict) -> list[str]:
    figures = doc["figures"]
    out = ["## Issue 14: read-path levers, one at a time", "",
           f"Measured by `make bench-read-levers` (last run {doc['date'][:16].replace('T', ' ')} UTC, commit "
           f"{doc['commit']}; each lever's own run in the table): bench/read_loader.py, 8 workers, the bench-read "
           "tree (1 GiB, 16 KiB-1 MiB files) over iSCSI (ext4) on gpu1, storage1's caches warm; each value read "
           f"{ROUNDS} times (or as many as its runs list), the values in turn (A B A B). \"as found\" is the lab's "
           "value.", "",
           "| lever | set on | value | MB/s (mean) | over the first value | runs (MB/s) | ARC+L2ARC hits | measured |",
           "|---|---|---|---|---|---|---|---|"]
    figures = {k: figures[k] for k in LEVERS if k in figures}  # the JSON file has them sorted by name
    failed = {name: r for name, r in figures.items() if "error" in r}
    for name, r in figures.items():
        order = [str(v) for v in LEVERS[name].values]
        for v in sorted(r.get("mean_mb_s", {}), key=lambda v: order.index(v) if v in order else len(order)):
            shown = v if v != "None" else f"as found ({', '.join(sorted(set(r['found'].values())))})"
            hits = ", ".join(str(x.get("cache_hit_ratio")) for x in r["runs"][v])
            out.append(f"| {name} | {r.get('where', 'gpu1: the map and its iSCSI disks')} | {shown} | "
                       f"{r['mean_mb_s'][v]} | {r['over_first'][v]} | "
                       f"{', '.join(str(x['mb_s']) for x in r['runs'][v])} | {hits} | "
                       f"{str(r.get('date'))[:16].replace('T', ' ')}, {r.get('commit')} |")
    for name, r in failed.items():
        out += ["", f"{name} ({r['where']}) was not measured: {r['error']}"]
    for name, caption in READBACK_CAPTIONS.items():
        seen = figures.get(name, {}).get("negotiated")  # what the lever's readback found for each value
        if seen:
            order = [str(v) for v in LEVERS[name].values]  # the lever's order, as measured (the file sorts keys)
            out += ["", caption + ": " + "; ".join(
                f"{v}: {json.dumps(seen[v], sort_keys=True)}"
                for v in sorted(seen, key=lambda v: order.index(v) if v in order else len(order)))]
    out.append("")
    return out


def rows(lab: dict, res: dict, when: str) -> list[str]:
    commit = report.commit()
    date = report.now()
    try:
        earlier = json.loads(JSON.read_text())
    except (OSError, ValueError):
        earlier = {}
    doc = merged(earlier, res, date, commit)
    write_json("read_levers", doc)
    return section(doc)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levers", type=lever_names, default=list(LEVERS), metavar="A,B",
                   help=f"measure only these (default all: {', '.join(LEVERS)})")
    p.add_argument("--rounds", type=int, default=ROUNDS, metavar="N",
                   help=f"read each value N times, the values in turn (default {ROUNDS})")
    p.add_argument("--cleanup", action="store_true", help="only remove what an earlier run left, then exit")
    p.add_argument("--render", action="store_true", help="only write the report section again from "
                   "bench/results/read_levers.json (nothing is measured)")
    a = p.parse_args()
    if a.render:
        write_section("read-levers", section(json.loads(JSON.read_text())))
        return 0
    return run_bench("bench-read-levers", "read-levers", checking="storage1 and gpu1 converged",
                     preflight=lambda: {**fabricctl_facts(rb.STORAGE, rb.GPU), "levers": a.levers,
                                        "rounds": a.rounds},
                     leftovers=cleanup, cleanup_only=a.cleanup, measure=measure, cleanup=cleanup, rows=rows)


if __name__ == "__main__":
    sys.exit(main())
