"""The second storage node: booted beside the running lab (`labctl up --storage2` starts only what is
missing) and converged by the same roles, with its own pool planned from its own disks and its own
read-only LIO target for the GPU nodes. Replication and multipath build on it."""

from __future__ import annotations

import json

from conftest import ansible_playbook

CFS = "/sys/kernel/config/target/iscsi"


def test_storage2_has_its_own_disks(storage2, lab):
    disks = json.loads(storage2.check_output("lsblk -J -d -o NAME,SERIAL,TRAN"))["blockdevices"]
    serials = {d["serial"] for d in disks if d["serial"] and d["serial"] != "lab-root"}
    assert serials and all(s.startswith(("HDD2", "SSD2", "NVME2")) for s in serials), serials
    assert f"{lab.addr('storage2')}/24" in storage2.check_output("ip -o -4 addr show")


def test_storage2_pool_is_planned_from_its_own_disks(storage2):
    status = storage2.check_output("zpool status -P tank")
    assert "raidz2-0" in status and "special" in status and "logs" in status and "cache" in status
    members = [w for w in status.split() if w.startswith("/dev/disk/by-id/")]
    assert len(members) == 12 and all(any(f"_{k}2" in m for k in ("HDD", "SSD", "NVME")) for m in members), members
    assert storage2.check_output("zpool list -H -o health tank") == "ONLINE"
    assert storage2.check_output("zfs get -H -o value fabric:managed tank") == "true"


def test_storage2_exports_read_only_to_the_gpu_nodes(storage2, lab):
    tpg = f"{CFS}/iqn.2026-11.io.fabric.lab:storage2-exports/tpgt_1"
    assert storage2.check_output(f"cat {tpg}/enable") == "1"
    acls = set(storage2.check_output(f"ls {tpg}/acls").split())
    assert {f"iqn.2026-11.io.fabric.lab:{gpu}" for gpu in lab.names("gpu")} <= acls
    assert set(storage2.check_output(f"cat {tpg}/acls/*/lun_*/write_protect").split()) == {"1"}
    assert storage2.check_output(f"cat {tpg}/param/ImmediateData") in ("Yes", "No")  # a real LIO TPG


def test_storage2_changes_nothing_on_a_second_run(storage2, lab):
    run = ansible_playbook(lab, "playbooks/storage.yml", "--limit", "storage2")
    assert run.rc == 0, run.output[-4000:]
    assert run.changed() == {"storage2": 0}, run.stdout[-4000:]
