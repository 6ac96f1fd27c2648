"""fabric_core.services.publish: the export index (who has a version, which snapshots are exported, which restores
exist, who is logged in) and the publishing service's storage and host sides, in dry runs against a live
LIO state and scripted hosts: every change the service would make is planned, libzfs_core's and rtslib's
included, and nothing runs."""

from __future__ import annotations

import copy
import json

import pytest
from fabric_core.base.errors import Busy, UserError
from fabric_core.base.rules import Chap
from fabric_core.base.runner import Runner
from fabric_core.services import publish
from fabric_core.storage import lio, lzc, zfs
from support import (
    DATA,
    FCTL_IQN_BASE,
    GPU1,
    GPU2,
    GPU9,
    AnsweringRunner,
    fabricctl_config,
    lio_target,
    snapshot_listing,
)

from fabricctl import context, main

BASE = FCTL_IQN_BASE
CHAPS = {GPU1: Chap("gpu1", "gpu1-s3cret-1", "storage1", "gpu1-mutual-1"),
         GPU2: Chap("gpu2", "gpu2-s3cret-1", "storage1", "gpu2-mutual-1")}
SECRETS = ("gpu1-s3cret-1", "gpu1-mutual-1", "gpu2-s3cret-1", "gpu2-mutual-1")
SETTINGS = publish.Settings(iqn_base=BASE, backstore_prefix="fctl_", portal_ip="10.77.0.11", portal_port=3260,
                            dataset_root="tank/datasets", mount_root="/datasets", checkpoint_root="tank/checkpoints",
                            checkpoint_mount_root="/checkpoints", chap=CHAPS)


class Host:
    def __init__(self, name: str, initiator: str):
        self.name, self.initiator = name, initiator


HOSTS = [Host("gpu1", GPU1), Host("gpu2", GPU2)]


def target(name: str, *initiators: str, lun: str = "", tagged: tuple = ()) -> dict:
    return lio_target(name, *initiators, lun=lun, tagged=tagged)


def backstore(lun: str, dev: str, target_name: str, readonly: bool = True) -> dict:
    return {"name": f"fctl_{lun}", "plugin": "block", "dev": dev, "readonly": readonly,
            "wwn": lio.unit_serial(f"{BASE}:{target_name}", lun)}


def live() -> dict:
    return {"dump": {"storage_objects": [
        backstore("imagenet.v1", "/dev/zvol/tank/datasets/imagenet@v1", "ds.imagenet.v1"),
        backstore("imagenet.v2", "/dev/zvol/tank/datasets/imagenet@v2", "ds.imagenet.v2"),
        backstore("llama.rw", "/dev/zvol/tank/checkpoints/llama", "ck.llama.rw", readonly=False),
        {"name": "hand_made", "plugin": "block", "dev": "/dev/zvol/tank/other@snap", "readonly": True, "wwn": "w"}],
        # imagenet v1 published to gpu1 and gpu2 (their ACLs tagged; gpu1 not logged in), the others granted
        "targets": [target("ds.imagenet.v1", GPU1, GPU2, GPU9, lun="imagenet.v1", tagged=(GPU1, GPU2)),
                    target("ds.imagenet.v2", GPU1, lun="imagenet.v2"), target("ds.imagenet-1k.v3", GPU2),
                    target("ck.llama.rw", GPU1, lun="llama.rw"), target("ck.llama.s100", GPU2),
                    target("ck.llama.s200", GPU2)],
        "fabric_modules": [{"name": "iscsi", "discovery_enable_auth": True}]},  # SendTargets discovery closed
        "sessions": [{"target": f"{BASE}:ds.imagenet.v1", "tpg": 1, "initiator": GPU2},
                     {"target": f"{BASE}:ds.imagenet.v2", "tpg": 1, "initiator": GPU1},
                     {"target": f"{BASE}:ds.imagenet.v1", "tpg": 1, "initiator": GPU9}],
        "devices": {}}


V1, V2 = SETTINGS.dataset("imagenet", "v1", "ext4"), SETTINGS.dataset("imagenet", "v2", "ext4")


# --- the export index ------------------------------------------------------------------------------

def test_who_has_a_version():
    index = publish.ExportIndex(live(), SETTINGS, HOSTS)
    assert index.initiators(V1) == sorted([GPU1, GPU2, GPU9]) and index.exists(V1)
    assert index.published_to(V1) == ["gpu1", "gpu2", GPU9]  # an initiator no host has is named by its IQN
    known, foreign = index.hosts_of(V1)
    assert [h.name for h in known] == ["gpu1", "gpu2"] and foreign == [GPU9]
    v3 = SETTINGS.dataset("imagenet", "v3", "ext4")
    assert index.initiators(v3) == [] and not index.exists(v3)


def test_versions_of_a_dataset_and_the_restores_of_a_job():
    index = publish.ExportIndex(live(), SETTINGS, HOSTS)
    assert index.versions("ds", "imagenet") == ["v1", "v2"]  # not imagenet-1k's
    assert index.versions_on(V1, GPU1) == ["v2"] and index.versions_on(V1, GPU2) == []
    assert index.restores("llama") == ["s100", "s200"] and index.restores("other") == []


def test_exported_snapshots_and_sessions():
    index = publish.ExportIndex(live(), SETTINGS, HOSTS)
    assert index.published_snapshots() == {"tank/datasets/imagenet@v1", "tank/datasets/imagenet@v2"}
    assert index.sessions() == {"gpu2": [f"{BASE}:ds.imagenet.v1"], "gpu1": [f"{BASE}:ds.imagenet.v2"],
                                GPU9: [f"{BASE}:ds.imagenet.v1"]}


def test_exports_know_their_names_and_links():
    assert V1.current_link == "/datasets/imagenet/current" and V1.is_snapshot
    rw = SETTINGS.writable("llama", "xfs")
    assert (rw.version, rw.writable, rw.is_snapshot, rw.current_link) == ("rw", True, False, None)
    restore = SETTINGS.restore("llama", 100, "ext4")
    assert restore.mountpoint == "/checkpoints/llama/restore/100" and SETTINGS.target_iqn(restore).endswith(
        ":ck.llama.s100")
    assert SETTINGS.portal == "10.77.0.11:3260"


# --- the storage side, in a dry run ----------------------------------------------------------------

def answering(answers: dict, dry_run: bool = True) -> AnsweringRunner:
    """A node answering commands from a table of argv prefixes; any other command fails the test."""
    return AnsweringRunner(answers, dry_run=dry_run, default=None)


@pytest.fixture
def lio_state(monkeypatch):
    """LIO as `live()`, read through lio.read_live (rtslib is not there; nothing may be applied); libzfs_core's
    holds as given; every zvol's snapdev hidden."""
    state = {"live": live(), "holds": {}}

    def read_live(desired=None, rts=None):
        out = copy.deepcopy(state["live"])
        out["devices"] = {d: {"exists": True, "block": True, "realpath": d} for d in (
            "/dev/zvol/tank/datasets/imagenet@v1", "/dev/zvol/tank/datasets/imagenet@v2",
            "/dev/zvol/tank/datasets/imagenet@v3", "/dev/zvol/tank/checkpoints/llama")}
        return out

    for where in (lio, lio.kernel):  # the service reads LIO itself, and through lio.reconcile
        monkeypatch.setattr(where, "read_live", read_live)
    monkeypatch.setattr(lio.kernel, "_rtslib", lambda: object())  # read_live (patched) is given it
    monkeypatch.setattr(lio.kernel, "apply", lambda *a, **k: pytest.fail("a dry run applied LIO changes"))
    monkeypatch.setattr(lzc, "holds", lambda name: state["holds"].get(name, []))
    monkeypatch.setattr(zfs, "get_props", lambda runner, name, props=None: {name: {"snapdev": ("hidden", "local")}})
    return state


def publisher(node: Runner, hosts: dict | None = None) -> publish.Publisher:
    return publish.Publisher(SETTINGS, node, lambda host: (hosts or {})[host.name], HOSTS)


def test_a_dry_run_publish_plans_every_change_of_the_storage_side(lio_state):
    node = answering({})
    v3 = SETTINGS.dataset("imagenet", "v3", "ext4")
    out = publisher(node).export(v3, HOSTS)
    assert out["held"] is True and out["snapdev"] is True and out["lio_changed"] is True
    assert out["lio_actions"][0].startswith("create_backstore name=fctl_imagenet.v3")
    planned = [" ".join(a) for a in node.planned]
    assert planned[:2] == ["zfs set snapdev=visible tank/datasets/imagenet",
                           "lzc_hold tank/datasets/imagenet@v3 fabric:published"]
    assert [p for p in planned[2:] if not p.startswith("rtslib ")] == []
    assert f"rtslib create_acl {BASE}:ds.imagenet.v3 initiator={GPU2}" in planned
    assert f"rtslib set_auth {BASE}:ds.imagenet.v3 initiator={GPU2} field=userid value=gpu2" in planned
    assert node.executed == [] and not any(secret in repr(planned) + repr(out) for secret in SECRETS)


def test_a_host_without_chap_is_refused_before_any_change(lio_state):
    node = answering({})
    gpu3 = Host("gpu3", "iqn.2026-11.io.fabric.lab:gpu3")
    with pytest.raises(UserError, match="no CHAP credentials for initiator iqn.2026-11.io.fabric.lab:gpu3"):
        publish.Publisher(SETTINGS, node, lambda host: None, [*HOSTS, gpu3]).export(
            SETTINGS.dataset("imagenet", "v3", "ext4"), [gpu3])
    assert not [p for p in node.planned if p[0] == "rtslib"]


def test_publishing_revokes_the_acls_of_hosts_taken_out_of_the_configuration(lio_state):
    """gpu9 has an ACL on v1 (and a session) but is no longer a host of the configuration: a publish of v1
    cuts it off (no longer trusted) and says so; the configured hosts keep theirs."""
    node = answering({})
    lio_state["holds"]["tank/datasets/imagenet@v1"] = ["fabric:published"]
    out = publisher(node).export(V1, [HOSTS[0]])
    assert out["revoked"] == [GPU9] and out["lio_changed"] is True
    deletes = [a.split(" (")[0] for a in out["lio_actions"] if a.startswith("delete_")]
    assert deletes == [f"delete_mapped_lun {BASE}:ds.imagenet.v1 initiator={GPU9} index=0",
                       f"delete_acl {BASE}:ds.imagenet.v1 initiator={GPU9}"]


def test_publishing_again_to_more_hosts_keeps_the_acls_there_are(lio_state):
    node = answering({})
    lio_state["holds"]["tank/datasets/imagenet@v2"] = ["fabric:published"]
    out = publisher(node).export(V2, [HOSTS[1]])
    assert out["held"] is False
    assert [a.split(" (")[0] for a in out["lio_actions"] if "create_acl" in a] == [
        f"create_acl {BASE}:ds.imagenet.v2 initiator={GPU2}"]
    assert not any("delete_acl" in a for a in out["lio_actions"])  # gpu1 keeps its ACL


def test_withdrawing_the_last_host_plans_the_target_backstore_and_hold(lio_state):
    node = answering({})
    lio_state["holds"]["tank/datasets/imagenet@v2"] = ["fabric:published"]
    # gpu1 is logged in to v2: its planned logout (detached) does not refuse the removal in a dry run
    out = publisher(node).withdraw(V2, [], force=False, detached=frozenset({GPU1}))
    assert out["released"] is True
    assert [a.split(" ")[0] for a in out["lio_actions"]] == ["delete_target", "delete_backstore"]
    assert ("lzc_release", "tank/datasets/imagenet@v2", "fabric:published") in node.planned
    with pytest.raises(Busy):  # without it, the session refuses
        publisher(answering({})).withdraw(V2, [], force=False)


def test_withdrawing_some_hosts_revokes_their_acls(lio_state):
    """With hosts left, the hosts that left lose their ACLs and mapped LUNs in the same run (a withdrawn host
    cannot log in again), and so does gpu9, no longer configured (cut off although logged in); the hosts left
    keep theirs, with their own CHAP set; the target and the hold stay."""
    node = answering({})
    out = publisher(node).withdraw(V1, [GPU1], force=False, detached=frozenset({GPU2}))
    assert out["released"] is False and out["revoked"] == ["gpu2", GPU9]
    deletes = [a.split(" (")[0] for a in out["lio_actions"] if a.startswith("delete_")]
    assert deletes == [f"delete_mapped_lun {BASE}:ds.imagenet.v1 initiator={GPU2} index=0",
                       f"delete_mapped_lun {BASE}:ds.imagenet.v1 initiator={GPU9} index=0",
                       f"delete_acl {BASE}:ds.imagenet.v1 initiator={GPU2}",
                       f"delete_acl {BASE}:ds.imagenet.v1 initiator={GPU9}"]
    assert not any(a.startswith(("create_", "delete_target")) for a in out["lio_actions"])
    assert ("lzc_release", "tank/datasets/imagenet@v1", "fabric:published") not in node.planned
    with pytest.raises(Busy, match=GPU2):  # gpu2 still logged in (not detached in this run): refused
        publisher(answering({})).withdraw(V1, [GPU1], force=False)
    forced = publisher(answering({})).withdraw(V1, [GPU1], force=True)  # --force cuts it off
    assert forced["revoked"] == ["gpu2", GPU9]


# --- the host side, in a dry run -------------------------------------------------------------------

PORTAL = "10.77.0.11:3260"


def gpu(initiator: str = GPU1, link: str | None = None, extra: dict | None = None) -> AnsweringRunner:
    """A GPU node with no session, no record and no mount, whose portal offers every imagenet version, and
    no multipathd (``extra`` answers instead, or before the others)."""
    offer = "".join(f"{PORTAL},1 {BASE}:ds.imagenet.{v}\n" for v in ("v1", "v2", "v3"))
    answers = {
        ("cat", "/etc/iscsi/initiatorname.iscsi"): (0, f"InitiatorName={initiator}\n", ""),
        ("systemctl", "is-active", "multipathd.service"): (3, "inactive\n", ""),
        ("iscsiadm", "-m", "session"): (21, "", "iscsiadm: No active sessions.\n"),
        ("iscsiadm", "-m", "discovery"): (0, offer, ""),
        ("iscsiadm", "-m", "node"): (21, "", "iscsiadm: No records found\n"),
        ("cat",): (1, "", "No such file or directory\n"),
        ("systemctl", "is-enabled"): (1, "disabled\n", ""),
        ("systemctl", "show"): (0, "LoadState=not-found\nNeedDaemonReload=no\n", ""),
        ("findmnt",): (1, "", ""),
        ("readlink",): (0, f"{link}\n", "") if link else (1, "", ""),
        ("test",): (1, "", ""),
    }
    return answering({**{k: v for k, v in (extra or {}).items() if k not in answers}, **answers, **(extra or {})})


def test_attach_plans_the_session_the_mount_and_current(lio_state):
    host = gpu()
    out = publisher(answering({}), {"gpu1": host}).attach(V2, HOSTS[0], created={"v1": 1, "v2": 2})
    assert out["changed"] and out["current"] == "v2" and out["switched"] is True
    assert out["device"] == f"/dev/disk/by-path/ip-{PORTAL}-iscsi-{BASE}:ds.imagenet.v2-lun-0"
    assert out["commands"][-1] == "systemctl start datasets-imagenet-v2.mount"
    assert any("--login" in c for c in out["commands"])
    assert any(c.startswith("write node.session.auth.password, node.session.auth.password_in into the node record")
               for c in out["commands"])
    assert ("mv", "-T", "/datasets/imagenet/current.fabric-tmp", "/datasets/imagenet/current") in host.planned
    assert host.executed == [] and not any(secret in repr(out) + repr(host.planned) for secret in SECRETS)
    assert not any(argv[:3] == ("iscsiadm", "-m", "discovery") for argv in host.seen)  # the portal is not asked


def test_an_older_version_leaves_current_alone(lio_state):
    out = publisher(answering({}), {"gpu1": gpu(link="v2")}).attach(V1, HOSTS[0], created={"v1": 1, "v2": 2})
    assert out["current"] == "v2" and out["switched"] is False


def test_attach_refuses_a_host_whose_initiator_name_differs(lio_state):
    with pytest.raises(UserError, match="has initiator name"):
        publisher(answering({}), {"gpu1": gpu(initiator=GPU2)}).attach(V1, HOSTS[0])


def test_detach_moves_current_to_the_newest_version_the_host_still_has(lio_state):
    host = gpu(link="v1")
    pub = publisher(answering({}), {"gpu1": host})
    out = pub.detach(V1, HOSTS[0], index=pub.index(), created={"v1": 1, "v2": 2})
    assert out["current"] == "v2"  # gpu1 still has v2
    assert ("ln", "-sfn", "v2", "/datasets/imagenet/current.fabric-tmp") in host.planned
    other = gpu(initiator=GPU2, link="v1")
    out = publisher(answering({}), {"gpu2": other}).detach(V1, HOSTS[1], index=pub.index(), created={"v1": 1, "v2": 2})
    assert out["current"] is None and ("rm", "-f", "/datasets/imagenet/current") in other.planned


# --- whole commands, through fabricctl's entry point, in dry runs -----------------------------------

CONFIG = fabricctl_config()


def listing(rows: list[dict]) -> tuple:
    """A `zfs list -j -p` answer (support.snapshot_listing's form) of fabricctl's volumes or versions."""
    return 0, snapshot_listing(rows), ""


VERSION_COLUMNS = {"fabric:managed": "true", "fabric:kind": "dataset-version", "fabric:fs": "ext4", "userrefs": "1",
                   "used": "0", "referenced": "0"}


@pytest.fixture
def fabricctl_node(lio_state, monkeypatch, tmp_path):
    """fabricctl's main() on a storage node with dataset imagenet (versions v1, v2: LIO as `live()`) and GPU
    nodes gpu1, gpu2 that have nothing yet; returns main(args) -> (status, JSON output)."""
    volumes = [{"name": "tank/datasets/imagenet", "createtxg": "1", "fabric:managed": "true", "fabric:kind": "dataset",
                "fabric:fs": "ext4", "volsize": "1073741824"},
               {"name": "tank/checkpoints/llama", "createtxg": "1", "fabric:managed": "true",
                "fabric:kind": "checkpoint-volume", "fabric:fs": "ext4", "fabric:writer": "gpu1"}]
    snapshots = [dict(VERSION_COLUMNS, name=f"tank/datasets/imagenet@{v}", createtxg=str(n), creation=str(1000 + n),
                      **{"fabric:version": v}) for n, v in ((2, "v1"), (3, "v2"))]
    snapshots += [dict(VERSION_COLUMNS, name=f"tank/checkpoints/llama@step-{n}", createtxg=str(n), creation=str(n),
                       **{"fabric:kind": "checkpoint", "fabric:step": str(n)}) for n in (100, 200)]

    def under(rows):  # `zfs list ... -r ROOT`: the rows under ROOT
        return lambda argv: listing([r for r in rows if r["name"].startswith((argv[-1] + "/", argv[-1] + "@"))])

    answers = {("zfs", "list", "-j", "-p", "-t", "volume"): under(volumes),
               ("zfs", "list", "-j", "-p", "-t", "snapshot"): under(snapshots),
               ("zpool", "list"): (0, (DATA / "zfs23b" / "tank_list.json").read_text(), ""),
               ("zpool", "status"): (0, (DATA / "zfs23b" / "tank_status.json").read_text(), "")}
    local: list = []  # every LocalRunner a command made (run.local): what it ran on the storage node

    def make_local(dry_run):
        local.append(AnsweringRunner(answers, dry_run=dry_run, default=None))
        return local[-1]

    monkeypatch.setattr(context, "LocalRunner", make_local)
    hosts = {"gpu1": gpu(GPU1), "gpu2": gpu(GPU2)}
    monkeypatch.setattr(context.Context, "ssh", lambda self, host: (self.hosts.setdefault(host.name, "contacted"),
                                                                    hosts[host.name])[1])
    path = tmp_path / "config.yml"
    path.write_text(CONFIG)

    def run(*args):
        status = main.main(["--config", str(path), *args, "--json"], sink=lambda fields: None)
        return status, hosts

    run.hosts = hosts
    run.local = local
    return run


def test_a_dry_run_publish_from_the_command_line(fabricctl_node, capsys):
    status, hosts = fabricctl_node("publish", "imagenet@v2", "--to", "gpu_nodes", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    listings = [tuple(argv[:6]) for r in fabricctl_node.local for argv in r.seen if tuple(argv[:2]) == ("zfs", "list")]
    # the version, its staging volume and the dataset's versions come from one listing each (datasets.resolve)
    assert listings.count(("zfs", "list", "-j", "-p", "-t", "volume")) == 1, listings
    assert listings.count(("zfs", "list", "-j", "-p", "-t", "snapshot")) == 1, listings
    assert status == 0 and set(out) == {"ref", "target", "dry_run", "storage", "hosts", "mountpoint", "planned"}
    assert out["target"] == f"{BASE}:ds.imagenet.v2" and out["dry_run"] is True
    assert set(out["storage"]) == {"held", "snapdev", "lio_changed", "lio_actions", "revoked", "warnings"}
    assert {h: r["status"] for h, r in out["hosts"].items()} == {"gpu1": "ok", "gpu2": "ok"}
    assert set(out["hosts"]["gpu2"]["result"]) == {"changed", "device", "mountpoint", "commands", "multipath",
                                                   "current", "switched"}
    assert out["planned"][:2] == ["zfs set snapdev=visible tank/datasets/imagenet",
                                  "lzc_hold tank/datasets/imagenet@v2 fabric:published"]
    assert f"rtslib create_acl {BASE}:ds.imagenet.v2 initiator={GPU2}" in out["planned"]
    assert all(h.executed == [] for h in hosts.values())


def test_a_dry_run_unpublish_from_the_command_line(fabricctl_node, capsys):
    status, _ = fabricctl_node("unpublish", "imagenet@v1", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and set(out) == {"ref", "dry_run", "hosts", "storage", "foreign_acls"}
    assert sorted(out["hosts"]) == ["gpu1", "gpu2"] and out["foreign_acls"] == [GPU9]
    assert set(out["storage"]) == {"acls_left", "revoked", "lio_actions", "released"}
    # every ACL goes with the target: gpu1 and gpu2 logged out (planned), gpu9 is no longer configured
    assert out["storage"]["acls_left"] == [] and out["storage"]["revoked"] == ["gpu1", "gpu2", GPU9]
    assert any(a.startswith("delete_target") for a in out["storage"]["lio_actions"])


def test_a_dry_run_unpublish_from_one_host_revokes_its_acl(fabricctl_node, capsys):
    status, _ = fabricctl_node("unpublish", "imagenet@v1", "--from", "gpu2", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["storage"]["acls_left"] == ["gpu1"] and out["storage"]["revoked"] == ["gpu2", GPU9]
    assert f"delete_acl {BASE}:ds.imagenet.v1 initiator={GPU2}" in " ".join(out["storage"]["lio_actions"])


def test_listing_versions_from_the_command_line(fabricctl_node, capsys):
    assert fabricctl_node("list")[0] == 0
    (dataset,) = json.loads(capsys.readouterr().out)["datasets"]
    assert [(v["version"], v["published_to"]) for v in dataset["versions"]] == [
        ("v1", ["gpu1", "gpu2", GPU9]), ("v2", ["gpu1"])]


def test_a_job_with_restores_is_not_retired_and_a_restore_is_removed(fabricctl_node, capsys):
    status, _ = fabricctl_node("checkpoint", "volume", "destroy", "llama", "--dry-run")
    assert status == 1 and "restored: step 100, 200" in capsys.readouterr().err
    status, _ = fabricctl_node("checkpoint", "restore", "llama", "--step", "100", "--to", "gpu2", "--remove",
                               "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and set(out) == {"job", "step", "hosts", "still_restored_to", "revoked", "lio_actions",
                                        "released", "dry_run"}
    assert out["still_restored_to"] == [] and out["hosts"]["gpu2"]["status"] == "ok"
    assert out["revoked"] == ["gpu2"] and any(a.startswith("delete_target") for a in out["lio_actions"])


def test_a_dry_run_access_sync_revokes_hosts_no_longer_configured_and_sets_each_hosts_chap(fabricctl_node, capsys):
    """gpu9 has ACLs (and a session) but is not in the configuration: cut off everywhere; gpu1 and gpu2 get their
    own CHAP credentials on every ACL they have; their node records are checked on the hosts with sessions."""
    status, hosts = fabricctl_node("access", "sync", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["dry_run"] is True and set(out) == {"dry_run", "targets", "revoked", "hosts"}
    assert out["revoked"] == {f"{BASE}:ds.imagenet.v1": [GPU9]}
    v2 = out["targets"][f"{BASE}:ds.imagenet.v2"]["lio_actions"]
    assert f"set_auth {BASE}:ds.imagenet.v2 initiator={GPU1} field=userid value=gpu1 (CHAP of this host)" in v2
    assert not any("gpu1-s3cret-1" in a for t in out["targets"].values() for a in t["lio_actions"])
    assert sorted(out["hosts"]) == ["gpu1", "gpu2"]  # both have sessions to this node's targets
    assert all(h.executed == [] for h in hosts.values())


def test_status_says_how_access_is_guarded_and_warns_without_chap(fabricctl_node, capsys, tmp_path):
    status, _ = fabricctl_node("status")
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["access"] == {"chap": "per-host", "discovery": "closed"} and out["warnings"] == []
    states = {c["name"]: c["state"] for c in out["checks"]}
    assert states["chap"] == states["discovery"] == "OK"
    # `live()` has a publish's ACL without a session (gpu1 on imagenet v1; the granted ones without sessions are no
    # warning) and one of gpu9, no configured host: WARNING
    sessions = next(c for c in out["checks"] if c["name"] == "sessions")
    assert sessions["details"]["missing"] == {"gpu1": [f"{BASE}:ds.imagenet.v1"]}
    assert states["sessions"] == states["foreign_acls"] == "WARNING" and status == 1 and out["state"] == "WARNING"
    from fabricctl.commands.status import access_warnings
    warned = access_warnings({"chap": "off (insecure_no_chap)", "discovery": "open"})
    assert len(warned) == 2 and "no CHAP" in warned[0] and "discovery is open" in warned[1]


def test_attach_from_several_nodes_is_refused_on_a_host_without_multipathd(lio_state):
    host = gpu()
    with pytest.raises(UserError, match="does not run multipathd") as err:
        publisher(answering({}), {"gpu1": host}).attach(V2, HOSTS[0], portals=["10.77.0.12:3260"])
    assert "iscsi_initiator_multipath" in err.value.fix
    assert host.planned == [] and not any(argv[:2] == ("iscsiadm", "-m") for argv in host.seen)


def test_attach_on_a_multipath_host_mounts_the_map_and_logs_in_to_every_portal(lio_state):
    host = gpu(extra={("systemctl", "is-active", "multipathd.service"): (0, "active\n", "")})
    out = publisher(answering({}), {"gpu1": host}).attach(V2, HOSTS[0], portals=[PORTAL, "10.77.0.12:3260"])
    assert out["device"] == "/dev/disk/by-id/dm-uuid-mpath-WWID"  # a dry run: the WWID is read after the login
    logins = [c for c in out["commands"] if c.endswith("--login")]
    assert len(logins) == 2 and "10.77.0.12:3260" in logins[1]  # this node's portal once, the other's once
    assert any(c.startswith("multipath -a") for c in out["commands"])
    updates = [argv for argv in host.planned if "node.session.timeo.replacement_timeout" in argv]
    assert len(updates) == 2 and all(argv[argv.index("node.session.timeo.replacement_timeout") + 2] == "5"
                                     for argv in updates)


def test_paths_counts_a_maps_paths_up_and_a_plain_disks_sessions(lio_state):
    wwid = "36001405103bbe1c6d8b51d9bdbb547d3"

    def unit(argv):  # v1 is mounted through a map, v2 from a plain disk
        name = argv[1].rsplit("-", 1)[1].removesuffix(".mount")  # /etc/systemd/system/datasets-imagenet-v1.mount
        dev = f"/dev/disk/by-id/dm-uuid-mpath-{wwid}" if name == "v1" else "/dev/disk/by-path/x-lun-0"
        return 0, f"[Mount]\nWhat={dev}\nWhere=/datasets/imagenet/{name}\n", ""

    host = gpu(extra={
        ("cat",): unit,
        ("multipathd", "show", "paths"): (0, f"{wwid} sdb active ready\n{wwid} sdc failed faulty\n", ""),
        ("iscsiadm", "-m", "session"): (0, f"tcp: [1] {PORTAL},1 {BASE}:ds.imagenet.v2 (non-flash)\n", ""),
    })
    out = publisher(answering({}), {"gpu1": host}).paths([V1, V2], HOSTS[0])
    assert out == {"imagenet@v1": {"multipath": wwid, "up": 1, "paths": 2},
                   "imagenet@v2": {"multipath": None, "up": 1, "paths": 1}}


def test_list_and_status_ask_each_host_how_many_paths_of_a_version_are_up(fabricctl_node, capsys):
    """imagenet@v1 is published to gpu1 and gpu2, v2 to gpu1 (LIO as `live()`): gpu1 reads v1 through a multipath
    map with one of its two paths down, gpu2 v1 and gpu1 v2 from plain disks with one session each."""
    wwid = "36001405103bbe1c6d8b51d9bdbb547d3"
    for name, host in fabricctl_node.hosts.items():
        dev = f"/dev/disk/by-id/dm-uuid-mpath-{wwid}" if name == "gpu1" else "/dev/disk/by-path/x-lun-0"
        reads = {  # answered before the node's other answers
            ("cat", "/etc/systemd/system/datasets-imagenet-v1.mount"): (0, f"[Mount]\nWhat={dev}\n", ""),
            ("multipathd", "show", "paths"): (0, f"{wwid} sdb active ready\n{wwid} sdc failed faulty\n", ""),
            ("iscsiadm", "-m", "session"): (0, "".join(f"tcp: [{n}] {PORTAL},1 {BASE}:ds.imagenet.{v} (non-flash)\n"
                                                       for n, v in ((1, "v1"), (2, "v2"))), ""),
        }
        host.answers = {**reads, **{k: v for k, v in host.answers.items() if k not in reads}}
    status, _ = fabricctl_node("list", "--paths")
    out = json.loads(capsys.readouterr().out)
    paths = {v["version"]: v["paths"] for d in out["datasets"] for v in d["versions"]}
    assert status == 0 and out["unreachable"] == {}
    assert paths["v1"] == {"gpu1": {"multipath": wwid, "up": 1, "paths": 2},
                           "gpu2": {"multipath": None, "up": 1, "paths": 1}}
    assert paths["v2"] == {"gpu1": {"multipath": None, "up": 1, "paths": 1}}
    status, _ = fabricctl_node("status", "--paths")
    check = next(c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "paths")
    assert check["state"] == "WARNING" and "gpu1 imagenet@v1 (1/2 up)" in check["summary"], check


@pytest.mark.parametrize("failed_at, released", [("delete_backstore", False), ("save", True)],
                         ids=["backstore left: hold kept", "export gone: hold released"])
def test_a_withdraw_failing_half_way_releases_the_hold_only_with_what_it_guarded(lio_state, monkeypatch, failed_at,
                                                                                 released):
    """Issue 26, item 4: the removal fails at its last step (the backstore still exports the snapshot: the hold
    stays), or after every step (the export is gone: the hold goes with it, and the error is still raised)."""
    node = AnsweringRunner({}, dry_run=False, default=None)
    lio_state["holds"]["tank/datasets/imagenet@v2"] = ["fabric:published"]
    lio_state["live"]["sessions"] = []
    made: list = []
    monkeypatch.setattr(lzc, "_release", lambda name, tag: made.append((name, tag)))

    def converge(state, before, actions, **_kw):
        todo = lio.changes(actions)
        applied = todo if failed_at == "save" else [a for a in todo if a.kind != failed_at]
        lio_state["live"] = lio.simulate(before, applied)
        raise lio.LioApplyError(f"LIO change failed at {failed_at}", "fix it", [a.description for a in applied], [])

    monkeypatch.setattr(lio, "converge", converge)
    with pytest.raises(lio.LioApplyError):
        publisher(node).withdraw(V2, [], force=False)
    assert made == ([("tank/datasets/imagenet@v2", "fabric:published")] if released else [])


def test_an_export_that_fails_before_its_backstore_releases_the_hold_it_placed(lio_state, monkeypatch):
    node = AnsweringRunner({("zfs", "set"): (0, "", ""), ("zfs", "get"): (0, "", "")}, dry_run=False, default=None)
    made: list = []
    monkeypatch.setattr(lzc, "_hold", lambda name, tag: made.append(("hold", name, tag))
                        or lio_state["holds"].setdefault(name, []).append(tag) or True)
    monkeypatch.setattr(lzc, "_release", lambda name, tag: made.append(("release", name, tag)))
    monkeypatch.setattr(publish.blockfs, "require", lambda device, runner: None)

    def reconcile(*_a, **_kw):
        raise lio.LioApplyError("LIO change failed at `create_acl`", "fix it", [], ["create_backstore"])

    monkeypatch.setattr(lio, "reconcile", reconcile)
    v3 = SETTINGS.dataset("imagenet", "v3", "ext4")
    with pytest.raises(lio.LioApplyError):
        publisher(node).export(v3, HOSTS)
    assert made == [("hold", "tank/datasets/imagenet@v3", "fabric:published"),
                    ("release", "tank/datasets/imagenet@v3", "fabric:published")]
