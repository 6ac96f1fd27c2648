"""fabric_core.base.rules and the rules added to fabric_core.base.names: each rule once, for every caller (the
configuration, LIO, open-iscsi, the modules and the roles' test plugins)."""

from __future__ import annotations

import pytest
from fabric_core.base import names, rules
from fabric_core.base.errors import InvalidName, UserError
from fabric_core.base.model import DiskInfo
from fabric_core.base.rules import LIO, OPEN_ISCSI, Chap, ChapError, parse_chap
from fabric_core.base.units import human_bytes
from fabric_core.storage.disks import index_of, names_of

SECRET, OTHER = "s3cret-s3cret", "other-s3cret"


# --- CHAP: one rule, two views ----------------------------------------------------------------------

def test_chap_in_both_views_is_the_same_credential():
    lio = parse_chap({"userid": "gpu1", "password": SECRET, "mutual_userid": "st1", "mutual_password": OTHER}, LIO)
    iscsi = parse_chap({"username": "gpu1", "password": SECRET, "username_in": "st1", "password_in": OTHER},
                       OPEN_ISCSI)
    assert lio == iscsi == Chap("gpu1", SECRET, "st1", OTHER) and lio.mutual
    assert lio.fields(OPEN_ISCSI) == {"username": "gpu1", "password": SECRET, "username_in": "st1",
                                      "password_in": OTHER}
    one_way = Chap("gpu1", SECRET)
    assert one_way.fields(LIO) == {"userid": "gpu1", "password": SECRET, "mutual_userid": "", "mutual_password": ""}
    assert one_way.fields(OPEN_ISCSI, compact=True) == {"username": "gpu1", "password": SECRET}


@pytest.mark.parametrize("raw", [None, {}, "", {"userid": "", "password": None}])
def test_no_chap_is_none(raw):
    assert parse_chap(raw, LIO) is None


@pytest.mark.parametrize("view, raw, field, words", [
    (LIO, {"userid": "u"}, "password", "CHAP needs both userid and password"),
    (OPEN_ISCSI, {"password": SECRET}, "username", "CHAP needs both username and password"),
    (LIO, {"userid": "u", "password": SECRET, "mutual_userid": "t"}, "mutual_password",
     "mutual CHAP needs both mutual_userid and mutual_password"),
    (OPEN_ISCSI, {"username": "u", "password": "p", "password_in": "q"}, "username_in", "mutual CHAP"),
    (LIO, {"userid": "a b", "password": SECRET}, "userid", "invalid CHAP userid"),
    (LIO, {"userid": "u", "password": "tiny5"}, "password", "must be 12-16 characters (got 5)"),
    (LIO, {"userid": "u", "password": "x" * 17}, "password", "must be 12-16 characters (got 17)"),
    (LIO, {"userid": "u", "password": "has space 12"}, "password", "12-16 printable ASCII"),
    (LIO, {"userid": "u", "password": SECRET, "mutual_userid": "t", "mutual_password": SECRET},
     "mutual_password", "equals chap.password"),
    (OPEN_ISCSI, {"username": "u", "password": "has blank 1"}, "password", "invalid CHAP password"),
    (LIO, {"userid": "u", "passwd": SECRET}, "passwd", "did you mean 'password'?"),
])
def test_chap_rules_name_the_field_never_the_value(view, raw, field, words):
    with pytest.raises(ChapError) as err:
        parse_chap(raw, view, where="config.yml: ")
    assert err.value.field == field and words in str(err.value) and err.value.fix
    assert str(err.value).startswith(f"config.yml: chap.{field}: ")
    for value in raw.values():
        if len(str(value)) > 3:
            assert str(value) not in str(err.value)


def test_only_the_target_side_bounds_the_secret_length():
    assert parse_chap({"username": "u", "password": "short"}, OPEN_ISCSI) == Chap("u", "short")
    assert parse_chap({"username": "u", "password": "p", "username_in": "t", "password_in": "p"},
                      OPEN_ISCSI).mutual_password == "p"
    assert rules.chap_secret_ok(SECRET) and not rules.chap_secret_ok("short") and not rules.chap_secret_ok(None)


# --- unknown keys ---------------------------------------------------------------------------------

def test_unknown_keys_and_the_closest_valid_one():
    assert rules.unknown_keys({"keep_last": 1, "dayly": 2, 3: 4}, ("keep_last", "daily")) == ["dayly", 3]
    assert rules.suggestion("dayly", ("keep_last", "daily")) == "did you mean 'daily'?"
    assert rules.suggestion("zzz", ("keep_last", "daily")) == ""
    with pytest.raises(UserError) as err:
        rules.check_keys({"acl": []}, ("name", "acls"), "target 'x'")
    assert err.value.problem == "target 'x': unknown key 'acl'; did you mean 'acls'?"
    assert err.value.fix == "use only these keys: name, acls"
    rules.check_keys({"name": 1}, ("name", "acls"), "target 'x'")


# --- paths and file systems -----------------------------------------------------------------------

@pytest.mark.parametrize("value, mount_root, ok", [
    ("/datasets", True, True), ("/srv/fabricctl/staging", True, True), ("/var", False, True),
    ("/var", True, False), ("/", True, False), ("datasets", False, False), ("/datasets/", False, False),
    ("/a/../b", False, False), ("/a//b", False, False), ("/a/./b", False, False), (7, False, False),
])
def test_paths(value, mount_root, ok):
    if ok:
        assert rules.validate_path(value, mount_root=mount_root) == value
    else:
        with pytest.raises(UserError):
            rules.validate_path(value, mount_root=mount_root)


def test_filesystems():
    assert rules.validate_filesystem("xfs") == "xfs"
    with pytest.raises(UserError, match="use one of ext4, xfs"):
        rules.validate_filesystem("btrfs")


def test_volblocksize():
    assert rules.validate_volblocksize("64k") == "64K"
    assert rules.validate_volblocksize(rules.VOLBLOCKSIZE_DEFAULT) == "16K"
    for bad in ("48K", "1M", "512", "", "64KB"):
        with pytest.raises(UserError, match="use one of 4K, 8K, 16K, 32K, 64K, 128K"):
            rules.validate_volblocksize(bad)


# --- names added to the naming rules --------------------------------------------------------------

@pytest.mark.parametrize("rule, good, bad, words", [
    (names.validate_iqn_base, "iqn.2026-11.com.example.fabric", "iqn.2026-11.com.example:x", "must not contain ':'"),
    (names.validate_iqn_base, "iqn.2026-11.com.example.fabric", "iqn.2026-11.lab", "dotted"),
    (names.validate_backstore_prefix, "fctl_", "fctl/", "not a valid backstore prefix"),
    (names.validate_target_name, "ds.imagenet.v1", "ds_imagenet", "invalid target name"),
    (names.validate_lun_name, "imagenet_v1", "-x", "invalid LUN name"),
    (names.validate_user_name, "root", "root user", "not a valid user name"),
    (names.validate_metric_name, "loss", "Loss", "not a valid metric name"),
    (names.validate_export_name, "welcome", "Welcome", "invalid export name"),
])
def test_names(rule, good, bad, words):
    assert rule(good) == good
    with pytest.raises(InvalidName) as err:
        rule(bad)
    assert words in str(err.value) and err.value.fix


# --- disks by name, sizes -------------------------------------------------------------------------

def test_every_name_of_a_disk_finds_it():
    disk = DiskInfo(name="sdb", by_id="/dev/disk/by-id/ata-A_1", ids=["/dev/disk/by-id/ata-A_1",
                                                                     "/dev/disk/by-id/wwn-0x5"])
    other = DiskInfo(name="nvme0n1", by_id="/dev/disk/by-id/nvme-B")
    assert names_of(disk) == {"/dev/disk/by-id/ata-A_1", "ata-A_1", "/dev/disk/by-id/wwn-0x5", "wwn-0x5", "sdb",
                              "/dev/sdb"}
    index = index_of([disk, other])
    assert index["wwn-0x5"] is disk and index["/dev/nvme0n1"] is other and index["nvme-B"] is other


@pytest.mark.parametrize("n, text", [(None, "-"), (512, "512 B"), (1536, "1.5 KiB"), (8 * 2**30, "8.0 GiB"),
                                     (200 * 2**30, "200 GiB"), (-2048, "-2.0 KiB")])
def test_human_bytes(n, text):
    assert human_bytes(n) == text


@pytest.mark.parametrize("raw", [{"userid": "gpu1\n", "password": "s3cret-s3cret"},
                                 {"userid": "gpu1", "password": "s3cret-s3cret\n"},
                                 {"userid": "gpu1", "password": "s3cret-s3cret", "mutual_userid": "t\n",
                                  "mutual_password": "other-s3cret1"}])
def test_chap_refuses_a_trailing_newline(raw):
    with pytest.raises(rules.ChapError):
        rules.parse_chap(raw, rules.LIO)
    assert not rules.chap_secret_ok("s3cret-s3cret\n")


@pytest.mark.parametrize("value", ["/datasets\n", "/data\tsets", "/a/\x7fb"])
def test_paths_refuse_control_characters(value):
    with pytest.raises(UserError) as err:
        rules.validate_path(value)
    assert "control character" in err.value.problem


def test_the_repr_of_chap_credentials_shows_no_secret():
    chap = Chap("gpu1", SECRET, "st1", OTHER)
    assert "gpu1" in repr(chap) and "st1" in repr(chap)
    assert SECRET not in repr(chap) and OTHER not in repr(chap) and SECRET not in str(chap)
