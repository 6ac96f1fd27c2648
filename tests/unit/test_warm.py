"""fabricctl warm and fabric_core.services.warm: the planner (a version that fits the cache, one larger than it,
no L2ARC, an L2ARC that keeps none of the version, --arc-only, nothing to read, a version the ARC keeps no data of), the
L2ARC's feed rate from the module's parameters, the pool's cache devices from the recorded `zpool status -j`
(tests/unit/data/zfs23b), the reading loop on a temporary file standing in for the snapshot's device (all of it,
a device shorter than asked, the pace past the ARC's share on a fake clock), and the command through fabricctl's
main with the node's commands answered from recordings and the arcstats sample (tests/unit/data/arcstats:
constructed, not recorded)."""

from __future__ import annotations

import json
import os

import pytest
from fabric_core.base.errors import UserError
from fabric_core.services import warm
from fabric_core.storage import zpool
from support import AnsweringRunner, data, derive_json, fabricctl_config, snapshot_listing

from fabricctl import context, datasets, main
from fabricctl.commands import warm as warm_command

KiB, MiB, GiB = 1024, 1024 ** 2, 1024 ** 3
ARCSTATS = data("arcstats", "arcstats.txt")  # c_max 24 GiB, size 25165824000, l2_size 20 GiB
NVME = "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_NVME1003"  # tank's cache device (zfs23b/tank_status.json)
TANK_L2ARC = 4279758848  # its total_space
READABLE_DEVICE = datasets.readable_device


# --- the planner ---------------------------------------------------------------------------------------


def test_a_version_that_fits_the_arc_is_read_whole_at_full_speed():
    p = warm.plan("imagenet@v1", device_bytes=GiB, stored_bytes=100 * MiB, arc_max=512 * MiB, l2arc_bytes=4 * GiB,
                  l2arc_rate=64 * MiB)
    assert p.fits and not p.stops_early
    assert (p.read_bytes, p.arc_end, p.pace) == (GiB, GiB, None)
    arc = int(0.9 * 512 * MiB)
    assert (p.arc_bytes, p.l2arc_bytes, p.cache_bytes) == (arc, 4 * GiB, arc + 4 * GiB)
    assert p.lines[0].startswith("version is 100 MiB (stored; its device 1.0 GiB), cache holds 4.4 GiB")
    assert p.lines[0].endswith(": reading all of it")


def test_past_the_arcs_share_reads_are_held_to_the_l2arc_feed_rate():
    p = warm.plan("imagenet@v1", device_bytes=2 * GiB, stored_bytes=GiB, arc_max=512 * MiB, l2arc_bytes=4 * GiB,
                  l2arc_rate=64 * MiB)
    assert p.fits and p.read_bytes == 2 * GiB
    # the ARC holds 460.8 MiB of the 1 GiB stored: 45 % of the device, on a MiB boundary
    assert p.arc_end == 921 * MiB
    assert p.pace == 128 * MiB  # 64 MiB/s of stored data, 2 device bytes per stored byte
    assert "held to the L2ARC's feed rate (64.0 MiB/s of stored data" in p.lines[1]


def test_a_version_larger_than_the_cache_stops_early_and_says_so():
    p = warm.plan("imagenet@v1", device_bytes=100 * GiB, stored_bytes=40 * GiB, arc_max=24 * GiB,
                  l2arc_bytes=0, l2arc_rate=64 * MiB)
    assert not p.fits and p.stops_early
    assert p.cache_bytes == int(0.9 * 24 * GiB)
    # the same fraction of the device as the cache holds of the data (54 GiB less a byte), down to a MiB boundary
    assert p.read_bytes == 54 * GiB - MiB
    assert p.pace is None and p.arc_end == p.read_bytes  # no L2ARC: nothing to pace for
    assert p.warmed_stored_bytes == (54 * GiB - MiB) * 40 // 100
    assert p.lines == ["version is 40.0 GiB (stored), cache holds 21.6 GiB (ARC 21.6 GiB: 90% of c_max 24.0 GiB; "
                       "no L2ARC): warming the first 54.0 GiB of its 100 GiB device (about 21.6 GiB of its data); "
                       "epoch 1 will still read the rest from disk"]


def test_larger_than_the_arc_and_the_l2arc_both():
    p = warm.plan("imagenet@v1", device_bytes=100 * GiB, stored_bytes=100 * GiB, arc_max=10 * GiB,
                  l2arc_bytes=20 * GiB, l2arc_rate=100 * MiB)
    assert p.stops_early and p.read_bytes == 29 * GiB and p.arc_end == 9 * GiB and p.pace == 100 * MiB
    assert "at least 205 s for that part" in p.lines[1]  # 20 GiB at 100 MiB/s


def test_without_an_l2arc_only_the_arc_counts():
    p = warm.plan("imagenet@v1", device_bytes=GiB, stored_bytes=GiB, arc_max=GiB, l2arc_rate=64 * MiB)
    assert p.l2arc_bytes == 0 and p.stops_early and p.read_bytes == 921 * MiB and p.pace is None
    assert "no L2ARC" in p.lines[0]


def test_an_l2arc_that_keeps_none_of_the_version_is_not_counted():
    p = warm.plan("imagenet@v1", device_bytes=GiB, stored_bytes=GiB, arc_max=GiB, l2arc_bytes=4 * GiB,
                  secondarycache="metadata", l2arc_rate=64 * MiB)
    assert p.l2arc_bytes == 0 and p.stops_early
    assert "keeps none of its data (secondarycache=metadata)" in p.lines[1]


def test_arc_only_leaves_the_l2arc_out():
    p = warm.plan("imagenet@v1", device_bytes=GiB, stored_bytes=GiB, arc_max=GiB, l2arc_bytes=4 * GiB,
                  l2arc_rate=64 * MiB, arc_only=True)
    assert p.l2arc_bytes == 0 and p.read_bytes == 921 * MiB and p.pace is None
    assert "(--arc-only)" in p.lines[1]


@pytest.mark.parametrize("device, stored", [(0, 0), (GiB, 0), (0, GiB)])
def test_a_version_without_data_reads_nothing(device, stored):
    p = warm.plan("empty@v1", device_bytes=device, stored_bytes=stored, arc_max=GiB, l2arc_bytes=GiB)
    assert p.read_bytes == 0 and p.fits and not p.stops_early and p.pace is None
    assert p.lines[0] == "empty@v1 holds no data: nothing to read"
    assert p.to_dict()["explanation"] == p.lines


def test_a_version_the_arc_keeps_no_data_of_is_refused():
    with pytest.raises(UserError, match="primarycache=metadata: the ARC keeps none of its data"):
        warm.plan("imagenet@v1", device_bytes=GiB, stored_bytes=GiB, arc_max=GiB, primarycache="metadata")


def test_the_l2arc_feed_rate_from_the_module_parameters():
    assert warm.l2arc_rate({"l2arc_write_max": "67108864\n", "l2arc_feed_secs": "1"}) == 64 * MiB
    assert warm.l2arc_rate({"l2arc_write_max": "67108864", "l2arc_feed_secs": "2"}) == 32 * MiB
    assert warm.l2arc_rate({}) == 8 * MiB  # ZFS's defaults
    assert warm.l2arc_rate({"l2arc_write_max": "x", "l2arc_feed_secs": "0"}) == 8 * MiB


# --- the pool's cache devices ----------------------------------------------------------------------------


def test_cache_devices_and_their_sizes_from_zpool_status():
    assert zpool.parse_cache_space(data("zfs23b", "tank_status.json"), "tank") == {NVME: TANK_L2ARC}
    assert zpool.parse_cache_space(data("zfs23b", "status_nocache.json")) == {}


def test_a_cache_device_that_is_not_online_holds_nothing():
    def offline(doc):  # the lab recorded no cache device out of service: tank's, marked REMOVED
        next(iter(doc["pools"]["tank"]["l2cache"].values()))["state"] = "REMOVED"

    assert zpool.parse_cache_space(derive_json("zfs23b/tank_status.json", edit=offline), "tank") == {}


# --- the reading loop, on a file standing in for the device ---------------------------------------------


@pytest.fixture
def device(tmp_path):
    path = tmp_path / "zvol"
    path.write_bytes(os.urandom(10 * MiB + 123))
    return str(path)


def test_the_loop_reads_the_device_in_sequence_to_the_end(device):
    seen = []
    r = warm.read_device(device, 10 * MiB + 123, chunk=MiB, progress=seen.append)
    assert (r.bytes_read, r.complete) == (10 * MiB + 123, True)
    assert seen == [n * MiB for n in range(1, 11)] + [10 * MiB + 123]


def test_the_loop_stops_where_it_was_told(device):
    r = warm.read_device(device, 3 * MiB, chunk=MiB)
    assert (r.bytes_read, r.complete) == (3 * MiB, True)


def test_a_device_shorter_than_asked_ends_the_loop(device):
    r = warm.read_device(device, 20 * MiB)
    assert (r.bytes_read, r.complete) == (10 * MiB + 123, False)


def test_past_the_arcs_share_the_loop_keeps_to_the_pace(device):
    now, slept = [100.0], []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    r = warm.read_device(device, 8 * MiB, arc_end=4 * MiB, pace=MiB, chunk=MiB, clock=lambda: now[0], sleep=sleep)
    assert r.bytes_read == 8 * MiB and slept == [1.0, 1.0, 1.0, 1.0]  # 4 MiB past the share at 1 MiB/s
    assert r.seconds == 4.0 and r.mb_per_s == pytest.approx(8 * MiB / 1e6 / 4)


def test_without_a_pace_the_loop_never_waits(device):
    r = warm.read_device(device, 8 * MiB, arc_end=0, pace=None, chunk=MiB, sleep=lambda s: pytest.fail("slept"))
    assert r.complete


# --- the command ----------------------------------------------------------------------------------------

SNAPSHOT = "tank/datasets/shared@v1"


def listing(rows):
    return lambda argv: (0, snapshot_listing([r for r in rows if r["name"].startswith((argv[-1] + "/",
                                                                                        argv[-1] + "@"))]), "")


def snapshot_props(volsize: int, referenced: int, primarycache: str = "all") -> str:
    """`zfs get -j -p volsize,referenced,primarycache,secondarycache` of the version, derived from the recorded
    `zfs get -j -p all` of a volume (zfs23b/get_all_vol1_s.json): renamed to the snapshot, only those four
    properties kept, with the sizes given."""
    def keep(doc):
        obj = doc["datasets"][SNAPSHOT]
        obj["type"] = "SNAPSHOT"
        obj["properties"] = {k: v for k, v in obj["properties"].items() if k in warm_command.PROPS}

    return derive_json("zfs23b/get_all_vol1_s.json", rename={"z23_rec/vol1": SNAPSHOT, "z23_rec": "tank"},
                       properties={SNAPSHOT: {"volsize": [str(volsize), "LOCAL", "-"],
                                              "referenced": [str(referenced), "NONE", "-"],
                                              "primarycache": [primarycache, "DEFAULT", "-"]}}, edit=keep)


@pytest.fixture
def node(monkeypatch, tmp_path):
    """fabricctl warm on a storage node with dataset shared (version v1: an 8 MiB device, 6 MiB stored, its
    device a temporary file), tank's recorded `zpool status` (one 4 GiB cache device), the arcstats sample and
    the lab's L2ARC parameters. run(*args) -> exit status; run.answers, run.arcstats to change them."""
    volumes = [{"name": "tank/datasets/shared", "createtxg": "1", "fabric:managed": "true", "fabric:kind": "dataset",
                "fabric:fs": "ext4", "volsize": str(8 * MiB)}]
    versions = [{"name": SNAPSHOT, "createtxg": "2", "creation": "1000", "fabric:managed": "true",
                 "fabric:kind": "dataset-version", "fabric:fs": "ext4", "userrefs": "1", "used": "0",
                 "referenced": str(6 * MiB), "fabric:version": "v1"}]
    answers = {("zfs", "list", "-j", "-p", "-t", "volume"): listing(volumes),
               ("zfs", "list", "-j", "-p", "-t", "snapshot"): listing(versions),
               ("zfs", "get", "-j", "-p", "volsize,referenced,primarycache,secondarycache", SNAPSHOT):
                   (0, snapshot_props(8 * MiB, 6 * MiB), ""),
               ("zpool", "status", "-j", "--json-int", "-P", "tank"): (0, data("zfs23b", "tank_status.json"), ""),
               ("udevadm", "settle"): (0, "", ""),
               ("zfs", "get", "-j", "-p", "all", "tank/datasets/shared"): (0, '{"datasets": {}}', "")}  # no tag
    monkeypatch.setattr(context, "LocalRunner", lambda dry_run: AnsweringRunner(answers, dry_run=dry_run,
                                                                                default=None))
    zvol = tmp_path / "shared@v1"
    zvol.write_bytes(os.urandom(8 * MiB))
    devices = []
    monkeypatch.setattr(datasets, "readable_device", lambda ctx, export: (devices.append(export.device), str(zvol))[1])
    arcstats = tmp_path / "arcstats"
    arcstats.write_text(ARCSTATS)
    monkeypatch.setattr(warm_command, "arcstats_path", str(arcstats))
    sysfs = tmp_path / "parameters"
    sysfs.mkdir()
    (sysfs / "l2arc_write_max").write_text("67108864\n")
    (sysfs / "l2arc_feed_secs").write_text("1\n")
    monkeypatch.setattr(warm_command, "sysfs", sysfs)
    config = tmp_path / "config.yml"
    config.write_text(fabricctl_config())
    records = []

    def run(*args):
        return main.main(["--config", str(config), "warm", *args], sink=records.append)

    run.answers, run.arcstats, run.devices, run.records = answers, arcstats, devices, records
    return run


def after_the_read(monkeypatch, fn):
    """Call fn() once the command's read is done (the ARC's kstat changed by then)."""
    real = warm.read_device

    def read(*args, **kwargs):
        out = real(*args, **kwargs)
        fn()
        return out

    monkeypatch.setattr(warm, "read_device", read)


def test_warm_json_reports_the_read_and_the_arc_before_and_after(node, monkeypatch, capsys):
    assert warm_command.MUTATING is False
    after_the_read(monkeypatch, lambda: node.arcstats.write_text(
        ARCSTATS.replace("25165824000", "25174212608").replace("21474836480", "21475885056")))
    assert node("shared@v1", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert node.devices == ["/dev/zvol/tank/datasets/shared@v1"]
    assert (out["ref"], out["bytes_read"], out["stopped_early"], out["complete"]) == ("shared@v1", 8 * MiB, False, True)
    assert out["seconds"] >= 0 and out["mb_per_s"] >= 0
    assert (out["arc_before"]["size"], out["arc_after"]["size"]) == (25165824000, 25174212608)
    assert (out["arc_before"]["l2_size"], out["arc_after"]["l2_size"]) == (21474836480, 21475885056)
    assert set(out["arc_before"]) == set(warm.ARC_FIELDS) and out["arc_before"]["c_max"] == 24 * GiB
    assert out["l2arc_devices"] == {NVME: TANK_L2ARC}
    plan = out["plan"]
    assert (plan["device_bytes"], plan["stored_bytes"], plan["read_bytes"], plan["fits"]) == (8 * MiB, 6 * MiB,
                                                                                              8 * MiB, True)
    assert plan["l2arc_bytes"] == TANK_L2ARC and plan["pace"] is None  # 6 MiB fit the ARC's share
    assert out["summary"] == "shared@v1 is warm: all of it was read"
    assert node.records == []  # a read: no journal record


def test_warm_stops_early_when_the_version_is_larger_than_the_cache(node, monkeypatch, capsys):
    # a 4 MiB ARC and no cache device (tank's removed from its recorded status): 3.6 MiB of the 8 MiB version
    node.arcstats.write_text(ARCSTATS.replace("25769803776", str(4 * MiB)))
    node.answers[("zpool", "status", "-j", "--json-int", "-P", "tank")] = (
        0, derive_json("zfs23b/tank_status.json", remove=[["pools", "tank", "l2cache"]]), "")
    node.answers[("zfs", "get", "-j", "-p", "volsize,referenced,primarycache,secondarycache", SNAPSHOT)] = (
        0, snapshot_props(8 * MiB, 8 * MiB), "")
    assert node("shared@v1", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["bytes_read"], out["stopped_early"], out["complete"]) == (3 * MiB, True, True)
    assert out["l2arc_devices"] == {} and out["plan"]["l2arc_bytes"] == 0 and out["plan"]["stops_early"] is True
    assert out["summary"] == ("version is 8.0 MiB, cache holds 3.6 MiB: warmed the first 3.0 MiB of its 8.0 MiB "
                              "device (about 3.0 MiB of its data); epoch 1 will still read the rest from disk")


def test_warm_in_text_says_the_plan_and_what_it_read_with_no_progress_off_a_terminal(node, capsys):
    assert node("shared@v1") == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("version is 6.0 MiB (stored; its device 8.0 MiB), cache holds 25.6 GiB")
    assert lines[1].startswith("read 8.0 MiB in ")
    assert "ARC 23.4 GiB -> 23.4 GiB, L2ARC 20.0 GiB -> 20.0 GiB" in lines[1]
    assert lines[2] == "shared@v1 is warm: all of it was read"
    assert captured.err == ""  # stderr is no terminal here: no progress bar


@pytest.mark.parametrize("ref, words", [("shared@v9", "unknown version shared@v9 (versions of shared: v1)"),
                                        ("nope@v1", "unknown dataset 'nope'")])
def test_an_unknown_version_names_fabricctl_list(node, capsys, ref, words):
    assert node(ref) == 1
    err = capsys.readouterr().err
    assert words in err and "`fabricctl list` shows the versions on this node" in err


def test_a_version_without_its_device_says_how_to_make_it(node, monkeypatch, capsys):
    monkeypatch.setattr(datasets, "readable_device", READABLE_DEVICE)  # the real one: this machine has no such zvol
    assert node("shared@v1") == 1
    err = capsys.readouterr().err
    assert "/dev/zvol/tank/datasets/shared@v1 does not exist" in err
    assert "zfs set snapdev=visible tank/datasets/shared" in err


def test_a_version_the_arc_keeps_no_data_of_is_refused_by_the_command(node, capsys):
    node.answers[("zfs", "get", "-j", "-p", "volsize,referenced,primarycache,secondarycache", SNAPSHOT)] = (
        0, snapshot_props(8 * MiB, 8 * MiB, primarycache="metadata"), "")
    assert node("shared@v1") == 1
    assert "primarycache=metadata" in capsys.readouterr().err


def test_without_the_arcs_kstat_the_command_says_where_to_run(node, capsys):
    node.arcstats.unlink()
    assert node("shared@v1", "--json") == 1
    assert "is the zfs module loaded?" in capsys.readouterr().err
