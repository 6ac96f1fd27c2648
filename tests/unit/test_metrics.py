"""fabric_core.services.metrics (pure: what was read -> a prometheus_client registry) on the recorded OpenZFS 2.3.9
outputs of tests/unit/data/zfs23b (tank's `zpool list` and `zpool status`, derived by a stated minimal edit where the
lab recorded no such state), and `fabricctl metrics` through fabricctl's main with the node's commands answered from
the same recordings: the textfile parses with prometheus_client's own parser and carries every documented metric,
written atomically with mode 0644 where the configuration says. The kstat reader parse_arcstats (for `fabricctl
warm`; no metric) on an arcstats sample (tests/unit/data/arcstats: constructed, not recorded; its README says how).

Prometheus' conventions: one prefix, timestamps not ages, fabric_build_info, nothing node_exporter's zfs collector
exports, the published versions' series bounded (2V + 2H, counted on 500 hosts and 50 versions).

Also the documentation of the metrics (docs/fabricctl.md's table) and the example alert rules
(roles/fabricctl/files/fabric-alerts.yml: every rule complete, every fabric_ metric an expression names one fabricctl
writes; promtool checks the file: `make test` installs it, tests/test-tools.sh)."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support import (
    FCTL_IQN_BASE,
    GPU1,
    GPU2,
    AnsweringRunner,
    data,
    derive_json,
    fabricctl_config,
    lio_target,
    snapshot_listing,
)

# isort: split
from fabric_core.base.errors import UserError
from fabric_core.services import health
from fabric_core.services import metrics as fm
from fabric_core.storage import lio, lzc, zpool
from prometheus_client.parser import text_string_to_metric_families

from fabricctl import context, main
from fabricctl.commands import metrics as metrics_command

REPO = Path(__file__).resolve().parents[2]
DAY = 86400
BASE = FCTL_IQN_BASE
V1 = f"{BASE}:ds.imagenet.v1"
HDD = "/dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD100{}"  # tank's raidz2 members (zfs23b/tank_status.json), 0-5
TANK_SCRUB_END = 1795511136  # zfs23b/status_cksum.json's scrub end
NOW = TANK_SCRUB_END + DAY
CK_CREATED = NOW - 3600  # the newest checkpoint of job llama: an hour before the clock
ARCSTATS = data("arcstats", "arcstats.txt")


def samples(text: str) -> dict:
    """{(sample name, frozenset of labels): value} of an exposition, parsed by prometheus_client's parser."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(text: str, name: str, **labels) -> float:
    return samples(text)[(name, frozenset(labels.items()))]


def names(text: str) -> set:
    return {name for name, _ in samples(text)}


def _tank_leaf(doc: dict, n: int) -> dict:
    return doc["pools"]["tank"]["vdevs"]["tank"]["vdevs"]["raidz2-0"]["vdevs"][HDD.format(n) + "-part1"]


def _scrubbed_tank(doc: dict) -> None:
    """The recorded tank (never scrubbed) given the scan_stats of the scrub recorded in the same session
    (zfs23b/status_cksum.json, z23_rec's), as test_health does."""
    doc["pools"]["tank"]["scan_stats"] = json.loads(data("zfs23b", "status_cksum.json"))["pools"]["z23_rec"][
        "scan_stats"]


def tank_status(edit=None) -> str:
    """zfs23b/tank_status.json with a scrub (derived, as above) and ``edit`` applied."""
    return derive_json("zfs23b/tank_status.json", edit=lambda d: (_scrubbed_tank(d), edit and edit(d)))


def _errors(doc: dict) -> None:
    """Derived: 509 checksum errors and 2 read errors on HDD1002, as `zpool status -j` prints its counters."""
    _tank_leaf(doc, 2).update(checksum_errors=509, read_errors=2)


def observed(**changes) -> fm.Observed:
    """What `fabricctl metrics` reads of the recorded tank (errors derived on HDD1002), imagenet@v1 published to
    gpu1 (logged in) and gpu2 (not), two checkpoints of job llama, a replica of job bert, the build."""
    row = zpool.parse_list(data("zfs23b", "tank_list.json"))[0]
    ph = zpool.parse_health(tank_status(_errors))
    checks = health.pool_checks(ph, row, NOW) + [health.chap(True), health.discovery(True)]
    obs = fm.Observed(pool_name="tank", now=NOW, node="storage1", pool=row, pool_health=ph, checks=checks,
                      versions=[{"dataset": "imagenet", "version": "v1", "acl": ["gpu1", "gpu2"],
                                 "sessions": ["gpu1"]}],
                      build={"version": "0.2.0", "python": "3.13.5", "openzfs": "2.3.2-1"},
                      checkpoints=[{"name": "tank/checkpoints/llama@step-100", "name_short": "llama",
                                    "creation": CK_CREATED - 7200},
                                   {"name": "tank/checkpoints/llama@step-200", "name_short": "llama",
                                    "creation": CK_CREATED}],
                      replicas=[{"name_short": "bert", "fabric:kind": "checkpoint", "fabric:origin": "storage2",
                                 "creation": CK_CREATED}])
    for key, val in changes.items():
        setattr(obs, key, val)
    return obs


def render(obs: fm.Observed) -> str:
    return fm.render(fm.registry(obs)).decode()


# --- arcstats (the kstat reader, for fabricctl warm) ------------------------------------------------


def test_arcstats_are_parsed_from_the_kstat_text():
    arc = fm.parse_arcstats(ARCSTATS)
    assert (arc["hits"], arc["misses"], arc["size"]) == (48213977, 1203344, 25165824000)
    assert (arc["l2_hits"], arc["l2_misses"], arc["l2_size"]) == (182311, 1021033, 21474836480)
    assert arc["memory_available_bytes"] == 7026458624  # an int64 (type 3) row too
    assert "name" not in arc and "9" not in arc  # the header lines are not statistics


def test_text_that_is_not_arcstats_is_refused():
    with pytest.raises(UserError, match="not the text of /proc/spl/kstat/zfs/arcstats"):
        fm.parse_arcstats("hits 4 12\n")


def test_a_row_that_is_not_a_number_is_skipped():
    assert fm.parse_arcstats("name type data\nhits 4 12\nnote 7 text\n") == {"hits": 12}


# --- the registry -----------------------------------------------------------------------------------


def test_every_documented_metric_is_produced_and_nothing_else():
    text = render(observed())
    assert names(text) == set(fm.NAMES)
    for family in text_string_to_metric_families(text):
        metric = fm.BY_NAME[family.name + ("_total" if family.type == "counter" else "")]
        assert family.type == metric.type and family.documentation == metric.help
        assert all(set(s.labels) == set(metric.labels) for s in family.samples), family.name


def test_metric_names_follow_the_conventions():
    """One prefix for everything fabricctl writes (rotation's file too); _total on counters; the unit at the end;
    a point in time is *_timestamp_seconds, never an age; *_info is 1."""
    for m in (*fm.METRICS, *fm.ROTATION_METRICS):
        assert re.fullmatch(r"fabric_[a-z0-9_]+", m.name), m.name
        assert m.name.endswith("_total") == (m.type == fm.COUNTER), m.name
        if m.unit in ("bytes", "seconds", "ratio"):
            assert m.name.endswith(f"_{m.unit}"), m.name
        assert "_age" not in m.name, m.name
        if m.unit == "seconds":
            assert m.name.endswith(("_timestamp_seconds", "_duration_seconds")), m.name
        assert m.name.endswith("_info") == (m.unit == "info"), m.name
    assert {s.name for s in fm.METRICS} & {s.name for s in fm.ROTATION_METRICS} == set()


def test_build_info_is_one_with_the_build_in_its_labels():
    text = render(observed())
    assert value(text, "fabric_build_info", version="0.2.0", python="3.13.5", openzfs="2.3.2-1") == 1
    unknown = render(observed(build={"version": "0.2.0", "python": "3.13.5", "openzfs": None}))
    assert value(unknown, "fabric_build_info", version="0.2.0", python="3.13.5", openzfs="unknown") == 1


# node_exporter's zfs collector (collector/zfs_linux.go): node_zfs_arc_<every arcstats row>, node_zfs_zpool_state
# {zpool, state} for an imported pool (lower-case states), node_zfs_zpool_* I/O kstats, node_zfs_zpool_dataset_*
NODE_EXPORTER_ZFS = re.compile(r"fabric_(l2)?arc_|fabric_zpool_(io|dataset)_")


def test_nothing_node_exporters_zfs_collector_exports_is_exported_again():
    assert not [m.name for m in fm.METRICS if NODE_EXPORTER_ZFS.match(m.name)]
    text = render(observed())
    assert not [n for n in names(text) if NODE_EXPORTER_ZFS.match(n)]
    # the one overlap, kept for a stated reason (docs/fabricctl.md): MISSING, the configured pool not imported
    doc = (REPO / "docs" / "fabricctl.md").read_text()
    assert "node_zfs_zpool_state" in doc and "node_zfs_arc_hits" in doc


def test_pool_values_are_those_zpool_printed():
    text = render(observed())
    # zfs23b/tank_list.json: size 55029268480, allocated 1466368, free 55027802112
    assert value(text, "fabric_pool_size_bytes", pool="tank") == 55029268480
    assert value(text, "fabric_pool_allocated_bytes", pool="tank") == 1466368
    assert value(text, "fabric_pool_free_bytes", pool="tank") == 55027802112
    assert value(text, "fabric_pool_capacity_ratio", pool="tank") == pytest.approx(1466368 / 55029268480)
    assert value(text, "fabric_pool_state", pool="tank", state="ONLINE") == 1
    assert value(text, "fabric_pool_state", pool="tank", state="DEGRADED") == 0
    assert value(text, "fabric_pool_data_errors", pool="tank") == 0


def test_device_error_counters_name_pool_vdev_and_device():
    text = render(observed())
    leaf = {"pool": "tank", "vdev": "raidz2-0", "device": HDD.format(2)}
    assert value(text, "fabric_pool_device_checksum_errors_total", **leaf) == 509
    assert value(text, "fabric_pool_device_read_errors_total", **leaf) == 2
    assert value(text, "fabric_pool_device_write_errors_total", **leaf) == 0
    assert value(text, "fabric_pool_device_checksum_errors_total", pool="tank", vdev="raidz2-0",
                 device=HDD.format(3)) == 0
    assert value(text, "fabric_pool_device_checksum_errors_total", pool="tank", vdev="raidz2-0",
                 device="raidz2-0") == 0  # the vdev itself, by its name
    assert value(text, "fabric_pool_device_checksum_errors_total", pool="tank", vdev="tank", device="tank") == 0
    cache = "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_NVME1003"  # tank's cache device: its own vdev, -part1 stripped
    assert value(text, "fabric_pool_device_read_errors_total", pool="tank", vdev=cache, device=cache) == 0


def test_a_degraded_pool_has_one_state_set():
    def pull(doc):  # derived, as test_health: HDD1003 pulled (named by its GUID, UNAVAIL), the pool DEGRADED
        pool = doc["pools"]["tank"]
        raidz = pool["vdevs"]["tank"]["vdevs"]["raidz2-0"]
        leaf = raidz["vdevs"].pop(HDD.format(3) + "-part1")
        leaf.update(name=str(leaf["guid"]), state="UNAVAIL", not_present=1, was=leaf.pop("path"))
        raidz["vdevs"][leaf["name"]] = leaf
        for node in (raidz, pool["vdevs"]["tank"], pool):
            node["state"] = "DEGRADED"

    ph = zpool.parse_health(tank_status(pull))
    text = render(observed(pool_health=ph, checks=health.pool_checks(ph, observed().pool, NOW)))
    states = {dict(labels)["state"]: v for (name, labels), v in samples(text).items() if name == "fabric_pool_state"}
    assert states == {s: float(s == "DEGRADED") for s in fm.POOL_STATES}
    assert value(text, "fabric_health_state") == 2 and value(text, "fabric_health_check_state", check="pool_state") == 2


def test_a_pool_that_is_not_imported_is_missing():
    obs = observed(pool=None, pool_health=None, pool_missing=True, checks=[health.missing_pool("tank")])
    text = render(obs)
    assert value(text, "fabric_pool_state", pool="tank", state="MISSING") == 1
    assert value(text, "fabric_pool_state", pool="tank", state="ONLINE") == 0
    assert value(text, "fabric_metrics_source_up", source="pool") == 1
    assert "fabric_pool_size_bytes" not in names(text)


def test_scrub_time_and_errors_come_from_the_scrub_check_and_the_last_scan():
    text = render(observed())
    assert value(text, "fabric_pool_last_scrub_timestamp_seconds", pool="tank") == TANK_SCRUB_END  # its end
    assert value(text, "fabric_pool_scrub_errors", pool="tank") == 0
    never = zpool.parse_health(data("zfs23b", "tank_status.json"))  # as recorded: never scrubbed
    row = observed().pool
    text = render(observed(pool_health=never, checks=health.pool_checks(never, row, NOW)))  # creation unknown
    assert "fabric_pool_last_scrub_timestamp_seconds" not in names(text)
    assert "fabric_pool_scrub_errors" not in names(text)


def test_published_versions_per_version_and_per_host():
    versions = [{"dataset": "imagenet", "version": "v1", "acl": ["gpu1", "gpu2"], "sessions": ["gpu1"]},
                {"dataset": "imagenet", "version": "v2", "acl": ["gpu1"], "sessions": ["gpu1"]},
                {"dataset": "coco", "version": "v7", "acl": [], "sessions": []}]  # not published: not counted
    text = render(observed(versions=versions))
    assert value(text, "fabric_published_versions", node="storage1") == 2
    assert value(text, "fabric_version_hosts", dataset="imagenet", version="v1") == 2
    assert value(text, "fabric_version_sessions", dataset="imagenet", version="v1") == 1
    assert value(text, "fabric_version_hosts", dataset="imagenet", version="v2") == 1
    assert value(text, "fabric_version_sessions", dataset="imagenet", version="v2") == 1
    for host, published, logged_in in (("gpu1", 2, 2), ("gpu2", 1, 0)):
        assert value(text, "fabric_host_versions", host=host) == published
        assert value(text, "fabric_host_sessions", host=host) == logged_in
    assert "coco" not in text


def _site(hosts: int, versions: int) -> list:
    """Every one of `versions` versions published to every one of `hosts` hosts, half of them logged in."""
    names_ = [f"gpu{i:03d}" for i in range(hosts)]
    return [{"dataset": f"ds{v // 10}", "version": f"v{v}", "acl": names_, "sessions": names_[::2]}
            for v in range(versions)]


def _series(text: str, prefix: tuple) -> int:
    return sum(1 for (name, _labels) in samples(text) if name.startswith(prefix))


def test_a_500_host_50_version_site_makes_1100_series_of_published_versions_not_50000():
    """docs/fabricctl.md, "Metrics": 2V + 2H series (per version, per host), not 2VH (per host and version, as
    0.2.0's fabric_version_acl and fabric_version_session were); the worst case, every version to every host."""
    text = render(observed(versions=_site(500, 50)))
    assert _series(text, ("fabric_version_", "fabric_host_")) == 2 * 50 + 2 * 500 == 1100
    assert _series(text, ("fabric_published_versions",)) == 1
    assert value(text, "fabric_host_versions", host="gpu001") == 50
    assert value(text, "fabric_host_sessions", host="gpu001") == 0
    assert value(text, "fabric_host_sessions", host="gpu002") == 50
    assert value(text, "fabric_version_sessions", dataset="ds4", version="v49") == 250
    assert _series(render(observed(versions=_site(1000, 50))), ("fabric_version_", "fabric_host_")) == 2100  # linear


def test_checkpoint_time_is_that_of_the_newest_snapshot():
    text = render(observed())
    assert value(text, "fabric_checkpoint_newest_snapshot_timestamp_seconds", job="llama") == CK_CREATED
    assert value(text, "fabric_checkpoint_snapshots", job="llama") == 2


def test_a_replica_has_the_time_of_its_newest_snapshot():
    rows = [{"name_short": "llama", "fabric:kind": "checkpoint", "fabric:origin": "storage1", "creation": NOW - 900},
            {"name_short": "llama", "fabric:kind": "checkpoint", "fabric:origin": "storage1", "creation": NOW - 300},
            {"name_short": "imagenet", "fabric:kind": "dataset-version", "fabric:origin": "storage1",
             "creation": NOW - 86400},
            {"name_short": "made-here", "fabric:kind": "checkpoint", "fabric:origin": None, "creation": NOW}]
    text = render(observed(replicas=rows))
    assert value(text, "fabric_replica_newest_snapshot_timestamp_seconds", kind="checkpoint", volume="llama",
                 origin="storage1") == NOW - 300
    assert value(text, "fabric_replica_newest_snapshot_timestamp_seconds", kind="dataset", volume="imagenet",
                 origin="storage1") == NOW - 86400
    assert "made-here" not in text  # made on this node: not a replica
    assert value(text, "fabric_metrics_source_up", source="replicas") == 1
    down = render(observed(replicas=None))
    assert value(down, "fabric_metrics_source_up", source="replicas") == 0
    assert "fabric_replica_newest_snapshot_timestamp_seconds{" not in down


def test_the_overall_state_and_each_check():
    text = render(observed())
    assert value(text, "fabric_health_state") == 1  # the checksum errors: WARNING
    assert value(text, "fabric_health_check_state", check="device_errors") == 1
    assert value(text, "fabric_health_check_state", check="capacity") == 0


def test_sources_not_read_have_no_metrics_and_say_so():
    text = render(observed(checkpoints=None, versions=None))
    assert set(fm.SOURCES) == {"pool", "exports", "checkpoints", "replicas"}
    assert value(text, "fabric_metrics_source_up", source="checkpoints") == 0
    assert value(text, "fabric_metrics_source_up", source="exports") == 0
    assert value(text, "fabric_metrics_source_up", source="pool") == 1
    assert not names(text) & {"fabric_checkpoint_newest_snapshot_timestamp_seconds", "fabric_version_hosts",
                              "fabric_host_versions", "fabric_published_versions"}


# --- fabricctl metrics --------------------------------------------------------------------------------

CONFIG = fabricctl_config(node="storage1", groups=False)


_target = lio_target


LIVE = {"dump": {"storage_objects": [{"name": "fctl_imagenet.v1", "plugin": "block", "readonly": True,
                                      "dev": "/dev/zvol/tank/datasets/imagenet@v1", "wwn": "w"}],
                 "targets": [_target("ds.imagenet.v1", GPU1, GPU2)],
                 "fabric_modules": [{"name": "iscsi", "discovery_enable_auth": True}]},
        "sessions": [{"target": V1, "tpg": 1, "initiator": GPU1}], "devices": {}}


@pytest.fixture
def node(monkeypatch, tmp_path):
    """fabricctl on a storage node, as test_health's: tank's `zpool list/status` (scrubbed a day before the clock,
    errors derived on HDD1002), its creation, imagenet@v1 published to gpu1 (logged in) and gpu2 (not), job llama's
    checkpoints listed under tank/checkpoints, the zfs module's version. Returns run(*args) -> exit status."""
    creation = derive_json("zfs23b/tank_zfs_get_all_s.json", rename={"tank/datasets": "tank"})
    versions = snapshot_listing([{"name": "tank/datasets/imagenet@v1", "createtxg": "2", "fabric:managed": "true",
                                  "fabric:kind": "dataset-version", "fabric:fs": "ext4", "userrefs": "1",
                                  "fabric:version": "v1", "creation": "1795511100"}])
    ckpts = snapshot_listing([{"name": f"tank/checkpoints/llama@step-{s}", "createtxg": str(s),
                               "fabric:managed": "true", "fabric:kind": "checkpoint", "fabric:step": str(s),
                               "creation": str(created)}
                              for s, created in ((100, CK_CREATED - 7200), (200, CK_CREATED))])
    answers = {"status": (0, tank_status(_errors), ""), "list": (0, data("zfs23b", "tank_list.json"), ""),
               "checkpoints": (0, ckpts, "")}

    def listing(argv):
        return answers["checkpoints"] if argv[-1] == "tank/checkpoints" else (0, versions, "")

    table = {("zpool", "list"): lambda argv: answers["list"], ("zpool", "status"): lambda argv: answers["status"],
             ("zfs", "get", "-j", "-p", "creation", "tank"): (0, creation, ""),
             ("zfs", "list", "-j", "-p", "-t", "snapshot"): listing}
    monkeypatch.setattr(context, "LocalRunner", lambda dry_run: AnsweringRunner(table, dry_run=dry_run, default=None))
    monkeypatch.setattr(lio, "read_live", lambda desired=None, rts=None: LIVE)
    monkeypatch.setattr(lzc, "holds", lambda name: ["fabric:published"])
    monkeypatch.setattr(metrics_command, "clock", lambda: NOW)
    zfs_version = tmp_path / "zfs-version"
    zfs_version.write_text("2.3.2-1\n")  # /sys/module/zfs/version's text
    monkeypatch.setattr(metrics_command, "zfs_module_version", str(zfs_version))
    path = tmp_path / "config.yml"
    textfiles = tmp_path / "node-exporter"
    path.write_text(CONFIG + f"rotation: {{metrics_file: {textfiles}/fabricctl.prom}}\n")

    def run(*args):
        return main.main(["--config", str(path), "metrics", *args], sink=lambda fields: None)

    run.answers, run.path, run.textfiles, run.zfs_version = answers, path, textfiles, zfs_version
    return run


def test_the_textfile_goes_next_to_rotations_atomically_with_mode_0644(node, capsys):
    assert node() == 0
    target = node.textfiles / "fabric.prom"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert stat.S_IMODE(node.textfiles.stat().st_mode) == 0o755  # made: it was missing
    assert os.listdir(node.textfiles) == ["fabric.prom"]  # no temporary file left
    assert capsys.readouterr().out == ""  # quiet for the timer
    text = target.read_text()
    no_replica = set(fm.NAMES) - {"fabric_replica_newest_snapshot_timestamp_seconds"}  # the node holds no replica
    assert names(text) == no_replica
    assert value(text, "fabric_pool_device_checksum_errors_total", pool="tank", vdev="raidz2-0",
                 device=HDD.format(2)) == 509
    assert value(text, "fabric_version_sessions", dataset="imagenet", version="v1") == 1
    assert value(text, "fabric_host_sessions", host="gpu2") == 0
    assert value(text, "fabric_published_versions", node="storage1") == 1
    assert value(text, "fabric_checkpoint_newest_snapshot_timestamp_seconds", job="llama") == CK_CREATED
    build = [dict(labels) for (name, labels) in samples(text) if name == "fabric_build_info"]
    assert len(build) == 1 and build[0]["openzfs"] == "2.3.2-1" and build[0]["version"]
    assert build[0]["python"] == platform.python_version()
    assert value(text, "fabric_health_state") == 1  # checksum errors, gpu2 not logged in: WARNING


def test_output_replaces_a_given_file_and_dash_prints(node, capsys, tmp_path):
    out = tmp_path / "elsewhere" / "x.prom"
    out.parent.mkdir()
    out.write_text("old\n")
    assert node("--output", str(out)) == 0
    assert out.read_text().startswith("# HELP fabric_")
    assert node("--output", "-") == 0
    assert names(capsys.readouterr().out) == set(fm.NAMES) - {"fabric_replica_newest_snapshot_timestamp_seconds"}
    assert not (node.textfiles / "fabric.prom").exists()


def test_without_a_rotation_metrics_file_it_prints(node, capsys):
    node.path.write_text(CONFIG + "rotation: {metrics_file: null}\n")
    assert node() == 0
    assert "fabric_pool_size_bytes" in capsys.readouterr().out


def test_json_says_where_and_what_was_not_read(node, capsys):
    node.zfs_version.unlink()  # the module not loaded: its version is unknown, nothing is down
    node.answers["checkpoints"] = (1, "", "internal error: out of memory\n")
    assert node("--json") == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["output"] == str(node.textfiles / "fabric.prom") and out["state"] == "WARNING"
    assert out["sources_down"] == ["checkpoints", "replicas"]  # replicas: under both roots
    assert "could not read checkpoints, replicas" in captured.err
    text = (node.textfiles / "fabric.prom").read_text()
    assert value(text, "fabric_metrics_source_up", source="checkpoints") == 0
    assert [dict(labels)["openzfs"] for (name, labels) in samples(text) if name == "fabric_build_info"] == ["unknown"]
    assert value(text, "fabric_pool_size_bytes", pool="tank") == 55029268480  # the rest is there


def test_a_configuration_that_does_not_load_writes_unknown_and_fails(node, capsys, tmp_path):
    node.path.write_text(CONFIG + "health: {scrub_warn_days: 0}\n")
    out = tmp_path / "fabric.prom"
    assert node("--output", str(out)) == 1
    assert "health.scrub_warn_days: 0 is out of range" in capsys.readouterr().err
    text = out.read_text()
    assert value(text, "fabric_health_state") == 3
    assert value(text, "fabric_health_check_state", check="config") == 3


# --- documentation and alert rules -------------------------------------------------------------------------


def _doc_table() -> dict:
    """{metric: (type, labels, unit)} of docs/fabricctl.md's Metrics table."""
    text = (REPO / "docs" / "fabricctl.md").read_text()
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| `(fabric_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2), tuple(re.findall(r"`(\w+)`", m.group(3))), m.group(4).strip())
    return rows


def test_the_docs_table_has_every_metric_with_its_type_labels_and_unit():
    assert _doc_table() == {m.name: (m.type, m.labels, m.unit) for m in (*fm.METRICS, *fm.ROTATION_METRICS)}


def test_every_rename_is_in_the_upgrade_note():
    """The CHANGELOG's "Metrics renamed" table names every metric 0.2.0 wrote that is gone, old -> new."""
    gone = {"fabric_pool_scrub_age_seconds", "fabric_arc_size_bytes", "fabric_arc_hits_total",
            "fabric_arc_misses_total", "fabric_arc_hit_ratio", "fabric_l2arc_size_bytes", "fabric_l2arc_hits_total",
            "fabric_l2arc_misses_total", "fabric_l2arc_hit_ratio", "fabric_version_acl", "fabric_version_session",
            "fabric_checkpoint_age_seconds", "fabric_replica_newest_snapshot_age_seconds",
            "fabricctl_rotate_last_success_timestamp_seconds", "fabricctl_rotate_snapshots",
            "fabricctl_rotate_duration_seconds"}
    note = (REPO / "CHANGELOG.md").read_text().split("Metrics renamed", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z0-9_]+)` \| (.+?) \|$", note, flags=re.M))
    assert set(rows) == gone
    assert not gone & set(fm.NAMES) and not gone & {m.name for m in fm.ROTATION_METRICS}
    for old, new in rows.items():
        for name in re.findall(r"`((?:fabric|node)_[a-z0-9_]+)", new):
            assert name in fm.NAMES or name in ROTATION_METRICS or name.startswith("node_zfs_arc_"), (old, name)


ALERTS = REPO / "roles" / "fabricctl" / "files" / "fabric-alerts.yml"
ROTATION_METRICS = {m.name for m in fm.ROTATION_METRICS}  # written by fabricctl rotate itself (fm.rotation_registry)


def _rules() -> list:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_every_alert_rule_is_complete():
    rules = _rules()
    assert rules
    for rule in rules:
        assert set(rule) >= {"alert", "expr", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
    assert len({r["alert"] for r in rules}) == len(rules)


def test_alert_expressions_use_only_metrics_that_exist():
    used = set()
    for rule in _rules():
        used |= set(re.findall(r"\b(fabric(?:ctl)?_[a-z0-9_]+)", rule["expr"]))
    assert used, "no metric named"
    assert not {n for n in used if n not in fm.NAMES and n not in ROTATION_METRICS}
    assert used & ROTATION_METRICS  # rotation failing, from rotation's own file


def test_promtool_accepts_the_alert_rules():
    """`make test` (and `make unit`, `make venv`) put promtool beside the virtualenv's Python (tests/test-tools.sh,
    from Debian's prometheus package); without it this test says why it did not run, and fails under CI."""
    promtool = shutil.which("promtool", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if promtool is None:
        why = ("promtool is not installed (Debian package prometheus): run `make test-tools` (tests/test-tools.sh, "
               "which `make unit` and `make test` run) to put it in the virtualenv")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    proc = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in proc.stdout, proc.stdout


# --- rotation's file, read back by fabricctl status --------------------------------------------------------


def test_status_reads_rotations_timestamp_under_its_new_name_and_the_one_0_2_0_wrote(tmp_path):
    from fabricctl import readings  # noqa: PLC0415 - only here

    new = tmp_path / "fabricctl.prom"
    fm.write_textfile(str(new), fm.render(fm.rotation_registry(now=NOW - 3600, kept=7, destroyed=2, seconds=1.5)))
    assert "fabricctl_" not in new.read_text()
    check = readings.rotation_check(str(new), NOW)
    assert check.state == health.OK and check.details["last_success"] == NOW - 3600
    old = tmp_path / "old.prom"  # as 0.2.0 wrote it, until the next run replaces it
    old.write_text(f"# TYPE fabricctl_rotate_last_success_timestamp_seconds gauge\n"
                   f"fabricctl_rotate_last_success_timestamp_seconds {NOW - 3 * DAY}\n")
    assert readings.rotation_check(str(old), NOW).state == health.WARNING
    neither = tmp_path / "neither.prom"
    neither.write_text("something_else 1\n")
    check = readings.rotation_check(str(neither), NOW)
    assert check.state == health.UNKNOWN and "has no fabric_rotate_last_success_timestamp_seconds" in check.summary
