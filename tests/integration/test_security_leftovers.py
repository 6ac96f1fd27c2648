"""The leftovers of issue 26 on the lab (items 4, 6 and 7), each made to happen for real and read back through
another path than the one the code took:

* an LIO change that fails half-way (a portal on a port another program listens on: the kernel refuses to
  bind it) after withdrawing an ACL: the ACL is gone from configfs and from the file LIO restores at boot;
* a freeze that lands after its safety timer fired (a writer inside one long buffered write() that reads its
  source slowly holds `fsfreeze -f` back), fabricctl SIGKILLed then: the timer's watchdog thaws the file
  system once the freeze lands (a write completes, no task waits in percpu_rwsem_wait, its journal says it);
* a hold left by a SIGKILLed replication is named by `fabricctl status` with its release command and released
  by the next replicate, while a live holder's hold stays (`zfs holds` read back);
* an ingest copies what its walk checked only: a file added after the walk is not copied, a hard link to a
  file outside the source is refused (the staging file system read back).

Everything made here is removed at the end (a checkpoint job, a dataset, a scratch zvol and target, the
source trees, sysctls and holds put back).
"""

from __future__ import annotations

import base64
import json
import shlex
import sys
import uuid

import pytest
from conftest import FABRICCTL_PYTHON, REPO, SHARED, edited_config, run_python, step, wait_for

sys.path.insert(0, str(REPO / "plugins" / "module_utils"))
from fabric_core.node.freeze import BLOCKED_SCRIPT, thaw_unit  # noqa: E402

PRIVATE = "/root/.fabric-leftovers"  # 0700 on storage1 and gpu1: config copies, secrets, outputs
SPARE_ADDRESS = "10.77.0.98"  # an address of the storage network no lab VM has (a storage node that never answers)
SAVED = "/etc/rtslib-fb-target/saveconfig.json"  # what LIO restores at boot
TAG = uuid.uuid4().hex[:6]





def core_script(host, script: str) -> str:
    """Put a Python script in PRIVATE on the node; returns the shell words that run it with fabricctl's
    interpreter (arguments to be appended)."""
    path = f"{PRIVATE}/core-{uuid.uuid4().hex[:8]}.py"
    host.check_output(f"echo {base64.b64encode(script.encode()).decode()} | base64 -d > {path}")
    return f"{FABRICCTL_PYTHON} {path}"


def run_core(host, script: str, *args: str):
    """A Python script run by fabricctl's own interpreter on the node."""
    return host.run(f"{core_script(host, script)} " + " ".join(shlex.quote(a) for a in args))


def private_config(storage, name: str, change: str) -> str:
    path = f"{PRIVATE}/{name}.yml"
    storage.check_output(f"install -m 600 /dev/null {path}")
    return edited_config(storage, path, change)


@pytest.fixture(scope="module", autouse=True)
def private(hosts, converged):
    for node in ("storage1", "gpu1"):
        hosts[node].check_output(f"install -d -m 700 {PRIVATE}")
    yield
    for node in ("storage1", "gpu1"):
        hosts[node].run(f"rm -rf {PRIVATE}")


@pytest.fixture(scope="module")
def iqn_base(storage) -> str:
    return json.loads(run_python(storage, "import json, yaml\nprint(json.dumps(yaml.safe_load("
                                          "open('/etc/fabricctl/config.yml'))['iqn_base']))").stdout)


# ---- item 4: what was applied is saved, whatever failed after it ---------------------------------------

# argv: JSON {base, name, device, portals, acls: [[userid, initiator]], secrets}: lio.reconcile of one scratch
# target (its own backstore prefix), CHAP secrets made on the node (0600 file), never on a command line
RECONCILE = r'''
import json, os, secrets, sys
from fabric_core.base.runner import LocalRunner
from fabric_core.storage import lio
p = json.loads(sys.argv[1])
if not os.path.exists(p["secrets"]):
    fd = os.open(p["secrets"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, json.dumps({u: secrets.token_hex(8) for u in ("lefta", "leftb")}).encode())
    os.close(fd)
chap = json.load(open(p["secrets"]))
desired = {"base_iqn": p["base"], "backstore_prefix": "lefto_", "targets": [{
    "name": p["name"], "portals": [{"ip": ip, "port": port} for ip, port in p["portals"]],
    "luns": [{"name": p["lun"], "device": p["device"]}],
    "acls": [{"initiator": i, "chap": {"userid": u, "password": chap[u]}} for u, i in p["acls"]]}]}
try:
    out = lio.reconcile(desired, runner=LocalRunner())
    print(json.dumps({"ok": True, "done": out.get("done", [])}))
except lio.LioApplyError as err:
    print(json.dumps({"ok": False, "problem": err.problem, "done": err.done, "rolled_back": err.rolled_back}))
'''
# argv: target IQN: the scratch target and its backstore removed (and the configuration saved)
REMOVE = r'''
import sys
from fabric_core.base.runner import LocalRunner
from fabric_core.storage import lio
live = lio.read_live()
actions = lio.plan_removal(live, iqn_base=sys.argv[1].split(":")[0], backstore_prefix="lefto_",
                           target_iqns=[sys.argv[1]], force=True)
lio.converge(lio.DesiredState(base_iqn=sys.argv[1].split(":")[0], backstore_prefix="lefto_"), live, actions,
             runner=LocalRunner())
'''


def test_an_lio_change_failing_half_way_saves_the_acl_it_withdrew(storage, iqn_base):
    """A scratch target with the ACLs of two initiators; then one converge withdraws B and adds a portal on a port
    another program listens on (a listener of this test): the kernel refuses to bind it (a real failure, after
    B's ACL went), the error is raised, and B's ACL is gone from configfs AND from the saved file that the
    boot-time restore reads (before issue 26 the save was skipped: B came back at the next boot)."""
    name = f"lefto-{TAG}"
    iqn = f"{iqn_base}:{name}"
    zvol = f"tank/lefto-lio-{TAG}"
    a, b = f"{iqn_base}:lefto-a-{TAG}", f"{iqn_base}:lefto-b-{TAG}"
    acls_dir = f"/sys/kernel/config/target/iscsi/{iqn}/tpgt_1/acls"
    portal = storage.check_output("python3 -c \"import yaml; print(yaml.safe_load(open('/etc/fabricctl/config.yml'))"
                                  "['portal']['ip'])\"")
    busy_port = 3299
    base = {"base": iqn_base, "name": name, "lun": f"l{TAG}", "device": f"/dev/zvol/{zvol}",
            "secrets": f"{PRIVATE}/lio-chap.json"}
    storage.check_output(f"zfs create -V 16M {zvol} && udevadm settle && test -b /dev/zvol/{zvol}")
    listener = storage.check_output(
        "setsid python3 -c \"import socket, time; s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('{portal}', {busy_port})); s.listen(); time.sleep(600)\" > /dev/null 2>&1 < /dev/null & echo $!")
    try:
        assert wait_for(storage, f"ss -Hltn 'sport = :{busy_port}' | grep -q LISTEN", 30, 0.5)
        first = run_core(storage, RECONCILE, json.dumps({**base, "portals": [[portal, 3260]],
                                                         "acls": [["lefta", a], ["leftb", b]]}))
        assert first.rc == 0 and json.loads(first.stdout)["ok"], first.stdout + first.stderr
        assert storage.run(f"test -d {acls_dir}/{b}").rc == 0 and storage.run(f"grep -qF '{b}' {SAVED}").rc == 0
        step(f"one converge: withdraw {b}, add a portal on {portal}:{busy_port} (a port another program holds)")
        second = run_core(storage, RECONCILE, json.dumps({**base, "portals": [[portal, 3260], [portal, busy_port]],
                                                          "acls": [["lefta", a]]}))
        assert second.rc == 0, second.stderr
        out = json.loads(second.stdout)
        assert not out["ok"] and "create_portal" in out["problem"] and str(busy_port) in out["problem"], out
        assert [d.split(" ")[0] for d in out["done"]][-1] == "delete_acl", out  # applied before the failure
        # configfs: B's ACL gone, A's there; the saved file (what a boot restores) says the same
        assert storage.run(f"test -e {acls_dir}/{b}").rc != 0
        assert storage.run(f"test -d {acls_dir}/{a}").rc == 0
        assert storage.run(f"grep -cF '{b}' {SAVED}").stdout.strip() == "0", "the withdrawn ACL is still saved"
        assert storage.run(f"grep -qF '{a}' {SAVED}").rc == 0
        saved = json.loads(run_python(storage, "import json, sys\nd = json.load(open(sys.argv[1]))\n"
                                               "t = [t for t in d['targets'] if t['wwn'] == sys.argv[2]][0]\n"
                                               "print(json.dumps({'acls': [a['node_wwn'] for a in t['tpgs'][0]"
                                               "['node_acls']], 'portals': [p['port'] for p in t['tpgs'][0]"
                                               "['portals']]}))", SAVED, iqn).stdout)
        assert saved == {"acls": [a], "portals": [3260]}, saved  # the refused portal was not kept either
    finally:
        storage.run(f"kill {listener}")
        removed = run_core(storage, REMOVE, iqn)
        storage.run(f"udevadm settle; zfs destroy {zvol}")
    assert removed.rc == 0, removed.stderr
    assert storage.run(f"grep -cF '{iqn}' {SAVED}").stdout.strip() == "0"


# ---- item 6: a freeze that lands after its timer fired is still thawed ---------------------------------

@pytest.fixture(scope="module")
def job(fctl):
    """A checkpoint job of this file, written by gpu1; its volume destroyed at the end."""
    name = f"lefto-{TAG}"
    fctl.json("checkpoint", "volume", "create", name, "--size", "128M", "--writer", "gpu1")
    yield name
    res = fctl("checkpoint", "volume", "destroy", name, "--yes")
    assert res.rc == 0, res.stderr


# On the writer: one write() of a whole file whose source is an mmap of another file that is not in the page
# cache: the write() holds the file system's freeze protection (sb_start_write) while it faults its source in,
# at the read rate its cgroup allows. argv: source, destination, a mark made just before the write()
WRITER = r'''
import mmap, os, sys
src, dst, mark = sys.argv[1:4]
with open(src, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
open(mark, "w").close()
print("wrote", os.write(fd, m), flush=True)
'''


def test_a_freeze_that_lands_after_its_timer_fired_is_thawed_when_fabricctl_is_killed(hosts, storage, fctl, job):
    """On gpu1 a writer is inside one 32 MiB write() whose source pages are read in at 1 MiB/s (an mmap of a file
    not in the page cache, cgroup io.max on reads: `sync -f` is not slowed, the write() is): `fsfreeze -f` waits
    for that write() to return, long after the 5 s safety timer fired. fabricctl is SIGKILLed in that very window
    (the timer's service running while `fsfreeze -f` has not returned): the freeze lands later with nobody left to
    thaw it but the timer's watchdog, which must (it keeps trying under the freeze's lock). Read back on gpu1: a
    write completes, no task waits in percpu_rwsem_wait, and the watchdog's journal says it thawed the mount
    point (it did thaw a landed freeze)."""
    gpu1 = hosts["gpu1"]
    mountpoint = f"/checkpoints/{job}"
    unit, writer = thaw_unit(mountpoint), f"lefto-writer-{TAG}"
    env = private_config(storage, "thaw", "c['defaults']['thaw_after_seconds'] = 5")
    since = gpu1.check_output("date +%s")
    device = gpu1.check_output(f"findmnt -no SOURCE {mountpoint}")
    src, dst, mark = f"{mountpoint}/src", f"{mountpoint}/dst", f"{PRIVATE}/writing"
    gpu1.check_output(f"dd if=/dev/urandom of={src} bs=1M count=32 oflag=direct status=none")  # not cached
    gpu1.check_output(f"echo {base64.b64encode(WRITER.encode()).decode()} | base64 -d > {PRIVATE}/writer.py")
    pid = None

    def seen() -> str:
        return (storage.run(f"cat {PRIVATE}/snap.out").stdout + gpu1.run(
            f"systemctl status --no-pager {unit}.timer {unit}.service {writer}; pgrep -af fsfreeze").stdout)[-3000:]

    try:
        gpu1.check_output(f"systemd-run --quiet --unit={writer} -p 'IOReadBandwidthMax={device} 1M' "
                          f"python3 {PRIVATE}/writer.py {src} {dst} {mark}")
        assert wait_for(gpu1, f"test -e {mark}", 60, 0.2), "the writer never started its write()"
        assert gpu1.run(f"systemctl is-active --quiet {writer}").rc == 0, "the write() was not slow"
        step("the writer is inside its slow write(): checkpoint snapshot with a 5 s safety timer")
        pid = storage.check_output(f"{env} setsid fabricctl checkpoint snapshot {job} --step 1 "
                                   f"> {PRIVATE}/snap.out 2>&1 < /dev/null & echo $!")
        window = (f"systemctl is-active --quiet {unit}.service && "
                  f"pgrep -f '^fsfreeze -f {mountpoint}$' > /dev/null")
        assert wait_for(gpu1, window, 120, 0.5), \
            f"never saw the timer's service running while fsfreeze -f had not returned: {seen()}"
        step("the timer fired, the freeze has not landed: fabricctl SIGKILLed")
        storage.run(f"kill -KILL {pid}")
        # the freeze lands once the write() returns (about 30 s at 1 MiB/s), then the watchdog thaws it within a
        # second or so. A write to a frozen file system cannot be killed: the probe runs in the background and
        # leaves a mark once its write went through
        assert wait_for(gpu1, f"! pgrep -f '^fsfreeze -f {mountpoint}$' > /dev/null", 180, 1), \
            f"the freeze never landed: {seen()}"
        done = f"{PRIVATE}/probe-done"
        gpu1.check_output(f"setsid sh -c 'echo y > {mountpoint}/.probe && touch {done}' > /dev/null 2>&1 "
                          "< /dev/null &")
        assert wait_for(gpu1, f"test -e {done}", 60, 1), f"the writer is still frozen: {seen()}"
        assert gpu1.check_output(f"sh -c {shlex.quote(BLOCKED_SCRIPT)}") == "", "a task still waits on a freeze"
        fired = gpu1.check_output(f"journalctl -u {unit}.service -o cat --no-pager -q --since @{since}")
        assert f"thawed {mountpoint}" in fired, fired  # it thawed a freeze that landed after it had fired
    finally:
        if pid:
            storage.run(f"kill -KILL {pid} 2>/dev/null")
        gpu1.run(f"systemctl stop {writer}; systemctl reset-failed {writer} 2>/dev/null")
        gpu1.run(f"fsfreeze -u {mountpoint} 2>/dev/null; rm -f {src} {dst} {mountpoint}/.probe")
    out = fctl.json("checkpoint", "snapshot", job, "--step", "2")  # the next snapshot works (leftovers handled)
    assert out["freeze_seconds"] > 0


# ---- item 7: a killed replication's hold; an ingest that copies only what it checked --------------------

# argv: snapshot, "dead" or "live": a fabric:sending hold as replicate places it (holders.tag, lzc.hold), by a
# process then SIGKILLed ("dead") or left sleeping ("live"); prints the tag first
HOLD = r'''
import os, signal, sys, time
from fabric_core.storage import holders, lzc
from fabric_core.services import replicate
from fabric_core.base.runner import LocalRunner
tag = holders.tag(replicate.HOLD_SENDING)
lzc.hold(sys.argv[1], tag, runner=LocalRunner())
print(tag, flush=True)
if sys.argv[2] == "dead":
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(900)
'''


def test_a_killed_replications_hold_is_named_by_status_and_released_by_the_next_run(storage, fctl, published):
    """Two fabric:sending holds on shared@v1 as `fabricctl replicate` places them: one of a process SIGKILLed,
    one of a process still running. status names the dead one with its `zfs release` command (not the live
    one); the next replicate of the volume (here to a storage node that does not answer: the run fails, after
    its start) releases the dead one and leaves the live one (`zfs holds` read back)."""
    snap = f"tank/datasets/{SHARED}@v1"
    hold = core_script(storage, HOLD)
    dead = live = live_pid = ""
    try:
        dead = storage.run(f"{hold} {snap} dead; true").stdout.strip()  # (not exec'd: its SIGKILL is its own)
        assert dead.startswith("fabric:sending:"), dead
        live_pid = storage.check_output(f"setsid {hold} {snap} live > {PRIVATE}/live.out 2>&1 < /dev/null & "
                                        "echo $!")
        assert wait_for(storage, f"test -s {PRIVATE}/live.out", 30, 0.5)
        live = storage.check_output(f"head -1 {PRIVATE}/live.out")
        held = storage.check_output(f"zfs holds -H {snap}")
        assert dead in held and live in held, held
        status = json.loads(storage.run("fabricctl status --json").stdout)
        check = next(c for c in status["checks"] if c["name"] == "holds")
        assert check["state"] == "WARNING" and f"zfs release {dead} {snap}" in check["summary"], check
        assert live not in check["summary"]
        env = private_config(storage, "peer", f"c['storage_nodes'] = {{'storage9': {{'address': '{SPARE_ADDRESS}'}}}}")
        step(f"the next replicate of {SHARED} (to storage9, which does not answer)")
        res = fctl("replicate", f"{SHARED}@v1", "--to", "storage9", env=env, timeout=300)
        assert res.rc != 0 and "storage9" in res.stderr, (res.rc, res.stderr)
        held = storage.check_output(f"zfs holds -H {snap}")
        assert dead not in held, held  # released: its process is gone
        assert live in held, held  # kept: its process runs
    finally:
        if live_pid:
            storage.run(f"kill -KILL {live_pid}")
        for tag in (dead, live):
            if tag:
                storage.run(f"zfs release {shlex.quote(tag)} {snap} 2>/dev/null")
    status = json.loads(storage.run("fabricctl status --json").stdout)
    assert next(c for c in status["checks"] if c["name"] == "holds")["state"] == "OK"


@pytest.fixture(scope="module")
def dataset(fctl, storage):
    name = f"lefto-{TAG}"
    fctl.json("dataset", "create", name, "--size", "64M")
    src = f"/srv/fabric-leftovers-{TAG}"
    storage.check_output(f"mkdir -p {src}/tree/b && echo a > {src}/tree/a && echo c > {src}/tree/b/c && "
                         f"echo secret > {src}/secret")
    yield name, src
    storage.run(f"rm -rf {src}")
    res = fctl("dataset", "destroy", name, "--yes")
    assert res.rc == 0, res.stderr


def test_an_ingest_refuses_a_hard_link_out_of_the_source_and_copies_only_what_it_checked(storage, fctl, dataset):
    name, src = dataset
    staging = f"/srv/fabricctl/staging/{name}"
    storage.check_output(f"ln {src}/secret {src}/tree/b/innocent")
    refused = fctl("dataset", "ingest", name, f"{src}/tree/")
    assert refused.rc == 1 and f"{src}/tree/b/innocent" in refused.stderr, refused.stderr
    assert "hard links outside" in refused.stderr and "fix:" in refused.stderr
    assert storage.run(f"test -e {staging}/a || test -e {staging}/b").rc != 0, "something was copied"
    storage.check_output(f"rm {src}/tree/b/innocent")
    step("an ingest held after its walk (FABRICCTL_PAUSE=ingest-copy); a file added to the source meanwhile")
    out = f"{PRIVATE}/ingest"
    pid = storage.check_output(f"FABRICCTL_PAUSE=ingest-copy:15 setsid fabricctl dataset ingest {name} {src}/tree/ "
                               f"--json > {out}.out 2> {out}.err < /dev/null & echo $!")
    # in the pause: the walk is done (python's time.sleep waits in clock_nanosleep)
    assert wait_for(storage, f"grep -qE '^(hrtimer_nanosleep|do_nanosleep)$' /proc/{pid}/wchan", 60, 0.2), \
        "the ingest never paused"
    storage.check_output(f"echo added > {src}/tree/b/added-later")
    assert wait_for(storage, f"! kill -0 {pid} 2>/dev/null", 120, 1), "the ingest did not end"
    result = json.loads(storage.check_output(f"cat {out}.out"))
    assert result["files"] == 2 and result["copied"] == 2, result
    assert storage.check_output(f"cat {staging}/a {staging}/b/c") == "a\nc"
    assert storage.run(f"test -e {staging}/b/added-later").rc != 0, "the file added after the walk was copied"
