#!/usr/bin/env python3
"""`make bench-native` (issue 27, item 4): the iSCSI target's own efficiency, measured with a native initiator.

bench-read's ratios measure gpu1's kernel initiator, which runs on one emulated (TCG) vCPU: it, not the target,
caps the reads through a GPU node on this lab. Here the initiator is libiscsi's `iscsi-perf` (Debian
libiscsi-bin), a user-space initiator run natively on this host inside the lab's network namespace
(`ip netns exec NS`), logged in as a granted initiator: gpu1's initiator name with gpu1's own CHAP credentials
(mutual CHAP too), read from fabricctl's configuration on storage1. The version it reads is published as the
product publishes it (`fabricctl dataset create`, the tree written, `fabricctl dataset seal`, `fabricctl
publish NAME@v1 --to gpu1`); the baseline is storage1 reading the same snapshot device itself (fio, --direct=1,
libaio, the same request size, 32 in flight, the same seconds).

Two workloads, 32 requests in flight each: sequential 1 MiB reads, random 128 KiB reads (iscsi-perf puts a
random read at any logical block, so fio is given --blockalign of the LUN's logical block size to read the same
way). Caches in the same state: each path reads sequentially once first (both warm), then the rounds alternate
the paths, A B A B (iscsi-perf, fio, iscsi-perf, fio). A ratio is the median over the rounds of iscsi-perf's
MB/s over fio's in the same round.

The CHAP secrets never reach a command line: libiscsi reads them from its environment (LIBISCSI_CHAP_USERNAME,
LIBISCSI_CHAP_PASSWORD, and LIBISCSI_CHAP_TARGET_USERNAME / _PASSWORD for mutual CHAP; lib/init.c,
iscsi_parse_url), and a process's environment (/proc/PID/environ) is readable by its own user alone, where its
argv (/proc/PID/cmdline) is readable by every user. They are read over SSH into this process's memory and are
never printed, logged or written.

--levers NAME=VALUE,... also measures storage-side levers, each A B A B (as found, the value) through
iscsi-perf: `attrib.NAME=V` an attribute of the version's LIO block backstore (configfs attrib/NAME), `zfs.NAME=V`
a ZFS module parameter (then the local reads too, since they share it). Every value is set back.

Needs the lab up and converged (storage1, gpu1) and root on this host (the namespace; libiscsi-bin is installed
when missing). Everything it makes is taken away at the end (the version, its export, iscsi-perf's sessions:
checked in configfs and in storage1's TCP connections). Writes bench/results/native_read.json and its section of
docs/benchmarks.md, with the GPU node's (emulated initiator's) ratios of bench/results/read.json beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import read_bench as rb  # noqa: E402
import report  # noqa: E402
from labbench import OWNER_PROP, REPO, BenchError, fabricctl_facts, owner_of, put, run_bench, say, ssh  # noqa: E402
from report import write_json, write_section  # noqa: E402

STORAGE, GPU = rb.STORAGE, rb.GPU
NAME = "nr-native"
OWNER = "bench-native"
SPEC = "--total 1G --min 64M --max 256M"  # the tree: 1 GiB of 64-256 MiB files (random bytes) in a 1600 MiB volume
FS = "ext4"
IN_FLIGHT = 32
SECONDS = 15
ROUNDS = 2
WORKLOADS = {"seq1m": {"bytes": 1 << 20, "random": False}, "rand128k": {"bytes": 128 << 10, "random": True}}
PACKAGE = "libiscsi-bin"
CONFIGFS = "/sys/kernel/config/target"
RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {"native_iscsi_over_local_seq1m": 0.95, "native_iscsi_over_local_rand128k": 0.9}
EMULATED = ("fio_128k_qd32_iscsi_over_zvol_iops", "fio_4k_qd32_iscsi_over_zvol_iops", "iscsi_over_local_8w_epoch2",
            "iscsi_over_local_8w_epoch1_warmed")

# On the storage node: a host's initiator name and CHAP credentials as fabricctl's own config loader has them
# (argv[1]: the host). Printed as JSON to the benchmark over SSH: never to a terminal or a log.
CREDENTIALS = r'''
import json, shutil, subprocess, sys
interp = open(shutil.which("fabricctl")).readline()[2:].strip()
where = subprocess.run([interp, "-c", "import os, fabric_core; print(os.path.dirname(os.path.dirname("
                        "fabric_core.__file__)))"], capture_output=True, text=True, check=True).stdout.strip()
sys.path.insert(0, where)
from fabricctl import config
h = config.load().hosts.get(sys.argv[1])
if h is None:
    print(json.dumps({"error": f"fabricctl's config has no host {sys.argv[1]}"})); sys.exit(0)
c = h.chap
print(json.dumps({"initiator": h.initiator, "chap": None if c is None else {
    "userid": c.userid, "password": c.password, "mutual_userid": c.mutual_userid,
    "mutual_password": c.mutual_password}}))
'''

# On the storage node: the LIO export of a device (argv[1]) to an initiator (argv[2]): target, TPG, the
# initiator's mapped LUN, the backstore (configfs path, udev_path, logical block size) and the portals.
EXPORT = r'''
import glob, json, os, sys
want, initiator = os.path.realpath(sys.argv[1]), sys.argv[2]
found = []
for lun in sorted(glob.glob("/sys/kernel/config/target/iscsi/*/tpgt_*/lun/lun_*")):
    for entry in os.listdir(lun):
        so = os.path.join(lun, entry)
        if not os.path.islink(so):
            continue
        so = os.path.realpath(so)
        try:
            udev = open(os.path.join(so, "udev_path")).read().strip()
        except OSError:
            continue
        if not udev or os.path.realpath(udev) != want:
            continue
        tpg = lun.split("/lun/")[0]
        mapped = None
        for m in glob.glob(os.path.join(tpg, "acls", initiator, "lun_*")):
            for n in os.listdir(m):
                p = os.path.join(m, n)
                if os.path.islink(p) and os.path.realpath(p) == os.path.realpath(lun):
                    mapped = int(m.rsplit("_", 1)[1])
        found.append({"target": tpg.split("/")[-2], "tpg": tpg, "mapped_lun": mapped, "backstore": so,
                      "udev_path": udev, "block_size": int(open(os.path.join(so, "attrib", "block_size")).read()),
                      "portals": sorted(os.listdir(os.path.join(tpg, "np")))})
print(json.dumps(found))
'''

RECORD: dict = {}  # --record DIR: the raw outputs of the first run of each kind are written there (unit tests' data)
CREDS: dict = {}  # gpu1's initiator name and CHAP credentials: kept here alone (never in MEASURED or the lab dict)
STARTED: list[subprocess.Popen] = []  # iscsi-perf processes this run started (killed by clean-up if still running)


def sh(host: str, command: str, **kw) -> str:
    return ssh(host, command, **kw).stdout.strip()


# ---- pure parts: the tools' outputs, the arithmetic, the command lines (unit tested) -------------------------

AVERAGE = re.compile(r"iops average (\d+) \((\d+) MB/s\)")
CURRENT = re.compile(r"lba (\d+), iops current (\d+) \((\d+) MB/s\), iops average (\d+) \((\d+) MB/s\), "
                     r"in_flight (\d+), busy (\d+)")
CAPACITY = re.compile(r"capacity is (\d+) blocks or (\d+) byte")
TRANSFER = re.compile(r"FIXED transfer size of (\d+) blocks \((\d+) byte\)")


def parse_iscsi_perf(text: str) -> dict:
    """iscsi-perf's output (libiscsi 1.19, with -l: a line a second) -> the run's figures.

    The last "iops average N" without "iops current" is the whole run's (printed when the run time is up):
    completed requests per second, a whole number (iscsi-perf truncates it). MB/s (10^6 bytes) is that times
    the request size (its "FIXED transfer size"); iscsi-perf's own MiB figure is truncated further."""
    lines = [x.strip() for x in re.split(r"[\r\n]+", text) if x.strip()]
    if any(x.startswith("ABORTED") for x in lines) or "finished." not in lines:
        raise BenchError("iscsi-perf did not finish its run: " + " | ".join(lines[-4:]))
    size = TRANSFER.search(text)
    cap = CAPACITY.search(text)
    if not size or not cap:
        raise BenchError("iscsi-perf's output has no transfer size or capacity: " + " | ".join(lines[:8]))
    per_second = [{"iops": int(m[2]), "busy": int(m[7])} for m in map(CURRENT.search, lines) if m]
    final = [m for x in lines if "iops current" not in x for m in [AVERAGE.search(x)] if m]
    if not final:
        raise BenchError("iscsi-perf printed no final average: " + " | ".join(lines[-4:]))
    iops, request = int(final[-1][1]), int(size[2])
    blocks, capacity = int(cap[1]), int(cap[2])
    return {"iops": iops, "mb_s": round(iops * request / 1e6, 1), "request_bytes": request,
            "block_size": capacity // blocks if blocks else None, "capacity_bytes": capacity,
            "seconds_logged": len(per_second),
            "iops_per_second": {"min": min((p["iops"] for p in per_second), default=None),
                                "max": max((p["iops"] for p in per_second), default=None)},
            "busy": max((p["busy"] for p in per_second), default=0)}


def parse_fio(text: str) -> dict:
    """fio's JSON (one job) -> its read figures: IOPS, MB/s (10^6 bytes), bytes read, seconds, p99 latency."""
    try:
        read = json.loads(text)["jobs"][0]["read"]
    except (ValueError, KeyError, IndexError) as exc:
        raise BenchError(f"fio printed no job's read figures ({exc}): {text[:300]!r}") from None
    if not read.get("io_bytes"):
        raise BenchError("fio read nothing")
    return {"iops": round(read["iops"], 1), "mb_s": round(read["bw_bytes"] / 1e6, 1), "bytes": read["io_bytes"],
            "seconds": round(read["runtime"] / 1000, 2),
            "p99_ms": round(read["clat_ns"]["percentile"]["99.000000"] / 1e6, 2)}


def chap_env(chap: dict | None) -> dict:
    """libiscsi's environment for CHAP (one-way, and mutual when the host has the target's credentials too)."""
    if not chap:
        return {}
    env = {"LIBISCSI_CHAP_USERNAME": chap["userid"], "LIBISCSI_CHAP_PASSWORD": chap["password"]}
    if chap.get("mutual_userid"):
        env.update(LIBISCSI_CHAP_TARGET_USERNAME=chap["mutual_userid"],
                   LIBISCSI_CHAP_TARGET_PASSWORD=chap["mutual_password"])
    return env


def iscsi_perf_argv(netns: str, initiator: str, portal: str, target: str, lun: int, *, request: int,
                    block_size: int, seconds: int, random: bool, in_flight: int = IN_FLIGHT) -> list[str]:
    """iscsi-perf's command line in the lab's namespace: no credentials in it (chap_env carries them)."""
    if request % block_size:
        raise BenchError(f"a request of {request} bytes is not a whole number of {block_size}-byte blocks")
    return ["ip", "netns", "exec", netns, "iscsi-perf", "-i", initiator, "-m", str(in_flight),
            "-b", str(request // block_size), "-t", str(seconds), "-x", "0", "-l", *(["-r"] if random else []),
            f"iscsi://{portal}/{target}/{lun}"]


def fio_command(device: str, *, request: int, block_size: int, seconds: int, random: bool,
                in_flight: int = IN_FLIGHT) -> str:
    """fio on the storage node, the same reads as iscsi-perf's: random ones at any logical block, uniformly."""
    how = (f"--rw=randread --blockalign={block_size} --norandommap --randrepeat=0" if random else "--rw=read")
    return (f"fio --name=r --filename={shlex.quote(device)} --readonly --direct=1 --ioengine=libaio "
            f"--iodepth={in_flight} {how} --bs={request} --runtime={seconds} --time_based --output-format=json")


def summary(rounds: list[dict]) -> dict:
    """Per workload: each path's MB/s in each round, their medians, and the ratio iscsi-perf / fio in each round
    and its median (the key of the ratio)."""
    out = {}
    for w in WORKLOADS:
        native = [r[w]["native"]["mb_s"] for r in rounds if w in r]
        local = [r[w]["local"]["mb_s"] for r in rounds if w in r]
        per_round = [round(a / b, 3) if b else None for a, b in zip(native, local, strict=True)]
        known = [x for x in per_round if x is not None]
        out[w] = {"native_mb_s": native, "local_mb_s": local, "per_round": per_round,
                  "native_median": round(statistics.median(native), 1) if native else None,
                  "local_median": round(statistics.median(local), 1) if local else None,
                  "ratio": round(statistics.median(known), 3) if known else None}
    return out


def ratios_of(summ: dict) -> dict:
    return {f"native_iscsi_over_local_{w}": s["ratio"] for w, s in summ.items()}


def lever_spec(text: str) -> list[tuple[str, str, str]]:
    """--levers attrib.NAME=V,zfs.NAME=V -> [(kind, name, value)]; anything else refused before the lab is
    touched."""
    out = []
    for item in filter(None, text.split(",")):
        m = re.fullmatch(r"(attrib|zfs)\.([a-z0-9_]+)=([A-Za-z0-9_.-]+)", item)
        if not m:
            raise argparse.ArgumentTypeError(f"{item!r}: expected attrib.NAME=VALUE (the version's LIO backstore) "
                                             "or zfs.NAME=VALUE (a ZFS module parameter)")
        out.append((m[1], m[2], m[3]))
    return out


# ---- the lab ---------------------------------------------------------------------------------------------

def lab_status() -> dict:
    return json.loads(subprocess.run([sys.executable, str(REPO / "lab" / "labctl.py"), "status", "--json"],
                                     capture_output=True, text=True, check=True, timeout=120).stdout)


def ensure_iscsi_perf() -> str:
    """iscsi-perf on this host (libiscsi-bin installed when missing, as the lab installs its host packages)."""
    sys.path.insert(0, str(REPO / "lab"))
    from fabric_lab import host
    if host.missing_packages((PACKAGE,)):
        if os.geteuid() != 0:
            raise BenchError(f"{PACKAGE} (iscsi-perf) is not installed on this host; install it as root "
                             f"(apt-get install {PACKAGE}) or run the benchmark as root")
        say(f"installing {PACKAGE} on this host")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        try:
            host.run(["apt-get", "update", "-q"], env=env, timeout=600)
            host.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", PACKAGE], env=env, timeout=600)
        except (subprocess.SubprocessError, OSError) as exc:
            raise BenchError(f"installing {PACKAGE} failed: {exc}") from None
    if not shutil.which("iscsi-perf"):
        raise BenchError(f"{PACKAGE} is installed but iscsi-perf is not in PATH")
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", PACKAGE], capture_output=True, text=True).stdout


def preflight(levers: list) -> dict:
    if os.geteuid() != 0:
        raise BenchError("run as root: iscsi-perf runs in the lab's network namespace (ip netns exec)")
    status = lab_status()
    if not status.get("netns_present"):
        raise BenchError(f"the lab's network namespace {status.get('netns')} is not there: is the lab up?")
    libiscsi = ensure_iscsi_perf()
    facts = fabricctl_facts(STORAGE, GPU)
    sh(STORAGE, "command -v fio")
    load_credentials()
    for kind, name, _ in levers:
        if kind == "zfs":
            sh(STORAGE, f"test -w {rb.PARAMS}/{name}")
    return {**facts, "netns": status["netns"], "libiscsi": libiscsi, "levers": levers,
            "pids": {vm["name"]: vm["pid"] for vm in status["vms"] if vm.get("pid")},
            "storage_cpus": status.get("storage_cpus"), "tcg_thread": status.get("tcg_thread"),
            "zfs": sh(STORAGE, "cat /sys/module/zfs/version"), "kernel": sh(STORAGE, "uname -r")}


def load_credentials() -> None:
    proc = ssh(STORAGE, f"python3 -c {shlex.quote(CREDENTIALS)} {GPU}", check=False, timeout=120)
    if proc.returncode != 0:  # stderr only: stdout would carry the secrets
        raise BenchError(f"{STORAGE}: reading {GPU}'s credentials from fabricctl's config failed: "
                         f"{proc.stderr.strip()[-300:]}")
    try:
        got = json.loads(proc.stdout)
    except ValueError:
        raise BenchError(f"{STORAGE}: reading {GPU}'s credentials printed no JSON (output not shown)") from None
    if "error" in got:
        raise BenchError(f"{STORAGE}: {got['error']}")
    CREDS.clear()
    CREDS.update(got)


def ours(lab: dict) -> bool:
    vol = f"{lab['dataset_root']}/{NAME}"
    return owner_of(STORAGE, vol) in (OWNER, "", "-")


def native_connections(lab: dict) -> list[str]:
    """storage1's TCP connections on the iSCSI port from anything but a fabric host: iscsi-perf's, from this host."""
    port = lab.get("portal_port", 3260)
    hosts = set(lab["hosts"].values())
    out = sh(STORAGE, f"ss -Htn state established '( sport = :{port} )'", check=False)
    peers = [line.split()[-1] for line in out.splitlines() if line.split()]
    return [p for p in peers if p.rsplit(":", 1)[0].strip("[]") not in hosts]


def sessions_info(export: dict) -> str:
    """The session LIO shows for the initiator's ACL (configfs: acls/IQN/info; open-iscsi's ISID starts 0x00 02 3d,
    libiscsi's random one 0x80)."""
    return sh(STORAGE, f"cat {shlex.quote(export['tpg'])}/acls/{shlex.quote(CREDS['initiator'])}/info 2>/dev/null",
              check=False)


def isids(info: str) -> list[str]:
    return re.findall(r"ISID: (0x[0-9a-f ]+?)\s+TSIH", info)


def wait_no_native(lab: dict, export: dict | None, seconds: float = 60) -> list[str]:
    """Wait (bounded) until no iscsi-perf session is left on storage1; what is left when the time is up."""
    deadline = time.monotonic() + seconds
    while True:
        left = [f"{STORAGE}: a TCP connection from {p} to the iSCSI portal" for p in native_connections(lab)]
        if export is not None:
            left += [f"{STORAGE}: a libiscsi session (ISID {i}) in {export['target']}'s ACL of {CREDS['initiator']}"
                     for i in isids(sessions_info(export)) if i.startswith("0x80")]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(2)


def kill_started() -> None:
    for proc in STARTED:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def cleanup(lab: dict) -> list[str]:
    kill_started()
    left = wait_no_native(lab, None, 30)
    vol = f"{lab['dataset_root']}/{NAME}"
    for kind, name, _ in lab.get("levers", ()):  # a lever left set by an interrupted run is set back
        found = LEVER_FOUND.pop((kind, name), None)
        if found is not None:
            set_lever(lab, kind, name, found, check=False)
    if ssh(STORAGE, f"zfs list {vol}", check=False).returncode == 0:
        if not ours(lab):
            return left + [f"{vol} exists and is not this benchmark's ({OWNER_PROP} is not {OWNER}): left alone"]
        ssh(STORAGE, f"fabricctl unpublish {NAME}@v1 --force", check=False, timeout=900)
        done = ssh(STORAGE, f"fabricctl dataset destroy {NAME} --yes", check=False, timeout=900)
        if done.returncode != 0:
            left.append(f"{vol}: {done.stderr.strip()[-200:]}")
    return left


LEVER_FOUND: dict = {}


def lever_path(lab: dict, kind: str, name: str) -> str:
    return f"{lab['export']['backstore']}/attrib/{name}" if kind == "attrib" else f"{rb.PARAMS}/{name}"


def set_lever(lab: dict, kind: str, name: str, value: str, *, check: bool = True) -> None:
    if kind == "attrib" and "export" not in lab:
        return  # the version (and its backstore) is gone: nothing to set back
    path = lever_path(lab, kind, name)
    ssh(STORAGE, f"echo {shlex.quote(value)} > {shlex.quote(path)}", check=check)
    got = sh(STORAGE, f"cat {shlex.quote(path)}", check=False)
    if check and got != value:
        raise BenchError(f"{STORAGE}: {path} reads {got!r} after writing {value!r}")


def record(name: str, text: str) -> None:
    """With --record DIR: the first output of each kind kept in DIR (iscsi-perf's holds no secret: its URL has
    none, libiscsi takes them from the environment)."""
    where = RECORD.get("dir")
    if where is not None and name not in RECORD.setdefault("done", set()):
        RECORD["done"].add(name)
        where.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(text)


def cpu_ticks(pids: dict) -> dict:
    """CPU time so far (user + system, clock ticks) of each lab VM's QEMU process and of the whole host (its busy
    ticks, from /proc/stat): what a read cost the emulator, read on this host."""
    out = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = int(fields[11]) + int(fields[12])
    out["host"], out["host_total"] = rb.host_cpu()
    return out


def cores(before: dict, after: dict, seconds: float) -> dict:
    """Host cores each VM's QEMU used on average over ``seconds`` (1.0: one core all the time), and the share of
    the host's CPU that was busy."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {n: round((after[n] - t) / hz / seconds, 2) for n, t in before.items()
           if n not in ("host", "host_total") and n in after and seconds > 0}
    total = after["host_total"] - before["host_total"]
    out["host_busy"] = round((after["host"] - before["host"]) / total, 2) if total else None
    return out


def native(lab: dict, workload: str, label: str) -> dict:
    """One iscsi-perf run from this host in the lab's namespace, as gpu1's initiator with its CHAP."""
    e, w = lab["export"], WORKLOADS[workload]
    argv = iscsi_perf_argv(lab["netns"], CREDS["initiator"], e["portal"], e["target"], e["mapped_lun"],
                           request=w["bytes"], block_size=e["block_size"], seconds=lab["seconds"], random=w["random"])
    env = {**os.environ, **chap_env(CREDS.get("chap"))}
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    STARTED.append(proc)
    ticks, started = cpu_ticks(lab["pids"]), time.monotonic()
    try:
        out, err = proc.communicate(timeout=lab["seconds"] + 120)
        used = cores(ticks, cpu_ticks(lab["pids"]), time.monotonic() - started)
    except subprocess.TimeoutExpired:
        kill_started()
        raise BenchError(f"iscsi-perf ({label}) did not end within {lab['seconds'] + 120} s") from None
    if proc.returncode != 0:
        raise BenchError(f"iscsi-perf ({label}) exited {proc.returncode}: {(err or out).strip()[-400:]}")
    record(f"iscsi-perf-{workload}.txt", out)
    res = {**parse_iscsi_perf(out), "cores": used}
    if res["block_size"] != e["block_size"]:
        raise BenchError(f"iscsi-perf saw {res['block_size']}-byte blocks, the backstore has {e['block_size']}")
    left = wait_no_native(lab, e, 30)
    if left:
        raise BenchError("iscsi-perf's session outlived it: " + "; ".join(left))
    say(f"  {label}: iscsi-perf {res['mb_s']} MB/s ({res['iops']} IOPS; per second {res['iops_per_second']['min']}"
        f"-{res['iops_per_second']['max']}; host cores: {used})")
    return res


def local(lab: dict, workload: str, label: str) -> dict:
    e, w = lab["export"], WORKLOADS[workload]
    ticks, started = cpu_ticks(lab["pids"]), time.monotonic()
    out = sh(STORAGE, fio_command(e["udev_path"], request=w["bytes"], block_size=e["block_size"],
                                  seconds=lab["seconds"], random=w["random"]), timeout=lab["seconds"] + 300)
    used = cores(ticks, cpu_ticks(lab["pids"]), time.monotonic() - started)  # the ssh call's second or so too
    record(f"fio-{workload}.json", out)
    res = {**parse_fio(out), "cores": used}
    say(f"  {label}: fio on {STORAGE} {res['mb_s']} MB/s ({res['iops']} IOPS, p99 {res['p99_ms']} ms; host cores: "
        f"{used})")
    return res


def find_export(lab: dict) -> dict:
    dev = f"/dev/zvol/{lab['dataset_root']}/{NAME}@v1"
    found = json.loads(sh(STORAGE, f"python3 -c {shlex.quote(EXPORT)} {shlex.quote(dev)} "
                                   f"{shlex.quote(CREDS['initiator'])}"))
    if len(found) != 1 or found[0]["mapped_lun"] is None:
        raise BenchError(f"{STORAGE}: expected one LIO export of {dev} mapped to {CREDS['initiator']}, found {found}")
    e = found[0]
    ip = lab["portal_ip"]
    ports = [p.rsplit(":", 1)[1] for p in e["portals"] if p.rsplit(":", 1)[0].strip("[]") in (ip, "0.0.0.0", "::")]
    if not ports:
        raise BenchError(f"{STORAGE}: {e['target']} has no portal on {ip} ({e['portals']})")
    e["portal"] = f"{ip}:{ports[0]}"
    e["device"] = dev
    return e


def attributes(e: dict) -> dict:
    """The backstore's attributes as the product leaves them (recorded with the figures)."""
    names = ("block_size", "hw_max_sectors", "max_sectors", "optimal_sectors", "queue_depth", "hw_queue_depth",
             "submit_type", "emulate_write_cache", "emulate_tpu", "is_nonrot")
    text = sh(STORAGE, "cd " + shlex.quote(e["backstore"] + "/attrib") + " && for a in " + " ".join(names)
              + "; do [ -e $a ] && echo \"$a $(cat $a)\"; done; true")
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


MEASURED: dict = {}


def measure(lab: dict) -> dict:
    res = MEASURED
    put(STORAGE, rb.TREE, (Path(__file__).resolve().parent / "make_tree.py").read_text())
    res["tree"] = rb.make_version(NAME, FS, SPEC)
    sh(STORAGE, f"zfs set {OWNER_PROP}={OWNER} {lab['dataset_root']}/{NAME}")
    lab["export"] = e = find_export(lab)
    res["export"] = {k: e[k] for k in ("target", "mapped_lun", "portal", "device", "udev_path", "block_size")}
    res["backstore_attributes"] = attributes(e)
    res["volblocksize"] = sh(STORAGE, f"zfs get -Hp -o value volblocksize {lab['dataset_root']}/{NAME}")
    res["kernel_session_before"] = isids(sessions_info(e))
    say(f"{NAME}@v1: {e['target']} LUN {e['mapped_lun']} at {e['portal']}, {e['block_size']}-byte blocks; "
        f"{lab['seconds']} s a read, {IN_FLIGHT} in flight")
    say("warming: each path reads sequentially once")
    res["warm"] = {"native": native(lab, "seq1m", "warm"), "local": local(lab, "seq1m", "warm")}
    res["rounds"] = []
    for n in range(1, lab["rounds"] + 1):
        say(f"round {n} of {lab['rounds']}")
        res["rounds"].append({w: {"native": native(lab, w, f"{w} round {n}"), "local": local(lab, w, f"{w} round {n}")}
                              for w in WORKLOADS})
    res["summary"] = summary(res["rounds"])
    res["levers"] = {}
    for kind, name, value in lab["levers"]:
        res["levers"][f"{kind}.{name}={value}"] = lever(lab, kind, name, value)
    res["kernel_session_after"] = isids(sessions_info(e))
    res["native_sessions_left"] = wait_no_native(lab, e, 30)
    return res


def lever(lab: dict, kind: str, name: str, value: str) -> dict:
    """A B A B: the lever as found, then VALUE, each read by iscsi-perf (and by fio, for a ZFS parameter)."""
    path = lever_path(lab, kind, name)
    found = sh(STORAGE, f"cat {shlex.quote(path)}")
    say(f"lever {kind}.{name}: {found} (as found) against {value}")
    runs: dict = {found: [], value: []}
    LEVER_FOUND[(kind, name)] = found
    try:
        for n in range(1, lab["rounds"] + 1):
            for v in (found, value):
                set_lever(lab, kind, name, v)
                r = {w: {"native": native(lab, w, f"{name}={v} {w} round {n}")} for w in WORKLOADS}
                if kind == "zfs":
                    for w in WORKLOADS:
                        r[w]["local"] = local(lab, w, f"{name}={v} {w} round {n}")
                runs[v].append(r)
    finally:
        set_lever(lab, kind, name, found, check=False)
        LEVER_FOUND.pop((kind, name), None)
    return {"path": path, "found": found, "value": value, "runs": runs, **lever_ratios(runs, found, value)}


def lever_ratios(runs: dict, found: str, value: str) -> dict:
    """The lever's effect per workload: median over rounds of iscsi-perf's MB/s with VALUE over as found (and,
    where the local reads were measured too, the native/local ratio under each value)."""
    out: dict = {"over_found": {}, "native_over_local": {}}
    for w in WORKLOADS:
        pairs = [b[w]["native"]["mb_s"] / a[w]["native"]["mb_s"] for a, b in zip(runs[found], runs[value], strict=True)
                 if a[w]["native"]["mb_s"]]
        out["over_found"][w] = round(statistics.median(pairs), 3) if pairs else None
        if all("local" in r[w] for rs in runs.values() for r in rs):
            out["native_over_local"][w] = {v: round(statistics.median(r[w]["native"]["mb_s"] / r[w]["local"]["mb_s"]
                                                                      for r in rs), 3) for v, rs in runs.items()}
    return out


# ---- the report ------------------------------------------------------------------------------------------

def emulated() -> dict:
    """The GPU node's (emulated initiator's) ratios as bench/results/read.json has them, with its date and commit."""
    try:
        doc = json.loads((RESULTS / "read.json").read_text())
    except (OSError, ValueError):
        return {}
    return {"date": doc.get("date"), "commit": doc.get("commit"),
            "ratios": {k: doc.get("ratios", {}).get(k) for k in EMULATED}}


def rows(lab: dict, res: dict, when: str) -> list[str]:
    cores = os.cpu_count()
    doc = {"date": report.now(), "commit": report.commit(),
           "lab": f"trixie lab (TCG, {lab.get('tcg_thread')}-threaded), kernel {lab['kernel']}, OpenZFS {lab['zfs']}, "
                  f"storage1 ({lab.get('storage_cpus')} vCPU); initiator: iscsi-perf (libiscsi {lab['libiscsi']}) "
                  f"native on the host ({cores} cores) in the lab's namespace",
           "figures": {**res, "seconds": lab["seconds"], "in_flight": IN_FLIGHT, "host_cores": cores},
           "ratios": ratios_of(res["summary"]),
           "emulated_initiator": emulated()}
    write_json("native_read", doc)
    return section(doc, when)


def section(doc: dict, when: str) -> list[str]:
    f, ratios = doc["figures"], doc["ratios"]
    e, tree = f["export"], f["tree"]
    out = ["## Issue 27: the target measured with a native initiator", "",
           f"Measured in one run by `make bench-native` on {when} at commit {doc['commit']} ({doc['lab']}). A "
           f"version published as the product publishes it ({NAME}@v1: {tree['files']} files, "
           f"{tree['bytes'] / 2**30:.2f} GiB of random bytes in a {rb.VOLSIZE} {FS} volume, volblocksize "
           f"{int(f['volblocksize']) // 1024}K; `fabricctl publish {NAME}@v1 --to gpu1`) read over iSCSI by "
           "libiscsi's `iscsi-perf` running natively on the host in the lab's namespace, logged in as gpu1's "
           "initiator with gpu1's CHAP (from the environment, not the command line), against storage1 reading "
           f"the same snapshot device ({e['udev_path']}) with fio (--direct=1, libaio). {f['in_flight']} requests in "
           f"flight, {f['seconds']} s a read; each path read sequentially once first (both warm), then the paths "
           "alternate A B A B. Ratio: median over the rounds of iscsi-perf's MB/s over fio's in the same round. "
           "Figures also in `bench/results/native_read.json`.", "",
           "| read | round | iscsi-perf MB/s (IOPS) | fio on storage1 MB/s (IOPS) | ratio |", "|---|---|---|---|---|"]
    w0 = f["warm"]
    out.append(f"| seq 1 MiB, warm-up (not compared) | - | {w0['native']['mb_s']} ({w0['native']['iops']}) | "
               f"{w0['local']['mb_s']} ({w0['local']['iops']}) | - |")
    labels = {"seq1m": "seq 1 MiB", "rand128k": "random 128 KiB"}
    for w, s in f["summary"].items():
        for n, r in enumerate(f["rounds"], 1):
            a, b = r[w]["native"], r[w]["local"]
            out.append(f"| {labels[w]} | {n} | {a['mb_s']} ({a['iops']}) | {b['mb_s']} ({b['iops']}) | "
                       f"{s['per_round'][n - 1]} |")
        out.append(f"| {labels[w]} | median | {s['native_median']} | {s['local_median']} | **{s['ratio']}** |")
    attrs = f.get("backstore_attributes") or {}
    if attrs:
        out += ["", "The version's LIO block backstore as the product made it: "
                + ", ".join(f"{k} {v}" for k, v in sorted(attrs.items())) + "."]
    lv = f.get("levers") or {}
    if lv:
        out += ["", "Storage-side levers, A B A B (as found, the value), read by iscsi-perf (and by fio for a ZFS "
                "parameter):", "", "| lever | as found | value | seq 1 MiB value/found | random 128 KiB value/found |"
                " iscsi-perf MB/s, seq/random, by round |", "|---|---|---|---|---|---|"]
        for key, r in lv.items():
            runs = "; ".join(f"{v}: " + ", ".join("/".join(str(x[w]["native"]["mb_s"]) for w in WORKLOADS)
                                                  for x in r["runs"][v]) for v in (r["found"], r["value"]))
            out.append(f"| {key.split('=')[0]} | {r['found']} | {r['value']} | {r['over_found'].get('seq1m')} | "
                       f"{r['over_found'].get('rand128k')} | {runs} |")
    out += cpu_lines(f)
    left = f.get("native_sessions_left")
    out += ["", "iscsi-perf's sessions after the run: " + ("none left (storage1's TCP connections on the portal "
            "and the ACL's session in configfs)" if not left else "; ".join(left)) + "."]
    em = doc.get("emulated_initiator") or {}
    short = [k for k, t in TARGETS.items() if ratios.get(k) is not None and ratios[k] < t]
    if short:
        out += ["", "What this run can and cannot say: " + ", ".join(short) + " fell short of the target. Every byte "
                "of the iSCSI read crosses the lab's emulated network: storage1's guest TCP stack and LIO run on "
                "its emulated (TCG) vCPUs, and its virtual NIC is served by its QEMU process on the same two host "
                "cores as iscsi-perf and everything else on this host; the local read spends no CPU on any of that. "
                "Where the two paths share the storage (the same device, the same warm ARC and L2ARC, alternating "
                "rounds), the ratio is what that path costs this emulator per byte, not what LIO costs on a storage "
                "node with its own CPUs."]
    out += ["", "Ratios (targets of issue 27 in brackets):", ""]
    out += [f"- {k}: {v}" + (f" (target ≥ {TARGETS[k]})" if k in TARGETS else "") for k, v in ratios.items()]
    if em.get("ratios"):
        out += ["", f"Beside them, the GPU node's ratios: gpu1's kernel initiator on one emulated vCPU (the emulated "
                f"initiator), as `make bench-read` measured them ({str(em['date'])[:16].replace('T', ' ')} UTC, "
                f"commit {em['commit']}; bench/results/read.json):", ""]
        out += [f"- emulated initiator: {k}: {v}" for k, v in em["ratios"].items()]
    out.append("")
    return out


def cpu_lines(f: dict) -> list[str]:
    """What the rounds cost the emulator (the QEMU processes' CPU, in host cores, medians over the rounds), when
    the run measured it."""
    rounds = f.get("rounds") or []
    if not rounds or "cores" not in rounds[0]["seq1m"]["native"]:
        return []
    labels = {"seq1m": "seq 1 MiB", "rand128k": "random 128 KiB"}
    out = ["", "Host cores used during the rounds (medians; each VM's QEMU process, and the host's busy share of its "
           f"{f.get('host_cores')} cores; iscsi-perf itself runs on the host outside the VMs):", "",
           "| read | path | storage1 | gpu1 | gpu2 | host busy |", "|---|---|---|---|---|---|"]
    for w in WORKLOADS:
        for path, name in (("native", "iscsi-perf"), ("local", "fio on storage1")):
            got = [r[w][path]["cores"] for r in rounds]

            def med(key, got=got):
                vals = [g[key] for g in got if g.get(key) is not None]
                return round(statistics.median(vals), 2) if vals else "-"
            out.append(f"| {labels[w]} | {name} | {med(STORAGE)} | {med(GPU)} | {med('gpu2')} | {med('host_busy')} |")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=int, default=SECONDS, help=f"seconds a read (default {SECONDS})")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"A B rounds (default {ROUNDS})")
    p.add_argument("--levers", type=lever_spec, default=[], metavar="attrib.NAME=V,zfs.NAME=V",
                   help="storage-side levers to measure too, each A B A B against its value as found")
    p.add_argument("--cleanup", action="store_true", help="only remove what an earlier run left, then exit")
    p.add_argument("--render", action="store_true", help="only write the report section again from "
                   "bench/results/native_read.json (nothing is measured)")
    p.add_argument("--record", type=Path, metavar="DIR", help="keep the first raw output of iscsi-perf and fio "
                   "for each workload in DIR (tests/unit/data/native_read holds the unit tests' recordings)")
    a = p.parse_args()
    if a.record:
        RECORD["dir"] = a.record
    if a.render:
        doc = json.loads((RESULTS / "native_read.json").read_text())
        write_section("native-read", section(doc, doc["date"][:16].replace("T", " ") + " UTC"))
        return 0
    return run_bench("bench-native", "native-read", checking="root, the lab's namespace, storage1 and gpu1 "
                     "converged, fio, iscsi-perf", preflight=lambda: {**preflight(a.levers), "seconds": a.seconds,
                                                                        "rounds": a.rounds},
                     leftovers=cleanup, cleanup_only=a.cleanup, measure=measure, cleanup=cleanup, rows=rows,
                     partial=lambda: MEASURED)


if __name__ == "__main__":
    sys.exit(main())
