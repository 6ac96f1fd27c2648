"""Naming rules of fabric_core.base.names: pools, datasets, snapshots, IQNs, host names."""

from __future__ import annotations

import pytest
import support  # noqa: F401  (puts module_utils on sys.path)

# isort: split
from fabric_core.base import names
from fabric_core.base.errors import InvalidName, UserError


def refused(func, value) -> str:
    with pytest.raises(InvalidName) as err:
        func(value)
    assert isinstance(err.value, UserError)
    return str(err.value)


# --- pools --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tank", "fast0", "t", "Tank_2", "pool-a.b:c", "a" * 255, "smirror",
                                  "logs", "caches", "c", "cX"])
def test_valid_pool_names(name):
    assert names.validate_pool_name(name) == name


@pytest.mark.parametrize("name, fragment", [
    ("", "pool name is empty"),
    (None, "pool name is empty"),
    ("0tank", "must start with a letter"),
    ("_tank", "must start with a letter"),
    ("tank/a", "must start with a letter and contain only"),
    ("ta nk", "contain only"),
    ("tank@x", "contain only"),
    ("a" * 256, "longer than 255 characters"),  # was reported as bad characters (names.py bug, fixed)
    ("mirror", "reserved by ZFS"),
    ("mirror2", "reserved by ZFS"),
    ("raidz", "reserved by ZFS"),
    ("raidz2pool", "reserved by ZFS"),
    ("draid1", "reserved by ZFS"),
    ("spare", "reserved by ZFS"),
    ("spares", "reserved by ZFS"),
    ("log", "reserved by ZFS"),
    ("cache", "reserved by ZFS"),
    ("special", "reserved by ZFS"),
    ("dedup", "reserved by ZFS"),
    ("c0", "reserved by ZFS"),
    ("c1t0d0", "reserved by ZFS"),
    ("Mirror", "reserved by ZFS"),
])
def test_invalid_pool_names(name, fragment):
    assert fragment in refused(names.validate_pool_name, name)


def test_pool_name_error_has_a_fix():
    with pytest.raises(InvalidName) as err:
        names.validate_pool_name("9lives")
    assert err.value.fix and "tank" in err.value.fix


# --- datasets -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tank", "tank/datasets", "tank/datasets/imagenet-2026", "tank/a.b/c:d/e_f",
                                  "tank/" + "a" * 250])
def test_valid_dataset_names(name):
    assert names.validate_dataset_name(name) == name


@pytest.mark.parametrize("name, fragment", [
    ("", "dataset name is empty"),
    (None, "dataset name is empty"),
    ("tank/a@v1", "'@' and '#' belong to snapshots and bookmarks"),
    ("tank/a#b", "'@' and '#'"),
    ("tank/", "component '' must be non-empty"),
    ("tank//a", "component '' must be non-empty"),
    ("tank/a b", "component 'a b'"),
    ("tank/-a", "component '-a'"),
    ("tank/.a", "component '.a'"),
    ("tank/" + "a" * 251, "longer than 255 characters"),
    ("mirror/a", "reserved by ZFS"),
    ("1tank/a", "invalid pool name"),
    ("/tank", "pool name is empty"),
])
def test_invalid_dataset_names(name, fragment):
    assert fragment in refused(names.validate_dataset_name, name)


# --- snapshots ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tank@v1", "tank/datasets/imagenet@v1", "tank/ds@2026-11-22", "tank/ds@step:100",
                                  "tank/ds@" + "v" * 247])
def test_valid_snapshot_names(name):
    assert names.validate_snapshot_name(name) == name


@pytest.mark.parametrize("name, fragment", [
    ("tank/ds", "expected DATASET@VERSION"),
    ("tank/ds@v1@v2", "expected DATASET@VERSION"),
    (None, "expected DATASET@VERSION"),
    ("tank/ds@", "invalid snapshot name ''"),
    ("tank/ds@-v1", "invalid snapshot name '-v1'"),
    ("tank/ds@v 1", "invalid snapshot name 'v 1'"),
    ("tank/ds@v/1", "invalid snapshot name 'v/1'"),
    ("@v1", "dataset name is empty"),
    ("tank//ds@v1", "component ''"),
    ("tank/ds@" + "v" * 248, "longer than 255 characters"),
])
def test_invalid_snapshot_names(name, fragment):
    assert fragment in refused(names.validate_snapshot_name, name)


@pytest.mark.parametrize("version", ["v1", "2026-11-22", "step_100", "a.b:c", "V1"])
def test_valid_snapshot_components(version):
    assert names.validate_snapshot_component(version) == version


@pytest.mark.parametrize("version", ["", None, "_v1", "v@1", "v#1", "v 1", ".hidden"])
def test_invalid_snapshot_components(version):
    assert "invalid snapshot name" in refused(names.validate_snapshot_component, version)


# --- iSCSI names --------------------------------------------------------------------------------

@pytest.mark.parametrize("iqn", [
    "iqn.2026-11.com.example:storage1",
    "iqn.2026-11.io.example.lab:x",
    "iqn.2003-01.org.linux-iscsi.storage1.x8664:sn.abcdef012345",
    "iqn.1994-05.com.redhat:b1c2d3e4f5",
    "iqn.2026-12.com.example",  # the unique part is optional (RFC 3720)
    "eui.02004567A425678D",
])
def test_valid_iqns(iqn):
    assert names.validate_iqn(iqn) == iqn


@pytest.mark.parametrize("iqn, fragment", [
    ("", "iSCSI name is empty"),
    (None, "iSCSI name is empty"),
    # LIO (rtslib) refuses a single-label naming authority: the lab showed iqn.2026-11.lab:x failing
    ("iqn.2026-11.lab:x", "dotted domain (LIO refuses a single-label one)"),
    ("iqn.2026-11.localhost", "dotted domain"),
    ("iqn.2026-13.com.example:x", "expected iqn.YYYY-MM.reversed.domain"),
    ("iqn.2026-00.com.example:x", "expected iqn.YYYY-MM"),
    ("iqn.26-11.com.example:x", "expected iqn.YYYY-MM"),
    ("iqn.2026-11.com..example:x", "expected iqn"),
    ("iqn.2026-11.com.example:", "expected iqn"),
    ("iqn.2026-11.com.example:a b", "expected iqn"),
    ("iqn.2026-11.com.exa_mple:x", "'_' is not allowed"),
    ("iqn2026-11.com.example:x", "expected iqn"),
    ("naa.5000c50100770000", "expected iqn"),
    # 15 hex digits: a malformed eui name must not be told to become lower case (names.py bug, fixed)
    ("eui.02004567A425678", "expected iqn.YYYY-MM"),
    ("IQN.2026-11.com.example:x", "iqn names are lower case"),
    ("iqn.2026-11.com.example:GPU1", "iqn names are lower case"),
    ("iqn.2026-11.com.example:" + "x" * 200, "longer than 223 bytes"),
])
def test_invalid_iqns(iqn, fragment):
    assert fragment in refused(names.validate_iqn, iqn)


def test_upper_case_iqn_fix_gives_the_lower_case_name():
    with pytest.raises(InvalidName) as err:
        names.validate_iqn("iqn.2026-11.com.example:GPU1")
    assert err.value.fix == "use 'iqn.2026-11.com.example:gpu1'"


# --- host names and host IQNs -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["gpu1", "storage-1", "a", "0node", "x" * 63])
def test_valid_hostnames(name):
    assert names.validate_hostname(name) == name


@pytest.mark.parametrize("name", ["", None, "GPU1", "-gpu", "gpu-", "gpu_1", "gpu1.lab", "x" * 64])
def test_invalid_hostnames(name):
    assert "invalid host name" in refused(names.validate_hostname, name)


BASE = "iqn.2026-11.com.example.fabric"


def test_initiator_name_is_base_colon_hostname():
    assert names.initiator_name(BASE, "gpu1") == "iqn.2026-11.com.example.fabric:gpu1"
    assert names.initiator_name(BASE, "gpu1.rack3.example.com") == f"{BASE}:gpu1.rack3.example.com"


def test_initiator_name_is_deterministic_and_lower_case():
    assert names.initiator_name(BASE, "GPU1") == names.initiator_name(BASE, "gpu1") == f"{BASE}:gpu1"
    assert names.initiator_name(BASE, "gpu_1") == names.initiator_name(BASE, "gpu_1")


def test_initiator_name_odd_hostnames_get_a_digest_so_they_never_collide():
    odd = names.initiator_name(BASE, "gpu_1")
    assert odd.startswith(f"{BASE}:gpu-1-") and len(odd) == len(f"{BASE}:gpu-1-") + 8
    assert odd != names.initiator_name(BASE, "gpu-1")  # the plain name gets no digest
    assert odd != names.initiator_name(BASE, "gpu 1")
    assert names.initiator_name(BASE, "gpu 1").startswith(f"{BASE}:gpu-1-")
    assert names.validate_iqn(odd) == odd


def test_initiator_name_refuses_a_base_with_a_unique_part_or_a_bad_base():
    with pytest.raises(InvalidName) as err:
        names.initiator_name(f"{BASE}:x", "gpu1")
    assert "must not contain ':'" in str(err.value)
    assert "dotted domain" in refused(lambda h: names.initiator_name("iqn.2026-11.lab", h), "gpu1")
    assert "longer than 223 bytes" in refused(lambda h: names.initiator_name(BASE, h), "g" * 200)


def test_iqn_refuses_underscore_as_rtslib_does():
    # seen in the lab: rtslib refuses a target named iqn.2026-11.io.fabric.lab:hc_x
    with pytest.raises(InvalidName):
        names.validate_iqn("iqn.2026-11.io.fabric.lab:hc_x")
    assert names.initiator_name("iqn.2026-11.io.fabric.lab", "gpu_7").startswith("iqn.2026-11.io.fabric.lab:gpu-7-")


# --- no trailing newline anywhere (validators match the whole value) --------------------------------

@pytest.mark.parametrize("func, value", [
    (names.validate_pool_name, "tank\n"),
    (names.validate_dataset_name, "tank/datasets\n"),
    (names.validate_snapshot_component, "v1\n"),
    (names.validate_iqn, "iqn.2026-11.io.fabric.lab:gpu1\n"),
    (names.validate_iqn_base, "iqn.2026-11.io.fabric.lab\n"),
    (names.validate_hostname, "gpu1\n"),
    (names.validate_fabric_name, "imagenet\n"),
    (names.validate_version, "v1\n"),
    (names.validate_target_name, "datasets\n"),
    (names.validate_lun_name, "welcome\n"),
    (names.validate_backstore_prefix, "fctl_\n"),
    (names.validate_user_name, "root\n"),
    (names.validate_metric_name, "loss\n"),
    (names.validate_export_name, "welcome\n"),
])
def test_a_trailing_newline_is_refused(func, value):
    refused(func, value)
    assert func(value[:-1]) == value[:-1]  # the same value without it is fine


def test_initiator_name_of_a_hostname_with_a_newline_is_one_line_and_not_the_plain_name():
    iqn = names.initiator_name("iqn.2026-11.io.fabric.lab", "gpu1\n")
    assert "\n" not in iqn and iqn != names.initiator_name("iqn.2026-11.io.fabric.lab", "gpu1")


# --- versions a checkpoint job's exports use: a dataset never takes them -----------------------------

@pytest.mark.parametrize("version", ["rw", "s0", "s12000"])
def test_checkpoint_export_versions_are_reserved(version):
    text = refused(names.validate_version, version)
    assert "checkpoint" in text and "fix:" in text


@pytest.mark.parametrize("version", ["rw2", "s1a", "sx", "v1", "s", "release-rw"])
def test_versions_near_the_reserved_ones_are_fine(version):
    assert names.validate_version(version) == version


def test_a_reserved_version_is_refused_in_a_reference_too():
    refused(names.parse_ref, "x@rw")
