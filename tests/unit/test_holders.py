"""fabric_core.storage.holders (issue 26, item 7): a hold names its holder (boot, pid, start time), so the next run
releases the hold of a process that is gone (a SIGKILLed replicate) and leaves a live one's; status lists them."""

from __future__ import annotations

import subprocess

import pytest
from fabric_core.storage import holders, lzc
from support import AnsweringRunner

BOOT = "3f1c2a9e-6d0b-4c1e-9a7e-0d7c1f2b8a11"
OTHER_BOOT = "0b4d8c2e-1a5f-4e3b-8c6d-9f7a2e1b3c44"
SNAP = "tank/datasets/imagenet@v1"
# /proc/PID/stat of a process whose command name has a space and a parenthesis (field 22: 4242)
STAT = "1234 (fabric ctl) x) S 1 1234 1234 0 -1 4194560 300 0 0 0 1 2 0 0 20 0 1 0 4242 12345678 900"


def test_a_tag_names_its_holder_and_parses_back():
    holder = holders.Holder(BOOT, 1234, 4242)
    text = holders.tag("fabric:sending", holder)
    assert text == f"fabric:sending:{BOOT}:1234:4242" and len(text) < 256  # ZFS's limit on a hold tag
    assert holders.parse(text, "fabric:sending") == holder
    assert holders.parse("fabric:sending", "fabric:sending") is None  # a tag from before: no holder recorded
    with pytest.raises(ValueError):
        holders.parse(text, "fabric:receiving")


def test_a_holder_is_alive_only_in_its_boot_with_its_pid_started_when_it_did():
    holder = holders.Holder(BOOT, 1234, 4242)
    assert holders.alive(holder, BOOT, lambda pid: STAT)
    assert not holders.alive(holder, OTHER_BOOT, lambda pid: STAT)  # the node rebooted
    assert not holders.alive(holder, BOOT, lambda pid: None)  # no such process
    assert not holders.alive(holders.Holder(BOOT, 1234, 4243), BOOT, lambda pid: STAT)  # the pid was reused


def test_stale_holds_are_the_dead_holders_and_the_unnamed_ones_of_the_bases_asked():
    live, dead = holders.Holder(BOOT, 10, 100), holders.Holder(BOOT, 11, 110)
    held = {SNAP: ["fabric:published", holders.tag("fabric:sending", live), holders.tag("fabric:sending", dead)],
            "tank/datasets/imagenet@v2": ["fabric:sending", holders.tag("fabric:sending",
                                                                        holders.Holder(OTHER_BOOT, 10, 100))],
            "tank/datasets/imagenet@v3": [holders.tag("fabric:receiving", dead)]}
    out = holders.stale(held, ["fabric:sending"], boot=BOOT, is_alive=lambda h: h == live)
    assert [(h.snapshot, h.tag) for h in out] == [
        (SNAP, holders.tag("fabric:sending", dead)),
        ("tank/datasets/imagenet@v2", "fabric:sending"),
        ("tank/datasets/imagenet@v2", holders.tag("fabric:sending", holders.Holder(OTHER_BOOT, 10, 100)))]
    assert out[1].holder is None and out[0].release == f"zfs release {holders.tag('fabric:sending', dead)} {SNAP}"


def test_this_process_is_alive_and_an_ended_one_is_not():
    me = holders.current()
    boot = holders.boot_id()
    assert me.boot == boot and holders.alive(me, boot, holders.read_stat)
    child = subprocess.Popen(["sleep", "30"])
    try:
        stat = holders.read_stat(child.pid)
        gone = holders.Holder(boot, child.pid, holders._start_time(stat))
        assert holders.alive(gone, boot, holders.read_stat)
    finally:
        child.kill()
        child.wait()
    assert not holders.alive(gone, boot, holders.read_stat)


def test_release_stale_releases_a_dead_holders_hold_only(monkeypatch):
    live, dead = holders.current(), holders.Holder(holders.boot_id(), 99999999, 1)
    tags = {SNAP: ["fabric:published", "fabric:sending", holders.tag("fabric:sending", live),
                   holders.tag("fabric:sending", dead)]}
    monkeypatch.setattr(holders.versions, "list_all_snapshots",
                        lambda runner, root: [{"name": SNAP, "userrefs": 4}, {"name": SNAP + "x", "userrefs": 0}])
    monkeypatch.setattr(lzc, "holds", lambda name: list(tags[name]))
    released = []
    monkeypatch.setattr(lzc, "_release", lambda name, tag: released.append((name, tag)))
    gone = holders.release_stale(AnsweringRunner({}), ["tank/datasets/imagenet"], ["fabric:sending"])
    assert released == [(SNAP, holders.tag("fabric:sending", dead))] and [h.holder for h in gone] == [dead]
    dry = AnsweringRunner({}, dry_run=True)
    holders.release_stale(dry, ["tank/datasets/imagenet"], ["fabric:sending"])
    assert dry.planned == [("lzc_release", SNAP, holders.tag("fabric:sending", dead))] and len(released) == 1
    # status lists the bare one too, with the command that releases it
    listed = holders.leftovers(AnsweringRunner({}), ["tank/datasets/imagenet"], ["fabric:sending"])
    assert [h.release for h in listed] == [f"zfs release fabric:sending {SNAP}",
                                           f"zfs release {holders.tag('fabric:sending', dead)} {SNAP}"]
