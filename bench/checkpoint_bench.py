#!/usr/bin/env python3
"""Benchmark of issue 5 on the lab: checkpoint rotation, listing and the snapshot freeze window.

Issue 5 asks: "On the lab pool, 1,000 checkpoint snapshots of a job; a rotation that removes 900
of them: the time of `fabricctl rotate` against sanoid (the Debian package) pruning an equivalent
set under an equivalent policy, in the same VM, as a ratio. `fabricctl checkpoint list` over those
1,000 snapshots against `zfs list -t snapshot -H -o name -r` of the same dataset (ratio). Also the
freeze window of a checkpoint snapshot while a 1 GiB checkpoint file is being written."

All on storage1 (and gpu1, the writer), in one run:
1. `fabricctl checkpoint volume create bench-ck --size 4G --writer gpu1` (the job's zvol, mounted
   read-write on gpu1), and for sanoid a zvol of the same size, volblocksize and snapdev under the
   same parent: <checkpoint_root>/bench-ck-sanoid (sparse, not fabricctl's).
2. 1,000 snapshots of each, interleaved (step N of both, then N+1, so both sets have the same
   creation times), one libzfs_core lzc_snapshot call each (1,000 `fabricctl checkpoint snapshot`
   runs would take too long under emulation). bench-ck@step-N carries the user properties fabricctl
   sets (fabric:managed, kind=checkpoint, step, created-by, created-at, tags); created-at is one
   minute apart, ending now (a job checkpointing every minute). bench-ck-sanoid gets
   autosnap_<date>_hourly names, the only snapshots sanoid prunes.
3. Listing, 3 rounds alternating: `fabricctl checkpoint list bench-ck --json` against
   `zfs list -t snapshot -H -o name -r` of the same zvol; medians and their ratio.
4. Rotation, both keeping the newest 100: fabricctl with a temporary config whose only policy is
   {keep_last: 100} assigned to "checkpoints/bench-ck" (nothing else has a policy, so nothing
   else can be destroyed; `--dry-run --json` first must plan exactly those 900 destroys), run as
   `FABRICCTL_CONFIG=... fabricctl rotate`. sanoid 2.x with its own --configdir: the zvol with
   hourly=100, every other period 0, autosnap=no, autoprune=yes; `--readonly --verbose` first must
   list exactly those 900, then `sanoid --prune-snapshots --force-update` is timed. Both leave 100.
   sanoid prunes an hourly snapshot only when it is also older than 100 hours (it decides by
   `creation`), so freshly made snapshots are never due. Rather than moving the shared VM's clock,
   sanoid runs under `perl -e` with CORE::GLOBAL::time overridden to now + 30 days: the stock
   /usr/sbin/sanoid code, unchanged, sees every snapshot as old enough, and keeps the newest 100 by
   count, which is what keep_last 100 keeps.
5. Freeze window, on gpu1: a Python writer writes a 1 GiB checkpoint file with O_DIRECT in 1 MiB
   writes (timing each write); once 256 MiB are written, `fabricctl checkpoint snapshot bench-ck
   --step 10000N --json` runs on storage1 and reports freeze_seconds (fsfreeze on the writer to
   thaw). Three such runs, after one run of the writer alone (the baseline).
6. Clean-up: `fabricctl checkpoint volume destroy bench-ck --yes --force` (gpu1 unmounts and logs
   out, the LIO target goes, the zvol and its snapshots are destroyed) and `zfs destroy -r` of
   sanoid's zvol, each only when it carries this benchmark's bench:owner mark; the temporary
   config, sanoid config directory, scripts and the lock holder go too.

While bench-ck's 1,000 snapshots wait for the benchmark's own rotate, the scheduled `fabricctl rotate`
(role fabricctl: an hourly timer, with the real config, whose "checkpoints/*" policy would prune
them in the middle of the measurement) is kept out by holding the node lock (/run/fabric/node.lock,
which every change takes) from a process of this benchmark, from before the snapshots are made
until just before the benchmark's own rotate: a timer run in that window gives up (exit 4, naming
this benchmark) and the next one works. Only reads run in that window (listing, dry runs, sanoid);
the benchmark's own changes (volume create, rotate, checkpoint snapshot, destroy) run outside it.

Precondition: the lab is up and converged: `make lab-up` and `ansible-playbook playbooks/site.yml`
(which installs fabricctl on storage1; the lab image has sanoid, perl and GNU time). This script
does not start, stop or converge the lab; it checks the precondition first and stops with a clear
message when it does not hold. Leftovers of an earlier run of this script are cleaned up first.

Run as root on the host that runs the lab: `make bench-checkpoint`. It writes the `checkpoint`
section of docs/benchmarks.md. Absolute figures depend on the emulated lab (TCG); compare ratios.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402
from labbench import (  # noqa: E402
    OWNER_PROP,
    BenchError,
    fabricctl_facts,
    owner_of,
    put,
    ratio,
    run_bench,
    say,
    ssh,
    tail,
    timed,
    zfs_exists,
    zfs_props,
    zfs_value,
)
from labbench import snapshot_names as labbench_snapshot_names  # noqa: E402
from report import write_json  # noqa: E402

SECTION = "checkpoint"
STORAGE = "storage1"
WRITER = "gpu1"
JOB = "bench-ck"
SANOID_SUFFIX = "bench-ck-sanoid"
SIZE = "4G"
COUNT = 1000
KEEP = 100
LIST_ROUNDS = 3
FREEZE_RUNS = 3
CKPT_MIB = 1024
SNAPSHOT_AFTER_MIB = 256
SANOID_SHIFT = 30 * 86400            # seconds sanoid's clock is moved forward (see the docstring)
OWNER = "bench/checkpoint_bench.py"
WORK = "/root/ckbench"               # on storage1: temporary config, sanoid config dir, scripts
BENCH_PROM = f"{WORK}/fabricctl-rotate.prom"
GIB = 2**30


def wait_until(what: str, check, *, timeout: float, every: float = 2.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# ---- scripts run on the VMs ------------------------------------------------------------------------

# The benchmark's fabricctl config: the real one with retention and rotation replaced, validated by
# fabricctl's own loader and retention parser before use.
MAKE_CONFIG = r'''
import json, os, sys, yaml
install_dir, src, dst, job, keep, prom = sys.argv[1:7]
sys.path.insert(0, install_dir)
raw = yaml.safe_load(open(src))
raw["retention"] = {"policies": {"bench-keep-last": {"keep_last": int(keep)}},
                    "assign": {f"checkpoints/{job}": "bench-keep-last"}}
raw["rotation"] = {"metrics_file": prom}
fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w") as fh:
    yaml.safe_dump(raw, fh, default_flow_style=False, sort_keys=False)
from fabricctl import config
from fabric_core.services import retention
c = config.load(dst)
r = retention.parse_retention(c.retention, c.metrics)
print(json.dumps({"policy_for_job": getattr(r.policy_for(f"checkpoints/{job}"), "name", None),
                  "assign": r.assign}))
'''

SNAPSHOTS = r'''
import datetime, json, socket, sys, time
from libzfs_core import lzc_snapshot
ck, other, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
by = f"root@{socket.gethostname()}".encode()
ck_s = other_s = 0.0
started = time.monotonic()
for step in range(1, n + 1):
    at = now - datetime.timedelta(minutes=n - step)
    props = {b"fabric:managed": b"true", b"fabric:kind": b"checkpoint", b"fabric:step": str(step).encode(),
             b"fabric:created-by": by, b"fabric:created-at": at.isoformat().replace("+00:00", "Z").encode(),
             b"fabric:tags": b"-"}
    a = time.monotonic()
    lzc_snapshot([f"{ck}@step-{step}".encode()], props)
    b = time.monotonic()
    hour = now - datetime.timedelta(hours=n - step)
    lzc_snapshot([f"{other}@autosnap_{hour:%Y-%m-%d_%H:%M:%S}_hourly".encode()])
    c = time.monotonic()
    ck_s += b - a
    other_s += c - b
print(json.dumps({"seconds": round(time.monotonic() - started, 2), "ck_seconds": round(ck_s, 2),
                  "sanoid_seconds": round(other_s, 2)}))
'''

# Holds the node lock through fabricctl's own code (waiting up to 15 minutes for a running change)
# until killed or `hold` seconds have passed.
LOCK_HOLDER = r'''
import sys, time
install_dir, state, hold = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, install_dir)
from fabric_core.base.errors import LockHeld
from fabric_core.base.lock import node_lock
try:
    with node_lock("bench/checkpoint_bench.py (keeps the scheduled fabricctl rotate off bench-ck)", wait=900):
        open(state, "w").write("locked\n")
        time.sleep(hold)
except LockHeld:
    open(state, "w").write("timeout\n")
    sys.exit(1)
'''

WRITER_SCRIPT = r'''
import json, mmap, os, sys, time
path, mib = sys.argv[1], int(sys.argv[2])
buf = mmap.mmap(-1, 1 << 20)
buf.write(os.urandom(1 << 20))
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
lat = []
worst, worst_at = 0.0, 0.0
started_epoch, started = time.time(), time.monotonic()
for i in range(mib):
    buf[0:8] = i.to_bytes(8, "little")
    a = time.monotonic()
    n = os.write(fd, buf)
    b = time.monotonic()
    if n != len(buf):
        sys.exit(f"short write: {n} bytes")
    lat.append(b - a)
    if b - a > worst:
        worst, worst_at = b - a, a - started
os.fsync(fd)
os.close(fd)
total = time.monotonic() - started
lat.sort()
print(json.dumps({"mib": mib, "seconds": round(total, 3), "mb_s": round(mib * 1048576 / total / 1e6, 2),
                  "max_write_s": round(worst, 3), "max_write_at_s": round(worst_at, 3),
                  "p50_write_s": round(lat[len(lat) // 2], 4), "p99_write_s": round(lat[int(len(lat) * 0.99)], 4),
                  "started_epoch": started_epoch}))
'''

SANOID_CONF = """\
# bench/checkpoint_bench.py: sanoid's policy equivalent to fabricctl's {{keep_last: {keep}}}
[{dataset}]
\tuse_template = bench

[template_bench]
\tfrequently = 0
\thourly = {keep}
\tdaily = 0
\tweekly = 0
\tmonthly = 0
\tyearly = 0
\tautosnap = no
\tautoprune = yes
\tmonitor = no
"""

# The stock sanoid script, run by perl with time() moved forward (see the module docstring).
SANOID_PERL = ("BEGIN { *CORE::GLOBAL::time = sub () { CORE::time() + %d }; } "
               "my $s = shift @ARGV; $0 = $s; my $r = do $s; die $@ if $@; "
               "die qq(cannot run $s: $!\\n) unless defined $r; exit 0;")


@dataclass
class Lab:
    install_dir: str
    config: str
    pool: str
    checkpoint_root: str
    mount_root: str
    node_lock: str
    sanoid: str
    sanoid_defaults: str

    @property
    def ck(self) -> str:
        return f"{self.checkpoint_root}/{JOB}"

    @property
    def other(self) -> str:
        return f"{self.checkpoint_root}/{SANOID_SUFFIX}"


def preflight() -> Lab:
    facts = fabricctl_facts(STORAGE, WRITER)
    for tool in ("/usr/bin/time", "perl", "sanoid"):
        if ssh(STORAGE, f"command -v {tool} >/dev/null", check=False).returncode != 0:
            raise BenchError(f"storage1 has no {tool} (lab/image/packages.txt has it: rebuild the lab image)")
    if ssh(STORAGE, "python3 -c 'import libzfs_core, yaml'", check=False).returncode != 0:
        raise BenchError("storage1: python3 cannot import libzfs_core and yaml (python3-pyzfs, python3-yaml)")
    sanoid = ssh(STORAGE, "readlink -f \"$(command -v sanoid)\"").stdout.strip()
    defaults = ssh(STORAGE, "dpkg -L sanoid 2>/dev/null | grep '/sanoid.defaults.conf$' | head -n 1; "
                   "ls /etc/sanoid/sanoid.defaults.conf 2>/dev/null", check=False).stdout.split()
    if not defaults:
        raise BenchError("storage1: sanoid's sanoid.defaults.conf not found (dpkg -L sanoid)")
    version = ssh(STORAGE, "dpkg-query -W -f='${Version}' sanoid", check=False).stdout.strip()
    say(f"  sanoid {version or '?'} at {sanoid}, defaults {defaults[0]}")
    return Lab(facts["install_dir"], facts["config"], facts["pool"], facts["checkpoint_root"],
               facts["checkpoint_mount_root"], facts["node_lock"], sanoid, defaults[0])


# ---- clean-up ------------------------------------------------------------------------------------

@dataclass
class State:
    lock_pid: int | None = None
    writer_pid: int | None = None


def stop_lock_holder(state: State) -> None:
    if state.lock_pid is None:
        return
    pid = state.lock_pid
    # only our own holder process, by its id, after checking that it is ours
    # ... and until it is gone: the lock is free when the next command starts
    ssh(STORAGE, f"grep -q ckbench-lock.py /proc/{pid}/cmdline 2>/dev/null && kill {pid} && timeout 30 sh -c "
                 f"'while kill -0 {pid} 2>/dev/null; do sleep 0.1; done'; true", check=False)
    state.lock_pid = None


def cleanup(lab: Lab, state: State) -> list[str]:
    left = []
    stop_lock_holder(state)  # first: the destroy below takes the node lock
    if state.writer_pid is not None:  # let our writer finish (it ends by itself within minutes)
        try:
            wait_until("the checkpoint writer on gpu1 to finish",
                       lambda: ssh(WRITER, f"kill -0 {state.writer_pid} 2>/dev/null", check=False).returncode != 0,
                       timeout=1800, every=5)
            state.writer_pid = None
        except BenchError as exc:
            left.append(str(exc))
    if zfs_exists(STORAGE, lab.ck):
        if owner_of(STORAGE, lab.ck) != OWNER:
            left.append(f"{lab.ck} exists but is not this benchmark's ({OWNER_PROP} unset): left alone")
        else:
            say(f"clean-up: fabricctl checkpoint volume destroy {JOB} --yes --force")
            proc = ssh(STORAGE, f"fabricctl checkpoint volume destroy {JOB} --yes --force --json", check=False,
                       timeout=900)
            if proc.returncode != 0:
                left.append(f"{lab.ck}: {tail(proc.stderr, 5)}")
    if zfs_exists(STORAGE, lab.other):
        if owner_of(STORAGE, lab.other) != OWNER:
            left.append(f"{lab.other} exists but is not this benchmark's: left alone")
        else:
            say(f"clean-up: zfs destroy -r {lab.other}")
            proc = ssh(STORAGE, f"zfs destroy -r {lab.other}", check=False, timeout=900)
            if proc.returncode != 0:
                left.append(f"{lab.other}: {tail(proc.stderr, 3)}")
    ssh(STORAGE, f"rm -rf {WORK}", check=False)
    ssh(WRITER, "rm -f /tmp/ckbench-writer.py /tmp/ckbench-writer.out /tmp/ckbench-writer.err", check=False)
    return left


def safe_cleanup(lab: Lab, state: State) -> list[str]:
    try:
        return cleanup(lab, state)
    except BenchError as exc:
        stop_lock_holder(state)
        return [str(exc)]


# ---- measurements -------------------------------------------------------------------------------

def snapshot_names(dataset: str) -> list[str]:
    return [n for n in labbench_snapshot_names(STORAGE, dataset) if n.startswith(dataset + "@")]


def hold_node_lock(lab: Lab, state: State) -> None:
    say(f"holding the node lock {lab.node_lock} (keeps the scheduled fabricctl rotate off bench-ck)")
    put(STORAGE, f"{WORK}/ckbench-lock.py", LOCK_HOLDER)
    pid = ssh(STORAGE, f"rm -f {WORK}/lock.state; nohup python3 {WORK}/ckbench-lock.py {lab.install_dir} "
                       f"{WORK}/lock.state 14400 >/dev/null 2>&1 </dev/null & echo $!").stdout.strip()
    state.lock_pid = int(pid)
    status = wait_until("the node lock (a scheduled fabricctl rotate or another change may be running)",
                        lambda: ssh(STORAGE, f"cat {WORK}/lock.state 2>/dev/null", check=False).stdout.strip(),
                        timeout=960)
    if status != "locked":
        raise BenchError(f"could not take {lab.node_lock} within 15 minutes (a fabricctl change still runs?)")


def median(values: list[float]) -> float:
    return statistics.median(values)


def measure_listing(lab: Lab) -> dict:
    ours, base = [], []
    for i in range(LIST_ROUNDS):
        t = timed(STORAGE, f"fabricctl checkpoint list {JOB} --json", timeout=1800)
        n = len(t.json()["checkpoints"])
        if n != COUNT:
            raise BenchError(f"fabricctl checkpoint list returned {n} checkpoints, {COUNT} expected")
        ours.append(t.node)
        t = timed(STORAGE, f"zfs list -t snapshot -H -o name -r {lab.ck}", timeout=1800)
        n = len(t.stdout.split())
        if n != COUNT:
            raise BenchError(f"zfs list returned {n} snapshots, {COUNT} expected")
        base.append(t.node)
        say(f"  round {i + 1}: fabricctl checkpoint list {ours[-1]:.2f} s, zfs list {base[-1]:.2f} s")
    return {"list_ours": ours, "list_base": base}


def sanoid_cmd(lab: Lab, *, readonly: bool) -> str:
    perl = SANOID_PERL % SANOID_SHIFT
    return (f"perl -e {shlex.quote(perl)} {lab.sanoid} --configdir={WORK}/sanoid --prune-snapshots --verbose "
            f"--force-update" + (" --readonly" if readonly else ""))


def sanoid_pruned(lab: Lab, output: str) -> list[str]:
    if "deferring" in output:
        raise BenchError("sanoid deferred pruning (a pruning lock held by another sanoid, or a zfs send/receive); "
                         f"look at /var/run/sanoid/sanoid_pruning.lock on storage1:\n{tail(output, 10)}")
    names = re.findall(r"INFO: pruning (\S+@\S+) \.\.\.", output)
    foreign = [n for n in names if not n.startswith(lab.other + "@")]
    if foreign:
        raise BenchError(f"sanoid would prune snapshots outside {lab.other}: {foreign[:5]}")
    return names


def measure_rotation(lab: Lab, state: State) -> dict:
    r: dict = {}
    env = f"FABRICCTL_CONFIG={WORK}/fabricctl.yml"
    say(f"temporary fabricctl config: retention {{keep_last: {KEEP}}} for checkpoints/{JOB} only")
    put(STORAGE, f"{WORK}/make-config.py", MAKE_CONFIG)
    made = json.loads(ssh(STORAGE, f"python3 {WORK}/make-config.py {lab.install_dir} {lab.config} "
                                   f"{WORK}/fabricctl.yml {JOB} {KEEP} {BENCH_PROM}").stdout)
    if made["policy_for_job"] != "bench-keep-last" or len(made["assign"]) != 1:
        raise BenchError(f"the temporary config does not assign the bench policy as intended: {made}")

    say("fabricctl rotate --dry-run --json (must plan exactly the 900 destroys in bench-ck)")
    t = timed(STORAGE, f"{env} fabricctl rotate --dry-run --json", timeout=1800)
    plan = t.json()
    doomed = [d for d in plan["decisions"] if d["action"] == "destroy"]
    if (plan["destroyed"] != COUNT - KEEP or any(d["dataset"] != lab.ck for d in doomed)
            or plan["batches"] != {lab.ck: COUNT - KEEP}):
        raise BenchError(f"fabricctl rotate would destroy {plan['destroyed']} snapshots in batches {plan['batches']}; "
                         f"exactly {COUNT - KEEP} in {lab.ck} were expected")
    r["ours_plan_s"] = t.node
    say(f"  {t.node:.1f} s")

    say("sanoid --prune-snapshots --readonly --verbose (must list exactly the 900 in bench-ck-sanoid; "
        "expect minutes: it runs ps once per snapshot)")
    ssh(STORAGE, f"mkdir -p {WORK}/sanoid && cp {lab.sanoid_defaults} {WORK}/sanoid/sanoid.defaults.conf")
    put(STORAGE, f"{WORK}/sanoid/sanoid.conf", SANOID_CONF.format(dataset=lab.other, keep=KEEP))
    t = timed(STORAGE, sanoid_cmd(lab, readonly=True) + " 2>&1", timeout=7200)
    would = sanoid_pruned(lab, t.stdout)
    if len(set(would)) != COUNT - KEEP:
        raise BenchError(f"sanoid --readonly would prune {len(set(would))} snapshots, {COUNT - KEEP} expected:\n"
                         f"{tail(t.stdout, 15)}")
    if len(snapshot_names(lab.other)) != COUNT:
        raise BenchError("sanoid --readonly changed something: the snapshot count of its zvol moved")
    r["base_plan_s"] = t.node
    say(f"  {t.node:.1f} s")

    say(f"releasing the node lock {lab.node_lock}: the benchmark's own rotate takes it")
    stop_lock_holder(state)
    say("HEADLINE 1: fabricctl rotate (destroys 900 of bench-ck's 1000 snapshots)")
    t = timed(STORAGE, f"{env} fabricctl rotate --json", timeout=3600)
    done = t.json()
    left = snapshot_names(lab.ck)
    want = {f"{lab.ck}@step-{s}" for s in range(COUNT - KEEP + 1, COUNT + 1)}
    if done["destroyed"] != COUNT - KEEP or set(left) != want:
        raise BenchError(f"after fabricctl rotate {len(left)} snapshots are left (expected steps "
                         f"{COUNT - KEEP + 1}..{COUNT}); it reported {done['destroyed']} destroyed")
    r["ours_s"], r["ours_wall"] = t.node, t.wall
    say(f"  {t.node:.1f} s; {len(left)} left")

    say("HEADLINE 1 baseline: sanoid --prune-snapshots --force-update (expect several minutes)")
    t = timed(STORAGE, sanoid_cmd(lab, readonly=False) + " 2>&1", timeout=7200)
    pruned = sanoid_pruned(lab, t.stdout)
    left = snapshot_names(lab.other)
    if len(left) != KEEP or len(set(pruned)) != COUNT - KEEP:
        raise BenchError(f"after sanoid {len(left)} snapshots are left ({KEEP} expected), it pruned "
                         f"{len(set(pruned))}:\n{tail(t.stdout, 15)}")
    if "could not remove" in t.stdout:
        raise BenchError(f"sanoid could not remove some snapshots:\n{tail(t.stdout, 15)}")
    r["base_s"], r["base_wall"] = t.node, t.wall
    say(f"  {t.node:.1f} s; {len(left)} left")
    return r


def writer_run(lab: Lab, state: State, step: int | None) -> dict:
    """One 1 GiB checkpoint write on gpu1; with step, a checkpoint snapshot once 256 MiB are written."""
    path = f"{lab.mount_root}/{JOB}/ckpt.bin"
    ssh(WRITER, f"rm -f {path}; sync")
    pid = ssh(WRITER, f"rm -f /tmp/ckbench-writer.out /tmp/ckbench-writer.err; nohup python3 /tmp/ckbench-writer.py "
                      f"{path} {CKPT_MIB} >/tmp/ckbench-writer.out 2>/tmp/ckbench-writer.err </dev/null & echo $!"
              ).stdout.strip()
    state.writer_pid = int(pid)

    def running() -> bool:
        return ssh(WRITER, f"kill -0 {pid} 2>/dev/null", check=False).returncode == 0

    out: dict = {"step": step}
    if step is not None:
        def far_enough() -> bool:
            size = ssh(WRITER, f"stat -c %s {path} 2>/dev/null || echo 0", check=False).stdout.strip() or "0"
            return int(size) >= SNAPSHOT_AFTER_MIB * 2**20 or not running()
        wait_until(f"{SNAPSHOT_AFTER_MIB} MiB of the checkpoint file on gpu1", far_enough, timeout=1800, every=1)
        was_running = running()
        t = timed(STORAGE, f"fabricctl checkpoint snapshot {JOB} --step {step} --json", timeout=1800)
        out.update(freeze_s=t.json()["freeze_seconds"], snapshot_s=t.node,
                   during_writes=was_running and running())
    wait_until("the checkpoint writer on gpu1 to finish", lambda: not running(), timeout=3600, every=3)
    state.writer_pid = None
    res = ssh(WRITER, "cat /tmp/ckbench-writer.out; cat /tmp/ckbench-writer.err >&2", check=False)
    try:
        out.update(json.loads(res.stdout))
    except json.JSONDecodeError:
        raise BenchError(f"the checkpoint writer on gpu1 failed:\n{tail(res.stderr)}") from None
    return out


def measure_freeze(lab: Lab, state: State) -> list[dict]:
    put(WRITER, "/tmp/ckbench-writer.py", WRITER_SCRIPT)
    runs = []
    say(f"freeze window: baseline, the {CKPT_MIB} MiB O_DIRECT writer alone on gpu1")
    runs.append(writer_run(lab, state, None))
    say(f"  {runs[-1]['seconds']:.1f} s, longest write {runs[-1]['max_write_s']:.3f} s")
    for i in range(FREEZE_RUNS):
        step = 10000 * (i + 1) + COUNT
        say(f"freeze window {i + 1}/{FREEZE_RUNS}: writer + fabricctl checkpoint snapshot {JOB} --step {step}")
        runs.append(writer_run(lab, state, step))
        r = runs[-1]
        say(f"  freeze {r['freeze_s']:.3f} s (during writes: {r['during_writes']}); writer {r['seconds']:.1f} s, "
            f"longest write {r['max_write_s']:.3f} s")
    return runs


# ---- report --------------------------------------------------------------------------------------

def results(r: dict) -> dict:
    """bench/results/checkpoint.json: the run's figures, the checkpoint writer's MB/s alone (what `fabricctl
    plan checkpoint` compares a checkpoint's need with) and the ratios of the section."""
    alone = next(w for w in r["freeze"] if w["step"] is None)
    lo, lb = median(r["list_ours"]), median(r["list_base"])
    return {"date": report.now(), "commit": report.commit(), "lab": "trixie lab (TCG), storage1 and gpu1 (the writer)",
            "figures": {**r, "write_mb_s": alone["mb_s"]},
            "ratios": {"rotate_over_sanoid": round(r["ours_s"] / r["base_s"], 3),
                       "rotate_plan_over_sanoid_readonly": round(r["ours_plan_s"] / r["base_plan_s"], 3),
                       "list_over_zfs_list": round(lo / lb, 3)}}


def section(lab: Lab, r: dict, when: str) -> list[str]:
    write_json("checkpoint", results(r))
    lo, lb = median(r["list_ours"]), median(r["list_base"])
    rows = [
        "## Issue 5: checkpoint rotation, listing and the snapshot freeze window (lab, TCG)",
        "",
        f"Measured in one run by `make bench-checkpoint` on {when}, on storage1 (pool {lab.pool}) with gpu1 "
        f"as the job's writer. {COUNT:,} snapshots of a {SIZE} checkpoint zvol ({lab.ck}) and {COUNT:,} of a "
        f"zvol of the same size, volblocksize and snapdev for sanoid ({lab.other}), created interleaved, one "
        f"lzc_snapshot each ({r['create']['seconds']:.0f} s for all {2 * COUNT:,}).",
        "",
        "| measurement | ours | baseline | ratio ours / baseline |",
        "|---|---|---|---|",
        f"| rotation destroying {COUNT - KEEP} of {COUNT:,} (keep the newest {KEEP}) | `fabricctl rotate`: "
        f"{r['ours_s']:.1f} s | sanoid {r['sanoid_version']} `--prune-snapshots --force-update`: {r['base_s']:.1f} s "
        f"| {ratio(r['ours_s'], r['base_s'])} |",
        f"| the same, planning only | `fabricctl rotate --dry-run --json`: {r['ours_plan_s']:.1f} s "
        f"| `sanoid ... --readonly`: {r['base_plan_s']:.1f} s | {ratio(r['ours_plan_s'], r['base_plan_s'])} |",
        f"| listing {COUNT:,} checkpoints (median of {LIST_ROUNDS}) | `fabricctl checkpoint list --json`: "
        f"{lo:.2f} s | `zfs list -t snapshot -H -o name -r`: {lb:.2f} s | {ratio(lo, lb)} |",
        "",
        f"Listing rounds: fabricctl {', '.join(f'{x:.2f}' for x in r['list_ours'])} s; zfs list "
        f"{', '.join(f'{x:.2f}' for x in r['list_base'])} s.",
        "",
        f"Freeze window of `fabricctl checkpoint snapshot` while gpu1 writes a {CKPT_MIB} MiB checkpoint file "
        f"(O_DIRECT, 1 MiB writes, snapshot once {SNAPSHOT_AFTER_MIB} MiB are written):",
        "",
        "| run | freeze window (fsfreeze to thaw, fabricctl's freeze_seconds) | whole snapshot command "
        "| writes still running after it | writer: 1 GiB in | longest single write | median write |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, w in enumerate(r["freeze"]):
        if w["step"] is None:
            rows.append(f"| baseline: writer alone | - | - | - | {w['seconds']:.1f} s ({w['mb_s']:.1f} MB/s) "
                        f"| {w['max_write_s']:.3f} s | {w['p50_write_s']:.4f} s |")
        else:
            rows.append(f"| {i}: step {w['step']} | {w['freeze_s']:.3f} s | {w['snapshot_s']:.1f} s "
                        f"| {'yes' if w['during_writes'] else 'NO (the writer had finished)'} "
                        f"| {w['seconds']:.1f} s ({w['mb_s']:.1f} MB/s) | {w['max_write_s']:.3f} s "
                        f"| {w['p50_write_s']:.4f} s |")
    base = r["freeze"][0]
    snaps = [w for w in r["freeze"] if w["step"] is not None]
    rows += [
        "",
        f"Writer time with a snapshot against the writer alone: "
        f"{', '.join(ratio(w['seconds'], base['seconds']) for w in snaps)}; longest write: "
        f"{', '.join(ratio(w['max_write_s'], base['max_write_s']) for w in snaps)}.",
        "",
        "Times are GNU time around each command on storage1 (Python start-up included for fabricctl; sanoid is "
        "Perl). fabricctl plans with one pure function and destroys the 900 in one `lzc_destroy_snaps` call; "
        "sanoid runs `ps` and one `zfs destroy` per snapshot. Both list every snapshot first (sanoid all of the "
        "node's, refreshing its cache). Equivalent policies: fabricctl `{keep_last: 100}` assigned to "
        f"checkpoints/{JOB} only (a temporary config; nothing else had a policy), sanoid `hourly = 100`, every "
        "other period 0, autoprune on, autosnap off. sanoid also requires an hourly snapshot to be older than 100 "
        "hours before it prunes it; instead of moving the shared VM's clock, the stock sanoid script ran under "
        f"`perl -e` with time() moved forward by {SANOID_SHIFT // 86400} days, so all {COUNT:,} were old "
        "enough and it kept the newest 100 by count, as keep_last does. fabricctl kept steps "
        f"{COUNT - KEEP + 1}-{COUNT}; sanoid kept {KEEP} (ties in the one-second `creation` are ordered by sanoid "
        "itself). The freeze window is measured by fabricctl on storage1 from `fsfreeze -f` to `fsfreeze -u` on "
        "gpu1 (two SSH round trips and one lzc_snapshot); the writer's longest single write shows what the "
        "training process felt. The scheduled fabricctl rotate was kept off bench-ck by holding the node lock from "
        "before the snapshots were made until the benchmark's own rotate. "
        "Absolute numbers are bound by software emulation; compare ratios.",
    ]
    return rows


def run(lab: Lab, state: State) -> dict:
    r: dict = {}
    r["sanoid_version"] = ssh(STORAGE, "dpkg-query -W -f='${Version}' sanoid", check=False).stdout.strip() or "?"
    need = 1.02 * 4 * GIB + 4 * GIB
    have = int(zfs_value(STORAGE, lab.checkpoint_root, "available"))
    if have < need:
        raise BenchError(f"{lab.checkpoint_root} has {have / GIB:.1f} GiB available; the benchmark needs about "
                         f"{need / GIB:.1f} GiB (a fully reserved {SIZE} volume + {FREEZE_RUNS} GiB of snapshots)")
    ssh(STORAGE, f"mkdir -p {WORK} && chmod 700 {WORK}")

    say(f"fabricctl checkpoint volume create {JOB} --size {SIZE} --writer {WRITER}")
    t = timed(STORAGE, f"fabricctl checkpoint volume create {JOB} --size {SIZE} --writer {WRITER} --json",
              timeout=1800, check=False)
    if zfs_exists(STORAGE, lab.ck):  # made by this run (clean-up ran first): marked even when a later step failed
        ssh(STORAGE, f"zfs set {OWNER_PROP}={OWNER} {lab.ck}")
    if t.rc != 0:
        raise BenchError(f"fabricctl checkpoint volume create exited {t.rc}:\n{tail(t.stderr or t.stdout)}")
    r["volume_create_s"] = t.node
    say(f"  {t.node:.1f} s")
    props = zfs_props(STORAGE, lab.ck, "volsize,volblocksize,snapdev")
    if not props:
        raise BenchError(f"{lab.ck} is gone right after fabricctl created it")
    say(f"zfs create -s -V {props['volsize']} {lab.other} (volblocksize {props['volblocksize']}, "
        f"snapdev {props['snapdev']}): sanoid's zvol")
    ssh(STORAGE, f"zfs create -s -V {props['volsize']} -o volblocksize={props['volblocksize']} "
                 f"-o snapdev={props['snapdev']} -o {OWNER_PROP}={OWNER} {lab.other}")

    hold_node_lock(lab, state)  # until measure_rotation's own rotate: only reads run meanwhile
    say(f"{COUNT} snapshots of each zvol, interleaved, one lzc_snapshot call each (expect a few minutes)")
    put(STORAGE, f"{WORK}/snapshots.py", SNAPSHOTS)
    r["create"] = json.loads(ssh(STORAGE, f"python3 {WORK}/snapshots.py {lab.ck} {lab.other} {COUNT}",
                                 timeout=7200).stdout)
    for ds in (lab.ck, lab.other):
        n = len(snapshot_names(ds))
        if n != COUNT:
            raise BenchError(f"{ds} has {n} snapshots, {COUNT} expected")
    say(f"  {r['create']['seconds']:.0f} s")

    say(f"HEADLINE 2: listing {COUNT} checkpoints, {LIST_ROUNDS} rounds")
    r.update(measure_listing(lab))
    r.update(measure_rotation(lab, state))
    r["freeze"] = measure_freeze(lab, state)
    return r


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cleanup-only", action="store_true", help="remove this benchmark's leftovers and stop")
    args = parser.parse_args()
    state = State()
    return run_bench("bench-checkpoint", SECTION, checking="up, converged, fabricctl and sanoid on storage1",
                     preflight=preflight, leftovers=lambda lab: safe_cleanup(lab, state),
                     cleanup_only=args.cleanup_only, measure=lambda lab: run(lab, state),
                     cleanup=lambda lab: safe_cleanup(lab, state), rows=section)


if __name__ == "__main__":
    sys.exit(main())
