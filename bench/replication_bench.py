#!/usr/bin/env python3
"""`make bench-replication` (issue 13): `fabricctl replicate` of a version from storage1 to storage2 against
the floor (a bare `zfs send | ssh zfs receive` of the same snapshot) and against syncoid (Debian's sanoid
package) doing the same, measured in one run; then an incremental replication of a version in which 5 % of
the files changed, against the full one.

Needs the lab up with storage2 and fabricctl on both storage nodes (`make lab-up STORAGE2=1`, then
`.venv/bin/ansible-playbook playbooks/site.yml`). On storage1 the bench makes its own datasets (benchrepl1g,
benchrepl4g: random files of 1-8 MiB, like already-compressed training samples), seals v1 and runs, for each
size, the floor, fabricctl and (1 GiB) syncoid, one after the other, each into its own new volume on storage2.
The floor and syncoid use a key of their own authorized on storage2 for the run (fabricctl's key there runs
only replica-serve), with the same OpenSSH client and host keys. Every ZFS object it makes is destroyed at
the end; the key goes too. Writes its section of docs/benchmarks.md and bench/results/replication.json.
Absolute figures are bound by software emulation (TCG); compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402
from labbench import BenchError, fabricctl_facts, run_bench, say, ssh, timed  # noqa: E402
from report import write_json  # noqa: E402

SRC, DST = "storage1", "storage2"
SIZES = {"1g": 1024, "4g": 4096}  # MiB of files per dataset
SYNCOID = ("1g",)
KEY = "/root/.ssh/bench_replication"
MARK = "bench-replication"
KNOWN = "/etc/fabricctl/known_hosts"


def sh(host: str, command: str, **kw) -> str:
    return ssh(host, command, **kw).stdout.strip()


def preflight() -> dict:
    facts = fabricctl_facts(SRC)
    sh(DST, "true")
    addr = sh(SRC, "python3 -c \"import yaml; print(yaml.safe_load(open('/etc/fabricctl/config.yml'))"
                   "['storage_nodes']['storage2']['address'])\"", check=False)
    if not addr:
        raise BenchError("fabricctl's configuration on storage1 names no storage2: run playbooks/site.yml with "
                         "storage2 up (make lab-up STORAGE2=1)")
    free = int(sh(SRC, f"zfs get -H -p -o value available {facts['dataset_root']}"))
    if free < (sum(SIZES.values()) + 2048) << 20:
        raise BenchError(f"{facts['dataset_root']} on storage1 has {free >> 20} MiB free")
    return {**facts, "dst_addr": addr, "zfs": sh(SRC, "cat /sys/module/zfs/version")}


def names(lab: dict, size: str) -> dict:
    root = lab["dataset_root"]
    return {"name": f"benchrepl{size}", "src": f"{root}/benchrepl{size}", "floor": f"{root}/benchfloor{size}",
            "sync": f"{root}/benchsync{size}"}


def cleanup(lab: dict) -> list[str]:
    left = []
    for size in SIZES:
        n = names(lab, size)
        sh(SRC, f"zfs list {n['src']} >/dev/null 2>&1 && fabricctl dataset destroy {n['name']} --yes >/dev/null",
           check=False)
        sh(SRC, f"zfs destroy -r {n['src']} 2>/dev/null", check=False)
        for vol in (n["src"], n["floor"], n["sync"]):
            sh(DST, f"zfs destroy -r {vol} 2>/dev/null", check=False)
            if sh(DST, f"zfs list -H -o name {vol} 2>/dev/null", check=False):
                left.append(f"{DST}:{vol}")
        if sh(SRC, f"zfs list -H -o name {n['src']} 2>/dev/null", check=False):
            left.append(f"{SRC}:{n['src']}")
    sh(DST, f"sed -i '/ {MARK}$/d' /root/.ssh/authorized_keys", check=False)
    sh(SRC, f"rm -f {KEY} {KEY}.pub", check=False)
    return left


def leftovers(lab: dict) -> list[str]:
    return cleanup(lab)


def ssh_to_dst(lab: dict) -> str:
    return (f"ssh -i {KEY} -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={KNOWN} "
            f"root@{lab['dst_addr']}")


def staging(lab: dict, name: str) -> str:
    """The staging volume's mount (dataset create and seal leave it mounted; ingest of nothing mounts it)."""
    where = f"/srv/fabricctl/staging/{name}"
    sh(SRC, f"mountpoint -q {where} || fabricctl dataset ingest {name} /var/empty/ --json >/dev/null")
    return where


def fill(lab: dict, size: str) -> None:
    n = names(lab, size)
    mib = SIZES[size]
    say(f"{n['name']}: {mib} MiB of random files, sealed as v1")
    sh(SRC, f"fabricctl dataset create {n['name']} --size {int(mib * 1.25)}M --json >/dev/null")
    # files of 1..8 MiB written straight into the staging volume's mount ("any other tool" works), then sealed
    sh(SRC, f"cd {staging(lab, n['name'])} && left={mib}; i=0; while [ $left -gt 0 ]; do m=$(( (i % 8) + 1 )); "
            "[ $m -gt $left ] && m=$left; head -c ${m}M /dev/urandom > f$i; left=$((left - m)); i=$((i + 1)); done; "
            "sync", timeout=3600)
    sh(SRC, f"fabricctl dataset seal {n['name']} v1 --json >/dev/null", timeout=3600)


def transfer_bytes(lab: dict, vol: str) -> int:
    out = sh(SRC, f"zfs send -nP -p -c -L -e {vol}@v1 | awk '/^size/ {{print $2}}'")
    return int(out or 0)


def measure(lab: dict) -> dict:
    say("a key of the bench's own for the floor and syncoid, authorized on storage2 for this run")
    sh(SRC, f"rm -f {KEY} {KEY}.pub && ssh-keygen -q -t ed25519 -N '' -C {MARK} -f {KEY}")
    pub = sh(SRC, f"cat {KEY}.pub")
    ssh(DST, "cat >> /root/.ssh/authorized_keys", input_text=pub.split(" " + MARK)[0] + f" {MARK}\n")
    res: dict = {"sizes": {}}
    for size in SIZES:
        fill(lab, size)
        n = names(lab, size)
        r = res["sizes"][size] = {"stream_bytes": transfer_bytes(lab, n["src"])}
        say(f"{size}: floor (zfs send -p -c -L -e | ssh | zfs receive -s -u)")
        t = timed(SRC, f"zfs send -p -c -L -e {n['src']}@v1 | {ssh_to_dst(lab)} zfs receive -s -u {n['floor']}",
                  timeout=7200)
        r["floor_s"] = t.node
        say(f"{size}: fabricctl replicate")
        t = timed(SRC, f"fabricctl replicate {n['name']}@v1 --to {DST} --json", timeout=7200)
        r["fabricctl_s"] = t.node
        r["fabricctl_sent"] = t.json()["nodes"][0]["transfers"][0]["sent_bytes"]
        if size in SYNCOID:
            say(f"{size}: syncoid (its defaults; --no-sync-snap: the existing v1)")
            t = timed(SRC, f"syncoid --no-sync-snap --quiet --sshkey={KEY} --sshoption=UserKnownHostsFile={KNOWN} "
                           f"--sshoption=StrictHostKeyChecking=yes {n['src']} root@{lab['dst_addr']}:{n['sync']}",
                      timeout=7200)
            r["syncoid_s"] = t.node
        for vol in ("floor", "sync"):
            sh(DST, f"zfs destroy -r {n[vol]} 2>/dev/null", check=False)
    say("incremental: 5 % of benchrepl1g's files rewritten, sealed as v2, replicated")
    n = names(lab, "1g")
    sh(SRC, f"cd {staging(lab, n['name'])} && files=$(ls f* | wc -l); k=$(( files / 20 )); "
            "for f in $(ls f* | head -n $k); do s=$(stat -c %s $f); head -c $s /dev/urandom > $f; done; sync",
       timeout=3600)
    sh(SRC, f"fabricctl dataset seal {n['name']} v2 --json >/dev/null", timeout=3600)
    t = timed(SRC, f"fabricctl replicate {n['name']}@v2 --to {DST} --json", timeout=7200)
    tr = t.json()["nodes"][0]["transfers"][0]
    res["incremental"] = {"seconds": t.node, "sent_bytes": tr["sent_bytes"], "kind": tr["kind"], "base": tr["base"],
                          "changed_files_fraction": 0.05}
    return res


def rows(lab: dict, res: dict, when: str) -> list[str]:
    s = res["sizes"]
    ratios = {f"replicate_over_floor_{k}": round(v["fabricctl_s"] / v["floor_s"], 3) for k, v in s.items()}
    ratios.update({f"replicate_over_syncoid_{k}": round(v["fabricctl_s"] / v["syncoid_s"], 3)
                   for k, v in s.items() if "syncoid_s" in v})
    inc, full = res["incremental"], s["1g"]
    ratios["incremental_over_full_1g_seconds"] = round(inc["seconds"] / full["fabricctl_s"], 3)
    ratios["incremental_over_full_1g_bytes"] = round(inc["sent_bytes"] / full["fabricctl_sent"], 3)
    commit = report.commit()
    figures = {**res, **stall_figures()}
    write_json("replication", {"date": report.now(),
                               "commit": commit, "lab": f"storage1 -> storage2 of the trixie lab (TCG, 2 vCPU "
                               f"each), OpenZFS {lab['zfs']}", "figures": figures, "ratios": ratios})
    table = ["| version | stream | floor: zfs send \\| ssh \\| zfs receive | fabricctl replicate | syncoid | "
             "fabricctl / floor | fabricctl / syncoid |", "|---|---|---|---|---|---|---|"]
    for k, v in s.items():
        sync = f"{v['syncoid_s']:.1f} s" if "syncoid_s" in v else "-"
        table.append(f"| {SIZES[k]} MiB | {v['stream_bytes'] / 2**20:.0f} MiB | {v['floor_s']:.1f} s | "
                     f"{v['fabricctl_s']:.1f} s | {sync} | {ratios[f'replicate_over_floor_{k}']} | "
                     f"{ratios.get(f'replicate_over_syncoid_{k}', '-')} |")
    return ["## Issue 13: replication between storage nodes (storage1 -> storage2, TCG)", "",
            f"Measured in one run by `make bench-replication` on {when} at commit {commit} (OpenZFS {lab['zfs']}). "
            "Each dataset is random files of 1-8 MiB sealed as v1; each transfer goes into a new volume on "
            "storage2, one after the other, timed on storage1 (GNU time). The floor is the bare pipe with the same "
            "send flags fabricctl uses and the same OpenSSH client; syncoid runs with its defaults "
            "(--no-sync-snap, so it sends the existing v1; it adds pv/mbuffer/lzop to the pipe when they are "
            "installed, as on these nodes). One run of each: the host is shared, so single figures are noisy. "
            "Figures also in `bench/results/replication.json`.", "", *table, "",
            f"Incremental: 5 % of the 1 GiB dataset's files rewritten and sealed as v2; `fabricctl replicate` sent "
            f"{inc['sent_bytes'] / 2**20:.1f} MiB ({inc['kind']} from {inc['base']}) in {inc['seconds']:.1f} s, "
            f"{ratios['incremental_over_full_1g_bytes']} of the full send's bytes and "
            f"{ratios['incremental_over_full_1g_seconds']} of its time.", "",
            "Read stalls during a storage-node reboot (single path against multipath) are measured by "
            "`make bench-multipath` (its section below); it writes them into `bench/results/replication.json` too.",
            "", "Absolute numbers are bound by software emulation; compare ratios."]


def stall_figures() -> dict:
    """The stall figures `make bench-multipath` wrote into replication.json (kept when this bench rewrites it)."""
    path = Path(__file__).resolve().parent / "results" / "replication.json"
    keys = ("multipath_max_stall_s", "single_path_max_stall_s", "multipath_read_errors", "single_path_read_errors",
            "stall_note")
    try:
        old = json.loads(path.read_text())["figures"]
    except (OSError, ValueError, KeyError):
        old = {}
    found = {k: old[k] for k in keys if k in old}
    return found or {"multipath_max_stall_s": None, "single_path_max_stall_s": None,
                     "stall_note": "not measured yet: make bench-multipath"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cleanup-only", action="store_true", help="remove what an interrupted run left")
    parser.add_argument("--sizes", default=",".join(SIZES), help="which sizes to run (default: 1g,4g)")
    args = parser.parse_args()
    for key in [k for k in SIZES if k not in args.sizes.split(",")]:
        del SIZES[key]
    if "1g" not in SIZES:
        print("bench-replication: the 1g size is required (syncoid and the incremental run on it)", file=sys.stderr)
        return 2
    return run_bench("bench-replication", "replication", checking="storage1 and storage2 up, fabricctl on both",
                     preflight=preflight, leftovers=leftovers, cleanup_only=args.cleanup_only, measure=measure,
                     cleanup=cleanup, rows=rows, partial=lambda: json.dumps({"sizes": list(SIZES)}))


if __name__ == "__main__":
    sys.exit(main())
