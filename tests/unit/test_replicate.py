"""The replication planner (fabric_core.services.replicate.plan), its commands, the stream pump, the restricted
replica-serve request parser (fabricctl.replication.parse_request) and the configuration of peers."""

from __future__ import annotations

import json
import os
import threading

import pytest
from fabric_core.base.errors import NotFound, UnsafeOperation, UserError
from fabric_core.services import replicate
from fabric_core.services.replicate import Point, Side, Transfer

DS = "tank/datasets/imagenet"


def side(*snaps, exists=True, bookmarks=(), written=0, token="", managed=True, available=10 << 30,
         origin="storage1") -> Side:
    """A volume with snapshots given as (name, guid) in creation order (txg 10, 20, ...); when it exists, a replica
    from storage1 (the node plan() sends from here) unless ``origin`` says otherwise ("" made there)."""
    return Side(DS, exists=exists, snapshots=[Point(n, g, 10 * (i + 1)) for i, (n, g) in enumerate(snaps)],
                bookmarks=[Point(n, g, t, True) for n, g, t in bookmarks], written=written, resume_token=token,
                managed=managed if exists else False, available=available, origin=origin if exists else "")


def plan(src: Side, dst: Side, wanted: list[str], **kw) -> replicate.Plan:
    """replicate.plan from storage1 (unless ``origin`` is given)."""
    return replicate.plan(src, dst, wanted, **{"origin": "storage1", **kw})


SRC = side(("v1", "111"), ("v2", "222"), ("v3", "333"))


def test_a_first_replication_is_one_full_send():
    p = plan(SRC, side(exists=False), ["v1"], node="storage2")
    assert p.transfers == [Transfer("v1")] and p.transfers[0].kind == "full" and not p.present


def test_several_versions_to_a_new_target_send_the_oldest_whole_then_incrementals():
    p = plan(SRC, side(exists=False), ["v3", "v1", "v2"], node="storage2")
    assert [(t.snapshot, t.base) for t in p.transfers] == [("v1", None), ("v2", "@v1"), ("v3", "@v2")]


def test_a_later_version_is_sent_incrementally_from_the_newest_shared_one():
    p = plan(SRC, side(("v1", "111"), ("v2", "222")), ["v3"], node="storage2")
    assert p.transfers == [Transfer("v3", base="@v2")]


def test_a_version_the_target_has_with_the_same_guid_is_not_sent_again():
    p = plan(SRC, side(("v1", "111"), ("v2", "222")), ["v2"], node="storage2")
    assert p.transfers == [] and p.present == ["v2"]


def test_a_version_the_target_has_with_another_guid_is_refused_naming_both():
    with pytest.raises(UserError) as err:
        plan(SRC, side(("v1", "111"), ("v2", "999")), ["v2"], node="storage2")
    assert "999" in err.value.problem and "222" in err.value.problem and "diverged" in err.value.problem


def test_the_base_is_a_bookmark_when_the_snapshot_is_gone_here():
    src = side(("v3", "333"), bookmarks=[("v1", "111", 10), ("v2", "222", 20)])
    src.snapshots[0] = Point("v3", "333", 30)
    p = plan(src, side(("v1", "111"), ("v2", "222")), ["v3"], node="storage2")
    assert p.transfers == [Transfer("v3", base="#v2")]


def test_a_snapshot_is_preferred_to_its_bookmark_as_base():
    src = side(("v1", "111"), ("v2", "222"), ("v3", "333"), bookmarks=[("v2", "222", 20)])
    assert plan(src, side(("v1", "111"), ("v2", "222")), ["v3"]).transfers == [Transfer("v3", base="@v2")]


def test_a_target_with_no_version_in_common_is_refused():
    with pytest.raises(UserError) as err:
        plan(SRC, side(("other", "777")), ["v1"], node="storage2")
    assert "shares no snapshot" in err.value.problem and "storage2" in err.value.problem


def test_a_version_older_than_the_targets_newest_is_refused():
    with pytest.raises(UserError) as err:
        plan(SRC, side(("v1", "111"), ("v3", "333")), ["v2"], node="storage2")
    assert "newer than v2" in err.value.problem


def test_a_target_written_by_hand_is_refused_unless_forced():
    dst = side(("v1", "111"), written=4096)
    with pytest.raises(UnsafeOperation) as err:
        plan(SRC, dst, ["v2"], node="storage2")
    assert "4096 bytes written" in err.value.problem and "--force" in err.value.fix
    p = plan(SRC, dst, ["v2"], node="storage2", force=True)
    assert p.transfers == [Transfer("v2", base="@v1", force=True)] and "rolled back to @v1" in p.notes[0]


def test_a_snapshot_taken_by_hand_on_the_target_counts_as_a_change():
    with pytest.raises(UnsafeOperation) as err:
        plan(SRC, side(("v1", "111"), ("mine", "555")), ["v2"], node="storage2")
    assert "snapshots made there: mine" in err.value.problem


def test_only_the_first_transfer_rolls_back():
    p = plan(SRC, side(("v1", "111"), written=1), ["v2", "v3"], force=True)
    assert [t.force for t in p.transfers] == [True, False]


def test_an_interrupted_receive_is_resumed_first_and_counted_as_arrived():
    p = plan(SRC, side(("v1", "111"), token="1-abc"), ["v2", "v3"], node="storage2", resume_name="v2")
    assert p.transfers == [Transfer("v2", resume_token="1-abc"), Transfer("v3", base="@v2")]
    assert p.transfers[0].kind == "resume"


def test_an_interrupted_full_receive_is_resumed():
    p = plan(SRC, side(exists=True, token="1-def"), ["v1"], resume_name="v1")
    assert p.transfers == [Transfer("v1", resume_token="1-def")] and p.present == []


def test_a_resume_token_for_a_snapshot_this_node_lacks_is_refused_with_the_fix():
    with pytest.raises(UserError) as err:
        plan(SRC, side(("v1", "111"), token="1-x"), ["v2"], resume_name="gone")
    assert "zfs receive -A" in err.value.fix


def test_a_target_volume_fabricctl_does_not_own_is_never_written():
    with pytest.raises(UnsafeOperation):
        plan(SRC, side(("v1", "111"), managed=False), ["v2"])


def test_an_unknown_version_names_the_ones_there_are():
    with pytest.raises(NotFound) as err:
        plan(SRC, side(exists=False), ["v9"])
    assert "v1, v2, v3" in err.value.problem


def test_send_and_receive_commands():
    # never -p: a plain stream carries no property (the target refuses a package, check_stream)
    assert replicate.send_argv(DS, Transfer("v2", base="@v1"), raw=False) == [
        "zfs", "send", "-c", "-L", "-e", "-i", f"{DS}@v1", f"{DS}@v2"]
    assert replicate.send_argv(DS, Transfer("v1"), raw=True, estimate=True) == [
        "zfs", "send", "-n", "-P", "-w", f"{DS}@v1"]
    assert replicate.send_argv(DS, Transfer("v2", base="#v1"), raw=False)[-3:] == ["-i", f"{DS}#v1", f"{DS}@v2"]
    assert replicate.send_argv(DS, Transfer("v2", resume_token="1-t"), raw=False) == ["zfs", "send", "-t", "1-t"]
    assert replicate.receive_argv(DS, origin="storage1", force=True) == [
        "zfs", "receive", "-s", "-u", "-F", "-o", "readonly=on", "-o", "fabric:managed=true",
        "-o", "fabric:origin=storage1", DS]
    # the request's volume properties first: the target's own win over any of them (check_props refuses those)
    assert replicate.receive_argv(DS, origin="storage1", props={"fabric:kind": "dataset"}) == [
        "zfs", "receive", "-s", "-u", "-o", "fabric:kind=dataset", "-o", "readonly=on", "-o", "fabric:managed=true",
        "-o", "fabric:origin=storage1", DS]
    assert replicate.snapshot_props_argv(f"{DS}@v1", {"fabric:note": "a b", "fabric:files": "3"}) == [
        "zfs", "set", "fabric:note=a b", "fabric:files=3", f"{DS}@v1"]


def test_send_estimates_and_resume_token_names_are_read_from_zfs_output():
    assert replicate.parse_estimate("full\ttank/datasets/imagenet@v1\t1048576\nsize\t1048576\n") == 1048576
    assert replicate.parse_estimate("") == 0
    text = "resume token contents:\nnvlist version: 0\n\tobject = 0x1\n\ttoname = tank/datasets/imagenet@v2\n"
    assert replicate.parse_token_name(text) == "v2"


def test_side_round_trips_through_json_and_refuses_garbage():
    s = side(("v1", "111"), bookmarks=[("v0", "100", 5)], token="1-t", written=7)
    assert Side.from_dict(s.to_dict()) == s
    with pytest.raises(replicate.FabricError):
        Side.from_dict({"dataset": DS})


def test_the_pump_moves_every_byte_and_reports_progress():
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    payload = os.urandom(3 * replicate.SPLICE_CHUNK + 123)
    seen: list[int] = []
    received = bytearray()

    def write():
        with os.fdopen(w1, "wb") as fh:
            fh.write(payload)

    def read():
        with os.fdopen(r2, "rb") as fh:
            received.extend(fh.read())

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    total = replicate.Pump(progress=seen.append).run(r1, w2)
    os.close(w2)
    for t in threads:
        t.join()
    os.close(r1)
    assert total == len(payload) and bytes(received) == payload and seen[-1] == len(payload)


def test_pacing_keeps_to_the_limit():
    assert replicate.pace(10 << 20, 1.0, 5 << 20) == pytest.approx(1.0)
    assert replicate.pace(1 << 20, 1.0, 5 << 20) == 0.0
    assert replicate.pace(1 << 30, 0.0, 0) == 0.0


# ---- replica-serve: what another storage node's key may ask

ROOTS = ("tank/datasets", "tank/checkpoints")


def test_replica_serve_accepts_state_and_receive_under_its_roots():
    from fabricctl.replication import parse_request

    assert parse_request(["state", DS], ROOTS, "storage1") == {"verb": "state", "dataset": DS}
    assert parse_request(["receive", "tank/checkpoints/llama", "step-10", "storage1", "--force"], ROOTS,
                         "storage1") == {"verb": "receive", "dataset": "tank/checkpoints/llama", "base": "step-10",
                                         "origin": "storage1", "force": True, "props": {}, "snapshot_props": {}}
    assert parse_request(["receive", DS, "-", "storage1"], ROOTS, "storage1")["base"] is None
    assert parse_request(["export", DS, "v3", "1234567", "gpu1", "gpu2"], ROOTS, "storage1") == {
        "verb": "export", "dataset": DS, "version": "v3", "guid": "1234567", "published": False,
        "hosts": ["gpu1", "gpu2"]}
    # publish --from-nodes: the other node tags the hosts' ACLs as a publish's (status checks their sessions)
    assert parse_request(["export", DS, "v3", "1234567", "--published", "gpu1"], ROOTS, "storage1") == {
        "verb": "export", "dataset": DS, "version": "v3", "guid": "1234567", "published": True, "hosts": ["gpu1"]}
    # the fabric:* properties of the volume and of the arriving snapshot travel in the request, not in the stream
    req = parse_request(["receive", DS, "v1", "storage1", "--prop", "fabric:kind=dataset", "--snapshot-prop",
                         "fabric:note=a=b c", "--snapshot-prop", "fabric:metric.loss=0.5"], ROOTS, "storage1")
    assert req["props"] == {"fabric:kind": "dataset"} and not req["force"]
    assert req["snapshot_props"] == {"fabric:note": "a=b c", "fabric:metric.loss": "0.5"}


@pytest.mark.parametrize("words", [
    [], ["sh"], ["destroy", DS], ["state"], ["state", DS, "extra"], ["state", "tank/other/x"], ["state", "tank"],
    ["state", "tank/datasets"], ["state", "tank/datasets/a/b"], ["state", "tank/datasets/x@v1"],
    ["receive", DS, "v1"], ["receive", DS, "v1;rm", "storage1"], ["receive", DS, "v1", "storage1", "--yes"],
    ["receive", DS, "v1", "bad host!"], ["state", "../etc"],
    # export: a dataset version only (not a checkpoint job), a numeric GUID, at least one host name
    ["export", DS, "v1", "123"], ["export", "tank/checkpoints/llama", "step-10", "123", "gpu1"],
    ["export", DS, "v1", "12a", "gpu1"], ["export", DS, "v1;x", "123", "gpu1"], ["export", DS, "v1", "123", "gpu 1"],
    ["export", DS, "v1", "123", *[f"gpu{i}" for i in range(300)]], ["export", DS, "v1", "123", "--published"],
    ["export", DS, "v1", "123", "gpu1", "--published"],
    # a key speaks for its own node only (the forced command's --peer): storage1's key cannot receive for storage3
    ["receive", DS, "-", "storage3"], ["receive", DS, "-", "storage1", "--force", "--force"],
    # properties: the fabric's own only, never the target's own, each once, at most MAX_PROPS
    ["receive", DS, "-", "storage1", "--prop", "mountpoint=/etc/cron.d"],
    ["receive", DS, "-", "storage1", "--prop", "canmount=on"],
    ["receive", DS, "-", "storage1", "--prop", "sharenfs=on"],
    ["receive", DS, "-", "storage1", "--snapshot-prop", "sharesmb=on"],
    ["receive", DS, "-", "storage1", "--prop", "fabric:origin=storage3"],
    ["receive", DS, "-", "storage1", "--prop", "fabric:managed=false"],
    ["receive", DS, "-", "storage1", "--snapshot-prop", "fabric:published=gpu1"],
    ["receive", DS, "-", "storage1", "--prop", "com.sun:auto-snapshot=true"],
    ["receive", DS, "-", "storage1", "--prop", "fabric:Kind=x"], ["receive", DS, "-", "storage1", "--prop"],
    ["receive", DS, "-", "storage1", "--prop", "novalue"],
    ["receive", DS, "-", "storage1", "--prop", "fabric:a=1", "--prop", "fabric:a=2"],
    ["receive", DS, "-", "storage1", "--prop", "fabric:note=" + "x" * 8192],
    ["receive", DS, "-", "storage1", *[w for i in range(65) for w in ("--prop", f"fabric:p{i}=1")]],
])
def test_replica_serve_refuses_everything_else(words):
    from fabricctl.replication import parse_request

    with pytest.raises(UserError):
        parse_request(words, ROOTS, "storage1")


def test_replica_serve_refuses_a_key_bound_to_no_node():
    from fabricctl.replication import parse_request

    for words in (["state", DS], ["receive", DS, "-", "storage1"]):
        with pytest.raises(UserError) as err:
            parse_request(words, ROOTS, "")
        assert "--peer" in err.value.problem and "playbooks/fabricctl.yml" in err.value.fix


def test_a_requests_fields_go_to_the_journal_as_they_arrived():
    from fabricctl.replication import describe_request

    assert describe_request(["receive", DS, "-", "storage3", "--force", "--prop", "fabric:kind=x"], "storage2") == {
        "peer": "storage2", "verb": "receive", "dataset": DS, "base": "-", "origin": "storage3", "force": "yes",
        "props": "fabric:kind"}
    assert describe_request(["export", DS, "v1", "42", "gpu1", "gpu2"], "storage2") == {
        "peer": "storage2", "verb": "export", "dataset": DS, "version": "v1", "guid": "42", "published": "no",
        "hosts": "gpu1,gpu2"}
    junk = describe_request(["id", ">", "/tmp/x\n"], "")
    assert junk["peer"] == "-" and junk["verb"] == "id" and "\n" not in junk["words"]
    assert len(describe_request(["receive", "x" * 500], "s")["dataset"]) == 200


# ---- the target's own rule for the volume a receive writes (replica-serve and the source's planner)


@pytest.mark.parametrize(("dst", "force", "refused"), [
    (side(exists=False), False, None),
    (side(exists=False), True, "does not exist"),  # -F names no volume to roll back
    (side(("v1", "111")), False, None),  # storage1's own replica
    (side(("v1", "111")), True, None),  # --force into storage1's own replica stays allowed
    (side(origin=""), True, "was made there"),  # a live checkpoint volume (no snapshot yet)
    (side(("v1", "111"), origin=""), False, "was made there"),  # a sealed version of the target's own
    (side(("v1", "111"), origin="storage3"), True, "replica from storage3"),
    (side(("v1", "111"), origin="storage3"), False, "replica from storage3"),
    (side(("v1", "111"), managed=False), False, "does not own"),
])
def test_a_receive_writes_only_a_new_volume_or_the_senders_own_replica(dst, force, refused):
    if refused is None:
        replicate.check_receive(dst, origin="storage1", force=force, node="storage2")
        return
    with pytest.raises(UnsafeOperation) as err:
        replicate.check_receive(dst, origin="storage1", force=force, node="storage2")
    assert refused in err.value.problem and err.value.fix


def test_the_source_plans_with_the_targets_rule():
    with pytest.raises(UnsafeOperation) as err:
        plan(SRC, side(("v1", "111"), origin=""), ["v2"], node="storage2")
    assert "was made there" in err.value.problem
    with pytest.raises(UnsafeOperation) as err:
        plan(SRC, side(("v1", "111"), origin="storage3"), ["v2"], node="storage2")
    assert "only storage3 replicates into it" in err.value.problem


# ---- the target's check of the stream's first record (recorded on the lab: OpenZFS 2.3, storage1)


def _record(name: str) -> bytes:
    import base64

    return base64.b64decode(_data(name))


def test_a_plain_volume_stream_is_accepted_and_names_its_snapshot():
    header = replicate.parse_stream_header(_record("stream_volume.b64"))
    assert header.objset == "volume" and header.header_type == replicate.SUBSTREAM and header.fromguid == 0
    assert replicate.check_stream(header, DS) == "s1"


@pytest.mark.parametrize(("name", "refused"), [
    ("stream_filesystem.b64", "carries a file system"),  # zfs send of a file system (mountpoint, canmount...)
    ("stream_package.b64", "is a package"),  # zfs send -p: properties, and possibly more datasets
])
def test_a_file_system_or_a_package_is_refused_before_anything_is_received(name, refused):
    with pytest.raises(UnsafeOperation) as err:
        replicate.check_stream(replicate.parse_stream_header(_record(name)), DS)
    assert refused in err.value.problem


def test_a_stream_that_is_not_one_is_refused():
    with pytest.raises(UserError):
        replicate.parse_stream_header(b"\0" * 100)  # ended before its first record
    with pytest.raises(UnsafeOperation):
        replicate.check_stream(replicate.parse_stream_header(b"#!/bin/sh\n" + b"x" * 400), DS)
    # another byte order is read by its magic; its header type and objset type checked as well
    volume = _record("stream_volume.b64")
    swapped = replicate.parse_stream_header(struct_swap(volume))
    assert swapped.magic_ok and swapped.objset == "volume" and swapped.toname == "tank/peertest-vol@s1"


def struct_swap(record: bytes) -> bytes:
    """The same first record as a machine of the other byte order writes it."""
    import struct

    fields = struct.unpack_from("<" + replicate._BEGIN, record)
    return struct.pack(">" + replicate._BEGIN, *fields) + record[replicate.RECORD_SIZE:]


# ---- configuration: this node and the other storage nodes


def _cfg(**extra):
    from fabricctl import config

    raw = {"pool": "tank", "iqn_base": "iqn.2026-11.io.fabric.lab.fabricctl", "portal": {"ip": "10.77.0.11"},
           "insecure_no_chap": True, **extra}
    return config.from_dict(raw)


def test_the_configuration_names_this_node_and_the_other_storage_nodes():
    cfg = _cfg(node="storage1", storage_nodes={"storage1": {"address": "10.77.0.11"},
                                              "storage2": {"address": "10.77.0.12"}})
    assert cfg.node == "storage1" and list(cfg.storage_nodes) == ["storage2"]
    assert cfg.storage_node("storage2").address == "10.77.0.12"
    with pytest.raises(UserError) as err:
        cfg.storage_node("storage1")
    assert "this node" in err.value.problem
    with pytest.raises(NotFound) as err:
        cfg.storage_node("storage3")
    assert "storage2" in err.value.problem and "storage_nodes" in err.value.fix


def test_a_storage_node_without_an_address_is_refused():
    with pytest.raises(UserError) as err:
        _cfg(node="storage1", storage_nodes={"storage2": {}})
    assert "storage_nodes.storage2.address" in err.value.problem


# ---- reading a side, on outputs recorded on the lab (tests/unit/data/replicate: OpenZFS 2.3.9)

def _data(name: str) -> str:
    from support import data

    return data("replicate", name)


def test_snapshots_and_bookmarks_are_read_with_their_guids_oldest_first():
    snaps, marks = replicate.parse_points(_data("list_points.json"), "tank/datasets/rtest")
    assert [p.name for p in snaps] == ["v1", "v2", "v3"] and all(p.guid.isdigit() for p in snaps)
    assert [p.txg for p in snaps] == sorted(p.txg for p in snaps)
    assert [p.name for p in marks] == ["v1", "v2", "v3"] and all(p.bookmark for p in marks)
    assert [p.guid for p in marks] == [p.guid for p in snaps]  # a bookmark keeps its snapshot's GUID


def test_a_replica_is_read_with_its_resume_token_and_origin():
    from support import AnsweringRunner

    runner = AnsweringRunner({("zfs", "get"): (0, _data("get_replica_resumable.json"), ""),
                              ("zfs", "list"): (0, _data("list_points_replica.json"), "")})
    s = replicate.read_side(runner, "tank/datasets/rtest")
    assert s.exists and s.managed and s.origin == "storage1" and s.resume_token.startswith("1-")
    assert not s.encrypted and s.available > 0 and [p.name for p in s.snapshots] == ["v1", "v2", "v3"]
    runner = AnsweringRunner({("zfs", "get"): (1, "", _data("get_missing.stderr"))})
    assert replicate.read_side(runner, "tank/datasets/nothere") == Side("tank/datasets/nothere")


def test_the_resume_tokens_snapshot_and_the_send_size_are_read_from_zfs_send():
    assert replicate.parse_token_name(_data("send_token_nv.txt")) == "v4"
    assert replicate.parse_estimate(_data("send_estimate.txt")) == 170501312


def test_the_recorded_replica_and_source_plan_a_resume_then_nothing_more():
    src = Side("tank/datasets/rtest", exists=True, managed=True,
               snapshots=[*replicate.parse_points(_data("list_points.json"), "tank/datasets/rtest")[0],
                          Point("v4", "3810000000000000000", 150)])
    dst = Side("tank/datasets/rtest", exists=True, managed=True, resume_token="1-x", origin="storage1",
               snapshots=replicate.parse_points(_data("list_points_replica.json"), "tank/datasets/rtest")[0])
    p = plan(src, dst, ["v3", "v4"], resume_name="v4")
    assert [t.kind for t in p.transfers] == ["resume"] and p.present == ["v3"]


# ---- identity: the LUN serial of a version comes from its snapshot's GUID


def test_a_versions_lun_serial_is_the_same_on_every_node_and_differs_between_versions():
    from fabric_core.storage import lio

    a = lio.snapshot_serial("15899846609521066419")
    assert a == lio.snapshot_serial("15899846609521066419") and a != lio.snapshot_serial("1364973519")
    target = {"name": "ds.x.v1", "portals": [{"ip": "10.77.0.11"}],
              "luns": [{"name": "x.v1", "device": "/dev/zvol/tank/datasets/x@v1", "wwn": a}]}
    assert lio.parse_desired({"base_iqn": "iqn.2026-11.io.fabric.lab", "targets": [target]}).targets[0].luns[0].wwn == a
    with pytest.raises(UserError):
        lio.snapshot_serial("not-a-guid")


def test_publishing_gives_a_new_export_the_guid_serial_and_keeps_a_live_luns_serial():
    from fabric_core.services.publish import ExportIndex, Publisher, Settings
    from fabric_core.storage import lio
    from support import AnsweringRunner

    settings = Settings(iqn_base="iqn.2026-11.io.fabric.lab", backstore_prefix="fctl_", portal_ip="10.77.0.11",
                        portal_port=3260, dataset_root="tank/datasets", mount_root="/datasets",
                        checkpoint_root="tank/checkpoints", checkpoint_mount_root="/checkpoints",
                        insecure_no_chap=True)
    snap = "tank/datasets/x@v1"
    get = json.dumps({"datasets": {snap: {"name": snap, "properties": {"guid": {"value": "42"}}}}})
    pub = Publisher(settings, AnsweringRunner({("zfs", "get"): (0, get, "")}), lambda host: None)
    export = settings.dataset("x", "v1", "ext4")
    empty = ExportIndex({"dump": {"storage_objects": [], "targets": []}, "sessions": []}, settings)
    assert pub.identify(export, empty).serial == lio.snapshot_serial("42")
    live = ExportIndex({"dump": {"storage_objects": [{"name": "fctl_x.v1", "wwn": "ABC-1"}], "targets": []},
                        "sessions": []}, settings)
    assert pub.identify(export, live).serial == "abc-1"
    vol = settings.writable("job", "ext4")
    assert pub.identify(vol, empty) is vol  # a writable volume keeps lio's rule


def test_a_served_requests_fields_are_in_its_journal_record(monkeypatch):
    from fabricctl import audit
    from fabricctl.commands import replica_serve
    from fabricctl.main import build_parser

    monkeypatch.setenv("SSH_ORIGINAL_COMMAND", f"receive {DS} - storage3 --force")
    args = build_parser().parse_args(["replica-serve", "--peer", "storage1"])
    replica_serve.MUTATING(args)  # main asks first: the request is read, and described for the record
    fields = audit.record(args, {}, 1, 0.2, "UserError").fields()
    assert fields["FABRIC_TARGET"] == DS and fields["FABRIC_RESULT"] == "refused"
    assert {k: v for k, v in fields.items() if k.startswith("FABRIC_REQUEST_")} == {
        "FABRIC_REQUEST_PEER": "storage1", "FABRIC_REQUEST_VERB": "receive", "FABRIC_REQUEST_DATASET": DS,
        "FABRIC_REQUEST_BASE": "-", "FABRIC_REQUEST_ORIGIN": "storage3", "FABRIC_REQUEST_FORCE": "yes",
        "FABRIC_REQUEST_PROPS": ""}
    assert "request peer=storage1 verb=receive" in fields["MESSAGE"]


@pytest.mark.parametrize(("name", "refused"), [("stream_filesystem.b64", "carries a file system"),
                                                ("stream_package.b64", "is a package")])
def test_replica_serve_refuses_a_stream_before_zfs_receive_runs(monkeypatch, name, refused):
    import subprocess
    import sys
    import types

    from support import AnsweringRunner

    from fabricctl import replication

    runner = AnsweringRunner({("zfs", "get"): (1, "", _data("get_missing.stderr"))}, default=None)  # a new volume
    ctx = types.SimpleNamespace(local=runner, config=types.SimpleNamespace(node="storage2"))
    read, write = os.pipe()
    os.write(write, _record(name) + b"\0" * 4096)
    os.close(write)
    monkeypatch.setattr(sys, "stdin", os.fdopen(read, "rb"))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail(f"zfs receive ran: {a}"))
    request = replication.parse_request(["receive", DS, "-", "storage1"], ROOTS, "storage1")
    with pytest.raises(UnsafeOperation) as err:
        replication.serve(ctx, request)
    assert refused in err.value.problem
    assert [list(argv[:2]) for argv in runner.seen] == [["zfs", "get"]]  # its reading only: no hold, no receive
