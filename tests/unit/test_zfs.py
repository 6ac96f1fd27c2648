"""fabric_core.zfs on recorded OpenZFS 2.1.11 output (tests/unit/data/zfs/, commands in its README)."""

from __future__ import annotations

import pytest
from support import ScriptedRunner, data  # (support puts module_utils on sys.path)

# isort: split
from fabric_core import zfs
from fabric_core.errors import InvalidName, UnsafeOperation, UserError

GET = ["zfs", "get", "-H", "-p", "-o", "name,property,value,source", "all"]
IMAGENET = "hb_rec/datasets/imagenet"
KEY = "correct horse battery staple"


def get_step(name: str, file: str, rc: int = 0, stderr_file: str | None = None) -> dict:
    return {"command": GET + [name], "rc": rc, "stdout": data("zfs", file),
            "stderr": data("zfs", stderr_file) if stderr_file else ""}


MISSING = get_step("hb_rec/nope", "get_missing.txt", 1, "get_missing.txt.stderr")


# ---------------------------------------------------------------- parsing and normalising


def test_parse_get_all_of_a_dataset():
    props = zfs.parse_get(data("zfs", "get_all_imagenet.txt"))[IMAGENET]
    assert props["compression"] == ("zstd", "local")
    assert props["quota"] == ("2147483648", "local")
    assert props["recordsize"] == ("1048576", "local")
    assert props["special_small_blocks"] == ("65536", "local")
    assert props["fabric:role"] == ("dataset", "local") and props["fabric:managed"] == ("true", "local")
    assert props["atime"] == ("off", "local") and props["casesensitivity"] == ("sensitive", "-")


def test_parse_get_encrypted_volume_and_inherited():
    secret = zfs.parse_get(data("zfs", "get_all_secret.txt"))["hb_rec/secret"]
    assert secret["encryption"] == ("aes-256-gcm", "-") and secret["keyformat"] == ("passphrase", "-")
    assert secret["compression"] == ("lz4", "inherited from hb_rec")
    vol = zfs.parse_get(data("zfs", "get_all_vol1.txt"))["hb_rec/vol1"]
    assert vol["type"][0] == "volume" and vol["volsize"][0] == "1073741824" and vol["volblocksize"][0] == "16384"


@pytest.mark.parametrize("prop, declared, live", [
    ("quota", "2G", "2147483648"), ("quota", "none", "0"), ("refquota", "1.5G", "1610612736"),
    ("recordsize", "1M", "1048576"), ("special_small_blocks", "64K", "65536"), ("volblocksize", "16k", "16384"),
    ("reservation", "512M", "536870912"), ("quota", 1073741824, "1073741824"), ("volsize", "1GiB", "1073741824"),
    ("atime", False, "off"), ("atime", "no", "off"), ("readonly", True, "on"),
    ("compression", "on", "lz4"), ("compression", "lz4", "on"), ("compression", "zstd", "zstd-3"),
    ("compression", "ZSTD", "zstd"), ("dedup", "on", "sha256"), ("primarycache", "Metadata", "metadata"),
    ("fabric:role", "dataset", "dataset"),
])
def test_normalize_equal(prop, declared, live):
    assert zfs.normalize(prop, declared) == zfs.normalize(prop, live)


@pytest.mark.parametrize("prop, a, b", [
    ("quota", "2G", "2147483647"), ("compression", "zstd", "lz4"), ("compression", "zstd-9", "zstd"),
    ("fabric:role", "Dataset", "dataset"), ("atime", "on", "off"), ("mountpoint", "/A", "/a"),
])
def test_normalize_different(prop, a, b):
    assert zfs.normalize(prop, a) != zfs.normalize(prop, b)


def test_parse_size():
    assert zfs.parse_size("1.5T") == 1649267441664
    assert zfs.parse_size("10G") == 10 * 2**30 and zfs.parse_size("512") == 512 and zfs.parse_size("none") == 0
    with pytest.raises(UserError, match="invalid size"):
        zfs.parse_size("ten gigs")


def test_list_datasets_with_user_property():
    argv = ["zfs", "list", "-H", "-p", "-o", "name,type,used,avail,fabric:managed,fabric:role",
            "-t", "filesystem,volume", "-r", "hb_rec"]
    runner = ScriptedRunner([{"command": argv, "stdout": data("zfs", "list_managed.txt")}])
    rows = zfs.list_datasets(runner, root="hb_rec", prop="fabric:role", value="dataset",
                             columns=("type", "used", "avail", "fabric:managed"))
    assert rows == [{"name": IMAGENET, "type": "filesystem", "used": 98304, "avail": 2147385344,
                     "fabric:managed": "true", "fabric:role": "dataset"}]
    runner = ScriptedRunner([{"command": argv, "stdout": data("zfs", "list_managed.txt")}])
    everything = zfs.list_datasets(runner, root="hb_rec", prop="fabric:role", value=None,
                                   columns=("type", "used", "avail", "fabric:managed"))
    assert [r["name"] for r in everything] == ["hb_rec", "hb_rec/datasets", IMAGENET, "hb_rec/datasets/other",
                                               "hb_rec/secret", "hb_rec/vol1"]
    assert everything[-1]["type"] == "volume"


# ---------------------------------------------------------------- ensure_dataset


PROPS = {"compression": "zstd", "quota": "2G", "recordsize": "1M", "special_small_blocks": "64K", "atime": False,
         "primarycache": "metadata", "fabric:role": "dataset"}


def test_create_dataset_with_properties():
    argv = ["zfs", "create", "-p", "-o", "compression=zstd", "-o", "quota=2G", "-o", "recordsize=1M",
            "-o", "special_small_blocks=64K", "-o", "atime=off", "-o", "primarycache=metadata",
            "-o", "fabric:role=dataset", "-o", "fabric:managed=true", "hb_rec/nope"]
    runner = ScriptedRunner([MISSING, {"command": argv, "stdout": data("zfs", "create_ds.txt")}])
    out = zfs.ensure_dataset(runner, name="hb_rec/nope", properties=PROPS)
    runner.assert_done()
    assert out["changed"] and out["created"] and out["commands"] == [argv]
    assert out["changed_properties"]["quota"] == {"before": None, "after": "2G"}
    assert out["before"] == {"exists": False} and out["after"]["fabric:managed"] == "true"


def test_dry_run_create_uses_zfs_create_n_v():
    check = ["zfs", "create", "-n", "-v", "-p", "-o", "compression=zstd", "-o", "quota=2G",
             "-o", "fabric:managed=true", "hb_rec/nope"]
    pool_exists = {"command": ["zpool", "list", "-H", "-o", "name", "hb_rec"], "stdout": "hb_rec\n"}
    runner = ScriptedRunner([MISSING, pool_exists, {"command": check, "stdout": data("zfs", "create_n_v.txt")}],
                            dry_run=True)
    out = zfs.ensure_dataset(runner, name="hb_rec/nope", properties={"compression": "zstd", "quota": "2G"})
    runner.assert_done()
    assert out["changed"] and out["prepared"].startswith("would create ancestors of hb_rec/dry/a")
    assert runner.executed == [] and len(runner.planned) == 1


def test_dry_run_before_the_pool_exists_plans_the_create_with_a_warning():
    # check mode of a whole site run: the pool's creation was only simulated by an earlier task
    no_pool = {"command": ["zpool", "list", "-H", "-o", "name", "hb_rec"], "rc": 1,
               "stderr": "cannot open 'hb_rec': no such pool\n"}
    runner = ScriptedRunner([MISSING, no_pool], dry_run=True)
    out = zfs.ensure_dataset(runner, name="hb_rec/nope", properties={"compression": "zstd"})
    runner.assert_done()
    assert out["changed"] and out["created"] and runner.executed == []
    assert any("pool hb_rec does not exist yet" in w for w in out["warnings"])


def test_existing_dataset_unchanged_on_second_run():
    runner = ScriptedRunner([get_step(IMAGENET, "get_all_imagenet.txt")])
    out = zfs.ensure_dataset(runner, name=IMAGENET, properties=PROPS)
    runner.assert_done()
    assert not out["changed"] and out["commands"] == [] and out["changed_properties"] == {}
    assert out["before"] == out["after"]


def test_existing_dataset_sets_only_differing_properties_in_one_command():
    argv = ["zfs", "set", "compression=lz4", "quota=3G", "secondarycache=none", "fabric:tier=hot", IMAGENET]
    runner = ScriptedRunner([get_step(IMAGENET, "get_all_imagenet.txt"),
                             {"command": argv, "stdout": data("zfs", "set_multi.txt")}])
    out = zfs.ensure_dataset(runner, name=IMAGENET, properties=dict(PROPS, compression="lz4", quota="3G",
                                                                    secondarycache="none", **{"fabric:tier": "hot"}))
    runner.assert_done()
    assert out["commands"] == [argv]
    assert out["changed_properties"] == {"compression": {"before": "zstd", "after": "lz4"},
                                         "quota": {"before": "2147483648", "after": "3G"},
                                         "secondarycache": {"before": "all", "after": "none"},
                                         "fabric:tier": {"before": "-", "after": "hot"}}


def test_dry_run_set_changes_nothing():
    runner = ScriptedRunner([get_step(IMAGENET, "get_all_imagenet.txt")], dry_run=True)
    out = zfs.ensure_dataset(runner, name=IMAGENET, properties={"quota": "3G"})
    assert out["changed"] and runner.executed == [] and runner.planned == [("zfs", "set", "quota=3G", IMAGENET)]


def test_compression_on_equals_lz4_on_recorded_dataset():
    runner = ScriptedRunner([get_step("hb_rec/datasets/other", "get_all_other.txt")])
    out = zfs.ensure_dataset(runner, name="hb_rec/datasets/other",
                             properties={"compression": "lz4", "refquota": "1.5G", "reservation": "512M",
                                         "casesensitivity": "insensitive", "atime": "off"})
    assert not out["changed"]


def test_create_only_property_that_differs_is_refused():
    runner = ScriptedRunner([get_step("hb_rec/datasets/other", "get_all_other.txt")])
    with pytest.raises(UserError, match="casesensitivity of hb_rec/datasets/other is insensitive and cannot change"):
        zfs.ensure_dataset(runner, name="hb_rec/datasets/other", properties={"casesensitivity": "sensitive"})
    assert runner.executed == []


def test_dedup_needs_allow_dedup_and_warns():
    with pytest.raises(UserError, match="5 GB of RAM per TB"):
        zfs.ensure_dataset(ScriptedRunner([]), name="hb_rec/datasets/other", properties={"dedup": "on"})
    argv = ["zfs", "set", "dedup=on", "hb_rec/datasets/other"]
    runner = ScriptedRunner([get_step("hb_rec/datasets/other", "get_all_other.txt"),
                             {"command": argv, "stdout": data("zfs", "set_dedup.txt")}])
    out = zfs.ensure_dataset(runner, name="hb_rec/datasets/other", properties={"dedup": "on"}, allow_dedup=True)
    assert out["commands"] == [argv] and out["warnings"] == [zfs.DEDUP_WARNING]
    runner = ScriptedRunner([get_step("hb_rec/datasets/other", "get_all_other_dedup.txt")])
    assert not zfs.ensure_dataset(runner, name="hb_rec/datasets/other", properties={"dedup": "on"},
                                  allow_dedup=True)["changed"]


def test_encrypted_create_passes_the_key_on_stdin_only():
    argv = ["zfs", "create", "-p", "-o", "encryption=aes-256-gcm", "-o", "keyformat=passphrase",
            "-o", "keylocation=prompt", "-o", "fabric:managed=true", "hb_rec/nope"]
    seen = []

    class Recording(ScriptedRunner):
        def _run(self, argv, data):
            seen.append(data)
            return super()._run(argv, data)

    runner = Recording([MISSING, {"command": argv, "stdout": data("zfs", "create_enc.txt")}])
    out = zfs.ensure_dataset(runner, name="hb_rec/nope", encryption={"enabled": True, "key": KEY,
                                                                     "keyformat": "passphrase"})
    runner.assert_done()
    assert seen == [None, KEY]
    assert all(KEY not in " ".join(cmd) for cmd in out["commands"]) and KEY not in repr(out)


def test_encrypted_second_run_and_encryption_changes_refused():
    enc = {"enabled": True, "key": KEY, "keyformat": "passphrase"}
    runner = ScriptedRunner([get_step("hb_rec/secret", "get_all_secret.txt")])
    assert not zfs.ensure_dataset(runner, name="hb_rec/secret", encryption=enc)["changed"]
    with pytest.raises(UserError, match="exists unencrypted; encryption can only be chosen when a dataset is created"):
        zfs.ensure_dataset(ScriptedRunner([get_step(IMAGENET, "get_all_imagenet.txt")]), name=IMAGENET,
                           encryption=enc)
    with pytest.raises(UserError, match="encryption cannot be removed"):
        zfs.ensure_dataset(ScriptedRunner([get_step("hb_rec/secret", "get_all_secret.txt")]), name="hb_rec/secret",
                           encryption={"enabled": False})
    with pytest.raises(UserError, match="has keyformat passphrase, not hex"):
        zfs.ensure_dataset(ScriptedRunner([get_step("hb_rec/secret", "get_all_secret.txt")]), name="hb_rec/secret",
                           encryption={"enabled": True, "key": "ab" * 32, "keyformat": "hex"})


@pytest.mark.parametrize("encryption, words", [
    ({"enabled": True}, "no key was given"),
    ({"enabled": True, "key": "short"}, "8 to 512 characters"),
    ({"enabled": True, "key": "zz", "keyformat": "hex"}, "64 hexadecimal"),
    ({"enabled": True, "key": KEY, "keyformat": "pkcs11"}, "not supported"),
])
def test_bad_encryption_input(encryption, words):
    runner = ScriptedRunner([])
    with pytest.raises(UserError, match=words):
        zfs.ensure_dataset(runner, name="hb_rec/x", encryption=encryption)
    assert runner.calls == []


def test_volume_create_grow_and_shrink_refused():
    argv = ["zfs", "create", "-p", "-V", "1G", "-o", "volblocksize=16K", "-o", "fabric:managed=true", "hb_rec/nope"]
    runner = ScriptedRunner([MISSING, {"command": argv, "stdout": data("zfs", "create_vol.txt")},
                             {"command": ["udevadm", "settle"]}])
    out = zfs.ensure_dataset(runner, name="hb_rec/nope", volume_size="1G", properties={"volblocksize": "16K"})
    runner.assert_done()
    assert out["created"] and out["after"]["type"] == "volume" and out["after"]["volsize"] == "1G"
    runner = ScriptedRunner([get_step("hb_rec/vol1", "get_all_vol1.txt")])
    assert not zfs.ensure_dataset(runner, name="hb_rec/vol1", volume_size="1G",
                                  properties={"volblocksize": "16K"})["changed"]
    runner = ScriptedRunner([get_step("hb_rec/vol1", "get_all_vol1.txt"),
                             {"command": ["zfs", "set", "volsize=2G", "hb_rec/vol1"]}])
    assert zfs.ensure_dataset(runner, name="hb_rec/vol1", volume_size="2G")["commands"] == [
        ["zfs", "set", "volsize=2G", "hb_rec/vol1"]]
    with pytest.raises(UnsafeOperation, match="shrinking volume"):
        zfs.ensure_dataset(ScriptedRunner([get_step("hb_rec/vol1", "get_all_vol1.txt")]), name="hb_rec/vol1",
                           volume_size="512M")
    with pytest.raises(UserError, match="volblocksize of hb_rec/vol1 is 16384 and cannot change"):
        zfs.ensure_dataset(ScriptedRunner([get_step("hb_rec/vol1", "get_all_vol1.txt")]), name="hb_rec/vol1",
                           properties={"volblocksize": "64K"})
    with pytest.raises(UserError, match="exists as a filesystem, not a volume"):
        zfs.ensure_dataset(ScriptedRunner([get_step(IMAGENET, "get_all_imagenet.txt")]), name=IMAGENET,
                           volume_size="1G")


def test_unmanaged_dataset_is_changed_only_with_adopt():
    # hb_rec/datasets was created by `zfs create -p`: fabric:managed is only inherited there
    text = data("zfs", "get_all_other.txt").replace("hb_rec/datasets/other\t", "hb_rec/datasets/x\t").replace(
        "fabric:managed\ttrue\tlocal", "fabric:managed\ttrue\tinherited from hb_rec")
    step = {"command": GET + ["hb_rec/datasets/x"], "stdout": text}
    assert not zfs.ensure_dataset(ScriptedRunner([step]), name="hb_rec/datasets/x",
                                  properties={"refquota": "1.5G"})["changed"]
    with pytest.raises(UnsafeOperation, match="was not created by this project"):
        zfs.ensure_dataset(ScriptedRunner([step]), name="hb_rec/datasets/x", properties={"refquota": "2G"})
    argv = ["zfs", "set", "refquota=2G", "fabric:managed=true", "hb_rec/datasets/x"]
    runner = ScriptedRunner([step, {"command": argv}])
    out = zfs.ensure_dataset(runner, name="hb_rec/datasets/x", properties={"refquota": "2G"}, adopt=True)
    assert out["commands"] == [argv] and out["warnings"] == ["adopted hb_rec/datasets/x: set fabric:managed=true"]


@pytest.mark.parametrize("name, props, error, words", [
    ("hb_rec/a@v1", {}, InvalidName, "snapshots"),
    ("hb_rec/a", {"used": "1G"}, UserError, "read-only"),
    ("hb_rec/a", {"encryption": "on"}, UserError, "managed by the encryption option"),
    ("hb_rec/a", {"quota": "lots"}, UserError, "invalid size"),
    ("hb_rec/a", {"bad key": "x"}, UserError, "invalid property name"),
    ("hb_rec/a", {"atime": None}, UserError, "has no value"),
])
def test_bad_input_fails_before_any_command(name, props, error, words):
    runner = ScriptedRunner([])
    with pytest.raises(error, match=words):
        zfs.ensure_dataset(runner, name=name, properties=props)
    assert runner.calls == []


@pytest.mark.parametrize("declared,live", [("posixacl", "posix"), ("noacl", "off"), ("posix", "posix"),
                                           ("nfsv4", "nfsv4")])
def test_acltype_aliases_compare_equal(declared, live):
    # found on the lab: acltype=posixacl is stored and reported as `posix`, so a naive compare
    # re-set it on every run
    assert zfs.normalize("acltype", declared) == zfs.normalize("acltype", live)


@pytest.mark.parametrize("declared,live", [("sa", "on"), ("on", "on"), ("dir", "dir"), ("off", "off")])
def test_xattr_sa_reads_back_as_on(declared, live):
    # found on the trixie lab (OpenZFS 2.3.9): `zpool create -O xattr=sa` then `zfs get xattr` says `on`,
    # so a naive compare set xattr=sa again on every run
    assert zfs.normalize("xattr", declared) == zfs.normalize("xattr", live)
    assert zfs.normalize("xattr", "dir") != zfs.normalize("xattr", "sa")
