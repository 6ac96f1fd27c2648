"""One slow thing must not stall every change (issue 26, item 3), on the lab.

A long `dataset ingest` (held mid-copy with FABRICCTL_PAUSE=ingest-copying, its staging mounted) holds only its
dataset's locks: meanwhile a checkpoint snapshot of a training job and a publish succeed, and a seal of the same
dataset gives up naming the ingest. A GPU node that hangs (its sshd stopped with SIGSTOP: it accepts and never
answers) makes a publish to both GPU nodes fail for that node only, naming it, while the other completes, and the
node lock is free afterwards. Read back through other paths: `zfs list -t snapshot`, the lock files, `flock -n`
from another process, /proc/locks, findmnt on the GPU node, and fabricctl's JSON.

Builds a small dataset and a checkpoint job of its own and destroys both at the end; `published` (shared@v1 on
gpu_nodes) is used as it is and left as found.
"""

from __future__ import annotations

import json

import pytest
from conftest import edited_config, step, wait_for

NAME = "stall"  # the dataset ingested
JOB = "stalljob"  # the checkpoint job snapshotted meanwhile
PRIVATE = "/root/.fabric-stall"  # 0700: sources, outputs, a config copy
SRC = f"{PRIVATE}/src"
LOCKS = "/run/fabric/locks"
NODE_LOCK = "/run/fabric/node.lock"



def free(host, path: str) -> bool:
    """Another process gets the lock file at once (flock -n: what a second fabricctl would find)."""
    return host.run(f"flock -n {path} true").rc == 0


@pytest.fixture(scope="module")
def subjects(hosts, storage, fctl):
    """The dataset NAME (a few files to ingest) and the job JOB written by gpu1; destroyed at the end."""
    storage.check_output(f"install -d -m 0700 {PRIVATE} && rm -rf {SRC} && mkdir -p {SRC}/a && "
                         f"for i in 1 2 3; do head -c 65536 /dev/urandom > {SRC}/a/f$i; done")
    fctl.json("dataset", "create", NAME, "--size", "64M")
    fctl.json("checkpoint", "volume", "create", JOB, "--size", "256M", "--writer", "gpu1")
    yield
    step("destroying the test's dataset and job")
    res = fctl("checkpoint", "volume", "destroy", JOB, "--yes")
    assert res.rc == 0, res.stderr
    res = fctl("dataset", "destroy", NAME, "--yes")
    assert res.rc == 0, res.stderr
    storage.run(f"rm -rf {PRIVATE}")


def test_a_long_ingest_holds_only_its_datasets_locks_while_a_snapshot_and_a_publish_go_on(
        hosts, storage, fctl, published, subjects):
    staging_lock = f"{LOCKS}/staging-{NAME}.lock"
    step(f"dataset ingest {NAME}, held mid-copy (its staging mounted)")
    staging = f"/srv/fabricctl/staging/{NAME}"
    storage.check_output(f"! findmnt -n {staging} > /dev/null || umount {staging}")  # its mount shows it got past
    storage.check_output(
        f"rm -f {PRIVATE}/ingest.rc; setsid sh -c 'FABRICCTL_PAUSE=ingest-copying:600 timeout 900 fabricctl dataset "
        f"ingest {NAME} {SRC}/ > {PRIVATE}/ingest.out 2> {PRIVATE}/ingest.err; echo $? > {PRIVATE}/ingest.rc' "
        "> /dev/null 2>&1 < /dev/null &")
    try:
        assert wait_for(storage, f"! flock -n {staging_lock} true && findmnt -n {staging}", 120), \
            storage.run(f"cat {PRIVATE}/ingest.err").stdout  # its lock held, then its mount made: in the copy
        holder = json.loads(storage.check_output(f"cat {staging_lock}"))
        assert holder["command"] == f"fabricctl dataset ingest {NAME}", holder  # audit's command line: no paths
        # the kernel's view: the ingest's pid holds a lock on the staging lock file; the node lock is free
        inode = storage.check_output(f"stat -c %i {staging_lock}")
        assert any(line.split()[4] == str(holder["pid"]) and line.split()[5].endswith(f":{inode}")
                   for line in storage.check_output("cat /proc/locks").splitlines() if "->" not in line)
        assert free(storage, NODE_LOCK) and not free(storage, staging_lock)

        step(f"meanwhile: checkpoint snapshot {JOB} --step 1 and publish {published} --to gpu1")
        snap = fctl("checkpoint", "snapshot", JOB, "--step", "1", "--json")
        assert snap.rc == 0, snap.stderr
        assert f"tank/checkpoints/{JOB}@step-1" in storage.check_output(
            f"zfs list -H -t snapshot -o name -r tank/checkpoints/{JOB}").split()
        pub = fctl("publish", published, "--to", "gpu1", "--json")
        assert pub.rc == 0, pub.stderr
        assert {h["status"] for h in json.loads(pub.stdout)["hosts"].values()} == {"ok"}
        dataset, version = published.split("@")
        assert hosts["gpu1"].run(f"findmnt -n /datasets/{dataset}/{version}").rc == 0
        assert "waiting up to" not in snap.stderr + pub.stderr  # neither waited for any lock

        step("the same dataset: a seal gives up on its lock, naming the ingest")
        env = edited_config(storage, f"{PRIVATE}/wait1.yml", "c['lock'] = {'wait_seconds': 1}")
        seal = fctl("dataset", "seal", NAME, "v1", env=env)
        assert seal.rc == 4, seal.stdout + seal.stderr
        assert f"fabricctl dataset ingest {NAME}, pid {holder['pid']}" in seal.stderr, seal.stderr
        assert "staging-stall.lock" in seal.stderr
        assert not free(storage, staging_lock) and storage.run(f"test -e {PRIVATE}/ingest.rc").rc != 0  # still held
    finally:  # the ingest ends killed (SIGTERM; a background job ignores SIGINT): the kernel frees its locks
        pid = storage.run(f"sed -n 's/.*\"pid\": \\([0-9]*\\).*/\\1/p' {staging_lock}").stdout.strip()
        storage.run(f"kill -TERM {pid} || pkill -TERM -f 'python.*fabricctl dataset ingest {NAME} '" if pid else
                    f"pkill -TERM -f 'python.*fabricctl dataset ingest {NAME} '")  # never the sh that writes the rc
    assert wait_for(storage, f"test -s {PRIVATE}/ingest.rc", 60)
    assert storage.check_output(f"cat {PRIVATE}/ingest.rc") != "0"
    # killed, it could not clear its description from the file: the kernel released the lock all the same
    assert free(storage, staging_lock) and free(storage, NODE_LOCK)
    step("the ingest again, to its end")
    out = fctl.json("dataset", "ingest", NAME, f"{SRC}/")
    assert out["files"] == 3 and out["copied"] + out["skipped"] == 3


def test_a_hung_gpu_node_fails_its_part_of_a_publish_naming_it_and_frees_the_lock(hosts, storage, fctl, published):
    gpu2 = hosts["gpu2"]
    listener = gpu2.check_output("ss -Htlnp 'sport = :22' | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2")
    assert listener.isdigit(), listener
    step(f"gpu2's sshd (pid {listener}) stopped: it accepts connections and never answers")
    # a timer on gpu2 wakes it whatever happens to this test (the finally below does it at once)
    gpu2.check_output(f"systemd-run --quiet --on-active=120 --unit=fabric-stall-cont kill -CONT {listener} && "
                      f"kill -STOP {listener}")
    try:
        res = fctl("publish", published, "--to", "gpu_nodes", "--json")
    finally:
        gpu2.run(f"kill -CONT {listener}; systemctl stop fabric-stall-cont.timer; true")
    assert res.rc == 3, res.stdout + res.stderr  # partial: one host done, one failed
    out = json.loads(res.stdout)
    assert out["hosts"]["gpu1"]["status"] == "ok", out["hosts"]
    assert out["hosts"]["gpu2"]["status"] != "ok", out["hosts"]
    assert "gpu2" in res.stderr and "cannot reach gpu2 (10.77.0.22" in res.stderr, res.stderr
    assert free(storage, NODE_LOCK) and storage.check_output(f"cat {NODE_LOCK}") == ""
    step("gpu2 answers again: the same publish converges")
    again = fctl("publish", published, "--to", "gpu_nodes", "--json")
    assert again.rc == 0, again.stderr
    assert {h["status"] for h in json.loads(again.stdout)["hosts"].values()} == {"ok"}
    dataset, version = published.split("@")
    assert gpu2.run(f"findmnt -n /datasets/{dataset}/{version}").rc == 0
