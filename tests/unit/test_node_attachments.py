"""fabric_core.node.attachments (the agent's records: holders counted, the store, the gc plan),
fabric_core.base.exports (one naming rule for both sides) and fabric_node.ssh (what a storage node's key may
ask): pure, no root."""

from __future__ import annotations

import json
import os
import stat

import pytest
from fabric_core.base import exports
from fabric_core.base.errors import InvalidName, UserError
from fabric_core.node import attachments as at
from fabric_core.services import publish
from support import FCTL_IQN_BASE

from fabric_node import ssh

BASE = FCTL_IQN_BASE
PREFIX = exports.dataset_target_prefix(BASE)
BOOT, OLD_BOOT = "b00t-now", "b00t-before"
P1, P2 = "10.77.0.11:3260", "10.77.0.12:3260"


# --- names: the storage side's rule, refusals ----------------------------------------------------

def test_the_agent_derives_target_and_path_with_the_storage_sides_rule():
    settings = publish.Settings(iqn_base=BASE, backstore_prefix="fctl_", portal_ip="10.77.0.11", portal_port=3260,
                                dataset_root="tank/datasets", mount_root="/datasets",
                                checkpoint_root="tank/checkpoints", checkpoint_mount_root="/checkpoints")
    export = settings.dataset("imagenet", "v3", "ext4")
    assert exports.dataset_on_node(BASE, "/datasets", "imagenet", "v3") == (settings.target_iqn(export),
                                                                              export.mountpoint)
    assert export.mountpoint == "/datasets/imagenet/v3" and settings.target_iqn(export) == f"{BASE}:ds.imagenet.v3"
    assert publish.Export is exports.Export  # one class, re-exported by the publishing service


@pytest.mark.parametrize("ref", ["../x", "../x@v1", "imagenet@../v1", "image net@v1", "imagenet@v 1", "a" * 300,
                                 "imagenet", "imagenet@", "@v1", "Imagenet@v1", "imagenet@v1@v2", "imagenet@v1\n",
                                 "/etc@v1", "imagenet@current", "imagenet/x@v1", "imagenet@v1/..", ""])
def test_a_malformed_reference_never_names_a_path(ref):
    with pytest.raises(InvalidName) as err:
        at.parse_version_ref(ref)
    assert err.value.fix  # names the fix


def test_a_long_reference_is_refused_without_echoing_all_of_it():
    with pytest.raises(InvalidName) as err:
        at.parse_version_ref("x" * 300)
    assert "300 characters" in err.value.problem and "x" * 100 not in err.value.problem


@pytest.mark.parametrize("holder", ["manual", "job:1", "job:4242", "job:123_4", "job:77+0", "job:a.b-c"])
def test_valid_holders(holder):
    assert at.validate_holder(holder) == holder


@pytest.mark.parametrize("holder", ["", "job:", "job", "Manual", "job:../x", "job: 1", "job:1;id", "root",
                                    "job:" + "1" * 65, "job:-1", "job:1\n"])
def test_invalid_holders(holder):
    with pytest.raises(InvalidName, match="holder"):
        at.validate_holder(holder)


# --- holders counted ------------------------------------------------------------------------------

def attachment(*holders, boot=BOOT, **kw) -> at.Attachment:
    att = at.Attachment("imagenet", "v3", f"{BASE}:ds.imagenet.v3", "/datasets/imagenet/v3", **kw)
    for h in holders:
        at.add_holder(att, h, since="2026-11-27T10:00:00+00:00", boot_id=boot)
    return att


def test_two_jobs_share_one_attachment_and_the_last_one_out_is_told():
    att = attachment("job:1")
    assert at.add_holder(att, "job:2", since="t", boot_id=BOOT) is True
    assert at.add_holder(att, "job:2", since="t", boot_id=BOOT) is False  # holding twice is holding once
    assert sorted(att.holders) == ["job:1", "job:2"] and not att.wants_persistent()
    assert at.remove_holder(att, "job:1") is True and at.remove_holder(att, "job:1") is False
    assert list(att.holders) == ["job:2"]
    assert at.add_holder(att, "manual", since="t", boot_id=BOOT) and att.wants_persistent()


def test_holders_staleness():
    def alive(job):
        return {"1": True, "2": False}.get(job)  # 3: unknown

    assert at.holder_stale("manual", {"boot_id": OLD_BOOT}, boot_id=BOOT, is_alive=alive) == ""
    assert "earlier boot" in at.holder_stale("job:1", {"boot_id": OLD_BOOT}, boot_id=BOOT, is_alive=alive)
    assert at.holder_stale("job:1", {"boot_id": BOOT}, boot_id=BOOT, is_alive=alive) == ""
    assert "no longer running" in at.holder_stale("job:2", {"boot_id": BOOT}, boot_id=BOOT, is_alive=alive)
    assert at.holder_stale("job:3", {"boot_id": BOOT}, boot_id=BOOT, is_alive=alive) == ""  # unknown: kept
    assert at.holder_stale("job:2", {"boot_id": BOOT}, boot_id=BOOT, is_alive=None) == ""  # no answer: boot only


# --- the store ------------------------------------------------------------------------------------

def test_records_are_written_atomically_root_only_and_read_back(tmp_path):
    store = at.Store(str(tmp_path / "state"))
    att = attachment("job:1", "manual", device="/dev/disk/by-id/dm-uuid-mpath-36001405abc", fstype="ext4",
                     portals={"storage1": P1}, multipath="36001405abc")
    store.save(att)
    path = tmp_path / "state" / "attachments" / "imagenet@v3.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert store.load("imagenet@v3") == att and store.refs() == ["imagenet@v3"]
    assert json.loads(path.read_text())["ref"] == "imagenet@v3"
    (tmp_path / "state" / "attachments" / "notes.txt").write_text("not a record")
    (tmp_path / "state" / "attachments" / "..@x.json").write_text("{}")
    assert store.refs() == ["imagenet@v3"]
    assert store.remove("imagenet@v3") and not store.remove("imagenet@v3") and store.load("imagenet@v3") is None


@pytest.mark.parametrize("content", ["{not json", json.dumps({"name": "../x", "version": "v1", "target": "t",
                                                               "mountpoint": "/m"}),
                                     json.dumps({"name": "a", "version": "v1", "target": "t", "mountpoint": "/m",
                                                 "holders": {"root": {}}})])
def test_a_damaged_record_is_refused_naming_the_fix(tmp_path, content):
    store = at.Store(str(tmp_path))
    store.ensure()
    (tmp_path / "attachments" / "a@v1.json").write_text(content)
    with pytest.raises(UserError, match="fabric-node gc"):
        store.load("a@v1")


def test_the_store_never_writes_outside_its_directory(tmp_path):
    store = at.Store(str(tmp_path))
    for ref in ("../../etc/passwd@v1", "a@../../x"):
        with pytest.raises(InvalidName):
            store.path(ref)
    assert os.listdir(tmp_path) == []


# --- gc: the plan ---------------------------------------------------------------------------------

def gc(records, **kw):
    kw.setdefault("sessions", [])
    kw.setdefault("node_records", [])
    kw.setdefault("mounts", [])
    return at.plan_gc(records, target_prefix=PREFIX, mount_root="/datasets", boot_id=BOOT, **kw)


def test_gc_after_a_reboot_drops_every_job_holder_and_takes_their_attachments_down():
    held = attachment("job:1", boot=OLD_BOOT)
    shared = at.Attachment("llama", "v1", f"{BASE}:ds.llama.v1", "/datasets/llama/v1")
    at.add_holder(shared, "manual", since="t", boot_id=OLD_BOOT)
    at.add_holder(shared, "job:9", since="t", boot_id=OLD_BOOT)
    steps = gc([held, shared], node_records=[{"target": held.target, "portal": P1},
                                              {"target": shared.target, "portal": P1}])
    assert [(s.kind, s.params["ref"], s.params.get("holder", "")) for s in steps] == [
        ("drop_holder", "imagenet@v3", "job:1", ), ("drop_holder", "llama@v1", "job:9"), ("detach", "imagenet@v3", "")]
    # the detach takes imagenet's node record with it; llama's stays with its manual holder


def test_gc_removes_what_no_attachment_references_and_leaves_other_tools_alone():
    kept = attachment("job:1")
    orphan = f"{BASE}:ds.orphan.v1"
    steps = gc([kept], is_alive=lambda job: True,
               sessions=[{"target": kept.target, "portal": P1}, {"target": orphan, "portal": P1},
                         {"target": orphan, "portal": P2}, {"target": "iqn.2026-11.io.fabric.lab:storage1-exports",
                                                            "portal": P1},
                         {"target": f"{PREFIX}legacy.v1", "portal": P1}],  # fabricctl's own publish: stays
               node_records=[{"target": orphan, "portal": P1}, {"target": "iqn.2026-11.x.y:other", "portal": P1}],
               mounts=["/datasets/imagenet/v3", "/datasets/orphan/v1", "/datasets/welcome", "/datasets/legacy/v1",
                       "/home/x", "/datasets/a/b/c"],
               foreign=["/datasets/legacy/v1"])
    assert [(s.kind, s.params.get("mountpoint") or s.params["target"], s.params.get("portal", "")) for s in steps] == [
        ("unmount", "/datasets/orphan/v1", ""), ("logout", orphan, P1), ("logout", orphan, P2),
        ("delete_record", orphan, P1)]
    assert [s.description for s in steps][:2] == [
        "unmount /datasets/orphan/v1 (no attachment record names it)",
        f"log out of {orphan} at {P1} (no attachment holds it)"]
    assert at.gc_dict(steps[1]) == {"op": "logout", "target": orphan, "portal": P1, "reason": "no attachment holds it"}


def test_gc_asks_about_each_job_and_keeps_what_it_cannot_tell():
    asked = []

    def alive(job):
        asked.append(job)
        return {"1": False}.get(job)

    steps = gc([attachment("job:1", "job:2")], is_alive=alive)
    assert [(s.kind, s.params["holder"]) for s in steps] == [("drop_holder", "job:1")] and sorted(asked) == ["1", "2"]


def test_gc_of_an_attachment_killed_before_it_had_a_holder_left_takes_it_down():
    att = attachment()  # no holder: an attach that failed and was killed before it removed its record
    assert [(s.kind, s.params["reason"]) for s in gc([att])] == [("detach", "no holder")]


# --- what a storage node's key may ask -----------------------------------------------------------

@pytest.mark.parametrize("text, argv", [
    ("attach imagenet@v3 --holder manual --json", ["attach", "imagenet@v3", "--holder", "manual", "--json"]),
    ("attach imagenet@v3 --json --holder=manual --dry-run",
     ["attach", "imagenet@v3", "--holder", "manual", "--json", "--dry-run"]),
    ("attach imagenet@v3 --current --holder manual --json",
     ["attach", "imagenet@v3", "--holder", "manual", "--json", "--current"]),
    ("detach imagenet@v3 --holder manual --force", ["detach", "imagenet@v3", "--holder", "manual", "--force"]),
    ("list --json", ["list", "--json"]), ("list", ["list"]),
    ("in-use imagenet@v3 --json", ["in-use", "imagenet@v3", "--json"]),
    ("verify imagenet@v3 --workers 8 --json", ["verify", "imagenet@v3", "--workers", "8", "--json"]),
    ("current imagenet v3", ["current", "imagenet", "v3"]),
    ("current imagenet --none --json", ["current", "imagenet", "--none", "--json"]),
    ("current imagenet --json", ["current", "imagenet", "--json"]),
])
def test_the_agents_verbs_with_valid_arguments_are_served(text, argv):
    assert ssh.parse(text) == argv


@pytest.mark.parametrize("text", [
    "", "   ", "id", "sh -c id", "bash", "/bin/sh", "attach imagenet@v3 --holder manual; id",
    "attach imagenet@v3 --holder manual && id", "list | sh", "list $(id)", "list `id`",
    "attach imagenet@v3 --holder job:1", "detach imagenet@v3 --holder job:1", "detach --holder job:1 --all",
    "attach imagenet@v3", "attach ../x@v1 --holder manual", "attach imagenet@../../etc --holder manual",
    "attach 'image net@v1' --holder manual", "attach " + "a" * 300 + "@v1 --holder manual",
    "attach imagenet@v3 --holder manual --config /tmp/evil.json", "attach imagenet@v3 --holder manual --ssh",
    "gc", "gc --dry-run", "verify imagenet@v3 --workers 999", "verify imagenet@v3 --workers -1",
    "list --json --json", "current", "detach imagenet@v3 --holder manual --current",
    "attach imagenet@v3 --holder manual --current --current", "current imagenet v3 --current",
    "current imagenet v1 v2", "current ../x v1", "in-use imagenet@v3 extra",
    "attach imagenet@v3 --holder manual\nid", "attach 'unterminated --holder manual", "x" * 600,
    "--help", "attach --help", "list --config=/etc/shadow",
])
def test_everything_else_is_refused(text):
    with pytest.raises(ssh.Refused) as err:
        ssh.parse(text)
    assert err.value.problem.startswith("refused:") and "agent's verbs" in err.value.fix
