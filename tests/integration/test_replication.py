"""Replication between storage nodes (issue 13) on the lab: storage1 replicates versions and checkpoints to
storage2 with `fabricctl replicate`, ZFS send | ssh | receive, and every result is read back on storage2 through
its own tools (`zfs get`, `zfs list`, `zfs holds`, configfs), never through fabricctl's answer alone.

Faults, each with a clear message and nothing lost: an unknown node, a pool without the space, a version that
diverged (same name, another GUID), a transfer killed with SIGKILL and one whose link drops (the re-run resumes
from the receive's token, no second full send), a replica changed by hand (refused unless --force). The attack:
storage1's fabricctl key, authorized on storage2 only for replica-serve, cannot run anything else there.
"""

from __future__ import annotations

import json
import re
import shlex
import time

import pytest
from conftest import Fctl, assert_refused_and_nothing_changed, step
from prometheus_client.parser import text_string_to_metric_families

ROOT = "tank/datasets"
NAME = "repl"
VOL = f"{ROOT}/{NAME}"
KEY = "/etc/fabricctl/id_ed25519"
CFS = "/sys/kernel/config/target"
TARGET = f"iqn.2026-11.io.fabric.lab.fabricctl:ds.{NAME}.v1"


@pytest.fixture(scope="module")
def nodes(peers):
    """storage1 and storage2 with fabricctl on both, each knowing the other, without this file's datasets."""
    s1, s2 = peers
    for host, job in ((s1, NAME), (s2, NAME)):
        host.run(f"fabricctl unpublish {job}@v1 --force")  # left by an earlier run, if any
    clean(s1, s2)
    yield s1, s2
    clean(s1, s2)


def clean(s1, s2) -> None:
    """What this file makes, gone from both nodes (a replica by zfs: fabricctl destroys only its own node's)."""
    for name in (NAME, "repldiv"):
        s2.run(f"zfs destroy -r {ROOT}/{name}")
        s1.run(f"zfs list {ROOT}/{name} >/dev/null 2>&1 && fabricctl dataset destroy {name} --yes")


@pytest.fixture(scope="module")
def f1(nodes):
    return Fctl(nodes[0])


@pytest.fixture(scope="module")
def f2(nodes):
    return Fctl(nodes[1])


def zget(host, prop: str, name: str) -> str:
    return host.check_output(f"zfs get -H -p -o value {prop} {name}")


def snaps(host, vol: str = VOL) -> list[str]:
    res = host.run(f"zfs list -H -t snapshot -o name -s createtxg -d 1 {vol}")
    return [line.split("@", 1)[1] for line in res.stdout.split()] if res.rc == 0 else []


def seal(host, fctl: Fctl, version: str, change: str) -> None:
    """Change the staging volume's files (shell, on storage1), ingest and seal ``version``."""
    host.check_output(f"mkdir -p /srv/{NAME}-src && cd /srv/{NAME}-src && {change}")
    fctl.json("dataset", "ingest", NAME, f"/srv/{NAME}-src/")
    fctl.json("dataset", "seal", NAME, version, "--note", f"replication test {version}")


def test_a_first_replication_sends_the_version_whole_with_its_metadata(nodes, f1):
    s1, s2 = nodes
    f1.json("dataset", "create", NAME, "--size", "512M")
    seal(s1, f1, "v1", "for i in $(seq 1 40); do head -c $((16384 * i)) /dev/urandom > f$i; done")
    plan = f1.json("replicate", f"{NAME}@v1", "--to", "storage2", "--dry-run")
    assert plan["dry_run"] and [t["kind"] for t in plan["nodes"][0]["transfers"]] == ["full"]
    assert any("zfs send" in line and "storage2:" in line for line in plan["planned"])
    assert s2.run(f"zfs list {VOL}").rc != 0  # the dry run sent nothing
    out = f1.json("replicate", f"{NAME}@v1", "--to", "storage2")
    t = out["nodes"][0]["transfers"][0]
    assert t["kind"] == "full" and t["sent_bytes"] > 0
    # storage2's own reading: the same snapshot (GUID), the seal's properties, read-only, from storage1
    assert zget(s2, "guid", f"{VOL}@v1") == zget(s1, "guid", f"{VOL}@v1")
    for prop in ("fabric:kind", "fabric:manifest-sha256", "fabric:files", "fabric:note"):
        assert zget(s2, prop, f"{VOL}@v1") == zget(s1, prop, f"{VOL}@v1"), prop
    assert zget(s2, "readonly", VOL) == "on" and zget(s2, "fabric:origin", VOL) == "storage1"
    assert zget(s2, "fabric:managed", VOL) == "true"
    # no hold left on either side; the base is bookmarked here
    assert s1.check_output(f"zfs holds -H {VOL}@v1") == "" and s2.check_output(f"zfs holds -H {VOL}@v1") == ""
    assert f"{VOL}#v1" in s1.check_output(f"zfs list -H -t bookmark -o name -d 1 {VOL}")


def test_the_next_version_goes_incrementally_and_a_second_run_sends_nothing(nodes, f1):
    s1, s2 = nodes
    seal(s1, f1, "v2", "for i in 1 2; do head -c 40000 /dev/urandom > f$i; done")  # 2 of 40 files change
    full = int(zget(s1, "referenced", f"{VOL}@v2"))
    out = f1.json("replicate", f"{NAME}@v2", "--to", "storage2")
    t = out["nodes"][0]["transfers"][0]
    assert t["kind"] == "incremental" and t["base"] == "@v1" and 0 < t["sent_bytes"] < full / 2, (t, full)
    assert snaps(s2) == ["v1", "v2"] and zget(s2, "guid", f"{VOL}@v2") == zget(s1, "guid", f"{VOL}@v2")
    again = f1.json("replicate", NAME, "--all", "--to", "storage2")
    assert again["nodes"][0]["transfers"] == [] and again["nodes"][0]["present"] == ["v1", "v2"]


def test_list_says_where_each_version_lives(nodes, f1, f2):
    mine = next(d for d in f1.json("list", NAME, "--nodes")["datasets"])
    assert {v["version"]: v["nodes"] for v in mine["versions"]} == {"v1": ["storage1", "storage2"],
                                                                     "v2": ["storage1", "storage2"]}
    assert mine["origin"] is None
    replica = next(d for d in f2.json("list", NAME, "--nodes")["datasets"])
    assert replica["origin"] == "storage1" and [v["version"] for v in replica["versions"]] == ["v1", "v2"]


def _manifest_check(gpu) -> None:
    check = gpu.run(f"cd /datasets/{NAME}/v1 && tail -n +2 .fabric/manifest.tsv | "
                    "awk -F'\\t' '{print $1\"  \"$3}' | sha256sum -c --quiet")
    assert check.rc == 0, check.stdout + check.stderr


def _paths(gpu) -> dict:
    """{WWID: [(device, dm state, checker state)]} of multipathd's paths on a GPU node."""
    out: dict = {}
    for line in gpu.check_output("multipathd show paths raw format '%w %d %t %T'").splitlines():
        wwid, dev, dm, chk = line.split()
        out.setdefault(wwid, []).append((dev, dm, chk))
    return out


def test_a_version_published_from_both_nodes_is_one_multipath_disk_and_outlives_one_unpublish(nodes, f1, f2, hosts):
    """Publish v1 to gpu2 from storage1 and storage2 (`--from-nodes`, on storage1): one LUN serial on both,
    two sessions, one multipath map with both paths up, mounted once by WWID. Unpublish on storage1: gpu2
    keeps its mount and reads on over storage2's path. Unpublish on storage2 too: the mount, the map and
    the WWID's listing go."""
    s1, s2 = nodes
    gpu2 = hosts["gpu2"]
    try:
        # one command on storage1 exports it on both nodes (storage2's through replica-serve) and logs in to both
        out = f1.json("publish", f"{NAME}@v1", "--to", "gpu2", "--from-nodes", "storage1,storage2")
        assert out["nodes"]["storage2"]["portal"] == "10.77.0.12:3260"
        serial = f"cat {CFS}/core/iblock_*/fctl_{NAME}.v1/wwn/vpd_unit_serial"
        assert s1.check_output(serial) == s2.check_output(serial)
        wwid = out["hosts"]["gpu2"]["result"]["multipath"]
        assert wwid and out["hosts"]["gpu2"]["result"]["device"] == f"/dev/disk/by-id/dm-uuid-mpath-{wwid}"
        sessions = gpu2.check_output("iscsiadm -m session")
        assert f"10.77.0.11:3260,1 {TARGET}" in sessions and f"10.77.0.12:3260,1 {TARGET}" in sessions
        assert [p[1:] for p in _paths(gpu2)[wwid]] == [("active", "ready")] * 2
        assert gpu2.check_output(f"findmnt -n -o SOURCE /datasets/{NAME}/v1") == f"/dev/mapper/{wwid}"
        _manifest_check(gpu2)
        step("unpublish on storage1: gpu2 reads on over storage2's path")
        res = f1.json("unpublish", f"{NAME}@v1")
        assert res["hosts"]["gpu2"]["result"]["paths_left"] == 1, res
        sessions = gpu2.check_output("iscsiadm -m session")
        assert f"10.77.0.11:3260,1 {TARGET}" not in sessions and f"10.77.0.12:3260,1 {TARGET}" in sessions
        assert [p[1:] for p in _paths(gpu2)[wwid]] == [("active", "ready")]
        assert gpu2.check_output(f"findmnt -n -o SOURCE /datasets/{NAME}/v1") == f"/dev/mapper/{wwid}"
        _manifest_check(gpu2)
        assert s1.check_output(f"zfs holds -H {VOL}@v1") == ""  # storage1 let go of its export
        step("unpublish on storage2: the last path, the mount and the map go")
        res = f2.json("unpublish", f"{NAME}@v1")
        assert res["hosts"]["gpu2"]["result"]["paths_left"] == 0, res
        assert gpu2.run(f"findmnt -n /datasets/{NAME}/v1").rc != 0
        assert TARGET not in gpu2.run("iscsiadm -m session").stdout
        assert wwid not in _paths(gpu2) and gpu2.run(f"test -e /dev/mapper/{wwid}").rc != 0
        assert gpu2.run(f"grep -qxF /{wwid}/ /etc/multipath/wwids").rc == 1  # multipath -w leaves it commented out
    finally:
        gone = [f2("unpublish", f"{NAME}@v1", "--force"), f1("unpublish", f"{NAME}@v1", "--force")]
    assert [r.rc for r in gone] == [0, 0], [r.stderr for r in gone]
    assert s2.check_output(f"zfs holds -H {VOL}@v1") == ""


def test_bad_input_is_refused_and_changes_nothing(nodes, f1, f2):
    s1, s2 = nodes
    # publishing on a node that lacks the version says how to replicate it there
    assert_refused_and_nothing_changed(s2, f2, ["publish", "nosuch@v1", "--to", "gpu2"],
                                       ["unknown dataset 'nosuch'", "fabricctl replicate nosuch@v1 --to storage2"])
    before = s2.check_output("zfs list -H -t all -o name -r tank | sort | md5sum")
    assert_refused_and_nothing_changed(s1, f1, ["replicate", f"{NAME}@v2", "--to", "storage9"],
                                       ["unknown storage node 'storage9'", "storage2"])
    assert_refused_and_nothing_changed(s1, f1, ["replicate", f"{NAME}@v2", "--to", "storage1"], ["is this node"])
    assert_refused_and_nothing_changed(s1, f1, ["replicate", f"{NAME}@v9", "--to", "storage2"], ["v9"])
    assert_refused_and_nothing_changed(s1, f1, ["replicate", f"{NAME}@v2", "--to", "storage2", "--limit", "10K"],
                                       ["below 1 MiB/s"])
    assert s2.check_output("zfs list -H -t all -o name -r tank | sort | md5sum") == before


def test_a_target_without_the_space_is_refused_before_anything_is_sent(nodes, f1):
    s1, s2 = nodes
    seal(s1, f1, "v3", "head -c 24M /dev/urandom > big3")
    used = int(zget(s2, "used", ROOT))
    s2.check_output(f"zfs set quota={used + (4 << 20)} {ROOT}")
    try:
        res = f1("replicate", f"{NAME}@v3", "--to", "storage2")
        assert res.rc == 1 and "available" in res.stderr and "fix:" in res.stderr, res.stderr
    finally:
        s2.check_output(f"zfs set quota=none {ROOT}")
    assert snaps(s2) == ["v1", "v2"] and zget(s2, "receive_resume_token", VOL) == "-"
    # publishing v3 from both nodes is refused before anything changes: storage2 does not hold it
    assert_refused_and_nothing_changed(s1, f1, ["publish", f"{NAME}@v3", "--to", "gpu2", "--from-nodes",
                                                "storage1,storage2"],
                                       ["storage2 does not hold", f"fabricctl replicate {NAME}@v3 --to storage2"])
    assert_refused_and_nothing_changed(s1, f1, ["publish", f"{NAME}@v3", "--to", "gpu2", "--from-nodes", "storage2"],
                                       ["does not name this node"])


def _wait_for_progress(s1, log: str, timeout: float = 180) -> None:
    """Until fabricctl's progress lines (one every 5 s off a terminal) show part of the stream sent."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = s1.run(f"cat {log}").stdout
        done = [float(m) for m in re.findall(r"([0-9.]+)%", text)]
        if done and 5 <= done[-1] < 80:
            return
        assert not done or done[-1] < 80, f"the transfer got too far to be cut short: {text[-300:]}"
        time.sleep(0.3)
    raise AssertionError(f"no progress from fabricctl replicate: {s1.run(f'cat {log}').stdout[-500:]}")


def _start_replicate(s1, version: str, log: str) -> None:
    # paced (--limit) so that each run is still sending when its first progress line shows
    s1.check_output(f"setsid sh -c 'fabricctl replicate {NAME}@{version} --to storage2 --limit 6M >{log} 2>&1' "
                    "</dev/null >/dev/null 2>&1 &")
    _wait_for_progress(s1, log)


def _receive_stopped_resumable(s2) -> None:
    deadline = time.monotonic() + 60
    while s2.run("pgrep -f 'zfs receive -s'").rc == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    token = zget(s2, "receive_resume_token", VOL)
    assert token not in ("", "-"), "no resumable receive state on storage2"


def test_a_replication_cut_short_resumes_where_it_stopped(nodes, f1):
    """Cut short twice, one version: SIGKILL of fabricctl, then (in the resumed run) a dropped link; each
    re-run plans `resume`, and the last one sends less than the estimate (never a second full send)."""
    s1, s2 = nodes
    version = "v4"
    seal(s1, f1, version, f"head -c 96M /dev/urandom > big-{version}")
    planned = f1.json("replicate", f"{NAME}@{version}", "--to", "storage2", "--dry-run")["nodes"][0]["transfers"]
    estimate = planned[-1]["estimated_bytes"]
    step("replicate killed with SIGKILL")
    _start_replicate(s1, version, "/tmp/repl-sigkill.log")
    s1.check_output(f"pkill -KILL -f '^/opt/fabricctl/bin/python /usr/local/sbin/fabricctl replicate {NAME}@'")
    _receive_stopped_resumable(s2)
    again = f1.json("replicate", f"{NAME}@{version}", "--to", "storage2", "--dry-run")["nodes"][0]["transfers"]
    assert [t["kind"] for t in again] == ["resume"], again
    step("the resumed replicate loses its link (the SSH connection carrying the stream dies)")
    log = "/tmp/repl-link.log"
    _start_replicate(s1, version, log)
    s1.check_output("pkill -KILL -f '^ssh .* -- receive '")
    _receive_stopped_resumable(s2)
    deadline = time.monotonic() + 60
    while s1.run("pgrep -f '[f]abricctl replicate'").rc == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    text = s1.check_output(f"cat {log}")
    assert "re-run the same command to resume" in text, text
    again = f1.json("replicate", f"{NAME}@{version}", "--to", "storage2", "--dry-run")["nodes"][0]["transfers"]
    assert [t["kind"] for t in again] == ["resume"], again
    out = f1.json("replicate", f"{NAME}@{version}", "--to", "storage2")
    t = out["nodes"][0]["transfers"][0]
    assert t["kind"] == "resume" and 0 < t["sent_bytes"] < estimate, (t, estimate)  # not a second full send
    assert zget(s2, "guid", f"{VOL}@{version}") == zget(s1, "guid", f"{VOL}@{version}")
    assert zget(s2, "receive_resume_token", VOL) == "-"
    assert s1.check_output(f"zfs holds -H {VOL}@{version}") == ""  # the killed runs' holds are gone too


def test_a_replica_changed_by_hand_is_refused_unless_forced(nodes, f1):
    s1, s2 = nodes
    seal(s1, f1, "v6", "head -c 100000 /dev/urandom > f3")
    s2.check_output(f"zfs snapshot {VOL}@by-hand")
    before = snaps(s2)
    res = f1("replicate", f"{NAME}@v6", "--to", "storage2")
    assert res.rc == 1 and "changed since" in res.stderr and "by-hand" in res.stderr and "--force" in res.stderr
    assert snaps(s2) == before
    out = f1.json("replicate", f"{NAME}@v6", "--to", "storage2", "--force")
    assert out["nodes"][0]["transfers"][0]["force"] is True
    assert "by-hand" not in snaps(s2) and snaps(s2)[-1] == "v6"


def test_a_version_that_diverged_is_refused_naming_both_guids(nodes, f1):
    s1, s2 = nodes
    f1.json("dataset", "create", "repldiv", "--size", "64M")
    s1.check_output("mkdir -p /srv/repldiv && head -c 1M /dev/urandom > /srv/repldiv/a")
    f1.json("dataset", "ingest", "repldiv", "/srv/repldiv/")
    f1.json("dataset", "seal", "repldiv", "v1")
    f1.json("replicate", "repldiv@v1", "--to", "storage2")
    there = zget(s2, "guid", f"{ROOT}/repldiv@v1")
    f1.json("dataset", "destroy", "repldiv", "--yes")
    # the replica is untouched by the destroy here
    assert zget(s2, "guid", f"{ROOT}/repldiv@v1") == there
    f1.json("dataset", "create", "repldiv", "--size", "64M")
    f1.json("dataset", "ingest", "repldiv", "/srv/repldiv/")
    f1.json("dataset", "seal", "repldiv", "v1")
    here = zget(s1, "guid", f"{ROOT}/repldiv@v1")
    res = f1("replicate", "repldiv@v1", "--to", "storage2")
    assert res.rc == 1 and there in res.stderr and here in res.stderr and "diverged" in res.stderr, res.stderr
    assert zget(s2, "guid", f"{ROOT}/repldiv@v1") == there
    f1.json("dataset", "destroy", "repldiv", "--yes")
    s2.check_output(f"zfs destroy -r {ROOT}/repldiv")


def test_checkpoints_replicate_too(nodes, f1):
    s1, s2 = nodes
    job = "repljob"
    if s1.run(f"zfs list tank/checkpoints/{job}").rc != 0:
        f1.json("checkpoint", "volume", "create", job, "--size", "64M", "--writer", "gpu1")
    for stepno in (10, 20):
        f1.json("checkpoint", "snapshot", job, "--step", str(stepno))
    out = f1.json("checkpoint", "replicate", job, "--to", "storage2")
    assert [t["kind"] for t in out["nodes"][0]["transfers"]] == ["full", "incremental"]
    assert snaps(s2, f"tank/checkpoints/{job}")[-2:] == ["step-10", "step-20"]
    assert zget(s2, "fabric:step", f"tank/checkpoints/{job}@step-20") == "20"
    # issue 15: storage2's metrics say when the replica's newest checkpoint was taken, and where it came from
    assert zget(s2, "fabric:origin", f"tank/checkpoints/{job}") == "storage1"
    res = s2.run("fabricctl metrics --output -")
    assert res.rc == 0, res.stderr
    times = {tuple(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(res.stdout)
             for s in f.samples if s.name == "fabric_replica_newest_snapshot_timestamp_seconds"}
    key = (("kind", "checkpoint"), ("origin", "storage1"), ("volume", job))
    created = int(s1.check_output(f"zfs get -Hp -o value creation tank/checkpoints/{job}@step-20"))
    assert key in times and times[key] == created, (times, created)
    f1("checkpoint", "volume", "destroy", job, "--yes", "--force")
    s2.check_output(f"zfs destroy -r tank/checkpoints/{job}")


# ---- the attack: storage1's key on storage2 serves replication and nothing else


REQUESTS = ["id > /tmp/pwned", "sh -c 'touch /tmp/pwned'", "state tank/datasets/repl; touch /tmp/pwned",
            "receive tank/other/x - storage1", "state ../../etc", "destroy tank/datasets/repl",
            "receive tank/datasets/repl - storage1 --force; touch /tmp/pwned"]


def test_the_peer_key_runs_only_replica_serve_on_the_other_node(nodes):
    s1, s2 = nodes
    s2.run("rm -f /tmp/pwned")
    before = s2.check_output("zfs list -H -t all -o name -r tank | sort | md5sum")
    targets = s2.check_output(f"ls {CFS}/iscsi")
    guid = zget(s2, "guid", f"{VOL}@v1")
    # export serves only a version with the asker's GUID, to hosts of storage2's own configuration
    exports = [f"export {VOL} v1 1{guid} gpu2", f"export {VOL} v1 {guid} gpu9", f"export {VOL} v1 {guid}",
               f"export tank/checkpoints/{NAME} v1 {guid} gpu2", f"export {VOL} v1 {guid} gpu2; touch /tmp/pwned"]
    for request in REQUESTS + exports:
        res = s1.run(f"ssh -i {KEY} -o BatchMode=yes -o UserKnownHostsFile=/etc/fabricctl/known_hosts "
                     f"-o StrictHostKeyChecking=yes root@10.77.0.12 {shlex.quote(request)} </dev/null")
        assert res.rc != 0 and "fabricctl: error:" in res.stderr, (request, res.rc, res.stdout, res.stderr)
    assert s2.run("test -e /tmp/pwned").rc != 0
    assert s2.check_output("zfs list -H -t all -o name -r tank | sort | md5sum") == before
    assert s2.check_output(f"ls {CFS}/iscsi") == targets  # no target was made (configfs, LIO's own view)
    # sshd itself says the key was accepted (storage2's journal, another read path): replica-serve refused
    journal = s2.check_output("journalctl -u ssh -u sshd --since '-5min' --no-pager -o cat | tail -n 100")
    assert "Accepted publickey" in journal


# ---- the attack, second round (issue 26, item 2): what storage1's key may receive on storage2. Each stream is
# sent as an attacker holding storage1's key would: the raw request over ssh, not through fabricctl replicate.
# Read back on storage2 with zfs, findmnt and the journal.

SSH2 = (f"ssh -F /dev/null -i {KEY} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes "
        "-o UserKnownHostsFile=/etc/fabricctl/known_hosts root@10.77.0.12")
OWN = "peerown"  # a volume storage2 made itself


def _push(s1, stream: str, request: str):
    """``stream`` (a shell pipeline on storage1) into storage2's replica-serve as ``request``; the exit status is
    printed (testinfra takes an exit 255 for its own connection failing)."""
    return s1.run(f"{stream} | {SSH2} {shlex.quote(request)}; echo rc=$?")


def _tank(host) -> str:
    return host.check_output("zfs list -H -t all -o name,guid -r tank | sort | md5sum")


def test_the_peer_key_is_bound_to_its_node_in_the_forced_command(nodes):
    s1, s2 = nodes
    pub = s1.check_output(f"cut -d' ' -f2 {KEY}.pub")  # storage1's key, as storage2 authorized it
    line = s2.check_output(f"grep -F {shlex.quote(pub)} /root/.ssh/authorized_keys")
    assert 'command="/usr/local/sbin/fabricctl replica-serve --peer storage1"' in line and "restrict" in line, line


def test_the_peer_key_cannot_receive_into_what_it_does_not_own_nor_anything_but_a_volume(nodes, f1, f2):
    """From storage1's key: -F into a volume storage2 made (no snapshot yet, then a sealed version) and into a
    replica from another node; a file system stream (with mountpoint=/root/pwned, canmount=on), a stream package
    carrying properties; a request naming another origin, or properties the fabric does not set. Every one is
    refused before zfs receive runs: storage2's datasets, GUIDs and mounts are unchanged, and its journal holds
    each request's fields."""
    s1, s2 = nodes
    since = int(s2.check_output("date +%s"))
    f2.json("dataset", "create", OWN, "--size", "64M")
    fs = "tank/peerfs"
    try:
        s1.check_output(f"zfs create -o mountpoint=/root/pwned -o canmount=noauto {fs} && zfs snapshot {fs}@s && "
                        f"zfs set canmount=on {fs}")
        before = _tank(s2)
        own, ckpt = f"{ROOT}/{OWN}", "tank/checkpoints/pwned"
        full = f"zfs send {VOL}@v1"  # a plain stream of a volume: only what it is received into is wrong
        attacks = [
            (full, f"receive {own} - storage1 --force", "was made there"),  # its staging volume, no snapshot
            (full, f"receive {own} - storage1", "was made there"),
            (full, f"receive {ROOT}/{NAME}2 - storage3", "belongs to storage1"),  # another origin, a new volume
            (full, f"receive {ROOT}/{NAME}2 - storage1 --prop mountpoint=/root/pwned", "not one a replica may"),
            (f"zfs send {fs}@s", f"receive {ckpt} - storage1", "carries a file system"),
            (f"zfs send -p {fs}@s", f"receive {ckpt} - storage1", "is a package"),
            (f"zfs send -p {VOL}@v1", f"receive {ROOT}/{NAME}2 - storage1", "is a package"),
        ]
        for stream, request, refused in attacks:
            res = _push(s1, stream, request)
            assert "rc=0" not in res.stdout and refused in res.stderr, (request, res.stdout, res.stderr)
        step("a sealed version storage2 made, and a replica from another node")
        s2.check_output(f"mkdir -p /srv/{OWN} && head -c 100000 /dev/urandom > /srv/{OWN}/a")
        f2.json("dataset", "ingest", OWN, f"/srv/{OWN}/")
        f2.json("dataset", "seal", OWN, "v1")
        before = _tank(s2)
        res = _push(s1, full, f"receive {own} - storage1 --force")
        assert "rc=0" not in res.stdout and "was made there" in res.stderr, res.stderr
        s2.check_output(f"zfs set fabric:origin=storage3 {VOL}")
        try:
            res = _push(s1, f"zfs send -i {VOL}@v1 {VOL}@v2", f"receive {VOL} v1 storage1 --force")
            assert "rc=0" not in res.stdout and "replica from storage3" in res.stderr, res.stderr
        finally:
            s2.check_output(f"zfs set fabric:origin=storage1 {VOL}")
        assert _tank(s2) == before  # nothing received, rolled back or left half-received
        assert zget(s2, "fabric:origin", own) == "-"
        assert s2.run("findmnt /root/pwned").rc != 0 and s2.run(f"zfs list {ckpt}").rc != 0
        step("storage2's journal names each refused request's fields")
        records = [json.loads(line) for line in s2.check_output(
            f"journalctl -t fabricctl -o json --no-pager --since @{since}").splitlines()]
        served = [r for r in records if r.get("FABRIC_COMMAND") == "replica-serve"]
        forced = [r for r in served if r.get("FABRIC_REQUEST_DATASET") == own
                  and r.get("FABRIC_REQUEST_FORCE") == "yes"]
        assert forced and all(r["FABRIC_RESULT"] == "refused" and r["FABRIC_REQUEST_PEER"] == "storage1"
                              and r["FABRIC_REQUEST_ORIGIN"] == "storage1" and r["FABRIC_REQUEST_BASE"] == "-"
                              for r in forced), served
        assert any(r.get("FABRIC_REQUEST_ORIGIN") == "storage3" and r["FABRIC_RESULT"] == "refused" for r in served)
    finally:
        s1.run(f"zfs destroy -r {fs}")
        s2.run(f"fabricctl dataset destroy {OWN} --yes")


def test_the_peer_ssh_reads_no_ssh_configuration_agent_or_other_key(nodes, f1):
    """A ~/.ssh/config and an /etc/ssh/ssh_config.d file on storage1 that would send every ssh through a
    ProxyCommand: fabricctl's ssh to storage2 reads neither (-F /dev/null), and still reaches it."""
    s1, _ = nodes
    files = ("/root/.ssh/config", "/etc/ssh/ssh_config.d/zz-fabric-test.conf")
    poison = "Host *\n  ProxyCommand sh -c 'touch /tmp/peer-proxy-ran; exit 1'\n"
    s1.check_output(f"rm -f /tmp/peer-proxy-ran; test ! -e {files[0]} && test ! -e {files[1]}")
    try:
        for path in files:
            s1.check_output(f"printf {shlex.quote(poison)} > {path}")
        plain = s1.run("ssh -o BatchMode=yes root@10.77.0.12 true; echo rc=$?")  # a plain ssh goes through it
        assert "rc=0" not in plain.stdout and s1.run("test -e /tmp/peer-proxy-ran").rc == 0, plain.stdout
        s1.check_output("rm -f /tmp/peer-proxy-ran")
        out = f1.json("replicate", f"{NAME}@v1", "--to", "storage2", "--dry-run")
        assert out["nodes"][0]["present"] == ["v1"]
        assert s1.run("test -e /tmp/peer-proxy-ran").rc != 0
    finally:
        s1.run(f"rm -f {' '.join(files)} /tmp/peer-proxy-ran")


def test_the_peer_key_cannot_forward_ports_to_the_other_node(nodes):
    s1, _ = nodes
    # the exit status is printed, not returned: testinfra takes an exit 255 for its own connection failing
    res = s1.run(f"timeout 60 ssh -i {KEY} -o BatchMode=yes -o UserKnownHostsFile=/etc/fabricctl/known_hosts "
                 "-o StrictHostKeyChecking=yes -o ExitOnForwardFailure=yes -R 0:127.0.0.1:22 -N root@10.77.0.12; "
                 "echo rc=$?")
    assert "rc=255" in res.stdout and "remote port forwarding failed" in res.stderr, (res.stdout, res.stderr)
