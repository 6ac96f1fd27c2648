"""fabric_core.storage.lioacls: ACLs per target from configfs directory names, in read_live()'s shape."""

from fabric_core.services.publish import ExportIndex, Settings
from fabric_core.storage import lioacls


def make_tree(root, layout):
    for target, tpgs in layout.items():
        for tpg, acls in tpgs.items():
            (root / target / tpg / "acls").mkdir(parents=True)
            for acl in acls:
                (root / target / tpg / "acls" / acl / "auth").mkdir(parents=True)
    (root / "discovery_auth").mkdir()
    (root / "lio_version").write_text("x")


def test_acl_map_reads_names_under_the_prefix_only(tmp_path):
    base = "iqn.2026-11.io.fabric.lab"
    make_tree(tmp_path, {
        f"{base}:ck.job1.s10": {"tpgt_1": ["iqn.2026-11.io.fabric.lab:gpu2", "iqn.2026-11.io.fabric.lab:gpu1"]},
        f"{base}:ck.job1.rw": {"tpgt_1": ["iqn.2026-11.io.fabric.lab:gpu1"]},
        f"{base}:ck.job10.s1": {"tpgt_1": ["iqn.x:other"]},
        f"{base}:ds.shared.v1": {"tpgt_1": ["iqn.2026-11.io.fabric.lab:gpu1"], "tpgt_2": []},
    })
    got = lioacls.acl_map(f"{base}:ck.job1.", root=str(tmp_path))
    assert got == {f"{base}:ck.job1.s10": ["iqn.2026-11.io.fabric.lab:gpu1", "iqn.2026-11.io.fabric.lab:gpu2"],
                   f"{base}:ck.job1.rw": ["iqn.2026-11.io.fabric.lab:gpu1"]}
    assert lioacls.acl_map("", root=str(tmp_path / "absent")) == {}
    assert set(lioacls.acl_map("", root=str(tmp_path))) == {f"{base}:ck.job1.s10", f"{base}:ck.job1.rw",
                                                             f"{base}:ck.job10.s1", f"{base}:ds.shared.v1"}


def test_as_live_serves_the_export_index(tmp_path):
    base = "iqn.2026-11.io.fabric.lab"
    settings = Settings(iqn_base=base, backstore_prefix="fabric_", portal_ip="10.77.0.11", portal_port=3260,
                        dataset_root="tank/datasets", mount_root="/datasets", checkpoint_root="tank/checkpoints",
                        checkpoint_mount_root="/checkpoints", chap={})
    live = lioacls.as_live({f"{base}:ck.job1.s10": [f"{base}:gpu1"], f"{base}:ck.job1.rw": []})

    class Host:
        name, initiator = "gpu1", f"{base}:gpu1"

    index = ExportIndex(live, settings, [Host()])
    assert index.published_to(settings.restore("job1", 10, "ext4")) == ["gpu1"]
    assert index.published_to(settings.restore("job1", 11, "ext4")) == []
    assert index.restores("job1") == ["s10"]
