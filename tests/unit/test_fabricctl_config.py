"""fabricctl.config: the schema of /etc/fabricctl/config.yml (docs/dev/helper-brief-fabricctl.md), its
errors (key, place, file, closest valid key), defaults, and host/group resolution."""

from __future__ import annotations

import copy
import dataclasses
import json
import sys

import pytest
import yaml
from fabric_core.base.errors import InvalidName, NotFound, UserError
from fabric_core.base.rules import OPEN_ISCSI, Chap

from fabricctl import config
from fabricctl.config import Host, Portal, from_dict, load

# The example of the brief, as the role writes it (CHAP secrets are lab-style 12-16 characters).
EXAMPLE = """\
pool: tank
dataset_root: tank/datasets
checkpoint_root: tank/checkpoints
iqn_base: iqn.2026-11.io.fabric.lab.fabricctl
portal: {ip: 10.77.0.11, port: 3260}
backstore_prefix: fctl_
mount_root: /datasets
checkpoint_mount_root: /checkpoints
staging_root: /srv/fabricctl/staging
state_dir: /var/lib/fabricctl
ssh: {user: root, key_file: /etc/fabricctl/id_ed25519, known_hosts: /etc/fabricctl/known_hosts,
      connect_timeout: 10, port: 22}
hosts:
  gpu1: {address: 10.77.0.21, initiator: "iqn.2026-11.io.fabric.lab:gpu1",
         chap: {userid: gpu1, password: s3cret-s3cret, mutual_userid: storage1, mutual_password: other-s3cret}}
  gpu2: {address: 10.77.0.22, initiator: "iqn.2026-11.io.fabric.lab:gpu2",
         chap: {userid: gpu2, password: gpu2-s3cret-1, mutual_userid: storage1, mutual_password: gpu2-mutual-1}}
groups:
  gpu_nodes: [gpu1, gpu2]
defaults: {fs: ext4, manifest_workers: 4, parallel_hosts: 16}
metrics: [loss, accuracy]
retention:
  policies:
    checkpoints-default: {keep_last: 5, keep_every: 1000, daily: 7, keep_best: {metric: loss, mode: min, count: 3},
                          pin_tags: [release]}
  assign:
    "checkpoints/*": checkpoints-default
rotation: {metrics_file: /var/lib/prometheus/node-exporter/fabricctl.prom}
lock: {wait_seconds: 60}
"""

MINIMAL = {"pool": "tank", "iqn_base": "iqn.2026-11.io.fabric.lab.fabricctl", "portal": {"ip": "10.77.0.11"}}


def example() -> dict:
    return yaml.safe_load(EXAMPLE)


def error_of(raw, source="/etc/fabricctl/config.yml") -> UserError:
    with pytest.raises(UserError) as exc:
        from_dict(raw, source=source)
    return exc.value


def with_(path: str, value, raw=None) -> dict:
    """A copy of ``raw`` (default: the example) with the key at dotted ``path`` set (or deleted for ...)."""
    raw = copy.deepcopy(example() if raw is None else raw)
    *parents, last = path.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return raw


# --------------------------------------------------------------------------------------------
# a valid file


def test_the_example_of_the_brief_loads_whole(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text(EXAMPLE)
    cfg = load(path)
    assert cfg.source == str(path)
    assert (cfg.pool, cfg.dataset_root, cfg.checkpoint_root) == ("tank", "tank/datasets", "tank/checkpoints")
    assert cfg.iqn_base == "iqn.2026-11.io.fabric.lab.fabricctl"
    assert cfg.portal == Portal("10.77.0.11", 3260) and cfg.portal.address == "10.77.0.11:3260"
    assert cfg.ssh.connect_timeout == 10.0 and cfg.ssh.port == 22 and cfg.ssh.key_file == "/etc/fabricctl/id_ed25519"
    assert cfg.hosts["gpu2"] == Host("gpu2", "10.77.0.22", "iqn.2026-11.io.fabric.lab:gpu2",
                                     Chap("gpu2", "gpu2-s3cret-1", "storage1", "gpu2-mutual-1"))
    assert cfg.groups == {"gpu_nodes": ["gpu1", "gpu2"]}
    assert cfg.hosts["gpu1"].chap.fields(OPEN_ISCSI) == {"username": "gpu1", "password": "s3cret-s3cret",
                                                          "username_in": "storage1", "password_in": "other-s3cret"}
    settings = cfg.publishing()
    assert settings.chap_of("iqn.2026-11.io.fabric.lab:gpu1") == cfg.hosts["gpu1"].chap
    assert not cfg.insecure_no_chap and not settings.insecure_no_chap
    assert cfg.defaults.parallel_hosts == 16 and cfg.defaults.fs == "ext4"
    assert cfg.metrics == ["loss", "accuracy"]
    assert cfg.retention == example()["retention"]  # kept raw for fabric_core.services.retention.parse_policies
    assert cfg.rotation.metrics_file == "/var/lib/prometheus/node-exporter/fabricctl.prom"
    assert cfg.lock.wait_seconds == 60.0 and cfg.deprecations == []
    assert cfg.dataset("imagenet") == "tank/datasets/imagenet" and cfg.checkpoint("job7") == "tank/checkpoints/job7"
    with pytest.raises(InvalidName):
        cfg.dataset("bad@name")


def test_missing_optional_keys_get_defaults():
    cfg = from_dict(MINIMAL)
    assert (cfg.dataset_root, cfg.checkpoint_root) == ("tank/datasets", "tank/checkpoints")
    assert (cfg.backstore_prefix, cfg.mount_root, cfg.checkpoint_mount_root) == ("fctl_", "/datasets", "/checkpoints")
    assert (cfg.staging_root, cfg.state_dir) == ("/srv/fabricctl/staging", "/var/lib/fabricctl")
    assert cfg.portal.port == 3260
    assert cfg.ssh == config.SSHConfig("root", "/etc/fabricctl/id_ed25519", "/etc/fabricctl/known_hosts", 10.0, 22)
    assert cfg.hosts == {} and cfg.groups == {} and not cfg.insecure_no_chap
    assert cfg.defaults == config.Defaults("ext4", 4, 16, 30)
    assert cfg.metrics == [] and cfg.retention == {}
    assert cfg.rotation == config.Rotation("/var/lib/prometheus/node-exporter/fabricctl.prom")
    assert cfg.lock == config.Lock(60.0) and cfg.deprecations == []


def test_the_obsolete_rotation_lock_file_is_accepted_ignored_and_warned_about():
    """Config files the role wrote before the node lock carry rotation.lock_file: they still load."""
    cfg = from_dict(with_("rotation.lock_file", "/run/fabricctl-rotate.lock"), source="/etc/fabricctl/config.yml")
    assert cfg.rotation == config.Rotation("/var/lib/prometheus/node-exporter/fabricctl.prom")
    assert len(cfg.deprecations) == 1
    assert cfg.deprecations[0].startswith("/etc/fabricctl/config.yml: rotation.lock_file is obsolete and ignored")
    assert "/run/fabric/node.lock" in cfg.deprecations[0]


def test_lock_wait_zero_means_try_once():
    assert from_dict(with_("lock", {"wait_seconds": 0})).lock.wait_seconds == 0.0
    assert from_dict(with_("lock", None)).lock == config.Lock(60.0)


def test_one_way_chap_and_no_metrics_file():
    raw = with_("hosts.gpu1.chap", {"userid": "gpu1", "password": "s3cret-s3cret"})
    raw["rotation"]["metrics_file"] = None
    cfg = from_dict(raw)
    assert cfg.hosts["gpu1"].chap == Chap("gpu1", "s3cret-s3cret")
    assert cfg.hosts["gpu1"].chap.fields(OPEN_ISCSI, compact=True) == {"username": "gpu1", "password": "s3cret-s3cret"}
    assert cfg.rotation.metrics_file is None


def test_ipv6_portal_and_host_names_as_addresses():
    raw = with_("portal", {"ip": "fd00::11", "port": 3261})
    raw["hosts"]["gpu1"]["address"] = "gpu1.storage.example.com"
    cfg = from_dict(raw)
    assert cfg.portal.address == "[fd00::11]:3261" and cfg.hosts["gpu1"].address == "gpu1.storage.example.com"


# --------------------------------------------------------------------------------------------
# unknown keys: the key, where it is, the file, the closest valid key


@pytest.mark.parametrize("path, wrong, right", [
    ("ssh", "conect_timeout", "connect_timeout"),
    ("", "dataset_rot", "dataset_root"),
    ("portal", "prot", "port"),
    ("hosts.gpu1", "initator", "initiator"),
    ("defaults", "parallel_host", "parallel_hosts"),
    ("retention", "polices", "policies"),
    ("rotation", "metricsfile", "metrics_file"),
    ("lock", "wait_secs", "wait_seconds"),
    ("hosts.gpu1.chap", "mutual_user", "mutual_userid"),
])
def test_unknown_keys_name_the_key_the_place_the_file_and_the_closest_valid_key(path, wrong, right):
    raw = example()
    node = raw
    for key in filter(None, path.split(".")):
        node = node[key]
    node[wrong] = node.pop(right, 1)
    err = error_of(raw)
    place = f"{path}.{wrong}" if path else wrong
    assert f"unknown key {wrong!r} at {place}" in err.problem
    assert "/etc/fabricctl/config.yml" in err.problem
    assert f"did you mean {right!r}?" in err.fix


def test_an_unknown_key_without_a_close_match_lists_the_valid_ones():
    err = error_of(with_("ssh.zzz", 1))
    assert "unknown key 'zzz' at ssh.zzz" in err.problem and "did you mean" not in err.fix
    assert "user, key_file, known_hosts, connect_timeout, port" in err.fix


# --------------------------------------------------------------------------------------------
# values


@pytest.mark.parametrize("path, value, expected", [
    ("pool", ..., "pool: is required"),
    ("portal.ip", ..., "portal.ip: is required"),
    ("pool", "raidz-tank", "invalid pool name 'raidz-tank'"),
    ("pool", 7, "pool: expected a non-empty string, got int 7"),
    ("dataset_root", "other/datasets", "dataset_root: 'other/datasets' is not a dataset inside pool 'tank'"),
    ("dataset_root", "tank", "dataset_root: 'tank' is not a dataset inside pool"),
    ("dataset_root", "tank/data sets", "invalid dataset name"),
    ("checkpoint_root", "tank/datasets/ckpt", "overlap"),
    ("iqn_base", "iqn.2026-11.io.fabric.lab:fabricctl", "iqn_base: 'iqn.2026-11.io.fabric.lab:fabricctl' must not "
                                                        "contain ':'"),
    ("iqn_base", "iqn.2026-11.lab", "invalid iSCSI name"),
    ("portal.ip", "storage1", "portal.ip: 'storage1' is not an IP address"),
    ("portal.port", "3260", "portal.port: expected an integer 1-65535, got str '3260'"),
    ("portal.port", 70000, "portal.port: 70000 is out of range 1-65535"),
    ("backstore_prefix", "fctl/", "not a valid backstore prefix"),
    ("mount_root", "datasets", "mount_root: 'datasets' must be an absolute, normalised path"),
    ("mount_root", "/datasets/", "must be an absolute, normalised path"),
    ("mount_root", "/data/../etc", "must be an absolute, normalised path"),
    ("mount_root", "/usr", "mount_root: '/usr' is a system directory"),
    ("checkpoint_mount_root", "/datasets", "checkpoint_mount_root: is the same directory as mount_root"),
    ("ssh.port", True, "ssh.port: expected an integer 1-65535, got bool True"),
    ("ssh.connect_timeout", 0, "ssh.connect_timeout: 0 is out of range"),
    ("ssh.user", "root user", "not a valid user name"),
    ("ssh.known_hosts", "~/.ssh/known_hosts", "ssh.known_hosts: '~/.ssh/known_hosts' must be an absolute"),
    ("hosts.gpu1.address", "10.77.0.300", "hosts.gpu1.address: '10.77.0.300' is neither an IP address nor"),
    ("hosts.gpu1.address", "10.77.0.22", "hosts.gpu2.address: 10.77.0.22 is also the address of host 'gpu1'"),
    ("hosts.gpu1.initiator", "iqn.2026-11.io.fabric.lab:GPU1", "hosts.gpu1.initiator: invalid iSCSI name"),
    ("hosts.gpu1.initiator", "iqn.2026-11.io.fabric.lab:gpu2", "is also the initiator of host 'gpu1'"),
    ("hosts.gpu1.initiator", ..., "hosts.gpu1.initiator: is missing, and there is no initiator_base"),
    ("hosts.GPU_1", {"address": "10.0.0.1", "initiator": "iqn.2026-11.io.fabric.lab:x"}, "invalid host name 'GPU_1'"),
    ("hosts", ["gpu1"], "hosts: expected a mapping"),
    ("groups.gpu_nodes", ["gpu1", "gpu3"], "groups.gpu_nodes[1]: 'gpu3' is not a host of this configuration"),
    ("groups.gpu1", ["gpu2"], "groups.gpu1: 'gpu1' is the name of a host too"),
    ("groups.gpu_nodes", "gpu1", "groups.gpu_nodes: expected a list of host names"),
    ("defaults.fs", "btrfs", "defaults.fs: 'btrfs' is not supported"),
    ("defaults.manifest_workers", 0, "defaults.manifest_workers: 0 is out of range 1-256"),
    ("metrics", ["loss", "Loss"], "metrics[1]: 'Loss' is not a valid metric name"),
    ("metrics", ["loss", "loss"], "metrics[1]: 'loss' is listed twice"),
    ("metrics", "loss", "metrics: expected a list"),
    ("retention", ["keep_last"], "retention: expected a mapping with keys policies, assign"),
    ("rotation.lock_file", "run/lock", "rotation.lock_file: 'run/lock' must be an absolute"),
    ("rotation.metrics_file", "x.prom", "rotation.metrics_file: 'x.prom' must be an absolute"),
    ("lock.wait_seconds", -1, "lock.wait_seconds: -1 is out of range 0-3600"),
    ("lock.wait_seconds", 3601, "lock.wait_seconds: 3601 is out of range 0-3600"),
    ("lock.wait_seconds", "60", "lock.wait_seconds: expected a number of seconds, got str '60'"),
    ("lock.wait_seconds", True, "lock.wait_seconds: expected a number of seconds"),
    ("lock", [60], "lock: expected a mapping with keys wait_seconds"),
])
def test_invalid_values_are_named_with_their_place_and_file(path, value, expected):
    err = error_of(with_(path, value))
    assert expected in err.problem
    assert err.problem.startswith("/etc/fabricctl/config.yml: ")
    assert err.fix and err.exit_code == 1


def test_a_group_may_be_empty_but_resolving_it_is_an_error():
    cfg = from_dict(with_("groups.rack9", []))
    assert cfg.groups["rack9"] == []
    with pytest.raises(UserError, match="group 'rack9' has no hosts"):
        cfg.resolve_targets("rack9")


SECRET = "s3cret-s3cret"


@pytest.mark.parametrize("chap, expected", [
    ({"userid": "gpu1"}, "hosts.gpu1.chap.password: is required"),
    ({"password": SECRET}, "hosts.gpu1.chap.userid: is required"),
    ({"userid": "gpu1", "password": "tiny5"}, "hosts.gpu1.chap.password: must be 12-16 characters (got 5)"),
    ({"userid": "gpu1", "password": "x" * 17}, "hosts.gpu1.chap.password: must be 12-16 characters (got 17)"),
    ({"userid": "gpu1", "password": SECRET, "mutual_userid": "storage1"},
     "mutual CHAP needs both mutual_userid and mutual_password"),
    ({"userid": "gpu1", "password": SECRET, "mutual_userid": "storage1", "mutual_password": SECRET},
     "hosts.gpu1.chap.mutual_password: equals hosts.gpu1.chap.password"),
    ({"userid": "gpu 1", "password": SECRET}, "invalid CHAP userid"),
    ({"userid": "gpu1", "password": 123456789012}, "hosts.gpu1.chap.password: expected a string, got int"),
    ({"userid": "gpu1", "password": "gpu2-s3cret-1"},
     "hosts.gpu2.chap: shares a CHAP secret (not shown) with host 'gpu1'"),
    ({"userid": "gpu1", "password": SECRET, "mutual_userid": "s", "mutual_password": "gpu2-mutual-1"},
     "hosts.gpu2.chap: shares a CHAP secret (not shown) with host 'gpu1'"),
    (..., "hosts.gpu1.chap: is missing"),
])
def test_chap_is_validated_without_showing_secrets(chap, expected):
    err = error_of(with_("hosts.gpu1.chap", chap))
    assert expected in err.problem
    text = str(err)
    for secret in (SECRET, "tiny5", "123456789012", "x" * 17, "gpu2-s3cret-1", "gpu2-mutual-1"):
        assert secret not in text


def test_one_shared_secret_for_every_host_is_refused():
    err = error_of(with_("chap", {"userid": "fabricctl", "password": SECRET}))
    assert "shared by every GPU node is refused" in err.problem and "hosts.NAME.chap" in err.fix
    assert SECRET not in str(err)


def test_hosts_without_chap_need_the_loud_switch_and_then_all_go_without():
    raw = example()
    for host in raw["hosts"].values():
        del host["chap"]
    assert "hosts.gpu1.chap: is missing" in error_of(raw).problem
    cfg = from_dict(dict(raw, insecure_no_chap=True))
    assert cfg.insecure_no_chap and cfg.publishing().insecure_no_chap
    assert cfg.publishing().chap_of("iqn.2026-11.io.fabric.lab:gpu1") is None
    raw["hosts"]["gpu1"]["chap"] = {"userid": "gpu1", "password": SECRET}
    assert "CHAP is set for gpu1 but not for the other hosts" in error_of(dict(raw, insecure_no_chap=True)).problem
    assert "expected true or false" in error_of(with_("insecure_no_chap", "yes")).problem


def test_a_host_without_chap_is_refused_by_the_publishing_settings_too():
    settings = from_dict(example()).publishing()
    with pytest.raises(UserError, match="no CHAP credentials for initiator iqn.2026-11.io.fabric.lab:gpu9"):
        settings.chap_of("iqn.2026-11.io.fabric.lab:gpu9")


def test_retention_content_is_left_to_the_retention_parser():
    raw = with_("retention", {"policies": {"p": {"keep_anything": "whatever"}}})
    assert from_dict(raw).retention == {"policies": {"p": {"keep_anything": "whatever"}}}


def test_top_level_must_be_a_mapping():
    assert "expected a mapping" in error_of(["pool", "tank"]).problem


# --------------------------------------------------------------------------------------------
# the file


def test_missing_file_tells_how_to_get_one(tmp_path):
    with pytest.raises(UserError) as exc:
        load(tmp_path / "nope.yml")
    assert "nope.yml does not exist" in exc.value.problem
    assert "playbooks/fabricctl.yml" in exc.value.fix and "playbooks/site.yml" in exc.value.fix


def test_fabricctl_config_overrides_the_default_path(tmp_path, monkeypatch):
    path = tmp_path / "elsewhere.yml"
    path.write_text(EXAMPLE)
    monkeypatch.setenv("FABRICCTL_CONFIG", str(path))
    assert config.default_path() == str(path)
    assert load().source == str(path)
    monkeypatch.delenv("FABRICCTL_CONFIG")
    assert config.default_path() == "/etc/fabricctl/config.yml"


def test_the_roles_json_loads_as_the_same_configuration_without_pyyaml(tmp_path, monkeypatch):
    """The role writes config.yml as JSON after its comment header (a subset of YAML): fabricctl reads it with the
    json module, and it is the same configuration PyYAML reads from the YAML text."""
    path = tmp_path / "config.yml"
    path.write_text("# Ansible managed\n# fabricctl's configuration\n\n" + json.dumps(example(), indent=2) + "\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # an import of PyYAML would fail
    from_json = load(path)
    monkeypatch.undo()
    yaml_path = tmp_path / "config-yaml.yml"
    yaml_path.write_text(EXAMPLE)
    assert from_json == dataclasses.replace(load(yaml_path), source=str(path))


@pytest.mark.parametrize("text, expected", [
    ('{"pool": "tank", "pool": "other"}\n', "duplicate key 'pool' (first at line 1)"),  # PyYAML names the line
    ('# header\n{"pool": "tank",\n', "is not valid YAML"),
])
def test_json_that_is_not_a_configuration_falls_back_to_pyyaml_and_its_message(tmp_path, text, expected):
    path = tmp_path / "config.yml"
    path.write_text(text)
    with pytest.raises(UserError) as exc:
        load(path)
    assert expected in exc.value.problem


@pytest.mark.parametrize("text, expected", [
    ("pool: tank\nportal: {ip: 10.77.0.11\n", "is not valid YAML at line"),
    ("", "is empty"),
    ("pool: tank\npool: other\n", "duplicate key 'pool' (first at line 1)"),
    ("- a\n- b\n", "top level: expected a mapping"),
    ("pool: !!python/object:os.system {}\n", "is not valid YAML"),  # safe loading only
])
def test_bad_files(tmp_path, text, expected):
    path = tmp_path / "config.yml"
    path.write_text(text)
    with pytest.raises(UserError) as exc:
        load(path)
    assert expected in exc.value.problem and str(path) in exc.value.problem


# --------------------------------------------------------------------------------------------
# targets


@pytest.fixture
def cfg():
    raw = example()
    raw["hosts"]["gpu3"] = {"address": "10.77.0.23", "initiator": "iqn.2026-11.io.fabric.lab:gpu3",
                            "chap": {"userid": "gpu3", "password": "gpu3-s3cret-1"}}
    raw["groups"]["rack2"] = ["gpu3", "gpu2"]
    return from_dict(raw)


@pytest.mark.parametrize("spec, names", [
    ("gpu_nodes", ["gpu1", "gpu2"]),
    ("gpu2,gpu1", ["gpu2", "gpu1"]),
    ("gpu3, gpu_nodes", ["gpu3", "gpu1", "gpu2"]),
    ("rack2,gpu_nodes,gpu3,gpu2", ["gpu3", "gpu2", "gpu1"]),  # duplicates collapsed, first place kept
    ("gpu1,,gpu1,", ["gpu1"]),
])
def test_resolve_targets(cfg, spec, names):
    hosts = cfg.resolve_targets(spec)
    assert [h.name for h in hosts] == names and all(isinstance(h, Host) for h in hosts)


def test_unknown_target_lists_known_hosts_and_groups(cfg):
    with pytest.raises(NotFound) as exc:
        cfg.resolve_targets("gpu1,gpu_node")
    err = exc.value
    assert "unknown host or group 'gpu_node'" in err.problem
    assert "hosts: gpu1, gpu2, gpu3; groups: gpu_nodes, rack2" in err.problem
    assert "did you mean 'gpu_nodes'?" in err.fix


def test_empty_target_spec(cfg):
    with pytest.raises(UserError, match="no hosts given"):
        cfg.resolve_targets(" , ")
