# ruff: noqa: I001  (support must be imported first: it puts module_utils on the import path)
"""plugins/modules/fabric_lio_target.py in-process, with rtslib patched out (reads come from the recorded
lab dump in tests/unit/data/lio/, apply records its actions). The real rtslib path is covered by
tests/integration/test_lio_target.py against the lab.

LIO's kernel side (configfs mounted at /sys/kernel/config with its target/ tree, iscsi_target_mod loaded)
is a `Kernel` in the test's tmp_path: loaded unless a test unloads it. The module mounts and loads through
its command runner, so every mount/modprobe it runs is a scripted command (run_module fails any other).
"""

from __future__ import annotations

import copy
import json
import os
from unittest import mock

import pytest
from support import DATA, run_module

# the module's copy of fabric_core.storage.lio: its kernel module, what reconcile calls (what the tests replace)
import ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage.lio.kernel as mlio

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
        self.applied.append([a.description for a in mlio.changes(actions)])
        self.state = mlio.simulate(self.state, actions)
        return self.applied[-1]

    def patches(self):
        return [mock.patch.object(mlio, "read_live", self.read_live), mock.patch.object(mlio, "apply", self.apply),
                mock.patch.object(mlio, "_rtslib", lambda: object())]


CLOSED = [{"name": "iscsi", "discovery_enable_auth": True}]  # SendTargets discovery closed


def empty():
    return {"dump": {"storage_objects": [], "targets": [], "fabric_modules": copy.deepcopy(CLOSED)}, "sessions": []}


class Kernel:
    """LIO's kernel side of a node, under a tmp directory: configfs's mount point, its target/ tree (there once
    target_core_mod is loaded) and /sys/module/iscsi_target_mod. The module's copy of fabric_core.storage.lio looks at
    these paths; whether the mount point is mounted is answered from `mounted`."""

    def __init__(self, root, monkeypatch):
        self.configfs_root = root / "sys-kernel-config"
        self.configfs = self.configfs_root / "target"
        self.module = root / "sys-module-iscsi_target_mod"
        self.mounted = False
        self.configfs_root.mkdir()
        monkeypatch.setattr(mlio, "CONFIGFS_ROOT", str(self.configfs_root))
        monkeypatch.setattr(mlio, "CONFIGFS", str(self.configfs))
        monkeypatch.setattr(mlio, "ISCSI_TARGET_MODULE", str(self.module))
        ismount = os.path.ismount
        monkeypatch.setattr(mlio.os.path, "ismount",
                            lambda p: self.mounted if str(p) == str(self.configfs_root) else ismount(p))

    def load(self):
        self.mounted = True
        self.configfs.mkdir(exist_ok=True)
        self.module.mkdir(exist_ok=True)

    def unload(self, *, keep_configfs_mounted: bool = False):
        """A node where the target modules are not loaded (configfs mounted or not)."""
        self.configfs.rmdir()
        self.module.rmdir()
        self.mounted = keep_configfs_mounted

    # the commands ensure_kernel runs; both print nothing when they succeed (only the exit status is read)
    def mount_step(self):
        return {"command": ["mount", "-t", "configfs", "none", str(self.configfs_root)], "rc": 0}

    @staticmethod
    def modprobe_step():
        return {"command": ["modprobe", "-a", "target_core_mod", "iscsi_target_mod"], "rc": 0}


@pytest.fixture(autouse=True)
def kernel(tmp_path, monkeypatch):
    """LIO loaded, as on a node where the lio_target role has run; tests of a node without it unload it."""
    node = Kernel(tmp_path, monkeypatch)
    node.load()
    return node


def test_create_then_idempotent_with_diff():
    lab = Lab(empty())
    first = run_module("fabric_lio_target", ARGS, diff=True, extra_patches=lab.patches())
    assert first["changed"] is True and "failed" not in first
    assert first["_commands"] == [] and first["warnings"] == []  # LIO loaded: no mount, no modprobe
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
    lab = Lab({"dump": dict(REC["dump"], fabric_modules=CLOSED), "sessions": REC["sessions"]})
    out = run_module("fabric_lio_target", ARGS, extra_patches=lab.patches())
    assert out["changed"] is False
    assert any("iqn.2026-11.io.other.lab:hc-foreign" in k and "not project-owned" in k for k in out["kept"])


def test_writable_with_two_acls_fails_before_any_change():
    args = copy.deepcopy(ARGS)
    t = args["targets"][0]
    t.update(writable=True, acls=[{"initiator": GPU1, "chap": {"userid": "gpu1", "password": "hcsecret0001"}},
                                  {"initiator": "iqn.2004-10.com.debian:fa49841e5fe",
                                   "chap": {"userid": "gpu2", "password": "hcsecret0002"}}])
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


def test_check_mode_on_a_node_without_lio_loads_nothing_and_plans_from_empty(kernel):
    """Issue 18: check mode loaded iscsi_target_mod through rtslib. Now it runs no command, touches neither rtslib
    nor the live read, says what it would load, and plans the whole export from an empty configuration."""
    kernel.unload()  # a fresh storage node: configfs not mounted, no target/ tree, no module
    untouchable = mock.Mock(side_effect=AssertionError("LIO must not be read on a node without it in check mode"))
    patches = [mock.patch.object(mlio, "read_live", untouchable), mock.patch.object(mlio, "_rtslib", untouchable),
               mock.patch.object(mlio, "apply", untouchable)]
    out = run_module("fabric_lio_target", ARGS, check_mode=True, diff=True, extra_patches=patches)
    assert out["changed"] is True and "failed" not in out
    assert out["_commands"] == []  # mount and modprobe are planned, not run
    loading = [f"mount configfs at {kernel.configfs_root}", "load iscsi_target_mod (and target_core_mod)"]
    assert out["actions"][:2] == loading
    assert out["actions"][2].startswith("close_discovery")  # an empty configuration: discovery is open
    assert out["actions"][3].startswith("create_backstore name=fabric_hc_rec_a") and len(out["actions"]) == 3 + 17
    assert out["warnings"][0] == (f"LIO is not loaded on this node: check mode would {loading[0]} and {loading[1]}, "
                                  "and plans from an empty configuration")
    assert out["diff"]["before"]["targets"] == {} and IQN in out["diff"]["after"]["targets"]
    assert "hcsecret0001" not in json.dumps(out)
    assert not kernel.mounted and not kernel.configfs.exists() and not kernel.module.exists()


def test_check_mode_with_lio_loaded_reads_the_live_state_and_runs_nothing():
    lab = Lab({"dump": dict(REC["dump"], fabric_modules=CLOSED), "sessions": REC["sessions"]})
    out = run_module("fabric_lio_target", ARGS, check_mode=True, extra_patches=lab.patches())
    assert out["changed"] is False and out["_commands"] == [] and out["actions"] == []
    assert not any("LIO is not loaded" in w for w in out["warnings"])


def test_a_real_run_on_a_node_without_lio_mounts_configfs_and_loads_the_module_first(kernel):
    kernel.unload()
    lab = Lab(empty())
    out = run_module("fabric_lio_target", ARGS, [kernel.mount_step(), Kernel.modprobe_step()],
                     extra_patches=lab.patches())
    assert out["changed"] is True and "failed" not in out
    assert out["_commands"] == [kernel.mount_step()["command"], Kernel.modprobe_step()["command"]]
    assert out["actions"][:2] == [f"mount configfs at {kernel.configfs_root}",
                                  "load iscsi_target_mod (and target_core_mod)"]
    assert len(lab.applied) == 1 and lab.applied[0][0].startswith("create_backstore name=fabric_hc_rec_a")


def test_configfs_mounted_without_the_iscsi_module_only_loads_it(kernel):
    kernel.unload(keep_configfs_mounted=True)  # configfs mounted, the target modules not loaded
    lab = Lab({"dump": dict(REC["dump"], fabric_modules=CLOSED), "sessions": REC["sessions"]})
    out = run_module("fabric_lio_target", ARGS, [Kernel.modprobe_step()], extra_patches=lab.patches())
    assert out["_commands"] == [Kernel.modprobe_step()["command"]]
    assert out["changed"] is True and out["actions"] == ["load iscsi_target_mod (and target_core_mod)"]
    assert lab.applied == []  # the recorded state is converged: nothing else to do


def test_the_recorded_open_discovery_is_closed_and_reported():
    lab = Lab({"dump": REC["dump"], "sessions": REC["sessions"]})  # recorded before discovery was closed
    out = run_module("fabric_lio_target", ARGS, diff=True, extra_patches=lab.patches())
    assert out["changed"] is True and out["actions"][0].startswith("close_discovery")
    assert out["diff"]["before"]["discovery"] == "open" and out["diff"]["after"]["discovery"] == "closed"
    again = run_module("fabric_lio_target", ARGS, extra_patches=lab.patches())
    assert again["changed"] is False


def test_an_acl_without_chap_is_refused_unless_require_chap_is_false():
    args = copy.deepcopy(ARGS)
    args["targets"][0]["acls"][0].pop("chap")
    lab = Lab(empty())
    out = run_module("fabric_lio_target", args, extra_patches=lab.patches())
    assert out["failed"] is True and "has no CHAP" in out["msg"] and lab.applied == []
    out = run_module("fabric_lio_target", dict(args, require_chap=False), extra_patches=lab.patches())
    assert out["changed"] is True and "failed" not in out


def test_the_secrets_are_masked_in_the_logged_invocation():
    """AnsibleModule logs its arguments to the node's journal while it starts; the CHAP secrets are no_log in
    the argument spec, so that log line never carries them (they used to be registered only afterwards)."""
    from ansible.module_utils import basic

    logged: list = []
    args = copy.deepcopy(ARGS)
    args["targets"][0]["acls"][0]["chap"].update(mutual_userid="storage1", mutual_password="hcmutual00001")
    lab = Lab(empty())
    out = run_module("fabric_lio_target", args, extra_patches=[
        *lab.patches(), mock.patch.object(basic.AnsibleModule, "log",
                                          lambda self, msg, log_args=None: logged.append((msg, log_args)))])
    assert out["changed"] is True and logged, "the module logged no invocation"
    text = json.dumps(logged, default=str)
    assert "hcsecret0001" not in text and "hcmutual00001" not in text
    assert "gpu1" in text  # the rest of the arguments is logged as before
