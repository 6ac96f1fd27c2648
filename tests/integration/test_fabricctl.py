"""fabricctl on the lab (issue 4): every command and every bad input, checked through separate
read paths (`zfs get`, `zfs holds`, configfs on storage1; `iscsiadm -m session`, `findmnt` and
the files themselves on the GPU nodes).

fabricctl runs on storage1, installed there by playbooks/site.yml (role fabricctl), and reaches
the GPU nodes over SSH with host keys from /etc/fabricctl/known_hosts.
"""

from __future__ import annotations

import base64
import json
import shlex
import time

import pytest
from conftest import FABRICCTL_PYTHON, assert_refused_and_nothing_changed, edited_config, step

NAME = "sample"
POOL_ROOT = "tank/datasets"
CONFIGFS = "/sys/kernel/config/target/iscsi"
IQN_BASE = "iqn.2026-11.io.fabric.lab.fabricctl"


def target_dir(version: str, name: str = NAME) -> str:
    return f"{CONFIGFS}/{IQN_BASE}:ds.{name}.{version}/tpgt_1"


def zget(storage, prop: str, name: str) -> str:
    return storage.check_output(f"zfs get -H -o value {prop} {name}")


def state_of(hosts, storage, version: str, name: str = NAME) -> dict:
    """What a separate read path says about one version: holds, target, sessions, mounts."""
    snap = f"{POOL_ROOT}/{name}@{version}"
    out = {"holds": storage.run(f"zfs holds -H {snap}").stdout.split(),
           "target": storage.run(f"test -d {target_dir(version, name)}").rc == 0, "hosts": {}}
    for gpu in ("gpu1", "gpu2"):
        sessions = hosts[gpu].run("iscsiadm -m session").stdout
        mnt = hosts[gpu].run(f"findmnt -n -o OPTIONS /datasets/{name}/{version}").stdout.strip()
        out["hosts"][gpu] = {"session": f"ds.{name}.{version}" in sessions, "mount": mnt}
    return out


@pytest.fixture(scope="module")
def source(storage):
    """A small image-like tree on storage1: 300 files in 3 directories, and one bigger file."""
    storage.check_output(
        "rm -rf /srv/src && mkdir -p /srv/src/train/a /srv/src/train/b /srv/src/val && "
        "for d in train/a train/b val; do for i in $(seq 1 100); do "
        "head -c $((1000 + i * 37)) /dev/urandom > /srv/src/$d/img$i.jpg; done; done && "
        "head -c 3000000 /dev/urandom > /srv/src/labels.bin")
    return "/srv/src/"


# Every command's --help through the installed code's own parser, in one process on the node (each
# `fabricctl ... --help` of its own cost about 4 s of storage1's emulated CPU); argv[1] is a JSON list of argvs.
HELP_ALL = r'''
import contextlib, io, json, sys
from fabricctl.main import main
out = {}
for args in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            rc = main(args)
        except SystemExit as e:
            rc = e.code
    out[" ".join(args)] = [rc, buf.getvalue()]
print(json.dumps(out))
'''


def test_help_of_every_command(storage, fctl):
    res = fctl("--help")  # the installed command itself
    assert res.rc == 0 and "usage: fabricctl" in res.stdout, res.stderr
    argvs = [["dataset", "--help"], ["dataset", "create", "--help"], ["dataset", "ingest", "--help"],
             ["dataset", "seal", "--help"], ["dataset", "destroy", "--help"], ["publish", "--help"],
             ["unpublish", "--help"], ["list", "--help"], ["status", "--help"], ["verify", "--help"]]
    script = base64.b64encode(HELP_ALL.encode()).decode()
    out = json.loads(storage.check_output(
        f"echo {script} | base64 -d > /tmp/help-all.py && "
        f"{FABRICCTL_PYTHON} /tmp/help-all.py {shlex.quote(json.dumps(argvs))}"))
    for args in argvs:
        rc, text = out[" ".join(args)]
        assert rc == 0 and "usage: fabricctl" in text, (args, rc, text[-500:])


def test_config_with_a_typo_key_is_refused(storage, fctl):
    # the role's file is JSON; the copy is YAML as an operator would write it, so both readers are exercised
    storage.check_output("python3 -c \"import json, sys, yaml; c = json.loads(''.join(l for l in open(sys.argv[1]) "
                         "if not l.startswith('#'))); c['dataset_rot'] = c.pop('dataset_root'); "
                         "yaml.safe_dump(c, open(sys.argv[2], 'w'))\" /etc/fabricctl/config.yml /tmp/typo.yml")
    res = fctl("list", env="FABRICCTL_CONFIG=/tmp/typo.yml")
    assert res.rc == 1
    assert "dataset_rot" in res.stderr and "dataset_root" in res.stderr


def test_create_a_staging_volume(storage, fctl):
    step("fabricctl dataset create")
    out = fctl.json("dataset", "create", NAME, "--size", "256M")
    vol = f"{POOL_ROOT}/{NAME}"
    assert out["volume"] == vol
    assert zget(storage, "fabric:managed", vol) == "true"
    assert zget(storage, "volsize", vol) == "256M"
    assert zget(storage, "snapdev", vol) == "visible"
    opts = storage.check_output(f"findmnt -n -o OPTIONS /srv/fabricctl/staging/{NAME}")
    assert "rw" in opts.split(",")


def test_an_ingest_larger_than_the_staging_volume_is_refused_before_copying(storage, fctl):
    storage.check_output("rm -rf /srv/huge && mkdir -p /srv/huge && truncate -s 300M /srv/huge/big")  # sparse
    assert_refused_and_nothing_changed(storage, fctl, ["dataset", "ingest", NAME, "/srv/huge/"],
                                       ["free", "300 MiB", "--size"])
    assert storage.run(f"ls /srv/fabricctl/staging/{NAME}/big*").rc != 0
    storage.check_output("rm -rf /srv/huge")


@pytest.mark.parametrize("args, words", [
    (["dataset", "create", NAME, "--size", "256M"], ["exists already"]),
    (["dataset", "create", "Bad_Name", "--size", "256M"], ["invalid dataset name"]),
    (["dataset", "create", "huge", "--size", "40T"], ["too full", "smaller --size"]),
    (["dataset", "ingest", NAME, "/nonexistent/path"], ["does not exist", "/nonexistent/path"]),
    (["dataset", "ingest", "nosuch", "/srv"], ["unknown dataset 'nosuch'"]),
    (["dataset", "seal", "nosuch", "v1"], ["unknown dataset 'nosuch'"]),
    (["publish", f"{NAME}@nosuch", "--to", "gpu_nodes"], ["unknown version"]),
    (["publish", f"{NAME}@v1", "--to", "gpu7"], ["gpu7"]),
])
def test_bad_input_is_refused_and_changes_nothing(storage, fctl, args, words):
    assert_refused_and_nothing_changed(storage, fctl, args, words)


def test_ingest_copies_and_is_resumable(storage, fctl, source):
    step("fabricctl dataset ingest")
    out = fctl.json("dataset", "ingest", NAME, source)
    assert out["files"] == 301 and out["copied"] == 301
    again = fctl.json("dataset", "ingest", NAME, source)
    assert again["copied"] == 0 and again["skipped"] == 301
    src = storage.check_output("cd /srv/src && find . -type f | sort | xargs sha256sum | sha256sum")
    # .fabric/ is the fabric's own (the ingest's record of its sources, for the seal's provenance)
    dst = storage.check_output(f"cd /srv/fabricctl/staging/{NAME} && find . -type f -not -path './lost+found/*' "
                               "-not -path './.fabric/*' | sort | xargs sha256sum | sha256sum")
    assert src == dst
    recorded = storage.check_output(f"cat /srv/fabricctl/staging/{NAME}/.fabric/ingest-sources.json")
    assert source.rstrip("/") in recorded, recorded


def test_seal_records_the_version_and_its_manifest(storage, fctl, source):
    step("fabricctl dataset seal")
    out = fctl.json("dataset", "seal", NAME, "v1", "--note", "first cut")
    snap = f"{POOL_ROOT}/{NAME}@v1"
    assert zget(storage, "fabric:version", snap) == "v1"
    assert zget(storage, "fabric:note", snap) == "first cut"
    assert zget(storage, "fabric:files", snap) == str(out["files"])
    assert int(zget(storage, "fabric:files", snap)) >= 301
    assert zget(storage, "fabric:manifest-sha256", snap) == out["manifest_sha256"]
    # the manifest travels inside the snapshot
    listing = fctl.json("list", NAME)
    assert [v["version"] for v in listing["datasets"][0]["versions"]] == ["v1"]
    res = fctl("dataset", "seal", NAME, "v1")
    assert res.rc == 1 and "exists already" in res.stderr


def test_publish_to_both_gpu_nodes(hosts, storage, fctl):
    step("fabricctl publish sample@v1 --to gpu_nodes")
    res = fctl("publish", f"{NAME}@v1", "--to", "gpu_nodes")
    assert res.rc == 0, res.stderr
    st = state_of(hosts, storage, "v1")
    assert "fabric:published" in st["holds"]
    assert st["target"]
    for gpu in ("gpu1", "gpu2"):
        assert st["hosts"][gpu]["session"], gpu
        assert "ro" in st["hosts"][gpu]["mount"].split(","), st["hosts"][gpu]
        assert hosts[gpu].check_output(f"readlink /datasets/{NAME}/current") == "v1"
        acl = f"{target_dir('v1')}/acls/iqn.2026-11.io.fabric.lab:{gpu}/lun_0/write_protect"
        assert storage.check_output(f"cat {acl}") == "1"
    want = storage.check_output("cd /srv/src && sha256sum train/a/img7.jpg labels.bin")
    got = hosts["gpu1"].check_output(f"cd /datasets/{NAME}/current && sha256sum train/a/img7.jpg labels.bin")
    assert got == want
    write = hosts["gpu2"].run(f"touch /datasets/{NAME}/v1/new-file")
    assert write.rc != 0 and "Read-only file system" in write.stderr


def test_publish_again_changes_nothing(fctl):
    out = fctl.json("publish", f"{NAME}@v1", "--to", "gpu_nodes")
    assert out["storage"]["lio_changed"] is False and out["storage"]["held"] is False
    for gpu, item in out["hosts"].items():
        assert item["status"] == "ok" and item["result"]["changed"] is False, (gpu, item)


def test_verify_on_the_storage_node_and_on_a_gpu_node(fctl):
    local = fctl.json("verify", f"{NAME}@v1")
    assert local["ok"] is True and local["manifest_sha256"]["ok"] is True
    remote = fctl.json("verify", f"{NAME}@v1", "--on", "gpu1")
    assert remote["ok"] is True


ARCSTATS = "/proc/spl/kstat/zfs/arcstats"


def arc(storage) -> dict:
    """storage1's arcstats, read directly (not through fabricctl)."""
    rows = [line.split() for line in storage.check_output(f"cat {ARCSTATS}").splitlines()[2:]]
    return {r[0]: int(r[2]) for r in rows if len(r) == 3}


def test_warm_puts_a_published_version_in_the_arc(storage, fctl):
    """Issue 14: `fabricctl warm` reads a published version's snapshot device on the storage node (LIO holds it
    open) with the ARC shrunk first; then a read of the whole device is served from the ARC (arcstats read
    directly: hits, not misses), and warm, a read, left no journal record."""
    ref = f"{NAME}@v1"
    since = storage.check_output("date +%s")
    arc_max = "/sys/module/zfs/parameters/zfs_arc_max"  # down to c_min, caches dropped, back: the ARC shrinks
    storage.check_output(f"m=$(cat {arc_max}); awk '$1 == \"c_min\" {{print $3}}' {ARCSTATS} > {arc_max}; sync; "
                         f"echo 3 > /proc/sys/vm/drop_caches; sleep 2; echo $m > {arc_max}")
    out = fctl.json("warm", ref)
    assert out["complete"] is True and out["stopped_early"] is False, out["summary"]
    assert out["bytes_read"] == out["plan"]["read_bytes"] > 0
    device = out["device"]
    assert device == f"/dev/zvol/{POOL_ROOT}/{NAME}@v1"
    before = arc(storage)
    storage.check_output(f"dd if={device} of=/dev/null bs=1M iflag=direct status=none")
    after = arc(storage)
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    assert hits > 0 and misses <= 0.1 * (hits + misses), (hits, misses)
    journal = storage.check_output(f"journalctl -t fabricctl -o cat --no-pager -q --since @{since}")
    assert "warm" not in journal, journal


def test_status_shows_holds_and_sessions(fctl):
    st = fctl.json("status")
    assert st["pool"]["health"] == "ONLINE"
    published = {p["ref"]: p for p in st["published"]}
    assert sorted(published[f"{NAME}@v1"]["published_to"]) == ["gpu1", "gpu2"]
    assert "fabric:published" in published[f"{NAME}@v1"]["holds"]
    assert any("ds.sample.v1" in t for t in st["sessions"]["gpu1"])


def test_a_publish_tags_its_acls_in_lio_and_status_expects_their_sessions(storage, fctl):
    """A publish's ACLs carry LIO's tag fabric-published (read back through configfs, and kept in the saved
    configuration), so `status` can tell them from a grant's: a published host not logged in is a warning, a
    granted one is not (tests/unit/test_health.py; test_agent.py with grants on the lab)."""
    st = fctl.json("status")
    target = next(p["target"] for p in st["published"] if p["ref"] == f"{NAME}@v1")
    acls = f"/sys/kernel/config/target/iscsi/{target}/tpgt_1/acls"
    tags = storage.check_output(f"for a in {acls}/*; do cat $a/tag; echo; done").split()
    assert tags == ["fabric-published", "fabric-published"], tags
    saved = json.loads(storage.check_output("cat /etc/rtslib-fb-target/saveconfig.json"))
    acl_tags = [a.get("tag") for t in saved["targets"] if t["wwn"] == target for tpg in t["tpgs"]
                for a in tpg["node_acls"]]
    assert acl_tags == ["fabric-published", "fabric-published"], acl_tags
    sessions = next(c for c in st["checks"] if c["name"] == "sessions")
    assert not any("ds.sample.v1" in t for ts in sessions["details"]["missing"].values() for t in ts), sessions


def test_destroy_of_a_published_version_is_refused(storage, fctl):
    res = fctl("dataset", "destroy", f"{NAME}@v1", "--yes")
    assert res.rc == 1 and "published" in res.stderr and "unpublish" in res.stderr
    assert storage.run(f"zfs list {POOL_ROOT}/{NAME}@v1").rc == 0


def test_a_newer_version_moves_current(hosts, storage, fctl, source):
    storage.check_output(f"echo v2 > /srv/fabricctl/staging/{NAME}/VERSION")
    fctl.json("dataset", "seal", NAME, "v2")
    res = fctl("publish", f"{NAME}@v2", "--to", "gpu1,gpu2")
    assert res.rc == 0, res.stderr
    for gpu in ("gpu1", "gpu2"):
        assert hosts[gpu].check_output(f"readlink /datasets/{NAME}/current") == "v2"
        assert hosts[gpu].check_output(f"cat /datasets/{NAME}/current/VERSION") == "v2"
        assert hosts[gpu].run(f"test -e /datasets/{NAME}/v1/VERSION").rc != 0  # v1 is unchanged


def test_unpublish_refuses_while_in_use_then_cleans_up(hosts, storage, fctl):
    gpu1 = hosts["gpu1"]
    gpu1.check_output(f"cd /datasets/{NAME}/v2 && (setsid sleep 600 < labels.bin > /dev/null 2>&1 &)")
    time.sleep(1)
    res = fctl("unpublish", f"{NAME}@v2")
    assert res.rc == 1 and "gpu1" in res.stderr and "sleep" in res.stderr
    assert state_of(hosts, storage, "v2")["hosts"]["gpu2"]["session"]  # nothing changed
    gpu1.run("pkill -f 'sleep 600'")
    time.sleep(1)
    plan = fctl.json("unpublish", f"{NAME}@v2", "--dry-run")  # plans logouts and the target's removal
    assert plan["dry_run"] and {h["status"] for h in plan["hosts"].values()} == {"ok"}, plan
    assert any("delete_target" in a for a in plan["storage"]["lio_actions"]), plan
    st = state_of(hosts, storage, "v2")
    assert st["target"] and st["hosts"]["gpu1"]["session"] and st["hosts"]["gpu1"]["mount"]  # nothing changed
    res = fctl("unpublish", f"{NAME}@v2")
    assert res.rc == 0, res.stderr
    st = state_of(hosts, storage, "v2")
    assert "fabric:published" not in st["holds"] and not st["target"]
    for gpu in ("gpu1", "gpu2"):
        assert not st["hosts"][gpu]["session"] and not st["hosts"][gpu]["mount"]
        assert hosts[gpu].check_output(f"readlink /datasets/{NAME}/current") == "v1"
    backstores = storage.check_output("ls /sys/kernel/config/target/core/iblock_*/ || true")
    assert f"fctl_{NAME}.v2" not in backstores


def journal_records(storage, since: str, command: str) -> list[dict]:
    """fabricctl's journal records (identifier fabricctl) of one command since a `date +%s` time."""
    for _ in range(10):  # the record is sent before fabricctl exits; give journald a moment to index it
        out = storage.run(f"journalctl -t fabricctl -o json --no-pager --since @{since}").stdout
        found = [r for r in (json.loads(line) for line in out.splitlines() if line.strip())
                 if r.get("FABRIC_COMMAND") == command]
        if found:
            return found
        time.sleep(0.5)
    return []


def test_unreachable_host_is_reported_and_the_others_finish(hosts, storage, fctl):
    # gpu9 (no such VM) with its own CHAP credentials: the configuration refuses a host without them
    env = edited_config(storage, "/tmp/with-gpu9.yml",
                        "c['hosts']['gpu9'] = {'address': '10.77.0.99', "
                        "'initiator': 'iqn.2026-11.io.fabric.lab:gpu9', "
                        "'chap': dict(c['hosts']['gpu1']['chap'], userid='gpu9', password='gpu9-nosuch-p01', "
                        "mutual_password='gpu9-nosuch-m01')}; c['ssh']['connect_timeout'] = 3")
    since = storage.check_output("date +%s")
    res = fctl("publish", f"{NAME}@v2", "--to", "gpu1,gpu9", env=env)
    assert res.rc == 3, res.stderr  # partial: gpu1 done, gpu9 failed
    assert "gpu9" in res.stderr and "10.77.0.99" in res.stderr
    assert state_of(hosts, storage, "v2")["hosts"]["gpu1"]["session"]  # gpu1 finished
    # one journal record of the change, built from explicit fields (python3-systemd, role fabricctl)
    records = journal_records(storage, since, "publish")
    assert len(records) == 1, records
    rec = records[0]
    assert (rec["FABRIC_TARGET"], rec["FABRIC_RESULT"], rec["FABRIC_EXIT_STATUS"]) == (f"{NAME}@v2", "partial", "3")
    assert rec["FABRIC_HOSTS_FAILED"] == "gpu9" and set(rec["FABRIC_HOSTS"].split(",")) == {"gpu1", "gpu9"}
    assert rec["FABRIC_HOSTS_REQUESTED"] == "--to gpu1,gpu9" and float(rec["FABRIC_DURATION_SECONDS"]) > 0
    # gpu9's ACL stays (the export is ready for it when it comes back); --force also drops ACLs of
    # initiators that are not in the config
    res = fctl("unpublish", f"{NAME}@v2", "--force")
    assert res.rc == 0, res.stderr
    st = state_of(hosts, storage, "v2")
    assert not st["target"] and "fabric:published" not in st["holds"], st


def test_a_changed_host_key_is_refused(hosts, storage, fctl):
    storage.check_output("rm -f /tmp/otherkey /tmp/otherkey.pub && ssh-keygen -q -t ed25519 -N '' -f /tmp/otherkey")
    other = storage.check_output("cut -d' ' -f1,2 /tmp/otherkey.pub")
    storage.check_output("awk -v k=\"$(cut -d' ' -f1,2 /tmp/otherkey.pub)\" "
                         "'$1==\"10.77.0.22\" {print $1\" \"k; next} {print}' /etc/fabricctl/known_hosts "
                         "> /tmp/known_hosts.bad")
    assert other.split()[1] in storage.check_output("cat /tmp/known_hosts.bad")
    before = storage.check_output("md5sum < /tmp/known_hosts.bad")
    env = edited_config(storage, "/tmp/badkey.yml", "c['ssh']['known_hosts'] = '/tmp/known_hosts.bad'")
    res = fctl("publish", f"{NAME}@v2", "--to", "gpu2", env=env)
    assert res.rc in (1, 3), res.stderr  # 1: the one host refused, nothing changed; 3: partial
    assert "gpu2" in res.stderr and "host key" in res.stderr.lower()
    assert not state_of(hosts, storage, "v2")["hosts"]["gpu2"]["session"]
    assert storage.check_output("md5sum < /tmp/known_hosts.bad") == before  # never auto-added or changed


def test_an_interrupted_publish_converges_when_run_again(hosts, storage, fctl):
    """Stop `fabricctl publish` at several points (SIGKILL: nothing can clean up; SIGINT: ^C, exit 130),
    then re-run it: it converges, and unpublish leaves no orphan target, hold, session or mount."""
    # early (storage side: export, hold: SIGKILL), and on the hosts (login, multipath map, mount: ^C)
    for signal, delay, rcs in (("KILL", 3, ("137",)), ("INT", 10, ("130", "0"))):
        step(f"publish sent SIG{signal} after {delay} s")
        stopped = storage.run(f"timeout --preserve-status -s {signal} {delay} fabricctl publish {NAME}@v2 "
                              "--to gpu_nodes; echo rc=$?")
        # 137: killed; 130: ^C handled (the fabric left consistent); 0: it finished first
        if stopped.stdout.strip().splitlines()[-1] not in tuple(f"rc={rc}" for rc in rcs):
            record = storage.run("journalctl -t fabricctl -n 1 -o verbose | grep -E 'FABRIC_|MESSAGE='").stdout
            raise AssertionError(f"publish stopped by SIG{signal} after {delay} s: {stopped.stdout.strip()}\n"
                                 f"stderr:\n{stopped.stderr}\njournal record:\n{record}")
        res = fctl("publish", f"{NAME}@v2", "--to", "gpu_nodes")
        assert res.rc == 0, f"re-run after a kill at {delay} s: {res.stderr}"
        st = state_of(hosts, storage, "v2")
        assert st["target"] and "fabric:published" in st["holds"]
        for gpu in ("gpu1", "gpu2"):
            assert st["hosts"][gpu]["session"] and "ro" in st["hosts"][gpu]["mount"].split(","), (delay, st)
        res = fctl("unpublish", f"{NAME}@v2", "--force")
        assert res.rc == 0, res.stderr
        st = state_of(hosts, storage, "v2")
        assert not st["target"] and "fabric:published" not in st["holds"], st
        assert not any(h["session"] or h["mount"] for h in st["hosts"].values()), st


def test_destroy_needs_yes_and_then_removes_the_version(storage, fctl):
    res = fctl("dataset", "destroy", f"{NAME}@v2")
    assert res.rc == 1 and "--yes" in res.stderr
    assert storage.run(f"zfs list {POOL_ROOT}/{NAME}@v2").rc == 0
    dry = fctl.json("dataset", "destroy", f"{NAME}@v2", "--dry-run")
    assert dry["would_destroy"] == [f"{POOL_ROOT}/{NAME}@v2"]
    assert fctl("dataset", "destroy", f"{NAME}@v2", "--yes").rc == 0
    assert storage.run(f"zfs list {POOL_ROOT}/{NAME}@v2").rc != 0


def test_the_whole_dataset_goes_once_unpublished(hosts, storage, fctl):
    """Leaves the lab as this file found it: v1 unpublished everywhere, the dataset and its staging
    volume destroyed (the file then runs again on the same lab, in any order with the others)."""
    res = fctl("dataset", "destroy", NAME, "--yes")
    assert res.rc == 1 and "published" in res.stderr
    assert fctl("unpublish", f"{NAME}@v1").rc == 0
    assert fctl("dataset", "destroy", NAME, "--yes").rc == 0
    assert storage.run(f"zfs list {POOL_ROOT}/{NAME}").rc != 0
    for gpu in ("gpu1", "gpu2"):
        assert f"ds.{NAME}." not in hosts[gpu].run("iscsiadm -m session").stdout
        assert hosts[gpu].run(f"findmnt -n /datasets/{NAME}/v1").rc != 0
