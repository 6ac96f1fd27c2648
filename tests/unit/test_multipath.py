"""fabric_core.node.multipath: the maps of read-only versions served by several storage nodes (recorded outputs
of multipathd 0.11 and scsi_id on the lab's Debian 13 GPU nodes), and how publish's host side uses them."""

from __future__ import annotations

import pytest
from fabric_core.base.errors import Busy, FabricError
from fabric_core.node import iscsi, multipath
from support import AnsweringRunner

WWID = "36001405103bbe1c6d8b51d9bdbb547d3"
OTHER = "3600140594f2d93441f35d519fbd1f14d"
# multipathd show paths raw format "%w %d %t %T", storage1's path up, storage2's failed, one unclaimed disk
PATHS = f"""{OTHER} sda undef undef
{WWID} sdb active ready
{WWID} sdc failed faulty
"""


def test_paths_are_read_by_wwid_and_only_active_ready_ones_count_as_up():
    paths = multipath.parse_paths(PATHS + "garbage line\n")
    assert sorted(paths) == sorted([OTHER, WWID])
    assert [p["dev"] for p in paths[WWID]] == ["sdb", "sdc"]
    assert multipath.paths_up(paths[WWID]) == 1 and multipath.paths_up(paths[OTHER]) == 0


def test_a_map_is_named_by_its_wwid_and_back():
    dev = multipath.device_of(WWID)
    assert dev == f"/dev/disk/by-id/dm-uuid-mpath-{WWID}"
    assert multipath.wwid_of_device(dev) == WWID
    assert multipath.wwid_of_device("/dev/disk/by-path/ip-10.77.0.11:3260-iscsi-iqn.x:y-lun-0") is None


def node(*, listed: bool, mapped: bool, dry_run: bool = False, wwid: str = WWID) -> AnsweringRunner:
    return AnsweringRunner({
        (multipath.SCSI_ID,): (0, wwid + "\n", ""),
        ("grep", "-qxF"): (0, "", "") if listed else (1, "", ""),
        ("test", "-e"): (0, "", "") if mapped else (1, "", ""),
    }, dry_run=dry_run, default=(0, "", ""))


def test_claim_lists_the_wwid_and_makes_the_map_once():
    dry = node(listed=False, mapped=False, dry_run=True)
    out = multipath.claim(dry, "/dev/sdb")
    assert out == {"changed": True, "wwid": WWID, "device": multipath.device_of(WWID),
                   "commands": [f"multipath -a {WWID}", "multipathd add path sdb"]}
    assert dry.planned == [("multipath", "-a", WWID), ("multipathd", "add", "path", "sdb")]
    done = node(listed=True, mapped=True)
    done.answers[("readlink", "-e")] = (0, "/dev/sdc\n", "")
    done.answers[("multipathd", "show")] = (0, f"{WWID} sdc active ready\n", "")
    assert multipath.claim(done, "/dev/sdc") == {"changed": False, "wwid": WWID, "device": multipath.device_of(WWID),
                                                 "commands": []}
    assert not any(argv[0] == "multipath" for argv in done.seen)


def test_claim_waits_for_the_map_and_names_the_disk_when_it_never_comes():
    ticks = iter(range(0, 1000, 10))
    with pytest.raises(multipath.MapTimeout, match="no multipath map for /dev/sdb"):
        multipath.claim(node(listed=True, mapped=False), "/dev/sdb", timeout=30, sleep=lambda s: None,
                        clock=lambda: next(ticks))


def test_a_disk_without_a_wwid_is_refused_before_any_change():
    runner = node(listed=False, mapped=False, wwid="")
    with pytest.raises(FabricError, match="no usable SCSI WWID"):
        multipath.claim(runner, "/dev/sdb")
    assert runner.executed == []


def test_release_flushes_the_map_and_unlists_the_wwid():
    dry = node(listed=True, mapped=True, dry_run=True)
    assert multipath.release(dry, WWID)["commands"] == [f"multipath -f {WWID}", f"multipath -w {WWID}"]
    assert multipath.release(node(listed=False, mapped=False), WWID) == {"changed": False, "commands": []}


def _logout_plan(paths_left: bool):
    spec = iscsi.session_spec(portal="10.77.0.11", target_iqn="iqn.2026-11.io.fabric.lab.fabricctl:ds.a.v1",
                              state="logged_out")
    live = iscsi.SessionLive({"target": spec.target_iqn, "portal": spec.portal},
                             {"node.startup": "automatic"}, mounted=["/dev/sdb on /datasets/a/v1"])
    return iscsi.plan_session(spec, live, paths_left=paths_left)


def test_a_path_logs_out_under_a_mounted_map_only_while_other_paths_are_left():
    alone = _logout_plan(paths_left=False)
    assert alone.conflicts and isinstance(alone.conflicts[0], Busy)
    spare = _logout_plan(paths_left=True)
    assert not spare.conflicts and [s.kind for s in spare.steps] == ["logout", "delete_record"]


def test_claim_hands_multipath_the_kernel_name_not_the_udev_link():
    link = "/dev/disk/by-path/ip-10.77.0.11:3260-iscsi-iqn.2026-11.io.fabric.lab.fabricctl:ds.a.v1-lun-0"
    runner = node(listed=True, mapped=False, dry_run=True)
    runner.answers[("readlink", "-e")] = (0, "/dev/sdc\n", "")
    assert multipath.claim(runner, link)["commands"] == ["multipathd add path sdc"]  # a link's name is blacklisted


def test_the_multipath_command_makes_the_map_only_when_multipathd_does_not():
    """multipathd makes a read-only disk's map read-only at once; the command (which tries read-write first, then
    read-only on the kernel's refusal) is the fallback when multipathd refuses or does not answer."""
    for answer, commands in [((0, "ok\n", ""), ["multipathd add path sdc"]),
                             ((0, "fail\n", ""), ["multipathd add path sdc", "multipath /dev/sdc"]),
                             ((1, "", "can't connect"), ["multipathd add path sdc", "multipath /dev/sdc"])]:
        runner = node(listed=True, mapped=False)
        runner.answers[("readlink", "-e")] = (0, "/dev/sdc\n", "")
        runner.answers[("multipathd", "add")] = answer
        runner.answers[("multipathd", "show")] = (0, f"{WWID} sdc active ready\n", "")
        there = iter([(1, "", ""), (0, "", "")])
        runner.answers[("test", "-e")] = lambda argv, there=there: next(there)
        assert multipath.claim(runner, "/dev/sdc", sleep=lambda s: None)["commands"] == commands


def test_a_new_path_is_reported_only_once_multipathd_has_it_in_the_map():
    """A second storage node's session: the map is there already, the disk joins it on multipathd's uevent a moment
    later (the lab's test_reboot saw one path up right after publish returned)."""
    runner = node(listed=True, mapped=True)
    runner.answers[("readlink", "-e")] = (0, "/dev/sdc\n", "")
    shows = iter([(0, f"{WWID} sdb active ready\n", ""), (0, f"{WWID} sdb active ready\n{WWID} sdc undef undef\n", ""),
                  (0, PATHS.replace("sdc failed faulty", "sdc active ready"), "")])
    runner.answers[("multipathd", "show")] = lambda argv: next(shows)
    slept = []
    assert multipath.claim(runner, "/dev/sdc", sleep=slept.append)["changed"] is False
    assert len(slept) == 2


def test_a_disk_that_never_joins_its_map_is_an_error_naming_it():
    runner = node(listed=True, mapped=True)
    runner.answers[("readlink", "-e")] = (0, "/dev/sdc\n", "")
    runner.answers[("multipathd", "show")] = (0, f"{WWID} sdb active ready\n", "")
    ticks = iter(range(0, 1000, 10))
    with pytest.raises(multipath.MapTimeout, match="/dev/sdc did not join multipath map"):
        multipath.claim(runner, "/dev/sdc", timeout=30, sleep=lambda s: None, clock=lambda: next(ticks))
