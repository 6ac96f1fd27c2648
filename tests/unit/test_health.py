"""fabric_core.services.health (the checks, pure, on a fixed clock) on recorded OpenZFS 2.3.9 `zpool status -j
--json-int -P` and `zpool list -j --json-int` outputs (tests/unit/data/zfs23/, zfs23b/), and `fabricctl status` as a
health check: its exit status (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN), its JSON and its lines, through fabricctl's
main with the node's commands answered from the same recordings, LIO's state given and the clock set.

The lab recorded a healthy pool, a degraded one (a device offlined), a spare standing in, a finished scrub and
resilver and a scrub in progress. What it did not record is derived from those by a minimal edit
(support.derive_json), each stated where it is made: a pulled disk, checksum and data errors, a resilver in
progress, a paused or canceled scrub, a scrub that found errors, a suspended or faulted pool, a fuller pool.
"""

from __future__ import annotations

import copy
import json

import pytest
from support import (
    FCTL_IQN_BASE,
    GPU1,
    GPU2,
    GPU9,
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
from fabric_core.services.health import CRITICAL, OK, UNKNOWN, WARNING, Thresholds
from fabric_core.storage import holders, lio, lzc, zpool

from fabricctl import config, context, main, readings
from fabricctl.commands import status

DAY = 86400
SCRUB_END = 1795508798  # zfs23/status_cksum.json: the scrub of z23_rec ended (and started) then
RESILVER_END = 1795508793  # zfs23/status_spare_inuse.json: the resilver onto the spare
TANK_CREATED = 1795511053  # zfs23b/tank_zfs_get_all_s.json: creation of tank/datasets, made with the pool
T = "/var/tmp/z23_"
R3 = T + "r3.img"
BY_ID = "/dev/disk/by-id/"
HDD = BY_ID + "ata-LAB_HDD_8TB_7200_HDD100{}"  # tank's raidz2 members (zfs23b/tank_status.json), 0-5


def parsed(name: str, **derive) -> zpool.PoolHealth:
    """PoolHealth of a recorded `zpool status -j --json-int -P` (zfs23/NAME unless it names its session),
    derived by support.derive_json's arguments when given."""
    source = name if "/" in name else f"zfs23/{name}"
    return zpool.parse_health(derive_json(source, **derive) if derive else data(*source.split("/")))


def states(checks) -> dict:
    return {c.name: c.state for c in checks}


def _scan(doc: dict, pool: str) -> dict:
    return doc["pools"][pool]["scan_stats"]


def _tank_leaf(doc: dict, n: int) -> dict:
    return doc["pools"]["tank"]["vdevs"]["tank"]["vdevs"]["raidz2-0"]["vdevs"][HDD.format(n) + "-part1"]


# --- the pool's state ---------------------------------------------------------------------------


def test_an_online_pool_is_ok():
    check = health.pool_state(parsed("status_full.json"))
    assert (check.state, check.summary, check.code) == (OK, "pool z23_rec ONLINE", 0)


def test_a_degraded_pool_is_critical_and_names_the_offline_device():
    check = health.pool_state(parsed("status_degraded.json"))
    assert check.state == CRITICAL and check.code == 2
    assert check.summary == f"pool z23_rec DEGRADED: {R3} OFFLINE"
    assert [d["path"] for d in check.details["devices"]] == [R3]  # raidz1-0 is DEGRADED because of r3: not named
    assert "taken offline by the administrator" in check.details["status"]


def _pull_hdd1003(doc: dict) -> None:
    """HDD1003 of the recorded tank pulled, as OpenZFS 2.3.9 prints a device the pool misses (zpool_main.c,
    vdev_stats_nvlist; the same edit as test_zpool's _r3_not_present): named by its GUID, UNAVAIL,
    "not_present": 1 and "was": its path; its raidz2 vdev, the root vdev and the pool DEGRADED."""
    pool = doc["pools"]["tank"]
    raidz = pool["vdevs"]["tank"]["vdevs"]["raidz2-0"]
    leaf = raidz["vdevs"].pop(HDD.format(3) + "-part1")
    leaf.update(name=str(leaf["guid"]), state="UNAVAIL", not_present=1, was=leaf.pop("path"))
    raidz["vdevs"][leaf["name"]] = leaf
    pool["state"] = pool["vdevs"]["tank"]["state"] = raidz["state"] = "DEGRADED"


def test_a_pulled_member_is_critical_and_named_by_the_path_it_had():
    check = health.pool_state(parsed("zfs23b/tank_status.json", edit=_pull_hdd1003))  # derived, see _pull_hdd1003
    assert check.state == CRITICAL
    assert check.summary == f"pool tank DEGRADED: {HDD.format(3)} UNAVAIL"


def test_a_spare_standing_in_is_named_beside_the_member_it_replaces():
    check = health.pool_state(parsed("status_spare_inuse.json"))
    assert check.state == CRITICAL
    assert check.summary == f"pool z23_rec DEGRADED: {R3} OFFLINE; spare {T}spare.img in use"


@pytest.mark.parametrize("state", ["FAULTED", "UNAVAIL", "SUSPENDED"])
def test_a_faulted_unavailable_or_suspended_pool_is_critical(state):
    # derived: the recorded degraded pool with the pool's state replaced (the lab recorded none of these)
    check = health.pool_state(parsed("status_degraded.json", edit=lambda d: d["pools"]["z23_rec"].update(state=state)))
    assert check.state == CRITICAL and check.summary.startswith(f"pool z23_rec {state}: {R3} OFFLINE")


def test_an_online_pool_with_a_lost_cache_device_is_a_warning():
    def cache_gone(doc):  # derived: the recorded full pool, its cache device UNAVAIL (an L2ARC loss keeps it ONLINE)
        doc["pools"]["z23_rec"]["l2cache"][T + "cache.img"].update(state="UNAVAIL", aux="OPEN_FAILED")

    check = health.pool_state(parsed("status_full.json", edit=cache_gone))
    assert check.state == WARNING
    assert check.summary == f"pool z23_rec ONLINE but {T}cache.img UNAVAIL (open_failed)"


def test_a_pool_that_is_not_imported_is_critical():
    check = health.missing_pool("tank")
    assert check.state == CRITICAL and "not imported" in check.summary and "zpool import tank" in check.summary


# --- device and data errors ---------------------------------------------------------------------


def test_no_errors_is_ok():
    assert health.device_errors(parsed("zfs23b/tank_status.json")).state == OK
    assert health.data_errors(parsed("zfs23b/tank_status.json")).state == OK


def test_checksum_errors_are_a_warning_naming_the_device_and_the_count():
    # derived: the lab's garbage write hit no allocated block (zfs23/README.md), so 509 checksum errors on HDD1002
    # of the recorded tank are edited in
    check = health.device_errors(parsed("zfs23b/tank_status.json",
                                        edit=lambda d: _tank_leaf(d, 2).update(checksum_errors=509)))
    assert check.state == WARNING and check.code == 1
    assert check.summary == f"checksum errors on {HDD.format(2)}: 509 cksum"
    assert check.details["devices"] == [{"device": HDD.format(2), "read": 0, "write": 0, "cksum": 509}]
    assert check.perf == ("devices_with_errors=1;1;;0",)


def test_errors_on_several_devices_are_counted_and_each_named():
    def errors(doc):  # derived: read and write errors on HDD1000, checksum errors on HDD1005 and on raidz2-0
        _tank_leaf(doc, 0).update(read_errors=3, write_errors=1)
        _tank_leaf(doc, 5).update(checksum_errors=12)
        doc["pools"]["tank"]["vdevs"]["tank"]["vdevs"]["raidz2-0"]["checksum_errors"] = 2

    check = health.device_errors(parsed("zfs23b/tank_status.json", edit=errors))
    assert check.state == WARNING
    assert check.summary == (f"3 devices with errors: checksum errors on raidz2-0: 2 cksum; read and write errors on "
                             f"{HDD.format(0)}: 3 read, 1 write; checksum errors on {HDD.format(5)}: 12 cksum")


def test_data_errors_are_critical():
    # derived: the recorded tank with two permanent data errors
    pool = parsed("zfs23b/tank_status.json", edit=lambda d: d["pools"]["tank"].update(error_count=2))
    check = health.data_errors(pool)
    assert check.state == CRITICAL and check.summary.startswith("pool tank has 2 data errors")
    assert "zpool status -v tank" in check.summary


# --- the scrub ----------------------------------------------------------------------------------


@pytest.mark.parametrize("days, state", [(0, OK), (39.9, OK), (40, WARNING), (59.9, WARNING), (60, CRITICAL),
                                         (400, CRITICAL)])
def test_the_last_scrub_is_aged_from_its_end(days, state):
    check = health.scrub(parsed("status_cksum.json"), now=SCRUB_END + days * DAY)
    assert check.state == state
    assert check.details["end_time"] == SCRUB_END and check.details["age_seconds"] == round(days * DAY)
    assert check.summary.startswith("last scrub of pool z23_rec ended ")
    assert ("warning at 40 days, critical at 60" in check.summary) == (state != OK)


def test_scrub_thresholds_are_configurable():
    strict = Thresholds(scrub_warn_days=7, scrub_critical_days=14)
    assert health.scrub(parsed("status_cksum.json"), now=SCRUB_END + 8 * DAY, thresholds=strict).state == WARNING
    assert health.scrub(parsed("status_cksum.json"), now=SCRUB_END + 15 * DAY, thresholds=strict).state == CRITICAL


def test_a_scrub_in_progress_is_reported_and_aged_from_its_start():
    pool = parsed("zfs23b/x_status_expanded.json")  # scan_stats SCRUB SCANNING, started 1795511146
    check = health.scrub(pool, now=1795511146 + 3600)
    assert check.state == OK
    assert check.summary == "scrub of pool z23x_rz in progress since 2026-11-24 09:05 UTC, 0% done"
    late = health.scrub(pool, now=1795511146 + 45 * DAY)  # started 45 days ago and still not completed
    assert late.state == WARNING and "not completed for 45 days" in late.summary


def test_a_paused_scrub_says_since_when():
    def paused(doc):  # derived: the recorded scrub in progress, paused an hour after it started
        _scan(doc, "z23x_rz")["scrub_pause"] = 1795511146 + 3600

    check = health.scrub(parsed("zfs23b/x_status_expanded.json", edit=paused), now=1795511146 + 2 * DAY)
    assert check.state == OK and check.summary == "scrub of pool z23x_rz paused since 2026-11-24 10:05 UTC"


def test_a_resilver_in_progress_is_a_warning():
    def resilvering(doc):  # derived: the recorded resilver onto the spare, caught half-way (SCANNING, no end)
        _scan(doc, "z23_rec").update(state="SCANNING", end_time=0, issued=954368 // 2)

    check = health.scrub(parsed("status_spare_inuse.json", edit=resilvering), now=RESILVER_END + 600)
    assert check.state == WARNING
    assert check.summary == "resilver of pool z23_rec in progress since 2026-11-24 08:26 UTC, 50% done"


def test_a_finished_resilver_is_aged_and_says_the_scrub_before_it_is_not_known():
    check = health.scrub(parsed("status_spare_inuse.json"), now=RESILVER_END + DAY)
    assert check.state == OK
    assert check.summary == ("last resilver of pool z23_rec ended 24 h ago (2026-11-24 08:26 UTC); zpool keeps no "
                             "record of the scrub before it")


def test_a_scrub_that_found_errors_or_repaired_data_is_a_warning():
    def found(doc):  # derived: the recorded scrub with 3 errors and 4 KiB repaired
        _scan(doc, "z23_rec").update(errors=3, processed=4096)

    check = health.scrub(parsed("status_cksum.json", edit=found), now=SCRUB_END + DAY)
    assert check.state == WARNING
    assert check.summary.endswith("and found 3 errors and repaired 4.0 KiB")
    assert (check.details["errors"], check.details["repaired_bytes"]) == (3, 4096)


def test_a_canceled_scrub_is_a_warning():
    # derived: the recorded scrub, canceled (`zpool scrub -s`)
    check = health.scrub(parsed("status_cksum.json", edit=lambda d: _scan(d, "z23_rec").update(state="CANCELED")),
                         now=SCRUB_END + DAY)
    assert check.state == WARNING and "was canceled on 2026-11-24 08:26 UTC" in check.summary


def test_a_pool_never_scrubbed_is_aged_from_its_creation_when_known():
    pool = parsed("status_full.json")  # no scan_stats: never scrubbed
    assert pool.scan_stats == {}
    unknown_age = health.scrub(pool, now=SCRUB_END)
    assert unknown_age.state == WARNING and "never been scrubbed" in unknown_age.summary
    assert health.scrub(pool, now=SCRUB_END + 3 * DAY, created=SCRUB_END).state == OK
    old = health.scrub(pool, now=SCRUB_END + 50 * DAY, created=SCRUB_END)
    assert old.state == WARNING and old.summary.startswith("pool z23_rec never scrubbed, created 50 days ago")


def test_the_scan_stats_of_zpool_status_are_kept():
    assert parsed("status_cksum.json").scan_stats == {
        "function": "SCRUB", "state": "FINISHED", "start_time": SCRUB_END, "end_time": SCRUB_END, "to_examine": 978944,
        "examined": 978944, "skipped": 159744, "processed": 0, "errors": 0, "pass_start": 1795508798,
        "scrub_pause": 0, "scrub_spent_paused": 0, "issued": 819200}
    assert parsed("status_cksum.json").to_dict()["scan_stats"]["function"] == "SCRUB"


# --- capacity -------------------------------------------------------------------------------------


def _row(cap: int) -> dict:
    # derived: the recorded `zpool list` of tank with its capacity replaced
    return dict(zpool.parse_list(data("zfs23b", "tank_list.json"))[0], cap=cap)


@pytest.mark.parametrize("cap, state", [(0, OK), (79, OK), (80, WARNING), (89, WARNING), (90, CRITICAL)])
def test_capacity_against_the_thresholds(cap, state):
    check = health.capacity(_row(cap))
    assert check.state == state and check.summary.startswith(f"pool tank {cap}% full (1.4 MiB of 51.2 GiB")
    assert check.perf == (f"capacity={cap}%;80;90;0;100",)


def test_capacity_thresholds_are_configurable():
    assert health.capacity(_row(60), Thresholds(capacity_warn_percent=50)).state == WARNING
    check = health.capacity(_row(70), Thresholds(capacity_warn_percent=50, capacity_critical_percent=70))
    assert check.state == CRITICAL and check.summary.endswith("critical at 70%)")


# --- access and sessions --------------------------------------------------------------------------

BASE = FCTL_IQN_BASE
V1, V2, RW = f"{BASE}:ds.imagenet.v1", f"{BASE}:ds.imagenet.v2", f"{BASE}:ck.llama.rw"


def test_a_host_with_an_acl_and_no_session_is_a_warning():
    acls = {V1: ["gpu1", "gpu2"], V2: ["gpu1"], RW: ["gpu1"]}
    all_in = health.sessions(acls, {"gpu1": [V1, V2, RW], "gpu2": [V1]})
    assert all_in.state == OK and all_in.summary == "every host a version is published to is logged in (4 ACLs)"
    check = health.sessions(acls, {"gpu1": [V2]})
    assert check.state == WARNING
    assert check.summary == ("2 hosts not logged in to targets published to them: gpu1 (ck.llama.rw, "
                             "ds.imagenet.v1), gpu2 (ds.imagenet.v1)")
    assert check.details["missing"] == {"gpu1": [RW, V1], "gpu2": [V1]}


def test_an_acl_of_an_initiator_no_host_has_is_a_warning():
    assert health.foreign_acls({V1: []}).state == OK
    check = health.foreign_acls({V1: [GPU9]})
    assert check.state == WARNING and f"{GPU9} on ds.imagenet.v1" in check.summary and "access sync" in check.summary


def test_access_without_chap_or_with_open_discovery_is_a_warning():
    assert (health.chap(True).state, health.discovery(True).state) == (OK, OK)
    assert health.chap(False).state == WARNING and "no CHAP" in health.chap(False).summary
    assert health.discovery(False).state == WARNING and "discovery is open" in health.discovery(False).summary


# --- the result -----------------------------------------------------------------------------------


def test_the_worst_state_wins_and_critical_beats_unknown():
    assert health.worst([]) == OK
    assert health.worst([OK, UNKNOWN]) == UNKNOWN
    assert health.worst([UNKNOWN, WARNING, OK]) == WARNING
    assert health.worst([WARNING, UNKNOWN, CRITICAL]) == CRITICAL
    assert health.EXIT_CODES == {OK: 0, WARNING: 1, CRITICAL: 2, UNKNOWN: 3}


def test_the_status_line_names_what_is_wrong_worst_first_with_performance_data():
    pool = parsed("zfs23b/tank_status.json", edit=lambda d: (_pull_hdd1003(d), _tank_leaf(d, 2).update(
        checksum_errors=509)))  # derived: HDD1003 pulled and 509 checksum errors on HDD1002
    checks = health.pool_checks(pool, _row(12), now=TANK_CREATED + DAY, created=TANK_CREATED)
    assert states(checks) == {"pool_state": CRITICAL, "device_errors": WARNING, "data_errors": OK, "scrub": OK,
                              "capacity": OK}
    assert health.exit_code(checks) == 2
    assert health.status_line(checks) == (
        f"FABRIC CRITICAL - pool tank DEGRADED: {HDD.format(3)} UNAVAIL; checksum errors on {HDD.format(2)}: 509 cksum"
        " | devices_with_errors=1;1;;0 data_errors=0;;1;0 scrub_age=86400s;3456000;5184000;0 capacity=12%;80;90;0;100")


def test_all_ok_says_so_in_one_line():
    checks = health.pool_checks(parsed("status_cksum.json"), _row(0), now=SCRUB_END + DAY)
    assert health.status_line(checks).startswith("FABRIC OK - pool z23_rec ONLINE; all 5 checks OK | ")
    assert health.exit_code(checks) == 0
    assert health.overall([]).state == UNKNOWN


# --- the configuration's health: section -----------------------------------------------------------

MINIMAL = {"pool": "tank", "iqn_base": BASE, "portal": {"ip": "10.77.0.11"}}


def test_the_thresholds_default_and_are_read_from_the_configuration():
    assert config.from_dict(MINIMAL).health == Thresholds() == Thresholds(80, 90, 40, 60)
    cfg = config.from_dict({**MINIMAL, "health": {"capacity_warn_percent": 70, "scrub_critical_days": 90}})
    assert cfg.health == Thresholds(capacity_warn_percent=70, capacity_critical_percent=90, scrub_warn_days=40,
                                    scrub_critical_days=90)


@pytest.mark.parametrize("section, words", [
    ({"capacity_warn": 70}, ["unknown key 'capacity_warn' at health.capacity_warn", "capacity_warn_percent"]),
    ({"capacity_warn_percent": 101}, ["health.capacity_warn_percent: 101 is out of range 1-100"]),
    ({"scrub_warn_days": "40"}, ["health.scrub_warn_days: expected an integer 1-3650"]),
    ({"scrub_warn_days": 70}, ["health.scrub_critical_days: 60 is below health.scrub_warn_days (70)"]),
    ({"capacity_warn_percent": 95}, ["health.capacity_critical_percent: 90 is below health.capacity_warn_percent"]),
    ([], ["health: expected a mapping"]),
])
def test_bad_thresholds_name_the_key_and_the_problem(section, words):
    with pytest.raises(UserError) as exc:
        config.from_dict({**MINIMAL, "health": section}, source="/etc/fabricctl/config.yml")
    text = str(exc.value)
    assert "/etc/fabricctl/config.yml" in text and all(w in text for w in words), text


# --- fabricctl status -----------------------------------------------------------------------------

CONFIG = fabricctl_config()


_target = lio_target


def live(sessions=((V1, GPU1), (V1, GPU2)), acls=(GPU1, GPU2), closed=True, granted=()) -> dict:
    """LIO with imagenet v1 published to ``acls`` (their ACLs tagged as a publish's) and granted to ``granted``
    (ACLs without the tag), and the given (target, initiator) sessions."""
    return {"dump": {"storage_objects": [{"name": "fctl_imagenet.v1", "plugin": "block", "readonly": True,
                                          "dev": "/dev/zvol/tank/datasets/imagenet@v1", "wwn": "w"}],
                     "targets": [_target("ds.imagenet.v1", *acls, *granted, tagged=acls)],
                     "fabric_modules": [{"name": "iscsi", "discovery_enable_auth": closed}]},
            "sessions": [{"target": t, "tpg": 1, "initiator": i} for t, i in sessions], "devices": {}}


def _scrubbed_tank(doc: dict) -> None:
    """The recorded tank (never scrubbed) given the scan_stats of the scrub recorded in the same session
    (zfs23b/status_cksum.json, z23_rec's)."""
    doc["pools"]["tank"]["scan_stats"] = json.loads(data("zfs23b", "status_cksum.json"))["pools"]["z23_rec"][
        "scan_stats"]


TANK_SCRUB_END = 1795511136  # zfs23b/status_cksum.json's scrub end


@pytest.fixture
def node(monkeypatch, tmp_path):
    """fabricctl on a storage node: `zpool list/status` of tank, `zfs get creation tank`, the versions listing
    (imagenet@v1, held) answered from recordings (as ``answers["list"/"status"/"creation"]`` set them), LIO as
    ``state["live"]`` (a callable raising stands for LIO that cannot be read), the clock a day after tank's scrub.
    Returns run(*args) -> (exit status, stdout)."""
    # derived: `zfs get -j -p all tank/datasets` of the same session, named tank (its creation: tank's site run)
    creation = derive_json("zfs23b/tank_zfs_get_all_s.json", rename={"tank/datasets": "tank"})
    answers = {"status": (0, derive_json("zfs23b/tank_status.json", edit=_scrubbed_tank), ""),
               "list": (0, data("zfs23b", "tank_list.json"), ""), "creation": (0, creation, "")}
    state = {"live": live()}
    versions = snapshot_listing([{"name": "tank/datasets/imagenet@v1", "createtxg": "2", "fabric:managed": "true",
                                  "fabric:kind": "dataset-version", "fabric:fs": "ext4", "userrefs": "1",
                                  "fabric:version": "v1", "creation": "1795511100"}])
    table = {("zpool", "list"): lambda argv: answers["list"], ("zpool", "status"): lambda argv: answers["status"],
             ("zfs", "get", "-j", "-p", "creation", "tank"): lambda argv: answers["creation"],
             ("zfs", "list", "-j", "-p", "-t", "snapshot"): (0, versions, "")}
    monkeypatch.setattr(context, "LocalRunner", lambda dry_run: AnsweringRunner(table, dry_run=dry_run, default=None))

    def read_live(desired=None, rts=None):
        if callable(state["live"]):
            return state["live"]()
        return state["live"]

    monkeypatch.setattr(lio, "read_live", read_live)
    # configfs' reservation files of the version's backstore, as a read-only export is made (recorded: the
    # read-only backstore of tests/unit/data/lio/reservations.json)
    state["reservations"] = {"fctl_ds.imagenet.v1": recorded_reservations("idle", readonly=True)}
    monkeypatch.setattr(lio, "read_reservations", lambda configfs=None: state["reservations"])
    monkeypatch.setattr(lzc, "holds", lambda name: ["fabric:published"])
    monkeypatch.setattr(status, "clock", lambda: TANK_SCRUB_END + DAY)
    saved = tmp_path / "saveconfig.json"  # what LIO restores at boot: LIO as it runs
    saved.write_text(json.dumps(state["live"]["dump"]))
    monkeypatch.setattr(readings, "SAVE_FILE", str(saved))
    path = tmp_path / "config.yml"
    path.write_text(CONFIG)

    def run(*args):
        return main.main(["--config", str(path), "status", *args], sink=lambda fields: None)

    run.answers, run.state, run.path = answers, state, path
    return run


def test_a_healthy_node_is_ok_and_keeps_the_json_of_before(node, capsys):
    assert node("--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["state"] == OK and out["summary"].startswith("FABRIC OK - pool tank ONLINE; all 13 checks OK | ")
    assert [c["name"] for c in out["checks"]] == ["pool_state", "device_errors", "data_errors", "scrub", "capacity",
                                                  "chap", "discovery", "lio_saved", "reservations", "sessions",
                                                  "foreign_acls", "rotation", "holds"]
    assert all(c["state"] == OK and c["code"] == 0 for c in out["checks"])
    assert {"pool", "published", "sessions", "access", "warnings"} <= set(out)
    assert out["pool"]["name"] == "tank" and out["warnings"] == []
    assert out["published"] == [{"ref": "imagenet@v1", "target": V1, "published_to": ["gpu1", "gpu2"],
                                 "holds": ["fabric:published"]}]
    assert out["sessions"] == {"gpu1": [V1], "gpu2": [V1]}


def test_a_pulled_disk_is_exit_2_and_the_first_line_names_it(node, capsys):
    node.answers["status"] = (0, derive_json("zfs23b/tank_status.json", edit=_pull_hdd1003), "")  # derived
    assert node() == 2
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"FABRIC CRITICAL - pool tank DEGRADED: {HDD.format(3)} UNAVAIL | devices_with_errors=")
    assert f"CRITICAL pool_state    pool tank DEGRADED: {HDD.format(3)} UNAVAIL" in lines
    assert any(line.startswith("OK       capacity      pool tank 0% full") for line in lines)
    assert "sessions of gpu1: 1 (ds.imagenet.v1)" in lines


def test_checksum_errors_are_exit_1(node, capsys):
    node.answers["status"] = (0, derive_json("zfs23b/tank_status.json", edit=lambda d: (
        _scrubbed_tank(d), _tank_leaf(d, 2).update(checksum_errors=509))), "")  # derived: 509 errors on HDD1002
    assert node("--json") == 1
    out = json.loads(capsys.readouterr().out)
    assert out["state"] == WARNING
    assert out["summary"].startswith(f"FABRIC WARNING - checksum errors on {HDD.format(2)}: 509 cksum | ")


def test_a_host_not_logged_in_and_open_discovery_are_warnings(node, capsys):
    node.state["live"] = live(sessions=((V1, GPU2),), closed=False)
    assert node("--json") == 1
    out = json.loads(capsys.readouterr().out)
    bad = {c["name"]: c["summary"] for c in out["checks"] if c["state"] != OK}
    assert bad == {"discovery": health.OPEN_DISCOVERY,
                   "sessions": "1 host not logged in to targets published to them: gpu1 (ds.imagenet.v1)"}
    assert out["warnings"] == [health.OPEN_DISCOVERY] and out["access"]["discovery"] == "open"


def test_a_host_granted_a_version_and_not_attached_is_no_warning(node, capsys):
    """A grant (`fabricctl grant`, no tag on the ACL) lets a host attach when a job asks: not logged in is its
    normal state. A publish's ACL (tagged) without a session stays a warning beside it."""
    node.state["live"] = live(sessions=((V1, GPU2),), acls=(GPU2,), granted=(GPU1,))
    assert node("--json") == 0
    out = json.loads(capsys.readouterr().out)
    sessions = next(c for c in out["checks"] if c["name"] == "sessions")
    assert sessions["state"] == OK
    assert sessions["summary"] == ("every host a version is published to is logged in (1 ACLs; 1 granted, attached "
                                   "when a job asks)")
    node.state["live"] = live(sessions=(), acls=(GPU2,), granted=(GPU1,))
    assert node("--json") == 1
    bad = {c["name"]: c["summary"] for c in json.loads(capsys.readouterr().out)["checks"] if c["state"] != OK}
    assert bad == {"sessions": "1 host not logged in to targets published to them: gpu2 (ds.imagenet.v1)"}


def test_a_pool_that_cannot_be_read_is_exit_3_and_the_other_checks_still_run(node, capsys):
    node.answers["status"] = (1, "", "internal error: out of memory\n")
    assert node("--json") == 3
    out = json.loads(capsys.readouterr().out)
    assert out["state"] == UNKNOWN and out["pool"] is None
    first = out["checks"][0]
    assert first["name"] == "pool_state" and first["state"] == UNKNOWN and first["code"] == 3
    assert first["summary"].startswith("cannot read pool tank: `zpool status -j --json-int -P tank` failed with exit 1")
    assert [c["name"] for c in out["checks"][1:]] == ["chap", "discovery", "lio_saved", "reservations", "sessions",
                                                      "foreign_acls", "rotation", "holds"]


def test_a_pool_that_is_not_imported_is_exit_2(node, capsys):
    # derived: the recorded answer of `zpool list` for a pool that does not exist, for tank
    node.answers["list"] = (1, "", data("zfs23b", "list_missing.stderr").replace("z23_nonexistent", "tank"))
    assert node() == 2
    assert capsys.readouterr().out.startswith("FABRIC CRITICAL - pool tank is not imported on this node")


def test_lio_that_cannot_be_read_is_unknown_beside_the_pool_checks(node, capsys):
    def unreadable():
        raise UserError("/sys/kernel/config/target does not exist: configfs is not mounted", "mount configfs")

    node.state["live"] = unreadable
    assert node("--json") == 3
    out = json.loads(capsys.readouterr().out)
    assert states_of(out) == {"pool_state": OK, "device_errors": OK, "data_errors": OK, "scrub": OK, "capacity": OK,
                              "chap": OK, "exports": UNKNOWN, "rotation": OK, "holds": OK}
    assert out["published"] == [] and out["access"] is None


def test_a_replication_hold_of_a_process_that_is_gone_is_named_with_its_release_command(node, capsys, monkeypatch):
    """Issue 26, item 7: a SIGKILLed replicate's fabric:sending hold (its pid gone) is a WARNING naming the
    snapshot and the `zfs release` that frees it; a live holder's hold is not."""
    dead = holders.tag("fabric:sending", holders.Holder(holders.boot_id(), 99999999, 1))
    live = holders.tag("fabric:sending")
    monkeypatch.setattr(lzc, "holds", lambda name: ["fabric:published", dead, live])
    assert node("--json") == 1
    out = json.loads(capsys.readouterr().out)
    check = next(c for c in out["checks"] if c["name"] == "holds")
    assert check["state"] == WARNING and f"`zfs release {dead} tank/datasets/imagenet@v1`" in check["summary"]
    assert "pid 99999999 gone" in check["summary"] and live not in check["summary"]
    assert [h["tag"] for h in check["details"]["leftovers"]] == [dead]


def test_leftover_holds_without_any_is_ok():
    assert health.leftover_holds([]).state == OK


def test_a_configuration_that_does_not_load_is_exit_3(node, capsys):
    node.path.write_text(CONFIG + "health: {scrub_warn_days: 0}\n")
    assert node() == 3
    captured = capsys.readouterr()
    assert captured.out.startswith("FABRIC UNKNOWN - ") and "health.scrub_warn_days: 0 is out of range" in captured.out
    assert "fabricctl: error: " in captured.err


def test_the_thresholds_of_the_configuration_are_used(node, capsys):
    node.path.write_text(CONFIG + "health: {scrub_warn_days: 1, scrub_critical_days: 30}\n")
    assert node() == 1  # the scrub ended a day ago (the fixture's clock)
    out = capsys.readouterr().out
    assert out.startswith("FABRIC WARNING - last scrub of pool tank ended 24 h ago")
    assert "warning at 1 days, critical at 30" in out.splitlines()[0]


def states_of(out: dict) -> dict:
    return {c["name"]: c["state"] for c in out["checks"]}


def test_a_pool_never_scrubbed_whose_creation_cannot_be_read_is_a_warning(node, capsys):
    node.answers["status"] = (0, data("zfs23b", "tank_status.json"), "")  # as recorded: never scrubbed
    node.answers["creation"] = (1, "", "cannot open 'tank': dataset does not exist\n")
    assert node() == 1
    assert capsys.readouterr().out.startswith("FABRIC WARNING - pool tank has never been scrubbed (`zpool scrub tank`)")
    node.answers["creation"] = (0, "not JSON", "")
    assert node() == 1


def test_paths_down_warn_no_path_is_critical_and_an_unasked_host_unknown():
    both = {"multipath": "3600140", "up": 2, "paths": 2}
    one = {"multipath": "3600140", "up": 1, "paths": 2}
    none = {"multipath": None, "up": 0, "paths": 0}
    ok = health.paths({"gpu1": {"a@v1": both}}, {})
    assert ok.state == health.OK and "every path up" in ok.summary
    short = health.paths({"gpu1": {"a@v1": one}, "gpu2": {"a@v1": both}}, {})
    assert short.state == health.WARNING and "gpu1 a@v1 (1/2 up)" in short.summary
    assert short.perf == ("paths_down=1;1;;0",)
    gone = health.paths({"gpu1": {"a@v1": one}, "gpu2": {"a@v1": none}}, {"gpu3": "unreachable"})
    assert gone.state == health.CRITICAL and "gpu2 a@v1" in gone.summary
    assert health.paths({"gpu1": {"a@v1": both}}, {"gpu2": "timed out"}).state == health.UNKNOWN


def _dump(*targets):
    """An rtslib dump with targets (IQN, [(LUN index, backstore)], [ACL initiators])."""
    return {"storage_objects": [], "targets": [
        {"wwn": wwn, "fabric": "iscsi", "tpgs": [{"tag": 1, "luns": [
            {"index": i, "storage_object": f"/backstores/block/{b}"} for i, b in luns],
            "node_acls": [{"node_wwn": a, "chap_password": "never-in-a-summary"} for a in acls]}]}
        for wwn, luns, acls in targets]}


T1 = ("iqn.2026-11.io.fabric.lab.fabricctl:ds.a.v1", [(0, "fctl_a.v1")], ["iqn.2026-11.io.fabric.lab:gpu1"])
T2 = ("iqn.2026-11.io.fabric.lab.fabricctl:ds.a.v2", [(0, "fctl_a.v2")], ["iqn.2026-11.io.fabric.lab:gpu2"])


def test_lio_saved_is_ok_when_the_saved_configuration_is_lio_as_it_runs():
    check = health.lio_saved(_dump(T1, T2), _dump(T2, T1), "/etc/rtslib-fb-target/saveconfig.json")
    assert check.state == health.OK and "2 targets, 2 LUNs, 2 ACLs" in check.summary
    assert health.lio_saved(_dump(), None, "/x").state == health.OK  # nothing exported, nothing saved


def test_lio_saved_names_what_a_reboot_would_lose_or_bring_back_and_never_a_secret():
    acl_gone = (T1[0], T1[1], [])
    check = health.lio_saved(_dump(T1), _dump(acl_gone, T2), "/etc/rtslib-fb-target/saveconfig.json")
    assert check.state == health.WARNING
    assert "a reboot would lose ds.a.v1 ACL iqn.2026-11.io.fabric.lab:gpu1" in check.summary
    assert "bring back" in check.summary and "target ds.a.v2" in check.summary
    assert "never-in-a-summary" not in repr(check)
    missing = health.lio_saved(_dump(T1), None, "/etc/rtslib-fb-target/saveconfig.json")
    assert missing.state == health.WARNING and "does not exist" in missing.summary


def test_rotation_warns_after_two_missed_days_and_is_ok_before_its_first_run():
    now = 1_800_000_000.0
    assert health.rotation(None, now, "no /var/lib/x.prom").state == health.OK
    fresh = health.rotation(now - 20 * 3600, now, "/x.prom")
    assert fresh.state == health.OK and "20 h ago" in fresh.summary
    stale = health.rotation(now - 3 * 86400, now, "/x.prom")
    assert stale.state == health.WARNING and "3 days ago" in stale.summary and "fabricctl-rotate" in stale.summary


def test_writers_frozen_by_fabricctl_warn_an_overdue_thaw_is_critical_stray_waiters_warn():
    jobs = {"llama": "/checkpoints/llama"}
    clear = {"gpu1": {"jobs": jobs, "frozen": {}, "blocked": []}}
    ok = health.writers(clear, {})
    assert ok.state == health.OK and "no checkpoint volume frozen (1 on 1 writer)" in ok.summary
    frozen = {"/checkpoints/llama": {"frozen_for": 3.4, "thaw_in": 26.6}}
    held = health.writers({"gpu1": {"jobs": jobs, "frozen": frozen, "blocked": [{"pid": 946, "comm": "dd"}]}}, {})
    assert held.state == health.WARNING and "llama on gpu1 (/checkpoints/llama, frozen 3.4 s" in held.summary
    assert "thaws it in 26.6 s" in held.summary and held.perf == ("writers_frozen=1;1;;0",)
    late = health.writers({"gpu1": {"jobs": jobs, "frozen": {"/checkpoints/llama": {"frozen_for": 95.0,
                                                                                   "thaw_in": -65.0}}, "blocked": []}},
                          {"gpu2": "unreachable"})
    assert late.state == health.CRITICAL and "65 s overdue" in late.summary and "fsfreeze -u" in late.summary
    stray = health.writers({"gpu1": {"jobs": jobs, "frozen": {}, "blocked": [{"pid": 7, "comm": "python3"}]}}, {})
    assert stray.state == health.WARNING and "gpu1: 1 task (7 python3)" in stray.summary
    assert health.writers(clear, {"gpu2": "timed out"}).state == health.UNKNOWN
    assert health.writers({}, {}).state == health.OK


# ---- SCSI reservations (recorded on the lab: tests/unit/data/lio/reservations/README.md) -----------------------

RESERVATIONS = json.loads(data("lio", "reservations/states.json"))["states"]
# read-only with emulate_pr 0, read-only with 1 (exported before the change), writable
PR_RO0, PR_RO1, PR_RW = "prrec_ro0", "prrec_ro1", "prrec_rw"


def recorded_reservations(state: str, readonly: bool = True) -> dict:
    """configfs' reservation files of one recorded backstore: the read-only one made with emulate_pr 0 (or the
    writable one) in a recorded state."""
    return RESERVATIONS[state]["reservations"][PR_RO0 if readonly else PR_RW]


def reservations(state: str, only: tuple = (PR_RO0, PR_RO1, PR_RW)):
    rec = copy.deepcopy(RESERVATIONS[state])
    return health.reservations({k: v for k, v in rec["reservations"].items() if k in only}, rec["dump"])


def test_a_read_only_export_refusing_reservations_and_an_idle_writer_are_ok():
    check = reservations("idle", only=(PR_RO0, PR_RW))
    assert check.state == OK and check.summary == ("no SCSI reservation on 2 exported LUNs; read-only exports "
                                                   "refuse them")
    assert check.details[PR_RO0]["emulate_pr"] == 0 and check.details[PR_RW]["emulate_pr"] == 1
    assert check.perf == ("reservations_held=0;;;0",)


def test_a_read_only_export_that_allows_reservations_is_a_warning_naming_the_fix():
    check = reservations("idle")
    assert check.state == WARNING and "(emulate_pr 1)" in check.summary and PR_RO1 in check.summary
    assert PR_RO0 not in check.summary and "unpublish and publish again" in check.summary


def test_a_readers_spc2_reservation_is_critical_and_names_the_holder():
    # gpu1 sent RESERVE(6) to every LUN: refused on ro0, held on ro1 (a reader's) and on rw (the writer's)
    check = reservations("reserve6_sent_to_all")
    assert check.state == CRITICAL
    assert check.summary.startswith(f"SCSI reservations stop the other hosts' I/O: {PR_RO1} reserved by {GPU1} (SPC-2)")
    assert PR_RO0 not in check.summary and check.details[PR_RO0]["holder"] is None
    assert check.details[PR_RW]["holder"]["initiator"] == GPU1 and check.perf == ("reservations_held=2;;;0",)


def test_the_writers_own_reservation_is_ok_and_named_another_hosts_is_critical():
    own = reservations("reserve6_sent_to_all", only=(PR_RO0, PR_RW))
    assert own.state == OK and own.summary.startswith(f"{PR_RW} reserved by {GPU1} (SPC-2), its writer; ")
    spc3 = reservations("spc3_held", only=(PR_RO0, PR_RW))
    assert spc3.state == OK
    assert f"{PR_RW} reserved by {GPU1} (SPC-3, Write Exclusive Access), its writer" in spc3.summary
    assert f"{PR_RW} has 1 SPC-3 registration ({GPU1}), its writer's" in spc3.summary
    # derived: the same readings, the volume now mapped to another host (its holder is no longer its writer)
    rec = copy.deepcopy(RESERVATIONS["spc3_held"])
    for t in rec["dump"]["targets"]:
        for tpg in t["tpgs"]:
            for acl in tpg["node_acls"]:
                acl["node_wwn"] = GPU2
    other = health.reservations({PR_RW: rec["reservations"][PR_RW]}, rec["dump"])
    assert other.state == CRITICAL and f"{PR_RW} reserved by {GPU1} (SPC-3" in other.summary


def test_released_reservations_leave_nothing_named():
    check = reservations("released", only=(PR_RO0, PR_RW))
    assert check.state == OK and not any(d["holder"] or d["registrations"] for d in check.details.values())


def test_status_names_a_reservation_on_a_version(node, capsys):
    node.state["reservations"] = {"fctl_ds.imagenet.v1": RESERVATIONS["reserve6_sent_to_all"]["reservations"][PR_RO1]}
    assert node("--json") == 2
    out = json.loads(capsys.readouterr().out)
    assert out["summary"].startswith(f"FABRIC CRITICAL - SCSI reservations stop the other hosts' I/O: "
                                     f"fctl_ds.imagenet.v1 reserved by {GPU1} (SPC-2)")
