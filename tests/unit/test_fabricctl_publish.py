"""fabricctl's building blocks without a lab: fabric names, the export's LIO desired state and its
removal plan (on the recorded rtslib dump), mount units, the version listing parser, the command
tree and the mapping of errors to exit codes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from fabric_core.base import names
from fabric_core.base.errors import Busy, InvalidName, NotFound, UserError
from fabric_core.node import mounts
from fabric_core.services import publish
from fabric_core.storage import lio, versions, zfs
from support import AnsweringRunner, snapshot_listing

DATA = Path(__file__).parent / "data"
BASE = "iqn.2026-11.io.fabric.lab.fabricctl"
GPU1, GPU2 = "iqn.2026-11.io.fabric.lab:gpu1", "iqn.2026-11.io.fabric.lab:gpu2"
CHAP1 = {"userid": "gpu1", "password": "gpu1-s3cret-1", "mutual_userid": "st1", "mutual_password": "gpu1-mutual-1"}
CHAP2 = {"userid": "gpu2", "password": "gpu2-s3cret-1", "mutual_userid": "st1", "mutual_password": "gpu2-mutual-1"}


# --- names -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("ref, expected", [
    ("imagenet@v1", ("imagenet", "v1")),
    ("imagenet-1k@2026-11-22", ("imagenet-1k", "2026-11-22")),
    ("a@v1.2.3", ("a", "v1.2.3")),
])
def test_valid_references(ref, expected):
    assert names.parse_ref(ref) == expected


@pytest.mark.parametrize("ref, words", [
    ("ImageNet@v1", "lower-case"),
    ("image_net@v1", "'_'"),
    ("image.net@v1", "'.'"),
    ("imagenet@", "the version is missing"),
    ("imagenet", "the version is missing"),
    ("imagenet@current", "reserved"),
    ("imagenet@V1", "lower-case"),
    ("imagenet@v1..2", "invalid version"),
    ("a@b@c", "expected NAME@VERSION"),
    ("x" * 31 + "@v1", "at most 30"),
    ("x@" + "v" * 17, "at most 16"),
])
def test_invalid_references_name_the_problem_and_the_fix(ref, words):
    with pytest.raises(InvalidName) as err:
        names.parse_ref(ref)
    assert words in str(err.value)
    assert err.value.fix


def test_a_name_without_version_when_allowed():
    assert names.parse_ref("imagenet", version_required=False) == ("imagenet", None)


def test_longest_names_still_fit_lio_limits():
    export = publish.dataset_export("tank/datasets", "/datasets", "n" * names.FABRIC_NAME_MAX, "v" * names.VERSION_MAX,
                                    "ext4")
    state = lio.parse_desired(publish.desired_state(export, iqn_base=BASE, backstore_prefix="fctl_",
                                                    portal_ip="10.77.0.11", portal_port=3260,
                                                    chaps={GPU1: CHAP1}))
    assert state.targets[0].iqn == f"{BASE}:ds.{'n' * 30}.{'v' * 16}"
    assert state.targets[0].luns[0].backstore == f"fctl_{'n' * 30}.{'v' * 16}"


# --- the export ------------------------------------------------------------------------------------

def export():
    return publish.dataset_export("tank/datasets", "/datasets", "imagenet", "v1", "ext4")


def test_export_names_and_paths():
    e = export()
    assert e.snapshot == "tank/datasets/imagenet@v1"
    assert e.device == "/dev/zvol/tank/datasets/imagenet@v1"
    assert e.mountpoint == "/datasets/imagenet/v1"
    assert e.target_iqn(BASE) == f"{BASE}:ds.imagenet.v1"


def test_desired_state_is_read_only_with_one_acl_per_host_and_its_own_chap():
    raw = publish.desired_state(export(), iqn_base=BASE, backstore_prefix="fctl_", portal_ip="10.77.0.11",
                                portal_port=3260, chaps={GPU2: CHAP2, GPU1: CHAP1})
    state = lio.parse_desired(raw)
    (t,) = state.targets
    assert [a.initiator for a in t.acls] == [GPU1, GPU2]  # sorted
    assert [(a.chap.userid, a.chap.password) for a in t.acls] == [("gpu1", "gpu1-s3cret-1"), ("gpu2", "gpu2-s3cret-1")]
    assert state.require_chap is True
    with pytest.raises(UserError, match="has no CHAP"):
        lio.parse_desired(publish.desired_state(export(), iqn_base=BASE, backstore_prefix="fctl_",
                                                portal_ip="10.77.0.11", portal_port=3260, chaps={GPU1: None}))
    assert t.luns[0].readonly is True and t.writable is False
    assert t.luns[0].device == "/dev/zvol/tank/datasets/imagenet@v1"


def test_plan_for_a_new_export_creates_it_and_leaves_other_targets_alone():
    live = json.loads((DATA / "lio" / "rec_dump_with_session.json").read_text())
    live["devices"] = {"/dev/zvol/tank/datasets/imagenet@v1": {"exists": True, "block": True,
                                                               "realpath": "/dev/zd32"}}
    raw = publish.desired_state(export(), iqn_base=BASE, backstore_prefix="fctl_", portal_ip="10.77.0.11",
                                portal_port=3260, chaps={GPU1: CHAP1})
    actions = lio.plan(raw, live)
    ops = [a.kind for a in lio.changes(actions)]
    assert ops[:3] == ["close_discovery", "create_backstore", "create_target"]  # recorded with discovery open
    assert "create_acl" in ops and "create_mapped_lun" in ops and ops[-1] == "enable_tpg"
    touched = {a.target for a in lio.changes(actions) if a.target}  # close_discovery is node-wide (no target)
    assert touched == {f"{BASE}:ds.imagenet.v1"}  # the recorded hc-rec and foreign targets are untouched


def test_acl_initiators_reads_the_dump():
    live = json.loads((DATA / "lio" / "rec_dump_with_session.json").read_text())
    assert publish.acl_initiators(live, "iqn.2026-11.io.fabric.lab:hc-rec") == ["iqn.2004-10.com.debian:cfea9e9490c1"]
    assert publish.acl_initiators(live, "iqn.2026-11.io.fabric.lab:nothing") == []


def test_removal_is_refused_while_an_initiator_is_logged_in_and_allowed_with_force():
    live = json.loads((DATA / "lio" / "rec_dump_with_session.json").read_text())
    iqn = "iqn.2026-11.io.fabric.lab:hc-rec"
    with pytest.raises(Busy) as err:
        lio.plan_removal(live, iqn_base="iqn.2026-11.io.fabric.lab", backstore_prefix="fabric_",
                             target_iqns=[iqn])
    assert "cfea9e9490c1" in str(err.value)
    actions = lio.changes(lio.plan_removal(live, iqn_base="iqn.2026-11.io.fabric.lab",
                                               backstore_prefix="fabric_", target_iqns=[iqn], force=True))
    assert [a.kind for a in actions] == ["delete_target", "delete_backstore", "delete_backstore"]
    assert {a.params.get("name") for a in actions if a.kind == "delete_backstore"} == {"fabric_hc_rec_a",
                                                                                     "fabric_hc_rec_b"}


def test_a_dry_runs_planned_logout_does_not_block_the_removal_plan():
    live = json.loads((DATA / "lio" / "rec_dump_with_session.json").read_text())
    iqn = "iqn.2026-11.io.fabric.lab:hc-rec"
    actions = lio.changes(lio.plan_removal(
        live, iqn_base="iqn.2026-11.io.fabric.lab", backstore_prefix="fabric_", target_iqns=[iqn],
        planned_logouts=frozenset({"iqn.2004-10.com.debian:cfea9e9490c1"})))
    assert [a.kind for a in actions] == ["delete_target", "delete_backstore", "delete_backstore"]
    with pytest.raises(Busy):  # another initiator's planned logout does not excuse this one
        lio.plan_removal(live, iqn_base="iqn.2026-11.io.fabric.lab", backstore_prefix="fabric_",
                             target_iqns=[iqn], planned_logouts=frozenset({"iqn.2004-10.com.debian:other"}))


def test_removal_never_touches_a_foreign_target():
    live = json.loads((DATA / "lio" / "rec_dump_with_session.json").read_text())
    live = copy.deepcopy(live)
    live["sessions"] = []
    with pytest.raises(UserError) as err:
        lio.plan_removal(live, iqn_base="iqn.2026-11.io.fabric.lab", backstore_prefix="fabric_",
                             target_iqns=["iqn.2026-11.io.other.lab:hc-foreign"])
    assert "not fabricctl's" in str(err.value)


# --- host side through a scripted runner --------------------------------------------------------

Scripted = AnsweringRunner  # answers commands from a table of argv prefixes; records every command


def test_switch_link_is_atomic_and_idempotent():
    r = Scripted({("readlink",): (0, "v1\n", "")})
    assert publish.switch_link(r, "/datasets/imagenet/current", "v2") is True
    assert r.seen[-2:] == [("ln", "-sfn", "v2", "/datasets/imagenet/current.fabric-tmp"),
                           ("mv", "-T", "/datasets/imagenet/current.fabric-tmp", "/datasets/imagenet/current")]
    r2 = Scripted({("readlink",): (0, "v2\n", "")})
    assert publish.switch_link(r2, "/datasets/imagenet/current", "v2") is False
    assert all(c[0] == "readlink" for c in r2.seen)


def test_mount_unit_is_read_only_and_ordered_after_iscsi():
    text = mounts.unit_text(device="/dev/disk/by-path/ip-10.77.0.11:3260-iscsi-x-lun-0", mountpoint="/datasets/a/v1",
                            fstype="ext4", readonly=True, description="d", device_unit="dev-x.device")
    assert "Options=ro,noload,nodev,nosuid" in text
    assert "After=dev-x.device iscsid.service" in text and "Requires=dev-x.device" in text
    assert "WantedBy=remote-fs.target" in text
    assert "ro,norecovery" in mounts.options("xfs")
    with pytest.raises(UserError):
        mounts.options("btrfs")


# `fuser -m /datasets/a/v1` on Debian 12 (psmisc 23.6): PIDs on stdout, the access letters on stderr
FUSER_OUT = " kernel   812   900"
FUSER_ERR = "/datasets/a/v1:     fc"
PS = "  812 sleep\n  900 bash\n"


def test_users_of_a_mount_come_from_fuser():
    r = Scripted({("findmnt",): (0, "/dev/sda ext4 ro\n", ""), ("fuser",): (0, FUSER_OUT, FUSER_ERR),
                  ("ps",): (0, PS, "")})
    assert mounts.users(r, "/datasets/a/v1") == ["812 sleep", "900 bash"]
    assert ("ps", "-o", "pid=,comm=", "-p", "812,900") in r.seen


def test_remove_mount_refuses_while_in_use():
    r = Scripted({("findmnt",): (0, "/dev/sda ext4 ro\n", ""), ("fuser",): (0, FUSER_OUT, FUSER_ERR),
                  ("ps",): (0, PS, "")})
    with pytest.raises(Busy) as err:
        mounts.remove_mount(r, "/datasets/a/v1")
    assert "812 sleep" in str(err.value) and "--force" in err.value.fix
    assert not any(c[0] in ("umount", "systemctl", "rm") for c in r.seen)


# --- listing parser ------------------------------------------------------------------------------

def test_snapshot_listing_keeps_only_managed_versions():
    # derived listing (support.snapshot_listing: the recorded zfs23b/list_snaps_s.json's form), newest first as
    # given: the parser puts it oldest first by createtxg
    cols = versions.SNAPSHOT_COLUMNS
    own = dict(zip(cols, ["tank/datasets/imagenet@v1", "1795000000", "12288", "1048576", "1", "true",
                          "dataset-version", "v1", "root@storage1", "2026-11-22T10:00:00Z", "first", "300", "1000000",
                          "ab" * 32, "-", "-", "ext4"], strict=True), createtxg="40")
    foreign = dict(dict.fromkeys(cols, "-"), name="tank/datasets/imagenet@manual", creation="1795000100", used="0",
                   referenced="1048576", userrefs="0", createtxg="52")
    text = snapshot_listing([foreign, own])
    rows = versions.parse_snapshots(text)
    assert [x["name"] for x in rows] == [own["name"], foreign["name"]]
    assert rows[0]["userrefs"] == 1 and rows[0]["fabric:files"] == 300 and rows[1]["fabric:kind"] is None
    assert rows[0]["fabric:manifest-sha256"] == "ab" * 32 and rows[0]["creation"] == 1795000000
    r = Scripted({("zfs", "list"): (0, text, "")})
    listed = versions.list_snapshots(r, "tank/datasets")
    assert [x["snapshot"] for x in listed] == ["v1"] and listed[0]["name_short"] == "imagenet"
    assert r.seen == [("zfs", "list", "-j", "-p", "-t", "snapshot", "-o", ",".join(cols),
                       "-s", "createtxg", "-r", "tank/datasets")]


def test_snapshot_listing_of_the_lab():
    # recorded: `zfs list -j -p -t snapshot -o name,createtxg,creation,used,fabric:version,fabric:note` (without
    # --json-int, as the core lists) and its text form, in the same state (zfs23b/list_snaps_s.json, list_snaps.txt)
    columns = ("name", "createtxg", "creation", "used", "fabric:version", "fabric:note")
    text = dict(zip(columns, (DATA / "zfs23b" / "list_snaps.txt").read_text().split(), strict=True))
    rows = zfs.list_rows((DATA / "zfs23b" / "list_snaps_s.json").read_text(), columns)
    assert rows == [text] and rows[0]["fabric:version"] == "v1" and rows[0]["creation"] == "1795511128"


def test_listing_a_missing_root_is_empty():
    # `zfs list` of a missing dataset: exit 1, "dataset does not exist" (as recorded for `zfs get -j -p`)
    r = Scripted({("zfs", "list"): (1, "", (DATA / "zfs23b" / "get_missing_s.stderr").read_text())})
    assert versions.list_snapshots(r, "tank/nope") == []
    assert versions.list_volumes(r, "tank/nope") == []


# --- the command tree and exit codes -----------------------------------------------------------

def test_every_command_has_help_and_runs_through_main(capsys):
    from fabricctl import commands
    from fabricctl.main import main

    for module in commands.ALL:
        assert callable(module.run) and module.HELP and module.__doc__
        assert main([*module.PATH, "--help"]) == 0  # fabricctl's one entry point runs every command
        out = capsys.readouterr().out
        assert "usage: fabricctl " + " ".join(module.PATH) in out
        changes = module.PATH not in {("list",), ("status",), ("metrics",), ("verify",), ("warm",),
                                      ("checkpoint", "list"), ("plan", "checkpoint"), ("config", "check"),
                                      ("completion",), ("show",), ("log",), ("diff",)}
        assert ("--dry-run" in out) == changes, module.PATH
        if not changes:
            assert "--json" in out


def test_errors_map_to_exit_codes(tmp_path, capsys):
    from fabricctl.main import main

    assert main(["--config", str(tmp_path / "missing.yml"), "list"]) == 1
    assert "missing.yml" in capsys.readouterr().err
    bad = tmp_path / "typo.yml"
    bad.write_text("pool: tank\ndataset_rot: tank/datasets\n")
    assert main(["--config", str(bad), "list"]) == 1
    assert "dataset_rot" in capsys.readouterr().err
    # status is a health check (the monitoring-plugin convention): a configuration it cannot load is UNKNOWN
    assert main(["--config", str(bad), "status"]) == 3
    captured = capsys.readouterr()
    assert "dataset_rot" in captured.err and captured.out.startswith("FABRIC UNKNOWN - ")


def test_invalid_names_fail_before_the_config_is_read(tmp_path, capsys):
    from fabricctl.main import main

    rc = main(["--config", str(tmp_path / "missing.yml"), "publish", "Bad_Name@v1", "--to", "gpu1"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "invalid dataset name 'Bad_Name'" in err and "missing.yml" not in err


def test_not_found_is_a_user_error():
    assert NotFound("x").exit_code == 1


def test_a_snapshot_taken_by_hand_is_not_owned_although_it_inherits_managed():
    cols = versions.SNAPSHOT_COLUMNS
    by_hand = dict.fromkeys(cols, "-") | {"name": "tank/checkpoints/job@manual", "creation": "1795000000",
                                          "fabric:managed": "true", "fabric:kind": "checkpoint-volume",
                                          "createtxg": "70"}
    ours = dict(by_hand, name="tank/checkpoints/job@step-100", createtxg="71",
                **{"fabric:kind": "checkpoint", "fabric:step": "100"})
    r = Scripted({("zfs", "list"): (0, snapshot_listing([by_hand, ours]), "")})  # derived, see support
    rows = versions.list_all_snapshots(r, "tank/checkpoints/job")
    assert [versions.owned(x) for x in rows] == [False, True]
    # fabric:step "100" comes as the string "100" from `zfs list -j -p`; the row keeps the text zfs get -Hp prints
    assert rows[1]["fabric:step"] == "100" and versions.as_property_strings(rows[1])["fabric:tags"] == "-"
    assert [x["name"] for x in versions.list_snapshots(r, "tank/checkpoints/job", kinds=("checkpoint",))] == [
        "tank/checkpoints/job@step-100"]


def test_published_snapshots_come_from_fabricctl_backstores():
    settings = publish.Settings(iqn_base=BASE, backstore_prefix="fctl_", portal_ip="10.77.0.11", portal_port=3260,
                                dataset_root="tank/datasets", mount_root="/datasets",
                                checkpoint_root="tank/checkpoints", checkpoint_mount_root="/checkpoints")
    live = {"dump": {"storage_objects": [
        {"name": "fctl_a.v1", "dev": "/dev/zvol/tank/datasets/a@v1"},
        {"name": "fctl_job.rw", "dev": "/dev/zvol/tank/checkpoints/job"},
        {"name": "other", "dev": "/dev/zvol/tank/datasets/b@v1"}]}}
    assert publish.ExportIndex(live, settings).published_snapshots() == {"tank/datasets/a@v1"}
