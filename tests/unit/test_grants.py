"""fabric_core.services.grants: grants planned from one read of the target's configfs names (recorded on the lab:
tests/unit/data/lio/rec_configfs.txt), ACLs added incrementally; 500 hosts, then a 501st, without a read of
the whole of LIO; revokes refused while a host is logged in."""

from __future__ import annotations

import pytest
from fabric_core.base.errors import Busy
from fabric_core.base.rules import Chap
from fabric_core.services import grants, publish
from fabric_core.storage import lio, lioacls
from support import DATA, FCTL_IQN_BASE

REC_TARGET = "iqn.2026-11.io.fabric.lab:hc-rec"
REC_GPU1 = "iqn.2004-10.com.debian:cfea9e9490c1"
BASE = FCTL_IQN_BASE


def recorded_configfs(root) -> str:
    """The lab's recorded configfs tree (rec_configfs.txt: find's listing, then gpu1's ACL info) made again under
    ``root``: directories for the listed paths, the files the grant reads with the recorded or stated values
    (the recording lists the TPG as authentication=1 and enabled, gpu1's CHAP userid gpu1, password hcsecret0001,
    no tag: the kernel's empty answer)."""
    text = (DATA / "lio" / "rec_configfs.txt").read_text()
    listing, _sep, info = text.partition("==== info\n")
    files = {"tpgt_1/enable": "1\n", "tpgt_1/attrib/authentication": "1\n"}
    acl = f"tpgt_1/acls/{REC_GPU1}"
    files |= {f"{acl}/info": info, f"{acl}/auth/userid": "gpu1\n", f"{acl}/auth/password": "hcsecret0001\n",
              f"{acl}/auth/userid_mutual": "\n", f"{acl}/auth/password_mutual": "\n", f"{acl}/tag": ""}
    base = root / "iscsi" / REC_TARGET
    for line in listing.splitlines():
        files_listed = ("/info", "/enable", "/userid", "/password", "_mutual", "/authenticate_target", "/tag")
        if line.startswith("iscsi/") and not any(line.endswith(f) for f in files_listed):
            (root / line).mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(content)
    return str(root / "iscsi")


def chap(i: int) -> Chap:
    return Chap(f"gpu{i}", f"secret-{i:06d}-a", "fabric-target", f"secret-{i:06d}-b")


def test_the_recorded_target_is_read_from_configfs_names_alone(tmp_path):
    root = recorded_configfs(tmp_path)
    facts = lioacls.target_facts(REC_TARGET, root)
    assert facts == {"acls": [REC_GPU1], "luns": [0, 1], "authentication": 1, "enabled": True}
    assert lioacls.logged_in(REC_TARGET, REC_GPU1, root) is True  # the recorded live session
    assert lioacls.acl_auth(REC_TARGET, REC_GPU1, root)["userid"] == "gpu1"
    assert lioacls.target_facts(f"{REC_TARGET}x", root) is None
    assert lioacls.logged_in(REC_TARGET, "iqn.2026-11.io.fabric.lab:nobody", root) is True  # unreadable: refuse


def test_500_hosts_then_a_501st_are_planned_incrementally(tmp_path):
    root = recorded_configfs(tmp_path)
    facts = lioacls.target_facts(REC_TARGET, root)
    asked = []

    def current_auth(initiator):
        asked.append(initiator)
        return lioacls.acl_auth(REC_TARGET, initiator, root)

    hosts = {f"iqn.2026-11.io.fabric.synthetic:host{i:04d}": chap(i) for i in range(500)}
    actions = grants.plan_grant(REC_TARGET, facts, hosts, current_auth=current_auth)
    ops = [a.kind for a in actions]
    assert ops.count("create_acl") == 500 and ops.count("create_mapped_lun") == 500 and ops.count("set_auth") == 2000
    assert len(actions) == 3000 and asked == []  # nothing read of the 500 new ones, nothing of the others
    assert all(a.params["tpg_lun"] == 0 and a.params["write_protect"] for a in actions if a.kind == "create_mapped_lun")
    assert [a.kind for a in actions[:3]] == ["create_acl"] * 3  # rtslib's order: ACLs, then their LUNs, then CHAP
    assert not any("secret-" in a.description for a in actions)
    # the 500 are there now: the 501st is its own three steps and its CHAP, whatever the 500
    facts["acls"] = sorted([*facts["acls"], *hosts])
    one = {"iqn.2026-11.io.fabric.synthetic:host0500": chap(500)}
    actions = grants.plan_grant(REC_TARGET, facts, one, current_auth=current_auth)
    assert [a.kind for a in actions] == ["create_acl", "create_mapped_lun"] + ["set_auth"] * 4 and asked == []


def test_a_host_granted_again_gets_only_its_changed_chap(tmp_path):
    root = recorded_configfs(tmp_path)
    facts = lioacls.target_facts(REC_TARGET, root)
    same = grants.plan_grant(REC_TARGET, facts, {REC_GPU1: Chap("gpu1", "hcsecret0001")},
                             current_auth=lambda i: lioacls.acl_auth(REC_TARGET, i, root))
    assert same == []
    rotated = grants.plan_grant(REC_TARGET, facts, {REC_GPU1: Chap("gpu1", "hcsecret0002")},
                                current_auth=lambda i: lioacls.acl_auth(REC_TARGET, i, root))
    assert [(a.kind, a.params["field"]) for a in rotated] == [("set_auth", "password")]
    assert "hcsecret0002" not in rotated[0].description


def test_a_publish_through_a_peer_tags_its_acls_and_a_grant_leaves_tags_alone(tmp_path):
    """Another node's `publish --from-nodes` asks this one to export with --published: new ACLs get the tag,
    an existing one without it gets it alone; a plain grant never adds or removes a tag."""
    root = recorded_configfs(tmp_path)
    facts = lioacls.target_facts(REC_TARGET, root)
    auth = {"current_auth": lambda i: lioacls.acl_auth(REC_TARGET, i, root)}
    assert lioacls.acl_tag(REC_TARGET, REC_GPU1, root) is None
    gpu1 = {REC_GPU1: Chap("gpu1", "hcsecret0001")}
    tagged = grants.plan_grant(REC_TARGET, facts, gpu1, tag=lio.PUBLISHED_TAG,
                               current_tag=lambda i: lioacls.acl_tag(REC_TARGET, i, root), **auth)
    assert [(a.kind, a.params) for a in tagged] == [("set_acl_tag", {"initiator": REC_GPU1,
                                                                  "value": lio.PUBLISHED_TAG})]
    (tmp_path / "iscsi" / REC_TARGET / "tpgt_1" / "acls" / REC_GPU1 / "tag").write_text(lio.PUBLISHED_TAG + "\n")
    assert lioacls.acl_tag(REC_TARGET, REC_GPU1, root) == lio.PUBLISHED_TAG
    assert grants.plan_grant(REC_TARGET, facts, gpu1, tag=lio.PUBLISHED_TAG,
                             current_tag=lambda i: lioacls.acl_tag(REC_TARGET, i, root), **auth) == []
    assert grants.plan_grant(REC_TARGET, facts, gpu1, **auth) == []  # a grant: the tag stays
    new = grants.plan_grant(REC_TARGET, facts, {"iqn.2026-11.io.fabric.synthetic:h1": chap(1)},
                            tag=lio.PUBLISHED_TAG, **auth)
    assert [a.kind for a in new] == ["create_acl", "create_mapped_lun"] + ["set_auth"] * 4 + ["set_acl_tag"]


def test_a_target_without_authentication_gets_it_with_its_first_chap(tmp_path):
    facts = {"acls": [], "luns": [0], "authentication": 0, "enabled": True}
    actions = grants.plan_grant("t", facts, {"i": chap(1)}, current_auth=dict)
    assert actions[0].kind == "set_tpg_attribute" and actions[0].params == {"name": "authentication", "value": 1}
    with pytest.raises(Exception, match="no LUN"):
        grants.plan_grant("t", {"acls": [], "luns": []}, {"i": chap(1)}, current_auth=dict)


def test_revoking_a_logged_in_host_is_refused_unless_forced(tmp_path):
    root = recorded_configfs(tmp_path)
    facts = lioacls.target_facts(REC_TARGET, root)

    def logged_in(i):
        return lioacls.logged_in(REC_TARGET, i, root)

    with pytest.raises(Busy, match="logged in") as err:
        grants.plan_revoke(REC_TARGET, facts, [REC_GPU1], logged_in=logged_in)
    assert "--force" in err.value.fix
    actions, revoked, missing = grants.plan_revoke(REC_TARGET, facts, [REC_GPU1, "iqn.2026-11.x.y:z"],
                                                   logged_in=logged_in, force=True)
    assert [a.kind for a in actions] == ["delete_acl"] and revoked == [REC_GPU1] and missing == ["iqn.2026-11.x.y:z"]
    (tmp_path / "iscsi" / REC_TARGET / "tpgt_1" / "acls" / REC_GPU1 / "info").write_text(
        f"{lioacls.NO_SESSION}: {REC_GPU1}\n")
    actions, revoked, _missing = grants.plan_revoke(REC_TARGET, facts, [REC_GPU1], logged_in=logged_in)
    assert revoked == [REC_GPU1]


class Host:
    def __init__(self, name, initiator):
        self.name, self.initiator = name, initiator


def test_a_grant_to_an_existing_export_never_reads_all_of_lio_and_saves_once(tmp_path, monkeypatch):
    root = recorded_configfs(tmp_path)
    target = f"{BASE}:ds.imagenet.v3"
    (tmp_path / "iscsi" / REC_TARGET).rename(tmp_path / "iscsi" / target)
    monkeypatch.setattr(lioacls, "CONFIGFS_ISCSI", root)
    for name in ("target_facts", "acl_auth", "logged_in"):  # the module's default root, read at call time
        fn = getattr(lioacls, name)
        monkeypatch.setattr(lioacls, name, lambda *a, _fn=fn: _fn(*a, root))
    monkeypatch.setattr(lio, "read_live", lambda *a, **k: pytest.fail("a grant read the whole of LIO"))
    applied = []
    monkeypatch.setattr(lio.kernel, "apply",
                        lambda actions, **kw: applied.append(actions) or [a.description for a in actions])
    hosts = [Host(f"h{i}", f"iqn.2026-11.io.fabric.synthetic:h{i}") for i in range(3)]
    settings = publish.Settings(iqn_base=BASE, backstore_prefix="fctl_", portal_ip="10.77.0.11", portal_port=3260,
                                dataset_root="tank/datasets", mount_root="/datasets",
                                checkpoint_root="tank/checkpoints", checkpoint_mount_root="/checkpoints",
                                chap={h.initiator: chap(i) for i, h in enumerate(hosts)})
    from support import AnsweringRunner

    node = AnsweringRunner({})
    pub = publish.Publisher(settings, node, lambda h: pytest.fail("a grant contacted a host"), hosts)
    out = grants.Grants(pub).grant(settings.dataset("imagenet", "v3", "ext4"), hosts)
    assert out["new"] == ["h0", "h1", "h2"] and out["exported"] is None and out["lio_actions"] == 18
    assert len(applied) == 1 and len(applied[0]) == 18 and node.seen == []  # one apply (one save), no command


# --- the commands, through fabricctl's entry point, in dry runs (test_publishing's storage node) --------------

import test_publishing  # noqa: E402

GPU2 = test_publishing.GPU2
fabricctl_node, lio_state = test_publishing.fabricctl_node, test_publishing.lio_state  # its fixtures, used here


@pytest.fixture
def configfs(lio_state, monkeypatch):
    """lioacls answering from the live LIO state of test_publishing (what configfs would show of it); who is
    logged in is the state's sessions."""
    def facts(target, root=None):
        t = next((t for t in lio_state["live"]["dump"]["targets"] if t["wwn"] == target), None)
        if t is None:
            return None
        tpg = t["tpgs"][0]
        return {"acls": sorted(a["node_wwn"] for a in tpg["node_acls"]), "luns": [lu["index"] for lu in tpg["luns"]]
                or [0], "authentication": 1, "enabled": True}

    monkeypatch.setattr(lioacls, "target_facts", facts)
    monkeypatch.setattr(lioacls, "acl_auth", lambda target, initiator, root=None: {})
    monkeypatch.setattr(lioacls, "logged_in", lambda target, initiator, root=None: any(
        s["target"] == target and s["initiator"] == initiator for s in lio_state["live"]["sessions"]))
    return lio_state


def test_a_dry_run_grant_adds_only_the_missing_acls_and_contacts_no_host(fabricctl_node, configfs, capsys):
    import json

    status, hosts = fabricctl_node("grant", "imagenet@v2", "--to", "gpu_nodes", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["hosts"] == ["gpu1", "gpu2"] and out["dry_run"] is True
    here = out["nodes"]["this node"]
    assert here["new"] == ["gpu2"] and here["refreshed"] == ["gpu1"]  # gpu1's ACL gets its CHAP (it had none)
    assert f"rtslib create_acl {BASE}:ds.imagenet.v2 initiator={GPU2} (granted)" in out["planned"]
    assert not any(p.startswith(("zfs", "lzc")) for p in out["planned"])  # exported already: no export again
    assert all(h.seen == [] for h in hosts.values()) and "gpu2-s3cret-1" not in json.dumps(out)


def test_a_dry_run_grant_of_a_version_not_exported_makes_the_export(fabricctl_node, configfs, monkeypatch,
                                                                    capsys):
    import json

    monkeypatch.setattr(lioacls, "target_facts", lambda target, root=None: None)
    status, _hosts = fabricctl_node("grant", "imagenet@v2", "--to", "gpu2", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["nodes"]["this node"]["exported"]["held"] is True
    assert out["planned"][:2] == ["zfs set snapdev=visible tank/datasets/imagenet",
                                  "lzc_hold tank/datasets/imagenet@v2 fabric:published"]
    # the export's ACL is planned once: its CHAP and (a peer's publish) its tag not planned a second time
    acl_steps = [p for p in out["planned"] if GPU2 in p and p.startswith("rtslib")]
    assert len([p for p in acl_steps if "create_acl" in p]) == 1
    assert len([p for p in acl_steps if "set_auth" in p and "field=userid " in p]) <= 1


def test_a_dry_run_publish_through_a_peer_of_a_version_not_exported_tags_its_acl_once(fabricctl_node, configfs,
                                                                                      monkeypatch):
    """replica-serve's `export --published` in a dry run: the export makes the ACL with its tag; the grant that
    follows plans neither the tag nor the CHAP again (it read configfs, where nothing was made)."""
    from support import AnsweringRunner

    tp = test_publishing
    monkeypatch.setattr(lioacls, "target_facts", lambda target, root=None: None)
    monkeypatch.setattr(lioacls, "acl_tag", lambda target, initiator, root=None: None)
    node = AnsweringRunner({("zfs", "get"): (0, "", ""), ("zfs", "set"): (0, "", "")}, dry_run=True)
    pub = tp.publisher(node)
    monkeypatch.setattr(publish.blockfs, "require", lambda device, runner: None)
    out = grants.Grants(pub).grant(tp.V2, [tp.HOSTS[1]], published=True)
    planned = [" ".join(map(str, p)) for p in node.planned]
    tags = [p for p in planned if "set_acl_tag" in p and GPU2 in p]
    assert out["exported"] is not None and len(tags) == 1, planned
    auth = [p for p in planned if "set_auth" in p and "field=userid " in p and GPU2 in p]
    assert len(auth) == 1, planned


def test_revoking_a_logged_in_host_is_refused_and_forced_withdraws_the_last_acl(fabricctl_node, configfs, capsys):
    import json

    status, _ = fabricctl_node("revoke", "imagenet@v2", "--from", "gpu1", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 1 and "logged in" in out["error"] and "--force" in out["fix"]
    status, _ = fabricctl_node("revoke", "imagenet@v2", "--from", "gpu1", "--force", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    here = out["nodes"]["this node"]
    assert status == 0 and here["revoked"] == ["gpu1"] and here["withdrawn"] is True
    assert any(p.startswith(f"rtslib delete_target {BASE}:ds.imagenet.v2") for p in out["planned"])
    status, _ = fabricctl_node("revoke", "imagenet@v2", "--from", "gpu2", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["nodes"]["this node"]["not_granted"] == ["gpu2"] and out["planned"] == []


def test_replica_serve_takes_a_revoke_of_its_own_hosts_and_nothing_else():
    from fabricctl import replication

    roots = ("tank/datasets", "tank/checkpoints")
    assert replication.parse_request(["revoke", "tank/datasets/imagenet", "v3", "--force", "gpu1", "gpu2"], roots,
                                     "storage1") == {"verb": "revoke", "dataset": "tank/datasets/imagenet",
                                                     "version": "v3", "force": True, "hosts": ["gpu1", "gpu2"]}
    for words in (["revoke", "tank/datasets/imagenet", "v3"], ["revoke", "tank/checkpoints/llama", "rw", "gpu1"],
                  ["revoke", "tank/datasets/imagenet", "v3", "gpu1;id"], ["revoke", "tank/other/x", "v3", "gpu1"],
                  ["revoke", "tank/datasets/imagenet", "../v3", "gpu1"]):
        with pytest.raises(Exception) as err:
            replication.parse_request(words, roots, "storage1")
        assert "replica-serve" in str(err.value) or "invalid" in str(err.value)
    fields = replication.describe_request(["revoke", "tank/datasets/imagenet", "v3", "--force", "gpu1"], "storage1")
    assert fields == {"peer": "storage1", "verb": "revoke", "dataset": "tank/datasets/imagenet", "version": "v3",
                      "force": "yes", "hosts": "gpu1"}
