# ruff: noqa: I001  (support must be imported first: it puts module_utils on the import path)
"""fabric_core.storage.lio: validation, the pure planner on recorded rtslib dumps, simulation, apply rollback.

Recorded data: tests/unit/data/lio/ (see its README.md for the exact commands on storage1).
"""

from __future__ import annotations

import copy
import dataclasses
from unittest import mock
import json

import pytest
from support import DATA  # also puts module_utils on sys.path

from fabric_core.storage import lio  # noqa: E402
from fabric_core.base.errors import Busy, InvalidName, UnsafeOperation, UserError  # noqa: E402

REC = json.loads((DATA / "lio" / "rec_dump_with_session.json").read_text())
GPU1 = "iqn.2004-10.com.debian:cfea9e9490c1"
GPU2 = "iqn.2004-10.com.debian:fa49841e5fe"
IQN = "iqn.2026-11.io.fabric.lab:hc-rec"
FOREIGN_IQN = "iqn.2026-11.io.other.lab:hc-foreign"
DEVICES = ["/dev/zvol/hc_pool/rec_a", "/dev/zvol/hc_pool/rec_b", "/dev/zvol/hc_pool/rec_f", "/dev/zvol/hc_pool/new"]


def wwn(name: str) -> str:
    return next(s["wwn"] for s in REC["dump"]["storage_objects"] if s["name"] == name)


CLOSED = [{"name": "iscsi", "discovery_enable_auth": True}]  # SendTargets discovery closed (lio.discovery_closed)


def live(sessions: bool = True, discovery: str = "closed", made_before_emulate_pr: bool = False) -> dict:
    """The recorded converged export (recorded before discovery was closed; closed here unless asked). It was also
    recorded before read-only backstores were made with emulate_pr 0 (lio.emulate_pr): its fabric backstores get
    0 here, as today's code makes them, unless ``made_before_emulate_pr`` (the recording's 1)."""
    dump = copy.deepcopy(REC["dump"])
    if discovery == "closed":
        dump["fabric_modules"] = copy.deepcopy(CLOSED)
    if not made_before_emulate_pr:
        for so in dump["storage_objects"]:
            if so["name"].startswith("fabric_") and so["readonly"]:
                so["attributes"]["emulate_pr"] = 0
    return {"dump": dump, "sessions": copy.deepcopy(REC["sessions"]) if sessions else [],
            "devices": {d: {"exists": True, "block": True, "realpath": d} for d in DEVICES}}


def empty(discovery: str = "closed") -> dict:
    return {"dump": {"storage_objects": [], "targets": [],
                     "fabric_modules": copy.deepcopy(CLOSED) if discovery == "closed" else []}, "sessions": [],
            "devices": {d: {"exists": True, "block": True, "realpath": d} for d in DEVICES}}


def desired(require_chap: bool = True, **over) -> dict:
    """The desired state that matches the recorded converged export."""
    target = {"name": "hc-rec", "portals": [{"ip": "10.77.0.11", "port": 3260}],
              "luns": [{"name": "rec_a", "device": "/dev/zvol/hc_pool/rec_a", "wwn": wwn("fabric_hc_rec_a")},
                       {"name": "rec_b", "device": "/dev/zvol/hc_pool/rec_b", "wwn": wwn("fabric_hc_rec_b")}],
              "acls": [{"initiator": GPU1, "chap": {"userid": "gpu1", "password": "hcsecret0001"}}]}
    target.update(over)
    return {"base_iqn": "iqn.2026-11.io.fabric.lab", "backstore_prefix": "fabric_hc_", "targets": [target],
            "require_chap": require_chap}


CHAP1 = {"userid": "gpu1", "password": "hcsecret0001"}
CHAP2 = {"userid": "gpu2", "password": "hcsecret0002"}


def ops(actions) -> list[str]:
    return [a.kind for a in lio.changes(actions)]


def test_recorded_dump_is_what_the_lab_made():
    # guards the fixture itself: the converged export with one live session from gpu1
    tgt = next(t for t in REC["dump"]["targets"] if t["wwn"] == IQN)
    assert tgt["tpgs"][0]["node_acls"][0]["mapped_luns"][0]["write_protect"] is True
    assert REC["sessions"] == [{"id": 1, "initiator": GPU1, "state": "LOGGED_IN", "target": IQN, "tpg": 1}]


def test_create_from_empty_orders_parents_first_and_converges():
    actions = lio.plan(desired(), empty())
    assert ops(actions) == [
        "create_backstore", "create_backstore", "create_target", "create_tpg",
        "set_tpg_attribute", "set_tpg_attribute", "set_tpg_attribute", "set_tpg_attribute",
        "create_portal", "create_lun", "create_lun", "create_acl", "create_mapped_lun", "create_mapped_lun",
        "set_auth", "set_auth", "enable_tpg"]
    attrs = {a.params["name"]: a.params["value"] for a in actions if a.kind == "set_tpg_attribute"}
    assert attrs == {"authentication": 1, "generate_node_acls": 0, "cache_dynamic_acls": 0,
                     "demo_mode_write_protect": 1}
    backstores = [a.params for a in actions if a.kind == "create_backstore"]
    assert all(b["readonly"] is True for b in backstores)
    assert all(a.params["write_protect"] is True for a in actions if a.kind == "create_mapped_lun")
    # the simulated result is converged: planning again changes nothing
    assert ops(lio.plan(desired(), lio.simulate(empty(), actions))) == []


def test_without_chap_authentication_is_zero():
    state = desired(require_chap=False, acls=[{"initiator": GPU1}])
    actions = lio.plan(state, empty())
    attrs = {a.params["name"]: a.params["value"] for a in actions if a.kind == "set_tpg_attribute"}
    assert attrs["authentication"] == 0
    assert "set_auth" not in ops(actions)


def test_converged_recorded_state_is_a_no_op_and_reports_foreign_objects():
    actions = lio.plan(desired(), live())
    assert ops(actions) == []
    kept = {(a.params["kind"], a.params["name"]) for a in actions if a.kind == "keep"}
    assert kept == {("target", FOREIGN_IQN), ("backstore", "hc_foreign")}


def test_attribute_and_write_protect_drift_is_corrected_in_place():
    state = live()
    tpg = next(t for t in state["dump"]["targets"] if t["wwn"] == IQN)["tpgs"][0]
    tpg["attributes"]["demo_mode_write_protect"] = 0
    tpg["attributes"]["generate_node_acls"] = 1
    tpg["node_acls"][0]["mapped_luns"][0]["write_protect"] = False
    actions = lio.changes(lio.plan(desired(), state))
    assert [a.description for a in actions] == [
        f"set_tpg_attribute {IQN} name=generate_node_acls value=0",
        f"set_tpg_attribute {IQN} name=demo_mode_write_protect value=1",
        f"set_write_protect {IQN} initiator={GPU1} index=1 value=True",
    ]
    assert ops(lio.plan(desired(), lio.simulate(state, actions))) == []


def test_add_an_acl_maps_all_luns_read_only():
    acls = [{"initiator": GPU1, "chap": {"userid": "gpu1", "password": "hcsecret0001"}},
            {"initiator": GPU2, "chap": {"userid": "gpu2", "password": "hcsecret0002"}}]
    actions = lio.changes(lio.plan(desired(acls=acls), live()))
    assert ops(actions) == ["create_acl", "create_mapped_lun", "create_mapped_lun", "set_auth", "set_auth"]
    assert all(a.params["initiator"] == GPU2 for a in actions)
    assert [a.params["write_protect"] for a in actions if a.kind == "create_mapped_lun"] == [True, True]


def test_a_publish_tags_its_acls_and_an_untagged_declaration_leaves_the_tag_alone():
    """A publish's ACL carries lio.PUBLISHED_TAG (status then expects its host logged in); an ACL declared without
    a tag (a grant's, the roles') keeps whatever tag LIO has: a grant never untags a publish."""
    tagged = [{"initiator": GPU1, "chap": CHAP1, "tag": lio.PUBLISHED_TAG}]
    actions = lio.changes(lio.plan(desired(acls=tagged), live()))
    assert [a.description for a in actions] == [f"set_acl_tag {IQN} initiator={GPU1} value={lio.PUBLISHED_TAG}"]
    after = lio.simulate(live(), actions)
    acl = next(t for t in after["dump"]["targets"] if t["wwn"] == IQN)["tpgs"][0]["node_acls"][0]
    assert acl["tag"] == lio.PUBLISHED_TAG
    assert ops(lio.plan(desired(acls=tagged), after)) == []
    assert ops(lio.plan(desired(), after)) == []  # untagged in the declaration: left as it is
    fresh = lio.changes(lio.plan(desired(acls=tagged), empty()))
    assert ops(fresh)[-2:] == ["set_acl_tag", "enable_tpg"]  # after the ACL and its CHAP, before enabling


def test_acl_restricted_to_some_luns():
    """An ACL's LUN list is its access: a LUN taken off it is unmapped without purge (withdrawal revokes);
    while the initiator is logged in only with force."""
    acls = [{"initiator": GPU1, "luns": ["rec_a"], "chap": {"userid": "gpu1", "password": "hcsecret0001"}}]
    with pytest.raises(Busy, match="mapped LUN 1"):
        lio.plan(desired(acls=acls), live())
    forced = lio.changes(lio.plan(desired(acls=acls), live(), force=True))
    actions = lio.changes(lio.plan(desired(acls=acls), live(sessions=False)))
    assert [a.description for a in actions] == [a.description for a in forced] == [
        f"delete_mapped_lun {IQN} initiator={GPU1} index=1 (not in desired state)"]


def test_an_initiator_taken_off_a_declared_target_loses_its_acl_without_purge():
    """Withdrawal revokes: the declared ACL list is the target's whole access list."""
    other = "iqn.2026-11.io.fabric.lab:gpu9"
    acls = [{"initiator": other, "chap": {"userid": "gpu9", "password": "hcsecret0009"}}]
    with pytest.raises(Busy, match=f"ACL {GPU1}"):
        lio.plan(desired(acls=acls), live())
    actions = lio.changes(lio.plan(desired(acls=acls), live(sessions=False)))
    assert f"delete_acl {IQN} initiator={GPU1} (not in desired state (access withdrawn))" in [
        a.description for a in actions]
    assert any(a.kind == "create_acl" for a in actions)


def test_removing_a_lun_needs_purge_and_refuses_a_busy_lun():
    state = desired(luns=desired()["targets"][0]["luns"][:1])
    actions = lio.plan(state, live())
    assert ops(actions) == []
    assert any(a.kind == "keep" and a.params["kind"] == "lun" for a in actions)
    assert any(a.kind == "keep" and a.params["name"] == "fabric_hc_rec_b" for a in actions)
    with pytest.raises(Busy) as err:
        lio.plan(state, live(), purge=True)
    assert "LUN 1" in err.value.problem and GPU1 in err.value.problem and "force" in err.value.fix
    forced = lio.plan(state, live(), purge=True, force=True)
    assert ops(forced) == ["delete_mapped_lun", "delete_lun", "delete_backstore"]
    quiet = lio.plan(state, live(sessions=False), purge=True)
    assert ops(quiet) == ["delete_mapped_lun", "delete_lun", "delete_backstore"]
    assert ops(lio.plan(state, lio.simulate(live(sessions=False), quiet), purge=True)) == []


def test_purge_everything_leaves_foreign_objects_alone():
    state = {"base_iqn": "iqn.2026-11.io.fabric.lab", "backstore_prefix": "fabric_hc_", "targets": []}
    with pytest.raises(Busy):
        lio.plan(state, live(), purge=True)
    actions = lio.plan(state, live(sessions=False), purge=True)
    assert [(a.kind, a.target or a.params.get("name")) for a in lio.changes(actions)] == [
        ("delete_target", IQN), ("delete_backstore", "fabric_hc_rec_a"), ("delete_backstore", "fabric_hc_rec_b")]
    kept = {(a.params["kind"], a.params["name"]) for a in actions if a.kind == "keep"}
    assert kept == {("target", FOREIGN_IQN), ("backstore", "hc_foreign")}
    # without purge nothing is removed
    assert ops(lio.plan(state, live(sessions=False))) == []


def test_backstore_drift_recreates_it_children_first():
    state = live(sessions=False)
    so = next(s for s in state["dump"]["storage_objects"] if s["name"] == "fabric_hc_rec_b")
    so["readonly"] = False
    actions = lio.changes(lio.plan(desired(), state))
    assert [a.kind for a in actions] == ["delete_mapped_lun", "delete_lun", "delete_backstore", "create_backstore",
                                       "create_lun", "create_mapped_lun"]
    assert actions[3].params == {"name": "fabric_hc_rec_b", "device": "/dev/zvol/hc_pool/rec_b", "readonly": True,
                                 "wwn": wwn("fabric_hc_rec_b"), "emulate_pr": 0}
    assert "readonly False -> True" in actions[2].reason
    with pytest.raises(Busy):
        lio.plan(desired(), {**state, "sessions": REC["sessions"]})


def test_derived_wwn_is_stable_and_in_rtslib_unit_serial_form():
    luns = [{"name": "rec_a", "device": "/dev/zvol/hc_pool/rec_a"}]
    a = lio.parse_desired(desired(luns=luns, acls=[])).targets[0].luns[0].wwn
    b = lio.parse_desired(desired(luns=luns, acls=[])).targets[0].luns[0].wwn
    assert a == b == lio.unit_serial(IQN, "rec_a")
    assert lio.spec._UNIT_SERIAL.match(a)
    other = {"base_iqn": "iqn.2026-11.io.fabric.lab", "targets": [
        {"name": "other", "portals": [{"ip": "10.77.0.12"}], "luns": luns}]}
    assert lio.parse_desired(other).targets[0].luns[0].wwn != a  # same LUN name on another target: another disk


def test_new_lun_takes_the_lowest_free_index_and_keeps_existing_ones():
    luns = desired()["targets"][0]["luns"] + [{"name": "new", "device": "/dev/zvol/hc_pool/new"}]
    actions = lio.changes(lio.plan(desired(luns=luns), live()))
    assert [(a.kind, a.params.get("index")) for a in actions] == [
        ("create_backstore", None), ("create_lun", 2), ("create_mapped_lun", 2)]


@pytest.mark.parametrize("mutate, error, text", [
    (lambda d: d["targets"][0].update(writable=True, luns=[{"name": "w", "device": "/dev/zvol/hc_pool/new",
                                                             "readonly": False}],
                                      acls=[{"initiator": GPU1, "chap": CHAP1}, {"initiator": GPU2, "chap": CHAP2}]),
     UnsafeOperation, "exactly one writer"),
    (lambda d: d["targets"][0].update(luns=[{"name": "w", "device": "/dev/zvol/hc_pool/new", "readonly": False}],
                                      acls=[{"initiator": GPU1, "chap": CHAP1}]), UnsafeOperation, "not writable"),
    (lambda d: d["targets"][0]["acls"].append({"initiator": "iqn.2004-10.com.debian:gpu_2"}), InvalidName, "'_'"),
    (lambda d: d["targets"][0]["acls"].append({"initiator": "iqn.2004-10.com.Debian:gpu2"}), InvalidName,
     "lower case"),
    (lambda d: d.update(base_iqn="iqn.2026-11.lab"), InvalidName, "dotted"),
    (lambda d: d["targets"][0].update(iqn="iqn.2026-11.io.other.lab:x"), UserError, "not under base_iqn"),
    (lambda d: d["targets"][0]["acls"][0]["chap"].update(password="short"), UserError, "12-16"),
    (lambda d: d["targets"][0]["acls"][0]["chap"].update(password="x" * 17), UserError, "12-16"),
    (lambda d: d["targets"][0]["acls"][0]["chap"].update(password="has space 12"), UserError, "12-16"),
    (lambda d: d["targets"][0]["acls"][0]["chap"].update(mutual_userid="t", mutual_password="hcsecret0001"),
     UserError, "differ"),
    (lambda d: d["targets"][0]["acls"].append({"initiator": GPU2}), UserError, "has no CHAP"),
    (lambda d: d["targets"][0]["acls"].append({"initiator": GPU2, "chap": dict(CHAP1, userid="gpu2")}), UserError,
     "share a CHAP secret"),
    (lambda d: d["targets"][0]["acls"].append({"initiator": GPU2, "chap": {
        "userid": "gpu2", "password": "other-secret1", "mutual_userid": "t", "mutual_password": "hcsecret0001"}}),
     UserError, "share a CHAP secret"),
    (lambda d: d["targets"][0]["luns"].append({"name": "rec_a", "device": "/dev/zvol/hc_pool/new"}), UserError,
     "also used"),
    (lambda d: d["targets"][0]["luns"].append({"name": "dup", "device": "/dev/zvol/hc_pool/rec_a"}), UserError,
     "exported twice"),
    (lambda d: d["targets"][0]["acls"][0].update(luns=["nope"]), UserError, "does not have"),
    (lambda d: d["targets"][0].update(portals=[]), UserError, "no portals"),
    (lambda d: d["targets"][0].update(portals=[{"ip": "storage1"}]), UserError, "not an IP"),
    (lambda d: d["targets"][0]["luns"][0].update(wwn="abc"), UserError, "unit serial"),
    (lambda d: d["targets"][0]["acls"][0].update(tag="a tag"), UserError, "not a LIO tag"),
    (lambda d: d["targets"][0]["acls"][0].update(tag="x" * 64), UserError, "not a LIO tag"),
])
def test_bad_input_is_refused_before_any_change(mutate, error, text):
    state = desired()
    mutate(state)
    with pytest.raises(error) as err:
        lio.plan(state, live())
    assert text in str(err.value)
    assert err.value.fix or isinstance(err.value, InvalidName)
    assert "hcsecret0001" not in str(err.value)


def test_chap_is_per_target_when_exports_without_chap_are_allowed():
    state = desired(require_chap=False)
    state["targets"][0]["acls"].append({"initiator": GPU2})
    with pytest.raises(UserError, match="CHAP is per target"):
        lio.plan(state, live())


def test_an_acl_without_chap_is_refused_unless_allowed_and_names_the_switch():
    with pytest.raises(UserError) as err:
        lio.plan(desired(acls=[{"initiator": GPU1}]), empty())
    assert "has no CHAP" in err.value.problem and "fabric_insecure_no_chap" in err.value.fix
    assert lio.plan(desired(require_chap=False, acls=[{"initiator": GPU1}]), empty())  # an isolated lab


def test_one_writer_is_accepted():
    state = desired(writable=True, luns=[{"name": "w", "device": "/dev/zvol/hc_pool/new", "readonly": False}],
                    acls=[{"initiator": GPU2, "chap": CHAP2}], name="hc-ckpt")
    actions = lio.plan(state, empty())
    assert [a.params["readonly"] for a in actions if a.kind == "create_backstore"] == [False]
    assert [a.params["write_protect"] for a in actions if a.kind == "create_mapped_lun"] == [False]
    attrs = {a.params["name"]: a.params["value"] for a in actions if a.kind == "set_tpg_attribute"}
    assert attrs["demo_mode_write_protect"] == 1


def test_a_read_only_backstore_refuses_reservations_and_a_writers_keeps_them(tmp_path):
    # emulate_pr 0: LIO refuses RESERVE/RELEASE and PERSISTENT RESERVE IN/OUT, so no reader can stop the others
    ro = lio.plan(desired(), empty())
    assert [a.params["emulate_pr"] for a in ro if a.kind == "create_backstore"] == [0, 0]
    rw = lio.plan(desired(writable=True, luns=[{"name": "w", "device": "/dev/zvol/hc_pool/new", "readonly": False}],
                          acls=[{"initiator": GPU2, "chap": CHAP2}], name="hc-ckpt"), empty())
    assert [a.params["emulate_pr"] for a in rw if a.kind == "create_backstore"] == [1]  # one ACL: its writer
    # the kernel takes it only while the backstore is not exported: set right after the backstore is made
    rts = FakeRts()
    lio.apply(ro, rts=rts, save_file=str(tmp_path / "saveconfig.json"))
    made = [e[:2] for e in rts.log if e[0] in ("new", "attr") and e[1] in ("BlockStorageObject", "LUN", "emulate_pr")]
    assert made[:4] == [("new", "BlockStorageObject"), ("attr", "emulate_pr"), ("new", "BlockStorageObject"),
                        ("attr", "emulate_pr")] and ("new", "LUN") in made[4:]
    assert [e[2] for e in rts.log if e[:2] == ("attr", "emulate_pr")] == ["0", "0"]
    rts = FakeRts()
    lio.apply(rw, rts=rts, save_file=str(tmp_path / "saveconfig.json"))
    assert not [e for e in rts.log if e[:2] == ("attr", "emulate_pr")]  # 1 is the kernel's default
    # a dry run predicts the attribute, so planning on its prediction finds nothing left to do
    after = lio.simulate(empty(), ro)
    assert ops(lio.plan(desired(), after)) == []


def test_a_kernel_without_emulate_pr_is_refused_for_a_read_only_export(tmp_path):
    rts = FakeRts()
    real = rts.BlockStorageObject

    def old_kernel(*args, **kw):
        so = real(*args, **kw)
        so.attributes.clear()
        return so
    rts.BlockStorageObject = old_kernel
    with pytest.raises(lio.LioApplyError) as err:
        lio.apply(lio.plan(desired(), empty()), rts=rts, save_file=str(tmp_path / "saveconfig.json"))
    assert "emulate_pr" in err.value.problem and "stop the others' reads" in err.value.problem
    assert [e[1] for e in rts.log if e[0] == "delete"] == ["BlockStorageObject"]  # the new backstore went again
    assert not [e for e in rts.log if e[0] == "new" and e[1] == "LUN"]


def test_an_export_made_before_emulate_pr_is_reported_while_read_and_remade_when_not():
    # logged in: nothing changes (a live export never drops its readers), each backstore is reported
    actions = lio.plan(desired(), live(made_before_emulate_pr=True))
    assert ops(actions) == []
    kept = {a.params["name"]: a.reason for a in actions if a.kind == "keep" and a.params["kind"] == "backstore"}
    assert set(kept) == {"fabric_hc_rec_a", "fabric_hc_rec_b", "hc_foreign"}
    assert "emulate_pr 1 -> 0" in kept["fabric_hc_rec_a"] and GPU1 in kept["fabric_hc_rec_a"]
    assert "stops the others" in kept["fabric_hc_rec_a"]
    # nobody logged in: re-made with the LUN unmapped (children first), the same serial and LUN index
    actions = lio.changes(lio.plan(desired(), live(sessions=False, made_before_emulate_pr=True)))
    assert ops(actions) == ["delete_mapped_lun", "delete_mapped_lun", "delete_lun", "delete_lun", "delete_backstore",
                            "delete_backstore", "create_backstore", "create_backstore", "create_lun", "create_lun",
                            "create_mapped_lun", "create_mapped_lun"]
    made = [a.params for a in actions if a.kind == "create_backstore"]
    assert [(p["emulate_pr"], p["wwn"]) for p in made] == [(0, wwn("fabric_hc_rec_a")), (0, wwn("fabric_hc_rec_b"))]
    assert all("emulate_pr 1 -> 0" in a.reason for a in actions if a.kind == "delete_backstore")
    # a dump without the attribute (an older recording) plans nothing
    state = live(sessions=False)
    for so in state["dump"]["storage_objects"]:
        so.pop("attributes")
    assert ops(lio.plan(desired(), state)) == []


def test_missing_device_and_device_used_by_a_foreign_backstore():
    state = live()
    state["devices"]["/dev/zvol/hc_pool/new"] = {"exists": False, "block": False, "realpath": ""}
    luns = desired()["targets"][0]["luns"] + [{"name": "snap", "device": "/dev/zvol/hc_pool/new"}]
    with pytest.raises(UserError, match="does not exist"):
        lio.plan(desired(luns=luns), state)
    luns = desired()["targets"][0]["luns"] + [{"name": "f", "device": "/dev/zvol/hc_pool/rec_f"}]
    with pytest.raises(UserError, match="already exported by backstore 'hc_foreign'"):
        lio.plan(desired(luns=luns), live())


def test_describe_redacts_chap_secrets_and_summary_too():
    actions = lio.plan(desired(), empty())
    text = "\n".join(a.description for a in actions) + json.dumps([lio.step_dict(a) for a in actions])
    assert "hcsecret0001" not in text and lio.REDACTED in text
    summary = lio.summarize(live(), lio.parse_desired(desired()))
    assert "hcsecret0001" not in json.dumps(summary)
    assert list(summary["targets"]) == [IQN]  # foreign target not summarized
    assert summary["targets"][IQN]["acls"][GPU1]["mapped_luns"]["0"] == {"tpg_lun": 0, "write_protect": True}


# -- apply() with a fake rtslib: the order of calls and the rollback of a failed run ------------


class FakeRts:
    """Records rtslib calls; NodeACL creation fails when fail_acl is set."""

    class RTSLibError(Exception):
        pass

    def __init__(self, fail_acl=False):
        self.log: list = []
        self.fail_acl = fail_acl
        rts = self

        class Obj:
            def __init__(self, kind, *args, **kw):
                self.kind, self.args = kind, args
                rts.log.append(("new", kind, args, kw.get("mode")))
                self.path = "/nonexistent"
                self.attributes = {"emulate_pr": "1"} if kind == "BlockStorageObject" else {}

            def delete(self):
                rts.log.append(("delete", self.kind, self.args))

            def set_attribute(self, name, value):
                rts.log.append(("attr", name, value))
                self.attributes[name] = value

            def get_attribute(self, name):
                return self.attributes[name]

            def list_attributes(self, writable=None):
                return list(self.attributes)

        def factory(kind):
            def make(*args, **kw):
                if kind == "NodeACL" and rts.fail_acl and kw.get("mode") == "create":
                    raise rts.RTSLibError("boom")
                return Obj(kind, *[a for a in args if not isinstance(a, Obj)], **kw)
            return make

        for kind in ("FabricModule", "Target", "TPG", "NetworkPortal", "LUN", "NodeACL", "MappedLUN",
                     "BlockStorageObject"):
            setattr(self, kind, factory(kind))
        self.RTSRoot = lambda: type("R", (), {"dump": lambda _s: {"storage_objects": [], "targets": ["dumped"]}})()


def test_apply_runs_in_plan_order_and_saves(tmp_path):
    rts = FakeRts()
    done = lio.apply(lio.plan(desired(require_chap=False, acls=[{"initiator": GPU1}]), empty()), rts=rts,
                     save_file=str(tmp_path / "saveconfig.json"))
    kinds = [e[1] for e in rts.log if e[0] == "new" and e[1] != "FabricModule" and e[3] in ("create", None)
             and e[1] in ("BlockStorageObject", "Target", "NetworkPortal", "NodeACL")]
    assert kinds[:3] == ["BlockStorageObject", "BlockStorageObject", "Target"]
    assert len(done) == 15
    saved = tmp_path / "saveconfig.json"
    assert json.loads(saved.read_text()) == {"storage_objects": [], "targets": ["dumped"]}
    assert saved.stat().st_mode & 0o777 == 0o600 and [p.name for p in tmp_path.iterdir()] == ["saveconfig.json"]


def test_apply_failure_removes_what_this_run_created(tmp_path):
    rts = FakeRts(fail_acl=True)
    with pytest.raises(lio.LioApplyError) as err:
        lio.apply(lio.plan(desired(require_chap=False, acls=[{"initiator": GPU1}]), empty()), rts=rts,
                  save_file=str(tmp_path / "saveconfig.json"))
    deleted = [e[1] for e in rts.log if e[0] == "delete"]
    # reverse order: LUNs, portal, TPG, target, then the backstores
    assert deleted == ["LUN", "LUN", "NetworkPortal", "TPG", "Target", "BlockStorageObject", "BlockStorageObject"]
    assert "create_acl" in err.value.problem and len(err.value.rolled_back) == 7
    # LIO as the rollback left it is saved all the same (the boot-time restore must not bring back another state)
    assert json.loads((tmp_path / "saveconfig.json").read_text()) == {"storage_objects": [], "targets": ["dumped"]}


def test_nothing_to_do_touches_nothing():
    assert lio.apply(lio.plan(desired(), live()), rts=None) == []


def test_check_mode_assumes_a_missing_device_is_created_earlier_in_the_run():
    """A site run in check mode plans the export of a zvol whose creation was only simulated."""
    state = empty()
    state["devices"] = {d: {"exists": False, "block": False, "realpath": ""} for d in DEVICES}
    with mock.patch.object(lio.kernel, "read_live", lambda desired, rts=None: copy.deepcopy(state)):
        out = lio.reconcile(desired(), runner=_Recording(dry_run=True), rts=object())
        assert out["changed"] and any("create_backstore" in a or "backstore" in a for a in out["actions"])
        assert any("/dev/zvol/hc_pool/rec_a does not exist yet" in w for w in out["warnings"])
        with pytest.raises(UserError, match="does not exist"):  # a real run refuses it
            lio.reconcile(desired(), runner=_Recording(dry_run=False), rts=object())


class _Recording:
    """A runner that records mutating commands (planned in a dry run, executed otherwise)."""

    def __init__(self, dry_run: bool):
        self.dry_run = dry_run
        self.planned: list = []
        self.executed: list = []

    def run(self, argv, mutating=False, **kw):
        (self.planned if self.dry_run else self.executed).append(list(argv))

    def record(self, entry):
        (self.planned if self.dry_run else self.executed).append(list(entry))


def test_check_mode_on_a_node_without_lio_loads_nothing_and_plans_from_empty(tmp_path, monkeypatch):
    """Issue 18: check mode on a fresh storage node loaded iscsi_target_mod (rtslib's read creates
    configfs directories). Now it says what it would load and plans the whole export from empty."""
    monkeypatch.setattr(lio.kernel, "CONFIGFS_ROOT", str(tmp_path / "config"))
    monkeypatch.setattr(lio.kernel, "CONFIGFS", str(tmp_path / "config" / "target"))
    monkeypatch.setattr(lio.kernel, "ISCSI_TARGET_MODULE", str(tmp_path / "module"))
    runner = _Recording(dry_run=True)
    with mock.patch.object(lio.kernel, "_rtslib", side_effect=AssertionError("rtslib must not be touched")):
        out = lio.reconcile(desired(), runner=runner, load_kernel=True)
    assert out["changed"] is True
    assert out["actions"][:2] == [f"mount configfs at {tmp_path / 'config'}",
                                  "load iscsi_target_mod (and target_core_mod)"]
    assert any(a.startswith("create_target") for a in out["actions"])
    assert any("check mode would" in w and "empty configuration" in w for w in out["warnings"])
    assert runner.planned[:2] == [["mount", "-t", "configfs", "none", str(tmp_path / "config")],
                                  ["modprobe", "-a", "target_core_mod", "iscsi_target_mod"]]
    # every LIO change of the plan is in the runner's record too, planned (issue 28: one dry-run channel)
    assert [e[1] for e in runner.planned[2:]] == [a for a in out["actions"][2:]] and \
        {e[0] for e in runner.planned[2:]} == {"rtslib"}
    assert runner.executed == []


def test_kernel_ready_needs_both_configfs_tree_and_module(tmp_path, monkeypatch):
    monkeypatch.setattr(lio.kernel, "CONFIGFS", str(tmp_path / "t"))
    monkeypatch.setattr(lio.kernel, "ISCSI_TARGET_MODULE", str(tmp_path / "m"))
    assert not lio.kernel_ready()
    (tmp_path / "t").mkdir()
    assert not lio.kernel_ready()
    (tmp_path / "m").mkdir()
    assert lio.kernel_ready()


# -- SendTargets discovery is closed: no host learns a target name it was not given ----------------------

def test_discovery_open_in_the_recorded_dump_is_closed_first_and_stays_closed():
    recorded = live(discovery="open")  # as the lab recorded it: rtslib dumps no iscsi fabric module
    assert not lio.discovery_closed(recorded)
    actions = lio.changes(lio.plan(desired(), recorded))
    assert [a.kind for a in actions] == ["close_discovery"]
    after = lio.simulate(recorded, actions)
    assert lio.discovery_closed(after) and lio.changes(lio.plan(desired(), after)) == []
    assert lio.summarize(recorded)["discovery"] == "open" and lio.summarize(after)["discovery"] == "closed"


def test_discovery_with_credentials_is_not_closed():
    state = live()
    state["dump"]["fabric_modules"] = [{"name": "iscsi", "discovery_enable_auth": True, "discovery_userid": "all",
                                       "discovery_password": "one-for-everyone"}]
    assert not lio.discovery_closed(state)
    assert ops(lio.plan(desired(), state)) == ["close_discovery"]


def test_closing_discovery_enforces_auth_before_clearing_the_credentials():
    writes = []

    class FM:
        def __setattr__(self, name, value):
            writes.append((name, value))

    class Rts:
        FabricModule = staticmethod(lambda name: FM())
        RTSRoot = staticmethod(lambda: type("R", (), {"dump": lambda _s: {}})())

    lio.apply([lio.step("close_discovery")], rts=Rts(), save_config=False)
    assert writes[0] == ("discovery_enable_auth", True)
    assert sorted(writes[1:]) == sorted((f"discovery_{a}", "") for a in lio.DISCOVERY_CREDENTIALS)


# -- withdrawn access: ACLs (and mapped LUNs) removed, kept ones get their current CHAP -----------------------

def test_plan_access_revokes_the_others_and_refuses_a_logged_in_one_unless_forced():
    state = live(sessions=False)
    state["dump"] = lio.simulate(state, lio.changes(lio.plan(desired(acls=[
        {"initiator": GPU1, "chap": CHAP1}, {"initiator": GPU2, "chap": CHAP2}]), state)))["dump"]
    chap1 = lio.parse_desired(desired()).targets[0].acls[0].chap
    actions = lio.changes(lio.plan_access(state, target_iqn=IQN, keep={GPU1: chap1}))
    assert [(a.kind, a.params["initiator"]) for a in actions] == [
        ("delete_mapped_lun", GPU2), ("delete_mapped_lun", GPU2), ("delete_acl", GPU2)]
    assert lio.revoked(actions) == [GPU2]
    after = lio.simulate(state, actions)
    tpg = next(t for t in after["dump"]["targets"] if t["wwn"] == IQN)["tpgs"][0]
    assert [a["node_wwn"] for a in tpg["node_acls"]] == [GPU1]
    # the recorded session is GPU1's: revoking it is refused, unless forced or its logout was only planned
    busy = live()
    with pytest.raises(Busy, match="logged in"):
        lio.plan_access(busy, target_iqn=IQN, keep={})
    assert lio.revoked(lio.plan_access(busy, target_iqn=IQN, keep={}, force=True)) == [GPU1]
    assert lio.revoked(lio.plan_access(busy, target_iqn=IQN, keep={}, planned_logouts=frozenset({GPU1}))) == [GPU1]


def test_plan_access_sets_a_rotated_secret_only():
    rotated = lio.parse_desired(desired(acls=[{"initiator": GPU1, "chap": {"userid": "gpu1",
                                                                           "password": "rotated-00001"}}]))
    actions = lio.changes(lio.plan_access(live(), target_iqn=IQN, keep={GPU1: rotated.targets[0].acls[0].chap}))
    assert [(a.kind, a.params["field"]) for a in actions] == [("set_auth", "password")]
    assert "rotated-00001" not in " ".join(a.description for a in actions)
    same = lio.parse_desired(desired()).targets[0].acls[0].chap
    assert lio.changes(lio.plan_access(live(), target_iqn=IQN, keep={GPU1: same})) == []


def test_a_chap_secret_is_carried_in_the_steps_data_only_and_reaches_rtslib():
    """A LIO step is a model.Step: a CHAP secret is in its ``data`` (never shown), redacted in its params, its
    description, its JSON and what the runner records; rtslib gets the secret, and the simulation predicts it."""
    rotated = lio.parse_desired(desired(acls=[{"initiator": GPU1, "chap": {"userid": "gpu1",
                                                                           "password": "rotated-00001"}}]))
    steps = lio.changes(lio.plan_access(live(), target_iqn=IQN, keep={GPU1: rotated.targets[0].acls[0].chap}))
    (step,) = steps
    assert (step.kind, step.target, step.reason, step.data) == ("set_auth", IQN, "CHAP of this host", "rotated-00001")
    assert step.description == (f"set_auth {IQN} initiator={GPU1} field=password value={lio.REDACTED} "
                                "(CHAP of this host)")
    assert lio.step_dict(step) == {"op": "set_auth", "target": IQN, "reason": "CHAP of this host", "params": {
        "initiator": GPU1, "field": "password", "value": lio.REDACTED}}
    runner = _Recording(dry_run=True)
    assert lio.run_plan(steps, runner) == [step.description] and runner.planned == [["rtslib", step.description]]
    assert "rotated-00001" not in repr(step) + json.dumps(step.to_dict()) + str(runner.planned)
    acl = type("ACL", (), {})()
    lio.OPERATIONS["set_auth"].execute(type("X", (), {"acl": lambda _s, iqn, initiator: acl})(), step)
    assert acl.chap_password == "rotated-00001"
    after = lio.simulate(live(), steps)["dump"]
    assert next(t for t in after["targets"] if t["wwn"] == IQN)["tpgs"][0]["node_acls"][0]["chap_password"] == \
        "rotated-00001"
    cleared = lio.step("set_auth", IQN, {"initiator": GPU1, "field": "mutual_password", "value": ""})
    assert (cleared.data, cleared.params["value"], cleared.description) == (
        "", "", f"set_auth {IQN} initiator={GPU1} field=mutual_password value=")


def test_save_replaces_the_file_atomically_and_keeps_the_old_one_when_the_dump_fails(tmp_path):
    path = tmp_path / "saveconfig.json"
    path.write_text('{"old": true}\n')

    class Root:
        def __init__(self, fail):
            self.fail = fail

        def dump(self):
            if self.fail:
                raise OSError("configfs went away")
            return {"targets": [], "storage_objects": []}

    with pytest.raises(OSError):
        lio.save(type("Rts", (), {"RTSRoot": staticmethod(lambda: Root(True))}), str(path))
    assert path.read_text() == '{"old": true}\n'
    lio.save(type("Rts", (), {"RTSRoot": staticmethod(lambda: Root(False))}), str(path))
    assert json.loads(path.read_text()) == {"targets": [], "storage_objects": []}
    assert path.stat().st_mode & 0o777 == 0o600 and sorted(p.name for p in tmp_path.iterdir()) == ["saveconfig.json"]


# -- a change that fails half-way: what was applied is saved for the boot-time restore (issue 26, item 4) -----

class SimulatedKernel:
    """LIO as a dump that each executed action changes (the actions' own simulation, ``lio.OPERATIONS``):
    ``execute`` of every operation is replaced for the test, and the step numbered ``fail_at`` raises.
    ``RTSRoot().dump()`` returns the dump as it is, so a save writes what was applied."""

    class RTSLibError(Exception):
        pass

    def __init__(self, live: dict, fail_at: int):
        self.dump = copy.deepcopy(live["dump"])
        self.model = lio.operations.DumpModel(self.dump)
        self.fail_at, self.steps = fail_at, 0
        kernel = self
        self.RTSRoot = lambda: type("Root", (), {"dump": lambda _s: copy.deepcopy(kernel.dump)})()
        self.FabricModule = lambda _name: None

    def operations(self) -> dict:
        def execute(op):
            def run(_ex, action):
                if self.steps == self.fail_at:
                    raise self.RTSLibError(f"step {self.steps} refused")
                self.steps += 1
                op.simulate(self.model, action)
            return run
        return {name: dataclasses.replace(op, execute=execute(op), creates=False)
                for name, op in lio.OPERATIONS.items()}


def _withdraw_gpu2() -> tuple[dict, list]:
    """The recorded export with a second ACL (gpu2) and the plan that withdraws gpu2: its two mapped LUNs, its
    ACL (three steps)."""
    state = live(sessions=False)
    state["dump"] = lio.simulate(state, lio.changes(lio.plan(desired(acls=[
        {"initiator": GPU1, "chap": CHAP1}, {"initiator": GPU2, "chap": CHAP2}]), state)))["dump"]
    chap1 = lio.parse_desired(desired()).targets[0].acls[0].chap
    return state, lio.changes(lio.plan_access(state, target_iqn=IQN, keep={GPU1: chap1}))


def _unpublish() -> tuple[dict, list]:
    """The recorded export removed whole (unpublish's plan_removal): target, then its two backstores."""
    state = live(sessions=False)
    return state, lio.changes(lio.plan_removal(state, iqn_base="iqn.2026-11.io.fabric.lab",
                                               backstore_prefix="fabric_hc_", target_iqns=[IQN]))


@pytest.mark.parametrize("make", [_withdraw_gpu2, _unpublish], ids=["withdraw an ACL", "unpublish"])
def test_a_change_failing_at_step_k_leaves_the_steps_before_it_applied_and_saved(tmp_path, make):
    state, todo = make()
    assert len(todo) == 3
    for k in range(len(todo)):
        kernel = SimulatedKernel(state, fail_at=k)
        saved = tmp_path / f"saveconfig-{k}.json"
        with mock.patch.dict(lio.OPERATIONS, kernel.operations()), pytest.raises(lio.LioApplyError) as err:
            lio.apply(todo, rts=kernel, save_file=str(saved))
        expected = lio.simulate(state, todo[:k])["dump"]  # steps 0..k-1 applied, step k and later not
        assert err.value.done == [a.description for a in todo[:k]]
        assert f"step {k} refused" in err.value.problem and "saved for the next boot" in err.value.fix
        assert json.loads(saved.read_text()) == expected == kernel.dump
        assert saved.stat().st_mode & 0o777 == 0o600
        if make is _unpublish and k >= 1:  # the target (with its ACL) went at step 0: gone from the file too
            assert IQN not in [t["wwn"] for t in json.loads(saved.read_text())["targets"]]
    # the withdrawn ACL is gone from the saved file as soon as its own step ran, whatever failed after it
    if make is _withdraw_gpu2:
        acls = [a["node_wwn"] for t in json.loads(saved.read_text())["targets"] if t["wwn"] == IQN
                for a in t["tpgs"][0]["node_acls"]]
        assert acls == [GPU1, GPU2]  # k = 2: the ACL's own step failed, so it is (rightly) still there
        kernel = SimulatedKernel(state, fail_at=99)
        with mock.patch.dict(lio.OPERATIONS, kernel.operations()):
            lio.apply(todo, rts=kernel, save_file=str(tmp_path / "all.json"))
        acls = [a["node_wwn"] for t in json.loads((tmp_path / "all.json").read_text())["targets"] if t["wwn"] == IQN
                for a in t["tpgs"][0]["node_acls"]]
        assert acls == [GPU1]


def test_a_failed_save_after_a_failed_change_is_reported_with_it(tmp_path):
    state, todo = _unpublish()
    kernel = SimulatedKernel(state, fail_at=1)
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    with mock.patch.dict(lio.OPERATIONS, kernel.operations()), pytest.raises(lio.LioApplyError) as err:
        lio.apply(todo, rts=kernel, save_file=str(blocked / "saveconfig.json"))
    assert "step 1 refused" in err.value.problem and "could not be saved" in err.value.problem
    assert "1 step(s)" in err.value.problem and "writable" in err.value.fix


def test_an_interrupted_change_is_saved_too(tmp_path):
    state, todo = _unpublish()
    kernel = SimulatedKernel(state, fail_at=99)
    ops = kernel.operations()
    inner = ops["delete_backstore"].execute

    def interrupted(ex, action):
        inner(ex, action)
        raise KeyboardInterrupt  # a signal after the step (SIGINT, or SIGTERM made into an exception)

    ops["delete_backstore"] = dataclasses.replace(ops["delete_backstore"], execute=interrupted)
    with mock.patch.dict(lio.OPERATIONS, ops), pytest.raises(KeyboardInterrupt):
        lio.apply(todo, rts=kernel, save_file=str(tmp_path / "saveconfig.json"))
    assert json.loads((tmp_path / "saveconfig.json").read_text()) == kernel.dump
    assert len(kernel.dump["storage_objects"]) == len(state["dump"]["storage_objects"]) - 1
