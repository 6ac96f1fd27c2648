#!/usr/bin/env python3
"""Benchmark of issue 29 on the lab: a login storm of 64 granted initiators against one login.

Issue 29 asks: "Login storm: 64 granted initiators (open-iscsi ifaces with their own names and CHAP, on gpu1 and
gpu2) logging in at once: all succeed; time to all logged in against one. Key `storm64_over_one`."

What it makes, all named ``benchstorm*`` (this benchmark's alone, removed at the end):
- on storage1, a throwaway target ``iqn.2026-11.io.fabric.bench:benchstorm`` with one LUN on a 16 MiB fileio
  backstore and a portal at storage1's storage address, and 64 synthetic initiators granted through the fabric's
  grant path (``lioacls.target_facts``, ``grants.plan_grant``, ``lio.apply`` with its one save: what `fabricctl
  grant` runs once it has resolved its hosts), each with its own CHAP: user ids and 14-character secrets
  (mutual too) generated on this host for the run;
- on gpu1 and gpu2, 32 each: an open-iscsi iface ``benchstormNN`` carrying the initiator's name, and a node record
  of the target through that iface (CHAP, node.startup manual), made with the portal's TPGT (ADDR:PORT,1): only
  then does open-iscsi keep a record per iface (ROOT/T/ADDR,PORT,1/IFACE); without one it keeps one record file
  per portal (ROOT/T/ADDR,PORT), whatever the iface. The secrets go to storage1 and the GPU nodes on
  the stdin of one Python process per node, which writes them into each record's file itself (mode 0600,
  temporary file, fsync, rename): never on a command line.

What it measures, each phase started on every node at once (each node's process is ready and waiting; this host
then writes "go" to all of them), timed on the nodes:
- one: gpu1 logs one iface in alone (`iscsiadm -m node -T T -p P -I benchstorm00 --login`): the seconds until
  iscsiadm returns with the session logged in (checked after, untimed, in `iscsiadm -m session -P 1`: the iface,
  its own initiator name, LOGGED_IN);
- storm: gpu1 and gpu2 each log all their 32 in (`iscsiadm -m node -T T -p P --login`, no -I: iscsiadm sends the
  32 logins to iscsid at once and waits for all): the seconds until the slower node's iscsiadm returns; every
  one of the 64 must be logged in (a failure is named by its iface).
Beside it, storage1 counts the target's sessions in configfs (each ACL's ``info``, polled every 0.1 s from "go")
until all are there; each GPU node counts the LUN's disks appearing under its sessions (sysfs); and the logouts
that follow are timed the same way. Rounds alternate the order (one, storm; storm, one); figures are medians and
``storm64_over_one`` is median(storm) / median(one).

Clean-up (always, also after a failure, and alone with --cleanup-only): on the GPU nodes every session of the
bench's target logged out (any multipath map over its disks flushed first), its node records and the
``benchstormNN`` ifaces deleted; on storage1 the target, the backstore and its file removed and the
configuration saved. Nothing else is touched: everything is found by the bench's target name or iface prefix.

Run as root on the lab's host with the lab up and converged: `make bench-storm` (ROUNDS=N, default 3;
ARGS=--cleanup-only; ARGS=--keep leaves the target, ifaces and records, logged out, for a look). It writes the
`attach-storm` section of docs/benchmarks.md and the storm figures of bench/results/attach.json (the other
figures there, from other benchmarks of issue 29, are kept).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import secrets
import select
import shlex
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from labbench import (  # noqa: E402
    SSH_CONFIG,
    BenchError,
    bench_args,
    fabricctl_facts,
    run_bench,
    say,
    ssh,
    vm_cores,
    vm_cpu_ticks,
)
from report import FOLDER, commit, merge_json  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "module_utils"))
from fabric_core.base.names import TPG_TAG  # noqa: E402
from fabric_core.node.iscsi import NODE_RECORD_ROOTS, RECORD_WRITER  # noqa: E402

SECTION = "attach-storm"
STORAGE = "storage1"
GPUS = ("gpu1", "gpu2")
INITIATORS = 64
NAME = "benchstorm"                    # target suffix, backstore, file, iface prefix, initiator names
BASE = "iqn.2026-11.io.fabric.bench"
TARGET = f"{BASE}:{NAME}"
PORT = 3260
STORAGE_PYTHON = "/opt/fabricctl/bin/python3"
NODE_PYTHON = "python3"
SECRET_CHARS = string.ascii_letters + string.digits
SECRET_LEN = 14                        # the fabric's rule: 12-16 (rules.CHAP_SECRET_MIN/MAX)
READY_TIMEOUT = 300                    # a node's process answers "ready" (a Python start on TCG: seconds)
PHASE_TIMEOUT = 900                    # one phase of a round, go to every answer
POLL = 0.1                             # storage1's configfs poll and the GPU nodes' sysfs poll, seconds


# --------------------------------------------------------------------------------------------
# pure functions, also sent to the nodes (their source is part of the remote programs)


def acl_logged_in(info: str) -> bool:
    """Whether an LIO ACL's configfs ``info`` shows a logged-in session (the kernel prints "Session State:
    TARG_SESS_STATE_LOGGED_IN" for one, "No active iSCSI Session for Initiator Endpoint: ..." for none)."""
    return "TARG_SESS_STATE_LOGGED_IN" in info


def sessions_of(text: str, target: str) -> dict:
    """{iface: {"initiator": name, "state": session state}} of TARGET's sessions in `iscsiadm -m session -P 1`'s
    output (each session: "Target: T (non-flash)", then "Iface Name:", "Iface Initiatorname:", "iSCSI Session
    State:" lines)."""
    out: dict = {}
    current, iface = None, None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Target: "):
            current = line[len("Target: "):].split()[0]
            iface = None
        elif current != target:
            continue
        elif line.startswith("Iface Name:"):
            iface = line.split(":", 1)[1].strip()
            out[iface] = {"initiator": "", "state": ""}
        elif iface is not None and line.startswith("Iface Initiatorname:"):
            out[iface]["initiator"] = line.split(":", 1)[1].strip()
        elif iface is not None and line.startswith("iSCSI Session State:"):
            out[iface]["state"] = line.split(":", 1)[1].strip()
    return out


def login_lines(text: str) -> dict:
    """What iscsiadm's --login said per iface: {"tried": [...], "ok": [...], "failed": [...]} from its
    "Logging in to [iface: X, target: T, portal: P]", "Login to [iface: X, ...] successful." and
    "Could not login to [iface: X, ...]." lines, plus "errors": its other "iscsiadm: " lines."""
    out: dict = {"tried": [], "ok": [], "failed": [], "errors": []}
    for raw in text.splitlines():
        line = raw.strip()
        match = re.search(r"\[iface: ([^,\]]+), target: [^\]]*\]", line)
        if match and line.startswith("Logging in to"):
            out["tried"].append(match.group(1))
        elif match and line.startswith("Login to") and line.endswith("successful."):
            out["ok"].append(match.group(1))
        elif match and "Could not login to" in line:
            out["failed"].append(match.group(1))
        elif line.startswith("iscsiadm: "):
            out["errors"].append(line)
    return out


def bench_ifaces(text: str, prefix: str) -> list:
    """The ifaces named PREFIX followed by digits in `iscsiadm -m iface`'s output ("NAME transport,...")."""
    names = (line.split()[0] for line in text.splitlines() if line.strip())
    return sorted(n for n in names if re.fullmatch(re.escape(prefix) + r"[0-9]+", n))


SHARED = (acl_logged_in, sessions_of, login_lines, bench_ifaces)


# --------------------------------------------------------------------------------------------
# the plan of a run (on this host)


def iface_name(index: int) -> str:
    return f"{NAME}{index:02d}"


def initiator_name(index: int) -> str:
    return f"{BASE}:{NAME}.i{index:02d}"


def secret(length: int = SECRET_LEN) -> str:
    return "".join(secrets.choice(SECRET_CHARS) for _ in range(length))


def credentials(count: int, gpus: tuple[str, ...] = GPUS) -> dict:
    """Each initiator of the run: {index: {iface, initiator, node, userid, password, mutual_userid,
    mutual_password}}, the first count/len(gpus) on the first GPU node, and so on; fresh secrets (two per
    initiator, different) from the secrets module."""
    per = -(-count // len(gpus))
    out = {}
    for i in range(count):
        password = secret()
        mutual = secret()
        while mutual == password:
            mutual = secret()
        out[i] = {"iface": iface_name(i), "initiator": initiator_name(i), "node": gpus[i // per],
                  "userid": f"{NAME}u{i:02d}", "password": password,
                  "mutual_userid": f"{NAME}t{i:02d}", "mutual_password": mutual}
    return out


def summarize(runs: list[dict]) -> dict:
    """Figures (medians over the rounds) and the ratio, from each round's measured seconds."""
    keys = sorted({k for run in runs for k, v in run.items() if isinstance(v, (int, float))})
    figures = {}
    for key in keys:
        values = [run[key] for run in runs if isinstance(run.get(key), (int, float))]
        if len(values) < len(runs):
            continue  # not measured in every round (a disk that did not show up in time): no median
        figures[f"storm_{key}" if not key.startswith("storm") else key] = round(statistics.median(values), 3)
    one, storm = figures.get("storm_one_s"), figures.get("storm64_s")
    ratios = {"storm64_over_one": round(storm / one, 3) if one and storm is not None else None}
    return {"figures": figures, "ratios": ratios}


# --------------------------------------------------------------------------------------------
# the programs on the nodes: one long-lived Python process each, fed JSON lines on stdin (the first line is the
# program itself, so that nothing of it, nor a secret, is on a command line), answering one JSON line per command

PROLOG = r'''
import json, os, re, subprocess, sys, time

def answer(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

class Failed(Exception):
    pass

def run(argv, ok=(0,), timeout=900):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode not in ok:
        raise Failed("`%s` exited %d: %s" % (" ".join(argv), proc.returncode,
                                            (proc.stderr or proc.stdout).strip()[-1500:]))
    return proc

def wait_go():
    answer({"ready": True})
    line = sys.stdin.readline()
    if line.strip() != "go":
        raise Failed("expected go, got %r" % line[:50])
    return time.monotonic()

def serve(ops):
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            answer({"bye": True})
            return
        try:
            answer(ops[cmd["op"]](cmd))
        except Exception as exc:
            answer({"error": "%s: %s" % (type(exc).__name__, exc)})
'''

# On gpu1 and gpu2 with the system's python3: the ifaces, node records, logins, logouts and clean-up.
# The product's writer of node record secrets (iscsi.RECORD_WRITER, one iface's record with --iface=NAME), where
# open-iscsi keeps the records (Debian 12's, Debian 13's) and the fabric's TPG tag are given to the program, not
# copied into it.
NODE = f"RECORD_WRITER = {RECORD_WRITER!r}\nROOTS = {NODE_RECORD_ROOTS!r}\nTPG_TAG = {TPG_TAG!r}\n" + r'''
IFACE_DIRS = ("/etc/iscsi/ifaces", "/var/lib/iscsi/ifaces")

def portal(cmd, tpgt=False):
    """ADDR:PORT; with the fabric's TPG tag for a new record: only a record with its TPGT is kept per iface
    (ROOT/T/ADDR,PORT,TPGT/IFACE); without one, open-iscsi keeps one file per portal (ROOT/T/ADDR,PORT)."""
    return "%s:%d%s" % (cmd["address"], cmd["port"], ",%d" % TPG_TAG if tpgt else "")

def records(target):
    """How many node records of TARGET `iscsiadm -m node` lists (one line each: "ADDR:PORT,TPGT TARGET")."""
    listed = run(["iscsiadm", "-m", "node"], ok=(0, 21)).stdout
    return sum(1 for line in listed.splitlines() if line.split()[-1:] == [target])

def setup(cmd):
    started = time.monotonic()
    target, address, port = cmd["target"], cmd["address"], cmd["port"]
    for it in cmd["ifaces"]:
        name = it["iface"]
        run(["iscsiadm", "-m", "iface", "-I", name, "-o", "new"])
        run(["iscsiadm", "-m", "iface", "-I", name, "-o", "update", "-n", "iface.initiatorname", "-v",
             it["initiator"]])
        run(["iscsiadm", "-m", "node", "-o", "new", "-T", target, "-p", portal(cmd, tpgt=True), "-I", name])
        values = {"node.startup": "manual", "node.session.auth.authmethod": "CHAP",
                  "node.session.auth.username": it["username"], "node.session.auth.password": it["password"],
                  "node.session.auth.username_in": it["username_in"],
                  "node.session.auth.password_in": it["password_in"]}
        proc = subprocess.run([sys.executable, "-c", RECORD_WRITER, target, address, str(port), "--iface=" + name,
                               *ROOTS], input=json.dumps(values), capture_output=True, text=True, timeout=120)
        if proc.returncode != 0 or proc.stdout.strip() != "1":  # it prints how many records it wrote
            raise Failed("%s: the node record of %s at %s not written (exit %d, %s records): %s"
                         % (name, target, portal(cmd), proc.returncode, proc.stdout.strip() or "no",
                            proc.stderr.strip()))
    return {"records": records(target), "seconds": time.monotonic() - started}

def sessions(target):
    proc = run(["iscsiadm", "-m", "session", "-P", "1"], ok=(0, 21))
    return sessions_of(proc.stdout, target)

def session_disks(target, base="/sys/class/iscsi_session"):
    """The block devices (sdX) under the target's sessions, from sysfs."""
    out = set()
    for s in os.listdir(base) if os.path.isdir(base) else ():
        try:
            with open(os.path.join(base, s, "targetname")) as fh:
                if fh.read().strip() != target:
                    continue
        except OSError:
            continue
        dev = os.path.join(base, s, "device")
        for t in os.listdir(dev) if os.path.isdir(dev) else ():
            if not t.startswith("target"):
                continue
            for lun in os.listdir(os.path.join(dev, t)):
                block = os.path.join(dev, t, lun, "block")
                out.update(os.listdir(block) if os.path.isdir(block) else ())
    return out

def disks(target):
    """How many block devices are under the target's sessions."""
    return len(session_disks(target))

def login(cmd):
    target, ifaces = cmd["target"], cmd["ifaces"]
    argv = ["iscsiadm", "-m", "node", "-T", target, "-p", portal(cmd)]
    if cmd.get("one"):
        argv += ["-I", ifaces[0]]
    argv.append("--login")
    go = wait_go()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    login_s = time.monotonic() - go
    have = sessions(target)
    bad = sorted(i for i in ifaces if have.get(i, {}).get("state") != "LOGGED_IN"
                 or have[i]["initiator"] != cmd["initiators"][i])
    disks_s, n = None, disks(target)
    deadline = time.monotonic() + 120
    while n < len(ifaces) and time.monotonic() < deadline:
        time.sleep(POLL)
        n = disks(target)
    if n >= len(ifaces):
        disks_s = time.monotonic() - go
    said = login_lines(proc.stdout + "\n" + proc.stderr)
    return {"login_s": login_s, "disks_s": disks_s, "disks": n, "rc": proc.returncode, "bad": bad,
            "failed": said["failed"], "tried": len(said["tried"]), "ok": len(said["ok"]),
            "errors": said["errors"][-20:], "sessions": len(have)}

def logout(cmd):
    target = cmd["target"]
    argv = ["iscsiadm", "-m", "node", "-T", target, "-p", portal(cmd)]
    if cmd.get("one"):
        argv += ["-I", cmd["ifaces"][0]]
    argv.append("--logout")
    go = wait_go()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - go
    left = sorted(sessions(target))
    return {"logout_s": seconds, "rc": proc.returncode, "left": left,
            "errors": [l for l in (proc.stdout + proc.stderr).splitlines() if l.startswith("iscsiadm:")][-20:]}

def settle(cmd):
    started = time.monotonic()
    run(["udevadm", "settle", "--timeout=120"], ok=(0, 1))
    return {"seconds": time.monotonic() - started}

def maps_over(target):
    """dm maps (name) that have a disk of TARGET's sessions below them."""
    ours = session_disks(target)
    maps = []
    for dm in (d for d in os.listdir("/sys/block") if d.startswith("dm-")):
        slaves = os.path.join("/sys/block", dm, "slaves")
        if ours & set(os.listdir(slaves) if os.path.isdir(slaves) else ()):
            with open(os.path.join("/sys/block", dm, "dm", "name")) as fh:
                maps.append(fh.read().strip())
    return maps

def leftovers(target, prefix):
    left = []
    have = sessions(target)
    if have:
        left.append("sessions of %s through %s" % (target, ", ".join(sorted(have))))
    for root in ROOTS:
        if os.path.exists(os.path.join(root, target)):
            left.append("node records %s" % os.path.join(root, target))
    if records(target):
        left.append("%d node records of %s" % (records(target), target))
    names = bench_ifaces(run(["iscsiadm", "-m", "iface"]).stdout, prefix)
    if names:
        left.append("ifaces %s" % ", ".join(names))
    for d in IFACE_DIRS:
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else ():
            if f.startswith(prefix) and f not in names:
                left.append("iface file %s/%s" % (d, f))
    maps = maps_over(target)
    if maps:
        left.append("multipath maps %s" % ", ".join(maps))
    return left

def clean(cmd):
    target, prefix = cmd["target"], cmd["prefix"]
    done = []
    for m in maps_over(target):
        run(["multipath", "-f", m])
        done.append("multipath map " + m)
    if sessions(target):
        run(["iscsiadm", "-m", "node", "-T", target, "--logout"], ok=(0, 21))
        done.append("sessions")
    if records(target) or any(os.path.exists(os.path.join(root, target)) for root in ROOTS):
        run(["iscsiadm", "-m", "node", "-T", target, "-o", "delete"], ok=(0, 21))
        done.append("node records")
    for name in bench_ifaces(run(["iscsiadm", "-m", "iface"]).stdout, prefix):
        run(["iscsiadm", "-m", "iface", "-I", name, "-o", "delete"])
        done.append("iface " + name)
    return {"removed": done, "left": leftovers(target, prefix)}

serve({"setup": setup, "login": login, "logout": logout, "settle": settle, "clean": clean})
'''

# On storage1 with fabricctl's interpreter (its fabric_core, Debian's rtslib-fb): the target, the grant of the
# 64 through the fabric's path, the sessions counted in configfs, the clean-up.
STORAGE_PROGRAM = r'''
import rtslib_fb
from rtslib_fb import RTSRoot, FabricModule, Target, TPG, LUN, NetworkPortal, FileIOStorageObject
from fabric_core.base.rules import parse_chap
from fabric_core.services import grants
from fabric_core.storage import lio, lioacls

SAVE = lio.SAVE_FILE
CONFIGFS = "/sys/kernel/config/target/iscsi"

def image(prefix):
    return "/var/tmp/%s.img" % prefix

def remove(cmd):
    target, prefix = cmd["target"], cmd["prefix"]
    root = RTSRoot()
    gone = []
    for t in list(FabricModule("iscsi").targets):
        if t.wwn == target:
            t.delete()
            gone.append(t.wwn)
    for so in list(root.storage_objects):
        if so.name.startswith(prefix):
            so.delete()
            gone.append("backstore " + so.name)
    if os.path.exists(image(prefix)):
        os.unlink(image(prefix))
        gone.append(image(prefix))
    if gone or saved_names(target):
        lio.save(rtslib_fb)  # the fabric's own save of the whole configuration (atomic, 0600)
    return gone

def saved_names(target):
    """Whether the saved configuration (the boot-time restore's) still names the target."""
    if not os.path.exists(SAVE):
        return False
    with open(SAVE) as fh:
        return target in fh.read()

def leftovers(cmd):
    target, prefix = cmd["target"], cmd["prefix"]
    left = []
    if os.path.exists(os.path.join(CONFIGFS, target)):
        left.append("target " + target)
    core = "/sys/kernel/config/target/core"
    for hba in os.listdir(core) if os.path.isdir(core) else ():
        path = os.path.join(core, hba)
        if os.path.isdir(path):
            left += ["backstore %s/%s" % (hba, n) for n in os.listdir(path) if n.startswith(prefix)]
    if os.path.exists(image(prefix)):
        left.append(image(prefix))
    if saved_names(target):
        left.append("%s still names %s" % (SAVE, target))
    return left

def clean(cmd):
    return {"removed": remove(cmd), "left": leftovers(cmd)}

def setup(cmd):
    target, prefix = cmd["target"], cmd["prefix"]
    remove(cmd)
    with open(image(prefix), "wb") as fh:
        fh.truncate(16 << 20)
    so = FileIOStorageObject(prefix, image(prefix), size=16 << 20, write_back=False)
    tpg = TPG(Target(FabricModule("iscsi"), target), 1)
    LUN(tpg, 0, so)
    NetworkPortal(tpg, cmd["address"], cmd["port"])
    tpg.enable = True
    wanted = {i: parse_chap(c, where=i + ": ") for i, c in cmd["grants"].items()}
    started = time.monotonic()
    facts = lioacls.target_facts(target)
    actions = grants.plan_grant(target, facts, wanted, current_auth=lambda i: lioacls.acl_auth(target, i))
    lio.apply(actions)
    grant_s = time.monotonic() - started
    acls = lioacls.target_facts(target)["acls"]
    return {"grant_s": grant_s, "actions": len(actions), "acls": len(acls), "wwn": so.wwn,
            "authentication": lioacls.target_facts(target)["authentication"]}

def count(acls_dir):
    n, seen = 0, []
    for acl in os.listdir(acls_dir):
        try:
            with open(os.path.join(acls_dir, acl, "info")) as fh:
                if acl_logged_in(fh.read()):
                    n += 1
                    seen.append(acl)
        except OSError:
            pass
    return n, seen

KERNEL_SAYS = ("iSCSI Login negotiation failed", "tx_data returned")  # LIO on a login it gave up (and its reply
                                                                   # to a socket the initiator had closed)

def kernel_says(since):
    """How often the kernel logged each of KERNEL_SAYS since a time (epoch seconds)."""
    proc = subprocess.run(["journalctl", "-k", "-q", "--no-pager", "--since", "@%d" % int(since)],
                          capture_output=True, text=True, timeout=120)
    return {said: sum(said in line for line in proc.stdout.splitlines()) for said in KERNEL_SAYS}

def watch(cmd):
    acls_dir = os.path.join(CONFIGFS, cmd["target"], "tpgt_1", "acls")
    expect, timeout, marks = cmd["expect"], cmd["timeout"], sorted(cmd.get("marks", ()))
    before, _ = count(acls_dir)
    go = wait_go()
    since = time.time()
    first, done, n, seen, reached = None, None, before, [], {}
    while True:
        n, seen = count(acls_dir)
        now = time.monotonic() - go
        if first is None and n != before:
            first = now
        for mark in marks:
            if n >= mark and str(mark) not in reached:
                reached[str(mark)] = now
        if n == expect:
            done = now
            break
        if now > timeout:
            break
        time.sleep(cmd["poll"])
    time.sleep(1)  # the kernel's lines of the last moment reach the journal
    return {"seconds": done, "first_s": first, "count": n, "before": before, "logged_in": sorted(seen),
            "marks": reached, "kernel": kernel_says(since - 1)}

serve({"setup": setup, "watch": watch, "clean": clean})
'''


def program(body: str) -> str:
    """A node's program: the prolog, the shared pure functions, then BODY."""
    shared = "\n\n".join(inspect.getsource(f) for f in SHARED)
    return "\n".join([PROLOG, f"POLL = {POLL!r}", shared, body])


class Remote:
    """One Python process on a lab VM over ssh: JSON commands on its stdin, one JSON answer per line on stdout."""

    BOOT = "import json, sys; exec(json.loads(sys.stdin.readline()))"

    def __init__(self, host: str, python: str, body: str):
        self.host = host
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(["ssh", "-F", str(SSH_CONFIG), host, f"{python} -u -c {shlex.quote(self.BOOT)}"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        self.buf = b""
        self.write(json.dumps(program(body)))

    def write(self, line: str) -> None:
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise BenchError(f"{self.host}: the bench's process is gone{self.stderr()}") from None

    def stderr(self) -> str:
        self.err.seek(0)
        text = self.err.read().decode(errors="replace").strip()
        return f" ({text[-1500:]})" if text else ""

    def send(self, op: str, **params) -> None:
        self.write(json.dumps({"op": op, **params}))

    def read(self, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"{self.host}: no answer to {what} within {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise BenchError(f"{self.host}: the bench's process ended during {what}{self.stderr()}")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        reply = json.loads(line)
        if "error" in reply:
            raise BenchError(f"{self.host}: {what}: {reply['error']}")
        return reply

    def call(self, op: str, timeout: float = 900, **params) -> dict:
        self.send(op, **params)
        return self.read(timeout, op)

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send("quit")
                self.read(60, "quit")
        except BenchError:
            pass
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def phase(what: str, calls: dict[Remote, dict], timeout: float = PHASE_TIMEOUT) -> tuple[dict[str, dict], float]:
    """Start one phase on several nodes at once: each gets its command, answers "ready", then all get "go" back to
    back; returns each host's answer and the seconds from go to the last answer (this host's clock)."""
    for remote, cmd in calls.items():
        remote.send(**cmd)
    for remote in calls:
        remote.read(READY_TIMEOUT, f"{what} (ready)")
    ticks = vm_cpu_ticks()
    started = time.monotonic()
    for remote in calls:
        remote.write("go")
    answers = {remote.host: remote.read(timeout, what) for remote in calls}
    wall = time.monotonic() - started
    answers["cpu"] = vm_cores(ticks, vm_cpu_ticks(), wall)
    return answers, wall


# --------------------------------------------------------------------------------------------
# the run


def preflight() -> dict:
    facts = fabricctl_facts(STORAGE, *GPUS)
    if ssh(STORAGE, f"{STORAGE_PYTHON} -c 'import rtslib_fb, fabric_core'", check=False).returncode != 0:
        raise BenchError(f"{STORAGE} has no fabricctl virtualenv with rtslib-fb ({STORAGE_PYTHON}): converge first")
    for gpu in GPUS:
        if ssh(gpu, "command -v iscsiadm >/dev/null && command -v python3 >/dev/null", check=False).returncode:
            raise BenchError(f"{gpu} has no iscsiadm or python3: converge site.yml first")
    address = facts.get("portal_ip") or facts["hosts"][STORAGE]
    return {"address": address, "port": PORT}


def clean(lab: dict) -> list[str]:
    """Every benchstorm session, node record, iface and map on the GPU nodes, then the target, backstore and file
    on storage1 removed; returns what is left (nothing, or why)."""
    left: list[str] = []
    params = {"target": TARGET, "prefix": NAME}
    remotes = []
    try:
        remotes = [Remote(gpu, NODE_PYTHON, NODE) for gpu in GPUS]
        for r in remotes:
            r.send("clean", **params)
        for r in remotes:
            got = r.read(600, "clean")
            if got["removed"]:
                say(f"{r.host}: removed {', '.join(got['removed'])}")
            left += [f"{r.host}: {x}" for x in got["left"]]
    except BenchError as exc:
        left.append(str(exc))
    finally:
        for r in remotes:
            r.close()
    storage = None
    try:
        storage = Remote(STORAGE, STORAGE_PYTHON, STORAGE_PROGRAM)
        got = storage.call("clean", timeout=600, **params)
        if got["removed"]:
            say(f"{STORAGE}: removed {', '.join(got['removed'])}")
        left += [f"{STORAGE}: {x}" for x in got["left"]]
    except BenchError as exc:
        left.append(str(exc))
    finally:
        if storage is not None:
            storage.close()
    return left


def journal_hint(hosts: list[str], since: str) -> str:
    """The iscsid journal of the hosts since a time, for a failure's message."""
    parts = []
    for host in hosts:
        proc = ssh(host, f"journalctl -u iscsid --no-pager -q --since {shlex.quote(since)} | tail -n 15",
                   check=False, timeout=60)
        if proc.stdout.strip():
            parts.append(f"--- {host}: journalctl -u iscsid\n{proc.stdout.strip()}")
    return ("\n" + "\n".join(parts)) if parts else ""


class Run:
    """One run: the processes on the three VMs, the plan of initiators, each round's seconds."""

    def __init__(self, lab: dict, count: int):
        self.lab = lab
        self.creds = credentials(count)
        self.count = count
        self.gpu_ifaces = {gpu: [c["iface"] for c in self.creds.values() if c["node"] == gpu] for gpu in GPUS}
        self.by_iface = {c["iface"]: c for c in self.creds.values()}
        self.runs: list[dict] = []
        self.setup: dict = {}
        self.storage: Remote | None = None
        self.gpus: dict[str, Remote] = {}

    def common(self) -> dict:
        return {"target": TARGET, "address": self.lab["address"], "port": self.lab["port"]}

    def start(self) -> None:
        say(f"{STORAGE}: target {TARGET}, a 16 MiB fileio LUN, {self.count} initiators granted with CHAP "
            "(the fabric's grant path)")
        self.storage = Remote(STORAGE, STORAGE_PYTHON, STORAGE_PROGRAM)
        self.gpus = {gpu: Remote(gpu, NODE_PYTHON, NODE) for gpu in GPUS}
        grants = {c["initiator"]: {k: c[k] for k in ("userid", "password", "mutual_userid", "mutual_password")}
                  for c in self.creds.values()}
        got = self.storage.call("setup", timeout=900, prefix=NAME, grants=grants, **self.common())
        if got["acls"] != self.count or got["authentication"] != 1:
            raise BenchError(f"{STORAGE}: the grant left {got['acls']} ACLs (authentication {got['authentication']}),"
                             f" not {self.count} with CHAP")
        self.setup = {"grant_s": round(got["grant_s"], 3), "grant_actions": got["actions"]}
        say(f"{STORAGE}: granted in {got['grant_s']:.2f} s ({got['actions']} LIO actions); "
            f"ifaces and node records on {', '.join(GPUS)}")
        for gpu, remote in self.gpus.items():
            ifaces = [{"iface": c["iface"], "initiator": c["initiator"], "username": c["userid"],
                       "password": c["password"], "username_in": c["mutual_userid"],
                       "password_in": c["mutual_password"]} for c in self.creds.values() if c["node"] == gpu]
            remote.send("setup", ifaces=ifaces, **self.common())
        for gpu, remote in self.gpus.items():
            got = remote.read(900, "setup")
            if got["records"] != len(self.gpu_ifaces[gpu]):
                raise BenchError(f"{gpu}: {got['records']} node records of {TARGET}, not {len(self.gpu_ifaces[gpu])}")
            self.setup[f"records_s_{gpu}"] = round(got["seconds"], 3)

    def settle(self, gpus) -> None:
        for gpu in gpus:
            self.gpus[gpu].send("settle")
        for gpu in gpus:
            self.gpus[gpu].read(300, "settle")

    def logins(self, gpus: tuple[str, ...], one: bool) -> dict:
        """One login phase (one iface of gpu1, or all of each GPU's), then its logout phase; checked."""
        expect = 1 if one else self.count
        since = ssh(GPUS[0], "date '+%Y-%m-%d %H:%M:%S'").stdout.strip()
        calls: dict[Remote, dict] = {self.storage: {"op": "watch", "target": TARGET, "expect": expect,
                                                    "timeout": PHASE_TIMEOUT - 60, "poll": POLL,
                                                    "marks": [] if one else [expect // 4, expect // 2,
                                                                             3 * expect // 4]}}
        wanted = {}
        for gpu in gpus:
            ifaces = self.gpu_ifaces[gpu][:1] if one else self.gpu_ifaces[gpu]
            wanted[gpu] = ifaces
            calls[self.gpus[gpu]] = {"op": "login", "one": one, "ifaces": ifaces,
                                     "initiators": {i: self.by_iface[i]["initiator"] for i in ifaces},
                                     **self.common()}
        answers, wall = phase("login", calls)
        problems = []
        for gpu in gpus:
            a = answers[gpu]
            failed = sorted(set(a["failed"]) | set(a["bad"]))
            if a["rc"] != 0 or failed:
                problems.append(f"{gpu}: iscsiadm --login exited {a['rc']}; not logged in: "
                                f"{', '.join(failed) or '-'}; {' | '.join(a['errors'][-5:])}")
        s = answers[STORAGE]
        if s["count"] != expect:
            names = {c["initiator"]: c["iface"] for c in self.creds.values()}
            missing = sorted(names[i] for i in names if i not in s["logged_in"]
                             and names[i] in {x for v in wanted.values() for x in v})
            problems.append(f"{STORAGE}: {s['count']} of {expect} sessions in configfs; missing: {', '.join(missing)}")
        if problems:
            raise BenchError("login failed: " + "; ".join(problems) + journal_hint(list(gpus), since))
        self.settle(gpus)
        out = {"host_wall_s": wall, "storage_s": s["seconds"], "storage_first_s": s["first_s"],
               "target_failed_logins": s["kernel"]["iSCSI Login negotiation failed"],
               "target_epipe": s["kernel"]["tx_data returned"],
               **{f"storage_{mark}_s": t for mark, t in s["marks"].items()},
               **{f"cpu_{vm}": cores for vm, cores in answers["cpu"].items()}}
        for gpu in gpus:
            out[f"{gpu}_s"] = answers[gpu]["login_s"]
            out[f"{gpu}_disks_s"] = answers[gpu]["disks_s"]
        # the logout: the same way
        calls = {self.storage: {"op": "watch", "target": TARGET, "expect": 0, "timeout": PHASE_TIMEOUT - 60,
                                "poll": POLL}}
        for gpu in gpus:
            calls[self.gpus[gpu]] = {"op": "logout", "one": one, "ifaces": wanted[gpu], **self.common()}
        answers, wall = phase("logout", calls)
        for gpu in gpus:
            if answers[gpu]["rc"] != 0 or answers[gpu]["left"]:
                raise BenchError(f"{gpu}: logout exited {answers[gpu]['rc']}, sessions left: "
                                 f"{', '.join(answers[gpu]['left']) or '-'}; {' | '.join(answers[gpu]['errors'])}")
            out[f"{gpu}_logout_s"] = answers[gpu]["logout_s"]
        if answers[STORAGE]["count"] != 0:
            raise BenchError(f"{STORAGE}: {answers[STORAGE]['count']} sessions still in configfs after the logout")
        out["storage_logout_s"] = answers[STORAGE]["seconds"]
        out["logout_host_wall_s"] = wall
        self.settle(gpus)
        return out

    def round(self, index: int, rounds: int) -> dict:
        order = ("one", "storm") if index % 2 == 0 else ("storm", "one")
        say(f"round {index + 1}/{rounds}: {' then '.join(order)}")
        run: dict = {"host_load_1min": os.getloadavg()[0]}  # the host is shared (other labs, tests): its load
        for part in order:
            if part == "one":
                got = self.logins(GPUS[:1], one=True)
                gpu = GPUS[0]
                run.update({"one_s": got[f"{gpu}_s"], "one_disk_s": got[f"{gpu}_disks_s"],
                            "one_logout_s": got[f"{gpu}_logout_s"]})
                run.update({f"one_{k}": v for k, v in got.items()
                            if k.startswith(("storage", "host", "target", "cpu"))})
                say(f"  one: {run['one_s']:.2f} s (storage1 saw it at {got['storage_s']:.2f} s)")
            else:
                got = self.logins(GPUS, one=False)
                run.update({"storm64_s": max(got[f"{g}_s"] for g in GPUS),
                            "storm_disks_s": None if any(got[f"{g}_disks_s"] is None for g in GPUS)
                            else max(got[f"{g}_disks_s"] for g in GPUS),
                            "storm_logout_s": max(got[f"{g}_logout_s"] for g in GPUS)})
                run.update({f"storm_{k}": v for k, v in got.items()})
                say(f"  storm: {run['storm64_s']:.2f} s ("
                    + ", ".join(f"{g} {got[f'{g}_s']:.2f} s" for g in GPUS)
                    + f"; storage1 saw all {self.count} at {got['storage_s']:.2f} s; LIO logged "
                    f"{got['target_failed_logins']} failed login negotiations)")
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in run.items()}

    def close(self) -> None:
        for remote in [self.storage, *self.gpus.values()]:
            if remote is not None:
                remote.close()


def measure(lab: dict, rounds: int, count: int, result: dict) -> dict:
    result["commit"] = commit()  # the checkout measured
    run = Run(lab, count)
    try:
        run.start()
        for r in range(rounds):
            run.runs.append(run.round(r, rounds))
            result["runs"] = run.runs
    finally:
        run.close()
    result.update(summarize(run.runs))
    result["figures"].update({f"storm_setup_{k}": v for k, v in run.setup.items()})
    result.update({"rounds": rounds, "initiators": count, "runs": run.runs})
    return result


def write_results(result: dict, folder: Path = FOLDER) -> Path:
    """The storm figures and ratios into bench/results/attach.json, with the commit measured."""
    return merge_json("attach", "storm", result["figures"], result["ratios"],
                      {"rounds": result["rounds"], "initiators": result["initiators"], "seconds": result["runs"]},
                      measured=result["commit"], folder=folder)


def rows(result: dict, when: str) -> list[str]:
    f, r, n = result["figures"], result["ratios"], result["initiators"]
    per = n // len(GPUS)

    cpu = sum(f.get(f"storm_cpu_{vm}") or 0 for vm in (STORAGE, *GPUS))

    def cell(key: str) -> str:
        return "-" if f.get(key) is None else f"{f[key]}"

    return [
        f"## Login storm of {n} initiators (issue 29, `make bench-storm`)",
        "",
        f"{when}, commit {result.get('commit') or commit()}, {result['rounds']} rounds (one and storm alternating), "
        "medians. A throwaway "
        f"target on storage1 with one read-only LUN, {n} synthetic initiators granted through the fabric's grant "
        f"path ({cell('storm_setup_grant_s')} s, {f.get('storm_setup_grant_actions')} LIO actions), each with its "
        f"own CHAP (mutual); on gpu1 and gpu2 {per} open-iscsi ifaces each, one per initiator name, with a node "
        "record of the target. Each phase starts on every node at once; a login is timed on its GPU node until "
        "`iscsiadm --login` returns (the storm: `iscsiadm -m node -T T -p P --login`, all the node's records, "
        "until the slower node's returns), and all sessions are then checked logged in under their own "
        "initiator names. storage1 counts the sessions in configfs (0.1 s poll); the disks are counted in sysfs.",
        "",
        "| | one login (gpu1) | storm: all logged in | ratio |",
        "|---|---|---|---|",
        f"| GPU side, `iscsiadm --login` returned | {cell('storm_one_s')} s | {cell('storm64_s')} s "
        f"(gpu1 {cell('storm_gpu1_s')}, gpu2 {cell('storm_gpu2_s')}) | **{r['storm64_over_one']}** |",
        f"| storage1's configfs: all sessions there | {cell('storm_one_storage_s')} s | {cell('storm_storage_s')} s "
        f"(first at {cell('storm_storage_first_s')}) | "
        f"{ratio(f.get('storm_storage_s'), f.get('storm_one_storage_s'))} |",
        f"| every LUN's disk in sysfs | {cell('storm_one_disk_s')} s | {cell('storm_disks_s')} s "
        f"(gpu1 {cell('storm_gpu1_disks_s')}, gpu2 {cell('storm_gpu2_disks_s')}) | "
        f"{ratio(f.get('storm_disks_s'), f.get('storm_one_disk_s'))} |",
        f"| logout (`iscsiadm --logout`) | {cell('storm_one_logout_s')} s | {cell('storm_logout_s')} s "
        f"(gpu1 {cell('storm_gpu1_logout_s')}, gpu2 {cell('storm_gpu2_logout_s')}) | "
        f"{ratio(f.get('storm_logout_s'), f.get('storm_one_logout_s'))} |",
        f"| logins LIO gave up on (storage1's kernel log: \"iSCSI Login negotiation failed\") | "
        f"{cell('storm_one_target_failed_logins')} | {cell('storm_target_failed_logins')} "
        f"(per round: {', '.join(str(run.get('storm_target_failed_logins')) for run in result['runs'])}) | |",
        "| each VM's CPU during the login, in host cores (storage1, gpu1, gpu2) | "
        + ", ".join(cell(f"storm_one_cpu_{vm}") for vm in (STORAGE, *GPUS)) + " | "
        + ", ".join(cell(f"storm_cpu_{vm}") for vm in (STORAGE, *GPUS)) + " | |",
        "",
        f"The storm in storage1's configfs: a quarter of the sessions there at {cell(f'storm_storage_{n // 4}_s')} s, "
        f"half at {cell(f'storm_storage_{n // 2}_s')} s, three quarters at {cell(f'storm_storage_{3 * n // 4}_s')} s, "
        f"all at {cell('storm_storage_s')} s. Per round (one / storm, s): "
        + "; ".join(f"{run.get('one_s')} / {run.get('storm64_s')}" for run in result["runs"])
        + ". The host's load (1 min) at each round's start: "
        + ", ".join(str(run.get("host_load_1min")) for run in result["runs"])
        + f" ({os.cpu_count()} cores, shared with whatever else runs on it).",
        "",
        f"Reading: the storm took as long as {r['storm64_over_one']} single logins one after another, no gain from "
        "starting them together. LIO takes the logins of one target portal group one at a time (`iscsit_access_np` "
        "holds the TPG's `np_login_sem` from a login's first PDU until it ends), so the initiators of one target "
        "log in in series whatever they do, and on the lab every login step also costs emulated CPU on both sides "
        f"(during the storm storage1, gpu1 and gpu2 together used {cpu:.2f} host cores; this host has "
        f"{os.cpu_count()}). Where LIO gave up on a login, iscsid logged it in on a later attempt: in every round all "
        f"{n} were logged in, each under its own initiator name, and `iscsiadm --login` returned 0 on both nodes.",
    ]


def ratio(a, b) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def kept() -> list[str]:
    say(f"kept (--keep): {TARGET} on {STORAGE}, the {NAME}NN ifaces and node records on {', '.join(GPUS)}; "
        "`make bench-storm ARGS=--cleanup-only` removes them")
    return []


def main() -> int:
    args = bench_args(__doc__, rounds=3, rounds_help="rounds of one login and the storm",
                      keep="the target, its ACLs, the ifaces and node records (logged out)")
    result: dict = {}

    def report(done: dict, when: str) -> list[str]:
        write_results(done)
        return rows(done, when)

    return run_bench("bench-storm", SECTION, checking="up and converged (fabricctl's virtualenv on storage1, "
                     "iscsiadm on gpu1 and gpu2)", preflight=preflight, leftovers=clean,
                     cleanup_only=args.cleanup_only, measure=lambda lab: measure(lab, args.rounds, INITIATORS, result),
                     cleanup=lambda lab: kept() if args.keep else clean(lab),
                     rows=lambda _lab, done, when: report(done, when), partial=lambda: result)


if __name__ == "__main__":
    sys.exit(main())
