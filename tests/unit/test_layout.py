"""The pure layout planner, on the disks discover() returned on storage1 (tests/unit/data/disks/*/discover.json)."""

from __future__ import annotations

import copy
import json

import pytest
from support import DATA  # (support puts module_utils on sys.path)

# isort: split
from fabric_core.base.errors import Busy, NotFound, UnsafeOperation, UserError
from fabric_core.base.model import DiskInfo, PoolLayout
from fabric_core.storage import layout

BY_ID = "/dev/disk/by-id/"
HDD = [f"{BY_ID}ata-LAB_HDD_8TB_7200_HDD100{i}" for i in range(6)]
SSD = [f"{BY_ID}ata-LAB_SSD_960GB_SSD100{i}" for i in range(2)]
NVME = [f"{BY_ID}nvme-QEMU_NVMe_Ctrl_NVME100{i}" for i in range(2)]
ROOT = BY_ID + "virtio-lab-root"

# The recordings come from a node with two NVMe devices: a 2-way special mirror beside raidz2 data
# is a redundancy mismatch that must be accepted explicitly (see the replication tests below).
LAB_POLICY = {"data": {"type": "raidz2", "width": 6, "class": "hdd"},
              "special": {"type": "mirror", "width": 2, "class": "nvme"},
              "log": {"type": "mirror", "width": 2, "class": "ssd"},
              "allow_mismatched_redundancy": True}


def lab(state: str = "clean") -> list[DiskInfo]:
    return [DiskInfo.from_dict(d) for d in json.loads((DATA / "disks" / state / "discover.json").read_text())]


def roles(result: PoolLayout) -> list[tuple]:
    return [(v.role, v.type, v.disks) for v in result.vdevs]


def fails(exc_type, disks, spec):
    with pytest.raises(exc_type) as err:
        layout.plan(disks, spec)
    assert err.value.fix, "every refusal says how to fix it"
    return str(err.value)


# --- policy form --------------------------------------------------------------------------------

def test_lab_raidz2_of_six_hdds_special_nvme_mirror_log_ssd_mirror():
    result = layout.plan(lab(), LAB_POLICY)
    assert roles(result) == [("data", "raidz2", HDD), ("special", "mirror", NVME), ("log", "mirror", SSD)]
    text = "\n".join(result.explanation)
    assert "skipped virtio-lab-root (in use: filesystem ext4 labelled 'root'; mounted at /)" in result.explanation
    assert ("data vdev 1: raidz2 of " + ", ".join(p.rsplit("/", 1)[1] for p in HDD)
            + " (6 x 8.0 GiB hdd; as many full vdevs of 6 as the 6 free hdd disks allow)") in result.explanation
    assert "special vdev 1: mirror of nvme-QEMU_NVMe_Ctrl_NVME1000, nvme-QEMU_NVMe_Ctrl_NVME1001" in text
    assert "log vdev 1: mirror of ata-LAB_SSD_960GB_SSD1000, ata-LAB_SSD_960GB_SSD1001" in text
    assert "warning" not in text and "left " not in text
    assert result.force and "accepted mismatched redundancy" in text


# --- replication levels: a special vdev must survive as many failures as the data -----------------

def with_third_nvme(disks: list[DiskInfo]) -> list[DiskInfo]:
    nvme = next(d for d in disks if d.disk_class == "nvme")
    extra = DiskInfo.from_dict({**nvme.to_dict(), "name": "nvme9n1", "serial": "NVME1009",
                                "by_id": BY_ID + "nvme-QEMU_NVMe_Ctrl_NVME1009",
                                "ids": [BY_ID + "nvme-QEMU_NVMe_Ctrl_NVME1009"]})
    return [*disks, extra]


def test_two_way_special_beside_raidz2_is_refused_with_the_fix():
    spec = {k: v for k, v in LAB_POLICY.items() if k != "allow_mismatched_redundancy"}
    msg = fails(UnsafeOperation, lab(), spec)
    assert "special vdev 1 (mirror of 2) survives 1 failed device(s), the data vdevs (raidz2 of 6) survive 2" in msg
    assert "a 3-way mirror: width: 3" in msg and "allow_mismatched_redundancy: true" in msg


def test_three_way_special_matches_raidz2_without_force():
    spec = {"data": {"type": "raidz2", "width": 6, "class": "hdd"},
            "special": {"type": "mirror", "width": 3, "class": "nvme"}}
    result = layout.plan(with_third_nvme(lab()), spec)
    assert [v.type for v in result.by_role("special")] == ["mirror"]
    assert len(result.by_role("special")[0].disks) == 3 and not result.force


def test_two_way_special_matches_mirror_data_without_force():
    spec = {"data": {"type": "mirror", "width": 2, "class": "hdd"},
            "special": {"type": "mirror", "width": 2, "class": "nvme"}}
    assert not layout.plan(lab(), spec).force


def test_nonredundant_special_when_allowed_forces_creation():
    spec = {"data": {"type": "mirror", "width": 2, "class": "hdd"},
            "special": {"type": "disk", "class": "nvme"}, "allow_nonredundant_special": True}
    result = layout.plan(lab(), spec)
    assert result.force and PoolLayout.from_dict(result.to_dict()).force


def test_plan_is_deterministic_whatever_the_input_order():
    disks = lab()
    first = layout.plan(disks, LAB_POLICY).to_dict()
    assert layout.plan(list(reversed(disks)), LAB_POLICY).to_dict() == first
    assert layout.plan(sorted(disks, key=lambda d: d.serial, reverse=True), LAB_POLICY).to_dict() == first


def test_raid10_striped_mirrors():
    result = layout.plan(lab(), {"data": {"type": "mirror", "width": 2, "class": "hdd", "count": 3}})
    assert roles(result) == [("data", "mirror", HDD[0:2]), ("data", "mirror", HDD[2:4]),
                             ("data", "mirror", HDD[4:6])]
    assert result.explanation[0] == "policy layout requested: data: 3 x mirror of 2 hdd"


def test_mirror_width_defaults_to_two_and_count_to_as_many_as_fit():
    result = layout.plan(lab(), {"data": {"type": "mirror", "class": "hdd"}})
    assert [v.disks for v in result.vdevs] == [HDD[0:2], HDD[2:4], HDD[4:6]]


def test_cache_takes_the_rest_after_special():
    spec = {"data": {"type": "raidz1", "width": 3, "class": "hdd", "count": 1},
            "special": {"type": "disk", "class": "nvme"}, "allow_nonredundant_special": True,
            "cache": {"class": "nvme", "count": "rest"}}
    result = layout.plan(lab(), spec)
    assert roles(result) == [("data", "raidz1", HDD[0:3]), ("special", "disk", NVME[:1]), ("cache", "disk", NVME[1:])]
    assert ("cache: the remaining free nvme disks nvme-QEMU_NVMe_Ctrl_NVME1001 (count: rest), one cache device each"
            in result.explanation)
    assert "note: special vdevs of type disk have no redundancy (allow_nonredundant_special is true)" \
        in result.explanation
    left = [s for s in result.explanation if s.startswith("left ")]
    assert left == [f"left ata-LAB_HDD_8TB_7200_HDD100{i} unused (not needed by the requested counts)"
                    for i in (3, 4, 5)] + [
        "left ata-LAB_SSD_960GB_SSD1000 unused (no section asks for ssd disks)",
        "left ata-LAB_SSD_960GB_SSD1001 unused (no section asks for ssd disks)"]


def test_cache_rest_with_nothing_left_is_explained_not_refused():
    spec = dict(LAB_POLICY, cache={"class": "nvme"})
    result = layout.plan(lab(), spec)
    assert not result.by_role("cache")
    assert "cache: no free nvme disk left after the other vdevs, so no cache device" in result.explanation


def test_cache_with_a_count():
    result = layout.plan(lab(), {"data": {"type": "mirror", "class": "hdd", "count": 1},
                                 "cache": {"class": "nvme", "count": 2}})
    assert [v.disks for v in result.by_role("cache")] == [NVME[:1], NVME[1:]]


def test_spares_come_from_the_data_class_and_are_kept_aside_before_counting_vdevs():
    result = layout.plan(lab(), {"data": {"type": "mirror", "width": 2, "class": "hdd"}, "spares": 1})
    assert roles(result) == [("data", "mirror", HDD[0:2]), ("data", "mirror", HDD[2:4]), ("spare", "disk", HDD[4:5])]
    assert "hot spare(s) from the data class hdd: ata-LAB_HDD_8TB_7200_HDD1004" in result.explanation
    assert ("left ata-LAB_HDD_8TB_7200_HDD1005 unused (1 left, fewer than the 2 a further data vdev needs)"
            in result.explanation)


def test_in_use_disks_are_skipped_with_their_reason():
    result = layout.plan(lab("inuse-fs"), {"data": {"type": "mirror", "class": "hdd"}})
    assert roles(result) == [("data", "mirror", HDD[0:2])]
    assert ("skipped ata-LAB_HDD_8TB_7200_HDD1005 (in use: filesystem ext4 labelled 'ha_test'; "
            "mounted at /mnt/ha_test)") in result.explanation
    assert any(s.startswith("skipped ata-LAB_HDD_8TB_7200_HDD1002 (in use: has partitions: sdc1, sdc9")
               for s in result.explanation)


def test_min_size_refuses_when_only_small_disks_remain():
    msg = fails(UserError, lab(), {"data": {"type": "mirror", "class": "ssd"}, "min_size": 5 * 2**30})
    assert "not enough free ssd disks for data (1 x mirror of 2): 2 needed, 0 free (none)" in msg


def test_min_size_explanation():
    result = layout.plan(lab(), {"data": {"type": "mirror", "class": "hdd", "count": 1}, "min_size": 5 * 2**30})
    assert "skipped ata-LAB_SSD_960GB_SSD1000 (4.0 GiB is smaller than min_size 5.0 GiB)" in result.explanation
    assert result.explanation[0].endswith("disks of at least 5.0 GiB")


def test_mixed_sizes_in_a_vdev_warn():
    disks = lab()
    for d in disks:
        if d.by_id == HDD[1]:
            d.size = 16 * 2**30
    result = layout.plan(disks, {"data": {"type": "mirror", "class": "hdd", "count": 1}})
    assert ("warning: data vdev 1 mixes disk sizes (ata-LAB_HDD_8TB_7200_HDD1000 8.0 GiB, "
            "ata-LAB_HDD_8TB_7200_HDD1001 16.0 GiB); every member only contributes the size of the smallest "
            "(8.0 GiB)") in result.explanation


def test_wipe_lets_policy_use_an_in_use_disk_and_says_so():
    disks = lab("inuse-zpool")
    msg = fails(UserError, disks, {"data": {"type": "mirror", "class": "nvme"}})
    assert "1 free (nvme-QEMU_NVMe_Ctrl_NVME1001)" not in msg  # NVME1001 carries ext4 here
    result = layout.plan(disks, {"data": {"type": "disk", "class": "nvme"}, "allow_nonredundant_data": True,
                                 "wipe": ["nvme-QEMU_NVMe_Ctrl_NVME1001"]})
    assert roles(result) == [("data", "disk", NVME[1:])]
    assert ("nvme-QEMU_NVMe_Ctrl_NVME1001 is in use (filesystem ext4) but listed in wipe: it will be wiped "
            "and its old content destroyed") in result.explanation


# --- policy refusals ------------------------------------------------------------------------------

def test_not_enough_free_disks_names_free_and_in_use_ones():
    msg = fails(UserError, lab("inuse-fs"), LAB_POLICY)
    assert "not enough free hdd disks for data (1 x raidz2 of 6): 6 needed, 2 free " \
           "(ata-LAB_HDD_8TB_7200_HDD1000, ata-LAB_HDD_8TB_7200_HDD1001)" in msg
    assert "ata-LAB_HDD_8TB_7200_HDD1005 (filesystem ext4 labelled 'ha_test'; mounted at /mnt/ha_test)" in msg
    assert "virtio-lab-root (filesystem ext4 labelled 'root'; mounted at /)" in msg  # vda is rotational: hdd


def test_not_enough_for_count():
    msg = fails(UserError, lab(), {"data": {"type": "mirror", "class": "hdd", "count": 4}})
    assert "for data (4 x mirror of 2): 8 needed, 6 free" in msg


def test_not_enough_with_spares():
    msg = fails(UserError, lab(), {"data": {"type": "raidz2", "width": 6, "class": "hdd"}, "spares": 1})
    assert "for data (1 x raidz2 of 6) plus 1 spare(s): 7 needed, 6 free" in msg


def test_not_enough_for_special_says_what_the_other_vdevs_took():
    spec = {"data": {"type": "mirror", "class": "nvme", "count": 1},
            "special": {"type": "mirror", "width": 2, "class": "nvme"}}
    msg = fails(UserError, lab(), spec)
    assert "not enough free nvme disks for special (1 x mirror of 2): 2 needed, 0 free (none)" in msg
    assert "already planned for other vdevs: nvme-QEMU_NVMe_Ctrl_NVME1000, nvme-QEMU_NVMe_Ctrl_NVME1001" in msg


@pytest.mark.parametrize("spec, exc, fragment", [
    ({"data": {"type": "raidz2", "width": 6, "class": "hdd"}, "slog": {}, "spars": 1}, UserError,
     "unknown keys in the layout spec: slog, spars"),
    ({"data": {"type": "raidz2", "width": 6, "class": "hdd", "disks": 3}}, UserError, "unknown key in `data`: disks"),
    ({"data": {"type": "raidz5", "width": 6, "class": "hdd"}}, UserError, "unknown vdev type in `data` 'raidz5'"),
    ({"data": {"type": "mirror", "class": "tape"}}, UserError, "unknown disk class in `data` 'tape'"),
    ({"data": {"type": "raidz2", "width": 2, "class": "hdd"}}, UserError,
     "a raidz2 vdev needs at least 3 disks, `data` asks for width 2"),
    ({"data": {"type": "raidz3", "width": 3, "class": "hdd"}}, UserError, "a raidz3 vdev needs at least 4 disks"),
    ({"data": {"type": "mirror", "width": 1, "class": "hdd"}}, UserError, "a mirror vdev needs at least 2 disks"),
    ({"data": {"type": "raidz1", "class": "hdd"}}, UserError, "`data` of type raidz1 has no width"),
    ({"data": {"type": "disk", "width": 2, "class": "hdd"}, "allow_nonredundant_data": True}, UserError,
     "a disk vdev has exactly one disk"),
    ({"data": {"type": "mirror", "class": "hdd", "count": 0}}, UserError, "invalid count 0 in `data`"),
    ({"data": {"type": "mirror", "class": "hdd"}, "spares": -1}, UserError, "invalid spares -1"),
    ({"data": {"type": "mirror", "class": "hdd"}, "min_size": "4G"}, UserError, "invalid min_size '4G'"),
    ({"data": {"type": "mirror"}}, UserError, "`data` has no class"),
    ({"data": {"class": "hdd"}}, UserError, "`data` has no type"),
    ({"special": {"type": "mirror", "class": "nvme"}}, UserError, "the layout spec has no `data` section"),
    ({"data": {"type": "mirror", "class": "hdd"}, "special": {"type": "raidz1", "width": 2, "class": "nvme"}},
     UserError, "a special vdev cannot be raidz1: ZFS supports only disk or mirror there"),
    ({"data": {"type": "mirror", "class": "hdd"}, "log": {"type": "raidz2", "width": 3, "class": "ssd"}},
     UserError, "a log vdev cannot be raidz2"),
    ({"data": {"type": "mirror", "class": "hdd"}, "cache": {"class": "nvme", "count": "all"}}, UserError,
     "invalid cache count 'all'"),
    ({"data": {"type": "mirror", "class": "hdd"}, "cache": {"type": "mirror", "class": "nvme"}}, UserError,
     "unknown key in `cache`: type"),
    ({"data": {"type": "disk", "class": "hdd"}}, UnsafeOperation,
     "refusing a data vdev of type disk: a data vdev of type disk has no redundancy"),
    ({"data": {"type": "mirror", "class": "hdd"}, "special": {"type": "disk", "class": "nvme"}}, UnsafeOperation,
     "refusing a special vdev of type disk: a special vdev of type disk has no redundancy: it holds the pool's "
     "metadata, so losing it loses the whole pool"),
    ({"data": {"type": "mirror", "class": "hdd"}, "allow_nonredundant_data": "yes"}, UserError,
     "`allow_nonredundant_data` must be true or false"),
    ({"data": {"type": "mirror", "class": "hdd"}, "wipe": ["ata-NOPE"]}, NotFound, "disk 'ata-NOPE' (listed in wipe)"),
    ({"data": {"type": "mirror", "class": "hdd"}, "wipe": "ata-LAB_HDD_8TB_7200_HDD1000"}, UserError,
     "`wipe` must be a list"),
    ({"data": {"type": "mirror", "class": "hdd"}, "wipe": ["virtio-lab-root"]}, Busy,
     "disk virtio-lab-root is listed in wipe but is actively used: mounted at /"),
    ({}, UserError, "the layout spec is empty"),
])
def test_policy_refusals(spec, exc, fragment):
    msg = fails(exc, lab(), spec)
    assert fragment in msg


def test_unknown_key_fix_lists_the_allowed_keys():
    msg = fails(UserError, lab(), {"data": {"type": "mirror", "class": "hdd"}, "slog": {}})
    assert "allowed keys: data, special, log, cache, spares, min_size, wipe" in msg


def test_nonredundant_data_allowed_explicitly():
    result = layout.plan(lab(), {"data": {"type": "disk", "class": "ssd"}, "allow_nonredundant_data": True})
    assert roles(result) == [("data", "disk", SSD[:1]), ("data", "disk", SSD[1:])]
    assert "note: data vdevs of type disk have no redundancy (allow_nonredundant_data is true)" in result.explanation


def test_planning_does_not_modify_its_inputs():
    disks, spec = lab("inuse-fs"), {"data": {"type": "mirror", "class": "hdd"}, "cache": {"class": "ssd"}}
    before = (copy.deepcopy([d.to_dict() for d in disks]), copy.deepcopy(spec))
    layout.plan(disks, spec)
    assert ([d.to_dict() for d in disks], spec) == before


# --- explicit form --------------------------------------------------------------------------------

def test_explicit_short_names_are_expanded_and_roles_ordered():
    spec = {"vdevs": [
        {"role": "cache", "disks": ["nvme-QEMU_NVMe_Ctrl_NVME1000", "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_NVME1001_1"]},
        {"role": "data", "type": "mirror", "disks": ["ata-LAB_HDD_8TB_7200_HDD1000", HDD[1]]},
        {"role": "data", "type": "mirror", "disks": ["wwn-0x5000c50100770002", "sdd"]},
        {"role": "log", "type": "mirror", "disks": SSD},
        {"role": "spare", "disks": ["ata-LAB_HDD_8TB_7200_HDD1004"]},
    ]}
    result = layout.plan(lab(), spec)
    assert roles(result) == [("data", "mirror", HDD[0:2]), ("data", "mirror", HDD[2:4]), ("log", "mirror", SSD),
                             ("cache", "disk", NVME[:1]), ("cache", "disk", NVME[1:]), ("spare", "disk", HDD[4:5])]
    assert "wwn-0x5000c50100770002 is ata-LAB_HDD_8TB_7200_HDD1002 (its preferred /dev/disk/by-id name)" \
        in result.explanation
    assert "sdd is ata-LAB_HDD_8TB_7200_HDD1003 (its preferred /dev/disk/by-id name)" in result.explanation
    assert ("data vdev 2: mirror of ata-LAB_HDD_8TB_7200_HDD1002, ata-LAB_HDD_8TB_7200_HDD1003 "
            "(2 x 8.0 GiB hdd; vdevs entry 3, chosen explicitly)") in result.explanation
    assert "note: no data vdev" not in "\n".join(result.explanation)


def test_explicit_unknown_disk_names_it_and_lists_candidates():
    msg = fails(NotFound, lab(), {"vdevs": [{"type": "mirror", "disks": ["ata-LAB_HDD_8TB_7200_HDD1000",
                                                                        "ata-LAB_HDD_8TB_7200_HDD1009"]}]})
    assert "disk 'ata-LAB_HDD_8TB_7200_HDD1009' (in vdevs entry 1) not found on this node" in msg
    assert "candidates: ata-LAB_HDD_8TB_7200_HDD1000, ata-LAB_HDD_8TB_7200_HDD1001" in msg
    assert "virtio-lab-root (in use)" in msg


def test_explicit_in_use_disk_is_refused_unless_listed_in_wipe():
    spec = {"vdevs": [{"type": "mirror", "disks": ["ata-LAB_HDD_8TB_7200_HDD1000", "nvme-QEMU_NVMe_Ctrl_NVME1001"]}]}
    msg = fails(UnsafeOperation, lab("inuse-zpool"), spec)
    assert "disk nvme-QEMU_NVMe_Ctrl_NVME1001 in vdevs entry 1 is in use: filesystem ext4" in msg
    assert "add nvme-QEMU_NVMe_Ctrl_NVME1001 to wipe" in msg
    result = layout.plan(lab("inuse-zpool"), dict(spec, wipe=[NVME[1]]))
    assert roles(result) == [("data", "mirror", [HDD[0], NVME[1]])]
    assert ("nvme-QEMU_NVMe_Ctrl_NVME1001 is in use (filesystem ext4) but listed in wipe: it will be wiped "
            "and its old content destroyed") in result.explanation


def test_explicit_wipe_never_overrides_an_imported_pool_or_a_mount():
    spec = {"vdevs": [{"type": "mirror", "disks": ["ata-LAB_HDD_8TB_7200_HDD1000", "ata-LAB_HDD_8TB_7200_HDD1005"]}],
            "wipe": ["ata-LAB_HDD_8TB_7200_HDD1005"]}
    assert "actively used: part of imported pool 'ha_test'" in fails(Busy, lab("inuse-zpool"), spec)
    assert "actively used: mounted at /mnt/ha_test" in fails(Busy, lab("inuse-fs"), spec)
    # exported: only the signature remains, so wiping is allowed
    result = layout.plan(lab("exported-pool"), spec)
    assert roles(result) == [("data", "mirror", [HDD[0], HDD[5]])]


def test_explicit_wipe_of_an_unused_disk_is_mentioned():
    spec = {"vdevs": [{"type": "mirror", "disks": HDD[:2]}], "wipe": ["ata-LAB_HDD_8TB_7200_HDD1005"]}
    result = layout.plan(lab(), spec)
    assert ("ata-LAB_HDD_8TB_7200_HDD1005 is listed in wipe but not used by this layout; it is left alone"
            in result.explanation)


@pytest.mark.parametrize("vdevs, exc, fragment", [
    ([{"type": "mirror", "disks": [HDD[0], HDD[1]]}, {"type": "mirror", "disks": ["sdb", HDD[2]]}], UserError,
     "disk ata-LAB_HDD_8TB_7200_HDD1001 is used twice (vdevs entry 1 and vdevs entry 2)"),
    ([{"type": "mirror", "disks": [HDD[0], "wwn-0x5000c50100770000"]}], UserError, "used twice"),
    ([{"type": "raidz2", "disks": HDD[:2]}], UserError, "vdevs entry 1: a raidz2 vdev needs at least 3 disks, 2 given"),
    ([{"type": "mirror", "disks": HDD[:1]}], UserError, "a mirror vdev needs at least 2 disks, 1 given"),
    ([{"role": "metadata", "type": "mirror", "disks": HDD[:2]}], UserError, "unknown vdev role in vdevs entry 1"),
    ([{"type": "stripe", "disks": HDD[:2]}], UserError, "unknown vdev type in vdevs entry 1 'stripe'"),
    ([{"type": "mirror", "disks": HDD[:2], "ashift": 12}], UserError, "unknown key in vdevs entry 1: ashift"),
    ([{"type": "mirror", "disks": []}], UserError, "vdevs entry 1 has no disks"),
    ([{"role": "cache", "type": "mirror", "disks": NVME}], UserError, "a cache vdev cannot be mirror"),
    ([{"role": "special", "type": "raidz1", "disks": HDD[:3]}], UserError, "a special vdev cannot be raidz1"),
    ([{"disks": HDD[:1]}], UnsafeOperation, "refusing a data vdev of type disk"),
    ([{"role": "special", "disks": NVME[:1]}], UnsafeOperation, "refusing a special vdev of type disk"),
    ([], UserError, "`vdevs` must be a non-empty list"),
    (["ata-LAB_HDD_8TB_7200_HDD1000"], UserError, "vdevs entry 1 must be a mapping"),
])
def test_explicit_refusals(vdevs, exc, fragment):
    assert fragment in fails(exc, lab(), {"vdevs": vdevs})


def test_explicit_form_refuses_policy_keys():
    msg = fails(UserError, lab(), {"vdevs": [{"type": "mirror", "disks": HDD[:2]}], "spares": 1})
    assert "unknown key in the layout spec: spares" in msg


def test_explicit_nonredundant_allowed_and_cache_only_layout_noted():
    result = layout.plan(lab(), {"vdevs": [{"disks": HDD[:2]}], "allow_nonredundant_data": True})
    assert roles(result) == [("data", "disk", HDD[:1]), ("data", "disk", HDD[1:2])]
    result = layout.plan(lab(), {"vdevs": [{"role": "cache", "disks": NVME}]})
    assert "note: no data vdev: this layout can only be added to an existing pool" in result.explanation


# --- explain_text -------------------------------------------------------------------------------

def test_explain_text():
    result = layout.plan(lab(), dict(LAB_POLICY, cache={"class": "nvme"}))
    text = layout.explain_text(result)
    lines = text.splitlines()
    assert lines[:5] == ["data: raidz2"] + [f"    ata-LAB_HDD_8TB_7200_HDD100{i}" for i in range(4)]
    assert "special: mirror" in lines and "log: mirror" in lines
    assert lines[lines.index("why:") + 1] == "  - " + result.explanation[0]
    assert len(lines) == lines.index("why:") + 1 + len(result.explanation)
    assert layout.explain_text(PoolLayout()) == "(no vdevs)\n"
    spare = layout.explain_text(PoolLayout(vdevs=layout.plan(lab(), {
        "data": {"type": "mirror", "class": "ssd"}, "spares": 0, "cache": {"class": "nvme", "count": 1}}).vdevs))
    assert "cache: nvme-QEMU_NVMe_Ctrl_NVME1000" in spare.splitlines()


def test_layout_round_trips_through_dicts():
    result = layout.plan(lab(), LAB_POLICY)
    assert PoolLayout.from_dict(json.loads(json.dumps(result.to_dict()))).to_dict() == result.to_dict()
