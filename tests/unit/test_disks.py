"""Disk discovery: parsers and discover() on output recorded from storage1 (tests/unit/data/disks/).

The states recorded with ZFS 2.1 get their `zpool status -j --json-int -P` from support.derived_zpool_status
(2.3 recordings of the same pool topology, renamed to their devices); tank-zfs23 is recorded on 2.3 throughout.
"""

from __future__ import annotations

import json

import pytest
from support import DATA, ScriptedRunner, data, derive_json, disk_state_script  # (puts module_utils on sys.path)

# isort: split
from fabric_core.base.errors import CommandError
from fabric_core.base.model import DiskInfo
from fabric_core.storage import disks, zjson

STATES = ("clean", "shared", "inuse-fs", "inuse-zpool", "exported-pool", "tank-zfs23")
BY_ID = "/dev/disk/by-id/"
HDD5 = BY_ID + "ata-LAB_HDD_8TB_7200_HDD1005"
NVME1 = BY_ID + "nvme-QEMU_NVMe_Ctrl_NVME1001"


def script(state: str) -> list[dict]:
    """The recorded commands of a state as a ScriptedRunner script (stdout read from its file, or derived)."""
    return disk_state_script(state)


def output(state: str, argv0: str, index: int = 0) -> str:
    return [s["stdout"] for s in script(state) if s["command"][0] == argv0][index]


def discovered(state: str) -> dict[str, DiskInfo]:
    runner = ScriptedRunner(script(state))
    found = disks.discover(runner)
    runner.assert_done()
    return {d.name: d for d in found}


# --- parse_lsblk -------------------------------------------------------------------------------

def test_parse_lsblk_clean_lists_the_eleven_whole_disks():
    parsed = {d["name"]: d for d in disks.parse_lsblk(output("clean", "lsblk"))}
    assert sorted(parsed) == ["nvme0n1", "nvme1n1", "sda", "sdb", "sdc", "sdd", "sde", "sdf", "sdg", "sdh", "vda"]
    assert parsed["sda"] == {
        "name": "sda", "size": 8589934592, "rotational": True, "transport": "sata", "serial": "HDD1000",
        "model": "LAB HDD 8TB 7200", "wwn": "0x5000c50100770000", "partitions": [], "stacked": [],
        "mountpoints": []}
    assert parsed["sdg"]["rotational"] is False and parsed["sdg"]["size"] == 4294967296
    assert parsed["nvme1n1"]["transport"] == "nvme" and parsed["nvme1n1"]["serial"] == "NVME1001"
    # virtio-blk has no TRAN in lsblk: reported as virtio from the vd* kernel name
    assert parsed["vda"]["transport"] == "virtio"
    assert parsed["vda"]["mountpoints"] == [("vda", "/")]
    assert parsed["vda"]["model"] == ""


def test_parse_lsblk_partitions_and_stacked_devices():
    parsed = {d["name"]: d for d in disks.parse_lsblk(output("inuse-fs", "lsblk"))}
    assert parsed["nvme1n1"]["partitions"] == ["nvme1n1p1"]
    assert parsed["nvme1n1"]["stacked"] == ["dm-0"]  # the dm linear device on its partition
    assert parsed["sdf"]["mountpoints"] == [("sdf", "/mnt/ha_test")]
    assert parsed["sdc"]["partitions"] == ["sdc1", "sdc9"]


def test_parse_lsblk_skips_non_disks_loop_zram_optical_and_zvols():
    # hand-written (no such devices on the lab VM): the filter by TYPE and kernel name
    text = json.dumps({"blockdevices": [
        {"name": "loop0", "kname": "loop0", "type": "loop", "size": 1},
        {"name": "zram0", "kname": "zram0", "type": "disk", "size": 1},
        {"name": "sr0", "kname": "sr0", "type": "rom", "size": 1},
        {"name": "zd0", "kname": "zd0", "type": "disk", "size": 1},
        {"name": "md0", "kname": "md0", "type": "raid1", "size": 1},
        {"name": "sdz", "kname": "sdz", "type": "disk", "size": "42", "rota": "1", "tran": "sas",
         "mountpoint": "/srv"},
    ]})
    parsed = disks.parse_lsblk(text)
    assert [d["name"] for d in parsed] == ["sdz"]
    # older lsblk: numbers and booleans as strings, single MOUNTPOINT column
    assert parsed[0]["size"] == 42 and parsed[0]["rotational"] is True and parsed[0]["mountpoints"] == [("sdz", "/srv")]


# --- by-id ---------------------------------------------------------------------------------------

def test_parse_by_id_maps_links_to_kernel_names():
    links = disks.parse_by_id(output("clean", "find", 0))
    assert links["ata-LAB_HDD_8TB_7200_HDD1005"] == "sdf"
    assert links["wwn-0x5000c50100770005"] == "sdf"
    assert links["nvme-QEMU_NVMe_Ctrl_NVME1001_1"] == "nvme1n1"
    assert links["virtio-lab-root"] == "vda"
    assert len(links) == 23  # 8 ata, 6 nvme, 1 virtio, 8 wwn


def test_parse_by_id_accepts_ls_l_output():
    text = ("total 0\nlrwxrwxrwx 1 root root  9 Nov 22 09:22 ata-LAB_HDD_8TB_7200_HDD1000 -> ../../sda\n"
            "lrwxrwxrwx 1 root root 10 Nov 22 09:22 ata-LAB_HDD_8TB_7200_HDD1000-part1 -> ../../sda1\n")
    assert disks.parse_by_id(text) == {"ata-LAB_HDD_8TB_7200_HDD1000": "sda",
                                       "ata-LAB_HDD_8TB_7200_HDD1000-part1": "sda1"}


def test_disk_ids_prefers_model_serial_names_and_never_partition_links():
    links = disks.parse_by_id(output("shared", "find", 0))  # has -part1/-part9 links of hb_rec's disks
    ids = disks.disk_ids(links, "nvme0n1")
    assert ids == [BY_ID + "nvme-QEMU_NVMe_Ctrl_NVME1000", BY_ID + "nvme-QEMU_NVMe_Ctrl_NVME1000_1",
                   BY_ID + "nvme-nvme.1b36-4e564d4531303030-51454d55204e564d65204374726c-00000001"]
    assert all("-part" not in p for p in ids)
    sdc = disks.disk_ids(links, "sdc")
    assert sdc == [BY_ID + "ata-LAB_HDD_8TB_7200_HDD1002", BY_ID + "wwn-0x5000c50100770002"]
    assert disks.preferred_id(list(reversed(sdc))) == BY_ID + "ata-LAB_HDD_8TB_7200_HDD1002"
    assert disks.preferred_id([]) == ""


@pytest.mark.parametrize("better, worse", [
    ("ata-X", "wwn-0x5000"),
    ("nvme-Model_SER", "nvme-eui.0025385"),
    ("nvme-Model_SER", "nvme-nvme.1b36-00"),
    ("scsi-SSEAGATE_ST8000_ZA1", "scsi-35000c500a1b2c3d4"),
    ("scsi-35000c500a1b2c3d4", "wwn-0x5000c500a1b2c3d4"),
    ("virtio-lab-root", "wwn-0x1"),
    ("nvme-Model_SER", "nvme-Model_SER_1"),
])
def test_id_rank_order(better, worse):
    assert disks.id_rank(better) < disks.id_rank(worse)


# --- signatures, holders, pools -----------------------------------------------------------------

def test_parse_wipefs_clean_only_the_root_filesystem():
    sigs = disks.parse_wipefs(output("clean", "wipefs"))
    assert list(sigs) == ["vda"]
    assert sigs["vda"] == [{"type": "ext4", "label": "root", "uuid": "848b7ff5-e64e-49c2-a5c7-fd5267797d94",
                            "offset": "0x438"}]


def test_parse_wipefs_in_use_states():
    fs = disks.parse_wipefs(output("inuse-fs", "wipefs"))
    assert [s["type"] for s in fs["sdf"]] == ["ext4"] and fs["sdf"][0]["label"] == "ha_test"
    assert {s["type"] for s in fs["nvme1n1"]} == {"gpt", "PMBR"}
    pool = disks.parse_wipefs(output("inuse-zpool", "wipefs"))
    assert {s["type"] for s in pool["sdf1"]} == {"zfs_member"}
    assert {s["label"] for s in pool["sdf1"]} == {"ha_test"}
    assert [s["type"] for s in pool["nvme1n1"]] == ["ext4"]
    assert disks.parse_wipefs("") == {}


def test_parse_holders():
    assert disks.parse_holders(output("inuse-fs", "find", 1)) == {"nvme1n1p1": ["dm-0"]}
    assert disks.parse_holders(output("clean", "find", 1)) == {}


def test_parse_zpool_status_devices_of_every_pool():
    # recorded on 2.3: tank as site.yml built it (by-id paths keep the -part1 of whole-disk members;
    # every class: raidz2 data, special mirror, log mirror, cache)
    tank = disks.parse_zpool_status(output("tank-zfs23", "zpool"))
    assert tank == {"tank": [BY_ID + f"ata-LAB_HDD_8TB_7200_HDD100{i}-part1" for i in range(6)]
                    + [BY_ID + f"nvme-QEMU_NVMe_Ctrl_NVME100{i}-part1" for i in range(3)]
                    + [BY_ID + "ata-LAB_SSD_960GB_SSD1000-part1", BY_ID + "ata-LAB_SSD_960GB_SSD1001-part1",
                       BY_ID + "nvme-QEMU_NVMe_Ctrl_NVME1003-part1"]}
    assert output("tank-zfs23", "zpool") == data("zfs23", "tank_status.json")
    # recorded on 2.3: several pools in one document, and a spare standing in (listed once)
    every = disks.parse_zpool_status(data("zfs23", "status_all.json"))
    assert sorted(every) == ["tank", "z23_mir", "z23_one", "z23_rec"]
    spared = disks.parse_zpool_status(data("zfs23", "status_spare_inuse.json"))["z23_rec"]
    assert spared == [f"/var/tmp/z23_{n}.img" for n in ("r1", "r2", "r3", "spare", "nvme1", "nvme2", "log1", "log2",
                                                         "cache")]
    # the 2.1 states' pools (derived: see support.DERIVED_POOLS)
    pools = disks.parse_zpool_status(output("shared", "zpool"))
    assert sorted(pools) == ["hb_rec", "hc_pool", "hd_pool"]
    assert pools["hb_rec"] == [
        BY_ID + "ata-LAB_HDD_8TB_7200_HDD1002-part1", BY_ID + "ata-LAB_HDD_8TB_7200_HDD1003-part1",
        BY_ID + "ata-LAB_HDD_8TB_7200_HDD1004-part1", BY_ID + "nvme-QEMU_NVMe_Ctrl_NVME1000-part1",
        "/var/tmp/hb_nvme.img", BY_ID + "ata-LAB_SSD_960GB_SSD1000-part1", BY_ID + "ata-LAB_SSD_960GB_SSD1001-part1",
        "/var/tmp/hb_cache.img", "/var/tmp/hb_spare.img"]
    assert pools["hc_pool"] == ["/var/tmp/hc_pool.img"]
    assert disks.parse_zpool_status(output("inuse-zpool", "zpool"))["ha_test"] == [HDD5 + "-part1"]


def test_parse_zpool_status_without_pools():
    # derived: no recording with no pool imported; `zpool status -j` then prints its document with empty
    # "pools" (zpool_do_status adds "pools" before it walks the pools; OpenZFS 2.3.9 zpool_main.c)
    empty = derive_json("zfs23/status_all.json", edit=lambda doc: doc["pools"].clear())
    assert disks.parse_zpool_status(empty) == {}


def test_parse_zpool_status_counts_a_missing_device_by_its_former_path():
    # derived from the recorded degraded z23_rec: its offline member r3 edited into a device the pool misses,
    # as OpenZFS 2.3.9 prints one (zpool_main.c vdev_stats_nvlist: named by its GUID, "not_present" and
    # "was" its path): the pool wants that disk back, so the disk at that path stays in use
    doc = json.loads(derive_json("zfs23/status_degraded.json", edit=_r3_not_present))
    assert "/var/tmp/z23_r3.img" in disks.parse_zpool_status(json.dumps(doc))["z23_rec"]


def _r3_not_present(doc: dict) -> None:
    raidz = doc["pools"]["z23_rec"]["vdevs"]["z23_rec"]["vdevs"]["raidz1-0"]["vdevs"]
    r3 = raidz.pop("/var/tmp/z23_r3.img")
    guid = str(r3["guid"])
    r3.update(name=guid, state="UNAVAIL", not_present=1, was=r3["path"])
    raidz[guid] = r3


@pytest.mark.parametrize("sig, device, expected", [
    ({"type": "zfs_member", "label": "tank"}, "sdb1", "ZFS pool member of pool 'tank' on sdb1 (zfs_member signature)"),
    ({"type": "zfs_member", "label": ""}, "sdb", "ZFS pool member (zfs_member signature)"),
    ({"type": "PMBR", "label": ""}, "sdb", "partition table gpt"),
    ({"type": "dos", "label": ""}, "sdb", "partition table dos"),
    ({"type": "linux_raid_member", "label": "h:0"}, "sdb", "Linux RAID (md) member (linux_raid_member signature)"),
    ({"type": "LVM2_member", "label": ""}, "sdb1", "LVM physical volume on sdb1 (LVM2_member signature)"),
    ({"type": "xfs", "label": "data"}, "sdb", "filesystem xfs labelled 'data'"),
])
def test_signature_reason(sig, device, expected):
    assert disks.signature_reason(sig, device, "sdb") == expected


# --- discover on recorded states ----------------------------------------------------------------

@pytest.mark.parametrize("state", STATES)
def test_discover_replay_matches_what_it_returned_on_the_vm(state):
    recorded = json.loads((DATA / "disks" / state / "discover.json").read_text())
    assert [d.to_dict() for d in discovered(state).values()] == recorded


def test_discover_clean_ten_free_disks_and_the_root_disk_in_use():
    found = discovered("clean")
    free = sorted(d.by_id for d in found.values() if not d.in_use)
    assert len(free) == 10
    assert [d.name for d in found.values() if d.in_use] == ["vda"]
    root = found["vda"]
    assert root.by_id == BY_ID + "virtio-lab-root" and root.transport == "virtio"
    assert root.reasons == ["filesystem ext4 labelled 'root'", "mounted at /"]
    assert found["sda"].disk_class == "hdd" and found["sdg"].disk_class == "ssd"
    assert found["nvme0n1"].disk_class == "nvme" and found["nvme0n1"].transport == "nvme"
    assert found["nvme1n1"].by_id == NVME1
    assert found["sdf"].ids == [HDD5, BY_ID + "wwn-0x5000c50100770005"]
    assert found["sdf"].serial == "HDD1005" and found["sdf"].model == "LAB HDD 8TB 7200"
    # sorted by preferred path (deterministic)
    assert [d.by_id for d in found.values()] == sorted(d.by_id for d in found.values())


def test_discover_filesystem_mount_partition_table_and_holder():
    found = discovered("inuse-fs")
    assert found["sdf"].in_use and found["sdf"].reasons == ["filesystem ext4 labelled 'ha_test'",
                                                            "mounted at /mnt/ha_test"]
    assert found["nvme1n1"].reasons == ["has partitions: nvme1n1p1", "partition table gpt",
                                        "held by dm-0 (via nvme1n1p1)"]
    assert [d.name for d in found.values() if not d.in_use] == ["sda", "sdb"]


def test_discover_imported_pool_and_whole_disk_filesystem():
    found = discovered("inuse-zpool")
    assert found["sdf"].reasons == ["has partitions: sdf1, sdf9", "partition table gpt",
                                    "ZFS pool member of pool 'ha_test' on sdf1 (zfs_member signature)",
                                    "part of imported pool 'ha_test'"]
    assert found["nvme1n1"].reasons == ["filesystem ext4"]  # not mounted, but a filesystem: in use
    assert "part of imported pool 'hb_rec'" in found["sdg"].reasons  # log mirror member
    assert "part of imported pool 'hb_rec'" in found["nvme0n1"].reasons  # special mirror member
    assert not any(disks.is_active_use(r) for r in found["nvme1n1"].reasons)
    assert disks.is_active_use("part of imported pool 'ha_test'")


def test_discover_members_of_the_recorded_tank_are_part_of_it():
    # recorded on 2.3 throughout: every member of tank (data, special, log, cache) is in active use
    found = discovered("tank-zfs23")
    members = [d for d in found.values() if "part of imported pool 'tank'" in d.reasons]
    assert sorted(d.by_id.removeprefix(BY_ID) for d in members) == sorted(
        [f"ata-LAB_HDD_8TB_7200_HDD100{i}" for i in range(6)] + [f"nvme-QEMU_NVMe_Ctrl_NVME100{i}" for i in range(4)]
        + ["ata-LAB_SSD_960GB_SSD1000", "ata-LAB_SSD_960GB_SSD1001"])
    assert all(any(disks.is_active_use(r) for r in d.reasons) for d in members)


def test_discover_exported_pool_is_still_in_use_by_its_signature():
    found = discovered("exported-pool")
    assert found["sdf"].in_use
    assert "ZFS pool member of pool 'ha_test' on sdf1 (zfs_member signature)" in found["sdf"].reasons
    assert not any(r.startswith("part of imported pool") for r in found["sdf"].reasons)


def test_discover_wipefs_failure_falls_back_to_one_probe_per_device():
    steps = script("clean")
    wipefs = next(s for s in steps if s["command"][0] == "wipefs")
    at = steps.index(wipefs)
    failed = dict(wipefs, rc=1, stdout="", stderr="wipefs: error: /dev/sdb: probing initialization failed")
    singles = []
    for dev in [c.rsplit("/", 1)[-1] for c in wipefs["command"][3:]]:
        one = {"command": ["wipefs", "--no-act", "--json", f"/dev/{dev}"], "rc": 0,
               "stdout": '{"signatures": []}' if dev != "vda" else wipefs["stdout"], "stderr": ""}
        if dev == "sdb":
            one.update(rc=1, stdout="", stderr="wipefs: error: /dev/sdb: probing initialization failed")
        singles.append(one)
    runner = ScriptedRunner(steps[:at] + [failed] + singles + steps[at + 1:])
    found = {d.name: d for d in disks.discover(runner)}
    runner.assert_done()
    assert found["sdb"].in_use  # unknown content is never reported free
    assert found["sdb"].reasons == ["signatures of sdb could not be read "
                                    "(wipefs: error: /dev/sdb: probing initialization failed)"]
    assert found["vda"].reasons[0] == "filesystem ext4 labelled 'root'" and not found["sda"].in_use


def test_discover_without_zfs_tools_relies_on_signatures():
    steps = script("exported-pool")
    steps[-1] = dict(steps[-1], rc=127, stdout="", stderr="zpool: command not found")
    runner = ScriptedRunner(steps)
    found = {d.name: d for d in disks.discover(runner)}
    assert "ZFS pool member of pool 'ha_test' on sdf1 (zfs_member signature)" in found["sdf"].reasons


def test_discover_zpool_failure_is_an_error():
    steps = script("clean")
    steps[-1] = dict(steps[-1], rc=1, stdout="", stderr="internal error: something broke")
    with pytest.raises(CommandError) as err:
        disks.discover(ScriptedRunner(steps))
    assert "zpool status -j --json-int -P" in str(err.value) and "something broke" in str(err.value)
    assert err.value.fix


def test_discover_on_a_zfs_without_json_says_to_upgrade():
    # a zpool older than 2.3 rejects -j the way 2.3's `zfs holds` does (recorded: zfs23/holds.stderr, exit 2)
    steps = script("clean")
    steps[-1] = dict(steps[-1], rc=2, stdout="", stderr=data("zfs23", "holds.stderr"))
    with pytest.raises(zjson.ZfsWithoutJson) as err:
        disks.discover(ScriptedRunner(steps))
    assert "older than OpenZFS 2.3" in str(err.value) and "fix: upgrade the node to OpenZFS 2.3" in str(err.value)


def test_discover_runs_only_reads_so_a_dry_run_runs_everything():
    runner = ScriptedRunner(script("clean"), dry_run=True)
    assert len(disks.discover(runner)) == 11
    runner.assert_done()
    assert runner.planned == [] and runner.executed == []


def test_free_for_pool_frees_only_that_pools_members():
    found = list(discovered("inuse-fs").values())
    freed = {d.by_id: d for d in disks.free_for_pool(found, "hb_rec")}
    member = "/dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1002"
    assert not freed[member].in_use and freed[member].reasons == []
    # a disk in use for its own reasons (mounted ext4, dm holder) stays in use
    assert freed["/dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1005"].in_use
    assert freed["/dev/disk/by-id/virtio-lab-root"].in_use
    # another pool's name frees nothing, and the input is not modified
    other = disks.free_for_pool(found, "tank")
    assert [d.in_use for d in other] == [d.in_use for d in found]
    assert next(d for d in found if d.by_id == member).in_use


def test_free_for_pool_frees_an_l2arc_device_whose_label_names_no_pool():
    """OpenZFS 2.3: a cache device's label carries only the pool GUID (wipefs shows no label), so the
    pool's own cache disk is recognised through `zpool status` membership (recorded on the trixie lab)."""
    found = list(discovered("tank-zfs23").values())
    cache = next(d for d in found if d.by_id.endswith("NVME1003"))
    assert "ZFS pool member on nvme1n1p1 (zfs_member signature)" in cache.reasons
    freed = {d.by_id: d for d in disks.free_for_pool(found, "tank")}
    assert not freed[cache.by_id].in_use
    assert all(not d.in_use for d in freed.values() if "part of imported pool 'tank'" in
               next(f for f in found if f.by_id == d.by_id).reasons)
    assert freed["/dev/disk/by-id/virtio-lab-root"].in_use
    # another pool's name does not free it: the membership is tank's
    assert next(d for d in disks.free_for_pool(found, "other") if d.by_id == cache.by_id).in_use
