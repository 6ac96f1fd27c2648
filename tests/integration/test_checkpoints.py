"""Checkpoints and rotation on the lab (issue 5): a job's writable volume with one writer,
consistent snapshots (fsfreeze on the writer, thawed whatever fails), restore to many hosts,
rollback, retention with its protections, the node lock, the textfile metric and the timer.

Checked through separate read paths: `zfs get`/`zfs list`/`zfs holds` and configfs on storage1;
findmnt and the files themselves on the GPU nodes; the journal for the timer.
"""

from __future__ import annotations

import base64
import json
import time

import pytest
from conftest import FABRICCTL_PYTHON, assert_refused_and_nothing_changed, edited_config, run_python, step

JOB = "train"
VOL = f"tank/checkpoints/{JOB}"
TARGET = "/sys/kernel/config/target/iscsi/iqn.2026-11.io.fabric.lab.fabricctl:ck.train.rw/tpgt_1"
METRICS_FILE = "/var/lib/prometheus/node-exporter/fabricctl.prom"


def snapshots(storage) -> list[str]:
    out = storage.run(f"zfs list -H -t snapshot -o name -s createtxg -r {VOL}").stdout
    return [line.split("@", 1)[1] for line in out.split()]


def writable(host, timeout: int = 20) -> bool:
    """True when a write to the checkpoint file system completes (it hangs while frozen)."""
    return host.run(f"timeout {timeout} sh -c 'echo x > /checkpoints/{JOB}/probe && sync'").rc == 0


def test_volume_for_one_writer(hosts, storage, fctl):
    step("fabricctl checkpoint volume create")
    since = hosts["gpu1"].check_output("date +%s")
    out = fctl.json("checkpoint", "volume", "create", JOB, "--size", "1G", "--writer", "gpu1")
    assert out["writer"] == "gpu1"
    # the production path: storage1's key runs only gpu1's agent, which attached the volume (issue 29 item 3)
    key = storage.check_output("cut -d' ' -f2 /etc/fabricctl/id_ed25519.pub")
    line = next(x for x in hosts["gpu1"].check_output("cat /root/.ssh/authorized_keys").splitlines() if key in x)
    assert line.startswith('command="/usr/local/sbin/fabric-node --ssh --from storage1",restrict,'), line
    asked = hosts["gpu1"].check_output(f"journalctl -t fabric-node -o cat --no-pager -q --since @{since}")
    assert any(f"a storage node's request: attach-writable {JOB} --fs " in x and "--from storage1" in x
               for x in asked.splitlines()), asked
    assert storage.check_output(f"zfs get -H -o value fabric:writer,fabric:kind {VOL}").split() == [
        "gpu1", "checkpoint-volume"]
    assert storage.check_output(f"ls {TARGET}/acls") == "iqn.2026-11.io.fabric.lab:gpu1"
    assert storage.check_output(f"cat {TARGET}/acls/iqn.2026-11.io.fabric.lab:gpu1/lun_0/write_protect") == "0"
    assert "rw" in hosts["gpu1"].check_output(f"findmnt -n -o OPTIONS /checkpoints/{JOB}").split(",")
    assert writable(hosts["gpu1"])
    again = fctl.json("checkpoint", "volume", "create", JOB, "--size", "1G", "--writer", "gpu1")
    assert again["storage"]["lio_changed"] is False and again["hosts"]["gpu1"]["result"]["changed"] is False


@pytest.mark.parametrize("args, words", [
    (["checkpoint", "volume", "create", JOB, "--size", "1G", "--writer", "gpu2"], ["second writer", "gpu1"]),
    (["checkpoint", "snapshot", "nosuch", "--step", "1"], ["unknown job 'nosuch'"]),
    (["checkpoint", "snapshot", JOB, "--step", "1", "--metric", "bogus=1"], ["unknown metric 'bogus'"]),
    (["checkpoint", "snapshot", JOB, "--step", "1", "--metric", "loss=abc"], ["not a number"]),
    (["checkpoint", "list", "nosuch"], ["unknown job"]),
    (["checkpoint", "restore", JOB, "--step", "999", "--to", "gpu1"], ["no checkpoint at step 999"]),
])
def test_bad_input_is_refused_and_changes_nothing(storage, fctl, args, words):
    assert_refused_and_nothing_changed(storage, fctl, args, words)


def test_snapshots_carry_step_metrics_and_tags(hosts, storage, fctl):
    step("fabricctl checkpoint snapshot x5")
    for n, loss in ((100, 0.9), (200, 0.5), (300, 0.7), (400, 0.5), (500, 0.8)):
        hosts["gpu1"].check_output(f"echo step{n} > /checkpoints/{JOB}/STEP")
        tags = ["--tag", "release"] if n == 300 else []
        out = fctl.json("checkpoint", "snapshot", JOB, "--step", str(n), "--metric", f"loss={loss}", *tags)
        assert out["freeze_seconds"] > 0
    assert snapshots(storage) == [f"step-{n}" for n in (100, 200, 300, 400, 500)]
    props = storage.check_output(f"zfs get -H -o value fabric:step,fabric:metric.loss,fabric:tags {VOL}@step-300")
    assert props.split() == ["300", "0.7", "release"]
    res = fctl("checkpoint", "snapshot", JOB, "--step", "300")
    assert res.rc == 1 and "already has a checkpoint at step 300" in res.stderr


def test_a_failing_snapshot_still_thaws_the_writer(hosts, storage, fctl):
    res = fctl("checkpoint", "snapshot", JOB, "--step", "600", env="FABRICCTL_FAULTS=checkpoint-snapshot")
    assert res.rc != 0 and "injected fault" in res.stderr
    assert "step-600" not in snapshots(storage)
    assert writable(hosts["gpu1"]), "the writer stayed frozen after a failed snapshot"


def test_an_unreachable_writer_means_no_snapshot(hosts, storage, fctl):
    env = edited_config(storage, "/tmp/writer-away.yml",
                        "c['hosts']['gpu1']['address'] = '10.77.0.99'; c['ssh']['connect_timeout'] = 3")
    res = fctl("checkpoint", "snapshot", JOB, "--step", "700", env=env)
    assert res.rc != 0 and "10.77.0.99" in res.stderr
    assert "step-700" not in snapshots(storage)
    assert writable(hosts["gpu1"])


def test_list_matches_zfs(storage, fctl):
    listed = fctl.json("checkpoint", "list", JOB)
    assert [c["step"] for c in listed["checkpoints"]] == [100, 200, 300, 400, 500]
    assert {c["step"]: c["metrics"]["loss"] for c in listed["checkpoints"]}[200] == 0.5
    assert listed["writer"] == "gpu1"


def test_restore_to_many_hosts_and_remove(hosts, storage, fctl):
    step("fabricctl checkpoint restore --step 200 --to gpu_nodes")
    res = fctl("checkpoint", "restore", JOB, "--step", "200", "--to", "gpu_nodes")
    assert res.rc == 0, res.stderr
    assert "fabric:published" in storage.check_output(f"zfs holds -H {VOL}@step-200")
    for gpu in ("gpu1", "gpu2"):
        where = f"/checkpoints/{JOB}/restore/200"
        assert "ro" in hosts[gpu].check_output(f"findmnt -n -o OPTIONS {where}").split(",")
        assert hosts[gpu].check_output(f"cat {where}/STEP") == "step200"
    listed = fctl.json("checkpoint", "list", JOB)
    assert sorted(next(c for c in listed["checkpoints"] if c["step"] == 200)["restored_to"]) == ["gpu1", "gpu2"]


def test_rollback_refuses_unnamed_or_restored_newer_checkpoints(storage, fctl):
    res = fctl("checkpoint", "rollback", JOB, "--step", "100")
    assert res.rc == 1 and "--discard-newer 200,300,400,500" in res.stderr
    res = fctl("checkpoint", "rollback", JOB, "--step", "100", "--discard-newer", "200,300,400,500")
    assert res.rc == 1 and "restored" in res.stderr
    assert snapshots(storage) == [f"step-{n}" for n in (100, 200, 300, 400, 500)]


def test_rotation_plan_protects_held_published_pinned_and_foreign(storage, fctl):
    storage.check_output(f"zfs snapshot {VOL}@manual")  # not fabricctl's: never destroyed
    env = edited_config(storage, "/tmp/rotate.yml",
                        "c['retention'] = {'policies': {'tight': {'keep_last': 1, 'pin_tags': ['release']}}, "
                        "'assign': {'checkpoints/train': 'tight'}}")
    plan = json.loads(fctl("rotate", "--dry-run", "--json", env=env).stdout)
    decisions = {d["name"].split("@")[1]: d for d in plan["decisions"] if d["name"].startswith(VOL + "@")}
    assert {k for k, d in decisions.items() if not d["keep"]} == {"step-100", "step-400"}
    assert decisions["step-200"]["keep"] and decisions["step-300"]["keep"] and decisions["step-500"]["keep"]
    assert decisions["manual"]["keep"]
    text = fctl("rotate", "--dry-run", "--explain", env=env).stdout
    assert "pinned" in text and "held" in text and "managed" in text
    assert snapshots(storage) == [f"step-{n}" for n in (100, 200, 300, 400, 500)] + ["manual"]  # dry run


def test_rotation_destroys_in_one_batch_and_writes_metrics(storage, fctl):
    env = "FABRICCTL_CONFIG=/tmp/rotate.yml"
    res = fctl("rotate", "--json", env=env)
    assert res.rc == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["batches"] == {VOL: 2}
    assert snapshots(storage) == ["step-200", "step-300", "step-500", "manual"]
    metrics = storage.check_output(f"cat {METRICS_FILE}")
    assert 'fabric_rotate_snapshots{action="destroyed"} 2.0' in metrics  # prometheus_client writes floats
    assert "fabric_rotate_last_success_timestamp_seconds" in metrics


# What whoever can write the textfile directory plants (issue 26, item 5): a link at the final name, and at every
# temporary name the old writer (open(PATH.PID.tmp, "w"), then rename) would have used for the next 3,000 PIDs,
# each to a file only root may change. Prints how many links it made.
PLANT_LINKS = r'''
import os, sys
path, decoy = sys.argv[1], sys.argv[2]
last = int(open("/proc/sys/kernel/ns_last_pid").read())
made = 0
for pid in range(last + 1, last + 3001):
    os.symlink(decoy, f"{path}.{pid}.tmp")
    made += 1
if os.path.lexists(path):
    os.unlink(path)
os.symlink(decoy, path)
print(made + 1)
'''


def test_rotation_metrics_are_never_written_through_a_planted_link(storage, fctl):
    """rotate's textfile goes through the core's atomic writer: a link planted at its name is replaced, not
    followed, and the names the old writer would have opened are never opened (the decoy read back)."""
    decoy = "/root/.fabric-decoy"
    storage.check_output(f"printf 'root only\\n' > {decoy} && chmod 600 {decoy}")
    before = storage.check_output(f"sha256sum {decoy}")
    links = f"find {METRICS_FILE.rsplit('/', 1)[0]} -maxdepth 1 -name 'fabricctl.prom.*.tmp'"
    try:
        res = run_python(storage, PLANT_LINKS, METRICS_FILE, decoy)
        assert res.rc == 0 and int(res.stdout) == 3001, res.stderr
        assert storage.check_output(f"readlink {METRICS_FILE}") == decoy
        res = fctl("rotate", "--json", env="FABRICCTL_CONFIG=/tmp/rotate.yml")
        assert res.rc == 0, res.stderr
        assert storage.check_output(f"sha256sum {decoy}") == before  # nothing written through any link
        assert storage.check_output(f"stat -c '%F %a %U' {METRICS_FILE}") == "regular file 644 root"
        assert "fabric_rotate_last_success_timestamp_seconds" in storage.check_output(f"cat {METRICS_FILE}")
        assert storage.check_output(f"{links} ! -type l") == ""  # no file of its own left at an old name
        assert int(storage.check_output(f"{links} -type l -lname {decoy} | wc -l")) == 3000  # none replaced
    finally:
        storage.run(f"{links} -type l -delete; rm -f {decoy}")


# Holds the node lock through fabricctl's own code (run with the interpreter of the virtualenv the
# fabricctl command belongs to), as another change would, until killed or 60 s have passed.
LOCK_HOLDER = r'''
import time
from fabric_core.base.lock import node_lock
with node_lock("integration test holder", wait=0):
    print("locked", flush=True)
    time.sleep(60)
'''


def test_a_rotation_gives_up_on_a_held_node_lock_naming_its_holder(storage, fctl):
    """Every change takes /run/fabric/node.lock; a rotation that finds it held for its whole wait
    (lock.wait_seconds, 2 s here) exits 4 naming the holder; a dry run takes no lock and works."""
    env = edited_config(storage, "/tmp/rotate-lock.yml", "c['retention'] = {}; c['lock'] = {'wait_seconds': 2}")
    storage.check_output(f"echo {base64.b64encode(LOCK_HOLDER.encode()).decode()} | base64 -d > /tmp/lock-holder.py")
    pid = storage.check_output(f'setsid {FABRICCTL_PYTHON} /tmp/lock-holder.py '
                               "> /tmp/lock-holder.out 2>&1 & echo $!").strip()
    try:
        for _ in range(30):
            if storage.run("grep -q locked /tmp/lock-holder.out").rc == 0:
                break
            time.sleep(0.5)
        assert "integration test holder" in storage.check_output("cat /run/fabric/node.lock")
        assert storage.check_output("stat -c %a /run/fabric /run/fabric/node.lock").split() == ["700", "600"]
        started = time.monotonic()
        res = fctl("rotate", env=env)
        assert res.rc == 4, res.stderr
        assert f"another fabric command is running: integration test holder, pid {pid}, since " in res.stderr
        assert time.monotonic() - started >= 2  # it waited
        res = fctl("rotate", "--dry-run", env=env)
        assert res.rc == 0, res.stderr
    finally:
        storage.run(f"kill {pid}")
    assert storage.run("timeout 30 flock /run/fabric/node.lock true").rc == 0  # released again
    assert fctl("rotate", env=env).rc == 0


@pytest.mark.parametrize("change, words", [
    ("c['retention']['policies']['checkpoints-default']['keep_lats'] = 3", ["keep_lats", "keep_last"]),
    ("c['retention']['policies']['checkpoints-default']['keep_last'] = -1", ["keep_last"]),
    ("c['retention']['policies']['checkpoints-default']['keep_best'] = {'metric': 'bleu', 'mode': 'max', "
     "'count': 1}", ["bleu"]),
])
def test_bad_policies_are_refused_and_nothing_is_destroyed(storage, fctl, change, words):
    env = edited_config(storage, "/tmp/badpolicy.yml", change)
    before = snapshots(storage)
    res = fctl("rotate", env=env)
    assert res.rc == 1, res.stderr
    for word in words:
        assert word in res.stderr
    assert snapshots(storage) == before


def test_rollback_with_named_newer_checkpoints(hosts, storage, fctl):
    res = fctl("checkpoint", "restore", JOB, "--step", "200", "--to", "gpu_nodes", "--remove")
    assert res.rc == 0, res.stderr
    res = fctl("checkpoint", "rollback", JOB, "--step", "200", "--discard-newer", "300,500")
    assert res.rc == 1 and "manual" in res.stderr and "not created by fabricctl" in res.stderr
    assert snapshots(storage) == ["step-200", "step-300", "step-500", "manual"]
    storage.check_output(f"zfs destroy {VOL}@manual")
    res = fctl("checkpoint", "rollback", JOB, "--step", "200", "--discard-newer", "300,500")
    assert res.rc == 0, res.stderr
    assert snapshots(storage) == ["step-200"]
    assert hosts["gpu1"].check_output(f"cat /checkpoints/{JOB}/STEP") == "step200"
    assert writable(hosts["gpu1"])


def test_the_timer_fires_rotation(storage):
    step("fabricctl-rotate.timer, made to fire now")
    assert storage.check_output("systemctl is-enabled fabricctl-rotate.timer") == "enabled"
    before = storage.run(f"stat -c %Y {METRICS_FILE}").stdout.strip() or "0"
    storage.check_output(
        "mkdir -p /run/systemd/system/fabricctl-rotate.timer.d && printf '[Timer]\\nOnCalendar=\\n"
        "OnCalendar=*:*:0/5\\nRandomizedDelaySec=0\\nAccuracySec=1s\\n' "
        "> /run/systemd/system/fabricctl-rotate.timer.d/test.conf && systemctl daemon-reload && "
        "systemctl restart fabricctl-rotate.timer")
    try:
        deadline = time.monotonic() + 180
        fired = ""
        while time.monotonic() < deadline:
            time.sleep(2)
            fired = storage.run(f"stat -c %Y {METRICS_FILE}").stdout.strip()
            if fired and int(fired) > int(before):
                break
        assert fired and int(fired) > int(before), "the timer did not run fabricctl rotate within 180 s"
        journal = storage.check_output("journalctl -u fabricctl-rotate.service --no-pager -n 20")
        assert "kept" in journal
    finally:
        storage.run("rm -rf /run/systemd/system/fabricctl-rotate.timer.d && systemctl daemon-reload && "
                    "systemctl restart fabricctl-rotate.timer")


def test_retiring_a_job_destroys_its_volume_and_checkpoints(hosts, storage, fctl):
    gpu = hosts["gpu1"]
    assert gpu.run(f"findmnt -n /checkpoints/{JOB}").rc == 0
    first = snapshots(storage)[0]

    step("a held checkpoint: refused, nothing changed")
    storage.check_output(f"zfs hold keep {VOL}@{first}")
    try:
        res = fctl("checkpoint", "volume", "destroy", JOB, "--yes")
        assert res.rc == 1 and "held" in res.stderr and f"{VOL}@{first}" in res.stderr, res.stderr
        assert storage.run(f"zfs list {VOL}").rc == 0 and gpu.run(f"findmnt -n /checkpoints/{JOB}").rc == 0
    finally:
        storage.check_output(f"zfs release keep {VOL}@{first}")

    step("without --yes: refused; --dry-run: the plan, nothing changed")
    res = fctl("checkpoint", "volume", "destroy", JOB)
    assert res.rc == 1 and "--yes" in res.stderr
    plan = fctl.json("checkpoint", "volume", "destroy", JOB, "--dry-run")
    assert plan["would_destroy"][0] == VOL and f"{VOL}@{first}" in plan["would_destroy"]
    assert storage.run(f"zfs list {VOL}").rc == 0 and storage.run(f"test -d {TARGET}").rc == 0

    step("fabricctl checkpoint volume destroy --yes")
    out = fctl.json("checkpoint", "volume", "destroy", JOB, "--yes")
    assert out["destroyed"][0] == VOL and out["hosts"]["gpu1"]["status"] == "ok", out
    assert storage.run(f"zfs list {VOL}").rc != 0
    assert storage.run(f"test -d {TARGET}").rc != 0, "the read-write target is still in configfs"
    assert gpu.run(f"findmnt -n /checkpoints/{JOB}").rc != 0
    assert "ck.train.rw" not in gpu.run("iscsiadm -m session").stdout
    res = fctl("checkpoint", "list", JOB)
    assert res.rc == 1 and "unknown job" in res.stderr
