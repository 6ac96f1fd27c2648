"""fabric_lio_target against the real lab: a zvol on a file-backed pool is exported read-only with
CHAP to gpu1; the module converges, is idempotent, plans honestly in check mode, and refuses what
it must. Verification reads configfs directly (not the module's own read path) and logs in from
the GPU nodes with plain iscsiadm.

Everything is named from `uid` (pool hc<uid>, base IQN iqn.2026-11.io.fabric.lab.hc<uid>,
backstores fabric_hc<uid>_*) so that purge in this test can only ever touch this test's objects.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import run, step

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins" / "module_utils"))
from fabric_core.storage.lio import unit_serial  # noqa: E402

ANSIBLE = str(REPO / ".venv" / "bin" / "ansible")
CFS = "/sys/kernel/config/target"
SECRET = "hc-Secret-0042"  # 14 characters: inside the enforced 12..16
WRONG = "hc-Wrong-00042"
SECRET2 = "hc-Gpu2-Secret2"  # gpu2's own: two ACLs never share a secret


def initiator_name(host) -> str:
    text = host.file("/etc/iscsi/initiatorname.iscsi").content_string
    return next(line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("InitiatorName="))


def module(lab, args: dict, check: bool = False) -> dict:
    """Run fabric_lio_target on storage1 through ansible; return the module result."""
    argv = [ANSIBLE, "storage1", "-i", str(lab.inventory), "-o", "-m", "gpufabric.storage.fabric_lio_target",
            "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    env = {**os.environ, "ANSIBLE_DEPRECATION_WARNINGS": "False", "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    proc = run(argv, cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("storage1 |")), None)
    assert line, f"no result from ansible (rc {proc.returncode}): {proc.stdout}\n{proc.stderr}"
    result = json.loads(line.split(" => ", 1)[1])
    result["_status"] = line.split(" | ")[1].split(" ")[0]
    return result


def iscsi_login(gpu, iqn: str, portal: str, password: str | None):
    """A fresh node record (with CHAP when password is given), then login; returns the command result."""
    gpu.run(f"iscsiadm -m node -T {iqn} -p {portal} -o delete")
    gpu.run_expect([0], f"iscsiadm -m node -o new -T {iqn} -p {portal}")
    if password is not None:
        for name, value in (("authmethod", "CHAP"), ("username", "gpu1"), ("password", password)):
            gpu.run_expect([0], f"iscsiadm -m node -T {iqn} -p {portal} -o update -n node.session.auth.{name} "
                                f"-v '{value}'")
    return gpu.run(f"iscsiadm -m node -T {iqn} -p {portal} --login")


def configfs_tree(storage, iqn: str, backstore: str) -> str:
    return storage.check_output(
        f"cd {CFS} && (find iscsi/{iqn} core/iblock_*/{backstore} -maxdepth 5 2>/dev/null | grep -v statistics "
        f"| sort; cat iscsi/{iqn}/tpgt_1/attrib/authentication iscsi/{iqn}/tpgt_1/acls/*/lun_*/write_protect "
        "2>/dev/null) | sha256sum")


@pytest.fixture
def export_env(hosts, lab, uid, zfs_loaded):
    """A file-backed pool with one 64 MiB zvol of random data; everything removed afterwards."""
    storage = hosts["storage1"]
    pool, img = f"hc{uid}", f"/var/tmp/hc{uid}.img"
    env = {"pool": pool, "vol": f"{pool}/vol", "dev": f"/dev/zvol/{pool}/vol",
           "base_iqn": f"iqn.2026-11.io.fabric.lab.hc{uid}", "prefix": f"fabric_hc{uid}_",
           "portal": lab.addr("storage1"), "gpu1": initiator_name(hosts["gpu1"]),
           "gpu2": initiator_name(hosts["gpu2"])}
    env["iqn"] = f"{env['base_iqn']}:data"
    env["backstore"] = f"{env['prefix']}vol"
    step(f"file-backed pool {pool}, zvol {env['vol']} with random data")
    storage.run_expect([0], f"truncate -s 1G {img} && zpool create {pool} {img}")
    try:
        storage.run_expect([0], f"zfs create -V 64M -o volblocksize=16k {env['vol']}")
        storage.run_expect([0], f"udevadm settle; for i in $(seq 100); do test -b {env['dev']} && exit 0; "
                                "sleep 0.2; done; exit 1")
        storage.run_expect([0], f"dd if=/dev/urandom of={env['dev']} bs=1M count=64 oflag=direct status=none")
        env["digest"] = storage.check_output(f"sha256sum {env['dev']}").split()[0]
        yield env
    finally:
        step("cleanup: log out, purge this test's LIO objects, destroy the pool")
        for gpu in ("gpu1", "gpu2"):
            hosts[gpu].run(f"iscsiadm -m node -T {env['iqn']} --logout; iscsiadm -m node -T {env['iqn']} -o delete")
        module(lab, {"base_iqn": env["base_iqn"], "backstore_prefix": env["prefix"], "targets": [],
                     "purge": True, "force": True})
        storage.run(f"zpool destroy -f {pool}")
        storage.run(f"rm -f {img}")


def desired(env: dict, **over) -> dict:
    target = {"name": "data", "portals": [{"ip": env["portal"], "port": 3260}],
              "luns": [{"name": "vol", "device": env["dev"]}],
              "acls": [{"initiator": env["gpu1"], "chap": {"userid": "gpu1", "password": SECRET}}]}
    target.update(over)
    return {"base_iqn": env["base_iqn"], "backstore_prefix": env["prefix"], "targets": [target]}


def test_lio_target_read_only_export_with_chap(hosts, lab, export_env):
    env, storage = export_env, hosts["storage1"]
    iqn, portal, acl_dir = env["iqn"], env["portal"], f"{CFS}/iscsi/{env['iqn']}/tpgt_1/acls/{env['gpu1']}"

    step("converge: changed")
    first = module(lab, desired(env))
    assert first["_status"] == "CHANGED" and first["changed"] is True, first
    assert SECRET not in json.dumps(first)
    step("second run: changed=false; --check on converged: changed=false")
    second = module(lab, desired(env))
    assert second["changed"] is False and second["actions"] == [], second
    check = module(lab, desired(env), check=True)
    assert check["changed"] is False and check["actions"] == [], check

    step("configfs (separate read path): ACL, mapped LUN write_protect=1, backstore readonly, TPG attributes")
    assert storage.file(acl_dir).is_directory
    assert storage.check_output(f"cat {acl_dir}/lun_0/write_protect") == "1"
    assert storage.check_output(f"cat {acl_dir}/auth/userid") == "gpu1"
    info = storage.check_output(f"cat {CFS}/core/iblock_*/{env['backstore']}/info")
    assert "readonly: 1" in info and f"UDEV PATH: {env['dev']}" in info, info
    attrs = {a: storage.check_output(f"cat {CFS}/iscsi/{iqn}/tpgt_1/attrib/{a}")
             for a in ("authentication", "generate_node_acls", "cache_dynamic_acls", "demo_mode_write_protect")}
    assert attrs == {"authentication": "1", "generate_node_acls": "0", "cache_dynamic_acls": "0",
                     "demo_mode_write_protect": "1"}
    assert storage.check_output(f"cat {CFS}/iscsi/{iqn}/tpgt_1/enable") == "1"
    saved = json.loads(storage.check_output("cat /etc/rtslib-fb-target/saveconfig.json"))
    assert iqn in [t["wwn"] for t in saved["targets"]], "configuration not saved for the boot-time restore"

    step("check mode on a change plans it from real reads and changes nothing")
    tree = configfs_tree(storage, iqn, env["backstore"])
    gpu2_acl = {"initiator": env["gpu2"], "chap": {"userid": "gpu2", "password": SECRET2}}
    planned = module(lab, desired(env, acls=[*desired(env)["targets"][0]["acls"], gpu2_acl]), check=True)
    assert planned["changed"] is True and any(a.startswith("create_acl") for a in planned["actions"]), planned
    assert configfs_tree(storage, iqn, env["backstore"]) == tree

    gpu1 = hosts["gpu1"]
    step("gpu1 with a wrong CHAP secret: refused")
    bad = iscsi_login(gpu1, iqn, portal, WRONG)
    assert bad.rc == 24, f"expected iscsiadm's authentication failure (24): {bad.rc} {bad.stderr}"
    step("gpu1 with the right CHAP secret: logged in, the disk is read-only and has the zvol's bytes")
    good = iscsi_login(gpu1, iqn, portal, SECRET)
    assert good.rc == 0, good.stderr
    dev = f"/dev/disk/by-path/ip-{portal}:3260-iscsi-{iqn}-lun-0"
    gpu1.run_expect([0], f"udevadm settle; for i in $(seq 100); do test -b {dev} && exit 0; sleep 0.2; done; exit 1")
    assert gpu1.check_output(f"blockdev --getro {dev}") == "1"
    write = gpu1.run(f"dd if=/dev/zero of={dev} bs=4k count=1 oflag=direct conv=notrunc status=none")
    assert write.rc != 0, "a write to the read-only export succeeded"
    assert gpu1.check_output(f"sha256sum {dev}").split()[0] == env["digest"]
    serial = gpu1.check_output(f"cat /sys/block/$(basename $(readlink -f {dev}))/device/wwid")
    step(f"gpu1 sees the disk id derived from the stable unit serial: {serial}")
    hexdigits = "".join(c for c in unit_serial(iqn, "vol") if c in "0123456789abcdef")
    assert serial == f"naa.6001405{hexdigits[:25]}", serial  # LIO's NAA: OpenFabrics OUI + the serial's hex

    step("gpu2 (no ACL): refused")
    gpu2 = hosts["gpu2"]
    refused = iscsi_login(gpu2, iqn, portal, SECRET)
    assert refused.rc == 24, f"expected authorization failure (24): {refused.rc} {refused.stderr}"
    assert iqn not in gpu2.run("iscsiadm -m session").stdout

    step("a writable export with two ACLs is refused with a clear message; nothing changes")
    tree = configfs_tree(storage, iqn, env["backstore"])
    two = desired(env, writable=True, luns=[{"name": "vol", "device": env["dev"], "readonly": False}],
                  acls=[{"initiator": env["gpu1"], "chap": {"userid": "gpu1", "password": SECRET}},
                        {"initiator": env["gpu2"], "chap": {"userid": "gpu2", "password": SECRET2}}])
    refused = module(lab, two)
    assert refused["_status"] == "FAILED!" and "exactly one writer" in refused["msg"], refused
    assert configfs_tree(storage, iqn, env["backstore"]) == tree

    step("two hosts sharing a CHAP secret, and an ACL without CHAP: refused without the secret, nothing changes")
    same = {"initiator": env["gpu2"], "chap": {"userid": "gpu2", "password": SECRET}}
    shared = module(lab, desired(env, acls=[*desired(env)["targets"][0]["acls"], same]))
    assert shared["_status"] == "FAILED!" and "share a CHAP secret" in shared["msg"], shared
    assert SECRET not in json.dumps(shared)
    bare = module(lab, desired(env, acls=[{"initiator": env["gpu1"]}]))
    assert bare["_status"] == "FAILED!" and "has no CHAP" in bare["msg"], bare
    assert configfs_tree(storage, iqn, env["backstore"]) == tree

    step("purge while gpu1 is logged in: refused (Busy), nothing changes")
    purge = {"base_iqn": env["base_iqn"], "backstore_prefix": env["prefix"], "targets": [], "purge": True}
    busy = module(lab, purge)
    assert busy["_status"] == "FAILED!" and "logged in" in busy["msg"] and env["gpu1"] in busy["msg"], busy
    assert storage.file(acl_dir).is_directory

    step("logout, then purge removes this test's target and backstore only")
    gpu1.run_expect([0], f"iscsiadm -m node -T {iqn} -p {portal} --logout")
    gone = module(lab, purge)
    assert gone["changed"] is True, gone
    # only this test's objects were touched (the shared lab's other targets change under us, so this is
    # checked on the actions, and every other target/backstore is reported as kept)
    assert gone["actions"] == [f"delete_target {iqn} (not in desired state)",
                               f"delete_backstore name={env['backstore']} (not in desired state)"], gone
    assert all("not project-owned" in k for k in gone["kept"]), gone["kept"]
    assert not storage.file(f"{CFS}/iscsi/{iqn}").exists
    assert storage.run(f"ls -d {CFS}/core/iblock_*/{env['backstore']}").rc != 0
    again = module(lab, purge)
    assert again["changed"] is False
