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


def test_block_devices_read_from_configfs_serve_the_exported_snapshots(tmp_path):
    """rotate asks which snapshots LIO exports from the backstores' udev_path files, not rtslib's full read."""
    core = tmp_path / "core"
    for hba, name, dev in (("iblock_0", "fabric_ds_shared_v1", "/dev/zvol/tank/datasets/shared@v1"),
                           ("iblock_0", "fabric_ck_job1_rw", "/dev/zvol/tank/checkpoints/job1"),
                           ("iblock_1", "hand_made", "/dev/zvol/tank/other@snap"),
                           ("iblock_1", "no_device_yet", "")):
        (core / hba / name).mkdir(parents=True, exist_ok=True)
        (core / hba / name / "udev_path").write_text(dev + ("\n" if dev else ""))
    (core / "fileio_0" / "scratch").mkdir(parents=True)
    (core / "fileio_0" / "scratch" / "udev_path").write_text("/var/tmp/x.img\n")
    (core / "alua").mkdir()
    devices = lioacls.block_devices(root=str(core))
    assert devices == {"fabric_ds_shared_v1": "/dev/zvol/tank/datasets/shared@v1",
                       "fabric_ck_job1_rw": "/dev/zvol/tank/checkpoints/job1",
                       "hand_made": "/dev/zvol/tank/other@snap"}
    assert lioacls.block_devices(root=str(tmp_path / "absent")) == {}
    settings = Settings(iqn_base="iqn.2026-11.io.fabric.lab", backstore_prefix="fabric_", portal_ip="10.77.0.11",
                        portal_port=3260, dataset_root="tank/datasets", mount_root="/datasets",
                        checkpoint_root="tank/checkpoints", checkpoint_mount_root="/checkpoints", chap={})
    index = ExportIndex(lioacls.as_live({}, devices), settings)
    # the fabric's own backstore of a snapshot only: not the writable volume, not a backstore made by hand
    assert index.published_snapshots() == {"tank/datasets/shared@v1"}
