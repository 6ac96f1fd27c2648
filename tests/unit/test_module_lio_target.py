# ruff: noqa: I001  (support must be imported first: it puts module_utils on the import path)
"""library/fabric_lio_target.py in-process, with rtslib patched out (reads come from the recorded
lab dump in tests/unit/data/lio/, apply records its actions). The real rtslib path is covered by
tests/integration/test_lio_target.py against the lab.
"""

from __future__ import annotations

import copy
import json
from unittest import mock

import pytest
from support import DATA, run_module

import ansible.module_utils.fabric_core.lio as mlio  # the module's copy of fabric_core.lio

REC = json.loads((DATA / "lio" / "rec_dump_with_session.json").read_text())
GPU1 = "iqn.2004-10.com.debian:cfea9e9490c1"
IQN = "iqn.2026-11.io.fabric.lab:hc-rec"


def wwn(name):
    return next(s["wwn"] for s in REC["dump"]["storage_objects"] if s["name"] == name)


ARGS = {"base_iqn": "iqn.2026-11.io.fabric.lab", "backstore_prefix": "fabric_hc_", "targets": [
    {"name": "hc-rec", "portals": [{"ip": "10.77.0.11", "port": 3260}],
     "luns": [{"name": "rec_a", "device": "/dev/zvol/hc_pool/rec_a", "wwn": wwn("fabric_hc_rec_a")},
              {"name": "rec_b", "device": "/dev/zvol/hc_pool/rec_b", "wwn": wwn("fabric_hc_rec_b")}],
     "acls": [{"initiator": GPU1, "chap": {"userid": "gpu1", "password": "hcsecret0001"}}]}]}


class Lab:
    """Stands in for the kernel: read_live returns `state`, apply simulates the actions on it."""

    def __init__(self, state):
        self.state = state
        self.applied = []

    def read_live(self, desired=None, rts=None):
        live = copy.deepcopy(self.state)
        live["devices"] = {p: {"exists": True, "block": True, "realpath": p}
                           for p in ("/dev/zvol/hc_pool/rec_a", "/dev/zvol/hc_pool/rec_b", "/dev/zvol/hc_pool/rec_f")}
        return live

    def apply(self, actions, rts=None, save_config=True, save_file=None):
        self.applied.append([a.describe() for a in mlio.changes(actions)])
        self.state = mlio.simulate(self.state, actions)
        return self.applied[-1]

    def patches(self):
        return [mock.patch.object(mlio, "read_live", self.read_live), mock.patch.object(mlio, "apply", self.apply),
                mock.patch.object(mlio, "_rtslib", lambda: object())]


def empty():
    return {"dump": {"storage_objects": [], "targets": []}, "sessions": []}


def test_create_then_idempotent_with_diff():
    lab = Lab(empty())
    first = run_module("fabric_lio_target", ARGS, diff=True, extra_patches=lab.patches())
    assert first["changed"] is True and "failed" not in first
    assert first["actions"][0].startswith("create_backstore name=fabric_hc_rec_a")
    assert first["targets"][IQN]["acls"][GPU1]["mapped_luns"]["1"]["write_protect"] is True
    assert first["diff"]["before"]["targets"] == {} and IQN in first["diff"]["after"]["targets"]
    assert "hcsecret0001" not in json.dumps(first)
    second = run_module("fabric_lio_target", ARGS, extra_patches=lab.patches())
    assert second["changed"] is False and second["actions"] == [] and len(lab.applied) == 1


def test_check_mode_plans_from_real_reads_and_applies_nothing():
    lab = Lab(empty())
    out = run_module("fabric_lio_target", ARGS, check_mode=True, diff=True, extra_patches=lab.patches())
    assert out["changed"] is True and len(out["actions"]) == 17
    assert lab.applied == [] and lab.state == empty()
    assert IQN in out["diff"]["after"]["targets"]  # the predicted result


def test_converged_recorded_state_reports_foreign_objects():
    lab = Lab({"dump": REC["dump"], "sessions": REC["sessions"]})
    out = run_module("fabric_lio_target", ARGS, extra_patches=lab.patches())
    assert out["changed"] is False
    assert any("iqn.2026-11.io.other.lab:hc-foreign" in k and "not project-owned" in k for k in out["kept"])


def test_writable_with_two_acls_fails_before_any_change():
    args = copy.deepcopy(ARGS)
    t = args["targets"][0]
    t.update(writable=True, acls=[{"initiator": GPU1}, {"initiator": "iqn.2004-10.com.debian:fa49841e5fe"}])
    t["luns"][0]["readonly"] = False
    lab = Lab(empty())
    out = run_module("fabric_lio_target", args, extra_patches=lab.patches())
    assert out["failed"] is True and "exactly one writer" in out["msg"] and lab.applied == []


def test_busy_purge_fails_with_the_session_named():
    args = dict(ARGS, targets=[], purge=True)
    lab = Lab({"dump": REC["dump"], "sessions": REC["sessions"]})
    out = run_module("fabric_lio_target", args, extra_patches=lab.patches())
    assert out["failed"] is True and GPU1 in out["msg"] and "force" in out["msg"] and lab.applied == []
    forced = run_module("fabric_lio_target", dict(args, force=True), extra_patches=lab.patches())
    assert forced["changed"] is True and lab.applied[0][0].startswith(f"delete_target {IQN}")


@pytest.mark.parametrize("password", ["short", "x" * 17])
def test_bad_chap_secret(password):
    args = copy.deepcopy(ARGS)
    args["targets"][0]["acls"][0]["chap"]["password"] = password
    out = run_module("fabric_lio_target", args, extra_patches=Lab(empty()).patches())
    assert out["failed"] is True and "12-16" in out["msg"]


def test_apply_failure_reports_partial_result():
    lab = Lab(empty())

    def failing_apply(actions, rts=None, save_config=True, save_file=None):
        raise mlio.LioApplyError("LIO change failed at `create_acl ...`: boom", "fix it", ["create_target x"],
                                 ["create_target x"])

    patches = lab.patches()[:1] + [mock.patch.object(mlio, "apply", failing_apply),
                                   mock.patch.object(mlio, "_rtslib", lambda: object())]
    out = run_module("fabric_lio_target", ARGS, extra_patches=patches)
    assert out["failed"] is True and "boom" in out["msg"]
    assert out["done"] == ["create_target x"] and out["rolled_back"] == ["create_target x"]
