"""fabric_core.services.metrics (pure: what was read -> a prometheus_client registry) on the recorded OpenZFS 2.3.9
outputs of tests/unit/data/zfs23b (tank's `zpool list` and `zpool status`, derived by a stated minimal edit where the
lab recorded no such state) and an arcstats sample (tests/unit/data/arcstats: constructed, not recorded; its README
says how), and `fabricctl metrics` through fabricctl's main with the node's commands answered from the same
recordings: the textfile parses with prometheus_client's own parser and carries every documented metric, written
atomically with mode 0644 where the configuration says.

Also the documentation of the metrics (docs/fabricctl.md's table) and the example alert rules (docs/alerts.yml:
every rule complete, every fabric_ metric an expression names one the module produces; promtool checks the file
when it is installed)."""

from __future__ import annotations

import json
import os
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
    gpu1 (logged in) and gpu2 (not), the arcstats sample, two checkpoints of job llama."""
    row = zpool.parse_list(data("zfs23b", "tank_list.json"))[0]
    ph = zpool.parse_health(tank_status(_errors))
    checks = health.pool_checks(ph, row, NOW) + [health.chap(True), health.discovery(True)]
    obs = fm.Observed(pool_name="tank", now=NOW, node="storage1", pool=row, pool_health=ph, checks=checks,
                      versions=[{"dataset": "imagenet", "version": "v1", "acl": ["gpu1", "gpu2"],
                                 "sessions": ["gpu1"]}],
                      arcstats=ARCSTATS,
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


# --- arcstats ---------------------------------------------------------------------------------------


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
    for m in fm.METRICS:
        assert re.fullmatch(r"fabric_[a-z0-9_]+", m.name), m.name
        assert m.name.endswith("_total") == (m.type == fm.COUNTER), m.name
        if m.unit in ("bytes", "seconds", "ratio"):
            assert m.name.endswith(f"_{m.unit}"), m.name


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


def test_scrub_age_and_errors_come_from_the_scrub_check_and_the_last_scan():
    text = render(observed())
    assert value(text, "fabric_pool_scrub_age_seconds", pool="tank") == DAY  # the scrub ended a day before NOW
    assert value(text, "fabric_pool_scrub_errors", pool="tank") == 0
    never = zpool.parse_health(data("zfs23b", "tank_status.json"))  # as recorded: never scrubbed
    row = observed().pool
    text = render(observed(pool_health=never, checks=health.pool_checks(never, row, NOW)))  # creation unknown
    assert "fabric_pool_scrub_age_seconds" not in names(text) and "fabric_pool_scrub_errors" not in names(text)


def test_arc_and_l2arc_sizes_counters_and_ratios():
    text = render(observed())
    assert value(text, "fabric_arc_size_bytes") == 25165824000
    assert value(text, "fabric_arc_hits_total") == 48213977
    assert value(text, "fabric_arc_hit_ratio") == pytest.approx(48213977 / (48213977 + 1203344))
    assert value(text, "fabric_l2arc_size_bytes") == 21474836480
    assert value(text, "fabric_l2arc_hit_ratio") == pytest.approx(182311 / (182311 + 1021033))
    quiet = ARCSTATS.replace("l2_hits                         4    182311", "l2_hits                         4    0")
    quiet = quiet.replace("l2_misses                       4    1021033", "l2_misses                       4    0")
    assert "fabric_l2arc_hit_ratio" not in names(render(observed(arcstats=quiet)))  # no L2ARC access: no ratio


def test_published_versions_with_acls_and_sessions():
    text = render(observed())
    assert value(text, "fabric_published_versions", node="storage1") == 1
    v1 = {"dataset": "imagenet", "version": "v1"}
    assert value(text, "fabric_version_acl", host="gpu1", **v1) == 1
    assert value(text, "fabric_version_acl", host="gpu2", **v1) == 1
    assert value(text, "fabric_version_session", host="gpu1", **v1) == 1
    assert value(text, "fabric_version_session", host="gpu2", **v1) == 0


def test_checkpoint_age_is_that_of_the_newest_snapshot():
    text = render(observed())
    assert value(text, "fabric_checkpoint_age_seconds", job="llama") == 3600
    assert value(text, "fabric_checkpoint_snapshots", job="llama") == 2


def test_a_replica_lags_by_the_age_of_its_newest_snapshot():
    rows = [{"name_short": "llama", "fabric:kind": "checkpoint", "fabric:origin": "storage1", "creation": NOW - 900},
            {"name_short": "llama", "fabric:kind": "checkpoint", "fabric:origin": "storage1", "creation": NOW - 300},
            {"name_short": "imagenet", "fabric:kind": "dataset-version", "fabric:origin": "storage1",
             "creation": NOW - 86400},
            {"name_short": "made-here", "fabric:kind": "checkpoint", "fabric:origin": None, "creation": NOW}]
    text = render(observed(replicas=rows))
    assert value(text, "fabric_replica_newest_snapshot_age_seconds", kind="checkpoint", volume="llama",
                 origin="storage1") == 300
    assert value(text, "fabric_replica_newest_snapshot_age_seconds", kind="dataset", volume="imagenet",
                 origin="storage1") == 86400
    assert "made-here" not in text  # made on this node: not a replica
    assert value(text, "fabric_metrics_source_up", source="replicas") == 1
    down = render(observed(replicas=None))
    assert value(down, "fabric_metrics_source_up", source="replicas") == 0
    assert "fabric_replica_newest_snapshot_age_seconds{" not in down


def test_the_overall_state_and_each_check():
    text = render(observed())
    assert value(text, "fabric_health_state") == 1  # the checksum errors: WARNING
    assert value(text, "fabric_health_check_state", check="device_errors") == 1
    assert value(text, "fabric_health_check_state", check="capacity") == 0


def test_sources_not_read_have_no_metrics_and_say_so():
    text = render(observed(arcstats=None, checkpoints=None, versions=None))
    assert value(text, "fabric_metrics_source_up", source="arcstats") == 0
    assert value(text, "fabric_metrics_source_up", source="checkpoints") == 0
    assert value(text, "fabric_metrics_source_up", source="exports") == 0
    assert value(text, "fabric_metrics_source_up", source="pool") == 1
    assert not names(text) & {"fabric_arc_size_bytes", "fabric_checkpoint_age_seconds", "fabric_version_acl",
                              "fabric_published_versions"}


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
    checkpoints listed under tank/checkpoints, the arcstats sample. Returns run(*args) -> exit status."""
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
    arcstats = tmp_path / "arcstats"
    arcstats.write_text(ARCSTATS)
    monkeypatch.setattr(metrics_command, "arcstats_path", str(arcstats))
    path = tmp_path / "config.yml"
    textfiles = tmp_path / "node-exporter"
    path.write_text(CONFIG + f"rotation: {{metrics_file: {textfiles}/fabricctl.prom}}\n")

    def run(*args):
        return main.main(["--config", str(path), "metrics", *args], sink=lambda fields: None)

    run.answers, run.path, run.textfiles, run.arcstats = answers, path, textfiles, arcstats
    return run


def test_the_textfile_goes_next_to_rotations_atomically_with_mode_0644(node, capsys):
    assert node() == 0
    target = node.textfiles / "fabric.prom"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert stat.S_IMODE(node.textfiles.stat().st_mode) == 0o755  # made: it was missing
    assert os.listdir(node.textfiles) == ["fabric.prom"]  # no temporary file left
    assert capsys.readouterr().out == ""  # quiet for the timer
    text = target.read_text()
    assert names(text) == set(fm.NAMES) - {"fabric_replica_newest_snapshot_age_seconds"}  # the node holds no replica
    assert value(text, "fabric_pool_device_checksum_errors_total", pool="tank", vdev="raidz2-0",
                 device=HDD.format(2)) == 509
    assert value(text, "fabric_version_session", dataset="imagenet", version="v1", host="gpu2") == 0
    assert value(text, "fabric_published_versions", node="storage1") == 1
    assert value(text, "fabric_checkpoint_age_seconds", job="llama") == 3600
    assert value(text, "fabric_health_state") == 1  # checksum errors, gpu2 not logged in: WARNING


def test_output_replaces_a_given_file_and_dash_prints(node, capsys, tmp_path):
    out = tmp_path / "elsewhere" / "x.prom"
    out.parent.mkdir()
    out.write_text("old\n")
    assert node("--output", str(out)) == 0
    assert out.read_text().startswith("# HELP fabric_")
    assert node("--output", "-") == 0
    assert names(capsys.readouterr().out) == set(fm.NAMES) - {"fabric_replica_newest_snapshot_age_seconds"}
    assert not (node.textfiles / "fabric.prom").exists()


def test_without_a_rotation_metrics_file_it_prints(node, capsys):
    node.path.write_text(CONFIG + "rotation: {metrics_file: null}\n")
    assert node() == 0
    assert "fabric_pool_size_bytes" in capsys.readouterr().out


def test_json_says_where_and_what_was_not_read(node, capsys):
    node.arcstats.unlink()
    node.answers["checkpoints"] = (1, "", "internal error: out of memory\n")
    assert node("--json") == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["output"] == str(node.textfiles / "fabric.prom") and out["state"] == "WARNING"
    assert out["sources_down"] == ["arcstats", "checkpoints", "replicas"]  # replicas: under both roots
    assert "could not read arcstats, checkpoints, replicas" in captured.err
    text = (node.textfiles / "fabric.prom").read_text()
    assert value(text, "fabric_metrics_source_up", source="arcstats") == 0
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
    assert _doc_table() == {m.name: (m.type, m.labels, m.unit) for m in fm.METRICS}


ALERTS = REPO / "docs" / "alerts.yml"
ROTATION_METRICS = {"fabricctl_rotate_last_success_timestamp_seconds", "fabricctl_rotate_snapshots",
                    "fabricctl_rotate_duration_seconds"}  # written by fabricctl rotate itself (fm.rotation_registry)


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
        used |= set(re.findall(r"\b(fabricctl?_[a-z0-9_]+)", rule["expr"]))
    assert used, "no metric named"
    unknown = {n for n in used if n.startswith("fabric_") and n not in fm.NAMES}
    unknown |= {n for n in used if n.startswith("fabricctl_") and n not in ROTATION_METRICS}
    assert not unknown
    assert used & ROTATION_METRICS  # rotation failing, from rotation's own file
    assert {m.name for m in fm.ROTATION_METRICS} == ROTATION_METRICS


def test_promtool_accepts_the_alert_rules():
    # `make venv` puts it beside the virtualenv's Python (tests/promtool.sh, from Debian's prometheus package)
    promtool = shutil.which("promtool", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if promtool is None:
        pytest.skip("promtool is not installed on this machine (Debian package prometheus; `make venv` fetches it "
                    "with tests/promtool.sh); the rules' structure and metric names are checked by the two tests above")
    proc = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
