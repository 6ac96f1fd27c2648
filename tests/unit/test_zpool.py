"""fabric_core.zpool on recorded OpenZFS 2.1.11 output (tests/unit/data/zpool/, commands in its README)."""

from __future__ import annotations

import pytest
from support import ScriptedRunner, data  # (support puts module_utils on sys.path)

# isort: split
from fabric_core import zpool
from fabric_core.errors import CommandError, InvalidName, NotFound, UnsafeOperation, UserError
from fabric_core.model import DiskInfo, PoolLayout, Vdev

D = "/dev/disk/by-id/"
H2, H3, H4 = (D + f"ata-LAB_HDD_8TB_7200_HDD100{i}" for i in (2, 3, 4))
S0, S1 = D + "ata-LAB_SSD_960GB_SSD1000", D + "ata-LAB_SSD_960GB_SSD1001"
N0 = D + "nvme-QEMU_NVMe_Ctrl_NVME1000"
F_NVME, F_CACHE, F_SPARE = "/var/tmp/hb_nvme.img", "/var/tmp/hb_cache.img", "/var/tmp/hb_spare.img"

FULL = PoolLayout(vdevs=[Vdev("data", "raidz1", [H2, H3, H4]), Vdev("special", "mirror", [N0, F_NVME]),
                         Vdev("log", "mirror", [S0, S1]), Vdev("cache", "disk", [F_CACHE]),
                         Vdev("spare", "disk", [F_SPARE])])
LIST_ARGV = ["zpool", "list", "-H", "-p", "-o", "name,size,alloc,free,health", "hb_rec"]
STATUS_ARGV = ["zpool", "status", "-P", "hb_rec"]
GET_ARGV = ["zpool", "get", "-H", "-p", "-o", "property,value,source", "all", "hb_rec"]
MANAGED_ARGV = ["zfs", "get", "-H", "-p", "-o", "name,property,value,source", "fabric:managed", "hb_rec"]


def disk(path: str, *reasons: str, name: str = "") -> DiskInfo:
    return DiskInfo(name=name or path.rsplit("/", 1)[-1], by_id=path, ids=[path], in_use=bool(reasons),
                    reasons=list(reasons))


ALL_DISKS = [disk(p) for p in (H2, H3, H4, S0, S1, N0, F_NVME, F_CACHE, F_SPARE)]


def step(argv, file=None, rc=0, stderr_file=None):
    return {"command": argv, "rc": rc, "stdout": data("zpool", file) if file else "",
            "stderr": data("zpool", stderr_file) if stderr_file else ""}


# ---------------------------------------------------------------- parsing


def test_parse_status_full_layout_maps_part1_back_to_the_declared_disk():
    layout = zpool.parse_status(data("zpool", "status_full.txt"))
    assert [v.to_dict() for v in layout.vdevs] == [v.to_dict() for v in FULL.vdevs]


def test_parse_status_without_cache_and_with_two_mirrors_and_single_disk():
    nocache = zpool.parse_status(data("zpool", "status_nocache.txt"))
    assert [v.role for v in nocache.vdevs] == ["data", "special", "log", "spare"]
    mirrors = zpool.parse_status(data("zpool", "status_mirrors.txt"))
    assert [v.to_dict() for v in mirrors.vdevs] == [
        {"role": "data", "type": "mirror", "disks": ["/var/tmp/hb_m1.img", "/var/tmp/hb_m2.img"]},
        {"role": "data", "type": "mirror", "disks": ["/var/tmp/hb_m3.img", "/var/tmp/hb_m4.img"]}]
    single = zpool.parse_status(data("zpool", "status_single.txt"))
    assert [v.to_dict() for v in single.vdevs] == [{"role": "data", "type": "disk", "disks": ["/var/tmp/hb_s1.img"]}]


@pytest.mark.parametrize("name", ["status_degraded.txt", "status_spare_inuse.txt", "status_reimported.txt",
                                  "status_after_online.txt"])
def test_degraded_and_spare_in_use_keep_the_declared_layout(name):
    assert zpool.parse_status(data("zpool", name)).to_dict()["vdevs"] == FULL.to_dict()["vdevs"]


def test_health_of_degraded_pool_names_the_offline_disk():
    health = zpool.parse_health(data("zpool", "status_degraded.txt"))
    assert health.name == "hb_rec" and health.state == "DEGRADED"
    assert health.status.startswith("One or more devices has been taken offline")
    assert "degraded state." in health.status  # continuation lines are joined
    bad = [(d.path or d.name, d.state, d.role, d.vdev) for d in health.unhealthy()]
    assert bad == [("hb_rec", "DEGRADED", "pool", ""), ("raidz1-0", "DEGRADED", "data", "raidz1-0"),
                   (H4, "OFFLINE", "data", "raidz1-0")]


def test_health_with_spare_in_use():
    health = zpool.parse_health(data("zpool", "status_spare_inuse.txt"))
    spare = [d for d in health.devices if d.role == "spare"]
    assert [(d.path, d.state, d.note) for d in spare] == [(F_SPARE, "INUSE", "currently in use")]
    standing_in = [d for d in health.devices if d.vdev == "raidz1-0" and d.path == F_SPARE]
    assert standing_in and standing_in[0].state == "ONLINE" and standing_in[0].depth == 3
    assert health.scan.startswith("resilvered 0B")


def test_health_of_online_pool_has_counters():
    health = zpool.parse_health(data("zpool", "status_full.txt"))
    assert health.state == "ONLINE" and health.unhealthy() == [] and health.errors == "No known data errors"
    leaf = next(d for d in health.devices if d.path == H2)
    assert (leaf.read, leaf.write, leaf.cksum, leaf.role) == ("0", "0", "0", "data")


def test_unavailable_device_printed_as_guid_maps_to_was_path():
    # the line format of a missing device (guid, UNAVAIL, counters, "was PATH"); built from the
    # recorded degraded status by replacing the offline member's line
    text = data("zpool", "status_degraded.txt").replace(
        f"{H4}-part1  OFFLINE      0     0     0",
        f"1234567890123456789                                   UNAVAIL      0     0     0  was {H4}-part1")
    health = zpool.parse_health(text)
    assert [(d.path, d.state) for d in health.devices if d.state == "UNAVAIL"] == [(H4, "UNAVAIL")]
    assert zpool.parse_status(text).vdevs[0].disks == [H2, H3, H4]


def test_parse_status_rejects_other_text():
    with pytest.raises(UserError):
        zpool.parse_status(data("zpool", "status_missing.txt"))


def test_parse_list_and_props():
    assert zpool.parse_list(data("zpool", "list_full.txt")) == [
        {"name": "hb_rec", "size": 27246198784, "alloc": 503808, "free": 27245694976, "health": "ONLINE"}]
    assert zpool.parse_list(data("zpool", "list_degraded.txt"))[0]["health"] == "DEGRADED"
    props = zpool.parse_props(data("zpool", "get_all_full.txt"))
    assert props["ashift"] == ("12", "local") and props["autotrim"] == ("on", "local")
    assert props["health"][0] == "ONLINE" and props["size"][0].isdigit()
    assert zpool.parse_props(data("zpool", "get_all_full_default_o.txt")) == props


# ---------------------------------------------------------------- command lines


def test_create_argv_matches_the_recorded_command_order():
    argv = zpool.create_argv("hb_rec", FULL, 12, {}, {}, dry_run=True)
    assert argv == ["zpool", "create", "-n", "-o", "ashift=12", "-O", "fabric:managed=true", "hb_rec",
                    "raidz1", H2, H3, H4, "special", "mirror", N0, F_NVME, "log", "mirror", S0, S1,
                    "cache", F_CACHE, "spare", F_SPARE]
    real = zpool.create_argv("hb_rec", FULL, 12, {"autotrim": True}, {"compression": "lz4", "atime": False})
    assert real[:13] == ["zpool", "create", "-o", "ashift=12", "-o", "autotrim=on", "-O", "compression=lz4",
                         "-O", "atime=off", "-O", "fabric:managed=true", "hb_rec"]


def test_add_argv():
    assert zpool.add_argv("hb_rec", [Vdev("cache", "disk", [F_CACHE])], dry_run=True) == \
        ["zpool", "add", "-n", "hb_rec", "cache", F_CACHE]
    assert zpool.add_argv("t", [Vdev("spare", "disk", [S1]), Vdev("special", "mirror", [N0, S0]),
                                Vdev("log", "mirror", [H2, H3])], ashift=12) == \
        ["zpool", "add", "-o", "ashift=12", "t", "special", "mirror", N0, S0, "log", "mirror", H2, H3, "spare", S1]


@pytest.mark.parametrize("vdevs, words", [
    ([], "no vdevs"),
    ([{"role": "cache", "type": "disk", "disks": [S0]}], "no data vdev"),
    ([{"role": "data", "type": "raidz9", "disks": [S0]}], "unknown type"),
    ([{"role": "meta", "type": "disk", "disks": [S0]}], "unknown role"),
    ([{"role": "data", "type": "raidz2", "disks": [H2, H3]}], "needs at least 3"),
    ([{"role": "data", "type": "mirror", "disks": [H2, H3]}, {"role": "log", "type": "disk", "disks": [H3]}],
     "declared twice"),
    ([{"role": "data", "type": "disk", "disks": [H2, H3]}], "exactly one disk"),
    ([{"role": "data", "type": "disk", "disks": ["sda"]}], "not an absolute device path"),
    ([{"role": "data", "type": "disk", "disks": [H2]}, {"role": "cache", "type": "mirror", "disks": [S0, S1]}],
     "cannot be grouped"),
])
def test_validate_layout_refuses(vdevs, words):
    with pytest.raises(UserError, match=words):
        zpool.validate_layout(PoolLayout.from_dict({"vdevs": vdevs}))


# ---------------------------------------------------------------- diff


def test_diff_layout_identical_and_missing_cache():
    live = zpool.parse_status(data("zpool", "status_full.txt"))
    assert zpool.diff_layout(FULL, live) == ([], [])
    nocache = zpool.parse_status(data("zpool", "status_nocache.txt"))
    to_add, conflicts = zpool.diff_layout(FULL, nocache)
    assert [v.to_dict() for v in to_add] == [{"role": "cache", "type": "disk", "disks": [F_CACHE]}]
    assert conflicts == []


def test_diff_layout_accepts_declared_part1_and_reordered_members():
    declared = PoolLayout(vdevs=[Vdev("data", "raidz1", [H4 + "-part1", H2, H3])] + FULL.vdevs[1:])
    assert zpool.diff_layout(declared, zpool.parse_status(data("zpool", "status_full.txt"))) == ([], [])


def test_diff_layout_data_growth_needs_allow_grow_and_same_type():
    live = zpool.parse_status(data("zpool", "status_mirrors.txt"))
    declared = PoolLayout(vdevs=live.vdevs + [Vdev("data", "mirror", ["/var/tmp/x1", "/var/tmp/x2"])])
    to_add, conflicts = zpool.diff_layout(declared, live)
    assert to_add == [] and len(conflicts) == 1 and "allow_grow" in conflicts[0]
    to_add, conflicts = zpool.diff_layout(declared, live, allow_grow=True)
    assert [v.to_dict() for v in to_add] == [
        {"role": "data", "type": "mirror", "disks": ["/var/tmp/x1", "/var/tmp/x2"]}]
    assert conflicts == []
    raidz = Vdev("data", "raidz1", ["/var/tmp/x1", "/var/tmp/x2", "/var/tmp/x3"])
    other_type = PoolLayout(vdevs=live.vdevs + [raidz])
    to_add, conflicts = zpool.diff_layout(other_type, live, allow_grow=True)
    assert to_add == [] and "mixing types is refused" in conflicts[0]


def test_diff_layout_conflicts_partly_elsewhere_and_undeclared():
    live = zpool.parse_status(data("zpool", "status_full.txt"))
    # declared: log as a mirror of S0 and a new disk (S0 is in live mirror-2); cache and spare not declared
    declared = PoolLayout(vdevs=[FULL.vdevs[0], FULL.vdevs[1], Vdev("log", "mirror", [S0, "/var/tmp/new"])])
    to_add, conflicts = zpool.diff_layout(declared, live)
    assert to_add == []
    assert len(conflicts) == 3
    assert conflicts[0].startswith(f"declared log mirror [{S0}, /var/tmp/new] does not match the pool: {S0} is in "
                                   "live log mirror")
    assert any(c.startswith(f"live cache disk [{F_CACHE}] is not declared") for c in conflicts)
    assert any(c.startswith(f"live spare disk [{F_SPARE}] is not declared") for c in conflicts)


# ---------------------------------------------------------------- ensure_pool with scripted commands


def test_ensure_pool_creates_when_missing():
    argv = zpool.create_argv("hb_rec", FULL, 12, {"autotrim": "on"}, {"compression": "lz4", "atime": "off"})
    runner = ScriptedRunner([step(LIST_ARGV, "list_missing.txt", 1, "list_missing.txt.stderr"),
                             step(argv, "create_full.txt"),
                             step(STATUS_ARGV, "status_full.txt")])
    out = zpool.ensure_pool(runner, name="hb_rec", layout=FULL, disks=ALL_DISKS, properties={"autotrim": "on"},
                            fs_properties={"compression": "lz4", "atime": "off"})
    runner.assert_done()
    assert out["changed"] and out["created"] and out["commands"] == [argv]
    assert out["before"] == {"pool": "hb_rec", "exists": False, "vdevs": []}
    assert out["after"]["vdevs"] == FULL.to_dict()["vdevs"] and out["health"] == "ONLINE"


def test_ensure_pool_dry_run_create_runs_zpool_create_n_only():
    layout = PoolLayout(vdevs=[v for v in FULL.vdevs if v.role != "special"])
    check = zpool.create_argv("hb_rec", layout, 12, {}, {}, dry_run=True)
    runner = ScriptedRunner([step(LIST_ARGV, "list_missing.txt", 1, "list_missing.txt.stderr"),
                             step(check, "create_n_nospecial.txt")], dry_run=True)
    out = zpool.ensure_pool(runner, name="hb_rec", layout=layout, disks=ALL_DISKS)
    runner.assert_done()
    assert out["changed"] and out["created"]
    assert out["prepared"].startswith("would create 'hb_rec' with the following layout:")
    assert out["commands"] == [zpool.create_argv("hb_rec", layout, 12, {}, {})]
    assert runner.planned == [tuple(out["commands"][0])] and runner.executed == []


def test_ensure_pool_dry_run_reports_zfs_refusal_as_command_error():
    check = zpool.create_argv("hb_rec", FULL, 12, {}, {}, dry_run=True)
    runner = ScriptedRunner([step(LIST_ARGV, "list_missing.txt", 1, "list_missing.txt.stderr"),
                             step(check, "create_n_full.txt", 1, "create_n_full.txt.stderr")], dry_run=True)
    with pytest.raises(CommandError, match="mismatched replication level: mirror contains both files and devices"):
        zpool.ensure_pool(runner, name="hb_rec", layout=FULL, disks=ALL_DISKS)


def _existing(status="status_full.txt", managed="get_root_managed.txt"):
    return [step(LIST_ARGV, "list_full.txt"), step(STATUS_ARGV, status),
            {"command": MANAGED_ARGV, "stdout": data("zfs", managed)}, step(GET_ARGV, "get_all_full.txt")]


def test_ensure_pool_second_run_is_unchanged():
    runner = ScriptedRunner(_existing())
    out = zpool.ensure_pool(runner, name="hb_rec", layout=FULL, disks=ALL_DISKS, properties={"autotrim": True,
                                                                                            "ashift": 12})
    runner.assert_done()
    assert not out["changed"] and out["commands"] == [] and out["before"] == out["after"]


def test_ensure_pool_adds_the_missing_cache_and_sets_a_property():
    add = ["zpool", "add", "-o", "ashift=12", "hb_rec", "cache", F_CACHE]
    runner = ScriptedRunner(_existing("status_nocache.txt") + [
        step(add, "add_cache.txt"),
        step(["zpool", "set", "autotrim=off", "hb_rec"]),
        step(STATUS_ARGV, "status_full.txt")])
    out = zpool.ensure_pool(runner, name="hb_rec", layout=FULL, disks=ALL_DISKS, properties={"autotrim": "off"})
    runner.assert_done()
    assert out["changed"] and not out["created"]
    assert out["added"] == [{"role": "cache", "type": "disk", "disks": [F_CACHE]}]
    assert out["commands"] == [add, ["zpool", "set", "autotrim=off", "hb_rec"]]
    assert out["properties_changed"] == {"autotrim": {"before": "on", "after": "off"}}
    assert [v["role"] for v in out["before"]["vdevs"]] == ["data", "special", "log", "spare"]
    assert [v["role"] for v in out["after"]["vdevs"]] == ["data", "special", "log", "cache", "spare"]


def test_ensure_pool_dry_run_add_uses_zpool_add_n():
    check = ["zpool", "add", "-n", "-o", "ashift=12", "hb_rec", "cache", F_CACHE]
    runner = ScriptedRunner(_existing("status_nocache.txt") + [step(check, "add_n_cache.txt")], dry_run=True)
    out = zpool.ensure_pool(runner, name="hb_rec", layout=FULL, disks=ALL_DISKS)
    runner.assert_done()
    assert out["changed"] and out["prepared"].startswith("would update 'hb_rec' to the following configuration:")
    assert runner.executed == [] and runner.planned == [tuple(check[:2] + check[3:])]
    assert [v["role"] for v in out["after"]["vdevs"]] == ["data", "special", "log", "spare", "cache"]


def test_ensure_pool_degraded_pool_is_reported():
    runner = ScriptedRunner(_existing("status_degraded.txt"))
    out = zpool.ensure_pool(runner, name="hb_rec", layout=FULL, disks=ALL_DISKS)
    assert not out["changed"] and out["health"] == "DEGRADED"
    assert out["warnings"] == [f"pool hb_rec is DEGRADED: raidz1-0 DEGRADED, {H4} OFFLINE"]


def test_ensure_pool_refuses_conflicting_layout_before_any_change():
    runner = ScriptedRunner(_existing()[:3])
    declared = PoolLayout(vdevs=[Vdev("data", "mirror", [H2, H3]), Vdev("data", "disk", [H4])])
    with pytest.raises(UserError, match="does not match the declared layout"):
        zpool.ensure_pool(runner, name="hb_rec", layout=declared, disks=ALL_DISKS)
    assert runner.executed == []


def test_ensure_pool_unmanaged_pool_needs_adopt():
    # recorded on pool hb_unm (created without -O fabric:managed=true), renamed to hb_rec
    unmanaged = data("zfs", "get_root_unmanaged.txt").replace("hb_unm", "hb_rec")
    script = _existing("status_nocache.txt")
    script[2] = {"command": MANAGED_ARGV, "stdout": unmanaged}
    runner = ScriptedRunner(script)
    with pytest.raises(UnsafeOperation, match="not created by this project"):
        zpool.ensure_pool(runner, name="hb_rec", layout=FULL, disks=ALL_DISKS)
    assert runner.executed == []
    add = ["zpool", "add", "-o", "ashift=12", "hb_rec", "cache", F_CACHE]
    runner = ScriptedRunner(script + [step(["zfs", "set", "fabric:managed=true", "hb_rec"]), step(add),
                                      step(STATUS_ARGV, "status_full.txt")])
    out = zpool.ensure_pool(runner, name="hb_rec", layout=FULL, disks=ALL_DISKS, adopt=True)
    runner.assert_done()
    assert out["warnings"] == ["adopted pool hb_rec: set fabric:managed=true"]


def test_ensure_pool_refuses_disk_in_use_and_wipes_only_with_safe_mode_off():
    layout = PoolLayout(vdevs=[Vdev("data", "mirror", [S0, S1])])
    used = [disk(S0), disk(S1, "filesystem ext4", "partition table gpt")]
    missing = step(LIST_ARGV, "list_missing.txt", 1, "list_missing.txt.stderr")
    for kwargs in ({}, {"wipe": [S1]}, {"safe_mode": False}):
        runner = ScriptedRunner([missing])
        with pytest.raises(UnsafeOperation, match=r"ata-LAB_SSD_960GB_SSD1001 is in use \(filesystem ext4; "):
            zpool.ensure_pool(runner, name="hb_rec", layout=layout, disks=used, **kwargs)
        assert runner.executed == []
    create = zpool.create_argv("hb_rec", layout)
    runner = ScriptedRunner([missing, step(["zpool", "labelclear", "-f", S1], rc=1),
                             step(["wipefs", "-a", S1]), step(create), step(STATUS_ARGV, "status_mirrors.txt")])
    out = zpool.ensure_pool(runner, name="hb_rec", layout=layout, disks=used, wipe=[S1], safe_mode=False)
    runner.assert_done()
    assert out["commands"][:2] == [["zpool", "labelclear", "-f", S1], ["wipefs", "-a", S1]]
    assert out["warnings"] == [f"wiped {S1} (filesystem ext4; partition table gpt)"]


def test_ensure_pool_never_wipes_a_disk_in_active_use():
    layout = PoolLayout(vdevs=[Vdev("data", "disk", [S1])])
    used = [disk(S1, "ZFS pool member of pool 'other' (zfs_member signature)", "part of imported pool 'other'")]
    runner = ScriptedRunner([step(LIST_ARGV, "list_missing.txt", 1, "list_missing.txt.stderr")])
    with pytest.raises(UnsafeOperation, match="in active use \\(part of imported pool 'other'\\)"):
        zpool.ensure_pool(runner, name="hb_rec", layout=layout, disks=used, wipe=[S1], safe_mode=False)


def test_ensure_pool_finds_disks_by_any_alias():
    alias = D + "nvme-QEMU_NVMe_Ctrl_NVME1000_1"
    disks = [DiskInfo(name="nvme0n1", by_id=N0, ids=[N0, alias])]
    layout = PoolLayout(vdevs=[Vdev("data", "disk", [alias])])
    create = zpool.create_argv("hb_rec", layout)
    runner = ScriptedRunner([step(LIST_ARGV, "list_missing.txt", 1, "list_missing.txt.stderr"), step(create),
                             {"command": STATUS_ARGV, "stdout": data("zpool", "status_single.txt")}])
    out = zpool.ensure_pool(runner, name="hb_rec", layout=layout, disks=disks)
    assert out["commands"] == [create] and create[-1] == alias  # the declared spelling is used


def test_ensure_pool_input_errors_before_any_command():
    runner = ScriptedRunner([])
    with pytest.raises(InvalidName):
        zpool.ensure_pool(runner, name="mirror1", layout=FULL, disks=ALL_DISKS)
    with pytest.raises(NotFound, match="declared disk /dev/disk/by-id/ata-NOPE was not found"):
        zpool.ensure_pool(runner, name="hb_rec", layout=PoolLayout(vdevs=[Vdev("data", "disk", [D + "ata-NOPE"])]),
                          disks=ALL_DISKS)
    with pytest.raises(UserError, match="ashift"):
        zpool.ensure_pool(runner, name="hb_rec", layout=FULL, disks=ALL_DISKS, ashift=20)
    assert runner.calls == []


def test_create_and_add_force_only_when_the_plan_accepted_a_redundancy_mismatch():
    from fabric_core.model import PoolLayout, Vdev
    vdevs = [Vdev("data", "mirror", ["/dev/disk/by-id/a", "/dev/disk/by-id/b"]),
             Vdev("special", "disk", ["/dev/disk/by-id/n"])]
    assert "-f" not in zpool.create_argv("tank", PoolLayout(vdevs=vdevs))
    forced = zpool.create_argv("tank", PoolLayout(vdevs=vdevs, force=True), dry_run=True)
    assert forced[:4] == ["zpool", "create", "-n", "-f"]
    assert zpool.add_argv("tank", vdevs[1:], force=True)[:3] == ["zpool", "add", "-f"]
    assert "-f" not in zpool.add_argv("tank", vdevs[1:])
