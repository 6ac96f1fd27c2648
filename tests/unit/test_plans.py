"""The pure planners of pools and datasets: declared state + live state -> a plan, with no Runner at all.

The live state is made from recorded OpenZFS 2.3.9 outputs by the planners' own parsers (zpool.LivePool.from_outputs,
zfs.parse_get); nothing here runs or scripts a command. Recordings: tests/unit/data/zfs23b/ (the second session:
z23_rec, its datasets read with `zfs get -j -p`, and z23x_rz / z23x_old for raidz expansion), commands in its
commands.tsv and commands-more.tsv.
"""

from __future__ import annotations

import json

import pytest
from support import DATA, data, derive_json  # (support puts module_utils on sys.path)

# isort: split
from fabric_core.base.errors import FabricError, UnsafeOperation, UserError
from fabric_core.base.model import DiskInfo, PoolLayout, Step, Vdev
from fabric_core.storage import disks, zfs, zpool

POOL = "z23_rec"
T = "/var/tmp/z23_"
R1, R2, R3 = (T + f"r{i}.img" for i in (1, 2, 3))
NV1, NV2, LOG1, LOG2 = T + "nvme1.img", T + "nvme2.img", T + "log1.img", T + "log2.img"
CACHE, SPARE = T + "cache.img", T + "spare.img"
FULL = PoolLayout(vdevs=[Vdev("data", "raidz1", [R1, R2, R3]), Vdev("special", "mirror", [NV1, NV2]),
                         Vdev("log", "mirror", [LOG1, LOG2]), Vdev("cache", "disk", [CACHE]),
                         Vdev("spare", "disk", [SPARE])])
IMAGENET = "z23_rec/datasets/imagenet"
VOL1 = "z23_rec/vol1"
KEY = "correct horse battery staple"


def disk(path: str, *reasons: str) -> DiskInfo:
    return DiskInfo(name=path.rsplit("/", 1)[-1], by_id=path, ids=[path], in_use=bool(reasons), reasons=list(reasons))


ALL_DISKS = [disk(p) for p in (R1, R2, R3, NV1, NV2, LOG1, LOG2, CACHE, SPARE)]


def live_dataset(file: str, name: str) -> zfs.LiveDataset:
    """A dataset's live state from a recorded `zfs get -j -p all NAME` (zfs23b/*_s.json)."""
    return zfs.LiveDataset(props=zfs.parse_get(data("zfs23b", file))[name])


def live_pool(status: str = "status_full.json", managed: str | None = None, props: str = "get_all_full.json",
              root: str | None = None) -> zpool.LivePool:
    """z23_rec as read by read_pool/read_pool_details, from the second session's recordings."""
    return zpool.LivePool.from_outputs(POOL, status=data("zfs23b", status),
                                       managed=managed or data("zfs23b", "get_root_managed_s.json"),
                                       props=data("zfs23b", props), root=data("zfs23b", root) if root else None)


def argvs(plan) -> list:
    return [step.argv for step in plan.steps]


# ---------------------------------------------------------------- datasets


def test_a_missing_dataset_plans_one_create_checked_by_zfs_create_n():
    spec = zfs.dataset_spec("z23_rec/nope", {"compression": "zstd", "quota": "2G"})
    plan = zfs.plan_dataset(spec, zfs.LiveDataset(props=None))
    [step] = plan.steps
    assert step.argv == ["zfs", "create", "-p", "-o", "compression=zstd", "-o", "quota=2G",
                         "-o", "fabric:managed=true", "z23_rec/nope"]
    assert step.dry_run_argv == ["zfs", "create", "-n", "-v", *step.argv[2:]] and step.follow_up == []
    assert step.description == "create filesystem z23_rec/nope with compression=zstd, quota=2G and fabric:managed=true"
    assert plan.created and plan.before == {"exists": False}
    assert plan.after == {"exists": True, "type": "filesystem", "compression": "zstd", "quota": "2G",
                          "fabric:managed": "true"}
    assert plan.changed_properties["quota"] == {"before": None, "after": "2G"} and plan.warnings == []


def test_a_volume_waits_for_its_device_node_and_a_key_never_shows():
    plan = zfs.plan_dataset(zfs.dataset_spec("z23_rec/nope", {"volblocksize": "16K"}, volume_size="256M"),
                            zfs.LiveDataset(props=None))
    assert plan.steps[0].follow_up == [["udevadm", "settle"]] and plan.after["volsize"] == "256M"
    assert plan.steps[0].argv[:5] == ["zfs", "create", "-p", "-V", "256M"]
    enc = {"enabled": True, "key": KEY, "keyformat": "passphrase"}
    plan = zfs.plan_dataset(zfs.dataset_spec("z23_rec/nope", encryption=enc), zfs.LiveDataset(props=None))
    [step] = plan.steps
    assert step.data == KEY  # on stdin only
    assert KEY not in repr(step) and KEY not in str(step.to_dict()) and KEY not in repr(plan)
    assert "encryption=aes-256-gcm (key on stdin)" in step.description


def test_a_dry_run_before_the_pool_exists_plans_the_create_without_zfs_create_n():
    plan = zfs.plan_dataset(zfs.dataset_spec("z23_rec/nope", {"compression": "zstd"}),
                            zfs.LiveDataset(props=None, pool_exists=False))
    assert plan.steps[0].dry_run_argv is None and plan.created
    assert plan.warnings == ["pool z23_rec does not exist yet: `zfs create -n` cannot check z23_rec/nope now; it is "
                             "created once the pool exists"]


def test_a_converged_dataset_plans_nothing():
    props = {"compression": "zstd", "quota": "2G", "recordsize": "1M", "special_small_blocks": "64K", "atime": False,
             "primarycache": "metadata", "fabric:role": "dataset"}
    plan = zfs.plan_dataset(zfs.dataset_spec(IMAGENET, props), live_dataset("get_all_imagenet_s.json", IMAGENET))
    assert plan.steps == [] and plan.before == plan.after and plan.changed_properties == {}


def test_differing_properties_are_one_zfs_set():
    plan = zfs.plan_dataset(zfs.dataset_spec(IMAGENET, {"compression": "lz4", "quota": "3G", "fabric:tier": "hot"}),
                            live_dataset("get_all_imagenet_s.json", IMAGENET))
    assert argvs(plan) == [["zfs", "set", "compression=lz4", "quota=3G", "fabric:tier=hot", IMAGENET]]
    assert plan.steps[0].description == f"set compression=lz4, quota=3G, fabric:tier=hot on {IMAGENET}"
    assert plan.changed_properties["quota"] == {"before": "2147483648", "after": "3G"}
    assert plan.before["compression"] == "zstd" and plan.after["compression"] == "lz4"


def test_all_digit_user_properties_compare_as_text():
    # recorded: z23x_rz/vol with fabric:version=007 and fabric:note=0042 (x_get_vol_p.json, `zfs get -j -p all`)
    live = live_dataset("x_get_vol_p.json", "z23x_rz/vol")
    assert zfs.plan_dataset(zfs.dataset_spec("z23x_rz/vol", {"fabric:version": "007", "fabric:note": "0042"}),
                            live).steps == []
    plan = zfs.plan_dataset(zfs.dataset_spec("z23x_rz/vol", {"fabric:version": "7"}), live)
    assert argvs(plan) == [["zfs", "set", "fabric:version=7", "z23x_rz/vol"]]


def test_dataset_refusals_come_from_the_planner_before_any_step():
    vol = live_dataset("get_all_vol1_s.json", VOL1)
    with pytest.raises(UnsafeOperation, match="shrinking volume z23_rec/vol1 from 268435456 to 134217728"):
        zfs.plan_dataset(zfs.dataset_spec(VOL1, volume_size="128M"), vol)
    with pytest.raises(UserError, match="volblocksize of z23_rec/vol1 is 16384 and cannot change"):
        zfs.plan_dataset(zfs.dataset_spec(VOL1, {"volblocksize": "64K"}), vol)
    assert argvs(zfs.plan_dataset(zfs.dataset_spec(VOL1, volume_size="512M"), vol)) == [
        ["zfs", "set", "volsize=512M", VOL1]]
    # derived: imagenet with fabric:managed only inherited (as tank_zfs_get_all_s.json records xattr inherited)
    name = "z23_rec/datasets/x"
    inherited = derive_json("zfs23b/get_all_imagenet_s.json", rename={IMAGENET: name},
                            properties={name: {"fabric:managed": ["true", "INHERITED", "z23_rec"]}})
    live = zfs.LiveDataset(props=zfs.parse_get(inherited)[name])
    with pytest.raises(UnsafeOperation, match="was not created by this project") as err:
        zfs.plan_dataset(zfs.dataset_spec(name, {"quota": "3G"}), live)
    assert "adopt=true" in err.value.fix
    plan = zfs.plan_dataset(zfs.dataset_spec(name, {"quota": "3G"}, adopt=True), live)
    assert argvs(plan) == [["zfs", "set", "quota=3G", "fabric:managed=true", name]]
    assert plan.warnings == [f"adopted {name}: set fabric:managed=true"]


# ---------------------------------------------------------------- pools


def test_a_missing_pool_plans_one_create_checked_by_zpool_create_n():
    spec = zpool.pool_spec(name=POOL, layout=FULL, disks=ALL_DISKS, properties={"autotrim": "on"},
                           fs_properties={"compression": "lz4"})
    plan = zpool.plan_pool(spec, zpool.LivePool(name=POOL, exists=False))
    [step] = plan.steps
    assert step.argv == zpool.create_argv(POOL, FULL, 12, {"autotrim": "on"}, {"compression": "lz4"})
    assert step.dry_run_argv == zpool.create_argv(POOL, FULL, 12, {"autotrim": "on"}, {"compression": "lz4"},
                                                  check_only=True)
    assert step.dry_run_strict and step.description.startswith(f"create pool {POOL} (ashift 12): data raidz1 of ")
    assert plan.created and plan.reshapes and plan.health == ""
    assert plan.before == {"pool": POOL, "exists": False, "vdevs": []}
    assert plan.after["vdevs"] == plan.added == FULL.to_dict()["vdevs"]


def test_disks_to_wipe_come_first_and_zpool_create_n_may_then_refuse():
    m1, m2 = T + "m1.img", T + "m2.img"
    layout = PoolLayout(vdevs=[Vdev("data", "mirror", [m1, m2])])
    used = [disk(m1), disk(m2, "filesystem ext4")]
    spec = zpool.pool_spec(name="z23_mir", layout=layout, disks=used, wipe=[m2], safe_mode=False)
    plan = zpool.plan_pool(spec, zpool.LivePool(name="z23_mir", exists=False))
    assert argvs(plan) == [["zpool", "labelclear", "-f", m2], ["wipefs", "-a", m2],
                           zpool.create_argv("z23_mir", layout)]
    assert plan.steps[0].check is False  # labelclear exits 1 on a disk without a label
    assert plan.steps[2].dry_run_strict is False and plan.warnings == [f"wiped {m2} (filesystem ext4)"]
    for kwargs in ({"wipe": [m2]}, {"safe_mode": False}):  # both are needed
        with pytest.raises(UnsafeOperation, match=r"z23_m2.img is in use \(filesystem ext4\)"):
            zpool.plan_pool(zpool.pool_spec(name="z23_mir", layout=layout, disks=used, **kwargs),
                            zpool.LivePool(name="z23_mir", exists=False))


def test_a_converged_pool_plans_nothing():
    spec = zpool.pool_spec(name=POOL, layout=FULL, disks=ALL_DISKS, properties={"autotrim": True, "ashift": 12})
    plan = zpool.plan_pool(spec, live_pool())
    assert plan.steps == [] and plan.before == plan.after and plan.warnings == [] and plan.health == "ONLINE"
    assert not plan.reshapes and plan.properties_changed == {}


def test_a_missing_cache_and_a_property_are_added_then_set():
    spec = zpool.pool_spec(name=POOL, layout=FULL, disks=ALL_DISKS, properties={"autotrim": "off"})
    plan = zpool.plan_pool(spec, live_pool("status_nocache.json"))
    add = ["zpool", "add", "-o", "ashift=12", POOL, "cache", CACHE]
    assert argvs(plan) == [add, ["zpool", "set", "autotrim=off", POOL]]
    assert plan.steps[0].dry_run_argv == ["zpool", "add", "-n", "-o", "ashift=12", POOL, "cache", CACHE]
    assert [s.description for s in plan.steps] == [f"add to pool {POOL}: cache disk of {CACHE}",
                                                   f"set pool property autotrim=off on {POOL} (was on)"]
    assert plan.added == [{"role": "cache", "type": "disk", "disks": [CACHE]}] and plan.reshapes
    assert [v["role"] for v in plan.after["vdevs"]] == ["data", "special", "log", "spare", "cache"]
    assert plan.properties_changed == {"autotrim": {"before": "on", "after": "off"}}


def test_root_dataset_properties_of_an_existing_pool_are_planned_by_the_dataset_planner():
    # z23_rec's root recorded with `zfs get -j -p all z23_rec` (get_all_root_s.json): compression lz4, atime off
    spec = zpool.pool_spec(name=POOL, layout=FULL, disks=ALL_DISKS, fs_properties={"compression": "on", "atime": "on"})
    plan = zpool.plan_pool(spec, live_pool(root="get_all_root_s.json"))
    assert argvs(plan) == [["zfs", "set", "atime=on", POOL]]  # compression=on is lz4: no change
    assert plan.fs.changed_properties == {"atime": {"before": "off", "after": "on"}} and not plan.reshapes


def test_a_pool_not_made_here_is_changed_only_when_adopted():
    # recorded on z23_unm (no fabric:managed), renamed to z23_rec
    unmanaged = derive_json("zfs23b/get_root_unmanaged_s.json", rename={"z23_unm": POOL})
    live = live_pool("status_nocache.json", managed=unmanaged)
    with pytest.raises(UnsafeOperation, match="not created by this project") as err:
        zpool.plan_pool(zpool.pool_spec(name=POOL, layout=FULL, disks=ALL_DISKS), live)
    assert "adopt=true" in err.value.fix
    plan = zpool.plan_pool(zpool.pool_spec(name=POOL, layout=FULL, disks=ALL_DISKS, adopt=True), live)
    assert argvs(plan)[0] == ["zfs", "set", "fabric:managed=true", POOL]
    assert plan.warnings == [f"adopted pool {POOL}: set fabric:managed=true"]
    # nothing to change: nothing to adopt
    assert zpool.plan_pool(zpool.pool_spec(name=POOL, layout=FULL, disks=ALL_DISKS),
                           live_pool(managed=unmanaged)).steps == []


def test_a_conflicting_layout_is_refused_from_status_alone():
    # check_layout needs only what read_pool read (no pool properties yet): ensure_pool refuses before reading them
    live = zpool.LivePool.from_outputs(POOL, status=data("zfs23b", "status_full.json"),
                                       managed=data("zfs23b", "get_root_managed_s.json"))
    spec = zpool.pool_spec(name=POOL, layout=PoolLayout(vdevs=[Vdev("data", "mirror", [R1, R2]),
                                                               Vdev("data", "disk", [R3])]), disks=ALL_DISKS)
    with pytest.raises(UserError, match="does not match the declared layout") as err:
        zpool.check_layout(spec, live)
    assert "declare the pool as it is" in err.value.fix
    with pytest.raises(UserError, match="does not match the declared layout"):
        zpool.plan_pool(spec, live)


def test_a_degraded_pool_is_planned_with_a_warning():
    plan = zpool.plan_pool(zpool.pool_spec(name=POOL, layout=FULL, disks=ALL_DISKS), live_pool("status_degraded.json"))
    assert plan.steps == [] and plan.health == "DEGRADED"
    assert plan.warnings == [f"pool {POOL} is DEGRADED: raidz1-0 DEGRADED, {R3} OFFLINE"]


def test_steps_show_their_description_and_argv_only():
    step = Step("create x", ["zfs", "create", "x"], data="secret", dry_run_argv=["zfs", "create", "-n", "x"])
    assert step.to_dict() == {"description": "create x", "argv": ["zfs", "create", "x"]}


# ---------------------------------------------------------------- raidz expansion (OpenZFS 2.3)
#
# Recorded (zfs23b/commands-more.tsv): z23x_rz, a raidz2 of the files a-d (x_status_before.json, features
# x_get_features.json), `zpool attach z23x_rz raidz2-0 /var/tmp/z23x_e.img` (x_attach.txt), the expansion in
# progress (x_status_expanding.json: state SCANNING, e a member already), `zpool wait -t raidz_expand`
# (x_wait.txt), expanded (x_status_expanded.json); z23x_old, a raidz1 of h-j created with every feature
# disabled (x_old_status.json, x_old_get_features.json), where ZFS refused the attach of f (x_old_attach.stderr).

X = "/var/tmp/z23x_"
XA, XB, XC, XD, XE, XF = (X + f"{c}.img" for c in "abcdef")
XH, XI, XJ = (X + f"{c}.img" for c in "hij")
X_DISKS = [disk(p) for p in (XA, XB, XC, XD, XE, XF, XH, XI, XJ)]
# derived: the root datasets' fabric:managed of these pools was read only with `zfs get -j -p all`
# (x_get_root_p.json for z23x_rz); the one-property answer in the recorded shape is z23_rec's
# (get_root_managed_s.json), renamed. z23x_old was created without fabric:managed: z23_unm's answer, renamed.
X_MANAGED = derive_json("zfs23b/get_root_managed_s.json", rename={POOL: "z23x_rz"})
OLD_UNMANAGED = derive_json("zfs23b/get_root_unmanaged_s.json", rename={"z23_unm": "z23x_old"})
WAIT = ["zpool", "wait", "-t", "raidz_expand", "z23x_rz"]


def x_live(status: str = "x_status_before.json") -> zpool.LivePool:
    return zpool.LivePool.from_outputs("z23x_rz", status=data("zfs23b", status), managed=X_MANAGED,
                                       props=data("zfs23b", "x_get_features.json"))


def x_spec(*disks: str, **kwargs) -> zpool.PoolSpec:
    return zpool.pool_spec(name="z23x_rz", layout=PoolLayout(vdevs=[Vdev("data", "raidz2", list(disks))]),
                           disks=X_DISKS, **kwargs)


def test_the_recorded_feature_states():
    assert zpool.parse_props(data("zfs23b", "x_get_features.json"))["feature@raidz_expansion"][0] == "enabled"
    assert zpool.parse_props(data("zfs23b", "x_old_get_features.json"))["feature@raidz_expansion"][0] == "disabled"


def test_a_raidz_vdev_declared_with_more_disks_is_a_conflict_that_names_the_option():
    live = x_live()
    assert [v.name for v in live.layout.vdevs] == ["raidz2-0"]
    diff = zpool.compare_layout(x_spec(XA, XB, XC, XD, XE).canonical, live.layout)
    assert diff.to_add == [] and diff.expansions == []
    assert diff.conflicts == [f"declared data raidz2 [{XA}, {XB}, {XC}, {XD}, {XE}] is live raidz2-0 [{XA}, {XB}, "
                              f"{XC}, {XD}] plus {XE}: growing a raidz vdev by attaching disks (raidz expansion, "
                              "OpenZFS 2.3) needs allow_raidz_expansion=true; expansion cannot be undone, and the "
                              "data already on the vdev keeps its old data-to-parity ratio until it is rewritten"]
    with pytest.raises(UserError, match="needs allow_raidz_expansion=true"):
        zpool.plan_pool(x_spec(XA, XB, XC, XD, XE), live)
    # allow_grow is about new vdevs; it does not allow expansion
    with pytest.raises(UserError, match="needs allow_raidz_expansion=true"):
        zpool.plan_pool(x_spec(XA, XB, XC, XD, XE, allow_grow=True), live)


def test_raidz_expansion_is_one_attach_and_one_wait_per_new_disk_in_order():
    plan = zpool.plan_pool(x_spec(XA, XB, XC, XD, XE, XF, allow_raidz_expansion=True), x_live())
    # the recorded commands: x_attach.txt and x_wait.txt (commands-more.tsv)
    assert argvs(plan) == [["zpool", "attach", "z23x_rz", "raidz2-0", XE], WAIT,
                           ["zpool", "attach", "z23x_rz", "raidz2-0", XF], WAIT]
    assert plan.steps[0].description == (f"attach {XE} to raidz2-0 (raidz expansion, disk 1 of 2): ZFS reflows the "
                                         "vdev's data across its disks")
    assert plan.steps[1].description == (f"wait until raidz2-0 is expanded onto {XE} (`zpool wait` returns when the "
                                         "reflow is done)")
    assert plan.expanded == [{"vdev": "raidz2-0", "disks": [XE, XF]}] and plan.added == [] and plan.reshapes
    assert plan.after["vdevs"] == [{"role": "data", "type": "raidz2", "disks": [XA, XB, XC, XD, XE, XF]}]
    assert plan.before["vdevs"] == [{"role": "data", "type": "raidz2", "disks": [XA, XB, XC, XD]}]
    [why] = plan.warnings
    assert why.startswith(f"raidz expansion of raidz2-0 in pool z23x_rz by {XE}, {XF}: it cannot be undone; the "
                          "data already on the vdev keeps its old data-to-parity ratio")


def test_raidz_expansion_is_refused_while_the_feature_is_disabled():
    live = zpool.LivePool.from_outputs("z23x_old", status=data("zfs23b", "x_old_status.json"), managed=OLD_UNMANAGED,
                                       props=data("zfs23b", "x_old_get_features.json"))
    spec = zpool.pool_spec(name="z23x_old", layout=PoolLayout(vdevs=[Vdev("data", "raidz1", [XH, XI, XJ, XF])]),
                           disks=X_DISKS, allow_raidz_expansion=True, adopt=True)
    with pytest.raises(UnsafeOperation) as err:
        zpool.plan_pool(spec, live)
    assert err.value.problem.startswith("pool z23x_old cannot grow raidz1-0 by raidz expansion: its "
                                        "feature@raidz_expansion is disabled")
    # the reason ZFS itself gives for the refused attach (recorded: x_old_attach.stderr)
    assert data("zfs23b", "x_old_attach.stderr").split(": ", 1)[1].strip() in err.value.problem
    assert "`zpool upgrade z23x_old`" in err.value.fix and "an older ZFS can no longer import the pool" in err.value.fix


def test_an_expansion_in_progress_counts_its_disk_and_is_reported():
    plan = zpool.plan_pool(x_spec(XA, XB, XC, XD, XE, allow_raidz_expansion=True), x_live("x_status_expanding.json"))
    assert plan.steps == [] and plan.expanded == []
    assert plan.warnings == ["pool z23x_rz is expanding raidz2-0 (raidz expansion in progress, 0 of 116035584 bytes "
                             "copied): its new disk counts as a member already; the space it adds is usable once "
                             "`zpool wait -t raidz_expand z23x_rz` returns"]
    # without the option the in-progress expansion is no conflict either: the live vdev has the declared disks
    assert zpool.plan_pool(x_spec(XA, XB, XC, XD, XE), x_live("x_status_expanding.json")).steps == []
    # one more disk: ZFS expands one disk at a time, so the plan waits for the running expansion first
    plan = zpool.plan_pool(x_spec(XA, XB, XC, XD, XE, XF, allow_raidz_expansion=True),
                           x_live("x_status_expanding.json"))
    assert argvs(plan) == [WAIT, ["zpool", "attach", "z23x_rz", "raidz2-0", XF], WAIT]
    # expanded: the vdev has its five disks and no expansion runs
    assert zpool.plan_pool(x_spec(XA, XB, XC, XD, XE), x_live("x_status_expanded.json")).warnings == []


def test_new_disks_of_an_expansion_follow_the_in_use_and_wipe_rules():
    used = [d for d in X_DISKS if d.by_id != XE] + [disk(XE, "filesystem ext4")]
    layout = PoolLayout(vdevs=[Vdev("data", "raidz2", [XA, XB, XC, XD, XE])])
    with pytest.raises(UnsafeOperation, match=r"z23x_e.img is in use \(filesystem ext4\)"):
        zpool.plan_pool(zpool.pool_spec(name="z23x_rz", layout=layout, disks=used, allow_raidz_expansion=True),
                        x_live())
    plan = zpool.plan_pool(zpool.pool_spec(name="z23x_rz", layout=layout, disks=used, allow_raidz_expansion=True,
                                           wipe=[XE], safe_mode=False), x_live())
    assert argvs(plan) == [["zpool", "labelclear", "-f", XE], ["wipefs", "-a", XE],
                           ["zpool", "attach", "z23x_rz", "raidz2-0", XE], WAIT]
    active = [d for d in X_DISKS if d.by_id != XE] + [disk(XE, "part of imported pool 'other'")]
    with pytest.raises(UnsafeOperation, match="in active use"):
        zpool.plan_pool(zpool.pool_spec(name="z23x_rz", layout=layout, disks=active, allow_raidz_expansion=True,
                                        wipe=[XE], safe_mode=False), x_live())


# ---------------------------------------------------------------- pool features: upgraded only when asked
#
# z23x_old was created with every feature disabled (`zpool create -d`; x_old_get_features.json: 44 disabled);
# z23_rec and z23x_rz have every feature enabled or active (get_all_full.json, x_get_features.json).


def old_live() -> zpool.LivePool:
    return zpool.LivePool.from_outputs("z23x_old", status=data("zfs23b", "x_old_status.json"), managed=OLD_UNMANAGED,
                                       props=data("zfs23b", "x_old_get_features.json"))


def old_spec(*disks: str, **kwargs) -> zpool.PoolSpec:
    return zpool.pool_spec(name="z23x_old", layout=PoolLayout(vdevs=[Vdev("data", "raidz1", list(disks))]),
                           disks=X_DISKS, **kwargs)


def test_disabled_features_stay_off_with_a_warning_that_counts_them():
    disabled = [k for k, (v, _) in zpool.parse_props(data("zfs23b", "x_old_get_features.json")).items()
                if k.startswith("feature@") and v == "disabled"]
    assert len(disabled) == 44
    plan = zpool.plan_pool(old_spec(XH, XI, XJ), old_live())
    assert plan.steps == []  # no upgrade, and so nothing to adopt either
    [warning] = plan.warnings
    assert warning.startswith("pool z23x_old has 44 disabled feature(s) (allocation_classes, async_destroy, "
                              "blake3, block_cloning, bookmark_v2 and 39 more); they stay off (upgrade_features is "
                              "false), so an older ZFS can still import the pool: the way back after a failed OS "
                              "or ZFS upgrade")
    # a pool with every feature on: no warning, nothing to upgrade, even when asked
    assert zpool.plan_pool(zpool.pool_spec(name=POOL, layout=FULL, disks=ALL_DISKS, upgrade_features=True),
                           live_pool()).steps == []


def test_upgrade_features_plans_one_zpool_upgrade():
    plan = zpool.plan_pool(old_spec(XH, XI, XJ, upgrade_features=True, adopt=True), old_live())
    # z23x_old was made without fabric:managed: the upgrade is a change, so the pool is adopted first
    assert argvs(plan) == [["zfs", "set", "fabric:managed=true", "z23x_old"], ["zpool", "upgrade", "z23x_old"]]
    assert plan.steps[1].description.startswith("enable the 44 disabled feature(s) of pool z23x_old "
                                                 "(allocation_classes, async_destroy, blake3, block_cloning, "
                                                 "bookmark_v2 and 39 more), as upgrade_features asks: an older ZFS "
                                                 "can no longer import the pool afterwards")
    assert plan.warnings == ["adopted pool z23x_old: set fabric:managed=true"]
    with pytest.raises(UnsafeOperation, match="not created by this project"):
        zpool.plan_pool(old_spec(XH, XI, XJ, upgrade_features=True), old_live())


def test_upgrade_features_comes_before_a_raidz_expansion_that_needs_it():
    plan = zpool.plan_pool(old_spec(XH, XI, XJ, XF, upgrade_features=True, allow_raidz_expansion=True, adopt=True),
                           old_live())
    assert argvs(plan) == [["zfs", "set", "fabric:managed=true", "z23x_old"], ["zpool", "upgrade", "z23x_old"],
                           ["zpool", "attach", "z23x_old", "raidz1-0", XF],
                           ["zpool", "wait", "-t", "raidz_expand", "z23x_old"]]


def test_a_raidz_vdev_declared_with_a_member_of_another_vdev_is_no_expansion():
    # z23_rec: raidz1-0 of r1-r3 and a special mirror of nvme1/nvme2 (status_full.json); declaring raidz1 of r1-r3,
    # nvme1 and a new disk takes nvme1 from the special mirror: a conflict, never an attach
    live = live_pool()
    declared = PoolLayout(vdevs=[Vdev("data", "raidz1", [R1, R2, R3, NV1, T + "new.img"]), *FULL.vdevs[2:]])
    diff = zpool.compare_layout(declared, live.layout, allow_raidz_expansion=True)
    assert diff.expansions == []
    assert diff.conflicts[0].startswith(f"declared data raidz1 [{T}new.img, {NV1}, {R1}, {R2}, {R3}] does not match "
                                        f"the pool: {NV1}, {R1}, {R2}, {R3} are in live")


def test_planning_an_existing_pool_needs_its_properties_read():
    live = zpool.LivePool.from_outputs(POOL, status=data("zfs23b", "status_full.json"),
                                       managed=data("zfs23b", "get_root_managed_s.json"))
    with pytest.raises(FabricError, match="were not read") as err:
        zpool.plan_pool(zpool.pool_spec(name=POOL, layout=FULL, disks=ALL_DISKS), live)
    assert "read_pool_details" in err.value.fix
    with pytest.raises(FabricError, match="root dataset"):  # filesystem properties need the root dataset read
        zpool.plan_pool(zpool.pool_spec(name=POOL, layout=FULL, disks=ALL_DISKS, fs_properties={"atime": "off"}),
                        live_pool())


def test_a_disk_declared_by_another_by_id_name_is_added_with_that_name_and_reported_by_its_preferred_path():
    # the converged lab pool tank (zfs23b/tank_status.json) without its cache device (derived: the l2cache section
    # removed), on the disks discovery found beside it (disks/tank-zfs23, tank's members counted free); the cache is
    # declared by the NVMe's second by-id name
    found = disks.free_for_pool([DiskInfo.from_dict(d) for d in json.loads(
        (DATA / "disks" / "tank-zfs23" / "discover.json").read_text())], "tank")
    live = zpool.LivePool.from_outputs(
        "tank", status=derive_json("zfs23b/tank_status.json", remove=[["pools", "tank", "l2cache"]]),
        managed=derive_json("zfs23b/get_root_managed_s.json", rename={POOL: "tank"}),
        props=data("zfs23b", "tank_get.json"), aliases={p: d.by_id for d in found for p in (d.by_id, *d.ids)})
    by_id = "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_NVME1003"
    alias = by_id + "_1"
    assert alias in next(d for d in found if d.by_id == by_id).ids
    declared = PoolLayout(vdevs=[*live.layout.vdevs, Vdev("cache", "disk", [alias])])
    plan = zpool.plan_pool(zpool.pool_spec(name="tank", layout=declared, disks=found), live)
    assert argvs(plan) == [["zpool", "add", "-o", "ashift=12", "tank", "cache", alias]]
    assert plan.added == [{"role": "cache", "type": "disk", "disks": [alias]}]
    assert plan.after["vdevs"][-1] == {"role": "cache", "type": "disk", "disks": [by_id]}
