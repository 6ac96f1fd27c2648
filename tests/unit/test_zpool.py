"""fabric_core.storage.zpool on recorded OpenZFS 2.3.9 output (tests/unit/data/zfs23/, commands in its commands.tsv; the
runs that also read the root dataset with `zfs get -j -p` use the second session, zfs23b/, whose *_s.json files
are that read without --json-int, with the pool reads of the same session).

z23_rec is a pool on files (raidz1 r1-r3, special mirror nvme1/nvme2, log mirror log1/log2, cache, spare)
recorded full, without its cache, degraded, with the spare standing in, scrubbed and re-imported; z23_mir
two mirrors, z23_one one file, z23_unm a pool without fabric:managed; tank the lab's pool on disks by-id.
Where the lab did not record a situation, support.derive_json edits a recording, as each test says.
"""

from __future__ import annotations

import json
import shlex

import pytest
from support import DATA, ScriptedRunner, data, derive_json  # (support puts module_utils on sys.path)

# isort: split
from fabric_core.base.errors import CommandError, FabricError, InvalidName, NotFound, UnsafeOperation, UserError
from fabric_core.base.model import DiskInfo, PoolLayout, Step, Vdev, apply_steps
from fabric_core.storage import disks, zjson, zpool

J = ["-j", "--json-int"]
POOL = "z23_rec"
T = "/var/tmp/z23_"
R1, R2, R3 = (T + f"r{i}.img" for i in (1, 2, 3))
NV1, NV2, LOG1, LOG2 = T + "nvme1.img", T + "nvme2.img", T + "log1.img", T + "log2.img"
CACHE, SPARE = T + "cache.img", T + "spare.img"
M1, M2, M3, M4 = (T + f"m{i}.img" for i in (1, 2, 3, 4))

FULL = PoolLayout(vdevs=[Vdev("data", "raidz1", [R1, R2, R3]), Vdev("special", "mirror", [NV1, NV2]),
                         Vdev("log", "mirror", [LOG1, LOG2]), Vdev("cache", "disk", [CACHE]),
                         Vdev("spare", "disk", [SPARE])])
LIST_ARGV = ["zpool", "list", *J, POOL]
STATUS_ARGV = ["zpool", "status", *J, "-P", POOL]
GET_ARGV = ["zpool", "get", *J, "all", POOL]
MANAGED_ARGV = ["zfs", "get", "-j", "-p", "fabric:managed", POOL]  # zfs is read without --json-int

# tank, as playbooks/site.yml built it on the trixie lab: whole disks by-id (ZFS shows their -part1)
D = "/dev/disk/by-id/"
HDD = [D + f"ata-LAB_HDD_8TB_7200_HDD100{i}" for i in range(6)]
NVME = [D + f"nvme-QEMU_NVMe_Ctrl_NVME100{i}" for i in range(4)]
SSD = [D + "ata-LAB_SSD_960GB_SSD1000", D + "ata-LAB_SSD_960GB_SSD1001"]
TANK = PoolLayout(vdevs=[Vdev("data", "raidz2", HDD), Vdev("special", "mirror", NVME[:3]), Vdev("log", "mirror", SSD),
                         Vdev("cache", "disk", [NVME[3]])])


def disk(path: str, *reasons: str, name: str = "") -> DiskInfo:
    return DiskInfo(name=name or path.rsplit("/", 1)[-1], by_id=path, ids=[path], in_use=bool(reasons),
                    reasons=list(reasons))


ALL_DISKS = [disk(p) for p in (R1, R2, R3, NV1, NV2, LOG1, LOG2, CACHE, SPARE)]


def tank_disks() -> list[DiskInfo]:
    """The disks discovery found on the node with tank (recorded: data/disks/tank-zfs23), tank's own members
    counted free as fabric_zpool counts them (disks.free_for_pool)."""
    found = [DiskInfo.from_dict(d) for d in json.loads((DATA / "disks" / "tank-zfs23" / "discover.json").read_text())]
    return disks.free_for_pool(found, "tank")


def step(argv, file=None, rc=0, stderr_file=None, session="zfs23"):
    return {"command": argv, "rc": rc, "stdout": data(session, file) if file else "",
            "stderr": data(session, stderr_file) if stderr_file else ""}


def bstep(argv, file=None, rc=0, stderr_file=None):
    """A step answered from the second session's recordings (zfs23b/)."""
    return step(argv, file, rc, stderr_file, session="zfs23b")


# `zpool list -j --json-int z23_nonexistent`: exit 1, nothing on stdout, "cannot open ...: no such pool"
MISSING = step(LIST_ARGV, rc=1, stderr_file="list_missing.stderr")


def recorded_command(file: str) -> list[str]:
    """The argv that made a recorded file (zfs23/commands.tsv)."""
    for line in data("zfs23", "commands.tsv").splitlines():
        name, _rc, command = line.split("\t")
        if name == file:
            return shlex.split(command)
    raise KeyError(file)


def layout_of(file: str, pool: str | None = None) -> list[dict]:
    return [v.to_dict() for v in zpool.parse_status(data("zfs23", file), pool).vdevs]


# ---------------------------------------------------------------- reading status, list, get


def test_parse_status_full_layout_of_every_class():
    assert layout_of("status_full.json") == FULL.to_dict()["vdevs"]


def test_parse_status_maps_part1_of_whole_disks_back_to_the_disk():
    assert layout_of("tank_status.json") == TANK.to_dict()["vdevs"]
    assert layout_of("tank_status.json", "tank") == TANK.to_dict()["vdevs"]


def test_parse_status_without_cache_and_with_two_mirrors_and_single_disk():
    assert [v["role"] for v in layout_of("status_nocache.json")] == ["data", "special", "log", "spare"]
    assert layout_of("status_mirrors.json") == [{"role": "data", "type": "mirror", "disks": [M1, M2]},
                                                {"role": "data", "type": "mirror", "disks": [M3, M4]}]
    assert layout_of("status_single.json") == [{"role": "data", "type": "disk", "disks": [T + "s1.img"]}]


@pytest.mark.parametrize("name", ["status_degraded.json", "status_spare_inuse.json", "status_cksum.json",
                                  "status_reimported.json"])
def test_degraded_spare_in_use_scrubbed_and_reimported_keep_the_declared_layout(name):
    assert layout_of(name) == FULL.to_dict()["vdevs"]


def test_parse_status_picks_the_named_pool_of_several():
    assert layout_of("status_all.json", "z23_mir") == layout_of("status_mirrors.json")
    with pytest.raises(UserError, match="holds 4 pools") as err:
        zpool.parse_status(data("zfs23", "status_all.json"))
    assert err.value.fix
    with pytest.raises(UserError, match="pool tank is not in") as err:
        zpool.parse_status(data("zfs23", "status_full.json"), "tank")
    assert err.value.fix


def test_parse_status_refuses_what_is_not_json():
    # a missing pool prints nothing on stdout (recorded: status_missing.json is empty)
    with pytest.raises(FabricError, match="did not print JSON") as err:
        zpool.parse_status(data("zfs23", "status_missing.json"))
    assert "OpenZFS 2.3" in err.value.fix
    with pytest.raises(FabricError, match="did not print JSON"):
        zpool.parse_status(data("zfs23", "tank_status.txt"))


def test_health_of_degraded_pool_names_the_offline_disk():
    health = zpool.parse_health(data("zfs23", "status_degraded.json"))
    assert health.name == POOL and health.state == "DEGRADED"
    assert health.status.startswith("One or more devices has been taken offline")
    assert health.status.endswith("continue functioning in a degraded state.")  # lines joined
    assert health.action == "Online the device using 'zpool online' or replace the device with 'zpool replace'."
    bad = [(d.path or d.name, d.state, d.role, d.vdev) for d in health.unhealthy()]
    assert bad == [(POOL, "DEGRADED", "pool", ""), ("raidz1-0", "DEGRADED", "data", "raidz1-0"),
                   (R3, "OFFLINE", "data", "raidz1-0")]


def test_health_with_spare_in_use():
    health = zpool.parse_health(data("zfs23", "status_spare_inuse.json"))
    spare = [d for d in health.devices if d.role == "spare"]
    assert [(d.path, d.state, d.aux) for d in spare] == [(SPARE, "INUSE", "SPARED")]
    standing_in = [d for d in health.devices if d.vdev == "raidz1-0" and d.path == SPARE]
    assert [(d.state, d.depth) for d in standing_in] == [("ONLINE", 3)]
    assert [(d.name, d.state) for d in health.devices if d.depth == 2 and d.vdev == "raidz1-0"][-1] == \
        ("spare-2", "DEGRADED")
    assert health.scan == "resilver finished, 0 errors"


def test_health_of_online_pool_has_counters():
    health = zpool.parse_health(data("zfs23", "status_full.json"))
    assert health.state == "ONLINE" and health.unhealthy() == [] and health.error_count == 0
    assert health.status == "" and health.scan == ""
    leaf = next(d for d in health.devices if d.path == R1)
    assert (leaf.read, leaf.write, leaf.cksum, leaf.role, leaf.depth) == (0, 0, 0, "data", 2)
    assert [d.role for d in health.devices if d.depth == 1] == ["data", "special", "log", "cache", "spare"]
    assert zpool.parse_health(data("zfs23", "status_cksum.json")).scan == "scrub finished, 0 errors"
    assert zpool.parse_health(data("zfs23", "tank_status.json")).to_dict()["devices"][0] == {
        "name": "tank", "path": "", "state": "ONLINE", "role": "pool", "vdev": "", "read": 0, "write": 0,
        "cksum": 0, "aux": "", "depth": 0}


def _r3_not_present(doc: dict) -> None:
    """r3 of the recorded degraded z23_rec edited into a device the pool misses, as OpenZFS 2.3.9 prints one
    (zpool_main.c, vdev_stats_nvlist): named by its GUID, UNAVAIL, "not_present": 1 and "was": its path."""
    raidz = doc["pools"][POOL]["vdevs"][POOL]["vdevs"]["raidz1-0"]["vdevs"]
    r3 = raidz.pop(R3)
    guid = str(r3["guid"])
    r3.update(name=guid, state="UNAVAIL", not_present=1, was=R3)
    del r3["path"]
    raidz[guid] = r3


def test_a_missing_device_named_by_its_guid_maps_to_its_former_path():
    # derived: the lab recorded an offline device, not a missing one (see _r3_not_present)
    text = derive_json("zfs23/status_degraded.json", edit=_r3_not_present)
    health = zpool.parse_health(text)
    unavailable = [(d.name.isdigit(), d.path, d.state) for d in health.devices if d.state == "UNAVAIL"]
    assert unavailable == [(True, R3, "UNAVAIL")]
    assert zpool.parse_status(text).vdevs[0].disks == [R1, R2, R3]


def test_parse_list_and_props():
    assert zpool.parse_list(data("zfs23", "list_full.json")) == [
        {"name": POOL, "size": 4966055936, "alloc": 589824, "free": 4965466112, "cap": 0, "health": "ONLINE"}]
    assert zpool.parse_list(data("zfs23", "list_degraded.json"))[0]["health"] == "DEGRADED"
    assert [p["name"] for p in zpool.parse_list(data("zfs23", "list_all.json"))] == [
        "tank", "z23_mir", "z23_one", POOL, "z23_unm"]
    props = zpool.parse_props(data("zfs23", "get_all_full.json"))
    assert props["ashift"] == ("12", "local") and props["autotrim"] == ("on", "local")
    assert props["health"] == ("ONLINE", "-") and props["altroot"] == ("-", "default") and props["size"][0].isdigit()


def test_the_json_reads_as_the_text_the_same_pool_printed():
    # recorded in the same state: the text and the JSON form of the same listing; the JSON is read back
    # to exactly what `zpool get -H -p`/`zpool list -H -p` printed (values, sources, numbers)
    text = {}
    for line in data("zfs23", "get_all_full.txt").splitlines():
        prop, value, source = line.split("\t")
        text[prop] = (value, source)
    assert zpool.parse_props(data("zfs23", "get_all_full.json")) == text
    name, size, alloc, free, health = data("zfs23", "list_full.txt").split()
    assert zpool.parse_list(data("zfs23", "list_full.json")) == [
        {"name": name, "size": int(size), "alloc": int(alloc), "free": int(free), "cap": 0, "health": health}]


# ---------------------------------------------------------------- reading through a runner


def test_pool_exists_and_a_missing_pool():
    assert zpool.pool_exists(ScriptedRunner([step(LIST_ARGV, "list_full.json")]), POOL)["size"] == 4966055936
    assert zpool.pool_exists(ScriptedRunner([MISSING]), POOL) is None


def test_reading_a_missing_pool_is_not_found_with_a_fix():
    # recorded: `zpool status -j --json-int -P z23_nonexistent`, exit 1 and "no such pool"
    runner = ScriptedRunner([step(["zpool", "status", *J, "-P", "z23_nonexistent"], "status_missing.json", 1,
                                  "status_missing.stderr")])
    with pytest.raises(NotFound, match="pool z23_nonexistent does not exist") as err:
        zpool.get_layout(runner, "z23_nonexistent")
    assert "fix: check the name with `zpool list`" in str(err.value)
    runner = ScriptedRunner([step(["zpool", "get", *J, "all", "z23_nonexistent"], rc=1,
                                  stderr_file="list_missing.stderr")])
    with pytest.raises(NotFound, match="does not exist"):
        zpool.get_props(runner, "z23_nonexistent")


def test_a_zpool_without_json_is_refused_with_the_upgrade():
    # a zpool older than 2.3 rejects -j as 2.3's `zfs holds -j` does (recorded: holds.stderr, exit 2)
    runner = ScriptedRunner([step(LIST_ARGV, rc=2, stderr_file="holds.stderr")])
    with pytest.raises(zjson.ZfsWithoutJson) as err:
        zpool.pool_exists(runner, POOL)
    assert "prints no JSON" in err.value.problem and "OpenZFS 2.3" in err.value.fix


def test_another_failure_is_a_command_error():
    runner = ScriptedRunner([step(STATUS_ARGV, rc=1, stderr_file="holds.stderr")])
    runner.script[0]["stderr"] = "internal error: out of memory\n"
    with pytest.raises(CommandError, match="out of memory"):
        zpool.get_layout(runner, POOL)


def test_get_layout_maps_aliases_to_the_preferred_path():
    alias = D + "nvme-QEMU_NVMe_Ctrl_NVME1000_1"
    runner = ScriptedRunner([step(["zpool", "status", *J, "-P", "tank"], "tank_status.json")])
    layout, health = zpool.get_layout(runner, "tank", {NVME[0]: alias})
    assert layout.vdevs[1].disks == [alias, NVME[1], NVME[2]] and health.state == "ONLINE"


# ---------------------------------------------------------------- command lines


def test_create_argv_is_the_recorded_command():
    # record.sh created z23_rec with -f: a plan that accepted mismatched redundancy (layout.force)
    forced = PoolLayout(vdevs=FULL.vdevs, force=True)
    argv = zpool.create_argv(POOL, forced, 12, {"autotrim": True}, {"compression": "lz4", "atime": False})
    assert argv == recorded_command("create_full.txt")
    assert zpool.create_argv(POOL, FULL, 12, {}, {}, check_only=True) == [
        "zpool", "create", "-n", "-o", "ashift=12", "-O", "fabric:managed=true", POOL, "raidz1", R1, R2, R3,
        "special", "mirror", NV1, NV2, "log", "mirror", LOG1, LOG2, "cache", CACHE, "spare", SPARE]
    mirrors = PoolLayout(vdevs=[Vdev("data", "mirror", [M1, M2]), Vdev("data", "mirror", [M3, M4])])
    assert zpool.create_argv("z23_mir", mirrors, 12) == recorded_command("create_mirrors.txt")


def test_add_argv():
    check = zpool.add_argv(POOL, [Vdev("cache", "disk", [CACHE])], check_only=True)
    assert check == recorded_command("add_n_cache.txt")
    assert zpool.add_argv(POOL, [Vdev("cache", "disk", [CACHE])]) == recorded_command("add_cache.txt")
    assert zpool.add_argv("t", [Vdev("spare", "disk", [SSD[1]]), Vdev("special", "mirror", [NVME[0], SSD[0]]),
                                Vdev("log", "mirror", [HDD[2], HDD[3]])], ashift=12) == \
        ["zpool", "add", "-o", "ashift=12", "t", "special", "mirror", NVME[0], SSD[0], "log", "mirror", HDD[2], HDD[3],
         "spare", SSD[1]]


@pytest.mark.parametrize("vdevs, words", [
    ([], "no vdevs"),
    ([{"role": "cache", "type": "disk", "disks": [SSD[0]]}], "no data vdev"),
    ([{"role": "data", "type": "raidz9", "disks": [SSD[0]]}], "unknown type"),
    ([{"role": "meta", "type": "disk", "disks": [SSD[0]]}], "unknown role"),
    ([{"role": "data", "type": "raidz2", "disks": [HDD[2], HDD[3]]}], "needs at least 3"),
    ([{"role": "data", "type": "mirror", "disks": [HDD[2], HDD[3]]},
      {"role": "log", "type": "disk", "disks": [HDD[3]]}], "declared twice"),
    ([{"role": "data", "type": "disk", "disks": [HDD[2], HDD[3]]}], "exactly one disk"),
    ([{"role": "data", "type": "disk", "disks": ["sda"]}], "not an absolute device path"),
    ([{"role": "data", "type": "disk", "disks": [HDD[2]]}, {"role": "cache", "type": "mirror", "disks": SSD}],
     "cannot be grouped"),
])
def test_validate_layout_refuses(vdevs, words):
    with pytest.raises(UserError, match=words):
        zpool.validate_layout(PoolLayout.from_dict({"vdevs": vdevs}))


# ---------------------------------------------------------------- diff


def live(file: str, pool: str | None = None) -> PoolLayout:
    return zpool.parse_status(data("zfs23", file), pool)


def test_diff_layout_identical_and_missing_cache():
    assert zpool.diff_layout(FULL, live("status_full.json")) == ([], [])
    assert zpool.diff_layout(TANK, live("tank_status.json")) == ([], [])
    to_add, conflicts = zpool.diff_layout(FULL, live("status_nocache.json"))
    assert [v.to_dict() for v in to_add] == [{"role": "cache", "type": "disk", "disks": [CACHE]}]
    assert conflicts == []


def test_diff_layout_accepts_declared_part1_and_reordered_members():
    declared = PoolLayout(vdevs=[Vdev("data", "raidz2", [HDD[5] + "-part1", *HDD[:5]])] + TANK.vdevs[1:])
    assert zpool.diff_layout(declared, live("tank_status.json")) == ([], [])


def test_diff_layout_data_growth_needs_allow_grow_and_same_type():
    mirrors = live("status_mirrors.json")
    declared = PoolLayout(vdevs=mirrors.vdevs + [Vdev("data", "mirror", ["/var/tmp/x1", "/var/tmp/x2"])])
    to_add, conflicts = zpool.diff_layout(declared, mirrors)
    assert to_add == [] and len(conflicts) == 1 and "allow_grow" in conflicts[0]
    to_add, conflicts = zpool.diff_layout(declared, mirrors, allow_grow=True)
    assert [v.to_dict() for v in to_add] == [
        {"role": "data", "type": "mirror", "disks": ["/var/tmp/x1", "/var/tmp/x2"]}]
    assert conflicts == []
    raidz = Vdev("data", "raidz1", ["/var/tmp/x1", "/var/tmp/x2", "/var/tmp/x3"])
    to_add, conflicts = zpool.diff_layout(PoolLayout(vdevs=mirrors.vdevs + [raidz]), mirrors, allow_grow=True)
    assert to_add == [] and "mixing types is refused" in conflicts[0]


def test_diff_layout_conflicts_partly_elsewhere_and_undeclared():
    # declared: log as a mirror of log1 and a new disk (log1 is in live mirror-2); cache and spare not declared
    declared = PoolLayout(vdevs=[FULL.vdevs[0], FULL.vdevs[1], Vdev("log", "mirror", [LOG1, "/var/tmp/new"])])
    to_add, conflicts = zpool.diff_layout(declared, live("status_full.json"))
    assert to_add == []
    assert len(conflicts) == 3
    assert conflicts[0] == (f"declared log mirror [/var/tmp/new, {LOG1}] does not match the pool: {LOG1} is in live "
                            f"log mirror [{LOG1}, {LOG2}]")
    assert f"live cache disk [{CACHE}] is not declared; vdevs are never removed, declare it" in conflicts
    assert f"live spare disk [{SPARE}] is not declared; vdevs are never removed, declare it" in conflicts


def test_diff_layout_special_log_cache_roles_of_tank():
    # tank's NVMe: three in the special mirror, one as cache; declaring the cache one as special conflicts
    declared = PoolLayout(vdevs=[TANK.vdevs[0], Vdev("special", "mirror", NVME[1:]), TANK.vdevs[2]])
    to_add, conflicts = zpool.diff_layout(declared, live("tank_status.json"))
    assert to_add == [] and len(conflicts) == 1
    assert conflicts[0] == (f"declared special mirror [{NVME[1]}, {NVME[2]}, {NVME[3]}] does not match the pool: "
                            f"{NVME[1]}, {NVME[2]}, {NVME[3]} are in live cache disk [{NVME[3]}]; "
                            f"special mirror [{NVME[0]}, {NVME[1]}, {NVME[2]}]")


# ---------------------------------------------------------------- ensure_pool with scripted commands


def test_ensure_pool_creates_when_missing():
    forced = PoolLayout(vdevs=FULL.vdevs, force=True)
    argv = zpool.create_argv(POOL, forced, 12, {"autotrim": "on"}, {"compression": "lz4", "atime": "off"})
    runner = ScriptedRunner([MISSING, step(argv, "create_full.txt"), step(STATUS_ARGV, "status_full.json")])
    out = zpool.ensure_pool(runner, name=POOL, layout=forced, disks=ALL_DISKS, properties={"autotrim": "on"},
                            fs_properties={"compression": "lz4", "atime": "off"})
    runner.assert_done()
    assert out["changed"] and out["created"] and out["commands"] == [argv]
    assert out["before"] == {"pool": POOL, "exists": False, "vdevs": []}
    assert out["after"]["vdevs"] == FULL.to_dict()["vdevs"] and out["health"] == "ONLINE"


def test_a_create_that_found_a_disks_link_gone_runs_once_more_after_udev_settled_and_only_then():
    """The kernel retries a vdev's missing link for 1 s (zfs_vdev_open_timeout_ms); udev remakes the links after zpool
    partitions a disk, slower than that on a busy node: `zpool create` then fails with ENOENT, nothing created. It
    runs once more after `udevadm settle`, says so in a warning; a second failure, or any other, is the error."""
    forced = PoolLayout(vdevs=FULL.vdevs, force=True)
    argv = zpool.create_argv(POOL, forced, 12, {"autotrim": "on"}, {})
    gone = {"command": argv, "rc": 1, "stderr": f"cannot create '{POOL}': no such pool or dataset\n"}
    settle = {"command": ["udevadm", "settle", "--timeout=120"]}
    runner = ScriptedRunner([MISSING, gone, settle, step(argv, "create_full.txt"),
                             step(STATUS_ARGV, "status_full.json")])
    out = zpool.ensure_pool(runner, name=POOL, layout=forced, disks=ALL_DISKS, properties={"autotrim": "on"})
    runner.assert_done()
    assert out["created"] and out["commands"] == [argv] and out["health"] == "ONLINE"
    assert any("link gone" in w and "no such pool or dataset" in w for w in out["warnings"])
    twice = ScriptedRunner([MISSING, gone, settle, gone])
    with pytest.raises(CommandError, match="no such pool or dataset"):
        zpool.ensure_pool(twice, name=POOL, layout=forced, disks=ALL_DISKS, properties={"autotrim": "on"})
    twice.assert_done()
    other = ScriptedRunner([MISSING, {**gone, "stderr": "cannot create 'tank': pool already exists\n"}])
    with pytest.raises(CommandError, match="already exists"):
        zpool.ensure_pool(other, name=POOL, layout=forced, disks=ALL_DISKS, properties={"autotrim": "on"})
    other.assert_done()


def _existing(status="status_full.json", managed=None):
    # z23_rec of the second session (zfs23b/): its root's fabric:managed read with `zfs get -j -p`
    # (get_root_managed_s.json) beside the pool reads of the same session
    return [bstep(LIST_ARGV, "list_full.json"), bstep(STATUS_ARGV, status),
            {"command": MANAGED_ARGV, "stdout": managed or data("zfs23b", "get_root_managed_s.json")},
            bstep(GET_ARGV, "get_all_full.json")]


def test_ensure_pool_second_run_is_unchanged_and_runs_only_reads():
    runner = ScriptedRunner(_existing(), dry_run=True)
    out = zpool.ensure_pool(runner, name=POOL, layout=FULL, disks=ALL_DISKS, properties={"autotrim": True,
                                                                                        "ashift": 12})
    runner.assert_done()
    assert not out["changed"] and out["commands"] == [] and out["before"] == out["after"]
    assert runner.planned == [] and runner.executed == []


def test_ensure_pool_adds_the_missing_cache_and_sets_a_property():
    add = ["zpool", "add", "-o", "ashift=12", POOL, "cache", CACHE]
    runner = ScriptedRunner(_existing("status_nocache.json") + [
        bstep(add, "add_cache.txt"),
        bstep(["zpool", "set", "autotrim=off", POOL]),
        bstep(STATUS_ARGV, "status_full.json")])
    out = zpool.ensure_pool(runner, name=POOL, layout=FULL, disks=ALL_DISKS, properties={"autotrim": "off"})
    runner.assert_done()
    assert out["changed"] and not out["created"]
    assert out["added"] == [{"role": "cache", "type": "disk", "disks": [CACHE]}]
    assert out["commands"] == [add, ["zpool", "set", "autotrim=off", POOL]]
    assert out["properties_changed"] == {"autotrim": {"before": "on", "after": "off"}}
    assert [v["role"] for v in out["before"]["vdevs"]] == ["data", "special", "log", "spare"]
    assert [v["role"] for v in out["after"]["vdevs"]] == ["data", "special", "log", "cache", "spare"]


def test_ensure_pool_dry_run_add_uses_zpool_add_n_after_every_read():
    check = ["zpool", "add", "-n", "-o", "ashift=12", POOL, "cache", CACHE]
    runner = ScriptedRunner(_existing("status_nocache.json") + [bstep(check, "add_n_cache.txt")], dry_run=True)
    out = zpool.ensure_pool(runner, name=POOL, layout=FULL, disks=ALL_DISKS)
    runner.assert_done()
    assert out["changed"] and out["prepared"] == data("zfs23b", "add_n_cache.txt").strip()
    assert out["prepared"].startswith(f"would update '{POOL}' to the following configuration:")
    assert runner.executed == [] and runner.planned == [tuple(check[:2] + check[3:])]
    assert [v["role"] for v in out["after"]["vdevs"]] == ["data", "special", "log", "spare", "cache"]


def test_ensure_pool_degraded_pool_is_reported():
    runner = ScriptedRunner(_existing("status_degraded.json"))
    out = zpool.ensure_pool(runner, name=POOL, layout=FULL, disks=ALL_DISKS)
    assert not out["changed"] and out["health"] == "DEGRADED"
    assert out["warnings"] == [f"pool {POOL} is DEGRADED: raidz1-0 DEGRADED, {R3} OFFLINE"]
    runner = ScriptedRunner(_existing("status_spare_inuse.json"))
    out = zpool.ensure_pool(runner, name=POOL, layout=FULL, disks=ALL_DISKS)
    assert not out["changed"] and out["warnings"] == [
        f"pool {POOL} is DEGRADED: raidz1-0 DEGRADED, spare-2 DEGRADED, {R3} OFFLINE, {SPARE} INUSE"]


def test_ensure_pool_refuses_conflicting_layout_before_any_change():
    runner = ScriptedRunner(_existing()[:3])
    declared = PoolLayout(vdevs=[Vdev("data", "mirror", [R1, R2]), Vdev("data", "disk", [R3])])
    with pytest.raises(UserError, match="does not match the declared layout") as err:
        zpool.ensure_pool(runner, name=POOL, layout=declared, disks=ALL_DISKS)
    assert "fix: declare the pool as it is" in str(err.value)
    assert runner.executed == []


def test_ensure_pool_unmanaged_pool_needs_adopt():
    # recorded on pool z23_unm (created without -O fabric:managed=true), renamed to z23_rec
    unmanaged = derive_json("zfs23b/get_root_unmanaged_s.json", rename={"z23_unm": POOL})
    script = _existing("status_nocache.json", managed=unmanaged)
    runner = ScriptedRunner(script)
    with pytest.raises(UnsafeOperation, match="not created by this project") as err:
        zpool.ensure_pool(runner, name=POOL, layout=FULL, disks=ALL_DISKS)
    assert "fix: set adopt=true" in str(err.value)
    assert runner.executed == []
    add = ["zpool", "add", "-o", "ashift=12", POOL, "cache", CACHE]
    runner = ScriptedRunner(script + [bstep(["zfs", "set", "fabric:managed=true", POOL]), bstep(add),
                                      bstep(STATUS_ARGV, "status_full.json")])
    out = zpool.ensure_pool(runner, name=POOL, layout=FULL, disks=ALL_DISKS, adopt=True)
    runner.assert_done()
    assert out["warnings"] == [f"adopted pool {POOL}: set fabric:managed=true"]


def test_ensure_pool_refuses_disk_in_use_and_wipes_only_with_safe_mode_off():
    layout = PoolLayout(vdevs=[Vdev("data", "mirror", [M1, M2]), Vdev("data", "mirror", [M3, M4])])
    used = [disk(M1), disk(M2, "filesystem ext4", "partition table gpt"), disk(M3), disk(M4)]
    missing = step(["zpool", "list", *J, "z23_mir"], rc=1, stderr_file="list_missing.stderr")
    for kwargs in ({}, {"wipe": [M2]}, {"safe_mode": False}):
        runner = ScriptedRunner([missing])
        with pytest.raises(UnsafeOperation, match=r"z23_m2.img is in use \(filesystem ext4; ") as err:
            zpool.ensure_pool(runner, name="z23_mir", layout=layout, disks=used, **kwargs)
        assert "fix: " in str(err.value)
        assert runner.executed == []
    create = zpool.create_argv("z23_mir", layout)
    runner = ScriptedRunner([missing, step(["zpool", "labelclear", "-f", M2], rc=1), step(["wipefs", "-a", M2]),
                             step(create, "create_mirrors.txt"), step(["zpool", "status", *J, "-P", "z23_mir"],
                                                                      "status_mirrors.json")])
    out = zpool.ensure_pool(runner, name="z23_mir", layout=layout, disks=used, wipe=[M2], safe_mode=False)
    runner.assert_done()
    assert out["commands"][:2] == [["zpool", "labelclear", "-f", M2], ["wipefs", "-a", M2]]
    assert out["warnings"] == [f"wiped {M2} (filesystem ext4; partition table gpt)"]
    assert out["after"]["vdevs"] == layout.to_dict()["vdevs"]


def test_ensure_pool_never_wipes_a_disk_in_active_use():
    layout = PoolLayout(vdevs=[Vdev("data", "disk", [SSD[1]])])
    used = [disk(SSD[1], "ZFS pool member of pool 'other' (zfs_member signature)", "part of imported pool 'other'")]
    runner = ScriptedRunner([MISSING])
    with pytest.raises(UnsafeOperation, match="in active use \\(part of imported pool 'other'\\)") as err:
        zpool.ensure_pool(runner, name=POOL, layout=layout, disks=used, wipe=[SSD[1]], safe_mode=False)
    assert "fix: use another disk" in str(err.value)


def _tank_existing() -> list[dict]:
    # tank recorded by record.sh of the second session (zfs23b/): `zpool list/status/get -j` of tank; its root's
    # fabric:managed is not recorded: z23_rec's (get_root_managed_s.json, set by `zpool create -O
    # fabric:managed=true` as the zfs_pool role does for tank) renamed to tank
    managed = derive_json("zfs23b/get_root_managed_s.json", rename={POOL: "tank"})
    return [bstep(["zpool", "list", *J, "tank"], "tank_list.json"),
            bstep(["zpool", "status", *J, "-P", "tank"], "tank_status.json"),
            {"command": ["zfs", "get", "-j", "-p", "fabric:managed", "tank"], "stdout": managed},
            bstep(["zpool", "get", *J, "all", "tank"], "tank_get.json")]


def test_ensure_pool_second_run_on_tank_with_disks_by_any_alias():
    # the converged lab: tank's disks as discovery found them, one declared by another of its by-id names
    alias = D + "nvme-QEMU_NVMe_Ctrl_NVME1000_1"
    found = tank_disks()
    assert alias in next(d for d in found if d.by_id == NVME[0]).ids
    declared = PoolLayout(vdevs=[TANK.vdevs[0], Vdev("special", "mirror", [alias, *NVME[1:3]]), *TANK.vdevs[2:]])
    runner = ScriptedRunner(_tank_existing(), dry_run=True)
    out = zpool.ensure_pool(runner, name="tank", layout=declared, disks=found, properties={"autotrim": "on"})
    runner.assert_done()
    assert not out["changed"] and out["commands"] == [] and out["warnings"] == []
    assert out["before"]["vdevs"] == TANK.to_dict()["vdevs"] and out["health"] == "ONLINE"


def test_ensure_pool_creates_with_the_declared_spelling_of_a_disk():
    alias = D + "nvme-QEMU_NVMe_Ctrl_NVME1003_1"
    declared = PoolLayout(vdevs=[*TANK.vdevs[:3], Vdev("cache", "disk", [alias])])
    create = zpool.create_argv("tank", declared)
    # `zpool list -j --json-int tank` before tank existed was not recorded: the recorded missing-pool answer
    # (for z23_nonexistent) with the name replaced
    missing = {"command": ["zpool", "list", *J, "tank"], "rc": 1,
               "stderr": data("zfs23", "list_missing.stderr").replace("z23_nonexistent", "tank")}
    runner = ScriptedRunner([missing, step(create), step(["zpool", "status", *J, "-P", "tank"], "tank_status.json")])
    out = zpool.ensure_pool(runner, name="tank", layout=declared, disks=tank_disks())
    runner.assert_done()
    assert out["commands"] == [create] and create[-1] == alias  # the declared spelling is used
    assert out["after"]["vdevs"] == TANK.to_dict()["vdevs"]  # read back by the preferred path


def test_ensure_pool_input_errors_before_any_command():
    runner = ScriptedRunner([])
    with pytest.raises(InvalidName):
        zpool.ensure_pool(runner, name="mirror1", layout=FULL, disks=ALL_DISKS)
    with pytest.raises(NotFound, match="declared disk /dev/disk/by-id/ata-NOPE was not found") as err:
        zpool.ensure_pool(runner, name=POOL, layout=PoolLayout(vdevs=[Vdev("data", "disk", [D + "ata-NOPE"])]),
                          disks=ALL_DISKS)
    assert "fix: check the path under /dev/disk/by-id" in str(err.value)
    with pytest.raises(UserError, match="ashift"):
        zpool.ensure_pool(runner, name=POOL, layout=FULL, disks=ALL_DISKS, ashift=20)
    assert runner.calls == []


def test_a_pool_property_that_json_int_would_not_read_back_is_refused_before_any_command():
    # pools are read with `zpool get -j --json-int all`, which prints every all-digit value as a number; `zpool get
    # all` lists the string property comment and (OpenZFS 2.2 and later) pool user properties, so a declared 007
    # would read back as 7 and differ on every run (see zjson.py)
    runner = ScriptedRunner([])
    for key in ("comment", "org.example:rack"):
        with pytest.raises(UserError, match=f"pool property {key}=007: `zpool get -j --json-int` prints an all-digit "
                                            "value as a number, so it would read back as 7") as err:
            zpool.ensure_pool(runner, name=POOL, layout=FULL, disks=ALL_DISKS, properties={key: "007"})
        assert "write it as 7" in err.value.fix and "filesystem_properties" in err.value.fix
    assert runner.calls == []
    # values that read back as written pass
    zpool.check_json_int_safe({"comment": "7", "org.example:rack": "a07", "autotrim": True, "ashift": 12})


def test_create_and_add_force_only_when_the_plan_accepted_a_redundancy_mismatch():
    vdevs = [Vdev("data", "mirror", ["/dev/disk/by-id/a", "/dev/disk/by-id/b"]),
             Vdev("special", "disk", ["/dev/disk/by-id/n"])]
    assert "-f" not in zpool.create_argv("tank", PoolLayout(vdevs=vdevs))
    forced = zpool.create_argv("tank", PoolLayout(vdevs=vdevs, force=True), check_only=True)
    assert forced[:4] == ["zpool", "create", "-n", "-f"]
    assert zpool.add_argv("tank", vdevs[1:], force=True)[:3] == ["zpool", "add", "-f"]
    assert "-f" not in zpool.add_argv("tank", vdevs[1:])


# ---------------------------------------------------------------- dry runs of zpool create/add (text)
#
# `zpool create -n` and `zpool add -n` print text in 2.3 as well; ensure_pool shows it as `prepared` and never
# parses it. Recorded on 2.3 in the second session (zfs23b/commands-more.tsv): the dry run of z23x_rz, a raidz2 of
# the files a-d (x_create_n.txt), and ZFS refusing `zpool add -n z23x_rz /var/tmp/z23x_e.img` (x_add_n_mismatch).

X = "/var/tmp/z23x_"
XA, XB, XC, XD, XE = (X + f"{c}.img" for c in "abcde")
X_RAIDZ2 = PoolLayout(vdevs=[Vdev("data", "raidz2", [XA, XB, XC, XD])])
# derived: `zpool list` of z23x_rz before it existed was not recorded: the recorded missing-pool answer (for
# z23_nonexistent, zfs23b/list_missing.stderr) with the name replaced
X_MISSING = {"command": ["zpool", "list", *J, "z23x_rz"], "rc": 1,
             "stderr": data("zfs23b", "list_missing.stderr").replace("z23_nonexistent", "z23x_rz")}


def recorded_more(file: str) -> list[str]:
    """The argv that made a file of zfs23b/commands-more.tsv."""
    for line in data("zfs23b", "commands-more.tsv").splitlines():
        name, _rc, command = line.split("\t")
        if name == file:
            return shlex.split(command)
    raise KeyError(file)


def test_ensure_pool_dry_run_create_runs_zpool_create_n_only():
    check = zpool.create_argv("z23x_rz", X_RAIDZ2, 12, {}, {}, check_only=True)
    assert check == recorded_more("x_create_n.txt")
    runner = ScriptedRunner([X_MISSING, bstep(check, "x_create_n.txt")], dry_run=True)
    out = zpool.ensure_pool(runner, name="z23x_rz", layout=X_RAIDZ2, disks=[disk(p) for p in (XA, XB, XC, XD)])
    runner.assert_done()
    assert out["changed"] and out["created"]
    assert out["prepared"] == data("zfs23b", "x_create_n.txt").strip()
    assert out["prepared"].startswith("would create 'z23x_rz' with the following layout:")
    assert out["commands"] == [zpool.create_argv("z23x_rz", X_RAIDZ2, 12, {}, {})]
    assert runner.planned == [tuple(out["commands"][0])] and runner.executed == []


def test_a_dry_run_refused_by_zfs_is_a_command_error_unless_a_wipe_comes_first():
    # the applier runs a step's dry-run validation in a dry run; the recorded refusal of `zpool add -n` (exit 1)
    # fails the run, or is a warning when the plan wipes disks first (ZFS saw their old signatures)
    add = zpool.add_argv("z23x_rz", [Vdev("data", "disk", [XE])])
    check = zpool.add_argv("z23x_rz", [Vdev("data", "disk", [XE])], check_only=True)
    assert check == recorded_more("x_add_n_mismatch.txt")
    refused = {"command": check, "rc": 1, "stdout": data("zfs23b", "x_add_n_mismatch.txt"),
               "stderr": data("zfs23b", "x_add_n_mismatch.stderr")}
    runner = ScriptedRunner([refused], dry_run=True)
    with pytest.raises(CommandError, match="mismatched replication level: pool uses raidz and new vdev is file"):
        apply_steps(runner, [Step("add", add, dry_run_argv=check)])
    assert runner.planned == []
    runner = ScriptedRunner([refused], dry_run=True)
    done = apply_steps(runner, [Step("add", add, dry_run_argv=check, dry_run_strict=False,
                                     dry_run_refusal="`zpool add -n` refused the plan before the wipe: ")])
    runner.assert_done()
    assert done.commands == [add] and runner.planned == [tuple(add)]
    assert done.warnings == ["`zpool add -n` refused the plan before the wipe: invalid vdev specification\nuse '-f' to "
                             "override the following errors:\nmismatched replication level: pool uses raidz and new "
                             "vdev is file"]


# ---------------------------------------------------------------- raidz expansion through ensure_pool
#
# z23x_rz of the second session (zfs23b/commands-more.tsv): a raidz2 of the files a-d grown by e.

X_GROWN = PoolLayout(vdevs=[Vdev("data", "raidz2", [XA, XB, XC, XD, XE])])
X_DISKS = [disk(p) for p in (XA, XB, XC, XD, XE)]


def _x_existing() -> list[dict]:
    # derived: `zpool list -j --json-int z23x_rz` was recorded only with -v -P, after the expansion
    # (x_list_expanded.json): that listing without its vdev tree, which -v adds (the core reads only the name).
    # The root's fabric:managed was read only with `zfs get -j -p all z23x_rz`: z23_rec's one-property answer
    # (get_root_managed_s.json), renamed
    listed = derive_json("zfs23b/x_list_expanded.json", remove=[["pools", "z23x_rz", "vdevs"]])
    managed = derive_json("zfs23b/get_root_managed_s.json", rename={POOL: "z23x_rz"})
    return [{"command": ["zpool", "list", *J, "z23x_rz"], "stdout": listed},
            bstep(["zpool", "status", *J, "-P", "z23x_rz"], "x_status_before.json"),
            {"command": ["zfs", "get", "-j", "-p", "fabric:managed", "z23x_rz"], "stdout": managed},
            bstep(["zpool", "get", *J, "all", "z23x_rz"], "x_get_features.json")]


def test_ensure_pool_expands_a_raidz_vdev_one_disk_at_a_time_and_reads_it_back():
    attach = ["zpool", "attach", "z23x_rz", "raidz2-0", XE]
    wait = ["zpool", "wait", "-t", "raidz_expand", "z23x_rz"]
    runner = ScriptedRunner(_x_existing() + [bstep(attach, "x_attach.txt"), bstep(wait, "x_wait.txt"),
                                             bstep(["zpool", "status", *J, "-P", "z23x_rz"], "x_status_expanded.json")])
    out = zpool.ensure_pool(runner, name="z23x_rz", layout=X_GROWN, disks=X_DISKS, allow_raidz_expansion=True)
    runner.assert_done()
    assert out["commands"] == [attach, wait] and out["changed"] and not out["created"]
    assert out["expanded"] == [{"vdev": "raidz2-0", "disks": [XE]}] and out["added"] == []
    assert out["after"]["vdevs"] == X_GROWN.to_dict()["vdevs"]  # read back from x_status_expanded.json
    assert out["before"]["vdevs"][0]["disks"] == [XA, XB, XC, XD]
    assert [s["argv"] for s in out["steps"]] == [attach, wait]
    assert out["warnings"][0].startswith("raidz expansion of raidz2-0 in pool z23x_rz by /var/tmp/z23x_e.img")


def test_ensure_pool_check_mode_of_an_expansion_runs_only_the_reads():
    runner = ScriptedRunner(_x_existing(), dry_run=True)
    out = zpool.ensure_pool(runner, name="z23x_rz", layout=X_GROWN, disks=X_DISKS, allow_raidz_expansion=True)
    runner.assert_done()
    assert runner.executed == [] and runner.planned == [("zpool", "attach", "z23x_rz", "raidz2-0", XE),
                                                        ("zpool", "wait", "-t", "raidz_expand", "z23x_rz")]
    assert out["changed"] and out["after"]["vdevs"] == X_GROWN.to_dict()["vdevs"]  # predicted


def test_ensure_pool_without_the_option_refuses_the_expansion_before_reading_the_pool_properties():
    runner = ScriptedRunner(_x_existing()[:3])
    with pytest.raises(UserError, match="needs allow_raidz_expansion=true; expansion cannot be undone") as err:
        zpool.ensure_pool(runner, name="z23x_rz", layout=X_GROWN, disks=X_DISKS)
    assert "fix: declare the pool as it is" in str(err.value)
    runner.assert_done()
