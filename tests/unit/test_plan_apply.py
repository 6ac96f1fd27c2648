# ruff: noqa: I001  (support must be imported first: it puts module_utils on the import path)
"""Plan, then apply, for sessions and LIO: the pure session planner (declared + live -> steps, conflicts,
warnings, the predicted after-state) and its one applier; LIO's one table of operations (rank,
simulation, execution); every library change (libzfs_core, rtslib) recorded by the runner."""

from __future__ import annotations

import copy
import json

import pytest
from support import DATA, ScriptedRunner

from fabric_core.node import iscsi
from fabric_core.storage import lio, lzc
from fabric_core.base.errors import Busy
from fabric_core.node.iscsi import SessionLive, plan_session, session_spec
from fabric_core.base.runner import Runner

PORTAL = "10.77.0.11:3260"
IQN = "iqn.2026-11.io.fabric.lab:hd-xfs"
CHAP = {"username": "hduser", "password": "hdsecret12345"}
SESSION = {"target": IQN, "portal": PORTAL, "tpgt": 1, "sid": 3, "disks": [{"lun": 0, "disk": "sda"}]}


def record(**over) -> dict:
    base = {"node.startup": "automatic", "node.session.auth.authmethod": "None"}
    return {**base, **over}


# --- sessions: the pure planner -------------------------------------------------------------------

def test_a_missing_record_is_created_then_every_setting_and_the_login_are_planned():
    spec = session_spec(portal="10.77.0.11", target_iqn=IQN)
    plan = plan_session(spec, SessionLive(None, None))
    assert [(s.kind, s.keys) for s in plan.steps] == [
        ("create_record", ()), ("update", ("node.startup", "node.session.auth.authmethod")), ("login", ())]
    assert plan.steps[1].argv[-8:] == ["-n", "node.startup", "-v", "automatic",
                                       "-n", "node.session.auth.authmethod", "-v", "None"]
    assert plan.conflicts == [] and plan.warnings == [] and plan.creates_record
    assert plan.before == {"logged_in": False, "record": False}
    assert plan.after == {"logged_in": True, "record": True, "node.startup": "automatic",
                          "node.session.auth.authmethod": "None"}


def test_a_missing_record_is_planned_from_the_target_name_with_no_dry_run_input():
    """The record is made from the target name given (the portal is never asked for a discovery); the planner takes
    no dry-run flag (issue 28: a dry run is the runner's alone), so a dry run and a real run plan the same steps."""
    import inspect

    assert "dry_run" not in inspect.signature(plan_session).parameters
    spec = session_spec(portal=PORTAL, target_iqn=IQN)
    plan = plan_session(spec, SessionLive(None, None))
    assert plan.conflicts == [] and plan.warnings == []
    assert plan.steps[0].kind == "create_record" and plan.steps[-1].kind == "login"


def test_a_converged_session_plans_nothing():
    spec = session_spec(portal=PORTAL, target_iqn=IQN)
    plan = plan_session(spec, SessionLive(SESSION, record()))
    assert plan.steps == [] and plan.before == plan.after


def test_new_credentials_on_a_live_session_warn_and_predict_a_masked_change():
    spec = session_spec(portal=PORTAL, target_iqn=IQN, chap=CHAP)
    live = record(**{"node.session.auth.authmethod": "CHAP", "node.session.auth.username": "hduser",
                     "node.session.auth.password": "oldsecret1234", "node.session.auth.username_in": "",
                     "node.session.auth.password_in": ""})
    plan = plan_session(spec, SessionLive(SESSION, live))
    assert plan.updated == ["node.session.auth.password"] and "next login" in plan.warnings[0]
    assert plan.after["node.session.auth.password"] == "******** (changed)"
    assert "hdsecret12345" not in json.dumps([plan.before, plan.after, plan.warnings])
    (step,) = plan.steps
    assert step.kind == "write_secrets" and step.keys == ("node.session.auth.password",)
    assert "hdsecret12345" not in step.description and "hdsecret12345" not in str(step.to_dict())
    assert "hdsecret12345" not in " ".join(step.argv)
    assert json.loads(step.data) == {"node.session.auth.password": "hdsecret12345"}  # on stdin only


def test_a_logout_under_a_mount_is_a_conflict_unless_the_caller_names_that_unmount():
    spec = session_spec(portal=PORTAL, target_iqn=IQN, state="logged_out")
    live = SessionLive(SESSION, record(), mounted=["/dev/sda on /datasets/a/v1"])
    assert isinstance(plan_session(spec, live).conflicts[0], Busy)
    dry = plan_session(spec, live, unmounting=("/datasets/a/v1",))
    assert dry.conflicts == [] and [s.kind for s in dry.steps] == ["logout", "delete_record"]
    assert dry.after == {"logged_in": False, "record": False}


def test_the_applier_refuses_a_conflict_before_any_change():
    spec = session_spec(portal=PORTAL, target_iqn=IQN, state="logged_out")
    live = SessionLive(SESSION, record(), mounted=["/dev/sda on /datasets/a/v1"])
    runner = ScriptedRunner([])
    with pytest.raises(Busy):
        iscsi.apply_session(runner, spec, live, plan_session(spec, live))
    assert runner.calls == [] and runner.executed == []


# --- LIO: one table of operations -----------------------------------------------------------------

REC = json.loads((DATA / "lio" / "rec_dump_with_session.json").read_text())
DEVICES = {d: {"exists": True, "block": True, "realpath": d} for d in ("/dev/zvol/hc_pool/rec_a",
                                                                       "/dev/zvol/hc_pool/rec_b")}


def desired(acls) -> dict:
    return {"base_iqn": "iqn.2026-11.io.fabric.lab", "backstore_prefix": "fabric_hc_", "targets": [{
        "name": "hc-new", "portals": [{"ip": "10.77.0.11"}, {"ip": "fd00::11", "port": 3261}],
        "luns": [{"name": "rec_a", "device": "/dev/zvol/hc_pool/rec_a"},
                 {"name": "rec_b", "device": "/dev/zvol/hc_pool/rec_b"}], "acls": acls}]}


def test_the_table_orders_plans_and_knows_every_operation():
    assert list(lio.RANK) == list(lio.OPERATIONS) and lio.RANK["keep"] == 0
    assert lio.RANK["delete_mapped_lun"] < lio.RANK["delete_target"] < lio.RANK["create_backstore"]
    assert lio.RANK["create_target"] < lio.RANK["create_tpg"] < lio.RANK["create_lun"] < lio.RANK["create_acl"]
    assert lio.RANK["create_mapped_lun"] < lio.RANK["set_auth"] < lio.RANK["enable_tpg"]
    creating = {name for name, op in lio.OPERATIONS.items() if op.creates}
    assert creating == {n for n in lio.OPERATIONS if n.startswith("create_")}


def test_a_simulated_plan_is_converged_when_planned_again():
    """Simulating each planned operation predicts the state its execution makes: planning again from the
    simulation finds nothing to change, for a new export with CHAP, then a changed and a removed ACL."""
    live = {"dump": {"storage_objects": [], "targets": []}, "sessions": [], "devices": DEVICES}
    chap = {"userid": "gpu1", "password": "hcsecret0001", "mutual_userid": "t", "mutual_password": "hcsecret0002"}
    for acls in ([{"initiator": "iqn.2026-11.io.fabric.lab:gpu1", "chap": chap}],
                 [{"initiator": "iqn.2026-11.io.fabric.lab:gpu1", "luns": ["rec_b"],
                   "chap": dict(chap, mutual_userid="", mutual_password="")}],
                 []):
        actions = lio.plan(desired(acls), live, purge=True)  # the first plan also closes discovery
        assert lio.changes(actions)
        live = lio.simulate(live, actions)
        assert lio.changes(lio.plan(desired(acls), live, purge=True)) == []


def test_removal_is_planned_in_the_table_order_and_simulated():
    live = {"dump": copy.deepcopy(REC["dump"]), "sessions": [], "devices": DEVICES}
    actions = lio.plan_removal(live, iqn_base="iqn.2026-11.io.fabric.lab", backstore_prefix="fabric_hc_",
                               target_iqns=["iqn.2026-11.io.fabric.lab:hc-rec"])
    assert [a.kind for a in actions] == ["delete_target", "delete_backstore", "delete_backstore"]
    after = lio.simulate(live, actions)["dump"]
    assert "iqn.2026-11.io.fabric.lab:hc-rec" not in [t["wwn"] for t in after["targets"]]
    assert not [s for s in after["storage_objects"] if s["name"].startswith("fabric_hc_rec")]


def test_the_applier_of_a_dry_run_predicts_and_changes_nothing():
    live = {"dump": {"storage_objects": [], "targets": []}, "sessions": [], "devices": DEVICES}
    state = lio.parse_desired(desired([{"initiator": "iqn.2026-11.io.fabric.lab:gpu1",
                                        "chap": {"userid": "gpu1", "password": "hcsecret0001"}}]))
    runner = Recorder(dry_run=True)
    out = lio.converge(state, live, lio.plan(state, live), runner=runner, rts=object())
    assert out["changed"] and out["before"]["targets"] == {} and "done" not in out
    assert runner.executed == [] and ("rtslib", "create_target iqn.2026-11.io.fabric.lab:hc-new") in [
        tuple(e[:1]) + (" ".join(e[1].split()[:2]),) for e in runner.planned]
    assert list(out["after"]["targets"]) == ["iqn.2026-11.io.fabric.lab:hc-new"]


# --- library changes recorded like commands -------------------------------------------------------

class Recorder(Runner):
    def _run(self, argv, data):
        raise AssertionError(f"no command expected: {argv}")


def test_a_library_change_is_planned_in_a_dry_run_and_recorded_when_made():
    dry = Recorder(dry_run=True)
    assert dry.call(("lzc_hold", "tank/d@v1", "fabric:published"), lambda: pytest.fail("ran in a dry run")) is None
    assert dry.planned == [("lzc_hold", "tank/d@v1", "fabric:published")] and dry.executed == []
    real, made = Recorder(), []
    assert real.call(("lzc_release", "tank/d@v1"), lambda: made.append(1) or "done") == "done"
    real.record(("rtslib", "create_target iqn.x"))
    assert made == [1] and real.executed == [("lzc_release", "tank/d@v1"), ("rtslib", "create_target iqn.x")]


def test_lzc_changes_go_through_the_runner(monkeypatch):
    monkeypatch.setattr(lzc, "holds", lambda name: [])
    dry = Recorder(dry_run=True)
    assert lzc.hold("tank/d@v1", runner=dry) is True
    assert lzc.destroy_snapshots(["tank/d@a", "tank/d@b"], runner=dry) == ["tank/d@a", "tank/d@b"]
    lzc.rollback_to("tank/d", "tank/d@a", runner=dry)
    assert dry.planned == [("lzc_hold", "tank/d@v1", "fabric:published"),
                           ("lzc_destroy_snaps", "tank/d@a", "tank/d@b"), ("lzc_rollback_to", "tank/d", "tank/d@a")]
    assert lzc.release("tank/d@v1", runner=dry) is False  # not held: nothing to do, nothing recorded
    assert len(dry.planned) == 3
